"""`DynamoDBStore` against a real moto server over HTTP: what is DynamoDB's own, item layout, index
keys, TTL, shards and request counts.

What every store does (conditions, orderings, errors) is the contract suite, `tests/contract/`
(`test_invocation_store_contract.py` and a file per other family of the port), which runs on
DynamoDB and SQLite alike; races between concurrent writers are in `tests/races/` (moto can let two
conditional writers both win).
"""

from __future__ import annotations

from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import boto3
import pytest

from adapters.aws.dynamodb_store import DynamoDBStore
from adapters.aws.store_items import TTL_GRACE_S, shard_of
from control_plane.ports import JournalBatch, StoreConflict, StoredNotification
from tests.helpers.dynamodb_items import partitions, raw_item
from tests.helpers.moto import DUMMY_AWS_ENV, unique_table_name
from tests.helpers.records import EVERY_FIELD, RUNNABLE, invocation


def test_ensure_schema_twice_makes_one_table_with_keys_index_and_ttl(
    new_store: Callable[..., DynamoDBStore],
) -> None:
    # GIVEN a store whose table does not exist yet
    store = new_store(create_table=False)
    # WHEN the schema is ensured twice
    store.ensure_schema()
    store.ensure_schema()
    # THEN the table has the documented keys, billing, GSI and TTL
    client = boto3.client("dynamodb", region_name=store.region, endpoint_url=store.endpoint_url)
    table = client.describe_table(TableName=store.table_name)["Table"]
    assert table["TableStatus"] == "ACTIVE"
    assert table["BillingModeSummary"]["BillingMode"] == "PAY_PER_REQUEST"
    assert sorted((k["AttributeName"], k["KeyType"]) for k in table["KeySchema"]) == [("PK", "HASH"), ("SK", "RANGE")]
    indexes = {index["IndexName"]: index for index in table["GlobalSecondaryIndexes"]}
    assert sorted(indexes) == ["by_expiry", "by_status_v2"]
    for name, hash_key, range_key in (
        ("by_status_v2", "status_key", "status_order"),
        ("by_expiry", "expiry_key", "expiry_order"),
    ):
        index = indexes[name]
        assert [(k["AttributeName"], k["KeyType"]) for k in index["KeySchema"]] == [
            (hash_key, "HASH"),
            (range_key, "RANGE"),
        ]
        assert index["Projection"]["ProjectionType"] == "INCLUDE"
    # the status index carries what a list filters on, never what a lease or a step moves
    projected = set(indexes["by_status_v2"]["Projection"]["NonKeyAttributes"])
    assert {"service", "handler", "key", "completion", "invocation_id", "created_at_ms"} <= projected
    assert not projected & {"modified_at_ms", "lease_until_ms", "epoch", "doorbell", "requests", "output"}
    ttl = client.describe_time_to_live(TableName=store.table_name)["TimeToLiveDescription"]
    assert ttl == {"TimeToLiveStatus": "ENABLED", "AttributeName": "expires_at"}


def test_ensure_schema_names_the_indexes_a_table_of_an_earlier_version_lacks(
    new_store: Callable[..., DynamoDBStore], caplog: pytest.LogCaptureFixture
) -> None:
    store = new_store(create_table=False)
    client = boto3.client("dynamodb", region_name=store.region, endpoint_url=store.endpoint_url)
    client.create_table(  # the keys alone, as an earlier version's table without the new indexes
        TableName=store.table_name,
        KeySchema=[{"AttributeName": "PK", "KeyType": "HASH"}, {"AttributeName": "SK", "KeyType": "RANGE"}],
        AttributeDefinitions=[{"AttributeName": n, "AttributeType": "S"} for n in ("PK", "SK")],
        BillingMode="PAY_PER_REQUEST",
    )

    store.ensure_schema()

    assert "lacks the index(es) by_status_v2, by_expiry" in caplog.text


