"""Durable schedules: a named cron expression or period whose every tick sends to a handler.

A schedule's ticks are times on a grid: a 5-field cron expression in UTC (parsed by `croniter`), or
`every` a period, ticking at the multiples of the period since the UNIX epoch (`every 5m`: :00,
:05, ...). Each tick is a send to the target (`Service/handler`, with the object `key` and JSON body
given at creation) whose idempotency key is derived from the schedule's name and the tick time
(`tick_idempotency_key`), so a tick delivered twice (a retried timer, an SQS redelivery) creates one
invocation.

Missed ticks (Torpor down, a worker backlog) are not replayed one by one: a delivery runs the latest
tick due at that moment (`Cadence.latest_at_or_before`), so any number of missed ticks collapse into
one catch-up send, then ticking goes on with the next future tick. A paused schedule does not tick;
resuming it starts with the next future tick (the ticks it missed while paused do not run).

What delivers the ticks is a `ScheduleTrigger` (`control_plane.ports`): `TimerTrigger` arms one
`Scheduler` timer per tick (`torpor dev`'s timer loop), EventBridge Scheduler recurring schedules on
AWS (`adapters.aws.schedules`).
"""

from __future__ import annotations

import dataclasses
import json
import logging
import re
from dataclasses import dataclass
from datetime import UTC, datetime

from croniter import CroniterBadDateError, CroniterError, croniter

from control_plane import ids
from control_plane.durations import format_duration_ms, parse_duration_ms, rfc3339
from control_plane.errors import BadRequest, Conflict, NotFound
from control_plane.inputs import validate_input
from control_plane.invocation import Engine
from control_plane.ports import Clock, Scheduler, ScheduleRecord, ScheduleStore, ScheduleTrigger, StoreConflict

log = logging.getLogger("torpor.schedules")

__all__ = [
    "MAX_BODY_BYTES",
    "MAX_CRON_CHARS",
    "MAX_KEY_BYTES",
    "MIN_EVERY_MS",
    "SCHEDULE_WAKE_PREFIX",
    "Cadence",
    "Schedules",
    "TimerTrigger",
    "parse_cron",
    "parse_every",
    "schedule_json",
    "schedule_of_wake_id",
    "tick_idempotency_key",
]

SCHEDULE_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,47}")
"""A schedule name: 1 to 48 of `[A-Za-z0-9_.-]`, starting with a letter or digit (it names an
EventBridge schedule on AWS, whose names allow 64 characters of that set)."""

MIN_EVERY_MS = 1_000
"""The shortest period of an `every` schedule (1 s)."""

SCHEDULE_WAKE_PREFIX = "schedule:"
"""A `Scheduler` wake-up whose id starts with this is a schedule's tick (`TimerTrigger`), not an invocation."""


MAX_CRON_CHARS = 200
"""The longest cron expression accepted (EventBridge Scheduler's whole `cron(...)` expression is at most
256 characters)."""

MAX_KEY_BYTES = 1024
"""The longest schedule `key` (UTF-8 bytes). The ingress sets no limit of its own on an object key: it
is bounded by the URL the HTTP server in front takes (API Gateway HTTP APIs: 10,240 bytes of request
line and headers together). A key this long fits there even percent-encoded, so an object a schedule
ticks can also be called through the ingress."""

MAX_BODY_BYTES = 256 * 1024
"""The largest schedule `body` (bytes of its JSON text): the schedule record holds it, and the record
must fit in one DynamoDB item (400 KB) on every store."""

_CRON_NAMES: tuple[frozenset[str], ...] = (
    frozenset(),
    frozenset(),
    frozenset(),
    frozenset(("JAN", "FEB", "MAR", "APR", "MAY", "JUN", "JUL", "AUG", "SEP", "OCT", "NOV", "DEC")),
    frozenset(("SUN", "MON", "TUE", "WED", "THU", "FRI", "SAT")),
)
_CRON_FIELD = re.compile(r"[0-9A-Za-z*,/-]+")
_CRON_FIELD_NAMES = ("minute", "hour", "day-of-month", "month", "day-of-week")


