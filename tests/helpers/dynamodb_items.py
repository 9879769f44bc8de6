"""Reading a `DynamoDBStore`'s items with a plain boto3 client (an independent witness of the layout),
for the store tests that check how items are laid out as well as what the port answers."""

from __future__ import annotations

import hashlib
from typing import Any

import boto3

from adapters.aws.dynamodb_store import DynamoDBStore
from control_plane.ports import Store


def as_dynamodb(store: Store) -> DynamoDBStore | None:
    """The store if it is a `DynamoDBStore` (to check its item layout too), else None."""
    return store if isinstance(store, DynamoDBStore) else None


def h(data: str | bytes) -> str:
    """sha256 hex of `data` (UTF-8 for a string), as item keys hold it."""
    return hashlib.sha256(data.encode() if isinstance(data, str) else data).hexdigest()


def object_pk(key: str, scope: str = "Counter") -> str:
    """The partition of the object or workflow `scope/key`."""
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


def partitions(store: DynamoDBStore, prefix: str) -> set[str]:
    """The partition keys of the table starting with `prefix` (a plain scan)."""
    found: set[str] = set()
    for page in client(store).get_paginator("scan").paginate(TableName=store.table_name, ProjectionExpression="PK"):
        found |= {item["PK"]["S"] for item in page["Items"] if item["PK"]["S"].startswith(prefix)}
    return found
