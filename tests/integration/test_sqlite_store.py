"""What is SQLite's own in `SQLiteStore` (the `Store` contract itself is `tests/contract/`): one file
in WAL mode that outlives the store object, and conditional transitions serialised also between two
connections on that file (two `torpor dev` processes on one data directory)."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest

from adapters.local.sqlite_store import APPLICATION_ID, SCHEMA_VERSION, SQLiteStore
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


def test_another_programs_sqlite_file_or_a_newer_torpors_is_refused_at_start(tmp_path: Path) -> None:
    other = tmp_path / "other.sqlite3"
    with sqlite3.connect(other) as raw:
        raw.execute("CREATE TABLE invoices (id INTEGER PRIMARY KEY)")
    with pytest.raises(sqlite3.DatabaseError, match="is not a Torpor store"):
        SQLiteStore(other).ensure_schema()

    newer = tmp_path / "newer.sqlite3"
    SQLiteStore(newer).ensure_schema()
    with sqlite3.connect(newer) as raw:
        raw.execute(f"PRAGMA user_version = {SCHEMA_VERSION + 1}")
    with pytest.raises(sqlite3.DatabaseError, match="written by a newer Torpor"):
        SQLiteStore(newer).ensure_schema()

    with sqlite3.connect(newer) as raw:  # marked as Torpor's: its own file opens again
        raw.execute(f"PRAGMA user_version = {SCHEMA_VERSION}")
        assert raw.execute("PRAGMA application_id").fetchone() == (APPLICATION_ID,)
    SQLiteStore(newer).ensure_schema()


def test_the_sqlite_store_costs_no_aws_requests() -> None:
    assert SQLiteStore().facts.creation_requests(delayed=True, on_key=True) == {}  # describe shows no AWS cost
