"""Cancellation: a blocked call tree cancelled from the admin API and from a handler's context.

Ported from restatedev/e2e `sdk-tests` (v2.2) `Cancellation`. `CancelTestRunner/startTest(op)` calls
`CancelTestBlockingService/block(op)` on the same key, which parks on an awakeable handed to
`AwakeableHolder`, then blocks for good on `op`: a CALL to itself (a deadlock on its own key), a
SLEEP of 1024 days, or an AWAKEABLE nobody resolves. Cancelling the runner must reach the blocked
callee; the runner sees the callee fail with 409, records it (`verifyTest` → true) and ends, and the
blocking service's key is unlocked again.
"""

from __future__ import annotations

import json
from typing import Any
from uuid import uuid4

import httpx
import pytest

from tests.conformance.harness import poll_until

BLOCKING_OPERATIONS = ["CALL", "SLEEP", "AWAKEABLE"]

# A call to an exclusive handler waits while the key is held: each probe gets this long (s) before
# the poll tries again.
PROBE_TIMEOUT_S = 5.0
# How long (s) the cancellation may take to tear the tree down on a loaded machine.
TEARDOWN_TIMEOUT_S = 30.0


def _probe(env: Any, service: str, key: str, handler: str) -> httpx.Response:
    """`POST /{service}/{key}/{handler}` with no input and a short timeout; a timeout is an AssertionError."""
    try:
        return env.ingress.post(f"/{service}/{key}/{handler}", timeout=PROBE_TIMEOUT_S)
    except httpx.TimeoutException as exc:
        raise AssertionError(f"{service}/{key}/{handler} still waiting for the key's lock") from exc


def _park_and_release(env: Any, key: str) -> None:
    """Wait until `block` has handed its awakeable to AwakeableHolder, then resolve it: `block` goes on to its op."""

    def has_awakeable() -> bool:
        reply = env.call("AwakeableHolder", "hasAwakeable", key=key)
        assert reply.status_code == 200, reply.text
        assert reply.json() is True
        return True

    poll_until(has_awakeable, timeout_s=TEARDOWN_TIMEOUT_S)
    unlocked = env.call("AwakeableHolder", "unlock", "cancel", key=key, idempotency_key=uuid4().hex)
    assert unlocked.status_code == 200, unlocked.text


def _assert_torn_down(env: Any, key: str, cancel: Any) -> None:
    """Cancel until the runner has ended seeing a 409 (`verifyTest` → true), then the blocking key is free.

    The cancel is repeated, as upstream does: it may reach the callee before its blocking operation began.
    """

    def runner_saw_cancel() -> bool:
        cancel()
        reply = _probe(env, "CancelTestRunner", key, "verifyTest")
        assert reply.status_code == 200, reply.text
        assert reply.json() is True
        return True

    poll_until(runner_saw_cancel, timeout_s=TEARDOWN_TIMEOUT_S, interval_s=0.2)

    def blocking_service_unlocked() -> bool:
        reply = _probe(env, "CancelTestBlockingService", key, "isUnlocked")
        assert reply.status_code == 200, reply.text
        return True

    poll_until(blocking_service_unlocked, timeout_s=TEARDOWN_TIMEOUT_S)


@pytest.mark.parametrize("operation", BLOCKING_OPERATIONS)
def test_cancel_from_admin_api(env: Any, operation: str) -> None:
    key = uuid4().hex
    sent = env.send("CancelTestRunner", "startTest", operation, key=key, idempotency_key=uuid4().hex)
    assert sent.status_code == 202, sent.text
    invocation_id = sent.json()["invocationId"]

    _park_and_release(env, key)

    def cancel() -> None:
        reply = env.admin.patch(f"/invocations/{invocation_id}/cancel")
        # 404 / 409: already completed (the runner ended between two rounds).
        assert reply.status_code in (200, 202, 404, 409), reply.text

    _assert_torn_down(env, key, cancel)


@pytest.mark.parametrize("operation", BLOCKING_OPERATIONS)
def test_cancel_from_context(env: Any, operation: str) -> None:
    key = uuid4().hex
    started = env.call(
        "Proxy",
        "oneWayCall",
        {
            "serviceName": "CancelTestRunner",
            "virtualObjectKey": key,
            "handlerName": "startTest",
            "message": list(json.dumps(operation).encode()),
        },
        idempotency_key=uuid4().hex,
    )
    assert started.status_code == 200, started.text
    invocation_id = started.json()
    assert isinstance(invocation_id, str), started.text
    assert invocation_id.startswith("inv_"), started.text

    _park_and_release(env, key)

    def cancel() -> None:
        reply = env.call("TestUtilsService", "cancelInvocation", invocation_id, idempotency_key=uuid4().hex)
        assert reply.status_code == 200, reply.text

    _assert_torn_down(env, key, cancel)
