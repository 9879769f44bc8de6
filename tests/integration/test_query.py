"""`POST /query` (SQL introspection on DataFusion) on `torpor dev` with the example services: JSON and
Arrow answers, queries by id and status, joins with the journal, object state, bad queries; the
store reads a query causes (a query by id reads one record); and the real `restate` CLI 1.7.12's
`invocations list`, `invocations describe` and `sql` against it.
"""

from __future__ import annotations

import json
import os
import platform
import shutil
import subprocess
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pyarrow as pa
import pytest
from click.testing import CliRunner, Result

from adapters.cli import main
from adapters.local.dev import DevServer
from adapters.query.engine import DataFusionQuery
from control_plane.errors import BadRequest
from control_plane.settings import Settings
from tests.helpers.dev import wait_for
from tests.helpers.records import invocation
from tests.helpers.services import REPO_ROOT, serve_examples
from tests.helpers.stores import STORE_KINDS, Store, store_of_param

SETTINGS = Settings(inactivity_timeout_ms=5_000, lease_margin_ms=1_000, call_wait_ms=30_000)
LONG_MS = 600_000  # sleeps that outlive the module


@dataclass(frozen=True)
class World:
    """`torpor dev` with the examples registered and a few invocations in known statuses."""

    admin: str
    ingress: str
    greeted: str  # Greeter/greet, completed
    counted: str  # Counter/q-1/add 5, completed: state count = 5
    sleeping: tuple[str, str]  # Waits/sleep, suspended
    holder: str  # Counter/q-2/add_after_sleep, suspended while it holds key q-2
    queued: str  # Counter/q-2/add, pending behind it
    workflow: str  # Signup/q-wf/run, suspended on its promise "confirmation"


def query(admin: str, sql: str, accept: str | None = "application/json") -> httpx.Response:
    headers = {"accept": accept} if accept else {}
    return httpx.post(f"{admin}/query", json={"query": sql}, headers=headers, timeout=30)


def rows(admin: str, sql: str) -> list[dict[str, Any]]:
    reply = query(admin, sql)
    assert reply.status_code == 200, reply.text
    assert reply.headers["content-type"] == "application/json"
    result: list[dict[str, Any]] = reply.json()["rows"]
    return result


@pytest.fixture(scope="module")
def world(tmp_path_factory: pytest.TempPathFactory) -> Iterator[World]:
    tmp = tmp_path_factory.mktemp("query")
    with serve_examples(side_effects_file=tmp / "effects.jsonl") as (services_url, _services):
        dev = DevServer(ingress_port=0, admin_port=0, data_dir=tmp / "data", settings=SETTINGS)
        dev.start()
        try:
            assert httpx.post(f"{dev.admin_url}/deployments", json={"uri": services_url}, timeout=30).status_code == 201
            ingress = dev.ingress_url
            greeted = httpx.post(f"{ingress}/Greeter/greet", json="Ann", timeout=30).headers["x-restate-id"]
            counted = httpx.post(f"{ingress}/Counter/q-1/add", json=5, timeout=30).headers["x-restate-id"]

            def send(path: str, body: object) -> str:
                reply = httpx.post(f"{ingress}/{path}/send", json=body, timeout=30)
                assert reply.status_code == 202, reply.text
                invocation_id: str = reply.json()["invocationId"]
                return invocation_id

            sleeping = (send("Waits/sleep", LONG_MS), send("Waits/sleep", LONG_MS))
            holder = send("Counter/q-2/add_after_sleep", {"ms": LONG_MS, "delta": 1})
            queued = send("Counter/q-2/add", 1)
            workflow = send("Signup/q-wf/run", "ann@example.com")
            confirmed = send("Signup/q-wf2/run", "bob@example.com")
            assert httpx.post(f"{ingress}/Signup/q-wf2/confirm", json="C-2", timeout=30).status_code == 200
            assert httpx.get(f"{ingress}/restate/invocation/{confirmed}/attach", timeout=30).status_code == 200
            for invocation_id in (*sleeping, holder, workflow):
                url = f"{dev.admin_url}/invocations/{invocation_id}"
                wait_for(lambda u=url: httpx.get(u).json()["status"] == "suspended", 20, f"{invocation_id} to suspend")
            yield World(dev.admin_url, ingress, greeted, counted, sleeping, holder, queued, workflow)
        finally:
            dev.stop()


