"""KillRuntime and StopRuntime: a virtual object's state survives SIGKILL / SIGTERM of the runtime.

Ported from restatedev/e2e `sdk-tests` (v2.2) `KillRuntime` and `StopRuntime`, one test each. On a
runtime of its own (`private_env`): `Counter/add 1` → `{0,1}`; the runtime is killed (SIGKILL) or
stopped (SIGTERM, waited for) and started again on the same data and ports; then `Counter/add 2`
with one idempotency key, retried until the runtime answers, returns `{1,3}`: the state was kept and
the retries of the same request ran the handler once.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any
from uuid import uuid4

import httpx
import pytest

from tests.conformance.harness import poll_until

# Upstream allows 60 s for the restarted runtime to answer the second add.
RESTART_TIMEOUT_S = 60.0
# Each try of the second add gets this long (s): a runtime still starting must not stall the poll.
TRY_TIMEOUT_S = 10.0


def _state_survives_restart(env: Any, take_down: Callable[[], None]) -> None:
    key = uuid4().hex
    first = env.call("Counter", "add", 1, key=key, idempotency_key=uuid4().hex)
    assert first.status_code == 200, first.text
    assert first.json() == {"oldValue": 0, "newValue": 1}

    take_down()
    env.start_runtime()

    idempotency_key = uuid4().hex

    def second_add() -> bool:
        try:
            reply = env.ingress.post(
                f"/Counter/{key}/add", json=2, headers={"idempotency-key": idempotency_key}, timeout=TRY_TIMEOUT_S
            )
        except httpx.TransportError as exc:  # refused while starting, or timed out
            raise AssertionError(f"runtime not answering yet: {exc!r}") from exc
        assert reply.status_code == 200, reply.text
        assert reply.json() == {"oldValue": 1, "newValue": 3}
        return True

    poll_until(second_add, timeout_s=RESTART_TIMEOUT_S, interval_s=0.2)


@pytest.mark.slow
def test_kill_runtime_retains_state(lang: str, private_env: Any) -> None:
    env = private_env(lang)
    _state_survives_restart(env, env.kill_runtime)


@pytest.mark.slow
def test_stop_runtime_retains_state(lang: str, private_env: Any) -> None:
    env = private_env(lang)
    _state_survives_restart(env, env.stop_runtime)
