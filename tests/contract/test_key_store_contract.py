"""The `KeyStore` contract: state, lock, queue, promises and a key's expiry and removal, run on
DynamoDB (moto) and SQLite.

The same assertions for every store; DynamoDB's item layout (hashed item keys, the key item's
attributes, TTL) and request counts are also checked on DynamoDB (`as_dynamodb`), with a plain boto3
client as an independent witness. Concurrent writers are tested in `tests/races/`.
"""

from __future__ import annotations

import dataclasses

import pytest

from adapters.aws.dynamodb_store import DynamoDBStore
from adapters.local.sqlite_store import SQLiteStore
from control_plane.ports import MAX_MESSAGE_BYTES, ItemTooLarge, LoadedInvocation, PromiseRecord, StoreConflict
from tests.helpers.dynamodb_items import as_dynamodb, h, object_pk, raw_item, raw_partition
from tests.helpers.records import KEYED_INVOCATION

Store = DynamoDBStore | SQLiteStore
SCOPE = "Counter"


def put_state(store: Store, scope: str, key: str, state_key: bytes, value: bytes, expires_at_s: int = 0) -> None:
    """Set one state entry, unfenced (`apply_state` with one write)."""
    store.apply_state(scope, key, {state_key: value}, expires_at_s=expires_at_s)


def delete_state(store: Store, scope: str, key: str, state_key: bytes) -> None:
    """Remove one state entry, unfenced (`apply_state` with one removal)."""
    store.apply_state(scope, key, {state_key: None})


def test_state_round_trips_binary_keys_and_values_including_empty(store: Store) -> None:
    entries = {b"count": b"7", b"\x00\xff binary key": b"\x00\x01\xfe\xff", b"empty": b"", b"": b"empty key"}
    for state_key, value in entries.items():
        put_state(store, SCOPE, "k1", state_key, value)
    before = store.request_count

    assert store.load_state(SCOPE, "k1") == entries
    assert store.request_count == before + 1  # one GetItem of the key item
    assert store.load_state(SCOPE, "other") == {}
    assert store.load_state("OtherScope", "k1") == {}


def test_a_set_replaces_and_a_removal_removes_one_entry(store: Store) -> None:
    put_state(store, SCOPE, "k", b"a", b"1")
    put_state(store, SCOPE, "k", b"b", b"2")
    put_state(store, SCOPE, "k", b"a", b"3")

    delete_state(store, SCOPE, "k", b"b")
    delete_state(store, SCOPE, "k", b"never-set")  # nothing to remove: no error

    assert store.load_state(SCOPE, "k") == {b"a": b"3"}
    if (dynamodb := as_dynamodb(store)) is not None:
        assert "expires_at" not in raw_item(dynamodb, object_pk("k"), "LOCK")


def test_the_changes_of_one_commit_are_one_write(store: Store) -> None:
    put_state(store, SCOPE, "k", b"gone", b"1")
    before = store.request_count

    store.apply_state(SCOPE, "k", {b"a": b"1", b"b": b"2", b"gone": None})

    assert store.request_count == before + 1
    assert store.load_state(SCOPE, "k") == {b"a": b"1", b"b": b"2"}


def test_clear_removes_every_entry_in_one_read_and_one_write_and_keeps_lock_and_queue(store: Store) -> None:
    for i in range(30):
        put_state(store, SCOPE, "k", f"entry-{i:02d}".encode(), bytes([i]))
    put_state(store, SCOPE, "k", b"large", b"L" * 40_000)
    put_state(store, SCOPE, "k2", b"neighbour", b"kept")
    assert store.take_key(SCOPE, "k", "inv_holder") is not None
    store.enqueue(SCOPE, "k", "0001", "inv_next")
    before = store.request_count

    store.apply_state(SCOPE, "k", {b"after": b"x"}, clear=True)

    if as_dynamodb(store) is not None:
        assert store.request_count == before + 3  # GetItem, UpdateItem, and the large value's DeleteItem
    assert store.load_state(SCOPE, "k") == {b"after": b"x"}
    assert store.load_state(SCOPE, "k2") == {b"neighbour": b"kept"}
    if (dynamodb := as_dynamodb(store)) is not None:
        assert sorted(raw_partition(dynamodb, object_pk("k"))) == ["LOCK"]
    assert store.key_status(SCOPE, "k") == ("inv_holder", ("0001", "inv_next"))


