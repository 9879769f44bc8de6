"""Durable schedules in `torpor dev` (SQLite store, the local timer loop), through the admin API and
the example `Counter` object (each tick adds 1 to a key, so the count is the number of ticks that ran).

Ticks on time, a tick delivered twice running once, pause and resume, missed ticks after a restart
running once, and the 400s for what cannot be a schedule.
"""

from __future__ import annotations

import itertools
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from click.testing import CliRunner, Result

from adapters.cli import main
from adapters.local.dev import DevServer
from control_plane.ports import ScheduleRecord
from control_plane.schedules import tick_idempotency_key
from control_plane.settings import Settings
from tests.helpers.dev import unique, wait_for

SETTINGS = Settings(inactivity_timeout_ms=10_000, call_wait_ms=30_000)
ON_TIME_MS = 700
"""How late a tick's invocation may start on a loaded 2-core machine (a tick is never early)."""


@pytest.fixture(scope="module")
def services_url(examples_url: str) -> str:
    return examples_url


def start_dev(data_dir: Path, services_url: str | None) -> DevServer:
    server = DevServer(ingress_port=0, admin_port=0, data_dir=data_dir, settings=SETTINGS)
    server.start()
    if services_url is not None:
        reply = httpx.post(f"{server.admin_url}/deployments", json={"uri": services_url}, timeout=30)
        assert reply.status_code == 201, reply.text
    return server


@pytest.fixture
def dev(tmp_path: Path, services_url: str) -> Iterator[DevServer]:
    server = start_dev(tmp_path, services_url)
    try:
        yield server
    finally:
        server.stop()


def create(dev: DevServer, **body: object) -> httpx.Response:
    return httpx.post(f"{dev.admin_url}/schedules", json=body, timeout=10)


def count(dev: DevServer, key: str) -> int:
    reply = httpx.post(f"{dev.ingress_url}/Counter/{key}/get", timeout=30)
    assert reply.status_code == 200, reply.text
    return int(reply.json())


def tick_invocations(dev: DevServer, key: str) -> list[dict[str, Any]]:
    """The completed `Counter/add` invocations on `key`, oldest first."""
    reply = httpx.get(f"{dev.admin_url}/invocations", params={"key": key, "handler": "add"}, timeout=10)
    assert reply.status_code == 200, reply.text
    return sorted(reply.json()["invocations"], key=lambda i: i["created_at"])


def tick_ms_of(invocation: dict[str, Any], name: str) -> int:
    prefix = tick_idempotency_key(name, 0)[:-1]
    assert invocation["idempotency_key"].startswith(prefix), invocation["idempotency_key"]
    return int(invocation["idempotency_key"][len(prefix) :])


def test_every_second_ticks_fire_on_time(dev: DevServer) -> None:
    # GIVEN a schedule ticking every second that adds 1 to a counter key
    name, key = unique("every1s"), unique("k")
    reply = create(dev, name=name, every="1s", target="Counter/add", key=key, body=1)
    assert reply.status_code == 201, reply.text
    assert reply.json()["every"] == "1s"

    # WHEN four ticks have had time to run
    wait_for(lambda: len(tick_invocations(dev, key)) >= 4, 15, "four ticks")

    # THEN each tick ran once, on consecutive whole seconds, each invocation created on time
    invocations = tick_invocations(dev, key)
    ticks = [tick_ms_of(i, name) for i in invocations]
    assert all(t % 1000 == 0 for t in ticks), ticks
    assert ticks == sorted(set(ticks))
    assert [b - a for a, b in itertools.pairwise(ticks)] == [1000] * (len(ticks) - 1), ticks
    for tick, invocation in zip(ticks, invocations, strict=True):
        created_ms = dev.store.get_invocation(invocation["id"]).created_at_ms  # type: ignore[union-attr]
        assert 0 <= created_ms - tick <= ON_TIME_MS, (tick, created_ms)
    wait_for(lambda: count(dev, key) >= len(ticks), 10, "the ticks' adds to complete")
    described = httpx.get(f"{dev.admin_url}/schedules/{name}", timeout=10).json()
    assert described["last_tick"] is not None
    assert described["next_tick"] is not None


