"""The interfaces the core needs from the outside world: `Store`, `Invoker`, `Scheduler`, `Clock`.

`control_plane/` talks only to these; `adapters/` implements them (DynamoDB through pynamodb, HTTP
and Lambda invokers, local and AWS timers). `Store` is cut by family, the cut both store adapters
make: `InvocationStore` (invocations and journals), `KeyStore` (state, lock, queue, promises),
`TimerStore`, `RegistryStore` (deployments, services), `ScheduleStore`; facts about a deployment
that are not storage (IAM permissions, an id migration, billing) are `StoreFacts`.

Records here are plain frozen dataclasses; the store maps them to items. All times are integers in
milliseconds since the UNIX epoch (`*_ms`), durations are ms unless the name says otherwise.
"""

from __future__ import annotations

import operator
import time
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from enum import Enum
from typing import Any, Final, Literal, Protocol

from control_plane.errors import TorporError


class StoreConflict(TorporError):
    """A conditional write lost: the item exists, or its epoch/version moved on.

    Raised by every `Store` write whose condition fails. The core treats it as an expected outcome
    (a concurrent worker won), never as a failure of the invocation.
    """

    status = 409
    code = "conflict"


class ItemTooLarge(TorporError):
    """A write would make an item larger than DynamoDB's 400 KB limit; nothing was written (HTTP 413)."""

    status = 413
    code = "item_too_large"


class StoreUnavailable(TorporError):
    """The store cannot be read or written right now: its disk is full (HTTP 507), or the file
    cannot be read or written (an I/O error, a corrupt page; HTTP 503). Nothing was written by the
    call that raised it, so nothing acknowledged is lost: the request may be retried once the
    message's cause (named in it, with the file) is fixed. The store logs each such episode once,
    so callers need not log a traceback for it."""

    status = 503
    code = "store_unavailable"


class UnreadableRecord(TorporError):
    """A stored invocation record cannot be decoded (a row changed by hand, a damaged file): the
    message names the invocation and the cause (HTTP 500). Listings skip such rows and name them
    (`InvocationPage.unreadable`) instead of raising this."""

    code = "unreadable_record"


class InvocationPage(list["InvocationRecord"]):
    """What `Store.list_invocations` returns: the records read, in order; `unreadable` holds
    `(invocation_id, reason)` for each row of the page that could not be decoded and was skipped."""

    def __init__(self, records: Iterable[InvocationRecord] = (), unreadable: Iterable[tuple[str, str]] = ()) -> None:
        super().__init__(records)
        self.unreadable: list[tuple[str, str]] = list(unreadable)


MAX_TIMER_MS = 10**13 - 1
"""The latest due time a timer can hold (ms since the epoch, 13 digits: the year 2286)."""

MAX_ITEM_BYTES = 400 * 1024
"""DynamoDB's item size limit. A value that would take an item past it is kept in the store's
`BlobStore` (a reference in the item) when the store has one, or refused (`ItemTooLarge`) when not."""

MAX_MESSAGE_BYTES = 32 * 1024 * 1024
"""The largest payload (bytes: 33,554,432) one journal entry, input, output, state value or promise
value may take: restate-server's default message size limit. Above it a request is refused (413)
before anything is written."""


# --- records -------------------------------------------------------------------------------------


INVOCATION_STATUSES = ("pending", "scheduled", "ready", "running", "backing-off", "suspended", "paused", "completed")
"""Every status an invocation record can have (`InvocationRecord.status`)."""

COMPLETION_KINDS = ("succeeded", "failed", "cancelled", "killed")
"""How a completed invocation ended (`InvocationRecord.completion`): an output; a failure (a
terminal error, or the retry policy ended it); a failure after the cancel signal reached it (or
cancelled before it started); killed (also: the retry policy's `on_max_attempts = kill`)."""


@dataclass(frozen=True, slots=True)
class DeploymentRecord:
    """A registered deployment: where handlers live and what its manifest said.

    `endpoint` is an `http(s)://` URI (a local or Cloud Run endpoint), a Cloud Run service name
    (`projects/P/locations/L/services/S`) or a Lambda function ARN (qualified with a version).
    `manifest` is the endpoint manifest as parsed JSON (Restate wire names, camelCase).
    """

    deployment_id: str
    endpoint: str
    additional_headers: Mapping[str, str]
    manifest: Mapping[str, object]
    min_protocol_version: int
    max_protocol_version: int
    created_at_ms: int
    services: Sequence[str] = ()
    metadata: Mapping[str, str] = field(default_factory=dict)
    auth: Mapping[str, object] = field(default_factory=dict)  # how to invoke it, see `Invoker.request`
    protocol_mode: str = "REQUEST_RESPONSE"  # or BIDI_STREAM: discovered over HTTP/2 and the manifest says so


@dataclass(frozen=True, slots=True)
class ServiceRecord:
    """A service as the latest deployment that hosts it describes it (manifest `services[]` entry)."""

    name: str
    deployment_id: str
    ty: str  # SERVICE | VIRTUAL_OBJECT | WORKFLOW
    manifest: Mapping[str, object]
    revision: int = 1
    overrides: Mapping[str, object] = field(default_factory=dict)  # admin/CLI options (manifest names, ms)


