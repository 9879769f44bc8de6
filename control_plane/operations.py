"""Operations on an invocation from outside its handler: cancel, kill, pause, resume, purge, and
the deadlock report. The admin API, the CLI and the web UI reach an invocation through these.

- **cancel** delivers the cancel signal (the handler sees a terminal error at its next await and
  may compensate); one that has not started ends at once as `cancelled`.
- **kill** completes it at once (409, `killed`), runs no more handler code, and kills the callees
  it started; the engine's retry policy uses the same path for `on_max_attempts = kill`.
- **pause** / **resume** stop and restart its attempts (resume may move it to another deployment).
- **purge** deletes a completed invocation.
- **waits_for** / **deadlock**: what an invocation waits on, and a cycle of such waits.

Each goes through the store's named transitions (`force_complete`, `force_pause`, `resume` move the epoch,
so a worker still holding the old lease cannot write after it) and the engine's completion path
(`Endings.tell_callers` before the completing write, then `Endings.ended`: hand the object key on,
expire a workflow's items).
"""

from __future__ import annotations

import contextlib
import dataclasses
import logging
import time
from collections.abc import Callable, Mapping

from control_plane.decisions import (
    Decision,
    Enqueue,
    KillCalleesBehind,
    KillStartedCallees,
    NotifyWaiters,
    Signal,
    Transition,
    WakeNow,
    check_open,
    check_purge,
    completion_changes,
    decide_cancel,
    decide_kill,
    decide_pause,
    decide_resume,
)
from control_plane.errors import BadRequest, Conflict, NotFound, TorporError
from control_plane.held import Held, Knocks
from control_plane.hooks import Ends, Notifies
from control_plane.journal import Journal
from control_plane.keyed import Keys, is_exclusive, takes_turn
from control_plane.ports import Clock, InvocationRecord, LoadedInvocation, Store, StoreConflict, StoredNotification
from control_plane.protocol import Frame, MessageType, encode_frames, frame
from control_plane.protocol import protocol_pb2 as pb
from control_plane.registry import Registry
from control_plane.retention import Retention
from control_plane.timers import Timers
from control_plane.waiters import CompletionWaiters

log = logging.getLogger("torpor.invocation")

CANCEL_SIGNAL = 1  # BuiltInSignal.CANCEL (Restate service protocol)

KILL_BUDGET_S = 2.0
"""How long (s) a kill spends killing the callees its invocation started before it answers; the rest
goes on in wake-ups (`kill_callees_wake_id`), so a kill answers promptly however many calls it made."""
FAN_OUT_BUDGET_S = 20.0
"""How long (s) one such wake-up kills callees before handing the rest to the next one."""
KILL_CALLEES_WAKE_PREFIX = "kill-callees:"
"""A `Scheduler` wake-up whose id starts with this goes on killing a killed invocation's callees."""


def kill_callees_wake_id(invocation_id: str, index: int) -> str:
    """The wake-up id that goes on killing `invocation_id`'s callees from journal entry `index` on."""
    return f"{KILL_CALLEES_WAKE_PREFIX}{invocation_id}:{index}"


def kill_callees_of_wake_id(wake_id: str) -> tuple[str, int] | None:
    """`(invocation_id, journal index)` of a `kill_callees_wake_id`, or None for any other wake-up id."""
    if not wake_id.startswith(KILL_CALLEES_WAKE_PREFIX):
        return None
    invocation_id, _, index = wake_id[len(KILL_CALLEES_WAKE_PREFIX) :].rpartition(":")
    return (invocation_id, int(index)) if index.isdigit() else None


def notification(key: str, message: object) -> StoredNotification:
    """A notification to store under `key` (see `StoredNotification`), framed; its time is set when stored."""
    return StoredNotification(key, encode_frames([frame(message)]), 0)  # type: ignore[arg-type]


def waits_behind(holder: InvocationRecord, callee: InvocationRecord) -> bool:
    """True if `callee` waits in the queue of the object key that `holder` (an exclusive handler) holds."""
    return (
        is_exclusive(holder)
        and callee.status == "pending"
        and (callee.service, callee.key) == (holder.service, holder.key)
    )


