"""Virtual objects and workflows: keyed state, one writer per object key, durable promises.

- **State** lives beside the key (`Store.load_state`). An attempt's Start carries the whole state
  (`partial_state=false`) when it is small; above `Settings.eager_state_max_bytes`, or for handlers
  with `enableLazyState`, it carries none (`partial_state=true`) and the lease holder answers each
  GetLazyState / GetLazyStateKeys with a completion (one suspension per read). SetState, ClearState
  and ClearAllState are applied from committed entries only, so a failed attempt leaves no trace.
- **One writer per key**: an exclusive handler's invocation takes the key when it is created if
  nobody holds it and nobody waits (`take`); otherwise it waits `pending` in the key's queue until
  it is granted the key. It keeps the key across suspensions and releases it when it completes (or
  is cancelled or killed); the release tells whether anyone waits, and only then is the key handed
  to the next in arrival order (`pump`). Its state writes are fenced by the key. A crash between
  two of these writes is repaired by the sweeps, which put every `pending` invocation back in its
  key's queue and pump each such key (`requeue`).
- **Concurrency limits** (`control_plane.limits`) take turns the same way for a slot of a pool
  with N holders instead of a key: `take`, `enqueue`, `pump`, `release` act on a slot when
  `lock_of` names a pool. An invocation under several limits (`slots_of`) takes their slots one
  after the other in their taking order: it waits in the queue of the first pool it does not hold
  yet, a grant there takes (or queues for) the next one, and only with all of them is it `ready`.
- **Durable promises** (workflows): the first completion wins (`Store.complete_promise`); awaiting
  invocations register as waiters and are woken; their GetPromise completions are derived from the
  stored promise by their own lease holder, like sleeps.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable
from typing import Protocol

from google.protobuf.message import Message

from control_plane.failures import stored_failure, wire_failure
from control_plane.journal import Journal
from control_plane.limits import decode_more
from control_plane.ports import (
    Clock,
    InvocationRecord,
    InvocationStore,
    KeyStore,
    PromiseRecord,
    Scheduler,
    StoreConflict,
)
from control_plane.protocol import Frame, MessageType, frame
from control_plane.protocol import protocol_pb2 as pb

log = logging.getLogger("torpor.keyed")

STATE_COMMANDS = frozenset({MessageType.SetState, MessageType.ClearState, MessageType.ClearAllState})
ALREADY_COMPLETED = 409  # failure code of a CompletePromise on a completed promise
_PUMP_ROUNDS = 16


def is_keyed(record: InvocationRecord) -> bool:
    """True for invocations of virtual objects and workflows (they have a key and state)."""
    return record.service_type in ("VIRTUAL_OBJECT", "WORKFLOW")


def is_exclusive(record: InvocationRecord) -> bool:
    """True if the invocation must hold its object key's lock: an exclusive object handler."""
    return record.service_type == "VIRTUAL_OBJECT" and record.handler_type != "SHARED"


def is_workflow_run(record: InvocationRecord) -> bool:
    """True for a workflow's `run` (its invocation id is the workflow id's, so it runs once)."""
    return record.service_type == "WORKFLOW" and record.handler_type == "WORKFLOW"


def takes_turn(record: InvocationRecord) -> bool:
    """True if the invocation waits its turn in a queue before it runs: an exclusive object handler
    (for its key) or one under a concurrency limit (for a slot, `control_plane.limits`)."""
    return is_exclusive(record) or record.slot_limit > 0


def slots_of(record: InvocationRecord) -> list[tuple[str, int]]:
    """`[(pool scope, N)]` of every concurrency limit `record` counts against, in taking order
    (`limits.taking_order`); [] for none, and for an exclusive handler (its key is its turn)."""
    if is_exclusive(record) or not record.slot_limit:
        return []
    return [(record.slot, record.slot_limit), *decode_more(record.more_slots)]


def lock_of(record: InvocationRecord) -> tuple[str, str, int]:
    """`(scope, key, limit)` of what `record` takes turns for: its object key (`limit` 0: one holder,
    `Store.take_key`), or its (first) concurrency limit's pool (`limit` N, `Store.take_slot`)."""
    if is_exclusive(record) or not record.slot_limit:
        return record.service, record.key, 0
    return record.slot, "", record.slot_limit