def test_a_tick_delivered_twice_runs_once(dev: DevServer) -> None:
    # GIVEN an hourly schedule made two hours ago (its tick timer not armed: the test delivers the tick)
    name, key = unique("hourly"), unique("k")
    now = dev.control_plane.clock.now_ms()
    tick_ms = now // 3_600_000 * 3_600_000  # this hour's tick, due already
    dev.store.create_schedule(
        ScheduleRecord(
            name=name, service="Counter", handler="add", key=key, body="1", cron="0 * * * *",
            next_tick_ms=tick_ms, created_at_ms=now - 7_200_000, modified_at_ms=now - 7_200_000,
        )
    )  # fmt: skip

    # WHEN the same tick is delivered twice (a retried timer, a redelivered message)
    first = dev.control_plane.schedules.tick(name, scheduled_ms=tick_ms)
    second = dev.control_plane.schedules.tick(name, scheduled_ms=tick_ms)

    # THEN both name the same invocation, and the counter moved once
    assert first is not None
    assert first == second
    wait_for(lambda: count(dev, key) >= 1, 10, "the tick's add")
    dev.scheduler.wait_idle(10)
    assert count(dev, key) == 1
    assert [tick_ms_of(i, name) for i in tick_invocations(dev, key)] == [tick_ms]
    described = httpx.get(f"{dev.admin_url}/schedules/{name}", timeout=10).json()
    assert described["last_invocation_id"] == first
    assert described["next_tick"] is not None