def test_a_query_by_id_answers_the_invocation_as_json_rows(world: World) -> None:
    answer = rows(
        world.admin,
        f"SELECT id, target, target_service_ty, status, completion_result, created_at, invoked_by "
        f"FROM sys_invocation WHERE id = '{world.counted}'",
    )
    assert len(answer) == 1
    row = answer[0]
    assert row.pop("created_at").endswith("Z")
    assert row == {
        "id": world.counted,
        "target": "Counter/q-1/add",
        "target_service_ty": "virtual_object",
        "status": "completed",
        "completion_result": "success",
        "invoked_by": "ingress",
    }


def test_a_query_by_status_lists_those_invocations_and_leaves_null_columns_out(world: World) -> None:
    answer = rows(
        world.admin,
        "SELECT id, target_service_key, status FROM sys_invocation WHERE status = 'suspended' ORDER BY id",
    )
    assert answer == sorted(
        [
            {"id": world.sleeping[0], "status": "suspended"},  # a plain service: no key, so no column
            {"id": world.sleeping[1], "status": "suspended"},
            {"id": world.holder, "target_service_key": "q-2", "status": "suspended"},
            {"id": world.workflow, "target_service_key": "q-wf", "status": "suspended"},
        ],
        key=lambda r: r["id"],
    )
    pending = rows(world.admin, "SELECT id FROM sys_invocation_status WHERE status = 'inboxed'")
    assert pending == [{"id": world.queued}]


def test_a_join_of_sys_invocation_with_sys_journal_gives_each_entry(world: World) -> None:
    answer = rows(
        world.admin,
        "SELECT j.id, j.index, j.entry_type, j.sleep_wakeup_at IS NOT NULL AS sleeps FROM sys_invocation i "
        "JOIN sys_journal j ON i.id = j.id WHERE i.target_service_name = 'Waits' AND i.status = 'suspended' "
        "ORDER BY j.id, j.index",
    )
    expected = [
        row
        for invocation_id in sorted(world.sleeping)
        for row in (
            {"id": invocation_id, "index": 0, "entry_type": "Command: Input", "sleeps": False},
            {"id": invocation_id, "index": 1, "entry_type": "Command: Sleep", "sleeps": True},
        )
    ]
    assert answer == expected


def test_state_of_an_object_and_who_holds_and_waits_for_its_key(world: World) -> None:
    where = "WHERE service_name = 'Counter' AND service_key"
    state = rows(world.admin, f"SELECT key, value_utf8, value FROM state {where} = 'q-1'")
    assert state == [{"key": "count", "value_utf8": "5", "value": "35"}]  # binary columns in hex, as restate-server
    holder = rows(world.admin, f"SELECT invocation_id FROM sys_keyed_service_status {where} = 'q-2'")
    assert holder == [{"invocation_id": world.holder}]
    inbox = rows(world.admin, "SELECT id, sequence_number FROM sys_inbox WHERE service_name = 'Counter'")
    assert inbox == [{"id": world.queued, "sequence_number": 0}]


def test_a_call_from_a_handler_names_its_caller(world: World) -> None:
    reply = httpx.post(f"{world.ingress}/Calls/greet_twice", json="Cy", timeout=30)
    assert reply.status_code == 200, reply.text
    caller = reply.headers["x-restate-id"]
    answer = rows(
        world.admin,
        "SELECT target, invoked_by, invoked_by_id, invoked_by_service_name, invoked_by_target FROM sys_invocation "
        f"WHERE invoked_by_id = '{caller}'",
    )
    called_by = {
        "invoked_by": "service",
        "invoked_by_id": caller,
        "invoked_by_service_name": "Calls",
        "invoked_by_target": "Calls/greet_twice",
    }
    assert answer == [{"target": "Greeter/greet", **called_by}] * 2
    calls = rows(
        world.admin,
        "SELECT j.invoked_id, j.invoked_target, i.invoked_by_id FROM sys_journal j "
        f"JOIN sys_invocation i ON i.id = j.invoked_id WHERE j.id = '{caller}' AND j.entry_type = 'Command: Call'",
    )
    # each Call names its callee's id: joined back, the callee says it was invoked by this caller
    assert [(c["invoked_target"], c["invoked_by_id"]) for c in calls] == [("Greeter/greet", caller)] * 2
    assert len({c["invoked_id"] for c in calls}) == 2


