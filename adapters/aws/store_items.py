"""The item families of `DynamoDBStore`'s table: keys, item templates, record mapping, conditions, errors.

See `adapters.aws.dynamodb_store` for the table layout. Nothing here makes a request: the templates
are bound to a table and a connection per store by `bind`, and the functions build keys, items,
records, conditions and update actions for the store to send, and translate the errors of its
writes (`translated_write`).
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import types
import zlib
from collections.abc import Iterable, Iterator, Mapping
from contextlib import contextmanager
from typing import Any, TypeVar, cast

from pynamodb.attributes import Attribute, BinaryAttribute, JSONAttribute, UnicodeAttribute, UnicodeSetAttribute
from pynamodb.connection import TableConnection
from pynamodb.constants import NUMBER
from pynamodb.exceptions import PutError, UpdateError
from pynamodb.expressions.condition import Condition
from pynamodb.expressions.update import Action
from pynamodb.indexes import GlobalSecondaryIndex, IncludeProjection
from pynamodb.models import Model

from control_plane.ports import (
    MAX_TIMER_MS,
    DeploymentRecord,
    InvocationRecord,
    ItemTooLarge,
    JournalBatch,
    PromiseRecord,
    RetentionDue,
    ServiceRecord,
    StoreConflict,
    StoredNotification,
)
from control_plane.errors import ProtocolViolation
from control_plane.protocol import decode_frames, encode_frames, frame
from control_plane.protocol import protocol_pb2 as pb

STATUS_INDEX = "by_status_v2"
EXPIRY_INDEX = "by_expiry"
TTL_ATTRIBUTE = "expires_at"
RETAINED_ATTRIBUTE = "retained_until"
TTL_GRACE_S = 24 * 3600
"""How long after its retention ends (`retained_until`) DynamoDB's TTL may delete an invocation record
(`expires_at`): the sweep removes the journal and the record first; TTL is the backstop."""
DEFAULT_SHARDS = 16
"""Timer partitions and status index keys per status (`Settings.store_shards`) of a new table."""
CONFIG_PK = "CONFIG"
SHARDS_SK = "SHARDS"
"""The item (`CONFIG` / `SHARDS`, attribute `shards`) recording a table's shard count: chosen by the
first process that uses the table, adopted by every later one, whatever its own setting."""
META_SK = "META"
BATCH_PREFIX = "J#"
NOTIFICATION_PREFIX = "N#"
DEPLOYMENTS_PK = "DEP"
SERVICES_PK = "SVC"
TIMERS_PREFIX = "TIMER#"
STATE_PREFIX = "S#"
PROMISE_PREFIX = "P#"
WAITER_PREFIX = "W#"
LOCK_SK = "LOCK"
STATE_KEYS_PREFIX = "SKEYS#"
LISTED_ATTRIBUTE = "listed"
"""Set on a key item once its key is in the service's listing (`state_keys_pk`): later state writes
do not write the listing again."""
SPILL_BYTES = 32 * 1024
"""A state value larger than this (bytes) is stored in its own item, not in the key item."""
PAGE_PREFIX = "T#"
PAGES_ATTRIBUTE = "pages"
"""The key item's string set of the sort keys of its state pages (absent: none)."""
INLINE_AGAIN_BYTES = 64 * 1024
"""A paged state that shrinks to this (bytes, estimated) goes back on the key item."""
PAGED_ATTRIBUTE = "sv"
"""The key item's state version, a number: present once the object's state is paged; then the state
is its pages' and any `S#…` attribute left on the key item is stale (removed in chunks)."""
MAX_UPDATE_CLAUSES = 100
"""At most this many SET/REMOVE clauses in one UpdateItem of the key item: DynamoDB limits an
expression to 4 KB and 300 operators (moto's parser recurses per clause)."""
PAGE_BYTES = 320 * 1024
"""A state page holds entries up to this many bytes (encoded), under DynamoDB's 400 KB item limit."""
KEY_ITEM_STATE_BYTES = 256 * 1024
"""Above this (bytes, estimated), the key item's state moves to pages: the rest of the 400 KB is the
queue's (about 2,500 waiting calls)."""
COMPLETED = "completed"
CONDITION_FAILED = "ConditionalCheckFailedException"
MAX_DUE_MS = MAX_TIMER_MS
"""The latest due time a timer key can hold (13 digits: the year 2286)."""


# --- keys ----------------------------------------------------------------------------------------


def invocation_pk(invocation_id: str) -> str:
    """The partition of an invocation: its metadata, journal batches and notifications."""
    return f"INV#{invocation_id}"


def batch_sk(start_index: int) -> str:
    """The sort key of the journal batch starting at `start_index` (sorts before `META`)."""
    return f"{BATCH_PREFIX}{start_index:010d}"


