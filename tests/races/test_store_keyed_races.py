"""Concurrent claimants of one object lock, workflow run and durable promise, on dynalite over HTTP.

dynalite serialises conditional writes as DynamoDB does; moto may let two conditional writers both
win, so these races are not run there. Each test repeats its race on fresh keys a few times.
"""

from __future__ import annotations

import pytest

from adapters.aws.dynamodb_store import DynamoDBStore
from control_plane.ports import PromiseRecord
from tests.helpers.moto import DUMMY_AWS_ENV, unique_table_name
from tests.helpers.race import race

THREADS = 8
ROUNDS = 5


@pytest.fixture
def store(dynalite_endpoint: str) -> DynamoDBStore:
    """A store on a fresh dynalite table."""
    store = DynamoDBStore(
        unique_table_name(),
        endpoint_url=dynalite_endpoint,
        aws_access_key_id=DUMMY_AWS_ENV["AWS_ACCESS_KEY_ID"],
        aws_secret_access_key=DUMMY_AWS_ENV["AWS_SECRET_ACCESS_KEY"],
    )
    store.ensure_schema()
    return store


def test_exactly_one_try_lock_on_a_free_key_wins(store: DynamoDBStore) -> None:
    for round_ in range(ROUNDS):
        key = f"user-{round_}"

        results = race(THREADS, lambda i, key=key: store.try_lock("Counter", key, f"inv_{i}"))

        assert sorted(results, key=repr) == [False] * (THREADS - 1) + [True], results
        assert store.lock_holder("Counter", key) == f"inv_{results.index(True)}"


def test_concurrent_promise_completions_all_return_the_stored_first(store: DynamoDBStore) -> None:
    for round_ in range(ROUNDS):
        key = f"wf-{round_}"
        offered = [
            PromiseRecord(value=bytes([i]) * (i + 1), failure=None, completed_by=f"inv_{i}:1") for i in range(THREADS)
        ]

        results = race(
            THREADS, lambda i, key=key, offered=offered: store.complete_promise("Signup", key, "approved", offered[i])
        )

        winner = results[0]
        assert results == [winner] * THREADS, results
        assert winner in offered
        assert store.get_promise("Signup", key, "approved") == winner