@dataclass(frozen=True, slots=True)
class InvocationRecord:
    """The invocation's metadata item (`INV#id` / `META`): target, status, lease and outcome.

    The journal itself lives in separate batch items (see `Store.append_batch`); `journal_length` is
    only a hint of how long it was at the last status change. `epoch` grows by one each time a worker
    takes the lease; every update that changes the invocation is conditional on it.

    Status values are Restate's: `ready`, `running`, `backing-off`, `suspended`, `paused`, `completed`.
    """

    invocation_id: str
    service: str
    handler: str
    key: str
    deployment_id: str
    protocol_version: int
    status: str
    input_entry: bytes  # the framed InputCommandMessage, journal entry 0
    created_at_ms: int
    modified_at_ms: int
    epoch: int = 0
    lease_until_ms: int = 0
    journal_length: int = 1
    attempts: int = 0  # attempts started, in all
    retry_count: int = 0  # failed attempts since the journal last grew
    retry_at_length: int = 0  # journal length when `retry_count` was last counted
    retry_since_ms: int = 0  # first failure at that journal length (`duration_since_last_stored_entry`)
    failures_in_a_row: int = 0  # failed attempts since the last one that succeeded: the backoff and max attempts
    next_retry_at_ms: int = 0
    last_failure: Mapping[str, object] | None = None  # {"code", "message", "at_ms", "attempt", ...}
    waiting_on: Mapping[str, object] | None = None  # what a suspended invocation awaits
    output: bytes | None = None  # success value of a completed invocation
    failure: Mapping[str, object] | None = None  # {"code", "message"} of a failed invocation
    completed_at_ms: int = 0
    expires_at_s: int = 0  # DynamoDB TTL: the record is removed after this time (seconds)
    random_seed: int = 0
    callee_seed: int = 0  # non-zero: the ids of its callees are derived with it (`ids.derived_invocation_id`)
    idempotency_key: str = ""
    output_content_type: str = "application/json"
    doorbell: int = 0  # bumped by whoever stores a notification for this invocation (see `Store.ring`)
    doorbell_read: int = 0  # the doorbell its last suspension was conditional on (`rung_since_suspended`)
    effects_applied_upto: int = 1  # journal index up to which committed entries' effects were applied
    execution_time_ms: int = 0  # a delayed invocation (status `scheduled`) starts at this time
    wake_up_at_ms: int = 0  # earliest timer the invocation waits for, 0 if none (for display)
    service_type: str = "SERVICE"  # SERVICE | VIRTUAL_OBJECT | WORKFLOW
    handler_type: str = ""  # EXCLUSIVE | SHARED | WORKFLOW ("" for plain services)
    inbox_seq: str = ""  # position in its key's queue while `pending` (exclusive object handlers); also set
    # when it is created, until its first write after taking the key clears it: "created, may not hold the key yet"
    caller_id: str = ""  # the invocation whose Call created this one, to be told the result
    caller_completion_id: int = 0  # that Call's result completion id
    callers: frozenset[str] = frozenset()  # more callers to tell: "{caller_id}/{completion_id}" each
    journal_expires_at_ms: int = 0  # a completed invocation's journal is removed at this time
    trace_id: str = ""  # W3C trace id (32 hex digits) its attempts carry in `traceparent`; "" not sampled
    trace_parent: str = ""  # span id of its invocation span's parent (ingress or caller's attempt), when traced
    requests: Mapping[str, int] | None = None  # AWS requests it caused, by kind (`observability.record`)
    completion: str = ""  # how it completed: one of `COMPLETION_KINDS`, set by the completing write
    slot: str = ""  # the (first) concurrency limit it counts against (`limits.pool_scope`), "" if none
    slot_limit: int = 0  # that limit's N when it was created: at most N of the pool hold a slot at once
    more_slots: str = ""  # further pools it counts against, after `slot` in taking order (`limits.encode_more`)
    scope: str = ""  # the `scope` of the V7 call that created it ("" none)
    limit_key: str = ""  # the `limit_key` of that call ("" none)

    def evolve(self, **changes: Any) -> InvocationRecord:
        """This record with `changes` (field name to value), as `dataclasses.replace` makes it but in a
        third of its time: the engine derives a record several times per attempt.

        Raises:
            TypeError: A name that is not a field.
        """
        unknown = changes.keys() - _RECORD_FIELDS
        if unknown:
            raise TypeError(f"InvocationRecord has no field(s) {', '.join(sorted(unknown))}")
        new = object.__new__(InvocationRecord)
        for name, value in zip(_RECORD_FIELDS, _record_values(self), strict=True):
            _set(new, name, value)
        for name, value in changes.items():
            _set(new, name, value)
        return new


_RECORD_FIELDS: Final = tuple(InvocationRecord.__slots__)
_record_values: Final = operator.attrgetter(*_RECORD_FIELDS)  # every field's value, one tuple read in C
_set: Final = object.__setattr__


@dataclass(frozen=True, slots=True)
class JournalBatch:
    """The entries one attempt committed, starting at `start_index` (entry 0 is the Input command).

    `entries` is the framed encoding of the messages, exactly as they go on the wire.
    """

    start_index: int
    entries: bytes
    epoch: int
    committed_at_ms: int


@dataclass(frozen=True, slots=True)
class StoredNotification:
    """A notification delivered from outside the invocation, waiting to be folded into its journal.

    `key` identifies it: `c{completion_id}`, `s{signal_index}`, or `q{seq:08d}{signal_name}` for the
    `seq`-th named signal of that name (`journal.named_signal_key`; `n{signal_name}` before named
    signals queued); at most one notification per key is ever stored, so the first resolution of an
    awakeable wins and a duplicate delivery changes nothing. `entry` is the framed notification
    message (a named signal's is followed by its sender, `journal.named_signal_entry`).
    """

    key: str
    entry: bytes
    created_at_ms: int


@dataclass(frozen=True, slots=True)
class LoadedInvocation:
    """What one query returns for an invocation: its record, journal batches and notifications."""

    record: InvocationRecord
    batches: list[JournalBatch]
    notifications: list[StoredNotification]


@dataclass(frozen=True, slots=True)
class RetentionDue:
    """A completed invocation part of whose retention has ended, as `Store.due_retention` finds it.

    `due_ms`: when that part ended (ms since the epoch); `journal_expires_at_ms`: when its journal
    goes (0: gone already); `expires_at_s`: when its record goes (seconds; 0: kept).
    """

    invocation_id: str
    due_ms: int
    journal_expires_at_ms: int
    expires_at_s: int


@dataclass(frozen=True, slots=True)
class PromiseRecord:
    """A completed durable promise of a workflow: the first completion wins.

    Exactly one of `value` (the value's bytes) and `failure` (`{"code", "message"}`) is set;
    `completed_by` is `"{invocation_id}:{completion_id}"` of the CompletePromise that completed it.
    """

    value: bytes | None
    failure: Mapping[str, object] | None
    completed_by: str


@dataclass(frozen=True, slots=True)
class ScheduleRecord:
    """A durable schedule: every tick sends `body` to `service/handler` (of object `key`).

    Exactly one of `cron` (5 fields, UTC) and `every_ms` (a period in ms, ticks at its multiples
    since the UNIX epoch) is set. `body` is JSON text ("" for none). `next_tick_ms` is the next tick
    that has not run; `last_tick_ms` and `last_invocation_id` describe the last one that did
    (`last_invocation_id` "" if that tick's target was gone and it sent nothing).
    """

    name: str
    service: str
    handler: str
    key: str = ""
    body: str = ""
    cron: str = ""
    every_ms: int = 0
    paused: bool = False
    next_tick_ms: int = 0
    last_tick_ms: int = 0
    last_invocation_id: str = ""
    created_at_ms: int = 0
    modified_at_ms: int = 0


@dataclass(frozen=True, slots=True)
class SubscriptionRecord:
    """An event subscription: events of `source` become invocations of `sink` (`control_plane.subscriptions`).

    `source` is a URI such as `sqs://orders.fifo`, `sink` one such as `service://Counter/add`,
    `options` string pairs as given (restate-server's `SubscriptionResponse` shape); ids are `sub_1…`.
    """

    subscription_id: str
    source: str
    sink: str
    options: Mapping[str, str] = field(default_factory=dict)
    created_at_ms: int = 0


SCHEDULE_FIELDS = ("paused", "next_tick_ms", "last_tick_ms", "last_invocation_id", "modified_at_ms")
"""The `ScheduleRecord` fields `Store.update_schedule` may set; the rest are fixed at creation."""


# --- ports ---------------------------------------------------------------------------------------