def notification_sk(key: str) -> str:
    """The sort key of the notification `key` (sorts after `META`)."""
    return f"{NOTIFICATION_PREFIX}{key}"


def shard_of(invocation_id: str, shards: int) -> int:
    """The shard (0 .. shards-1) of an invocation's timers and index entries: crc32 of its id, mod `shards`.

    Stable across processes and versions for one count; the table records its count (`SHARDS_SK`),
    so every process computes the same shard.
    """
    return zlib.crc32(invocation_id.encode()) % shards


def timers_pk(shard: int) -> str:
    """The partition of the timers of shard `shard`: `TIMER#{shard}`."""
    return f"{TIMERS_PREFIX}{shard}"


def timer_sk(due_ms: int, invocation_id: str) -> str:
    """The sort key of a timer in its `TIMER#{shard}` partition: due time first, so a range query finds due ones."""
    return f"{due_ms:013d}#{invocation_id}"


def timers_due_until(until_ms: int) -> str:
    """The greatest timer sort key due at `until_ms`: `~` sorts after `#` and after every digit."""
    return f"{until_ms:013d}~"


def deployment_sk(deployment_id: str) -> str:
    """The sort key of a deployment in the `DEP` partition."""
    return f"DEP#{deployment_id}"


def service_sk(name: str) -> str:
    """The sort key of a service in the `SVC` partition."""
    return f"SVC#{name}"


ACTIVE_STATUSES = ("ready", "running", "backing-off", "suspended")
"""Statuses that share one status-index key per shard, `STATUS#active#{shard}` (issue 24): an
invocation goes back and forth between them (lease, suspension, wake-up, back-off), and a move
between two index keys is two index writes (a delete and a put) where a change of the projected
`status` under one key is one. `pending`, `scheduled`, `paused` and `completed` keep a key each:
they are listed alone and can be many."""


def status_group(status: str) -> str:
    """The status-index key's status part for `status`: "active" for `ACTIVE_STATUSES`, else itself."""
    return "active" if status in ACTIVE_STATUSES else status


def status_pk(status: str, shard: int) -> str:
    """The status index's hash key of an invocation with `status` in shard `shard`:
    `STATUS#{status_group(status)}#{shard}`."""
    return f"STATUS#{status_group(status)}#{shard}"


def legacy_status_pk(status: str, shard: int) -> str:
    """Where an invocation whose `status` is one of `ACTIVE_STATUSES` was indexed before issue 24
    (`STATUS#{status}#{shard}`), and stays until its next status change: `list_invocations` reads
    these keys too."""
    return f"STATUS#{status}#{shard}"


def status_sk(created_at_ms: int, invocation_id: str) -> str:
    """The status index's range key: ordered by `created_at_ms`, then id (never moves after creation)."""
    return f"{created_at_ms:013d}#{invocation_id}"


def expiry_pk(shard: int) -> str:
    """The `by_expiry` hash key of a completed invocation in shard `shard`: `EXPIRY#{shard}`."""
    return f"EXPIRY#{shard}"


def expiry_sk(due_ms: int, invocation_id: str) -> str:
    """The `by_expiry` range key: when the next part of the invocation's retention ends (ms), then id."""
    return f"{due_ms:013d}#{invocation_id}"


def _digest(data: bytes) -> str:
    """sha256 hex of `data`: fixed-length, so a key of any size (or containing `#`) fits in an item key."""
    return hashlib.sha256(data).hexdigest()


def keyed_pk(scope: str, key: str) -> str:
    """The partition of `scope/key` (object or workflow): `OBJ#{scope}#{sha256 hex of key}`.

    The key is hashed because it is any UTF-8 string, possibly longer than DynamoDB's 2048-byte
    partition key limit; the raw scope and key are attributes of every item of the partition.
    """
    return f"OBJ#{scope}#{_digest(key.encode())}"


def state_keys_pk(scope: str, shard: int) -> str:
    """A partition of the listing of `scope`'s keys that have state: `SKEYS#{scope}#{shard}`.

    `shard` is `shard_of(key, shards)`, so first state writes of many keys spread over `shards`
    partition keys, and a listing reads every shard.
    """
    return f"{STATE_KEYS_PREFIX}{scope}#{shard}"


def state_keys_sk(key: str) -> str:
    """The sort key of `key` in its service's listing: the sha256 hex of the key (a key of any length
    fits; the raw key is an attribute)."""
    return _digest(key.encode())


def state_sk(state_key: bytes) -> str:
    """The sort key of the state entry `state_key`: `S#{sha256 hex}`."""
    return f"{STATE_PREFIX}{_digest(state_key)}"


def spill_sk(state_key: bytes, value: bytes) -> str:
    """The sort key of a large state value stored apart: `S#{h(state key)}#{h(value), 32 hex}`.

    Content-addressed, so writing it again (an effect re-applied) writes the same item, and a writer
    that lost the key cannot change a value someone refers to.
    """
    return f"{state_sk(state_key)}#{_digest(value)[:32]}"


