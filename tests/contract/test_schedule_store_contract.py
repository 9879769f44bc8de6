"""The `ScheduleStore` contract, on DynamoDB (moto) and SQLite: create once, list by name, update, delete."""

from __future__ import annotations

import pytest

from control_plane.ports import ScheduleRecord, Store, StoreConflict


def _schedule(name: str, **changes: object) -> ScheduleRecord:
    values: dict[str, object] = {
        "name": name,
        "service": "Greeter",
        "handler": "greet",
        "body": '"world"',
        "every_ms": 5_000,
        "next_tick_ms": 10_000,
        "created_at_ms": 1_000,
        "modified_at_ms": 1_000,
    }
    values.update(changes)
    return ScheduleRecord(**values)  # type: ignore[arg-type]


def test_a_schedule_is_created_once_and_read_back(store: Store) -> None:
    schedule = _schedule("hourly", cron="0 * * * *", every_ms=0, key="k1")
    store.create_schedule(schedule)
    assert store.get_schedule("hourly") == schedule
    with pytest.raises(StoreConflict):
        store.create_schedule(_schedule("hourly", service="Other"))
    assert store.get_schedule("hourly") == schedule
    assert store.get_schedule("missing") is None


def test_schedules_list_by_name(store: Store) -> None:
    for name in ("b", "a", "c"):
        store.create_schedule(_schedule(name))
    assert [s.name for s in store.list_schedules()] == ["a", "b", "c"]


def test_update_changes_only_the_named_fields_and_needs_the_schedule(store: Store) -> None:
    store.create_schedule(_schedule("s"))
    after = store.update_schedule("s", paused=True, modified_at_ms=2_000)
    assert after == _schedule("s", paused=True, modified_at_ms=2_000)
    after = store.update_schedule("s", next_tick_ms=15_000, last_tick_ms=10_000, last_invocation_id="inv_1x")
    assert after.paused is True
    assert (after.next_tick_ms, after.last_tick_ms, after.last_invocation_id) == (15_000, 10_000, "inv_1x")
    assert store.get_schedule("s") == after
    with pytest.raises(StoreConflict):
        store.update_schedule("gone", paused=True)
    assert store.get_schedule("gone") is None


def test_delete_removes_a_schedule_and_is_idempotent(store: Store) -> None:
    store.create_schedule(_schedule("s"))
    store.delete_schedule("s")
    store.delete_schedule("s")
    assert store.get_schedule("s") is None
    assert store.list_schedules() == []


def test_a_tick_is_recorded_only_after_the_last_recorded_one(store: Store) -> None:
    store.create_schedule(_schedule("s"))
    after = store.record_schedule_tick("s", tick_ms=20_000, invocation_id="inv_new", next_tick_ms=25_000)
    assert (after.last_tick_ms, after.last_invocation_id, after.next_tick_ms) == (20_000, "inv_new", 25_000)
    assert store.get_schedule("s") == after
    # an older tick (an SQS redelivery) written after the newer one changes nothing
    with pytest.raises(StoreConflict):
        store.record_schedule_tick("s", tick_ms=15_000, invocation_id="inv_old", next_tick_ms=20_000)
    with pytest.raises(StoreConflict):  # the same tick again
        store.record_schedule_tick("s", tick_ms=20_000, invocation_id="inv_new", next_tick_ms=30_000)
    assert store.get_schedule("s") == after
    lost = store.record_schedule_tick("s", tick_ms=25_000, invocation_id="", next_tick_ms=30_000)
    assert (lost.last_tick_ms, lost.last_invocation_id, lost.next_tick_ms) == (25_000, "", 30_000)
    assert store.get_schedule("s") == lost
    with pytest.raises(StoreConflict):
        store.record_schedule_tick("gone", tick_ms=1, invocation_id="inv_1x", next_tick_ms=2)
    assert store.get_schedule("gone") is None