def test_durable_promises_of_workflows(world: World) -> None:
    answer = rows(
        world.admin,
        "SELECT service_key, key, completed, completion_success_value_utf8 FROM sys_promise "
        "WHERE service_name = 'Signup' ORDER BY service_key",
    )
    assert answer == [
        {"service_key": "q-wf", "key": "confirmation", "completed": False},
        {"service_key": "q-wf2", "key": "confirmation", "completed": True, "completion_success_value_utf8": '"C-2"'},
    ]


def test_services_and_deployments_tables(world: World) -> None:
    names = "('Greeter', 'Counter', 'Signup')"
    services = rows(world.admin, f"SELECT name, ty, public FROM sys_service WHERE name IN {names} ORDER BY name")
    assert services == [
        {"name": "Counter", "ty": "virtual_object", "public": True},
        {"name": "Greeter", "ty": "service", "public": True},
        {"name": "Signup", "ty": "workflow", "public": True},
    ]
    deployments = rows(world.admin, "SELECT ty, array_has(services, 'Greeter') AS hosts FROM sys_deployment")
    assert deployments == [{"ty": "http", "hosts": True}]


def test_without_accept_json_the_answer_is_an_arrow_ipc_stream(world: World) -> None:
    sql = f"SELECT id, created_at, retry_count FROM sys_invocation WHERE id = '{world.greeted}'"
    reply = query(world.admin, sql, None)
    assert reply.status_code == 200
    assert reply.headers["content-type"] == "application/vnd.apache.arrow.stream"
    table = pa.ipc.open_stream(reply.content).read_all()
    assert table.schema.field("created_at").type == pa.timestamp("ms", tz="+00:00")
    assert table.schema.field("retry_count").type == pa.uint64()
    assert table.column("id").to_pylist() == [world.greeted]


@pytest.mark.parametrize(
    ("sql", "says"),
    [
        ("SELEC 1", "Expected: an SQL statement"),
        ("SELECT nope FROM sys_invocation", "No field named nope"),
        ("SELECT * FROM sys_nothing", "sys_nothing' not found"),
        ("SELECT CAST(id AS INT) FROM sys_invocation", "Cannot cast"),
    ],
)
def test_a_bad_query_is_a_400_with_code_and_message(world: World, sql: str, says: str) -> None:
    reply = query(world.admin, sql)
    assert reply.status_code == 400, reply.text
    body = reply.json()
    assert body["code"] == 400
    assert says in body["message"]


def test_a_body_without_a_query_is_a_400(world: World) -> None:
    reply = httpx.post(f"{world.admin}/query", json={"sql": "SELECT 1"}, timeout=10)
    assert reply.status_code == 400
    assert reply.json() == {
        "code": 400,
        "message": 'the body must be a JSON object like {"query": "SELECT id, status FROM sys_invocation"}',
    }


def test_the_queries_the_restate_cli_sends_after_1_5(world: World) -> None:
    """The two queries of `restate invocations list` against a server that says it is 1.5 or newer
    (`cli/src/clients/datafusion_helpers/v2.rs`), by their text."""
    ids = rows(
        world.admin,
        "SELECT id FROM sys_invocation inv WHERE inv.target_service_name IN ('Waits') AND status != 'completed' "
        "ORDER BY inv.created_at DESC, inv.id LIMIT 1",
    )
    assert ids == [{"id": world.sleeping[1]}]  # the newest
    described = rows(
        world.admin,
        "SELECT inv.id, inv.target, inv.target_service_ty, inv.idempotency_key, inv.status, inv.created_at, "
        "inv.modified_at as state_modified_at, inv.pinned_deployment_id, inv.retry_count as num_retries, "
        "inv.last_failure as last_failure_message, inv.last_failure_related_entry_index as last_failure_entry_index, "
        "inv.last_attempt_deployment_id, inv.next_retry_at, inv.last_start_at, inv.invoked_by_id, "
        "inv.invoked_by_target, inv.trace_id, inv.completion_result, inv.completion_failure, "
        "dp.id IS NOT NULL as pinned_deployment_exists FROM sys_invocation inv "
        f"LEFT JOIN sys_deployment dp ON dp.id = inv.pinned_deployment_id WHERE inv.id in ('{world.holder}') "
        "ORDER BY inv.created_at DESC, inv.id",
    )
    assert [(r["id"], r["target"], r["status"], r["pinned_deployment_exists"]) for r in described] == [
        (world.holder, "Counter/q-2/add_after_sleep", "suspended", True)
    ]


