"""Effects of committed entries, and notifications from outside: what `advance` carries out
beyond the journal, and what other invocations and the APIs deliver to it.

- Effects (`apply`): a Sleep arms a timer, a Call or OneWayCall creates its callee (once:
  its id is derived from the caller and the entry), CompleteAwakeable and SendSignal store a
  notification for their target, state and promise commands go to `Keys`. Each is idempotent, so
  the next `advance` re-applies them after a crash (`effects_applied_upto`).
- Completions the lease holder derives (`pending`): due sleeps, results of completed callees,
  lazy state reads and promises; plus the notifications stored from outside, not yet journaled.
- `notify`: delivering a notification (ring, store with first per key winning, ring again: a crash
  between any two leaves the doorbell past the suspension's `doorbell_read`, which the sweeps
  wake), and telling a caller its callee's result (before the callee's completing write).

Cancel, kill, pause, resume and purge (operations from outside) live in `control_plane.operations`.
"""

from __future__ import annotations

import contextlib
import logging

from control_plane import ids
from control_plane.decisions import due_sleeps
from control_plane.errors import BadRequest, Conflict, NotFound, TorporError
from control_plane.failures import wire_failure
from control_plane.held import Held
from control_plane.hooks import EngineHooks
from control_plane.journal import (
    named_signal_entry,
    named_signal_key,
    notification_key,
    parse_named_signal_key,
    sleep_completion,
    stored_frames,
    stored_sender,
)
from control_plane.keyed import STATE_COMMANDS, is_keyed, is_workflow_run
from control_plane.observability import invocation_span_id
from control_plane.operations import CANCEL_SIGNAL, notification, waits_behind
from control_plane.ports import InvocationRecord, StoreConflict, StoredNotification
from control_plane.protocol import Frame, MessageType, decode_frames, encode_frames, frame
from control_plane.protocol import protocol_pb2 as pb

log = logging.getLogger("torpor.invocation")

EPOCH_CHECK_EVERY = 32
"""Callees created between two reads of the caller's epoch while its effects are applied: a kill
(which moves the epoch) stops the creation of a handler's thousands of one-way calls within this many."""

KEYED_EFFECTS = frozenset(
    {
        MessageType.SetState,
        MessageType.ClearState,
        MessageType.ClearAllState,
        MessageType.GetPromise,
        MessageType.CompletePromise,
    }
)


def _call_message(entry: Frame) -> pb.CallCommandMessage | pb.OneWayCallCommandMessage:
    if entry.type == MessageType.Call:
        return pb.CallCommandMessage.FromString(entry.payload)
    return pb.OneWayCallCommandMessage.FromString(entry.payload)


def call_result(callee: InvocationRecord, completion_id: int) -> Frame:
    """The CallCompletion notification carrying a completed callee's output or failure."""
    result = pb.CallCompletionNotificationMessage(completion_id=completion_id)
    if callee.failure is not None:
        result.failure.CopyFrom(wire_failure(callee.failure))
    else:
        result.value.content = callee.output or b""
    return frame(result)