def test_one_shard_keeps_every_timer_in_one_partition(moto_endpoint: str) -> None:
    store = DynamoDBStore(
        unique_table_name(),
        endpoint_url=moto_endpoint,
        aws_access_key_id=DUMMY_AWS_ENV["AWS_ACCESS_KEY_ID"],
        aws_secret_access_key=DUMMY_AWS_ENV["AWS_SECRET_ACCESS_KEY"],
        shards=1,
    )
    store.ensure_schema()
    for n in range(5):
        store.put_timer(1_000 + n, f"inv_{n}")
    before = store.request_count

    assert store.due_timers(2_000) == [(1_000 + n, f"inv_{n}") for n in range(5)]
    assert store.request_count - before == 1
    assert partitions(store, "TIMER") == {"TIMER#0"}


def test_two_stores_on_two_tables_do_not_see_each_other(new_store: Callable[..., DynamoDBStore]) -> None:
    first, second = new_store(), new_store()
    first.create_invocation(invocation("inv_a"))
    second.create_invocation(invocation("inv_a", service="Other"))  # same id, other table: no conflict
    assert first.get_invocation("inv_a") == invocation("inv_a")
    assert second.get_invocation("inv_a") == invocation("inv_a", service="Other")
    assert first.table_name != second.table_name


def test_item_layout_keys_gsi_keys_and_ttl_attribute(store: DynamoDBStore) -> None:
    store.create_invocation(EVERY_FIELD)

    item = raw_item(store, "INV#inv_every", "META")
    shard = shard_of("inv_every", store.shards)
    assert item["status_key"] == {"S": f"STATUS#active#{shard}"}  # backing-off: one of ACTIVE_STATUSES
    assert item["status_order"] == {"S": "1700000000000#inv_every"}  # created_at_ms: never moves
    assert item["retained_until"] == {"N": "1700086400"}
    assert item["expires_at"] == {"N": str(1_700_086_400 + TTL_GRACE_S)}  # the sweep removes it first
    assert "expiry_key" not in item  # not completed: nothing to retire
    assert item["output"] == {"B": b"\x00binary\xff"}
    assert "expires_at_s" not in item


def test_active_statuses_share_an_index_key_and_entries_under_their_old_keys_are_still_listed(
    store: DynamoDBStore,
) -> None:
    """Issue 24: ready, running, backing-off and suspended share `STATUS#active#{shard}` (a change
    among them rewrites the entry in place); an invocation indexed before, under `STATUS#{status}#…`,
    is listed from there until its next status change moves it, and never twice."""
    client = boto3.client("dynamodb", region_name=store.region, endpoint_url=store.endpoint_url)
    for invocation_id, status, created in (
        ("inv_old", "suspended", 1),
        ("inv_new", "suspended", 2),
        ("inv_run", "running", 3),
    ):
        store.create_invocation(invocation(invocation_id, status=status, created_at_ms=created))
    shard = shard_of("inv_old", store.shards)
    client.update_item(
        TableName=store.table_name,
        Key={"PK": {"S": "INV#inv_old"}, "SK": {"S": "META"}},
        UpdateExpression="SET status_key = :k",
        ExpressionAttributeValues={":k": {"S": f"STATUS#suspended#{shard}"}},
    )
    assert raw_item(store, "INV#inv_new", "META")["status_key"] == {
        "S": f"STATUS#active#{shard_of('inv_new', store.shards)}"
    }

    assert [r.invocation_id for r in store.list_invocations(["suspended"])] == ["inv_new", "inv_old"]
    assert [r.invocation_id for r in store.list_invocations(["running"])] == ["inv_run"]
    assert [r.invocation_id for r in store.list_invocations(["running", "suspended"], limit=2)] == [
        "inv_run",
        "inv_new",
    ]
    assert [r.invocation_id for r in store.list_invocations(None)] == ["inv_run", "inv_new", "inv_old"]

    store._update_invocation("inv_old", 0, status="running")  # moves it to the group key
    assert raw_item(store, "INV#inv_old", "META")["status_key"] == {"S": f"STATUS#active#{shard}"}
    assert [r.invocation_id for r in store.list_invocations(["running"])] == ["inv_run", "inv_old"]


