"""Virtual objects and workflows, the keyed half of `DynamoDBStore`: state, lock, the key's queue, promises.

Everything of one object key or workflow id lives in one partition, `OBJ#{scope}#{sha256 hex of key}`
(`scope` is the service name; the key is hashed because it is any UTF-8 string, possibly longer than
DynamoDB's 2048-byte partition key limit). Every item also holds the raw `scope` and `key`, and may
hold the TTL attribute `expires_at` (epoch seconds). Item templates and key functions live in
`adapters.aws.store_items`.

| item | `SK` | attributes |
| --- | --- | --- |
| key item | `LOCK` | `holder`, `queued`, `S#…` state attributes, or `pages` and `sv` (below) |
| large state value | `S#{sha256 hex of state key}#{sha256 hex of value, 32}` | `state_key`, `value` (binary) |
| state page | `T#{prefix}#{sha256 hex of page, 32}` | `state_key` (empty), `value` (`encode_page`) |
| durable promise | `P#{sha256 hex of name}` | `name`, `value` (binary, optional), `failure` (JSON), `completed_by` |
| promise waiter | `W#{sha256 hex of name}#{invocation_id}` | `name`, `invocation_id` |

One more item per key lives outside the partition: the listing of the service's keys that have
state (`state_keys`), `SKEYS#{scope}#{shard}` / `{sha256 hex of key}` with `scope` and `key`
(`shard`: crc32 of the key mod the table's shard count, so no one partition key takes every key's
first write). The first state write of a key puts it (one PutItem), then marks `LOCK` with
`listed = true` (one UpdateItem; none when the write read `LOCK` first, as a paged or clearing one
does: the mark rides on its write), so later writes see `listed` in what they read or get back
(ALL_OLD) and write nothing more. A crash between the two leaves `LOCK` unmarked: the next state
write lists the key again. Clearing the state keeps the listing; `delete_keyed` removes it.

The key item carries the lock (`holder`, absent: free), the queue (`queued`, a string set of
`{seq}#{invocation_id}`, absent: nobody waits; the head is the smallest) and the state: one map
attribute `S#{sha256 hex of state key}` per entry, `{k: key, v: value}`, or `{k: key, r: SK}` for a
value above `SPILL_BYTES` stored in its own item. A state that outgrows `LOCK` is paged
(`_apply_paged`): its entries go to content-addressed pages of up to `PAGE_BYTES`, `LOCK` keeps the
set of their sort keys (`pages`) and a version (`sv`, present while paged: `S#…` attributes left
then are stale and ignored), switched in one conditional write per commit. So each transition of a
key is one single-item conditional write on `LOCK` (no transactions):

- take a free key at creation (`take_key`): `SET holder` if `(attribute_not_exists(holder) AND
  attribute_not_exists(queued)) OR holder = :id`, ALL_NEW: the state comes back in the same request;
- queue up (`enqueue`): `ADD queued {entry}` (idempotent);
- grant an entry (`grant_key`): `SET holder DELETE queued {entry}` if `attribute_not_exists(holder)
  AND contains(queued, :entry)`;
- release (`release_key`): `REMOVE holder` if `holder = :id`, ALL_NEW: does anyone wait?;
- look up the lock and queue (`key_status`, `lock_holder`): a GetItem projected to `holder`, `queued`;
- a concurrency limit's pool (`control_plane.limits`, scope `~limit/{service}[/{handler}]`, key
  ""): its holders are the string set `slots`, its queue `queued` as above; take (`take_slot`):
  `ADD slots {id}` if `(size(slots) < :limit AND attribute_not_exists(queued)) OR contains(slots,
  :id)`; grant (`grant_slot`): `ADD slots {id} DELETE queued {entry}` if `size(slots) < :limit AND
  contains(queued, :entry)`; release (`release_slot`): `DELETE slots {id}` if `contains(slots, :id)`,
  ALL_NEW;
- the state changes of one commit (`apply_state`): `SET`/`REMOVE` of `S#…` attributes if
  `attribute_not_exists(sv)`, and `holder = :id` for an exclusive handler (a workflow's run writes
  unconditionally), ALL_OLD: large values no longer referred to are deleted after; on a paged state,
  `SET pages, sv` if `sv = :read` (and the holder), after storing the new pages.

Reads are strongly consistent. Of concurrent callers of a conditional write exactly one wins; a
promise completion is a single conditional write too (a workflow's `run` is claimed by creating its
invocation, whose id is deterministic). Items of tables written before this layout (one `S#{h(key)}`
item per state entry, `Q#…` items of a former per-key inbox) are neither read nor migrated.
"""

from __future__ import annotations

import contextlib
import struct
import time
from collections.abc import Callable, Mapping
from typing import Any

from botocore.exceptions import ClientError
from pynamodb.connection import TableConnection
from pynamodb.exceptions import UpdateError
from pynamodb.pagination import ResultIterator

from adapters.aws.store_items import (
    INLINE_AGAIN_BYTES,
    KEY_ITEM_STATE_BYTES,
    LISTED_ATTRIBUTE,
    LOCK_SK,
    MAX_UPDATE_CLAUSES,
    PAGE_BYTES,
    PAGED_ATTRIBUTE,
    PAGES_ATTRIBUTE,
    SPILL_BYTES,
    STATE_PREFIX,
    TTL_ATTRIBUTE,
    KeyedItem,
    LockItem,
    PromiseItem,
    StateItem,
    StateKeyItem,
    TimerItem,
    WaiterItem,
    bind,
    item_absent,
    item_exists,
    keyed_pk,
    page_sk,
    promise_record,
    promise_sk,
    queue_entry,
    shard_of,
    spill_sk,
    split_queue_entry,
    state_key_digest,
    state_keys_pk,
    state_keys_sk,
    state_sk,
    translated_write,
    waiter_sk,
    waiters_prefix,
)
from control_plane.limits import reserve
from control_plane.ports import ItemTooLarge, PromiseRecord, StoreConflict

_FIRST_WINS_ROUNDS = 3
"""Put-if-absent, then read the winner: retried if the winner's item vanished in between (TTL)."""

_STATE_READ_ROUNDS = 5
"""Reads of `LOCK` and its values stored apart, retried while a value it refers to was replaced meanwhile."""


