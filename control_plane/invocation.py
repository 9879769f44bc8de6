"""The invocation lifecycle: create an invocation, and `advance` it one durable step at a time.

`advance(invocation_id)` is the one operation of the orchestrator (see docs/architecture.md): take
the lease (new epoch), load the journal and the notifications stored for it, invoke the pinned
deployment with Start + journal (request/response mode), commit the answer with a single conditional
write at the journal's current length, apply the effects of what was committed (timers, one-way
calls, awakeable completions), then decide: done, suspended, run again now, or retry later.
Nothing in memory outlives the call; a crash at any point leaves a journal that the next `advance`
continues from, and effects are re-applied from the journal (each one is idempotent).

Notifications that arrive from outside (an awakeable resolved, a cancel) are stored beside the
journal and the invocation's doorbell is rung; the lease holder folds them into the journal in its
next commit, and its suspension is conditional on the doorbell it read, so none is ever missed.
The suspension also stores that doorbell (`doorbell_read`): a ring after it shows, and the sweeps
wake an invocation rung since it suspended (`rung_since_suspended`), so a notifier that died before
its wake-up loses none either. A completing invocation tells its callers before its completing
write (`Endings.tell_callers`), so a crash between the two leaves one that tells them again.
Sleep completions are not stored by timers at all: the lease holder derives them from the journal
(a Sleep whose wake-up time has passed), so a timer is only a wake-up and may fire twice or late.

This module owns `advance` and the attempt loop: it takes the lease, chooses what comes next
(attempt, suspend, complete, retry or fail) and hands each step to its collaborators, each in its
own module:

- `control_plane.creation.Creation`: new invocations (ids, record, a delayed one's timer, its key);
- `control_plane.attempts.Attempts`: the attempt seam, request/response (with in-process
  checkpoints) or bidirectional, chosen per deployment;
- `control_plane.executor.Executor`: carries out a decision: the journal first, conditionally,
  then the committed entries' effects, then the `decisions.Decision` (queue, not due, suspend,
  complete, back off, pause, fail, kill), through its one entry `Executor.apply`: the named
  transition, conditionally, then the decision's effects in order;
- `control_plane.timers.Timers`: every timer armed, re-armed or cancelled; `Engine.wake` is the one
  entry of a wake-up (`timers.Wake`);
- `control_plane.effects.Effects`: what committed entries do beyond the journal (timers, callees,
  awakeables, signals, state and promises) and notifications delivered from outside;
- `control_plane.operations.Operations`: cancel, kill, pause, resume, purge, the deadlock report;
- `control_plane.retention.Retention`: when a completed invocation's journal and record go;
- `control_plane.keyed.Keys`: object keys (one writer per key), state and durable promises.
"""

from __future__ import annotations

import logging
import threading
from collections import Counter
from dataclasses import replace

from control_plane import restart
from control_plane.attempt import AttemptAnswer, AttemptFailure, explain_mismatch, parse_answer, without_handled_cancel
from control_plane.attempts import Attempts, check
from control_plane.creation import JOURNAL_ENTRY_LIMIT_BYTES, Creation
from control_plane.decisions import Decision, Transition, WakeNow, decide_start, key_unsure, not_due, retry_not_due
from control_plane.effects import Effects
from control_plane.endings import Endings
from control_plane.errors import TorporError
from control_plane.executor import Executor
from control_plane.held import Held, Knocks, Outcome, log_fields
from control_plane.journal import Journal, awaited, notification_key
from control_plane.keyed import Keys, is_keyed
from control_plane.observability import NO_TRACER, Metrics, NoMetrics, Tracer, metered
from control_plane.operations import CANCEL_SIGNAL, Operations
from control_plane.ports import (
    Clock,
    InvocationRecord,
    LoadedInvocation,
    Scheduler,
    Store,
    StoreConflict,
    StoreFacts,
    StoreUnavailable,
)
from control_plane.protocol import Frame, MessageType, is_command, is_custom
from control_plane.protocol import protocol_pb2 as pb
from control_plane.registry import HandlerOptions, Registry
from control_plane.retention import Retention
from control_plane.settings import Settings
from control_plane.timers import Timers, Wake
from control_plane.waiters import CompletionWaiters