def test_clear_state_of_a_key_without_state_makes_only_the_read(store: Store) -> None:
    before = store.request_count

    store.clear_state(SCOPE, "nothing")

    assert store.request_count == before + 1
    if (dynamodb := as_dynamodb(store)) is not None:
        assert raw_item(dynamodb, object_pk("nothing"), "LOCK") == {}


def test_large_values_are_stored_apart_and_read_with_one_batch(store: Store) -> None:
    values = {f"big-{i}".encode(): bytes([i]) * 300_000 for i in range(5)}  # 1.5 MB in all
    store.apply_state(SCOPE, "big", {**values, b"small": b"s"})
    before = store.request_count

    assert store.load_state(SCOPE, "big") == {**values, b"small": b"s"}
    if as_dynamodb(store) is not None:
        assert store.request_count - before >= 2  # the key item, then BatchGetItem (paged past 16 MB / 1 MB)
    if (dynamodb := as_dynamodb(store)) is not None:
        assert len(raw_partition(dynamodb, object_pk("big"))) == 6


def test_replacing_or_removing_a_large_value_deletes_its_item(store: Store) -> None:
    put_state(store, SCOPE, "k", b"big", b"1" * 40_000)
    put_state(store, SCOPE, "k", b"big", b"2" * 40_000)
    if (dynamodb := as_dynamodb(store)) is not None:
        assert len(raw_partition(dynamodb, object_pk("k"))) == 2
    assert store.load_state(SCOPE, "k") == {b"big": b"2" * 40_000}

    put_state(store, SCOPE, "k", b"big", b"small now")
    if (dynamodb := as_dynamodb(store)) is not None:
        assert sorted(raw_partition(dynamodb, object_pk("k"))) == ["LOCK"]
    put_state(store, SCOPE, "k", b"big", b"3" * 40_000)
    delete_state(store, SCOPE, "k", b"big")
    if (dynamodb := as_dynamodb(store)) is not None:
        assert sorted(raw_partition(dynamodb, object_pk("k"))) == ["LOCK"]
    assert store.load_state(SCOPE, "k") == {}


def test_state_changes_fenced_by_the_key_need_its_holder(store: Store) -> None:
    assert store.take_key(SCOPE, "k", "inv_a") == {}

    with pytest.raises(StoreConflict):
        store.apply_state(SCOPE, "k", {b"a": b"1"}, holder="inv_b")
    store.apply_state(SCOPE, "k", {b"a": b"2"}, holder="inv_a")
    assert store.release_key(SCOPE, "k", "inv_a") is False
    with pytest.raises(StoreConflict):
        store.apply_state(SCOPE, "k", {b"a": b"3"}, holder="inv_a")

    assert store.load_state(SCOPE, "k") == {b"a": b"2"}


def _item_sizes(store: Store, key: str) -> dict[str, int]:
    """`{sort key: bytes of its attributes (estimate)}` of the partition of `key` on DynamoDB; {} elsewhere."""
    dynamodb = as_dynamodb(store)
    if dynamodb is None:
        return {}
    return {sk: len(repr(item)) for sk, item in raw_partition(dynamodb, object_pk(key)).items()}


def test_state_above_400_kb_is_kept_whole_in_one_commit_and_read_back_whole(store: Store) -> None:
    many = {f"v{i}".encode(): bytes([i % 256]) * 1024 for i in range(390)}  # 390 KB in 390 entries
    wide = {f"w{i}".encode(): b"w" * 30_000 for i in range(15)}  # 450 KB in 30 KB entries
    large = {b"large": b"L" * 100_000}  # stored apart wherever it is
    assert store.take_key(SCOPE, "k", "inv_a") == {}

    store.apply_state(SCOPE, "k", many, holder="inv_a")
    assert store.load_state(SCOPE, "k") == many
    store.apply_state(SCOPE, "k", {**wide, **large}, holder="inv_a")
    assert store.load_state(SCOPE, "k") == {**many, **wide, **large}
    changed = {b"v0": None, b"w0": b"short", b"v1": b"x" * 40_000, b"large": None}
    store.apply_state(SCOPE, "k", changed, holder="inv_a")
    expected = {**many, **wide, b"w0": b"short", b"v1": b"x" * 40_000}
    del expected[b"v0"]
    assert store.load_state(SCOPE, "k") == expected
    assert store.release_key(SCOPE, "k", "inv_a") is False
    assert store.take_key(SCOPE, "k", "inv_b") == expected  # the state comes with the key, whole
    assert all(size < 400 * 1024 for size in _item_sizes(store, "k").values())

    store.apply_state(SCOPE, "k", {b"after": b"1"}, clear=True, holder="inv_b")
    assert store.load_state(SCOPE, "k") == {b"after": b"1"}
    if (dynamodb := as_dynamodb(store)) is not None:  # no page, no value stored apart is left behind
        assert sorted(raw_partition(dynamodb, object_pk("k"))) == ["LOCK"]
    assert store.key_status(SCOPE, "k") == ("inv_b", None)
    before = store.request_count  # small again: back on the key item, one write per commit
    store.apply_state(SCOPE, "k", {b"again": b"2"}, holder="inv_b")
    assert store.request_count == before + 1
    assert store.load_state(SCOPE, "k") == {b"after": b"1", b"again": b"2"}


