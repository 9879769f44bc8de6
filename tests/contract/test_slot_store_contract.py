"""The concurrency limits' part of the `KeyStore` contract (`take_slot`, `grant_slot`,
`release_slot`, `slot_status`), run on DynamoDB (moto) and SQLite: at most `limit` holders, a queue
in arrival order that newcomers never pass, one write per transition, and a slot's record field
round-trips."""

from __future__ import annotations

import dataclasses

import pytest

from adapters.aws.dynamodb_store import DynamoDBStore
from adapters.local.sqlite_store import SQLiteStore
from control_plane.limits import pool_scope
from control_plane.ports import StoreConflict
from tests.helpers.dynamodb_items import as_dynamodb, object_pk, raw_item
from tests.helpers.records import KEYED_INVOCATION

Store = DynamoDBStore | SQLiteStore
POOL = pool_scope("Greeter")


def test_take_slot_admits_up_to_the_limit_in_one_write_each(store: Store) -> None:
    before = store.request_count
    assert store.take_slot(POOL, "", "inv_a", 2)
    assert store.take_slot(POOL, "", "inv_b", 2)
    assert store.request_count == before + 2

    assert not store.take_slot(POOL, "", "inv_c", 2)  # full: must queue
    assert store.take_slot(POOL, "", "inv_a", 2)  # a holder taking again keeps its slot
    assert store.slot_status(POOL, "") == (frozenset({"inv_a", "inv_b"}), None)


def test_take_slot_never_passes_a_queued_call(store: Store) -> None:
    assert store.take_slot(POOL, "", "inv_a", 2)
    store.enqueue(POOL, "", "0002", "inv_waiting")

    assert not store.take_slot(POOL, "", "inv_newcomer", 2)  # one slot free, but someone waits
    assert store.slot_status(POOL, "") == (frozenset({"inv_a"}), ("0002", "inv_waiting"))


def test_grant_slot_takes_the_entry_out_only_while_a_slot_is_free(store: Store) -> None:
    assert store.take_slot(POOL, "", "inv_a", 1)
    store.enqueue(POOL, "", "0002", "inv_b")
    store.enqueue(POOL, "", "0001", "inv_c")

    assert not store.grant_slot(POOL, "", "0001", "inv_c", 1)  # full
    assert store.release_slot(POOL, "", "inv_a") is True  # calls wait
    assert store.slot_status(POOL, "") == (frozenset(), ("0001", "inv_c"))  # the earliest first
    assert store.grant_slot(POOL, "", "0001", "inv_c", 1)
    assert not store.grant_slot(POOL, "", "0001", "inv_c", 1)  # no longer queued
    assert not store.grant_slot(POOL, "", "0002", "inv_b", 1)  # full again
    assert store.slot_status(POOL, "") == (frozenset({"inv_c"}), ("0002", "inv_b"))


def test_release_slot_by_a_non_holder_is_none_and_the_last_release_says_nobody_waits(store: Store) -> None:
    assert store.release_slot(POOL, "", "inv_never") is None
    assert store.take_slot(POOL, "", "inv_a", 3)
    assert store.release_slot(POOL, "", "inv_b") is None
    assert store.release_slot(POOL, "", "inv_a") is False
    assert store.release_slot(POOL, "", "inv_a") is None  # released twice: the second changes nothing
    assert store.slot_status(POOL, "") == (frozenset(), None)


def test_pools_are_apart_from_object_keys_and_from_each_other(store: Store) -> None:
    assert store.take_slot(pool_scope("Greeter"), "", "inv_a", 1)
    assert store.take_slot(pool_scope("Greeter", "greet"), "", "inv_b", 1)
    assert store.take_key("Greeter", "", "inv_c") is not None
    assert store.slot_status(pool_scope("Greeter"), "")[0] == {"inv_a"}
    assert store.lock_holder(pool_scope("Greeter"), "") is None
    if (dynamodb := as_dynamodb(store)) is not None:
        item = raw_item(dynamodb, object_pk("", POOL), "LOCK")
        assert item["slots"] == {"SS": ["inv_a"]}


def test_a_records_slot_and_limit_round_trip(store: Store) -> None:
    record = dataclasses.replace(
        KEYED_INVOCATION, service_type="SERVICE", handler_type="", key="", slot=POOL, slot_limit=3
    )
    store.create_invocation(record)
    assert store.get_invocation(record.invocation_id) == record


def test_the_rule_book_is_replaced_whole_conditionally_on_its_version(store: Store) -> None:
    assert store.get_rule_book() == ({}, 0)
    store.put_rule_book({"s/*": {"pattern": "s/*", "limits": {"concurrency": 2}}}, 0)
    assert store.get_rule_book() == ({"s/*": {"pattern": "s/*", "limits": {"concurrency": 2}}}, 1)
    with pytest.raises(StoreConflict):
        store.put_rule_book({}, 0)  # read before the first write: lost
    store.put_rule_book({}, 1)
    assert store.get_rule_book() == ({}, 2)


def test_reserve_start_hands_out_starts_in_order_one_write_each(store: Store) -> None:
    starts = [store.reserve_start("~rate/Greeter", "", 10_000, 500, 2) for _ in range(4)]
    assert starts == [10_000, 10_000, 10_500, 11_000]
    assert store.reserve_start("~rate/Other", "", 10_000, 500, 1) == 10_000  # its own schedule
    assert store.reserve_start("~rate/Greeter", "", 60_000, 500, 2) == 60_000