class StoreFacts(Protocol):
    """Facts about where and how a store runs, not storage: the IAM permissions of this process's
    role, an id-format migration of its table, the AWS requests (billing) a write costs.

    The wiring hands them to `ControlPlane` beside the store (`DynamoDBStore.facts`,
    `SQLiteStore.facts`; `FixedFacts` where they are known in advance); the core reads them from
    there (`Engine.facts`), never from the store.
    """

    @property
    def holds_short_ids(self) -> bool:
        """True if the store may hold invocations with 16-byte ids (it was first used by a Torpor
        whose ids did not yet have restate-server's 24-byte shape): a workflow run's or an idempotent
        request's old id is then looked for before its new one (one read). False for a store first
        used with 24-byte ids, which never pays that read."""
        ...

    @property
    def may_delete(self) -> bool:
        """False where this process's credentials may not delete items (the AWS ingress function: its
        role has no `dynamodb:DeleteItem` or `BatchWriteItem`). Then `delete_timer` and replaced
        state values stored apart expire instead (the store removes them later), and
        `delete_invocation`, `delete_keyed` and `remove_journal` raise `PermissionError`: the core
        hands those removals to the worker (`Retention.drop_if_expired`). True for every store that
        holds its own files (SQLite)."""
        ...

    @property
    def value_limit_bytes(self) -> int:
        """The largest input, journal entry or awakeable value the store holds (bytes): `MAX_MESSAGE_BYTES`
        with a blob store (or the SQLite store), what one DynamoDB item holds beside its keys without
        (393,216). The ingress refuses a larger one (413) before anything is written."""
        ...

    def creation_requests(self, *, delayed: bool, on_key: bool) -> Mapping[str, int]:
        """The AWS requests creating an invocation costs, by kind (`observability.record` names), for
        its `requests` field, written with it (the meter cannot count a write before it is made):
        the record, a delayed start's timer, taking an object key. Empty for a store that makes none.
        """
        ...


@dataclass(frozen=True, slots=True)
class FixedFacts:
    """`StoreFacts` known in advance. The defaults are those of a store whose files are this
    process's own (it may delete), first used with 24-byte ids, that costs no AWS requests: an
    in-memory SQLite store of a test or of the simulator."""

    may_delete: bool = True
    holds_short_ids: bool = False
    value_limit_bytes: int = MAX_MESSAGE_BYTES

    def creation_requests(self, *, delayed: bool, on_key: bool) -> Mapping[str, int]:
        """None: no AWS requests (`StoreFacts.creation_requests`)."""
        return {}


class _Keep(Enum):
    KEEP = "keep"


KEEP: Final = _Keep.KEEP
"""A field a named transition leaves as stored (the default of its optional fields)."""

Failure = Mapping[str, object]
Requests = Mapping[str, int] | None


def _given(**fields: object) -> dict[str, Any]:
    """The fields a transition sets: those not `KEEP`."""
    return {name: value for name, value in fields.items() if value is not KEEP}


