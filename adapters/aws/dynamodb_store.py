"""`control_plane.ports.Store` on one DynamoDB table, through pynamodb.

Single table, keys `PK` (string, hash) and `SK` (string, range), billed PAY_PER_REQUEST, TTL on
`expires_at` (epoch seconds), two global secondary indexes, `by_status_v2` and `by_expiry`. Item
families (their pynamodb templates, keys and record mapping live in `adapters.aws.store_items`):

| item | `PK` | `SK` | attributes |
| --- | --- | --- | --- |
| invocation metadata | `INV#{invocation_id}` | `META` | one per `InvocationRecord` field, index keys, TTL |
| journal batch | `INV#{invocation_id}` | `J#{start_index:010d}` | `entries` (binary), `epoch`, `committed_at_ms` |
| notification | `INV#{invocation_id}` | `N#{key}` | `entry` (binary), `created_at_ms` |
| timer | `TIMER#{shard}` | `{due_ms:013d}#{invocation_id}` | `due_ms`, `invocation_id` |
| shard count | `CONFIG` | `SHARDS` | `shards`: the table's count, recorded by its first user |
| deployment | `DEP` | `DEP#{deployment_id}` | one per `DeploymentRecord` field |
| service | `SVC` | `SVC#{name}` | one per `ServiceRecord` field |
| object/workflow key | `OBJ#{scope}#{sha256(key)}` | `LOCK` `S#…` `P#…` `W#…` | see `store_keyed` |
| keys with state | `SKEYS#{scope}#{shard}` | `{sha256(key)}` | `scope`, `key` (see `store_keyed`) |

| index | hash key | range key | projects (INCLUDE) |
| --- | --- | --- | --- |
| `by_status_v2` | `status_key`: `STATUS#{group}#{shard}` | `status_order`: `{created_at_ms:013d}#{id}` | filters |
| `by_expiry` | `expiry_key`: `EXPIRY#{shard}` | `expiry_order`: `{due_ms:013d}#{id}` | what the sweep needs |

The record field `expires_at_s` is stored as `retained_until`; items written before it existed
read it from `expires_at`.

`{shard}` is `shard_of(invocation_id, shards)` (of the key for `SKEYS#`; crc32 mod `shards`: the count recorded in the
table's `CONFIG` / `SHARDS` item by its first user, `Settings.store_shards` for a new table): an
invocation's timers and index entries share its shard, and the writes of many invocations spread
over `shards` keys. `{group}` is `store_items.status_group(status)`. The status index's range key
is the creation time, so only a change of `status` writes an entry (a lease, a renewal, a step
write nothing there; a change among `store_items.ACTIVE_STATUSES`, which share a key, rewrites it
in place: 1 write unit, where a move is 2); reads query every shard and merge. `by_expiry` holds
completed invocations only: the completing write puts one at its journal's end
(`journal_expires_at_ms`), the journal's removal moves it to its record's end (`retained_until`),
the record's removal takes it out; no timer item is written for retention.
`expires_at` (TTL) is `retained_until` + `TTL_GRACE_S` (a day), so the sweep normally removes the
journal and the record first and TTL is the backstop (moto and dynalite never run TTL).

Within an invocation's partition batches (`J#`) sort before `META` and notifications (`N#`) after it,
so one query reads all three. Mappings are stored as JSON strings, bytes as binary, and a `None` (or
`expires_at_s == 0`) as an absent attribute; an absent attribute reads back as the record field's
default (so items written before a field existed still load, e.g. without `doorbell`). A field at
its default is not stored either (`store_items.OMITTED_AT_DEFAULT`: all but those a condition or
update expression reads, `epoch`, `lease_until_ms`, `doorbell`, `journal_expires_at_ms`, and `key`), and the AWS
request counts (`requests`) are compact JSON (`store_items.RequestsAttribute`): a write unit is 1 KB
of the larger of the old and new item, and so the record of a plain invocation stays under 1 KB
through its life (about 890 bytes for `bench.cost`'s workflow once completed, 1,220 before): 1 write
unit per write to it (issue 24).

pynamodb binds a model to its table and endpoint in `class Meta`, so each `DynamoDBStore` binds its
own subclasses of the item templates (`store_items.bind`); all of them share one connection, which
counts the API calls it makes (`DynamoDBStore.request_count`).
"""

from __future__ import annotations

import contextlib
import contextvars
import functools
import heapq
import logging
import threading
import time
from collections.abc import Callable, Iterable
from concurrent.futures import ThreadPoolExecutor
from itertools import islice
from typing import Any, cast

from botocore.exceptions import ClientError
from pynamodb.connection import Connection, TableConnection
from pynamodb.connection.base import MetaTable
from pynamodb.constants import ALL_NEW, PAY_PER_REQUEST_BILLING_MODE
from pynamodb.exceptions import PutError, TableDoesNotExist, TableError
from pynamodb.expressions.condition import Condition
from pynamodb.expressions.operand import Path
from pynamodb.expressions.update import Action
from pynamodb.pagination import ResultIterator

from adapters.aws.blobs import Spiller, previews
from adapters.aws.store_items import (
    ACTIVE_STATUSES,
    BATCH_PREFIX,
    CONFIG_PK,
    DEFAULT_SHARDS,
    EXPIRY_INDEX,
    MAX_DUE_MS,
    META_SK,
    NOTIFICATION_PREFIX,
    SHARDS_SK,
    STATUS_INDEX,
    TTL_ATTRIBUTE,
    BatchItem,
    DeploymentItem,
    InvocationItem,
    ItemTooLarge,
    NotificationItem,
    ServiceItem,
    TimerItem,
    batch_record,
    batch_sk,
    bind,
    doorbell_is,
    ending_batch,
    ending_head,
    epoch_is,
    expiry_pk,
    expiry_sk,
    invocation_item,
    invocation_pk,
    invocation_record,
    invocation_update_actions,
    item_absent,
    item_exists,
    journal_retention_is,
    lease_expired,
    legacy_status_pk,
    not_completed,
    notification_record,
    notification_sk,
    retention_due,
    shard_of,
    status_in,
    status_pk,
    status_sk,
    table_schema,
    timer_sk,
    timers_due_until,
    timers_pk,
    translated_write,
)
from adapters.aws.store_keyed import DynamoKeyed
from adapters.aws.store_registry import DynamoRegistry, SubscriptionItem
from adapters.aws.store_schedules import DynamoSchedules, ScheduleItem
from control_plane.ids import INVOCATION_ID_BYTES
from control_plane.observability import record
from control_plane.ports import (
    INVOCATION_STATUSES,
    MAX_ITEM_BYTES,
    MAX_MESSAGE_BYTES,
    BlobStore,
    InvocationRecord,
    InvocationTransitions,
    JournalBatch,
    LoadedInvocation,
    RetentionDue,
    StoreConflict,
    StoredNotification,
)

