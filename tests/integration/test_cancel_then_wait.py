"""A handler that catches its cancellation and then waits: the handled cancel signal must not wake it.

The Python SDK (restate-sdk) goes on naming the cancel signal in every await point after it handled
one; the signal is already in its journal, so resuming on it would re-invoke the handler at once, again
and again, until what it really awaits arrives. `torpor dev` on a moto server over HTTP, a real
restate-sdk service served by hypercorn.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator
from datetime import timedelta

import httpx
import pytest
import restate
from restate.exceptions import TerminalError

from adapters.local.dev import DevServer
from control_plane.retry import RetryPolicy
from control_plane.settings import Settings
from tests.helpers.asgi import serve_asgi
from tests.helpers.dev import describe, wait_for
from tests.helpers.moto import unique_table_name

patient = restate.Service("Patient")
ATTEMPTS: Counter[str] = Counter()
"""Requests each invocation's handler received, by invocation id."""


@patient.handler()
async def wait(ctx: restate.Context, ms: int) -> str:
    """Sleep `ms`; if cancelled meanwhile, sleep 500 ms more and answer "cancelled, then waited"."""
    ATTEMPTS[ctx.request().id] += 1
    try:
        await ctx.sleep(timedelta(milliseconds=ms))
    except TerminalError:
        await ctx.sleep(timedelta(milliseconds=500))
        return "cancelled, then waited"
    return "slept"


@pytest.fixture(scope="module")
def dev(moto_endpoint: str) -> Iterator[DevServer]:
    settings = Settings(retry_policy=RetryPolicy(initial_interval_ms=100, exponentiation_factor=2, max_attempts=4))
    with serve_asgi(restate.app([patient], protocol="request_response")) as url:
        server = DevServer(
            ingress_port=0, admin_port=0, dynamodb_endpoint=moto_endpoint, table=unique_table_name(), settings=settings
        )
        server.start()
        try:
            reply = httpx.post(f"{server.admin_url}/deployments", json={"uri": url}, timeout=30)
            assert reply.status_code == 201, reply.text
            yield server
        finally:
            server.stop()


def test_a_handler_that_waits_after_its_cancellation_is_not_re_invoked_in_a_loop(dev: DevServer) -> None:
    invocation_id = httpx.post(f"{dev.ingress_url}/Patient/wait/send", json=60_000).json()["invocationId"]
    wait_for(lambda: describe(dev, invocation_id)["status"] == "suspended", 10, "the first sleep")
    assert httpx.patch(f"{dev.admin_url}/invocations/{invocation_id}/cancel").status_code == 202
    done = httpx.get(f"{dev.ingress_url}/restate/invocation/{invocation_id}/attach", timeout=30)
    assert done.status_code == 200, done.text
    assert done.json() == "cancelled, then waited"
    # the first sleep; the cancel (the second sleep starts); the second sleep's end
    assert ATTEMPTS[invocation_id] <= 4, f"re-invoked {ATTEMPTS[invocation_id]} times"
    journal = [e["type"] for e in describe(dev, invocation_id)["journal"]]
    assert journal == ["Input", "Sleep", "Signal", "Sleep", "SleepCompletion", "Output"]
