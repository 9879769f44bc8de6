"""`DynamoDBStore`'s keyed half against a moto server: what is DynamoDB's own, the key item's layout.

Item keys are checked against sha256 digests computed here, and items are read back with a plain
boto3 client as an independent witness. What every store does with keyed state, locks, queues and
promises is the contract suite, `tests/contract/test_key_store_contract.py` (DynamoDB and SQLite);
concurrent writers are tested in `tests/races/`.
"""

from __future__ import annotations

import zlib
from dataclasses import replace
from typing import Any

import pytest

from adapters.aws.dynamodb_store import DynamoDBStore
from control_plane.keyed import Keys
from control_plane.ports import StoreConflict, SystemClock
from tests.helpers.dynamodb_items import client, h, object_pk, partitions, raw_item, raw_partition
from tests.helpers.records import KEYED_INVOCATION

SCOPE = "Counter"


def test_small_state_lives_on_the_key_item_which_hashes_the_key_and_keeps_raw_attributes(store: DynamoDBStore) -> None:
    store.apply_state(SCOPE, "user/7", {b"count": b"\x00\x07"}, expires_at_s=1_900_000_000)

    item = raw_item(store, f"OBJ#Counter#{h('user/7')}", "LOCK")
    assert item == {
        "PK": {"S": f"OBJ#Counter#{h('user/7')}"},
        "SK": {"S": "LOCK"},
        "scope": {"S": "Counter"},
        "key": {"S": "user/7"},
        f"S#{h(b'count')}": {"M": {"k": {"B": b"count"}, "v": {"B": b"\x00\x07"}}},
        "expires_at": {"N": "1900000000"},
        "listed": {"BOOL": True},  # the key is in the listing of keys with state
    }
    assert sorted(raw_partition(store, object_pk("user/7"))) == ["LOCK"]
    listing = f"SKEYS#Counter#{zlib.crc32(b'user/7') % store.shards}"
    assert raw_partition(store, listing) == {
        h("user/7"): {"PK": {"S": listing}, "SK": {"S": h("user/7")}, "scope": {"S": "Counter"}, "key": {"S": "user/7"}}
    }


def test_the_listing_of_keys_with_state_spreads_over_the_shards(store: DynamoDBStore) -> None:
    keys = [f"user/{n}" for n in range(40)]
    for key in keys:
        store.apply_state(SCOPE, key, {b"count": b"1"})
    before = store.request_count

    assert store.state_keys(SCOPE, 100) == sorted(keys)
    assert store.request_count - before == store.shards  # one query per shard
    assert partitions(store, "SKEYS#") == {f"SKEYS#Counter#{zlib.crc32(k.encode()) % store.shards}" for k in keys}
    assert len(partitions(store, "SKEYS#")) > store.shards // 2


def test_invocation_without_the_keyed_attributes_reads_the_defaults(store: DynamoDBStore) -> None:
    store.create_invocation(KEYED_INVOCATION)
    client(store).update_item(
        TableName=store.table_name,
        Key={"PK": {"S": "INV#inv_keyed"}, "SK": {"S": "META"}},
        UpdateExpression="REMOVE service_type, handler_type, inbox_seq",
    )

    record = store.get_invocation("inv_keyed")

    assert record is not None
    assert (record.service_type, record.handler_type, record.inbox_seq) == ("SERVICE", "", "")


def test_a_large_value_replaced_between_the_reads_of_load_state_is_read_again(store: DynamoDBStore) -> None:
    # the holder writes a large value (stored apart), then a shared reader reads LOCK; before it reads
    # the value stored apart, the holder replaces it, which deletes the item the reader's LOCK refers to
    assert store.take_key(SCOPE, "k", "inv_holder") == {}
    store.apply_state(SCOPE, "k", {b"big": b"1" * 40_000, b"small": b"s"}, holder="inv_holder")
    read_key = store._get_key
    rewrites = []

    def get_key_then_the_holder_writes(scope: str, key: str, **kwargs: bool) -> dict[str, Any]:
        item = read_key(scope, key, **kwargs)
        if not rewrites:
            rewrites.append(1)
            store.apply_state(SCOPE, "k", {b"big": b"2" * 40_000}, holder="inv_holder")
        return item

    store._get_key = get_key_then_the_holder_writes  # type: ignore[method-assign]

    assert store.load_state(SCOPE, "k") == {b"big": b"2" * 40_000, b"small": b"s"}
    assert rewrites == [1]


class _Wakes:
    """A scheduler that records which invocations were woken."""

    def __init__(self) -> None:
        self.now: list[str] = []

    def wake_now(self, invocation_id: str) -> None:
        self.now.append(invocation_id)

    def wake_at(self, invocation_id: str, due_ms: int) -> None:
        pass