def parse_cron(expression: str) -> str:
    """Check a 5-field cron expression (minute hour day-of-month month day-of-week, UTC) and return
    it with its fields separated by single spaces.

    Each field is numbers, `*`, lists (`,`), ranges (`-`) and steps (`/`); months and days of the week
    may also be 3-letter names (`JAN`, `MON`). The extensions some cron dialects add (`L`, `W`, `1#2`,
    `?`, `H`, `@hourly`) are refused on every path, since not all of them can be carried by
    EventBridge Scheduler on AWS with croniter's meaning; an expression that never fires (`0 0 30 2 *`)
    is refused too.

    Raises:
        ValueError: Longer than `MAX_CRON_CHARS`, not 5 fields, a field with a character or name
            outside the forms above, a field croniter does not accept, or no date ever matches
            (the message names the expression and says which).
    """
    if len(expression) > MAX_CRON_CHARS:
        raise ValueError(f"cron expression of {len(expression)} characters is too long (at most {MAX_CRON_CHARS})")
    fields = expression.split()
    if len(fields) != 5:
        raise ValueError(
            f"cron expression {expression!r} has {len(fields)} fields; write 5: minute hour day-of-month month "
            "day-of-week, e.g. '0 * * * *' (hourly, UTC)"
        )
    for index, field in enumerate(fields):
        words = re.findall(r"[A-Za-z]+", field)
        if not _CRON_FIELD.fullmatch(field) or any(word.upper() not in _CRON_NAMES[index] for word in words):
            raise ValueError(
                f"cron expression {expression!r}: the {_CRON_FIELD_NAMES[index]} field {field!r} is not supported; "
                "write numbers, '*', lists (1,15), ranges (1-5) and steps (*/10)"
                + (", or 3-letter names (JAN, MON)" if index >= 3 else "")
                + " (L, W, # and ? are not supported)"
            )
    normal = " ".join(fields)
    try:
        croniter(normal, datetime(2000, 1, 1, tzinfo=UTC)).get_next(float)  # never fires: CroniterBadDateError
    except CroniterBadDateError as exc:
        raise ValueError(f"cron expression {expression!r} never fires (no date matches it)") from exc
    except (CroniterError, ValueError, KeyError) as exc:
        raise ValueError(f"cron expression {expression!r} is not valid: {exc}") from exc
    return normal


def parse_every(text: str) -> int:
    """The period of an `every` schedule in ms, from a duration such as `30s`, `5m`, `1h`, `PT1H`.

    Raises:
        ValueError: Not a duration, or shorter than 1 s.
    """
    every_ms = parse_duration_ms(text)
    if every_ms < MIN_EVERY_MS:
        raise ValueError(f"every {text!r} is shorter than 1s: a schedule ticks at most once a second")
    return every_ms


