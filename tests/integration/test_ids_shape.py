"""Invocation ids in restate-server's shape end to end, and ids of 16 bytes stored by an earlier Torpor.

`torpor dev` on a moto server over HTTP, the example services under hypercorn (real restate-sdk
handlers, which build awakeable ids from `StartMessage.id`). An invocation "stored by an earlier
Torpor" is created with the 16-byte id such a version gave it (`invocation_id=`, or the id functions
of that version patched in while it is created), then used as today's code finds it.
"""

from __future__ import annotations

import sqlite3
import time
from collections.abc import Iterator
from pathlib import Path

import boto3
import httpx
import pytest

from adapters.aws.dynamodb_store import DynamoDBStore
from adapters.aws.store_items import CONFIG_PK, SHARDS_SK
from adapters.local.dev import DevServer
from adapters.local.sqlite_store import SQLiteStore
from control_plane import ids
from control_plane.settings import Settings
from examples.side_effects import read_side_effects
from tests.helpers.dev import describe, unique, wait_for
from tests.helpers.moto import unique_table_name

SETTINGS = Settings(inactivity_timeout_ms=10_000, lease_margin_ms=2_000, call_wait_ms=20_000)
LEGACY_ID = "inv_12tLnmanbV14r4lAnHRQKdF"  # 27 characters: 16 bytes in base62 0-9A-Za-z, as ids were before


def table_of_an_earlier_torpor(moto_endpoint: str) -> str:
    """A table as a Torpor with 16-byte ids left it: its `CONFIG` record has no `ids` attribute."""
    table = unique_table_name()
    DynamoDBStore(table, endpoint_url=moto_endpoint, shards=1).ensure_schema()
    client = boto3.client("dynamodb", endpoint_url=moto_endpoint, region_name="us-east-1")
    client.put_item(TableName=table, Item={"PK": {"S": CONFIG_PK}, "SK": {"S": SHARDS_SK}, "shards": {"N": "1"}})
    return table


@pytest.fixture(scope="module")
def dev(moto_endpoint: str, examples_url: str) -> Iterator[DevServer]:
    table = table_of_an_earlier_torpor(moto_endpoint)
    server = DevServer(ingress_port=0, admin_port=0, dynamodb_endpoint=moto_endpoint, table=table, settings=SETTINGS)
    server.start()
    try:
        reply = httpx.post(f"{server.admin_url}/deployments", json={"uri": examples_url}, timeout=30)
        assert reply.status_code == 201, reply.text
        assert server.store.facts.holds_short_ids
        yield server
    finally:
        server.stop()


def test_a_store_first_used_with_24_byte_ids_never_looks_for_16_byte_ones(moto_endpoint: str, tmp_path: Path) -> None:
    fresh = DynamoDBStore(unique_table_name(), endpoint_url=moto_endpoint, shards=1)
    fresh.ensure_schema()
    assert not fresh.facts.holds_short_ids
    assert not DynamoDBStore(fresh.table_name, endpoint_url=moto_endpoint).facts.holds_short_ids  # another process
    assert DynamoDBStore(table_of_an_earlier_torpor(moto_endpoint), endpoint_url=moto_endpoint).facts.holds_short_ids
    new_file = SQLiteStore(tmp_path / "new.sqlite3")
    assert not new_file.facts.holds_short_ids
    new_file.close()
    assert not SQLiteStore(tmp_path / "new.sqlite3").facts.holds_short_ids
    earlier = tmp_path / "earlier.sqlite3"
    first = SQLiteStore(earlier)
    first.ensure_schema()
    first.close()
    with sqlite3.connect(earlier) as db:  # as an earlier Torpor left it: its tables, no `meta`
        db.execute("DROP TABLE meta")
    assert SQLiteStore(earlier).facts.holds_short_ids
    assert SQLiteStore(earlier).facts.holds_short_ids  # and it stays so once the file has a `meta` table


def awakeable_of(effects_file: Path, invocation_id: str) -> str:
    def published() -> list[dict[str, str]]:
        return [e for e in read_side_effects(effects_file) if e["invocation_id"] == invocation_id]

    return wait_for(published, 10, "the awakeable id")[0]["awakeable_id"]


