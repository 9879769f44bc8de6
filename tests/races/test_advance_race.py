"""Concurrent workers on one invocation: one lease holder at a time, no entry appended twice.

On dynalite, over HTTP, with the real restate-sdk example services.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from adapters.local.dev import DevServer
from control_plane.invocation import RUNNABLE, Outcome
from control_plane.ports import InvocationRecord, JournalBatch, StoreConflict
from control_plane.protocol import MessageType, decode_frames
from control_plane.settings import Settings
from examples.side_effects import read_side_effects
from tests.helpers.race import race
from tests.helpers.services import serve_examples
from tests.helpers.stores import STORE_KINDS, Store, dev_store_options, store_of_param

THREADS = 8


@pytest.fixture(params=STORE_KINDS)
def store(request: pytest.FixtureRequest, tmp_path: Path) -> Store:
    """A fresh store of each kind: DynamoDB on its own dynalite table, SQLite in its own file."""
    return store_of_param(request, tmp_path, "dynalite_endpoint")


def new_invocation(store: Store, invocation_id: str) -> None:
    store.create_invocation(
        InvocationRecord(
            invocation_id=invocation_id, service="S", handler="h", key="", deployment_id="dp_x",
            protocol_version=7, status="ready", input_entry=b"", created_at_ms=1, modified_at_ms=1,
        )
    )  # fmt: skip


def test_exactly_one_worker_takes_a_free_lease(store: Store) -> None:
    for round_ in range(10):
        invocation_id = f"inv_race_{round_}"
        new_invocation(store, invocation_id)
        now = int(time.time() * 1000)
        results = race(THREADS, lambda _, i=invocation_id, t=now: store.acquire_lease(i, t, t + 60_000, RUNNABLE))
        winners = [r for r in results if isinstance(r, InvocationRecord)]
        assert len(winners) == 1, results
        assert winners[0].epoch == 1
        assert all(isinstance(r, StoreConflict) for r in results if r is not winners[0])


def test_exactly_one_commit_lands_at_a_journal_index(store: Store) -> None:
    new_invocation(store, "inv_commit")
    for index in range(1, 11):
        results = race(
            THREADS,
            lambda i, index=index: store.append_batch("inv_commit", JournalBatch(index, bytes([i]) * 8, 1, 1)),
        )
        assert sum(1 for r in results if r is None) == 1, results
        assert sum(1 for r in results if isinstance(r, StoreConflict)) == THREADS - 1
    loaded = store.load_invocation("inv_commit")
    assert loaded is not None
    assert [b.start_index for b in loaded.batches] == list(range(1, 11))


@pytest.fixture(scope="module")
def effects_file(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("effects") / "side_effects.jsonl"


@pytest.fixture(scope="module", params=STORE_KINDS)
def dev(request: pytest.FixtureRequest, effects_file: Path) -> Iterator[DevServer]:
    """A dev server on each store (dynalite, SQLite in a file) with the examples registered."""
    with serve_examples(side_effects_file=effects_file) as (url, _process):
        server = DevServer(
            ingress_port=0, admin_port=0, **dev_store_options(request, effects_file.parent),
            settings=Settings(inactivity_timeout_ms=10_000, lease_margin_ms=2_000),
        )  # fmt: skip
        server.start()
        try:
            server.control_plane.registry.register(url)
            yield server
        finally:
            server.stop()


def test_duplicate_advance_from_several_threads_never_double_appends(dev: DevServer, effects_file: Path) -> None:
    cp = dev.control_plane
    for _ in range(5):
        # GIVEN an enqueued invocation (the local work queue races too)
        record = cp.engine.create("Steps", "n_steps", b"4", {}, leased=False)
        # WHEN several workers advance it at the same instant
        outcomes = race(3, lambda _, i=record.invocation_id: cp.advance(i))
        assert all(isinstance(o, Outcome) for o in outcomes), outcomes
        deadline = time.monotonic() + 30
        loaded = cp.store.load_invocation(record.invocation_id)
        while loaded is not None and loaded.record.status != "completed" and time.monotonic() < deadline:
            time.sleep(0.02)
            loaded = cp.store.load_invocation(record.invocation_id)
        # THEN the journal holds each step once, and each closure ran once
        assert loaded is not None
        meta, batches = loaded.record, loaded.batches
        assert meta.status == "completed"
        assert meta.output == b"4"
        entries = [f.type for b in batches for f in decode_frames(b.entries)]
        assert entries == [MessageType.Run, MessageType.RunCompletion] * 4 + [MessageType.Output]
        steps = [e["step"] for e in read_side_effects(effects_file) if e["invocation_id"] == record.invocation_id]
        assert steps == ["step-1", "step-2", "step-3", "step-4"]
