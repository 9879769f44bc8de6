"""The key item's conditional transitions under concurrency, on dynalite and SQLite: taking a free
key when an invocation is created, granting the queue's head, releasing while others enqueue, state writes fenced
by the key.

dynalite serialises conditional writes as DynamoDB does. Each test repeats its race a few times on
fresh keys. The pump and release run through `Keys` (control_plane/keyed.py) over the real store.
"""

from __future__ import annotations

import contextlib
import threading
import time
from pathlib import Path

import pytest

from control_plane.keyed import Keys
from control_plane.ports import InvocationRecord, StoreConflict, SystemClock
from tests.helpers.race import race
from tests.helpers.stores import STORE_KINDS, Store, store_of_param

THREADS = 8
ROUNDS = 4


class Wakes:
    """A scheduler that records which invocations were woken."""

    def __init__(self) -> None:
        self.now: list[str] = []

    def wake_now(self, invocation_id: str) -> None:
        self.now.append(invocation_id)

    def wake_at(self, invocation_id: str, due_ms: int) -> None:
        pass


@pytest.fixture(params=STORE_KINDS)
def store(request: pytest.FixtureRequest, tmp_path: Path) -> Store:
    """A fresh store of each kind: DynamoDB on its own dynalite table, SQLite in its own file."""
    return store_of_param(request, tmp_path, "dynalite_endpoint")


def invocation(store: Store, key: str, invocation_id: str, status: str, seq: str = "") -> InvocationRecord:
    """Store an exclusive `Counter/add` invocation on `key` with `status`."""
    record = InvocationRecord(
        invocation_id=invocation_id,
        service="Counter",
        handler="add",
        key=key,
        deployment_id="dp_1",
        protocol_version=5,
        status=status,
        input_entry=b"",
        created_at_ms=1,
        modified_at_ms=1,
        service_type="VIRTUAL_OBJECT",
        handler_type="EXCLUSIVE",
        inbox_seq=seq,
    )
    store.create_invocation(record)
    return record


def test_of_concurrent_new_invocations_on_a_free_key_exactly_one_takes_it(store: Store) -> None:
    for round_ in range(ROUNDS):
        key = f"free-{round_}"

        results = race(THREADS, lambda i, key=key: store.take_key("Counter", key, f"inv_{i}"))

        winners = [i for i, taken in enumerate(results) if taken is not None]
        assert len(winners) == 1, results
        assert all(r is None for i, r in enumerate(results) if i not in winners), results
        assert store.lock_holder("Counter", key) == f"inv_{winners[0]}"


def test_a_new_invocation_never_takes_the_key_while_calls_wait(store: Store) -> None:
    for round_ in range(ROUNDS):
        _newcomers_meet_a_queue(store, f"queued-{round_}")


def _newcomers_meet_a_queue(store: Store, key: str) -> None:
    waiting = [f"inv_w{i}" for i in range(5)]
    assert store.take_key("Counter", key, "inv_holder") == {}
    for i, invocation_id in enumerate(waiting):
        store.enqueue("Counter", key, f"{i:04d}", invocation_id)
    stop = threading.Event()
    stolen: list[str] = []

    def newcomer(i: int) -> None:
        while not stop.is_set():
            if store.take_key("Counter", key, f"inv_new{i}") is not None:
                stolen.append(f"inv_new{i}")
                return

    newcomers = [threading.Thread(target=newcomer, args=(i,)) for i in range(4)]
    for t in newcomers:
        t.start()
    granted: list[str] = []
    holder = "inv_holder"
    try:
        while True:  # each holder releases, and the queue's head is granted, in arrival order
            store.release_key("Counter", key, holder)
            time.sleep(0.01)  # a window in which nobody holds the key while calls wait
            _, head = store.key_status("Counter", key)
            if head is None or not store.grant_key("Counter", key, *head):
                break
            holder = head[1]
            granted.append(holder)
            if len(granted) == len(waiting):
                break
    finally:
        stop.set()
        for t in newcomers:
            t.join(30)

    assert stolen == []
    assert granted == waiting


