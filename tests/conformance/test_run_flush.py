"""RunFlush (upstream `sdk-tests` RunFlush): in request/response mode a `ctx.run` result is acknowledged
before the handler goes on, so the final execution replays every step: 0 steps executed in it.
Upstream tags it `only-always-suspending`: in bidirectional mode one execution runs every step."""

from __future__ import annotations

import pytest

from tests.conformance.harness import MODE, Env, idem


@pytest.mark.skipif(MODE == "bidi", reason="only-always-suspending upstream: one streamed execution runs all steps")
def test_flush(env: Env) -> None:
    reply = env.call("TestUtilsService", "countExecutedSideEffects", 3, idempotency_key=idem())
    assert reply.status_code == 200, reply.text
    assert reply.json() == 0
