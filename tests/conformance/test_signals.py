"""Signals (upstream `sdk-tests` Signals): a named signal resolved by another invocation delivers its
value; rejected, the awaiting invocation fails with the reason."""

from __future__ import annotations

from tests.conformance.harness import Env, idem


def start_waiting(env: Env, signal: str) -> str:
    """Send `interpretCommands [awaitOne createSignal]`; its invocation id."""
    commands = [{"type": "awaitOne", "command": {"type": "createSignal", "signalName": signal}}]
    reply = env.send("VirtualObjectCommandInterpreter", "interpretCommands", {"commands": commands}, key=idem(),
                     idempotency_key=idem())  # fmt: skip
    assert reply.status_code == 202, reply.text
    return str(reply.json()["invocationId"])


def test_resolve(env: Env) -> None:
    invocation_id = start_waiting(env, "mysignal")
    body = {"invocationId": invocation_id, "signalName": "mysignal", "value": "hello"}
    reply = env.call("TestUtilsService", "resolveSignal", body, idempotency_key=idem())
    assert reply.status_code == 200, reply.text

    attached = env.attach(invocation_id)
    assert attached.status_code == 200, attached.text
    assert attached.json() == "hello"


def test_reject(env: Env) -> None:
    invocation_id = start_waiting(env, "mysignal")
    body = {"invocationId": invocation_id, "signalName": "mysignal", "reason": "boom"}
    reply = env.call("TestUtilsService", "rejectSignal", body, idempotency_key=idem())
    assert reply.status_code == 200, reply.text

    attached = env.attach(invocation_id)
    assert attached.status_code == 500, attached.text
    assert "boom" in attached.json()["message"]