def test_a_large_state_applied_twice_converges_and_leaves_nothing_behind(store: Store) -> None:
    first = {f"v{i}".encode(): b"a" * 2_000 for i in range(300)}
    store.apply_state(SCOPE, "k", first)
    items = sorted(_item_sizes(store, "k"))
    store.apply_state(SCOPE, "k", first)  # an effect re-applied after a crash

    assert store.load_state(SCOPE, "k") == first
    assert sorted(_item_sizes(store, "k")) == items
    second = {f"v{i}".encode(): b"b" * 2_000 for i in range(0, 300, 2)}
    store.apply_state(SCOPE, "k", second)
    store.apply_state(SCOPE, "k", second)
    assert store.load_state(SCOPE, "k") == {**first, **second}
    store.clear_state(SCOPE, "k")
    assert store.load_state(SCOPE, "k") == {}
    if (dynamodb := as_dynamodb(store)) is not None:
        assert sorted(raw_partition(dynamodb, object_pk("k"))) == ["LOCK"]


def test_a_large_state_write_by_a_writer_that_lost_the_key_writes_nothing(store: Store) -> None:
    assert store.take_key(SCOPE, "k", "inv_a") == {}
    kept = {f"v{i}".encode(): b"k" * 30_000 for i in range(15)}
    store.apply_state(SCOPE, "k", kept, holder="inv_a")
    items = sorted(_item_sizes(store, "k"))

    with pytest.raises(StoreConflict):
        store.apply_state(SCOPE, "k", {b"x": b"y" * 30_000, b"big": b"B" * 50_000}, holder="inv_b")

    assert store.load_state(SCOPE, "k") == kept
    assert sorted(_item_sizes(store, "k")) == items  # what it stored on the way is deleted again


def test_a_value_above_an_item_is_kept_and_one_above_32_mib_refused_loudly(store: Store) -> None:
    put_state(store, SCOPE, "k", b"a", b"1")
    with pytest.raises(ItemTooLarge):
        store.apply_state(SCOPE, "k", {b"b": b"2", b"huge": b"x" * (MAX_MESSAGE_BYTES + 1)})
    assert store.load_state(SCOPE, "k") == {b"a": b"1"}

    store.apply_state(SCOPE, "k", {b"large": b"L" * (1024 * 1024)})
    assert store.load_state(SCOPE, "k") == {b"a": b"1", b"large": b"L" * (1024 * 1024)}


KEYS = [
    "",
    "a/b",
    "a#b",
    "ключ 🔑",
    "x" * 1000,
    "x" * 999 + "y",
    "é" * 1500,  # 3000 bytes of UTF-8: above DynamoDB's 2048-byte partition key limit
]


def test_keys_of_any_utf8_and_length_keep_separate_state_and_locks(store: Store) -> None:
    for i, key in enumerate(KEYS):
        put_state(store, SCOPE, key, b"which", str(i).encode())
        assert store.take_key(SCOPE, key, f"inv_{i}") is not None
    put_state(store, "Counter/a", "b", b"which", b"scope")  # scope and key do not run into each other

    dynamodb = as_dynamodb(store)
    for i, key in enumerate(KEYS):
        assert store.load_state(SCOPE, key) == {b"which": str(i).encode()}
        assert store.lock_holder(SCOPE, key) == f"inv_{i}"
        if dynamodb is not None:
            assert raw_item(dynamodb, object_pk(key), "LOCK")["key"] == {"S": key}
    assert len({object_pk(key) for key in KEYS}) == len(KEYS)
    assert store.load_state("Counter/a", "b") == {b"which": b"scope"}
    assert store.load_state(SCOPE, "a/b") == {b"which": b"1"}


