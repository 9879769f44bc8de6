"""The write units `bench.partitions`' metering proxy counts, on a moto server over the wire.

A boto3 client talks to moto through the proxy, as `torpor dev` does in the bench; the proxy's
record of each write is checked against DynamoDB's rules (1 unit per started KB of the larger
image, index writes when an item enters, leaves or changes in an index, transactions twice).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import boto3
import pytest

from bench.partitions import MeterProxy, Reading, item_size
from tests.helpers.moto import REGION, moto_server, unique_table_name


@pytest.fixture
def metered() -> Iterator[tuple[Any, MeterProxy, str]]:
    """(client through the proxy, proxy, table) with a KEYS_ONLY index `by_g` on (g_pk, g_sk) and an
    index `by_h` on h_pk that projects `stage`."""
    with moto_server() as endpoint, MeterProxy(endpoint) as proxy:
        client = boto3.client("dynamodb", region_name=REGION, endpoint_url=proxy.url)
        table = unique_table_name()
        client.create_table(
            TableName=table,
            BillingMode="PAY_PER_REQUEST",
            KeySchema=[{"AttributeName": "PK", "KeyType": "HASH"}, {"AttributeName": "SK", "KeyType": "RANGE"}],
            AttributeDefinitions=[
                {"AttributeName": n, "AttributeType": "S"} for n in ("PK", "SK", "g_pk", "g_sk", "h_pk")
            ],
            GlobalSecondaryIndexes=[
                {
                    "IndexName": "by_g",
                    "KeySchema": [
                        {"AttributeName": "g_pk", "KeyType": "HASH"},
                        {"AttributeName": "g_sk", "KeyType": "RANGE"},
                    ],
                    "Projection": {"ProjectionType": "KEYS_ONLY"},
                },
                {
                    "IndexName": "by_h",
                    "KeySchema": [{"AttributeName": "h_pk", "KeyType": "HASH"}],
                    "Projection": {"ProjectionType": "INCLUDE", "NonKeyAttributes": ["stage"]},
                },
            ],
        )
        proxy.meter.take()
        yield client, proxy, table


def writes(reading: Reading) -> list[tuple[str, str, str, float]]:
    return [(w.operation, w.where, w.partition, w.units) for w in reading.writes]


def test_a_put_of_a_one_and_a_half_kb_item_costs_two_write_units(metered: tuple[Any, MeterProxy, str]) -> None:
    client, proxy, table = metered
    item = {"PK": {"S": "INV#1"}, "SK": {"S": "META"}, "data": {"S": "x" * 1520}}
    assert 1500 <= item_size(item) <= 1600
    client.put_item(TableName=table, Item=item)
    reading = proxy.meter.take()
    assert writes(reading) == [("PutItem", "table", "INV#1", 2)]
    assert reading.requests == {"PutItem": 1}

    client.update_item(
        TableName=table,
        Key={"PK": {"S": "INV#1"}, "SK": {"S": "META"}},
        UpdateExpression="REMOVE #d",
        ExpressionAttributeNames={"#d": "data"},
    )  # the larger image (before) still counts
    assert writes(proxy.meter.take()) == [("UpdateItem", "table", "INV#1", 2)]


def test_an_update_that_moves_an_index_key_is_a_delete_and_a_put_in_the_index(
    metered: tuple[Any, MeterProxy, str],
) -> None:
    client, proxy, table = metered
    key = {"PK": {"S": "INV#2"}, "SK": {"S": "META"}}
    client.put_item(TableName=table, Item={**key, "g_pk": {"S": "STATUS#ready"}, "g_sk": {"S": "1"}})
    assert writes(proxy.meter.take()) == [
        ("PutItem", "table", "INV#2", 1),
        ("PutItem", "by_g", "STATUS#ready", 1),
    ]

    client.update_item(
        TableName=table,
        Key=key,
        UpdateExpression="SET g_pk = :s, lease = :l",
        ExpressionAttributeValues={":s": {"S": "STATUS#running"}, ":l": {"N": "5"}},
    )
    assert writes(proxy.meter.take()) == [
        ("UpdateItem", "table", "INV#2", 1),
        ("UpdateItem", "by_g", "STATUS#ready", 1),  # leaves the old index partition
        ("UpdateItem", "by_g", "STATUS#running", 1),  # enters the new one
    ]

    client.update_item(
        TableName=table,
        Key=key,
        UpdateExpression="SET lease = :l",
        ExpressionAttributeValues={":l": {"N": "6"}},
    )  # an attribute the KEYS_ONLY index does not project: the index is not written
    assert writes(proxy.meter.take()) == [("UpdateItem", "table", "INV#2", 1)]

    client.delete_item(TableName=table, Key=key)
    assert writes(proxy.meter.take()) == [
        ("DeleteItem", "table", "INV#2", 1),
        ("DeleteItem", "by_g", "STATUS#running", 1),
    ]


def test_an_index_entry_is_rewritten_in_place_only_when_a_projected_attribute_changes(
    metered: tuple[Any, MeterProxy, str],
) -> None:
    client, proxy, table = metered
    key = {"PK": {"S": "INV#4"}, "SK": {"S": "META"}}
    client.put_item(TableName=table, Item={**key, "h_pk": {"S": "H#1"}, "stage": {"S": "a"}})
    assert writes(proxy.meter.take()) == [("PutItem", "table", "INV#4", 1), ("PutItem", "by_h", "H#1", 1)]

    def update(name: str, value: str) -> list[tuple[str, str, str, float]]:
        client.update_item(
            TableName=table,
            Key=key,
            UpdateExpression="SET #n = :v",
            ExpressionAttributeNames={"#n": name},
            ExpressionAttributeValues={":v": {"S": value}},
        )
        return writes(proxy.meter.take())

    assert update("stage", "b") == [("UpdateItem", "table", "INV#4", 1), ("UpdateItem", "by_h", "H#1", 1)]
    assert update("other", "x") == [("UpdateItem", "table", "INV#4", 1)]  # not projected in by_h


def test_a_transaction_counts_its_table_writes_twice(metered: tuple[Any, MeterProxy, str]) -> None:
    client, proxy, table = metered
    client.transact_write_items(
        TransactItems=[
            {"Put": {"TableName": table, "Item": {"PK": {"S": "INV#3"}, "SK": {"S": "J#1"}}}},
            {
                "Put": {
                    "TableName": table,
                    "Item": {"PK": {"S": "TIMER"}, "SK": {"S": "9#3"}, "g_pk": {"S": "T"}, "g_sk": {"S": "9"}},
                }
            },
        ]
    )
    assert writes(proxy.meter.take()) == [
        ("TransactWriteItems", "table", "INV#3", 2),
        ("TransactWriteItems", "table", "TIMER", 2),
        ("TransactWriteItems", "by_g", "T", 1),  # index upkeep is not part of the transaction
    ]


def test_a_write_whose_condition_fails_costs_the_stored_item(metered: tuple[Any, MeterProxy, str]) -> None:
    client, proxy, table = metered
    item = {"PK": {"S": "OBJ#k"}, "SK": {"S": "LOCK"}, "data": {"S": "y" * 2100}}
    client.put_item(TableName=table, Item=item)
    proxy.meter.take()
    with pytest.raises(client.exceptions.ConditionalCheckFailedException):
        client.put_item(TableName=table, Item=item, ConditionExpression="attribute_not_exists(PK)")
    assert writes(proxy.meter.take()) == [("PutItem (condition failed)", "table", "OBJ#k", 3)]