class Effects:
    """What an `Engine`'s committed entries do beyond the invocation's journal, and the
    notifications that reach an invocation from outside (see the module doc).

    Works with the engine's store, registry, scheduler and clock, and calls back into the engine
    through `control_plane.hooks.EngineHooks` to create callees (`create`) and arm timers (`arm`).
    """

    def __init__(self, engine: EngineHooks) -> None:
        self.engine = engine
        self.store = engine.store
        self.clock = engine.clock
        self.scheduler = engine.scheduler
        self.registry = engine.registry
        self.keys = engine.keys
        self.settings = engine.settings

    def pending(self, held: Held) -> list[Frame]:
        """Notifications to deliver in the next attempt: stored ones not yet journaled, due sleeps."""
        out: list[Frame] = []
        seen: set[str] = set()
        fresh = []
        queues: dict[str, list[tuple[int, bytes]]] = {}  # named signals of each name, to take by seq
        for stored in sorted(held.stored, key=lambda n: (n.created_at_ms, n.key)):
            if stored.key in seen or held.journal.has(stored.key):
                continue
            seen.add(stored.key)
            fresh.append(stored)
            if stored.key[0] == "q":
                seq, name = parse_named_signal_key(stored.key)
                queues.setdefault(name, []).append((seq, stored.entry))
        for queue in queues.values():
            queue.sort(reverse=True)
        for stored in fresh:  # in the order stored; the signals of one name by seq, as the journal counts them
            if stored.key[0] == "q":
                out.extend(stored_frames(queues[parse_named_signal_key(stored.key)[1]].pop()[1]))
            else:
                out.extend(decode_frames(stored.entry))
        for completion_id in due_sleeps(held.journal.open_sleeps(), self.clock.now_ms()):
            if f"c{completion_id}" not in seen:
                out.append(sleep_completion(completion_id))
        for completion_id, index in held.journal.open_calls():
            if f"c{completion_id}" in seen:
                continue
            callee = self.store.get_invocation(self.callee_id(held, index))
            if callee is not None and callee.status == "completed":  # its own wake-up may have been lost
                out.append(call_result(callee, completion_id))
        if held.journal.derived:
            derived = self.keys.derive(held.record, held.journal, held.state)
            out.extend(f for f in derived if notification_key(f) not in seen)
        return out

    def callee_id(self, held: Held, index: int) -> str:
        return self._callee_of(held.record, index, _call_message(held.journal.frames[index]))

    def _callee_of(
        self, parent: InvocationRecord, index: int, call: pb.CallCommandMessage | pb.OneWayCallCommandMessage
    ) -> str:
        """The invocation id a Call or OneWayCall at journal `index` of `parent` names: a workflow's run
        id, the id of the call's idempotency key for its target, or else one derived from the caller,
        its `callee_seed` and the entry. Raises `NotFound` for an unknown service or handler."""
        target = self.registry.resolve(call.service_name, call.handler_name)
        if target.service_type == "WORKFLOW" and target.handler_type == "WORKFLOW":
            return self.engine.workflow_run_id(call.service_name, call.key)
        if call.idempotency_key:  # one invocation per target and key, whoever calls
            return self.engine.idempotent_invocation_id(
                call.service_name, call.handler_name, call.key, call.idempotency_key
            )
        return ids.derived_invocation_id(parent.invocation_id, index, call.key, parent.callee_seed)

    def derived_notifications(self, held: Held, entries: list[Frame]) -> list[Frame]:
        """Notifications the runtime owes for commands in `entries`, stored in the same commit.

        A OneWayCall gets its callee's invocation id (deterministic: derived from this invocation's
        id and the command's journal index, so a retried commit names the same callee). Raises
        `NotFound` when the callee's service or handler is unknown (a failed attempt, retried).
        """
        derived: list[Frame] = []
        for offset, entry in enumerate(entries):
            if entry.type not in (MessageType.OneWayCall, MessageType.Call):
                continue
            call = _call_message(entry)
            callee = self._callee_of(held.record, len(held.journal) + offset, call)
            notification = pb.CallInvocationIdCompletionNotificationMessage(
                completion_id=call.invocation_id_notification_idx, invocation_id=callee
            )
            derived.append(frame(notification))
        return derived

    # --- effects of committed entries -------------------------------------------------------------

    def apply(self, held: Held, start: int) -> None:
        """Carry out what committed entries from index `start` on ask of the runtime. Idempotent.

        Sleep: a timer at its wake-up time. OneWayCall: the callee invocation (conditional create).
        CompleteAwakeable and SendSignal: a notification stored for the target invocation.
        Consecutive state commands: one state write (`Keys.apply_state`; an exclusive handler's is
        fenced by its key and raises `StoreConflict` if it lost it).

        Every `EPOCH_CHECK_EVERY` callees the invocation's epoch is read again: if it moved (a kill,
        a successor), `StoreConflict` is raised and no more callees are created.

        Any other failure propagates: the attempt fails and `held.applied_upto` stays where it was,
        so the invocation never completes, suspends or records a failed attempt as if these effects
        had been carried out (the next attempt applies them again first).
        """
        known = held.effects_known_upto()
        now = self.clock.now_ms()
        parent = held.record.invocation_id
        state_changes: list[Frame] = []  # consecutive state commands: one store write
        callees = 0  # created (or found created) so far
        for index in range(max(start, 1), len(held.journal)):
            entry = held.journal.frames[index]
            if entry.type in STATE_COMMANDS and is_keyed(held.record):
                state_changes.append(entry)
                continue
            if state_changes:
                self.keys.apply_state(held.record, held.state, state_changes)
                state_changes = []
            if entry.type == MessageType.Sleep:
                sleep = pb.SleepCommandMessage.FromString(entry.payload)
                if sleep.wake_up_time > now and sleep.result_completion_id not in held.journal.completions:
                    self.engine.timers.arm_sleep(parent, sleep.wake_up_time, held)
            elif entry.type in (MessageType.OneWayCall, MessageType.Call):
                if callees and callees % EPOCH_CHECK_EVERY == 0:
                    self._check_epoch(held)
                self._start_callee(held.record, index, entry, held.attempt_span)
                callees += 1
            elif entry.type == MessageType.CompleteAwakeable:
                complete = pb.CompleteAwakeableCommandMessage.FromString(entry.payload)
                signal = pb.SignalNotificationMessage()
                if complete.WhichOneof("result") == "failure":
                    signal.failure.CopyFrom(complete.failure)
                else:
                    signal.value.CopyFrom(complete.value)
                self._resolve_awakeable(complete.awakeable_id, signal)
            elif entry.type == MessageType.SendSignal:
                send = pb.SendSignalCommandMessage.FromString(entry.payload)
                self._send_signal(held.record, send, index)
            elif entry.type in KEYED_EFFECTS and is_keyed(held.record):
                self.keys.apply(held.record, held.state, entry)
                if entry.type == MessageType.CompletePromise and not is_workflow_run(held.record):
                    self._expire_without_run(held.record)
        if state_changes:
            self.keys.apply_state(held.record, held.state, state_changes)
        if start <= known:  # contiguous with what was applied before: all of it is applied now
            held.applied_upto = max(known, len(held.journal))

    def _check_epoch(self, held: Held) -> None:
        """Raise `StoreConflict` if the invocation's epoch is no longer `held`'s (one read)."""
        current = self.store.get_invocation(held.record.invocation_id)
        if current is None or current.epoch != held.record.epoch:
            raise StoreConflict(f"{held.record.invocation_id}: its epoch moved on (killed, or taken over)")

    def _expire_without_run(self, record: InvocationRecord) -> None:
        """A shared handler completed a promise of a workflow whose `run` does not exist (not yet, or
        no more) or has ended: nothing else would ever remove it, so the workflow's items expire after
        the workflow retention from now (TTL). A `run` created later removes that TTL again; one
        created between the read here and the expiring write (its own removal may have come first)
        is found by reading it again after the write, and the TTL removed."""
        run_id = self.engine.workflow_run_id(record.service, record.key)
        run = self.store.get_invocation(run_id)
        if run is not None and run.status != "completed":
            return  # its completion sets the TTL of everything
        options = self.registry.pinned_options(record.deployment_id, record.service, record.handler)
        retention_ms = options.workflow_retention_ms or self.settings.workflow_retention_ms
        self.store.expire_keyed(record.service, record.key, -(-(self.clock.now_ms() + retention_ms) // 1000))
        again = self.store.get_invocation(run_id)
        if again is not None and again.status != "completed":
            self.store.expire_keyed(record.service, record.key, 0)  # a run came meanwhile: it keeps them

    def _start_callee(self, parent: InvocationRecord, index: int, entry: Frame, span: str = "") -> None:
        """Create the invocation a Call or OneWayCall asks for (conditional: once per command).

        A Call's callee remembers its caller and the Call's completion id, to tell it the result.
        Its trace is the caller's; its invocation span's parent `span` (the caller's attempt span,
        when traced) or, applied again outside that attempt, the caller's invocation span.
        """
        call = _call_message(entry)
        headers = {h.key: h.value for h in call.headers}
        is_call = isinstance(call, pb.CallCommandMessage)
        try:
            callee = self._callee_of(parent, index, call)
            self.engine.create(
                call.service_name,
                call.handler_name,
                call.parameter,
                headers,
                key=call.key,
                leased=False,
                execution_time_ms=0 if is_call else call.invoke_time,  # type: ignore[union-attr]
                invocation_id=callee,
                idempotency_key=call.idempotency_key,
                scope=call.scope,
                limit_key=call.limit_key,
                caller_id=parent.invocation_id if is_call else "",
                caller_completion_id=call.result_completion_id if is_call else 0,  # type: ignore[union-attr]
                trace_id=parent.trace_id,
                trace_parent=span or (invocation_span_id(parent.invocation_id) if parent.trace_id else ""),
            )
        except StoreConflict:  # created by an earlier application of this effect, or by another caller
            if is_call:
                self._attach(parent.invocation_id, call.result_completion_id, callee)  # type: ignore[union-attr]
        except TorporError as exc:  # not swallowed: the callee must exist before the caller goes on
            log.error("call from %s at entry %d: %s", parent.invocation_id, index, exc.message)
            raise

    def _attach(self, caller_id: str, completion_id: int, callee_id: str) -> None:
        """Make a Call wait for a callee that exists already (a workflow's run, an idempotency key's
        invocation): the callee tells it when it completes; if it has completed, tell it now."""
        existing = self.store.get_invocation(callee_id)
        if existing is None or (existing.caller_id, existing.caller_completion_id) == (caller_id, completion_id):
            return  # this caller created it (an effect applied again): it is told already
        if existing.status != "completed":
            try:
                self.store.attach_caller(callee_id, f"{caller_id}/{completion_id}")
                return
            except StoreConflict:  # it completed meanwhile (or went): read its result
                existing = self.store.get_invocation(callee_id)
                if existing is None:
                    return
        self.tell_caller(existing, caller_id, completion_id)

    def _resolve_awakeable(self, awakeable_id: str, signal: pb.SignalNotificationMessage) -> None:
        try:
            target, index = ids.parse_awakeable_id(awakeable_id)
        except BadRequest as exc:
            log.error("CompleteAwakeable with %s", exc.message)
            return
        signal.idx = index
        try:
            self.notify(target, notification(f"s{index}", signal))
        except NotFound:
            log.error("CompleteAwakeable for %s: that invocation does not exist (any more)", awakeable_id)

    def _send_signal(self, sender: InvocationRecord, send: pb.SendSignalCommandMessage, index: int) -> None:
        """Deliver the signal of the SendSignal command at journal `index` of `sender`. The cancel
        signal (a cancelled handler's SDK sends it to the calls it awaits) is a `cancel` of the target:
        one that has not started ends at once, unless it waits in the inbox of the object key the
        sender holds (it would run only once the sender ended: it gets the signal then, as with
        restate-server 1.7.12). A named signal joins the target's queue of that name (`notify_named`).
        To an invocation that does not exist or has completed, it is dropped (restate-server too)."""
        if send.WhichOneof("signal_id") == "idx" and send.idx == CANCEL_SIGNAL:
            target = self.store.get_invocation(send.target_invocation_id)
            if target is not None and target.status != "completed" and not waits_behind(sender, target):
                with contextlib.suppress(NotFound, Conflict):  # completed meanwhile, or gone
                    self.engine.operations.cancel(send.target_invocation_id)
                return
        signal = pb.SignalNotificationMessage()
        which = send.WhichOneof("result")
        if which == "failure":
            signal.failure.CopyFrom(send.failure)
        elif which == "value":
            signal.value.CopyFrom(send.value)
        else:
            signal.void.SetInParent()
        try:
            if send.WhichOneof("signal_id") == "name":
                signal.name = send.name
                sent_by = f"{sender.invocation_id}/{index}"
                self.notify_named(send.target_invocation_id, send.name, frame(signal), sent_by)
            else:
                signal.idx = send.idx
                self.notify(send.target_invocation_id, notification(f"s{send.idx}", signal))
        except NotFound:
            log.error("SendSignal to %s: that invocation does not exist (any more)", send.target_invocation_id)

    # --- notifications, cancel, kill --------------------------------------------------------------

    def notify(self, invocation_id: str, notification: StoredNotification) -> bool:
        """Store a notification for an invocation, ring its doorbell and wake it.

        The first notification per key wins (an awakeable resolved twice keeps its first value).
        Returns True if this one was stored; False if one with its key was stored before, or if the
        invocation has completed (nothing takes it any more: dropped, leaving nothing behind). Raises
        `NotFound` if the invocation does not exist, leaving nothing behind.

        Ring, store, ring (three writes; one when refused, two for a duplicate), on every store:

        - the first ring is conditional on the invocation, so a refused notification (completed, or
          no such invocation) writes nothing;
        - the ring after the notification is stored makes a lease holder that read the first ring
          before the notification landed fail its suspension and reload (the wake-up sent below may
          find the lease held, `BUSY`, and be used up);
        - a crash between any two of the requests leaves the doorbell moved past the
          `doorbell_read` of a suspension made before it: the sweeps wake such an invocation
          (`rung_since_suspended`). One that read the first ring and then suspended without the
          notification is rung again by whoever delivers it again (a recovered callee tells its
          callers again; an effect is applied again; a client retries): the notification is
          already stored then, and that delivery's first ring wakes it.
        """
        stored = StoredNotification(notification.key, notification.entry, self.clock.now_ms())
        try:
            self.store.ring(invocation_id)
        except StoreConflict:
            return self._refused(invocation_id)
        first = self.store.put_notification(invocation_id, stored)
        if first:  # (a notification stored earlier under this key was rung by whoever stored it)
            with contextlib.suppress(StoreConflict):  # completed or removed meanwhile: nobody is left to tell
                self.store.ring(invocation_id)
        self.engine.knock(invocation_id)
        self.scheduler.wake_now(invocation_id)
        return first

    def notify_named(self, invocation_id: str, name: str, signal: Frame, sender: str) -> bool:
        """Store a named signal for an invocation, ring its doorbell and wake it, as `notify` does:
        True if stored, False if `sender` (`{invocation_id}/{journal index}` of its SendSignal command)
        stored it before or the invocation has completed; `NotFound` if it does not exist.

        Named signals queue (a handler's k-th await of a name takes the k-th signal of that name,
        as restate-server 1.7.12 and restate-sdk 1.3 do): the signal takes the first free key
        `named_signal_key(seq, name)`, seq 0, 1, 2, ..., each one a conditional put. A key taken
        already is read: if its entry names `sender`, this signal was stored before (an effect
        applied again, or twice at once) and nothing more is written. Keys are taken in order and
        never freed while the invocation lives, so the one taken is after every one stored before
        it (the journal takes them in that order) and a sender's signal is stored once: one
        applying it again meets its own key before any free one. The n-th signal of a name costs n
        failed puts and n reads more than the first.
        """
        try:
            self.store.ring(invocation_id)
        except StoreConflict:
            return self._refused(invocation_id)
        entry = named_signal_entry(signal, sender)
        now = self.clock.now_ms()
        seq, first = 0, False
        while True:
            key = named_signal_key(seq, name)
            if self.store.put_notification(invocation_id, StoredNotification(key, entry, now)):
                first = True
                break
            taken = self.store.get_notification(invocation_id, key)
            if taken is not None and stored_sender(taken.entry) == sender:
                break
            if taken is None:  # removed with the invocation meanwhile (a purge): nothing takes it
                return self._refused(invocation_id)
            seq += 1
        if first:
            with contextlib.suppress(StoreConflict):
                self.store.ring(invocation_id)
        self.engine.knock(invocation_id)
        self.scheduler.wake_now(invocation_id)
        return first

    def _refused(self, invocation_id: str) -> bool:
        """The first ring of a notification failed: False (dropped) if the invocation has completed, as
        nothing can take a notification any more; `NotFound` if it does not exist."""
        record = self.store.get_invocation(invocation_id)
        if record is not None and record.status == "completed":
            return False
        raise NotFound(f"invocation {invocation_id} not found")

    def tell_caller(self, callee: InvocationRecord, caller_id: str, completion_id: int) -> None:
        """Store the CallCompletion with the completed `callee`'s result for a caller, and wake it."""
        entry = call_result(callee, completion_id)
        notification = StoredNotification(f"c{completion_id}", encode_frames([entry]), 0)
        try:
            self.notify(caller_id, notification)
        except NotFound:
            log.error("%s completed, but its caller %s no longer exists", callee.invocation_id, caller_id)