def page_sk(prefix: str, page: bytes) -> str:
    """The sort key of a state page: `T#{prefix}#{h(page), 32 hex}` (`prefix`: the hex digits the
    sha256 of each of its state keys starts with; content-addressed like `spill_sk`)."""
    return f"{PAGE_PREFIX}{prefix}#{_digest(page)[:32]}"


def state_key_digest(state_key: bytes) -> str:
    """sha256 hex of a state key: where its entry goes (attribute `S#…`, page prefix)."""
    return _digest(state_key)


def queue_entry(seq: str, invocation_id: str) -> str:
    """An entry of a key's queue (the `queued` string set): `{seq}#{invocation_id}`, sorting by `seq`."""
    return f"{seq}#{invocation_id}"


def split_queue_entry(entry: str) -> tuple[str, str]:
    """`(seq, invocation_id)` of a queue entry."""
    seq, _, invocation_id = entry.rpartition("#")
    return seq, invocation_id


def promise_sk(name: str) -> str:
    """The sort key of the durable promise `name`: `P#{sha256 hex of name}`."""
    return f"{PROMISE_PREFIX}{_digest(name.encode())}"


def waiters_prefix(name: str) -> str:
    """The sort key prefix of the waiters of promise `name`: `W#{sha256 hex of name}#`."""
    return f"{WAITER_PREFIX}{_digest(name.encode())}#"


def waiter_sk(name: str, invocation_id: str) -> str:
    """The sort key of `invocation_id` waiting on promise `name`."""
    return f"{waiters_prefix(name)}{invocation_id}"


STATUS_INDEX_ATTRIBUTES = ("invocation_id", "service", "handler", "key", "status", "completion", "created_at_ms")
"""What the status index projects: what `list_invocations` filters on and orders by, nothing that a
lease or a step changes (so only a status change writes the index)."""
EXPIRY_INDEX_ATTRIBUTES = ("invocation_id", "journal_expires_at_ms", RETAINED_ATTRIBUTE)
"""What `by_expiry` projects: what the sweep needs to find what is due and remove a journal unread."""


def table_schema(table_name: str) -> dict[str, Any]:
    """The table's keys and indexes, as DescribeTable names them (what pynamodb's `MetaTable` reads)."""
    keys = ("PK", "SK", "status_key", "status_order", "expiry_key", "expiry_order")
    return {
        "TableName": table_name,
        "KeySchema": [{"AttributeName": "PK", "KeyType": "HASH"}, {"AttributeName": "SK", "KeyType": "RANGE"}],
        "AttributeDefinitions": [{"AttributeName": name, "AttributeType": "S"} for name in keys],
        "GlobalSecondaryIndexes": [
            {
                "IndexName": index,
                "KeySchema": [
                    {"AttributeName": hash_key, "KeyType": "HASH"},
                    {"AttributeName": range_key, "KeyType": "RANGE"},
                ],
                "Projection": {"ProjectionType": "INCLUDE", "NonKeyAttributes": list(projected)},
            }
            for index, hash_key, range_key, projected in (
                (STATUS_INDEX, "status_key", "status_order", STATUS_INDEX_ATTRIBUTES),
                (EXPIRY_INDEX, "expiry_key", "expiry_order", EXPIRY_INDEX_ATTRIBUTES),
            )
        ],
    }


# --- item templates (bound to a table per store by `bind`) ---------------------------------------


class IntAttribute(Attribute[int]):
    """A DynamoDB number read back as a Python `int` (pynamodb's `NumberAttribute` is typed `float`)."""

    attr_type = NUMBER

    def serialize(self, value: int) -> str:
        return str(int(value))

    def deserialize(self, value: str) -> int:
        return int(value)


_SERVICE_CODES = {"dynamodb": "d", "sqs": "q", "scheduler": "e", "lambda": "l"}
_SERVICES_BY_CODE = {code: service for service, code in _SERVICE_CODES.items()}


def _short_kind(kind: str) -> str:
    """`"dynamodb UpdateItem META"` -> `"dUpdateItem+"`: a request kind as `RequestsAttribute` stores
    it (a known service's one-letter code, the operation, `+` for " META"); any other kind as `=kind`."""
    service, _, operation = kind.partition(" ")
    code = _SERVICE_CODES.get(service)
    base = operation.removesuffix(" META")
    if code is None or not base or " " in base or "+" in base or base.startswith("="):
        return "=" + kind
    return code + base + ("+" if operation != base else "")


def _long_kind(stored: str) -> str:
    """The inverse of `_short_kind`."""
    if stored.startswith("="):
        return stored[1:]
    base = stored[1:].removesuffix("+")
    return f"{_SERVICES_BY_CODE[stored[0]]} {base}" + (" META" if stored.endswith("+") else "")


