"""`torpor state get|edit|clear`, `torpor services status`, `torpor services config patch` and the
`--force` rule of `torpor deployments remove`, against a real `DevServer` and the example services,
each command through click's `CliRunner` over HTTP; what a command changed is checked through the
admin API and the handlers themselves."""

from __future__ import annotations

import base64
import json
from collections.abc import Iterator
from typing import Any

import click
import httpx
import pytest

from adapters.local.dev import DevServer
from tests.integration.test_cli import admin_get, invocation_with_status, registered_dev, start_dev, torpor, wait_for


@pytest.fixture(scope="module")
def dev(moto_endpoint: str, examples_url: str) -> Iterator[DevServer]:
    with registered_dev(moto_endpoint, examples_url) as server:
        yield server


@pytest.fixture
def fresh_dev(moto_endpoint: str) -> Iterator[DevServer]:
    server = start_dev(moto_endpoint)
    try:
        yield server
    finally:
        server.stop()


def call(dev: DevServer, path: str, body: Any) -> Any:
    reply = httpx.post(f"{dev.ingress_url}/{path}", json=body, timeout=30)
    assert reply.status_code == 200, reply.text
    return reply.json()


def state_of(dev: DevServer, service: str, key: str) -> dict[str, bytes]:
    body = admin_get(dev, f"/services/{service}/state/{key}?encoding=base64")
    return {name: base64.b64decode(value) for name, value in body["state"].items()}


def editor_returning(monkeypatch: pytest.MonkeyPatch, edit: Any) -> list[str]:
    """Make `click.edit` call `edit(text)` and return what it returns; the texts it was given."""
    shown: list[str] = []

    def fake_edit(text: str, **_: Any) -> Any:
        shown.append(text)
        return edit(text)

    monkeypatch.setattr(click, "edit", fake_edit)
    return shown


# --- state ---------------------------------------------------------------------------------------


def test_state_get_shows_each_name_and_value_plain_and_as_the_apis_json(dev: DevServer) -> None:
    call(dev, "Counter/get-me/add", 5)

    table = torpor(dev, "state", "get", "Counter", "get-me")
    assert table.exit_code == 0, table.output
    assert "count" in table.stdout and "5" in table.stdout

    plain = torpor(dev, "state", "get", "Counter", "get-me", "--plain")
    assert json.loads(plain.stdout) == {"count": 5}

    api = json.loads(torpor(dev, "state", "get", "Counter", "get-me", "--json").stdout)
    assert api["state"] == {"count": base64.b64encode(b"5").decode()}
    assert api["version"]


def test_state_get_of_a_service_without_state_prints_why(dev: DevServer) -> None:
    result = torpor(dev, "state", "get", "Greeter", "x")
    assert result.exit_code == 1
    assert "only virtual objects and workflows have state" in result.stderr


