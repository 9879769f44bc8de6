"""The timers seam: every timer the core arms, re-arms or cancels goes through `Timers`.

A timer has two halves: its record in the store (`Store.put_timer`: visible, recovered by the
sweeps) and the scheduler's hop (`Scheduler.wake_at`: the wake-up itself). The record is always
written first, so a crash between the two leaves a record the sweep re-arms, never a wake-up
without a record. Where a state write must come between the two (a back-off, a re-armed early
wake-up, a delayed invocation's creation), the caller records (`record`), writes, then hops
(`hop`); everywhere else `arm` does both.

A wake-up enters the engine as one value, `Wake(invocation_id, dues)`, at one entry
(`ControlPlane.wake`, then `Engine.wake` for an invocation's), whatever delivered it: the local
scheduler (`adapters/local/scheduler.py`), an SQS message (`adapters/aws/timers.py`
`handle_wake_message`), a cron tick, the simulator. `dues` holds the due times of the timers that
fired (none: a wake-up now, from the work queue); the local scheduler coalesces several timers of
one invocation into one wake-up, an SQS message carries one.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

from control_plane.held import Held
from control_plane.ports import MAX_TIMER_MS, Clock, Scheduler, Store

LEAD_MIN_SLEEP_MS = 100
"""Sleeps shorter than this (ms) are armed at their due time (the suspension may not be stored yet)."""


@dataclass(frozen=True, slots=True)
class Wake:
    """One wake-up of `invocation_id` (an invocation id, or a `schedule:`/`kill-callees:` wake id):
    `dues` are the due times (ms since the epoch) of the timers that fired, sorted; empty for a
    wake-up now. `Wake.at(id, due_ms)` builds the wake-up of one timer (`due_ms` 0: now)."""

    invocation_id: str
    dues: tuple[int, ...] = ()

    @classmethod
    def at(cls, invocation_id: str, due_ms: int) -> Wake:
        """The wake-up of the timer of `invocation_id` due at `due_ms` (ms; 0 or less: a wake-up now)."""
        return cls(invocation_id, (due_ms,) if due_ms > 0 else ())


class Timers:
    """Arms, re-arms and cancels the timers of invocations (see the module doc).

    Args:
        store: where timer records are kept (`put_timer`, `delete_timer`, `get_invocation`).
        scheduler: the wake-ups; its optional `sleep_lead_ms` attribute (ms) arms sleeps early.
        clock: wall clock in ms.
    """

    def __init__(self, store: Store, scheduler: Scheduler, clock: Clock) -> None:
        self.store = store
        self.scheduler = scheduler
        self.clock = clock

    @property
    def lead_ms(self) -> int:
        """How long (ms) before a sleep's due time its wake-up comes (the scheduler's `sleep_lead_ms`, else 0)."""
        return int(getattr(self.scheduler, "sleep_lead_ms", 0))

    def record(self, invocation_id: str, due_ms: int, held: Held | None = None) -> int:
        """Write the record of a timer due at `due_ms` (ms since the epoch, clipped to `MAX_TIMER_MS`),
        noted in `held.timers` when given (the lease holder's: deleted again if the invocation is
        killed under it). Returns the due time recorded. Store errors propagate."""
        due_ms = min(due_ms, MAX_TIMER_MS)
        self.store.put_timer(due_ms, invocation_id)
        if held is not None:
            held.timers.add(due_ms)
        return due_ms

    def hop(self, invocation_id: str, due_ms: int) -> None:
        """Ask the scheduler for the wake-up of a timer recorded for `due_ms` (or a hop with no record:
        an early timer's re-delivery, a hand-over the sweep does not need to recover)."""
        self.scheduler.wake_at(invocation_id, due_ms)

    def arm(self, invocation_id: str, due_ms: int, held: Held | None = None) -> None:
        """Record a timer for `due_ms` (ms since the epoch), then ask the scheduler for its wake-up."""
        self.hop(invocation_id, self.record(invocation_id, due_ms, held))

    def arm_sleep(self, invocation_id: str, due_ms: int, held: Held | None = None) -> None:
        """`arm` the wake-up of a sleep due at `due_ms` (ms since the epoch).

        A sleep of at least `LEAD_MIN_SLEEP_MS` is armed `lead_ms` early: the wake-up takes the
        lease and reads the journal, then waits for the due time in-process (`wait_for_sleep`), so
        that when many sleeps end at once their attempts start on time instead of queueing behind
        each other's reads. A due time beyond what a timer holds (`MAX_TIMER_MS`, the year 2286) is
        armed at that limit: the wake-up finds the sleep not yet due and arms it again.
        """
        lead_ms = self.lead_ms
        if lead_ms and due_ms - self.clock.now_ms() >= LEAD_MIN_SLEEP_MS:
            due_ms -= lead_ms
        self.arm(invocation_id, due_ms, held)

    def rearm_read_ahead(self, held: Held) -> None:
        """A wake-up that did not wait for a sleep read ahead (something else woke it too, or the
        clock trails): arm the sleep's own wake-up time, as the early timer is settled after this
        advance and the sleep would otherwise wait for the next sweep."""
        lead_ms = self.lead_ms
        soonest = min(held.journal.open_sleeps().values(), default=0)
        now = self.clock.now_ms()
        if lead_ms and now < soonest <= now + 2 * lead_ms:
            self.record(held.record.invocation_id, soonest, held)
            self.hop(held.record.invocation_id, soonest)

    def wait_for_sleep(self, held: Held, now: int) -> bool:
        """Woken up to `lead_ms` before a sleep is due (see `arm_sleep`): wait for it in-process,
        lease and journal in hand. True if a sleep is due now."""
        lead_ms = self.lead_ms
        soonest = min(held.journal.open_sleeps().values(), default=0)
        if not lead_ms or not now < soonest <= now + lead_ms:
            return False
        time.sleep((soonest - now) / 1000)
        return soonest <= self.clock.now_ms()

    def sleep_dues(self, wake_up_ms: int) -> set[int]:
        """Where a timer for a sleep waking at `wake_up_ms` may be recorded: there, or `lead_ms`
        earlier (`arm_sleep`); what cancelling the sleep's timer deletes."""
        lead_ms = self.lead_ms
        return {min(due, MAX_TIMER_MS) for due in (wake_up_ms, wake_up_ms - lead_ms) if due > 0}

    def cancel(self, invocation_id: str, due_ms: int) -> None:
        """Delete the record of the timer of `invocation_id` due at `due_ms` (clipped to `MAX_TIMER_MS`;
        idempotent). A wake-up already asked of the scheduler still comes, and finds nothing to do."""
        self.store.delete_timer(min(due_ms, MAX_TIMER_MS), invocation_id)

    def cancel_sleeps(self, held: Held) -> None:
        """Delete the timers of sleeps the handler no longer awaits (it completed, e.g. cancelled
        during a sleep): one DeleteItem per open sleep (two where the scheduler reads sleeps ahead),
        none in the usual case."""
        dues = {due for wake_up in held.journal.open_sleeps().values() for due in self.sleep_dues(wake_up)}
        for due in dues:
            self.cancel(held.record.invocation_id, due)

    def drop_orphans(self, held: Held) -> None:
        """After the lease was lost: delete the timers this worker recorded (`Held.timers`) if the
        invocation completed meanwhile (a kill deleted the timers it knew of, not one recorded after
        it read the invocation, such as a retry's). A successor's timers are left alone: nothing is
        deleted while it runs. One read when this worker recorded a timer, none otherwise."""
        if not held.timers:
            return
        current = self.store.get_invocation(held.record.invocation_id)
        if current is None or current.status == "completed":
            for due_ms in sorted(held.timers):
                self.cancel(held.record.invocation_id, due_ms)
        held.timers.clear()
