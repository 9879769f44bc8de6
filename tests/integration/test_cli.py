"""The `torpor` CLI's client commands against a real `DevServer` and the example services.

Each command runs in-process through click's `CliRunner`, over HTTP to the dev server's admin API
and ingress (both on free ports, a table of their own on the session's moto server); what a command
changed is checked through the admin API with httpx, not through the CLI itself.
"""

from __future__ import annotations

from contextlib import contextmanager

import json
import re
import subprocess
import sys
import time
import uuid
from collections.abc import Callable, Iterator
from importlib import metadata
from pathlib import Path
from typing import Any

import httpx
import pytest
from click.testing import CliRunner, Result

from adapters.cli import main
from adapters.local.dev import DevServer
from control_plane.retry import RetryPolicy
from control_plane.settings import Settings
from tests.helpers.moto import unique_table_name
from tests.helpers.services import REPO_ROOT, free_port

SETTINGS = Settings(
    inactivity_timeout_ms=10_000,
    lease_margin_ms=2_000,
    call_wait_ms=20_000,
    retry_policy=RetryPolicy(initial_interval_ms=200, max_attempts=5),
)
EXAMPLE_SERVICES = {
    "Bench",
    "Calls",
    "Chain",
    "Counter",
    "Greeter",
    "LazyCounter",
    "OrderService",
    "Sequence",
    "Signup",
    "Steps",
    "Waits",
}
UNKNOWN_INVOCATION = "inv_1" + "0" * 22
INVOCATION_ID = re.compile(r"inv_[0-9A-Za-z]+")


def torpor(dev: DevServer, *args: str, env: dict[str, str] | None = None) -> Result:
    """Run `torpor --admin-url … --ingress-url … ARGS` in-process; exceptions other than click's propagate."""
    runner = CliRunner()
    return runner.invoke(
        main,
        ["--admin-url", dev.admin_url, "--ingress-url", dev.ingress_url, *args],
        env={"COLUMNS": "200", **(env or {})},
        catch_exceptions=False,
    )


def admin_get(dev: DevServer, path: str) -> Any:
    reply = httpx.get(f"{dev.admin_url}{path}", timeout=10)
    assert reply.status_code == 200, reply.text
    return reply.json()


def wait_for(condition: Callable[[], Any], what: str, timeout_s: float = 30.0) -> Any:
    """Poll `condition` until it returns something truthy, failing after `timeout_s`."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        value = condition()
        if value:
            return value
        time.sleep(0.05)
    pytest.fail(f"timed out after {timeout_s} s waiting for {what}")


def invocation_with_status(dev: DevServer, invocation_id: str, status: str) -> Callable[[], dict[str, Any] | None]:
    def check() -> dict[str, Any] | None:
        invocation: dict[str, Any] = admin_get(dev, f"/invocations/{invocation_id}")
        return invocation if invocation["status"] == status else None

    return check


def start_dev(moto_endpoint: str) -> DevServer:
    server = DevServer(
        ingress_port=0, admin_port=0, dynamodb_endpoint=moto_endpoint, table=unique_table_name(), settings=SETTINGS
    )
    server.start()
    return server


@contextmanager
def registered_dev(moto_endpoint: str, services_url: str) -> Iterator[DevServer]:
    """A dev server with the services at `services_url` registered through the admin API; stopped after."""
    server = start_dev(moto_endpoint)
    try:
        reply = httpx.post(f"{server.admin_url}/deployments", json={"uri": services_url}, timeout=30)
        assert reply.status_code == 201, reply.text
        yield server
    finally:
        server.stop()


@pytest.fixture(scope="module")
def registered(moto_endpoint: str, examples_url: str) -> Iterator[tuple[DevServer, Result]]:
    """A dev server with the examples registered by `torpor deployments register`, and that command's result."""
    server = start_dev(moto_endpoint)
    try:
        result = torpor(server, "deployments", "register", examples_url)
        assert result.exit_code == 0, result.output
        yield server, result
    finally:
        server.stop()


@pytest.fixture
def dev(registered: tuple[DevServer, Result]) -> DevServer:
    """The module's dev server, the examples registered."""
    return registered[0]


