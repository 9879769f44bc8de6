"""Virtual objects and workflows, the keyed half of `DynamoDBStore`: state, lock, inbox, run claim, promises.

Everything of one object key or workflow id lives in one partition, `OBJ#{scope}#{sha256 hex of key}`
(`scope` is the service name; the key is hashed because it is any UTF-8 string, possibly longer than
DynamoDB's 2048-byte partition key limit). Every item also holds the raw `scope` and `key`, and may
hold the TTL attribute `expires_at` (epoch seconds). Item templates and key functions live in
`adapters.aws.store_items`.

| item | `SK` | attributes |
| --- | --- | --- |
| state entry | `S#{sha256 hex of state key}` | `state_key` (binary), `value` (binary) |
| lock | `LOCK` | `holder` (absent: free) |
| inbox entry | `Q#{seq}#{invocation_id}` | `seq`, `invocation_id` |
| workflow run claim | `RUN` | `invocation_id` |
| durable promise | `P#{sha256 hex of name}` | `name`, `value` (binary, optional), `failure` (JSON), `completed_by` |
| promise waiter | `W#{sha256 hex of name}#{invocation_id}` | `name`, `invocation_id` |

Reads are strongly consistent. State writes are plain (the caller holds the object's lock); the lock,
the run claim and promise completion are single conditional writes, so of concurrent callers exactly
one wins.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from pynamodb.connection import TableConnection
from pynamodb.pagination import ResultIterator

from adapters.aws.store_items import (
    INBOX_PREFIX,
    LOCK_SK,
    STATE_PREFIX,
    InboxItem,
    KeyedItem,
    LockItem,
    PromiseItem,
    StateItem,
    WaiterItem,
    bind,
    inbox_sk,
    item_absent,
    item_exists,
    keyed_pk,
    promise_record,
    promise_sk,
    state_sk,
    translated_write,
    waiter_sk,
    waiters_prefix,
)
from control_plane.ports import PromiseRecord, StoreConflict

_FIRST_WINS_ROUNDS = 3
"""Put-if-absent, then read the winner: retried if the winner's item vanished in between (TTL)."""


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