class RequestsAttribute(JSONAttribute):
    """`InvocationRecord.requests` (`{"dynamodb UpdateItem META": 2, ...}`) as compact JSON with short
    kinds (`{"":1,"dUpdateItem+":2}`, the empty key marking the short form): it grows with every write
    to the record, and a write unit is 1 KB of it. Reads either form (items written before hold the
    long one)."""

    def serialize(self, value: Any) -> str:
        short = {_short_kind(k): v for k, v in value.items()}
        return json.dumps({"": 1, **short}, separators=(",", ":"))

    def deserialize(self, value: str) -> Any:
        stored = json.loads(value)
        if "" not in stored:
            return stored
        return {_long_kind(k): v for k, v in stored.items() if k != ""}


class _StatusIndex(GlobalSecondaryIndex["InvocationItem"]):  # type: ignore[no-untyped-call]
    """`by_status_v2`: invocations of one status and shard, ordered by `created_at_ms` then id."""

    class Meta:
        index_name = STATUS_INDEX
        projection = IncludeProjection(list(STATUS_INDEX_ATTRIBUTES))

    status_key = UnicodeAttribute(hash_key=True)
    status_order = UnicodeAttribute(range_key=True)


class _ExpiryIndex(GlobalSecondaryIndex["InvocationItem"]):  # type: ignore[no-untyped-call]
    """`by_expiry` (sparse: completed invocations with a retention): ordered by when the next part is due."""

    class Meta:
        index_name = EXPIRY_INDEX
        projection = IncludeProjection(list(EXPIRY_INDEX_ATTRIBUTES))

    expiry_key = UnicodeAttribute(hash_key=True)
    expiry_order = UnicodeAttribute(range_key=True)


class Item(Model):
    """The table's keys, shared by every item family."""

    pk = UnicodeAttribute(hash_key=True, attr_name="PK")
    sk = UnicodeAttribute(range_key=True, attr_name="SK")


class InvocationItem(Item):
    """`INV#id` / `META`: one attribute per `InvocationRecord` field, the index keys, and the TTL."""

    by_status = _StatusIndex()
    status_key = UnicodeAttribute()
    status_order = UnicodeAttribute()
    by_expiry = _ExpiryIndex()
    expiry_key = UnicodeAttribute(null=True)
    expiry_order = UnicodeAttribute(null=True)
    ttl_s = IntAttribute(null=True, attr_name=TTL_ATTRIBUTE)  # retained_until + TTL_GRACE_S

    invocation_id = UnicodeAttribute()
    service = UnicodeAttribute()
    handler = UnicodeAttribute()
    key = UnicodeAttribute()
    deployment_id = UnicodeAttribute()
    protocol_version = IntAttribute()
    status = UnicodeAttribute()
    input_entry = BinaryAttribute(legacy_encoding=False)
    created_at_ms = IntAttribute()
    modified_at_ms = IntAttribute()
    epoch = IntAttribute(null=True)
    lease_until_ms = IntAttribute(null=True)
    journal_length = IntAttribute(null=True)
    attempts = IntAttribute(null=True)
    retry_count = IntAttribute(null=True)
    retry_at_length = IntAttribute(null=True)
    retry_since_ms = IntAttribute(null=True)
    failures_in_a_row = IntAttribute(null=True)
    next_retry_at_ms = IntAttribute(null=True)
    last_failure = JSONAttribute(null=True)
    waiting_on = JSONAttribute(null=True)
    output = BinaryAttribute(legacy_encoding=False, null=True)
    failure = JSONAttribute(null=True)
    completed_at_ms = IntAttribute(null=True)
    expires_at_s = IntAttribute(null=True, attr_name=RETAINED_ATTRIBUTE)
    random_seed = IntAttribute(null=True)
    callee_seed = IntAttribute(null=True)
    idempotency_key = UnicodeAttribute(null=True)
    output_content_type = UnicodeAttribute(null=True)
    doorbell = IntAttribute(null=True)  # absent on items written before it existed: reads as 0
    doorbell_read = IntAttribute(null=True)  # absent on items written before it existed: reads as 0
    effects_applied_upto = IntAttribute(null=True)
    execution_time_ms = IntAttribute(null=True)
    wake_up_at_ms = IntAttribute(null=True)
    service_type = UnicodeAttribute(null=True)  # absent on items written before it existed: "SERVICE"
    handler_type = UnicodeAttribute(null=True)
    inbox_seq = UnicodeAttribute(null=True)
    caller_id = UnicodeAttribute(null=True)
    caller_completion_id = IntAttribute(null=True)
    callers = UnicodeSetAttribute(null=True)  # a string set: `ADD` is idempotent; absent when empty
    journal_expires_at_ms = IntAttribute(null=True)
    trace_id = UnicodeAttribute(null=True)
    trace_parent = UnicodeAttribute(null=True)  # set only while a `Tracer` is on
    requests = RequestsAttribute(null=True)
    completion = UnicodeAttribute(null=True)  # absent on items written before it existed
    slot = UnicodeAttribute(null=True)  # the concurrency limit's pool it counts against (absent: none)
    slot_limit = IntAttribute(null=True)
    more_slots = UnicodeAttribute(null=True)  # further pools, "N scope" a line (absent: none)
    scope = UnicodeAttribute(null=True)
    limit_key = UnicodeAttribute(null=True)
    ending_at = IntAttribute(null=True)
    """The start index of the journal's last batch, kept in the record, not a `J#` item: the Output
    command of `output`, after the notifications of `ending_head` if any, written with the
    completion (`InvocationStore.complete`'s `ending`) and derived from `output` on read
    (`ending_batch`); absent otherwise and once the journal is removed."""
    ending_head = BinaryAttribute(legacy_encoding=False, null=True)
    """The framed entries of that batch before its Output command (the notifications delivered with
    the last attempt: a sleep's completion, a call's result), at most `ENDING_HEAD_BYTES`; absent
    when there were none."""