def test_a_release_retried_after_its_first_attempt_landed_still_hands_the_key_on(store: DynamoDBStore) -> None:
    holder = replace(KEYED_INVOCATION, invocation_id="inv_holder", status="completed", inbox_seq="")
    waiting = replace(KEYED_INVOCATION, invocation_id="inv_waiting")
    store.create_invocation(holder)
    store.create_invocation(waiting)
    assert store.take_key(SCOPE, "user-7", "inv_holder") == {}
    store.enqueue(SCOPE, "user-7", waiting.inbox_seq, "inv_waiting")
    dispatch = store._connection.connection.dispatch

    def release_lands_then_is_retried(operation: str, kwargs: dict[str, Any]) -> Any:
        if operation == "UpdateItem" and kwargs["UpdateExpression"].endswith("REMOVE #holder"):
            dispatch(operation, kwargs)  # lands; its answer is lost (timeout), the client sends it again
        return dispatch(operation, kwargs)

    store._connection.connection.dispatch = release_lands_then_is_retried  # type: ignore[method-assign]
    wakes = _Wakes()

    Keys(store, wakes, SystemClock()).release(holder)

    assert store.key_status(SCOPE, "user-7") == ("inv_waiting", None)
    assert wakes.now == ["inv_waiting"]
    assert store.get_invocation("inv_waiting").status == "ready"  # type: ignore[union-attr]


def test_a_fenced_out_state_write_leaves_no_value_stored_apart(store: DynamoDBStore) -> None:
    assert store.take_key(SCOPE, "k", "inv_holder") == {}
    store.apply_state(SCOPE, "k", {b"big": b"1" * 40_000}, holder="inv_holder")

    with pytest.raises(StoreConflict):  # e.g. a killed invocation's late worker
        store.apply_state(SCOPE, "k", {b"big": b"1" * 40_000, b"other": b"2" * 40_000}, holder="inv_late")

    # its own new value is deleted again; the same value the holder wrote (same item) is kept
    assert sorted(raw_partition(store, object_pk("k"))) == sorted(["LOCK", f"S#{h(b'big')}#{h(b'1' * 40_000)[:32]}"])
    assert store.load_state(SCOPE, "k") == {b"big": b"1" * 40_000}


def test_lock_and_queue_look_ups_do_not_read_the_state(store: DynamoDBStore) -> None:
    assert store.take_key(SCOPE, "k", "inv_holder") == {}
    store.apply_state(SCOPE, "k", {b"count": b"x" * 50_000}, holder="inv_holder")
    store.enqueue(SCOPE, "k", "0001", "inv_next")
    dispatch = store._connection.connection.dispatch
    reads: list[dict[str, Any]] = []

    def recording(operation: str, kwargs: dict[str, Any]) -> Any:
        answer = dispatch(operation, kwargs)
        if operation == "GetItem":
            reads.append(answer.get("Item", {}))
        return answer

    store._connection.connection.dispatch = recording  # type: ignore[method-assign]

    assert store.key_status(SCOPE, "k") == ("inv_holder", ("0001", "inv_next"))
    assert store.lock_holder(SCOPE, "k") == "inv_holder"

    assert [sorted(item) for item in reads] == [["holder", "queued"]] * 2  # projected: no state attribute


def test_a_paged_state_write_that_crashes_before_its_switch_is_invisible_and_converges_when_applied_again(
    store: DynamoDBStore,
) -> None:
    before = {f"v{i}".encode(): b"a" * 2_000 for i in range(300)}  # 600 KB: paged
    store.apply_state("Counter", "k", before)
    assert raw_item(store, object_pk("k"), "LOCK")["pages"]["SS"]
    after = {**before, **{f"v{i}".encode(): b"b" * 2_000 for i in range(0, 300, 3)}, b"new": b"n" * 50_000}
    update_key = store._update_key
    crashed: list[str] = []

    def crash_at_the_switch(*args: Any, **kwargs: Any) -> Any:
        if not crashed and "#pages" in kwargs.get("names", {}):
            crashed.append(args[2])
            raise RuntimeError("the process died before switching the key item to the new pages")
        return update_key(*args, **kwargs)

    store._update_key = crash_at_the_switch  # type: ignore[method-assign]
    with pytest.raises(RuntimeError):
        store.apply_state("Counter", "k", {k: v for k, v in after.items() if before.get(k) != v})
    assert crashed
    assert store.load_state("Counter", "k") == before  # the new pages and value exist, nothing refers to them

    store.apply_state("Counter", "k", {k: v for k, v in after.items() if before.get(k) != v})  # re-applied

    assert store.load_state("Counter", "k") == after
    lock = raw_item(store, object_pk("k"), "LOCK")
    referenced = set(lock["pages"]["SS"]) | {f"S#{h(b'new')}"}
    items = set(raw_partition(store, object_pk("k"))) - {"LOCK"}
    assert {sk.rsplit("#", 1)[0] if sk.startswith("S#") else sk for sk in items} == referenced  # no orphan left