def test_take_key_first_wins_and_the_holder_may_take_it_again(store: Store) -> None:
    assert store.lock_holder(SCOPE, "k") is None
    before = store.request_count

    assert store.take_key(SCOPE, "k", "inv_a") == {}
    assert store.request_count == before + 1
    assert store.take_key(SCOPE, "k", "inv_b") is None
    assert store.take_key(SCOPE, "k", "inv_a") == {}

    assert store.lock_holder(SCOPE, "k") == "inv_a"
    if (dynamodb := as_dynamodb(store)) is not None:
        assert raw_item(dynamodb, object_pk("k"), "LOCK") == {
            "PK": {"S": object_pk("k")},
            "SK": {"S": "LOCK"},
            "scope": {"S": SCOPE},
            "key": {"S": "k"},
            "holder": {"S": "inv_a"},
        }


def test_release_key_by_a_non_holder_is_none_and_changes_nothing(store: Store) -> None:
    assert store.take_key(SCOPE, "k", "inv_a") == {}

    assert store.release_key(SCOPE, "k", "inv_b") is None
    assert store.lock_holder(SCOPE, "k") == "inv_a"

    assert store.release_key(SCOPE, "k", "inv_a") is False
    assert store.lock_holder(SCOPE, "k") is None
    assert store.release_key(SCOPE, "k", "inv_a") is None  # released already
    assert store.take_key(SCOPE, "k", "inv_b") == {}
    assert store.lock_holder(SCOPE, "k") == "inv_b"


def test_release_key_of_a_key_never_taken_is_none_and_writes_no_item(store: Store) -> None:
    assert store.release_key(SCOPE, "k", "inv_a") is None

    if (dynamodb := as_dynamodb(store)) is not None:
        assert raw_item(dynamodb, object_pk("k"), "LOCK") == {}


def test_take_key_takes_a_free_key_and_reads_its_state_in_one_write(store: Store) -> None:
    put_state(store, SCOPE, "k", b"count", b"4")
    before = store.request_count

    assert store.take_key(SCOPE, "k", "inv_a") == {b"count": b"4"}

    assert store.request_count == before + 1
    assert store.lock_holder(SCOPE, "k") == "inv_a"
    assert store.take_key(SCOPE, "k", "inv_b") is None
    assert store.take_key(SCOPE, "k", "inv_a") == {b"count": b"4"}  # its own: again


def test_take_key_never_passes_a_queued_call(store: Store) -> None:
    store.enqueue(SCOPE, "k", "0001", "inv_waiting")

    assert store.take_key(SCOPE, "k", "inv_new") is None

    assert store.key_status(SCOPE, "k") == (None, ("0001", "inv_waiting"))


def test_queue_head_is_the_lowest_seq_and_grant_takes_it_out(store: Store) -> None:
    store.enqueue(SCOPE, "k", "0000000003-00", "inv_c")
    store.enqueue(SCOPE, "k", "0000000001-00", "inv_a")
    store.enqueue(SCOPE, "k", "0000000002-00", "inv_b")
    store.enqueue(SCOPE, "k", "0000000002-00", "inv_b")  # idempotent
    store.enqueue(SCOPE, "k2", "0000000000-00", "inv_other")
    before = store.request_count

    assert store.key_status(SCOPE, "k")[1] == ("0000000001-00", "inv_a")
    assert store.request_count == before + 1
    assert store.grant_key(SCOPE, "k", "0000000002-00", "inv_b") is True  # any queued entry may be granted
    assert store.grant_key(SCOPE, "k", "0000000001-00", "inv_a") is False  # held
    assert store.key_status(SCOPE, "k") == ("inv_b", ("0000000001-00", "inv_a"))
    store.enqueue(SCOPE, "k", "0000000004-00", "inv_d")
    assert store.release_key(SCOPE, "k", "inv_b") is True  # others wait
    assert store.grant_key(SCOPE, "k", "0000000002-00", "inv_b") is False  # granted once only
    store.dequeue(SCOPE, "k", "0000000001-00", "inv_a")
    store.dequeue(SCOPE, "k", "0000000001-00", "inv_a")  # idempotent
    assert store.key_status(SCOPE, "k")[1] == ("0000000003-00", "inv_c")
    store.dequeue(SCOPE, "k", "0000000003-00", "inv_c")
    store.dequeue(SCOPE, "k", "0000000004-00", "inv_d")
    assert store.key_status(SCOPE, "k")[1] is None
    assert store.key_status(SCOPE, "k2")[1] == ("0000000000-00", "inv_other")
    if (dynamodb := as_dynamodb(store)) is not None:
        assert "queued" not in raw_item(dynamodb, object_pk("k"), "LOCK")  # an empty set is no attribute: free again
    assert store.take_key(SCOPE, "k", "inv_e") == {}


