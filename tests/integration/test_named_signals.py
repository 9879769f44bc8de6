"""Named signals (`ctx.signal`, `ctx.resolve_signal`, `ctx.reject_signal` of restate-sdk 1.3), side by
side with restate-server 1.7.12: the same example handlers (`Waits/signal`, `Waits/send_signal`, real
restate-sdk handlers under hypercorn) registered on restate-server and on `torpor dev` over SQLite and
over DynamoDB (moto server), at service protocol V5 and V6 (both carry named signals).

- a handler awaiting `ctx.signal("approved")` suspends until a signal of that name arrives;
- a signal sent before the handler awaits it is kept and delivered when it does;
- named signals queue: a signal sent twice to one await is taken once (the first), and a handler
  awaiting one name twice gets both, in the order they were sent;
- a signal of another name does not wake it (it is journaled, as restate-server journals it);
- a rejected signal fails the awaiting handler with the rejection's code and message;
- a signal sent to a completed or an unknown invocation is dropped: the sender completes;
- the awaiting invocation's journal shows a `Notification: Signal` entry per signal sent (`sys_journal`'s
  `entry_json` alike, `{"Signal": {"id": {"Name": ...}, ...}}`), and Torpor's describe the signal's name.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from adapters.local.dev import DevServer
from control_plane.settings import Settings
from tests.helpers.dev import dev_with_examples, describe, wait_for
from tests.helpers.services import serve_examples

pytestmark = pytest.mark.slow

SETTINGS = Settings(call_wait_ms=20_000)


@pytest.fixture(scope="module", params=[5, 6], ids=["V5", "V6"])
def examples_at(request: pytest.FixtureRequest) -> Iterator[str]:
    """The example app advertising at most protocol version V5 or V6: its URL."""
    with serve_examples(max_protocol_version=request.param) as (url, _process):
        yield url


@pytest.fixture(scope="module")
def restate_ingress(examples_at: str) -> Iterator[tuple[str, str]]:
    """restate-server 1.7.12 with the examples registered: its ingress and admin URLs."""
    from tests.conformance.harness import RestateRuntime

    server = RestateRuntime()
    server.start()
    try:
        reply = httpx.post(f"{server.admin_url}/deployments", json={"uri": examples_at, "use_http_11": True}, timeout=60)
        assert reply.status_code == 201, reply.text
        yield server.ingress_url, server.admin_url
    finally:
        server.close()


@pytest.fixture(scope="module", params=["sqlite", "dynamodb"])
def dev(
    request: pytest.FixtureRequest, examples_at: str, moto_endpoint: str, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[DevServer]:
    """`torpor dev` on SQLite (a data dir) or on DynamoDB (a fresh table of the moto server)."""
    if request.param == "dynamodb":
        with dev_with_examples(moto_endpoint, examples_at, SETTINGS) as server:
            yield server
        return
    data_dir: Path = tmp_path_factory.mktemp("signals")
    server = DevServer(ingress_port=0, admin_port=0, data_dir=data_dir, settings=SETTINGS)
    server.start()
    try:
        reply = httpx.post(f"{server.admin_url}/deployments", json={"uri": examples_at}, timeout=30)
        assert reply.status_code == 201, reply.text
        yield server
    finally:
        server.stop()


def _start(ingress: str, name: str, after_ms: int = 0, times: int = 1) -> str:
    body = {"name": name, "after_ms": after_ms, "times": times}
    reply = httpx.post(f"{ingress}/Waits/signal/send", json=body, timeout=30)
    assert reply.status_code == 202, reply.text
    return str(reply.json()["invocationId"])


def _signal(ingress: str, invocation_id: str, name: str, **result: Any) -> httpx.Response:
    return httpx.post(f"{ingress}/Waits/send_signal", json={"id": invocation_id, "name": name, **result}, timeout=30)


def _output(ingress: str, invocation_id: str) -> httpx.Response:
    return httpx.get(f"{ingress}/restate/invocation/{invocation_id}/output", timeout=30)


def _attach(ingress: str, invocation_id: str) -> tuple[int, Any]:
    reply = httpx.get(f"{ingress}/restate/invocation/{invocation_id}/attach", timeout=60)
    body = reply.json()
    return reply.status_code, body if reply.status_code == 200 else (body["code"], body["message"])


def _suspended_waiting(ingress: str, invocation_id: str) -> None:
    """Give the handler time to reach its await (and suspend): its output is not there yet."""
    time.sleep(1.0)
    assert _output(ingress, invocation_id).status_code == 470


def scenarios(ingress: str) -> dict[str, Any]:
    """What a user sees of each case on the runtime at `ingress`."""
    seen: dict[str, Any] = {}
    waiting = _start(ingress, "approved")
    _suspended_waiting(ingress, waiting)
    _signal(ingress, waiting, "other", value="ignored")  # another name does not wake it
    _suspended_waiting(ingress, waiting)
    sent = _signal(ingress, waiting, "approved", value="yes")
    seen["send"] = sent.json()
    seen["after the await"] = _attach(ingress, waiting)

    early = _start(ingress, "approved", after_ms=1_500)
    _signal(ingress, early, "approved", value="early")
    seen["before the await"] = _attach(ingress, early)

    twice = _start(ingress, "approved", after_ms=1_500)
    _signal(ingress, twice, "approved", value="first")
    _signal(ingress, twice, "approved", value="second")
    seen["twice"] = _attach(ingress, twice)

    queue = _start(ingress, "approved", times=2)  # awaited twice: each await takes the next one sent
    _suspended_waiting(ingress, queue)
    _signal(ingress, queue, "approved", value="first")
    _suspended_waiting(ingress, queue)
    _signal(ingress, queue, "approved", value="second")
    seen["awaited twice"] = _attach(ingress, queue)

    queued = _start(ingress, "approved", after_ms=1_500, times=2)
    _signal(ingress, queued, "approved", value="first")
    _signal(ingress, queued, "approved", value="second")
    seen["awaited twice, sent before"] = _attach(ingress, queued)

    rejected = _start(ingress, "approved")
    _suspended_waiting(ingress, rejected)
    seen["reject"] = _signal(ingress, rejected, "approved", reason="not today", code=409).json()
    seen["rejected"] = _attach(ingress, rejected)

    done = httpx.post(f"{ingress}/Greeter/greet/send", json="Ann", timeout=30).json()["invocationId"]
    _attach(ingress, done)
    late = _signal(ingress, done, "approved", value="late")
    seen["to a completed invocation"] = (late.status_code, late.json())
    unknown = done[:-1] + ("B" if done.endswith("A") else "A")  # well-formed, never created
    nowhere = _signal(ingress, unknown, "approved", value="x")
    seen["to an unknown invocation"] = (nowhere.status_code, nowhere.json())
    seen["ids"] = {"waiting": waiting, "twice": twice, "sender": sent.headers.get("x-restate-id"), "queue": queue}
    return seen


def _signal_entries(admin: str, invocation_id: str) -> list[Any]:
    """`sys_journal`'s `entry_json` of the invocation's `Notification: Signal` entries, in order."""
    sql = f"SELECT index, entry_type, entry_json FROM sys_journal WHERE id = '{invocation_id}' ORDER BY index"
    reply = httpx.post(f"{admin}/query", json={"query": sql}, headers={"accept": "application/json"}, timeout=30)
    assert reply.status_code == 200, reply.text
    return [json.loads(r["entry_json"]) for r in reply.json()["rows"] if r["entry_type"] == "Notification: Signal"]


@pytest.fixture(scope="module")
def on_restate(restate_ingress: tuple[str, str]) -> dict[str, Any]:
    ingress, admin = restate_ingress
    seen = scenarios(ingress)
    seen["journal"] = _signal_entries(admin, seen["ids"]["twice"])
    return seen


EXPECTED = {
    "send": "resolved",
    "after the await": (200, "got yes"),
    "before the await": (200, "got early"),
    "twice": (200, "got first"),
    "awaited twice": (200, "got first, second"),
    "awaited twice, sent before": (200, "got first, second"),
    "reject": "rejected",
    "rejected": (409, (409, "not today")),
    "to a completed invocation": (200, "resolved"),
    "to an unknown invocation": (200, "resolved"),
}
"""What a client sees of each case of `scenarios` on restate-server 1.7.12."""


def test_named_signals_behave_as_on_restate_server(dev: DevServer, on_restate: dict[str, Any]) -> None:
    restate = {k: v for k, v in on_restate.items() if k not in ("ids", "journal")}
    assert restate == EXPECTED, "restate-server changed its answers"
    torpor = scenarios(dev.ingress_url)
    assert {k: v for k, v in torpor.items() if k != "ids"} == restate

    waiting = describe(dev, torpor["ids"]["waiting"])
    signals = [e for e in waiting["journal"] if e["entry_type"] == "Notification: Signal"]
    assert [e.get("signal") for e in signals] == ["other", "approved"], signals  # journaled as they came
    sender = describe(dev, torpor["ids"]["sender"])
    (command,) = [e for e in sender["journal"] if e["entry_type"] == "Command: SendSignal"]
    assert (command["signal"], command["invoked_id"]) == ("approved", torpor["ids"]["waiting"])
    assert command["details"] == f"signal approved to {torpor['ids']['waiting']}"
    twice = describe(dev, torpor["ids"]["twice"])  # both journaled, as restate-server journals them
    assert [e.get("signal") for e in twice["journal"] if e["entry_type"] == "Notification: Signal"] == [
        "approved",
        "approved",
    ]
    assert _signal_entries(dev.admin_url, torpor["ids"]["twice"]) == on_restate["journal"]  # sys_journal alike
    assert len(on_restate["journal"]) == 2


def test_a_send_signal_to_a_malformed_invocation_id_is_retried_as_on_restate_server(dev: DevServer) -> None:
    """restate-server 1.7.12 cannot decode that command (RT0012) and retries the sender; so does Torpor."""
    sent = httpx.post(
        f"{dev.ingress_url}/Waits/send_signal/send", json={"id": "inv_1bad", "name": "a", "value": "x"}, timeout=30
    ).json()["invocationId"]

    def failed() -> dict[str, Any] | None:
        described = describe(dev, sent)
        return described if described.get("last_failure") else None

    described = wait_for(failed, 30, "the sender's attempt to fail")
    assert described["status"] != "completed"
    assert "SendSignal command to no invocation" in described["last_failure"]["message"]
    httpx.patch(f"{dev.admin_url}/invocations/{sent}/kill", timeout=30)


def test_named_signals_on_streamed_invocations(moto_endpoint: str) -> None:
    """The same cases with the deployment registered over HTTP/2 (bidirectional mode: a signal
    arriving while the handler runs goes to it on the open stream)."""
    with (
        serve_examples(http2=True) as (url, _process),
        dev_with_examples(moto_endpoint, url, SETTINGS) as dev,
    ):
        seen = scenarios(dev.ingress_url)
    assert {k: v for k, v in seen.items() if k != "ids"} == EXPECTED
