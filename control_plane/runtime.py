"""Wiring of the core: one `ControlPlane` per process, built from the four ports.

Edges (`torpor dev`, Lambda entry points, tests) build the ports' adapters and hand them in; the core
never builds an adapter itself. The HTTP APIs are outside the core: `http_api.HttpControlPlane` is
this wiring with the ingress and admin routes on top.
"""

from __future__ import annotations

import logging
import time

from control_plane.invocation import Engine, Outcome, far_future_ms, rung_since_suspended
from control_plane.observability import Metrics, PrometheusMetrics, Tracer
from control_plane.operations import FAN_OUT_BUDGET_S, kill_callees_of_wake_id
from control_plane.ports import Clock, Invoker, Scheduler, ScheduleTrigger, Store, StoreFacts, SystemClock
from control_plane.registry import Registry
from control_plane.schedules import Schedules, TimerTrigger, schedule_of_wake_id
from control_plane.settings import Settings
from control_plane.subscriptions import Subscriptions
from control_plane.timers import Wake
from control_plane.waiters import CompletionWaiters

log = logging.getLogger("torpor.runtime")

_SWEEP_LIMIT = 10_000
_RETENTION_LIMIT = 1_000  # completed invocations whose retention ended, per sweep (per shard query too)
_SWEEP_BUDGET_MS = 40_000  # the sweeper function runs for 60 s at most
_SWEEP_GRACE_MS = 30_000  # a wake-up this late is taken as lost (its message may still be on its way before)


