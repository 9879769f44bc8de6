"""Identifiers that carry their kind, as Restate prints them.

- invocation ids: 24 bytes, an 8-byte partition key then 16 bytes (the shape of restate-server 1.7's
  `InvocationId`), printed as restate-server prints them: `inv_1`, then the partition key in 11
  base62 characters, then the 16 bytes in 22, each part's bytes read as an unsigned little-endian
  number and written with the alphabet `0-9a-zA-Z`, left-padded with `0` (38 characters in all).
  The partition key is a hash of the key for a virtual object or workflow (so all invocations of one
  key share the first 16 characters) and random otherwise; the hash is Torpor's own (sha256), not
  restate-server's xxh3: no system compares partition keys across the two. The 24 bytes are what goes
  in `StartMessage.id`; the SDK derives awakeable ids from them, so the mapping must be reversible.
  Ids of 16 bytes made by earlier versions (`inv_1` + base62 `0-9A-Za-z` of the 16 bytes read as a
  big-endian number, 27 characters) stay valid everywhere, and a child invocation derived from one
  keeps that shape, so a journal written before the change names the same child after it.
- deployment ids: `dp_1` + 16 random bytes written as restate-server writes a u128 id part (little-endian
  number, base62 `0-9a-zA-Z`, 22 characters), the shape Restate's clients decode (a resource id of
  version 1; restate-server's `DeploymentId`). Ids stored by older versions stay valid in Torpor's own
  API, which never parses a deployment id: `dp_` + 14 characters, and `dp_1` + 22 characters in the
  alphabet `0-9A-Za-z` of a big-endian number (about 1 in 40 of those is above 2^128 when read with
  Restate's alphabet, so Restate's CLI cannot list them).
- awakeable ids (service protocol V5+): `sign_1` + base64url, unpadded, of `StartMessage.id` followed by
  the signal index as a u32 big-endian (Restate service invocation protocol, "Awakeable identifier").
"""

from __future__ import annotations

import base64
import hashlib
import os
import struct
from typing import Literal

from control_plane.errors import BadRequest

_ALPHABET = "0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz"
_INDEX = {c: i for i, c in enumerate(_ALPHABET)}
_RESTATE_ALPHABET = "0123456789abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ"
"""restate-server's base62 alphabet for resource ids (lower case before upper case)."""
_RESTATE_INDEX = {c: i for i, c in enumerate(_RESTATE_ALPHABET)}
INVOCATION_ID_BYTES = 24
"""Bytes of a new invocation id: an 8-byte partition key, then 16 bytes."""
LEGACY_INVOCATION_ID_BYTES = 16
"""Bytes of an invocation id made by Torpor before ids took restate-server's shape; still accepted."""
PARTITION_KEY_BYTES = 8
_INV_PREFIX = "inv_1"
_PARTITION_KEY_CHARS = 11  # ceil(64 / 6), restate-server's fixed width for a u64
_UUID_CHARS = 22  # ceil(128 / 6), restate-server's fixed width for a u128
_INV_CHARS = _PARTITION_KEY_CHARS + _UUID_CHARS
_LEGACY_INV_CHARS = 22  # ceil(128 / log2(62))
_ID_FORMS = (
    f"{_INV_PREFIX} followed by {_INV_CHARS} base62 characters (or, for an id made by an earlier "
    f"Torpor, {_LEGACY_INV_CHARS})"
)


def _b62encode(data: bytes, width: int, alphabet: str = _ALPHABET, byteorder: Literal["big", "little"] = "big") -> str:
    """`data` read as a number (`byteorder`), in base62 with `alphabet`, left-padded with `0` to
    `width` characters."""
    n = int.from_bytes(data, byteorder)
    out = []
    while n:
        n, r = divmod(n, 62)
        out.append(alphabet[r])
    return "".join(reversed(out)).rjust(width, "0")


def _b62decode(
    text: str, size: int, index: dict[str, int] = _INDEX, byteorder: Literal["big", "little"] = "big"
) -> bytes:
    """The `size` bytes behind `text` written by `_b62encode` with the alphabet `index` numbers;
    ValueError for a character outside it, OverflowError for a number above `size` bytes."""
    n = 0
    for c in text:
        if c not in index:
            raise ValueError(f"{c!r} is not a base62 character")
        n = n * 62 + index[c]
    return n.to_bytes(size, byteorder)


def _restate_encode(data: bytes, width: int) -> str:
    """`data` as restate-server writes an id part: its bytes as a little-endian number, in base62
    `0-9a-zA-Z`, left-padded with `0` to `width` characters."""
    return _b62encode(data, width, _RESTATE_ALPHABET, "little")


def _restate_decode(text: str, size: int) -> bytes:
    """The `size` bytes behind one part written by `_restate_encode`; ValueError or OverflowError."""
    return _b62decode(text, size, _RESTATE_INDEX, "little")


