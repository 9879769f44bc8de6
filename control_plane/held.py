"""What the engine's parts share: the outcome of an `advance`, an invocation held under lease, the
knocks (news for a lease holder in this process) and the fields of a log line."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from enum import StrEnum

from control_plane.journal import AwaitPoint, Journal
from control_plane.observability import AttemptSpan
from control_plane.ports import InvocationRecord, LoadedInvocation, StoredNotification


class Outcome(StrEnum):
    """What one `advance` call achieved. Expected outcomes are values, not exceptions."""

    COMPLETED = "completed"
    SUSPENDED = "suspended"
    BACKING_OFF = "backing-off"
    PAUSED = "paused"
    BUSY = "busy"  # another worker holds the lease, or the invocation is not runnable
    LEASE_LOST = "lease-lost"  # our epoch moved on while we worked; the new holder continues
    NOT_DUE = "not-due"  # woken before its start or retry time; re-armed
    HANDED_OFF = "handed-off"  # the caller's deadline passed between attempts; the scheduler goes on


@dataclass(slots=True)
class Held:
    """An invocation this worker holds the lease on: record, journal, stored notifications, await point."""

    record: InvocationRecord
    journal: Journal
    stored: list[StoredNotification]
    awaiting: AwaitPoint | None = None
    state: dict[bytes, bytes] | None = None  # a keyed invocation's state, loaded once per advance
    meter: Counter[str] = field(default_factory=Counter)  # AWS requests not yet folded into the record
    attempt_span: str = ""  # the span id of the last attempt, when traced: its callees' parent
    span: AttemptSpan | None = None  # the open span of the attempt under way (`attempts.end_span`)
    applied_upto: int | None = None
    """Journal length through which committed entries' effects are known applied (`Effects.apply`
    moves it on only when every effect succeeded); None: as the record says (`effects_applied_upto`).
    The record is never written with more (`Executor.update`), so an effect that failed after its
    commit is applied again by the next attempt before anything else."""

    timers: set[int] = field(default_factory=set)
    """Due times (ms) of the timers this worker recorded for the invocation: deleted again if it
    completes under the worker (a kill), which removed only the timers it knew of (`Engine._run_guarded`)."""

    def effects_known_upto(self) -> int:
        """Journal length through which committed entries' effects are known applied."""
        return self.record.effects_applied_upto if self.applied_upto is None else self.applied_upto

    @classmethod
    def of(cls, loaded: LoadedInvocation) -> Held:
        record = loaded.record
        awaiting = AwaitPoint.from_json(record.waiting_on) if record.waiting_on else None
        return cls(record, Journal.load(record.input_entry, loaded.batches), list(loaded.notifications), awaiting)


def log_fields(record: InvocationRecord, **more: object) -> dict[str, object]:
    """The structured fields of a log line about `record` (JSON keys on Lambda and with --log-format json)."""
    return {
        "invocation_id": record.invocation_id,
        "service": record.service,
        "handler": record.handler,
        "attempt": record.attempts,
        **more,
    }


class Knocks:
    """Invocations with news for a lease holder in this process (`Engine.knock`): at most 10,000
    are kept (a dropped one only delays the news to the holder's next suspension). Thread-safe
    enough for its use: a set read and changed under the GIL."""

    def __init__(self) -> None:
        self._knocked: set[str] = set()

    def add(self, invocation_id: str) -> None:
        """Note news for `invocation_id`."""
        if len(self._knocked) >= 10_000:
            self._knocked.clear()
        self._knocked.add(invocation_id)

    def take(self, invocation_id: str) -> bool:
        """True (once) if news was noted for `invocation_id` since it was last taken."""
        if not (self._knocked and invocation_id in self._knocked):
            return False
        self._knocked.discard(invocation_id)
        return True