class BatchItem(Item):
    """`INV#id` / `J#{start_index:010d}`: the framed entries one attempt committed."""

    entries = BinaryAttribute(legacy_encoding=False)
    epoch = IntAttribute()
    committed_at_ms = IntAttribute()


class NotificationItem(Item):
    """`INV#id` / `N#{key}`: a notification waiting to be folded into the journal."""

    entry = BinaryAttribute(legacy_encoding=False)
    created_at_ms = IntAttribute()


class TimerItem(Item):
    """`TIMER#{shard}` / `{due_ms:013d}#{invocation_id}`: wake the invocation at `due_ms`; a TTL once
    dropped by a function that may not delete items (`DynamoKeyed._drop`)."""

    due_ms = IntAttribute()
    invocation_id = UnicodeAttribute()
    expires_at_s = IntAttribute(null=True, attr_name=TTL_ATTRIBUTE)


class DeploymentItem(Item):
    """`DEP` / `DEP#{deployment_id}`: one attribute per `DeploymentRecord` field."""

    deployment_id = UnicodeAttribute()
    endpoint = UnicodeAttribute()
    additional_headers = JSONAttribute()
    manifest = JSONAttribute()
    min_protocol_version = IntAttribute()
    max_protocol_version = IntAttribute()
    created_at_ms = IntAttribute()
    services = JSONAttribute(null=True)
    metadata = JSONAttribute(null=True)
    auth = JSONAttribute(null=True)
    protocol_mode = UnicodeAttribute(null=True)


class ServiceItem(Item):
    """`SVC` / `SVC#{name}`: one attribute per `ServiceRecord` field."""

    name = UnicodeAttribute()
    deployment_id = UnicodeAttribute()
    ty = UnicodeAttribute()
    manifest = JSONAttribute()
    revision = IntAttribute(null=True)
    overrides = JSONAttribute(null=True)  # admin/CLI configuration, until the next deployment


class KeyedItem(Item):
    """An item of a keyed partition `OBJ#{scope}#{h(key)}`: the raw scope and key, and an optional TTL."""

    scope = UnicodeAttribute()
    key = UnicodeAttribute()
    expires_at_s = IntAttribute(null=True, attr_name=TTL_ATTRIBUTE)


class StateItem(KeyedItem):
    """`OBJ#…` / `S#{h(state_key)}#{h(value)}`: a large state value stored apart from the key item; or
    `OBJ#…` / `T#{prefix}#{h(page)}`: a state page (`state_key` empty, `value` the encoded entries)."""

    state_key = BinaryAttribute(legacy_encoding=False)
    value = BinaryAttribute(legacy_encoding=False)


class LockItem(KeyedItem):
    """`OBJ#…` / `LOCK`, the key item: `holder` (absent: free), `queued` (string set of
    `{seq}#{invocation_id}`, absent: nobody waits) and one map attribute `S#{h(state key)}` per state
    entry, `{k: key, v: value}` or `{k: key, r: sort key of the item holding a large value}`.
    Read and written raw by `store_keyed` (state attribute names are not fixed); this template names
    the fixed ones."""

    holder = UnicodeAttribute(null=True)


class StateKeyItem(KeyedItem):
    """`SKEYS#{scope}#{shard}` / `{h(key)}`: `key` of `scope` has (or had) state. Put once per key,
    by the first state write that finds its key item without `listed` (see `store_keyed`)."""