def test_a_tick_delivered_early_runs_it_and_moves_on_to_the_next(dev: DevServer) -> None:
    # GIVEN an hourly schedule whose next tick is the coming hour's
    name, key = unique("early"), unique("k")
    now = dev.control_plane.clock.now_ms()
    tick_ms = (now // 3_600_000 + 1) * 3_600_000
    dev.store.create_schedule(
        ScheduleRecord(
            name=name, service="Counter", handler="add", key=key, body="1", cron="0 * * * *",
            next_tick_ms=tick_ms, created_at_ms=now - 7_200_000, modified_at_ms=now - 7_200_000,
        )
    )  # fmt: skip

    # WHEN its timer fires before the tick's time (timers may fire a little early)
    first = dev.control_plane.schedules.tick(name, scheduled_ms=tick_ms)

    # THEN that tick runs, once, and the schedule waits for the tick after it, not for the same one again
    # (found by the simulator: the same timer fired again and again, and no later tick ever ran)
    assert first is not None
    assert dev.control_plane.schedules.tick(name, scheduled_ms=tick_ms) == first
    stored = dev.store.get_schedule(name)
    assert stored is not None
    assert (stored.last_tick_ms, stored.next_tick_ms) == (tick_ms, tick_ms + 3_600_000)
    wait_for(lambda: count(dev, key) >= 1, 10, "the tick's add")
    assert [tick_ms_of(i, name) for i in tick_invocations(dev, key)] == [tick_ms]


def test_a_tick_timer_armed_before_a_pause_sends_nothing_after_the_resume(dev: DevServer) -> None:
    # GIVEN an hourly schedule resumed just now, after a pause over this hour's tick: its last tick ran
    # two hours ago, its next one is the coming hour's
    name, key = unique("resumed"), unique("k")
    now = dev.control_plane.clock.now_ms()
    hour_ms = now // 3_600_000 * 3_600_000
    dev.store.create_schedule(
        ScheduleRecord(
            name=name, service="Counter", handler="add", key=key, body="1", cron="0 * * * *",
            next_tick_ms=hour_ms + 3_600_000, last_tick_ms=hour_ms - 7_200_000,
            created_at_ms=now - 10_800_000, modified_at_ms=now,
        )
    )  # fmt: skip

    # WHEN the timer armed before the pause, for the tick an hour ago, is delivered now
    sent = dev.control_plane.schedules.tick(name, scheduled_ms=hour_ms - 3_600_000)

    # THEN it sends nothing: the ticks missed while paused do not run (found by the simulator)
    assert sent is None
    stored = dev.store.get_schedule(name)
    assert stored is not None
    assert (stored.last_tick_ms, stored.next_tick_ms) == (hour_ms - 7_200_000, hour_ms + 3_600_000)
    assert tick_invocations(dev, key) == []


def test_pause_stops_ticks_and_resume_restarts_them(dev: DevServer) -> None:
    name, key = unique("pausing"), unique("k")
    assert create(dev, name=name, every="1s", target="Counter/add", key=key, body=1).status_code == 201
    wait_for(lambda: len(tick_invocations(dev, key)) >= 1, 10, "a first tick")

    # WHEN it is paused
    paused = httpx.patch(f"{dev.admin_url}/schedules/{name}/pause", timeout=10)
    assert paused.status_code == 200, paused.text
    assert paused.json()["paused"] is True
    settled = len(tick_invocations(dev, key))
    wait_for(lambda: dev.scheduler.wait_idle(5, within_ms=0), 10, "the scheduler to go idle")
    settled = len(tick_invocations(dev, key))

    # THEN no tick runs for 2.5 s
    with pytest.raises(AssertionError):
        wait_for(lambda: len(tick_invocations(dev, key)) > settled, 2.5, "a tick while paused")

    # WHEN it is resumed, THEN it ticks again
    resumed = httpx.patch(f"{dev.admin_url}/schedules/{name}/resume", timeout=10)
    assert resumed.status_code == 200, resumed.text
    assert resumed.json()["paused"] is False
    wait_for(lambda: len(tick_invocations(dev, key)) >= settled + 2, 10, "two ticks after resuming")


def test_delete_stops_ticks(dev: DevServer) -> None:
    name, key = unique("deleted"), unique("k")
    assert create(dev, name=name, every="1s", target="Counter/add", key=key, body=1).status_code == 201
    wait_for(lambda: len(tick_invocations(dev, key)) >= 1, 10, "a first tick")
    assert httpx.delete(f"{dev.admin_url}/schedules/{name}", timeout=10).status_code == 202
    assert httpx.get(f"{dev.admin_url}/schedules/{name}", timeout=10).status_code == 404
    dev.scheduler.wait_idle(5, within_ms=0)
    settled = len(tick_invocations(dev, key))
    with pytest.raises(AssertionError):
        wait_for(lambda: len(tick_invocations(dev, key)) > settled, 2.5, "a tick after delete")


@pytest.mark.parametrize(
    ("body", "message"),
    [
        ({"every": "1m", "target": "Nope/add"}, "does not exist"),
        ({"every": "1m", "target": "Counter/nope", "key": "k"}, "does not exist"),
        ({"every": "1m", "target": "Counter/add"}, "needs a key"),
        ({"every": "1m", "target": "Greeter/greet", "key": "k", "body": "x"}, "drop the key"),
        ({"cron": "0 * * *", "target": "Greeter/greet", "body": "x"}, "has 4 fields; write 5"),
        ({"cron": "61 * * * *", "target": "Greeter/greet", "body": "x"}, "not valid"),
        ({"every": "soon", "target": "Greeter/greet", "body": "x"}, "not a duration"),
        ({"every": "500ms", "target": "Greeter/greet", "body": "x"}, "shorter than 1s"),
        ({"target": "Greeter/greet"}, "exactly one"),
        ({"every": "1m", "cron": "* * * * *", "target": "Greeter/greet"}, "exactly one"),
        ({"every": "1m", "target": "Greeter"}, "Service/handler"),
        ({"every": "1m", "target": "Signup/run", "key": "k", "body": "a@b"}, "runs once per workflow id"),
        ({"cron": "0 0 30 2 *", "target": "Greeter/greet", "body": "x"}, "'0 0 30 2 *' never fires"),
        ({"cron": "0 9 * * 1#2", "target": "Greeter/greet", "body": "x"}, "field '1#2' is not supported"),
        ({"cron": "0 0 L * *", "target": "Greeter/greet", "body": "x"}, "field 'L' is not supported"),
        ({"every": "1m", "target": "Counter/add", "key": "k" * 1025, "body": 1}, "at most 1024 bytes"),
        ({"every": "1m", "target": "Greeter/greet", "body": "x" * 300_000}, "at most 262144 bytes"),
        ({"every": "1" * 100, "target": "Greeter/greet", "body": "x"}, "not a duration"),
    ],
)
def test_what_cannot_be_a_schedule_is_a_400(dev: DevServer, body: dict[str, object], message: str) -> None:
    name = unique("bad")
    reply = create(dev, name=name, **body)
    assert reply.status_code == 400, reply.text
    assert message in reply.json()["message"]
    assert httpx.get(f"{dev.admin_url}/schedules/{name}", timeout=10).status_code == 404


def test_a_name_is_taken_once(dev: DevServer) -> None:
    name = unique("twice")
    assert create(dev, name=name, every="1h", target="Greeter/greet", body="a").status_code == 201
    again = create(dev, name=name, every="1h", target="Greeter/greet", body="b")
    assert again.status_code == 409, again.text
    assert httpx.get(f"{dev.admin_url}/schedules", timeout=10).json()["schedules"][0]["body"] == "a"


def test_a_restart_keeps_schedules_and_runs_missed_ticks_once(tmp_path: Path, services_url: str) -> None:
    # GIVEN a schedule ticking every second in torpor dev on a data directory
    name, key = unique("kept"), unique("k")
    server = start_dev(tmp_path, services_url)
    try:
        assert create(server, name=name, every="1s", target="Counter/add", key=key, body=1).status_code == 201
        wait_for(lambda: len(tick_invocations(server, key)) >= 1, 10, "a first tick")
    finally:
        server.stop()
    stopped_ms = server.control_plane.clock.now_ms()
    before = {tick_ms_of(i, name) for i in tick_invocations_offline(tmp_path, key)}

    # WHEN torpor dev is down for 3 s (three ticks missed), then starts again on the same directory
    wait_for(lambda: server.control_plane.clock.now_ms() > stopped_ms + 3_000, 5, "3 s of downtime")
    starting_ms = server.control_plane.clock.now_ms()
    restarted = start_dev(tmp_path, None)
    try:
        restarted_ms = restarted.control_plane.clock.now_ms()
        # THEN the schedule is still there, and the missed ticks ran as one catch-up tick, labelled
        # with the second the restarted server ran it (the start may take more than a second under load)
        listed = httpx.get(f"{restarted.admin_url}/schedules", timeout=10).json()["schedules"]
        assert [s["name"] for s in listed] == [name]
        wait_for(lambda: len(tick_invocations(restarted, key)) >= len(before) + 2, 10, "ticks after the restart")
        ticks = [tick_ms_of(i, name) for i in tick_invocations(restarted, key)]
        after = sorted(t for t in ticks if t not in before)
        assert len(after) == len(set(after)), ticks  # each tick once
        in_downtime = [t for t in after if t < starting_ms // 1000 * 1000]
        assert in_downtime == [], (sorted(before), ticks, starting_ms)  # not one tick per missed second
        catch_up = after[0]
        assert starting_ms // 1000 * 1000 <= catch_up <= restarted_ms, (before, ticks, starting_ms, restarted_ms)
    finally:
        restarted.stop()


def tick_invocations_offline(data_dir: Path, key: str) -> list[dict[str, Any]]:
    """The `Counter/add` invocations on `key` in a stopped dev server's store, as the admin API shows them."""
    from adapters.local.dev import SQLITE_FILE
    from adapters.local.sqlite_store import SQLiteStore

    store = SQLiteStore(str(data_dir / SQLITE_FILE))
    try:
        return [{"idempotency_key": r.idempotency_key} for r in store.list_invocations(None, "Counter", 1000, key=key)]
    finally:
        store.close()


def torpor(dev: DevServer, *args: str) -> Result:
    """`torpor --admin-url … ARGS` in-process."""
    return CliRunner().invoke(
        main, ["--admin-url", dev.admin_url, *args], env={"COLUMNS": "200"}, catch_exceptions=False
    )


def test_the_cli_creates_lists_describes_pauses_resumes_and_deletes(dev: DevServer) -> None:
    name, key = unique("cli"), unique("k")
    created = torpor(
        dev, "schedules", "create", name, "--every", "1h", "--target", "Counter/add", "--key", key, "--body", "2"
    )
    assert created.exit_code == 0, created.output
    assert f"Created schedule {name}" in created.output
    assert f"Counter/{key}/add" in created.output

    listed = torpor(dev, "schedules", "list")
    assert listed.exit_code == 0, listed.output
    assert name in listed.output
    assert "every 1h" in listed.output

    described = torpor(dev, "--json", "schedules", "describe", name)
    assert described.exit_code == 0, described.output
    assert json.loads(described.output)["body"] == 2

    paused = torpor(dev, "schedules", "pause", name)
    assert paused.exit_code == 0, paused.output
    assert "paused" in paused.output
    assert torpor(dev, "schedules", "resume", name).exit_code == 0
    assert httpx.get(f"{dev.admin_url}/schedules/{name}", timeout=10).json()["paused"] is False

    deleted = torpor(dev, "schedules", "delete", name, "-y")
    assert deleted.exit_code == 0, deleted.output
    assert httpx.get(f"{dev.admin_url}/schedules/{name}", timeout=10).status_code == 404


def test_the_cli_names_what_is_wrong(dev: DevServer) -> None:
    both = torpor(dev, "schedules", "create", "x", "--every", "1m", "--cron", "* * * * *", "--target", "Greeter/greet")
    assert both.exit_code != 0
    assert "exactly one of --cron" in both.output
    missing = torpor(dev, "schedules", "create", unique("x"), "--every", "1m", "--target", "Nope/greet")
    assert missing.exit_code == 1
    assert "Nope/greet does not exist" in missing.output
    unknown = torpor(dev, "schedules", "delete", "never-made", "-y")
    assert unknown.exit_code == 1
    assert "not found" in unknown.output


def test_the_openapi_document_describes_schedules(dev: DevServer) -> None:
    from openapi_schema_validator import OAS31Validator

    name = unique("documented")
    assert create(dev, name=name, every="1h", target="Counter/add", key="k", body=1).status_code == 201
    document = httpx.get(f"{dev.admin_url}/openapi", timeout=10).json()
    assert {"/schedules", "/schedules/{name}", "/schedules/{name}/pause"} <= set(document["paths"])
    components = {"components": document["components"]}
    for path, schema in (("/schedules", "ListSchedulesResponse"), (f"/schedules/{name}", "Schedule")):
        validator = OAS31Validator({"$ref": f"#/components/schemas/{schema}", **components})
        validator.validate(httpx.get(f"{dev.admin_url}{path}", timeout=10).json())


def test_a_tick_whose_target_went_away_is_lost_and_the_schedule_goes_on(dev: DevServer) -> None:
    # GIVEN a schedule whose target is no longer registered (as after its deployment was removed)
    name = unique("orphan")
    now = dev.control_plane.clock.now_ms()
    dev.store.create_schedule(
        ScheduleRecord(
            name=name, service="Gone", handler="run", every_ms=3_600_000, next_tick_ms=now // 3_600_000 * 3_600_000,
            created_at_ms=now - 7_200_000, modified_at_ms=now - 7_200_000,
        )
    )  # fmt: skip

    # WHEN its tick comes, THEN nothing is sent, and the schedule waits for its next tick
    assert dev.control_plane.schedules.tick(name) is None
    after = dev.store.get_schedule(name)
    assert after is not None
    assert after.next_tick_ms == (now // 3_600_000 + 1) * 3_600_000
    assert after.last_invocation_id == ""


def test_delete_asks_in_a_terminal_but_not_before_an_error(dev: DevServer, monkeypatch: pytest.MonkeyPatch) -> None:
    import sys

    monkeypatch.setattr(sys.modules["adapters.cli.client"], "interactive", lambda: True)
    unknown = CliRunner().invoke(main, ["--admin-url", dev.admin_url, "schedules", "delete", unique("never")])
    assert unknown.exit_code == 1
    assert "not found" in unknown.stderr
    assert "?" not in unknown.stderr
    name = unique("asked")
    assert create(dev, name=name, every="1h", target="Greeter/greet", body="x").status_code == 201
    asked = CliRunner().invoke(main, ["--admin-url", dev.admin_url, "schedules", "delete", name], input="n\n")
    assert "Delete schedule" in asked.stderr
    assert asked.exit_code == 1
    assert httpx.get(f"{dev.admin_url}/schedules/{name}", timeout=10).status_code == 200
