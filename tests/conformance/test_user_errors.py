"""UserErrors: terminal errors reach the ingress caller with their message and metadata.

Ported from restatedev/e2e `sdk-tests` (v2.2) `UserErrors` (10 cases). A `TerminalError` raised by
a handler, by a handler it calls, or inside `ctx.run`, ends the invocation: the ingress answers the
error's code (500 by default) with `{"code"?, "message", "metadata"?}`. State set before the failure
is kept; a retryable failure is retried until the handler succeeds.
"""

from __future__ import annotations

from typing import Any
from uuid import uuid4

TEST_METADATA = {"key1": "value1", "key2": "value2"}

# TerminalError's default code (SDKs: status_code=500).
TERMINAL_ERROR_CODE = 500

# `failingCallWithEventualSuccess` succeeds on this attempt.
SUCCESS_ATTEMPT = 4


def _expect_error(env: Any, handler: str, message: str, metadata: dict[str, str] | None = None) -> dict[str, Any]:
    """Call `Failing/{random key}/{handler}` with a failure to propagate; the error body, after checking it."""
    failure: dict[str, Any] = {"errorMessage": message}
    if metadata is not None:
        failure["metadata"] = metadata
    reply = env.call("Failing", handler, failure, key=uuid4().hex, idempotency_key=uuid4().hex)
    assert reply.status_code == TERMINAL_ERROR_CODE, reply.text
    body: dict[str, Any] = reply.json()
    assert message in body["message"], body
    if metadata is not None:
        assert body.get("metadata", {}).items() >= metadata.items(), body
    return body


def test_invoke_terminally_failing_call(env: Any) -> None:
    _expect_error(env, "terminallyFailingCall", "my error")


def test_fail_several_times(env: Any) -> None:
    # The endpoint stays well after a first failure.
    for _ in range(3):
        _expect_error(env, "terminallyFailingCall", "my error")


def test_internal_call_failure_propagation(env: Any) -> None:
    _expect_error(env, "callTerminallyFailingCall", "propagated error")


def test_side_effect_with_terminal_error(env: Any) -> None:
    _expect_error(env, "terminallyFailingSideEffect", "failed side effect")


def test_invoke_terminally_failing_call_with_metadata(env: Any) -> None:
    _expect_error(env, "terminallyFailingCall", "my error with metadata", TEST_METADATA)


def test_fail_several_times_with_metadata(env: Any) -> None:
    for _ in range(3):
        _expect_error(env, "terminallyFailingCall", "my error with metadata", TEST_METADATA)


def test_internal_call_failure_propagation_with_metadata(env: Any) -> None:
    _expect_error(env, "callTerminallyFailingCall", "propagated error with metadata", TEST_METADATA)


def test_side_effect_with_terminal_error_with_metadata(env: Any) -> None:
    _expect_error(env, "terminallyFailingSideEffect", "failed side effect with metadata", TEST_METADATA)


def test_set_state_then_fail_persists_state(env: Any) -> None:
    key = f"my-failure-counter-{uuid4().hex}"
    failed = env.call("Counter", "addThenFail", 1, key=key, idempotency_key=uuid4().hex)
    assert failed.status_code == TERMINAL_ERROR_CODE, failed.text
    assert key in failed.json()["message"], failed.text

    counter = env.call("Counter", "get", key=key, idempotency_key=uuid4().hex)
    assert counter.status_code == 200, counter.text
    assert counter.json() == 1


def test_invocation_with_eventual_success(env: Any) -> None:
    reply = env.call("Failing", "failingCallWithEventualSuccess", key=uuid4().hex, idempotency_key=uuid4().hex)
    assert reply.status_code == 200, reply.text
    assert reply.json() == SUCCESS_ATTEMPT
