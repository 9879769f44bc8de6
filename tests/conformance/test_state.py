"""State (upstream `sdk-tests` State): Counter add, one-way adds through Proxy, MapObject clearAll."""

from __future__ import annotations

from uuid import uuid4

from tests.conformance.harness import Env, idem, json_bytes, poll_until


def test_add(env: Env) -> None:
    counter = uuid4().hex
    first = env.call("Counter", "add", 1, key=counter, idempotency_key=idem())
    assert first.status_code == 200, first.text
    assert first.json() == {"oldValue": 0, "newValue": 1}

    second = env.call("Counter", "add", 2, key=counter, idempotency_key=idem())
    assert second.status_code == 200, second.text
    assert second.json() == {"oldValue": 1, "newValue": 3}


def test_proxy_one_way_add(env: Env) -> None:
    counter = uuid4().hex
    for _ in range(3):
        request = {
            "serviceName": "Counter",
            "virtualObjectKey": counter,
            "handlerName": "add",
            "message": json_bytes(1),
        }
        reply = env.call("Proxy", "oneWayCall", request, idempotency_key=idem())
        assert reply.status_code == 200, reply.text

    def counted() -> bool:
        reply = env.call("Counter", "get", key=counter)
        assert reply.status_code == 200, reply.text
        assert reply.json() == 3
        return True

    poll_until(counted)


def test_list_state_and_clear_all(env: Env) -> None:
    name = uuid4().hex
    other = name + "1"
    for key, value in (("my-key-0", "my-value-0"), ("my-key-1", "my-value-1")):
        reply = env.call("MapObject", "set", {"key": key, "value": value}, key=name, idempotency_key=idem())
        assert reply.status_code == 200, reply.text
    reply = env.call("MapObject", "set", {"key": "my-key-2", "value": "my-value-2"}, key=other, idempotency_key=idem())
    assert reply.status_code == 200, reply.text

    cleared = env.call("MapObject", "clearAll", key=name, idempotency_key=idem())
    assert cleared.status_code == 200, cleared.text
    assert sorted(entry["key"] for entry in cleared.json()) == ["my-key-0", "my-key-1"]

    for key in ("my-key-0", "my-key-1"):
        assert env.call("MapObject", "get", key, key=name, idempotency_key=idem()).json() == ""
    assert env.call("MapObject", "get", "my-key-2", key=other, idempotency_key=idem()).json() == "my-value-2"