@pytest.fixture
def fresh_dev(moto_endpoint: str) -> Iterator[DevServer]:
    """A dev server of this test alone, with nothing registered."""
    server = start_dev(moto_endpoint)
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture(scope="module")
def empty_dev(moto_endpoint: str) -> Iterator[DevServer]:
    """A dev server with nothing registered, shared by the tests whose registration is refused: each
    checks that nothing got registered, so it stays empty (a start takes ~2 s)."""
    server = start_dev(moto_endpoint)
    try:
        yield server
    finally:
        server.stop()


# --- deployments ---------------------------------------------------------------------------------


def test_register_prints_the_deployment_id_and_the_services_it_found(registered: tuple[DevServer, Result]) -> None:
    dev, result = registered
    [deployment] = admin_get(dev, "/deployments")["deployments"]
    assert f"Registered deployment {deployment['id']} at {deployment['uri']}" in result.stdout
    for service in EXAMPLE_SERVICES:
        assert re.search(rf"│ {service} +│", result.stdout), service
    assert re.search(r"│ Greeter +│ Service +│ greet +│ +1 │ " + deployment["id"], result.stdout)


def test_register_with_json_prints_the_admin_apis_answer_and_sends_the_headers(
    fresh_dev: DevServer, examples_url: str
) -> None:
    result = torpor(fresh_dev, "--json", "deployments", "register", examples_url, "--header", "X-Team=payments")
    assert result.exit_code == 0, result.output
    answer = json.loads(result.stdout)
    assert answer["id"].startswith("dp_")
    assert {s["name"] for s in answer["services"]} == EXAMPLE_SERVICES
    stored = admin_get(fresh_dev, f"/deployments/{answer['id']}")
    assert stored["additional_headers"] == {"X-Team": "payments"}


def test_register_an_unpinned_lambda_arn_prints_the_admin_apis_error(empty_dev: DevServer) -> None:
    result = torpor(empty_dev, "deployments", "register", "arn:aws:lambda:us-east-1:123456789012:function:greeter")
    assert result.exit_code == 1
    assert result.stderr.startswith("Error: an unqualified ARN can change the code under a running invocation")
    assert 'pass "force": true (torpor deployments register --force)' in result.stderr
    assert "Traceback" not in result.output
    assert admin_get(empty_dev, "/deployments") == {"deployments": []}


def test_register_a_url_that_does_not_answer_discovery_prints_why(empty_dev: DevServer) -> None:
    url = f"http://127.0.0.1:{free_port()}"
    result = torpor(empty_dev, "deployments", "register", url)
    assert result.exit_code == 1
    assert f"discovery of {url} failed" in result.stderr


def test_a_header_without_equals_is_a_usage_error_naming_the_form(empty_dev: DevServer, examples_url: str) -> None:
    result = torpor(empty_dev, "deployments", "register", examples_url, "--header", "X-Team")
    assert result.exit_code == 2
    assert "'X-Team' is not NAME=VALUE" in result.stderr
    assert admin_get(empty_dev, "/deployments") == {"deployments": []}


def test_deployments_list_with_json_is_the_admin_apis_json(dev: DevServer, examples_url: str) -> None:
    result = torpor(dev, "deployments", "list", "--json")
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout) == admin_get(dev, "/deployments")
    assert json.loads(result.stdout)["deployments"][0]["uri"] == examples_url


def test_the_admin_url_can_come_from_the_environment(dev: DevServer) -> None:
    result = CliRunner().invoke(
        main, ["--json", "deployments", "list"], env={"TORPOR_ADMIN_URL": dev.admin_url}, catch_exceptions=False
    )
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout) == admin_get(dev, "/deployments")


def test_deployments_list_and_describe_show_the_deployment(dev: DevServer, examples_url: str) -> None:
    [deployment] = admin_get(dev, "/deployments")["deployments"]
    listed = torpor(dev, "deployments", "list")
    assert listed.exit_code == 0, listed.output
    assert re.search(rf"│ {deployment['id']} +│ {re.escape(examples_url)} +│ Greeter, ", listed.stdout)
    described = torpor(dev, "deployments", "describe", deployment["id"])
    assert described.exit_code == 0, described.output
    assert re.search(rf"URI +{re.escape(examples_url)}", described.stdout)
    assert re.search(r"│ Counter +│ VirtualObject +│ add, get, ", described.stdout)