def test_release_key_tells_whether_anyone_waits(store: Store) -> None:
    assert store.take_key(SCOPE, "k", "inv_a") == {}
    assert store.release_key(SCOPE, "k", "inv_b") is None  # not the holder: nothing changed
    assert store.release_key(SCOPE, "k", "inv_a") is False
    assert store.release_key(SCOPE, "k", "inv_a") is None

    assert store.take_key(SCOPE, "k", "inv_b") == {}
    store.enqueue(SCOPE, "k", "0001", "inv_c")
    assert store.release_key(SCOPE, "k", "inv_b") is True


def test_queue_entries_do_not_count_as_state_or_lock(store: Store) -> None:
    store.enqueue(SCOPE, "k", "0001", "inv_a")

    assert store.load_state(SCOPE, "k") == {}
    assert store.lock_holder(SCOPE, "k") is None
    if (dynamodb := as_dynamodb(store)) is not None:
        assert raw_item(dynamodb, object_pk("k"), "LOCK") == {
            "PK": {"S": object_pk("k")},
            "SK": {"S": "LOCK"},
            "scope": {"S": SCOPE},
            "key": {"S": "k"},
            "queued": {"SS": ["0001#inv_a"]},
        }


def test_promise_first_completion_wins_and_get_returns_it(store: Store) -> None:
    first = PromiseRecord(value=b"", failure=None, completed_by="inv_a:3")  # an empty value is not "no value"
    second = PromiseRecord(value=None, failure={"code": 500, "message": "late"}, completed_by="inv_b:1")
    assert store.get_promise("Signup", "wf-1", "approved") is None

    assert store.complete_promise("Signup", "wf-1", "approved", first) == first
    assert store.complete_promise("Signup", "wf-1", "approved", second) == first

    assert store.get_promise("Signup", "wf-1", "approved") == first
    assert store.get_promise("Signup", "wf-2", "approved") is None
    if (dynamodb := as_dynamodb(store)) is not None:
        item = raw_item(dynamodb, object_pk("wf-1", "Signup"), f"P#{h('approved')}")
        assert item["name"] == {"S": "approved"}
        assert item["completed_by"] == {"S": "inv_a:3"}


def test_promise_failure_round_trips_and_names_are_separate(store: Store) -> None:
    failed = PromiseRecord(value=None, failure={"code": 409, "message": "nein ü"}, completed_by="inv_a:1")
    valued = PromiseRecord(value=b"\x00yes\xff", failure=None, completed_by="inv_a:2")
    long_name = "p/" + "n" * 2000

    assert store.complete_promise("Signup", "wf", "ünïcode", failed) == failed
    assert store.complete_promise("Signup", "wf", long_name, valued) == valued

    assert store.get_promise("Signup", "wf", "ünïcode") == failed
    assert store.get_promise("Signup", "wf", long_name) == valued
    assert store.get_promise("Signup", "wf", "p/") is None


def test_promise_waiters_are_listed_per_name_once_each(store: Store) -> None:
    store.add_promise_waiter("Signup", "wf", "approved", "inv_c")
    store.add_promise_waiter("Signup", "wf", "approved", "inv_a")
    store.add_promise_waiter("Signup", "wf", "approved", "inv_a")  # idempotent
    store.add_promise_waiter("Signup", "wf", "approved2", "inv_b")
    store.add_promise_waiter("Signup", "wf-other", "approved", "inv_d")

    assert store.promise_waiters("Signup", "wf", "approved") == ["inv_a", "inv_c"]
    assert store.promise_waiters("Signup", "wf", "approved2") == ["inv_b"]
    assert store.promise_waiters("Signup", "wf", "never") == []