__all__ = [
    "JOURNAL_ENTRY_LIMIT_BYTES",
    "RUNNABLE",
    "AttemptAnswer",
    "AttemptFailure",
    "Engine",
    "Outcome",
    "parse_answer",
    "rung_since_suspended",
]

log = logging.getLogger("torpor.invocation")

RUNNABLE = ("ready", "scheduled", "running", "backing-off", "suspended")
"""Statuses in which a worker may take the lease and make progress."""

_BUSY_RETRY_MS = 1_000  # a timer that met a busy lease wakes the invocation again this much later
_FAR_FUTURE_MS = 10 * 365 * 24 * 3600 * 1000


def rung_since_suspended(record: InvocationRecord) -> bool:
    """True if a `suspended` invocation's doorbell was rung after it suspended, so the wake-up of
    that notification may have been lost (the notifier died between its store requests): the
    sweeps wake it (`ControlPlane.sweep`, `ControlPlane.sweep_due`). Its suspension stored the
    doorbell value it was conditional on (`InvocationRecord.doorbell_read`); every notification
    rings before it is stored and again after (`Effects.notify`), so a stored one always leaves the
    doorbell past that value. False for any other status. Waking one with nothing new costs one
    lease and one re-suspension. A record suspended by an older Torpor (no `doorbell_read`, read
    as 0) whose doorbell ever rang is woken once, and then stores it."""
    return record.status == "suspended" and record.doorbell != record.doorbell_read


def holds_nothing_more(record: InvocationRecord) -> bool:
    """True if the invocation's partition holds nothing but `record`, as its first lease shows it
    (`acquire_lease`'s answer): epoch 1 (no holder before it could commit a batch, no kill or pause
    moved the epoch; one created with its lease is at 1 already and is not `advance`d first),
    doorbell 0 (every notification rings before it is stored, `Effects.notify`, so none was) and a
    journal of the Input command alone (`journal_length` 1: a restart as new writes its copied
    prefix before its record and counts it there). Then its journal is `record.input_entry` and a
    read of the partition would answer only the record again: `advance` skips it, so the first
    attempt of a sent invocation makes one store request less."""
    return record.epoch == 1 and record.doorbell == 0 and record.journal_length <= 1


def _proposals_for(journal: Journal, kept: list[Frame], rest: list[Frame]) -> list[Frame]:
    """The RunCompletions in `rest` (proposed by the SDK) for Run commands of `journal` or `kept`
    still without a completion, in their order."""
    runs = {
        pb.RunCommandMessage.FromString(f.payload).result_completion_id
        for f in [*journal.frames, *kept]
        if f.type == MessageType.Run
    } - journal.completions
    out = []
    for f in rest:
        if f.type == MessageType.RunCompletion:
            completion_id = pb.RunCompletionNotificationMessage.FromString(f.payload).completion_id
            if completion_id in runs:
                runs.discard(completion_id)
                out.append(f)
    return out


