"""KillInvocation: killing the root of a deadlocked call tree tears the whole tree down.

Ported from restatedev/e2e `sdk-tests` (v2.2) `KillInvocation`. `KillTestRunner/startCallTree`
calls `KillTestSingleton/recursiveCall` on the same key, which parks on an awakeable handed to
`AwakeableHolder`, then calls itself on its own key: the inner call waits for a lock its caller holds
forever. Killing the runner must kill the callee and the queued inner call, so the singleton's key
is free again. Beyond upstream: the killed runner's output (readable by its idempotency key) is a
409, and a second kill of the completed invocation is refused with 409.
"""

from __future__ import annotations

from typing import Any
from uuid import uuid4

import httpx

from tests.conformance.harness import poll_until

PROBE_TIMEOUT_S = 5.0
TEARDOWN_TIMEOUT_S = 30.0


def test_kill(env: Any) -> None:
    key = uuid4().hex
    sent = env.send("KillTestRunner", "startCallTree", key=key, idempotency_key=uuid4().hex)
    assert sent.status_code == 202, sent.text
    invocation_id = sent.json()["invocationId"]

    # The call tree is built once the singleton's awakeable is registered.
    def has_awakeable() -> bool:
        reply = env.call("AwakeableHolder", "hasAwakeable", key=key)
        assert reply.status_code == 200, reply.text
        assert reply.json() is True
        return True

    poll_until(has_awakeable, timeout_s=TEARDOWN_TIMEOUT_S)
    unlocked = env.call("AwakeableHolder", "unlock", "cancel", key=key, idempotency_key=uuid4().hex)
    assert unlocked.status_code == 200, unlocked.text

    killed = env.admin.patch(f"/invocations/{invocation_id}/kill")
    assert killed.status_code in (200, 202), killed.text

    def singleton_unlocked() -> bool:
        try:
            reply = env.ingress.post(f"/KillTestSingleton/{key}/isUnlocked", timeout=PROBE_TIMEOUT_S)
        except httpx.TimeoutException as exc:
            raise AssertionError("KillTestSingleton is still locked") from exc
        assert reply.status_code == 200, reply.text
        return True

    poll_until(singleton_unlocked, timeout_s=TEARDOWN_TIMEOUT_S)

    def runner_output_is_killed() -> bool:
        reply = env.ingress.get(f"/restate/invocation/{invocation_id}/output")
        assert reply.status_code == 409, reply.text
        return True

    poll_until(runner_output_is_killed, timeout_s=TEARDOWN_TIMEOUT_S)

    again = env.admin.patch(f"/invocations/{invocation_id}/kill")
    assert again.status_code == 409, again.text
