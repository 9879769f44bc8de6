"""`control_plane.ports.Store` on one DynamoDB table, through pynamodb.

Single table, keys `PK` (string, hash) and `SK` (string, range), billed PAY_PER_REQUEST, TTL on
`expires_at` (epoch seconds), one global secondary index `by_status`. Item families:

| item | `PK` | `SK` | attributes |
| --- | --- | --- | --- |
| invocation metadata | `INV#{invocation_id}` | `META` | one per `InvocationRecord` field, GSI keys |
| journal batch | `INV#{invocation_id}` | `J#{start_index:010d}` | `entries` (binary), `epoch`, `committed_at_ms` |
| deployment | `DEP` | `DEP#{deployment_id}` | one per `DeploymentRecord` field |
| service | `SVC` | `SVC#{name}` | one per `ServiceRecord` field |

The GSI `by_status` has hash key `status_pk` = `STATUS#{status}` and range key `status_sk` =
`{modified_at_ms:013d}#{invocation_id}` (projection ALL); every invocation write that changes `status`
or `modified_at_ms` rewrites the matching key. Mappings are stored as JSON strings, bytes as binary,
and a `None` (or `expires_at_s == 0`) as an absent attribute; an absent attribute reads back as the
record field's default.

pynamodb binds a model to its table and endpoint in `class Meta`, so each `DynamoDBStore` binds its
own subclasses of the module's item templates (`_bind`); all of them share one connection, which
counts the API calls it makes (`DynamoDBStore.request_count`).
"""

from __future__ import annotations

import dataclasses
import logging
import threading
import time
import types
from collections.abc import Callable, Iterable, Iterator, Mapping
from contextlib import contextmanager
from typing import Any, TypeVar, cast

from botocore.exceptions import ClientError
from pynamodb.attributes import Attribute, BinaryAttribute, JSONAttribute, UnicodeAttribute
from pynamodb.connection import Connection, TableConnection
from pynamodb.connection.base import MetaTable
from pynamodb.constants import NUMBER, PAY_PER_REQUEST_BILLING_MODE
from pynamodb.exceptions import PutError, TableDoesNotExist, TableError, UpdateError
from pynamodb.expressions.condition import Condition
from pynamodb.expressions.update import Action
from pynamodb.indexes import AllProjection, GlobalSecondaryIndex
from pynamodb.models import Model
from pynamodb.pagination import ResultIterator

from control_plane.errors import TorporError
from control_plane.ports import DeploymentRecord, InvocationRecord, JournalBatch, ServiceRecord, StoreConflict

__all__ = ["DynamoDBStore", "ItemTooLarge"]

log = logging.getLogger(__name__)

STATUS_INDEX = "by_status"
TTL_ATTRIBUTE = "expires_at"
META_SK = "META"
DEPLOYMENTS_PK = "DEP"
SERVICES_PK = "SVC"
RUNNING = "running"
TABLE_ACTIVE_TIMEOUT_S = 300.0
"""How long `ensure_schema` waits for a table another process is creating to become ACTIVE."""

_CONDITION_FAILED = "ConditionalCheckFailedException"
_TTL_UNSUPPORTED = frozenset({"UnknownOperationException"})  # dynalite has no TTL operations


class ItemTooLarge(TorporError):
    """A write would make an item larger than DynamoDB's 400 KB limit; nothing was written (HTTP 413)."""

    status = 413
    code = "item_too_large"


# --- keys ----------------------------------------------------------------------------------------


def _invocation_pk(invocation_id: str) -> str:
    return f"INV#{invocation_id}"


def _batch_sk(start_index: int) -> str:
    return f"J#{start_index:010d}"


def _deployment_sk(deployment_id: str) -> str:
    return f"DEP#{deployment_id}"


def _service_sk(name: str) -> str:
    return f"SVC#{name}"


def _status_pk(status: str) -> str:
    return f"STATUS#{status}"


def _status_sk(modified_at_ms: int, invocation_id: str) -> str:
    return f"{modified_at_ms:013d}#{invocation_id}"


