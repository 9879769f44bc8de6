"""Concurrent claimants of one object lock, workflow run and durable promise, on dynalite over HTTP and
on SQLite.

dynalite serialises conditional writes as DynamoDB does; moto may let two conditional writers both
win, so these races are not run there. Each test repeats its race on fresh keys a few times.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from control_plane.ports import PromiseRecord
from tests.helpers.race import race
from tests.helpers.stores import STORE_KINDS, Store, store_of_param

THREADS = 8
ROUNDS = 5


@pytest.fixture(params=STORE_KINDS)
def store(request: pytest.FixtureRequest, tmp_path: Path) -> Store:
    """A fresh store of each kind (its own dynalite table, or SQLite file)."""
    return store_of_param(request, tmp_path, "dynalite_endpoint")


def test_concurrent_promise_completions_all_return_the_stored_first(store: Store) -> None:
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


def test_readers_of_a_large_state_never_see_part_of_a_commit(store: Store) -> None:
    """One holder rewrites 300 entries of 2 KB (600 KB: paged on DynamoDB) with one value per commit
    while readers load the state: every read is one commit's state, whole (all 300 entries alike)."""
    names = [f"e{i}".encode() for i in range(300)]
    assert store.take_key("Counter", "torn", "inv_writer") == {}
    store.apply_state("Counter", "torn", dict.fromkeys(names, b"0" * 2_000), holder="inv_writer")
    commits = 6

    def act(i: int) -> set[bytes] | None:
        if i == 0:
            for n in range(1, commits):
                store.apply_state("Counter", "torn", dict.fromkeys(names, str(n).encode() * 2_000), holder="inv_writer")
            return None
        seen: set[bytes] = set()
        for _ in range(4):
            state = store.load_state("Counter", "torn")
            assert sorted(state) == sorted(names)
            assert len(set(state.values())) == 1, "a read saw parts of two commits"
            seen |= set(state.values())
        return seen

    results = race(4, act)
    assert not [r for r in results if isinstance(r, BaseException)], results
    assert set(store.load_state("Counter", "torn").values()) == {str(commits - 1).encode() * 2_000}
