"""ServiceToServiceCommunication (upstream `sdk-tests` ServiceToServiceCommunication): a call, a one-way
call, both with an idempotency key (the callee's output then readable by that key at
`GET /restate/invocation/{Service}/{key}/{handler}/{idempotencyKey}/output`), and delayed one-way calls."""

from __future__ import annotations

import json
import time

from tests.conformance.harness import Env, idem, json_bytes, poll_until


def counter_is(env: Env, counter: str, expected: int) -> None:
    def check() -> bool:
        reply = env.call("Counter", "get", key=counter)
        assert reply.status_code == 200, reply.text
        assert reply.json() == expected
        return True

    poll_until(check)


def output_by_idempotency_key(env: Env, counter: str, idempotency_key: str) -> object:
    reply = env.ingress.get(f"/restate/invocation/Counter/{counter}/add/{idempotency_key}/output")
    assert reply.status_code == 200, reply.text
    return reply.json()


def test_regular_call(env: Env) -> None:
    request = {"serviceName": "TestUtilsService", "handlerName": "uppercaseEcho", "message": json_bytes("ping")}
    reply = env.call("Proxy", "call", request, idempotency_key=idem())
    assert reply.status_code == 200, reply.text
    assert bytes(reply.json()) == json.dumps("PING").encode()


def test_one_way_call(env: Env) -> None:
    counter = idem()
    request = {"serviceName": "Counter", "virtualObjectKey": counter, "handlerName": "add", "message": json_bytes(1)}
    reply = env.call("Proxy", "oneWayCall", request, idempotency_key=idem())
    assert reply.status_code == 200, reply.text
    counter_is(env, counter, 1)


def test_one_way_call_with_idempotency_key(env: Env) -> None:
    counter, key = idem(), idem()
    request = {"serviceName": "Counter", "virtualObjectKey": counter, "handlerName": "add", "message": json_bytes(1),
               "idempotencyKey": key}  # fmt: skip
    reply = env.call("Proxy", "oneWayCall", request)
    assert reply.status_code == 200, reply.text
    counter_is(env, counter, 1)
    assert output_by_idempotency_key(env, counter, key) == {"oldValue": 0, "newValue": 1}


def test_call_with_idempotency_key(env: Env) -> None:
    counter, key = idem(), idem()
    request = {"serviceName": "Counter", "virtualObjectKey": counter, "handlerName": "add", "message": json_bytes(1),
               "idempotencyKey": key}  # fmt: skip
    reply = env.call("Proxy", "call", request)
    assert reply.status_code == 200, reply.text
    assert json.loads(bytes(reply.json())) == {"oldValue": 0, "newValue": 1}
    counter_is(env, counter, 1)
    assert output_by_idempotency_key(env, counter, key) == {"oldValue": 0, "newValue": 1}


def test_one_way_call_with_delay(env: Env) -> None:
    """Ten one-way adds delayed 5 s: all run (counter 10), and not before 5 s; the delay is waited out
    before the call is queued on the key, so the ten do not take 50 s."""
    counter = idem()
    started = time.monotonic()
    for _ in range(10):
        request = {"serviceName": "Counter", "virtualObjectKey": counter, "handlerName": "add",
                   "message": json_bytes(1), "delayMillis": 5000}  # fmt: skip
        reply = env.call("Proxy", "oneWayCall", request, idempotency_key=idem())
        assert reply.status_code == 200, reply.text

    def check() -> bool:
        reply = env.call("Counter", "get", key=counter)
        assert reply.status_code == 200, reply.text
        assert reply.json() == 10
        return True

    poll_until(check, timeout_s=30)
    assert time.monotonic() - started >= 5.0