class PromiseItem(KeyedItem):
    """`OBJ#…` / `P#{h(name)}`: a completed durable promise."""

    name = UnicodeAttribute()
    value = BinaryAttribute(legacy_encoding=False, null=True)
    failure = JSONAttribute(null=True)
    completed_by = UnicodeAttribute()


class WaiterItem(KeyedItem):
    """`OBJ#…` / `W#{h(name)}#{invocation_id}`: an invocation awaiting promise `name`."""

    name = UnicodeAttribute()
    invocation_id = UnicodeAttribute()


_M = TypeVar("_M", bound=Model)


def bind(template: type[_M], meta: type, connection: TableConnection) -> type[_M]:
    """A subclass of `template` bound to one table and endpoint, talking through `connection`.

    pynamodb reads the table name and endpoint from `class Meta` and caches one connection per model
    class; binding subclasses per store lets stores on different tables or endpoints coexist.
    """
    name = template.__name__
    namespace = {"Meta": meta, "__module__": template.__module__, "__qualname__": f"DynamoDBStore.{name}"}
    bound = cast("type[_M]", types.new_class(name, (template,), exec_body=lambda ns: ns.update(namespace)))
    bound._connection = connection  # shared, so every item family counts into the same store
    return bound


# --- records <-> items ---------------------------------------------------------------------------

INVOCATION_FIELDS = tuple(f.name for f in dataclasses.fields(InvocationRecord))
_REQUIRED_INVOCATION_FIELDS = frozenset(
    f.name
    for f in dataclasses.fields(InvocationRecord)
    if f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING
)


_DEFAULTS = {f.name: f.default for f in dataclasses.fields(InvocationRecord) if f.default is not dataclasses.MISSING}
KEPT_AT_DEFAULT = frozenset({"epoch", "lease_until_ms", "doorbell", "journal_expires_at_ms", "key", "expires_at_s"})
"""Fields stored even at their default value: the ones a condition or an update expression reads
(`SET epoch = epoch + 1`, `lease_until_ms < now`, `doorbell = :read`, `journal_expires_at_ms = due`:
a comparison with a missing attribute is false), `key` (a filter of `list_invocations`) and
`expires_at_s` (its own rule)."""
OMITTED_AT_DEFAULT = frozenset(_DEFAULTS) - KEPT_AT_DEFAULT
"""Fields not stored at their default value (0, "", None, `output_content_type` "application/json",
...): an absent attribute reads back as the default (`invocation_record`), and a change back to the
default removes the attribute. Why: a write unit is 1 KB of the larger of the old and new item, and
a record carrying ~20 default fields (~260 bytes of attribute names) crossed 1 KB once suspended,
making every write to it cost 2 units (bench/README.md, "Cost")."""


def _stored(name: str, value: object) -> object:
    """A record field's value as the item holds it: JSON-able dicts, and None for "no attribute"
    (a field of `OMITTED_AT_DEFAULT` at its default, an empty set)."""
    if name == "expires_at_s" and value == 0:
        return None  # 0 means "keep forever": no TTL attribute at all
    if name in OMITTED_AT_DEFAULT and value == _DEFAULTS[name]:
        return None
    if isinstance(value, (set, frozenset)):
        return set(value) or None  # DynamoDB has no empty sets
    if isinstance(value, Mapping):
        return dict(value)
    return value


def invocation_item(model: type[InvocationItem], record: InvocationRecord, shards: int) -> InvocationItem:
    """The `META` item of `record`, with its index keys (`shards`: see `shard_of`) and its TTL."""
    item = model(invocation_pk(record.invocation_id), META_SK)
    for name in INVOCATION_FIELDS:
        setattr(item, name, _stored(name, getattr(record, name)))
    shard = shard_of(record.invocation_id, shards)
    item.status_key = status_pk(record.status, shard)
    item.status_order = status_sk(record.created_at_ms, record.invocation_id)
    item.ttl_s = record.expires_at_s + TTL_GRACE_S if record.expires_at_s else None
    due_ms = _retention_due_ms(record.journal_expires_at_ms, record.expires_at_s)
    if due_ms and record.status == COMPLETED:
        item.expiry_key = expiry_pk(shard)
        item.expiry_order = expiry_sk(due_ms, record.invocation_id)
    return item


def _retention_due_ms(journal_expires_at_ms: int | None, expires_at_s: int | None) -> int:
    """When the next part of a completed invocation's retention ends: its journal's, else its record's; 0: never."""
    return journal_expires_at_ms or 1000 * (expires_at_s or 0)


def invocation_record(item: InvocationItem) -> InvocationRecord:
    """The record a `META` item holds; an absent attribute reads as the field's default.

    An item written before `retained_until` existed keeps its retention end in the TTL attribute.
    """
    present = {name: getattr(item, name) for name in INVOCATION_FIELDS}
    if present["callers"] is not None:
        present["callers"] = frozenset(present["callers"])
    if present["expires_at_s"] is None:
        present["expires_at_s"] = item.ttl_s
    return InvocationRecord(**{name: value for name, value in present.items() if value is not None})