__all__ = ["DynamoDBFacts", "DynamoDBStore", "ItemTooLarge"]

_MAX_POOL_CONNECTIONS = 64  # one per concurrent advance or HTTP request (botocore's default is 10)
_LIST_SLACK = 10  # index entries read beyond a page's limit, per status and shard (see list_invocations)
_SHARD_QUERIES_AT_ONCE = 16  # queries of one read over the shards that run concurrently
_BATCH_GET_KEYS = 100  # DynamoDB's BatchGetItem limit

log = logging.getLogger(__name__)

RUNNING = "running"
TABLE_ACTIVE_TIMEOUT_S = 300.0
"""How long `ensure_schema` waits for a table another process is creating to become ACTIVE."""

_TTL_UNSUPPORTED = frozenset({"UnknownOperationException"})  # dynalite has no TTL operations


def _output_previewed(method: Callable[..., Any]) -> Callable[..., Any]:
    """`method` reads each record's spilled input and output as their previews (`blobs.previews`: no GetObject):
    for the reads whose callers show the output cut to 200 bytes (listings) or never use it (the sweep)."""

    @functools.wraps(method)
    def read(*args: Any, **kwargs: Any) -> Any:
        with previews("output", "input_entry"):  # `InvocationItem.output`, `.input_entry`
            return method(*args, **kwargs)

    return read