def _table_schema(table_name: str) -> dict[str, Any]:
    """The table's keys and index, as DescribeTable names them (what pynamodb's `MetaTable` reads)."""
    return {
        "TableName": table_name,
        "KeySchema": [{"AttributeName": "PK", "KeyType": "HASH"}, {"AttributeName": "SK", "KeyType": "RANGE"}],
        "AttributeDefinitions": [
            {"AttributeName": name, "AttributeType": "S"} for name in ("PK", "SK", "status_pk", "status_sk")
        ],
        "GlobalSecondaryIndexes": [
            {
                "IndexName": STATUS_INDEX,
                "KeySchema": [
                    {"AttributeName": "status_pk", "KeyType": "HASH"},
                    {"AttributeName": "status_sk", "KeyType": "RANGE"},
                ],
            }
        ],
    }


# --- item templates (bound to a table per store by `_bind`) --------------------------------------


class _IntAttribute(Attribute[int]):
    """A DynamoDB number read back as a Python `int` (pynamodb's `NumberAttribute` is typed `float`)."""

    attr_type = NUMBER

    def serialize(self, value: int) -> str:
        return str(int(value))

    def deserialize(self, value: str) -> int:
        return int(value)


class _StatusIndex(GlobalSecondaryIndex["_InvocationItem"]):  # type: ignore[no-untyped-call]
    """`by_status`: invocations of one status, ordered by `modified_at_ms` then id."""

    class Meta:
        index_name = STATUS_INDEX
        projection = AllProjection()

    status_pk = UnicodeAttribute(hash_key=True)
    status_sk = UnicodeAttribute(range_key=True)


class _Item(Model):
    """The table's keys, shared by every item family."""

    pk = UnicodeAttribute(hash_key=True, attr_name="PK")
    sk = UnicodeAttribute(range_key=True, attr_name="SK")


class _InvocationItem(_Item):
    """`INV#id` / `META`: one attribute per `InvocationRecord` field, plus the `by_status` keys."""

    by_status = _StatusIndex()
    status_pk = UnicodeAttribute()
    status_sk = UnicodeAttribute()

    invocation_id = UnicodeAttribute()
    service = UnicodeAttribute()
    handler = UnicodeAttribute()
    key = UnicodeAttribute()
    deployment_id = UnicodeAttribute()
    protocol_version = _IntAttribute()
    status = UnicodeAttribute()
    input_entry = BinaryAttribute(legacy_encoding=False)
    created_at_ms = _IntAttribute()
    modified_at_ms = _IntAttribute()
    epoch = _IntAttribute(null=True)
    lease_until_ms = _IntAttribute(null=True)
    journal_length = _IntAttribute(null=True)
    attempts = _IntAttribute(null=True)
    retry_count = _IntAttribute(null=True)
    retry_at_length = _IntAttribute(null=True)
    next_retry_at_ms = _IntAttribute(null=True)
    last_failure = JSONAttribute(null=True)
    waiting_on = JSONAttribute(null=True)
    output = BinaryAttribute(legacy_encoding=False, null=True)
    failure = JSONAttribute(null=True)
    completed_at_ms = _IntAttribute(null=True)
    expires_at_s = _IntAttribute(null=True, attr_name=TTL_ATTRIBUTE)
    random_seed = _IntAttribute(null=True)
    idempotency_key = UnicodeAttribute(null=True)
    output_content_type = UnicodeAttribute(null=True)


class _BatchItem(_Item):
    """`INV#id` / `J#{start_index:010d}`: the framed entries one attempt committed."""

    entries = BinaryAttribute(legacy_encoding=False)
    epoch = _IntAttribute()
    committed_at_ms = _IntAttribute()