def test_describe_an_unknown_deployment_prints_the_404_message(dev: DevServer) -> None:
    result = torpor(dev, "deployments", "describe", "dp_unknown")
    assert result.exit_code == 1
    assert result.stderr.startswith("Error: deployment dp_unknown not found")


def test_remove_is_refused_while_an_invocation_is_pinned_and_forced_with_force(
    fresh_dev: DevServer, examples_url: str
) -> None:
    deployment = httpx.post(f"{fresh_dev.admin_url}/deployments", json={"uri": examples_url}, timeout=30).json()
    sent = httpx.post(f"{fresh_dev.ingress_url}/restate/send/Waits/sleep", json=60_000, timeout=10).json()
    wait_for(invocation_with_status(fresh_dev, sent["invocationId"], "suspended"), "the sleep to suspend")

    refused = torpor(fresh_dev, "deployments", "remove", deployment["id"])
    assert refused.exit_code == 1  # it serves its services' latest revision (test_cli_verbs.py: pinned alone)
    assert "serves the latest revision of" in refused.stderr
    assert "pass --force to remove it anyway" in refused.stderr
    assert len(admin_get(fresh_dev, "/deployments")["deployments"]) == 1

    forced = torpor(fresh_dev, "deployments", "remove", deployment["id"], "--force")
    assert forced.exit_code == 0, forced.output
    assert forced.stdout.strip() == f"Removed deployment {deployment['id']}"
    assert admin_get(fresh_dev, "/deployments") == {"deployments": []}
    assert admin_get(fresh_dev, "/services") == {"services": []}


# --- services ------------------------------------------------------------------------------------


def test_services_list_shows_every_example_service(dev: DevServer) -> None:
    result = torpor(dev, "services", "list")
    assert result.exit_code == 0, result.output
    assert set(re.findall(r"^│ (\w+) +│", result.stdout, re.MULTILINE)) == EXAMPLE_SERVICES
    assert re.search(r"│ Signup +│ Workflow +│ run, confirm, ", result.stdout)


def test_services_describe_shows_handlers_with_type_and_content_types(dev: DevServer) -> None:
    result = torpor(dev, "services", "describe", "Counter")
    assert result.exit_code == 0, result.output
    assert re.search(r"Type +VirtualObject", result.stdout)
    assert re.search(r"│ add +│ Exclusive +│ JSON integer +│ JSON integer +│", result.stdout)
    assert re.search(r"│ get +│ Shared +│ none +│ JSON integer +│", result.stdout)
    assert re.search(r"│ reset +│ Exclusive +│ none +│ JSON string +│", result.stdout)


def test_services_describe_with_json_is_the_admin_apis_json(dev: DevServer) -> None:
    result = torpor(dev, "--json", "services", "describe", "Greeter")
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout) == admin_get(dev, "/services/Greeter")


def test_services_describe_of_an_unknown_service_prints_the_404_message(dev: DevServer) -> None:
    result = torpor(dev, "services", "describe", "Nobody")
    assert result.exit_code == 1
    reply = httpx.get(f"{dev.admin_url}/services/Nobody", timeout=10)
    assert reply.status_code == 404
    assert result.stderr == f"Error: {reply.json()['message']}\n"
    assert "register the deployment that hosts it with torpor deployments register (POST /deployments" in result.stderr


# --- invoke ----------------------------------------------------------------------------------------


def test_invoke_prints_the_handlers_result(dev: DevServer) -> None:
    result = torpor(dev, "invoke", "Greeter", "greet", '"Ann"')
    assert result.exit_code == 0, result.output
    assert result.stdout == '"Hello, Ann!"\n'
    [invocation_id] = INVOCATION_ID.findall(result.stderr)
    assert admin_get(dev, f"/invocations/{invocation_id}")["completion_output"] == "Hello, Ann!"


def test_invoke_with_json_prints_the_output_as_json(dev: DevServer) -> None:
    result = torpor(dev, "--json", "invoke", "Greeter", "greet", '"Bo"')
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout) == "Hello, Bo!"


