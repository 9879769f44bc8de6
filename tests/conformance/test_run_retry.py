"""RunRetry: `ctx.run` retries a failing step by its own retry policy.

Ported from restatedev/e2e `sdk-tests` (v2.2) `RunRetry` (3 cases), over `Failing`:
`sideEffectSucceedsAfterGivenAttempts(n)` runs a step that fails until its n-th execution (counted in
the service process) and returns that count; `sideEffectFailsAfterGivenAttempts(n)` runs a step that
always fails, with `max_attempts = n`: after n executions the handler gets a `TerminalError`, catches
it and returns the process's execution count. Both answer at least n; beyond upstream, two calls in
a row show how many times the always-failing step ran (the count is per service process, and tests
run one at a time).
"""

from __future__ import annotations

from typing import Any
from uuid import uuid4

import httpx

# A step retried without end keeps the call waiting: give up on the answer after this long (s).
CALL_TIMEOUT_S = 30.0


def _call_failing(env: Any, handler: str, attempts: int) -> int:
    """`Failing/{random key}/{handler}(attempts)` with an idempotency key; the integer it answers."""
    try:
        reply = env.ingress.post(
            f"/Failing/{uuid4().hex}/{handler}",
            json=attempts,
            headers={"idempotency-key": uuid4().hex},
            timeout=CALL_TIMEOUT_S,
        )
    except httpx.TimeoutException as exc:
        raise AssertionError(f"{handler}({attempts}) did not answer within {CALL_TIMEOUT_S} s") from exc
    assert reply.status_code == 200, reply.text
    answer = reply.json()
    assert isinstance(answer, int), reply.text
    return answer


def test_run_retried_until_it_succeeds(env: Any) -> None:
    assert _call_failing(env, "sideEffectSucceedsAfterGivenAttempts", 3) >= 3


def test_run_executed_only_once(env: Any) -> None:
    before = _call_failing(env, "sideEffectFailsAfterGivenAttempts", 1)
    assert before >= 1
    # Beyond upstream: the process's execution count grew by exactly one for a second call.
    assert _call_failing(env, "sideEffectFailsAfterGivenAttempts", 1) - before == 1


def test_run_retried_until_it_exhausts_the_attempts(env: Any) -> None:
    before = _call_failing(env, "sideEffectFailsAfterGivenAttempts", 1)
    after = _call_failing(env, "sideEffectFailsAfterGivenAttempts", 3)
    assert after >= 3
    # Beyond upstream: the step ran exactly max_attempts times before the handler got the TerminalError.
    assert after - before == 3
