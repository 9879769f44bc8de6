"""Values too large for a DynamoDB item, kept in S3: `S3BlobStore` and the item rewriting of `DynamoDBStore`.

A DynamoDB item holds 400 KB; a journal entry, an input, an output or a state value may take up to
`MAX_MESSAGE_BYTES` (32 MiB, restate-server's message limit). `spill_request` rewrites a write request
just before it is sent: a top-level binary attribute (`{"B": ...}`) of an item that would not fit
is put in the blob store FIRST, under `{PK}/{SK}/{sha256}`, and the item carries a reference in its
place (`REFERENCE_MARK` + JSON `{"blob": key, "size": bytes, "sha256": hex}`); `restore_response`
puts the bytes back into the items a read returns. So:

- an item that fits is written as before: no S3 request at all (a put is measured before it is sent;
  an update, whose item is not known, is sent as it is and only if DynamoDB answers that the item
  would be too large, sent again with its large values spilled: one failed request more, in a case
  that failed before);
- a crash between the object's write and the item's leaves an orphan object (harmless: never read;
  the bucket's lifecycle expires `INV#` objects), never a reference to a missing object;
- references are resolved when the item is read (one GetObject per spilled value read), except
  inside `previews(names)`: the attributes named there read as a `ValuePreview` (the value's first
  `PREVIEW_BYTES`, kept in the reference) without a GetObject (listings and the sweep, which show a
  record's output cut to 200 bytes or not at all); a GetObject
  that fails makes the whole store call fail with `StoreUnavailable` (retryable, HTTP 503);
- a stored value that itself starts with `REFERENCE_MARK` is always spilled, so a reference can never
  be confused with a value.

An invocation's objects share its partition's prefix (`INV#{id}/`): the sweep deletes them with the
journal (`INV#{id}/J#`, `INV#{id}/N#`) and the record (`INV#{id}/`).
"""

from __future__ import annotations

import base64
import contextlib
import contextvars
import hashlib
import json
import logging
import threading
from collections.abc import Callable, Iterator
from typing import Any

from control_plane.observability import record
from control_plane.ports import MAX_MESSAGE_BYTES, ItemTooLarge, StoreUnavailable

log = logging.getLogger(__name__)

REFERENCE_MARK = b"\x00torpor-blob\x00"
"""How a binary attribute holding a reference starts (no protobuf frame or JSON value starts with NUL)."""
ITEM_BUDGET_BYTES = 360 * 1024
"""A put whose item would count more than this (bytes, estimated) spills its largest binary values
until it counts less: DynamoDB's 400 KB less room for the estimate's error."""
SPILL_MIN_BYTES = 4 * 1024
"""A binary value below this (bytes) is never spilled (a reference takes ~200)."""

PREVIEW_BYTES = 256
"""How much of a spilled value its reference keeps (bytes): what `previews` reads in its place."""

_WRITE_ITEM_KEYS = ("Item",)
_PREVIEWS: contextvars.ContextVar[frozenset[str]] = contextvars.ContextVar("torpor_blob_previews", default=frozenset())


class ValuePreview(bytes):
    """A spilled value read inside `previews`: its first `PREVIEW_BYTES` bytes (the bytes of this
    object), and its whole size in `size` (bytes). Never the value itself: only for display."""

    size: int = 0


@contextlib.contextmanager
def previews(*names: str) -> Iterator[None]:
    """Inside, the reads of this context read the spilled values of attributes `names` as
    `ValuePreview`s, with no GetObject (a store call whose caller never uses those values whole)."""
    token = _PREVIEWS.set(_PREVIEWS.get() | frozenset(names))
    try:
        yield
    finally:
        _PREVIEWS.reset(token)