def _won(write: Callable[[], object], *, too_large: str) -> bool:
    """Run a conditional write; True if it happened, False if its condition failed.

    Raises:
        ItemTooLarge: The item would exceed 400 KB; nothing was written.
    """
    try:
        with translated_write(conflict="condition failed", too_large=too_large):
            write()
    except StoreConflict:
        return False
    return True


_Entry = tuple[bytes | None, str | None]
"""A state entry as stored: `(value, None)` held in place, or `(None, sort key of the item holding it)`."""

_PAGE_HEADER = struct.Struct(">IBI")  # state key length, 1 if the payload is a sort key, payload length
_MAX_PREFIX = 8  # page prefixes of up to 8 hex digits: 16^8 pages, never reached


def _entries_of(item: Mapping[str, Any]) -> dict[bytes, _Entry]:
    """The state entries held in the raw key item (its `S#…` attributes; not those in pages)."""
    entries: dict[bytes, _Entry] = {}
    for name, raw in item.items():
        if not name.startswith(STATE_PREFIX):
            continue
        entry = raw["M"]
        entries[entry["k"]["B"]] = (None, entry["r"]["S"]) if "r" in entry else (entry["v"]["B"], None)
    return entries


def _pages_of(item: Mapping[str, Any]) -> set[str]:
    """Sort keys of the state pages the raw key item refers to (its `pages` string set)."""
    return set(item.get(PAGES_ATTRIBUTE, {}).get("SS", []))


def _refs(entries: Mapping[bytes, _Entry]) -> set[str]:
    """Sort keys of the values stored apart that `entries` refer to."""
    return {ref for _, ref in entries.values() if ref is not None}


def encode_page(entries: Mapping[bytes, _Entry]) -> bytes:
    """A state page's bytes: per entry (sorted by state key, so equal pages are equal bytes) a 9-byte
    header (key length, 0 for a value or 1 for a sort key, payload length; big-endian), the key and
    the payload."""
    out = bytearray()
    for state_key in sorted(entries):
        value, ref = entries[state_key]
        payload = value if ref is None else ref.encode()
        assert payload is not None
        out += _PAGE_HEADER.pack(len(state_key), 0 if ref is None else 1, len(payload)) + state_key + payload
    return bytes(out)


def decode_page(page: bytes) -> dict[bytes, _Entry]:
    """The entries of a state page (`encode_page`'s inverse)."""
    out: dict[bytes, _Entry] = {}
    at = 0
    while at < len(page):
        key_length, is_ref, length = _PAGE_HEADER.unpack_from(page, at)
        at += _PAGE_HEADER.size
        state_key, payload = page[at : at + key_length], page[at + key_length : at + key_length + length]
        at += key_length + length
        out[state_key] = (None, payload.decode()) if is_ref else (payload, None)
    return out


def layout_pages(entries: Mapping[bytes, _Entry], prefix: str = "") -> dict[str, bytes]:
    """`{prefix: page}`: `entries` split into pages of at most `PAGE_BYTES`, by the leading hex digits
    of each state key's sha256 (a page too large splits into 16 by one more digit). Deterministic, so
    applying the same changes again gives the same pages (content-addressed items)."""
    if not entries:
        return {}
    page = encode_page(entries)
    if len(page) <= PAGE_BYTES or len(prefix) >= _MAX_PREFIX:
        return {prefix: page}
    parts: dict[str, dict[bytes, _Entry]] = {}
    for state_key, entry in entries.items():
        parts.setdefault(state_key_digest(state_key)[len(prefix)], {})[state_key] = entry
    out: dict[str, bytes] = {}
    for digit, part in sorted(parts.items()):
        out.update(layout_pages(part, prefix + digit))
    return out


def _raw_size(raw: Mapping[str, Any]) -> int:
    """Bytes DynamoDB counts for one raw attribute value (an estimate on the safe side)."""
    kind, value = next(iter(raw.items()))
    if kind in ("S", "B"):
        return len(value.encode()) if isinstance(value, str) else len(value)
    if kind == "N":
        return 21
    if kind in ("SS", "BS", "NS"):
        return sum(len(v) + 1 for v in value)
    if kind == "M":
        return 3 + sum(len(k) + 1 + _raw_size(v) for k, v in value.items())
    if kind == "L":
        return 3 + sum(1 + _raw_size(v) for v in value)
    return 1


def item_bytes(item: Mapping[str, Any]) -> int:
    """Bytes DynamoDB counts for a raw item: attribute names and values (an estimate on the safe side)."""
    return sum(len(name) + _raw_size(raw) for name, raw in item.items())


class _Paged(Exception):
    """The key item's state is in pages: the write takes the paged path (`_apply_paged`)."""


