"""The executor: carries out what the engine decided for an invocation it holds the lease on.

The journal first, conditionally: `commit` appends a batch at the journal's current length under
the lease's epoch (losing that write means another commit landed first). Then each effect of what
was committed, idempotently (`commit_and_apply`, through `Effects.apply`; the epoch is re-checked
first when the entries reach beyond the invocation). Then the decision (`decisions.Decision`), through
the one entry `apply`: its transition, one conditional write on the record (`update`, or
`completing_write` for COMPLETE), then its effects in order, each idempotent. `suspend`, `complete`,
`fail_terminally` and `failed` (back off, pause, fail or kill, as `decisions.decide_failure` says)
decide and hand the decision to `apply`. An effect of a committed entry that fails propagates: the
invocation never completes as a success without it (`complete` applies what is not known applied
first), and `Engine._run_guarded` counts it as a failed attempt.

The pure rules (what each transition writes) are in `control_plane.decisions`; the engine
(`control_plane.invocation.Engine`) chooses the decision, this module carries it out.
"""

from __future__ import annotations

import contextlib
import json
import logging
import threading
import time
from collections import Counter
from collections.abc import Callable, Mapping
from dataclasses import replace

from control_plane.attempt import AttemptFailure
from control_plane.creation import BATCH_BYTES, JOURNAL_ENTRY_LIMIT_BYTES, inbox_seq, lease_ms
from control_plane.decisions import (
    ArmTimer,
    CancelSleeps,
    Decision,
    Enqueue,
    KillCalleesBehind,
    KillStartedCallees,
    NotifyWaiters,
    TellCallers,
    Transition,
    WakeNow,
    completion_changes,
    decide_failure,
    decide_suspension,
)
from control_plane.effects import Effects
from control_plane.endings import Endings
from control_plane.errors import TorporError
from control_plane.failures import stored_failure
from control_plane.held import Held, Outcome, log_fields
from control_plane.keyed import STATE_COMMANDS, Keys, is_exclusive, is_workflow_run
from control_plane.observability import Metrics
from control_plane.operations import CANCEL_SIGNAL, KILL_BUDGET_S, Operations
from control_plane.ports import (
    MAX_ITEM_BYTES,
    Clock,
    InvocationRecord,
    ItemTooLarge,
    JournalBatch,
    Store,
    StoreConflict,
)
from control_plane.journal import notification_key
from control_plane.protocol import Frame, MessageType, encode_frames, is_notification
from control_plane.protocol import protocol_pb2 as pb
from control_plane.registry import HandlerOptions, Registry
from control_plane.retention import Retention
from control_plane.settings import Settings
from control_plane.timers import Timers
from control_plane.waiters import CompletionWaiters

log = logging.getLogger("torpor.invocation")

_COUNTED = {Transition.SUSPEND: "suspensions", Transition.PAUSE: "invocations_paused"}
"""Transitions counted (`Metrics.count`, by service and handler) once written."""
_AFTER_FAILURE = {
    Transition.COMPLETE: Outcome.COMPLETED,
    Transition.PAUSE: Outcome.PAUSED,
    Transition.BACK_OFF: Outcome.BACKING_OFF,
}
"""The outcome of a failed attempt's decision once written."""
_COMPLETING_ROUNDS = 16  # completing writes tried while callers attach (`Executor.completing_write`)
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


