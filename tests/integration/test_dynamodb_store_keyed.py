"""`DynamoDBStore`'s keyed half against a moto server: what is DynamoDB's own, the key item's layout.

Item keys are checked against sha256 digests computed here, and items are read back with a plain
boto3 client as an independent witness. What every store does with keyed state, locks, queues and
promises is the contract suite, `tests/contract/test_store_keyed_contract.py` (DynamoDB and SQLite);
concurrent writers are tested in `tests/races/`.
"""

from __future__ import annotations

import hashlib
from typing import Any

import boto3

from adapters.aws.dynamodb_store import DynamoDBStore
from control_plane.ports import InvocationRecord

SCOPE = "Counter"
KEYED_INVOCATION = InvocationRecord(
    invocation_id="inv_keyed",
    service="Counter",
    handler="add",
    key="user-7",
    deployment_id="dp_1",
    protocol_version=5,
    status="pending",
    input_entry=b"\x00",
    created_at_ms=1_000,
    modified_at_ms=1_000,
    service_type="VIRTUAL_OBJECT",
    handler_type="EXCLUSIVE",
    inbox_seq="0000001000-00",
)


def h(data: str | bytes) -> str:
    """sha256 hex of `data` (UTF-8 for a string), as item keys hold it."""
    return hashlib.sha256(data.encode() if isinstance(data, str) else data).hexdigest()


def pk(key: str, scope: str = SCOPE) -> str:
    """The partition of `scope/key`."""
    return f"OBJ#{scope}#{h(key)}"


def client(store: DynamoDBStore) -> Any:
    """A plain boto3 client on the store's endpoint."""
    return boto3.client("dynamodb", region_name=store.region, endpoint_url=store.endpoint_url)


def raw_item(store: DynamoDBStore, partition: str, sk: str) -> dict[str, Any]:
    """The item as DynamoDB holds it ({} if absent)."""
    item: dict[str, Any] = (
        client(store)
        .get_item(TableName=store.table_name, Key={"PK": {"S": partition}, "SK": {"S": sk}}, ConsistentRead=True)
        .get("Item", {})
    )
    return item


def raw_partition(store: DynamoDBStore, partition: str) -> dict[str, dict[str, Any]]:
    """Every item of a partition, by sort key."""
    pages = (
        client(store)
        .get_paginator("query")
        .paginate(
            TableName=store.table_name,
            KeyConditionExpression="PK = :pk",
            ExpressionAttributeValues={":pk": {"S": partition}},
            ConsistentRead=True,
        )
    )
    return {item["SK"]["S"]: item for page in pages for item in page["Items"]}


def test_small_state_lives_on_the_key_item_which_hashes_the_key_and_keeps_raw_attributes(store: DynamoDBStore) -> None:
    store.put_state(SCOPE, "user/7", b"count", b"\x00\x07", expires_at_s=1_900_000_000)

    item = raw_item(store, f"OBJ#Counter#{h('user/7')}", "LOCK")
    assert item == {
        "PK": {"S": f"OBJ#Counter#{h('user/7')}"},
        "SK": {"S": "LOCK"},
        "scope": {"S": "Counter"},
        "key": {"S": "user/7"},
        f"S#{h(b'count')}": {"M": {"k": {"B": b"count"}, "v": {"B": b"\x00\x07"}}},
        "expires_at": {"N": "1900000000"},
    }
    assert sorted(raw_partition(store, pk("user/7"))) == ["LOCK"]


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