class DynamoKeyed:
    """`control_plane.ports.KeyStore` (virtual objects and workflows); `DynamoDBStore` binds the item classes.

    Attributes:
        _connection: The store's counting table connection.
        _state: The store's bound `StateItem`.
        _locks: The store's bound `LockItem`.
        _promises: The store's bound `PromiseItem`.
        _waiters: The store's bound `WaiterItem`.
        _may_delete: False where the store's credentials may not delete items (`DynamoDBStore`'s
            `may_delete`): `_drop` expires items instead.
    """

    _connection: TableConnection
    _may_delete: bool
    _state: type[StateItem]
    _locks: type[LockItem]
    _promises: type[PromiseItem]
    _waiters: type[WaiterItem]
    _listing: type[StateKeyItem]

    @property
    def shards(self) -> int:
        """The table's shard count (`DynamoDBStore.shards`)."""
        raise NotImplementedError

    def _each_shard(self, read: Callable[[int], list[Any]]) -> list[list[Any]]:
        """`read(shard)` for every shard (`DynamoDBStore._each_shard`)."""
        raise NotImplementedError

    def _bind_keyed(self, meta: type, connection: TableConnection) -> None:
        """Bind the keyed item templates to the store's table and connection (see `store_items.bind`)."""
        self._state = bind(StateItem, meta, connection)
        self._locks = bind(LockItem, meta, connection)
        self._promises = bind(PromiseItem, meta, connection)
        self._waiters = bind(WaiterItem, meta, connection)
        self._listing = bind(StateKeyItem, meta, connection)

    def _drop(self, model: type[StateItem] | type[TimerItem], pk: str, sk: str) -> None:
        """Remove an item nothing refers to any more (a replaced large state value, a timer).

        One DeleteItem; where the store may not delete (`_may_delete` False: the AWS ingress
        function's role has no `dynamodb:DeleteItem`) one UpdateItem setting the item's TTL
        attribute to now instead, if the item exists (a missing one is not created), and DynamoDB's
        TTL deletes it later (usually within days, at no write cost). A PutItem of the same key (a
        value stored again, a timer armed again) replaces the item whole, its TTL with it.
        """
        if self._may_delete:
            model(pk, sk).delete()
            return
        with contextlib.suppress(StoreConflict), translated_write(conflict="gone", too_large=f"{pk}/{sk}"):
            model(pk, sk).update(actions=[model.expires_at_s.set(int(time.time()))], condition=item_exists(model))

    def _check_may_delete(self, operation: str) -> None:
        if not self._may_delete:
            raise PermissionError(
                f"{operation}: this store may not delete items (may_delete=False: the function's role has no "
                "dynamodb:DeleteItem); the worker does it"
            )

    def _sort_keys(self, scope: str, key: str, prefix: str | None = None) -> list[str]:
        """Sort keys of the items of `scope/key` (those starting with `prefix`, if given).

        One strongly consistent query projected to the keys, paged (each page is one request).
        """
        args: dict[str, Any] = {"consistent_read": True, "attributes_to_get": ["PK", "SK"]}
        if prefix is not None:
            args["range_key_condition"] = self._state.sk.startswith(prefix)
        pages: ResultIterator[dict[str, Any]] = ResultIterator(self._connection.query, (keyed_pk(scope, key),), args)
        return [raw["SK"]["S"] for raw in pages]

    # --- the key item: lock, queue and small state, one item -------------------------------------

    def _key_item(self, scope: str, key: str) -> dict[str, Any]:
        return {"PK": {"S": keyed_pk(scope, key)}, "SK": {"S": LOCK_SK}}

    def _update_key(
        self,
        scope: str,
        key: str,
        update: str,
        *,
        condition: str | None = None,
        names: dict[str, str] | None = None,
        values: dict[str, Any] | None = None,
        returning: str | None = None,
        conflict: str = "condition failed",
    ) -> dict[str, Any]:
        """One UpdateItem of the key item `LOCK` (also setting its raw `scope` and `key`).

        Returns the attributes DynamoDB sent back (`returning`: ALL_NEW, UPDATED_OLD), raw, or {}.

        Raises:
            StoreConflict: `condition` failed; nothing was written.
            ItemTooLarge: The key item would pass 400 KB (state, or a very long queue).
        """
        kwargs: dict[str, Any] = {
            "TableName": self._connection.table_name,
            "Key": self._key_item(scope, key),
            "UpdateExpression": update.replace("SET ", "SET #scope = :scope, #key = :key, ", 1)
            if update.startswith("SET ")
            else f"SET #scope = :scope, #key = :key {update}",
            "ExpressionAttributeNames": {"#scope": "scope", "#key": "key", **(names or {})},
            "ExpressionAttributeValues": {":scope": {"S": scope}, ":key": {"S": key}, **(values or {})},
        }
        if condition:
            kwargs["ConditionExpression"] = condition
        if returning:
            kwargs["ReturnValues"] = returning
        too_large = (
            f"{scope}/{key}: the object's state and queue do not fit in one DynamoDB item (400 KB); keep state "
            f"smaller (values above {SPILL_BYTES} bytes are stored apart) or fewer calls waiting for the key"
        )
        with translated_write(conflict=conflict, too_large=too_large):
            try:
                answer = self._connection.connection.dispatch("UpdateItem", kwargs)
            except ClientError as exc:  # as pynamodb's own update_item raises it
                raise UpdateError("Failed to update item", exc) from exc
        return dict((answer or {}).get("Attributes", {}))

    def _get_key(self, scope: str, key: str, *, state: bool = True) -> dict[str, Any]:
        """The key item `LOCK` as DynamoDB holds it (raw attributes), {} if absent (one consistent GetItem).

        With `state=False` only `holder`, `queued` and `slots` are read (a projection), so a lock or queue
        look-up does not pay read capacity for the state on the same item.
        """
        request: dict[str, Any] = {
            "TableName": self._connection.table_name,
            "Key": self._key_item(scope, key),
            "ConsistentRead": True,
        }
        if not state:
            request["ProjectionExpression"] = "#holder, #queued, #slots"
            request["ExpressionAttributeNames"] = {"#holder": "holder", "#queued": "queued", "#slots": "slots"}
        answer = self._connection.connection.dispatch("GetItem", request)
        return dict((answer or {}).get("Item", {}))

    # --- state -----------------------------------------------------------------------------------

    def load_state(self, scope: str, key: str) -> dict[bytes, bytes]:
        """The whole state of `scope/key`: one consistent GetItem of `LOCK`; then, only when there are
        state pages or values stored apart, one consistent BatchGetItem per 100 of each.

        Returns:
            `{state key: value}`; empty if the key has no state.

        Raises:
            StoreConflict: The pages or values stored apart kept changing between the reads (see
                `_with_spilled`); practically never.
        """
        return self._with_spilled(scope, key, self._get_key(scope, key))

    def _stored_apart(self, scope: str, key: str, sort_keys: set[str]) -> dict[str, bytes]:
        """`{sort key: value}` of the state items (pages, values stored apart) found: consistent BatchGetItems."""
        if not sort_keys:
            return {}
        pk = keyed_pk(scope, key)
        items = self._state.batch_get([(pk, sk) for sk in sort_keys], consistent_read=True)
        return {item.sk: item.value for item in items}

    def _entries(self, scope: str, key: str, item: Mapping[str, Any]) -> dict[bytes, _Entry] | None:
        """Every state entry of the raw key item and of its pages (values stored apart not read); None
        if a page it refers to is gone (replaced since `item` was read)."""
        if PAGED_ATTRIBUTE not in item:
            return _entries_of(item)
        entries: dict[bytes, _Entry] = {}
        pages = _pages_of(item)
        found = self._stored_apart(scope, key, pages)
        if len(found) < len(pages):
            return None
        for sk in sorted(pages):
            entries.update(decode_page(found[sk]))
        return entries

    def _with_spilled(self, scope: str, key: str, item: Mapping[str, Any]) -> dict[bytes, bytes]:
        """The state the raw key item holds, with its pages and the values stored apart read in.

        The reads are not one snapshot: the key's holder may replace a page or a large value in
        between, deleting the item `item` refers to. Then `LOCK` is read again (a consistent GetItem)
        and the rest with it, up to `_STATE_READ_ROUNDS` times, so a state with an entry missing, or
        half of one commit's changes, is never returned (pages and values stored apart are never
        changed in place: a commit writes new ones, then switches `LOCK` to them in one write).

        Raises:
            StoreConflict: A referenced item was still missing after `_STATE_READ_ROUNDS` reads.
        """
        for _ in range(_STATE_READ_ROUNDS):
            entries = self._entries(scope, key, item)
            if entries is not None:
                refs = _refs(entries)
                found = self._stored_apart(scope, key, refs)
                if len(found) == len(refs):
                    return {k: found[ref] if ref is not None else value or b"" for k, (value, ref) in entries.items()}
            item = self._get_key(scope, key)  # a page or value was replaced between the reads: read again
        raise StoreConflict(
            f"{scope}/{key}: a state page or value stored apart was missing in {_STATE_READ_ROUNDS} consistent reads "
            f"(replaced each time between the reads of LOCK and of the item, or deleted)"
        )

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
        """Apply the state changes of one commit, all or nothing for readers, whatever their size.

        While the object's state is small it lives on `LOCK`: one UpdateItem (SET and REMOVE of `S#…`
        attributes, conditional on `pages` being absent). A value above `SPILL_BYTES` goes to its own
        item `S#{h(state key)}#{h(value)}` first (one PutItem; content-addressed, so re-applying writes
        the same item) and `LOCK` refers to it; the item it replaces is deleted after the update (the
        update returns the old item, ALL_OLD, which also tells `LOCK`'s new size). If `LOCK` would pass
        400 KB, or passes `KEY_ITEM_STATE_BYTES` after the write, or its state is paged already, the
        state goes to pages (`_apply_paged`): there is no limit on an object's state but each value's.

        If the update is fenced out (`holder`), the items it just stored apart are deleted again,
        after a read of `LOCK` shows which ones it does not refer to. `clear` removes every entry
        first, which takes one consistent GetItem to learn them. Applying the same changes again gives
        the same state (effects are re-applied after a crash).

        Args:
            scope: The service name.
            key: The object key or workflow id.
            writes: `{state key: new value, or None to remove it}`, applied after `clear`.
            clear: Remove every entry not in `writes` (ClearAllState).
            holder: If given, only while this invocation holds the key (`holder = :id`): an exclusive
                handler's writes are fenced by the lock, so one that lost the key writes nothing.
            expires_at_s: TTL of the key item in epoch seconds; 0 leaves it as it is.

        Raises:
            StoreConflict: `holder` does not hold the key; nothing was written.
            ItemTooLarge: One value (with its key) does not fit in one 400 KB item, or the key
                item's queue alone does not; nothing was written.
        """
        item = self._get_key(scope, key) if clear else None
        if item is None or PAGED_ATTRIBUTE not in item:
            try:
                size = self._apply_in_key_item(scope, key, writes, item, holder, expires_at_s)
            except (_Paged, ItemTooLarge):
                pass  # nothing written to LOCK: the paged path writes the changes
            else:
                if size > KEY_ITEM_STATE_BYTES:  # applied, but LOCK is nearly full: move its state to pages
                    with contextlib.suppress(StoreConflict):  # lost the key meanwhile: its successor may do it
                        self._apply_paged(scope, key, {}, clear=False, holder=holder, expires_at_s=0)
                return
        self._apply_paged(scope, key, writes, clear=clear, holder=holder, expires_at_s=expires_at_s)

    def _store_apart(self, pk: str, scope: str, key: str, state_key: bytes, value: bytes) -> str:
        """Store a large value in its own item (one PutItem, content-addressed); its sort key."""
        sk = spill_sk(state_key, value)
        too_large = f"{scope}/{key}: a state value ({len(value)} bytes) does not fit in one DynamoDB item (400 KB)"
        with translated_write(too_large=too_large):
            self._state(pk, sk, scope=scope, key=key, state_key=state_key, value=value).save()
        return sk

    def _apply_in_key_item(
        self,
        scope: str,
        key: str,
        writes: Mapping[bytes, bytes | None],
        current: Mapping[str, Any] | None,
        holder: str | None,
        expires_at_s: int,
    ) -> int:
        """The changes as one UpdateItem of `LOCK` (see `apply_state`); the key item's size after it (bytes).

        Raises:
            _Paged: The state is in pages (`sv` exists), or the changes need more than
                `MAX_UPDATE_CLAUSES` clauses; nothing was written to `LOCK`.
            ItemTooLarge: `LOCK` would pass 400 KB; nothing was written to `LOCK`.
            StoreConflict: `holder` does not hold the key; nothing was written.
        """
        pk = keyed_pk(scope, key)
        names: dict[str, str] = {"#paged": PAGED_ATTRIBUTE}
        values: dict[str, Any] = {}
        sets: list[str] = []
        removes: list[str] = []
        if current is not None:  # clear: remove every entry not written
            wanted = {state_sk(k) for k in writes}
            for i, name in enumerate(n for n in current if n.startswith(STATE_PREFIX) and n not in wanted):
                names[f"#c{i}"] = name
                removes.append(f"#c{i}")
        if len(removes) + len(writes) > MAX_UPDATE_CLAUSES:
            raise _Paged()  # too many changes for one expression: the paged path writes them as pages
        new_attributes: dict[str, Any] = {}
        for i, (state_key, value) in enumerate(writes.items()):
            names[f"#s{i}"] = state_sk(state_key)
            if value is None:
                removes.append(f"#s{i}")
                continue
            entry: dict[str, Any] = {"k": {"B": state_key}}
            if len(value) > SPILL_BYTES:
                entry["r"] = {"S": self._store_apart(pk, scope, key, state_key, value)}
            else:
                entry["v"] = {"B": value}
            values[f":s{i}"] = {"M": entry}
            new_attributes[state_sk(state_key)] = {"M": entry}
            sets.append(f"#s{i} = :s{i}")
        if expires_at_s:
            names["#ttl"] = TTL_ATTRIBUTE
            values[":ttl"] = {"N": str(expires_at_s)}
            sets.append("#ttl = :ttl")
        if not sets and not removes:
            return 0
        condition = "attribute_not_exists(#paged)"
        if holder is not None:
            names["#holder"] = "holder"
            values[":holder"] = {"S": holder}
            condition = "#holder = :holder AND attribute_not_exists(#paged)"
        update = "SET " + ", ".join(sets) if sets else ""
        if removes:
            update += " REMOVE " + ", ".join(removes)
        kept = _refs(_entries_of(new_attributes))
        try:
            old = self._update_key(
                scope, key, update.strip(), condition=condition, names=names, values=values, returning="ALL_OLD",
                conflict=f"{scope}/{key}: {holder} does not hold the key",
            )  # fmt: skip
        except StoreConflict:
            now = self._get_key(scope, key)
            if holder is None or now.get("holder", {}).get("S") == holder:
                raise _Paged() from None  # the condition that failed is `sv`: the state is paged
            # fenced out: the values just stored apart are orphans, unless the state refers to them
            # already (the same value written before: the items are content-addressed)
            self._drop_unreferenced(scope, key, kept, now)
            raise
        touched = {names[n.split(" ")[0]] for n in sets + removes if n.startswith("#s") or n.startswith("#c")}
        for ref in _refs(_entries_of({n: a for n, a in old.items() if n in touched})) - kept:
            self._drop(self._state, pk, ref)  # values stored apart that nothing refers to any more
        if new_attributes and LISTED_ATTRIBUTE not in old:  # the key's first state: list it, then mark it
            self._list_key(scope, key)
            with contextlib.suppress(StoreConflict):  # the key item is gone (retention): nothing to mark
                self._update_key(
                    scope, key, "SET #listed = :listed", condition="attribute_exists(PK)",
                    names={"#listed": LISTED_ATTRIBUTE}, values={":listed": {"BOOL": True}},
                )  # fmt: skip
        after = {n: a for n, a in old.items() if n not in touched} | new_attributes
        return item_bytes(after) + len(pk) + 8

    def _remove_stale(self, scope: str, key: str, attributes: list[str]) -> None:
        """Remove `S#…` attributes left on a paged key item (readers ignore them), in UpdateItems of
        `MAX_UPDATE_CLAUSES` each, conditional on the state being paged."""
        for at in range(0, len(attributes), MAX_UPDATE_CLAUSES):
            chunk = attributes[at : at + MAX_UPDATE_CLAUSES]
            names = {"#sv": PAGED_ATTRIBUTE, **{f"#c{i}": name for i, name in enumerate(chunk)}}
            update = "REMOVE " + ", ".join(f"#c{i}" for i in range(len(chunk)))
            with contextlib.suppress(StoreConflict):  # the key item is gone (retention): nothing to remove
                self._update_key(scope, key, update, condition="attribute_exists(#sv)", names=names)

    def _drop_unreferenced(self, scope: str, key: str, written: set[str], item: Mapping[str, Any]) -> None:
        """A fenced-out write stored `written` (pages, values stored apart): drop those the state as it
        now is (`item`, the key item read after the failed write, and its pages) does not refer to."""
        entries = self._entries(scope, key, item) or {}
        for sk in written - _refs(entries) - _pages_of(item):
            self._drop(self._state, keyed_pk(scope, key), sk)

    def _apply_paged(
        self,
        scope: str,
        key: str,
        writes: Mapping[bytes, bytes | None],
        *,
        clear: bool,
        holder: str | None,
        expires_at_s: int,
    ) -> None:
        """Apply the changes to a state kept in pages (items `T#{prefix}#{h(page)}`, `PAGE_BYTES` each).

        Reads `LOCK` and its pages (consistent), lays the new state out in pages (`layout_pages`:
        deterministic), stores the pages it does not have yet (PutItem each; content-addressed) and
        values above `SPILL_BYTES` apart, then switches `LOCK` to the new pages in one UpdateItem
        (REMOVE the `S#…` attributes, SET `pages` and a version `sv`), conditional on `holder` and on
        the version read, so readers see the whole commit or none of it and a concurrent change makes
        it read again. Pages and values no longer referred to are deleted after. Re-applying after a
        crash converges: the same pages, the same switch.

        Raises:
            StoreConflict: `holder` does not hold the key (nothing visible was written), or the state
                kept changing under this write for `_STATE_READ_ROUNDS` reads.
            ItemTooLarge: A value does not fit in one item; nothing visible was written.
        """
        pk = keyed_pk(scope, key)
        for _ in range(_STATE_READ_ROUNDS):
            item = self._get_key(scope, key)
            if holder is not None and item.get("holder", {}).get("S") != holder:
                raise StoreConflict(f"{scope}/{key}: {holder} does not hold the key")
            current = self._entries(scope, key, item)
            if current is None:
                continue  # a page was replaced between the reads: read again
            entries = {} if clear else dict(current)
            for state_key, value in writes.items():
                if value is None:
                    entries.pop(state_key, None)
                elif len(value) > SPILL_BYTES:
                    entries[state_key] = (None, self._store_apart(pk, scope, key, state_key, value))
                else:
                    entries[state_key] = (value, None)
            stale = sorted(n for n in item if n.startswith(STATE_PREFIX))  # ignored while `sv` is set
            inline = {state_sk(k): {"M": {"k": {"B": k}, **({"r": {"S": r}} if r else {"v": {"B": v or b""}})}}
                      for k, (v, r) in entries.items()}  # fmt: skip
            stale_gone = [n for n in stale if n not in inline]
            back_inline = (  # small again: back on the key item, where a write is one UpdateItem
                len(inline) + len(stale_gone) + 4 <= MAX_UPDATE_CLAUSES and item_bytes(inline) <= INLINE_AGAIN_BYTES
            )
            pages = {} if back_inline else {page_sk(p, page): page for p, page in layout_pages(entries).items()}
            old_pages = _pages_of(item)
            for sk, page in pages.items():
                if sk not in old_pages:
                    with translated_write(too_large=f"{scope}/{key}: a state page does not fit in one item"):
                        self._state(pk, sk, scope=scope, key=key, state_key=b"", value=page).save()
            names: dict[str, str] = {"#pages": PAGES_ATTRIBUTE, "#sv": PAGED_ATTRIBUTE}
            values: dict[str, Any] = {}
            sets: list[str] = []
            if entries and LISTED_ATTRIBUTE not in item:  # listed before the write that marks it
                self._list_key(scope, key)
                names["#listed"] = LISTED_ATTRIBUTE
                values[":listed"] = {"BOOL": True}
                sets.append("#listed = :listed")
            removes: list[str] = []
            rest: list[str] = []
            if back_inline:
                removes += ["#sv", "#pages"]
                for i, (name, attribute) in enumerate(sorted(inline.items())):
                    names[f"#s{i}"] = name
                    values[f":s{i}"] = attribute
                    sets.append(f"#s{i} = :s{i}")
                stale = stale_gone
            else:
                version = int(item.get(PAGED_ATTRIBUTE, {}).get("N", "0"))
                values[":sv"] = {"N": str(version + 1)}
                sets.append("#sv = :sv")
                if pages:
                    values[":pages"] = {"SS": sorted(pages)}
                    sets.append("#pages = :pages")
                else:
                    removes.append("#pages")
                stale, rest = stale[: MAX_UPDATE_CLAUSES - 4], stale[MAX_UPDATE_CLAUSES - 4 :]
            if expires_at_s:
                names["#ttl"] = TTL_ATTRIBUTE
                values[":ttl"] = {"N": str(expires_at_s)}
                sets.append("#ttl = :ttl")
            for i, name in enumerate(stale):
                names[f"#c{i}"] = name
                removes.append(f"#c{i}")
            if PAGED_ATTRIBUTE in item:
                values[":read"] = item[PAGED_ATTRIBUTE]
                condition = "#sv = :read"
            else:
                condition = "attribute_not_exists(#sv)"
            if holder is not None:
                names["#holder"] = "holder"
                values[":holder"] = {"S": holder}
                condition += " AND #holder = :holder"
            update = ("SET " + ", ".join(sets) if sets else "") + (" REMOVE " + ", ".join(removes) if removes else "")
            written = (set(pages) - old_pages) | (_refs(entries) - _refs(current))
            try:
                self._update_key(scope, key, update, condition=condition, names=names, values=values)
            except StoreConflict:
                now = self._get_key(scope, key)
                if holder is not None and now.get("holder", {}).get("S") != holder:
                    self._drop_unreferenced(scope, key, written, now)
                    raise StoreConflict(f"{scope}/{key}: {holder} does not hold the key") from None
                continue  # the state changed since it was read (another writer): read again
            self._remove_stale(scope, key, rest)
            old = old_pages | _refs(current) | _refs(_entries_of(item))
            for ref in old - (set(pages) | _refs(entries)):
                self._drop(self._state, pk, ref)  # pages and values nothing refers to any more
            return
        raise StoreConflict(f"{scope}/{key}: the state kept changing under a write ({_STATE_READ_ROUNDS} reads)")

    def clear_state(self, scope: str, key: str) -> None:
        """Remove every state entry of `scope/key` (one GetItem, then one UpdateItem if there was any;
        a paged state also reads and deletes its pages).

        The lock and queue on the same item, and the other items of the partition, are kept; so is
        the key's listing (`state_keys` goes on listing it, its state reads empty).
        """
        self.apply_state(scope, key, {}, clear=True)

    # --- the listing of a service's keys that have state -------------------------------------------

    def _listing_item(self, scope: str, key: str) -> StateKeyItem:
        return self._listing(state_keys_pk(scope, shard_of(key, self.shards)), state_keys_sk(key), scope=scope, key=key)

    def _list_key(self, scope: str, key: str) -> None:
        """Put `key`'s listing item `SKEYS#{scope}#{shard}` / `{h(key)}` (one PutItem; putting it again
        changes nothing). Called before the key item is marked `listed`, so a crash in between
        lists it again at the next state write, and a key with state is never left unlisted."""
        self._listing_item(scope, key).save()

    def state_keys(self, scope: str, limit: int) -> list[str]:
        """The keys of `scope` listed as having state, sorted, at most `limit` (see `Store.state_keys`).

        One strongly consistent query per shard `SKEYS#{scope}#{shard}` (run concurrently, each paged
        and stopping at `limit` items), projected to the raw key. A key is listed by its first state
        write (`apply_state`: one PutItem, and one UpdateItem marking the key item `listed` unless the
        write read the key item first) and stays listed when its state is cleared; `delete_keyed`
        removes the listing with the workflow's items.
        """

        def read(shard: int) -> list[str]:
            args: dict[str, Any] = {"consistent_read": True, "limit": limit, "attributes_to_get": ["key"]}
            items: ResultIterator[dict[str, Any]] = ResultIterator(
                self._connection.query, (state_keys_pk(scope, shard),), args, limit=limit
            )
            return [raw["key"]["S"] for raw in items]

        return sorted(k for keys in self._each_shard(read) for k in keys)[:limit]

    # --- lock and queue --------------------------------------------------------------------------

    def take_key(self, scope: str, key: str, invocation_id: str) -> dict[bytes, bytes] | None:
        """Take the key for a new invocation if nobody holds it and nobody waits for it, reading its state.

        One UpdateItem of `LOCK`: `SET holder = :id` if `(attribute_not_exists(holder) AND
        attribute_not_exists(queued)) OR holder = :id`, returning the item (ALL_NEW), which holds the
        state; values stored apart cost one BatchGetItem more. Waiting calls keep their turn: a
        newcomer never passes them.

        Returns:
            The key's state (`{state key: value}`) if `invocation_id` holds the key now; None if the
            key is held or calls wait for it (nothing changed).
        """
        try:
            item = self._update_key(
                scope, key, "SET #holder = :id", names={"#holder": "holder", "#queued": "queued"},
                values={":id": {"S": invocation_id}},
                condition="(attribute_not_exists(#holder) AND attribute_not_exists(#queued)) OR #holder = :id",
                returning="ALL_NEW",
            )  # fmt: skip
        except StoreConflict:
            return None
        return self._with_spilled(scope, key, item)

    def grant_key(self, scope: str, key: str, seq: str, invocation_id: str) -> bool:
        """Hand the free key to the queued `invocation_id`, taking it out of the queue: one transition.

        One UpdateItem of `LOCK`: `SET holder = :id DELETE queued {entry}` if
        `attribute_not_exists(holder) AND contains(queued, entry)`. Of concurrent pumps exactly one
        grants an entry, once.

        Returns:
            True if granted now; False if the key is held or the entry is not queued (any more).
        """
        entry = queue_entry(seq, invocation_id)
        try:
            self._update_key(
                scope, key, "SET #holder = :id DELETE #queued :entries",
                names={"#holder": "holder", "#queued": "queued"},
                values={":id": {"S": invocation_id}, ":entries": {"SS": [entry]}, ":entry": {"S": entry}},
                condition="attribute_not_exists(#holder) AND contains(#queued, :entry)",
            )  # fmt: skip
        except StoreConflict:
            return False
        return True

    def release_key(self, scope: str, key: str, invocation_id: str) -> bool | None:
        """Release the key if `invocation_id` holds it, and tell whether calls wait for it.

        One UpdateItem of `LOCK`: `REMOVE holder` if `holder = :id`, returning the item (ALL_NEW),
        so the queue is known without another read.

        Returns:
            None if it did not hold the key (nothing changed); else True if calls wait in the queue.
        """
        try:
            item = self._update_key(
                scope, key, "REMOVE #holder", names={"#holder": "holder"}, values={":id": {"S": invocation_id}},
                condition="#holder = :id", returning="ALL_NEW",
            )  # fmt: skip
        except StoreConflict:
            return None
        return bool(item.get("queued", {}).get("SS"))

    def key_status(self, scope: str, key: str) -> tuple[str | None, tuple[str, str] | None]:
        """`(holder, (seq, invocation_id) of the queue's earliest entry)` of `scope/key`.

        One consistent GetItem of `LOCK`, projected to `holder` and `queued` (not the state).
        """
        item = self._get_key(scope, key, state=False)
        holder = item.get("holder", {}).get("S")
        queued = item.get("queued", {}).get("SS") or []
        return holder, (split_queue_entry(min(queued)) if queued else None)

    def lock_holder(self, scope: str, key: str) -> str | None:
        """The invocation holding the lock of `scope/key`, or None (one consistent GetItem, projected)."""
        return self.key_status(scope, key)[0]

    # --- concurrency limits: up to N holders in `slots`, the same queue ---------------------------

    def take_slot(self, scope: str, key: str, invocation_id: str, limit: int) -> bool:
        """Take a slot for a new invocation if fewer than `limit` hold one and nobody waits.

        One UpdateItem of `LOCK`: `ADD slots {id}` if `((attribute_not_exists(slots) OR size(slots) <
        :limit) AND attribute_not_exists(queued)) OR contains(slots, :id)` (`limits.slot_free` as a
        condition). Returns True if it holds a slot now, False if it must wait (nothing changed).
        """
        try:
            self._update_key(
                scope, key, "ADD #slots :ids", names={"#slots": "slots", "#queued": "queued"},
                values={":ids": {"SS": [invocation_id]}, ":id": {"S": invocation_id}, ":limit": {"N": str(limit)}},
                condition="((attribute_not_exists(#slots) OR size(#slots) < :limit) AND attribute_not_exists(#queued))"
                " OR contains(#slots, :id)",
            )  # fmt: skip
        except StoreConflict:
            return False
        return True

    def grant_slot(self, scope: str, key: str, seq: str, invocation_id: str, limit: int) -> bool:
        """Give a free slot to the queued `invocation_id`, taking it out of the queue: one transition.

        One UpdateItem of `LOCK`: `ADD slots {id} DELETE queued {entry}` if `(attribute_not_exists(slots)
        OR size(slots) < :limit) AND contains(queued, entry)`. Of concurrent pumps exactly one grants
        an entry, once. Returns True if granted now; False if every slot is held or it is not queued.
        """
        entry = queue_entry(seq, invocation_id)
        try:
            self._update_key(
                scope, key, "ADD #slots :ids DELETE #queued :entries",
                names={"#slots": "slots", "#queued": "queued"},
                values={":ids": {"SS": [invocation_id]}, ":entries": {"SS": [entry]}, ":entry": {"S": entry},
                        ":limit": {"N": str(limit)}},
                condition="(attribute_not_exists(#slots) OR size(#slots) < :limit) AND contains(#queued, :entry)",
            )  # fmt: skip
        except StoreConflict:
            return False
        return True

    def release_slot(self, scope: str, key: str, invocation_id: str) -> bool | None:
        """Release the slot `invocation_id` holds, and tell whether calls wait for one.

        One UpdateItem of `LOCK`: `DELETE slots {id}` if `contains(slots, :id)`, ALL_NEW. Returns None
        if it held none (nothing changed), else True if calls wait in the queue.
        """
        try:
            item = self._update_key(
                scope, key, "DELETE #slots :ids", names={"#slots": "slots"},
                values={":ids": {"SS": [invocation_id]}, ":id": {"S": invocation_id}},
                condition="contains(#slots, :id)", returning="ALL_NEW",
            )  # fmt: skip
        except StoreConflict:
            return None
        return bool(item.get("queued", {}).get("SS"))

    def reserve_start(self, scope: str, key: str, now_ms: int, interval_ms: int, burst: int) -> int:
        """Reserve the next start of rate limit `scope/key` (`limits.reserve`): one consistent GetItem
        of `LOCK` projected to `tat`, then `SET tat = :new` if `tat` is still what was read (absent
        for 0); read again if another reservation won."""
        for _ in range(64):
            request = {
                "TableName": self._connection.table_name, "Key": self._key_item(scope, key), "ConsistentRead": True,
                "ProjectionExpression": "#tat", "ExpressionAttributeNames": {"#tat": "tat"},
            }  # fmt: skip
            item = (self._connection.connection.dispatch("GetItem", request) or {}).get("Item") or {}
            old = int(item["tat"]["N"]) if "tat" in item else 0
            start, tat = reserve(old, now_ms, interval_ms, burst)
            condition = "attribute_not_exists(#tat)" if "tat" not in item else "#tat = :old"
            values: dict[str, Any] = {":new": {"N": str(tat)}}
            if "tat" in item:
                values[":old"] = {"N": str(old)}
            try:
                self._update_key(scope, key, "SET #tat = :new", names={"#tat": "tat"}, values=values, condition=condition)
            except StoreConflict:
                continue
            return start
        raise StoreConflict(f"{scope}: too many reservations at once; try again")

    def slot_status(self, scope: str, key: str) -> tuple[frozenset[str], tuple[str, str] | None]:
        """`(holders of a slot, (seq, invocation_id) of the queue's earliest entry)`: one consistent
        GetItem of `LOCK`, projected."""
        item = self._get_key(scope, key, state=False)
        queued = item.get("queued", {}).get("SS") or []
        return frozenset(item.get("slots", {}).get("SS") or ()), (split_queue_entry(min(queued)) if queued else None)

    def enqueue(self, scope: str, key: str, seq: str, invocation_id: str) -> None:
        """Put `invocation_id` in the queue of `scope/key` at `seq`: one UpdateItem of `LOCK`,
        `ADD queued {"{seq}#{invocation_id}"}` (a set: enqueueing again changes nothing)."""
        self._update_key(
            scope, key, "ADD #queued :entries", names={"#queued": "queued"},
            values={":entries": {"SS": [queue_entry(seq, invocation_id)]}},
        )  # fmt: skip

    def dequeue(self, scope: str, key: str, seq: str, invocation_id: str) -> None:
        """Take that entry out of the queue (one conditional UpdateItem); an absent entry changes nothing."""
        entry = queue_entry(seq, invocation_id)
        with contextlib.suppress(StoreConflict):
            self._update_key(
                scope, key, "DELETE #queued :entries", names={"#queued": "queued"},
                values={":entries": {"SS": [entry]}, ":entry": {"S": entry}}, condition="contains(#queued, :entry)",
            )  # fmt: skip

    # --- workflows -------------------------------------------------------------------------------

    def complete_promise(self, scope: str, key: str, name: str, promise: PromiseRecord) -> PromiseRecord:
        """Complete promise `name` of workflow `scope/key` unless it is completed: the first completion wins.

        One PutItem of `P#{h(name)}` if absent; if it was there, one consistent GetItem.

        Returns:
            `promise` if this call completed it, else the promise as stored by the first completion.

        Raises:
            ItemTooLarge: The promise's value does not fit in one 400 KB item; nothing was written.
            StoreConflict: The promise stayed completed while its item kept vanishing (TTL deletion
                racing the read, several times over); practically never.
        """
        model = self._promises
        item = model(
            keyed_pk(scope, key),
            promise_sk(name),
            scope=scope,
            key=key,
            name=name,
            value=promise.value,
            failure=None if promise.failure is None else dict(promise.failure),
            completed_by=promise.completed_by,
        )
        size = len(promise.value or b"")
        too_large = f"{scope}/{key}: promise '{name}' ({size} bytes) does not fit in one DynamoDB item (400 KB)"
        for _ in range(_FIRST_WINS_ROUNDS):
            if _won(lambda: item.save(condition=item_absent(model)), too_large=too_large):
                return promise
            stored = self.get_promise(scope, key, name)
            if stored is not None:
                return stored
        raise StoreConflict(f"workflow {scope}/{key}: promise '{name}' could neither be completed nor read")

    def get_promise(self, scope: str, key: str, name: str) -> PromiseRecord | None:
        """Promise `name` of workflow `scope/key` if it is completed, else None (consistent GetItem)."""
        try:
            item = self._promises.get(keyed_pk(scope, key), promise_sk(name), consistent_read=True)
        except self._promises.DoesNotExist:
            return None
        return promise_record(item)

    def add_promise_waiter(self, scope: str, key: str, name: str, invocation_id: str) -> None:
        """Record that `invocation_id` awaits promise `name` (one PutItem; adding it again changes nothing)."""
        self._waiters(
            keyed_pk(scope, key), waiter_sk(name, invocation_id), scope=scope, key=key, name=name,
            invocation_id=invocation_id,
        ).save()  # fmt: skip

    def promise_waiters(self, scope: str, key: str, name: str) -> list[str]:
        """Invocations awaiting promise `name`, ordered by id (one strongly consistent query, paged)."""
        model = self._waiters
        items = model.query(keyed_pk(scope, key), model.sk.startswith(waiters_prefix(name)), consistent_read=True)
        return [item.invocation_id for item in items]

    # --- retention -------------------------------------------------------------------------------

    def expire_keyed(self, scope: str, key: str, expires_at_s: int) -> None:
        """Set the TTL `expires_at` of every item of `scope/key` (key item, values stored apart, promises, waiters).

        A keys-only query of the partition, then one UpdateItem per item (DynamoDB has no batch
        update), each conditional on the item still existing so that one deleted meanwhile is not
        recreated. Items written later carry no TTL unless their writer sets one.

        Args:
            scope: The service name.
            key: The object key or workflow id.
            expires_at_s: When the items expire, epoch seconds; 0 removes their TTL instead.
        """
        model: type[KeyedItem] = self._state
        action = model.expires_at_s.set(expires_at_s) if expires_at_s else model.expires_at_s.remove()
        pk = keyed_pk(scope, key)
        for sk in self._sort_keys(scope, key):
            _won(
                lambda sk=sk: self._connection.update_item(pk, sk, actions=[action], condition=item_exists(model)),
                too_large=f"{scope}/{key}: item {sk} does not fit in one DynamoDB item (400 KB)",
            )

    def delete_keyed(self, scope: str, key: str) -> None:
        """Delete every item of `scope/key`, and its listing item (`state_keys`): a keys-only query,
        then one BatchWriteItem per 25 deletes (one, for the listing, if the partition is empty:
        TTL may have taken the partition and left the listing).

        For a workflow whose retention ended, so that a new run with its id starts from nothing.
        Idempotent.

        Raises:
            PermissionError: This store may not delete items (`DynamoDBStore(may_delete=False)`).
        """
        self._check_may_delete("delete_keyed")
        pk = keyed_pk(scope, key)
        sort_keys = self._sort_keys(scope, key)
        model = self._state
        with model.batch_write() as batch:
            for sk in sort_keys:
                batch.delete(model(pk, sk))
            batch.delete(self._listing_item(scope, key))  # in the same batch: no request of its own