def _size(value: Any) -> int:
    """DynamoDB's size of one attribute value `{"S"|"B"|"N"|...: ...}` (bytes, estimated from above)."""
    (kind, inner), *_ = value.items()
    if kind in ("S", "N"):
        return len(str(inner).encode())
    if kind == "B":
        return len(inner)
    if kind == "M":
        return 3 + sum(len(k.encode()) + _size(v) + 1 for k, v in inner.items())
    if kind == "L":
        return 3 + sum(_size(v) + 1 for v in inner)
    if kind in ("SS", "NS"):
        return sum(len(str(v).encode()) for v in inner)
    if kind == "BS":
        return sum(len(v) for v in inner)
    return 1


def item_bytes(item: dict[str, Any]) -> int:
    """The size DynamoDB counts for `item` (low-level attribute values; bytes, estimated from above)."""
    return sum(len(name.encode()) + _size(value) for name, value in item.items())


def is_reference(data: bytes) -> bool:
    """Whether a stored binary value is a reference to a blob (not a value)."""
    return data.startswith(REFERENCE_MARK)


class Spiller:
    """Rewrites the requests and answers of one `DynamoDBStore` connection (see the module doc).

    Args:
        blobs: Where spilled values go (`control_plane.ports.BlobStore`).
    """

    def __init__(self, blobs: Any) -> None:
        self.blobs = blobs

    def _spill(self, pk: str, sk: str, data: bytes) -> bytes:
        if len(data) > MAX_MESSAGE_BYTES:
            raise ItemTooLarge(
                f"{pk}/{sk}: a value takes {len(data)} bytes, more than the {MAX_MESSAGE_BYTES} bytes (32 MiB) "
                "a value may take"
            )
        digest = hashlib.sha256(data).hexdigest()
        key = f"{pk}/{sk}/{digest}"
        self.blobs.put(key, data)  # first: the item never refers to an object not written
        head = base64.b64encode(data[:PREVIEW_BYTES]).decode()
        return REFERENCE_MARK + json.dumps({"blob": key, "size": len(data), "sha256": digest, "head": head}).encode()

    def _spill_values(self, pk: str, sk: str, values: dict[str, Any], *, over: int | None) -> None:
        """Spill the binary values of `values` (an item, or an update's expression values) that start
        with `REFERENCE_MARK`; then, largest first, those of `SPILL_MIN_BYTES` and up while the whole
        counts more than `over` (None: spill them all)."""
        binaries = [(name, v["B"]) for name, v in values.items() if isinstance(v, dict) and "B" in v]
        for name, data in binaries:
            if isinstance(data, ValuePreview):  # a listing's record written back: it would cut the value
                raise ValueError(f"{pk}/{sk} {name}: a preview of a value cannot be written in its place")
            if is_reference(data):
                values[name] = {"B": self._spill(pk, sk, data)}
        size = item_bytes(values) if over is not None else 0
        for name, data in sorted(binaries, key=lambda b: -len(b[1])):
            if over is not None and size <= over:
                break
            if len(data) < SPILL_MIN_BYTES or is_reference(data):
                continue
            values[name] = {"B": self._spill(pk, sk, data)}
            size -= len(data) - len(values[name]["B"])

    def spill_request(self, operation: str, kwargs: dict[str, Any], *, everything: bool = False) -> None:
        """Rewrite write request `kwargs` of `operation` in place (puts: only if the item would not
        fit; updates: only with `everything`, after DynamoDB found the item too large)."""
        over = None if everything else ITEM_BUDGET_BYTES
        if operation == "PutItem":
            self._spill_item(kwargs["Item"], over)
        elif operation == "UpdateItem":
            self._spill_update(kwargs, everything)
        elif operation == "TransactWriteItems":
            for action in kwargs.get("TransactItems", []):
                if "Put" in action:
                    self._spill_item(action["Put"]["Item"], over)
                elif "Update" in action:
                    self._spill_update(action["Update"], everything)
        elif operation == "BatchWriteItem":
            for requests in kwargs.get("RequestItems", {}).values():
                for request in requests:
                    if "PutRequest" in request:
                        self._spill_item(request["PutRequest"]["Item"], over)

    def _spill_item(self, item: dict[str, Any], over: int | None) -> None:
        self._spill_values(item["PK"]["S"], item["SK"]["S"], item, over=over)

    def _spill_update(self, kwargs: dict[str, Any], everything: bool) -> None:
        values = kwargs.get("ExpressionAttributeValues")
        if values:
            key = kwargs["Key"]
            self._spill_values(key["PK"]["S"], key["SK"]["S"], values, over=None if everything else 1 << 62)

    def restore_response(self, data: dict[str, Any]) -> None:
        """Put the referred bytes back into the items of a read's answer `data`, in place."""
        for name in ("Item", "Attributes"):
            if isinstance(data.get(name), dict):
                self._restore_item(data[name])
        for item in data.get("Items", ()):
            self._restore_item(item)
        responses = data.get("Responses")
        if isinstance(responses, dict):  # BatchGetItem: {table: [items]}
            for items in responses.values():
                for item in items:
                    self._restore_item(item)
        elif isinstance(responses, list):  # TransactGetItems: [{"Item": ...}]
            for answer in responses:
                if isinstance(answer.get("Item"), dict):
                    self._restore_item(answer["Item"])

    def _restore_item(self, item: dict[str, Any]) -> None:
        wanted_previews = _PREVIEWS.get()
        for name, value in item.items():
            if isinstance(value, dict) and "B" in value and is_reference(value["B"]):
                shown = self.preview(value["B"]) if name in wanted_previews else None
                item[name] = {"B": shown if shown is not None else self.resolve(value["B"])}

    @staticmethod
    def references(item: dict[str, Any]) -> list[str]:
        """The object keys the references of `item` (low-level attribute values) name."""
        return [
            json.loads(v["B"][len(REFERENCE_MARK) :])["blob"]
            for v in item.values()
            if isinstance(v, dict) and "B" in v and is_reference(v["B"])
        ]

    def forget(self, keys: list[str]) -> None:
        """Delete the objects `keys` (an item that referred to them was deleted, committed): one
        ListObjectsV2 and one DeleteObjects each; best effort (a failure is logged and left to the
        bucket's lifecycle for `INV#` ones: no item refers to them any more)."""
        for key in keys:
            try:
                self.blobs.delete(key)
            except Exception:  # noqa: BLE001  # the write committed: nothing to undo, nothing to fail
                log.warning("blob %s no longer referred to but not deleted", key, exc_info=True)

    @staticmethod
    def preview(reference: bytes) -> ValuePreview | None:
        """The `ValuePreview` `reference` keeps (no request), or None for a reference written
        without one (before previews were kept)."""
        ref = json.loads(reference[len(REFERENCE_MARK) :])
        if "head" not in ref:
            return None
        shown = ValuePreview(base64.b64decode(ref["head"]))
        shown.size = int(ref["size"])
        return shown

    def resolve(self, reference: bytes) -> bytes:
        """The bytes `reference` refers to, checked against its size and sha256.

        Raises:
            KeyError: The object is missing (the bucket's lifecycle expired it: set its expiration
                above the longest retention).
            ValueError: The object's bytes are not the ones referred to.
            StoreUnavailable: The blob store failed to answer (S3 throttled, unreachable, after
                boto3's own retries): the store call fails as a whole, retryably (HTTP 503), never
                with the value missing.
        """
        ref = json.loads(reference[len(REFERENCE_MARK) :])
        try:
            data = self.blobs.get(ref["blob"])
        except KeyError:
            raise
        except Exception as exc:  # noqa: BLE001  # any failure of S3: the read cannot answer now
            raise StoreUnavailable(f"blob {ref['blob']} cannot be read now: {type(exc).__name__}: {exc}") from exc
        if len(data) != ref["size"] or hashlib.sha256(data).hexdigest() != ref["sha256"]:
            raise ValueError(f"blob {ref['blob']}: its bytes are not the ones the item refers to")
        return data