class ControlPlane:
    """The orchestrator: engine, registry, schedules and the sweeps over the given ports (no HTTP).

    Args:
        store: Durable storage, every family (`Store`).
        invoker: Reaches deployments.
        scheduler: Wakes invocations now or at a due time.
        clock: Wall clock (ms); `SystemClock` by default.
        settings: Runtime defaults; `Settings()` by default.
        metrics: Where counts and latencies go; `PrometheusMetrics` by default.
        schedule_trigger: Delivers schedules' ticks; timers on `scheduler` by default.
        facts: Facts about the store's deployment (`StoreFacts`: may this process delete, may the
            table hold 16-byte ids, what creating an invocation costs), from the adapter beside the
            store (`DynamoDBStore.facts`, `SQLiteStore.facts`). Required: a wrong default would let
            the AWS ingress function try deletes its role forbids.
        tracer: Where spans go (`observability.Tracer`; `adapters.otel.tracer_from_env`); none by default.
    """

    def __init__(
        self,
        store: Store,
        invoker: Invoker,
        scheduler: Scheduler,
        *,
        facts: StoreFacts,
        clock: Clock | None = None,
        settings: Settings | None = None,
        metrics: Metrics | None = None,
        schedule_trigger: ScheduleTrigger | None = None,
        tracer: Tracer | None = None,
    ) -> None:
        self.store = store
        self.clock = clock or SystemClock()
        self.settings = settings or Settings()
        self.waiters = CompletionWaiters()
        self.registry = Registry(store, invoker, self.clock, self.settings)
        self.metrics: Metrics = metrics or PrometheusMetrics()
        self.engine = Engine(
            store, self.registry, scheduler, self.clock, self.settings, self.waiters, self.metrics, facts=facts
        )
        if tracer is not None:
            self.engine.use_tracer(tracer)
        self.scheduler = scheduler
        # a schedule's ticks: timers on `scheduler` (wake-up id `schedule:{name}`) unless a trigger is given
        self.schedules = Schedules(store, self.engine, schedule_trigger or TimerTrigger(scheduler), self.clock)
        self.subscriptions = Subscriptions(store, self.engine, self.clock)  # events of queues and streams

    def wake(self, wake: Wake) -> Outcome:
        """The one entry of a wake-up (`timers.Wake`), whatever delivered it: the local scheduler's
        work queue and timers, an SQS message, a cron tick. A `schedule:{name}` id is a schedule's
        tick (`TimerTrigger`): `Schedules.tick` for each due time (0 for a tick now); a
        `kill-callees:{id}:{index}` id goes on killing a killed invocation's callees
        (`Operations.kill_started_callees`), and its timers' records are deleted after; any other
        id is an invocation's (`Engine.wake`)."""
        name = schedule_of_wake_id(wake.invocation_id)
        if name is not None:
            for due_ms in wake.dues or (0,):
                self.schedules.tick(name, due_ms)
            return Outcome.COMPLETED
        fan_out = kill_callees_of_wake_id(wake.invocation_id)
        if fan_out is not None:
            killed, index = fan_out
            self.engine.operations.kill_started_callees(killed, index, time.monotonic() + FAN_OUT_BUDGET_S)
            for due_ms in wake.dues:
                self.engine.timers.cancel(wake.invocation_id, due_ms)
            return Outcome.COMPLETED
        return self.engine.wake(wake)

    def advance(self, invocation_id: str) -> Outcome:
        """`wake(Wake(invocation_id))`: a wake-up now (a shorthand for tests and tools)."""
        return self.wake(Wake(invocation_id))

    def stop(self) -> None:
        """Stop starting attempts and release leases between attempts; waiting callers get 202."""
        self.engine.stop()

    def sweep_due(self, grace_ms: int = _SWEEP_GRACE_MS, budget_ms: int = _SWEEP_BUDGET_MS) -> int:
        """The periodic safety net where wake-ups are messages (the sweeper function on AWS).

        Cheaper than `sweep`: only timers overdue by more than `grace_ms` (their message was lost),
        keys' queues whose hand-over was lost (every `pending` invocation unchanged for `grace_ms` is
        put back in its key's queue, `Keys.requeue`), `ready`/`running` invocations whose lease
        expired, and `suspended` ones rung since they suspended (`rung_since_suspended`: the
        notifier may have died before its wake-up), which are woken through the scheduler; then,
        with what is left of `budget_ms`, the retention of completed invocations, carried out here
        (`retire_due`). Both loops stop when the budget is
        spent (the next sweep goes on). Returns how many timers, removals and wake-ups were handled.

        Cost per sweep beyond the timers: one listing each of `pending`, `ready`/`running` and
        `suspended` invocations (the status index, at most `_SWEEP_LIMIT` each, newest first), one
        idempotent queue write per pending invocation and one pump per key, one wake-up per
        invocation found stranded.
        """
        now = self.clock.now_ms()
        started = time.monotonic()
        count = 0
        for due_ms, invocation_id in self.store.due_timers(now - grace_ms, _SWEEP_LIMIT):
            if (time.monotonic() - started) * 1000 > budget_ms:
                break  # the next sweep goes on
            if kill_callees_of_wake_id(invocation_id) is not None:  # not an invocation: its work goes on
                self.engine.timers.hop(invocation_id, due_ms)
                count += 1
                continue
            record = self.store.get_invocation(invocation_id)
            if record is None or record.status == "completed":
                self.engine.timers.cancel(invocation_id, due_ms)  # for an invocation that is done or gone
            else:
                self.engine.timers.hop(invocation_id, due_ms)
            count += 1
        if not self.schedules.trigger.recurring:  # a schedule whose tick timer was lost ticks again
            for schedule in self.store.list_schedules():
                if not schedule.paused and schedule.next_tick_ms <= now - grace_ms:
                    self.schedules.trigger.arm(schedule)
                    count += 1
        pending = self.store.list_invocations(["pending"], None, _SWEEP_LIMIT)
        count += self.engine.keys.requeue([r for r in pending if r.modified_at_ms <= now - grace_ms])
        for record in self.store.list_invocations(["ready", "running"], None, _SWEEP_LIMIT):
            if record.lease_until_ms <= now and record.modified_at_ms <= now - grace_ms:
                self.scheduler.wake_now(record.invocation_id)
                count += 1
        for record in self.store.list_invocations(["suspended"], None, _SWEEP_LIMIT):
            if rung_since_suspended(record):  # its wake-up may have been lost
                self.scheduler.wake_now(record.invocation_id)
                count += 1
        if count:
            log.info("sweep sent %d wake-up(s)", count)
        spent_ms = int((time.monotonic() - started) * 1000)
        return count + self.retire_due(budget_ms - spent_ms)

    def retire_due(self, budget_ms: int = _SWEEP_BUDGET_MS) -> int:
        """Carry out the retention of completed invocations that has ended (`Engine.retire`): their
        journals, then their records, earliest first, at most `_RETENTION_LIMIT` while `budget_ms`
        lasts (the next sweep goes on). No timer per invocation: the store keeps completed ones in
        retention order (`Store.due_retention`). Returns how many were removed."""
        started = time.monotonic()
        removed = 0
        for due in self.store.due_retention(self.clock.now_ms(), _RETENTION_LIMIT):
            if (time.monotonic() - started) * 1000 > budget_ms:
                break
            removed += self.engine.retention.retire(due)
        return removed

    def sweep(self) -> int:
        """Re-arm every unfinished invocation after a start-up: the safety net for lost wake-ups.

        Every stored timer is handed to the scheduler again (due ones fire at once). Every `pending`
        invocation is put back in its key's queue and each key pumped (`Keys.requeue`). A `suspended`
        invocation rung since it suspended (`rung_since_suspended`: a notification's wake-up may
        have been lost with the process that stored it) is woken now; one with nothing new suspends
        again. `ready` and `running` invocations whose lease expired are woken now; a `running` one whose lease is
        still held (by a process that may have died) is woken when the lease expires. Completed
        invocations whose retention ended are removed (`retire_due`), last, so what a caller sees
        when the sweep returns is as fresh as it can be. Returns how many wake-ups were re-armed and
        invocations removed.

        Cost: one listing of each status group (at most `_SWEEP_LIMIT` each: the suspended ones are
        listed once, for their timers and their doorbells alike), one idempotent queue write per
        pending invocation; `torpor dev` runs it at start-up and every minute.
        """
        now = self.clock.now_ms()
        count = 0
        for due_ms, invocation_id in self.store.due_timers(far_future_ms(now), _SWEEP_LIMIT):
            self.engine.timers.hop(invocation_id, due_ms)
            count += 1
        if not self.schedules.trigger.recurring:  # each schedule's next tick (a missed one runs once, now)
            count += self.schedules.arm_all()
        # keys' queues whose hand-over was lost: every pending invocation back in its queue (idempotent), pump
        count += self.engine.keys.requeue(self.store.list_invocations(["pending"], None, _SWEEP_LIMIT))
        for record in self.store.list_invocations(["scheduled", "backing-off", "suspended"], None, _SWEEP_LIMIT):
            if rung_since_suspended(record):  # rung after it suspended: its wake-up may have been lost
                self.scheduler.wake_now(record.invocation_id)
                count += 1
            elif record.wake_up_at_ms:  # the status says when it wakes, whatever happened to its timer
                self.engine.timers.hop(record.invocation_id, record.wake_up_at_ms)
                count += 1
        for record in self.store.list_invocations(["ready", "running"], None, _SWEEP_LIMIT):
            if record.lease_until_ms > now:
                self.engine.timers.hop(record.invocation_id, record.lease_until_ms + 1)
            else:
                self.scheduler.wake_now(record.invocation_id)
            count += 1
        if count:
            log.debug("sweep re-armed %d wake-up(s)", count)  # routine: every stored timer, every sweep
        return count + self.retire_due()