def _call_target(entry: Frame) -> pb.CallCommandMessage | pb.OneWayCallCommandMessage:
    if entry.type == MessageType.Call:
        return pb.CallCommandMessage.FromString(entry.payload)
    return pb.OneWayCallCommandMessage.FromString(entry.payload)


class Operations:
    """Cancel, kill, pause, resume, purge and the deadlock report (see the module doc), over the
    engine's ports and parts: no engine is held.

    Args:
        store, registry, clock, waiters, keys, retention, timers: the engine's ports and parts.
        knocks: news for a lease holder in this process (a kill stops it before its next attempt).
        effects: notifications (the cancel signal) and callee ids (`Effects`).
        endings: callers told before a completing write, and what follows it (`Endings`).

    Raises the API's errors: `NotFound` for an unknown invocation, `Conflict` for one in the wrong
    status (completed, or not paused for `resume`).
    """

    def __init__(
        self,
        store: Store,
        registry: Registry,
        clock: Clock,
        waiters: CompletionWaiters,
        keys: Keys,
        retention: Retention,
        timers: Timers,
        knocks: Knocks,
        effects: Notifies,
        endings: Ends,
    ) -> None:
        self.store = store
        self.registry = registry
        self.clock = clock
        self.scheduler = timers.scheduler
        self.waiters = waiters
        self.keys = keys
        self.retention = retention
        self.timers = timers
        self.knocks = knocks
        self.effects = effects
        self.endings = endings

    def cancel(self, invocation_id: str) -> None:
        """Send the cancel signal: the handler gets a terminal error (409) at its next await.

        Its callees are not cancelled here: the handler's SDK sends the cancel signal to every call
        it awaits when it sees its own (`_send_signal`), as with restate-server 1.7.12, so a chain
        A → B → C is cancelled from A down. An invocation that has not started is completed as
        cancelled at once; a paused one is made runnable, with a fresh retry budget (as `resume`),
        so the signal reaches it. Raises `NotFound`, or `Conflict` if it already completed.
        """
        loaded = self._loaded_or_404(invocation_id)
        record = loaded.record
        decision = decide_cancel(record, started=bool(loaded.batches))
        if decision.transition is Transition.COMPLETE:
            completion, failure = decision.ending()
            try:  # only if no worker started it since we read it (the epoch would have moved)
                self._finish_now(record, failure, completion, epoch=record.epoch)
                return
            except StoreConflict:  # it started: deliver the signal instead, so the handler can compensate
                decision = Decision(Transition.RUN, {}, (Signal(),))
        self._carry_out(invocation_id, decision)

    def kill(self, invocation_id: str, deadline: float | None = None) -> None:
        """Complete the invocation at once with 409, running no more handler code; drop its timers.

        An attempt under way learns of it as soon as it can: a stream or attempt held in this
        process at its next message (`Engine.knock`, `Knocks`); a worker creating the callees of its calls
        within `effects.EPOCH_CHECK_EVERY` callees; a Lambda function with in-process checkpoints
        at its next epoch check, within `adapters.aws.checkpoints.FENCE_EVERY_MS` (1 s): `ctx.run`
        steps it runs meanwhile may be appended to the journal, but their effects are never
        carried out and the invocation stays killed.

        Every callee it started and that has not completed is killed too, as restate-server 1.7.12
        does: those of its open calls (a callee shared through an idempotency key with other callers
        included: they get its 409) and those of its one-way calls. All after it is marked
        completed (killed first, a callee would wake it with its failure, and its handler could end
        on its own before the kill); one waiting in the queue of the object key this invocation
        holds before it hands the key on (it would start). The others are killed until `deadline`
        (`time.monotonic()`; by default `KILL_BUDGET_S` from now), the rest in wake-ups
        (`kill_started_callees`), so the kill answers within about that budget however many calls
        the invocation made. Raises `NotFound`, or `Conflict` if it already completed.
        """
        if deadline is None:
            deadline = time.monotonic() + KILL_BUDGET_S
        loaded = self._loaded_or_404(invocation_id)
        decision = decide_kill(loaded.record)
        try:
            held: Held | None = Held(loaded.record, Journal.load(loaded.record.input_entry, loaded.batches), [])
        except TorporError as exc:  # a corrupt journal: kill is the way out, callees or not
            log.error("kill of %s: its journal cannot be read (%s); its callees are not killed", invocation_id, exc)
            held = None
        completion, failure = decision.ending()
        behind = held is not None and KillCalleesBehind() in decision.effects
        # FORCE_COMPLETE, then `CancelSleeps` and `KillCalleesBehind` before `TellCallers` (`_finish_now`)
        self._finish_now(
            loaded.record,
            failure,
            completion,
            before_ended=(lambda: self.kill_callees_behind(held, deadline)) if behind and held is not None else None,
        )
        self.knocks.add(invocation_id)  # a lease holder here stops before its next attempt
        if held is not None and KillStartedCallees() in decision.effects:
            self.kill_started_callees(invocation_id, 1, deadline, held)

    def kill_callees_behind(self, held: Held, deadline: float) -> None:
        """Kill the callees of a killed exclusive handler that wait in the queue of the object key it
        holds (they would start once it hands the key on): one read per call to its own key."""
        record = held.record
        if not is_exclusive(record):
            return
        for index, entry in enumerate(held.journal.frames):
            if entry.type not in (MessageType.Call, MessageType.OneWayCall):
                continue
            call = _call_target(entry)
            if (call.service_name, call.key) != (record.service, record.key):
                continue
            with contextlib.suppress(NotFound, Conflict):  # its service is gone; completed meanwhile
                callee = self.store.get_invocation(self.effects.callee_id(held, index))
                if callee is not None and waits_behind(record, callee):
                    self.kill(callee.invocation_id, deadline)

    def kill_started_callees(self, invocation_id: str, start: int, deadline: float, held: Held | None = None) -> None:
        """Kill the callees a killed invocation started (its open calls' and its one-way calls')
        that have not completed, from journal entry `start` on, until `deadline`
        (`time.monotonic()`); then hand the rest to a wake-up (`kill_callees_wake_id`: a timer
        record first, so a crash leaves it to the sweep). Idempotent: a callee killed already, or
        completed, is passed over. `held` is the invocation as the kill read it (else it is loaded:
        nothing happens if it is gone). One read per callee, and its kill.
        """
        if held is None:
            loaded = self.store.load_invocation(invocation_id)
            if loaded is None:
                return
            held = Held(loaded.record, Journal.load(loaded.record.input_entry, loaded.batches), [])
        journal = held.journal
        open_calls = {index for _, index in journal.open_calls()}
        for index in range(max(start, 1), len(journal)):
            entry = journal.frames[index]
            if entry.type != MessageType.OneWayCall and index not in open_calls:
                continue
            if time.monotonic() >= deadline:
                wake_id = kill_callees_wake_id(invocation_id, index)
                self.timers.arm(wake_id, self.clock.now_ms())
                return
            with contextlib.suppress(NotFound, Conflict):  # its service is gone; completed meanwhile
                callee = self.store.get_invocation(self.effects.callee_id(held, index))
                if callee is not None and callee.status != "completed":
                    self.kill(callee.invocation_id, deadline)

    def _open_callees(self, loaded: LoadedInvocation) -> list[str]:
        """Invocation ids of the callees whose results the invocation still awaits."""
        journal = Journal.load(loaded.record.input_entry, loaded.batches)
        held = Held(loaded.record, journal, [])
        out = []
        for _, index in journal.open_calls():
            try:
                out.append(self.effects.callee_id(held, index))
            except NotFound:
                continue  # its service is gone: nothing to cancel
        return out

    def waits_for(self, record: InvocationRecord, loaded: LoadedInvocation | None = None) -> list[str]:
        """The invocations `record` cannot go on without: the holder of its object key while it is
        `pending` in the key's queue, else the callees of its open calls. Empty once it completed."""
        if record.status == "completed":
            return []
        if record.status == "pending":
            return [h for h in self.keys.holders(record) if h != record.invocation_id]
        loaded = loaded or self.store.load_invocation(record.invocation_id)
        return self._open_callees(loaded) if loaded is not None else []

    def deadlock(self, loaded: LoadedInvocation, max_hops: int = 16) -> list[str] | None:
        """A cycle of waits through this invocation, as invocation ids from it back to it, or None.

        The usual one: an exclusive handler of an object calls an exclusive handler of the same
        key and waits; the callee waits in the key's queue for the caller to end (Restate behaves
        the same: such a call never completes). Only cancel or kill breaks it. Follows at most
        `max_hops` waits (each costs a read or two), so a longer cycle is not reported.
        """
        start = loaded.record.invocation_id
        paths: list[list[str]] = [[start]]
        seen = {start}
        for _ in range(max_hops):
            next_paths: list[list[str]] = []
            for path in paths:
                current = loaded if path[-1] == start else self.store.load_invocation(path[-1])
                if current is None:
                    continue
                for waited in self.waits_for(current.record, current):
                    if waited == start:
                        return [*path, start]
                    if waited not in seen:
                        seen.add(waited)
                        next_paths.append([*path, waited])
            if not next_paths:
                return None
            paths = next_paths
        return None

    def pause(self, invocation_id: str) -> None:
        """Stop running the invocation until it is resumed (its key, if any, stays held).

        An attempt under way is not cut short, but its outcome is discarded (the epoch moves on).
        Raises `NotFound`, or `Conflict` if it already completed or has not started (`decide_pause`).
        """
        self._carry_out(invocation_id, decide_pause(self._loaded_or_404(invocation_id).record))

    def resume(self, invocation_id: str, deployment_id: str | None = None) -> None:
        """Run a paused, suspended or backing-off invocation again now, with a fresh retry budget
        (`decide_resume`); optionally on another deployment: `deployment_id` is a deployment id,
        `latest` (the one its handler resolves to now) or `keep` (the one it is pinned to: no move).

        Raises `NotFound` (unknown invocation), `BadRequest` (an unknown deployment, or a malformed
        choice), `TooEarly` (not started yet), `Conflict` (completed; or running and asked to move),
        or `UnsupportedProtocol` if the other deployment speaks no common protocol version.
        """
        if deployment_id is not None and deployment_id not in ("latest", "keep") and not deployment_id.startswith("dp_"):
            raise BadRequest(f"deployment: expected keep, latest or a deployment id (dp_…), got {deployment_id!r}")
        record = self._loaded_or_404(invocation_id).record
        if deployment_id == "latest":
            deployment_id = self.registry.resolve(record.service, record.handler).deployment_id
        moves = deployment_id not in (None, "keep", record.deployment_id)
        holds_key = not takes_turn(record) or self.keys.holds(record)
        decision = decide_resume(record, holds_key, self.clock.now_ms(), moves=moves)
        if moves and deployment_id is not None:
            try:
                deployment = self.registry.deployment(deployment_id)
            except NotFound as exc:
                raise BadRequest(f"deployment {deployment_id} not found; list them with torpor deployments list") from exc
            moved = {
                "deployment_id": deployment.deployment_id,
                "protocol_version": self.registry.protocol_version(deployment),
            }
            decision = dataclasses.replace(decision, changes={**decision.changes, **moved})
        self._carry_out(invocation_id, decision)

    def _carry_out(self, invocation_id: str, decision: Decision) -> None:
        """Carry out an operation's `decision` (`decide_cancel`, `decide_pause`, `decide_resume`): its
        transition, forced (RESUME, FORCE_PAUSE: the epoch moves on, so a worker holding the old lease
        cannot write after it; RUN writes nothing), then its effects in order: `Enqueue` (its key's
        queue), `WakeNow`, `NotifyWaiters`, `Signal` (the cancel signal, stored and rung through
        `Effects.notify`). Raises `Conflict` if it has completed meanwhile."""
        updated: InvocationRecord | None = None
        if decision.transition is Transition.RESUME:
            updated = self._force(self.store.resume, invocation_id, **decision.changes)
        elif decision.transition is Transition.FORCE_PAUSE:
            updated = self._force(self.store.force_pause, invocation_id, **decision.changes)
        elif decision.transition is not Transition.RUN:
            raise ValueError(f"an operation does not write {decision.transition}")
        for effect in decision.effects:
            if isinstance(effect, Enqueue) and updated is not None:  # resumed: back in its key's queue
                self.keys.enqueue(updated)
            elif isinstance(effect, WakeNow):
                self.scheduler.wake_now(invocation_id)
            elif isinstance(effect, NotifyWaiters):
                self.waiters.notify(invocation_id)
            elif isinstance(effect, Signal):
                signal = pb.SignalNotificationMessage(idx=CANCEL_SIGNAL, void=pb.Void())
                self.effects.notify(invocation_id, notification(f"s{CANCEL_SIGNAL}", signal))
            else:
                raise ValueError(f"{effect!r} is not an operation's effect")

    def purge(self, invocation_id: str) -> None:
        """Delete a completed invocation: its record, journal and notifications, and a workflow
        run's state and promises with it (as restate-server 1.7.12 does: a run sent again after
        the purge starts afresh), as retention does (`Retention.remove`).

        Raises `NotFound`, or `Conflict` if it has not completed (cancel or kill it first).
        """
        record = self.store.get_invocation(invocation_id)
        if record is None:
            raise NotFound(f"invocation {invocation_id} not found")
        check_purge(record)
        self.retention.remove(record)  # a workflow run's state and promises go with it, first

    def _loaded_or_404(self, invocation_id: str) -> LoadedInvocation:
        loaded = self.store.load_invocation(invocation_id)
        if loaded is None:
            raise NotFound(f"invocation {invocation_id} not found")
        check_open(loaded.record)
        return loaded

    def _force(
        self, transition: Callable[..., InvocationRecord], invocation_id: str, **changes: object
    ) -> InvocationRecord:
        """Make the forced `transition` (`resume`, `force_pause`, `force_complete`: the epoch moves) now.
        Raises `Conflict` if the invocation has completed (or is gone)."""
        try:
            return transition(invocation_id, modified_at_ms=self.clock.now_ms(), **changes)
        except StoreConflict as exc:
            raise Conflict(f"invocation {invocation_id} has already completed") from exc

    def _finish_now(
        self,
        record: InvocationRecord,
        failure: Mapping[str, object],
        completion: str,
        epoch: int | None = None,
        before_ended: Callable[[], None] | None = None,
    ) -> None:
        """Complete with `failure` whoever holds the lease (the epoch moves on), then drop timers.

        `completion` is the kind stored with it (`cancelled`, `killed`). With `epoch`, only if the
        invocation's epoch is still that (`StoreConflict` otherwise). Its callers are told before the
        completing write (`Endings.tell_callers`): a crash between the two leaves it not completed, and
        the operation, retried, tells them again (first per key wins); a crash after the write has told
        them. Callers attached meanwhile are told after it (`Endings.ended`). When the write fails (it
        completed on its own, or, with `epoch`, it started meanwhile), the callers keep what they were
        told first. `before_ended` runs after the completing write, before the object key is handed on.
        """
        now = self.clock.now_ms()
        changes = completion_changes(now, completion, self.retention.changes(record, now), failure=failure)
        # the callers first (see `Endings.tell_callers`): a crash after the completing write has told them
        told = self.endings.tell_callers(dataclasses.replace(record, **changes))
        ended: InvocationRecord | None
        if epoch is None:
            ended = self._force(self.store.force_complete, record.invocation_id, **changes)
        else:
            ended = self.store.complete(record.invocation_id, epoch, modified_at_ms=now, returning=True, **changes)
        loaded = self.store.load_invocation(record.invocation_id)
        dues = {record.next_retry_at_ms, record.execution_time_ms, record.wake_up_at_ms}
        if loaded is not None:
            try:
                for wake_up in Journal.load(loaded.record.input_entry, loaded.batches).open_sleeps().values():
                    dues.update(self.timers.sleep_dues(wake_up))
            except TorporError as exc:  # a corrupt journal: its sleeps' timers find it completed
                log.error("%s: its journal cannot be read (%s); its sleep timers stay", record.invocation_id, exc)
        for due in dues - {0}:
            self.timers.cancel(record.invocation_id, due)
        if before_ended is not None:
            before_ended()
        self.endings.ended(ended or record, told)
