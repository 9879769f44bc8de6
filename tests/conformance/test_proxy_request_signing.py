"""ProxyRequestSigning: services that verify request identity accept the runtime's signed requests.

Ported from restatedev/e2e `sdk-tests` (v2.2) `ProxyRequestSigning`. On a runtime of its own
(`private_env(lang, request_identity=True)`): the runtime holds an Ed25519 private key and signs
discovery and every invoke (`x-restate-signature-scheme: v1`, `x-restate-jwt-v1`); the services
were started with its public key (`publickeyv1_…`). Registration succeeded (the fixture asserts
it), and `Counter/add 1` then `Counter/get` → 1. Beyond upstream: the same requests sent unsigned,
straight to the services, are refused with 401, so the pass above needed the runtime's signatures.
In lambda mode the runtime signs its Invokes of the function the same way (the signature travels in
the event's headers) and the unsigned requests are Invokes of the function straight to the emulator.
"""

from __future__ import annotations

from typing import Any
from uuid import uuid4

import pytest


@pytest.mark.slow
def test_request_signing_pass(lang: str, private_env: Any) -> None:
    env = private_env(lang, request_identity=True)
    assert env.identity_public_key.startswith("publickeyv1_")
    key = uuid4().hex

    added = env.call("Counter", "add", 1, key=key, idempotency_key=uuid4().hex)
    assert added.status_code == 200, added.text
    assert added.json() == {"oldValue": 0, "newValue": 1}

    counter = env.call("Counter", "get", key=key, idempotency_key=uuid4().hex)
    assert counter.status_code == 200, counter.text
    assert counter.json() == 1

    # Unsigned, straight to the services (lambda mode: an Invoke of the function): refused (the SDKs
    # answer 401 when verification fails).
    assert env.unsigned("GET", "/discover") == 401
    assert (
        env.unsigned("POST", "/invoke/Counter/get", headers={"content-type": "application/vnd.restate.invocation.v5"})
        == 401
    )
