"""The `TimerStore` contract: timers, one per (due time, invocation), on DynamoDB (moto) and SQLite.

The same assertions for every store; DynamoDB's timer items (`TIMER#{shard}`) are also read back with
a plain boto3 client (`as_dynamodb`).
"""

from __future__ import annotations

import pytest

from adapters.aws.store_items import shard_of
from tests.helpers.dynamodb_items import as_dynamodb, partitions, raw_item
from tests.helpers.stores import Store, ids_in_distinct_shards, queries_per_scan


def test_due_timers_returns_only_due_ones_in_order_and_respects_limit(store: Store) -> None:
    for due_ms, invocation_id in [(5_000, "inv_b"), (1_000, "inv_a"), (5_001, "inv_c"), (5_000, "inv_a")]:
        store.put_timer(due_ms, invocation_id)
    store.put_timer(1_000, "inv_a")  # again: still one timer
    store.put_timer(900_000, "inv_d")  # "900000" sorts before "5000" unless the key is zero-padded
    before = store.request_count

    assert store.due_timers(5_000) == [(1_000, "inv_a"), (5_000, "inv_a"), (5_000, "inv_b")]
    assert store.request_count - before == queries_per_scan(store)  # DynamoDB: one query per shard
    assert store.due_timers(5_000, limit=2) == [(1_000, "inv_a"), (5_000, "inv_a")]
    assert store.due_timers(999) == []
    assert store.due_timers(5_001) == [(1_000, "inv_a"), (5_000, "inv_a"), (5_000, "inv_b"), (5_001, "inv_c")]
    assert store.due_timers(10**15) == [
        (1_000, "inv_a"),
        (5_000, "inv_a"),
        (5_000, "inv_b"),
        (5_001, "inv_c"),
        (900_000, "inv_d"),
    ]
    before = store.request_count
    assert store.due_timers(5_000, limit=0) == []
    assert store.due_timers(5_000, limit=-1) == []  # DynamoDB would refuse Limit=-1
    assert store.request_count == before
    if (dynamodb := as_dynamodb(store)) is not None:
        timers = f"TIMER#{shard_of('inv_b', dynamodb.shards)}"
        assert raw_item(dynamodb, timers, "0000000005000#inv_b") == {
            "PK": {"S": timers},
            "SK": {"S": "0000000005000#inv_b"},
            "due_ms": {"N": "5000"},
            "invocation_id": {"S": "inv_b"},
        }
    assert store.list_invocations() == []  # timers are not invocations


def test_delete_timer_is_idempotent_and_removes_only_that_timer(store: Store) -> None:
    store.put_timer(1_000, "inv_a")
    store.put_timer(1_000, "inv_b")

    store.delete_timer(1_000, "inv_a")
    store.delete_timer(1_000, "inv_a")
    store.delete_timer(7_000, "inv_never")

    assert store.due_timers(10_000) == [(1_000, "inv_b")]


def test_timer_due_times_must_fit_the_key(store: Store) -> None:
    with pytest.raises(ValueError, match=r"within 0\.\.9999999999999, got -1"):
        store.put_timer(-1, "inv_a")
    with pytest.raises(ValueError, match="got 10000000000000"):
        store.delete_timer(10**13, "inv_a")


def test_timers_spread_over_shards_and_due_timers_merges_them_earliest_first(store: Store) -> None:
    a, b, c, d = ids_in_distinct_shards(store, 4)
    # interleaved due times, so that no shard's answer alone is in order with the others
    timers = [(4_000, a), (1_000, b), (3_000, c), (2_000, d), (1_000, d), (5_000, b), (2_000, a)]
    for due_ms, invocation_id in timers:
        store.put_timer(due_ms, invocation_id)

    if (dynamodb := as_dynamodb(store)) is not None:
        assert partitions(dynamodb, "TIMER") == {f"TIMER#{shard_of(i, dynamodb.shards)}" for i in (a, b, c, d)}
    assert store.due_timers(10_000) == sorted(timers)
    assert store.due_timers(2_000) == sorted(t for t in timers if t[0] <= 2_000)
    # the limit applies to the merged answer: the earliest, whichever shard they are in
    assert store.due_timers(10_000, limit=3) == sorted(timers)[:3]
    store.delete_timer(1_000, d)
    assert store.due_timers(1_000) == [(1_000, b)]
