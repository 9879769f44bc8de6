"""CallOrdering (upstream `sdk-tests` CallOrdering): calls and one-way calls from one invocation reach
one object key in the order they were issued."""

from __future__ import annotations

import pytest

from tests.conformance.harness import Env, idem, json_bytes


@pytest.mark.parametrize(
    "one_way",
    [(True, False, False), (False, True, False), (True, True, False)],
    ids=["send-call-call", "call-send-call", "send-send-call"],
)
def test_ordering(env: Env, one_way: tuple[bool, ...]) -> None:
    # the last one is a call, awaited: the list is complete when manyCalls answers
    name = idem()
    requests = [
        {
            "proxyRequest": {
                "serviceName": "ListObject",
                "virtualObjectKey": name,
                "handlerName": "append",
                "message": json_bytes(str(index)),
            },
            "oneWayCall": send,
            "awaitAtTheEnd": not send,
        }
        for index, send in enumerate(one_way)
    ]
    reply = env.call("Proxy", "manyCalls", requests, idempotency_key=idem())
    assert reply.status_code == 200, reply.text

    cleared = env.call("ListObject", "clear", key=name, idempotency_key=idem())
    assert cleared.status_code == 200, cleared.text
    assert cleared.json() == ["0", "1", "2"]