class Executor:
    """Applies the engine's decisions for a held invocation (see the module doc). Thread-safe; no
    state of its own between calls.

    Args:
        store, registry, clock, settings, metrics, waiters, retention, timers, keys: the engine's
            ports and parts.
        effects: what committed entries do beyond the journal (`Effects.apply`).
        endings: callers told before a completing write, and what follows it.
        operations: the kill of callees when the retry policy kills (`Operations.kill_callees_behind`).
        stopping: set when this process stops: a failed attempt is then handed off, not counted.
    """

    def __init__(
        self,
        store: Store,
        registry: Registry,
        clock: Clock,
        settings: Settings,
        metrics: Metrics,
        waiters: CompletionWaiters,
        retention: Retention,
        timers: Timers,
        keys: Keys,
        effects: Effects,
        endings: Endings,
        operations: Operations,
        stopping: threading.Event,
    ) -> None:
        self.store = store
        self.registry = registry
        self.clock = clock
        self.settings = settings
        self.metrics = metrics
        self.waiters = waiters
        self.retention = retention
        self.timers = timers
        self.scheduler = timers.scheduler
        self.keys = keys
        self.effects = effects
        self.endings = endings
        self.operations = operations
        self.stopping = stopping

    def renew_lease(self, held: Held, options: HandlerOptions, now: int) -> None:
        """Extend the lease to a full one (`creation.lease_ms`) from `now` (ms since the epoch) if less
        than an attempt's worth (the inactivity timeout and half the margin) is left; nothing otherwise.
        Raises `StoreConflict` if the epoch moved on."""
        if held.record.lease_until_ms - now < options.inactivity_timeout_ms + self.settings.lease_margin_ms // 2:
            renewed = Decision(Transition.RENEW_LEASE, {"lease_until_ms": now + lease_ms(options, self.settings)})
            if not self.apply(held, renewed):
                raise StoreConflict(f"{held.record.invocation_id}: its epoch moved on")

    def commit_new(self, held: Held, entries: list[Frame]) -> list[Frame] | Outcome | AttemptFailure | None:
        """The one commit path of an attempt's checked entries (an answer, or what the SDK sent so
        far on a stream): with the notifications they derive (`Effects.derived_notifications`),
        committed and applied (`commit_and_apply`). Returns the derived notifications when stored,
        None when another commit landed first (its effects applied: start over from the journal),
        an `Outcome` to end with, or the failure of an unknown callee (`NotFound`, ...)."""
        try:
            derived = self.effects.derived_notifications(held, entries)
        except TorporError as exc:
            return AttemptFailure(exc.status, exc.message)
        start = len(held.journal)
        committed = self.commit_and_apply(held, entries + derived)
        if isinstance(committed, Outcome):
            return committed
        if committed:  # another commit landed first: apply its effects, start over from the journal
            try:
                self.effects.apply(held, start)
            except StoreConflict:
                return Outcome.LEASE_LOST
            return None
        held.record = held.record.evolve(failures_in_a_row=0)  # saved with the next write
        return derived

    def commit_and_apply(self, held: Held, entries: list[Frame]) -> Outcome | bool:
        """`commit`, then carry out the committed entries' effects if the lease is still ours.

        Returns what `commit` does: an `Outcome` to end with, True if another commit landed first
        (nothing of ours stored), False when stored and applied.
        """
        start = len(held.journal)
        committed = self.commit(held, entries)
        if committed is not False:
            return committed
        effectful = [f for f in entries if f.type in _EFFECTFUL]
        # an exclusive handler's state writes are fenced by its key (a kill releases it): no check needed
        fenced = is_exclusive(held.record) and all(f.type in STATE_COMMANDS for f in effectful)
        if effectful and not fenced:
            try:  # still ours? A kill (or a successor) moved the epoch: carry out nothing
                self.update(held, self.store.record_progress)
            except StoreConflict:
                return Outcome.LEASE_LOST
        try:
            self.effects.apply(held, start)
        except StoreConflict:  # it lost its key, or its epoch moved while it created callees: killed meanwhile
            return self.killed_while_calling(held) or Outcome.LEASE_LOST
        if any(f.type in (MessageType.Call, MessageType.OneWayCall) for f in effectful):
            return self.killed_while_calling(held)
        return False

    def killed_while_calling(self, held: Held) -> Outcome | bool:
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

    def commit(self, held: Held, entries: list[Frame]) -> Outcome | bool:
        """Append entries at the journal's length. False: committed (or nothing to commit).

        Entries go in as few batches as fit in DynamoDB items, each one conditional write at the
        journal's length at that point. Losing the first write means another worker committed at
        this index: reload and return True (start over), or `Outcome.LEASE_LOST` if our epoch is
        gone. One entry too large for an item ends the invocation with a 413 (`Outcome.COMPLETED`).
        """
        limit = JOURNAL_ENTRY_LIMIT_BYTES
        for chunk in _chunks(entries, BATCH_BYTES):
            batch = JournalBatch(len(held.journal), encode_frames(chunk), held.record.epoch, self.clock.now_ms())
            try:
                if len(batch.entries) > limit:
                    raise ItemTooLarge(f"more than the {limit} bytes (32 MiB) a journal entry may take")
                self.store.append_batch(held.record.invocation_id, batch)
            except ItemTooLarge as exc:
                message = (
                    f"a journal entry takes {len(batch.entries)} bytes, which the store does not hold ({exc.message}); "
                    "keep values passed through ctx.run, state, calls and awakeables smaller"
                )
                return self.fail_terminally(held, 413, message)
            except StoreConflict:
                if not self.reload(held):
                    return Outcome.LEASE_LOST
                log.warning("journal of %s moved on under the lease holder; re-invoking", held.record.invocation_id)
                return True
            held.journal.extend(chunk)
        return False

    def reload(self, held: Held) -> bool:
        """Re-read record, journal and notifications; False if our epoch is gone."""
        loaded = self.store.load_invocation(held.record.invocation_id)
        if loaded is None or loaded.record.epoch != held.record.epoch:
            return False
        fresh = Held.of(loaded)
        held.record = replace(loaded.record, attempts=max(loaded.record.attempts, held.record.attempts))
        held.journal, held.stored = fresh.journal, fresh.stored
        return True

    def completing_write(
        self, held: Held, changes: Mapping[str, object], ending: JournalBatch | None = None
    ) -> frozenset[str]:
        """Tell the callers (`Endings.tell_callers`, of the invocation as `changes` complete it), then make
        the completing write; returns the callers told (`Endings.ended` tells any others).

        An invocation others can attach to (an idempotency key's, a workflow's run) is read again
        first (one read), and its completing write is conditional on the doorbell that read found:
        an attach rings it (`Store.attach_caller`), so a caller attached after the read makes the
        write fail, and the callers are read and told again before it is tried again (a
        notification landing meanwhile does the same, harmlessly). So every caller is told before
        the write, and a crash after it loses none.

        `ending`: the journal batch written in the same transition (`end`), unless there is a caller
        to tell: callers are told a result already on disk, so the batch is then appended first.

        Raises `StoreConflict` if the epoch moved on (or the doorbell kept moving, 16 times).
        """
        attachable = bool(held.record.idempotency_key) or is_workflow_run(held.record)
        for _ in range(_COMPLETING_ROUNDS):
            record, doorbell = held.record, None
            if attachable:
                current = self.store.get_invocation(record.invocation_id)
                if current is None or current.epoch != record.epoch:
                    raise StoreConflict(f"{record.invocation_id}: its epoch moved on before it completed")
                record, doorbell = record.evolve(callers=current.callers), current.doorbell
            completed = record.evolve(**changes)
            if ending is not None and (completed.callers or completed.caller_id):
                self.store.append_batch(record.invocation_id, ending)  # callers are told a result on disk
                ending = None
            told = self.endings.tell_callers(completed)
            try:
                if ending is None:  # (changes never name `ending`: they are record fields)
                    self.update(held, self.store.complete, doorbell=doorbell, **changes)  # type: ignore[arg-type]
                else:
                    self.update(held, self.store.complete, doorbell=doorbell, ending=ending, **changes)
            except StoreConflict:
                if doorbell is None:
                    raise
                continue  # rung since the read (a caller attached): read and tell again
            return told
        raise StoreConflict(f"{held.record.invocation_id}: its doorbell kept ringing while it completed")

    def suspend(self, held: Held) -> Outcome | None:
        """Release the lease as `suspended` (`decide_suspension`), unless a notification was stored
        meanwhile or an awaited sleep is due now (then None: look again, and resume it at once)."""
        assert held.awaiting is not None
        sleeps = [at for cid, at in held.journal.open_sleeps().items() if cid in held.awaiting.completions]
        doorbell, now = held.record.doorbell, self.clock.now_ms()
        decision = decide_suspension(doorbell, held.awaiting.to_json(), sleeps, len(held.journal), now)
        if decision.transition is Transition.RUN:
            return None
        if not self.apply(held, decision):
            return None if self.reload(held) else Outcome.LEASE_LOST
        return Outcome.SUSPENDED

    def fail_terminally(self, held: Held, code: int, message: str, completion: str = "failed") -> Outcome:
        """Complete the invocation with a failure that no retry can mend (e.g. 413: too large);
        `completion` is the kind stored with it (`failed`, or `cancelled` before it started).

        Committed entries whose effects are not known applied (a OneWayCall committed in an earlier
        batch of the answer whose next batch is too large) are applied first, as in `complete`: a
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
        if not self.apply(held, Decision(Transition.COMPLETE, changes, (CancelSleeps(), TellCallers()))):
            return Outcome.LEASE_LOST
        return Outcome.COMPLETED

    def complete(self, held: Held) -> Outcome:
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
            return self.failed(held, AttemptFailure(571, "the handler ended without writing an Output"), None)
        changes = self._completion(held, output, held.journal.has(f"s{CANCEL_SIGNAL}"), len(held.journal))
        if isinstance(changes, str):
            return self.fail_terminally(held, 413, changes)
        try:
            if not self.apply(held, Decision(Transition.COMPLETE, changes, (CancelSleeps(), TellCallers()))):
                return Outcome.LEASE_LOST
        except ItemTooLarge:  # never retried forever: the caller sees why instead (callers told above keep
            # the result they were told first: a CallCompletion's value fits, it is what the check above measured)
            if held.record.status == "completed":  # not the completing write's: an effect's after it
                raise
            message = (
                f"the invocation's result and input ({len(held.record.input_entry)} bytes) do not fit in one "
                f"DynamoDB item ({MAX_ITEM_BYTES} bytes) and the store has no blob store (TORPOR_BLOB_BUCKET); "
                "return or fail with a smaller value"
            )
            return self.fail_terminally(held, 413, message)
        return Outcome.COMPLETED

    def _completion(
        self, held: Held, output: pb.OutputCommandMessage, cancel_signalled: bool, length: int
    ) -> dict[str, object] | str:
        """The completing write's changes for the handler's `output` (`completion_changes`), its
        journal then `length` entries long; `cancel_signalled`: the cancel signal is in that journal
        (a failure after it reached the handler is its cancellation). A str instead: why the result
        does not fit in the record (a 413's message)."""
        failed = output.WhichOneof("result") == "failure"
        failure = stored_failure(output.failure) if failed else None
        result_bytes = len(json.dumps(failure).encode()) if failed else len(output.value.content)
        if result_bytes > JOURNAL_ENTRY_LIMIT_BYTES:
            return (
                f"the {'failure' if failed else 'output'} takes {result_bytes} bytes, more than the "
                f"{JOURNAL_ENTRY_LIMIT_BYTES} bytes (32 MiB) a result may take; "
                f"{'fail with a smaller failure' if failed else 'return a smaller value'}"
            )
        now = self.clock.now_ms()
        retention = self.retention.changes(held.record, now)
        if failure is not None:
            completion = "cancelled" if cancel_signalled else "failed"
            changes = completion_changes(now, completion, retention, failure=failure, journal_length=length)
        else:
            value = output.value.content
            changes = completion_changes(now, "succeeded", retention, output=value, journal_length=length)
        changes["attempts"] = held.record.attempts
        return changes

    def end(self, held: Held, entries: list[Frame]) -> Outcome | bool:
        """Commit an answer that ends the handler and complete the invocation in ONE durable
        transition: the completing write carries the journal batch (`InvocationStore.complete`'s
        `ending`), so a call that ends makes one write where `commit_new` then `complete` make two.

        Only when that changes nothing another part could see between the two writes: `entries`
        are the Output command and notifications only (no effect to apply after a commit, no
        notification to derive), every earlier effect is known applied, they fit in one journal
        item, and the result fits in the record. An invocation with a caller to tell (the one
        whose Call created it, or one attached, as `completing_write` reads them) appends the
        batch first, then tells, then completes, as before: a caller is only told a result on disk.
        A crash before the write leaves neither, and the handler runs again from the journal before
        its answer, as a crash before `commit_new`'s write does.

        Returns the outcome; False when it does not apply here (go on with `commit_new` and
        `complete`, as with a result too large for one write, which they fail with a 413); True
        when the write lost and the lease is still ours (another commit landed at the batch's
        index: start over from the journal, reloaded).
        """
        outputs = [f for f in entries if f.type == MessageType.Output]
        record = held.record
        if (
            len(outputs) != 1
            or any(f.type != MessageType.Output and not is_notification(f.type) for f in entries)
            or held.effects_known_upto() < len(held.journal)
        ):
            return False
        encoded = encode_frames(entries)
        if len(encoded) > BATCH_BYTES:  # the usual path: the Output's batch, then the completing write
            return False
        output = pb.OutputCommandMessage.FromString(outputs[0].payload)
        cancel = f"s{CANCEL_SIGNAL}"
        signalled = held.journal.has(cancel) or any(
            is_notification(f.type) and notification_key(f) == cancel for f in entries
        )
        start = len(held.journal)
        changes = self._completion(held, output, signalled, start + len(entries))
        if isinstance(changes, str):
            return False  # `complete` fails it with a 413, the Output committed first as before
        batch = JournalBatch(start, encoded, record.epoch, self.clock.now_ms())
        held.record = record.evolve(failures_in_a_row=0)
        held.journal.extend(entries)  # what the effects after the write (cancel sleeps, ...) read
        known = held.applied_upto
        held.applied_upto = len(held.journal)  # the entries ask for no effect
        try:
            written: bool | None = self.apply(
                held, Decision(Transition.COMPLETE, changes, (CancelSleeps(), TellCallers())), batch
            )
        except ItemTooLarge:
            if held.record.status == "completed":  # not the completing write's: an effect's after it
                raise
            written = None
        except BaseException:
            held.applied_upto = known
            with contextlib.suppress(Exception):
                self.reload(held)
            raise
        if written:
            return Outcome.COMPLETED
        held.applied_upto = known
        if not self.reload(held):
            return Outcome.LEASE_LOST
        if written is None:  # too large as one: commit then complete, which says why (413)
            return False
        if held.journal.output() is not None:  # the batch landed, the completion did not: complete from it
            return self.complete(held)
        log.warning("journal of %s moved on under the lease holder; re-invoking", record.invocation_id)
        return True

    def failed(self, held: Held, failure: AttemptFailure, options: HandlerOptions | None) -> Outcome:
        """Record a failed attempt; retry later by policy, pause, or fail the invocation (`decide_failure`)."""
        record = held.record
        if self.stopping.is_set():  # the attempt broke because this process stops: not the handler's fault
            released = self.apply(held, Decision(Transition.RELEASE_LEASE, {"lease_until_ms": 0}))
            return Outcome.HANDED_OFF if released else Outcome.LEASE_LOST
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
            extra=log_fields(record, code=failure.code),
        )
        self.metrics.count("attempt_failures", service=record.service, handler=record.handler)
        try:
            written = self.apply(held, decision)
        except StoreConflict:  # an effect's (a callee's kill, ...): as a lost write
            written = False
        if written:
            return _AFTER_FAILURE[decision.transition]
        if self.reload(held):  # the doorbell rang while pausing: deliver what arrived
            released = self.apply(held, Decision(Transition.RELEASE_LEASE, {"lease_until_ms": 0}, (WakeNow(),)))
            return Outcome.BACKING_OFF if released else Outcome.LEASE_LOST
        return Outcome.LEASE_LOST

    def apply(self, held: Held, decision: Decision, ending: JournalBatch | None = None) -> bool:
        """The one entry that carries out a `Decision` for `held`, an invocation under our lease: its
        transition, one conditional write on our epoch (and on `decision.doorbell` when set) through
        the store's transition of that name (`update`; COMPLETE through `completing_write`, its
        callers told before the write; RUN writes nothing), then its effects in order, each
        idempotent. An `ArmTimer`'s record is written before the transition and an `Enqueue`'s new
        place drawn before it, so a crash after the write loses neither; a SUSPEND or PAUSE written
        is counted (`suspensions`, `invocations_paused`).

        `ending`: with a COMPLETE, the journal batch its write carries (`end`).

        Returns False if the write lost (`StoreConflict`: the epoch, or the doorbell, moved on):
        nothing after it is done (a timer recorded before it stays, noted in `held.timers`). An
        effect's errors, and the write's `ItemTooLarge`, propagate.
        """
        invocation_id = held.record.invocation_id
        changes = dict(decision.changes)
        armed: list[int] = []
        for effect in decision.effects:  # before the write: what a crash after it must not lose
            if isinstance(effect, ArmTimer):
                armed.append(self.timers.record(invocation_id, effect.due_ms, held))
            elif isinstance(effect, Enqueue) and effect.place_ms:  # its turn for the key starts now
                changes["inbox_seq"] = inbox_seq(effect.place_ms, invocation_id)
        told: frozenset[str] = frozenset()
        try:
            if decision.transition is Transition.COMPLETE:
                if ending is None:
                    told = self.completing_write(held, changes)
                else:
                    told = self.completing_write(held, changes, ending)
            elif decision.transition is not Transition.RUN:
                self.update(held, self._transition(decision.transition), doorbell=decision.doorbell, **changes)
        except StoreConflict:
            return False
        if decision.transition in _COUNTED:
            self.metrics.count(_COUNTED[decision.transition], service=held.record.service, handler=held.record.handler)
        deadline: float | None = None  # a kill's budget for killing callees, from the first such effect
        for effect in decision.effects:
            if isinstance(effect, ArmTimer):
                self.timers.hop(invocation_id, armed.pop(0))
            elif isinstance(effect, Enqueue):
                self.keys.enqueue(held.record)
            elif isinstance(effect, WakeNow):
                self.scheduler.wake_now(invocation_id)
            elif isinstance(effect, NotifyWaiters):
                self.waiters.notify(invocation_id)
            elif isinstance(effect, CancelSleeps):
                self.timers.cancel_sleeps(held)
            elif isinstance(effect, TellCallers):
                self.endings.ended(held.record, told)
            elif isinstance(effect, KillCalleesBehind | KillStartedCallees):
                if deadline is None:
                    deadline = time.monotonic() + KILL_BUDGET_S
                if isinstance(effect, KillCalleesBehind):
                    self.operations.kill_callees_behind(held, deadline)
                else:
                    self.operations.kill_started_callees(invocation_id, 1, deadline, held)
            else:  # `Signal`: delivered from outside the handler (`Operations.cancel`)
                raise TypeError(f"{effect!r} is not an effect of a held invocation's decision")
        return True

    def _transition(self, transition: Transition) -> Callable[..., InvocationRecord | None]:
        """The store's named transition (`InvocationTransitions`) a held invocation's `transition` writes."""
        transitions: dict[Transition, Callable[..., InvocationRecord | None]] = {
            Transition.RENEW_LEASE: self.store.renew_lease,
            Transition.RELEASE_LEASE: self.store.release_lease,
            Transition.WAIT_FOR_KEY: self.store.wait_for_key,
            Transition.SUSPEND: self.store.suspend,
            Transition.BACK_OFF: self.store.back_off,
            Transition.PAUSE: self.store.pause,
        }
        return transitions[transition]

    def update(
        self,
        held: Held,
        transition: Callable[..., InvocationRecord | None],
        *,
        doorbell: int | None = None,
        ending: JournalBatch | None = None,
        **changes: object,
    ) -> None:
        """Make `transition`, a named transition of the store (`InvocationTransitions`: `self.store.suspend`,
        ...), on our epoch (and with `doorbell`, the doorbell); keeps the in-memory record in step.

        It adds the holder's bookkeeping every such write saves: `modified_at_ms`, `attempts` (counted
        in memory), `inbox_seq` "" once it holds its key, the AWS `requests` metered since the last
        write; and caps `effects_applied_upto` at what is known applied. A completion of an
        invocation others can attach to reads back its record in the same request (`returning`).
        `ending`: the journal batch the write carries (`store.complete` only, `end`).
        Raises `StoreConflict` if the epoch (or the doorbell) moved on.
        """
        changes.setdefault("modified_at_ms", self.clock.now_ms())
        changes.setdefault("attempts", held.record.attempts)  # counted in memory, saved with every write
        if held.record.inbox_seq:  # it holds its key (`Engine._advance` checked, or it took it when created)
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
        extra: dict[str, object] = {} if doorbell is None else {"doorbell": doorbell}
        if completing:
            extra["returning"] = True
        if ending is not None:
            extra["ending"] = ending
        fresh = transition(held.record.invocation_id, held.record.epoch, **extra, **changes)
        held.record = fresh or held.record.evolve(**changes)
        held.meter.clear()
