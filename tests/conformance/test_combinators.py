"""Combinators (upstream `sdk-tests` Combinators): any / all / race over awakeables, sleeps, runs and
signals, through VirtualObjectCommandInterpreter."""

from __future__ import annotations

import threading
from typing import Any

import httpx

from tests.conformance.harness import Env, idem, poll_until

INTERPRETER = "VirtualObjectCommandInterpreter"


def awakeable(key: str) -> dict[str, str]:
    return {"type": "createAwakeable", "awakeableKey": key}


def signal(name: str) -> dict[str, str]:
    return {"type": "createSignal", "signalName": name}


def run_fails(reason: str) -> dict[str, str]:
    return {"type": "runThrowTerminalException", "reason": reason}


def run_returns(value: str) -> dict[str, str]:
    return {"type": "runReturns", "value": value}


def combine(kind: str, *commands: dict[str, Any]) -> dict[str, Any]:
    return {"type": kind, "commands": list(commands)}


def interpret(env: Env, key: str, *commands: dict[str, Any]) -> httpx.Response:
    return env.call(INTERPRETER, "interpretCommands", {"commands": list(commands)}, key=key, idempotency_key=idem())


def send_interpret(env: Env, key: str, *commands: dict[str, Any]) -> str:
    reply = env.send(INTERPRETER, "interpretCommands", {"commands": list(commands)}, key=key, idempotency_key=idem())
    assert reply.status_code == 202, reply.text
    return str(reply.json()["invocationId"])


def resolve_signal(env: Env, invocation_id: str, name: str, value: str) -> None:
    body = {"invocationId": invocation_id, "signalName": name, "value": value}
    reply = env.call("TestUtilsService", "resolveSignal", body, idempotency_key=idem())
    assert reply.status_code == 200, reply.text


def reject_signal(env: Env, invocation_id: str, name: str, reason: str) -> None:
    body = {"invocationId": invocation_id, "signalName": name, "reason": reason}
    reply = env.call("TestUtilsService", "rejectSignal", body, idempotency_key=idem())
    assert reply.status_code == 200, reply.text


def attached_value(env: Env, invocation_id: str) -> Any:
    reply = env.attach(invocation_id)
    assert reply.status_code == 200, reply.text
    return reply.json()


def test_awakeable_or_timeout_using_await_any(env: Env) -> None:
    reply = interpret(env, idem(), combine("awaitAny", awakeable("awk1"), {"type": "sleep", "timeoutMillis": 100}))
    assert reply.status_code == 200, reply.text
    assert reply.json() == "sleep"


def test_awakeable_or_timeout_using_awakeable_timeout_command(env: Env) -> None:
    reply = interpret(env, idem(), {"type": "awaitAwakeableOrTimeout", "awakeableKey": "should-timeout-awk",
                                    "timeoutMillis": 100})  # fmt: skip
    assert reply.status_code == 500, reply.text
    assert "await-timeout" in reply.json()["message"]


def test_first_successful_completed_awakeable(env: Env) -> None:
    key = idem()
    commands = [awakeable("awk0"), run_fails("run0"), awakeable("awk1"), run_fails("run1"), awakeable("awk2"),
                run_fails("run2")]  # fmt: skip
    result: list[httpx.Response] = []
    caller = threading.Thread(
        target=lambda: result.append(interpret(env, key, {"type": "awaitAnySuccessful", "commands": commands}))
    )
    caller.start()
    try:

        def has(awakeable_key: str) -> bool:
            reply = env.call(INTERPRETER, "hasAwakeable", awakeable_key, key=key, idempotency_key=idem())
            assert reply.status_code == 200, reply.text
            return bool(reply.json())

        poll_until(lambda: has("awk2"))
        assert has("awk0")
        assert has("awk1")

        # rejecting awk2 completes nothing; resolving awk1 completes the any
        reply = env.call(INTERPRETER, "rejectAwakeable", {"awakeableKey": "awk2", "reason": "fail"}, key=key,
                         idempotency_key=idem())  # fmt: skip
        assert reply.status_code == 200, reply.text
        reply = env.call(INTERPRETER, "resolveAwakeable", {"awakeableKey": "awk1", "value": "awk1-result"}, key=key,
                         idempotency_key=idem())  # fmt: skip
        assert reply.status_code == 200, reply.text
    finally:
        caller.join(60)
    assert result[0].status_code == 200, result[0].text
    assert result[0].json() == "awk1-result"


def test_signal_first_successful_or_all_failed(env: Env) -> None:
    invocation_id = send_interpret(
        env, idem(), combine("awaitAnySuccessful", signal("sig0"), signal("sig1"), signal("sig2"))
    )
    reject_signal(env, invocation_id, "sig0", "fail0")
    reject_signal(env, invocation_id, "sig2", "fail2")
    resolve_signal(env, invocation_id, "sig1", "success1")
    assert attached_value(env, invocation_id) == "success1"


def test_signal_all_successful_or_first_failed(env: Env) -> None:
    invocation_id = send_interpret(
        env, idem(), combine("awaitAllSucceededOrFirstFailed", signal("sig0"), signal("sig1"), signal("sig2"))
    )
    resolve_signal(env, invocation_id, "sig0", "val0")
    resolve_signal(env, invocation_id, "sig1", "val1")
    resolve_signal(env, invocation_id, "sig2", "val2")
    assert attached_value(env, invocation_id) == "val0|val1|val2"


def test_signal_all_completed(env: Env) -> None:
    invocation_id = send_interpret(
        env, idem(), combine("awaitAllCompleted", signal("sig0"), signal("sig1"), signal("sig2"))
    )
    resolve_signal(env, invocation_id, "sig0", "val0")
    reject_signal(env, invocation_id, "sig1", "err1")
    resolve_signal(env, invocation_id, "sig2", "val2")
    assert attached_value(env, invocation_id) == "ok:val0|err:err1|ok:val2"


def test_signal_first_completed(env: Env) -> None:
    invocation_id = send_interpret(env, idem(), combine("awaitAny", signal("sig0"), signal("sig1"), signal("sig2")))
    resolve_signal(env, invocation_id, "sig1", "first")
    assert attached_value(env, invocation_id) == "first"


def test_mixed_run_wins_race_against_signal(env: Env) -> None:
    reply = interpret(env, idem(), combine("awaitFirstCompleted", signal("sig"), run_returns("runval")))
    assert reply.status_code == 200, reply.text
    assert reply.json() == "runval"


def test_mixed_signal_wins_after_run_fails(env: Env) -> None:
    invocation_id = send_interpret(
        env, idem(), combine("awaitFirstSucceededOrAllFailed", run_fails("fail"), signal("sig"))
    )
    resolve_signal(env, invocation_id, "sig", "sigval")
    assert attached_value(env, invocation_id) == "sigval"


def test_mixed_all_succeeded_run_and_signal(env: Env) -> None:
    invocation_id = send_interpret(
        env, idem(), combine("awaitAllSucceededOrFirstFailed", run_returns("runval"), signal("sig"))
    )
    resolve_signal(env, invocation_id, "sig", "sigval")
    assert attached_value(env, invocation_id) == "runval|sigval"


def test_mixed_all_completed_run_signal_and_failed_run(env: Env) -> None:
    invocation_id = send_interpret(
        env, idem(), combine("awaitAllCompleted", run_returns("runval"), signal("sig"), run_fails("fail"))
    )
    resolve_signal(env, invocation_id, "sig", "sigval")
    assert attached_value(env, invocation_id) == "ok:runval|ok:sigval|err:fail"
