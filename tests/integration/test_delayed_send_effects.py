"""A handler's delayed one-way call keeps its durable timer when the caller's effects are carried
out again (after a crash between the commit and the record of effects applied: `Effects.apply` is
idempotent), so a restart or a lost wake-up message still runs the callee.

`torpor dev` wiring on a moto server over HTTP; the example services run under hypercorn.
"""

from __future__ import annotations

from collections.abc import Iterator

import httpx
import pytest

from adapters.local.dev import DevServer
from control_plane.held import Held
from control_plane.settings import Settings
from tests.helpers.dev import dev_with_examples, wait_completed

SETTINGS = Settings(inactivity_timeout_ms=10_000, lease_margin_ms=2_000, call_wait_ms=20_000)
HOUR_MS = 3_600_000


@pytest.fixture(scope="module")
def dev(moto_endpoint: str, examples_url: str) -> Iterator[DevServer]:
    with dev_with_examples(moto_endpoint, examples_url, SETTINGS) as server:
        yield server


def test_a_delayed_one_way_call_keeps_its_timer_when_the_callers_effects_are_applied_again(dev: DevServer) -> None:
    # GIVEN a handler that sent Waits/stamp an hour ahead, and completed
    reply = httpx.post(f"{dev.ingress_url}/Waits/send_later", json=HOUR_MS, timeout=30)
    assert reply.status_code == 200, reply.text
    callee_id = reply.json()
    caller_id = reply.headers["x-restate-id"]
    wait_completed(dev.admin_url, caller_id)
    store = dev.store
    far = dev.control_plane.clock.now_ms() + 2 * HOUR_MS

    def callee_timers() -> list[int]:
        return [due for due, invocation_id in store.due_timers(far) if invocation_id == callee_id]

    (due,) = callee_timers()

    # WHEN its committed entries' effects are carried out again (as after a crash before it recorded them)
    loaded = store.load_invocation(caller_id)
    assert loaded is not None
    dev.control_plane.engine.effects.apply(Held.of(loaded), 1)

    # THEN the callee is still scheduled and its durable wake-up is still stored
    assert callee_timers() == [due]
    callee = store.get_invocation(callee_id)
    assert callee is not None
    assert callee.status == "scheduled"