def test_the_queries_of_restate_services_status(world: World) -> None:
    """`restate services status Counter` (`get_service_status`, `get_locked_keys_status`), by their text."""
    inboxed = rows(
        world.admin,
        "SELECT target_service_name, target_handler_name, 'pending' as status, COUNT(1) as num_invocations, "
        "MIN(created_at) as oldest_at, FIRST_VALUE(id ORDER BY created_at ASC) as oldest_invocation "
        "FROM sys_invocation_status WHERE status == 'inboxed' AND target_service_name IN ('Counter') "
        "GROUP BY target_service_name, target_handler_name",
    )
    assert [(r["target_handler_name"], r["num_invocations"], r["oldest_invocation"]) for r in inboxed] == [
        ("add", 1, world.queued)
    ]
    locked = rows(
        world.admin,
        "SELECT target_service_name as service_name, target_service_key as service_key, status as invocation_status, "
        "first_value(id) as invocation_holding_lock, "
        "first_value(target_handler_name) as invocation_method_holding_lock, "
        "first_value(modified_at) as modified_at, first_value(last_failure) as last_failure_message, "
        "first_value(next_retry_at) as next_retry_at, first_value(last_start_at) as last_start_at, "
        "0 as num_pending, sum(retry_count) as num_retries FROM sys_invocation "
        "WHERE status != 'pending' AND target_service_name IN ('Counter') "
        "GROUP BY target_service_name, target_service_key, status ORDER BY service_key",
    )
    assert [(r["service_key"], r["invocation_status"], r["invocation_holding_lock"]) for r in locked] == [
        ("q-1", "completed", world.counted),
        ("q-2", "suspended", world.holder),
    ]
    inbox = rows(
        world.admin,
        "SELECT service_name, service_key, COUNT(1) as num_pending FROM sys_inbox WHERE service_name IN ('Counter') "
        "GROUP BY service_name, service_key ORDER BY num_pending DESC",
    )
    assert inbox == [{"service_name": "Counter", "service_key": "q-2", "num_pending": 1}]


# --- read-only, and bounded ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("sql", "word"),
    [
        ("COPY (SELECT 'x' AS x) TO '{file}' STORED AS CSV", "COPY"),
        ("CREATE TABLE t AS SELECT 1 AS x", "CREATE"),
        ("CREATE EXTERNAL TABLE host STORED AS CSV LOCATION '/etc/hostname'", "CREATE"),
        ("INSERT INTO sys_service (name) VALUES ('x')", "INSERT"),
        ("SET datafusion.execution.batch_size = 1", "SET"),
        ("DROP TABLE sys_invocation", "DROP"),
        ("EXPLAIN COPY (SELECT 'x' AS x) TO '{file}' STORED AS CSV", "COPY"),
    ],
)
def test_only_queries_run(world: World, tmp_path: Path, sql: str, word: str) -> None:
    written = tmp_path / "written.csv"
    reply = query(world.admin, sql.format(file=written))
    assert reply.status_code == 400, reply.text
    assert reply.json() == {
        "code": 400,
        "message": f"only SELECT queries are accepted: SQL introspection is read-only ({word} is not a query)",
    }
    assert not written.exists()
    assert rows(world.admin, "SELECT count(*) AS n FROM sys_invocation WHERE id = 'inv_nothing'") == [{"n": 0}]