class _DeploymentItem(_Item):
    """`DEP` / `DEP#{deployment_id}`: one attribute per `DeploymentRecord` field."""

    deployment_id = UnicodeAttribute()
    endpoint = UnicodeAttribute()
    additional_headers = JSONAttribute()
    manifest = JSONAttribute()
    min_protocol_version = _IntAttribute()
    max_protocol_version = _IntAttribute()
    created_at_ms = _IntAttribute()
    services = JSONAttribute(null=True)
    metadata = JSONAttribute(null=True)


class _ServiceItem(_Item):
    """`SVC` / `SVC#{name}`: one attribute per `ServiceRecord` field."""

    name = UnicodeAttribute()
    deployment_id = UnicodeAttribute()
    ty = UnicodeAttribute()
    manifest = JSONAttribute()
    revision = _IntAttribute(null=True)


_M = TypeVar("_M", bound=Model)


def _bind(template: type[_M], meta: type, connection: TableConnection) -> type[_M]:
    """A subclass of `template` bound to one table and endpoint, talking through `connection`.

    pynamodb reads the table name and endpoint from `class Meta` and caches one connection per model
    class; binding subclasses per store lets stores on different tables or endpoints coexist.
    """
    name = template.__name__.lstrip("_")
    namespace = {"Meta": meta, "__module__": __name__, "__qualname__": f"DynamoDBStore.{name}"}
    bound = cast("type[_M]", types.new_class(name, (template,), exec_body=lambda ns: ns.update(namespace)))
    bound._connection = connection  # shared, so every item family counts into the same store
    return bound


class _CountingConnection(Connection):
    """A pynamodb `Connection` that reports each DynamoDB API call (not botocore's retries) as it starts."""

    def __init__(self, on_call: Callable[[], None], **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self._on_call = on_call

    def dispatch(self, operation_name: str, operation_kwargs: dict[str, Any]) -> dict[str, Any]:
        self._on_call()
        return cast("dict[str, Any]", super().dispatch(operation_name, operation_kwargs))


# --- records <-> items ---------------------------------------------------------------------------

_INVOCATION_FIELDS = tuple(f.name for f in dataclasses.fields(InvocationRecord))
_REQUIRED_INVOCATION_FIELDS = frozenset(
    f.name
    for f in dataclasses.fields(InvocationRecord)
    if f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING
)


def _stored(name: str, value: object) -> object:
    """A record field's value as the item holds it: JSON-able dicts, and None for "no attribute"."""
    if name == "expires_at_s" and value == 0:
        return None  # 0 means "keep forever": no TTL attribute at all
    if isinstance(value, Mapping):
        return dict(value)
    return value


def _invocation_item(model: type[_InvocationItem], record: InvocationRecord) -> _InvocationItem:
    item = model(_invocation_pk(record.invocation_id), META_SK)
    for name in _INVOCATION_FIELDS:
        setattr(item, name, _stored(name, getattr(record, name)))
    item.status_pk = _status_pk(record.status)
    item.status_sk = _status_sk(record.modified_at_ms, record.invocation_id)
    return item


def _invocation_record(item: _InvocationItem) -> InvocationRecord:
    present = {name: getattr(item, name) for name in _INVOCATION_FIELDS}
    return InvocationRecord(**{name: value for name, value in present.items() if value is not None})


def _batch_record(item: _BatchItem) -> JournalBatch:
    return JournalBatch(
        start_index=int(item.sk.removeprefix("J#")),
        entries=item.entries,
        epoch=item.epoch,
        committed_at_ms=item.committed_at_ms,
    )


def _deployment_record(item: _DeploymentItem) -> DeploymentRecord:
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
    )


def _service_record(item: _ServiceItem) -> ServiceRecord:
    return ServiceRecord(
        name=item.name,
        deployment_id=item.deployment_id,
        ty=item.ty,
        manifest=item.manifest,
        revision=1 if item.revision is None else item.revision,
    )


# --- conditions (named pieces) -------------------------------------------------------------------


def _item_absent(model: type[_Item]) -> Condition:
    return model.pk.does_not_exist()


def _item_exists(model: type[_Item]) -> Condition:
    return model.pk.exists()


