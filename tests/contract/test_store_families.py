"""The `Store` port is cut by family (`control_plane.ports`), and each store adapter implements
each family: here its methods' names and parameters, in the family's contract file its behaviour
(`CONTRACTS`, run on DynamoDB and SQLite alike). Facts about a deployment are not on the port:
each store gives them beside itself, as `facts` (`StoreFacts`).
"""

from __future__ import annotations

import inspect
from pathlib import Path

import pytest

from adapters.aws.dynamodb_store import DynamoDBStore
from adapters.local.sqlite_store import SQLiteStore
from control_plane.ports import (
    MAX_MESSAGE_BYTES,
    InvocationStore,
    KeyStore,
    RegistryStore,
    ScheduleStore,
    Store,
    SubscriptionStore,
    StoreFacts,
    TimerStore,
)
from tests.helpers.dynamodb_items import as_dynamodb

FAMILIES = (InvocationStore, KeyStore, TimerStore, RegistryStore, ScheduleStore, SubscriptionStore)
ADAPTERS = (DynamoDBStore, SQLiteStore)
CONTRACTS = {
    InvocationStore: "test_invocation_store_contract.py",
    KeyStore: "test_key_store_contract.py",
    TimerStore: "test_timer_store_contract.py",
    RegistryStore: "test_registry_store_contract.py",
    ScheduleStore: "test_schedule_store_contract.py",
    SubscriptionStore: "test_subscription_store_contract.py",
}
"""Where each family's behaviour is proved, for every adapter."""


Parameters = list[tuple[str, inspect._ParameterKind]]


def _parameters(member: object) -> Parameters:
    """The parameters (name, kind) of a method or property as its class declares it (with `self`)."""
    function = member.fget if isinstance(member, property) else member
    assert callable(function)
    return [(p.name, p.kind) for p in inspect.signature(function).parameters.values()]


def _members(protocol: type) -> dict[str, Parameters]:
    """The public members `protocol` declares itself: name -> its parameters."""
    return {name: _parameters(value) for name, value in vars(protocol).items() if not name.startswith("_")}


def test_the_families_cut_the_port_without_overlap_and_store_is_their_union() -> None:
    owner: dict[str, str] = {}
    for family in FAMILIES:
        for name in _members(family):
            assert name not in owner, f"{name} is in {owner.get(name)} and {family.__name__}"
            owner[name] = family.__name__
    assert set(_members(Store)) == {"ensure_schema"}  # beside the families, only the schema
    assert all(family in Store.__mro__ for family in FAMILIES)
    assert len(owner) > 40  # the families hold the port's methods


def test_facts_about_a_deployment_are_not_storage() -> None:
    facts = set(_members(StoreFacts))
    assert facts == {"may_delete", "holds_short_ids", "value_limit_bytes", "creation_requests"}
    for protocol in (*FAMILIES, Store):
        assert facts.isdisjoint(_members(protocol)), protocol.__name__
    for adapter in ADAPTERS:
        assert not any(hasattr(adapter, name) for name in facts), adapter.__name__


@pytest.mark.parametrize("family", FAMILIES, ids=lambda f: f.__name__)
@pytest.mark.parametrize("adapter", ADAPTERS, ids=lambda a: a.__name__)
def test_each_adapter_implements_each_family(adapter: type, family: type) -> None:
    for name, parameters in _members(family).items():
        implementation = inspect.getattr_static(adapter, name, None)
        assert implementation is not None, f"{adapter.__name__} has no {family.__name__}.{name}"
        assert _parameters(implementation) == parameters, f"{adapter.__name__}.{name}"
    assert (Path(__file__).parent / CONTRACTS[family]).is_file()  # its behaviour, on every adapter


def test_a_fresh_store_gives_its_facts_beside_it(store: DynamoDBStore | SQLiteStore) -> None:
    facts: StoreFacts = store.facts
    assert facts.may_delete is True
    assert facts.holds_short_ids is False  # first used with 24-byte ids
    assert facts.value_limit_bytes == MAX_MESSAGE_BYTES  # SQLite, and DynamoDB with its blob store
    expected = {"dynamodb PutItem META": 1, "dynamodb PutItem": 1, "dynamodb UpdateItem": 1}
    requests = facts.creation_requests(delayed=True, on_key=True)
    assert dict(requests) == (expected if as_dynamodb(store) is not None else {})