@dataclass(frozen=True, slots=True)
class Cadence:
    """The tick grid of a schedule: `cron` (5 fields, UTC) or `every_ms` (multiples since the epoch)."""

    cron: str = ""
    every_ms: int = 0

    @staticmethod
    def of(schedule: ScheduleRecord) -> Cadence:
        """The cadence of a stored schedule."""
        return Cadence(schedule.cron, schedule.every_ms)

    def next_after(self, ms: int) -> int:
        """The first tick strictly after `ms` (ms since the epoch).

        Raises:
            CroniterBadDateError: A cron expression that never fires; `parse_cron` refuses those, so
                only a cadence built without it (a record written by hand) raises.
        """
        if self.every_ms:
            return (ms // self.every_ms + 1) * self.every_ms
        start = datetime.fromtimestamp(ms / 1000, tz=UTC)
        return round(croniter(self.cron, start).get_next(float) * 1000)

    def latest_at_or_before(self, ms: int) -> int:
        """The last tick at or before `ms` (ms since the epoch).

        Raises:
            CroniterBadDateError: A cron expression that never fires (as `next_after`).
        """
        if self.every_ms:
            return ms // self.every_ms * self.every_ms
        start = datetime.fromtimestamp((ms + 1) / 1000, tz=UTC)  # get_prev is strictly before its start
        return round(croniter(self.cron, start).get_prev(float) * 1000)

    def describe(self) -> str:
        """`cron 0 * * * *` or `every 5m`, for people."""
        return f"cron {self.cron}" if self.cron else f"every {format_duration_ms(self.every_ms)}"


def tick_idempotency_key(name: str, tick_ms: int) -> str:
    """The idempotency key of one tick's send: `schedule/{name}/{tick_ms}` (the tick time in ms).

    The same schedule and tick always give the same key, hence the same invocation id
    (`ids.idempotent_invocation_id`), so a tick delivered twice runs once.
    """
    return f"schedule/{name}/{tick_ms}"


def schedule_wake_id(name: str) -> str:
    """The `Scheduler` wake-up id of schedule `name`'s ticks (`TimerTrigger`)."""
    return SCHEDULE_WAKE_PREFIX + name


def schedule_of_wake_id(wake_id: str) -> str | None:
    """The schedule name a wake-up id is a tick of, or None for an invocation id."""
    return wake_id[len(SCHEDULE_WAKE_PREFIX) :] if wake_id.startswith(SCHEDULE_WAKE_PREFIX) else None


def schedule_json(schedule: ScheduleRecord) -> dict[str, object]:
    """A schedule as the admin API shows it (times RFC 3339, `every` as a duration such as `5m`)."""
    target = f"{schedule.service}/{schedule.handler}"
    return {
        "name": schedule.name,
        "cron": schedule.cron or None,
        "every": format_duration_ms(schedule.every_ms) if schedule.every_ms else None,
        "every_ms": schedule.every_ms or None,
        "target": target,
        "service": schedule.service,
        "handler": schedule.handler,
        "key": schedule.key or None,
        "body": json.loads(schedule.body) if schedule.body else None,
        "paused": schedule.paused,
        "next_tick": None if schedule.paused else rfc3339(schedule.next_tick_ms),
        "last_tick": rfc3339(schedule.last_tick_ms) if schedule.last_tick_ms else None,
        "last_invocation_id": schedule.last_invocation_id or None,
        "created_at": rfc3339(schedule.created_at_ms),
        "modified_at": rfc3339(schedule.modified_at_ms),
    }


class TimerTrigger:
    """`ScheduleTrigger` on the `Scheduler` port: one timer per tick, id `schedule:{name}`.

    The timer calls `ControlPlane.advance("schedule:{name}")`, which runs `Schedules.tick`; the tick
    arms the next timer. Nothing to remove on pause or delete: the timer finds the schedule paused
    or gone and arms no more. After a restart, `ControlPlane.sweep` arms every schedule again.
    """

    recurring = False

    def __init__(self, scheduler: Scheduler) -> None:
        self._scheduler = scheduler

    def check(self, schedule: ScheduleRecord) -> None:
        """Any cron expression or period is fine for a timer."""

    def arm(self, schedule: ScheduleRecord) -> None:
        """Arm a timer at `schedule.next_tick_ms` (none while paused)."""
        if not schedule.paused:
            self._scheduler.wake_at(schedule_wake_id(schedule.name), schedule.next_tick_ms)

    def disarm(self, name: str) -> None:
        """Nothing: a timer that finds its schedule gone arms no more."""


class Schedules:
    """Create, list, pause, resume, delete and tick schedules (the admin API's `/schedules`).

    Args:
        store: Where schedules are kept (`ScheduleStore`).
        engine: Creates the invocations the ticks send (and resolves targets).
        trigger: Delivers the ticks (`ScheduleTrigger`).
        clock: Wall clock, ms since the UNIX epoch.
    """

    def __init__(self, store: ScheduleStore, engine: Engine, trigger: ScheduleTrigger, clock: Clock) -> None:
        self.store = store
        self.engine = engine
        self.trigger = trigger
        self.clock = clock

    # --- admin -------------------------------------------------------------------------------------

    def create(
        self,
        name: str,
        *,
        service: str,
        handler: str,
        key: str = "",
        body: object = None,
        cron: str | None = None,
        every: str | None = None,
    ) -> ScheduleRecord:
        """Store a new schedule and arm its first tick (the first grid tick after now).

        Args:
            name: 1 to 48 of `[A-Za-z0-9_.-]`, starting with a letter or digit.
            service: The target service, which must be registered.
            handler: The target handler, which must exist.
            key: The object key or workflow id; required for a keyed service, refused for a plain one.
            body: The JSON value each tick sends (None: no body).
            cron: A 5-field cron expression (UTC); exactly one of `cron` and `every`.
            every: A period such as `5m` (at least 1 s).

        Raises:
            BadRequest: A bad name, cron expression (`parse_cron`: one that never fires, or uses `L`,
                `W`, `#`, `?`) or period; both or neither of them; an unknown target; a key missing,
                not allowed or above `MAX_KEY_BYTES`; a body above `MAX_BODY_BYTES` or one the
                handler does not take; a cadence the trigger cannot carry (on AWS: EventBridge
                Scheduler's limits).
            Conflict: A schedule with this name exists.
        """
        if not isinstance(name, str) or not SCHEDULE_NAME.fullmatch(name):
            raise BadRequest(
                f"bad schedule name {name!r}: 1 to 48 letters, digits, '_', '.' or '-', starting with a letter or digit"
            )
        if (cron is None) == (every is None):
            raise BadRequest('give exactly one of "cron" (e.g. "0 * * * *") and "every" (e.g. "5m")')
        if every is not None and len(every) > 64:
            raise BadRequest(f"every of {len(every)} characters is not a duration; write e.g. 5m, 1h, PT30S")
        try:
            cadence = Cadence(cron=parse_cron(cron)) if cron is not None else Cadence(every_ms=parse_every(every or ""))
        except ValueError as exc:
            raise BadRequest(str(exc)) from exc
        body_text = "" if body is None else json.dumps(body, separators=(",", ":"))
        if len(body_text.encode()) > MAX_BODY_BYTES:
            raise BadRequest(
                f"the schedule body is {len(body_text.encode())} bytes of JSON; at most {MAX_BODY_BYTES} bytes "
                "(each tick sends it; keep large data elsewhere and send a reference)"
            )
        if isinstance(key, str) and len(key.encode()) > MAX_KEY_BYTES:
            raise BadRequest(f"the schedule key is {len(key.encode())} bytes; at most {MAX_KEY_BYTES} bytes (UTF-8)")
        self._check_target(service, handler, key, body_text)
        now = self.clock.now_ms()
        schedule = ScheduleRecord(
            name=name,
            service=service,
            handler=handler,
            key=key,
            body=body_text,
            cron=cadence.cron,
            every_ms=cadence.every_ms,
            next_tick_ms=cadence.next_after(now),
            created_at_ms=now,
            modified_at_ms=now,
        )
        try:
            self.trigger.check(schedule)
        except ValueError as exc:
            raise BadRequest(str(exc)) from exc
        try:
            self.store.create_schedule(schedule)
        except StoreConflict as exc:
            raise Conflict(f"schedule {name!r} exists already; delete it first to change it") from exc
        try:
            self.trigger.arm(schedule)
        except Exception:
            self.store.delete_schedule(name)  # no schedule that never ticks
            raise
        return schedule

    def _check_target(self, service: str, handler: str, key: str, body: str) -> None:
        if not isinstance(service, str) or not isinstance(handler, str) or not service or not handler:
            raise BadRequest('the target needs "service" and "handler" (Service/handler)')
        try:
            target = self.engine.registry.resolve(service, handler)
        except NotFound as exc:
            raise BadRequest(f"the target {service}/{handler} does not exist: {exc.message}") from exc
        if not isinstance(key, str):
            raise BadRequest('"key" must be a string')
        if target.service_type == "SERVICE" and key:
            raise BadRequest(f"'{service}' is a service, not a virtual object or workflow: drop the key")
        if target.service_type != "SERVICE" and not key:
            kind = "virtual object" if target.service_type == "VIRTUAL_OBJECT" else "workflow"
            raise BadRequest(f"'{service}' is a {kind}: the schedule needs a key (--key)")
        if target.service_type == "WORKFLOW" and target.handler_type == "WORKFLOW":
            raise BadRequest(
                f"'{service}/{handler}' is a workflow's run handler, which runs once per workflow id: a schedule "
                "cannot tick it; target a service or object handler that starts the workflow instead"
            )
        content_type = "application/json" if body else None
        validate_input(target, body.encode(), content_type)

    def get(self, name: str) -> ScheduleRecord:
        """The schedule `name`; `NotFound` (404) if there is none."""
        schedule = self.store.get_schedule(name)
        if schedule is None:
            raise NotFound(f"schedule {name!r} not found; list them with torpor schedules list (GET /schedules)")
        return schedule

    def list(self) -> list[ScheduleRecord]:
        """Every schedule, by name."""
        return self.store.list_schedules()

    def pause(self, name: str) -> ScheduleRecord:
        """Stop the ticks until `resume`; pausing a paused schedule changes nothing.

        The trigger is changed before the store (`_switch`), so a failure between the two leaves the
        store saying "running": pausing again repeats both.

        Raises:
            NotFound: No schedule `name`.
            Exception: What the trigger raised (e.g. botocore's `ClientError` from EventBridge
                Scheduler): nothing was written; pause again.
        """
        schedule = self.get(name)
        if schedule.paused:
            return schedule
        return self._switch(schedule, paused=True)

    def resume(self, name: str) -> ScheduleRecord:
        """Tick again from the next future tick (ticks missed while paused do not run).

        On a recurring trigger (EventBridge) the trigger is enabled before the store says "running",
        so a failure between the two leaves the store saying "paused" and resuming again repeats both
        (a trigger enabled meanwhile delivers ticks that find the schedule paused and drop them).

        Raises:
            NotFound: No schedule `name`.
            Exception: What the trigger raised: the store still says paused; resume again.
        """
        schedule = self.get(name)
        if not schedule.paused:
            return schedule
        next_tick_ms = Cadence.of(schedule).next_after(self.clock.now_ms())
        return self._switch(schedule, paused=False, next_tick_ms=next_tick_ms)

    def _switch(self, schedule: ScheduleRecord, **changes: object) -> ScheduleRecord:
        """Pause or resume: on a recurring trigger, arm it with the changed schedule first, then write
        the store (what the store says is never ahead of the trigger); a timer trigger is armed after
        the write, since its timer must find the schedule resumed when it fires."""
        if self.trigger.recurring:
            self.trigger.arm(dataclasses.replace(schedule, **changes))  # type: ignore[arg-type]
            return self._update(schedule.name, **changes)
        updated = self._update(schedule.name, **changes)
        self.trigger.arm(updated)
        return updated

    def delete(self, name: str) -> None:
        """Remove the schedule and its trigger; invocations its ticks sent stay. `NotFound` if unknown."""
        self.get(name)
        self.trigger.disarm(name)
        self.store.delete_schedule(name)

    def arm_all(self) -> int:
        """Arm every unpaused schedule again (after a restart; a tick due meanwhile runs at once, once).
        Returns how many were armed."""
        count = 0
        for schedule in self.store.list_schedules():
            if not schedule.paused:
                self.trigger.arm(schedule)
                count += 1
        return count

    def _update(self, name: str, **changes: object) -> ScheduleRecord:
        try:
            return self.store.update_schedule(name, modified_at_ms=self.clock.now_ms(), **changes)
        except StoreConflict as exc:
            raise NotFound(f"schedule {name!r} not found (deleted meanwhile)") from exc

    # --- ticks -------------------------------------------------------------------------------------

    def tick(self, name: str, scheduled_ms: int = 0) -> str | None:
        """Run the tick of schedule `name` that is due now: send to its target, once per tick.

        The tick is the latest grid tick at or before `max(now, scheduled_ms)` (`scheduled_ms`: when
        the delivering trigger meant to fire, ms since the epoch, 0 if unknown), so a late delivery,
        or many missed ticks, run one catch-up send. Its idempotency key is `tick_idempotency_key`:
        a second delivery of the same tick finds the invocation exists and sends nothing more. Then
        the schedule's `next_tick_ms` moves to the first tick after now and after the tick sent (a
        delivery a little early, before `scheduled_ms`, sends the tick it was for; were the next tick
        that same tick, its timer would fire again at once, forever), and a non-recurring trigger is
        armed for it.

        A tick after the last one that ran and before `next_tick_ms` was skipped by a pause (due
        while the schedule was paused, or due before and not run by then: resuming moves
        `next_tick_ms` to the first tick after the resume): a delivery of it (a timer armed before
        the pause) sends nothing.

        A target that no longer exists (its deployment was removed) loses the tick, logged as an
        error; the schedule goes on with its next tick.

        The tick is recorded with `Store.record_schedule_tick`, conditional on no later tick having
        been recorded: of two deliveries racing (an SQS redelivery and the next EventBridge tick),
        the older one, written last, changes nothing, so `next_tick_ms` never goes backwards.

        Returns:
            The id of the tick's invocation (created now or before), or None if the schedule is
            gone, paused, has no tick due since it was created or resumed, or its target is gone.

        Raises:
            Exception: Whatever the store or the trigger raise (a DynamoDB or EventBridge error)
                propagates: the SQS message that delivered the tick is then retried, and the retry
                sends nothing twice (the tick's idempotency key).
        """
        schedule = self.store.get_schedule(name)
        if schedule is None or schedule.paused:
            log.debug("tick of schedule %s dropped: %s", name, "gone" if schedule is None else "paused")
            return None
        now = self.clock.now_ms()
        cadence = Cadence.of(schedule)
        tick_ms = cadence.latest_at_or_before(max(now, scheduled_ms))
        if tick_ms < schedule.created_at_ms:
            if not self.trigger.recurring:
                self.trigger.arm(schedule)  # came early: wait for the tick
            return None
        if schedule.last_tick_ms < tick_ms < schedule.next_tick_ms:  # a tick a pause skipped
            log.debug("tick %s of schedule %s dropped: a pause skipped it", rfc3339(tick_ms), name)
            return None  # a timer armed before the pause, delivered after the resume (which armed the next)
        try:
            invocation_id = self._send(schedule, tick_ms)
        except (NotFound, BadRequest) as exc:  # its target went away (a deployment removed): this tick is lost
            log.error("tick %s of schedule %s not sent: %s", rfc3339(tick_ms), name, exc.message)
            invocation_id = ""
        try:  # the next tick is after this one too: a delivery a little early runs the tick it was for
            schedule = self.store.record_schedule_tick(
                name, tick_ms=tick_ms, invocation_id=invocation_id, next_tick_ms=cadence.next_after(max(now, tick_ms))
            )
        except StoreConflict:  # deleted meanwhile, or this tick or a later one was recorded
            current = None if self.trigger.recurring else self.store.get_schedule(name)
            if current is not None:  # a timer trigger: arm the recorded next tick (the same timer id, replaced)
                self.trigger.arm(current)
            return invocation_id or None
        if not self.trigger.recurring:
            self.trigger.arm(schedule)
        return invocation_id or None

    def _send(self, schedule: ScheduleRecord, tick_ms: int) -> str:
        headers = {"content-type": "application/json"} if schedule.body else {}
        idempotency_key = tick_idempotency_key(schedule.name, tick_ms)
        try:
            record = self.engine.create(
                schedule.service,
                schedule.handler,
                schedule.body.encode(),
                headers,
                key=schedule.key,
                leased=False,
                idempotency_key=idempotency_key,
            )
        except StoreConflict:  # this tick ran before: the same idempotency key, the same invocation
            existing = ids.idempotent_invocation_id(schedule.service, schedule.handler, schedule.key, idempotency_key)
            log.info("tick %s of schedule %s was sent before (%s)", rfc3339(tick_ms), schedule.name, existing)
            return existing
        log.info("schedule %s ticked at %s: %s", schedule.name, rfc3339(tick_ms), record.invocation_id)
        return record.invocation_id
