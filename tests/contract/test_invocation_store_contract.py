"""The `InvocationStore` contract (invocations, leases, journal batches, notifications, the
listing, retention): what every store adapter does, run against DynamoDB (on moto) and SQLite.

The same assertions for every store, through the port alone. Where DynamoDB's item layout (keys,
index keys, TTL attributes) is also checked, it is checked only on DynamoDB (`as_dynamodb`), read
back with a plain boto3 client as an independent witness; the rest of DynamoDB's layout, its request
counts and its sharding are tested in `tests/integration/test_dynamodb_store.py`. Concurrent writers
are tested in `tests/races/` (dynalite and SQLite). The other families: `test_key_store_contract.py`,
`test_timer_store_contract.py`, `test_registry_store_contract.py`, `test_schedule_store_contract.py`.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest

from adapters.aws.dynamodb_store import DynamoDBStore
from adapters.aws.store_items import TTL_GRACE_S, shard_of
from adapters.local.sqlite_store import SQLiteStore
from control_plane.ports import (
    MAX_MESSAGE_BYTES,
    MAX_TIMER_MS,
    InvocationRecord,
    ItemTooLarge,
    JournalBatch,
    LoadedInvocation,
    RetentionDue,
    StoreConflict,
    StoredNotification,
)
from control_plane.protocol import encode_frames, frame
from control_plane.protocol import protocol_pb2 as pb
from tests.helpers.dynamodb_items import as_dynamodb, partitions, raw_item
from tests.helpers.records import EVERY_FIELD, RUNNABLE, invocation
from tests.helpers.stores import ids_in_distinct_shards

Store = DynamoDBStore | SQLiteStore


def assert_no_invocation(store: Store, invocation_id: str) -> None:
    """Nothing was written for `invocation_id`: no record (on DynamoDB: no `META` item at all)."""
    assert store.get_invocation(invocation_id) is None
    dynamodb = as_dynamodb(store)
    if dynamodb is not None:
        assert raw_item(dynamodb, f"INV#{invocation_id}", "META") == {}


def test_create_then_get_round_trips_every_field(store: Store) -> None:
    defaults = {f.name: f.default for f in dataclasses.fields(InvocationRecord) if f.default is not dataclasses.MISSING}
    assert [name for name, default in defaults.items() if getattr(EVERY_FIELD, name) == default] == []

    store.create_invocation(EVERY_FIELD)

    assert store.get_invocation("inv_every") == EVERY_FIELD
    assert store.load_invocation("inv_every") == LoadedInvocation(EVERY_FIELD, [], [])


def test_defaults_and_empty_values_round_trip(store: Store) -> None:
    # None fields, expires_at_s=0 and fields at their default ("" here) are absent attributes; b"" is a value.
    record = invocation("inv_empty", output=b"", idempotency_key="", key="")

    store.create_invocation(record)

    assert store.get_invocation("inv_empty") == record
    if (dynamodb := as_dynamodb(store)) is not None:
        item = raw_item(dynamodb, "INV#inv_empty", "META")
        assert item["output"] == {"B": b""}
        assert [name for name in ("waiting_on", "last_failure", "failure", "expires_at") if name in item] == []


def test_a_record_at_its_defaults_stores_only_the_fields_conditions_read(store: Store) -> None:
    # issue 24: a field at its default is an absent attribute (the record stays under 1 KB, 1 write
    # unit a write); epoch, lease_until_ms, journal_expires_at_ms and key stay (conditions read them)
    record = invocation("inv_lean")
    store.create_invocation(record)
    assert store.get_invocation("inv_lean") == record
    dynamodb = as_dynamodb(store)
    if dynamodb is not None:
        item = raw_item(dynamodb, "INV#inv_lean", "META")
        assert {"epoch", "lease_until_ms", "doorbell", "journal_expires_at_ms", "key"} <= set(item)
        assert {"attempts", "retry_count", "caller_id", "output_content_type"}.isdisjoint(item)


def test_read_fence_reads_the_epoch_and_doorbell(store: Store) -> None:
    assert store.read_fence("inv_none") is None
    store.create_invocation(invocation("inv_fence", status="ready"))
    assert store.read_fence("inv_fence") == (0, 0)
    leased = store.acquire_lease("inv_fence", 1, 10_000, ["ready"])
    store.ring("inv_fence")
    assert store.read_fence("inv_fence") == (leased.epoch, 1)


def test_create_twice_conflicts_and_keeps_the_first(store: Store) -> None:
    store.create_invocation(invocation("inv_1"))

    with pytest.raises(StoreConflict, match="invocation inv_1 exists already") as raised:
        store.create_invocation(invocation("inv_1", service="Impostor"))

    assert raised.value.status == 409
    assert store.get_invocation("inv_1") == invocation("inv_1")


def test_get_and_load_of_an_unknown_invocation_are_none(store: Store) -> None:
    assert store.get_invocation("inv_missing") is None
    assert store.load_invocation("inv_missing") is None


def test_acquire_lease_first_wins_second_conflicts_until_expiry(store: Store) -> None:
    store.create_invocation(invocation("inv_1"))

    first = store.acquire_lease("inv_1", now_ms=2_000, lease_until_ms=32_000, runnable=RUNNABLE)
    assert first == invocation("inv_1", status="running", epoch=1, lease_until_ms=32_000, modified_at_ms=2_000)
    assert store.get_invocation("inv_1") == first

    with pytest.raises(StoreConflict, match="inv_1"):
        store.acquire_lease("inv_1", now_ms=31_999, lease_until_ms=61_999, runnable=RUNNABLE)
    assert store.get_invocation("inv_1") == first

    with pytest.raises(StoreConflict):  # the lease is still held at exactly lease_until_ms
        store.acquire_lease("inv_1", now_ms=32_000, lease_until_ms=62_000, runnable=RUNNABLE)

    second = store.acquire_lease("inv_1", now_ms=32_001, lease_until_ms=62_001, runnable=RUNNABLE)
    assert (second.epoch, second.lease_until_ms, second.modified_at_ms) == (2, 62_001, 32_001)
    if (dynamodb := as_dynamodb(store)) is not None:
        item = raw_item(dynamodb, "INV#inv_1", "META")
        assert (item["status_key"], item["status_order"]) == (
            {"S": f"STATUS#active#{shard_of('inv_1', dynamodb.shards)}"},
            {"S": "0000000001000#inv_1"},
        )


@pytest.mark.parametrize("status", ["completed", "paused"])
def test_acquire_lease_on_a_status_not_runnable_conflicts(store: Store, status: str) -> None:
    store.create_invocation(invocation("inv_1", status=status))

    with pytest.raises(StoreConflict):
        store.acquire_lease("inv_1", now_ms=2_000, lease_until_ms=32_000, runnable=RUNNABLE)

    assert store.get_invocation("inv_1") == invocation("inv_1", status=status)


def test_acquire_lease_on_an_unknown_invocation_conflicts_and_creates_nothing(store: Store) -> None:
    with pytest.raises(StoreConflict):
        store.acquire_lease("inv_ghost", now_ms=2_000, lease_until_ms=32_000, runnable=RUNNABLE)

    assert_no_invocation(store, "inv_ghost")


def test_acquire_lease_needs_a_runnable_status(store: Store) -> None:
    with pytest.raises(ValueError, match="at least one runnable status"):
        store.acquire_lease("inv_1", now_ms=2_000, lease_until_ms=32_000, runnable=[])


def test_update_with_the_current_epoch_sets_and_removes_fields(store: Store) -> None:
    store.create_invocation(invocation("inv_1", waiting_on={"kind": "sleep"}))
    leased = store.acquire_lease("inv_1", now_ms=2_000, lease_until_ms=32_000, runnable=RUNNABLE)

    store._update_invocation(
        "inv_1",
        leased.epoch,
        status="completed",
        modified_at_ms=3_000,
        lease_until_ms=0,
        waiting_on=None,
        output=b'"hi"',
        expires_at_s=86_403,
        last_failure={"code": 500, "message": "earlier"},
    )

    expected = dataclasses.replace(
        leased,
        status="completed",
        modified_at_ms=3_000,
        lease_until_ms=0,
        waiting_on=None,
        output=b'"hi"',
        expires_at_s=86_403,
        last_failure={"code": 500, "message": "earlier"},
    )
    assert store.get_invocation("inv_1") == expected
    if (dynamodb := as_dynamodb(store)) is not None:
        item = raw_item(dynamodb, "INV#inv_1", "META")
        assert (item["status_key"], item["status_order"]) == (
            {"S": f"STATUS#completed#{shard_of('inv_1', dynamodb.shards)}"},
            {"S": "0000000001000#inv_1"},
        )
        assert "waiting_on" not in item

        assert item["expires_at"] == {"N": str(86_403 + TTL_GRACE_S)}
        assert item["expiry_order"] == {"S": "0000086403000#inv_1"}
    assert [d.invocation_id for d in store.due_retention(86_403_000)] == ["inv_1"]

    store._update_invocation("inv_1", leased.epoch, expires_at_s=0)
    assert store.get_invocation("inv_1") == dataclasses.replace(expected, expires_at_s=0)
    assert store.due_retention(MAX_TIMER_MS) == []
    if (dynamodb := as_dynamodb(store)) is not None:
        item = raw_item(dynamodb, "INV#inv_1", "META")
        assert [name for name in ("expires_at", "retained_until", "expiry_key", "expiry_order") if name in item] == []


def test_update_with_a_stale_epoch_conflicts_and_changes_nothing(store: Store) -> None:
    store.create_invocation(invocation("inv_1"))
    store.acquire_lease("inv_1", now_ms=2_000, lease_until_ms=3_000, runnable=RUNNABLE)
    current = store.acquire_lease("inv_1", now_ms=4_000, lease_until_ms=34_000, runnable=RUNNABLE)  # epoch 2

    with pytest.raises(StoreConflict, match="epoch 1 no longer holds"):
        store._update_invocation("inv_1", 1, status="completed", modified_at_ms=5_000, output=b"late")

    assert store.get_invocation("inv_1") == current
    assert current.epoch == 2


def test_update_of_an_unknown_invocation_conflicts_and_creates_nothing(store: Store) -> None:
    with pytest.raises(StoreConflict):
        store._update_invocation("inv_ghost", 0, status="ready")

    assert_no_invocation(store, "inv_ghost")


def test_update_rejects_unknown_key_and_required_none_before_any_request(store: Store) -> None:
    store.create_invocation(invocation("inv_1"))
    before = store.request_count

    with pytest.raises(TypeError, match=r"unknown InvocationRecord field\(s\): colour, stauts"):
        store._update_invocation("inv_1", 0, stauts="ready", colour="red")
    with pytest.raises(TypeError, match=r"cannot set required field\(s\) to None: status"):
        store._update_invocation("inv_1", 0, status=None)
    with pytest.raises(ValueError, match="at least one field"):
        store._update_invocation("inv_1", 0)

    assert store.request_count == before
    assert store.get_invocation("inv_1") == invocation("inv_1")


def test_update_with_a_stale_doorbell_conflicts_and_changes_nothing(store: Store) -> None:
    store.create_invocation(invocation("inv_1"))
    leased = store.acquire_lease("inv_1", now_ms=2_000, lease_until_ms=32_000, runnable=RUNNABLE)
    store.ring("inv_1")  # a notification arrived after the holder read doorbell 0

    with pytest.raises(StoreConflict, match="epoch 1 or doorbell 0 no longer holds"):
        store._update_invocation("inv_1", leased.epoch, doorbell=0, status="suspended", modified_at_ms=3_000)

    rung = dataclasses.replace(leased, doorbell=1)
    assert store.get_invocation("inv_1") == rung
    store._update_invocation("inv_1", leased.epoch, doorbell=1, status="suspended", modified_at_ms=3_000)
    assert store.get_invocation("inv_1") == dataclasses.replace(rung, status="suspended", modified_at_ms=3_000)


def test_update_with_a_current_doorbell_but_a_stale_epoch_conflicts(store: Store) -> None:
    store.create_invocation(invocation("inv_1"))
    store.acquire_lease("inv_1", now_ms=2_000, lease_until_ms=3_000, runnable=RUNNABLE)
    current = store.acquire_lease("inv_1", now_ms=4_000, lease_until_ms=34_000, runnable=RUNNABLE)  # epoch 2

    with pytest.raises(StoreConflict):
        store._update_invocation("inv_1", 1, doorbell=0, status="suspended")

    assert store.get_invocation("inv_1") == current


def test_ring_bumps_only_the_doorbell(store: Store) -> None:
    store.create_invocation(invocation("inv_1", modified_at_ms=1_500))
    dynamodb = as_dynamodb(store)
    before = {} if dynamodb is None else raw_item(dynamodb, "INV#inv_1", "META")

    store.ring("inv_1")
    store.ring("inv_1")

    assert store.get_invocation("inv_1") == invocation("inv_1", modified_at_ms=1_500, doorbell=2)
    assert store.list_invocations() == [invocation("inv_1", modified_at_ms=1_500, doorbell=2)]
    if dynamodb is not None:
        after = raw_item(dynamodb, "INV#inv_1", "META")
        assert after["doorbell"] == {"N": "2"}
        assert {k: v for k, v in after.items() if k != "doorbell"} == {
            k: v for k, v in before.items() if k != "doorbell"
        }


def test_ring_of_an_unknown_invocation_conflicts_and_creates_nothing(store: Store) -> None:
    with pytest.raises(StoreConflict, match="invocation inv_ghost does not exist"):
        store.ring("inv_ghost")

    assert_no_invocation(store, "inv_ghost")


def test_ring_of_a_completed_invocation_conflicts_and_changes_nothing(store: Store) -> None:
    store.create_invocation(invocation("inv_done", status="completed", doorbell=3))
    with pytest.raises(StoreConflict, match="invocation inv_done does not exist or has completed"):
        store.ring("inv_done")

    assert store.get_invocation("inv_done") == invocation("inv_done", status="completed", doorbell=3)


def test_update_unless_completed_bumps_the_epoch_so_the_holder_loses(store: Store) -> None:
    store.create_invocation(invocation("inv_1"))
    held = store.acquire_lease("inv_1", now_ms=2_000, lease_until_ms=32_000, runnable=RUNNABLE)  # epoch 1

    forced = store._update_unless_completed(
        "inv_1", status="completed", modified_at_ms=3_000, lease_until_ms=0, failure={"code": 409, "message": "killed"}
    )

    expected = dataclasses.replace(
        held,
        epoch=2,
        status="completed",
        modified_at_ms=3_000,
        lease_until_ms=0,
        failure={"code": 409, "message": "killed"},
    )
    assert forced == expected
    assert store.get_invocation("inv_1") == expected
    assert store.list_invocations(["completed"]) == [expected]
    if (dynamodb := as_dynamodb(store)) is not None:
        item = raw_item(dynamodb, "INV#inv_1", "META")
        assert (item["status_key"], item["status_order"]) == (
            {"S": f"STATUS#completed#{shard_of('inv_1', dynamodb.shards)}"},
            {"S": "0000000001000#inv_1"},
        )
    with pytest.raises(StoreConflict, match="epoch 1 no longer holds"):
        store._update_invocation("inv_1", held.epoch, status="suspended", modified_at_ms=4_000)
    assert store.get_invocation("inv_1") == expected


def test_update_unless_completed_without_changes_only_bumps_the_epoch(store: Store) -> None:
    store.create_invocation(invocation("inv_1", epoch=5))

    assert store._update_unless_completed("inv_1") == invocation("inv_1", epoch=6)
    assert store.get_invocation("inv_1") == invocation("inv_1", epoch=6)


def test_update_unless_completed_refuses_a_completed_invocation(store: Store) -> None:
    done = invocation("inv_1", status="completed", output=b"1", epoch=3)
    store.create_invocation(done)

    with pytest.raises(StoreConflict, match="invocation inv_1 has completed or does not exist"):
        store._update_unless_completed("inv_1", status="completed", modified_at_ms=9_000, failure={"code": 409})

    assert store.get_invocation("inv_1") == done


def test_update_unless_completed_of_an_unknown_invocation_conflicts_and_creates_nothing(
    store: Store,
) -> None:
    with pytest.raises(StoreConflict):
        store._update_unless_completed("inv_ghost", status="paused", modified_at_ms=2_000)

    assert_no_invocation(store, "inv_ghost")


def test_update_unless_completed_refuses_fields_the_store_moves_before_any_request(store: Store) -> None:
    store.create_invocation(invocation("inv_1"))
    before = store.request_count

    with pytest.raises(TypeError, match="cannot set doorbell, epoch"):
        store._update_unless_completed("inv_1", epoch=7, doorbell=0)
    with pytest.raises(
        TypeError, match=r"_update_unless_completed\(\) got unknown InvocationRecord field\(s\): stauts"
    ):
        store._update_unless_completed("inv_1", stauts="paused")

    assert store.request_count == before
    assert store.get_invocation("inv_1") == invocation("inv_1")


def test_notifications_come_back_with_load_ordered_by_time_then_key(store: Store) -> None:
    store.create_invocation(invocation("inv_1"))
    store.create_invocation(invocation("inv_10"))  # a neighbour whose key shares the prefix
    batch = JournalBatch(1, b"entries", epoch=1, committed_at_ms=2_000)
    store.append_batch("inv_1", batch)
    late_c2 = StoredNotification("c2", b"\x00completion 2", created_at_ms=3_000)
    late_c10 = StoredNotification("c10", b"\x00completion 10", created_at_ms=3_000)
    early = StoredNotification("nready", b"\x00signal", created_at_ms=1_000)
    assert [store.put_notification("inv_1", n) for n in (late_c2, early, late_c10)] == [True, True, True]
    assert store.put_notification("inv_10", StoredNotification("c1", b"neighbour", created_at_ms=1)) is True
    before = store.request_count

    loaded = store.load_invocation("inv_1")

    assert loaded == LoadedInvocation(invocation("inv_1"), [batch], [early, late_c10, late_c2])
    assert store.request_count - before == 1  # still one query
    if (dynamodb := as_dynamodb(store)) is not None:
        assert raw_item(dynamodb, "INV#inv_1", "N#c2") == {
            "PK": {"S": "INV#inv_1"},
            "SK": {"S": "N#c2"},
            "entry": {"B": b"\x00completion 2"},
            "created_at_ms": {"N": "3000"},
        }
    assert store.list_invocations() == [invocation("inv_10"), invocation("inv_1")]  # the scan skips them


def test_second_put_notification_with_one_key_is_false_and_keeps_the_first(store: Store) -> None:
    store.create_invocation(invocation("inv_1"))
    first = StoredNotification("c3", b"first resolution", created_at_ms=2_000)

    assert store.put_notification("inv_1", first) is True
    assert store.put_notification("inv_1", StoredNotification("c3", b"second resolution", created_at_ms=1_000)) is False

    loaded = store.load_invocation("inv_1")
    assert loaded is not None
    assert loaded.notifications == [first]


def test_notifications_of_an_unknown_invocation_do_not_make_it_load(store: Store) -> None:
    assert store.put_notification("inv_ghost", StoredNotification("s0", b"x", created_at_ms=1)) is True

    assert store.load_invocation("inv_ghost") is None


def test_notification_above_400_kb_is_kept_and_one_above_32_mib_refused_loudly(store: Store) -> None:
    store.create_invocation(invocation("inv_1"))
    large = StoredNotification("c1", bytes(range(256)) * 1_700, created_at_ms=1)  # 435,200 bytes
    assert store.put_notification("inv_1", large)

    with pytest.raises(ItemTooLarge) as raised:
        store.put_notification("inv_1", StoredNotification("c2", b"x" * (MAX_MESSAGE_BYTES + 1), created_at_ms=1))

    assert raised.value.status == 413
    assert store.load_invocation("inv_1") == LoadedInvocation(invocation("inv_1"), [], [large])


def test_append_batch_twice_at_one_index_conflicts_and_keeps_the_first(store: Store) -> None:
    store.create_invocation(invocation("inv_1"))
    winner = JournalBatch(start_index=1, entries=b"first attempt", epoch=1, committed_at_ms=2_000)
    loser = JournalBatch(start_index=1, entries=b"second attempt", epoch=2, committed_at_ms=2_500)
    store.append_batch("inv_1", winner)

    with pytest.raises(StoreConflict, match="journal index 1 is committed already"):
        store.append_batch("inv_1", loser)

    loaded = store.load_invocation("inv_1")
    assert loaded == LoadedInvocation(invocation("inv_1"), [winner], [])


def test_load_returns_meta_and_batches_ordered_by_start_index(store: Store) -> None:
    store.create_invocation(invocation("inv_1"))
    store.create_invocation(invocation("inv_10"))  # a neighbour whose key shares the prefix
    batches = [JournalBatch(i, f"entries {i}".encode(), epoch=1, committed_at_ms=i) for i in (12, 1, 5, 100)]
    for batch in batches:
        store.append_batch("inv_1", batch)
    store.append_batch("inv_10", JournalBatch(1, b"neighbour", epoch=1, committed_at_ms=1))
    before = store.request_count

    loaded = store.load_invocation("inv_1")

    assert loaded == LoadedInvocation(invocation("inv_1"), sorted(batches, key=lambda b: b.start_index), [])
    assert store.request_count - before == 1  # one query


def test_load_follows_pages_past_one_megabyte(store: Store) -> None:
    store.create_invocation(invocation("inv_1"))
    batches = [JournalBatch(i, bytes([i]) * 300_000, epoch=1, committed_at_ms=i) for i in range(1, 5)]
    for batch in batches:
        store.append_batch("inv_1", batch)
    before = store.request_count

    loaded = store.load_invocation("inv_1")

    assert loaded == LoadedInvocation(invocation("inv_1"), batches, [])
    if as_dynamodb(store) is not None:
        assert store.request_count - before == 2  # 1.2 MB: DynamoDB (and moto) page at 1 MB


def test_batch_above_400_kb_is_kept_and_one_above_32_mib_refused_loudly(store: Store) -> None:
    store.create_invocation(invocation("inv_1"))
    large = JournalBatch(3, bytes(range(256)) * 1_700, epoch=1, committed_at_ms=1)
    store.append_batch("inv_1", large)

    with pytest.raises(ItemTooLarge) as raised:
        store.append_batch("inv_1", JournalBatch(4, b"x" * (MAX_MESSAGE_BYTES + 1), epoch=1, committed_at_ms=1))

    assert raised.value.status == 413
    assert store.load_invocation("inv_1") == LoadedInvocation(invocation("inv_1"), [large], [])


def test_an_output_above_400_kb_is_kept_beside_a_large_input(store: Store) -> None:
    record = invocation("inv_1", input_entry=b"i" * 300_000)
    store.create_invocation(record)

    store._update_invocation("inv_1", 0, output=b"o" * 420_000)

    assert store.get_invocation("inv_1") == record.evolve(output=b"o" * 420_000)


def test_update_above_32_mib_is_refused_loudly(store: Store) -> None:
    store.create_invocation(invocation("inv_1"))

    with pytest.raises(ItemTooLarge):
        store._update_invocation("inv_1", 0, output=b"x" * (MAX_MESSAGE_BYTES + 1))

    assert store.get_invocation("inv_1") == invocation("inv_1")


def test_append_batch_rejects_a_negative_index(store: Store) -> None:
    with pytest.raises(ValueError, match="start_index must be >= 0, got -1"):
        store.append_batch("inv_1", JournalBatch(-1, b"x", epoch=1, committed_at_ms=1))


def test_list_invocations_by_status_newest_first_and_by_service(store: Store) -> None:
    store.create_invocation(invocation("inv_a", created_at_ms=1_000, modified_at_ms=1_000))
    store.create_invocation(invocation("inv_b", created_at_ms=3_000, modified_at_ms=3_000, service="Counter"))
    store.create_invocation(invocation("inv_c", created_at_ms=2_000, modified_at_ms=2_000))
    store.create_invocation(invocation("inv_d", created_at_ms=5_000, modified_at_ms=5_000, status="completed"))
    store.acquire_lease("inv_c", now_ms=4_000, lease_until_ms=34_000, runnable=RUNNABLE)  # ready -> running

    def ids(records: list[InvocationRecord]) -> list[str]:
        return [r.invocation_id for r in records]

    assert ids(store.list_invocations(["ready"])) == ["inv_b", "inv_a"]  # inv_c left the ready index
    assert ids(store.list_invocations(["running"])) == ["inv_c"]
    # newest first by creation: the lease taken at 4_000 does not move inv_c ahead of inv_b
    assert ids(store.list_invocations(["ready", "running", "completed"])) == ["inv_d", "inv_b", "inv_c", "inv_a"]
    assert ids(store.list_invocations(["ready", "running", "completed"], limit=2)) == ["inv_d", "inv_b"]
    assert ids(store.list_invocations(["ready"], service="Greeter")) == ["inv_a"]
    assert ids(store.list_invocations()) == ["inv_d", "inv_b", "inv_c", "inv_a"]  # the scan skips batches
    assert ids(store.list_invocations(service="Counter")) == ["inv_b"]
    assert ids(store.list_invocations(limit=1)) == ["inv_d"]
    assert store.list_invocations(["paused"]) == []
    assert store.list_invocations(limit=0) == []
    assert store.list_invocations(["running"]) == [store.get_invocation("inv_c")]


def test_list_invocations_scan_ignores_journal_batches(store: Store) -> None:
    store.create_invocation(invocation("inv_1"))
    store.append_batch("inv_1", JournalBatch(1, b"entries", epoch=1, committed_at_ms=1))

    assert store.list_invocations() == [invocation("inv_1")]


def test_attach_caller_adds_once_and_is_refused_once_completed(store: Store) -> None:
    store.create_invocation(invocation("inv_callee"))
    store.attach_caller("inv_callee", "inv_a/3")
    store.attach_caller("inv_callee", "inv_a/3")  # a repeat changes nothing
    store.attach_caller("inv_callee", "inv_b/1")
    assert store.get_invocation("inv_callee").callers == {"inv_a/3", "inv_b/1"}  # type: ignore[union-attr]
    store._update_unless_completed("inv_callee", status="completed")
    with pytest.raises(StoreConflict):
        store.attach_caller("inv_callee", "inv_c/2")
    with pytest.raises(StoreConflict):
        store.attach_caller("inv_unknown", "inv_c/2")
    assert store.get_invocation("inv_unknown") is None
    assert store.get_invocation("inv_callee").callers == {"inv_a/3", "inv_b/1"}  # type: ignore[union-attr]


def test_attach_caller_rings_so_a_completing_write_conditional_on_the_doorbell_fails(store: Store) -> None:
    store.create_invocation(invocation("inv_callee"))
    read = store.get_invocation("inv_callee")
    assert read is not None
    store.attach_caller("inv_callee", "inv_a/3")  # after the completing worker read its callers
    after = store.get_invocation("inv_callee")
    assert after is not None
    assert after.doorbell == read.doorbell + 1
    with pytest.raises(StoreConflict):
        store._update_invocation("inv_callee", 0, doorbell=read.doorbell, status="completed", output=b"42")
    done = store._update_invocation("inv_callee", 0, doorbell=after.doorbell, returning=True, status="completed")
    assert done is not None
    assert done.callers == {"inv_a/3"}


def test_update_returning_gives_the_record_after_the_write(store: Store) -> None:
    store.create_invocation(invocation("inv_r"))
    store.attach_caller("inv_r", "inv_a/1")
    after = store._update_invocation("inv_r", 0, returning=True, status="completed", output=b"42")
    assert after is not None
    assert (after.status, after.output, after.callers) == ("completed", b"42", {"inv_a/1"})
    assert store._update_invocation("inv_r", 0, completed_at_ms=5) is None


def test_delete_invocation_removes_record_journal_and_notifications(store: Store) -> None:
    store.create_invocation(invocation("inv_j"))
    for start in range(1, 40):  # more than one BatchWriteItem of 25
        store.append_batch("inv_j", JournalBatch(start, b"entries", epoch=1, committed_at_ms=2_000))
    store.put_notification("inv_j", StoredNotification("c1", b"\x00n", created_at_ms=3_000))
    store.create_invocation(invocation("inv_other"))
    store.append_batch("inv_other", JournalBatch(1, b"other", epoch=1, committed_at_ms=2_000))

    store.delete_invocation("inv_j")
    assert store.load_invocation("inv_j") is None
    store.delete_invocation("inv_j")
    assert len(store.load_invocation("inv_other").batches) == 1  # type: ignore[union-attr]


def test_delete_invocation_of_a_record_read_earlier_keeps_one_created_anew_under_its_id(store: Store) -> None:
    store.create_invocation(invocation("inv_again", created_at_ms=1_000))
    store.delete_invocation("inv_again", created_at_ms=1_000)
    store.create_invocation(invocation("inv_again", created_at_ms=5_000))  # created anew after that removal
    store.append_batch("inv_again", JournalBatch(1, b"new", epoch=1, committed_at_ms=5_000))

    store.delete_invocation("inv_again", created_at_ms=1_000)  # a late removal of the first one

    loaded = store.load_invocation("inv_again")
    assert loaded is not None
    assert (loaded.record.created_at_ms, [b.entries for b in loaded.batches]) == (5_000, [b"new"])
    store.delete_invocation("inv_again", created_at_ms=5_000)
    assert store.load_invocation("inv_again") is None


def test_list_is_newest_first_by_creation_across_shards_and_statuses_and_pages_by_token(store: Store) -> None:
    ids = ids_in_distinct_shards(store, 9)
    statuses = ["ready", "completed", "suspended"]
    for n, invocation_id in enumerate(ids):  # creation times interleave the shards and the statuses
        created = 1_000 + (n * 7919) % 100 * 10
        store.create_invocation(
            invocation(
                invocation_id,
                created_at_ms=created,
                modified_at_ms=50_000 - created,  # modification order is the reverse: it must not count
                status=statuses[n % 3],
                service="Counter" if n % 2 else "Greeter",
                completion="succeeded" if statuses[n % 3] == "completed" else "",
            )
        )
    everyone = sorted(
        (store.get_invocation(i) for i in ids), key=lambda r: (r.created_at_ms, r.invocation_id), reverse=True
    )

    def listed(**filters: Any) -> list[str]:
        return [r.invocation_id for r in store.list_invocations(**filters)]

    assert listed() == [r.invocation_id for r in everyone]
    assert store.list_invocations() == everyone  # the whole records, read from the table
    assert listed(statuses=["ready", "suspended"]) == [r.invocation_id for r in everyone if r.status != "completed"]
    assert listed(service="Counter") == [r.invocation_id for r in everyone if r.service == "Counter"]
    assert listed(completion="succeeded") == [r.invocation_id for r in everyone if r.status == "completed"]
    assert listed(limit=4) == [r.invocation_id for r in everyone[:4]]

    # paging: each page starts below the last of the previous one, across every shard
    pages: list[str] = []
    before = None
    while True:
        page = store.list_invocations(limit=2, before=before)
        pages += [r.invocation_id for r in page]
        if len(page) < 2:
            break
        before = (page[-1].created_at_ms, page[-1].invocation_id)
    assert pages == [r.invocation_id for r in everyone]


def test_a_lease_or_its_renewal_does_not_move_an_invocation_in_the_listing(store: Store) -> None:
    older, newer = ids_in_distinct_shards(store, 2)
    store.create_invocation(invocation(older, created_at_ms=1_000, modified_at_ms=1_000))
    store.create_invocation(invocation(newer, created_at_ms=2_000, modified_at_ms=2_000))
    dynamodb = as_dynamodb(store)
    order_before = None if dynamodb is None else raw_item(dynamodb, f"INV#{older}", "META")["status_order"]

    leased = store.acquire_lease(older, now_ms=3_000, lease_until_ms=4_000, runnable=RUNNABLE)
    store._update_invocation(older, leased.epoch, modified_at_ms=3_500, lease_until_ms=9_000)  # a renewal
    store.acquire_lease(older, now_ms=9_001, lease_until_ms=20_000, runnable=RUNNABLE)  # taken over

    if dynamodb is not None:
        assert raw_item(dynamodb, f"INV#{older}", "META")["status_order"] == order_before
    assert [r.invocation_id for r in store.list_invocations()] == [newer, older]
    assert [r.invocation_id for r in store.list_invocations(["running"])] == [older]
    assert [r.invocation_id for r in store.list_invocations(before=(2_000, newer))] == [older]


class _Clock:
    def __init__(self, now_ms: int) -> None:
        self.now = now_ms

    def now_ms(self) -> int:
        return self.now


class _NoWakeUps:
    def wake_now(self, invocation_id: str) -> None:
        raise AssertionError(f"nothing should wake {invocation_id}")

    def wake_at(self, invocation_id: str, due_ms: int) -> None:
        raise AssertionError(f"nothing should wake {invocation_id}")


def completed_with_journal(store: Store, invocation_id: str, *, journal_expires_at_ms: int, expires_at_s: int) -> None:
    """An invocation completed by the completing write (lease, journal, notification, update)."""
    store.create_invocation(invocation(invocation_id, created_at_ms=1_000))
    leased = store.acquire_lease(invocation_id, now_ms=1_000, lease_until_ms=2_000, runnable=RUNNABLE)
    for start in (1, 3):
        store.append_batch(invocation_id, JournalBatch(start, b"entries", epoch=leased.epoch, committed_at_ms=1_100))
    store.put_notification(invocation_id, StoredNotification("c2", b"\x00n", created_at_ms=1_200))
    store._update_invocation(
        invocation_id,
        leased.epoch,
        status="completed",
        lease_until_ms=0,
        output=b'"done"',
        journal_expires_at_ms=journal_expires_at_ms,
        expires_at_s=expires_at_s,
    )


def test_the_sweep_removes_the_journal_then_the_record_at_their_retention_without_timers(
    store: Store,
) -> None:
    from control_plane.runtime import ControlPlane

    now = 1_800_000_000_000
    clock = _Clock(now)
    plane = ControlPlane(store, invoker=None, scheduler=_NoWakeUps(), clock=clock, facts=store.facts)  # type: ignore[arg-type, attr-defined]
    short, long = ids_in_distinct_shards(store, 2)
    completed_with_journal(store, short, journal_expires_at_ms=now + 1_000, expires_at_s=(now + 5_000) // 1000)
    completed_with_journal(store, long, journal_expires_at_ms=now + 60_000, expires_at_s=(now + 90_000) // 1000)
    store.create_invocation(invocation("inv_paused", status="paused"))  # unfinished: no retention
    assert store.due_timers(MAX_TIMER_MS) == []  # completing wrote no timer
    if (dynamodb := as_dynamodb(store)) is not None:
        assert partitions(dynamodb, "TIMER") == set()

    def journal(invocation_id: str) -> tuple[int, int]:
        loaded = store.load_invocation(invocation_id)
        assert loaded is not None
        return len(loaded.batches), len(loaded.notifications)

    assert plane.sweep_due() == 0  # nothing due yet
    assert journal(short) == journal(long) == (2, 1)

    clock.now = now + 1_000  # the short journal retention ended
    assert plane.sweep_due() == 1
    assert journal(short) == (0, 0)
    assert store.get_invocation(short).journal_expires_at_ms == 0  # type: ignore[union-attr]
    assert store.get_invocation(short).output == b'"done"'  # type: ignore[union-attr]  # kept for its callers
    assert journal(long) == (2, 1)
    assert plane.sweep_due() == 0  # done once

    clock.now = now + 5_000  # the short record retention ended
    assert plane.sweep() == 1  # the start-up sweep carries retention out too
    assert store.get_invocation(short) is None
    assert journal(long) == (2, 1)
    assert store.get_invocation("inv_paused") is not None

    clock.now = now + 90_000  # the long one's journal and record end together: one removal
    assert plane.sweep_due() == 1
    assert store.get_invocation(long) is None
    assert [r.invocation_id for r in store.list_invocations()] == ["inv_paused"]
    assert store.load_invocation(long) is None
    assert store.due_timers(MAX_TIMER_MS) == []
    if (dynamodb := as_dynamodb(store)) is not None:
        assert partitions(dynamodb, "INV#") == {"INV#inv_paused"}
        assert partitions(dynamodb, "TIMER") == set()


def test_due_retention_is_earliest_first_across_shards_and_moves_to_the_record_after_the_journal(
    store: Store,
) -> None:
    a, b, c = ids_in_distinct_shards(store, 3)
    completed_with_journal(store, a, journal_expires_at_ms=3_000, expires_at_s=9)
    completed_with_journal(store, b, journal_expires_at_ms=1_000, expires_at_s=4)
    completed_with_journal(store, c, journal_expires_at_ms=2_000, expires_at_s=2)

    due = store.due_retention(3_000)
    assert [(d.invocation_id, d.due_ms) for d in due] == [(b, 1_000), (c, 2_000), (a, 3_000)]
    assert [d.invocation_id for d in store.due_retention(3_000, limit=2)] == [b, c]
    assert due[0] == RetentionDue(b, 1_000, 1_000, 4)
    assert store.due_retention(999) == []

    assert store.remove_journal(due[0]) is True
    assert [(d.invocation_id, d.due_ms) for d in store.due_retention(10_000)] == [
        (c, 2_000),
        (a, 3_000),
        (b, 4_000),  # now at its record's retention, its journal gone
    ]


def test_remove_journal_needs_the_journal_retention_it_was_found_with(store: Store) -> None:
    completed_with_journal(store, "inv_r", journal_expires_at_ms=1_000, expires_at_s=5)
    (due,) = store.due_retention(1_000)
    stale = dataclasses.replace(due, journal_expires_at_ms=500)  # e.g. an index entry a moment old

    assert store.remove_journal(stale) is False
    loaded = store.load_invocation("inv_r")
    assert loaded is not None
    assert (len(loaded.batches), loaded.record.journal_expires_at_ms) == (2, 1_000)

    store.create_invocation(invocation("inv_live"))  # not completed: never removed
    store.append_batch("inv_live", JournalBatch(1, b"entries", epoch=0, committed_at_ms=1))
    assert store.remove_journal(dataclasses.replace(due, invocation_id="inv_live", journal_expires_at_ms=0)) is False
    assert len(store.load_invocation("inv_live").batches) == 1  # type: ignore[union-attr]

    assert store.remove_journal(due) is True
    assert store.remove_journal(due) is False  # once


def test_the_sweep_does_not_remove_a_record_its_index_entry_no_longer_describes(store: Store) -> None:
    from control_plane.runtime import ControlPlane

    plane = ControlPlane(store, invoker=None, scheduler=_NoWakeUps(), clock=_Clock(10_000), facts=store.facts)  # type: ignore[arg-type, attr-defined]
    completed_with_journal(store, "inv_r", journal_expires_at_ms=1_000, expires_at_s=5)
    stale = RetentionDue("inv_r", 4_000, 0, 4)  # an older run under this id

    assert plane.engine.retention.retire(stale) is False
    assert store.get_invocation("inv_r") is not None


def _complete_with(store: Store, invocation_id: str, epoch: int, ending: JournalBatch, length: int = 2) -> None:
    """The completing write of a handler's success at 5,000 ms, carrying `ending` (`Executor.end`)."""
    store.complete(
        invocation_id, epoch, completion="succeeded", completed_at_ms=5_000, modified_at_ms=5_000,
        output=b'"hi"', journal_length=length, journal_expires_at_ms=9_000, ending=ending,
    )  # fmt: skip


