"""Schedules, a part of `DynamoDBStore`: the `SCHED` partition.

Items: `SCHED` / `SCHED#{name}`, one attribute per `ScheduleRecord` field. Creation is conditional on
the item being absent, updates on it existing (UpdateItem of the changed attributes only, so a tick
moving `next_tick_ms` never undoes a concurrent pause), a tick's record also on no later tick being
recorded (`record_schedule_tick`). Reads are strongly consistent.
"""

from __future__ import annotations

from pynamodb.attributes import BooleanAttribute, UnicodeAttribute

from adapters.aws.store_items import IntAttribute, Item, item_absent, item_exists, translated_write
from control_plane.ports import SCHEDULE_FIELDS, ScheduleRecord, StoreConflict

SCHEDULES_PK = "SCHED"


def schedule_sk(name: str) -> str:
    """The sort key of a schedule in the `SCHED` partition."""
    return f"SCHED#{name}"


class ScheduleItem(Item):
    """`SCHED` / `SCHED#{name}`: one attribute per `ScheduleRecord` field."""

    name = UnicodeAttribute()
    service = UnicodeAttribute()
    handler = UnicodeAttribute()
    key = UnicodeAttribute(null=True)
    body = UnicodeAttribute(null=True)
    cron = UnicodeAttribute(null=True)
    every_ms = IntAttribute(null=True)
    paused = BooleanAttribute(null=True)
    next_tick_ms = IntAttribute(null=True)
    last_tick_ms = IntAttribute(null=True)
    last_invocation_id = UnicodeAttribute(null=True)
    created_at_ms = IntAttribute()
    modified_at_ms = IntAttribute()


def schedule_record(item: ScheduleItem) -> ScheduleRecord:
    """The record an item holds."""
    return ScheduleRecord(
        name=item.name,
        service=item.service,
        handler=item.handler,
        key=item.key or "",
        body=item.body or "",
        cron=item.cron or "",
        every_ms=item.every_ms or 0,
        paused=bool(item.paused),
        next_tick_ms=item.next_tick_ms or 0,
        last_tick_ms=item.last_tick_ms or 0,
        last_invocation_id=item.last_invocation_id or "",
        created_at_ms=item.created_at_ms,
        modified_at_ms=item.modified_at_ms,
    )


class DynamoSchedules:
    """`control_plane.ports.ScheduleStore` (schedules); `DynamoDBStore` binds `_schedules`.

    Attributes:
        _schedules: The store's bound `ScheduleItem`.
    """

    _schedules: type[ScheduleItem]

    def create_schedule(self, schedule: ScheduleRecord) -> None:
        """Store a new schedule (PutItem, on the item being absent). `StoreConflict` if the name is taken."""
        item = self._schedules(
            SCHEDULES_PK,
            schedule_sk(schedule.name),
            name=schedule.name,
            service=schedule.service,
            handler=schedule.handler,
            key=schedule.key or None,
            body=schedule.body or None,
            cron=schedule.cron or None,
            every_ms=schedule.every_ms or None,
            paused=schedule.paused,
            next_tick_ms=schedule.next_tick_ms,
            last_tick_ms=schedule.last_tick_ms or None,
            last_invocation_id=schedule.last_invocation_id or None,
            created_at_ms=schedule.created_at_ms,
            modified_at_ms=schedule.modified_at_ms,
        )
        with translated_write(
            too_large=f"schedule {schedule.name}: its body does not fit in one item (400 KB)",
            conflict=f"schedule {schedule.name} exists",
        ):
            item.save(condition=item_absent(self._schedules))

    def get_schedule(self, name: str) -> ScheduleRecord | None:
        """The schedule `name`, or None."""
        try:
            item = self._schedules.get(SCHEDULES_PK, schedule_sk(name), consistent_read=True)
        except self._schedules.DoesNotExist:
            return None
        return schedule_record(item)

    def list_schedules(self) -> list[ScheduleRecord]:
        """Every schedule, ordered by name (one query, paged)."""
        items = self._schedules.query(SCHEDULES_PK, self._schedules.sk.startswith("SCHED#"), consistent_read=True)
        return [schedule_record(item) for item in items]

    def update_schedule(self, name: str, **changes: object) -> ScheduleRecord:
        """Set fields of `SCHEDULE_FIELDS` (one UpdateItem, on the item existing, returning the item).

        Raises:
            StoreConflict: There is no schedule `name`.
            ValueError: A field that is not in `SCHEDULE_FIELDS`.
        """
        unknown = set(changes) - set(SCHEDULE_FIELDS)
        if unknown:
            raise ValueError(f"schedule fields {sorted(unknown)} cannot be changed")
        model = self._schedules
        item = model(SCHEDULES_PK, schedule_sk(name))
        actions = [getattr(model, field).set(value) for field, value in changes.items()]
        with translated_write(too_large=f"schedule {name}", conflict=f"schedule {name} does not exist"):
            item.update(actions=actions, condition=item_exists(model))
        return schedule_record(item)

    def record_schedule_tick(self, name: str, *, tick_ms: int, invocation_id: str, next_tick_ms: int) -> ScheduleRecord:
        """Record tick `tick_ms` of schedule `name` (`Store.record_schedule_tick`): one UpdateItem,
        conditional on the item existing and `last_tick_ms` being absent or before `tick_ms`.

        Raises:
            StoreConflict: No schedule `name`, or a tick at or after `tick_ms` is recorded (nothing written).
        """
        model = self._schedules
        item = model(SCHEDULES_PK, schedule_sk(name))
        actions = [
            model.last_tick_ms.set(tick_ms),
            model.last_invocation_id.set(invocation_id) if invocation_id else model.last_invocation_id.remove(),
            model.next_tick_ms.set(next_tick_ms),
        ]
        condition = item_exists(model) & (model.last_tick_ms.does_not_exist() | (model.last_tick_ms < tick_ms))
        with translated_write(
            too_large=f"schedule {name}", conflict=f"schedule {name} is gone or has a tick at or after {tick_ms}"
        ):
            item.update(actions=actions, condition=condition)
        return schedule_record(item)

    def delete_schedule(self, name: str) -> None:
        """Remove the schedule `name`; removing an unknown name does nothing."""
        self._schedules(SCHEDULES_PK, schedule_sk(name)).delete()


__all__ = ["SCHEDULES_PK", "DynamoSchedules", "ScheduleItem", "StoreConflict", "schedule_record", "schedule_sk"]