class S3BlobStore:
    """`control_plane.ports.BlobStore` on one S3 bucket (boto3; thread-safe).

    Args:
        bucket: The bucket (`TORPOR_BLOB_BUCKET`); the functions' role needs `s3:GetObject`,
            `s3:PutObject`, `s3:DeleteObject` on its objects and `s3:ListBucket` on it.
        region: Its region.
        endpoint_url: Another S3-compatible endpoint (moto server), or None for S3 itself
            (`AWS_ENDPOINT_URL_S3` is honoured by boto3 as well).
        on_request: Called with each request's name ("s3 PutObject", ...) as it starts.
    """

    def __init__(
        self,
        bucket: str,
        *,
        region: str = "us-east-1",
        endpoint_url: str | None = None,
        on_request: Callable[[str], None] | None = None,
    ) -> None:
        import boto3  # here: `DynamoDBStore` imports this module where only pynamodb is bundled
        from botocore.config import Config

        self.bucket = bucket
        self._client = boto3.client(
            "s3",
            region_name=region,
            endpoint_url=endpoint_url,
            config=Config(retries={"mode": "standard", "max_attempts": 5}),
        )
        self._on_request = on_request
        self._lock = threading.Lock()
        self.requests: dict[str, int] = {}

    def __repr__(self) -> str:
        return f"S3BlobStore(bucket={self.bucket!r})"

    def _count(self, kind: str) -> None:
        with self._lock:
            self.requests[kind] = self.requests.get(kind, 0) + 1
        record(kind)
        if self._on_request is not None:
            self._on_request(kind)

    def ensure_bucket(self) -> None:
        """Create the bucket if it does not exist (`torpor dev` and tests; SAM/CDK create it on AWS)."""
        from botocore.exceptions import ClientError

        try:
            self._client.head_bucket(Bucket=self.bucket)
        except ClientError:
            self._client.create_bucket(Bucket=self.bucket)

    def put(self, key: str, data: bytes) -> None:
        """One PutObject of `data` under `key`."""
        self._count("s3 PutObject")
        self._client.put_object(Bucket=self.bucket, Key=key, Body=data)

    def get(self, key: str) -> bytes:
        """One GetObject; `KeyError` if the object is missing."""
        from botocore.exceptions import ClientError

        self._count("s3 GetObject")
        try:
            answer = self._client.get_object(Bucket=self.bucket, Key=key)
        except ClientError as exc:
            if exc.response.get("Error", {}).get("Code") in ("NoSuchKey", "404"):
                raise KeyError(key) from exc
            raise
        return bytes(answer["Body"].read())

    def delete(self, prefix: str) -> int:
        """ListObjectsV2 pages under `prefix`, one DeleteObjects per page (1,000 keys)."""
        deleted = 0
        token: str | None = None
        while True:
            self._count("s3 ListObjectsV2")
            kwargs: dict[str, Any] = {"Bucket": self.bucket, "Prefix": prefix}
            if token:
                kwargs["ContinuationToken"] = token
            page = self._client.list_objects_v2(**kwargs)
            keys = [{"Key": o["Key"]} for o in page.get("Contents", ())]
            if keys:
                self._count("s3 DeleteObjects")
                self._client.delete_objects(Bucket=self.bucket, Delete={"Objects": keys, "Quiet": True})
                deleted += len(keys)
            token = page.get("NextContinuationToken")
            if not token:
                return deleted


def blob_store_from_env(env: dict[str, str] | Any, region: str) -> S3BlobStore | None:
    """The `S3BlobStore` of `TORPOR_BLOB_BUCKET` (endpoint: `TORPOR_S3_ENDPOINT`, else boto3's
    own `AWS_ENDPOINT_URL_S3`), or None when it is not set (values above an item's 400 KB are then
    refused with a 413)."""
    bucket = env.get("TORPOR_BLOB_BUCKET")
    if not bucket:
        return None
    return S3BlobStore(bucket, region=region, endpoint_url=env.get("TORPOR_S3_ENDPOINT") or None)