class InvocationTransitions(Protocol):
    """The named durable transitions of an invocation record, each one conditional write that sets
    exactly its fields, mapped once for both stores onto their private conditional writes:

    - `_update_invocation(invocation_id, epoch, *, doorbell=None, returning=False, ending=None,
      **changes)`: set `changes` if the epoch is still `epoch` (and, with `doorbell`, the doorbell
      still reads it), with the journal batch `ending` in the same durable transition (`complete`);
      with `returning`, the record after the write (same request), else None. `StoreConflict` if
      the epoch (or the doorbell) moved on or the invocation does not exist.
    - `_update_unless_completed(invocation_id, **changes)`: set `changes` and bump the epoch,
      whoever holds the lease, unless it completed; the record after the write. `StoreConflict` if
      it completed or does not exist.

    Fields typed `Literal` are constants of the transition (their default is what it writes; a
    decision's change dict, `control_plane/decisions.py`, may name them); `KEEP` leaves a field as
    stored; None resets a field to its default. Every transition but the forced ones
    (`force_complete`, `force_pause`, `resume`) is conditional on the epoch of the caller's lease.
    Lease-holder transitions also save the attempt's bookkeeping: `attempts`, the AWS `requests`
    counted since the last write, and `inbox_seq` "" (the exclusive invocation holds its key).
    Names as in Restate (suspension, completion, pause, resume, kill, cancel).
    """

    def _update_invocation(
        self,
        invocation_id: str,
        epoch: int,
        *,
        doorbell: int | None = None,
        returning: bool = False,
        ending: JournalBatch | None = None,
        **changes: object,
    ) -> InvocationRecord | None: ...

    def _update_unless_completed(self, invocation_id: str, **changes: object) -> InvocationRecord: ...

    # --- the lease holder's transitions (conditional on its epoch) -------------------------------

    def renew_lease(
        self,
        invocation_id: str,
        epoch: int,
        *,
        lease_until_ms: int,
        modified_at_ms: int,
        attempts: int | _Keep = KEEP,
        requests: Requests | _Keep = KEEP,
        inbox_seq: Literal[""] | _Keep = KEEP,
    ) -> None:
        """Extend the lease to `lease_until_ms` (`Executor.renew_lease`). `StoreConflict` if the
        epoch moved on."""
        self._update_invocation(
            invocation_id, epoch, **_given(lease_until_ms=lease_until_ms, modified_at_ms=modified_at_ms,
                                           attempts=attempts, requests=requests, inbox_seq=inbox_seq)
        )  # fmt: skip

    def record_progress(
        self,
        invocation_id: str,
        epoch: int,
        *,
        doorbell: int | None = None,
        modified_at_ms: int,
        attempts: int | _Keep = KEEP,
        requests: Requests | _Keep = KEEP,
        inbox_seq: Literal[""] | _Keep = KEEP,
    ) -> None:
        """The holder's fence: "still mine?" before carrying out committed effects (and with
        `doorbell`, a Lambda function's checkpoint fence, `adapters/aws/checkpoints.py`), saving its
        bookkeeping. `StoreConflict` if the epoch (or the doorbell) moved on."""
        self._update_invocation(
            invocation_id, epoch, doorbell=doorbell,
            **_given(modified_at_ms=modified_at_ms, attempts=attempts, requests=requests, inbox_seq=inbox_seq),
        )  # fmt: skip

    def release_lease(
        self,
        invocation_id: str,
        epoch: int,
        *,
        modified_at_ms: int,
        lease_until_ms: Literal[0] = 0,
        status: Literal["scheduled", "backing-off"] | _Keep = KEEP,
        effects_applied_upto: int | _Keep = KEEP,
        attempts: int | _Keep = KEEP,
        requests: Requests | _Keep = KEEP,
        inbox_seq: Literal[""] | _Keep = KEEP,
    ) -> None:
        """Give the lease up, the status as is or `status` (woken before its time: back to sleep); a
        hand-off (the process stops, the run's deadline passed) saves `effects_applied_upto`.
        `StoreConflict` if the epoch moved on."""
        self._update_invocation(
            invocation_id, epoch,
            **_given(modified_at_ms=modified_at_ms, lease_until_ms=lease_until_ms, status=status,
                     effects_applied_upto=effects_applied_upto, attempts=attempts, requests=requests,
                     inbox_seq=inbox_seq),
        )  # fmt: skip

    def wait_for_key(
        self,
        invocation_id: str,
        epoch: int,
        *,
        returning: bool = False,
        modified_at_ms: int,
        status: Literal["pending"] = "pending",
        lease_until_ms: Literal[0] = 0,
        inbox_seq: str | _Keep = KEEP,
        execution_time_ms: Literal[0] | _Keep = KEEP,
        attempts: int | _Keep = KEEP,
        requests: Requests | _Keep = KEEP,
    ) -> InvocationRecord | None:
        """Release the lease as `pending` in its object key's queue (`inbox_seq`, its place);
        a delayed one whose time came (`execution_time_ms` 0) in a new place. With `returning`, the
        record after the write. `StoreConflict` if the epoch moved on."""
        return self._update_invocation(
            invocation_id, epoch, returning=returning,
            **_given(modified_at_ms=modified_at_ms, status=status, lease_until_ms=lease_until_ms, inbox_seq=inbox_seq,
                     execution_time_ms=execution_time_ms, attempts=attempts, requests=requests),
        )  # fmt: skip

    def leave_queue(
        self,
        invocation_id: str,
        epoch: int,
        *,
        modified_at_ms: int,
        status: Literal["ready"] = "ready",
        inbox_seq: Literal[""] = "",
    ) -> None:
        """A `pending` invocation got its object key: `ready`, out of the queue (`Keys._grant`).
        `StoreConflict` if its epoch moved on (granted by another pump, killed)."""
        self._update_invocation(invocation_id, epoch, modified_at_ms=modified_at_ms, status=status, inbox_seq=inbox_seq)

    def suspend(
        self,
        invocation_id: str,
        epoch: int,
        *,
        doorbell: int,
        doorbell_read: int,
        waiting_on: Mapping[str, object],
        wake_up_at_ms: int,
        journal_length: int,
        effects_applied_upto: int,
        modified_at_ms: int,
        status: Literal["suspended"] = "suspended",
        lease_until_ms: Literal[0] = 0,
        next_retry_at_ms: Literal[0] = 0,
        failures_in_a_row: Literal[0] = 0,
        attempts: int | _Keep = KEEP,
        requests: Requests | _Keep = KEEP,
        inbox_seq: Literal[""] | _Keep = KEEP,
    ) -> None:
        """Release the lease as `suspended` awaiting `waiting_on` (`decisions.suspension_changes`),
        if no notification was stored since the holder read `doorbell` (Restate: SuspensionMessage).
        `StoreConflict` if the epoch or the doorbell moved on."""
        self._update_invocation(
            invocation_id, epoch, doorbell=doorbell,
            **_given(doorbell_read=doorbell_read, waiting_on=waiting_on, wake_up_at_ms=wake_up_at_ms,
                     journal_length=journal_length, effects_applied_upto=effects_applied_upto,
                     modified_at_ms=modified_at_ms, status=status, lease_until_ms=lease_until_ms,
                     next_retry_at_ms=next_retry_at_ms, failures_in_a_row=failures_in_a_row, attempts=attempts,
                     requests=requests, inbox_seq=inbox_seq),
        )  # fmt: skip

    def back_off(
        self,
        invocation_id: str,
        epoch: int,
        *,
        next_retry_at_ms: int,
        wake_up_at_ms: int,
        retry_count: int,
        retry_at_length: int,
        retry_since_ms: int,
        failures_in_a_row: int,
        last_failure: Failure,
        journal_length: int,
        effects_applied_upto: int,
        modified_at_ms: int,
        status: Literal["backing-off"] = "backing-off",
        lease_until_ms: Literal[0] = 0,
        attempts: int | _Keep = KEEP,
        requests: Requests | _Keep = KEEP,
        inbox_seq: Literal[""] | _Keep = KEEP,
    ) -> None:
        """Release the lease after a failed attempt, `backing-off` until `next_retry_at_ms`
        (`decisions.decide_failure`, Restate's retry policy). `StoreConflict` if the epoch moved on."""
        self._update_invocation(
            invocation_id, epoch,
            **_given(next_retry_at_ms=next_retry_at_ms, wake_up_at_ms=wake_up_at_ms, retry_count=retry_count,
                     retry_at_length=retry_at_length, retry_since_ms=retry_since_ms,
                     failures_in_a_row=failures_in_a_row, last_failure=last_failure, journal_length=journal_length,
                     effects_applied_upto=effects_applied_upto, modified_at_ms=modified_at_ms, status=status,
                     lease_until_ms=lease_until_ms, attempts=attempts, requests=requests, inbox_seq=inbox_seq),
        )  # fmt: skip

    def pause(
        self,
        invocation_id: str,
        epoch: int,
        *,
        doorbell: int | None = None,
        retry_count: int,
        retry_at_length: int,
        retry_since_ms: int,
        failures_in_a_row: int,
        last_failure: Failure,
        journal_length: int,
        effects_applied_upto: int,
        modified_at_ms: int,
        status: Literal["paused"] = "paused",
        lease_until_ms: Literal[0] = 0,
        next_retry_at_ms: Literal[0] = 0,
        attempts: int | _Keep = KEEP,
        requests: Requests | _Keep = KEEP,
        inbox_seq: Literal[""] | _Keep = KEEP,
    ) -> None:
        """Release the lease as `paused` after a failed attempt (the handler asked, or the retry
        policy's attempts ran out with `on_max_attempts = pause`), with `doorbell` only if no
        notification (a cancel) was stored since. `StoreConflict` if the epoch (or doorbell) moved on."""
        self._update_invocation(
            invocation_id, epoch, doorbell=doorbell,
            **_given(retry_count=retry_count, retry_at_length=retry_at_length, retry_since_ms=retry_since_ms,
                     failures_in_a_row=failures_in_a_row, last_failure=last_failure, journal_length=journal_length,
                     effects_applied_upto=effects_applied_upto, modified_at_ms=modified_at_ms, status=status,
                     lease_until_ms=lease_until_ms, next_retry_at_ms=next_retry_at_ms, attempts=attempts,
                     requests=requests, inbox_seq=inbox_seq),
        )  # fmt: skip

    def complete(
        self,
        invocation_id: str,
        epoch: int,
        *,
        doorbell: int | None = None,
        returning: bool = False,
        completion: Literal["succeeded", "failed", "cancelled", "killed"],
        completed_at_ms: int,
        modified_at_ms: int,
        output: bytes | _Keep = KEEP,
        failure: Failure | _Keep = KEEP,
        last_failure: Failure | _Keep | None = KEEP,
        expires_at_s: int | _Keep = KEEP,
        journal_expires_at_ms: int | _Keep = KEEP,
        journal_length: int | _Keep = KEEP,
        effects_applied_upto: int | _Keep = KEEP,
        retry_count: int | _Keep = KEEP,
        retry_at_length: int | _Keep = KEEP,
        retry_since_ms: int | _Keep = KEEP,
        failures_in_a_row: int | _Keep = KEEP,
        status: Literal["completed"] = "completed",
        lease_until_ms: Literal[0] = 0,
        next_retry_at_ms: Literal[0] = 0,
        waiting_on: None = None,
        wake_up_at_ms: Literal[0] = 0,
        attempts: int | _Keep = KEEP,
        requests: Requests | _Keep = KEEP,
        inbox_seq: Literal[""] | _Keep = KEEP,
        ending: JournalBatch | None = None,
    ) -> InvocationRecord | None:
        """The holder's completing write (`decisions.completion_changes`, and a failed attempt's
        fields when the retry policy ends it, `decide_failure`): Restate's completion, with `output`
        or `failure`. With `doorbell`, only if nothing rang since (a caller attached,
        `attach_caller`); with `returning`, the record after the write (its `callers`). Also the
        cancel of one not started, on the epoch it was read with (`Operations.cancel`).
        `StoreConflict` if the epoch (or the doorbell) moved on.

        `ending`: the journal batch that ends the handler (its Output command, the notifications
        delivered with it), stored in the same durable transition as the completion, or neither
        (`Executor.end`): SQLite inserts it in the completing transaction; DynamoDB keeps it in
        the record's own write (its start index and the notifications before the Output of
        `output`, up to 1 KiB of them; the Output re-derived on read, `load_invocation`; larger
        ones are appended first). Read back like any batch. `StoreConflict`
        also if its index is taken; `ItemTooLarge` if it does not fit."""
        return self._update_invocation(
            invocation_id, epoch, doorbell=doorbell, returning=returning, ending=ending,
            **_given(completion=completion, completed_at_ms=completed_at_ms, modified_at_ms=modified_at_ms,
                     output=output, failure=failure, last_failure=last_failure, expires_at_s=expires_at_s,
                     journal_expires_at_ms=journal_expires_at_ms, journal_length=journal_length,
                     effects_applied_upto=effects_applied_upto, retry_count=retry_count,
                     retry_at_length=retry_at_length, retry_since_ms=retry_since_ms,
                     failures_in_a_row=failures_in_a_row, status=status, lease_until_ms=lease_until_ms,
                     next_retry_at_ms=next_retry_at_ms, waiting_on=waiting_on, wake_up_at_ms=wake_up_at_ms,
                     attempts=attempts, requests=requests, inbox_seq=inbox_seq),
        )  # fmt: skip

    # --- forced transitions: the epoch moves, whoever holds the lease, unless it completed ----------

    def force_complete(
        self,
        invocation_id: str,
        *,
        completion: Literal["cancelled", "killed"],
        completed_at_ms: int,
        modified_at_ms: int,
        failure: Failure,
        expires_at_s: int | _Keep = KEEP,
        journal_expires_at_ms: int | _Keep = KEEP,
        status: Literal["completed"] = "completed",
        lease_until_ms: Literal[0] = 0,
        next_retry_at_ms: Literal[0] = 0,
        waiting_on: None = None,
        wake_up_at_ms: Literal[0] = 0,
    ) -> InvocationRecord:
        """Kill (or cancel) now: complete with `failure` and move the epoch, so a worker still holding
        the old lease writes nothing more (Restate: kill). `StoreConflict` if it completed or does not
        exist."""
        return self._update_unless_completed(
            invocation_id,
            **_given(completion=completion, completed_at_ms=completed_at_ms, modified_at_ms=modified_at_ms,
                     failure=failure, expires_at_s=expires_at_s, journal_expires_at_ms=journal_expires_at_ms,
                     status=status, lease_until_ms=lease_until_ms, next_retry_at_ms=next_retry_at_ms,
                     waiting_on=waiting_on, wake_up_at_ms=wake_up_at_ms),
        )  # fmt: skip

    def force_pause(
        self,
        invocation_id: str,
        *,
        modified_at_ms: int,
        status: Literal["paused"] = "paused",
        lease_until_ms: Literal[0] = 0,
        next_retry_at_ms: Literal[0] = 0,
    ) -> InvocationRecord:
        """Pause from outside (Restate: pause): `paused`, the epoch moved so a running attempt
        writes nothing more. `StoreConflict` if it completed or does not exist."""
        return self._update_unless_completed(
            invocation_id, modified_at_ms=modified_at_ms, status=status, lease_until_ms=lease_until_ms,
            next_retry_at_ms=next_retry_at_ms,
        )  # fmt: skip

    def resume(
        self,
        invocation_id: str,
        *,
        modified_at_ms: int,
        status: Literal["ready", "pending"] = "ready",
        lease_until_ms: Literal[0] | _Keep = KEEP,
        inbox_seq: str | _Keep = KEEP,
        deployment_id: str | _Keep = KEEP,
        protocol_version: int | _Keep = KEEP,
        retry_count: Literal[0] = 0,
        failures_in_a_row: Literal[0] = 0,
        next_retry_at_ms: Literal[0] = 0,
    ) -> InvocationRecord:
        """Run a paused invocation again with a fresh retry budget (Restate: resume; also a cancel
        of a paused one, so the signal reaches it): `ready`, or `pending` in its key's queue at
        `inbox_seq`; optionally on another deployment. The epoch moves. `StoreConflict` if it
        completed or does not exist."""
        return self._update_unless_completed(
            invocation_id,
            **_given(modified_at_ms=modified_at_ms, status=status, lease_until_ms=lease_until_ms, inbox_seq=inbox_seq,
                     deployment_id=deployment_id, protocol_version=protocol_version, retry_count=retry_count,
                     failures_in_a_row=failures_in_a_row, next_retry_at_ms=next_retry_at_ms),
        )  # fmt: skip