def test_a_completion_carrying_its_ending_batch_writes_both_in_one_request_or_neither(store: Store) -> None:
    # issue 24: a call that ends is one durable transition; the journal reads back as if the Output
    # had been committed first (describe, SQL, replays)
    store.create_invocation(invocation("inv_end"))
    leased = store.acquire_lease("inv_end", now_ms=1_000, lease_until_ms=2_000, runnable=RUNNABLE)
    output = pb.OutputCommandMessage(value=pb.Value(content=b'"hi"'))
    ending = JournalBatch(1, encode_frames([frame(output)]), epoch=leased.epoch, committed_at_ms=5_000)

    with pytest.raises(StoreConflict):  # a stale epoch: neither is written
        _complete_with(store, "inv_end", leased.epoch - 1, ending)
    loaded = store.load_invocation("inv_end")
    assert loaded is not None and (loaded.record.status, loaded.batches) == ("running", [])

    before = store.request_count
    _complete_with(store, "inv_end", leased.epoch, ending)

    assert store.request_count - before == 1
    loaded = store.load_invocation("inv_end")
    assert loaded is not None
    assert (loaded.record.status, loaded.record.output, loaded.batches) == ("completed", b'"hi"', [ending])
    if (dynamodb := as_dynamodb(store)) is not None:  # kept in the record: no journal item, no write unit more
        assert raw_item(dynamodb, "INV#inv_end", "J#0000000001") == {}

    (due,) = store.due_retention(9_000)
    assert store.remove_journal(due) is True
    assert store.load_invocation("inv_end").batches == []  # type: ignore[union-attr]


