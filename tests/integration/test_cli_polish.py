"""The `torpor` CLI details a new user met: `--version`, `--status` by how an invocation ended,
awakeables printed and completed from the CLI, one confirmation rule, errors naming flags, a hint
when a URL points at the other API, service options in the API's names and units."""

from __future__ import annotations

import json
import sys
from collections.abc import Iterator

import httpx
import pytest
from click.testing import CliRunner, Result

from adapters.cli import VERSION, main
from adapters.local.dev import DevServer
from control_plane.settings import Settings
from tests.helpers.dev import describe, wait_for


@pytest.fixture(scope="module")
def dev(examples_url: str) -> Iterator[DevServer]:
    server = DevServer(ingress_port=0, admin_port=0, in_memory=True, settings=Settings(call_wait_ms=30_000))
    server.start()
    try:
        reply = httpx.post(f"{server.admin_url}/deployments", json={"uri": examples_url}, timeout=30)
        assert reply.status_code == 201, reply.text
        yield server
    finally:
        server.stop()


def torpor(dev: DevServer, *args: str, admin_url: str | None = None, ingress_url: str | None = None) -> Result:
    urls = ["--admin-url", admin_url or dev.admin_url, "--ingress-url", ingress_url or dev.ingress_url]
    return CliRunner().invoke(main, [*urls, *args], env={"COLUMNS": "200"}, catch_exceptions=False)


def send(dev: DevServer, path: str, body: object) -> str:
    return str(httpx.post(f"{dev.ingress_url}{path}", json=body, timeout=30).json()["invocationId"])


def test_version_flag_prints_the_version() -> None:
    for flag in ("--version", "-V"):
        result = CliRunner().invoke(main, [flag])
        assert result.exit_code == 0
        assert result.stdout.strip() == f"torpor {VERSION}"


def test_list_by_how_an_invocation_ended(dev: DevServer) -> None:
    failed = httpx.post(f"{dev.ingress_url}/Steps/fail_terminal", json="polish", timeout=30).headers["x-restate-id"]
    ok = httpx.post(f"{dev.ingress_url}/Greeter/greet", json="polish", timeout=30).headers["x-restate-id"]
    listed = json.loads(torpor(dev, "--json", "invocations", "list", "--status", "failed").stdout)["invocations"]
    ids = [i["id"] for i in listed]
    assert failed in ids
    assert ok not in ids
    contradiction = torpor(dev, "invocations", "list", "--status", "failed", "--completion", "killed")
    assert contradiction.exit_code == 2
    assert "contradict" in contradiction.stderr


def test_describe_prints_the_awaited_awakeable_and_the_cli_resolves_it(dev: DevServer) -> None:
    invocation_id = send(dev, "/Waits/awakeable/send", None)
    waiting = wait_for(lambda: describe(dev, invocation_id).get("awaiting_awakeables"), 15, "the awakeable")
    described = torpor(dev, "invocations", "describe", invocation_id)
    assert waiting[0] in described.stdout
    assert "torpor awakeables resolve ID" in described.stdout
    resolved = torpor(dev, "awakeables", "resolve", waiting[0], '"from the CLI"')
    assert resolved.exit_code == 0, resolved.output
    done = httpx.get(f"{dev.ingress_url}/restate/invocation/{invocation_id}/attach", timeout=30)
    assert done.json() == "got from the CLI"

    other = send(dev, "/Waits/awakeable/send", None)
    (awakeable,) = wait_for(lambda: describe(dev, other).get("awaiting_awakeables"), 15, "the awakeable")
    assert torpor(dev, "awakeables", "reject", awakeable, "no thanks").exit_code == 0
    failed = httpx.get(f"{dev.ingress_url}/restate/invocation/{other}/attach", timeout=30)
    assert "no thanks" in failed.json()["message"]


