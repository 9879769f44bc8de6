"""The `SubscriptionStore` contract: event subscriptions, on DynamoDB (moto) and SQLite."""

from __future__ import annotations

import pytest

from control_plane.ports import StoreConflict, SubscriptionRecord
from tests.helpers.stores import Store


def subscription(subscription_id: str, **changes: object) -> SubscriptionRecord:
    values: dict[str, object] = {
        "subscription_id": subscription_id,
        "source": "sqs://orders.fifo",
        "sink": "service://Counter/add",
        "options": {"key": "k1"},
        "created_at_ms": 1_700_000_000_000,
    }
    return SubscriptionRecord(**{**values, **changes})  # type: ignore[arg-type]


def test_subscriptions_create_get_list_delete(store: Store) -> None:
    assert store.list_subscriptions() == []
    store.create_subscription(subscription("sub_1b"))
    store.create_subscription(subscription("sub_1a", options={}, source="kinesis://clicks"))

    assert store.get_subscription("sub_1b") == subscription("sub_1b")
    assert store.get_subscription("sub_1z") is None
    assert store.list_subscriptions() == [
        subscription("sub_1a", options={}, source="kinesis://clicks"),
        subscription("sub_1b"),
    ]

    assert store.delete_subscription("sub_1b") is True
    assert store.delete_subscription("sub_1b") is False  # a second removal finds nothing
    assert store.get_subscription("sub_1b") is None
    assert [s.subscription_id for s in store.list_subscriptions()] == ["sub_1a"]


def test_creating_a_taken_id_conflicts_and_writes_nothing(store: Store) -> None:
    store.create_subscription(subscription("sub_1c"))
    with pytest.raises(StoreConflict):
        store.create_subscription(subscription("sub_1c", sink="service://Greeter/greet"))
    assert store.get_subscription("sub_1c") == subscription("sub_1c")