def test_invoke_a_virtual_object_with_a_key(dev: DevServer) -> None:
    key = f"k-{uuid.uuid4().hex[:8]}"
    first = torpor(dev, "invoke", "Counter", "add", "1", "--key", key)
    assert first.exit_code == 0, first.output
    assert first.stdout == "1\n"
    second = torpor(dev, "invoke", "Counter", "add", "2", "--key", key)
    assert second.stdout == "3\n"
    assert admin_get(dev, f"/services/Counter/state/{key}")["state"] == {"count": 3}


def test_invoke_a_terminal_failure_exits_1_with_the_code_and_message(dev: DevServer) -> None:
    result = torpor(dev, "invoke", "Steps", "fail_terminal", '"card declined"')
    assert result.exit_code == 1
    assert re.fullmatch(r"Error: invocation inv_\w+ failed with code 422: card declined\n", result.stderr)


def test_invoke_an_unknown_handler_prints_the_ingress_message(dev: DevServer) -> None:
    result = torpor(dev, "invoke", "Greeter", "shout", '"x"')
    assert result.exit_code == 1
    assert "'shout'" in result.stderr
    assert "Traceback" not in result.output


def test_invoke_with_an_argument_that_is_not_json_is_a_usage_error(dev: DevServer) -> None:
    result = torpor(dev, "invoke", "Greeter", "greet", "Ann")
    assert result.exit_code == 2
    assert "'Ann' is not JSON" in result.stderr
    assert "'\"Ann\"'" in result.stderr


def test_delay_without_send_is_a_usage_error(dev: DevServer) -> None:
    result = torpor(dev, "invoke", "Greeter", "greet", '"x"', "--delay", "10s")
    assert result.exit_code == 2
    assert "--delay needs --send" in result.stderr


def test_send_prints_the_id_and_describe_shows_the_journal(dev: DevServer) -> None:
    sent = torpor(dev, "invoke", "Steps", "one_step", "41", "--send")
    assert sent.exit_code == 0, sent.output
    [invocation_id] = INVOCATION_ID.findall(sent.stdout)
    assert re.search(r"Status +Accepted", sent.stdout)
    wait_for(invocation_with_status(dev, invocation_id, "completed"), "the sent invocation to complete")

    described = torpor(dev, "invocations", "describe", invocation_id)
    assert described.exit_code == 0, described.output
    out = described.stdout
    assert re.search(r"Target +Steps/one_step", out)
    assert re.search(r"Status +completed \(succeeded\)", out)
    assert re.search(r"Attempts +2", out)
    assert re.search(r"Output +42", out)
    assert "Journal (4 entries)" in out
    rows = re.findall(r"^│ +(\d+) │ (\w+) +│ ([\w-]*) +│ (.*?) +│$", out, re.MULTILINE)
    assert rows == [
        ("0", "Input", "", "41"),
        ("1", "Run", "add-one", ""),
        ("2", "RunCompletion", "", "42"),
        ("3", "Output", "", "42"),
    ]


def test_describe_shows_a_call_to_a_virtual_object_with_its_key(dev: DevServer) -> None:
    key = f"k-{uuid.uuid4().hex[:8]}"
    called = httpx.post(f"{dev.ingress_url}/Calls/count_to", json={"n": 1, "key": key}, timeout=30)
    assert called.status_code == 200, called.text
    invocation_id = called.headers["x-restate-id"]
    [call] = [e for e in admin_get(dev, f"/invocations/{invocation_id}")["journal"] if e["type"] == "Call"]
    assert (call["target"], call["key"]) == ("Counter/add", key)

    described = torpor(dev, "invocations", "describe", invocation_id)
    assert described.exit_code == 0, described.output
    assert re.search(rf"│ \d+ │ Call +│ +│ → Counter/{key}/add {call['invoked_id']} +│", described.stdout)


def test_the_ingress_refuses_a_key_that_is_not_utf8_once_decoded(dev: DevServer) -> None:
    reply = httpx.post(f"{dev.ingress_url}/Counter/%ff/add", json=1, timeout=10)
    assert reply.status_code == 400
    assert reply.json() == {
        "code": 400,
        "message": "path segment '%ff' is not valid UTF-8 after percent-decoding",
        "source": "ingress",
    }