def invocation_id_from_bytes(raw: bytes) -> str:
    """`inv_1…` for 24 id bytes (38 characters), or for 16 bytes of an earlier Torpor (27).

    Raises:
        ValueError: for another length.
    """
    if len(raw) == INVOCATION_ID_BYTES:
        partition_key, uuid = raw[:PARTITION_KEY_BYTES], raw[PARTITION_KEY_BYTES:]
        return _INV_PREFIX + _restate_encode(partition_key, _PARTITION_KEY_CHARS) + _restate_encode(uuid, _UUID_CHARS)
    if len(raw) == LEGACY_INVOCATION_ID_BYTES:
        return _INV_PREFIX + _b62encode(raw, _LEGACY_INV_CHARS)
    raise ValueError(
        f"an invocation id has {INVOCATION_ID_BYTES} bytes (or {LEGACY_INVOCATION_ID_BYTES}), not {len(raw)}"
    )


def invocation_id_bytes(invocation_id: str) -> bytes:
    """The bytes behind `inv_1…`: 24 for an id of 38 characters, 16 for one of 27 (earlier Torpor).

    Raises:
        BadRequest: (400) "bad invocation id …" for a malformed id: another prefix, another length,
            a character outside base62, or a part whose number does not fit its bytes.
    """
    shown = invocation_id if len(invocation_id) <= 80 else invocation_id[:77] + "..."
    body = invocation_id[len(_INV_PREFIX) :]
    if not invocation_id.startswith(_INV_PREFIX) or len(body) not in (_INV_CHARS, _LEGACY_INV_CHARS):
        raise BadRequest(f"bad invocation id {shown!r}: expected {_ID_FORMS}")
    try:
        if len(body) == _LEGACY_INV_CHARS:
            return _b62decode(body, LEGACY_INVOCATION_ID_BYTES)
        partition_key = _restate_decode(body[:_PARTITION_KEY_CHARS], PARTITION_KEY_BYTES)
        return partition_key + _restate_decode(body[_PARTITION_KEY_CHARS:], INVOCATION_ID_BYTES - PARTITION_KEY_BYTES)
    except ValueError as exc:
        raise BadRequest(f"bad invocation id {shown!r}: {exc}") from exc
    except OverflowError as exc:
        raise BadRequest(f"bad invocation id {shown!r}: a part's number does not fit its bytes") from exc


def is_legacy_invocation_id(invocation_id: str) -> bool:
    """Whether `invocation_id` has the 16-byte shape of an earlier Torpor (27 characters)."""
    return len(invocation_id) == len(_INV_PREFIX) + _LEGACY_INV_CHARS


def partition_key(key: str) -> bytes:
    """The 8-byte partition key of the invocations of virtual object or workflow `key` (a hash)."""
    return hashlib.sha256(b"partition-key\0" + key.encode()).digest()[:PARTITION_KEY_BYTES]


def partition_key_number(invocation_id: str) -> int | None:
    """The partition key of a 24-byte invocation id as the unsigned number restate-server shows
    (`partition_key` columns); None for a 16-byte id of an earlier Torpor, which has none.

    Raises:
        BadRequest: (400) for a malformed id, as `invocation_id_bytes`.
    """
    raw = invocation_id_bytes(invocation_id)
    return int.from_bytes(raw[:PARTITION_KEY_BYTES], "big") if len(raw) == INVOCATION_ID_BYTES else None


def new_invocation_id(key: str = "") -> str:
    """A fresh invocation id: the partition key of `key` (a virtual object's or workflow's), or
    random without one, then 16 random bytes."""
    raw = os.urandom(INVOCATION_ID_BYTES)  # one system call (each releases the GIL)
    return invocation_id_from_bytes(partition_key(key) + raw[PARTITION_KEY_BYTES:] if key else raw)


def derived_invocation_id(parent_id: str, entry_index: int, key: str = "", seed: int = 0) -> str:
    """A deterministic id for the invocation created by entry `entry_index` of `parent_id`, whose
    target has `key` ("" for a service), and the parent's `InvocationRecord.callee_seed` (`seed`).

    A retried commit of the same entry therefore names the same child and creates it once. A parent
    whose id can come back once it is gone (an idempotency key's, a workflow run's: sent again after
    a purge or its retention) has a random non-zero `seed`, so the new run's children are new
    invocations, not the purged run's (which may still be stored). A parent stored without one (0:
    a random id, or a record from before the seed) names its children as it always did; a parent
    with a 16-byte id (earlier Torpor) names a 16-byte child, as it did when its journal was written.
    """
    salt = struct.pack(">Q", seed) if seed else b""
    digest = hashlib.sha256(invocation_id_bytes(parent_id) + salt + struct.pack(">I", entry_index)).digest()
    if is_legacy_invocation_id(parent_id):
        return invocation_id_from_bytes(digest[:LEGACY_INVOCATION_ID_BYTES])
    prefix = partition_key(key) if key else digest[16 : 16 + PARTITION_KEY_BYTES]
    return invocation_id_from_bytes(prefix + digest[:16])


