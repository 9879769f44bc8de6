"""Concurrent takers, granters and reservers of one concurrency limit's pool and one rate limit's start
schedule, on dynalite over HTTP (which serialises conditional writes as DynamoDB does) and on SQLite:
never more holders than the limit, a queued entry granted once, every reserved start distinct."""

from __future__ import annotations

from pathlib import Path

import pytest

from control_plane.limits import pool_scope
from tests.helpers.race import race
from tests.helpers.stores import STORE_KINDS, Store, store_of_param

THREADS = 8
ROUNDS = 3


@pytest.fixture(params=STORE_KINDS)
def store(request: pytest.FixtureRequest, tmp_path: Path) -> Store:
    """A fresh store of each kind (its own dynalite table, or SQLite file)."""
    return store_of_param(request, tmp_path, "dynalite_endpoint")


def test_concurrent_takers_of_a_pool_never_pass_its_limit(store: Store) -> None:
    for round_ in range(ROUNDS):
        pool = pool_scope(f"Svc{round_}")
        took = race(THREADS, lambda i, pool=pool: store.take_slot(pool, "", f"inv_{i}", 3))
        assert sum(took) == 3, took
        holders, _ = store.slot_status(pool, "")
        assert holders == {f"inv_{i}" for i, t in enumerate(took) if t}


def test_concurrent_grants_of_free_slots_give_each_entry_once_and_never_pass_the_limit(store: Store) -> None:
    pool = pool_scope("Granted")
    assert store.take_slot(pool, "", "inv_holder", 3)
    for i in range(THREADS):
        store.enqueue(pool, "", f"{i:04d}", f"inv_q{i}")
    granted = race(THREADS, lambda i: store.grant_slot(pool, "", f"{i % 4:04d}", f"inv_q{i % 4}", 3))
    holders, head = store.slot_status(pool, "")
    # two grants won, each a different entry (an entry granted twice would leave one holder for two wins)
    assert len(holders) == 3 and sum(granted) == 2, (holders, granted)
    assert head is not None  # the other queued entries stay queued


def test_concurrent_reservations_of_a_rate_limit_are_all_distinct_and_paced(store: Store) -> None:
    starts = race(THREADS, lambda i: store.reserve_start("~rate/Svc", "", 10_000, 100, 1))
    assert sorted(starts) == [10_000 + 100 * n for n in range(THREADS)]