class InvocationStore(InvocationTransitions, Protocol):
    """Invocations and their journals: the record and its lease, journal batches, notifications and
    the doorbell, the listing, and the retention order of completed ones.

    Every write that changes an invocation is conditional; a lost condition raises `StoreConflict`.
    DynamoDB: the partition `INV#{invocation_id}` (`META` record, `J#` batches, `N#` notifications)
    with the indexes `by_status_v2` (listing) and `by_expiry` (retention),
    `adapters/aws/dynamodb_store.py`. SQLite: tables `invocations`, `batches` and `notifications`,
    `adapters/local/sqlite_store.py`.
    """

    def create_invocation(self, invocation: InvocationRecord) -> None:
        """Put a new invocation; `StoreConflict` if the id exists already."""

    def get_invocation(self, invocation_id: str) -> InvocationRecord | None: ...

    def read_fence(self, invocation_id: str) -> tuple[int, int] | None:
        """The invocation's `(epoch, doorbell)`, read strongly consistent; None if there is no such
        invocation. A Lambda function's checkpoint fence (`adapters/aws/checkpoints.py`) compares
        them with its attempt's: a read, not a write (DynamoDB: a GetItem of those two attributes,
        1 read unit, where a conditional write on the record costs 1 write unit, 5 times the price)."""
        ...

    def load_invocation(self, invocation_id: str) -> LoadedInvocation | None:
        """The invocation, its journal batches (by `start_index`) and stored notifications (one query)."""

    def delete_invocation(self, invocation_id: str, created_at_ms: int | None = None) -> None:
        """Delete the invocation's record, journal and notifications (a purge); idempotent.

        The record goes last, so an invocation with the same id cannot be created while its
        predecessor's journal is still being deleted. With `created_at_ms` (the record as read
        before), nothing is deleted if the invocation stored under the id was created at another
        time: one removed by someone else meanwhile and created anew is kept.
        """

    def attach_caller(self, invocation_id: str, caller: str) -> None:
        """Add `caller` ("{caller_id}/{completion_id}") to the invocation's `callers`, unless it completed,
        and ring its doorbell in the same write.

        One conditional write, so a caller either is told by the completion or sees it completed. The
        ring makes a completing write conditional on the doorbell fail (`Executor.completing_write`):
        a caller attached after the completing invocation read its callers is told before that write
        too, never only after it (a crash in between would lose it).
        Raises `StoreConflict` if the invocation completed or does not exist (nothing written).
        """

    def acquire_lease(
        self, invocation_id: str, now_ms: int, lease_until_ms: int, runnable: Iterable[str]
    ) -> InvocationRecord:
        """Take the lease: epoch += 1, if the lease is free or expired and the status is runnable.

        Returns the record after the update. Raises `StoreConflict` if another worker holds the lease
        or the status is not in `runnable`.
        """

    def put_notification(self, invocation_id: str, notification: StoredNotification) -> bool:
        """Store a notification for the invocation unless one with its key exists; True if stored."""

    def get_notification(self, invocation_id: str, key: str) -> StoredNotification | None:
        """The notification stored with `key` for the invocation (a strongly consistent read), or None."""

    def delete_notification(self, invocation_id: str, key: str) -> None:
        """Remove the notification with `key`; removing one that is not there does nothing. Not called
        where `StoreFacts.may_delete` is False (nor by `Effects.notify`, which rings before it stores)."""

    def ring(self, invocation_id: str) -> None:
        """Bump the invocation's `doorbell` (an add, conditional on the invocation), before storing a
        notification and again after (`Effects.notify`), so a crash between the two leaves the
        doorbell moved past the suspension's `doorbell_read` (`rung_since_suspended`: the sweep wakes it).

        A lease holder's suspension is conditional on the doorbell it read, so a notification
        stored while it worked is never missed. Raises `StoreConflict` if the invocation is gone or
        has completed (nothing can take a notification then; nothing is written).
        """

    # retention of completed invocations
    def due_retention(self, until_ms: int, limit: int = 1000) -> list[RetentionDue]:
        """Completed invocations whose journal or record retention ended at or before `until_ms`,
        earliest first; at most `limit`. Found without a timer per invocation."""

    def remove_journal(self, due: RetentionDue) -> bool:
        """Remove the journal (batches, notifications) of `due`, if its journal retention is still
        `due.journal_expires_at_ms`: one conditional write on the record, then the deletes. False if
        the condition failed (nothing removed)."""

    def append_batch(self, invocation_id: str, batch: JournalBatch) -> None:
        """Store a journal batch at `batch.start_index`; `StoreConflict` if that index is taken.

        This single conditional write is what makes a commit happen at most once: two attempts that
        answered the same journal prefix both aim at the same index, and only one can win.
        """

    def list_invocations(
        self,
        statuses: Iterable[str] | None = None,
        service: str | None = None,
        limit: int = 100,
        *,
        handler: str | None = None,
        key: str | None = None,
        before: tuple[int, str] | None = None,
        completion: str | None = None,
    ) -> list[InvocationRecord]:
        """Invocations, newest first by creation, filtered by status, service, handler, key and
        completion kind (`InvocationRecord.completion`); a page of at most `limit`, older than
        `before` = `(created_at_ms, invocation_id)` of the previous page's last."""


