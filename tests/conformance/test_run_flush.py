"""RunFlush (upstream `sdk-tests` RunFlush): in request/response mode a `ctx.run` result is acknowledged
before the handler goes on, so the final execution replays every step: 0 steps executed in it.
Upstream tags it `only-always-suspending`: in bidirectional mode, and on Lambda with in-process
checkpoints, one execution runs every step."""

from __future__ import annotations

import pytest

from tests.conformance.harness import MODE, Env, idem


@pytest.mark.skipif(MODE == "bidi", reason="only-always-suspending upstream: one streamed execution runs all steps")
def test_flush(env: Env) -> None:
    if env.on_lambda:  # lambda mode's Python services (the TypeScript ones stay request/response)
        pytest.skip("only-always-suspending upstream: with in-process checkpoints one Invoke runs all steps")
    reply = env.call("TestUtilsService", "countExecutedSideEffects", 3, idempotency_key=idem())
    assert reply.status_code == 200, reply.text
    assert reply.json() == 0


if MODE == "lambda":  # collected in lambda mode only: the check that its services checkpoint in-process

    def test_steps_commit_in_one_invoke(env: Env) -> None:
        """Lambda mode, beyond upstream: the function commits each step's result itself (in-process
        checkpoints) and goes on, so one Invoke runs all three steps (`attempts` 1)."""
        if not env.on_lambda:
            pytest.skip("the TypeScript services are served over HTTP, not on Lambda")
        reply = env.call("TestUtilsService", "countExecutedSideEffects", 3, idempotency_key=idem())
        assert reply.status_code == 200, reply.text
        assert reply.json() == 3
        invocation = env.admin.get(f"/invocations/{reply.headers['x-restate-id']}")
        assert invocation.status_code == 200, invocation.text
        assert invocation.json()["attempts"] == 1
