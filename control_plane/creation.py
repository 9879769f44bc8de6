"""Creating invocations: ids (a workflow's run, an idempotency key's), the new record, its timer
if delayed, and its object key (taken at once, or queued for).

`Creation.create` is what the ingress, the effects (a Call's callee, a delayed send) and the
schedules call, through `Engine.create`. Store requests: one conditional create of the record (a
delayed one's timer recorded first, `Timers.record`), a workflow run's keyed items un-expired, and
for an exclusive handler the key taken or the queue joined (`Keys.take`, `Keys.enqueue`).
"""

from __future__ import annotations

import itertools
import logging
import random
import time
from collections.abc import Mapping
import dataclasses
from dataclasses import dataclass

from control_plane import ids
from control_plane.errors import BadRequest
from control_plane.keyed import Keys
from control_plane.limits import encode_more, pacing, rule_pools, sub_pool, taking_order
from control_plane.observability import NO_TRACER, Metrics, Tracer, trace_context_from
from control_plane.ports import (
    MAX_ITEM_BYTES,
    MAX_MESSAGE_BYTES,
    MAX_TIMER_MS,
    Clock,
    DeploymentRecord,
    InvocationRecord,
    ItemTooLarge,
    JournalBatch,
    Store,
    StoreConflict,
    StoreFacts,
)
from control_plane.protocol import encode_frames, frame
from control_plane.protocol import protocol_pb2 as pb
from control_plane.registry import HandlerOptions, Registry, Target
from control_plane.retention import Retention
from control_plane.settings import Settings
from control_plane.timers import Timers

log = logging.getLogger("torpor.creation")

ITEM_OVERHEAD_BYTES = 16 * 1024
"""Room (bytes) for an item's other attributes beside its large value."""
BATCH_BYTES = MAX_ITEM_BYTES - ITEM_OVERHEAD_BYTES
"""Entries are committed in batches of up to 393,216 bytes (one entry alone may take more): a batch
of small entries fits in one journal item, so no small entry goes to the blob store."""
JOURNAL_ENTRY_LIMIT_BYTES = MAX_MESSAGE_BYTES
"""The largest encoded journal entry, input, output or awakeable completion: 33,554,432 bytes
(restate-server's message limit). One above it could never be journaled, so the ingress refuses it
(413) before writing; a store without a blob store refuses what an item cannot hold (`ItemTooLarge`)."""


def what_holds(limit: int) -> str:
    """Names the limit `limit` (bytes) in an error message: restate-server's message limit, or one
    DynamoDB item when the store has no blob store."""
    if limit >= JOURNAL_ENTRY_LIMIT_BYTES:
        return "(32 MiB) a journal entry may take"
    return "a journal entry holds without a blob store (one DynamoDB item, 400 KB; TORPOR_BLOB_BUCKET: up to 32 MiB)"


_DROPPED_INPUT_HEADERS = frozenset(
    {"host", "content-length", "connection", "transfer-encoding", "accept-encoding", "keep-alive", "expect"}
)

_ARRIVALS = itertools.count()  # this process's arrivals on keys, in order


def inbox_seq(now_ms: int, invocation_id: str) -> str:
    """An invocation's place in its key's queue: arrival time, then the order this process created
    invocations in (calls and sends one handler made to one key, in the same millisecond, keep the
    order it made them in: Restate's ordering guarantee), then the id. Sorts as text."""
    return f"{now_ms:013d}{next(_ARRIVALS) % 1_000_000_000:09d}{invocation_id}"


def lease_ms(options: HandlerOptions, settings: Settings) -> int:
    """How long (ms) a lease on an invocation of a handler with `options` lasts: its inactivity
    timeout and the `lease_margin_ms` of `settings`."""
    return options.inactivity_timeout_ms + settings.lease_margin_ms


