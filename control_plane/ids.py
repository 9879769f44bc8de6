"""Identifiers that carry their kind, as Restate prints them.

- invocation ids: `inv_1` + base62 of 16 random bytes (22 characters). The 16 bytes are what goes in
  `StartMessage.id`; the SDK derives awakeable ids from them, so the mapping must be reversible.
- deployment ids: `dp_1` + base62 of 16 random bytes (22 characters), the shape Restate's clients
  parse (a resource id of version 1); ids stored by older versions (`dp_` + 14 characters) stay valid.
- awakeable ids (service protocol V5+): `sign_1` + base64url, unpadded, of `StartMessage.id` followed by
  the signal index as a u32 big-endian (Restate service invocation protocol, "Awakeable identifier").
"""

from __future__ import annotations

import base64
import hashlib
import os
import struct

from control_plane.errors import BadRequest

_ALPHABET = "0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz"
_INDEX = {c: i for i, c in enumerate(_ALPHABET)}
INVOCATION_ID_BYTES = 16
_INV_PREFIX = "inv_1"
_INV_CHARS = 22  # ceil(128 / log2(62))


def _b62encode(data: bytes, width: int) -> str:
    n = int.from_bytes(data, "big")
    out = []
    while n:
        n, r = divmod(n, 62)
        out.append(_ALPHABET[r])
    return "".join(reversed(out)).rjust(width, "0")


def _b62decode(text: str, size: int) -> bytes:
    n = 0
    for c in text:
        if c not in _INDEX:
            raise ValueError(f"{c!r} is not a base62 character")
        n = n * 62 + _INDEX[c]
    return n.to_bytes(size, "big")


def invocation_id_from_bytes(raw: bytes) -> str:
    """`inv_1…` for 16 id bytes. Raises ValueError for another length."""
    if len(raw) != INVOCATION_ID_BYTES:
        raise ValueError(f"an invocation id has {INVOCATION_ID_BYTES} bytes, not {len(raw)}")
    return _INV_PREFIX + _b62encode(raw, _INV_CHARS)


def invocation_id_bytes(invocation_id: str) -> bytes:
    """The 16 bytes behind `inv_1…`.

    Raises:
        BadRequest: (400) "bad invocation id …" for a malformed id: another prefix, another length,
            a character outside base62, or a number above 128 bits.
    """
    shown = invocation_id if len(invocation_id) <= 80 else invocation_id[:77] + "..."
    body = invocation_id[len(_INV_PREFIX) :]
    if not invocation_id.startswith(_INV_PREFIX) or len(body) != _INV_CHARS:
        raise BadRequest(f"bad invocation id {shown!r}: expected inv_1 followed by 22 base62 characters")
    try:
        return _b62decode(body, INVOCATION_ID_BYTES)
    except ValueError as exc:
        raise BadRequest(f"bad invocation id {shown!r}: {exc}") from exc
    except OverflowError as exc:
        raise BadRequest(f"bad invocation id {shown!r}: its number does not fit in 16 bytes") from exc


def new_invocation_id() -> str:
    """A fresh random invocation id."""
    return invocation_id_from_bytes(os.urandom(INVOCATION_ID_BYTES))


def derived_invocation_id(parent_id: str, entry_index: int) -> str:
    """A deterministic id for the invocation created by entry `entry_index` of `parent_id`.

    A retried commit of the same entry therefore names the same child and creates it once.
    """
    digest = hashlib.sha256(invocation_id_bytes(parent_id) + struct.pack(">I", entry_index)).digest()
    return invocation_id_from_bytes(digest[:INVOCATION_ID_BYTES])


def workflow_run_id(workflow: str, workflow_id: str) -> str:
    """The invocation id of workflow `workflow`'s one `run` for `workflow_id` (deterministic).

    Creating it is conditional on the id, so the run executes once per workflow id.
    """
    digest = hashlib.sha256(b"workflow\0" + workflow.encode() + b"\0" + workflow_id.encode()).digest()
    return invocation_id_from_bytes(digest[:INVOCATION_ID_BYTES])


def idempotent_invocation_id(service: str, handler: str, key: str, idempotency_key: str) -> str:
    """The invocation id of a request with an idempotency key: one per target and key.

    The same request again (even with another body) names the same invocation, whose conditional
    create is the deduplication; the id is free again once the invocation's retention ended.
    """
    parts = "\0".join(("idempotent", service, handler, key, idempotency_key)).encode()
    return invocation_id_from_bytes(hashlib.sha256(parts).digest()[:INVOCATION_ID_BYTES])


def new_deployment_id() -> str:
    """A fresh deployment id, `dp_1` + 22 base62 characters."""
    return "dp_1" + _b62encode(os.urandom(16), 22)


def awakeable_id(invocation_id: str, signal_index: int) -> str:
    """The awakeable id the SDK hands out for signal `signal_index` of `invocation_id` (V5+)."""
    raw = invocation_id_bytes(invocation_id) + struct.pack(">I", signal_index)
    return "sign_1" + base64.urlsafe_b64encode(raw).rstrip(b"=").decode()


def parse_awakeable_id(awakeable: str) -> tuple[str, int]:
    """`(invocation_id, signal_index)` from `sign_1…`. Raises `BadRequest` (400) if malformed."""
    shown = awakeable if len(awakeable) <= 80 else awakeable[:77] + "..."
    if not awakeable.startswith("sign_1"):
        raise BadRequest(f"malformed awakeable id {shown!r}: expected it to start with sign_1")
    text = awakeable[len("sign_1") :]
    try:
        raw = base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))
    except ValueError as exc:
        raise BadRequest(f"malformed awakeable id {shown!r}: not base64url") from exc
    if len(raw) != INVOCATION_ID_BYTES + 4:
        raise BadRequest(f"malformed awakeable id {shown!r}: wrong length")
    (index,) = struct.unpack(">I", raw[INVOCATION_ID_BYTES:])
    return invocation_id_from_bytes(raw[:INVOCATION_ID_BYTES]), index