def test_describe_with_json_is_the_admin_apis_json(dev: DevServer) -> None:
    called = httpx.post(f"{dev.ingress_url}/Greeter/greet", json="Cy", timeout=30)
    invocation_id = called.headers["x-restate-id"]
    result = torpor(dev, "invocations", "describe", invocation_id, "--json")
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout) == admin_get(dev, f"/invocations/{invocation_id}")


def test_a_delayed_send_is_scheduled_and_kill_completes_it(dev: DevServer) -> None:
    sent = torpor(dev, "invoke", "Greeter", "greet", '"later"', "--send", "--delay", "10m")
    assert sent.exit_code == 0, sent.output
    [invocation_id] = INVOCATION_ID.findall(sent.stdout)
    assert re.search(r"Starts at +\d{4}-\d\d-\d\dT", sent.stdout)
    assert admin_get(dev, f"/invocations/{invocation_id}")["status"] == "scheduled"
    described = torpor(dev, "invocations", "describe", invocation_id)
    assert described.exit_code == 0, described.output
    assert "Journal (1 entry)" in described.stdout

    killed = torpor(dev, "invocations", "kill", invocation_id)
    assert killed.exit_code == 0, killed.output
    assert f"Killed {invocation_id}" in killed.stdout
    invocation = admin_get(dev, f"/invocations/{invocation_id}")
    assert invocation["status"] == "completed"
    assert invocation["completion_failure"]["code"] == 409


# --- invocations -----------------------------------------------------------------------------------


def test_describe_a_suspended_invocation_shows_its_wake_up_and_what_it_waits_for(dev: DevServer) -> None:
    sent = httpx.post(f"{dev.ingress_url}/restate/send/Waits/sleep", json=600_000, timeout=10).json()
    invocation_id = sent["invocationId"]
    invocation = wait_for(invocation_with_status(dev, invocation_id, "suspended"), "the sleep to suspend")

    described = torpor(dev, "invocations", "describe", invocation_id)
    assert described.exit_code == 0, described.output
    assert re.search(r"Status +suspended", described.stdout)
    assert re.search(rf"Wakes up at +{re.escape(invocation['wake_up_at'])}", described.stdout)
    assert re.search(rf"Waiting on +Sleep #1 until {re.escape(invocation['wake_up_at'])}", described.stdout)
    assert re.search(r"│ 1 │ Sleep +│ +│ wakes up at ", described.stdout)

    cancelled = torpor(dev, "invocations", "cancel", invocation_id)
    assert cancelled.exit_code == 0, cancelled.output
    assert cancelled.stdout.startswith(f"Cancel requested for {invocation_id}")
    done = wait_for(invocation_with_status(dev, invocation_id, "completed"), "the cancelled sleep to complete")
    assert done["completion_failure"]["code"] == 409
    assert re.search(r"Status +completed \(cancelled\)", torpor(dev, "invocations", "describe", invocation_id).stdout)
    listed = torpor(dev, "invocations", "list", "--completion", "cancelled", "--limit", "1000")
    assert listed.exit_code == 0, listed.output
    assert re.search(rf"│ {invocation_id} +│ Waits/sleep +│ completed \(cancelled\)", listed.stdout)
    assert "(succeeded)" not in listed.stdout


@pytest.mark.parametrize("action", ["cancel", "kill"])
def test_cancel_or_kill_of_an_unknown_invocation_exits_1_with_the_404_message(dev: DevServer, action: str) -> None:
    result = torpor(dev, "invocations", action, UNKNOWN_INVOCATION)
    assert result.exit_code == 1
    assert result.stderr == f"Error: invocation {UNKNOWN_INVOCATION} not found\n"
    assert result.stdout == ""


def test_invocations_list_filters_by_service_and_status(dev: DevServer) -> None:
    called = httpx.post(f"{dev.ingress_url}/Greeter/greet", json="Di", timeout=30)
    invocation_id = called.headers["x-restate-id"]

    listed = torpor(dev, "invocations", "list", "--service", "Greeter", "--status", "completed", "--limit", "1000")
    assert listed.exit_code == 0, listed.output
    assert re.search(rf"│ {invocation_id} +│ Greeter/greet +│ completed \(succeeded\) +│ +1 │", listed.stdout)
    assert "Steps/" not in listed.stdout

    as_json = torpor(dev, "--json", "invocations", "list", "--service", "Greeter", "--limit", "1")
    assert as_json.exit_code == 0, as_json.output
    [newest] = json.loads(as_json.stdout)["invocations"]
    assert newest["target_service_name"] == "Greeter"

    none = torpor(dev, "invocations", "list", "--service", "Nobody")
    assert none.stdout == "No invocations match those filters.\n"