@dataclass(frozen=True, slots=True)
class Restarted:
    """What `Creation.create` takes over from a completed invocation restarted as new: its framed
    Input command (`input_entry`), the journal prefix after it (`entries`, framed, `count` of them),
    the deployment to pin (`deployment_id`) and the `random_seed` to keep (None: a new one)."""

    input_entry: bytes
    entries: bytes
    count: int
    deployment_id: str
    random_seed: int | None
    protocol_version: int | None = None  # the old one's, kept with a journal prefix (None: negotiated anew)


@dataclass(frozen=True, slots=True)
class _Plan:
    """How `Creation.create` creates one invocation (`Creation._plan`)."""

    invocation_id: str
    leased: bool  # the creator holds the lease (epoch 1) and drives it at once
    delayed: bool  # `scheduled`, woken at its execution time
    on_key: bool  # an exclusive handler, or one under a concurrency limit: takes its key (a slot) now, or queues
    workflow_run: bool


class Creation:
    """Creates invocations (see the module doc). Keeps, from `create` to `Engine.drive`, the object
    state an exclusive invocation read when it took its key (`taken_state`, by invocation id).

    Args:
        store, registry, clock, settings, metrics: the engine's ports and parts.
        keys: object keys (taken, queued for).
        retention: frees an id whose retention ended (`Retention.drop_if_expired`).
        timers: where a delayed invocation's timer is armed.
        facts: facts about the store's deployment (16-byte ids of an old table, request costs).
    """

    def __init__(
        self,
        store: Store,
        registry: Registry,
        clock: Clock,
        settings: Settings,
        metrics: Metrics,
        keys: Keys,
        retention: Retention,
        timers: Timers,
        facts: StoreFacts,
    ) -> None:
        self.store = store
        self.facts = facts
        self.registry = registry
        self.clock = clock
        self.settings = settings
        self.metrics = metrics
        self.keys = keys
        self.retention = retention
        self.timers = timers
        self.scheduler = timers.scheduler
        self.taken_state: dict[str, dict[bytes, bytes]] = {}
        self.tracer: Tracer = NO_TRACER  # `Engine.use_tracer`

    def workflow_run_id(self, workflow: str, workflow_id: str) -> str:
        """The id of workflow `workflow`'s `run` for `workflow_id` (`ids.workflow_run_id`), or the
        16-byte id an earlier Torpor gave it if that run is still stored (one store read, only in a
        store first used before the id change: `StoreFacts.holds_short_ids`): a run created before the
        change keeps deduplicating. No new run gets a 16-byte id."""
        if self.facts.holds_short_ids:
            legacy = ids.legacy_workflow_run_id(workflow, workflow_id)
            if self.store.get_invocation(legacy) is not None:
                return legacy
        return ids.workflow_run_id(workflow, workflow_id)

    def idempotent_invocation_id(self, service: str, handler: str, key: str, idempotency_key: str) -> str:
        """The id of the request to `service/handler` (of `key`) with `idempotency_key`
        (`ids.idempotent_invocation_id`), or the 16-byte id an earlier Torpor gave it while that
        invocation is still stored (one store read), as `workflow_run_id`."""
        if self.facts.holds_short_ids:
            legacy = ids.legacy_idempotent_invocation_id(service, handler, key, idempotency_key)
            if self.store.get_invocation(legacy) is not None:
                return legacy
        return ids.idempotent_invocation_id(service, handler, key, idempotency_key)

    def create(
        self,
        service: str,
        handler: str,
        body: bytes,
        headers: Mapping[str, str],
        *,
        key: str = "",
        leased: bool,
        idempotency_key: str = "",
        execution_time_ms: int = 0,
        invocation_id: str | None = None,
        caller_id: str = "",
        caller_completion_id: int = 0,
        trace_id: str | None = None,
        trace_parent: str = "",
        restart: Restarted | None = None,
        scope: str = "",
        limit_key: str = "",
    ) -> InvocationRecord:
        """Store a new invocation of `service/handler` whose Input carries `body` and `headers`.

        With `leased=True` the creator holds the lease (epoch 1) and is expected to `drive` it at
        once. Otherwise it is `ready` and woken now, or, with `execution_time_ms` (ms since the
        epoch) in the future, `scheduled` and woken then (a delayed send). An exclusive handler of
        a virtual object takes its key at once if nobody holds it or waits for it (`Keys.take`);
        otherwise it is `pending` in its key's queue until it is granted the key (not leased).
        A workflow's `run` gets the workflow's deterministic run id, so it is created once.

        Its trace is `trace_id` (a caller's; "" if the caller's is not sampled) with `trace_parent` (the
        caller's span), else the one of a `traceparent` among `headers` (`trace_context_from`), else
        new. With a `Tracer` on, the ingress span (for a request without a caller) and the invocation's
        span are emitted once it is stored (`Tracer`).

        With `restart` (restart as new, `Engine.restart_as_new`) the new invocation gets the old one's
        Input command as it was, and starts with the journal prefix it carries: that batch is written
        before the record, whose conditional creation is the commit point (a crash in between leaves
        entries under an id nobody knows, never an invocation without them); the prefix's effects count
        as applied (they happened in the old invocation), so it continues from its end.

        Raises `NotFound` for an unknown service or handler, `BadRequest` for a keyed service
        without a key, `StoreConflict` if the invocation id exists already.
        """
        started_ns = time.time_ns()
        target = self.registry.resolve(service, handler)
        if scope and target.service_type != "VIRTUAL_OBJECT":  # objects: one per key already
            # a V7 call's scope: the rule book may limit it at each level (`limits.rule_pools`), one read
            pools = rule_pools(self.store.get_rule_book()[0], scope, limit_key)
            if pools:
                target = dataclasses.replace(target, pools=target.pools + tuple(pools))
        deployment = self.registry.deployment(restart.deployment_id if restart else target.deployment_id)
        now = self.clock.now_ms()
        if target.rate is not None:  # paced: its start is reserved in arrival order (`limits.reserve`)
            interval_ms, burst = pacing(target.rate[1])
            start = self.store.reserve_start(target.rate[0], "", max(now, execution_time_ms), interval_ms, burst)
            if start > now:  # `scheduled` until then (the ingress waits for the result as for a queued call)
                execution_time_ms, leased = start, False
        if target.service_type != "SERVICE" and not key:
            raise BadRequest(f"'{service}' is a keyed service: call it as /{service}/{{key}}/{handler}")
        plan = self._plan(target, service, handler, key, idempotency_key, invocation_id, leased, execution_time_ms, now)
        record = self._new_record(
            plan,
            target,
            deployment,
            service,
            handler,
            key,
            body,
            headers,
            now=now,
            execution_time_ms=execution_time_ms,
            idempotency_key=idempotency_key,
            caller_id=caller_id,
            caller_completion_id=caller_completion_id,
            trace_id=trace_id,
            trace_parent=trace_parent,
            scope=scope,
            limit_key=limit_key,
        )
        if restart is not None:
            record = self._restarted(record, restart, now)
        limit = min(JOURNAL_ENTRY_LIMIT_BYTES, self.facts.value_limit_bytes)
        if len(record.input_entry) > limit:  # refused before anything is written
            raise ItemTooLarge(
                f"the request takes {len(record.input_entry)} bytes as the invocation's input, more than the "
                f"{limit} bytes {what_holds(limit)}; send a smaller body"
            )
        self._store_new(record, plan.delayed, execution_time_ms)
        if plan.workflow_run:  # promises completed before it ran
            self.store.expire_keyed(service, key, 0)  # expire with it, not before (`_expire_without_run`)
        self.metrics.count("invocations_created", service=service, handler=handler)
        if self.tracer.enabled and record.trace_id:
            self.tracer.invocation_started(record, started_ns)
        state = self.keys.take(record) if plan.on_key else None
        if plan.on_key and state is None:  # the key is held or others wait: queue up
            record = self._wait_for_key(record)
        elif plan.on_key and plan.leased and state is not None and not record.slot_limit:  # read with the key
            self.taken_state[record.invocation_id] = state
        if plan.delayed:
            self.timers.hop(record.invocation_id, execution_time_ms)  # recorded by `_store_new`
        elif not plan.leased and record.status == "ready":
            self._hand_off(record.invocation_id)
        return record

    def _hand_off(self, invocation_id: str) -> None:
        """Wake the worker for a new `ready` invocation, after its record committed. A wake-up that
        fails here (an Invoke throttled or refused, a send the queue refused) does not fail the
        request: the invocation is stored and acknowledged, and the sweep (`ControlPlane.sweep_due`)
        wakes a `ready` invocation without a lease left unchanged for its grace period, so the hand-off
        is retried, not lost; answering an error would make a client without an idempotency key
        send it again and run it twice. The failure is logged and counted (`wake_failures`)."""
        try:
            self.scheduler.wake_now(invocation_id)
        except Exception:  # noqa: BLE001 - any adapter error: the sweep retries the hand-off
            log.exception("invocation %s: stored, but its wake-up failed; the sweep will start it", invocation_id)
            self.metrics.count("wake_failures")

    def _restarted(self, record: InvocationRecord, restart: Restarted, now: int) -> InvocationRecord:
        """`record` as a restart as new creates it: the old Input command, and the journal prefix
        (written here, before the record: see `create`) with its effects counted as applied."""
        changes: dict[str, object] = {"input_entry": restart.input_entry}
        if restart.random_seed is not None:
            changes["random_seed"] = restart.random_seed
        if restart.protocol_version is not None:
            changes["protocol_version"] = restart.protocol_version
        if restart.count:
            self.store.append_batch(record.invocation_id, JournalBatch(1, restart.entries, record.epoch, now))
            changes.update(journal_length=1 + restart.count, effects_applied_upto=1 + restart.count)
        return record.evolve(**changes)

    def _plan(
        self,
        target: Target,
        service: str,
        handler: str,
        key: str,
        idempotency_key: str,
        invocation_id: str | None,
        leased: bool,
        execution_time_ms: int,
        now: int,
    ) -> _Plan:
        """How `create` creates an invocation of `target`: its id (a workflow run's, an idempotency
        key's, the one given, or a new one), whether it is delayed, leased, and takes its key now."""
        handler_type = target.handler_type or ("EXCLUSIVE" if target.service_type == "VIRTUAL_OBJECT" else "")
        workflow_run = target.service_type == "WORKFLOW" and handler_type == "WORKFLOW"
        if workflow_run:
            invocation_id = self.workflow_run_id(service, key)
        elif idempotency_key and invocation_id is None:
            invocation_id = self.idempotent_invocation_id(service, handler, key, idempotency_key)
        exclusive = target.service_type == "VIRTUAL_OBJECT" and handler_type != "SHARED"
        delayed = execution_time_ms > now and not (leased and not exclusive)
        leased = leased and not delayed
        on_key = (exclusive or bool(target.pools)) and not delayed  # takes its key (slot) now, or queues
        return _Plan(invocation_id or ids.new_invocation_id(key), leased, delayed, on_key, workflow_run)

    def _store_new(self, record: InvocationRecord, delayed: bool, execution_time_ms: int) -> None:
        """Store a new invocation `record`, with the timer of a `delayed` one (due at
        `execution_time_ms`, ms since the epoch) written first: a crash in between leaves a timer for
        nothing, never the reverse. An id whose retention ended is free again (removed, then created).

        Raises `StoreConflict` if the id exists (its timer is deleted again unless it is the existing
        invocation's own), `ItemTooLarge` if the record does not fit in an item."""
        due = min(execution_time_ms, MAX_TIMER_MS)
        if delayed:
            self.timers.record(record.invocation_id, due)
        try:
            try:
                self.store.create_invocation(record)
            except StoreConflict:
                if not self.retention.drop_if_expired(record.invocation_id):  # its retention ended: free again
                    raise
                self.store.create_invocation(record)
        except (StoreConflict, ItemTooLarge):
            if delayed:  # not created (the idempotency key's invocation exists): its timer is for nothing,
                existing = self.store.get_invocation(record.invocation_id)
                if existing is None or existing.execution_time_ms != execution_time_ms:
                    self.timers.cancel(record.invocation_id, due)  # unless it is the existing one's own
            raise

    def _new_record(
        self,
        plan: _Plan,
        target: Target,
        deployment: DeploymentRecord,
        service: str,
        handler: str,
        key: str,
        body: bytes,
        headers: Mapping[str, str],
        *,
        now: int,
        execution_time_ms: int,
        idempotency_key: str,
        caller_id: str,
        caller_completion_id: int,
        trace_id: str | None,
        trace_parent: str,
        scope: str = "",
        limit_key: str = "",
    ) -> InvocationRecord:
        """The record `create` stores (nothing written here): its Input command (`body`, and
        `headers` less the dropped ones), status `running` (`plan.leased`, epoch 1),
        `scheduled` (`plan.delayed`, woken at `execution_time_ms`) or `ready`, its place in its key's
        queue (`plan.on_key`), its caller and its trace."""
        invocation_id, leased, delayed, on_key = plan.invocation_id, plan.leased, plan.delayed, plan.on_key
        pools = taking_order(sub_pool(pool, n, invocation_id) for pool, n in target.pools)  # large ones: split
        if trace_id is None:  # no caller: the request's trace, and with a tracer on, its ingress span
            trace_id, trace_parent = trace_context_from(headers)
            if self.tracer.enabled and trace_id:
                trace_parent = self.tracer.ingress(trace_id, trace_parent, service, handler, invocation_id)
            else:
                trace_parent = ""  # kept only where spans are emitted
        handler_type = target.handler_type or ("EXCLUSIVE" if target.service_type == "VIRTUAL_OBJECT" else "")
        input_headers = [
            pb.Header(key=k, value=v) for k, v in headers.items() if k.lower() not in _DROPPED_INPUT_HEADERS
        ]
        input_command = pb.InputCommandMessage(headers=input_headers, value=pb.Value(content=body))
        return InvocationRecord(
            invocation_id=invocation_id,
            service=service,
            handler=handler,
            key=key,
            deployment_id=deployment.deployment_id,
            protocol_version=self.registry.protocol_version(deployment),
            status="running" if leased else "scheduled" if delayed else "ready",
            input_entry=encode_frames([frame(input_command)]),
            created_at_ms=now,
            modified_at_ms=now,
            epoch=1 if leased else 0,
            lease_until_ms=now + lease_ms(target.options, self.settings) if leased else 0,
            random_seed=random.getrandbits(63),
            # an id that can come back (sent again after a purge or its retention): new callee ids then
            callee_seed=random.getrandbits(63) | 1 if idempotency_key or plan.workflow_run else 0,
            idempotency_key=idempotency_key,
            output_content_type=target.output_content_type,
            execution_time_ms=execution_time_ms if delayed else 0,
            wake_up_at_ms=execution_time_ms if delayed else 0,
            service_type=target.service_type,
            handler_type=handler_type,
            # on a key: its place in the queue, and until a later write clears it, the mark that it
            # may not hold the key yet (a crash between creating it and taking the key: `Engine._advance`)
            inbox_seq=inbox_seq(now, invocation_id) if on_key else "",
            caller_id=caller_id,
            caller_completion_id=caller_completion_id,
            trace_id=trace_id,
            trace_parent=trace_parent,
            slot=pools[0][0] if pools else "",
            slot_limit=pools[0][1] if pools else 0,
            more_slots=encode_more(pools[1:]),
            scope=scope,
            limit_key=limit_key,
            requests=dict(self.facts.creation_requests(delayed=delayed, on_key=on_key)) or None,
        )

    def _wait_for_key(self, record: InvocationRecord) -> InvocationRecord:
        """A new exclusive invocation did not get its key (or a limited one a slot): `pending` in the
        queue, in arrival order."""
        try:
            fresh = self.store.wait_for_key(
                record.invocation_id, record.epoch, returning=True, modified_at_ms=self.clock.now_ms()
            )
        except StoreConflict:  # killed or cancelled at once: its ending released what it had
            return record
        assert fresh is not None
        self.keys.enqueue(fresh)
        return fresh