def without_doorbell(store: DynamoDBStore, invocation_id: str) -> None:
    """Remove the `doorbell` attribute, as on an item written before the field existed."""
    client = boto3.client("dynamodb", region_name=store.region, endpoint_url=store.endpoint_url)
    client.update_item(
        TableName=store.table_name,
        Key={"PK": {"S": f"INV#{invocation_id}"}, "SK": {"S": "META"}},
        UpdateExpression="REMOVE doorbell",
    )
    assert "doorbell" not in raw_item(store, f"INV#{invocation_id}", "META")


@pytest.mark.parametrize("legacy", [False, True], ids=["doorbell-0", "no-doorbell-attribute"])
def test_doorbell_zero_holds_for_a_stored_zero_and_for_a_missing_attribute(store: DynamoDBStore, legacy: bool) -> None:
    store.create_invocation(invocation("inv_1"))
    assert raw_item(store, "INV#inv_1", "META")["doorbell"] == {"N": "0"}  # written at creation
    if legacy:
        without_doorbell(store, "inv_1")

    store._update_invocation("inv_1", 0, doorbell=0, status="suspended")

    assert store.get_invocation("inv_1") == invocation("inv_1", status="suspended")
    with pytest.raises(StoreConflict):
        store._update_invocation("inv_1", 0, doorbell=1, status="ready")


def test_ring_counts_from_zero_on_an_item_without_a_doorbell(store: DynamoDBStore) -> None:
    store.create_invocation(invocation("inv_1"))
    without_doorbell(store, "inv_1")

    store.ring("inv_1")

    assert store.get_invocation("inv_1") == invocation("inv_1", doorbell=1)


def test_request_count_counts_each_dynamodb_call(store: DynamoDBStore) -> None:
    start = store.request_count

    store.create_invocation(invocation("inv_1"))
    assert store.request_count == start + 1
    store.acquire_lease("inv_1", now_ms=2_000, lease_until_ms=32_000, runnable=RUNNABLE)
    store.load_invocation("inv_1")
    store.append_batch("inv_1", JournalBatch(1, b"e", epoch=1, committed_at_ms=2_100))
    store._update_invocation("inv_1", 1, status="suspended", modified_at_ms=2_200)
    store.get_invocation("inv_1")
    with pytest.raises(StoreConflict):
        store.append_batch("inv_1", JournalBatch(1, b"e", epoch=1, committed_at_ms=2_100))
    assert store.request_count == start + 7  # a failed conditional write is a request too

    store.put_notification("inv_1", StoredNotification("c1", b"n", created_at_ms=2_300))
    store.put_notification("inv_1", StoredNotification("c1", b"n", created_at_ms=2_300))  # False, but a request
    store.ring("inv_1")
    store._update_unless_completed("inv_1", status="paused", modified_at_ms=2_400)
    store.put_timer(2_500, "inv_1")
    store.due_timers(3_000)
    store.delete_timer(2_500, "inv_1")

    assert store.request_count == start + 13 + store.shards  # due_timers: one query per shard


def test_ensure_schema_on_an_existing_table_costs_two_requests(store: DynamoDBStore) -> None:
    before = store.request_count

    store.ensure_schema()

    assert store.request_count - before == 2  # DescribeTable, DescribeTimeToLive