def test_expire_keyed_sets_the_ttl_of_every_item_of_the_key_only(store: Store) -> None:
    put_state(store, "Signup", "wf", b"a", b"1")
    put_state(store, "Signup", "wf", b"b", b"2", expires_at_s=5)
    assert store.take_key("Signup", "wf", "inv_run") is not None
    store.enqueue("Signup", "wf", "0001", "inv_q")
    store.complete_promise("Signup", "wf", "p", PromiseRecord(b"v", None, "inv_run:2"))
    store.add_promise_waiter("Signup", "wf", "p", "inv_w")
    put_state(store, "Signup", "wf-other", b"a", b"1")
    before = store.request_count

    store.expire_keyed("Signup", "wf", 1_900_000_000)

    if (dynamodb := as_dynamodb(store)) is not None:
        assert store.request_count == before + 1 + 3  # one query, one UpdateItem per item
        items = raw_partition(dynamodb, object_pk("wf", "Signup"))
        assert sorted(items) == sorted(["LOCK", f"P#{h('p')}", f"W#{h('p')}#inv_w"])  # state and queue: on LOCK
        assert [item.get("expires_at") for item in items.values()] == [{"N": "1900000000"}] * 3
    if (dynamodb := as_dynamodb(store)) is not None:
        assert "expires_at" not in raw_item(dynamodb, object_pk("wf-other", "Signup"), "LOCK")
    assert store.load_state("Signup", "wf") == {b"a": b"1", b"b": b"2"}  # only the TTL changed
    assert store.get_promise("Signup", "wf", "p") == PromiseRecord(b"v", None, "inv_run:2")

    store.expire_keyed("Signup", "wf", 0)

    if (dynamodb := as_dynamodb(store)) is not None:
        assert all("expires_at" not in item for item in raw_partition(dynamodb, object_pk("wf", "Signup")).values())


def test_expire_keyed_of_an_empty_key_writes_nothing(store: Store) -> None:
    before = store.request_count

    store.expire_keyed("Signup", "nothing", 1_900_000_000)

    assert store.request_count == before + 1
    if (dynamodb := as_dynamodb(store)) is not None:
        assert raw_partition(dynamodb, object_pk("nothing", "Signup")) == {}


def test_invocation_service_type_handler_type_and_inbox_seq_round_trip(store: Store) -> None:
    store.create_invocation(KEYED_INVOCATION)

    assert store.get_invocation("inv_keyed") == KEYED_INVOCATION
    assert store.load_invocation("inv_keyed") == LoadedInvocation(KEYED_INVOCATION, [], [])
    if (dynamodb := as_dynamodb(store)) is not None:
        item = raw_item(dynamodb, "INV#inv_keyed", "META")
        assert (item["service_type"], item["handler_type"], item["inbox_seq"]) == (
            {"S": "VIRTUAL_OBJECT"},
            {"S": "EXCLUSIVE"},
            {"S": "0000001000-00"},
        )

    granted = store._update_unless_completed("inv_keyed", status="ready", inbox_seq="", modified_at_ms=2_000)

    expected = dataclasses.replace(KEYED_INVOCATION, status="ready", inbox_seq="", modified_at_ms=2_000, epoch=1)
    assert granted == expected
    assert store.get_invocation("inv_keyed") == expected
    store._update_invocation("inv_keyed", 1, handler_type="SHARED")
    assert store.get_invocation("inv_keyed") == dataclasses.replace(expected, handler_type="SHARED")


# --- the listing of a service's keys that have state (`state_keys`) --------------------------------


def test_state_keys_lists_every_key_with_state_sorted_and_bounded(store: Store) -> None:
    for i, key in enumerate(KEYS):
        put_state(store, SCOPE, key, b"which", str(i).encode())
    put_state(store, "Counter/a", "b", b"which", b"scope")  # another service's key is not listed
    assert store.take_key(SCOPE, "lock-only", "inv_1") == {}  # a key without state is not listed
    store.enqueue(SCOPE, "queue-only", "0001", "inv_2")
    store.apply_state(SCOPE, "removal-only", {b"never-set": None})

    assert store.state_keys(SCOPE, 1000) == sorted(KEYS)
    assert store.state_keys("Counter/a", 1000) == ["b"]
    assert store.state_keys("Nobody", 1000) == []
    some = store.state_keys(SCOPE, 2)
    assert len(some) == 2
    assert some == sorted(some)
    assert set(some) <= set(KEYS)