class KeyedStore:
    """The `Store` methods for virtual objects and workflows; `DynamoDBStore` binds the item classes.

    Attributes:
        _connection: The store's counting table connection.
        _state: The store's bound `StateItem`.
        _locks: The store's bound `LockItem`.
        _inbox: The store's bound `InboxItem`.
        _promises: The store's bound `PromiseItem`.
        _waiters: The store's bound `WaiterItem`.
    """

    _connection: TableConnection
    _state: type[StateItem]
    _locks: type[LockItem]
    _inbox: type[InboxItem]
    _promises: type[PromiseItem]
    _waiters: type[WaiterItem]

    def _bind_keyed(self, meta: type, connection: TableConnection) -> None:
        """Bind the keyed item templates to the store's table and connection (see `store_items.bind`)."""
        self._state = bind(StateItem, meta, connection)
        self._locks = bind(LockItem, meta, connection)
        self._inbox = bind(InboxItem, meta, connection)
        self._promises = bind(PromiseItem, meta, connection)
        self._waiters = bind(WaiterItem, meta, connection)

    def _sort_keys(self, scope: str, key: str, prefix: str | None = None) -> list[str]:
        """Sort keys of the items of `scope/key` (those starting with `prefix`, if given).

        One strongly consistent query projected to the keys, paged (each page is one request).
        """
        args: dict[str, Any] = {"consistent_read": True, "attributes_to_get": ["PK", "SK"]}
        if prefix is not None:
            args["range_key_condition"] = self._state.sk.startswith(prefix)
        pages: ResultIterator[dict[str, Any]] = ResultIterator(self._connection.query, (keyed_pk(scope, key),), args)
        return [raw["SK"]["S"] for raw in pages]

    # --- state -----------------------------------------------------------------------------------

    def load_state(self, scope: str, key: str) -> dict[bytes, bytes]:
        """The whole state of `scope/key`: one strongly consistent query of its `S#` items, paged.

        Returns:
            `{state key: value}`; empty if the key has no state.
        """
        model = self._state
        items = model.query(keyed_pk(scope, key), model.sk.startswith(STATE_PREFIX), consistent_read=True)
        return {item.state_key: item.value for item in items}

    def put_state(self, scope: str, key: str, state_key: bytes, value: bytes, expires_at_s: int = 0) -> None:
        """Store one state entry, replacing its previous value (one PutItem; the caller holds the lock).

        Args:
            scope: The service name.
            key: The object key or workflow id.
            state_key: The state entry's name (bytes, any length up to the item limit).
            value: Its value; may be empty.
            expires_at_s: TTL of the entry in epoch seconds; 0 keeps it forever.

        Raises:
            ItemTooLarge: The entry does not fit in one 400 KB item; nothing was written.
        """
        item = self._state(
            keyed_pk(scope, key),
            state_sk(state_key),
            scope=scope,
            key=key,
            state_key=state_key,
            value=value,
            expires_at_s=expires_at_s or None,
        )
        too_large = (
            f"{scope}/{key}: the state entry {state_key[:64]!r} ({len(value)} bytes) does not fit in one DynamoDB "
            "item (400 KB); keep state values below ~350 KB"
        )
        with translated_write(too_large=too_large):
            item.save()

    def delete_state(self, scope: str, key: str, state_key: bytes) -> None:
        """Remove one state entry (one DeleteItem); removing an absent entry does nothing."""
        self._state(keyed_pk(scope, key), state_sk(state_key)).delete()

    def clear_state(self, scope: str, key: str) -> None:
        """Delete every state entry of `scope/key`: a keys-only query, then BatchWriteItem deletes.

        Each query page and each batch of up to 25 deletes is one request; pynamodb resends
        unprocessed deletes a few times and raises `pynamodb.exceptions.PutError` if some remain.
        Other items of the partition (lock, inbox, promises) are kept.
        """
        model = self._state
        pk = keyed_pk(scope, key)
        with model.batch_write() as batch:
            for sk in self._sort_keys(scope, key, STATE_PREFIX):
                batch.delete(model(pk, sk))

    # --- lock and inbox --------------------------------------------------------------------------

    def try_lock(self, scope: str, key: str, invocation_id: str) -> bool:
        """Take the lock of `scope/key` for `invocation_id`, if it is free or held by it already.

        One UpdateItem of `LOCK`: `SET holder = :id` if `attribute_not_exists(holder) OR holder = :id`.

        Returns:
            True if `invocation_id` holds the lock now; False if another invocation does.
        """
        model = self._locks
        actions = [model.holder.set(invocation_id), model.scope.set(scope), model.key.set(key)]
        condition = model.holder.does_not_exist() | (model.holder == invocation_id)
        return _won(
            lambda: self._connection.update_item(keyed_pk(scope, key), LOCK_SK, actions=actions, condition=condition),
            too_large=f"{scope}/{key}: the lock item does not fit in one DynamoDB item (400 KB)",
        )

    def unlock(self, scope: str, key: str, invocation_id: str) -> bool:
        """Release the lock of `scope/key` if `invocation_id` holds it.

        One UpdateItem of `LOCK`: `REMOVE holder` if `holder = :id` (a missing lock item is not
        created).

        Returns:
            True if it held the lock and released it; False otherwise (nothing changed).
        """
        model = self._locks
        return _won(
            lambda: self._connection.update_item(
                keyed_pk(scope, key), LOCK_SK, actions=[model.holder.remove()], condition=model.holder == invocation_id
            ),
            too_large=f"{scope}/{key}: the lock item does not fit in one DynamoDB item (400 KB)",
        )

    def lock_holder(self, scope: str, key: str) -> str | None:
        """The invocation holding the lock of `scope/key`, or None (one strongly consistent GetItem)."""
        try:
            item = self._locks.get(keyed_pk(scope, key), LOCK_SK, consistent_read=True)
        except self._locks.DoesNotExist:
            return None
        return item.holder

    def enqueue(self, scope: str, key: str, seq: str, invocation_id: str) -> None:
        """Put `invocation_id` in the inbox of `scope/key` at `seq` (one PutItem; enqueueing again changes nothing)."""
        pk = keyed_pk(scope, key)
        self._inbox(pk, inbox_sk(seq, invocation_id), scope=scope, key=key, seq=seq, invocation_id=invocation_id).save()

    def dequeue(self, scope: str, key: str, seq: str, invocation_id: str) -> None:
        """Remove that inbox entry (one DeleteItem); removing an absent entry does nothing."""
        self._inbox(keyed_pk(scope, key), inbox_sk(seq, invocation_id)).delete()

    def inbox_head(self, scope: str, key: str) -> tuple[str, str] | None:
        """The earliest inbox entry of `scope/key` (one strongly consistent query, limit 1).

        Returns:
            `(seq, invocation_id)`, or None if the inbox is empty.
        """
        model = self._inbox
        items = model.query(keyed_pk(scope, key), model.sk.startswith(INBOX_PREFIX), consistent_read=True, limit=1)
        head = next(iter(items), None)
        return None if head is None else (head.seq, head.invocation_id)

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
        """Set the TTL `expires_at` of every item of `scope/key` (state, lock, inbox, run claim, promises, waiters).

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
        """
        pk = keyed_pk(scope, key)
        sort_keys = self._sort_keys(scope, key)
        if not sort_keys:
            return
        model = self._state
        with model.batch_write() as batch:
            for sk in sort_keys:
                batch.delete(model(pk, sk))