def test_a_completion_whose_ending_index_a_stale_holder_took_leaves_one_consistent_journal(store: Store) -> None:
    # a holder that lost its lease may still append a batch (conditional on its index alone): SQLite
    # refuses the completion (start over from the journal), DynamoDB's record keeps its ending and the
    # stale batch is not read back; either way the journal reads back whole and as the record says
    store.create_invocation(invocation("inv_end"))
    leased = store.acquire_lease("inv_end", now_ms=1_000, lease_until_ms=2_000, runnable=RUNNABLE)
    stale = JournalBatch(1, b"a stale holder's", epoch=leased.epoch - 1, committed_at_ms=4_000)
    store.append_batch("inv_end", stale)
    output = pb.OutputCommandMessage(value=pb.Value(content=b'"hi"'))
    ending = JournalBatch(1, encode_frames([frame(output)]), epoch=leased.epoch, committed_at_ms=5_000)

    if as_dynamodb(store) is None:
        with pytest.raises(StoreConflict):
            _complete_with(store, "inv_end", leased.epoch, ending)
        expected = ("running", [stale])
    else:
        _complete_with(store, "inv_end", leased.epoch, ending)
        expected = ("completed", [ending])

    loaded = store.load_invocation("inv_end")
    assert loaded is not None and (loaded.record.status, loaded.batches) == expected


