"""Schedules, a part of `SQLiteStore`: table `schedules (name, record)`, the record as JSON.

Writes of one store are serialised (`SQLiteStore._write` holds one transaction at a time), so
`update_schedule` reads and writes the row in one transaction.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import sqlite3

from control_plane.ports import SCHEDULE_FIELDS, ScheduleRecord, StoreConflict


class ScheduleTables:
    """`control_plane.ports.ScheduleStore` (schedules); `SQLiteStore` provides `_write`/`_read`."""

    SCHEDULES_SCHEMA = """
    CREATE TABLE IF NOT EXISTS schedules (name TEXT PRIMARY KEY, record TEXT NOT NULL) WITHOUT ROWID;
    """

    def _write(self, method: str) -> contextlib.AbstractContextManager[sqlite3.Connection]:
        raise NotImplementedError

    def _read(self, method: str) -> contextlib.AbstractContextManager[sqlite3.Connection]:
        raise NotImplementedError

    def create_schedule(self, schedule: ScheduleRecord) -> None:
        """Store a new schedule. Raises `StoreConflict` if one with its name exists (nothing written)."""
        with self._write("create_schedule") as db:
            try:
                db.execute(
                    "INSERT INTO schedules (name, record) VALUES (?, ?)",
                    (schedule.name, json.dumps(dataclasses.asdict(schedule))),
                )
            except sqlite3.IntegrityError as exc:
                raise StoreConflict(f"schedule {schedule.name} exists") from exc

    def get_schedule(self, name: str) -> ScheduleRecord | None:
        """The schedule `name`, or None."""
        with self._read("get_schedule") as db:
            row = db.execute("SELECT record FROM schedules WHERE name = ?", (name,)).fetchone()
        return None if row is None else ScheduleRecord(**json.loads(row["record"]))

    def list_schedules(self) -> list[ScheduleRecord]:
        """Every schedule, ordered by name."""
        with self._read("list_schedules") as db:
            rows = db.execute("SELECT record FROM schedules ORDER BY name").fetchall()
        return [ScheduleRecord(**json.loads(row["record"])) for row in rows]

    def update_schedule(self, name: str, **changes: object) -> ScheduleRecord:
        """Set fields of `SCHEDULE_FIELDS`; returns the schedule after. `StoreConflict` if it does not exist.

        Raises:
            ValueError: A field that is not in `SCHEDULE_FIELDS`.
        """
        unknown = set(changes) - set(SCHEDULE_FIELDS)
        if unknown:
            raise ValueError(f"schedule fields {sorted(unknown)} cannot be changed")
        with self._write("update_schedule") as db:
            row = db.execute("SELECT record FROM schedules WHERE name = ?", (name,)).fetchone()
            if row is None:
                raise StoreConflict(f"schedule {name} does not exist")
            schedule = dataclasses.replace(ScheduleRecord(**json.loads(row["record"])), **changes)  # type: ignore[arg-type]
            db.execute(
                "UPDATE schedules SET record = ? WHERE name = ?", (json.dumps(dataclasses.asdict(schedule)), name)
            )
        return schedule

    def record_schedule_tick(self, name: str, *, tick_ms: int, invocation_id: str, next_tick_ms: int) -> ScheduleRecord:
        """Record tick `tick_ms` of schedule `name` (`Store.record_schedule_tick`): the row is read and
        written in one transaction, only if its `last_tick_ms` is before `tick_ms`.

        Raises:
            StoreConflict: No schedule `name`, or a tick at or after `tick_ms` is recorded (nothing written).
        """
        with self._write("record_schedule_tick") as db:
            row = db.execute("SELECT record FROM schedules WHERE name = ?", (name,)).fetchone()
            if row is None:
                raise StoreConflict(f"schedule {name} does not exist")
            schedule = ScheduleRecord(**json.loads(row["record"]))
            if schedule.last_tick_ms >= tick_ms:
                raise StoreConflict(f"schedule {name}: tick {schedule.last_tick_ms} is recorded, not before {tick_ms}")
            schedule = dataclasses.replace(
                schedule, last_tick_ms=tick_ms, last_invocation_id=invocation_id, next_tick_ms=next_tick_ms
            )
            db.execute(
                "UPDATE schedules SET record = ? WHERE name = ?", (json.dumps(dataclasses.asdict(schedule)), name)
            )
        return schedule

    def delete_schedule(self, name: str) -> None:
        """Remove the schedule `name`; removing an unknown name does nothing."""
        with self._write("delete_schedule") as db:
            db.execute("DELETE FROM schedules WHERE name = ?", (name,))
