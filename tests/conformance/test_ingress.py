"""Ingress (upstream `sdk-tests` Ingress): custom headers reach the handler; raw bytes round-trip as
`application/octet-stream`."""

from __future__ import annotations

import os

from tests.conformance.harness import Env, idem


def test_headers_pass_through(env: Env) -> None:
    reply = env.call("TestUtilsService", "echoHeaders", idempotency_key=idem(),
                     headers={"x-my-custom-header": "x-my-custom-value"})  # fmt: skip
    assert reply.status_code == 200, reply.text
    assert reply.json()["x-my-custom-header"] == "x-my-custom-value"


def test_raw_handler(env: Env) -> None:
    payload = os.urandom(100)
    reply = env.call("TestUtilsService", "rawEcho", raw=payload, idempotency_key=idem())
    assert reply.status_code == 200, reply.text
    assert reply.content == payload
