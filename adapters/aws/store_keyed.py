"""Virtual objects and workflows, the keyed half of `DynamoDBStore`: state, lock, the key's queue, promises.

Everything of one object key or workflow id lives in one partition, `OBJ#{scope}#{sha256 hex of key}`
(`scope` is the service name; the key is hashed because it is any UTF-8 string, possibly longer than
DynamoDB's 2048-byte partition key limit). Every item also holds the raw `scope` and `key`, and may
hold the TTL attribute `expires_at` (epoch seconds). Item templates and key functions live in
`adapters.aws.store_items`.

| item | `SK` | attributes |
| --- | --- | --- |
| key item | `LOCK` | `holder`, `queued`, `S#…` state attributes (below) |
| large state value | `S#{sha256 hex of state key}#{sha256 hex of value, 32}` | `state_key`, `value` (binary) |
| durable promise | `P#{sha256 hex of name}` | `name`, `value` (binary, optional), `failure` (JSON), `completed_by` |
| promise waiter | `W#{sha256 hex of name}#{invocation_id}` | `name`, `invocation_id` |

The key item carries the lock (`holder`, absent: free), the queue (`queued`, a string set of
`{seq}#{invocation_id}`, absent: nobody waits; the head is the smallest) and the state: one map
attribute `S#{sha256 hex of state key}` per entry, `{k: key, v: value}`, or `{k: key, r: SK}` for a
value above `SPILL_BYTES` stored in its own item. So each transition of a key is one single-item
conditional write on `LOCK` (no transactions):

- take a free key at creation (`take_key`): `SET holder` if `(attribute_not_exists(holder) AND
  attribute_not_exists(queued)) OR holder = :id`, ALL_NEW: the state comes back in the same request;
- queue up (`enqueue`): `ADD queued {entry}` (idempotent);
- grant an entry (`grant_key`): `SET holder DELETE queued {entry}` if `attribute_not_exists(holder)
  AND contains(queued, :entry)`;
- release (`release_key`): `REMOVE holder` if `holder = :id`, ALL_NEW: does anyone wait?;
- look up the lock and queue (`key_status`, `lock_holder`): a GetItem projected to `holder`, `queued`;
- the state changes of one commit (`apply_state`): `SET`/`REMOVE` of `S#…` attributes, if `holder =
  :id` for an exclusive handler (a workflow's run writes unconditionally), UPDATED_OLD: large values
  no longer referred to are deleted after.

Reads are strongly consistent. Of concurrent callers of a conditional write exactly one wins; a
promise completion is a single conditional write too (a workflow's `run` is claimed by creating its
invocation, whose id is deterministic). Items of tables written before this layout (one `S#{h(key)}`
item per state entry, `Q#…` items of a former per-key inbox) are neither read nor migrated.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable, Mapping
from typing import Any

from botocore.exceptions import ClientError
from pynamodb.connection import TableConnection
from pynamodb.exceptions import UpdateError
from pynamodb.pagination import ResultIterator

from adapters.aws.store_items import (
    LOCK_SK,
    SPILL_BYTES,
    STATE_PREFIX,
    TTL_ATTRIBUTE,
    KeyedItem,
    LockItem,
    PromiseItem,
    StateItem,
    TimerItem,
    WaiterItem,
    bind,
    item_absent,
    item_exists,
    keyed_pk,
    promise_record,
    promise_sk,
    queue_entry,
    spill_sk,
    split_queue_entry,
    state_sk,
    translated_write,
    waiter_sk,
    waiters_prefix,
)
from control_plane.ports import PromiseRecord, StoreConflict

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


def _state_of(item: Mapping[str, Any]) -> tuple[dict[bytes, bytes], dict[bytes, str]]:
    """`({state key: value} held in the key item, {state key: sort key of its item} stored apart)`."""
    state: dict[bytes, bytes] = {}
    spilled: dict[bytes, str] = {}
    for name, raw in item.items():
        if not name.startswith(STATE_PREFIX):
            continue
        entry = raw["M"]
        if "r" in entry:
            spilled[entry["k"]["B"]] = entry["r"]["S"]
        else:
            state[entry["k"]["B"]] = entry["v"]["B"]
    return state, spilled


def _spill_refs(item: Mapping[str, Any]) -> set[str]:
    """Sort keys of the items stored apart that state attributes of `item` (raw) refer to."""
    return {raw["M"]["r"]["S"] for name, raw in item.items() if name.startswith(STATE_PREFIX) and "r" in raw["M"]}


class KeyedStore:
    """The `Store` methods for virtual objects and workflows; `DynamoDBStore` binds the item classes.

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

    def _bind_keyed(self, meta: type, connection: TableConnection) -> None:
        """Bind the keyed item templates to the store's table and connection (see `store_items.bind`)."""
        self._state = bind(StateItem, meta, connection)
        self._locks = bind(LockItem, meta, connection)
        self._promises = bind(PromiseItem, meta, connection)
        self._waiters = bind(WaiterItem, meta, connection)

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

        With `state=False` only `holder` and `queued` are read (a projection), so a lock or queue
        look-up does not pay read capacity for the state on the same item.
        """
        request: dict[str, Any] = {
            "TableName": self._connection.table_name,
            "Key": self._key_item(scope, key),
            "ConsistentRead": True,
        }
        if not state:
            request["ProjectionExpression"] = "#holder, #queued"
            request["ExpressionAttributeNames"] = {"#holder": "holder", "#queued": "queued"}
        answer = self._connection.connection.dispatch("GetItem", request)
        return dict((answer or {}).get("Item", {}))

    # --- state -----------------------------------------------------------------------------------

    def load_state(self, scope: str, key: str) -> dict[bytes, bytes]:
        """The whole state of `scope/key`: one consistent GetItem of `LOCK`, plus one consistent
        BatchGetItem per 100 values stored apart (only when there are such values).

        Returns:
            `{state key: value}`; empty if the key has no state.

        Raises:
            StoreConflict: The values stored apart kept changing between the two reads (see
                `_with_spilled`); practically never.
        """
        return self._with_spilled(scope, key, self._get_key(scope, key))

    def _with_spilled(self, scope: str, key: str, item: Mapping[str, Any]) -> dict[bytes, bytes]:
        """The state the raw key item holds, with the values stored apart read in (BatchGetItem).

        The two reads are not one snapshot: the key's holder may replace a large value in between,
        deleting the item `item` refers to. Then `LOCK` is read again (a consistent GetItem) and the
        values with it, up to `_STATE_READ_ROUNDS` times, so a state with an entry missing is never
        returned.

        Raises:
            StoreConflict: A referenced value was still missing after `_STATE_READ_ROUNDS` reads.
        """
        for _ in range(_STATE_READ_ROUNDS):
            state, spilled = _state_of(item)
            if not spilled:
                return state
            pk = keyed_pk(scope, key)
            items = self._state.batch_get([(pk, sk) for sk in spilled.values()], consistent_read=True)
            found = {item.sk: item.value for item in items}
            if all(sk in found for sk in spilled.values()):
                state.update((state_key, found[sk]) for state_key, sk in spilled.items())
                return state
            item = self._get_key(scope, key)  # a value was replaced between the two reads: read again
        raise StoreConflict(
            f"{scope}/{key}: a state value stored apart was missing in {_STATE_READ_ROUNDS} consistent reads "
            f"(replaced each time between the reads of LOCK and of the value, or deleted)"
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
        """Apply the state changes of one commit: one UpdateItem of `LOCK` (SET and REMOVE attributes).

        A value above `SPILL_BYTES` goes to its own item `S#{h(state key)}#{h(value)}` first (one
        PutItem; content-addressed, so re-applying writes the same item) and `LOCK` refers to it; the
        item it replaces is deleted after the update (the update returns the old references,
        UPDATED_OLD). If the update is fenced out (`holder`), the items it just stored apart are
        deleted again, after one consistent GetItem of `LOCK` shows which ones it does not refer to;
        a concurrent holder writing the very same value for the same state key at that moment is
        the one case that could lose a value. `clear` removes every entry first, which takes one
        consistent GetItem to learn them. Applying the same changes again gives the same state
        (effects are re-applied after a crash).

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
            ItemTooLarge: The state does not fit in the item; nothing was written.
        """
        pk = keyed_pk(scope, key)
        names: dict[str, str] = {}
        values: dict[str, Any] = {}
        sets: list[str] = []
        removes: list[str] = []
        if clear:
            current = [n for n in self._get_key(scope, key) if n.startswith(STATE_PREFIX)]
            wanted = {state_sk(k) for k in writes}
            for i, name in enumerate(n for n in current if n not in wanted):
                names[f"#c{i}"] = name
                removes.append(f"#c{i}")
        for i, (state_key, value) in enumerate(writes.items()):
            names[f"#s{i}"] = state_sk(state_key)
            if value is None:
                removes.append(f"#s{i}")
                continue
            entry: dict[str, Any] = {"k": {"B": state_key}}
            if len(value) > SPILL_BYTES:
                sk = spill_sk(state_key, value)
                self._state(pk, sk, scope=scope, key=key, state_key=state_key, value=value).save()
                entry["r"] = {"S": sk}
            else:
                entry["v"] = {"B": value}
            values[f":s{i}"] = {"M": entry}
            sets.append(f"#s{i} = :s{i}")
        if expires_at_s:
            names["#ttl"] = TTL_ATTRIBUTE
            values[":ttl"] = {"N": str(expires_at_s)}
            sets.append("#ttl = :ttl")
        if not sets and not removes:
            return
        condition = None
        if holder is not None:
            names["#holder"] = "holder"
            values[":holder"] = {"S": holder}
            condition = "#holder = :holder"
        update = "SET " + ", ".join(sets) if sets else ""
        if removes:
            update += " REMOVE " + ", ".join(removes)
        kept = {v["M"]["r"]["S"] for v in values.values() if "M" in v and "r" in v["M"]}
        try:
            old = self._update_key(
                scope, key, update.strip(), condition=condition, names=names, values=values, returning="UPDATED_OLD",
                conflict=f"{scope}/{key}: {holder} does not hold the key",
            )  # fmt: skip
        except StoreConflict:
            # fenced out: the values just stored apart are orphans, unless `LOCK` refers to them
            # already (the same value written before: the items are content-addressed)
            for ref in kept - _spill_refs(self._get_key(scope, key)):
                self._drop(self._state, pk, ref)
            raise
        for ref in _spill_refs(old) - kept:  # values stored apart that nothing refers to any more
            self._drop(self._state, pk, ref)

    def clear_state(self, scope: str, key: str) -> None:
        """Remove every state entry of `scope/key` (one GetItem, then one UpdateItem if there was any).

        The lock and queue on the same item, and the other items of the partition, are kept.
        """
        self.apply_state(scope, key, {}, clear=True)

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
        """Delete every item of `scope/key`: a keys-only query, then one BatchWriteItem per 25 deletes.

        For a workflow whose retention ended, so that a new run with its id starts from nothing.
        Idempotent.

        Raises:
            PermissionError: This store may not delete items (`DynamoDBStore(may_delete=False)`).
        """
        self._check_may_delete("delete_keyed")
        pk = keyed_pk(scope, key)
        sort_keys = self._sort_keys(scope, key)
        if not sort_keys:
            return
        model = self._state
        with model.batch_write() as batch:
            for sk in sort_keys:
                batch.delete(model(pk, sk))