def test_invocations_list_with_an_unknown_status_names_the_statuses_and_completion_kinds(dev: DevServer) -> None:
    result = torpor(dev, "invocations", "list", "--status", "asleep")
    assert result.exit_code == 2
    assert "Invalid value for '--status': 'asleep' is not one of 'pending', " in result.stderr
    assert "'succeeded', 'failed', 'cancelled', 'killed'" in result.stderr


# --- unreachable APIs and the entry points --------------------------------------------------------


def test_an_unreachable_admin_api_names_torpor_dev_and_the_flag() -> None:
    url = f"http://127.0.0.1:{free_port()}"
    result = CliRunner().invoke(main, ["--admin-url", url, "deployments", "list"], catch_exceptions=False)
    assert result.exit_code == 1
    assert result.stderr.startswith(f"Error: cannot reach the admin API at {url}: ")
    assert result.stderr.endswith("; start it with `torpor dev` or pass --admin-url\n")


def test_an_unreachable_ingress_names_torpor_dev_and_the_flag() -> None:
    url = f"http://127.0.0.1:{free_port()}"
    result = CliRunner().invoke(main, ["--ingress-url", url, "invoke", "Greeter", "greet", '"x"'])
    assert result.exit_code == 1
    assert result.stderr.startswith(f"Error: cannot reach the ingress at {url}: ")
    assert result.stderr.endswith("; start it with `torpor dev` or pass --ingress-url\n")


def test_an_admin_url_that_is_not_a_url_is_a_usage_error() -> None:
    result = CliRunner().invoke(main, ["--admin-url", "localhost:9070", "services", "list"])
    assert result.exit_code == 2
    assert "'localhost:9070' is not a URL: write e.g. http://127.0.0.1:9070" in result.stderr


