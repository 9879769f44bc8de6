"""`POST /query`'s `state` table lists every key of an object that has state, not only the keys of
its retained invocations (issue 22, item 1), on `torpor dev` over SQLite and over DynamoDB (a moto
server), with the real restate-sdk `Counter` over HTTP; and the store reads such a query makes (the
listing, then each key's state; no invocation listed), bounded by `max_rows`.
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from adapters.local.dev import DevServer
from adapters.query.engine import DataFusionQuery
from control_plane.errors import BadRequest
from control_plane.ports import ServiceRecord
from control_plane.settings import Settings
from tests.helpers.dev import unique
from tests.helpers.moto import moto_server, unique_table_name
from tests.helpers.stores import STORE_KINDS, make_store

SETTINGS = Settings(inactivity_timeout_ms=10_000, lease_margin_ms=1_000, call_wait_ms=30_000)


@pytest.fixture(scope="module", params=["sqlite", "dynamodb"])
def dev(
    request: pytest.FixtureRequest, examples_url: str, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[DevServer]:
    with contextlib.ExitStack() as stack:
        if request.param == "sqlite":
            store: dict[str, Any] = {"data_dir": tmp_path_factory.mktemp("data")}
        else:  # a serial moto, as `torpor dev` embeds, used as a DynamoDB of its own: 16 shards
            endpoint = stack.enter_context(moto_server(serial=True))
            store = {"dynamodb_endpoint": endpoint, "table": unique_table_name()}
        server = DevServer(ingress_port=0, admin_port=0, settings=SETTINGS, **store)
        server.start()
        stack.callback(server.stop)
        reply = httpx.post(f"{server.admin_url}/deployments", json={"uri": examples_url}, timeout=30)
        assert reply.status_code == 201, reply.text
        yield server


def rows(dev: DevServer, sql: str) -> list[dict[str, Any]]:
    accept = {"accept": "application/json"}
    reply = httpx.post(f"{dev.admin_url}/query", json={"query": sql}, headers=accept, timeout=30)
    assert reply.status_code == 200, reply.text
    found: list[dict[str, Any]] = reply.json()["rows"]
    return found


def test_state_without_a_key_lists_every_keys_state_after_its_invocations_are_purged(dev: DevServer) -> None:
    # GIVEN three keys of Counter with state, and one whose state was cleared
    prefix = unique("all")
    keys = [f"{prefix}-{n}" for n in range(3)]
    calls = []
    for n, key in enumerate([*keys, f"{prefix}-cleared"]):
        reply = httpx.post(f"{dev.ingress_url}/Counter/{key}/add", json=n + 1, timeout=30)
        assert reply.status_code == 200, reply.text
        calls.append(reply.headers["x-restate-id"])
    reply = httpx.post(f"{dev.ingress_url}/Counter/{prefix}-cleared/reset", json=None, timeout=30)
    assert reply.json() == "reset"
    calls.append(reply.headers["x-restate-id"])
    # AND none of their invocations is retained any more
    for invocation_id in calls:
        assert httpx.delete(f"{dev.admin_url}/invocations/{invocation_id}", timeout=10).status_code == 202
    assert rows(dev, f"SELECT id FROM sys_invocation WHERE target_service_key LIKE '{prefix}%'") == []

    # WHEN the state of Counter is queried without naming a key
    found = rows(
        dev,
        "SELECT service_key, key, value_utf8 FROM state WHERE service_name = 'Counter' "
        f"AND service_key LIKE '{prefix}%' ORDER BY service_key",
    )

    # THEN every key with state is there, with its value; the cleared one has no rows
    assert found == [{"service_key": key, "key": "count", "value_utf8": str(n + 1)} for n, key in enumerate(keys)]
    assert rows(dev, f"SELECT count(*) AS n FROM state WHERE service_key = '{prefix}-cleared'") == [{"n": 0}]


def test_order_by_over_a_table_with_no_rows_answers_no_rows(dev: DevServer) -> None:
    sql = "SELECT service_key, key FROM state WHERE service_name = 'LazyCounter' ORDER BY service_key, key"
    assert rows(dev, sql) == []  # was a 400 (DataFusion: "does not satisfy distribution requirements")
    assert rows(dev, "SELECT * FROM sys_promise WHERE service_name = 'Nobody' ORDER BY key") == []


@pytest.mark.parametrize("kind", STORE_KINDS)
def test_state_of_a_service_reads_its_listed_keys_and_refuses_more_than_max_rows(
    kind: str, request: pytest.FixtureRequest, tmp_path: Path
) -> None:
    endpoint = request.getfixturevalue("moto_endpoint") if kind == "dynamodb" else None
    store = make_store(kind, endpoint_url=endpoint, directory=tmp_path)
    store.put_service(ServiceRecord("Counter", "dp_1", "VIRTUAL_OBJECT", {}))
    for n in range(4):
        store.apply_state("Counter", f"k{n}", {b"count": str(n).encode()})
    calls: list[str] = []

    class Counting:
        def __getattr__(self, name: str) -> Any:
            calls.append(name)
            return getattr(store, name)

    sql = "SELECT service_key, value_utf8 FROM state WHERE service_name = 'Counter' ORDER BY service_key"
    engine = DataFusionQuery(Counting(), max_rows=4)  # type: ignore[arg-type]
    answer = json.loads(engine.run(sql, as_json=True).body)["rows"]

    assert answer == [{"service_key": f"k{n}", "value_utf8": str(n)} for n in range(4)]
    assert calls == ["list_services", "state_keys"] + ["load_state"] * 4  # no invocation listed
    with pytest.raises(BadRequest, match="would read the state of 4 objects one by one, more than 3"):
        DataFusionQuery(store, max_rows=3).run(sql, as_json=True)
