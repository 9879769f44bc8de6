"""Retry policy for failed attempts: exponential backoff, then pause (or fail).

What counts as a failed attempt is decided by the protocol, nowhere else: an `ErrorMessage`, a non-200
answer, a stream without End/Suspension/Error, a broken or timed-out exchange. An `Output` carrying a
failure followed by `End` is a terminal failure and is never retried (Restate service protocol,
"Failures"). Defaults follow Restate's: 50 ms initial interval, factor 2, at most 60 s between
attempts, 70 attempts, then pause.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

OnMaxAttempts = Literal["pause", "kill"]

MAX_RETRY_DELAY_MS = 365 * 24 * 3600 * 1000
"""No retry waits longer than a year, whatever the policy or the handler's `next_retry_delay` says."""


@dataclass(frozen=True, slots=True)
class RetryPolicy:
    """Exponential backoff. Durations in ms; `max_attempts` counts attempts in all (first included)."""

    initial_interval_ms: int = 50
    exponentiation_factor: float = 2.0
    max_interval_ms: int = 60_000
    max_attempts: int = 70
    on_max_attempts: OnMaxAttempts = "pause"

    def delay_ms(self, failed_attempts: int, next_retry_delay_ms: int | None = None) -> int:
        """Delay before the next attempt, after `failed_attempts` (>= 1) failures in a row.

        `next_retry_delay_ms` (ErrorMessage.next_retry_delay, service protocol V2+) overrides the
        policy for this one retry.
        """
        if next_retry_delay_ms is not None:
            return max(0, min(next_retry_delay_ms, MAX_RETRY_DELAY_MS))
        delay = float(self.initial_interval_ms)
        for _ in range(max(0, failed_attempts - 1)):  # stops growing at the cap: no overflow, however many
            if delay >= self.max_interval_ms:
                break
            delay *= self.exponentiation_factor
        return int(min(delay, self.max_interval_ms, MAX_RETRY_DELAY_MS))

    def exhausted(self, attempts: int) -> bool:
        """True once `attempts` attempts have been made and none may follow."""
        return self.max_attempts > 0 and attempts >= self.max_attempts