def test_state_edit_replaces_the_state_and_the_handler_reads_it(
    dev: DevServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    call(dev, "Counter/edit-me/add", 3)
    shown = editor_returning(monkeypatch, lambda text: json.dumps({"count": 42, "note": "set by hand"}))

    result = torpor(dev, "state", "edit", "Counter", "edit-me")

    assert result.exit_code == 0, result.output
    assert json.loads(shown[0]) == {"count": 3}
    assert state_of(dev, "Counter", "edit-me") == {"count": b"42", "note": b'"set by hand"'}
    assert call(dev, "Counter/edit-me/add", 1) == 43


def test_state_edit_is_refused_if_the_state_changed_while_editing_unless_forced(
    dev: DevServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    call(dev, "Counter/raced/add", 1)

    def edit_while_a_handler_writes(text: str) -> str:
        call(dev, "Counter/raced/add", 10)
        return json.dumps({"count": 100})

    editor_returning(monkeypatch, edit_while_a_handler_writes)
    refused = torpor(dev, "state", "edit", "Counter", "raced")
    assert refused.exit_code == 1
    assert "changed since it was read" in refused.stderr and "--force" in refused.stderr
    assert state_of(dev, "Counter", "raced") == {"count": b"11"}

    forced = torpor(dev, "state", "edit", "Counter", "raced", "--force")
    assert forced.exit_code == 0, forced.output
    assert state_of(dev, "Counter", "raced") == {"count": b"100"}


def test_a_value_that_is_not_json_is_shown_and_edited_as_base64_with_binary(
    dev: DevServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    body = {"object_key": "raw", "new_state": {"blob": [0xFF, 0x00, 0x01]}}
    assert httpx.post(f"{dev.admin_url}/services/Counter/state", json=body, timeout=10).status_code == 202

    refused = torpor(dev, "state", "get", "Counter", "raw")
    assert refused.exit_code == 1
    assert "'blob' is not JSON" in refused.stderr and "--binary" in refused.stderr

    plain = torpor(dev, "state", "get", "Counter", "raw", "--binary", "--plain")
    assert json.loads(plain.stdout) == {"blob": base64.urlsafe_b64encode(b"\xff\x00\x01").decode()}

    new_blob = base64.urlsafe_b64encode(b"\xfe\xfd").decode()
    editor_returning(monkeypatch, lambda text: json.dumps({"blob": new_blob}))
    edited = torpor(dev, "state", "edit", "Counter", "raw", "--binary")
    assert edited.exit_code == 0, edited.output
    assert state_of(dev, "Counter", "raw") == {"blob": b"\xfe\xfd"}


def test_state_clear_of_one_key_then_of_every_key_of_the_service(dev: DevServer) -> None:
    for key in ("clear-a", "clear-b"):
        call(dev, f"LazyCounter/{key}/lazy_add", 2)

    one = torpor(dev, "state", "clear", "LazyCounter/clear-a")
    assert one.exit_code == 0, one.output
    assert state_of(dev, "LazyCounter", "clear-a") == {}
    assert state_of(dev, "LazyCounter", "clear-b") != {}

    every = torpor(dev, "state", "clear", "LazyCounter")
    assert every.exit_code == 0, every.output
    assert "Cleared the state of LazyCounter/clear-b." in every.stdout
    assert state_of(dev, "LazyCounter", "clear-b") == {}

    again = torpor(dev, "state", "clear", "LazyCounter")
    assert again.exit_code == 1
    assert "no state found for LazyCounter" in again.stderr


def test_the_state_routes_the_cli_reads_refuse_what_they_cannot_answer(dev: DevServer) -> None:
    hex_values = httpx.get(f"{dev.admin_url}/services/Counter/state/k?encoding=hex", timeout=10)
    assert hex_values.status_code == 400 and "encoding=base64" in hex_values.json()["message"]
    stateless = httpx.get(f"{dev.admin_url}/services/Greeter/state", timeout=10)
    assert stateless.status_code == 400 and "only virtual objects and workflows" in stateless.json()["message"]
    bad_limit = httpx.get(f"{dev.admin_url}/services/Counter/state?limit=0", timeout=10)
    assert bad_limit.status_code == 400 and "limit" in bad_limit.json()["message"]


# --- services config patch -----------------------------------------------------------------------


def test_config_patch_sets_the_options_given_in_restates_duration_forms(dev: DevServer) -> None:
    try:
        result = torpor(
            dev, "services", "config", "patch", "Greeter",
            "--inactivity-timeout", "1 hour", "--idempotency-retention", "90sec", "--abort-timeout", "PT1M30S",
            "--public", "false",
        )  # fmt: skip
        assert result.exit_code == 0, result.output
        assert "Applied to Greeter: abort_timeout, idempotency_retention, inactivity_timeout, public." in result.stdout
        service = admin_get(dev, "/services/Greeter")
        assert (service["inactivity_timeout"], service["idempotency_retention"]) == ("1h", "1m 30s")
        assert (service["abort_timeout"], service["public"]) == ("1m 30s", False)
    finally:
        reset = {"inactivity_timeout": None, "idempotency_retention": None, "abort_timeout": None, "public": None}
        httpx.patch(f"{dev.admin_url}/services/Greeter", json=reset, timeout=10)


def test_config_patch_with_a_bad_duration_names_the_forms_and_changes_nothing(dev: DevServer) -> None:
    before = admin_get(dev, "/services/Greeter")
    result = torpor(dev, "services", "config", "patch", "Greeter", "--journal-retention", "1 month")
    assert result.exit_code == 2
    assert "no fixed length" in result.stderr and "1h 30m" in result.stderr
    assert admin_get(dev, "/services/Greeter") == before


def test_config_patch_without_an_option_names_them(dev: DevServer) -> None:
    result = torpor(dev, "services", "config", "patch", "Greeter")
    assert result.exit_code == 2
    assert "--public" in result.stderr and "--inactivity-timeout" in result.stderr


# --- services status -----------------------------------------------------------------------------


def test_services_status_counts_invocations_by_status_and_shows_the_held_keys(
    fresh_dev: DevServer, examples_url: str
) -> None:
    assert httpx.post(f"{fresh_dev.admin_url}/deployments", json={"uri": examples_url}, timeout=30).is_success
    send = f"{fresh_dev.ingress_url}/restate/send"
    sleeping = httpx.post(f"{send}/Waits/sleep", json=600_000, timeout=10).json()["invocationId"]
    holder = httpx.post(
        f"{send}/Counter/busy/add_after_sleep", json={"ms": 600_000, "delta": 1}, timeout=10
    ).json()["invocationId"]
    for invocation_id in (sleeping, holder):
        wait_for(invocation_with_status(fresh_dev, invocation_id, "suspended"), "the sleeps to suspend")
    queued = httpx.post(f"{send}/Counter/busy/add", json=1, timeout=10).json()["invocationId"]
    wait_for(invocation_with_status(fresh_dev, queued, "pending"), "the call to queue")
    call(fresh_dev, "Greeter/greet", "done")  # completed: not counted

    summary = json.loads(torpor(fresh_dev, "services", "status", "--json").stdout)
    services = {s["name"]: s for s in summary["services"]}
    assert services["Waits"]["handlers"] == {"sleep": {"suspended": 1}}
    assert services["Counter"]["handlers"] == {"add_after_sleep": {"suspended": 1}, "add": {"pending": 1}}
    assert services["Counter"]["oldest"]["id"] == queued  # the oldest not suspended
    assert services["Greeter"]["handlers"] == {}
    assert summary["active_keys"] == [
        {"service": "Counter", "key": "busy", "holder": holder, "holder_status": "suspended", "queued": 1}
    ]

    table = torpor(fresh_dev, "services", "status", "Counter")
    assert table.exit_code == 0, table.output
    assert "SUSPENDED" in table.stdout and "add_after_sleep" in table.stdout and "Waits" not in table.stdout
    assert "Active keys" in table.stdout and holder in table.stdout


# --- deployments remove --------------------------------------------------------------------------


def test_remove_of_the_latest_deployment_of_live_services_asks_for_force(
    fresh_dev: DevServer, examples_url: str
) -> None:
    deployment = httpx.post(f"{fresh_dev.admin_url}/deployments", json={"uri": examples_url}, timeout=30).json()

    refused = torpor(fresh_dev, "deployments", "remove", deployment["id"], "--yes")
    assert refused.exit_code == 1
    assert "serves the latest revision of Bench, Calls, Chain, Counter" in refused.stderr
    assert "pass --force to remove it anyway" in refused.stderr
    assert len(admin_get(fresh_dev, "/services")["services"]) == 11

    forced = torpor(fresh_dev, "deployments", "remove", deployment["id"], "--force")
    assert forced.exit_code == 0, forced.output
    assert admin_get(fresh_dev, "/services") == {"services": []}


def test_remove_of_a_replaced_deployment_is_refused_only_while_invocations_are_pinned_to_it(
    fresh_dev: DevServer, examples_url: str
) -> None:
    old = httpx.post(f"{fresh_dev.admin_url}/deployments", json={"uri": examples_url}, timeout=30).json()
    sent = httpx.post(f"{fresh_dev.ingress_url}/restate/send/Waits/sleep", json=600_000, timeout=10).json()
    wait_for(invocation_with_status(fresh_dev, sent["invocationId"], "suspended"), "the sleep to suspend")
    same_services = examples_url.replace("127.0.0.1", "localhost")
    new = httpx.post(f"{fresh_dev.admin_url}/deployments", json={"uri": same_services}, timeout=30).json()
    assert {s["deployment_id"] for s in admin_get(fresh_dev, "/services")["services"]} == {new["id"]}

    refused = torpor(fresh_dev, "deployments", "remove", old["id"])
    assert refused.exit_code == 1
    assert "1 unfinished invocation(s) pinned to it" in refused.stderr
    assert "(pass --force to remove it anyway)" in refused.stderr

    httpx.patch(f"{fresh_dev.admin_url}/invocations/{sent['invocationId']}/kill", timeout=10)
    wait_for(invocation_with_status(fresh_dev, sent["invocationId"], "completed"), "the kill")
    drained = torpor(fresh_dev, "deployments", "remove", old["id"])
    assert drained.exit_code == 0, drained.output
    assert [d["id"] for d in admin_get(fresh_dev, "/deployments")["deployments"]] == [new["id"]]
    assert len(admin_get(fresh_dev, "/services")["services"]) == 11