class _CountingConnection(Connection):
    """A pynamodb `Connection` that reports each DynamoDB API call (not botocore's retries) as it starts."""

    def __init__(self, on_call: Callable[[str], None], spiller: Spiller | None = None, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self._on_call = on_call
        self._spiller = spiller

    def dispatch(self, operation_name: str, operation_kwargs: dict[str, Any]) -> dict[str, Any]:
        """Send one request; with a blob store, values too large for an item go to it first and come
        back from it on reads (`adapters.aws.blobs`)."""
        spiller = self._spiller
        if spiller is None:
            return self._dispatch(operation_name, operation_kwargs)
        if operation_name == "DeleteItem":
            return self._delete_item(spiller, operation_kwargs)
        if operation_name in _WRITES:
            spiller.spill_request(operation_name, operation_kwargs)
        try:
            data = self._dispatch(operation_name, operation_kwargs)
        except ClientError as exc:
            messages = [str(exc.response.get("Error", {}).get("Message", ""))]
            messages += [str(r.message) for r in getattr(exc, "cancellation_reasons", None) or () if r]  # transactions
            too_large = any("maximum allowed size" in message for message in messages)
            if operation_name not in _WRITES or not too_large:
                raise
            spiller.spill_request(operation_name, operation_kwargs, everything=True)  # an update: size unknown
            data = self._dispatch(operation_name, operation_kwargs)
        spiller.restore_response(data)
        return data

    def _delete_item(self, spiller: Spiller, kwargs: dict[str, Any]) -> dict[str, Any]:
        """One DeleteItem returning the old item (ALL_OLD: no request or capacity more); once it
        committed, the objects of the values it had spilled are deleted (best effort: a failure is
        logged; see `Spiller.forget`)."""
        asked = kwargs.get("ReturnValues", "NONE") != "NONE"
        kwargs["ReturnValues"] = "ALL_OLD" if not asked else kwargs["ReturnValues"]
        data = self._dispatch("DeleteItem", kwargs)
        orphans = spiller.references(data.get("Attributes") or {})
        if asked:
            spiller.restore_response(data)
        else:
            data.pop("Attributes", None)
        spiller.forget(orphans)
        return data

    def _dispatch(self, operation_name: str, operation_kwargs: dict[str, Any]) -> dict[str, Any]:
        key = operation_kwargs.get("Key") or operation_kwargs.get("Item") or {}
        on_record = key.get("SK", {}).get("S") == META_SK  # writes there may also move the indexes
        kind = f"{operation_name} META" if on_record else operation_name
        self._on_call(kind)
        items = sum(  # a batch: its items (BatchWriteItem: a list of requests; BatchGetItem: {"Keys": [...]})
            len(v["Keys"]) if isinstance(v, dict) else len(v) for v in operation_kwargs.get("RequestItems", {}).values()
        )
        record(f"dynamodb {kind}", items or 1)
        return cast("dict[str, Any]", super().dispatch(operation_name, operation_kwargs))


_WRITES = frozenset({"PutItem", "UpdateItem", "TransactWriteItems", "BatchWriteItem"})


def _checked_due(due_ms: int) -> int:
    """`due_ms`, if a timer key can hold it (13 digits, so keys sort as the times do)."""
    if not 0 <= due_ms <= MAX_DUE_MS:
        raise ValueError(f"timer due_ms must be within 0..{MAX_DUE_MS}, got {due_ms}")
    return due_ms


class DynamoDBFacts:
    """`control_plane.ports.StoreFacts` of a `DynamoDBStore` (its `facts`): what its deployment
    allows and costs, not storage.

    Args:
        store: The store whose table and credentials these facts describe.
    """

    def __init__(self, store: DynamoDBStore) -> None:
        self._store = store

    @property
    def may_delete(self) -> bool:
        """As the store was built (`DynamoDBStore(may_delete=...)`): False in the AWS ingress, whose
        role has no `dynamodb:DeleteItem` or `BatchWriteItem` (`StoreFacts.may_delete`)."""
        return self._store._may_delete

    @property
    def holds_short_ids(self) -> bool:
        """True unless the table's `CONFIG` / `SHARDS` item says it was first used with 24-byte
        invocation ids (`ids: 24`, recorded with the shard count by its first user; see
        `DynamoDBStore.shards`, read once per store): a table from before may hold 16-byte ids
        (`StoreFacts.holds_short_ids`)."""
        _ = self._store.shards
        return self._store._short_ids

    @property
    def value_limit_bytes(self) -> int:
        """`MAX_MESSAGE_BYTES` with a blob store, else what one item holds beside its keys
        (`StoreFacts.value_limit_bytes`)."""
        return MAX_MESSAGE_BYTES if self._store.blobs is not None else MAX_ITEM_BYTES - 16 * 1024

    def creation_requests(self, *, delayed: bool, on_key: bool) -> dict[str, int]:
        """The DynamoDB requests of creating an invocation: its record (PutItem META), a delayed
        start's timer (PutItem), taking its object key (UpdateItem)."""
        return {
            "dynamodb PutItem META": 1,
            **({"dynamodb PutItem": 1} if delayed else {}),
            **({"dynamodb UpdateItem": 1} if on_key else {}),
        }


# --- the store -----------------------------------------------------------------------------------


class DynamoDBStore(DynamoKeyed, DynamoRegistry, DynamoSchedules, InvocationTransitions):
    """`control_plane.ports.Store` on one DynamoDB table (see the module docstring for the layout).

    Every read of an invocation, deployment, service or timer is strongly consistent;
    `list_invocations` is not (it reads the GSI). Every write that changes an invocation is
    a single conditional write; a lost condition raises `StoreConflict` (`put_notification` answers
    False instead), an item above 400 KB raises `ItemTooLarge`. The port's families: invocations
    and journals (`InvocationStore`) and timers (`TimerStore`) are here; deployments and services
    (`RegistryStore`) come from `DynamoRegistry`, keyed state, locks, queues and promises
    (`KeyStore`) from `DynamoKeyed`, schedules (`ScheduleStore`) from `DynamoSchedules`.

    Attributes:
        facts: What the core needs to know of this store that is not storage (`DynamoDBFacts`):
            hand it to `ControlPlane(facts=...)` with the store.
        table_name: The table, as given.
        region: Its AWS region, as given.
        endpoint_url: The endpoint, as given (None: AWS).

    Args:
        table_name: The table to use (and to create in `ensure_schema`).
        region: AWS region of the table.
        endpoint_url: A DynamoDB-compatible endpoint (moto server, dynalite, DynamoDB Local), or None
            for AWS itself.
        aws_access_key_id: Credentials to sign with, together with `aws_secret_access_key`; None
            uses botocore's default chain (environment, profile, role).
        aws_secret_access_key: See `aws_access_key_id`.
        shards: Timer partitions and status index keys per status (`Settings.store_shards`) for a
            table that has no recorded count yet; a table's recorded count wins (see `shards`).
        may_delete: False for a function whose role has no `dynamodb:DeleteItem` or
            `BatchWriteItem` (the AWS ingress): timers and replaced large state values then expire
            (their TTL set to now) instead of being deleted, and removing an invocation or a
            workflow's items raises `PermissionError` (see `StoreFacts.may_delete`).
        blobs: Where values too large for an item go (`control_plane.ports.BlobStore`, S3 on AWS:
            `adapters.aws.blobs`), up to `MAX_MESSAGE_BYTES` each; None: such a value raises
            `ItemTooLarge` (413). Items that fit never touch it.

    Raises:
        ValueError: `shards` is below 1.
    """

    def __init__(
        self,
        table_name: str = "torpor",
        *,
        region: str = "us-east-1",
        endpoint_url: str | None = None,
        aws_access_key_id: str | None = None,
        aws_secret_access_key: str | None = None,
        shards: int = DEFAULT_SHARDS,
        may_delete: bool = True,
        blobs: BlobStore | None = None,
    ) -> None:
        if shards < 1:
            raise ValueError(f"the store needs at least 1 shard, got {shards}")
        self.table_name = table_name
        self.region = region
        self.endpoint_url = endpoint_url
        self._wanted_shards = shards
        self._may_delete = may_delete
        self._shards: int | None = None
        self._short_ids = True  # until the table's CONFIG record is read (`DynamoDBFacts.holds_short_ids`)
        self._shards_lock = threading.Lock()
        self._executor: ThreadPoolExecutor | None = None
        self._executor_lock = threading.Lock()
        self._request_count = 0
        self._request_counts: dict[str, int] = {}
        self._request_count_lock = threading.Lock()
        self._connection = TableConnection(table_name)
        self.blobs = blobs
        self._connection.connection = _CountingConnection(
            self._count_request,
            Spiller(blobs) if blobs is not None else None,
            region=region,
            host=endpoint_url,
            max_pool_connections=_MAX_POOL_CONNECTIONS,
            aws_access_key_id=aws_access_key_id,
            aws_secret_access_key=aws_secret_access_key,
        )
        self._connection.connection.add_meta_table(MetaTable(table_schema(table_name)))
        meta = type(
            "Meta",
            (),
            {
                "table_name": table_name,
                "region": region,
                "host": endpoint_url,
                "aws_access_key_id": aws_access_key_id,
                "aws_secret_access_key": aws_secret_access_key,
                "billing_mode": PAY_PER_REQUEST_BILLING_MODE,
            },
        )
        self._invocations = bind(InvocationItem, meta, self._connection)
        self._batches = bind(BatchItem, meta, self._connection)
        self._deployments = bind(DeploymentItem, meta, self._connection)
        self._services = bind(ServiceItem, meta, self._connection)
        self._notifications = bind(NotificationItem, meta, self._connection)
        self._timers = bind(TimerItem, meta, self._connection)
        self._schedules = bind(ScheduleItem, meta, self._connection)
        self._subscriptions = bind(SubscriptionItem, meta, self._connection)
        self._bind_keyed(meta, self._connection)
        self.facts = DynamoDBFacts(self)

    def __repr__(self) -> str:
        return f"DynamoDBStore(table_name={self.table_name!r}, endpoint_url={self.endpoint_url!r})"

    @property
    def shards(self) -> int:
        """The table's shard count: the one recorded in its `CONFIG` / `SHARDS` item.

        Read once per store (a consistent GetItem, in `ensure_schema` or at first use). A table
        without the record gets this store's `shards` (one conditional PutItem; of processes racing
        to record theirs, the first wins and the others adopt it). A process whose setting differs
        logs it and uses the table's count, so timers are deleted where they were written and every
        reader (sweeper, CLI, `torpor dev`) reads every shard; the count is fixed for a table's life.
        """
        with self._shards_lock:
            if self._shards is None:
                self._shards = self._recorded_shards()
            return self._shards

    def _recorded_shards(self) -> int:
        for _ in range(3):
            found = self._connection.get_item(CONFIG_PK, SHARDS_SK, consistent_read=True).get("Item")
            if found is not None:
                self._short_ids = found.get("ids", {}).get("N") != str(INVOCATION_ID_BYTES)
                recorded = int(found["shards"]["N"])
                if recorded != self._wanted_shards:
                    log.info(
                        "table %s has %d shards (recorded when it was first used); the setting's %d is not applied",
                        self.table_name,
                        recorded,
                        self._wanted_shards,
                    )
                return recorded
            try:
                self._connection.put_item(
                    CONFIG_PK,
                    SHARDS_SK,
                    attributes={
                        "shards": {"N": str(self._wanted_shards)},
                        "ids": {"N": str(INVOCATION_ID_BYTES)},
                    },
                    condition=Path("PK").does_not_exist(),
                )
                self._short_ids = False
                return self._wanted_shards
            except PutError as exc:
                if getattr(exc, "cause_response_code", None) != "ConditionalCheckFailedException":
                    raise
        raise StoreConflict(f"table {self.table_name}: its shard count could not be read or recorded")

    def _each_shard(self, read: Callable[[int], list[Any]]) -> list[list[Any]]:
        """`read(shard)` for every shard, up to `_SHARD_QUERIES_AT_ONCE` at once; the answers by shard."""
        if self.shards == 1:
            return [read(0)]
        with self._executor_lock:
            if self._executor is None:
                self._executor = ThreadPoolExecutor(
                    max_workers=min(self.shards, _SHARD_QUERIES_AT_ONCE), thread_name_prefix="torpor-shards"
                )
        contexts = [contextvars.copy_context() for _ in range(self.shards)]  # `blobs.previews` holds there too
        return list(self._executor.map(lambda n: contexts[n].run(read, n), range(self.shards)))

    @property
    def request_count(self) -> int:
        """DynamoDB API calls this store has made so far (each page of a query or scan counts)."""
        with self._request_count_lock:
            return self._request_count

    @property
    def request_counts(self) -> dict[str, int]:
        """DynamoDB API calls so far by operation, e.g. `{"PutItem": 3, "UpdateItem META": 2, "Query": 1}`
        (a copy); ` META` marks calls on an invocation record (`SK = META`)."""
        with self._request_count_lock:
            return dict(self._request_counts)

    def _count_request(self, operation: str) -> None:
        with self._request_count_lock:
            self._request_count += 1
            self._request_counts[operation] = self._request_counts.get(operation, 0) + 1

    # --- schema ----------------------------------------------------------------------------------

    def ensure_schema(self) -> None:
        """Create the table with its GSI if it is missing, wait until it is ACTIVE, and enable TTL.

        Idempotent and safe to run from several processes at once. An existing table is taken as it
        is; if it lacks an index this version needs (`by_status_v2`, `by_expiry`: a table created
        before them), an error is logged naming them (create them with UpdateTable, see
        docs/deploying.md). TTL on `expires_at` is enabled unless it already is; an endpoint without
        TTL operations (dynalite) is tolerated and logged.

        Raises:
            TimeoutError: The table did not become ACTIVE within `TABLE_ACTIVE_TIMEOUT_S` seconds.
            pynamodb.exceptions.TableError: DynamoDB refused to create the table or to enable TTL.
        """
        try:
            described = self._connection.describe_table()
            status = described.get("TableStatus")
            indexes = {index["IndexName"] for index in described.get("GlobalSecondaryIndexes", [])}
            missing = [name for name in (STATUS_INDEX, EXPIRY_INDEX) if name not in indexes]
            if missing:
                log.error(
                    "table %s lacks the index(es) %s: listing and retention will fail until they are created "
                    "(docs/deploying.md, upgrading the table)",
                    self.table_name,
                    ", ".join(missing),
                )
        except TableDoesNotExist:
            status = None
            try:
                self._invocations.create_table(billing_mode=PAY_PER_REQUEST_BILLING_MODE)
            except TableError as exc:
                if exc.cause_response_code != "ResourceInUseException":
                    raise
                # another process is creating it: wait below, as it does
        deadline = time.monotonic() + TABLE_ACTIVE_TIMEOUT_S
        while status != "ACTIVE":
            if time.monotonic() > deadline:
                raise TimeoutError(f"DynamoDB table {self.table_name} is not ACTIVE after {TABLE_ACTIVE_TIMEOUT_S} s")
            if status is not None:
                time.sleep(1.0)  # CREATING: DynamoDB takes seconds; there is no waiter in pynamodb
            status = self._connection.describe_table().get("TableStatus")
        self._enable_ttl()
        _ = self.shards  # read (or record) the table's shard count now, not in the first request

    def _enable_ttl(self) -> None:
        # pynamodb has no DescribeTimeToLive: ask through its botocore client, and count the call.
        client: Any = self._connection.connection.client  # botocore's, untyped in pynamodb
        self._count_request("DescribeTimeToLive")
        try:
            described = client.describe_time_to_live(TableName=self.table_name)["TimeToLiveDescription"]
        except ClientError as exc:
            if exc.response.get("Error", {}).get("Code") in _TTL_UNSUPPORTED:
                log.info("the DynamoDB endpoint %s has no TTL; items will not expire", self.endpoint_url)
                return
            raise
        if described.get("TimeToLiveStatus") in ("ENABLED", "ENABLING"):
            if described.get("AttributeName") != TTL_ATTRIBUTE:
                log.warning(
                    "table %s expires items by %r, not %r: retention will not apply",
                    self.table_name,
                    described.get("AttributeName"),
                    TTL_ATTRIBUTE,
                )
            return
        try:
            self._connection.update_time_to_live(TTL_ATTRIBUTE)
        except TableError as exc:  # dynalite describes TTL but cannot change it
            if getattr(exc, "cause_response_code", None) not in _TTL_UNSUPPORTED:
                raise
            log.info("the DynamoDB endpoint %s cannot enable TTL; items will not expire", self.endpoint_url)

    # --- invocations -----------------------------------------------------------------------------

    def create_invocation(self, invocation: InvocationRecord) -> None:
        """Put a new invocation's metadata item, if no invocation with its id exists.

        Raises:
            StoreConflict: An invocation with this id exists already (nothing was written).
            ItemTooLarge: The record (its input entry, mostly) does not fit in a 400 KB item.
        """
        model = self._invocations
        item = invocation_item(model, invocation, self.shards)
        invocation_id = invocation.invocation_id
        too_large = (  # no invocation id: the invocation was never created
            f"the request ({len(invocation.input_entry)} bytes of input) does not fit in one DynamoDB item "
            "(400 KB, 409,600 bytes, with the invocation's other fields); send a smaller body"
        )
        with translated_write(conflict=f"invocation {invocation_id} exists already", too_large=too_large):
            item.save(condition=item_absent(model))

    def get_invocation(self, invocation_id: str) -> InvocationRecord | None:
        """The invocation's metadata (strongly consistent read), or None if there is no such invocation."""
        try:
            item = self._invocations.get(invocation_pk(invocation_id), META_SK, consistent_read=True)
        except self._invocations.DoesNotExist:
            return None
        return invocation_record(item)

    def read_fence(self, invocation_id: str) -> tuple[int, int] | None:
        """The invocation's `(epoch, doorbell)` (a missing doorbell reads 0): one strongly consistent
        GetItem of those two attributes (`ProjectionExpression`, what the checkpointing function's
        role allows it to read); None if there is no such invocation. 1 read unit (a record < 4 KB)."""
        model = self._invocations
        answer = self._connection.get_item(
            invocation_pk(invocation_id),
            META_SK,
            consistent_read=True,
            attributes_to_get=[model.epoch.attr_name, model.doorbell.attr_name],
        )
        item = answer.get("Item")
        if item is None:
            return None
        return (
            int(item.get("epoch", {}).get("N", "0")),
            int(item.get("doorbell", {}).get("N", "0")),
        )

    def load_invocation(self, invocation_id: str) -> LoadedInvocation | None:
        """The invocation, its journal batches and its notifications, in one strongly consistent query on `INV#id`.

        The query pages past DynamoDB's 1 MB per response (each page is one request). Batch keys
        (`J#…`) sort before `META`, notification keys (`N#…`) after it.

        Returns:
            The metadata record, the batches ordered by `start_index` (the last one from the record
            when its completing write kept it, `ending_at`, which supersedes a stale holder's batch
            written at or past its index after losing the lease) and the notifications ordered by
            `created_at_ms` then key; or None if the invocation does not exist (even if
            notifications were stored for it).
        """
        pages: ResultIterator[dict[str, Any]] = ResultIterator(
            self._connection.query, (invocation_pk(invocation_id),), {"consistent_read": True}
        )
        record: InvocationRecord | None = None
        ending: JournalBatch | None = None
        batches: list[JournalBatch] = []
        notifications: list[StoredNotification] = []
        for raw in pages:
            sk = raw["SK"]["S"]
            if sk == META_SK:
                item = self._invocations.from_raw_data(raw)
                record, ending = invocation_record(item), ending_batch(item)
            elif sk.startswith(BATCH_PREFIX):
                batches.append(batch_record(self._batches.from_raw_data(raw)))
            elif sk.startswith(NOTIFICATION_PREFIX):
                notifications.append(notification_record(self._notifications.from_raw_data(raw)))
        if record is None:
            return None
        if ending is not None:  # the last batch, kept in the record (`complete`'s `ending`)
            # a J# item at or past its index can only be a stale holder's, appended after it lost its
            # epoch (a batch write is conditional on its index alone): never acted on, and the holder
            # that completed read the journal without it; the completion's view is the journal
            batches = [batch for batch in batches if batch.start_index < ending.start_index] + [ending]
        notifications.sort(key=lambda n: (n.created_at_ms, n.key))
        return LoadedInvocation(record, batches, notifications)

    def delete_invocation(self, invocation_id: str, created_at_ms: int | None = None) -> None:
        """Delete the invocation: journal batches and notifications first, then its record; idempotent.

        One keys-only query (paged), one BatchWriteItem per 25 deletes, then one DeleteItem for
        `META`: while the record exists no invocation with this id can be created, so none can
        write into the partition being emptied. With `created_at_ms`, only the invocation created
        then is removed (the query also reads `META`'s `created_at_ms`, and the DeleteItem is
        conditional on it): one created under the same id after it was removed by someone else is
        kept whole.

        Raises:
            PermissionError: This store may not delete items (`may_delete` False); nothing was written.
        """
        self._delete_partition(invocation_id, keep_record=False, created_at_ms=created_at_ms)

    def _delete_partition(self, invocation_id: str, *, keep_record: bool, created_at_ms: int | None = None) -> None:
        self._check_may_delete("removing invocation " + invocation_id)
        pk = invocation_pk(invocation_id)
        model = self._invocations
        attributes = ["PK", "SK"] if created_at_ms is None else ["PK", "SK", model.created_at_ms.attr_name]
        pages: ResultIterator[dict[str, Any]] = ResultIterator(
            self._connection.query, (pk,), {"consistent_read": True, "attributes_to_get": attributes}
        )
        raws = list(pages)
        if created_at_ms is not None:
            meta = next((raw for raw in raws if raw["SK"]["S"] == META_SK), None)
            if meta is not None and meta.get(model.created_at_ms.attr_name) != {"N": str(created_at_ms)}:
                return  # another invocation under this id now: not ours to remove
        sort_keys = [sk for sk in (raw["SK"]["S"] for raw in raws) if sk != META_SK]
        if sort_keys:
            with model.batch_write() as batch:
                for sk in sort_keys:
                    batch.delete(model(pk, sk))
        if self.blobs is not None:  # the items are gone first: no item refers to a deleted object
            for prefix in (BATCH_PREFIX, NOTIFICATION_PREFIX) if keep_record else ("",):
                self.blobs.delete(f"{pk}/{prefix}")
        if keep_record:
            return
        if created_at_ms is None:
            self._connection.delete_item(pk, META_SK)
            return
        with contextlib.suppress(StoreConflict), translated_write(conflict="replaced", too_large=pk):
            self._connection.delete_item(pk, META_SK, condition=model.created_at_ms == created_at_ms)

    def attach_caller(self, invocation_id: str, caller: str) -> None:
        """Add `caller` ("{caller_id}/{completion_id}") to the `callers` string set, unless completed.

        One conditional UpdateItem (`ADD`, so a repeat changes nothing but the doorbell), which also
        rings the doorbell (`ADD doorbell 1`, as `Store.attach_caller` says), if the record exists and
        its status is not `completed`. Raises `StoreConflict` otherwise (nothing written).
        """
        model = self._invocations
        conflict = f"invocation {invocation_id} has completed or does not exist"
        too_large = f"invocation {invocation_id}: too many callers attached to fit in its 400 KB metadata item"
        with translated_write(conflict=conflict, too_large=too_large):
            self._connection.update_item(
                invocation_pk(invocation_id),
                META_SK,
                actions=[model.callers.add({caller}), model.doorbell.add(1)],
                condition=item_exists(model) & not_completed(model),
            )

    def acquire_lease(
        self, invocation_id: str, now_ms: int, lease_until_ms: int, runnable: Iterable[str]
    ) -> InvocationRecord:
        """Take the lease: one conditional UpdateItem that bumps the epoch and marks the invocation running.

        Sets `epoch = epoch + 1`, `lease_until_ms`, `status = "running"`, `modified_at_ms = now_ms` (and
        the status index key: a lease renewal leaves the index untouched), if the invocation exists,
        its lease expired (`lease_until_ms < now_ms`; a free lease is 0) and its status is one of
        `runnable`.

        Args:
            invocation_id: The invocation to lease.
            now_ms: The current time, ms since the epoch.
            lease_until_ms: When the new lease expires, ms since the epoch.
            runnable: Statuses from which the lease may be taken; at least one.

        Returns:
            The record after the update (DynamoDB's ALL_NEW).

        Raises:
            StoreConflict: Another worker holds the lease, the status is not runnable, or the
                invocation does not exist.
            ValueError: `runnable` is empty.
        """
        statuses = tuple(dict.fromkeys(runnable))
        if not statuses:
            raise ValueError("acquire_lease needs at least one runnable status")
        model = self._invocations
        take_lease: list[Action] = [
            model.epoch.set(model.epoch + 1),
            model.lease_until_ms.set(lease_until_ms),
            model.status.set(RUNNING),
            model.modified_at_ms.set(now_ms),
            model.status_key.set(status_pk(RUNNING, shard_of(invocation_id, self.shards))),
        ]
        # `_item_exists` is implied by the other two (a comparison with a missing attribute is false); it
        # stays so the condition says what it means, and no test can tell it apart.
        lease_is_free = item_exists(model) & lease_expired(model, now_ms) & status_in(model, statuses)
        item = model(invocation_pk(invocation_id), META_SK)
        conflict = f"invocation {invocation_id}: leased by another worker, not in {'/'.join(statuses)}, or unknown"
        too_large = f"invocation {invocation_id}: the metadata item exceeds DynamoDB's 400 KB limit"
        with translated_write(conflict=conflict, too_large=too_large):
            item.update(actions=take_lease, condition=lease_is_free)
        return invocation_record(item)

    def _update_invocation(
        self,
        invocation_id: str,
        epoch: int,
        *,
        doorbell: int | None = None,
        returning: bool = False,
        ending: JournalBatch | None = None,
        **changes: object,
    ) -> InvocationRecord | None:
        """Set fields of the invocation record, if its epoch is still `epoch`: one conditional UpdateItem.

        A value of None removes the attribute (it then reads back as the field's default); so does
        `expires_at_s=0`. A change of `status` also moves the invocation in the status index, one of
        `journal_expires_at_ms` or `expires_at_s` in `by_expiry` (see `invocation_update_actions`).
        Nothing is returned, so the (possibly large) item is not sent back, unless
        `returning` asks for the record after the update (DynamoDB's ALL_NEW, in the same request).

        Args:
            invocation_id: The invocation to update.
            epoch: The epoch the caller's lease was granted with.
            doorbell: If given, also require the doorbell to read this value (an item without a
                doorbell attribute reads 0): no notification was rung in since the caller read it.
            returning: Return the whole record as it is after the update (e.g. to see `callers`
                that attached meanwhile); None otherwise.
            ending: A journal batch that ends the journal, written with the update
                (`InvocationStore.complete`). When it is the Output command of `changes`' `output`,
                alone or after notifications taking at most `ENDING_HEAD_BYTES` (1 KiB: a sleep's
                completion, a call's small result), the record keeps its start index (`ending_at`)
                and those notifications (`ending_head`): a few bytes, at most one write unit more,
                no request more; `load_invocation` derives the batch. Else it is appended first
                (`append_batch`), a second write, as a commit before the completion always was.
            **changes: New values, named as `InvocationRecord` fields. `invocation_id`, `epoch` and
                `doorbell` cannot be among them (they name the parameters): the epoch moves only in
                `acquire_lease` and `_update_unless_completed`, the doorbell only in `ring`.

        Raises:
            StoreConflict: The epoch (or the doorbell) moved on, or the invocation does not exist;
                nothing was written.
            ItemTooLarge: The item would exceed 400 KB (e.g. a large `output`); nothing was written.
            TypeError: A name is not an `InvocationRecord` field, or a required field (one without a
                default) is set to None.
            ValueError: No changes were given.
        """
        if not changes:
            raise ValueError(f"_update_invocation({invocation_id!r}) needs at least one field to change")
        model = self._invocations
        # the shard count (a GetItem at first use) only matters when an index moves: a function with
        # in-process checkpoints fences its commits with this call and may not read the table
        moves_index = not changes.keys().isdisjoint({"status", "expires_at_s", "journal_expires_at_ms"})
        actions = invocation_update_actions(
            model, invocation_id, changes, shards=self.shards if moves_index else 1, caller="_update_invocation"
        )
        if ending is not None:
            output = changes.get("output")
            head = ending_head(ending.entries, output) if isinstance(output, bytes) else None
            if head is None:
                self.append_batch(invocation_id, ending)
            else:  # kept in the record: no `J#` item, no request more
                actions.append(model.ending_at.set(ending.start_index))
                if head:
                    actions.append(model.ending_head.set(head))
        condition = epoch_is(model, epoch)
        held = f"epoch {epoch}"
        if doorbell is not None:
            condition &= doorbell_is(model, doorbell)
            held += f" or doorbell {doorbell}"
        conflict = f"invocation {invocation_id}: {held} no longer holds (another worker took the lease" + (
            ", or a notification arrived)" if doorbell is not None else ")"
        )
        too_large = (
            f"invocation {invocation_id}: setting {', '.join(sorted(changes))} would make its metadata item larger "
            "than DynamoDB's 400 KB limit; keep handler outputs and failure messages below ~350 KB"
        )
        with translated_write(conflict=conflict, too_large=too_large):
            answer = self._connection.update_item(
                invocation_pk(invocation_id),
                META_SK,
                actions=actions,
                condition=condition,
                return_values=ALL_NEW if returning else None,
            )
        if not returning:
            return None
        return invocation_record(model.from_raw_data(answer["Attributes"]))

    def _update_unless_completed(self, invocation_id: str, **changes: object) -> InvocationRecord:
        """Set fields and bump the epoch, whoever holds the lease, unless the invocation completed.

        One conditional UpdateItem: `epoch = epoch + 1` plus `changes` (and the GSI keys they move),
        if the invocation exists and its status is not `completed`. A worker still holding the old
        epoch then fails its next conditional write.

        Args:
            invocation_id: The invocation to update.
            **changes: New values, named as `InvocationRecord` fields, as in `_update_invocation`; may
                be empty (then only the epoch moves). Not `epoch` or `doorbell`.

        Returns:
            The record after the update (DynamoDB's ALL_NEW).

        Raises:
            StoreConflict: The invocation completed or does not exist; nothing was written.
            ItemTooLarge: The item would exceed 400 KB; nothing was written.
            TypeError: A name is not an `InvocationRecord` field, is `epoch` or `doorbell`, or a required
                field is set to None.
        """
        fenced = sorted({"epoch", "doorbell"} & set(changes))
        if fenced:
            raise TypeError(f"_update_unless_completed() cannot set {', '.join(fenced)}: the store moves it")
        model = self._invocations
        actions: list[Action] = [
            model.epoch.set(model.epoch + 1),
            *invocation_update_actions(
                model, invocation_id, changes, shards=self.shards, caller="_update_unless_completed"
            ),
        ]
        item = model(invocation_pk(invocation_id), META_SK)
        conflict = f"invocation {invocation_id} has completed or does not exist"
        too_large = (
            f"invocation {invocation_id}: setting {', '.join(sorted(changes))} would make its metadata item larger "
            "than DynamoDB's 400 KB limit"
        )
        with translated_write(conflict=conflict, too_large=too_large):
            item.update(actions=actions, condition=item_exists(model) & not_completed(model))
        return invocation_record(item)

    # --- notifications ---------------------------------------------------------------------------

    def put_notification(self, invocation_id: str, notification: StoredNotification) -> bool:
        """Store a notification at `INV#id` / `N#{key}`, unless one with its key is stored already.

        One conditional PutItem (`attribute_not_exists(PK)`): of concurrent deliveries with one key,
        exactly one is stored. It does not check that the invocation exists, nor ring its doorbell
        (see `ring`).

        Returns:
            True if this call stored it; False if a notification with this key was there (it is kept
            unchanged).

        Raises:
            ItemTooLarge: The entry does not fit in one 400 KB item; nothing was written.
        """
        model = self._notifications
        item = model(
            invocation_pk(invocation_id),
            notification_sk(notification.key),
            entry=notification.entry,
            created_at_ms=notification.created_at_ms,
        )
        too_large = (
            f"invocation {invocation_id}: notification {notification.key} ({len(notification.entry)} bytes) does "
            "not fit in one DynamoDB item (400 KB)"
        )
        try:
            with translated_write(conflict="notification exists", too_large=too_large):
                item.save(condition=item_absent(model))
        except StoreConflict:
            return False
        return True

    def get_notification(self, invocation_id: str, key: str) -> StoredNotification | None:
        """`INV#id` / `N#{key}` (one strongly consistent GetItem), or None if there is none."""
        try:
            item = self._notifications.get(invocation_pk(invocation_id), notification_sk(key), consistent_read=True)
        except self._notifications.DoesNotExist:
            return None
        return notification_record(item)

    def delete_notification(self, invocation_id: str, key: str) -> None:
        """Delete `INV#id` / `N#{key}` (one DeleteItem); deleting one that is not there does nothing.

        Raises:
            PermissionError: This store may not delete items (`may_delete` False); nothing was written.
        """
        self._check_may_delete("deleting a notification of " + invocation_id)
        self._notifications(invocation_pk(invocation_id), notification_sk(key)).delete()

    def ring(self, invocation_id: str) -> None:
        """Add 1 to the invocation's `doorbell` (a missing one counts from 0): one conditional UpdateItem.

        Only the doorbell changes: not `modified_at_ms`, not the index keys, not the epoch.

        Raises:
            StoreConflict: The invocation does not exist or has completed; nothing was written.
        """
        model = self._invocations
        too_large = f"invocation {invocation_id}: the metadata item exceeds DynamoDB's 400 KB limit"
        conflict = f"invocation {invocation_id} does not exist or has completed"
        with translated_write(conflict=conflict, too_large=too_large):
            self._connection.update_item(
                invocation_pk(invocation_id),
                META_SK,
                actions=[model.doorbell.add(1)],
                condition=item_exists(model) & not_completed(model),
            )

    # --- timers ----------------------------------------------------------------------------------

    def put_timer(self, due_ms: int, invocation_id: str) -> None:
        """Store the timer `TIMER#{shard}` / `{due_ms:013d}#{invocation_id}`; storing it again changes nothing.

        The shard is the invocation's (`shard_of`), so an invocation's timers share a partition and
        timers of many invocations spread over `shards` partitions.

        Raises:
            ValueError: `due_ms` is negative or has more than 13 digits.
        """
        self._timers(
            timers_pk(shard_of(invocation_id, self.shards)),
            timer_sk(_checked_due(due_ms), invocation_id),
            due_ms=due_ms,
            invocation_id=invocation_id,
        ).save()

    def delete_timer(self, due_ms: int, invocation_id: str) -> None:
        """Remove the timer (one DeleteItem, or with `may_delete` False one UpdateItem expiring it:
        `_drop`); removing one that is not there does nothing.

        Raises:
            ValueError: `due_ms` is negative or has more than 13 digits.
        """
        pk = timers_pk(shard_of(invocation_id, self.shards))
        self._drop(self._timers, pk, timer_sk(_checked_due(due_ms), invocation_id))

    def due_timers(self, until_ms: int, limit: int = 1000) -> list[tuple[int, str]]:
        """Timers due at or before `until_ms`, earliest first (then by invocation id), from every shard.

        One strongly consistent query per shard (`TIMER#{shard}`, `SK <= "{until_ms:013d}~"`, paged
        until `limit` timers are found or none are left), merged earliest first.

        Args:
            until_ms: The latest due time to include, ms since the epoch.
            limit: At most this many timers; 0 or less returns [] without a request.

        Returns:
            `(due_ms, invocation_id)` pairs.
        """
        if limit <= 0 or until_ms < 0:
            return []
        model = self._timers
        until = timers_due_until(min(until_ms, MAX_DUE_MS))

        def shard(number: int) -> list[tuple[int, str]]:
            items = model.query(timers_pk(number), model.sk <= until, consistent_read=True, limit=limit)
            return [(item.due_ms, item.invocation_id) for item in items]

        return list(islice(heapq.merge(*self._each_shard(shard)), limit))

    # --- retention -------------------------------------------------------------------------------

    @_output_previewed
    def due_retention(self, until_ms: int, limit: int = 1000) -> list[RetentionDue]:
        """Completed invocations whose journal or record retention ended at or before `until_ms`, earliest first.

        One query per shard of the sparse index `by_expiry` (`EXPIRY#{shard}`, range key
        `{due_ms:013d}#{id}` <= `until_ms`; only completed invocations with a retention are in it),
        paged until `limit` entries, merged earliest first. Eventually consistent: an entry may be
        a moment stale, so what acts on it is conditional (`remove_journal`).

        Args:
            until_ms: The latest end of retention to include, ms since the epoch.
            limit: At most this many; 0 or less returns [] without a request.
        """
        if limit <= 0 or until_ms < 0:
            return []
        model = self._invocations
        until = timers_due_until(min(until_ms, MAX_DUE_MS))

        def shard(number: int) -> list[InvocationItem]:
            return list(model.by_expiry.query(expiry_pk(number), model.expiry_order <= until, limit=limit))

        merged = heapq.merge(*self._each_shard(shard), key=lambda item: item.expiry_order)
        return [retention_due(item) for item in islice(merged, limit)]

    def remove_journal(self, due: RetentionDue) -> bool:
        """Remove a completed invocation's journal batches and notifications once its journal retention ended.

        First one conditional UpdateItem on `META`: if the invocation is completed and its
        `journal_expires_at_ms` is still `due.journal_expires_at_ms`, remove that field and move the
        invocation in `by_expiry` to the end of its record's retention (`due.expires_at_s`; out of
        the index if 0). Then the deletes (the deletes). A crash between the two leaves the
        journal items for the record's removal, which deletes the whole partition.

        Returns:
            True if the journal was removed; False if the condition failed (the invocation is gone,
            was replaced under the same id, or its journal was removed already): nothing was written.

        Raises:
            PermissionError: This store may not delete items (`may_delete` False); nothing was written.
        """
        self._check_may_delete("removing the journal of " + due.invocation_id)
        model = self._invocations
        invocation_id = due.invocation_id
        record_due_ms = due.expires_at_s * 1000
        actions: list[Action] = [
            model.journal_expires_at_ms.remove(),
            model.ending_at.remove(),
            model.ending_head.remove(),
        ]
        if record_due_ms:
            shard = shard_of(invocation_id, self.shards)
            actions += [
                model.expiry_key.set(expiry_pk(shard)),
                model.expiry_order.set(expiry_sk(record_due_ms, invocation_id)),
            ]
        else:
            actions += [model.expiry_key.remove(), model.expiry_order.remove()]
        conflict = f"invocation {invocation_id}: its journal retention is not {due.journal_expires_at_ms}"
        try:
            with translated_write(conflict=conflict, too_large=conflict):
                self._connection.update_item(
                    invocation_pk(invocation_id),
                    META_SK,
                    actions=actions,
                    condition=journal_retention_is(model, due.journal_expires_at_ms),
                )
        except StoreConflict:
            return False
        self._delete_partition(invocation_id, keep_record=True)
        return True

    def append_batch(self, invocation_id: str, batch: JournalBatch) -> None:
        """Store a journal batch at `INV#id` / `J#{start_index:010d}`, if that index is still free.

        Raises:
            StoreConflict: A batch at `batch.start_index` exists already; the stored one is unchanged.
            ItemTooLarge: The batch's entries do not fit in one 400 KB item; nothing was written.
            ValueError: `batch.start_index` is negative.
        """
        if batch.start_index < 0:
            raise ValueError(f"journal batch start_index must be >= 0, got {batch.start_index}")
        model = self._batches
        item = model(
            invocation_pk(invocation_id),
            batch_sk(batch.start_index),
            entries=batch.entries,
            epoch=batch.epoch,
            committed_at_ms=batch.committed_at_ms,
        )
        conflict = f"invocation {invocation_id}: journal index {batch.start_index} is committed already"
        too_large = (
            f"invocation {invocation_id}: the journal entries committed at index {batch.start_index} "
            f"({len(batch.entries)} bytes) do not fit in one DynamoDB item (400 KB); keep run results, state values "
            "and call payloads below ~350 KB"
        )
        with translated_write(conflict=conflict, too_large=too_large):
            item.save(condition=item_absent(model))

    @_output_previewed
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
        """Invocations, newest `created_at_ms` first, optionally filtered; a page of them.

        One query of the status index per status (`statuses`, or every status) and shard, newest
        first, filtered by `service`, `handler`, `key` and `completion` (projected into the index),
        each stopping at `limit` matches; merged newest first, cut at `limit`, and the page's records
        read with BatchGetItem (100 keys a request, eventually consistent). A record whose status has
        moved out of `statuses` since the index was read is left out, and the next entries fill its
        place (each query reads `_LIST_SLACK` entries beyond `limit` for that). A filter by service or key
        still reads (and pays for) the index entries it skips. Eventually consistent.

        Args:
            statuses: Statuses to include, or None for all.
            service: Only invocations of this service, or None for all.
            limit: At most this many records; 0 or less returns [].
            handler: Only invocations of this handler.
            key: Only invocations of this object key or workflow id.
            before: `(created_at_ms, invocation_id)` of the last record of the previous page: only
                older ones.
            completion: Only completed invocations that ended so (`succeeded`, `failed`,
                `cancelled`, `killed`; stored by the completing write).

        Returns:
            At most `limit` records, ordered by `created_at_ms` then invocation id, newest first.
        """
        if limit <= 0:
            return []
        model = self._invocations
        conditions = [
            condition
            for value, condition in (
                (service, model.service == service),
                (handler, model.handler == handler),
                (key, model.key == key),
                (completion, model.completion == completion),
            )
            if value is not None
        ]
        wanted = None
        for condition in conditions:
            wanted = condition if wanted is None else wanted & condition
        older = None if before is None else model.status_order < status_sk(*before)
        wanted_statuses = tuple(dict.fromkeys(INVOCATION_STATUSES if statuses is None else statuses))

        per_page = limit + _LIST_SLACK  # room for entries whose record moved to another status meanwhile
        # one key per status group (a group may hold statuses not wanted: filtered on the projected
        # status), and the keys active statuses had before they were grouped (`legacy_status_pk`)
        group_filter = None if set(ACTIVE_STATUSES) <= set(wanted_statuses) else status_in(model, wanted_statuses)

        def keyed(number: int) -> list[tuple[str, Condition | None]]:
            groups = {status_pk(status, number): status in ACTIVE_STATUSES for status in wanted_statuses}
            legacy = [legacy_status_pk(status, number) for status in wanted_statuses if status in ACTIVE_STATUSES]
            return [(key, group_filter if grouped else None) for key, grouped in groups.items()] + [
                (key, None) for key in legacy
            ]

        def shard(number: int) -> list[list[InvocationItem]]:
            pages = []
            for index_key, by_status in keyed(number):
                condition = wanted if by_status is None else by_status if wanted is None else wanted & by_status
                pages.append(
                    list(
                        model.by_status.query(
                            index_key,
                            range_key_condition=older,
                            filter_condition=condition,
                            scan_index_forward=False,
                            limit=per_page,
                        )
                    )
                )
            return pages

        pages = [page for by_status in self._each_shard(shard) for page in by_status]
        merged = heapq.merge(
            *[[(item, n) for item in page] for n, page in enumerate(pages)],
            key=lambda pair: pair[0].status_order,
            reverse=True,
        )
        left = [len(page) for page in pages]
        out: list[InvocationRecord] = []
        seen: set[str] = set()  # an entry read under its legacy key and its group key (moved meanwhile) counts once
        while len(out) < limit:
            ids: list[str] = []
            ran_out = False  # a full page was used up: its shard's older entries were not read
            for item, n in merged:
                if item.invocation_id not in seen:
                    seen.add(item.invocation_id)
                    ids.append(item.invocation_id)
                left[n] -= 1
                ran_out = left[n] == 0 and len(pages[n]) == per_page
                if ran_out or len(ids) == limit - len(out):
                    break
            if not ids:
                break
            found: dict[str, InvocationRecord] = {}
            for start in range(0, len(ids), _BATCH_GET_KEYS):
                keys = [(invocation_pk(i), META_SK) for i in ids[start : start + _BATCH_GET_KEYS]]
                for batch_item in model.batch_get(keys):
                    record = invocation_record(batch_item)
                    found[record.invocation_id] = record
            out.extend(found[i] for i in ids if i in found and found[i].status in wanted_statuses)
            if ran_out:
                break
        return out[:limit]
