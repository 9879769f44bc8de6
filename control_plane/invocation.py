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
write (`Engine.tell_callers`), so a crash between the two leaves one that tells them again.
Sleep completions are not stored by timers at all: the lease holder derives them from the journal
(a Sleep whose wake-up time has passed), so a timer is only a wake-up and may fire twice or late.

This module owns creation, `advance` and the attempt loop (invoke, check the answer, commit,
suspend, complete, retry or fail). Its collaborators, each in its own module:

- `control_plane.effects.Effects`: what committed entries do beyond the journal (timers, callees,
  awakeables, signals, state and promises) and notifications delivered from outside;
- `control_plane.operations.Operations`: cancel, kill, pause, resume, purge, the deadlock report;
- `control_plane.retention.Retention`: when a completed invocation's journal and record go;
- `control_plane.keyed.Keys`: object keys (one writer per key), state and durable promises.
"""

from __future__ import annotations

import json
import logging
import threading
import time
from collections import Counter
from collections.abc import Mapping
from dataclasses import replace
from urllib.parse import quote

from control_plane import ids
from control_plane.attempt import (
    DEADLINE_HEADER,
    DOORBELL_HEADER,
    EPOCH_HEADER,
    FENCED_HEADER,
    JOURNAL_LENGTH_HEADER,
    AttemptAnswer,
    AttemptFailure,
    answer_too_large,
    check_answer,
    explain_mismatch,
    parse_answer,
    without_handled_cancel,
)
from control_plane.bidi import Streamed, stream_attempt
from control_plane.creation import ITEM_OVERHEAD_BYTES, JOURNAL_ENTRY_LIMIT_BYTES, Creation, inbox_seq
from control_plane.decisions import AfterFailure, completion_changes, decide_failure, suspension_changes
from control_plane.effects import Effects
from control_plane.errors import NotFound, TorporError
from control_plane.failures import clip, stored_failure
from control_plane.held import Held, Outcome
from control_plane.journal import AwaitPoint, Journal, awaited, notification_key
from control_plane.keyed import STATE_COMMANDS, Keys, is_exclusive, is_keyed, is_workflow_run
from control_plane.observability import Metrics, NoMetrics, metered, trace_id_from, traceparent
from control_plane.operations import CANCEL_SIGNAL, KILL_BUDGET_S, Operations
from control_plane.ports import (
    MAX_ITEM_BYTES,
    AnswerTooLarge,
    Clock,
    DeploymentRecord,
    InvocationRecord,
    InvokerError,
    ItemTooLarge,
    JournalBatch,
    Scheduler,
    Store,
    StoreConflict,
    StoreUnavailable,
)
from control_plane.protocol import (
    Frame,
    MessageType,
    encode_frames,
    frame,
    invocation_content_type,
    is_command,
    is_custom,
)
from control_plane.protocol import protocol_pb2 as pb
from control_plane.registry import HandlerOptions, Registry
from control_plane.request_identity import refusal_hint
from control_plane.retention import Retention
from control_plane.settings import Settings
from control_plane.timers import Timers, Wake
from control_plane.waiters import CompletionWaiters

__all__ = ["RUNNABLE", "AttemptAnswer", "AttemptFailure", "Engine", "Outcome", "parse_answer", "rung_since_suspended"]

log = logging.getLogger("torpor.invocation")

RUNNABLE = ("ready", "scheduled", "running", "backing-off", "suspended")
"""Statuses in which a worker may take the lease and make progress."""

_COMPLETING_ROUNDS = 16  # completing writes tried while callers attach (`Engine._completing_write`)
_BUSY_RETRY_MS = 1_000  # a timer that met a busy lease wakes the invocation again this much later
_EFFECTFUL = frozenset(
    {
        MessageType.OneWayCall,
        MessageType.Call,
        MessageType.CompleteAwakeable,
        MessageType.SendSignal,
        MessageType.SetState,
        MessageType.ClearState,
        MessageType.ClearAllState,
        MessageType.CompletePromise,
    }
)
"""Commands whose effects reach beyond the invocation: applied only after re-checking the epoch."""
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


def _chunks(entries: list[Frame], limit: int) -> list[list[Frame]]:
    """Split entries into runs whose framed size stays within `limit` bytes (an entry alone may not)."""
    chunks: list[list[Frame]] = []
    size = limit + 1
    for entry in entries:
        entry_size = len(entry.payload) + 8
        if size + entry_size > limit:
            chunks.append([])
            size = 0
        chunks[-1].append(entry)
        size += entry_size
    return chunks


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
    ) -> None:
        self.store = store
        self.metrics: Metrics = metrics or NoMetrics()
        self.registry = registry
        self.scheduler = scheduler
        self.clock = clock
        self.settings = settings
        self.waiters = waiters
        self.stopping = threading.Event()
        self._knocked: set[str] = set()  # invocations with news for a lease holder in this process (`knock`)
        self.keys = Keys(store, scheduler, clock)
        self.timers = Timers(store, scheduler, clock)  # every timer armed, re-armed or cancelled
        self.retention = Retention(store, registry, clock, settings, self.timers)  # when a completed one goes
        self.effects = Effects(self)  # what committed entries do beyond the journal; notifications
        self.operations = Operations(self)  # cancel, kill, pause, resume, purge, deadlock
        self.creation = Creation(
            store, registry, clock, settings, self.metrics, self.keys, self.retention, self.timers
        )  # ids, records, keys taken at creation
        self.create = self.creation.create
        """`Creation.create`: store a new invocation (the ingress, a Call's callee, a schedule's tick)."""

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
        if len(self._knocked) >= 10_000:
            self._knocked.clear()
        self._knocked.add(invocation_id)

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
        loaded = self.store.load_invocation(invocation_id)
        if loaded is None:
            return Outcome.BUSY
        held = Held.of(replace(loaded, record=record))
        held.meter = counts
        unsure = is_exclusive(record) and bool(record.inbox_seq)  # created on its key; did it take it?
        if unsure and self.store.lock_holder(record.service, record.key) != invocation_id:
            # the key was never taken (a crash between creating it and taking it): wait in the queue
            try:
                self._update(held, status="pending", lease_until_ms=0, inbox_seq=record.inbox_seq)
            except StoreConflict:
                return Outcome.LEASE_LOST
            self.keys.enqueue(held.record)
            return Outcome.BUSY
        if is_exclusive(record) and record.execution_time_ms and record.execution_time_ms <= now:
            # a delayed exclusive invocation is due: from now on it waits its turn for the key
            seq = inbox_seq(now, invocation_id)
            try:
                self._update(held, status="pending", lease_until_ms=0, execution_time_ms=0, inbox_seq=seq)
            except StoreConflict:
                return Outcome.LEASE_LOST
            self.keys.enqueue(held.record)
            return Outcome.BUSY
        fresh = [n for n in held.stored if not held.journal.has(n.key)]
        if record.execution_time_ms > now:  # a delayed invocation starts at its time, whatever arrives
            if any(n.key == f"s{CANCEL_SIGNAL}" for n in fresh):
                return self._fail_terminally(held, 409, "cancelled", "cancelled")
            return self._not_due(held, "scheduled", record.execution_time_ms)
        due_sleep = any(at <= now for at in held.journal.open_sleeps().values())
        if not due_sleep and not fresh:
            due_sleep = self.timers.wait_for_sleep(held, now)
        if not due_sleep:
            self.timers.rearm_read_ahead(held)
        if record.next_retry_at_ms > now and not fresh and not due_sleep:  # woken early: wait again
            return self._not_due(held, "backing-off", record.next_retry_at_ms)
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
            log.exception("advance of %s failed unexpectedly", record.invocation_id, extra=_log_fields(record))
            failure = AttemptFailure(500, f"internal error in the control plane: {type(exc).__name__}: {exc}")
            outcome = self._failed(held, failure, None)
        if outcome == Outcome.LEASE_LOST:
            self.timers.drop_orphans(held)
        return outcome

    def _not_due(self, held: Held, status: str, due_ms: int) -> Outcome:
        """Woken before its time (a duplicate or early timer): arm the timer again and release."""
        due_ms = self.timers.record(held.record.invocation_id, due_ms, held)  # first, so a crash cannot lose it
        try:
            self._update(held, status=status, lease_until_ms=0)
        except StoreConflict:
            self.timers.drop_orphans(held)
            return Outcome.LEASE_LOST
        self.timers.hop(held.record.invocation_id, due_ms)
        return Outcome.NOT_DUE

    def wake(self, wake: Wake) -> Outcome:
        """The one entry of a wake-up (`timers.Wake`), whatever delivered it: a wake-up now
        (`due_ms` 0) advances; a timer's advances once its due time has come (an early one is
        handed back to the scheduler: `NOT_DUE`), its lateness is recorded (`timer_lateness_ms`)
        and its record settled afterwards (`timer_done`)."""
        if not wake.due_ms:
            return self.advance(wake.invocation_id)
        if wake.due_ms > self.clock.now_ms():  # early (clock skew, a tolerant consumer): not yet
            self.timers.hop(wake.invocation_id, wake.due_ms)
            return Outcome.NOT_DUE
        self.timer_fired(wake.invocation_id, wake.due_ms)
        outcome = self.advance(wake.invocation_id)
        self.timer_done(wake.invocation_id, wake.due_ms, outcome)
        return outcome

    def timer_fired(self, invocation_id: str, due_ms: int) -> None:
        """A timer for `due_ms` fired now: record its lateness (`timer_lateness_ms`). Part of `wake`,
        called alone by a scheduler that measures it as the timer fires (the local one)."""
        self.metrics.observe("timer_lateness_ms", max(0, self.clock.now_ms() - due_ms))

    def timer_done(self, invocation_id: str, due_ms: int, outcome: object) -> None:
        """Drop a fired timer's record, unless its wake-up may not have been used. Part of `wake`,
        called alone by a scheduler that ran one advance for several timers (the local one).

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
            if record is not None and self.store.may_delete and self.retention.expired(record):
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
            return self._complete(held)
        attempted = False
        while True:
            if self._knocked and record.invocation_id in self._knocked:  # news since it was read: look
                self._knocked.discard(record.invocation_id)
                if not self._reload(held):  # killed (or taken over): run no more handler code
                    return Outcome.LEASE_LOST
            pending = self.effects.pending(held)
            if held.awaiting is not None and not (
                held.journal.can_resume(held.awaiting) or awaited(held.awaiting, map(notification_key, pending))
            ):
                suspended = self._suspend(held)
                if suspended is not None:
                    return suspended
                continue  # a notification arrived meanwhile: look again
            handed = self._hand_off_or_renew(held, options, deadline_ms, attempted)
            if handed is not None:
                return handed
            attempted = True
            if self._bidi(held):
                streamed = self._stream(held, options, pending)
                if isinstance(streamed, Outcome):
                    return streamed
                if streamed is None:  # another commit landed first mid-stream: start over from the journal
                    held.awaiting = None
                    continue
                result, pending = streamed.result, streamed.pending  # pending: [] once committed mid-stream
            else:
                sent_length = len(held.journal)
                result = self._attempt(held, options, pending)
                if len(held.journal) > sent_length:  # the function committed steps itself, `pending` first
                    pending = []
            if isinstance(result, AttemptFailure):
                result = explain_mismatch(held.journal, result)
                kept = self._keep_failed_run(held, result, pending)
                if isinstance(kept, Outcome):
                    return kept
                return self._failed(held, result, options)
            entries = pending + result.entries
            awaited_now = None if result.ended else result.awaiting
            refused = _check(held, entries, awaited_now, len(pending), result.suspension, ended=result.ended)
            if refused is not None:
                return self._failed(held, refused, options)
            awaiting = without_handled_cancel(held.journal, pending, result.awaiting)
            try:
                derived = self.effects.derived_notifications(held, entries)
            except TorporError as exc:
                return self._failed(held, AttemptFailure(exc.status, exc.message), options)
            start = len(held.journal)
            committed = self._commit_and_apply(held, entries + derived)
            if isinstance(committed, Outcome):
                return committed
            if committed:  # another commit landed first: apply its effects, start over from the journal
                try:
                    self.effects.apply(held, start)
                except StoreConflict:
                    return Outcome.LEASE_LOST
                held.awaiting = None
                continue
            held.record = replace(held.record, failures_in_a_row=0)  # saved with the next write
            if result.ended:
                return self._complete(held)
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
            try:
                self._update(held, lease_until_ms=0, effects_applied_upto=len(held.journal))
            except StoreConflict:
                return Outcome.LEASE_LOST
            if not stopping:  # when stopping, the next process's start-up sweep resumes it
                self.scheduler.wake_now(held.record.invocation_id)
            return Outcome.HANDED_OFF
        if held.record.lease_until_ms - now < options.inactivity_timeout_ms + self.settings.lease_margin_ms // 2:
            try:
                self._update(held, lease_until_ms=now + self.creation.lease_ms(options))
            except StoreConflict:
                return Outcome.LEASE_LOST
        return None

    def _commit_and_apply(self, held: Held, entries: list[Frame]) -> Outcome | bool:
        """`_commit`, then carry out the committed entries' effects if the lease is still ours.

        Returns what `_commit` does: an `Outcome` to end with, True if another commit landed first
        (nothing of ours stored), False when stored and applied.
        """
        start = len(held.journal)
        committed = self._commit(held, entries)
        if committed is not False:
            return committed
        effectful = [f for f in entries if f.type in _EFFECTFUL]
        # an exclusive handler's state writes are fenced by its key (a kill releases it): no check needed
        fenced = is_exclusive(held.record) and all(f.type in STATE_COMMANDS for f in effectful)
        if effectful and not fenced:
            try:  # still ours? A kill (or a successor) moved the epoch: carry out nothing
                self._update(held)
            except StoreConflict:
                return Outcome.LEASE_LOST
        try:
            self.effects.apply(held, start)
        except StoreConflict:  # it lost its key, or its epoch moved while it created callees: killed meanwhile
            return self._killed_while_calling(held) or Outcome.LEASE_LOST
        if any(f.type in (MessageType.Call, MessageType.OneWayCall) for f in effectful):
            return self._killed_while_calling(held)
        return False

    def _killed_while_calling(self, held: Held) -> Outcome | bool:
        """After creating callees: a kill that came between the epoch check and their creation read
        the journal when they did not exist yet, so it could not kill them; kill them now, for
        `KILL_BUDGET_S`, the rest in wake-ups (`Operations.kill_started_callees`). One read per
        commit with a Call or OneWayCall. False if the lease is still ours."""
        current = self.store.get_invocation(held.record.invocation_id)
        if current is not None and current.epoch == held.record.epoch:
            return False
        if current is not None and current.completion == "killed":
            deadline = time.monotonic() + KILL_BUDGET_S
            self.operations.kill_started_callees(held.record.invocation_id, 1, deadline, held)
        return Outcome.LEASE_LOST

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
        if _check(held, kept) is not None:
            return None
        try:
            derived = self.effects.derived_notifications(held, kept)
        except TorporError:
            return None
        committed = self._commit_and_apply(held, kept + derived)
        return committed if isinstance(committed, Outcome) else None

    def _attempt(self, held: Held, options: HandlerOptions, pending: list[Frame]) -> AttemptAnswer | AttemptFailure:
        """One request to the pinned deployment with Start + the whole journal + pending notifications."""
        sent_length = len(held.journal)
        request = self._request(held, options, pending)
        if isinstance(request, AttemptFailure):
            return request
        deployment, headers, body, timeout_ms = request
        record = held.record
        version = record.protocol_version
        labels = {"service": record.service, "handler": record.handler}
        started = time.perf_counter()
        try:
            reply = self.registry.invoker.request(
                deployment.endpoint,
                "POST",
                f"/invoke/{record.service}/{record.handler}",
                headers,
                body,
                timeout_ms / 1000,
                auth=deployment.auth or None,
            )
        except InvokerError as exc:
            self.metrics.observe("handler_latency_ms", (time.perf_counter() - started) * 1000, **labels)
            if isinstance(exc, AnswerTooLarge):  # the same failed attempt as on a stream (bidi)
                return answer_too_large(exc)
            return AttemptFailure(503, f"could not reach deployment {deployment.deployment_id}: {exc.message}")
        self.metrics.observe("handler_latency_ms", (time.perf_counter() - started) * 1000, **labels)
        if not self._after_checkpoints(held, reply.headers, sent_length):
            return AttemptFailure(409, "the attempt lost its lease while the function committed steps")
        refused = self.refused_reply(reply.status, reply.headers, reply.body, version)
        if refused is not None:
            return refused
        return parse_answer(reply.body)

    def _bidi(self, held: Held) -> bool:
        """True if the pinned deployment is invoked in bidirectional mode (registered so, see
        `Registry.discover_mode`) and the invoker can open HTTP/2 streams."""
        try:
            deployment = self.registry.deployment(held.record.deployment_id)
        except NotFound:
            return False  # `_attempt` says so
        return deployment.protocol_mode == "BIDI_STREAM" and hasattr(self.registry.invoker, "open_stream")

    def _stream(self, held: Held, options: HandlerOptions, pending: list[Frame]) -> Streamed | Outcome | None:
        """One attempt in bidirectional mode (`control_plane.bidi`): run results are committed and
        acknowledged on the open request; a kill or a cancel knocked meanwhile (`knock`) reaches
        it while it waits for the SDK. Returns what `bidi.stream_attempt` does."""
        request = self._request(held, options, pending)
        if isinstance(request, AttemptFailure):
            return Streamed(request, pending)
        deployment, headers, body, _ = request
        record = held.record
        labels = {"service": record.service, "handler": record.handler}

        def timeout_s() -> float:  # never outlive the lease (extended at each commit)
            lease_left_ms = held.record.lease_until_ms - self.clock.now_ms() - self.settings.lease_margin_ms // 2
            return max(1_000, min(options.inactivity_timeout_ms, lease_left_ms)) / 1000

        def refused(status: int, answered: Mapping[str, str], answer: bytes) -> AttemptFailure | None:
            return self.refused_reply(status, answered, answer, record.protocol_version)

        def news() -> list[Frame] | Outcome | None:  # see `bidi.News`: one read per knock, none otherwise
            if not (self._knocked and record.invocation_id in self._knocked):
                return None
            self._knocked.discard(record.invocation_id)
            if not self._reload(held):  # killed (or taken over): no more handler code, nothing committed
                return Outcome.LEASE_LOST
            return self.effects.pending(held)

        started = time.perf_counter()
        try:
            stream = self.registry.invoker.open_stream(  # type: ignore[attr-defined]  # see `_bidi`
                deployment.endpoint, "POST", f"/invoke/{record.service}/{record.handler}", headers, timeout_s()
            )
        except InvokerError as exc:
            failure = AttemptFailure(503, f"could not reach deployment {deployment.deployment_id}: {exc.message}")
            return Streamed(failure, pending)
        try:
            return stream_attempt(
                stream,
                body,
                held,
                options,
                pending,
                lambda entries: self._commit_streamed(held, options, entries),
                refused,
                timeout_s,
                news,
                self.settings.max_answer_bytes,
            )
        finally:
            self.metrics.observe("handler_latency_ms", (time.perf_counter() - started) * 1000, **labels)

    def _commit_streamed(
        self, held: Held, options: HandlerOptions, entries: list[Frame]
    ) -> list[Frame] | Outcome | AttemptFailure | None:
        """Commit what the SDK sent so far on a stream (see `bidi.Commit`): checked like an answer,
        committed with its derived notifications and applied; the lease is extended if it runs low.
        Returns the derived notifications (to send on the stream), an `Outcome`, a failure, or None
        when another commit landed first."""
        refused = _check(held, entries)
        if refused is not None:
            return refused
        try:
            derived = self.effects.derived_notifications(held, entries)
        except TorporError as exc:
            return AttemptFailure(exc.status, exc.message)
        start = len(held.journal)
        committed = self._commit_and_apply(held, entries + derived)
        if isinstance(committed, Outcome):
            return committed
        if committed:
            try:
                self.effects.apply(held, start)
            except StoreConflict:
                return Outcome.LEASE_LOST
            return None
        held.record = replace(held.record, failures_in_a_row=0)
        now = self.clock.now_ms()
        if held.record.lease_until_ms - now < options.inactivity_timeout_ms + self.settings.lease_margin_ms // 2:
            try:
                self._update(held, lease_until_ms=now + self.creation.lease_ms(options))
            except StoreConflict:
                return Outcome.LEASE_LOST
        return derived

    def refused_reply(
        self, status: int, headers: Mapping[str, str], body: bytes, version: int
    ) -> AttemptFailure | None:
        """The failure an answer's HTTP status or content-type means (415, non-200, a content-type
        other than the negotiated protocol's: 571); None if the answer can be read."""
        content_type = invocation_content_type(version)
        if status == 415:
            return AttemptFailure(415, f"the deployment does not accept service protocol V{version} ({content_type})")
        if status != 200:
            text = body[:300].decode("utf-8", "replace").strip() or "(no body)"
            hint = refusal_hint(status, getattr(self.registry.invoker, "request_identity", None))
            return AttemptFailure(status, f"the deployment answered HTTP {status}: {text}{hint}")
        answered = headers.get("content-type", "")
        if answered.split(";")[0].strip().lower() != content_type:
            shown = clip(answered, 200) if answered else "no content-type"
            return AttemptFailure(
                571, f"the deployment answered with {shown}, not the negotiated service protocol's {content_type}"
            )
        return None

    def _request(
        self, held: Held, options: HandlerOptions, pending: list[Frame]
    ) -> tuple[DeploymentRecord, dict[str, str], bytes, int] | AttemptFailure:
        """An attempt's request: `(deployment, headers, body, timeout_ms)`, body = Start + journal +
        `pending`; counts the attempt (record, metrics). A 404 failure if the deployment is gone."""
        record = held.record
        try:
            deployment = self.registry.deployment(record.deployment_id)
        except NotFound as exc:
            return AttemptFailure(404, f"{exc.message}: the invocation is pinned to it; register it again")
        version = record.protocol_version
        journal_length = len(held.journal)
        same_prefix = journal_length <= record.retry_at_length
        start = pb.StartMessage(
            id=ids.invocation_id_bytes(record.invocation_id),
            debug_id=record.invocation_id,
            known_entries=journal_length + len(pending),
            key=record.key,
            partial_state=False,
            retry_count_since_last_stored_entry=record.retry_count if same_prefix else 0,
        )
        if same_prefix and record.retry_count and record.retry_since_ms:
            start.duration_since_last_stored_entry = max(0, self.clock.now_ms() - record.retry_since_ms)
        if held.state is not None:
            entries, partial = self.keys.start_state(
                held.state, options.enable_lazy_state, self.settings.eager_state_max_bytes
            )
            start.state_map.extend(entries)  # type: ignore[arg-type]
            start.partial_state = partial
        if version >= 6:
            start.random_seed = record.random_seed
        if version >= 7 and record.idempotency_key:
            start.idempotency_key = record.idempotency_key
        content_type = invocation_content_type(version)
        headers = {
            **deployment.additional_headers,
            "content-type": content_type,
            "accept": content_type,
            "x-restate-invocation-id": record.invocation_id,
            "traceparent": traceparent(record.trace_id or trace_id_from({}), record.invocation_id),
        }
        if record.key:  # URL-encoded: keys are any UTF-8 string, headers are not
            headers["x-restate-service-key"] = quote(record.key, safe="")
        body = encode_frames([frame(start), *held.journal.frames, *pending])
        held.record = replace(record, attempts=record.attempts + 1)
        # never outlive the lease: a worker still inside its attempt must not meet its successor
        lease_left_ms = record.lease_until_ms - self.clock.now_ms() - self.settings.lease_margin_ms // 2
        timeout_ms = max(1_000, min(options.inactivity_timeout_ms, lease_left_ms))
        headers.update(self._checkpoint_headers(held, timeout_ms))
        self.metrics.count("attempts", service=record.service, handler=record.handler)
        if record.attempts == 0:
            self.metrics.count("invocations_started", service=record.service, handler=record.handler)
        log.debug("attempt %d of %s", record.attempts + 1, record.invocation_id, extra=_log_fields(held.record))
        return deployment, headers, body, timeout_ms

    # --- in-process checkpoints (adapters/aws/checkpoints.py) ------------------------------------

    def _checkpoint_headers(self, held: Held, timeout_ms: int) -> dict[str, str]:
        """What a function with in-process checkpoints needs to commit run results itself, fenced
        like `_commit` (sent with every attempt; the SDK ignores them): the attempt's epoch, the
        stored journal's length and the time (epoch ms) after which it commits nothing more and
        lets the SDK suspend, so its answer comes within `timeout_ms` (four fifths of it), and the
        doorbell as read (a notification stored since, such as a cancel, stops its commits)."""
        deadline_ms = self.clock.now_ms() + timeout_ms * 4 // 5
        return {
            EPOCH_HEADER: str(held.record.epoch),
            JOURNAL_LENGTH_HEADER: str(len(held.journal)),
            DEADLINE_HEADER: str(deadline_ms),
            DOORBELL_HEADER: str(held.record.doorbell),
        }

    def _after_checkpoints(self, held: Held, headers: Mapping[str, str], sent_length: int) -> bool:
        """After an attempt whose function committed steps (answer header `x-torpor-journal-length`
        beyond the length sent): re-read the journal and carry out the committed entries' effects
        (idempotent), so the answer's entries follow them. After one that stopped committing because
        a notification arrived (answer header `x-torpor-fenced`), re-read it too, so the next attempt
        delivers the notification (a cancel from another process). False if our epoch is gone."""
        try:
            length = int(headers.get(JOURNAL_LENGTH_HEADER, "0"))
        except ValueError:
            length = 0
        if length <= sent_length:
            return FENCED_HEADER not in headers or self._reload(held)
        if not self._reload(held):
            return False
        try:
            self.effects.apply(held, sent_length)
        except StoreConflict:
            return False
        return True

    def _commit(self, held: Held, entries: list[Frame]) -> Outcome | bool:
        """Append entries at the journal's length. False: committed (or nothing to commit).

        Entries go in as few batches as fit in DynamoDB items, each one conditional write at the
        journal's length at that point. Losing the first write means another worker committed at
        this index: reload and return True (start over), or `Outcome.LEASE_LOST` if our epoch is
        gone. One entry too large for an item ends the invocation with a 413 (`Outcome.COMPLETED`).
        """
        limit = JOURNAL_ENTRY_LIMIT_BYTES
        for chunk in _chunks(entries, limit):
            batch = JournalBatch(len(held.journal), encode_frames(chunk), held.record.epoch, self.clock.now_ms())
            try:
                if len(batch.entries) > limit:
                    raise ItemTooLarge(f"{len(batch.entries)} bytes")
                self.store.append_batch(held.record.invocation_id, batch)
            except ItemTooLarge:
                message = (
                    f"a journal entry takes {len(batch.entries)} bytes, more than the {limit} bytes a journal item "
                    f"holds (a DynamoDB item's {MAX_ITEM_BYTES} bytes, less room for its other attributes); keep "
                    "values passed through ctx.run, state, calls and awakeables smaller"
                )
                return self._fail_terminally(held, 413, message)
            except StoreConflict:
                if not self._reload(held):
                    return Outcome.LEASE_LOST
                log.warning("journal of %s moved on under the lease holder; re-invoking", held.record.invocation_id)
                return True
            held.journal.extend(chunk)
        return False

    def _reload(self, held: Held) -> bool:
        """Re-read record, journal and notifications; False if our epoch is gone."""
        loaded = self.store.load_invocation(held.record.invocation_id)
        if loaded is None or loaded.record.epoch != held.record.epoch:
            return False
        fresh = Held.of(loaded)
        held.record = replace(loaded.record, attempts=max(loaded.record.attempts, held.record.attempts))
        held.journal, held.stored = fresh.journal, fresh.stored
        return True

    # --- endings ----------------------------------------------------------------------------------

    def tell_callers(self, record: InvocationRecord, told: frozenset[str] = frozenset()) -> frozenset[str]:
        """Tell every caller of `record` (as it will be stored completed: its `output` or `failure`
        set) its result: the invocation whose Call created it and those attached later (`callers`),
        each a CallCompletion stored through `Effects.notify` (first per key wins, so telling again
        changes nothing). Those in `told` ("{caller_id}/{completion_id}") are passed over. Returns
        every caller `record` names, in that form.

        Called BEFORE the completing write (`_complete`, `_fail_terminally`, the terminal branch of
        `_failed`, `Operations._finish_now`): a crash before the write leaves the invocation not
        completed, so it is recovered (or the operation retried) and tells again; after the write
        every caller it knew of was told already. A worker's completing write fails if a caller
        attached meanwhile (`_completing_write`); a kill's cannot, and tells such a caller after the
        write (`ended`, from the record the write read back)."""
        callers = set(record.callers)
        if record.caller_id:
            callers.add(f"{record.caller_id}/{record.caller_completion_id}")
        for caller in sorted(callers - told):
            caller_id, _, completion_id = caller.rpartition("/")
            self.effects.tell_caller(record, caller_id, int(completion_id))
        return frozenset(callers)

    def _completing_write(self, held: Held, changes: Mapping[str, object]) -> frozenset[str]:
        """Tell the callers (`tell_callers`, of the invocation as `changes` complete it), then make
        the completing write; returns the callers told (`ended` tells any others).

        An invocation others can attach to (an idempotency key's, a workflow's run) is read again
        first (one read), and its completing write is conditional on the doorbell that read found:
        an attach rings it (`Store.attach_caller`), so a caller attached after the read makes the
        write fail, and the callers are read and told again before it is tried again (a
        notification landing meanwhile does the same, harmlessly). So every caller is told before
        the write, and a crash after it loses none.

        Raises `StoreConflict` if the epoch moved on (or the doorbell kept moving, 16 times).
        """
        attachable = bool(held.record.idempotency_key) or is_workflow_run(held.record)
        for _ in range(_COMPLETING_ROUNDS):
            record, doorbell = held.record, None
            if attachable:
                current = self.store.get_invocation(record.invocation_id)
                if current is None or current.epoch != record.epoch:
                    raise StoreConflict(f"{record.invocation_id}: its epoch moved on before it completed")
                record, doorbell = replace(record, callers=current.callers), current.doorbell
            told = self.tell_callers(replace(record, **changes))  # type: ignore[arg-type]
            try:
                self._update(held, doorbell=doorbell, **changes)
            except StoreConflict:
                if doorbell is None:
                    raise
                continue  # rung since the read (a caller attached): read and tell again
            return told
        raise StoreConflict(f"{held.record.invocation_id}: its doorbell kept ringing while it completed")

    def ended(self, record: InvocationRecord, told: frozenset[str] = frozenset()) -> None:
        """After the invocation completed (`record` as the completing write left it): wake waiting
        callers, tell the callers not in `told` (attached after they were told, before the write),
        hand its object key on, and start the retention of a workflow's state and promises.
        Its journal and record go when the sweep finds their retention ended (`retire`): the
        completing write put the invocation in the store's retention order, no timer is armed."""
        self.waiters.notify(record.invocation_id)
        outcome = "success" if record.failure is None else f"failure-{dict(record.failure).get('code', 500)}"
        self.metrics.count("invocations_completed", service=record.service, handler=record.handler, outcome=outcome)
        log.info("%s completed: %s", record.invocation_id, outcome, extra=_log_fields(record))
        self.tell_callers(record, told)
        if is_exclusive(record):
            self.keys.release(record)
        if is_workflow_run(record):
            options = self.registry.pinned_options(record.deployment_id, record.service, record.handler)
            retention_ms = options.workflow_retention_ms or self.settings.workflow_retention_ms
            self.store.expire_keyed(record.service, record.key, (self.clock.now_ms() + retention_ms) // 1000)

    def _suspend(self, held: Held) -> Outcome | None:
        """Release the lease as `suspended`, unless a notification was stored meanwhile (then None)."""
        assert held.awaiting is not None
        sleeps = [at for cid, at in held.journal.open_sleeps().items() if cid in held.awaiting.completions]
        doorbell = held.record.doorbell
        changes = suspension_changes(doorbell, held.awaiting.to_json(), sleeps, len(held.journal))
        try:
            self._update(held, doorbell=doorbell, **changes)
        except StoreConflict:
            return None if self._reload(held) else Outcome.LEASE_LOST
        self.metrics.count("suspensions", service=held.record.service, handler=held.record.handler)
        return Outcome.SUSPENDED

    def _fail_terminally(self, held: Held, code: int, message: str, completion: str = "failed") -> Outcome:
        """Complete the invocation with a failure that no retry can mend (e.g. 413: too large);
        `completion` is the kind stored with it (`failed`, or `cancelled` before it started).

        Committed entries whose effects are not known applied (a OneWayCall committed in an earlier
        batch of the answer whose next batch is too large) are applied first, as in `_complete`: a
        completed invocation is never advanced again, so what it committed would never happen. If
        that fails the exception propagates and the attempt fails (`_run_guarded`)."""
        if held.effects_known_upto() < len(held.journal):
            try:
                self.effects.apply(held, held.effects_known_upto())
            except StoreConflict:  # it lost its key, or its epoch moved: killed meanwhile
                return Outcome.LEASE_LOST
        now = self.clock.now_ms()
        changes = completion_changes(
            now,
            completion,
            self.retention.changes(held.record, now),
            failure={"code": code, "message": message},
            journal_length=len(held.journal),
        )
        try:
            told = self._completing_write(held, changes)  # callers told before the write
        except StoreConflict:
            return Outcome.LEASE_LOST
        self.timers.cancel_sleeps(held)
        self.ended(held.record, told)
        return Outcome.COMPLETED

    def _complete(self, held: Held) -> Outcome:
        """Complete the invocation with its journal's Output, once every committed entry's effect is applied.

        Effects not known applied (one failed after its commit) are applied first; if that fails
        the exception propagates and the attempt fails (`_run_guarded`): an invocation never
        completes as succeeded without the state writes, timers and calls it committed.
        """
        if held.effects_known_upto() < len(held.journal):
            try:
                self.effects.apply(held, held.effects_known_upto())
            except StoreConflict:  # an exclusive handler that lost its key (killed meanwhile)
                return Outcome.LEASE_LOST
        output = held.journal.output()
        if output is None:
            return self._failed(held, AttemptFailure(571, "the handler ended without writing an Output"), None)
        failed = output.WhichOneof("result") == "failure"
        failure = stored_failure(output.failure) if failed else None
        result_bytes = len(json.dumps(failure).encode()) if failed else len(output.value.content)
        if result_bytes + len(held.record.input_entry) + ITEM_OVERHEAD_BYTES > MAX_ITEM_BYTES:
            message = (
                f"the {'failure' if failed else 'output'} ({result_bytes} bytes) and input "
                f"({len(held.record.input_entry)} bytes) do not fit in one DynamoDB item ({MAX_ITEM_BYTES} bytes); "
                f"{'fail with a smaller failure' if failed else 'return a smaller value'}"
            )
            return self._fail_terminally(held, 413, message)
        now = self.clock.now_ms()
        retention, length = self.retention.changes(held.record, now), len(held.journal)
        if failure is not None:  # a failure after the cancel signal reached the handler is its cancellation
            completion = "cancelled" if held.journal.has(f"s{CANCEL_SIGNAL}") else "failed"
            changes = completion_changes(now, completion, retention, failure=failure, journal_length=length)
        else:
            value = output.value.content
            changes = completion_changes(now, "succeeded", retention, output=value, journal_length=length)
        changes["attempts"] = held.record.attempts
        try:
            told = self._completing_write(held, changes)  # callers told before the write
        except StoreConflict:
            return Outcome.LEASE_LOST
        except ItemTooLarge:  # never retried forever: the caller sees why instead (callers told above keep
            # the result they were told first: a CallCompletion's value fits, it is what the check above measured)
            message = (
                f"the invocation's result and input ({len(held.record.input_entry)} bytes) do not fit in one "
                f"DynamoDB item ({MAX_ITEM_BYTES} bytes); return or fail with a smaller value"
            )
            return self._fail_terminally(held, 413, message)
        self.timers.cancel_sleeps(held)
        self.ended(held.record, told)
        return Outcome.COMPLETED

    def _failed(self, held: Held, failure: AttemptFailure, options: HandlerOptions | None) -> Outcome:
        """Record a failed attempt; retry later by policy, pause, or fail the invocation."""
        record = held.record
        if self.stopping.is_set():  # the attempt broke because this process stops: not the handler's fault
            try:
                self._update(held, lease_until_ms=0)
            except StoreConflict:
                return Outcome.LEASE_LOST
            return Outcome.HANDED_OFF
        policy = (
            options or self.registry.pinned_options(record.deployment_id, record.service, record.handler)
        ).retry_policy
        now = self.clock.now_ms()
        decision = decide_failure(
            record, len(held.journal), failure, policy, now, self.retention.changes(held.record, now)
        )
        log.info(
            "attempt %d of %s failed: %s %s",
            record.attempts,
            record.invocation_id,
            failure.code,
            failure.message,
            extra=_log_fields(record, code=failure.code),
        )
        self.metrics.count("attempt_failures", service=record.service, handler=record.handler)
        try:
            if decision.then in (AfterFailure.FAIL, AfterFailure.KILL):
                killed = decision.then is AfterFailure.KILL  # as the kill API: its open callees are killed too
                told = self._completing_write(held, decision.changes)  # callers told before the write
                self.timers.cancel_sleeps(held)
                deadline = time.monotonic() + KILL_BUDGET_S
                if killed:
                    self.operations.kill_callees_behind(held, deadline)
                self.ended(held.record, told)
                if killed:
                    self.operations.kill_started_callees(record.invocation_id, 1, deadline, held)
                return Outcome.COMPLETED
            if decision.then is AfterFailure.PAUSE:
                # conditional on the doorbell: a cancel stored meanwhile must not be parked
                self._update(held, doorbell=record.doorbell, **decision.changes)
                self.waiters.notify(record.invocation_id)
                self.metrics.count("invocations_paused", service=record.service, handler=record.handler)
                return Outcome.PAUSED
            due = self.timers.record(record.invocation_id, decision.retry_at_ms, held)  # first: a crash cannot lose it
            self._update(held, **decision.changes)
        except StoreConflict:
            if self._reload(held):  # the doorbell rang while pausing: deliver what arrived
                try:
                    self._update(held, lease_until_ms=0)
                except StoreConflict:
                    return Outcome.LEASE_LOST
                self.scheduler.wake_now(record.invocation_id)
                return Outcome.BACKING_OFF
            return Outcome.LEASE_LOST
        self.timers.hop(record.invocation_id, due)
        return Outcome.BACKING_OFF

    def _update(self, held: Held, *, doorbell: int | None = None, **changes: object) -> None:
        """Conditional update on our epoch (and the doorbell); keeps the in-memory record in step."""
        changes.setdefault("modified_at_ms", self.clock.now_ms())
        changes.setdefault("attempts", held.record.attempts)  # counted in memory, saved with every write
        if held.record.inbox_seq:  # it holds its key (`_advance` checked, or it took it when created)
            changes.setdefault("inbox_seq", "")
        applied = changes.get("effects_applied_upto")
        if isinstance(applied, int):  # never past what was applied: an effect may have failed after its commit
            changes["effects_applied_upto"] = min(applied, held.effects_known_upto())
        if held.meter:  # AWS requests made since the last write, folded in with this one
            changes.setdefault("requests", dict(Counter(held.record.requests or {}) + held.meter))
        # completing an invocation others can attach to (its id is an idempotency key's or a workflow
        # run's): read back, in the same request, the `callers` attached meanwhile
        completing = changes.get("status") == "completed" and (
            bool(held.record.idempotency_key) or is_workflow_run(held.record)
        )
        fresh = self.store.update_invocation(
            held.record.invocation_id, held.record.epoch, doorbell=doorbell, returning=completing, **changes
        )
        held.record = fresh or replace(held.record, **changes)  # type: ignore[arg-type]
        held.meter.clear()


def _check(
    held: Held,
    entries: list[Frame],
    awaiting: AwaitPoint | None = None,
    sent: int = 0,
    suspension: pb.SuspensionMessage | None = None,
    *,
    ended: bool = False,
) -> AttemptFailure | None:
    """`attempt.check_answer` of `entries` against `held`'s journal, for its target's service and
    handler type."""
    record = held.record
    return check_answer(
        held.journal,
        entries,
        awaiting,
        sent,
        suspension,
        ended=ended,
        service_type=record.service_type,
        handler_type=record.handler_type,
    )


def far_future_ms(now_ms: int) -> int:
    """A time beyond any timer Torpor arms (10 years from `now_ms`), for sweeps."""
    return now_ms + _FAR_FUTURE_MS


def _log_fields(record: InvocationRecord, **more: object) -> dict[str, object]:
    """The structured fields of a log line about `record` (JSON keys on Lambda and with --log-format json)."""
    return {
        "invocation_id": record.invocation_id,
        "service": record.service,
        "handler": record.handler,
        "attempt": record.attempts,
        **more,
    }