def test_an_ending_batch_with_more_than_the_output_reads_back_whole(store: Store) -> None:
    # an Output with the notification delivered with it (a sleep's completion, a call's result):
    # SQLite in one transaction, DynamoDB in the record's own write too (a few bytes of it)
    store.create_invocation(invocation("inv_end"))
    leased = store.acquire_lease("inv_end", now_ms=1_000, lease_until_ms=2_000, runnable=RUNNABLE)
    output = pb.OutputCommandMessage(value=pb.Value(content=b'"hi"'))
    signal = pb.SignalNotificationMessage(idx=1, void=pb.Void())
    ending = JournalBatch(1, encode_frames([frame(signal), frame(output)]), epoch=leased.epoch, committed_at_ms=5_000)

    before = store.request_count
    _complete_with(store, "inv_end", leased.epoch, ending, length=3)

    assert store.request_count - before == 1
    loaded = store.load_invocation("inv_end")
    assert loaded is not None and (loaded.record.status, loaded.batches) == ("completed", [ending])
    if (dynamodb := as_dynamodb(store)) is not None:
        assert raw_item(dynamodb, "INV#inv_end", "J#0000000001") == {}
    (due,) = store.due_retention(9_000)
    assert store.remove_journal(due) is True
    assert store.load_invocation("inv_end").batches == []  # type: ignore[union-attr]


def test_an_ending_batch_with_a_large_notification_reads_back_whole(store: Store) -> None:
    # a call's result of 2 KB before the Output: DynamoDB appends it as a journal item first (two
    # requests, as a commit before the completion) rather than grow the record by it
    store.create_invocation(invocation("inv_end"))
    leased = store.acquire_lease("inv_end", now_ms=1_000, lease_until_ms=2_000, runnable=RUNNABLE)
    output = pb.OutputCommandMessage(value=pb.Value(content=b'"hi"'))
    result = pb.CallCompletionNotificationMessage(completion_id=1, value=pb.Value(content=b"x" * 2_000))
    ending = JournalBatch(1, encode_frames([frame(result), frame(output)]), epoch=leased.epoch, committed_at_ms=5_000)

    _complete_with(store, "inv_end", leased.epoch, ending, length=3)

    loaded = store.load_invocation("inv_end")
    assert loaded is not None and (loaded.record.status, loaded.batches) == ("completed", [ending])