def peak_rss_mb() -> float:
    """This process's peak resident set (MB): torpor dev runs in it."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    raise AssertionError("no VmHWM in /proc/self/status")


@pytest.mark.parametrize(
    ("sql", "function"),
    [
        ("SELECT * FROM range(1, 100000000)", "range"),
        ("SELECT max(value) FROM generate_series(1, 100000000)", "generate_series"),
        ("SELECT unnest(range(1, 100000000))", "range"),  # evaluated while planning: 800 MB at once
        ("SELECT length(repeat('x', 2000000000))", "repeat"),
    ],
)
def test_functions_that_build_data_of_any_size_are_refused_and_memory_stays_bounded(
    world: World, sql: str, function: str
) -> None:
    before = peak_rss_mb()
    reply = query(world.admin, sql)
    assert reply.status_code == 400, reply.text
    assert reply.json()["message"].startswith(f"{function}() is not available in SQL introspection")
    assert peak_rss_mb() - before < 300


def test_recursive_ctes_are_refused(world: World) -> None:
    reply = query(world.admin, "WITH RECURSIVE t(n) AS (SELECT 1 UNION ALL SELECT n + 1 FROM t) SELECT max(n) FROM t")
    assert reply.status_code == 400, reply.text
    assert "Recursive CTEs are not enabled" in reply.json()["message"]


# --- torpor sql -------------------------------------------------------------------------------------------


def torpor_sql(world: World, *args: str) -> Result:
    runner = CliRunner()
    return runner.invoke(main, ["--admin-url", world.admin, "sql", *args], env={"COLUMNS": "200"})


def test_torpor_sql_prints_a_table_and_with_json_the_rows(world: World) -> None:
    sql = f"SELECT id, target_service_key, status FROM sys_invocation WHERE id IN ('{world.queued}', '{world.greeted}')"
    table = torpor_sql(world, sql)
    assert table.exit_code == 0, table.output
    lines = table.stdout.splitlines()
    assert any("ID" in line and "TARGET_SERVICE_KEY" in line and "STATUS" in line for line in lines)
    assert any(world.queued in line and "q-2" in line and "pending" in line for line in lines)
    assert any(world.greeted in line and "completed" in line for line in lines)
    assert "2 rows." in table.stderr
    as_json = torpor_sql(world, "--json", f"SELECT id, status FROM sys_invocation WHERE id = '{world.greeted}'")
    assert as_json.exit_code == 0, as_json.output
    assert json.loads(as_json.stdout) == [{"id": world.greeted, "status": "completed"}]


def test_torpor_sql_with_a_bad_query_prints_the_message_and_exits_1(world: World) -> None:
    done = torpor_sql(world, "SELECT nope FROM sys_invocation")
    assert done.exit_code == 1
    assert done.stderr.startswith("Error: bad query: Schema error: No field named nope.")


# --- store reads: filters go to the store's indexes ---------------------------------------------------


class CountingStore:
    """A store that counts the calls made to it and the invocation records they return."""

    def __init__(self, store: Store) -> None:
        self.store = store
        self.calls: list[str] = []
        self.records_read = 0

    def __getattr__(self, name: str) -> Any:
        method = getattr(self.store, name)

        def counted(*args: Any, **kwargs: Any) -> Any:
            self.calls.append(name)
            result = method(*args, **kwargs)
            if name == "list_invocations":
                self.records_read += len(result)
            elif name in ("get_invocation", "load_invocation") and result is not None:
                self.records_read += 1
            return result

        return counted


@pytest.fixture(scope="module", params=STORE_KINDS)
def sixty_invocations(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Store:
    """60 invocations in a new store (SQLite, and DynamoDB on the session's moto server): Greeter
    ones completed, Counter ones suspended, one a ms. Filled once per module (60 writes take seconds
    on moto): the tests below only read it."""
    store = store_of_param(request, tmp_path_factory.mktemp("query-store"), "moto_endpoint")
    for n in range(60):
        counter = n % 2 == 1
        store.create_invocation(
            invocation(
                f"inv_1{n:022d}",
                service="Counter" if counter else "Greeter",
                handler="add" if counter else "greet",
                key=f"k{n}" if counter else "",
                service_type="VIRTUAL_OBJECT" if counter else "SERVICE",
                status="suspended" if counter else "completed",
                created_at_ms=1_000 + n,
                modified_at_ms=1_000 + n,
            )
        )
    return store


@pytest.fixture
def counting(sixty_invocations: Store) -> CountingStore:
    """The 60 invocations' store behind a new call counter (nothing counted yet)."""
    return CountingStore(sixty_invocations)


def json_rows(engine: DataFusionQuery, sql: str) -> list[dict[str, Any]]:
    answer = engine.run(sql, as_json=True)
    result: list[dict[str, Any]] = json.loads(answer.body)["rows"]
    return result


def test_a_query_by_id_reads_one_record(counting: CountingStore) -> None:
    engine = DataFusionQuery(counting)  # type: ignore[arg-type]
    answer = json_rows(engine, f"SELECT id, status FROM sys_invocation WHERE id = 'inv_1{7:022d}'")
    assert answer == [{"id": f"inv_1{7:022d}", "status": "suspended"}]
    assert counting.calls == ["get_invocation"]
    assert counting.records_read == 1


def test_a_query_by_status_with_order_and_limit_reads_about_the_limit(counting: CountingStore) -> None:
    engine = DataFusionQuery(counting)  # type: ignore[arg-type]
    answer = json_rows(
        engine,
        "SELECT id FROM sys_invocation inv WHERE status IN ('suspended', 'paused', 'running', 'backing-off') "
        "ORDER BY inv.created_at DESC, inv.id LIMIT 3",
    )
    assert answer == [{"id": f"inv_1{n:022d}"} for n in (59, 57, 55)]
    assert set(counting.calls) == {"list_invocations"}
    assert counting.records_read <= 4 * 4  # a page of limit + 1 per status asked, not 30 suspended ones


def test_a_query_by_service_with_a_limit_stops_at_the_limit(counting: CountingStore) -> None:
    engine = DataFusionQuery(counting)  # type: ignore[arg-type]
    answer = json_rows(engine, "SELECT id FROM sys_invocation WHERE target_service_name = 'Greeter' LIMIT 5")
    assert len(answer) == 5
    assert counting.records_read <= 6


def test_a_journal_by_id_reads_one_journal(counting: CountingStore) -> None:
    engine = DataFusionQuery(counting)  # type: ignore[arg-type]
    answer = json_rows(engine, f"SELECT id, index FROM sys_journal WHERE id = 'inv_1{4:022d}'")
    assert answer == [{"id": f"inv_1{4:022d}", "index": 0}]  # the record's input entry alone
    assert counting.calls == ["load_invocation"]


def test_a_journal_joined_with_invocations_reads_the_journals_of_those_alone(counting: CountingStore) -> None:
    engine = DataFusionQuery(counting)  # type: ignore[arg-type]
    answer = json_rows(
        engine,
        "SELECT i.id, j.index FROM sys_invocation i JOIN sys_journal j ON i.id = j.id "
        "WHERE i.target_service_name = 'Counter' AND i.target_service_key = 'k7'",
    )
    assert answer == [{"id": f"inv_1{7:022d}", "index": 0}]
    assert counting.calls.count("load_invocation") == 1


def test_a_query_that_would_read_too_many_invocations_is_refused(counting: CountingStore) -> None:
    engine = DataFusionQuery(counting, max_reads=50)  # type: ignore[arg-type]
    with pytest.raises(BadRequest, match="would read more than 50 invocations"):
        engine.run("SELECT count(*) FROM sys_invocation WHERE lower(id) LIKE 'inv%'", as_json=True)


def test_an_answer_over_max_rows_is_refused(counting: CountingStore) -> None:
    engine = DataFusionQuery(counting, max_rows=10)  # type: ignore[arg-type]
    assert len(json_rows(engine, "SELECT id FROM sys_invocation LIMIT 10")) == 10
    for sql in ("SELECT id FROM sys_invocation", "SELECT a.id FROM sys_invocation a, sys_invocation b"):
        with pytest.raises(BadRequest, match=r"the answer has more than 10 rows \(TORPOR_QUERY_MAX_ROWS\)"):
            engine.run(sql, as_json=False)


def test_a_query_over_the_memory_pool_is_refused(counting: CountingStore) -> None:
    engine = DataFusionQuery(counting, memory_bytes=4096)  # type: ignore[arg-type]
    with pytest.raises(BadRequest, match=r"needs more than 4096 bytes of memory \(TORPOR_QUERY_MEMORY_BYTES\)"):
        engine.run("SELECT a.id, b.id FROM sys_invocation a JOIN sys_invocation b ON a.status = b.status "
                   "ORDER BY a.target, b.target LIMIT 5", as_json=True)  # fmt: skip


def test_point_reads_over_max_rows_are_refused_before_the_store_is_read(counting: CountingStore) -> None:
    engine = DataFusionQuery(counting, max_rows=10)  # type: ignore[arg-type]
    ids = ", ".join(f"'inv_1{n:022d}'" for n in range(11))
    with pytest.raises(BadRequest, match="would read 11 invocations by id one by one, more than 10"):
        engine.run(f"SELECT id FROM sys_invocation WHERE id IN ({ids})", as_json=True)
    services = ", ".join(f"'S{n}'" for n in range(4))
    with pytest.raises(BadRequest, match="would read 16 listings"):
        engine.run(
            f"SELECT id FROM sys_invocation WHERE target_service_name IN ({services}) "
            f"AND target_handler_name IN ({services})",
            as_json=True,
        )
    assert counting.calls == []
    with pytest.raises(BadRequest, match="would read the journals of 11 invocations one by one"):
        engine.run("SELECT count(*) FROM sys_journal", as_json=True)
    assert "load_invocation" not in counting.calls
    assert counting.records_read <= 12  # enough to count past the bound, not the table


def test_a_query_past_its_deadline_is_stopped(counting: CountingStore) -> None:
    class SlowStore(CountingStore):
        def __getattr__(self, name: str) -> Any:
            method = super().__getattr__(name)

            def slow(*args: Any, **kwargs: Any) -> Any:
                time.sleep(0.1)
                return method(*args, **kwargs)

            return slow

    slow = SlowStore(counting.store)
    engine = DataFusionQuery(slow, timeout_s=0.5)  # type: ignore[arg-type]
    ids = ", ".join(f"'inv_1{n:022d}'" for n in range(30))
    started = time.monotonic()
    with pytest.raises(BadRequest, match=r"took longer than 0.5 s \(TORPOR_QUERY_TIMEOUT_MS\) and was stopped"):
        engine.run(f"SELECT id FROM sys_invocation WHERE id IN ({ids})", as_json=True)
    assert time.monotonic() - started < 1.5
    assert len(slow.calls) < 10


# --- the real restate CLI -------------------------------------------------------------------------------

RESTATE_CLI_VERSION = "1.7.12"
RESTATE_CLI_DIR = REPO_ROOT / ".cache" / "restate-cli"


def restate_cli() -> Path:
    """The `restate` CLI binary from npm (`@restatedev/restate`), installed into `.cache/restate-cli/`
    by scripts/test.sh (or here on first use)."""
    arch = {"x86_64": "x64", "amd64": "x64", "aarch64": "arm64", "arm64": "arm64"}[platform.machine().lower()]
    binary = RESTATE_CLI_DIR / f"node_modules/@restatedev/restate-linux-{arch}/bin/restate"
    if not binary.exists():
        npm = shutil.which("npm")
        if npm is None:
            pytest.fail("npm is needed to install the restate CLI")
        subprocess.run(
            [npm, "install", "--prefix", str(RESTATE_CLI_DIR), "--no-save", "--no-audit", "--no-fund",
             "--ignore-scripts", f"@restatedev/restate@{RESTATE_CLI_VERSION}"],
            check=True, capture_output=True, timeout=600,
        )  # fmt: skip
    return binary


def restate(world: World, *args: str) -> subprocess.CompletedProcess[str]:
    env = {
        **os.environ,
        "RESTATE_ADMIN_URL": world.admin,
        "RESTATE_CLI_CONFIG_HOME": tempfile.mkdtemp(prefix="restate-cli-"),
        "NO_COLOR": "1",
        "TERM": "dumb",
    }
    return subprocess.run([str(restate_cli()), *args], env=env, capture_output=True, text=True, timeout=60)


@pytest.mark.slow
def test_restate_invocations_list(world: World) -> None:
    done = restate(world, "invocations", "list")
    assert done.returncode == 0, done.stderr
    for invocation_id in (*world.sleeping, world.holder, world.queued, world.workflow):
        assert invocation_id in done.stdout
    assert world.greeted not in done.stdout  # completed ones are hidden unless --all
    assert "Showing 5/5 invocations" in done.stderr
    everything = restate(world, "invocations", "list", "--all", "--service", "Greeter")
    assert everything.returncode == 0, everything.stderr
    assert world.greeted in everything.stdout
    assert "completed with success" in everything.stdout


@pytest.mark.slow
def test_restate_invocations_describe_prints_the_invocation(world: World) -> None:
    done = restate(world, "invocations", "describe", world.holder)
    assert "Target:       Counter/q-2/add_after_sleep" in done.stdout
    assert "suspended" in done.stdout


@pytest.mark.slow
def test_restate_invocations_describe_shows_the_journal(world: World) -> None:
    done = restate(world, "invocations", "describe", world.holder)
    assert done.returncode == 0, done.stderr
    assert "Command: Sleep" in done.stdout


@pytest.mark.slow
def test_restate_sql(world: World) -> None:
    done = restate(world, "sql", "--json", f"SELECT id, status, target FROM sys_invocation WHERE id = '{world.queued}'")
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout) == [{"id": world.queued, "status": "pending", "target": "Counter/q-2/add"}]
    sql = "SELECT key, value_utf8 FROM state WHERE service_name = 'Counter' AND service_key = 'q-1'"
    table = restate(world, "sql", sql)
    assert table.returncode == 0, table.stderr
    assert "KEY" in table.stdout
    assert "VALUE_UTF8" in table.stdout
    assert "count" in table.stdout
    assert "1 rows." in table.stderr


