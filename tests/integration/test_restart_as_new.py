"""Restart as new (`PATCH /invocations/{id}/restart-as-new`) through a real `torpor dev` serving the
example app (real restate-sdk handlers under hypercorn), and side by side with restate-server
1.7.12 serving the same app: the new invocation reruns the handler (from 0) or replays a copied
journal prefix (its `ctx.run` steps are not run again), the old one is unchanged, and the refusals'
status codes agree with restate-server's."""

from __future__ import annotations

import json
import re
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from click.testing import CliRunner

from adapters.cli import main as torpor_cli
from adapters.local.dev import DevServer
from control_plane import ids
from control_plane.ports import RetentionDue
from control_plane.settings import Settings
from tests.helpers.dev import describe, dev_with_examples, wait_completed
from tests.integration.test_restate_cli import RESTATE_CLI, ok, restate

SETTINGS = Settings(call_wait_ms=20_000)


@pytest.fixture(scope="module")
def dev(moto_endpoint: str, examples_url: str) -> Iterator[DevServer]:
    with dev_with_examples(moto_endpoint, examples_url, SETTINGS) as server:
        yield server


@pytest.fixture(scope="module")
def restate_server(examples_url: str) -> Iterator[tuple[str, str]]:
    """restate-server 1.7.12 with the same example app registered: (ingress URL, admin URL)."""
    from tests.conformance.harness import RestateRuntime

    server = RestateRuntime()
    server.start()
    try:
        registered = httpx.post(
            f"{server.admin_url}/deployments", json={"uri": examples_url, "use_http_11": True}, timeout=60
        )
        assert registered.status_code == 201, registered.text
        yield server.ingress_url, server.admin_url
    finally:
        server.stop()


def _place(ingress: str) -> tuple[str, dict[str, Any]]:
    """A completed `OrderService/place` (three ctx.run steps): its invocation id and output."""
    reply = httpx.post(f"{ingress}/OrderService/place", json={"id": uuid.uuid4().hex[:8], "amount": 3}, timeout=60)
    assert reply.status_code == 200, reply.text
    return reply.headers["x-restate-id"], reply.json()


def _restart(admin: str, invocation_id: str, query: str = "") -> httpx.Response:
    return httpx.patch(f"{admin}/invocations/{invocation_id}/restart-as-new{query}", timeout=30)


def _output(ingress: str, invocation_id: str) -> dict[str, Any]:
    reply = httpx.get(f"{ingress}/restate/invocation/{invocation_id}/attach", timeout=60)
    assert reply.status_code == 200, reply.text
    out: dict[str, Any] = reply.json()
    return out


def _steps_run(effects_file: Path, invocation_id: str) -> list[str]:
    if not effects_file.exists():
        return []
    lines = [json.loads(line) for line in effects_file.read_text().splitlines() if line.strip()]
    return [e["step"] for e in lines if e.get("invocation_id") == invocation_id]


def test_restart_from_zero_runs_the_handler_again(dev: DevServer, effects_file: Path) -> None:
    old, output = _place(dev.ingress_url)
    before = describe(dev, old)
    reply = _restart(dev.admin_url, old)
    assert reply.status_code == 200, reply.text
    new = reply.json()["new_invocation_id"]
    assert new.startswith("inv_1") and new != old
    again = _output(dev.ingress_url, new)
    assert again["order_id"] == output["order_id"] and again["reservation"] != output["reservation"]
    assert len(_steps_run(effects_file, new)) == 3  # every ctx.run ran again
    assert describe(dev, old) == before  # the old invocation is untouched


@pytest.mark.parametrize("copy_upto", [1, 2])
def test_restart_from_a_prefix_does_not_rerun_the_copied_runs(
    dev: DevServer, effects_file: Path, copy_upto: int
) -> None:
    old, output = _place(dev.ingress_url)
    reply = _restart(dev.admin_url, old, f"?from={copy_upto}&deployment=keep")
    assert reply.status_code == 200, reply.text
    new = reply.json()["new_invocation_id"]
    again = _output(dev.ingress_url, new)
    assert again["reservation"] == output["reservation"]  # replayed from the copied journal
    assert again["payment"] != output["payment"]
    assert len(_steps_run(effects_file, new)) == 2  # "reserve stock" was not run again
    journal = wait_completed(dev.admin_url, new)["journal"]
    assert [e["type"] for e in journal[:3]] == [e["type"] for e in describe(dev, old)["journal"][:3]]


def test_a_prefix_with_the_output_completes_with_it(dev: DevServer, effects_file: Path) -> None:
    old, output = _place(dev.ingress_url)
    reply = _restart(dev.admin_url, old, "?from=7")
    assert reply.status_code == 200, reply.text
    new = reply.json()["new_invocation_id"]
    assert _output(dev.ingress_url, new) == output
    assert _steps_run(effects_file, new) == []


def test_the_cli_restarts_as_new(dev: DevServer) -> None:
    old, _ = _place(dev.ingress_url)
    result = CliRunner().invoke(
        torpor_cli, ["--admin-url", dev.admin_url, "invocations", "restart-as-new", old, "--from", "2"]
    )
    assert result.exit_code == 0, result.output
    assert f"Restarted {old} as new invocation inv_1" in result.output
    refused = CliRunner().invoke(
        torpor_cli, ["--admin-url", dev.admin_url, "invocations", "restart-as-new", old, "--from", "99"]
    )
    assert refused.exit_code != 0 and "from=99 is out of range" in refused.output


def _long_sleep(ingress: str) -> str:
    sent = httpx.post(f"{ingress}/Waits/sleep/send", json=60_000, timeout=30)
    assert sent.status_code == 202, sent.text
    time.sleep(0.5)
    return str(sent.json()["invocationId"])