def may_write_state(record: InvocationRecord) -> bool:
    """Exclusive object handlers and a workflow's `run` write state; shared handlers only read."""
    return is_exclusive(record) or is_workflow_run(record)


def _completed_by(record: InvocationRecord, completion_id: int) -> str:
    return f"{record.invocation_id}:{completion_id}"


class KeyedStore(KeyStore, InvocationStore, Protocol):
    """The families `Keys` uses: keys (locks, queues, state, promises), and invocations (the one
    granted a key is told so, a promise's waiters are rung)."""


class Keys:
    """Locks, the keys' queues, state and promises of keyed services, over the store."""

    def __init__(self, store: KeyedStore, scheduler: Scheduler, clock: Clock) -> None:
        self.store = store
        self.scheduler = scheduler
        self.clock = clock

    # --- one writer per key -----------------------------------------------------------------------

    def take(self, record: InvocationRecord) -> dict[bytes, bytes] | None:
        """A just-created invocation that takes turns (`takes_turn`) takes its key, or a slot of its
        concurrency limit, at once if one is free and nobody waits: the key's state if it did ({} for
        a slot), None if it must wait. Under several limits it takes their slots in order and keeps
        those it got: `enqueue` then queues it for the first one it lacks."""
        pools = slots_of(record)
        if pools:
            taken = all(self.store.take_slot(scope, "", record.invocation_id, limit) for scope, limit in pools)
            return {} if taken else None
        return self.store.take_key(record.service, record.key, record.invocation_id)

    def holds(self, record: InvocationRecord) -> bool:
        """True if `record` holds its key, or a slot of each of its concurrency limits (one consistent
        read per pool)."""
        pools = slots_of(record)
        if pools:
            return self._lacking(record, pools) is None
        scope, key, limit = lock_of(record)
        return self.store.lock_holder(scope, key) == record.invocation_id

    def holders(self, record: InvocationRecord) -> list[str]:
        """Who holds what `record` waits for: its key's holder, or the slots of the first of its
        concurrency limits it lacks."""
        pools = slots_of(record)
        if pools:
            scope, _ = self._lacking(record, pools) or pools[-1]
            return sorted(self.store.slot_status(scope, "")[0])
        scope, key, limit = lock_of(record)
        holder = self.store.lock_holder(scope, key)
        return [holder] if holder else []

    def enqueue(self, record: InvocationRecord) -> None:
        """Put a `pending` invocation in its key's (or concurrency limit's) queue and hand a free key
        or slot on. Under several limits it queues for the first one it does not hold (one read per
        pool before it); holding them all already, it is told at once."""
        pools = slots_of(record)
        if len(pools) > 1:
            lacking = self._lacking(record, pools)
            if lacking is None:
                self._grant(pools[-1][0], "", record.invocation_id, pools[-1][1])
                return
            scope, key, limit = lacking[0], "", lacking[1]
        else:
            scope, key, limit = lock_of(record)
        self.store.enqueue(scope, key, record.inbox_seq, record.invocation_id)
        self.pump(scope, key, limit)

    def _lacking(self, record: InvocationRecord, pools: list[tuple[str, int]]) -> tuple[str, int] | None:
        """The first of `pools` whose slot `record` does not hold (None: it holds them all)."""
        for scope, limit in pools:
            if record.invocation_id not in self.store.slot_status(scope, "")[0]:
                return scope, limit
        return None

    def requeue(self, pending: Iterable[InvocationRecord]) -> int:
        """The sweeps' repair of keys' queues: put every `pending` invocation back in its key's queue
        (`Store.enqueue`, idempotent: one write each), then pump each key once. A crash between a
        status write to `pending` and the enqueue (`Creation._wait_for_key`, `Engine._advance`), or between
        a key's release and its hand-over (`release`), leaves invocations that only this finds: all
        of them, however many per key. An entry put back for an invocation granted meanwhile is
        passed over by `pump` (it holds the key, or it completed). An invocation that holds its key
        already (granted, then a crash before it was told: `pump` tells it) is not queued again: its
        entry would outlive it, as nothing takes it out once it runs (found by the simulator, seed
        7842). One read of the key's holder per key. Returns how many keys were pumped.

        Concurrency limits' queues alike (one read of the slots' holders per pool); their pumps also
        repair the holders (`pump(repair=True)`): a completed holder whose release was lost gives
        its slot back, a granted one never told is told."""
        locks: dict[tuple[str, str, int], frozenset[str]] = {}
        for record in pending:
            if record.status != "pending":
                continue
            lock = lock_of(record)
            pools = slots_of(record)
            for scope, limit in pools[:-1]:  # several limits: the first one it lacks
                if (scope, "", limit) not in locks:
                    locks[(scope, "", limit)] = self.store.slot_status(scope, "")[0]
                if record.invocation_id not in locks[(scope, "", limit)]:
                    lock = (scope, "", limit)
                    break
            else:  # it holds all but the last (whose holder may have completed, its release lost)
                if len(pools) > 1:
                    lock = (pools[-1][0], "", pools[-1][1])
            if lock not in locks:
                if lock[2]:
                    locks[lock] = self.store.slot_status(lock[0], lock[1])[0]
                else:
                    holder = self.store.lock_holder(lock[0], lock[1])
                    locks[lock] = frozenset((holder,)) if holder else frozenset()
            if record.invocation_id not in locks[lock]:
                self.store.enqueue(lock[0], lock[1], record.inbox_seq, record.invocation_id)
        for scope, key, limit in locks:
            self.pump(scope, key, limit, repair=True)
        return len(locks)

    def pump(self, scope: str, key: str, limit: int = 0, *, repair: bool = False) -> None:
        """If nobody (alive) holds the key, give it to the earliest queued invocation and wake it.
        With `limit` (a concurrency limit's pool), give every free slot of `limit` to the earliest
        queued invocations (`_pump_slots`).

        Safe to run concurrently and repeatedly: granting is one conditional write that also takes the
        entry out of the queue, and a holder that already completed (its release was lost in a crash)
        is released here.
        """
        if limit:
            self._pump_slots(scope, key, limit, repair)
            return
        for _ in range(_PUMP_ROUNDS):
            holder, head = self.store.key_status(scope, key)
            if holder is not None:
                current = self.store.get_invocation(holder)
                if current is not None and current.status == "pending":  # granted, then a crash
                    self._grant(scope, key, holder)
                    return
                if current is not None and current.status != "completed":
                    return
                self.store.release_key(scope, key, holder)
                continue
            if head is None:
                return
            seq, invocation_id = head
            if not self.store.grant_key(scope, key, seq, invocation_id):
                continue
            if self._grant(scope, key, invocation_id):
                return
        log.warning("pumping the queue of %s/%s did not settle; the sweep will try again", scope, key)

    def _pump_slots(self, scope: str, key: str, limit: int, repair: bool) -> None:
        """Grant free slots of a concurrency limit to the queue's head, in order, while slots are free.

        A full pool is not looked into (its holders are alive, or the sweep repairs it): one read per
        pump. With `repair` (the sweeps) each holder is read once: one that completed gives its slot
        back (`release_slot`: its release was lost in a crash), one still `pending` (granted, then a
        crash before it was told) is told (`_grant`)."""
        for _ in range(_PUMP_ROUNDS):
            holders, head = self.store.slot_status(scope, key)
            if repair:
                repair = False
                for holder in sorted(holders):
                    current = self.store.get_invocation(holder)
                    if current is None or current.status == "completed":
                        self.store.release_slot(scope, key, holder)
                    elif current.status == "pending":
                        self._grant(scope, key, holder, limit)
                continue
            if head is None or len(holders) >= limit:
                return
            seq, invocation_id = head
            if self.store.grant_slot(scope, key, seq, invocation_id, limit):
                self._grant(scope, key, invocation_id, limit)
        log.warning("pumping the queue of %s did not settle; the sweep will try again", scope)

    def _grant(self, scope: str, key: str, invocation_id: str, limit: int = 0) -> bool:
        """The key (or, with `limit`, a slot) is granted to `invocation_id`: turn `pending` into `ready` and wake it.

        Only a `pending` invocation is turned (conditional on its epoch), so concurrent pumps that
        grant the same head never disturb it once a worker runs it. False if it had completed
        (killed or cancelled while it waited): the key is released for the next one.
        """
        for _ in range(_PUMP_ROUNDS):
            record = self.store.get_invocation(invocation_id)
            if record is None or record.status == "completed":
                if record is not None and len(slots_of(record)) > 1:
                    self.release(record)  # the slots of its further limits `_take_rest` may have taken too
                elif limit:
                    self.store.release_slot(scope, key, invocation_id)
                else:
                    self.store.release_key(scope, key, invocation_id)
                return False
            if record.status != "pending":
                return True  # another pump granted it already
            if limit and not self._take_rest(record, scope):
                return True  # queued for a further limit's slot: still `pending`
            try:
                self.store.leave_queue(invocation_id, record.epoch, modified_at_ms=self.clock.now_ms())
            except StoreConflict:
                continue  # changed under us (granted, killed): look again
            self.scheduler.wake_now(invocation_id)
            return True
        return True

    def _take_rest(self, record: InvocationRecord, granted: str) -> bool:
        """Granted the slot of pool `granted`, take the slots of the limits after it in taking order:
        True if it now holds them all, else it is queued for the first one it could not take."""
        pools = slots_of(record)
        after = [pool for i, pool in enumerate(pools) if any(scope == granted for scope, _ in pools[:i])]
        for scope, limit in after:
            if not self.store.take_slot(scope, "", record.invocation_id, limit):
                self.store.enqueue(scope, "", record.inbox_seq, record.invocation_id)
                self.pump(scope, "", limit)
                return False
        return True

    def release(self, record: InvocationRecord) -> None:
        """The invocation ended: leave the queue or release the key (or slot), and hand it on if others wait.

        On the common path one write: the release tells whether anyone waits, so an uncontended key
        is never looked up again. A release that finds the key not held by this invocation pumps too:
        the release may have landed already (a write retried after its first attempt succeeded, or a
        pump that released a completed holder), and waiting calls must not wait for the sweep.
        """
        if not takes_turn(record):
            return
        pools = slots_of(record)
        if len(pools) > 1:  # several limits: each is released (and handed on) alike
            for scope, limit in reversed(pools):
                self._release_one(record, scope, "", limit)
            return
        self._release_one(record, *lock_of(record))

    def _release_one(self, record: InvocationRecord, scope: str, key: str, limit: int) -> None:
        if record.inbox_seq:
            self.store.dequeue(scope, key, record.inbox_seq, record.invocation_id)
        if limit:
            waiting = self.store.release_slot(scope, key, record.invocation_id)
        else:
            waiting = self.store.release_key(scope, key, record.invocation_id)
        if waiting is None or waiting or record.inbox_seq:
            self.pump(scope, key, limit)

    # --- state --------------------------------------------------------------------------------------

    def start_state(self, state: dict[bytes, bytes], lazy: bool, max_eager_bytes: int) -> tuple[list[object], bool]:
        """`(StartMessage.state_map entries, partial_state)` for an attempt."""
        size = sum(len(k) + len(v) for k, v in state.items())
        if lazy or size > max_eager_bytes:
            return [], True
        return [pb.StartMessage.StateEntry(key=k, value=v) for k, v in sorted(state.items())], False

    def apply_state(self, record: InvocationRecord, state: dict[bytes, bytes] | None, entries: list[Frame]) -> None:
        """Apply consecutive committed SetState / ClearState / ClearAllState commands as one store write.

        An exclusive handler's write is fenced by its key (`Store.apply_state(holder=...)`): one that
        lost the key (killed meanwhile) writes nothing and `StoreConflict` is raised. Idempotent.
        """
        if not may_write_state(record):
            log.error("%s: a shared handler cannot write state; ignored", record.invocation_id)
            return
        writes: dict[bytes, bytes | None] = {}
        clear = False
        for entry in entries:
            if entry.type == MessageType.SetState:
                command = pb.SetStateCommandMessage.FromString(entry.payload)
                writes[command.key] = command.value.content
            elif entry.type == MessageType.ClearState:
                writes[pb.ClearStateCommandMessage.FromString(entry.payload).key] = None
            elif entry.type == MessageType.ClearAllState:
                writes.clear()
                clear = True
        holder = record.invocation_id if is_exclusive(record) else None
        self.store.apply_state(record.service, record.key, writes, clear=clear, holder=holder)
        if state is not None:
            if clear:
                state.clear()
            for state_key, value in writes.items():
                if value is None:
                    state.pop(state_key, None)
                else:
                    state[state_key] = value

    def apply(self, record: InvocationRecord, state: dict[bytes, bytes] | None, entry: Frame) -> None:
        """Apply the effect of one committed state or promise command (idempotent)."""
        t = entry.type
        if t in STATE_COMMANDS:
            self.apply_state(record, state, [entry])
        elif t == MessageType.GetPromise:
            name = pb.GetPromiseCommandMessage.FromString(entry.payload).key
            self.store.add_promise_waiter(record.service, record.key, name, record.invocation_id)
        elif t == MessageType.CompletePromise:
            command = pb.CompletePromiseCommandMessage.FromString(entry.payload)
            which = command.WhichOneof("completion")
            promise = PromiseRecord(
                value=command.completion_value.content if which == "completion_value" else None,
                failure=(stored_failure(command.completion_failure) if which == "completion_failure" else None),
                completed_by=_completed_by(record, command.result_completion_id),
            )
            stored = self.store.complete_promise(record.service, record.key, command.key, promise)
            if stored.completed_by == promise.completed_by:
                self._wake(self.store.promise_waiters(record.service, record.key, command.key), record.invocation_id)

    def _wake(self, invocation_ids: Iterable[str], completer: str) -> None:
        for invocation_id in invocation_ids:
            if invocation_id == completer:
                continue
            try:
                self.store.ring(invocation_id)
            except StoreConflict:
                continue  # gone (retention)
            self.scheduler.wake_now(invocation_id)

    # --- completions the lease holder derives -------------------------------------------------------

    def derive(self, record: InvocationRecord, journal: Journal, state: dict[bytes, bytes] | None) -> list[Frame]:
        """Completions of lazy state reads and promise commands that can be answered now."""
        out: list[Frame] = []
        for completion_id, command in journal.open_commands():
            notification = self._derive_one(record, completion_id, command, state)
            if notification is not None:
                out.append(frame(notification))
        return out

    def _derive_one(
        self, record: InvocationRecord, completion_id: int, command: Frame, state: dict[bytes, bytes] | None
    ) -> Message | None:
        """The completion of one open command that stored state or promises answer now, or None."""
        t = command.type
        if t == MessageType.GetLazyState:
            key = pb.GetLazyStateCommandMessage.FromString(command.payload).key
            found = (state or {}).get(key)
            read = pb.GetLazyStateCompletionNotificationMessage(completion_id=completion_id)
            if found is None:
                read.void.SetInParent()
            else:
                read.value.content = found
            return read
        if t == MessageType.GetLazyStateKeys:
            keys = pb.StateKeys(keys=sorted((state or {}).keys()))
            return pb.GetLazyStateKeysCompletionNotificationMessage(completion_id=completion_id, state_keys=keys)
        if t in (MessageType.GetPromise, MessageType.PeekPromise, MessageType.CompletePromise):
            name = pb.GetPromiseCommandMessage.FromString(command.payload).key  # same field 1 in all three
            promise = self.store.get_promise(record.service, record.key, name)
            if t == MessageType.CompletePromise:
                if promise is None:
                    return None  # its effect has not run yet (it runs right after the commit)
                done = pb.CompletePromiseCompletionNotificationMessage(completion_id=completion_id)
                if promise.completed_by == _completed_by(record, completion_id):
                    done.void.SetInParent()
                else:
                    done.failure.CopyFrom(
                        pb.Failure(code=ALREADY_COMPLETED, message=f"promise '{name}' was already completed")
                    )
                return done
            cls = (
                pb.GetPromiseCompletionNotificationMessage
                if t == MessageType.GetPromise
                else pb.PeekPromiseCompletionNotificationMessage
            )
            if promise is None:
                if t == MessageType.GetPromise:
                    return None  # not completed yet: wait (the completer wakes us)
                peeked = pb.PeekPromiseCompletionNotificationMessage(completion_id=completion_id)
                peeked.void.SetInParent()  # peeked, not completed yet
                return peeked
            result = cls(completion_id=completion_id)
            if promise.failure is not None:
                result.failure.CopyFrom(wire_failure(promise.failure))
            else:
                result.value.content = promise.value or b""
            return result
        return None