def workflow_run_id(workflow: str, workflow_id: str) -> str:
    """The invocation id of workflow `workflow`'s one `run` for `workflow_id` (deterministic).

    Creating it is conditional on the id, so the run executes once per workflow id.
    """
    return invocation_id_from_bytes(partition_key(workflow_id) + _workflow_digest(workflow, workflow_id)[:16])


def legacy_workflow_run_id(workflow: str, workflow_id: str) -> str:
    """`workflow_run_id` as an earlier Torpor made it (16 bytes): a run it created keeps this id."""
    return invocation_id_from_bytes(_workflow_digest(workflow, workflow_id)[:LEGACY_INVOCATION_ID_BYTES])


def _workflow_digest(workflow: str, workflow_id: str) -> bytes:
    return hashlib.sha256(b"workflow\0" + workflow.encode() + b"\0" + workflow_id.encode()).digest()


def idempotent_invocation_id(service: str, handler: str, key: str, idempotency_key: str) -> str:
    """The invocation id of a request with an idempotency key: one per target and key.

    The same request again (even with another body) names the same invocation, whose conditional
    create is the deduplication; the id is free again once the invocation's retention ended. Its
    partition key is the object's key's, or the idempotency key's for a service (as Restate does).
    """
    digest = _idempotent_digest(service, handler, key, idempotency_key)
    return invocation_id_from_bytes(partition_key(key or idempotency_key) + digest[:16])


def legacy_idempotent_invocation_id(service: str, handler: str, key: str, idempotency_key: str) -> str:
    """`idempotent_invocation_id` as an earlier Torpor made it (16 bytes)."""
    digest = _idempotent_digest(service, handler, key, idempotency_key)
    return invocation_id_from_bytes(digest[:LEGACY_INVOCATION_ID_BYTES])


def _idempotent_digest(service: str, handler: str, key: str, idempotency_key: str) -> bytes:
    return hashlib.sha256("\0".join(("idempotent", service, handler, key, idempotency_key)).encode()).digest()


def new_deployment_id() -> str:
    """A fresh deployment id: `dp_1` + 16 random bytes in restate-server's base62 (22 characters), so
    that every id decodes as a u128 in Restate's clients (restate CLI `deployments list`)."""
    return "dp_1" + _restate_encode(os.urandom(16), _UUID_CHARS)


def new_subscription_id() -> str:
    """A fresh subscription id: `sub_1` + 16 random bytes in restate-server's base62 (22 characters),
    the shape of restate-server's `SubscriptionId`, which Restate's CLI parses."""
    return "sub_1" + _restate_encode(os.urandom(16), _UUID_CHARS)


FIRST_AWAKEABLE_SIGNAL = 17
"""Signal indexes 0..16 are reserved for built-in signals (1: cancel); awakeables use 17 and up
(Restate service protocol V5+, signal ids)."""


def awakeable_id(invocation_id: str, signal_index: int) -> str:
    """The awakeable id the SDK hands out for signal `signal_index` of `invocation_id` (V5+)."""
    raw = invocation_id_bytes(invocation_id) + struct.pack(">I", signal_index)
    return "sign_1" + base64.urlsafe_b64encode(raw).rstrip(b"=").decode()


def parse_awakeable_id(awakeable: str) -> tuple[str, int]:
    """`(invocation_id, signal_index)` from `sign_1…` (of a 24-byte invocation id, or a 16-byte one
    of an earlier Torpor). Raises `BadRequest` (400) if malformed."""
    shown = awakeable if len(awakeable) <= 80 else awakeable[:77] + "..."
    if not awakeable.startswith("sign_1"):
        raise BadRequest(f"malformed awakeable id {shown!r}: expected it to start with sign_1")
    text = awakeable[len("sign_1") :]
    try:
        raw = base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))
    except ValueError as exc:
        raise BadRequest(f"malformed awakeable id {shown!r}: not base64url") from exc
    if len(raw) - 4 not in (INVOCATION_ID_BYTES, LEGACY_INVOCATION_ID_BYTES):
        raise BadRequest(
            f"malformed awakeable id {shown!r}: expected sign_1 followed by base64url of "
            f"{INVOCATION_ID_BYTES + 4} bytes (or {LEGACY_INVOCATION_ID_BYTES + 4})"
        )
    (index,) = struct.unpack(">I", raw[-4:])
    return invocation_id_from_bytes(raw[:-4]), index