class KeyStore(Protocol):
    """Keys of virtual objects and workflows: state, the lock and queue of one writer per key,
    durable promises and their waiters, and the expiry and removal of a key's items.

    DynamoDB: the partition `OBJ#{scope}#{sha256(key)}` (`LOCK` key item with holder, queue and a
    small state; `S#` values stored apart, `T#` state pages, `P#` promises, `W#` waiters) and the
    listing `SKEYS#{scope}#{shard}`, `adapters/aws/store_keyed.py`. SQLite: tables `object_keys`,
    `queue`, `state`, `promises` and `promise_waiters`, `adapters/local/sqlite_keyed.py`.
    """

    # keyed state of virtual objects and workflows (`scope` is the service name, `key` the object key
    # or workflow id; any UTF-8 string, stored hashed in item keys and verbatim in attributes)
    def load_state(self, scope: str, key: str) -> dict[bytes, bytes]:
        """The whole state of `scope/key`: `{state key: value}` (one consistent read while it is small)."""

    def apply_state(
        self,
        scope: str,
        key: str,
        writes: Mapping[bytes, bytes | None],
        *,
        clear: bool = False,
        holder: str | None = None,
        expires_at_s: int = 0,
    ) -> None:
        """Apply the state changes of one commit at once: `clear` (ClearAllState) first, then `writes`
        (`{state key: value, or None to remove it}`). Idempotent.

        With `holder`, only while that invocation holds the key (an exclusive handler's changes are
        fenced by its lock): raises `StoreConflict` otherwise, writing nothing. Readers see all of
        one call's changes or none. Any number and total size of entries; raises `ItemTooLarge`
        (nothing written) only for a value that, with its key, does not fit in one 400 KB item.
        """

    def clear_state(self, scope: str, key: str) -> None:
        """Delete every state entry of `scope/key`."""

    def state_keys(self, scope: str, limit: int) -> list[str]:
        """The keys of virtual object or workflow `scope` that have state, sorted, at most `limit`.

        Complete: every key with a state entry is listed, whatever invocations are retained (the
        `state` table of `POST /query` reads it). A key whose state was cleared, or whose workflow
        items expired by TTL, may stay listed (DynamoDB keeps its listing item; SQLite lists only
        keys with state rows): its state then reads empty. If more than `limit` keys are listed,
        which `limit` come back is not specified: ask for one more than you can use to learn that
        there are more. A workflow's listing goes with its items (`delete_keyed`).
        """

    # one writer per object key: a lock and a queue in arrival order, on one item per key
    def take_key(self, scope: str, key: str, invocation_id: str) -> dict[bytes, bytes] | None:
        """Take the key for a just-created invocation if nobody holds it and nobody waits for it: one
        conditional write, which also reads the key's state. Returns that state if it holds the key
        now; None if it must wait its turn (`enqueue`)."""

    def enqueue(self, scope: str, key: str, seq: str, invocation_id: str) -> None:
        """Put `invocation_id` in the queue of `scope/key` at position `seq` (sortable string); idempotent."""

    def dequeue(self, scope: str, key: str, seq: str, invocation_id: str) -> None:
        """Take that entry out of the queue (idempotent)."""

    def grant_key(self, scope: str, key: str, seq: str, invocation_id: str) -> bool:
        """Hand the free key to that queued entry and take it out of the queue, as one conditional
        write: True if granted now, False if the key is held or the entry is no longer queued."""

    def release_key(self, scope: str, key: str, invocation_id: str) -> bool | None:
        """Release the key if `invocation_id` holds it: None if it did not (nothing changed), else
        whether calls wait in the queue (known from the same write)."""

    def key_status(self, scope: str, key: str) -> tuple[str | None, tuple[str, str] | None]:
        """`(holder or None, (seq, invocation_id) of the earliest queued entry or None)`; one consistent read."""

    def lock_holder(self, scope: str, key: str) -> str | None:
        """The invocation holding the lock of `scope/key`, or None (consistent read)."""

    # concurrency limits: up to N holders of `scope/key`, and the same queue as a key's (`enqueue`)
    def take_slot(self, scope: str, key: str, invocation_id: str, limit: int) -> bool:
        """Take a slot of `scope/key` for a just-created invocation if fewer than `limit` hold one and
        nobody waits (`limits.slot_free`), as one conditional write; True if it holds one now (also
        when it held one already), False if it must wait its turn (`enqueue`; nothing changed)."""

    def grant_slot(self, scope: str, key: str, seq: str, invocation_id: str, limit: int) -> bool:
        """Give a slot to that queued entry if fewer than `limit` hold one, taking it out of the queue,
        as one conditional write: True if granted now, False if all slots are held or the entry is no
        longer queued."""

    def release_slot(self, scope: str, key: str, invocation_id: str) -> bool | None:
        """Release the slot `invocation_id` holds: None if it held none (nothing changed), else whether
        calls wait in the queue (known from the same write)."""

    def reserve_start(self, scope: str, key: str, now_ms: int, interval_ms: int, burst: int) -> int:
        """Reserve the next start of rate limit `scope/key` (`limits.reserve` on its stored time, one
        conditional write, again if another reservation won); the reserved start, ms since the epoch."""

    def slot_status(self, scope: str, key: str) -> tuple[frozenset[str], tuple[str, str] | None]:
        """`(holders of a slot, (seq, invocation_id) of the earliest queued entry or None)`; one consistent read."""

    # workflows: durable promises (a workflow's run is claimed by its deterministic invocation id)
    def complete_promise(self, scope: str, key: str, name: str, promise: PromiseRecord) -> PromiseRecord:
        """Complete promise `name` unless it is completed; returns the promise as stored (first wins)."""

    def get_promise(self, scope: str, key: str, name: str) -> PromiseRecord | None: ...

    def add_promise_waiter(self, scope: str, key: str, name: str, invocation_id: str) -> None: ...

    def promise_waiters(self, scope: str, key: str, name: str) -> list[str]: ...

    def expire_keyed(self, scope: str, key: str, expires_at_s: int) -> None:
        """Set the TTL of every item of `scope/key` (key item, values stored apart, promises, waiters):
        workflow retention."""

    def delete_keyed(self, scope: str, key: str) -> None:
        """Delete every item of `scope/key` (state, promises, waiters, its `state_keys` listing): a
        workflow's retention ended."""


