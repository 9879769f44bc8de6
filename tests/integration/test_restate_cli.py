"""Restate's own CLI (`restate` 1.7.12, npm `@restatedev/restate`) against `torpor dev`.

The real binary runs in a subprocess, pointed at a `DevServer`'s admin API and ingress with
`RESTATE_ADMIN_URL` / `RESTATE_INGRESS_URL` (and a config home of its own); what a command changed
is checked through Torpor's admin API with httpx. `scripts/test.sh` installs the CLI into
`.cache/restate-cli/`; without it these tests are skipped.

The CLI finds invocations and reads state with SQL (`POST /query`), parsing the invocation ids it
reads as restate-server's (which Torpor's are); the admin routes it then calls are also checked
directly with the request the CLI sends.
"""

from __future__ import annotations

import asyncio
import os
import platform
import re
import stat
import subprocess
import sys
import textwrap
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from openapi_schema_validator import OAS31Validator
from openapi_spec_validator import validate as validate_openapi

from adapters.local.dev import DevServer
from control_plane import ids
from control_plane.retry import RetryPolicy
from control_plane.settings import Settings
from tests.helpers.moto import unique_table_name
from tests.helpers.services import REPO_ROOT

_ARCH = {"x86_64": "x64", "aarch64": "arm64"}.get(platform.machine(), platform.machine())
RESTATE_CLI = REPO_ROOT / f".cache/restate-cli/node_modules/@restatedev/restate-linux-{_ARCH}/bin/restate"
SETTINGS = Settings(
    inactivity_timeout_ms=10_000,
    lease_margin_ms=2_000,
    call_wait_ms=20_000,
    retry_policy=RetryPolicy(initial_interval_ms=200, max_attempts=5),
)
ANSI = re.compile(r"\x1b\[[0-9;]*m")

pytestmark = pytest.mark.skipif(
    not RESTATE_CLI.exists(), reason=f"restate CLI not installed at {RESTATE_CLI}: run scripts/test.sh"
)