def retention_due(item: InvocationItem) -> RetentionDue:
    """What a `by_expiry` entry says about a completed invocation's retention."""
    return RetentionDue(
        invocation_id=item.invocation_id,
        due_ms=int(item.expiry_order.partition("#")[0]) if item.expiry_order else 0,
        journal_expires_at_ms=item.journal_expires_at_ms or 0,
        expires_at_s=item.expires_at_s or 0,
    )


ENDING_HEAD_BYTES = 1024
"""The most bytes of notifications before the Output that a completing write keeps in the record
(`InvocationItem.ending_head`): a `J#` item would take at least one write unit, these at most one."""


def ending_entries(output: bytes) -> bytes:
    """The framed journal batch of a handler's Output command with value `output` and nothing else."""
    return encode_frames([frame(pb.OutputCommandMessage(value=pb.Value(content=output)))])


def ending_head(entries: bytes, output: bytes) -> bytes | None:
    """What the record keeps of an ending batch `entries` (framed) besides the Output command of
    `output` (`InvocationItem.ending_head`): b"" when the batch is that Output alone, the whole
    frames before it when the batch is those then that Output and they take at most
    `ENDING_HEAD_BYTES`; None when the record cannot keep the batch (it is appended as a `J#` item)."""
    tail = ending_entries(output)
    if not entries.endswith(tail):
        return None
    head = entries[: len(entries) - len(tail)]
    if len(head) > ENDING_HEAD_BYTES:
        return None
    try:  # whole frames: the batch then reads as they are followed by the Output frame
        decode_frames(head)
    except ProtocolViolation:
        return None
    return head


def ending_batch(item: InvocationItem) -> JournalBatch | None:
    """The journal batch the record keeps (`InvocationItem.ending_at`), or None: its notifications
    (`ending_head`) and its Output, committed under the completing epoch at the completion time."""
    if item.ending_at is None:
        return None
    entries = (item.ending_head or b"") + ending_entries(item.output or b"")
    return JournalBatch(item.ending_at, entries, item.epoch or 0, item.completed_at_ms or 0)


def batch_record(item: BatchItem) -> JournalBatch:
    """The journal batch a `J#…` item holds."""
    return JournalBatch(
        start_index=int(item.sk.removeprefix(BATCH_PREFIX)),
        entries=item.entries,
        epoch=item.epoch,
        committed_at_ms=item.committed_at_ms,
    )


def notification_record(item: NotificationItem) -> StoredNotification:
    """The notification an `N#…` item holds."""
    return StoredNotification(
        key=item.sk.removeprefix(NOTIFICATION_PREFIX), entry=item.entry, created_at_ms=item.created_at_ms
    )


def deployment_record(item: DeploymentItem) -> DeploymentRecord:
    """The deployment a `DEP#…` item holds."""
    return DeploymentRecord(
        deployment_id=item.deployment_id,
        endpoint=item.endpoint,
        additional_headers=item.additional_headers,
        manifest=item.manifest,
        min_protocol_version=item.min_protocol_version,
        max_protocol_version=item.max_protocol_version,
        created_at_ms=item.created_at_ms,
        services=tuple(item.services or ()),
        metadata=item.metadata or {},
        auth=item.auth or {},
        protocol_mode=item.protocol_mode or "REQUEST_RESPONSE",
    )


def service_record(item: ServiceItem) -> ServiceRecord:
    """The service an `SVC#…` item holds."""
    return ServiceRecord(
        name=item.name,
        deployment_id=item.deployment_id,
        ty=item.ty,
        manifest=item.manifest,
        revision=1 if item.revision is None else item.revision,
        overrides=item.overrides or {},
    )


def promise_record(item: PromiseItem) -> PromiseRecord:
    """The promise a `P#…` item holds (an empty value stays `b""`, an absent one is None)."""
    return PromiseRecord(value=item.value, failure=item.failure, completed_by=item.completed_by)