def test_a_keys_first_state_write_lists_it_and_later_writes_cost_what_they_did(store: Store) -> None:
    before = store.request_count
    put_state(store, SCOPE, "new", b"a", b"1")
    first = store.request_count - before
    before = store.request_count
    put_state(store, SCOPE, "new", b"b", b"2")
    store.apply_state(SCOPE, "new", {b"a": None, b"c": b"3"}, clear=True)

    assert store.request_count - before == (1 + 2 if as_dynamodb(store) else 2)  # clear reads first
    assert first == (3 if as_dynamodb(store) else 1)  # UpdateItem, PutItem of the listing, UpdateItem `listed`
    assert store.state_keys(SCOPE, 10) == ["new"]
    if (dynamodb := as_dynamodb(store)) is not None:
        assert raw_item(dynamodb, object_pk("new"), "LOCK")["listed"] == {"BOOL": True}


def test_a_key_whose_state_is_cleared_reads_empty_wherever_it_is_listed(store: Store) -> None:
    put_state(store, SCOPE, "gone", b"a", b"1")
    put_state(store, SCOPE, "kept", b"a", b"1")

    store.clear_state(SCOPE, "gone")

    listed = store.state_keys(SCOPE, 10)
    assert listed == (["gone", "kept"] if as_dynamodb(store) else ["kept"])  # DynamoDB keeps the listing
    assert {key: store.load_state(SCOPE, key) for key in listed} | {"gone": {}} == {"gone": {}, "kept": {b"a": b"1"}}


def test_a_first_state_too_large_for_the_key_item_is_listed_too(store: Store) -> None:
    values = {f"v{i:03d}".encode(): bytes([i % 256]) * 1_000 for i in range(450)}  # 450 KB: straight to pages

    store.apply_state(SCOPE, "paged", values)

    assert store.state_keys(SCOPE, 10) == ["paged"]
    assert store.load_state(SCOPE, "paged") == values
    if (dynamodb := as_dynamodb(store)) is not None:
        assert raw_item(dynamodb, object_pk("paged"), "LOCK")["listed"] == {"BOOL": True}


def test_a_crash_before_the_key_is_listed_lists_it_when_the_write_is_applied_again(
    store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    if (dynamodb := as_dynamodb(store)) is None:
        pytest.skip("SQLite lists keys from its state rows, in the write's own transaction")

    def crash(scope: str, key: str) -> None:
        raise RuntimeError("the process died here")

    # GIVEN a first state write whose process dies after writing the state, before listing the key
    with monkeypatch.context() as patched:
        patched.setattr(dynamodb, "_list_key", crash)
        with pytest.raises(RuntimeError):
            put_state(store, SCOPE, "crashed", b"a", b"1")
    assert store.load_state(SCOPE, "crashed") == {b"a": b"1"}
    # WHEN the commit's effects are applied again (as after any crash)
    put_state(store, SCOPE, "crashed", b"a", b"1")
    # THEN the key is listed
    assert store.state_keys(SCOPE, 10) == ["crashed"]


def test_delete_keyed_removes_the_listing_with_the_workflows_items(store: Store) -> None:
    store.apply_state("Signup", "w1", {b"k": b"v"})
    store.apply_state("Signup", "w2", {b"k": b"kept"})

    store.delete_keyed("Signup", "w1")

    assert store.state_keys("Signup", 10) == ["w2"]
    store.apply_state("Signup", "w1", {b"k": b"again"})  # a new run with the same id: listed again
    assert store.state_keys("Signup", 10) == ["w1", "w2"]


def test_delete_keyed_removes_every_item_of_one_key_only(store: Store) -> None:
    store.apply_state("Signup", "w1", {b"k": b"v"})
    assert store.take_key("Signup", "w1", "inv_x") == {b"k": b"v"}
    store.apply_state("Signup", "w2", {b"k": b"kept"})
    store.delete_keyed("Signup", "w1")
    assert store.load_state("Signup", "w1") == {}
    assert store.lock_holder("Signup", "w1") is None
    assert store.load_state("Signup", "w2") == {b"k": b"kept"}
    store.delete_keyed("Signup", "w1")