# --- the same tables on restate-server 1.7.12 -------------------------------------------------------------

TABLES = (
    "sys_invocation",
    "sys_invocation_status",
    "sys_journal",
    "sys_service",
    "sys_deployment",
    "state",
    "sys_keyed_service_status",
    "sys_inbox",
    "sys_promise",
)


def json_kinds(row: dict[str, Any]) -> dict[str, str]:
    return {name: type(value).__name__ for name, value in row.items()}


@pytest.mark.slow
def test_each_table_answers_as_restate_server_1_7_12_does(world: World, tmp_path: Path) -> None:
    """`SELECT * FROM <table>` on restate-server 1.7.12 and on torpor dev, the same example app and
    requests: the Arrow schema of the answers is the same (names, order, types), and so are the JSON
    types of the columns both fill in one row."""
    from tests.conformance.harness import RestateRuntime

    restate_server = RestateRuntime()
    restate_server.start()
    try:
        with serve_examples(side_effects_file=tmp_path / "effects.jsonl") as (services_url, _services):
            registered = httpx.post(
                f"{restate_server.admin_url}/deployments", json={"uri": services_url, "use_http_11": True}, timeout=60
            )
            assert registered.status_code == 201, registered.text
            ingress = restate_server.ingress_url
            assert httpx.post(f"{ingress}/Counter/q-1/add", json=5, timeout=30).status_code == 200
            assert httpx.post(f"{ingress}/Waits/sleep/send", json=LONG_MS, timeout=30).status_code == 202
            holder = {"ms": LONG_MS, "delta": 1}
            assert httpx.post(f"{ingress}/Counter/q-2/add_after_sleep/send", json=holder, timeout=30).status_code == 202
            assert httpx.post(f"{ingress}/Counter/q-2/add/send", json=1, timeout=30).status_code == 202
            assert httpx.post(f"{ingress}/Signup/q-wf/run/send", json="a@b.c", timeout=30).status_code == 202
            wait_for(
                lambda: rows(restate_server.admin_url, "SELECT key FROM sys_promise"), 20, "restate-server's promise"
            )
            wait_for(
                lambda: rows(restate_server.admin_url, "SELECT id FROM sys_inbox"), 20, "restate-server's inbox entry"
            )
            for table in TABLES:
                sql = f"SELECT * FROM {table}"
                theirs = pa.ipc.open_stream(query(restate_server.admin_url, sql, None).content).read_all()
                ours = pa.ipc.open_stream(query(world.admin, sql, None).content).read_all()
                assert ours.schema.remove_metadata() == theirs.schema.remove_metadata(), table
                if table in ("sys_invocation_state", "sys_journal_events"):
                    continue  # rows only while an attempt runs or after one failed: none here
                assert theirs.num_rows > 0, table
                assert ours.num_rows > 0, table
                their_row = rows(restate_server.admin_url, f"{sql} LIMIT 1")[0]
                our_row = rows(world.admin, f"{sql} LIMIT 1")[0]
                both = set(their_row) & set(our_row)
                assert {k: v for k, v in json_kinds(our_row).items() if k in both} == {
                    k: v for k, v in json_kinds(their_row).items() if k in both
                }, table
    finally:
        restate_server.close()