def _lease_expired(model: type[_InvocationItem], now_ms: int) -> Condition:
    return model.lease_until_ms < now_ms  # a free lease is 0


def _status_in(model: type[_InvocationItem], statuses: Iterable[str]) -> Condition:
    return model.status.is_in(*statuses)


def _epoch_is(model: type[_InvocationItem], epoch: int) -> Condition:
    return model.epoch == epoch


# --- errors --------------------------------------------------------------------------------------


def _is_item_too_large(exc: PutError | UpdateError) -> bool:
    """DynamoDB's answer to an item above 400 KB: a ValidationException about the item size.

    PutItem says "Item size has exceeded the maximum allowed size", UpdateItem "Item size to update
    has exceeded the maximum allowed size" (DynamoDB and moto alike).
    """
    message = exc.cause_response_message or ""
    return exc.cause_response_code == "ValidationException" and "maximum allowed size" in message


@contextmanager
def _translated_write(*, too_large: str, conflict: str | None = None) -> Iterator[None]:
    """Turn an oversized item into `ItemTooLarge(too_large)` and, for a conditional write (`conflict`
    given), a failed condition into `StoreConflict(conflict)`.

    Anything else pynamodb raises passes through untouched.
    """
    try:
        yield
    except (PutError, UpdateError) as exc:
        if conflict is not None and exc.cause_response_code == _CONDITION_FAILED:
            raise StoreConflict(conflict) from exc
        if _is_item_too_large(exc):
            raise ItemTooLarge(too_large) from exc
        raise


# --- the store -----------------------------------------------------------------------------------


