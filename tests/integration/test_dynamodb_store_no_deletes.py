"""A `DynamoDBStore` that may not delete items (`may_delete=False`), on a moto server: the AWS ingress
function's, whose role has no `dynamodb:DeleteItem` or `BatchWriteItem`.

What it would delete it expires (its TTL attribute set to now, DynamoDB removes it later); what it
cannot do that way (removing an invocation or a workflow's items) it refuses before any request.
"""

from __future__ import annotations

import time

import pytest

from adapters.aws.dynamodb_store import DynamoDBStore
from adapters.aws.store_items import TTL_ATTRIBUTE, shard_of, timer_sk, timers_pk
from control_plane.ports import JournalBatch, RetentionDue
from tests.helpers.dynamodb_items import h, object_pk, raw_item, raw_partition
from tests.helpers.moto import DUMMY_AWS_ENV
from tests.helpers.records import invocation

SCOPE = "Counter"


@pytest.fixture
def ingress_store(store: DynamoDBStore) -> DynamoDBStore:
    """A second store on `store`'s table that may not delete items, as the ingress function builds it."""
    return DynamoDBStore(
        store.table_name,
        region=store.region,
        endpoint_url=store.endpoint_url,
        aws_access_key_id=DUMMY_AWS_ENV["AWS_ACCESS_KEY_ID"],
        aws_secret_access_key=DUMMY_AWS_ENV["AWS_SECRET_ACCESS_KEY"],
        may_delete=False,
    )


def _deletes(store: DynamoDBStore) -> dict[str, int]:
    return {kind: n for kind, n in store.request_counts.items() if "Delete" in kind or "BatchWrite" in kind}


def test_a_dropped_timer_expires_instead_of_being_deleted(store: DynamoDBStore, ingress_store: DynamoDBStore) -> None:
    assert (store.facts.may_delete, ingress_store.facts.may_delete) == (True, False)
    due = int(time.time() * 1000) + 3_600_000
    ingress_store.put_timer(due, "inv_sleeper")
    key = (timers_pk(shard_of("inv_sleeper", ingress_store.shards)), timer_sk(due, "inv_sleeper"))

    before = int(time.time())
    ingress_store.delete_timer(due, "inv_sleeper")
    ingress_store.delete_timer(due + 1, "inv_sleeper")  # one that is not there: nothing is created

    item = raw_item(ingress_store, *key)
    assert before <= int(item[TTL_ATTRIBUTE]["N"]) <= int(time.time())  # DynamoDB's TTL removes it
    assert raw_item(ingress_store, key[0], timer_sk(due + 1, "inv_sleeper")) == {}
    assert _deletes(ingress_store) == {}
    ingress_store.put_timer(due, "inv_sleeper")  # armed again: a whole new item, without the TTL
    assert TTL_ATTRIBUTE not in raw_item(ingress_store, *key)


def test_a_replaced_large_value_expires_and_a_value_stored_again_is_kept(ingress_store: DynamoDBStore) -> None:
    first, second = b"1" * 40_000, b"2" * 40_000
    assert ingress_store.take_key(SCOPE, "k", "inv_holder") == {}
    ingress_store.apply_state(SCOPE, "k", {b"big": first}, holder="inv_holder")
    ingress_store.apply_state(SCOPE, "k", {b"big": second}, holder="inv_holder")

    old_sk = f"S#{h(b'big')}#{h(first)[:32]}"
    items = raw_partition(ingress_store, object_pk("k"))
    assert sorted(items) == sorted(["LOCK", old_sk, f"S#{h(b'big')}#{h(second)[:32]}"])
    assert int(items[old_sk][TTL_ATTRIBUTE]["N"]) <= int(time.time())  # dropped: expires
    assert ingress_store.load_state(SCOPE, "k") == {b"big": second}
    assert _deletes(ingress_store) == {}

    ingress_store.apply_state(SCOPE, "k", {b"big": first}, holder="inv_holder")  # the first value again
    assert TTL_ATTRIBUTE not in raw_item(ingress_store, object_pk("k"), old_sk)  # stored whole again: kept
    assert ingress_store.load_state(SCOPE, "k") == {b"big": first}


def test_removing_an_invocation_its_journal_or_a_workflows_items_is_refused_before_any_request(
    store: DynamoDBStore, ingress_store: DynamoDBStore
) -> None:
    store.create_invocation(invocation("inv_done", status="completed"))
    store.append_batch("inv_done", JournalBatch(1, b"entries", 1, 0))
    store.apply_state("Signup", "wf-1", {b"email": b"a@example.com"})
    before = raw_partition(store, "INV#inv_done")
    requests = ingress_store.request_count

    with pytest.raises(PermissionError, match="may not delete"):
        ingress_store.delete_invocation("inv_done")
    with pytest.raises(PermissionError, match="may not delete"):
        ingress_store.remove_journal(RetentionDue("inv_done", due_ms=1, journal_expires_at_ms=1, expires_at_s=0))
    with pytest.raises(PermissionError, match="may not delete"):
        ingress_store.delete_keyed("Signup", "wf-1")

    assert ingress_store.request_count == requests
    assert raw_partition(store, "INV#inv_done") == before
    assert store.load_state("Signup", "wf-1") == {b"email": b"a@example.com"}
