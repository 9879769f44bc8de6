"""Journal entries name what they touch, and a failing handler's stack trace is kept: on `torpor dev`
and, side by side, on restate-server 1.7.12 with the same handlers (`tests.helpers.journal_services`).

- `sys_journal`'s naming columns (`entry_type`, `name`, `entry_lite_json`, `entry_json`) agree with
  restate-server's for one workflow run that sets, gets and clears state, runs a named step, calls
  and sends to a virtual object, sleeps, completes and peeks promises, waits on one, and has an
  awakeable resolved;
- Restate's CLI `restate invocations describe` on Torpor prints the state key, the promise name,
  the call target with its callee's id and the run's name, as it does on restate-server;
- `torpor invocations describe` and the admin API show them too;
- a failing handler's stack trace is in describe, the admin API and `sys_invocation.last_failure`,
  bounded to 4 KiB with its middle cut.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import httpx
import pytest
from click.testing import CliRunner

from adapters.cli import main
from adapters.local.dev import DevServer
from control_plane.failures import MAX_STACKTRACE_BYTES
from control_plane.retry import RetryPolicy
from control_plane.settings import Settings
from tests.helpers.dev import wait_for
from tests.helpers.journal_services import serve_journal_services
from tests.integration.test_query import restate_cli

pytestmark = pytest.mark.slow

SETTINGS = Settings(
    inactivity_timeout_ms=5_000,
    lease_margin_ms=1_000,
    retry_policy=RetryPolicy(initial_interval_ms=300, max_interval_ms=3_000, max_attempts=10_000),
)
DEPTH = 400  # Crashing/deep's recursion: a Python trace of about 100 KB


@dataclass(frozen=True)
class Side:
    """One runtime (Torpor or restate-server) with the journal services, after the same requests."""

    admin: str
    ingress: str
    run: str  # Journaled/w1/run, completed once its awakeable and its promise `approval` were resolved
    waiting: str  # Journaled/w2/run, suspended on the promise `approval`
    boom: str  # Crashing/boom 42, backing off
    deep: str  # Crashing/deep, backing off with a long trace


def rows(admin: str, sql: str) -> list[dict[str, Any]]:
    reply = httpx.post(f"{admin}/query", json={"query": sql}, headers={"accept": "application/json"}, timeout=30)
    assert reply.status_code == 200, reply.text
    result: list[dict[str, Any]] = reply.json()["rows"]
    return result


def journal(admin: str, invocation_id: str) -> list[dict[str, Any]]:
    sql = (
        "SELECT index, entry_type, name, invoked_id, invoked_target, sleep_wakeup_at, promise_name, entry_json, "
        f"entry_lite_json FROM sys_journal WHERE id = '{invocation_id}' ORDER BY index"
    )
    return rows(admin, sql)


def exercise(admin: str, ingress: str) -> Side:
    """Send the same requests to a runtime whose journal services are registered; wait for them."""

    def send(path: str, body: object) -> str:
        reply = httpx.post(f"{ingress}/{path}/send", json=body, timeout=30)
        assert reply.status_code == 202, reply.text
        invocation_id: str = reply.json()["invocationId"]
        return invocation_id

    def waits_on_approval(invocation_id: str) -> bool:
        return any(r["entry_type"] == "Command: GetPromise" for r in journal(admin, invocation_id))

    run, waiting = send("Journaled/w1/run", "bob@example.com"), send("Journaled/w2/run", "ann@example.com")
    boom, deep = send("Crashing/boom", 42), send("Crashing/deep", DEPTH)
    for invocation_id in (run, waiting):
        wait_for(lambda i=invocation_id: waits_on_approval(i), 60, f"{invocation_id} to wait on its promise")
    sql = "SELECT value_utf8 FROM state WHERE service_name = 'Journaled' AND service_key = 'w1' AND key = 'awakeable'"
    [awakeable] = rows(admin, sql)
    resolved = httpx.post(
        f"{ingress}/restate/awakeables/{json.loads(awakeable['value_utf8'])}/resolve", json="yes", timeout=30
    )
    assert resolved.status_code in (200, 202), resolved.text
    assert httpx.post(f"{ingress}/Journaled/w1/approve", json="ok", timeout=30).status_code == 200
    finished = f"SELECT status FROM sys_invocation WHERE id = '{run}'"
    wait_for(lambda: rows(admin, finished) == [{"status": "completed"}], 60, "the approved run to complete")
    for invocation_id in (boom, deep):
        failed = f"SELECT last_failure FROM sys_invocation WHERE id = '{invocation_id}'"
        wait_for(lambda s=failed: (rows(admin, s) or [{}])[0].get("last_failure"), 60, "a failed attempt")
    return Side(admin, ingress, run, waiting, boom, deep)


@pytest.fixture(scope="module")
def services_url() -> Iterator[str]:
    with serve_journal_services() as url:
        yield url


@pytest.fixture(scope="module")
def torpor(services_url: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Side]:
    dev = DevServer(ingress_port=0, admin_port=0, data_dir=tmp_path_factory.mktemp("names"), settings=SETTINGS)
    dev.start()
    try:
        registered = httpx.post(f"{dev.admin_url}/deployments", json={"uri": services_url}, timeout=30)
        assert registered.status_code == 201, registered.text
        yield exercise(dev.admin_url, dev.ingress_url)
    finally:
        dev.stop()


@pytest.fixture(scope="module")
def restate_server(services_url: str) -> Iterator[Side]:
    from tests.conformance.harness import RestateRuntime

    runtime = RestateRuntime()
    runtime.start()
    try:
        registered = httpx.post(
            f"{runtime.admin_url}/deployments", json={"uri": services_url, "use_http_11": True}, timeout=60
        )
        assert registered.status_code == 201, registered.text
        yield exercise(runtime.admin_url, runtime.ingress_url)
    finally:
        runtime.close()


# --- sys_journal, side by side --------------------------------------------------------------------------

_IDS = re.compile(r"inv_1[0-9A-Za-z]+|sign_1[0-9A-Za-z_-]+")


def comparable(row: dict[str, Any]) -> dict[str, Any]:
    """A `sys_journal` row's naming columns, without what differs between two runs of the same handler
    on any two runtimes: invocation and awakeable ids, times, the Input's headers, a call's retention
    (restate-server's default 1 day; Torpor writes 0 s), the bytes of a value holding an id."""
    full = json.loads(row["entry_json"]) if row.get("entry_json") else None
    if full is not None:
        command = full.get("Command", {})
        if "Input" in command:
            command["Input"]["headers"] = []
        if "Sleep" in command:
            command["Sleep"]["wake_up_time"] = 0
        for call in ("Call", "OneWayCall"):
            if call in command:
                for duration in ("completion_retention_duration", "journal_retention_duration"):
                    command[call]["request"][duration] = None
        if command.get("SetState", {}).get("key") == "awakeable":
            command["SetState"]["value"] = []
    lite = row.get("entry_lite_json")
    lite = re.sub(r'"wake_up_time":\d+', '"wake_up_time":0', lite) if lite else lite
    return {
        "entry_type": row["entry_type"],
        "name": row.get("name"),
        "entry_lite_json": _IDS.sub("ID", lite) if lite else lite,
        "entry_json": _IDS.sub("ID", json.dumps(full, sort_keys=True)) if full is not None else None,
    }


def commands_and_notifications(journal_rows: list[dict[str, Any]]) -> tuple[list[Any], list[Any]]:
    """The commands in journal order, and the notifications in a canonical order: a runtime may store
    a notification it derives itself (a callee's id) before or after the next command."""
    commands = [comparable(r) for r in journal_rows if r["entry_type"].startswith("Command")]
    notifications = [comparable(r) for r in journal_rows if not r["entry_type"].startswith("Command")]
    return commands, sorted(notifications, key=lambda n: json.dumps(n, sort_keys=True))


def test_sys_journal_names_entries_as_restate_server_does(torpor: Side, restate_server: Side) -> None:
    ours, theirs = journal(torpor.admin, torpor.run), journal(restate_server.admin, restate_server.run)
    our_commands, our_notifications = commands_and_notifications(ours)
    their_commands, their_notifications = commands_and_notifications(theirs)
    assert our_commands == their_commands
    assert our_notifications == their_notifications
    assert len(ours) == len(theirs) == 22
    # the naming itself, spelled out (what the comparison above found equal on both)
    named = {(r["entry_type"], r["entry_lite_json"]) for r in ours}
    assert ("Command: SetState", '{"Command":{"SetState":{"key":"email"}}}') in named
    assert ("Command: GetPromise", '{"Command":{"GetPromise":{"key":"approval","completion_id":9}}}') in named
    assert [r["name"] for r in ours if r["entry_type"] == "Command: Run"] == ["charge card"]
    assert all(r.get("name") is None for r in ours if r["entry_type"].startswith("Notification"))  # null: left out


def test_the_journal_v1_columns_name_calls_sleeps_and_promises_too(torpor: Side) -> None:
    """restate-server fills `invoked_id`, `invoked_target`, `sleep_wakeup_at` and `promise_name` for
    its older journal v1 only; Torpor fills them for every journal, from the same naming."""
    ours = journal(torpor.admin, torpor.run)
    callee_ids = {
        json.loads(r["entry_json"])["Notification"]["Completion"]["CallInvocationId"]["invocation_id"]
        for r in ours
        if r["entry_type"] == "Notification: CallInvocationId"
    }
    calls = [r for r in ours if r["entry_type"] in ("Command: Call", "Command: OneWayCall")]
    assert [r["invoked_target"] for r in calls] == ["Tally/w1/add", "Tally/w1/add"]
    assert {r["invoked_id"] for r in calls} == callee_ids
    assert len(callee_ids) == 2
    assert [r["promise_name"] for r in ours if r.get("promise_name")] == ["note", "approval", "approval"]
    [sleep] = [r for r in ours if r["entry_type"] == "Command: Sleep"]
    assert sleep.get("sleep_wakeup_at") is not None


# --- Restate's CLI, `torpor invocations describe`, the admin API --------------------------------------------


def restate_describe(side: Side, invocation_id: str) -> str:
    env = {
        **os.environ,
        "RESTATE_ADMIN_URL": side.admin,
        "RESTATE_CLI_CONFIG_HOME": tempfile.mkdtemp(prefix="restate-cli-"),
        "NO_COLOR": "1",
        "TERM": "dumb",
        "COLUMNS": "240",
    }
    done = subprocess.run(
        [str(restate_cli()), "invocations", "describe", invocation_id],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    return done.stdout


def journal_lines(described: str) -> list[str]:
    """The `#N [time] Type details` lines of `restate invocations describe`, without index and time."""
    return [m.group(1).strip() for m in re.finditer(r"#\d+ \[[^\]]+\] (.*)$", described, re.MULTILINE)]


def test_restate_cli_describe_shows_keys_promises_and_call_targets_on_torpor(
    torpor: Side, restate_server: Side
) -> None:
    ours = restate_describe(torpor, torpor.waiting)
    for line in (
        "Command: SetState key email",
        "Command: GetEagerState key email",
        "Command: ClearState key email",
        "Command: Run [charge card]",
        "Command: CompletePromise key note",
        "Command: PeekPromise key approval",
        "Command: GetPromise key approval",
    ):
        assert line in journal_lines(ours), ours
    assert re.search(r"Command: Call Tally/w2/add inv_1\w+", ours), ours
    assert re.search(r"Command: OneWayCall Tally/w2/add inv_1\w+", ours), ours
    assert re.search(r"Command: Sleep until \d{4}-\d\d-\d\d", ours), ours
    # restate-server's own lines for its own run, with ids and times left out, are the same
    theirs = restate_describe(restate_server, restate_server.waiting)

    def words(described: str) -> list[str]:
        lines = [_IDS.sub("ID", line) for line in journal_lines(described) if line.startswith("Command")]
        return [re.sub(r"until .*", "until T", line) for line in lines]

    assert words(ours) == words(theirs)


def test_restate_cli_describe_shows_the_stack_trace_on_torpor(torpor: Side) -> None:
    # Restate's CLI prints the last failure while the invocation backs off, not while a retry runs
    shown = "[500 Internal] ValueError('card declined for 42')"
    seen: list[str] = []

    def shows_the_failure() -> bool:
        seen.append(restate_describe(torpor, torpor.boom))
        return shown in seen[-1]

    wait_for(shows_the_failure, 60, "describe to show the failure")
    described = seen[-1]
    assert "Traceback (most recent call last):" in described
    assert "in _charge" in described


def torpor_describe(side: Side, invocation_id: str) -> str:
    result = CliRunner().invoke(
        main, ["--admin-url", side.admin, "invocations", "describe", invocation_id], env={"COLUMNS": "200"}
    )
    assert result.exit_code == 0, result.output
    return result.output


def test_torpor_describe_names_what_each_entry_touches(torpor: Side) -> None:
    out = torpor_describe(torpor, torpor.waiting)
    table = {m.group(2): m.group(3).strip() for m in re.finditer(r"^│ +(\d+) │ (\w+) +│[^│]*│ (.*?) +│$", out, re.M)}
    assert table["ClearState"] == "key email"
    assert table["GetPromise"] == "promise approval"
    assert table["CompletePromise"] == "promise note"
    assert re.fullmatch(r"→ Tally/w2/add inv_1\w+", table["Call"])
    assert re.fullmatch(r"wakes up at \d{4}-\d\d-\d\dT[\d:.]+Z", table["Sleep"])
    assert re.search(r"Waiting on +GetPromise #\d+ promise approval", out)
    assert re.search(r"│ +\d+ │ Run +│ charge card +│", out)


def test_the_admin_api_names_what_each_entry_touches(torpor: Side) -> None:
    entries = httpx.get(f"{torpor.admin}/invocations/{torpor.run}", timeout=30).json()["journal"]

    def first(entry_type: str) -> dict[str, Any]:
        return next(e for e in entries if e["type"] == entry_type)

    assert first("SetState")["state_key"] == "email"
    assert first("SetState")["details"] == "key email"
    assert first("SetState")["entry_type"] == "Command: SetState"
    assert first("GetPromise")["promise_name"] == "approval"
    assert first("Run")["name"] == "charge card"
    call = first("Call")
    assert call["details"] == f"Tally/w1/add {call['invoked_id']}"
    assert call["invoked_id"] == first("CallInvocationIdCompletion")["invocation_id"]
    [awakeable] = rows(torpor.admin, "SELECT value_utf8 FROM state WHERE service_key = 'w1' AND key = 'awakeable'")
    awakeable_id = json.loads(awakeable["value_utf8"])
    assert first("Signal")["awakeable_id"] == awakeable_id
    assert first("Signal")["details"] == f"awakeable {awakeable_id}"


# --- stack traces ---------------------------------------------------------------------------------------------


def test_a_failing_handlers_stack_trace_is_shown_by_describe_the_admin_api_and_sql(torpor: Side) -> None:
    failure = httpx.get(f"{torpor.admin}/invocations/{torpor.boom}", timeout=30).json()["last_failure"]
    assert failure["message"] == "ValueError('card declined for 42')"
    assert failure["stacktrace"].startswith("Traceback (most recent call last):")
    assert "in _checkout" in failure["stacktrace"]
    assert failure["stacktrace"].rstrip().endswith("ValueError: card declined for 42")

    out = torpor_describe(torpor, torpor.boom)
    assert re.search(r"Last failure +500: ValueError\('card declined for 42'\) \(attempt \d+\)", out)
    assert "Traceback (most recent call last):" in out
    assert "ValueError: card declined for 42" in out

    [row] = rows(
        torpor.admin, f"SELECT last_failure, last_failure_error_code FROM sys_invocation WHERE id = '{torpor.boom}'"
    )
    assert row["last_failure"].startswith("[500 Internal] ValueError('card declined for 42')\nTraceback")
    assert row["last_failure_error_code"] == "500"


def test_a_long_stack_trace_is_kept_bounded_with_its_middle_cut(torpor: Side) -> None:
    trace = httpx.get(f"{torpor.admin}/invocations/{torpor.deep}", timeout=30).json()["last_failure"]["stacktrace"]
    assert len(trace.encode()) <= MAX_STACKTRACE_BYTES
    assert trace.startswith("Traceback (most recent call last):")  # the top stays
    assert trace.rstrip().endswith("ValueError: too deep")  # and so does the bottom
    assert re.search(r"… \[\d+ bytes of the stack trace cut\] …", trace)
    [row] = rows(torpor.admin, f"SELECT last_failure FROM sys_invocation WHERE id = '{torpor.deep}'")
    assert row["last_failure"].endswith(trace)


def test_sys_invocations_last_failure_reads_as_restate_servers(torpor: Side, restate_server: Side) -> None:
    """The same failing handler's `sys_invocation.last_failure` on both: `[500 Internal] message`, the
    trace's frames (by function) and its last line alike."""

    def last_failure(side: Side) -> str:
        [row] = rows(side.admin, f"SELECT last_failure FROM sys_invocation WHERE id = '{side.boom}'")
        text: str = row["last_failure"]
        return text

    ours, theirs = last_failure(torpor), last_failure(restate_server)
    assert ours.splitlines()[:2] == theirs.splitlines()[:2]
    assert ours.splitlines()[:2] == [
        "[500 Internal] ValueError('card declined for 42')",
        "Traceback (most recent call last):",
    ]
    assert re.findall(r", in (\w+)", ours) == re.findall(r", in (\w+)", theirs)
    assert ours.rstrip().splitlines()[-1] == theirs.rstrip().splitlines()[-1] == "ValueError: card declined for 42"
