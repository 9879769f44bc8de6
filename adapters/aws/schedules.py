"""`ScheduleTrigger` on AWS: one EventBridge Scheduler recurring schedule per Torpor schedule.

The EventBridge schedule `torpor-schedule-{name}` (in Torpor's schedule group) carries the schedule's
cadence as a `cron(...)` or `rate(...)` expression in UTC and targets the wake queue with the body
`{"schedule": name, "scheduled_time": "<aws.scheduler.scheduled-time>"}` (EventBridge Scheduler puts
the tick's scheduled time in place of the placeholder). The worker hands that body to
`control_plane.schedules.Schedules.tick` (`timers.handle_wake_message`), which sends to the target
with an idempotency key made of the schedule name and the tick time. Retry policy and dead-letter
queue are those of the one-time wake-up schedules (`timers.SCHEDULE_RETRY_POLICY`). Pause and resume
set the schedule's `State` (DISABLED / ENABLED); delete removes it.

EventBridge Scheduler's limits, which `check` turns into 400s: `every` must be a whole number of
minutes (rate expressions have no seconds), and a cron expression may not restrict both day of
month and day of week (EventBridge needs `?` in one of them). The cron extensions EventBridge has
and croniter reads otherwise (`L`, `W`, `#`) never get here: `parse_cron` refuses them on every
path. Cron day-of-week numbers (0 or 7 = Sunday) are written as names (`SUN`), since EventBridge
numbers days 1-7 from Sunday; month names are written in capitals (`JAN`).
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

from botocore.exceptions import ClientError
from croniter import croniter

from adapters.aws.client_errors import error_code
from adapters.aws.timers import SCHEDULE_RETRY_POLICY
from control_plane.observability import record
from control_plane.ports import ScheduleRecord
from control_plane.schedules import SCHEDULE_NAME

log = logging.getLogger("torpor.schedules")

__all__ = ["EventBridgeSchedules", "eventbridge_expression", "eventbridge_schedule_name", "tick_input"]

_DAY_NAMES = ("SUN", "MON", "TUE", "WED", "THU", "FRI", "SAT", "SUN")
_UNITS = ((86_400_000, "day"), (3_600_000, "hour"), (60_000, "minute"))


def _check_name(name: str) -> None:
    if not SCHEDULE_NAME.fullmatch(name):
        raise ValueError(f"{name!r} is not a schedule name (1 to 48 of [A-Za-z0-9_.-])")


def eventbridge_schedule_name(name: str) -> str:
    """The EventBridge schedule of Torpor schedule `name`: `torpor-schedule-{name}` (≤ 64 characters,
    EventBridge Scheduler's limit for a schedule name).

    Raises:
        ValueError: `name` is not a schedule name (`control_plane.schedules.SCHEDULE_NAME`), so the
            EventBridge name would be too long or hold characters EventBridge refuses.
    """
    _check_name(name)
    return f"torpor-schedule-{name}"


def tick_input(name: str) -> str:
    """The target `Input` of schedule `name`'s EventBridge schedule: JSON
    `{"schedule": name, "scheduled_time": "<aws.scheduler.scheduled-time>"}`, the placeholder being
    replaced by EventBridge Scheduler with the tick's time (RFC 3339, UTC) when it fires.

    Raises:
        ValueError: `name` is not a schedule name (`control_plane.schedules.SCHEDULE_NAME`).
    """
    _check_name(name)
    return json.dumps({"schedule": name, "scheduled_time": "<aws.scheduler.scheduled-time>"}, separators=(",", ":"))


def _step_from(field: str, first: str) -> str:
    """`*/N` as EventBridge writes it (`0/N`, `1/N`); anything else unchanged."""
    return first + field[1:] if field.startswith("*/") else field


def eventbridge_expression(schedule: ScheduleRecord) -> str:
    """The EventBridge Scheduler expression of a schedule: `rate(5 minutes)` or `cron(0 * * * ? *)`.

    Raises:
        ValueError: A period that is not a whole number of minutes, or a cron expression restricting
            both day of month and day of week.
    """
    if schedule.every_ms:
        if schedule.every_ms % 60_000:
            raise ValueError(
                f"every {schedule.every_ms} ms cannot be scheduled on AWS: EventBridge Scheduler's rate expressions "
                "count whole minutes (write e.g. 1m, 5m, 1h), or use a cron expression"
            )
        size, unit = next((s, u) for s, u in _UNITS if schedule.every_ms % s == 0)
        count = schedule.every_ms // size
        return f"rate({count} {unit}{'' if count == 1 else 's'})"
    minute, hour, dom, month, dow = schedule.cron.split()
    minute, hour = _step_from(minute, "0"), _step_from(hour, "0")
    dom, month = _step_from(dom, "1"), _step_from(month, "1").upper()  # EventBridge writes JAN, not jan
    if dow == "*":
        dow = "?"
    elif dom != "*":
        raise ValueError(
            f"cron expression {schedule.cron!r} cannot be scheduled on AWS: EventBridge Scheduler cannot restrict both "
            "day of month and day of week; keep one of them '*'"
        )
    else:
        dom = "?"
        days = croniter.expand(schedule.cron)[0][4]
        dow = ",".join(dict.fromkeys(_DAY_NAMES[int(d)] for d in days)) if days != ["*"] else "?"
    return f"cron({minute} {hour} {dom} {month} {dow} *)"


class EventBridgeSchedules:
    """`control_plane.ports.ScheduleTrigger` on EventBridge Scheduler recurring schedules.

    Args:
        scheduler_client: A ready boto3 EventBridge Scheduler (`scheduler`) client.
        queue_arn: The target's ARN: the timer (or wake) queue's, or with `TORPOR_WAKE=invoke` the
            worker function's (the tick's Input is then its event); or a function returning it.
        role_arn: The role EventBridge Scheduler assumes to send to the queue (or invoke the worker).
        dead_letter_arn: An SQS queue for ticks that could not be delivered, or None.
        group: The schedule group (must exist).
    """

    recurring = True

    def __init__(
        self,
        scheduler_client: Any,
        *,
        queue_arn: str | Callable[[], str],
        role_arn: str,
        dead_letter_arn: str | None = None,
        group: str = "default",
    ) -> None:
        self._client = scheduler_client
        self._queue_arn = queue_arn
        self._role_arn = role_arn
        self._dead_letter_arn = dead_letter_arn
        self._group = group

    def check(self, schedule: ScheduleRecord) -> None:
        """Raise `ValueError` if EventBridge Scheduler cannot carry the schedule (`eventbridge_expression`)."""
        eventbridge_expression(schedule)

    def arm(self, schedule: ScheduleRecord) -> None:
        """Create the EventBridge schedule, or update it if it exists (`State` DISABLED while paused).

        An `every` schedule starts at its next tick (`StartDate`), so its rate keeps Torpor's grid.
        """
        queue_arn = self._queue_arn if isinstance(self._queue_arn, str) else self._queue_arn()
        target: dict[str, Any] = {
            "Arn": queue_arn,
            "RoleArn": self._role_arn,
            "Input": tick_input(schedule.name),
            "RetryPolicy": dict(SCHEDULE_RETRY_POLICY),
        }
        if self._dead_letter_arn:
            target["DeadLetterConfig"] = {"Arn": self._dead_letter_arn}
        params: dict[str, Any] = {
            "Name": eventbridge_schedule_name(schedule.name),
            "GroupName": self._group,
            "ScheduleExpression": eventbridge_expression(schedule),
            "ScheduleExpressionTimezone": "UTC",
            "FlexibleTimeWindow": {"Mode": "OFF"},
            "State": "DISABLED" if schedule.paused else "ENABLED",
            "Target": target,
            "Description": f"Torpor schedule {schedule.name}: {schedule.service}/{schedule.handler}",
        }
        if schedule.every_ms and schedule.next_tick_ms:
            params["StartDate"] = datetime.fromtimestamp(schedule.next_tick_ms / 1000, tz=UTC)
        try:
            record("scheduler CreateSchedule")
            self._client.create_schedule(**params)
        except ClientError as exc:
            if error_code(exc) != "ConflictException":
                raise
            record("scheduler UpdateSchedule")
            self._client.update_schedule(**params)  # UpdateSchedule replaces every field

    def disarm(self, name: str) -> None:
        """Delete the EventBridge schedule; one that is gone already is fine."""
        try:
            record("scheduler DeleteSchedule")
            self._client.delete_schedule(Name=eventbridge_schedule_name(name), GroupName=self._group)
        except ClientError as exc:
            if error_code(exc) != "ResourceNotFoundException":
                raise
            log.debug("the EventBridge schedule of %s was gone already", name)