def test_of_concurrent_grants_of_different_queued_calls_exactly_one_wins(store: Store) -> None:
    for round_ in range(ROUNDS):
        key = f"grant-{round_}"
        for i in range(THREADS):
            store.enqueue("Counter", key, f"{i:04d}", f"inv_{i}")

        results = race(THREADS, lambda i, key=key: store.grant_key("Counter", key, f"{i:04d}", f"inv_{i}"))

        assert results.count(True) == 1, results
        winner = results.index(True)
        holder, _ = store.key_status("Counter", key)
        assert holder == f"inv_{winner}"
        assert store.release_key("Counter", key, f"inv_{winner}") is True  # the others still wait
        assert store.grant_key("Counter", key, f"{winner:04d}", f"inv_{winner}") is False  # granted once only


def test_concurrent_pumps_grant_the_free_key_once_to_the_head(store: Store) -> None:
    for round_ in range(ROUNDS):
        key = f"pump-{round_}"
        for i in range(3):
            invocation(store, key, f"inv_{round_}_{i}", "pending", f"{i:04d}")
            store.enqueue("Counter", key, f"{i:04d}", f"inv_{round_}_{i}")
        wakes = Wakes()
        keys = Keys(store, wakes, SystemClock())

        race(THREADS, lambda _i, key=key, keys=keys: keys.pump("Counter", key))

        assert set(wakes.now) == {f"inv_{round_}_0"}  # (woken twice is harmless: the lease picks one worker)
        assert store.key_status("Counter", key) == (f"inv_{round_}_0", ("0001", f"inv_{round_}_1"))
        assert store.get_invocation(f"inv_{round_}_0").status == "ready"  # type: ignore[union-attr]
        assert store.get_invocation(f"inv_{round_}_1").status == "pending"  # type: ignore[union-attr]


def test_a_release_while_calls_enqueue_strands_nobody(store: Store) -> None:
    for round_ in range(ROUNDS):
        _release_meets_enqueues(store, round_)


def _release_meets_enqueues(store: Store, round_: int) -> None:
    key = f"release-{round_}"
    # odd rounds: a live holder, so only its release hands the key on; even rounds: a holder that
    # completed, which every enqueuer's pump may release, so the pumps race each other to grant
    holder = invocation(store, key, f"inv_{round_}_holder", "running" if round_ % 2 else "completed")
    assert store.take_key("Counter", key, holder.invocation_id) == {}
    waiting = [invocation(store, key, f"inv_{round_}_{i}", "pending", f"{i:04d}") for i in range(THREADS - 1)]
    wakes = Wakes()
    keys = Keys(store, wakes, SystemClock())

    def act(i: int) -> None:
        if i == 0:
            time.sleep(0.1 * round_)  # later rounds release after the enqueuers' pumps found it held
            keys.release(holder)
        else:
            keys.enqueue(waiting[i - 1])

    race(THREADS, act)

    new_holder, _ = store.key_status("Counter", key)
    assert set(wakes.now) == {new_holder}, (wakes.now, new_holder)  # exactly one granted and woken
    queued = []
    while (head := store.key_status("Counter", key)[1]) is not None:
        queued.append(head[1])
        store.dequeue("Counter", key, *head)
    assert sorted([new_holder, *queued]) == sorted(w.invocation_id for w in waiting)


def test_state_writes_of_an_invocation_that_lost_its_key_never_land(store: Store) -> None:
    for round_ in range(ROUNDS):
        _late_writer_meets_the_next_holder(store, f"fence-{round_}")


def _late_writer_meets_the_next_holder(store: Store, key: str) -> None:
    assert store.take_key("Counter", key, "inv_old") == {}
    store.enqueue("Counter", key, "0001", "inv_next")
    stop = threading.Event()

    def late_writer() -> None:  # e.g. a worker of a killed invocation, still applying its effects
        n = 0
        while not stop.is_set():
            n += 1
            with contextlib.suppress(StoreConflict):
                store.apply_state("Counter", key, {b"who": f"old-{n}".encode()}, holder="inv_old")

    writer = threading.Thread(target=late_writer)
    writer.start()
    try:
        time.sleep(0.05)
        assert store.release_key("Counter", key, "inv_old") is True
        assert store.grant_key("Counter", key, "0001", "inv_next")
        store.apply_state("Counter", key, {b"who": b"next"}, holder="inv_next")
        time.sleep(0.1)  # the late writer goes on meanwhile
    finally:
        stop.set()
        writer.join(30)

    assert store.load_state("Counter", key) == {b"who": b"next"}