def test_new_invocation_ids_have_restate_servers_shape_and_the_sdk_builds_awakeables_from_them(
    dev: DevServer, effects_file: Path
) -> None:
    sent = httpx.post(f"{dev.ingress_url}/Waits/awakeable/send").json()
    invocation_id = sent["invocationId"]
    assert len(invocation_id) == 38  # inv_1, 11 characters of partition key, 22 of the rest
    assert len(ids.invocation_id_bytes(invocation_id)) == 24
    awakeable_id = awakeable_of(effects_file, invocation_id)
    assert len(awakeable_id) == len("sign_1") + 38  # base64url of the 24 id bytes and a u32 index
    assert ids.parse_awakeable_id(awakeable_id) == (invocation_id, 17)
    resolved = httpx.post(f"{dev.ingress_url}/restate/awakeables/{awakeable_id}/resolve", json="blue")
    assert resolved.status_code == 202
    done = httpx.get(f"{dev.ingress_url}/restate/invocation/{invocation_id}/attach", timeout=30)
    assert done.json() == "got blue"


def test_the_invocations_of_one_object_key_share_the_partition_key_of_their_ids(dev: DevServer) -> None:
    key = unique("pk")
    first = httpx.post(f"{dev.ingress_url}/Counter/{key}/add", json=1, timeout=30).headers["x-restate-id"]
    second = httpx.post(f"{dev.ingress_url}/Counter/{key}/add", json=1, timeout=30).headers["x-restate-id"]
    assert first != second
    assert first[:16] == second[:16] == ids.new_invocation_id(key)[:16]


def test_an_invocation_stored_with_a_16_byte_id_runs_and_its_awakeable_resolves(
    dev: DevServer, effects_file: Path
) -> None:
    # GIVEN an invocation stored under a 16-byte id, as an earlier Torpor created it
    record = dev.control_plane.engine.create("Waits", "awakeable", b"", {}, leased=False, invocation_id=LEGACY_ID)
    assert record.invocation_id == LEGACY_ID
    # THEN the SDK gets its 16 bytes and builds the awakeable id from them, which the ingress accepts
    awakeable_id = awakeable_of(effects_file, LEGACY_ID)
    assert len(awakeable_id) == len("sign_1") + 27
    wait_for(lambda: describe(dev, LEGACY_ID)["status"] == "suspended", 10, "suspension")
    resolved = httpx.post(f"{dev.ingress_url}/restate/awakeables/{awakeable_id}/resolve", json="green")
    assert resolved.status_code == 202
    done = httpx.get(f"{dev.ingress_url}/restate/invocation/{LEGACY_ID}/attach", timeout=30)
    assert done.json() == "got green"
    assert httpx.get(f"{dev.admin_url}/invocations/{LEGACY_ID}", timeout=10).json()["status"] == "completed"
    assert httpx.patch(f"{dev.admin_url}/invocations/{LEGACY_ID}/purge", timeout=10).is_success


def test_a_workflow_run_stored_with_a_16_byte_id_still_runs_once(
    dev: DevServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    wf = unique("legacy-wf")
    with monkeypatch.context() as earlier:  # the run is created as an earlier Torpor named it
        earlier.setattr(ids, "workflow_run_id", ids.legacy_workflow_run_id)
        first = httpx.post(f"{dev.ingress_url}/Signup/{wf}/run/send", json="ann@example.com").json()
    assert first["invocationId"] == ids.legacy_workflow_run_id("Signup", wf)
    again = httpx.post(f"{dev.ingress_url}/Signup/{wf}/run/send", json="other@example.com")
    assert again.json() == {"invocationId": first["invocationId"], "status": "PreviouslyAccepted"}
    assert httpx.get(f"{dev.ingress_url}/restate/workflow/Signup/{wf}/output").status_code == 470  # found, running
    assert httpx.post(f"{dev.ingress_url}/Signup/{wf}/confirm", json="C-1", timeout=30).json() == "confirmed"
    attached = httpx.get(f"{dev.ingress_url}/restate/workflow/Signup/{wf}/attach", timeout=30)
    assert attached.json() == {"email": "ann@example.com", "confirmed_with": "C-1"}


def test_a_request_stored_with_a_16_byte_idempotent_id_is_previously_accepted(
    dev: DevServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    key = {"idempotency-key": f"legacy-{time.time_ns()}"}
    with monkeypatch.context() as earlier:
        earlier.setattr(ids, "idempotent_invocation_id", ids.legacy_idempotent_invocation_id)
        first = httpx.post(f"{dev.ingress_url}/Greeter/greet/send", json="a", headers=key).json()
    assert len(first["invocationId"]) == 27
    again = httpx.post(f"{dev.ingress_url}/Greeter/greet/send", json="b", headers=key).json()
    assert again == {"invocationId": first["invocationId"], "status": "PreviouslyAccepted"}
    attached = httpx.post(f"{dev.ingress_url}/Greeter/greet", json="c", headers=key, timeout=30)
    assert attached.headers["x-restate-id"] == first["invocationId"]
    assert attached.json() == "Hello, a!"
