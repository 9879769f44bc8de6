"""The invocation lifecycle: create an invocation, and `advance` it one durable step at a time.

`advance(invocation_id)` is the one operation of the orchestrator (see ARCHITECTURE.md): take the
lease (new epoch), load the journal, invoke the pinned deployment with Start + journal
(request/response mode), commit the answer with a single conditional write at the journal's current
length, then decide: done, suspended, run again now (a `ctx.run` result was stored), or retry later.
Nothing in memory outlives the call; a crash at any point leaves a journal that the next `advance`
continues from.
"""

from __future__ import annotations

import logging
import random
from collections.abc import Mapping
from dataclasses import dataclass, replace
from enum import StrEnum

from control_plane import ids
from control_plane.errors import ProtocolViolation, TorporError
from control_plane.journal import AwaitPoint, Journal
from control_plane.ports import (
    Clock,
    InvocationRecord,
    InvokerError,
    JournalBatch,
    Scheduler,
    Store,
    StoreConflict,
)
from control_plane.protocol import (
    Frame,
    MessageType,
    decode_frames,
    encode_frames,
    frame,
    invocation_content_type,
    is_command,
    is_custom,
    is_notification,
)
from control_plane.protocol import protocol_pb2 as pb
from control_plane.registry import HandlerOptions, Registry
from control_plane.settings import Settings
from control_plane.waiters import CompletionWaiters

log = logging.getLogger("torpor.invocation")

RUNNABLE = ("ready", "running", "backing-off", "suspended")
"""Statuses in which a worker may take the lease and make progress."""

_DROPPED_INPUT_HEADERS = frozenset(
    {"host", "content-length", "connection", "transfer-encoding", "accept-encoding", "keep-alive", "expect"}
)


class Outcome(StrEnum):
    """What one `advance` call achieved. Expected outcomes are values, not exceptions."""

    COMPLETED = "completed"
    SUSPENDED = "suspended"
    BACKING_OFF = "backing-off"
    PAUSED = "paused"
    BUSY = "busy"  # another worker holds the lease, or the invocation is not runnable
    LEASE_LOST = "lease-lost"  # our epoch moved on while we worked; the new holder continues
    NOT_DUE = "not-due"  # woken before its retry time; re-armed
    HANDED_OFF = "handed-off"  # the caller's deadline passed between attempts; the scheduler goes on


@dataclass(frozen=True, slots=True)
class AttemptFailure:
    """A failed attempt: Restate-style `code` (HTTP status or 5xx protocol code), `message`, hints."""

    code: int
    message: str
    next_retry_delay_ms: int | None = None
    behavior: int = pb.RETRY  # ErrorBehavior (V7): RETRY, PAUSE or FAIL
    related_command: str | None = None
    stacktrace: str = ""


@dataclass(frozen=True, slots=True)
class AttemptAnswer:
    """A well-formed answer: the entries to commit and how the stream ended (End or Suspension)."""

    entries: list[Frame]
    ended: bool
    awaiting: AwaitPoint


@dataclass(slots=True)
class _Held:
    """An invocation this worker holds the lease on, with its journal in memory."""

    record: InvocationRecord
    journal: Journal


def parse_answer(body: bytes) -> AttemptAnswer | AttemptFailure:
    """Read the SDK's answer to one attempt (request/response mode).

    The answer is new commands, run proposals, then exactly one of End, Suspension or Error; a run
    proposal becomes a RunCompletion notification stored right where it was proposed. An answer
    ending in none of the three is a failed attempt (Restate service protocol, "Stream lifecycle").

    Returns an `AttemptAnswer`, or an `AttemptFailure` for an ErrorMessage or a malformed stream.
    """
    try:
        frames = decode_frames(body)
    except ProtocolViolation as exc:
        return AttemptFailure(571, f"the deployment's answer is not valid framing: {exc.message}")
    entries: list[Frame] = []
    for f in frames:
        t = f.type
        if is_command(t) or is_custom(t):
            entries.append(Frame(t, f.payload))  # the ack flag is a request, never stored
        elif t == MessageType.ProposeRunCompletion:
            proposal = pb.ProposeRunCompletionMessage.FromString(f.payload)
            notification = pb.RunCompletionNotificationMessage(completion_id=proposal.result_completion_id)
            if proposal.WhichOneof("result") == "failure":
                notification.failure.CopyFrom(proposal.failure)
            else:
                notification.value.content = proposal.value
            entries.append(frame(notification))
        elif t == MessageType.End:
            return AttemptAnswer(entries, ended=True, awaiting=AwaitPoint())
        elif t == MessageType.Suspension:
            suspension = pb.SuspensionMessage.FromString(f.payload)
            return AttemptAnswer(entries, ended=False, awaiting=AwaitPoint.of(suspension))
        elif t == MessageType.Error:
            error = pb.ErrorMessage.FromString(f.payload)
            related = error.related_command_name if error.HasField("related_command_name") else None
            return AttemptFailure(
                code=error.code or 500,
                message=error.message,
                next_retry_delay_ms=error.next_retry_delay if error.HasField("next_retry_delay") else None,
                behavior=error.behavior,
                related_command=related,
                stacktrace=error.stacktrace,
            )
        elif t in (MessageType.AwaitingOn, MessageType.CommandAck):
            continue  # hints for observability; nothing to store
        elif is_notification(t):
            return AttemptFailure(571, f"the deployment sent a notification (type {t:#06x}); only the runtime may")
        else:
            return AttemptFailure(571, f"unexpected message type {t:#06x} in the deployment's answer")
    return AttemptFailure(571, "the deployment's answer ended without End, Suspension or Error")


