"""No lost wake-up, in pieces: what shows a ring after a suspension (`rung_since_suspended`), the
order of a notification's writes (ring, store, ring), and the sweeps waking what was rung.

The crash cases themselves, over a real `torpor dev` on each store, are in
tests/integration/test_lost_wake_ups.py.
"""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import pytest

from adapters.local.sqlite_store import SQLiteStore
from control_plane.effects import Effects
from control_plane.errors import NotFound
from control_plane.invocation import rung_since_suspended
from control_plane.ports import FixedFacts, StoreConflict, StoredNotification
from control_plane.runtime import ControlPlane
from tests.helpers.records import invocation


class FixedClock:
    """A clock standing at `now` ms."""

    def __init__(self, now: int) -> None:
        self.now = now

    def now_ms(self) -> int:
        return self.now


class RecordingScheduler:
    """A scheduler that only remembers what it was asked."""

    def __init__(self) -> None:
        self.now: list[str] = []
        self.at: list[tuple[str, int]] = []

    def wake_now(self, invocation_id: str) -> None:
        self.now.append(invocation_id)

    def wake_at(self, invocation_id: str, due_ms: int) -> None:
        self.at.append((invocation_id, due_ms))


class RecordingStore:
    """The store requests `Effects.notify` makes, in order; `ring` refuses for a completed or
    unknown invocation, as a store's conditional ring does."""

    def __init__(self, status: str | None = "suspended") -> None:
        self.status = status
        self.calls: list[str] = []
        self.stored: set[str] = set()

    def ring(self, invocation_id: str) -> None:
        self.calls.append("ring")
        if self.status in (None, "completed"):
            raise StoreConflict("refused")

    def put_notification(self, invocation_id: str, notification: StoredNotification) -> bool:
        self.calls.append("put_notification")
        first = notification.key not in self.stored
        self.stored.add(notification.key)
        return first

    def delete_notification(self, invocation_id: str, key: str) -> None:
        self.calls.append("delete_notification")

    def get_invocation(self, invocation_id: str) -> Any:
        self.calls.append("get_invocation")
        return None if self.status is None else invocation(invocation_id, status=self.status)


def _effects(store: RecordingStore, *, may_delete: bool = True) -> Effects:
    engine = SimpleNamespace(
        store=store,
        facts=FixedFacts(may_delete=may_delete),
        clock=FixedClock(1_000),
        scheduler=RecordingScheduler(),
        registry=None,
        keys=None,
        settings=None,
        knock=lambda invocation_id: None,
    )
    return Effects(engine)  # type: ignore[arg-type]


NOTE = StoredNotification("c1", b"entry", 0)


@pytest.mark.parametrize(
    ("status", "doorbell", "read", "rung"),
    [
        ("suspended", 0, 0, False),
        ("suspended", 3, 3, False),
        ("suspended", 4, 3, True),
        ("suspended", 2, 0, True),  # suspended by a Torpor before `doorbell_read`: woken once
        ("running", 4, 3, False),
        ("completed", 4, 3, False),
    ],
)
def test_only_a_suspended_invocation_rung_since_it_suspended_was_rung_since_suspended(
    status: str, doorbell: int, read: int, rung: bool
) -> None:
    record = invocation(status=status, doorbell=doorbell, doorbell_read=read)
    assert rung_since_suspended(record) is rung


@pytest.mark.parametrize("may_delete", [True, False])
def test_a_notification_rings_stores_and_rings_again_on_every_store(may_delete: bool) -> None:
    store = RecordingStore()
    assert _effects(store, may_delete=may_delete).notify("inv_1", NOTE) is True
    assert store.calls == ["ring", "put_notification", "ring"]


def test_a_duplicate_notification_rings_once_and_stores_nothing_new() -> None:
    store = RecordingStore()
    store.stored.add(NOTE.key)
    assert _effects(store).notify("inv_1", NOTE) is False
    assert store.calls == ["ring", "put_notification"]


def test_a_notification_for_a_completed_invocation_writes_nothing() -> None:
    store = RecordingStore("completed")
    assert _effects(store).notify("inv_1", NOTE) is False
    assert store.calls == ["ring", "get_invocation"]


def test_a_notification_for_an_unknown_invocation_writes_nothing_and_raises_not_found() -> None:
    store = RecordingStore(None)
    with pytest.raises(NotFound):
        _effects(store).notify("inv_1", NOTE)
    assert store.calls == ["ring", "get_invocation"]


def test_the_sweeps_wake_every_suspended_invocation_rung_since_it_suspended() -> None:
    store = SQLiteStore(":memory:")
    store.create_invocation(invocation("inv_rung", status="suspended", doorbell=5, doorbell_read=4))
    store.create_invocation(invocation("inv_quiet", status="suspended", doorbell=5, doorbell_read=5))
    store.create_invocation(invocation("inv_sleeps", status="suspended", wake_up_at_ms=9_000))
    scheduler = RecordingScheduler()
    plane = ControlPlane(store, None, scheduler, clock=FixedClock(100_000), facts=store.facts)  # type: ignore[arg-type]

    plane.sweep()
    assert scheduler.now == ["inv_rung"]
    assert ("inv_sleeps", 9_000) in scheduler.at

    scheduler.now.clear()
    plane.sweep_due()
    assert scheduler.now == ["inv_rung"]