class Engine:
    """Creates invocations and advances them. Thread-safe; keeps no state between calls, but for an
    object's state read when a new invocation took its key, from `create` to `drive`.

    Args:
        store: durable storage (DynamoDB).
        registry: deployments, services and their effective options.
        scheduler: wakes invocations now (work queue) or later (timers).
        clock: wall clock in ms.
        settings: runtime defaults.
        waiters: in-process notification of completions, for callers waiting on a result.
        metrics: where invocations, attempts, suspensions, latencies are counted (none by default).
        facts: facts about the store's deployment (`StoreFacts`: may this process delete, ...).
    """

    def __init__(
        self,
        store: Store,
        registry: Registry,
        scheduler: Scheduler,
        clock: Clock,
        settings: Settings,
        waiters: CompletionWaiters,
        metrics: Metrics | None = None,
        *,
        facts: StoreFacts,
    ) -> None:
        self.store = store
        self.facts = facts
        self.metrics: Metrics = metrics or NoMetrics()
        self.tracer: Tracer = NO_TRACER  # `use_tracer`
        self.registry = registry
        self.scheduler = scheduler
        self.clock = clock
        self.settings = settings
        self.waiters = waiters
        self.stopping = threading.Event()
        self.knocks = Knocks()  # invocations with news for a lease holder in this process (`knock`)
        self.keys = Keys(store, scheduler, clock)
        self.timers = Timers(store, scheduler, clock)  # every timer armed, re-armed or cancelled
        self.retention = Retention(store, registry, clock, settings, self.timers, facts)  # when a completed one goes
        self.effects = Effects(self)  # what committed entries do beyond the journal; notifications
        self.endings = Endings(store, registry, clock, settings, self.metrics, waiters, self.keys, self.effects)
        self.operations = Operations(
            store,
            registry,
            clock,
            waiters,
            self.keys,
            self.retention,
            self.timers,
            self.knocks,
            self.effects,
            self.endings,
        )  # cancel, kill, pause, resume, purge, deadlock
        self.creation = Creation(
            store, registry, clock, settings, self.metrics, self.keys, self.retention, self.timers, facts
        )  # ids, records, keys taken at creation
        self.create = self.creation.create
        self.executor = Executor(
            store,
            registry,
            clock,
            settings,
            self.metrics,
            waiters,
            self.retention,
            self.timers,
            self.keys,
            self.effects,
            self.endings,
            self.operations,
            self.stopping,
        )  # the journal first, then the effects, then the transition
        self.attempts = Attempts(
            registry, clock, settings, self.metrics, self.keys, self.executor, self.effects, self.knocks
        )  # request/response with checkpoints, or bidirectional: one seam per deployment
        """`Creation.create`: store a new invocation (the ingress, a Call's callee, a schedule's tick)."""

    def use_tracer(self, tracer: Tracer) -> None:
        """Emit spans to `tracer` (`observability.Tracer`): at creation, each attempt and completion."""
        self.tracer = tracer
        self.creation.tracer = tracer
        self.endings.tracer = tracer
        self.attempts.request_response.tracer = tracer
        self.attempts.bidirectional.tracer = tracer

    def stop(self) -> None:
        """Finish no more attempts: between attempts, leases are released for the next process."""
        self.stopping.set()
        self.waiters.notify_all()

    # --- creation ---------------------------------------------------------------------------------

    def workflow_run_id(self, workflow: str, workflow_id: str) -> str:
        """`Creation.workflow_run_id`: the invocation id of workflow `workflow`'s run for `workflow_id`."""
        return self.creation.workflow_run_id(workflow, workflow_id)

    def idempotent_invocation_id(self, service: str, handler: str, key: str, idempotency_key: str) -> str:
        """`Creation.idempotent_invocation_id`: the id of a request with an idempotency key."""
        return self.creation.idempotent_invocation_id(service, handler, key, idempotency_key)

    def restart_as_new(self, invocation_id: str, copy_upto: int = 0, deployment: str | None = None) -> str:
        """Run completed `invocation_id` again as a new invocation, from its Input command
        (`copy_upto` 0) or from its journal up to entry `copy_upto` included; the old one is unchanged.
        Returns the new invocation id. Raises as `restart.restart_as_new` (404, 400, 409, 410, 422, 425)."""
        return restart.restart_as_new(
            self.store, self.registry, self.creation, invocation_id, copy_upto, deployment
        ).invocation_id

    def drive(self, record: InvocationRecord, deadline_ms: int | None = None) -> tuple[Outcome, InvocationRecord]:
        """Advance an invocation just created with `leased=True`, without reloading it.

        If `deadline_ms` (ms since the epoch) passes between two attempts, the lease is released and
        the scheduler continues the invocation (`Outcome.HANDED_OFF`); an attempt already under way
        is never cut short, so the call can overrun the deadline by one attempt.

        Returns the outcome and the invocation record as this worker last wrote it.
        """
        with metered() as counts:
            held = Held(record, Journal.load(record.input_entry, ()), [], meter=counts)
            held.state = self.creation.taken_state.pop(record.invocation_id, None)
            return self._run_guarded(held, deadline_ms), held.record

    # --- advance ----------------------------------------------------------------------------------

    def knock(self, invocation_id: str) -> None:
        """Tell a lease holder running `invocation_id` in this process that something landed for
        it (a notification such as a cancel, or a kill): before its next attempt, or while a
        streamed attempt (bidirectional mode) waits for the SDK, it re-reads the invocation, so a
        cancel reaches a handler that keeps resuming on its own run results (on an open stream it
        is sent there), and a killed one runs no more steps (its stream is reset at once). One read
        per knock, none otherwise. A holder in another
        process (AWS) learns at its next conditional write or suspension. At most 10,000 pending
        knocks are kept (a dropped one only delays the news to the holder's next suspension)."""
        self.knocks.add(invocation_id)

    def advance(self, invocation_id: str) -> Outcome:
        """Take the lease on `invocation_id` and make as much progress as possible.

        Idempotent and safe to call concurrently, twice, or late: a worker that does not get the
        lease returns `Outcome.BUSY`; a commit that loses its conditional write changes nothing.
        The AWS requests it makes are counted onto the invocation (`InvocationRecord.requests`).
        """
        with metered() as counts:
            return self._advance(invocation_id, counts)

    def _advance(self, invocation_id: str, counts: Counter[str]) -> Outcome:
        now = self.clock.now_ms()
        try:  # a handler with a longer inactivity timeout extends the lease in `_run`
            record = self.store.acquire_lease(invocation_id, now, now + self.settings.lease_ms, RUNNABLE)
        except StoreConflict:
            return Outcome.BUSY
        if holds_nothing_more(record):  # its first lease: the journal is the Input command alone
            loaded: LoadedInvocation | None = LoadedInvocation(record, [], [])
        else:
            loaded = self.store.load_invocation(invocation_id)
        if loaded is None:
            return Outcome.BUSY
        held = Held.of(replace(loaded, record=record))
        held.meter = counts
        holds_key = None  # read only for one created on its key that may not have taken it
        if key_unsure(record):
            holds_key = self.keys.holds(record)
        fresh = [n for n in held.stored if not held.journal.has(n.key)]
        start = decide_start(record, holds_key, {n.key for n in fresh}, now, f"s{CANCEL_SIGNAL}")
        if start.transition is Transition.WAIT_FOR_KEY:  # wait in the key's queue
            return Outcome.BUSY if self.executor.apply(held, start) else Outcome.LEASE_LOST
        if start.transition is Transition.COMPLETE:  # cancelled before its time
            completion, failure = start.ending()
            return self.executor.fail_terminally(held, failure["code"], failure["message"], completion)
        if start.transition is Transition.RELEASE_LEASE:
            return self._not_due(held, start)
        due_sleep = any(at <= now for at in held.journal.open_sleeps().values())
        if not due_sleep and not fresh:
            due_sleep = self.timers.wait_for_sleep(held, now)
        if not due_sleep:
            self.timers.rearm_read_ahead(held)
        if retry_not_due(record, bool(fresh), due_sleep, now):  # woken early: wait again
            return self._not_due(held, not_due("backing-off", record.next_retry_at_ms))
        return self._run_guarded(held)

    def _run_guarded(self, held: Held, deadline_ms: int | None = None) -> Outcome:
        """`_run`, with an unexpected exception (a bug, a store error) counted as a failed attempt.

        Without this the invocation would keep its lease until it expired and then run again,
        uncounted, forever; as a failed attempt it backs off and, past the retry policy, pauses.
        If even recording the failure fails, the exception propagates (the lease then expires).
        """
        try:
            outcome = self._run(held, deadline_ms)
        except StoreUnavailable:  # the store's disk or file: no attempt to count, it can take no write now
            raise
        except Exception as exc:
            record = held.record
            log.exception("advance of %s failed unexpectedly", record.invocation_id, extra=log_fields(record))
            failure = AttemptFailure(500, f"internal error in the control plane: {type(exc).__name__}: {exc}")
            outcome = self.executor.failed(held, failure, None)
        if outcome == Outcome.LEASE_LOST:
            self.timers.drop_orphans(held)
        return outcome

    def _not_due(self, held: Held, decision: Decision) -> Outcome:
        """Woken before its time (a duplicate or early timer): arm the timer again and release (`not_due`)."""
        if not self.executor.apply(held, decision):
            self.timers.drop_orphans(held)
            return Outcome.LEASE_LOST
        return Outcome.NOT_DUE

    def wake(self, wake: Wake) -> Outcome:
        """The one entry of an invocation's wake-up (`timers.Wake`), whatever delivered it. A
        wake-up now (no `dues`) advances. A timer's advances once its due time has come: an early
        one is handed back to the scheduler (`NOT_DUE` when none was due); each due one's lateness
        is recorded (`timer_lateness`, ms past its due time when the advance starts) and its
        record settled after the advance (`_timer_done`)."""
        now = self.clock.now_ms()
        due = [due_ms for due_ms in wake.dues if due_ms <= now]
        for early in (due_ms for due_ms in wake.dues if due_ms > now):  # clock skew, a tolerant consumer
            self.timers.hop(wake.invocation_id, early)
        if wake.dues and not due:
            return Outcome.NOT_DUE
        for due_ms in due:
            self.metrics.observe("timer_lateness", now - due_ms)
        outcome = self.advance(wake.invocation_id)
        for due_ms in due:
            self._timer_done(wake.invocation_id, due_ms, outcome)
        return outcome

    def _timer_done(self, invocation_id: str, due_ms: int, outcome: object) -> None:
        """Drop a fired timer's record, unless its wake-up may not have been used (part of `wake`).

        When another worker held the lease (`BUSY`), that worker may have looked at the journal just
        before the due time: keep the record and wake again in a second, unless the invocation is
        gone or completed. A completed invocation whose retention ended is removed here (a process
        that may not delete handed it over: `Retention.drop_if_expired`).
        """
        if outcome in (Outcome.BUSY, Outcome.LEASE_LOST):
            record = self.store.get_invocation(invocation_id)
            if record is not None and record.status not in ("completed", "pending", "paused"):
                self.timers.hop(invocation_id, self.clock.now_ms() + _BUSY_RETRY_MS)
                return
            if record is not None and self.facts.may_delete and self.retention.expired(record):
                self.retention.remove(record)
        self.timers.cancel(invocation_id, due_ms)

    def _run(self, held: Held, deadline_ms: int | None = None) -> Outcome:
        """Invoke, commit, apply effects and decide; loop while the handler can go on at once."""
        record = held.record
        options = self.registry.pinned_options(record.deployment_id, record.service, record.handler)
        if is_keyed(record) and held.state is None:
            held.state = self.store.load_state(record.service, record.key)
        try:
            self.effects.apply(held, held.record.effects_applied_upto)  # after a crash: idempotent
        except StoreConflict:  # an exclusive handler that lost its key (killed meanwhile)
            return Outcome.LEASE_LOST
        if held.journal.output() is not None:
            return self.executor.complete(held)
        attempted = False
        while True:
            # news since it was read: look; killed (or taken over): run no more handler code
            if self.knocks.take(record.invocation_id) and not self.executor.reload(held):
                return Outcome.LEASE_LOST
            pending = self.effects.pending(held)
            if held.awaiting is not None and not (
                held.journal.can_resume(held.awaiting) or awaited(held.awaiting, map(notification_key, pending))
            ):
                suspended = self.executor.suspend(held)
                if suspended is not None:
                    return suspended
                continue  # a notification arrived meanwhile: look again
            handed = self._hand_off_or_renew(held, options, deadline_ms, attempted)
            if handed is not None:
                return handed
            attempted = True
            streamed = self.attempts.seam(held).run(held, options, pending)
            if isinstance(streamed, Outcome):
                return streamed
            if streamed is None:  # another commit landed first mid-attempt: start over from the journal
                held.awaiting = None
                continue
            result, pending = streamed.result, streamed.pending  # pending: [] once committed mid-attempt
            if isinstance(result, AttemptFailure):
                result = explain_mismatch(held.journal, result)
                kept = self._keep_failed_run(held, result, pending)
                if isinstance(kept, Outcome):
                    return kept
                return self.executor.failed(held, result, options)
            entries = pending + result.entries
            awaited_now = None if result.ended else result.awaiting
            refused = check(held, entries, awaited_now, len(pending), result.suspension, ended=result.ended)
            if refused is not None:
                return self.executor.failed(held, refused, options)
            awaiting = without_handled_cancel(held.journal, pending, result.awaiting)
            if result.ended:  # the answer and the completion as one write, where nothing tells them apart
                ended = self.executor.end(held, entries)
                if isinstance(ended, Outcome):
                    return ended
                if ended:  # another commit landed first: start over from the journal
                    held.awaiting = None
                    continue
            committed = self.executor.commit_new(held, entries)
            if isinstance(committed, Outcome):
                return committed
            if isinstance(committed, AttemptFailure):
                return self.executor.failed(held, committed, options)
            if committed is None:  # another commit landed first: its effects applied, start over
                held.awaiting = None
                continue
            if result.ended:
                return self.executor.complete(held)
            held.awaiting = awaiting

    def _hand_off_or_renew(
        self, held: Held, options: HandlerOptions, deadline_ms: int | None, attempted: bool
    ) -> Outcome | None:
        """Before an attempt: release the lease if this process stops, or if `deadline_ms` (ms since
        the epoch) passed after at least one attempt (`HANDED_OFF`: woken again now, or by the next
        process's start-up sweep); else extend the lease if less than an attempt's worth is left
        (`LEASE_LOST` if the epoch moved on). None: go on with the attempt."""
        now = self.clock.now_ms()
        stopping = self.stopping.is_set()
        if stopping or (deadline_ms is not None and now >= deadline_ms and attempted):
            changes = {"lease_until_ms": 0, "effects_applied_upto": len(held.journal)}
            # when stopping, the next process's start-up sweep resumes it
            handed = Decision(Transition.RELEASE_LEASE, changes, () if stopping else (WakeNow(),))
            if not self.executor.apply(held, handed):
                return Outcome.LEASE_LOST
            return Outcome.HANDED_OFF
        try:
            self.executor.renew_lease(held, options, now)
        except StoreConflict:
            return Outcome.LEASE_LOST
        return None

    def _keep_failed_run(self, held: Held, failure: AttemptFailure, pending: list[Frame]) -> Outcome | None:
        """Store what a failed attempt sent up to the Run command its ErrorMessage is about.

        The SDK retries a failing `ctx.run` with its own policy (RunOptions.max_attempts, ...) and
        counts its attempts from `StartMessage.retry_count_since_last_stored_entry` only when the Run
        command is the last one replayed (sdk-shared-core, run retries): so the Run command, and the
        entries before it, must be in the journal. They are committed (notifications delivered in
        this attempt, then the commands) and their effects carried out like any committed entry's
        (the next attempt would send the same commands again). After the Run command only the
        completions proposed for kept Run commands are kept (`[Run a, Run b, Propose a, Error about
        b]` keeps a's result, so step a does not run again); nothing else after it is.
        Any other failed attempt commits nothing. Returns an `Outcome` to end with, or None.
        """
        if failure.related_command_type != MessageType.Run or failure.related_command_index is None:
            return None
        new_index = failure.related_command_index - len(held.journal.commands)
        if new_index < 0:  # a Run command already in the journal: nothing new to keep
            return None
        entries = list(failure.entries)
        seen = -1
        for cut, f in enumerate(entries):
            if is_command(f.type) or is_custom(f.type):
                seen += 1
            if seen == new_index:
                if f.type != MessageType.Run:
                    return None  # the ErrorMessage names another command: keep nothing
                entries = entries[: cut + 1] + _proposals_for(held.journal, entries[: cut + 1], entries[cut + 1 :])
                break
        else:
            return None
        kept = pending + entries
        if check(held, kept) is not None:
            return None
        try:
            derived = self.effects.derived_notifications(held, kept)
        except TorporError:
            return None
        committed = self.executor.commit_and_apply(held, kept + derived)
        return committed if isinstance(committed, Outcome) else None


def far_future_ms(now_ms: int) -> int:
    """A time beyond any timer Torpor arms (10 years from `now_ms`), for sweeps."""
    return now_ms + _FAR_FUTURE_MS
