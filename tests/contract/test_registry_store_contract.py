"""The `RegistryStore` contract: deployments and services, on DynamoDB (moto) and SQLite."""

from __future__ import annotations

import dataclasses

from control_plane.ports import ServiceRecord
from tests.helpers.records import deployment
from tests.helpers.stores import Store


def test_deployments_put_get_list_replace_delete(store: Store) -> None:
    assert store.list_deployments() == []
    store.put_deployment(deployment("dp_b"))
    store.put_deployment(deployment("dp_a", services=(), metadata={}, additional_headers={}))

    assert store.get_deployment("dp_b") == deployment("dp_b")
    assert store.list_deployments() == [
        deployment("dp_a", services=(), metadata={}, additional_headers={}),
        deployment("dp_b"),
    ]

    store.put_deployment(deployment("dp_b", endpoint="arn:aws:lambda:us-east-1:123456789012:function:f:3"))
    assert store.get_deployment("dp_b") == deployment(
        "dp_b", endpoint="arn:aws:lambda:us-east-1:123456789012:function:f:3"
    )

    store.delete_deployment("dp_b")
    store.delete_deployment("dp_unknown")
    assert store.get_deployment("dp_b") is None
    assert [d.deployment_id for d in store.list_deployments()] == ["dp_a"]


def test_services_put_get_list_replace_delete(store: Store) -> None:
    greeter = ServiceRecord("Greeter", "dp_1", "SERVICE", {"name": "Greeter", "handlers": [{"name": "greet"}]})
    counter = ServiceRecord("Counter", "dp_1", "VIRTUAL_OBJECT", {"name": "Counter", "handlers": []}, revision=3)
    store.put_service(greeter)
    store.put_service(counter)

    assert store.get_service("Greeter") == greeter
    assert store.list_services() == [counter, greeter]

    moved = dataclasses.replace(greeter, deployment_id="dp_2", revision=2)
    store.put_service(moved)
    assert store.get_service("Greeter") == moved

    store.delete_service("Counter")
    assert store.get_service("Counter") is None
    assert store.list_services() == [moved]


def test_registry_items_do_not_show_up_as_invocations(store: Store) -> None:
    store.put_deployment(deployment("dp_1"))
    store.put_service(ServiceRecord("Greeter", "dp_1", "SERVICE", {}))

    assert store.list_invocations() == []