class TimerStore(Protocol):
    """Timers: one record per (due time, invocation), visible and recoverable (the sweeps re-arm them).

    DynamoDB: partitions `TIMER#{shard}` (`{due_ms:013d}#{invocation_id}`),
    `adapters/aws/dynamodb_store.py`. SQLite: table `timers`, `adapters/local/sqlite_store.py`.
    """

    def put_timer(self, due_ms: int, invocation_id: str) -> None: ...

    def delete_timer(self, due_ms: int, invocation_id: str) -> None: ...

    def due_timers(self, until_ms: int, limit: int = 1000) -> list[tuple[int, str]]:
        """`(due_ms, invocation_id)` of timers due at or before `until_ms`, earliest first."""


class RegistryStore(Protocol):
    """Deployments and services, one record each (`control_plane.registry`).

    DynamoDB: partitions `DEP` (`DEP#{deployment_id}`) and `SVC` (`SVC#{name}`),
    `adapters/aws/store_registry.py`. SQLite: tables `deployments` and `services`,
    `adapters/local/sqlite_registry.py`.
    """

    def put_deployment(self, deployment: DeploymentRecord) -> None: ...
    def get_deployment(self, deployment_id: str) -> DeploymentRecord | None: ...
    def list_deployments(self) -> list[DeploymentRecord]: ...
    def delete_deployment(self, deployment_id: str) -> None: ...
    def put_service(self, service: ServiceRecord) -> None: ...
    def get_service(self, name: str) -> ServiceRecord | None: ...
    def list_services(self) -> list[ServiceRecord]: ...
    def delete_service(self, name: str) -> None: ...

    def get_rule_book(self) -> tuple[dict[str, dict[str, Any]], int]:
        """`({pattern: rule as the rules API shows it}, version)` of the concurrency rule book
        (`control_plane.limits`); `({}, 0)` if none was ever written. One consistent read."""

    def put_rule_book(self, rules: Mapping[str, Mapping[str, Any]], version: int) -> None:
        """Replace the rule book read at `version` with `rules` (stored at `version + 1`), as one
        conditional write. Raises `StoreConflict` if it changed since (nothing written)."""


class ScheduleStore(Protocol):
    """Durable schedules, one record per name (`control_plane.schedules`).

    DynamoDB: partition `SCHED` (`SCHED#{name}`), `adapters/aws/store_schedules.py`. SQLite: table
    `schedules`, `adapters/local/sqlite_schedules.py`.
    """

    def create_schedule(self, schedule: ScheduleRecord) -> None:
        """Store a new schedule; `StoreConflict` if one with its name exists (nothing written)."""

    def get_schedule(self, name: str) -> ScheduleRecord | None: ...

    def list_schedules(self) -> list[ScheduleRecord]:
        """Every schedule, ordered by name."""
        ...

    def update_schedule(self, name: str, **changes: object) -> ScheduleRecord:
        """Set fields of `SCHEDULE_FIELDS` (one write, conditional on the schedule existing) and return
        the schedule after it; `StoreConflict` if there is no schedule `name`."""
        ...

    def record_schedule_tick(self, name: str, *, tick_ms: int, invocation_id: str, next_tick_ms: int) -> ScheduleRecord:
        """Record that schedule `name` ran its tick `tick_ms` (ms since the epoch), sending
        `invocation_id` ("" if the tick was lost, its target gone), and that its next tick is
        `next_tick_ms`: one write, conditional on the schedule existing and its `last_tick_ms` being
        before `tick_ms`. Returns the schedule after it.

        Raises:
            StoreConflict: No schedule `name`, or a tick at or after `tick_ms` is recorded already (a
                later delivery won the race): nothing was written.
        """
        ...

    def delete_schedule(self, name: str) -> None:
        """Remove the schedule `name`; removing an unknown name does nothing."""