def test_no_question_before_an_error_that_needs_none(dev: DevServer, monkeypatch: pytest.MonkeyPatch) -> None:
    # as in a terminal (the package's `invocations` names the command group, hence sys.modules)
    monkeypatch.setattr(sys.modules["adapters.cli.invocations"], "interactive", lambda: True)
    monkeypatch.setattr(sys.modules["adapters.cli.client"], "interactive", lambda: True)
    done = httpx.post(f"{dev.ingress_url}/Greeter/greet", json="x", timeout=30).headers["x-restate-id"]
    for verb in ("cancel", "kill"):
        result = torpor(dev, "invocations", verb, done)
        assert result.exit_code == 1
        assert "already completed (succeeded)" in result.stderr
        assert "?" not in result.stderr  # no question was asked
    sleeping = send(dev, "/Waits/sleep/send", 60_000)
    wait_for(lambda: describe(dev, sleeping)["status"] == "suspended", 15, "the sleep")
    purge = torpor(dev, "invocations", "purge", sleeping)
    assert purge.exit_code == 1
    assert "not completed: cancel or kill it first" in purge.stderr
    asked = CliRunner().invoke(
        main, ["--admin-url", dev.admin_url, "invocations", "kill", sleeping], input="n\n", catch_exceptions=False
    )
    assert "Kill invocation" in asked.stderr  # a request that can succeed is asked about
    assert describe(dev, sleeping)["status"] == "suspended"
    assert torpor(dev, "invocations", "kill", sleeping, "--yes").exit_code == 0
    assert torpor(dev, "invocations", "purge", sleeping, "-y").exit_code == 0


def test_invoke_errors_name_flags_not_url_shapes(dev: DevServer) -> None:
    keyless = torpor(dev, "invoke", "Counter", "add", "1")
    assert keyless.exit_code == 1
    assert "pass its key with --key" in keyless.stderr
    assert "{key}" not in keyless.stderr
    keyed = torpor(dev, "invoke", "Greeter", "greet", '"x"', "--key", "k")
    assert "leave out --key" in keyed.stderr
    slashed = torpor(dev, "invoke", "Counter/k1/add", "1")
    assert slashed.exit_code == 2
    assert "torpor invoke Counter add --key k1" in slashed.stderr


def test_a_url_that_points_at_the_other_api_gets_a_hint(dev: DevServer) -> None:
    at_ingress = torpor(dev, "deployments", "list", admin_url=dev.ingress_url)
    assert at_ingress.exit_code == 1
    assert "does not look like Torpor's admin API" in at_ingress.stderr
    assert "--admin-url" in at_ingress.stderr
    at_admin = torpor(dev, "invoke", "Greeter", "greet", '"x"', ingress_url=dev.admin_url)
    assert at_admin.exit_code == 1
    assert "is Torpor's admin API, not the ingress" in at_admin.stderr


def test_config_view_shows_the_names_and_units_the_api_takes(dev: DevServer) -> None:
    assert httpx.patch(f"{dev.admin_url}/services/Greeter", json={"abort_timeout": "90s"}, timeout=10).is_success
    try:
        shown = torpor(dev, "services", "config", "view", "Greeter").stdout
        assert "abort_timeout" in shown
        assert "1m 30s" in shown
        assert "retry_policy.max_attempts" in shown
        assert "abortTimeout" not in shown
        assert "90000" not in shown
    finally:
        httpx.patch(f"{dev.admin_url}/services/Greeter", json={"abort_timeout": None}, timeout=10)


def test_purge_of_a_running_invocation_names_the_fix_without_a_terminal_too(dev: DevServer) -> None:
    sleeping = send(dev, "/Waits/sleep/send", 60_000)
    wait_for(lambda: describe(dev, sleeping)["status"] == "suspended", 15, "the sleep")
    refused = torpor(dev, "invocations", "purge", sleeping)
    assert refused.exit_code == 1
    assert "cancel or kill it first, then purge it" in refused.stderr
    torpor(dev, "invocations", "kill", sleeping, "-y")


def test_an_idempotency_key_on_a_workflow_run_names_the_flag(dev: DevServer) -> None:
    result = torpor(dev, "invoke", "Signup", "run", '"a@b.c"', "--key", "wf-flag", "--idempotency-key", "k")
    assert result.exit_code == 1
    assert "leave out --idempotency-key" in result.stderr