def _delayed(ingress: str) -> str:
    sent = httpx.post(f"{ingress}/restate/send/Greeter/greet?delay=60s", json="x", timeout=30)
    assert sent.status_code == 202, sent.text
    return str(sent.json()["invocationId"])


def _workflow(ingress: str, handler: str = "run") -> str:
    """A completed workflow run (its promise confirmed first), or its shared handler `status`."""
    workflow_id = f"wf-{uuid.uuid4().hex[:8]}"
    confirmed = httpx.post(f"{ingress}/Signup/{workflow_id}/confirm", json="c", timeout=60)
    assert confirmed.status_code == 200, confirmed.text
    body = {"json": "ann@example.com"} if handler == "run" else {}
    reply = httpx.post(f"{ingress}/Signup/{workflow_id}/{handler}", timeout=60, **body)  # type: ignore[arg-type]
    assert reply.status_code == 200, reply.text
    return reply.headers["x-restate-id"]


def _completed(ingress: str) -> str:
    return _place(ingress)[0]


CASES: dict[str, tuple[Callable[[str], str], str]] = {
    "completed, from 0": (_completed, ""),
    "completed, from 2": (_completed, "?from=2"),
    "completed, from 2, keep": (_completed, "?from=2&deployment=keep"),
    "completed, from 1 (its completion later)": (_completed, "?from=1"),
    "completed, from 3 (a run without its completion)": (_completed, "?from=3"),
    "completed, from 7 (its Output)": (_completed, "?from=7"),
    "completed, from 8 (the end)": (_completed, "?from=8"),
    "completed, from past the end": (_completed, "?from=99"),
    "completed, keep without from": (_completed, "?deployment=keep"),
    "completed, unknown deployment": (_completed, "?from=2&deployment=dp_11111111111111111111111"),
    "completed, unknown deployment without from": (_completed, "?deployment=dp_11111111111111111111111"),
    "completed, a deployment that is no id": (_completed, "?from=2&deployment=junk"),
    "completed, from not a number": (_completed, "?from=x"),
    "running": (_long_sleep, ""),
    "scheduled": (_delayed, ""),
    "a workflow's run": (_workflow, ""),
    "a workflow's run, from 1": (_workflow, "?from=1"),
    "a workflow's shared handler": (lambda i: _workflow(i, "status"), ""),
    "unknown": (lambda i: ids.new_invocation_id(), ""),
    "unknown, a deployment that is no id": (lambda i: ids.new_invocation_id(), "?deployment=junk"),
}


@pytest.mark.parametrize("case", list(CASES))
def test_answers_agree_with_restate_server(case: str, dev: DevServer, restate_server: tuple[str, str]) -> None:
    make, query = CASES[case]
    ingress, admin = restate_server
    on_restate = _restart(admin, make(ingress), query)
    on_torpor = _restart(dev.admin_url, make(dev.ingress_url), query)
    assert on_torpor.status_code == on_restate.status_code, (on_restate.text, on_torpor.text)
    if on_torpor.status_code == 200:
        assert set(on_torpor.json()) == set(on_restate.json()) == {"new_invocation_id"}
    else:
        assert {"code", "message"} <= set(on_torpor.json()), on_torpor.text


@pytest.mark.skipif(not RESTATE_CLI.exists(), reason=f"restate CLI not installed at {RESTATE_CLI}: run scripts/test.sh")
def test_restates_cli_restarts_as_new(dev: DevServer, tmp_path: Path) -> None:
    old, output = _place(dev.ingress_url)
    said = ok(restate(dev, "invocations", "restart-as-new", old, "--yes", home=tmp_path))
    new = re.findall(r"inv_1\w+", said.replace(old, ""))
    assert new, said
    assert _output(dev.ingress_url, new[0])["order_id"] == output["order_id"]


def _counter_restarts(ingress: str, admin: str) -> list[object]:
    """On one server: `Counter/add` 5 to a new key, its restart from 0 (adds again, reading the state
    anew), then from 1 (replays the copied state read: the first output again); each output."""
    key = f"restart-{uuid.uuid4().hex[:8]}"
    first = httpx.post(f"{ingress}/Counter/{key}/add", json=5, timeout=60)
    assert first.status_code == 200, first.text
    old = first.headers["x-restate-id"]
    outputs: list[object] = [first.json()]
    for query in ("", "?from=1"):
        reply = _restart(admin, old, query)
        assert reply.status_code == 200, reply.text
        attached = httpx.get(f"{ingress}/restate/invocation/{reply.json()['new_invocation_id']}/attach", timeout=60)
        outputs.append(attached.json())
    return outputs


def test_an_object_restarted_as_new_reads_its_state_as_restate_server_does(
    dev: DevServer, restate_server: tuple[str, str]
) -> None:
    on_restate = _counter_restarts(*restate_server)
    assert on_restate == [5, 10, 5]
    assert _counter_restarts(dev.ingress_url, dev.admin_url) == on_restate


def test_an_invocation_whose_journal_retention_ended_is_gone_for_a_restart(dev: DevServer) -> None:
    old, _ = _place(dev.ingress_url)
    record = dev.store.get_invocation(old)
    assert record is not None and record.journal_expires_at_ms
    # what the retention sweep does once the journal retention ended (the record stays: attach, output)
    assert dev.store.remove_journal(RetentionDue(old, 0, record.journal_expires_at_ms, record.expires_at_s))
    reply = _restart(dev.admin_url, old)
    assert reply.status_code == 410, reply.text
    assert "no longer retained" in reply.json()["message"]
