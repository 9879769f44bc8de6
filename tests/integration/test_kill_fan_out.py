"""A kill answers promptly and takes effect while the invocation is still creating thousands of
one-way calls, on DynamoDB (dynalite over the wire) as on SQLite: the kill's write comes first, its
callees are killed for a bounded time and then by wake-ups, and the worker creating the calls
stops within a few callees of the kill.

`torpor dev` on each store; the deployment is a fake (`tests.helpers.fake_deployment`): `fan_out`
sends `CALLS` one-way calls to `wait` and suspends on an awakeable; `wait` suspends on one too.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from adapters.local.dev import DevServer
from control_plane import ids
from control_plane.protocol import Frame, frame
from control_plane.protocol import protocol_pb2 as pb
from control_plane.settings import Settings
from tests.helpers.asgi import serve_asgi
from tests.helpers.dev import wait_for
from tests.helpers.dynalite import dynalite_server
from tests.helpers.fake_deployment import Answer, FakeDeployment

CALLS = 3_000
AWAKEABLE = frame(pb.SuspensionMessage(waiting_signals=[17]))


def fan_out(start: pb.StartMessage, journal: list[Frame]) -> Answer:
    calls = [
        frame(pb.OneWayCallCommandMessage(service_name="Fake", handler_name="wait", invocation_id_notification_idx=i))
        for i in range(1, CALLS + 1)
    ]
    return Answer([*calls, AWAKEABLE])


FAKE = FakeDeployment({"fan_out": fan_out, "wait": lambda s, j: Answer([AWAKEABLE])})


@pytest.fixture(params=["dynalite", "sqlite"])
def dev(request: pytest.FixtureRequest) -> Iterator[DevServer]:
    settings = Settings(inactivity_timeout_ms=60_000, lease_margin_ms=5_000, call_wait_ms=5_000)
    with serve_asgi(FAKE) as url:
        if request.param == "dynalite":
            with dynalite_server() as endpoint:
                server = DevServer(
                    ingress_port=0, admin_port=0, dynamodb_endpoint=endpoint, table="torpor", settings=settings
                )
                yield from _running(server, url)
        else:
            yield from _running(DevServer(ingress_port=0, admin_port=0, in_memory=True, settings=settings), url)


def _running(server: DevServer, url: str) -> Iterator[DevServer]:
    server.start()
    try:
        reply = httpx.post(f"{server.admin_url}/deployments", json={"uri": url}, timeout=30)
        assert reply.status_code == 201, reply.text
        yield server
    finally:
        server.stop()


def _callees(dev: DevServer) -> list[Any]:
    """The records of the one-way callees (`Fake/wait`) created so far."""
    return dev.control_plane.store.list_invocations(None, "Fake", 2 * CALLS, handler="wait")


def _stable_count(dev: DevServer) -> int:
    """How many callees exist, once that number stays put for a second (0 while it moves)."""
    before = len(_callees(dev))
    time.sleep(1)
    return before if len(_callees(dev)) == before else 0


def test_a_kill_answers_and_stops_an_invocation_creating_thousands_of_calls(dev: DevServer) -> None:
    sent = httpx.post(f"{dev.ingress_url}/restate/send/Fake/fan_out", timeout=30)
    assert sent.status_code == 202, sent.text
    parent_id = sent.json()["invocationId"]
    store = dev.control_plane.store
    wait_for(lambda: store.get_invocation(ids.derived_invocation_id(parent_id, 50)), 120, "the 50th callee")

    started = time.monotonic()
    killed = httpx.patch(f"{dev.admin_url}/invocations/{parent_id}/kill", timeout=120)
    answered_s = time.monotonic() - started

    assert killed.status_code in (200, 202), killed.text
    assert answered_s < 30, f"the kill answered after {answered_s:.1f} s"
    record = dev.control_plane.store.get_invocation(parent_id)
    assert record is not None
    assert (record.status, record.completion) == ("completed", "killed")
    # the worker stopped creating calls: their number stays put, short of all of them
    created = wait_for(lambda: _stable_count(dev), 60, "creation to stop")
    assert created < CALLS
    callee_ids = {c.invocation_id for c in _callees(dev)}
    # every callee created is killed, the last ones by the wake-ups that go on after the answer; each
    # read by id (dynalite's status index once left out one completed record from a listing)
    wait_for(
        lambda: all(
            (c := store.get_invocation(i)) is not None and (c.status, c.completion) == ("completed", "killed")
            for i in callee_ids
        ),
        180,
        "every callee to be killed",
    )
    assert {c.invocation_id for c in _callees(dev)} <= callee_ids  # none created after creation stopped
    assert store.get_invocation(ids.derived_invocation_id(parent_id, max(created, 50) + 2)) is None
