"""Concurrent writers on one invocation's notifications and doorbell, on dynalite over HTTP and on SQLite.

dynalite serialises conditional writes as DynamoDB does; moto may let two conditional writers both
win, so these races are not run there.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from control_plane.ports import InvocationRecord, JournalBatch, StoredNotification
from tests.helpers.race import race
from tests.helpers.stores import STORE_KINDS, Store, store_of_param

THREADS = 8


@pytest.fixture(params=STORE_KINDS)
def store(request: pytest.FixtureRequest, tmp_path: Path) -> Store:
    """A fresh store of each kind (its own dynalite table, or SQLite file) holding one ready invocation, `inv_race`."""
    store = store_of_param(request, tmp_path, "dynalite_endpoint")
    store.create_invocation(
        InvocationRecord(
            invocation_id="inv_race", service="S", handler="h", key="", deployment_id="dp_x",
            protocol_version=7, status="ready", input_entry=b"", created_at_ms=1, modified_at_ms=1,
        )
    )  # fmt: skip
    return store


def test_exactly_one_notification_per_key_is_stored(store: Store) -> None:
    for round_ in range(5):
        key = f"c{round_}"
        results = race(
            THREADS,
            lambda i, key=key, at=100 * round_: store.put_notification(
                "inv_race", StoredNotification(key, bytes([i]), at + i)
            ),
        )
        assert sorted(results, key=repr) == [False] * (THREADS - 1) + [True], results
        winner = results.index(True)
        loaded = store.load_invocation("inv_race")
        assert loaded is not None
        stored = {n.key: n for n in loaded.notifications}
        assert stored[key] == StoredNotification(key, bytes([winner]), 100 * round_ + winner)
    assert [n.key for n in loaded.notifications] == ["c0", "c1", "c2", "c3", "c4"]


def test_concurrent_rings_each_count(store: Store) -> None:
    results = race(THREADS, lambda _: store.ring("inv_race"))

    assert results == [None] * THREADS
    record = store.get_invocation("inv_race")
    assert record is not None
    assert record.doorbell == THREADS


def test_concurrent_sweeps_remove_a_journal_once(store: Store) -> None:
    leased = store.acquire_lease("inv_race", now_ms=2, lease_until_ms=10, runnable=("ready",))
    store.append_batch("inv_race", JournalBatch(1, b"entries", epoch=leased.epoch, committed_at_ms=3))
    store._update_invocation(
        "inv_race", leased.epoch, status="completed", lease_until_ms=0, journal_expires_at_ms=1_000, expires_at_s=5
    )
    (due,) = store.due_retention(1_000)

    results = race(THREADS, lambda _: store.remove_journal(due))

    assert sorted(results, key=repr) == [False] * (THREADS - 1) + [True], results
    loaded = store.load_invocation("inv_race")
    assert loaded is not None
    assert (loaded.batches, loaded.record.journal_expires_at_ms) == ([], 0)
    assert [(d.invocation_id, d.due_ms) for d in store.due_retention(10_000)] == [("inv_race", 5_000)]