class Engine:
    """Creates invocations and advances them. Thread-safe; keeps no state between calls.

    Args:
        store: durable storage (DynamoDB).
        registry: deployments, services and their effective options.
        invoker: sends requests to deployments.
        scheduler: wakes invocations now (work queue) or later (timers).
        clock: wall clock in ms.
        settings: runtime defaults.
        waiters: in-process notification of completions, for callers waiting on a result.
    """

    def __init__(
        self,
        store: Store,
        registry: Registry,
        scheduler: Scheduler,
        clock: Clock,
        settings: Settings,
        waiters: CompletionWaiters,
    ) -> None:
        self.store = store
        self.registry = registry
        self.scheduler = scheduler
        self.clock = clock
        self.settings = settings
        self.waiters = waiters

    # --- creation ---------------------------------------------------------------------------------

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
    ) -> InvocationRecord:
        """Store a new invocation of `service/handler` whose Input carries `body` and `headers`.

        With `leased=True` the creator holds the lease (epoch 1) and is expected to `drive` it at
        once; otherwise the invocation is `ready` and the scheduler is asked to run it.

        Raises `NotFound` for an unknown service or handler.
        """
        target = self.registry.resolve(service, handler)
        deployment = self.registry.deployment(target.deployment_id)
        now = self.clock.now_ms()
        input_headers = [
            pb.Header(key=k, value=v) for k, v in headers.items() if k.lower() not in _DROPPED_INPUT_HEADERS
        ]
        input_entry = encode_frames(
            [frame(pb.InputCommandMessage(headers=input_headers, value=pb.Value(content=body)))]
        )
        record = InvocationRecord(
            invocation_id=ids.new_invocation_id(),
            service=service,
            handler=handler,
            key=key,
            deployment_id=deployment.deployment_id,
            protocol_version=self.registry.protocol_version(deployment),
            status="running" if leased else "ready",
            input_entry=input_entry,
            created_at_ms=now,
            modified_at_ms=now,
            epoch=1 if leased else 0,
            lease_until_ms=now + self._lease_ms(target.options) if leased else 0,
            random_seed=random.getrandbits(63),
            idempotency_key=idempotency_key,
            output_content_type=target.output_content_type,
        )
        self.store.create_invocation(record)
        if not leased:
            self.scheduler.wake_now(record.invocation_id)
        return record

    def drive(self, record: InvocationRecord, deadline_ms: int | None = None) -> tuple[Outcome, InvocationRecord]:
        """Advance an invocation just created with `leased=True`, without reloading it.

        If `deadline_ms` (ms since the epoch) passes between two attempts, the lease is released and
        the scheduler continues the invocation (`Outcome.HANDED_OFF`); an attempt already under way
        is never cut short, so the call can overrun the deadline by one attempt.

        Returns the outcome and the invocation record as this worker last wrote it.
        """
        held = _Held(record, Journal.load(record.input_entry, ()))
        return self._run(held, deadline_ms), held.record

    # --- advance ----------------------------------------------------------------------------------

    def advance(self, invocation_id: str) -> Outcome:
        """Take the lease on `invocation_id` and make as much progress as possible.

        Idempotent and safe to call concurrently, twice, or late: a worker that does not get the
        lease returns `Outcome.BUSY`; a commit that loses its conditional write changes nothing.
        """
        now = self.clock.now_ms()
        try:  # a handler with a longer inactivity timeout extends the lease in `_run`
            record = self.store.acquire_lease(invocation_id, now, now + self.settings.lease_ms, RUNNABLE)
        except StoreConflict:
            return Outcome.BUSY
        loaded = self.store.load_invocation(invocation_id)
        if loaded is None:
            return Outcome.BUSY
        _, batches = loaded
        held = _Held(record, Journal.load(record.input_entry, batches))
        if record.next_retry_at_ms > now:  # woken early (duplicate timer): go back to waiting
            self._update(held, status="backing-off", lease_until_ms=0)
            self.scheduler.wake_at(invocation_id, record.next_retry_at_ms)
            return Outcome.NOT_DUE
        awaiting = AwaitPoint.from_json(record.waiting_on)
        if record.waiting_on and not held.journal.can_resume(awaiting):
            self._update(held, status="suspended", lease_until_ms=0)
            return Outcome.SUSPENDED
        return self._run(held)

    def _lease_ms(self, options: HandlerOptions) -> int:
        return options.inactivity_timeout_ms + self.settings.lease_margin_ms

    def _run(self, held: _Held, deadline_ms: int | None = None) -> Outcome:
        """Invoke, commit and decide, looping while a stored run result lets the handler go on."""
        record = held.record
        options = self.registry.options(record.service, record.handler)
        first = True
        while True:
            now = self.clock.now_ms()
            if deadline_ms is not None and now >= deadline_ms and not first:
                try:
                    self._update(held, lease_until_ms=0, journal_length=len(held.journal))
                except StoreConflict:
                    return Outcome.LEASE_LOST
                self.scheduler.wake_now(record.invocation_id)
                return Outcome.HANDED_OFF
            first = False
            if held.record.lease_until_ms - now < options.inactivity_timeout_ms + 1_000:
                try:
                    self._update(held, lease_until_ms=now + self._lease_ms(options))
                except StoreConflict:
                    return Outcome.LEASE_LOST
            result = self._attempt(held, options)
            if isinstance(result, AttemptFailure):
                return self._failed(held, result, options)
            committed = self._commit(held, result.entries)
            if committed is not None:
                return committed
            if result.ended:
                return self._complete(held)
            if held.journal.can_resume(result.awaiting):
                continue  # e.g. a ctx.run result we just stored: re-invoke at once
            self._update(
                held,
                status="suspended",
                lease_until_ms=0,
                waiting_on=result.awaiting.to_json(),
                journal_length=len(held.journal),
            )
            return Outcome.SUSPENDED

    def _attempt(self, held: _Held, options: HandlerOptions) -> AttemptAnswer | AttemptFailure:
        """One request to the pinned deployment with Start + the whole journal."""
        record = held.record
        deployment = self.registry.deployment(record.deployment_id)
        version = record.protocol_version
        journal_length = len(held.journal)
        same_prefix = journal_length <= record.retry_at_length
        start = pb.StartMessage(
            id=ids.invocation_id_bytes(record.invocation_id),
            debug_id=record.invocation_id,
            known_entries=journal_length,
            key=record.key,
            partial_state=False,
            retry_count_since_last_stored_entry=record.retry_count if same_prefix else 0,
        )
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
        }
        if record.key:
            headers["x-restate-service-key"] = record.key
        body = encode_frames([frame(start), *held.journal.frames])
        held.record = replace(record, attempts=record.attempts + 1)
        try:
            reply = self.registry.invoker.request(
                deployment.endpoint,
                "POST",
                f"/invoke/{record.service}/{record.handler}",
                headers,
                body,
                options.inactivity_timeout_ms / 1000,
            )
        except InvokerError as exc:
            return AttemptFailure(503, f"could not reach deployment {deployment.deployment_id}: {exc.message}")
        if reply.status == 415:
            return AttemptFailure(415, f"the deployment does not accept service protocol V{version} ({content_type})")
        if reply.status != 200:
            text = reply.body[:300].decode("utf-8", "replace")
            return AttemptFailure(reply.status, f"the deployment answered HTTP {reply.status}: {text}")
        return parse_answer(reply.body)

    def _commit(self, held: _Held, entries: list[Frame]) -> Outcome | None:
        """Append the attempt's entries at the journal's length; None when committed (or nothing to do).

        Losing the conditional write means another worker committed at this index: reload, and stop
        if our epoch is gone.
        """
        if not entries:
            return None
        batch = JournalBatch(len(held.journal), encode_frames(entries), held.record.epoch, self.clock.now_ms())
        try:
            self.store.append_batch(held.record.invocation_id, batch)
        except StoreConflict:
            loaded = self.store.load_invocation(held.record.invocation_id)
            if loaded is None or loaded[0].epoch != held.record.epoch:
                return Outcome.LEASE_LOST
            record, batches = loaded
            held.record, held.journal = record, Journal.load(record.input_entry, batches)
            log.warning("journal of %s moved on under the lease holder; re-invoking", record.invocation_id)
            return None
        held.journal.extend(entries)
        return None

    def _complete(self, held: _Held) -> Outcome:
        output = held.journal.output()
        if output is None:
            return self._failed(held, AttemptFailure(571, "the handler ended without writing an Output"), None)
        now = self.clock.now_ms()
        changes: dict[str, object] = {
            "status": "completed",
            "lease_until_ms": 0,
            "completed_at_ms": now,
            "journal_length": len(held.journal),
            "waiting_on": None,
            "next_retry_at_ms": 0,
            "attempts": held.record.attempts,
            "expires_at_s": (now + self.settings.completed_retention_ms) // 1000,
        }
        if output.WhichOneof("result") == "failure":
            changes["failure"] = {"code": output.failure.code or 500, "message": output.failure.message}
        else:
            changes["output"] = output.value.content
        try:
            self._update(held, **changes)
        except StoreConflict:
            return Outcome.LEASE_LOST
        self.waiters.notify(held.record.invocation_id)
        return Outcome.COMPLETED

    def _failed(self, held: _Held, failure: AttemptFailure, options: HandlerOptions | None) -> Outcome:
        """Record a failed attempt; retry later by policy, pause, or fail the invocation."""
        record = held.record
        policy = (options or self.registry.options(record.service, record.handler)).retry_policy
        now = self.clock.now_ms()
        journal_length = len(held.journal)
        retry_count = record.retry_count + 1 if journal_length <= record.retry_at_length else 1
        last_failure = {
            "code": failure.code,
            "message": failure.message,
            "at_ms": now,
            "attempt": record.attempts,
            "related_command": failure.related_command,
        }
        log.info("attempt %d of %s failed: %s %s", record.attempts, record.invocation_id, failure.code, failure.message)
        common: dict[str, object] = {
            "lease_until_ms": 0,
            "attempts": record.attempts,
            "retry_count": retry_count,
            "retry_at_length": journal_length,
            "last_failure": last_failure,
            "journal_length": journal_length,
        }
        try:
            if failure.behavior == pb.FAIL or (policy.exhausted(retry_count) and policy.on_max_attempts == "kill"):
                self._update(
                    held,
                    **common,
                    status="completed",
                    failure={"code": failure.code, "message": failure.message},
                    completed_at_ms=now,
                    next_retry_at_ms=0,
                    expires_at_s=(now + self.settings.completed_retention_ms) // 1000,
                )
                self.waiters.notify(record.invocation_id)
                return Outcome.COMPLETED
            if failure.behavior == pb.PAUSE or policy.exhausted(retry_count):
                self._update(held, **common, status="paused", next_retry_at_ms=0)
                self.waiters.notify(record.invocation_id)
                return Outcome.PAUSED
            due = now + policy.delay_ms(retry_count, failure.next_retry_delay_ms)
            self._update(held, **common, status="backing-off", next_retry_at_ms=due)
        except StoreConflict:
            return Outcome.LEASE_LOST
        self.scheduler.wake_at(record.invocation_id, due)
        return Outcome.BACKING_OFF

    def _update(self, held: _Held, **changes: object) -> None:
        """Conditional update on our epoch; keeps the in-memory record in step."""
        changes.setdefault("modified_at_ms", self.clock.now_ms())
        self.store.update_invocation(held.record.invocation_id, held.record.epoch, **changes)
        held.record = replace(held.record, **changes)  # type: ignore[arg-type]


def describe_failure(record: InvocationRecord) -> TorporError | None:
    """The failure of a completed invocation as an error to render, or None if it succeeded."""
    if record.failure is None:
        return None
    failure = dict(record.failure)
    return TorporError(str(failure.get("message", "")), status=int(str(failure.get("code", 500))))