class SubscriptionStore(Protocol):
    """Event subscriptions, one record per id (`control_plane.subscriptions`), beside the registry.

    DynamoDB: partition `SUB` (`SUB#{subscription_id}`), `adapters/aws/store_registry.py`. SQLite:
    table `subscriptions`, `adapters/local/sqlite_registry.py`.
    """

    def create_subscription(self, subscription: SubscriptionRecord) -> None:
        """Store a new subscription; `StoreConflict` if its id exists (nothing written)."""

    def get_subscription(self, subscription_id: str) -> SubscriptionRecord | None: ...

    def list_subscriptions(self) -> list[SubscriptionRecord]:
        """Every subscription, ordered by id."""
        ...

    def delete_subscription(self, subscription_id: str) -> bool:
        """Remove the subscription; True if it existed (a conditional delete), False if it did not."""
        ...


class Store(InvocationStore, KeyStore, TimerStore, RegistryStore, ScheduleStore, SubscriptionStore, Protocol):
    """Durable storage of everything: the union of the families (DynamoDB in production: one table;
    `torpor dev`: one SQLite file). Where code needs one family only, it takes that family.

    Facts about a deployment (may this process delete, may the table hold 16-byte ids, what a write
    costs) are not storage: `StoreFacts`.
    """

    def ensure_schema(self) -> None:
        """Create the table (DynamoDB) or tables (SQLite) if they are missing (idempotent)."""


@dataclass(frozen=True, slots=True)
class HttpReply:
    """What a deployment answered: HTTP status, headers (lower-case names) and body bytes."""

    status: int
    headers: Mapping[str, str]
    body: bytes


class InvokerError(TorporError):
    """The deployment could not be reached, or the exchange broke (refused, timed out, reset)."""

    status = 502
    code = "deployment_unreachable"


class AnswerTooLarge(InvokerError):
    """A deployment sent more than Torpor reads at once (`Settings.max_answer_bytes`,
    `TORPOR_MAX_ANSWER_BYTES`): a request/response answer, or on a stream one message and the
    bytes not yet committed. Reading stopped at the limit; nothing of the answer was kept.

    Attributes:
        limit_bytes: the limit that was exceeded (bytes).
    """

    code = "answer_too_large"

    def __init__(self, limit_bytes: int) -> None:
        super().__init__(f"the deployment's answer exceeded {limit_bytes} bytes (TORPOR_MAX_ANSWER_BYTES)")
        self.limit_bytes = limit_bytes


class StreamIdle(InvokerError):
    """An open stream brought nothing within the wait it was given (bidirectional mode)."""

    status = 504
    code = "deployment_idle"


class Invoker(Protocol):
    """Sends one HTTP-shaped request to a deployment (HTTP endpoint or Lambda ARN).

    An invoker that signs its requests may have a `request_identity` attribute: the public key it
    signs with (`publickeyv1_…`, Restate's request identity), for error messages; read it with
    `getattr(invoker, "request_identity", None)`.
    """

    def request(
        self,
        endpoint: str,
        method: str,
        path: str,
        headers: Mapping[str, str],
        body: bytes,
        timeout_s: float,
        auth: Mapping[str, object] | None = None,
    ) -> HttpReply:
        """Send `method path` to the deployment at `endpoint`; `path` starts with `/`.

        `auth` is the deployment's `auth`: `{"assume_role_arn": ARN}` (Lambda: invoke with that
        role) or `{"google_id_token": {"audience": A}}` (Cloud Run: a Google ID token for `A`, by
        default the service URL); None or empty for none.

        Raises `InvokerError` when no complete answer arrived within `timeout_s` seconds.
        """
        ...


class Scheduler(Protocol):
    """Arranges for `advance(invocation_id)` to run: now, or at a due time.

    A scheduler may also have `sleep_lead_ms` (int, ms): how long before a sleep's due time the
    engine may have it woken, to take the lease and read the journal ahead and wait out the rest
    in-process, so the attempt starts at the due time itself (`LocalScheduler`: 25 ms). Without it,
    wake-ups are armed at the due time.
    """

    def wake_now(self, invocation_id: str) -> None: ...

    def wake_at(self, invocation_id: str, due_ms: int) -> None: ...


class ScheduleTrigger(Protocol):
    """Makes a schedule's ticks reach `Schedules.tick` (locally the timer loop, on AWS an EventBridge
    Scheduler recurring schedule).

    Attributes:
        recurring: True if the trigger fires every tick by itself once armed (EventBridge); False if
            `Schedules.tick` must arm it again for the next tick (a timer per tick).
    """

    recurring: bool

    def check(self, schedule: ScheduleRecord) -> None:
        """Raise `ValueError` (its message for people) if this trigger cannot carry `schedule`."""

    def arm(self, schedule: ScheduleRecord) -> None:
        """Make ticks happen from `schedule.next_tick_ms` on, or stop them while `schedule.paused`;
        idempotent (arming again replaces what was armed)."""

    def disarm(self, name: str) -> None:
        """Stop the ticks of schedule `name` for good (it was deleted); idempotent."""


class BlobStore(Protocol):
    """Large values kept outside the store's items (S3 on AWS: `adapters.aws.blobs.S3BlobStore`).

    Objects are immutable: a key is written once (`put` again with the same key writes the same
    bytes), read by the store when it reads the item that refers to it, and deleted with the items
    that refer to it (`delete`, by key prefix). Keys are the store's (`{PK}/{SK}/{sha256}`).
    """

    def put(self, key: str, data: bytes) -> None:
        """Store `data` (bytes) under `key`; overwriting with the same bytes is harmless."""
        ...

    def get(self, key: str) -> bytes:
        """The bytes stored under `key`. Raises `KeyError` if there is no such object."""
        ...

    def delete(self, prefix: str) -> int:
        """Delete every object whose key starts with `prefix`; how many were deleted (0: none)."""
        ...


class Clock(Protocol):
    """Wall-clock time in ms since the UNIX epoch."""

    def now_ms(self) -> int: ...


class SystemClock:
    """The real clock."""

    def now_ms(self) -> int:
        return time.time_ns() // 1_000_000


class DuplexStream(Protocol):
    """One open HTTP/2 request whose body is written while its answer is read (bidirectional mode).

    Every method raises `InvokerError` when the exchange breaks or a wait times out.
    """

    def send(self, data: bytes, timeout_s: float) -> None:
        """Write `data` to the request body (waiting at most `timeout_s` for flow-control room)."""
        ...

    def end(self) -> None:
        """End the request body (the end may leave with the stream's next call: each writes what is
        queued before it waits or closes)."""
        ...

    def head(self, timeout_s: float) -> tuple[int, dict[str, str]]:
        """The response's HTTP status and headers (lower-case names)."""
        ...

    def receive(self, timeout_s: float) -> bytes:
        """The next answer bytes (waiting at most `timeout_s`), or b"" once the answer has ended."""
        ...

    def close(self) -> None:
        """Close the request (reset if still open); never raises."""
        ...


class StreamingInvoker(Protocol):
    """Opens full-duplex HTTP/2 requests to `http(s)://` deployments (an invoker may also be one:
    check with `getattr(invoker, "open_stream", None)`)."""

    def open_stream(
        self, endpoint: str, method: str, path: str, headers: Mapping[str, str], timeout_s: float
    ) -> DuplexStream:
        """Open `method path` on `endpoint` over HTTP/2; raises `InvokerError` if it cannot."""
        ...