def test_python_dash_m_adapters_cli_runs_the_same_group() -> None:
    done = subprocess.run(
        [sys.executable, "-m", "adapters.cli", "version"],
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout == f"torpor {metadata.version('torpor')}\n"  # the installed distribution's (pyproject.toml)


def test_invoke_with_an_idempotency_key_runs_once_and_pause_resume_purge(dev: DevServer) -> None:
    first = torpor(dev, "invoke", "Steps", "one_step", "1", "--idempotency-key", "cli-k1")
    again = torpor(dev, "invoke", "Steps", "one_step", "5", "--idempotency-key", "cli-k1")
    assert first.exit_code == 0, first.output
    assert again.exit_code == 0, again.output
    assert first.stdout.strip() == again.stdout.strip() == "2"
    sent = torpor(dev, "--json", "invoke", "Waits", "sleep", "60000", "--send")
    invocation_id = json.loads(sent.stdout)["invocationId"]
    assert torpor(dev, "invocations", "pause", invocation_id).exit_code == 0
    assert admin_get(dev, f"/invocations/{invocation_id}")["status"] == "paused"
    assert torpor(dev, "invocations", "resume", invocation_id).exit_code == 0
    # killed once it sleeps again: moto applies concurrent conditional writes to one item without
    # serialising them (DynamoDB does; tests/races checks that on dynalite), so no worker races the kill
    wait_for(lambda: admin_get(dev, f"/invocations/{invocation_id}")["status"] == "suspended", "the sleep")
    assert torpor(dev, "invocations", "kill", invocation_id, "--yes").exit_code == 0
    purged = torpor(dev, "invocations", "purge", invocation_id)
    assert purged.exit_code == 0, purged.output
    refused = torpor(dev, "invocations", "purge", invocation_id)
    assert refused.exit_code == 1
    assert "not found" in refused.output


def test_services_config_edit_applies_the_edited_json_and_view_shows_the_source(
    dev: DevServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    def fake_editor(text: str, extension: str) -> str:
        assert '"inactivity_timeout": null' in text
        return text.replace('"inactivity_timeout": null', '"inactivity_timeout": "45s"')

    monkeypatch.setattr("click.edit", fake_editor)
    try:
        edited = torpor(dev, "services", "config", "edit", "Greeter")
        assert edited.exit_code == 0, edited.output
        viewed = torpor(dev, "--json", "services", "config", "view", "Greeter")
        assert json.loads(viewed.stdout)["inactivityTimeout"] == {"value": 45000, "source": "admin override"}
    finally:
        admin = httpx.patch(f"{dev.admin_url}/services/Greeter", json={"inactivity_timeout": None})
        assert admin.status_code == 200


def test_services_config_edit_shows_the_current_overrides_and_null_removes_one(
    dev: DevServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    overrides = {"inactivity_timeout": "45s", "abort_timeout": "2m", "retry_policy": {"max_attempts": 7}}
    assert httpx.patch(f"{dev.admin_url}/services/Greeter", json=overrides, timeout=10).status_code == 200
    shown: list[dict[str, Any]] = []

    def null_the_inactivity_timeout(text: str, extension: str) -> str:
        shown.append(json.loads(text))
        return text.replace('"inactivity_timeout": "45s"', '"inactivity_timeout": null')

    try:
        monkeypatch.setattr("click.edit", lambda text, extension: text)
        unchanged = torpor(dev, "services", "config", "edit", "Greeter")
        assert unchanged.exit_code == 0, unchanged.output
        assert unchanged.stdout.strip() == "No change."

        monkeypatch.setattr("click.edit", null_the_inactivity_timeout)
        edited = torpor(dev, "services", "config", "edit", "Greeter")
        assert edited.exit_code == 0, edited.output
        assert shown == [
            {
                "inactivity_timeout": "45s",
                "abort_timeout": "2m",
                "journal_retention": None,
                "idempotency_retention": None,
                "public": None,
                "retry_policy": {"max_attempts": 7},
            }
        ]
        assert edited.stdout.strip() == "Applied to Greeter: inactivity_timeout (override removed)."
        config = json.loads(torpor(dev, "--json", "services", "config", "view", "Greeter").stdout)
        assert config["inactivityTimeout"]["source"] != "admin override"
        assert config["abortTimeout"] == {"value": 120000, "source": "admin override"}
        assert config["retryPolicyMaxAttempts"] == {"value": 7, "source": "admin override"}
    finally:
        cleared = {"inactivity_timeout": None, "abort_timeout": None, "retry_policy": None}
        assert httpx.patch(f"{dev.admin_url}/services/Greeter", json=cleared, timeout=10).status_code == 200


def test_workflow_completion_retention_is_a_workflows_option_only(dev: DevServer) -> None:
    counter = json.loads(torpor(dev, "--json", "services", "config", "view", "Counter").stdout)
    signup = json.loads(torpor(dev, "--json", "services", "config", "view", "Signup").stdout)
    assert "workflowCompletionRetention" not in counter
    assert "workflowCompletionRetention" in signup  # a workflow
    refused = httpx.patch(f"{dev.admin_url}/services/Counter", json={"workflow_completion_retention": "1h"}, timeout=10)
    assert refused.status_code == 400
    assert refused.json()["message"].startswith(
        "workflow_completion_retention applies to workflows only; 'Counter' is a virtual object"
    )
    assert json.loads(torpor(dev, "--json", "services", "config", "view", "Counter").stdout) == counter


def test_register_with_a_google_id_token_asks_for_one_and_names_missing_credentials(
    empty_dev: DevServer, examples_url: str, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setenv("GOOGLE_APPLICATION_CREDENTIALS", str(tmp_path / "missing.json"))
    result = torpor(empty_dev, "deployments", "register", examples_url, "--audience", "https://x.a.run.app", "--yes")
    assert result.exit_code == 1
    assert "GOOGLE_APPLICATION_CREDENTIALS" in result.stderr
    assert admin_get(empty_dev, "/deployments") == {"deployments": []}
    arn = "arn:aws:lambda:us-east-1:123456789012:function:greeter:1"
    misused = torpor(empty_dev, "deployments", "register", arn, "--google-id-token", "--yes")
    assert misused.exit_code == 2
    assert "apply to Cloud Run URLs" in misused.stderr