def restate(
    dev: DevServer, *args: str, home: Path, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    """Run `restate ARGS` against `dev`; `.stdout` and `.stderr` without colour codes."""
    result = subprocess.run(
        [str(RESTATE_CLI), *args],
        capture_output=True,
        text=True,
        timeout=60,
        env={
            "PATH": os.environ.get("PATH", ""),
            "HOME": str(home),
            "RESTATE_CLI_CONFIG_HOME": str(home / "restate"),
            "RESTATE_ADMIN_URL": dev.admin_url,
            "RESTATE_INGRESS_URL": dev.ingress_url,
            "NO_COLOR": "1",
            "COLUMNS": "200",
            **(env or {}),
        },
    )
    result.stdout, result.stderr = ANSI.sub("", result.stdout), ANSI.sub("", result.stderr)
    return result


def ok(result: subprocess.CompletedProcess[str]) -> str:
    """The command's stdout and stderr together, after asserting it succeeded."""
    output = result.stdout + result.stderr
    assert result.returncode == 0, output
    assert "Could not verify the admin API version" not in output
    return output


def admin_get(dev: DevServer, path: str) -> Any:
    reply = httpx.get(f"{dev.admin_url}{path}", timeout=10)
    assert reply.status_code == 200, reply.text
    return reply.json()


def wait_for(condition: Callable[[], Any], what: str, timeout_s: float = 30.0) -> Any:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        value = condition()
        if value:
            return value
        time.sleep(0.05)
    pytest.fail(f"timed out after {timeout_s} s waiting for {what}")


def status_is(dev: DevServer, invocation_id: str, *statuses: str) -> Callable[[], dict[str, Any] | None]:
    def check() -> dict[str, Any] | None:
        reply = httpx.get(f"{dev.admin_url}/invocations/{invocation_id}", timeout=10)
        if reply.status_code == 404 and "gone" in statuses:
            return {"status": "gone"}
        invocation: dict[str, Any] = reply.json()
        return invocation if invocation.get("status") in statuses else None

    return check


def sleeping(dev: DevServer, ms: int = 600_000) -> str:
    """Send `Waits/sleep` for `ms` and wait until it is suspended; its invocation id."""
    sent = httpx.post(f"{dev.ingress_url}/Waits/sleep/send", json=ms, timeout=10).json()
    wait_for(status_is(dev, sent["invocationId"], "suspended"), "the sleeping invocation to suspend")
    return str(sent["invocationId"])


@pytest.fixture(scope="module")
def home(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The CLI's home (config dir) for the module, so no user configuration is read."""
    return tmp_path_factory.mktemp("restate-home")


@pytest.fixture(scope="module")
def registered(moto_endpoint: str, examples_url: str, home: Path) -> Iterator[tuple[DevServer, str]]:
    """A dev server with the examples registered by `restate deployments register --yes`, and its output."""
    server = DevServer(
        ingress_port=0, admin_port=0, dynamodb_endpoint=moto_endpoint, table=unique_table_name(), settings=SETTINGS
    )
    server.start()
    try:
        output = ok(restate(server, "deployments", "register", examples_url, "--use-http1.1", "--yes", home=home))
        yield server, output
    finally:
        server.stop()


@pytest.fixture
def dev(registered: tuple[DevServer, str]) -> DevServer:
    return registered[0]


@pytest.fixture
def deployment(dev: DevServer) -> dict[str, Any]:
    [only] = admin_get(dev, "/deployments")["deployments"]
    return dict(only)


# --- version, deployments --------------------------------------------------------------------------


def test_whoami_verifies_the_admin_api_version_and_health(dev: DevServer, home: Path) -> None:
    output = ok(restate(dev, "whoami", home=home))
    assert "is healthy" in output
    assert dev.ingress_url in output


def test_register_with_yes_registers_the_examples(
    registered: tuple[DevServer, str], deployment: dict[str, Any]
) -> None:
    _, output = registered
    assert deployment["id"] in output
    names = {s["name"] for s in deployment["services"]}
    assert {"Greeter", "Counter", "Signup"} <= names
    assert all(s["revision"] == 1 for s in deployment["services"])


def test_register_again_changes_nothing_and_force_registers_a_new_revision(
    dev: DevServer, home: Path, examples_url: str, deployment: dict[str, Any]
) -> None:
    again = ok(restate(dev, "deployments", "register", examples_url, "--use-http1.1", "--yes", home=home))
    assert f"Deployment already exists with id {deployment['id']}" in again
    # the CLI registered `{examples_url}/`; the same endpoint without the slash is the same deployment
    same = httpx.post(f"{dev.admin_url}/deployments", json={"uri": examples_url}, timeout=30)
    assert same.json()["id"] == deployment["id"]
    assert len(admin_get(dev, "/deployments")["deployments"]) == 1
    before = admin_get(dev, "/services/Greeter")["revision"]
    ok(restate(dev, "deployments", "register", examples_url, "--use-http1.1", "--yes", "--force", home=home))
    assert admin_get(dev, "/services/Greeter")["revision"] == before + 1


def test_deployments_list_shows_the_endpoint_and_each_service(
    dev: DevServer, home: Path, deployment: dict[str, Any]
) -> None:
    output = ok(restate(dev, "deployments", "list", home=home))
    assert deployment["id"] in output
    assert deployment["uri"] in output
    for name in ("Greeter", "Counter", "Signup"):
        assert re.search(rf"- {name} \[\d+\]", output), name


def test_deployments_describe_shows_the_services_and_their_handlers(
    dev: DevServer, home: Path, deployment: dict[str, Any]
) -> None:
    output = ok(restate(dev, "deployments", "describe", deployment["id"], home=home))
    assert "Counter" in output
    assert re.search(r"add +JSON integer +JSON integer", output)


def test_deployments_list_decodes_a_deployment_id_whose_bytes_once_broke_it(
    examples_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # bytes whose id, written as earlier Torpor wrote it, was above 2**128 for Restate's clients
    monkeypatch.setattr(ids.os, "urandom", lambda n: (7 * 62**21 + 35 * 62**20).to_bytes(16, "big")[:n])
    server = DevServer(ingress_port=0, admin_port=0, in_memory=True, settings=SETTINGS)
    server.start()
    try:
        created = httpx.post(f"{server.admin_url}/deployments", json={"uri": examples_url}, timeout=30)
        assert created.status_code == 201, created.text
        monkeypatch.undo()
        output = ok(restate(server, "deployments", "list", home=tmp_path))
        assert created.json()["id"] in output
        assert "Greeter" in ok(restate(server, "services", "list", home=tmp_path))
    finally:
        server.stop()


def test_deployments_remove_with_force_removes_it(moto_endpoint: str, examples_url: str, tmp_path: Path) -> None:
    server = DevServer(
        ingress_port=0, admin_port=0, dynamodb_endpoint=moto_endpoint, table=unique_table_name(), settings=SETTINGS
    )
    server.start()
    try:
        ok(restate(server, "deployments", "register", examples_url, "--use-http1.1", "--yes", home=tmp_path))
        [only] = admin_get(server, "/deployments")["deployments"]
        ok(restate(server, "deployments", "remove", only["id"], "--force", "--yes", home=tmp_path))
        assert admin_get(server, "/deployments")["deployments"] == []
    finally:
        server.stop()


def test_the_delete_the_cli_sends_after_its_query_removes_the_deployment(moto_endpoint: str, examples_url: str) -> None:
    server = DevServer(
        ingress_port=0, admin_port=0, dynamodb_endpoint=moto_endpoint, table=unique_table_name(), settings=SETTINGS
    )
    server.start()
    try:
        created = httpx.post(f"{server.admin_url}/v4/deployments", json={"uri": examples_url}, timeout=30)
        assert created.status_code == 201, created.text
        deleted = httpx.delete(f"{server.admin_url}/v4/deployments/{created.json()['id']}?force=true", timeout=10)
        assert deleted.status_code == 202, deleted.text
        assert admin_get(server, "/deployments")["deployments"] == []
    finally:
        server.stop()


# --- services ----------------------------------------------------------------------------------------


def test_services_list_shows_each_service_with_its_flavor(dev: DevServer, home: Path) -> None:
    output = ok(restate(dev, "services", "list", home=home))
    assert re.search(r"Counter +\d+ +virtual object", output)
    assert re.search(r"Signup +\d+ +workflow", output)
    assert re.search(r"Greeter +\d+ +HTTP", output)


def test_services_describe_shows_type_endpoint_and_handlers(
    dev: DevServer, home: Path, deployment: dict[str, Any]
) -> None:
    output = ok(restate(dev, "services", "describe", "Counter", home=home))
    assert re.search(r"Service type: +VirtualObject", output)
    assert re.search(rf"Deployment ID: +{deployment['id']}", output)
    assert re.search(r"SDK Version +restate-sdk-python/", output)
    assert re.search(r"get +none +JSON integer", output)


def test_services_config_view_shows_the_effective_options(dev: DevServer, home: Path) -> None:
    output = ok(restate(dev, "services", "config", "view", "Greeter", home=home))
    assert re.search(r"Inactivity timeout: +10s", output)  # SETTINGS.inactivity_timeout_ms
    assert re.search(r"Max attempts: +5", output)
    assert re.search(r"On max attempts: +Pause", output)


def test_services_config_edit_changes_what_was_edited_and_keeps_other_overrides(
    dev: DevServer, home: Path, tmp_path: Path
) -> None:
    reply = httpx.patch(f"{dev.admin_url}/services/Counter", json={"abort_timeout": "5m"}, timeout=10)
    assert reply.status_code == 200, reply.text
    editor = tmp_path / "editor.sh"  # the CLI opens its TOML in $EDITOR: append two settings
    editor.write_text(
        textwrap.dedent(
            """\
            #!/bin/sh
            printf 'inactivity_timeout = "2m"\\nidempotency_retention = "10hours"\\n' >> "$1"
            """
        )
    )
    editor.chmod(editor.stat().st_mode | stat.S_IEXEC)
    try:
        ok(restate(dev, "services", "config", "edit", "Counter", "--yes", home=home, env={"EDITOR": str(editor)}))
        config = admin_get(dev, "/services/Counter")["config"]
        assert config["inactivityTimeout"] == {"value": 120_000, "source": "admin override"}
        assert config["idempotencyRetention"] == {"value": 36_000_000, "source": "admin override"}
        assert config["abortTimeout"] == {"value": 300_000, "source": "admin override"}  # null: unchanged
    finally:
        cleared = {"inactivity_timeout": None, "idempotency_retention": None, "abort_timeout": None}
        httpx.patch(f"{dev.admin_url}/services/Counter", json=cleared, timeout=10)


def test_services_config_patch_sets_an_option(dev: DevServer, home: Path) -> None:
    try:
        ok(restate(dev, "services", "config", "patch", "Greeter", "--inactivity-timeout", "3m", "--yes", home=home))
        described = admin_get(dev, "/v4/services/Greeter")
        assert described["inactivity_timeout"] == "3m"
        assert described["config"]["inactivityTimeout"]["source"] == "admin override"
    finally:
        httpx.patch(f"{dev.admin_url}/services/Greeter", json={"inactivity_timeout": None}, timeout=10)


def test_services_config_patch_takes_restates_duration_forms(dev: DevServer, home: Path) -> None:
    try:
        ok(restate(dev, "services", "config", "patch", "Greeter", "--inactivity-timeout", "1 hour",
                   "--idempotency-retention", "90sec", "--yes", home=home))  # fmt: skip
        described = admin_get(dev, "/v4/services/Greeter")
        assert (described["inactivity_timeout"], described["idempotency_retention"]) == ("1h", "1m 30s")
    finally:
        reset = {"inactivity_timeout": None, "idempotency_retention": None}
        httpx.patch(f"{dev.admin_url}/services/Greeter", json=reset, timeout=10)


def test_deployments_remove_of_the_latest_deployment_asks_for_force(dev: DevServer, home: Path) -> None:
    [deployment] = admin_get(dev, "/deployments")["deployments"]
    refused = restate(dev, "deployments", "remove", deployment["id"], "--yes", home=home)
    assert refused.returncode != 0
    assert "Deployment is still Active" in refused.stdout + refused.stderr
    assert "--force" in refused.stderr
    assert [d["id"] for d in admin_get(dev, "/deployments")["deployments"]] == [deployment["id"]]


# --- invocations ---------------------------------------------------------------------------------


def test_invocations_list_and_describe_show_a_sleeping_invocation(dev: DevServer, home: Path) -> None:
    invocation_id = sleeping(dev)
    try:
        assert invocation_id in ok(restate(dev, "invocations", "list", home=home))
        assert "Waits/sleep" in ok(restate(dev, "invocations", "describe", invocation_id, home=home))
    finally:
        httpx.patch(f"{dev.admin_url}/invocations/{invocation_id}/kill", timeout=10)


def test_invocations_pause_then_resume(dev: DevServer, home: Path) -> None:
    invocation_id = sleeping(dev)
    try:
        ok(restate(dev, "invocations", "pause", invocation_id, "--yes", home=home))
        wait_for(status_is(dev, invocation_id, "paused"), "the invocation to pause")
        ok(restate(dev, "invocations", "resume", invocation_id, "--yes", home=home))
        wait_for(status_is(dev, invocation_id, "suspended", "running", "ready"), "the invocation to resume")
    finally:
        httpx.patch(f"{dev.admin_url}/invocations/{invocation_id}/kill", timeout=10)


def test_invocations_cancel(dev: DevServer, home: Path) -> None:
    invocation_id = sleeping(dev)
    ok(restate(dev, "invocations", "cancel", invocation_id, "--yes", home=home))
    done = wait_for(status_is(dev, invocation_id, "completed"), "the cancelled invocation to complete")
    assert done["completion_kind"] == "cancelled"


def test_invocations_kill_then_purge(dev: DevServer, home: Path) -> None:
    invocation_id = sleeping(dev)
    ok(restate(dev, "invocations", "kill", invocation_id, "--yes", home=home))
    done = wait_for(status_is(dev, invocation_id, "completed"), "the killed invocation to complete")
    assert done["completion_kind"] == "killed"
    ok(restate(dev, "invocations", "purge", invocation_id, "--yes", home=home))
    wait_for(status_is(dev, invocation_id, "gone"), "the purged invocation to be gone")


def test_the_patches_the_cli_sends_after_its_query_pause_resume_kill_and_purge(dev: DevServer) -> None:
    invocation_id = sleeping(dev)
    base = f"{dev.admin_url}/v4/invocations/{invocation_id}"
    assert httpx.patch(f"{base}/pause", timeout=10).is_success
    wait_for(status_is(dev, invocation_id, "paused"), "the invocation to pause")
    assert httpx.patch(f"{base}/resume", timeout=10).is_success
    wait_for(status_is(dev, invocation_id, "suspended", "running", "ready"), "the invocation to resume")
    assert httpx.patch(f"{base}/kill", timeout=10).is_success
    assert wait_for(status_is(dev, invocation_id, "completed"), "the kill")["completion_kind"] == "killed"
    assert httpx.patch(f"{base}/purge", timeout=10).is_success
    assert httpx.get(f"{dev.admin_url}/v4/invocations/{invocation_id}", timeout=10).status_code == 404


# --- state (kv) ----------------------------------------------------------------------------------


def test_kv_get_then_edit(dev: DevServer, home: Path, tmp_path: Path) -> None:
    assert httpx.post(f"{dev.ingress_url}/Counter/kv-cli/add", json=5, timeout=30).json() == 5
    assert re.search(r"count +5", ok(restate(dev, "kv", "get", "Counter", "kv-cli", home=home)))
    editor = tmp_path / "editor.sh"
    editor.write_text(f"#!/bin/sh\n{sys.executable} -c \"import sys; p=sys.argv[1]; t=open(p).read(); "
                      f"open(p, 'w').write(t.replace('5', '7'))\" \"$1\"\n")  # fmt: skip
    editor.chmod(editor.stat().st_mode | stat.S_IEXEC)
    ok(restate(dev, "kv", "edit", "Counter", "kv-cli", "--yes", home=home, env={"EDITOR": str(editor)}))
    assert httpx.post(f"{dev.ingress_url}/Counter/kv-cli/get", timeout=30).json() == 7


def test_state_clear_of_one_key(dev: DevServer, home: Path) -> None:
    assert httpx.post(f"{dev.ingress_url}/Counter/clear-cli/add", json=5, timeout=30).json() == 5
    ok(restate(dev, "state", "clear", "Counter/clear-cli", "--yes", home=home))
    assert admin_get(dev, "/services/Counter/state/clear-cli")["state"] == {}
    assert httpx.post(f"{dev.ingress_url}/Counter/clear-cli/get", timeout=30).json() == 0


def test_the_state_edit_the_cli_sends_replaces_the_state_if_its_version_matches(dev: DevServer) -> None:
    assert httpx.post(f"{dev.ingress_url}/Counter/kv-http/add", json=5, timeout=30).json() == 5
    url = f"{dev.admin_url}/v4/services/Counter/state"
    # the version of {"count": b"5"}, as the CLI computes it from the state it read (restate-server agrees)
    version_of_5 = "S6MyUcVGhqv_Nm54F5guL_XKfJMeFCOXIi7QEc5GZZA"
    edit = {"version": version_of_5, "object_key": "kv-http", "new_state": {"count": list(b"7")}}
    assert httpx.post(url, json=edit, timeout=10).status_code == 202
    assert httpx.post(f"{dev.ingress_url}/Counter/kv-http/get", timeout=30).json() == 7
    stale = httpx.post(url, json={**edit, "new_state": {"count": list(b"9")}}, timeout=10)
    assert stale.status_code == 409, stale.text  # the state is 7 now: the version no longer matches
    assert httpx.post(f"{dev.ingress_url}/Counter/kv-http/get", timeout=30).json() == 7
    forced = httpx.post(url, json={"object_key": "kv-http", "new_state": {}}, timeout=10)  # --force: no version
    assert forced.status_code == 202
    assert admin_get(dev, "/services/Counter/state/kv-http")["state"] == {}


def test_state_edit_is_refused_while_an_invocation_holds_the_key_and_releases_the_key_after(
    dev: DevServer,
) -> None:
    holding = {"ms": 2_000, "delta": 1}
    sent = httpx.post(f"{dev.ingress_url}/Counter/kv-held/add_after_sleep/send", json=holding, timeout=10).json()
    wait_for(status_is(dev, sent["invocationId"], "suspended", "running"), "the holder to start")
    edit = {"object_key": "kv-held", "new_state": {"count": list(b"40")}}
    refused = httpx.post(f"{dev.admin_url}/v4/services/Counter/state", json=edit, timeout=10)
    assert refused.status_code == 409, refused.text
    assert sent["invocationId"] in refused.json()["message"]
    wait_for(status_is(dev, sent["invocationId"], "completed"), "the holder to complete")
    assert httpx.post(f"{dev.admin_url}/v4/services/Counter/state", json=edit, timeout=10).status_code == 202
    assert httpx.post(f"{dev.ingress_url}/Counter/kv-held/add", json=2, timeout=30).json() == 42  # key released


def test_state_edit_refuses_a_service_without_state_and_a_bad_body(dev: DevServer) -> None:
    greeter = httpx.post(f"{dev.admin_url}/v4/services/Greeter/state", json={"object_key": "k", "new_state": {}})
    assert greeter.status_code == 400
    bad = httpx.post(f"{dev.admin_url}/v4/services/Counter/state", json={"object_key": "k", "new_state": {"a": [300]}})
    assert bad.status_code == 400
    assert "bytes" in bad.json()["message"]


# --- the document ----------------------------------------------------------------------------------


def test_openapi_is_a_valid_document_describing_what_is_served(dev: DevServer) -> None:
    document = admin_get(dev, "/openapi")
    validate_openapi(document)
    components = {"components": document["components"]}

    def check(path: str, schema: str) -> None:
        validator = OAS31Validator({"$ref": f"#/components/schemas/{schema}", **components})
        validator.validate(admin_get(dev, path))

    check("/v4/version", "VersionInformation")
    check("/v4/services", "ListServicesResponse")
    check("/v4/services/Signup", "ServiceMetadata")
    check("/v4/services/Counter/handlers/add", "HandlerMetadata")
    check("/v4/deployments", "ListDeploymentsResponse")
    assert {"/version", "/services/{service}/state", "/invocations/{invocation_id}/purge"} <= set(document["paths"])


# --- the ingress -----------------------------------------------------------------------------------


def test_the_python_sdks_client_calls_the_ingress_unchanged(dev: DevServer) -> None:
    """`restate.client` (the Python SDK's ingress client) with the example handlers as typed targets."""
    from restate.client import create_client

    from examples.greeter import greet
    from examples.objects import add, get

    async def calls() -> tuple[str, int, str, str, int]:
        async with create_client(dev.ingress_url) as client:
            greeting = await client.service_call(greet, arg="Ada")
            added = await client.object_call(add, key="sdk-client", arg=2)
            first = await client.object_send(add, key="sdk-client", arg=3, idempotency_key="sdk-client-once")
            again = await client.object_send(add, key="sdk-client", arg=3, idempotency_key="sdk-client-once")
            wait_for(status_is(dev, first.invocation_id, "completed"), "the sent invocation to complete")
            value = await client.object_call(get, key="sdk-client", arg=None)
            return greeting, added, first.invocation_id, again.invocation_id, value

    greeting, added, first_id, again_id, value = asyncio.run(calls())
    assert greeting == "Hello, Ada!"
    assert added == 2
    assert first_id == again_id  # one invocation per idempotency key
    assert value == 5


# --- side by side with restate-server ----------------------------------------------------------------

RESTATE_SERVERS = [
    REPO_ROOT / ".cache" / base / f"node_modules/@restatedev/restate-server-linux-{_ARCH}/bin/restate-server"
    for base in ("conformance-restate", "bench/restate")
]
SAME_VALUE = {"ty", "name", "input_description", "output_description", "on_max_attempts", "public"}
"""Fields whose values must be equal on both (enum spellings, descriptions); others only of the same JSON type."""


def assert_same_shape(theirs: Any, ours: Any, where: str) -> None:
    """Every field restate-server answers is in Torpor's answer, with the same JSON type (and, for
    `SAME_VALUE` fields, the same value); lists of named things are matched by name."""
    if isinstance(theirs, dict):
        assert isinstance(ours, dict), where
        for key, value in theirs.items():
            assert key in ours, f"{where}.{key} missing"
            if key in SAME_VALUE and not isinstance(value, dict | list):
                assert ours[key] == value, f"{where}.{key}: {ours[key]!r} != {value!r}"
            assert_same_shape(value, ours[key], f"{where}.{key}")
    elif isinstance(theirs, list):
        assert isinstance(ours, list), where
        named = {item.get("name"): item for item in ours if isinstance(item, dict)}
        for item in theirs:
            if isinstance(item, dict) and "name" in item:
                assert item["name"] in named, f"{where}[{item['name']}] missing"
                assert_same_shape(item, named[item["name"]], f"{where}[{item['name']}]")
    elif theirs is not None:
        assert type(ours) is type(theirs) or {type(ours), type(theirs)} <= {int, float}, f"{where}: {ours!r}"


@pytest.mark.skipif(not any(p.exists() for p in RESTATE_SERVERS), reason="restate-server not installed in .cache/")
def test_services_handlers_and_deployments_have_restate_servers_fields_and_spellings(
    dev: DevServer, examples_url: str
) -> None:
    from tests.conformance.harness import RestateRuntime

    runtime = RestateRuntime()
    runtime.start()
    try:
        body = {"uri": examples_url, "use_http_11": True}
        assert httpx.post(f"{runtime.admin_url}/v4/deployments", json=body, timeout=60).status_code == 201
        for path in (
            "/v4/services",
            "/v4/services/Counter",
            "/v4/services/Signup",
            "/v4/services/LazyCounter/handlers",
            "/v4/services/Counter/handlers/get",
        ):
            theirs = httpx.get(f"{runtime.admin_url}{path}", timeout=10).json()
            assert_same_shape(theirs, admin_get(dev, path), path)
        [theirs] = httpx.get(f"{runtime.admin_url}/v4/deployments", timeout=10).json()["deployments"]
        [ours] = admin_get(dev, "/v4/deployments")["deployments"]
        assert_same_shape({**theirs, "services": []}, ours, "deployment")
        assert {s["name"] for s in theirs["services"]} == {s["name"] for s in ours["services"]}
        assert all(set(s) == {"name", "revision"} for s in ours["services"])
        dry_run = {**body, "dry_run": True}
        theirs = httpx.post(f"{runtime.admin_url}/v4/deployments", json=dry_run, timeout=60)
        ours_reply = httpx.post(f"{dev.admin_url}/v4/deployments", json=dry_run, timeout=60)
        assert ours_reply.status_code == theirs.status_code == 200  # registered, unchanged
        assert_same_shape(theirs.json(), ours_reply.json(), "dry run")
    finally:
        runtime.close()