class DynamoDBStore:
    """`control_plane.ports.Store` on one DynamoDB table (see the module docstring for the layout).

    Every read of an invocation, deployment or service is strongly consistent; `list_invocations` is
    not (it reads the GSI, or scans). Every write that changes an invocation is a single conditional
    write; a lost condition raises `StoreConflict`, an item above 400 KB raises `ItemTooLarge`.

    Attributes:
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
    """

    def __init__(
        self,
        table_name: str = "torpor",
        *,
        region: str = "us-east-1",
        endpoint_url: str | None = None,
        aws_access_key_id: str | None = None,
        aws_secret_access_key: str | None = None,
    ) -> None:
        self.table_name = table_name
        self.region = region
        self.endpoint_url = endpoint_url
        self._request_count = 0
        self._request_count_lock = threading.Lock()
        self._connection = TableConnection(table_name)
        self._connection.connection = _CountingConnection(
            self._count_request,
            region=region,
            host=endpoint_url,
            aws_access_key_id=aws_access_key_id,
            aws_secret_access_key=aws_secret_access_key,
        )
        self._connection.connection.add_meta_table(MetaTable(_table_schema(table_name)))
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
        self._invocations = _bind(_InvocationItem, meta, self._connection)
        self._batches = _bind(_BatchItem, meta, self._connection)
        self._deployments = _bind(_DeploymentItem, meta, self._connection)
        self._services = _bind(_ServiceItem, meta, self._connection)

    def __repr__(self) -> str:
        return f"DynamoDBStore(table_name={self.table_name!r}, endpoint_url={self.endpoint_url!r})"

    @property
    def request_count(self) -> int:
        """DynamoDB API calls this store has made so far (each page of a query or scan counts)."""
        with self._request_count_lock:
            return self._request_count

    def _count_request(self) -> None:
        with self._request_count_lock:
            self._request_count += 1

    # --- schema ----------------------------------------------------------------------------------

    def ensure_schema(self) -> None:
        """Create the table with its GSI if it is missing, wait until it is ACTIVE, and enable TTL.

        Idempotent and safe to run from several processes at once. An existing table is taken as it
        is (its keys and index are not checked). TTL on `expires_at` is enabled unless it already is;
        an endpoint without TTL operations (dynalite) is tolerated and logged.

        Raises:
            TimeoutError: The table did not become ACTIVE within `TABLE_ACTIVE_TIMEOUT_S` seconds.
            pynamodb.exceptions.TableError: DynamoDB refused to create the table or to enable TTL.
        """
        try:
            status = self._connection.describe_table().get("TableStatus")
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

    def _enable_ttl(self) -> None:
        # pynamodb has no DescribeTimeToLive: ask through its botocore client, and count the call.
        client: Any = self._connection.connection.client  # botocore's, untyped in pynamodb
        self._count_request()
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

    # --- deployments and services ----------------------------------------------------------------

    def put_deployment(self, deployment: DeploymentRecord) -> None:
        """Store `deployment`, replacing any deployment with the same id.

        Raises:
            ItemTooLarge: The deployment (its manifest, mostly) does not fit in a 400 KB item.
        """
        item = self._deployments(
            DEPLOYMENTS_PK,
            _deployment_sk(deployment.deployment_id),
            deployment_id=deployment.deployment_id,
            endpoint=deployment.endpoint,
            additional_headers=dict(deployment.additional_headers),
            manifest=dict(deployment.manifest),
            min_protocol_version=deployment.min_protocol_version,
            max_protocol_version=deployment.max_protocol_version,
            created_at_ms=deployment.created_at_ms,
            services=list(deployment.services),
            metadata=dict(deployment.metadata),
        )
        too_large = (
            f"deployment {deployment.deployment_id}: its manifest does not fit in one DynamoDB item (400 KB); "
            "register fewer services per deployment"
        )
        with _translated_write(too_large=too_large):
            item.save()

    def get_deployment(self, deployment_id: str) -> DeploymentRecord | None:
        """The deployment `deployment_id`, or None if it is not registered."""
        try:
            item = self._deployments.get(DEPLOYMENTS_PK, _deployment_sk(deployment_id), consistent_read=True)
        except self._deployments.DoesNotExist:
            return None
        return _deployment_record(item)

    def list_deployments(self) -> list[DeploymentRecord]:
        """Every deployment, ordered by id (one query, paged)."""
        items = self._deployments.query(DEPLOYMENTS_PK, self._deployments.sk.startswith("DEP#"), consistent_read=True)
        return [_deployment_record(item) for item in items]

    def delete_deployment(self, deployment_id: str) -> None:
        """Remove the deployment `deployment_id`; removing an unknown id does nothing."""
        self._deployments(DEPLOYMENTS_PK, _deployment_sk(deployment_id)).delete()

    def put_service(self, service: ServiceRecord) -> None:
        """Store `service`, replacing any service with the same name.

        Raises:
            ItemTooLarge: The service's manifest entry does not fit in a 400 KB item.
        """
        item = self._services(
            SERVICES_PK,
            _service_sk(service.name),
            name=service.name,
            deployment_id=service.deployment_id,
            ty=service.ty,
            manifest=dict(service.manifest),
            revision=service.revision,
        )
        too_large = f"service {service.name}: its manifest entry does not fit in one DynamoDB item (400 KB)"
        with _translated_write(too_large=too_large):
            item.save()

    def get_service(self, name: str) -> ServiceRecord | None:
        """The service `name`, or None if no deployment registered it."""
        try:
            item = self._services.get(SERVICES_PK, _service_sk(name), consistent_read=True)
        except self._services.DoesNotExist:
            return None
        return _service_record(item)

    def list_services(self) -> list[ServiceRecord]:
        """Every service, ordered by name (one query, paged)."""
        items = self._services.query(SERVICES_PK, self._services.sk.startswith("SVC#"), consistent_read=True)
        return [_service_record(item) for item in items]

    def delete_service(self, name: str) -> None:
        """Remove the service `name`; removing an unknown name does nothing."""
        self._services(SERVICES_PK, _service_sk(name)).delete()

    # --- invocations -----------------------------------------------------------------------------

    def create_invocation(self, invocation: InvocationRecord) -> None:
        """Put a new invocation's metadata item, if no invocation with its id exists.

        Raises:
            StoreConflict: An invocation with this id exists already (nothing was written).
            ItemTooLarge: The record (its input entry, mostly) does not fit in a 400 KB item.
        """
        model = self._invocations
        item = _invocation_item(model, invocation)
        invocation_id = invocation.invocation_id
        too_large = (
            f"invocation {invocation_id}: the request ({len(invocation.input_entry)} bytes of input) does not fit "
            "in one DynamoDB item (400 KB); send a smaller body"
        )
        with _translated_write(conflict=f"invocation {invocation_id} exists already", too_large=too_large):
            item.save(condition=_item_absent(model))

    def get_invocation(self, invocation_id: str) -> InvocationRecord | None:
        """The invocation's metadata (strongly consistent read), or None if there is no such invocation."""
        try:
            item = self._invocations.get(_invocation_pk(invocation_id), META_SK, consistent_read=True)
        except self._invocations.DoesNotExist:
            return None
        return _invocation_record(item)

    def load_invocation(self, invocation_id: str) -> tuple[InvocationRecord, list[JournalBatch]] | None:
        """The invocation and all its journal batches, in one strongly consistent query on `INV#id`.

        The query pages past DynamoDB's 1 MB per response (each page is one request). Batch keys
        (`J#…`) sort before `META`, so batches come back ordered by `start_index`.

        Returns:
            The metadata record and the batches ordered by `start_index`, or None if the invocation
            does not exist.
        """
        pages: ResultIterator[dict[str, Any]] = ResultIterator(
            self._connection.query, (_invocation_pk(invocation_id),), {"consistent_read": True}
        )
        record: InvocationRecord | None = None
        batches: list[JournalBatch] = []
        for raw in pages:
            sk = raw["SK"]["S"]
            if sk == META_SK:
                record = _invocation_record(self._invocations.from_raw_data(raw))
            elif sk.startswith("J#"):
                batches.append(_batch_record(self._batches.from_raw_data(raw)))
        if record is None:
            return None
        return record, batches

    def acquire_lease(
        self, invocation_id: str, now_ms: int, lease_until_ms: int, runnable: Iterable[str]
    ) -> InvocationRecord:
        """Take the lease: one conditional UpdateItem that bumps the epoch and marks the invocation running.

        Sets `epoch = epoch + 1`, `lease_until_ms`, `status = "running"`, `modified_at_ms = now_ms` (and
        the GSI keys), if the invocation exists, its lease expired (`lease_until_ms < now_ms`; a free
        lease is 0) and its status is one of `runnable`.

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
            model.status_pk.set(_status_pk(RUNNING)),
            model.status_sk.set(_status_sk(now_ms, invocation_id)),
        ]
        # `_item_exists` is implied by the other two (a comparison with a missing attribute is false); it
        # stays so the condition says what it means, and no test can tell it apart.
        lease_is_free = _item_exists(model) & _lease_expired(model, now_ms) & _status_in(model, statuses)
        item = model(_invocation_pk(invocation_id), META_SK)
        conflict = f"invocation {invocation_id}: leased by another worker, not in {'/'.join(statuses)}, or unknown"
        too_large = f"invocation {invocation_id}: the metadata item exceeds DynamoDB's 400 KB limit"
        with _translated_write(conflict=conflict, too_large=too_large):
            item.update(actions=take_lease, condition=lease_is_free)
        return _invocation_record(item)

    def update_invocation(self, invocation_id: str, epoch: int, **changes: object) -> None:
        """Set fields of the invocation record, if its epoch is still `epoch`: one conditional UpdateItem.

        A value of None removes the attribute (it then reads back as the field's default); so does
        `expires_at_s=0`. A change of `status` or `modified_at_ms` also moves the invocation in the
        `by_status` index. Nothing is returned, so the (possibly large) item is not sent back.

        Args:
            invocation_id: The invocation to update.
            epoch: The epoch the caller's lease was granted with.
            **changes: New values, named as `InvocationRecord` fields. `invocation_id` and `epoch` cannot
                be among them (they name the parameters): the epoch moves only in `acquire_lease`.

        Raises:
            StoreConflict: The epoch moved on (another worker took the lease) or the invocation does
                not exist; nothing was written.
            ItemTooLarge: The item would exceed 400 KB (e.g. a large `output`); nothing was written.
            TypeError: A name is not an `InvocationRecord` field, or a required field (one without a
                default) is set to None.
            ValueError: No changes were given.
        """
        actions = self._update_actions(invocation_id, changes)
        model = self._invocations
        conflict = f"invocation {invocation_id}: epoch {epoch} no longer holds (another worker took the lease)"
        too_large = (
            f"invocation {invocation_id}: setting {', '.join(sorted(changes))} would make its metadata item larger "
            "than DynamoDB's 400 KB limit; keep handler outputs and failure messages below ~350 KB"
        )
        with _translated_write(conflict=conflict, too_large=too_large):
            self._connection.update_item(
                _invocation_pk(invocation_id), META_SK, actions=actions, condition=_epoch_is(model, epoch)
            )

    def _update_actions(self, invocation_id: str, changes: Mapping[str, object]) -> list[Action]:
        """SET/REMOVE actions for `changes`, with the GSI keys they move (validated as documented above)."""
        if not changes:
            raise ValueError(f"update_invocation({invocation_id!r}) needs at least one field to change")
        unknown = sorted(set(changes) - set(_INVOCATION_FIELDS))
        if unknown:
            raise TypeError(f"update_invocation() got unknown InvocationRecord field(s): {', '.join(unknown)}")
        nulled = sorted(
            name for name, value in changes.items() if value is None and name in _REQUIRED_INVOCATION_FIELDS
        )
        if nulled:
            raise TypeError(f"update_invocation() cannot set required field(s) to None: {', '.join(nulled)}")
        model = self._invocations
        actions: list[Action] = []
        for name, value in changes.items():
            attribute = getattr(model, name)
            stored = _stored(name, value)
            actions.append(attribute.remove() if stored is None else attribute.set(stored))
        if "status" in changes:
            actions.append(model.status_pk.set(_status_pk(cast("str", changes["status"]))))
        if "modified_at_ms" in changes:
            actions.append(model.status_sk.set(_status_sk(cast("int", changes["modified_at_ms"]), invocation_id)))
        return actions

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
            _invocation_pk(invocation_id),
            _batch_sk(batch.start_index),
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
        with _translated_write(conflict=conflict, too_large=too_large):
            item.save(condition=_item_absent(model))

    def list_invocations(
        self, statuses: Iterable[str] | None = None, service: str | None = None, limit: int = 100
    ) -> list[InvocationRecord]:
        """Invocations, newest `modified_at_ms` first, optionally of some statuses and one service.

        With `statuses`, one query of the `by_status` index per status, newest first, filtered by
        `service`, each stopping at `limit` matches. Without, a Scan of the whole table filtered to
        `SK = META` (and `service`), sorted here: it reads every item, journals included — fine for a
        small table and the admin API for now; a GSI by service would replace it. Both read
        eventually consistent data.

        Args:
            statuses: Statuses to include, or None for all.
            service: Only invocations of this service, or None for all.
            limit: At most this many records; 0 or less returns [].

        Returns:
            At most `limit` records, ordered by `modified_at_ms` then invocation id, newest first.
        """
        if limit <= 0:
            return []
        model = self._invocations
        of_service = None if service is None else model.service == service
        found: list[_InvocationItem] = []
        if statuses is None:
            is_meta = model.sk == META_SK
            found.extend(model.scan(filter_condition=is_meta if of_service is None else is_meta & of_service))
        else:
            for status in dict.fromkeys(statuses):
                found.extend(
                    model.by_status.query(
                        _status_pk(status), filter_condition=of_service, scan_index_forward=False, limit=limit
                    )
                )
        found.sort(key=lambda item: (item.modified_at_ms, item.invocation_id), reverse=True)
        return [_invocation_record(item) for item in found[:limit]]