def invocation_update_actions(
    model: type[InvocationItem], invocation_id: str, changes: Mapping[str, object], *, shards: int, caller: str
) -> list[Action]:
    """SET/REMOVE actions for `changes` to an invocation, plus the index keys and TTL they move.

    A value of None removes the attribute (it then reads back as the field's default); so does
    `expires_at_s=0`. A change of `status` moves the status index key (its range key, the creation
    time, never moves); a change of `expires_at_s` moves the TTL (`TTL_GRACE_S` later); a change of
    `journal_expires_at_ms` or `expires_at_s` (the completing write sets both) puts the invocation
    in `by_expiry` at the earlier of the two that is set, or takes it out.

    Args:
        model: The store's bound `InvocationItem`.
        invocation_id: The invocation (for the index keys).
        changes: New values, named as `InvocationRecord` fields; may be empty.
        shards: The store's shard count (`shard_of`).
        caller: The store method, for error messages.

    Raises:
        TypeError: A name is not an `InvocationRecord` field, or a required field (one without a
            default) is set to None.
    """
    unknown = sorted(set(changes) - set(INVOCATION_FIELDS))
    if unknown:
        raise TypeError(f"{caller}() got unknown InvocationRecord field(s): {', '.join(unknown)}")
    nulled = sorted(name for name, value in changes.items() if value is None and name in _REQUIRED_INVOCATION_FIELDS)
    if nulled:
        raise TypeError(f"{caller}() cannot set required field(s) to None: {', '.join(nulled)}")
    actions: list[Action] = []
    # `status` is set last: moto applies an UpdateItem's actions one at a time to the live item, so
    # a concurrent GetItem may see part of it (DynamoDB applies them at once); a reader that sees
    # `completed` must also see the output or failure it completed with
    for name, value in sorted(changes.items(), key=lambda change: change[0] == "status"):
        attribute = getattr(model, name)
        stored = _stored(name, value)
        actions.append(attribute.remove() if stored is None else attribute.set(stored))
    shard = shard_of(invocation_id, shards)
    if "status" in changes:
        actions.append(model.status_key.set(status_pk(cast("str", changes["status"]), shard)))
    if "expires_at_s" in changes:
        expires_at_s = cast("int | None", changes["expires_at_s"])
        actions.append(model.ttl_s.set(expires_at_s + TTL_GRACE_S) if expires_at_s else model.ttl_s.remove())
    if "journal_expires_at_ms" in changes or "expires_at_s" in changes:
        due_ms = _retention_due_ms(
            cast("int | None", changes.get("journal_expires_at_ms")), cast("int | None", changes.get("expires_at_s"))
        )
        if due_ms:
            actions += [
                model.expiry_key.set(expiry_pk(shard)),
                model.expiry_order.set(expiry_sk(due_ms, invocation_id)),
            ]
        else:
            actions += [model.expiry_key.remove(), model.expiry_order.remove()]
    return actions


# --- errors --------------------------------------------------------------------------------------


def is_item_too_large(exc: PutError | UpdateError) -> bool:
    """DynamoDB's answer to an item above 400 KB: a ValidationException about the item size.

    PutItem says "Item size has exceeded the maximum allowed size", UpdateItem "Item size to update
    has exceeded the maximum allowed size" (DynamoDB and moto alike).
    """
    message = exc.cause_response_message or ""
    return exc.cause_response_code == "ValidationException" and "maximum allowed size" in message


@contextmanager
def translated_write(*, too_large: str, conflict: str | None = None) -> Iterator[None]:
    """Turn an oversized item into `ItemTooLarge(too_large)` and, for a conditional write (`conflict`
    given), a failed condition into `StoreConflict(conflict)`.

    Anything else pynamodb raises passes through untouched.
    """
    try:
        yield
    except (PutError, UpdateError) as exc:
        if conflict is not None and exc.cause_response_code == CONDITION_FAILED:
            raise StoreConflict(conflict) from exc
        if is_item_too_large(exc):
            raise ItemTooLarge(too_large) from exc
        raise


# --- conditions (named pieces) -------------------------------------------------------------------


def item_absent(model: type[Item]) -> Condition:
    """No item with this key exists."""
    return model.pk.does_not_exist()


def item_exists(model: type[Item]) -> Condition:
    """An item with this key exists."""
    return model.pk.exists()


def lease_expired(model: type[InvocationItem], now_ms: int) -> Condition:
    """Nobody holds the lease at `now_ms` (a free lease is 0)."""
    return model.lease_until_ms < now_ms


def status_in(model: type[InvocationItem], statuses: Iterable[str]) -> Condition:
    """The invocation's status is one of `statuses`."""
    return model.status.is_in(*statuses)


def not_completed(model: type[InvocationItem]) -> Condition:
    """The invocation has not completed."""
    return model.status != COMPLETED


def journal_retention_is(model: type[InvocationItem], journal_expires_at_ms: int) -> Condition:
    """The invocation completed and its journal is still to be removed at `journal_expires_at_ms`."""
    return (model.status == COMPLETED) & (model.journal_expires_at_ms == journal_expires_at_ms)


def epoch_is(model: type[InvocationItem], epoch: int) -> Condition:
    """The lease epoch is still `epoch`."""
    return model.epoch == epoch


def doorbell_is(model: type[InvocationItem], doorbell: int) -> Condition:
    """No notification was rung in since the doorbell read `doorbell` (a missing doorbell reads as 0)."""
    if doorbell == 0:
        return model.doorbell.does_not_exist() | (model.doorbell == 0)
    return model.doorbell == doorbell
