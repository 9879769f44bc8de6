"""What is SQLite's own in `SQLiteStore` (the `Store` contract itself is `tests/contract/`): one file
in WAL mode that outlives the store object, and conditional transitions serialised also between two
connections on that file (two `torpor dev` processes on one data directory)."""

from __future__ import annotations

import sqlite3
from pathlib import Path

from adapters.local.sqlite_store import SQLiteStore
from control_plane.ports import InvocationRecord, JournalBatch, StoreConflict
from tests.helpers.race import race
from tests.helpers.records import RUNNABLE, invocation

THREADS = 8


def test_the_file_is_in_wal_mode_and_outlives_the_store(tmp_path: Path) -> None:
    path = tmp_path / "nested" / "torpor.sqlite3"
    first = SQLiteStore(path, shards=16)  # the setting is accepted and ignored
    first.ensure_schema()
    first.create_invocation(invocation("inv_1"))
    first.put_timer(5_000, "inv_1")
    first.apply_state("Counter", "k", {b"count": b"3"})
    first.close()

    with sqlite3.connect(path) as raw:
        assert raw.execute("PRAGMA journal_mode").fetchone() == ("wal",)
    second = SQLiteStore(path)
    assert second.get_invocation("inv_1") == invocation("inv_1")
    assert second.due_timers(10_000) == [(5_000, "inv_1")]
    assert second.load_state("Counter", "k") == {b"count": b"3"}
    second.close()


def test_two_stores_on_one_file_take_a_lease_and_commit_an_index_once(tmp_path: Path) -> None:
    path = tmp_path / "torpor.sqlite3"
    stores = [SQLiteStore(path) for _ in range(THREADS)]  # one connection each, as separate processes have
    stores[0].ensure_schema()
    for round_ in range(5):
        invocation_id = f"inv_{round_}"
        stores[0].create_invocation(invocation(invocation_id))

        leases = race(THREADS, lambda i, n=invocation_id: stores[i].acquire_lease(n, 2_000, 32_000, RUNNABLE))
        commits = race(
            THREADS, lambda i, n=invocation_id: stores[i].append_batch(n, JournalBatch(1, bytes([i]), 1, 2_000))
        )

        assert [type(r) for r in leases].count(InvocationRecord) == 1, leases
        assert all(isinstance(r, InvocationRecord | StoreConflict) for r in leases), leases
        assert commits.count(None) == 1, commits
        assert all(r is None or isinstance(r, StoreConflict) for r in commits), commits
        loaded = stores[0].load_invocation(invocation_id)
        assert loaded is not None
        assert (loaded.record.epoch, [b.entries for b in loaded.batches]) == (1, [bytes([commits.index(None)])])
    for store in stores:
        store.close()