def test_listing_every_status_queries_the_index_and_never_scans_the_table(store: DynamoDBStore) -> None:
    store.create_invocation(invocation("inv_a", status="ready", created_at_ms=1_000))
    store.create_invocation(invocation("inv_b", status="pending", created_at_ms=2_000))
    store.create_invocation(invocation("inv_c", status="completed", created_at_ms=3_000))
    before = store.request_counts
    listed = store.list_invocations(None, None, 2)
    assert [r.invocation_id for r in listed] == ["inv_c", "inv_b"]
    assert [r.invocation_id for r in store.list_invocations(None, None, 10, before=(2_000, "inv_b"))] == ["inv_a"]
    after = store.request_counts
    assert after.get("Scan", 0) == before.get("Scan", 0)
    assert after["Query"] > before.get("Query", 0)


def test_store_shards_must_be_at_least_one(moto_endpoint: str) -> None:
    with pytest.raises(ValueError, match="at least 1 shard, got 0"):
        DynamoDBStore("any", endpoint_url=moto_endpoint, shards=0)


def test_a_table_keeps_the_shard_count_it_was_first_used_with(moto_endpoint: str) -> None:
    # GIVEN a table first used with 1 shard, holding timers, and a process set to 16
    table = unique_table_name()

    def opened(shards: int) -> DynamoDBStore:
        store = DynamoDBStore(
            table,
            endpoint_url=moto_endpoint,
            aws_access_key_id=DUMMY_AWS_ENV["AWS_ACCESS_KEY_ID"],
            aws_secret_access_key=DUMMY_AWS_ENV["AWS_SECRET_ACCESS_KEY"],
            shards=shards,
        )
        store.ensure_schema()
        return store

    first = opened(1)
    for n in range(5):
        first.put_timer(1_000 + n, f"inv_{n}")
    later = opened(16)

    # THEN the later process adopts the table's count: it deletes every timer where it was written,
    # and lists what the first one wrote
    assert later.shards == 1
    for n in range(5):
        later.delete_timer(1_000 + n, f"inv_{n}")
    assert later.due_timers(2_000) == []
    assert first.due_timers(2_000) == []
    later.create_invocation(invocation("inv_x"))
    assert [r.invocation_id for r in first.list_invocations()] == ["inv_x"]


def test_processes_racing_to_record_the_shard_count_agree(moto_endpoint: str) -> None:
    # GIVEN a table without a recorded count (as CloudFormation creates it)
    table = unique_table_name()
    DynamoDBStore(table, endpoint_url=moto_endpoint).ensure_schema()
    client = boto3.client("dynamodb", region_name="us-east-1", endpoint_url=moto_endpoint)
    client.delete_item(TableName=table, Key={"PK": {"S": "CONFIG"}, "SK": {"S": "SHARDS"}})
    # WHEN six processes with six settings first use it at once, THEN they all use one count
    stores = [DynamoDBStore(table, endpoint_url=moto_endpoint, shards=n) for n in (2, 3, 4, 5, 6, 7)]
    with ThreadPoolExecutor(max_workers=6) as pool:
        counts = set(pool.map(lambda s: s.shards, stores))
    assert len(counts) == 1


def test_a_record_that_left_the_listed_status_meanwhile_is_replaced_by_the_next(store: DynamoDBStore) -> None:
    # GIVEN five running invocations, and the newest completes between the index read and the record read
    for n in range(5):
        store.create_invocation(invocation(f"inv_{n}", status="running", created_at_ms=1_000 + n))
    model = store._invocations
    real_batch_get = model.batch_get
    moved: list[str] = []

    def batch_get_after_a_completion(keys: Any, *args: Any, **kwargs: Any) -> Any:
        if not moved:
            moved.append("inv_4")
            store._update_unless_completed("inv_4", status="completed")
        return real_batch_get(keys, *args, **kwargs)

    model.batch_get = batch_get_after_a_completion  # type: ignore[method-assign]
    try:
        listed = store.list_invocations(["running"], None, 3)
    finally:
        model.batch_get = real_batch_get  # type: ignore[method-assign]

    # THEN the page is still full, newest first, without the one that completed
    assert [r.invocation_id for r in listed] == ["inv_3", "inv_2", "inv_1"]
