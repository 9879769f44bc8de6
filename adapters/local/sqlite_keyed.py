"""Virtual objects and workflows, the keyed half of `SQLiteStore`: state, lock, queue, promises.

Tables (created with the others by `SQLiteStore.ensure_schema`):

| table | key | columns |
| --- | --- | --- |
| `object_keys` | `(scope, key)` | `holder` (NULL: free), `expires_at_s` |
| `queue` | `(scope, key, seq, invocation_id)` | calls waiting for the key; the head is the smallest `seq` |
| `slots` | `(scope, key, holder)` | the holders of a concurrency limit's slots (`control_plane.limits`) |
| `rates` | `(scope, key)` | `tat_ms`: a rate limit's reference time (`limits.reserve`) |
| `state` | `(scope, key, state_key)` | `value`, `expires_at_s` |
| `promises` | `(scope, key, name)` | `value`, `failure` (JSON), `completed_by`, `expires_at_s` |
| `promise_waiters` | `(scope, key, name, invocation_id)` | `expires_at_s` |

Each transition of a key (take, enqueue, grant, release, a fenced state write) is one `BEGIN
IMMEDIATE` transaction that checks the holder and the queue and writes, the conditions of
`adapters.aws.store_keyed` read as SQL. `expires_at_s` is the TTL DynamoDB would act on; here it is
kept for inspection only (a workflow's keyed rows are removed by `delete_keyed` when its retention
ends).
"""

from __future__ import annotations

import contextlib
import json
import sqlite3
from collections.abc import Mapping
from typing import Any

from control_plane.limits import reserve, slot_free
from control_plane.ports import MAX_ITEM_BYTES, MAX_MESSAGE_BYTES, ItemTooLarge, PromiseRecord, StoreConflict

KEYED_TABLES = ("state", "queue", "promises", "promise_waiters", "object_keys", "slots", "rates")


def item_size(values: Mapping[str, Any]) -> int:
    """The size DynamoDB would count for an item holding `values` (bytes): attribute names plus values.

    Strings count their UTF-8 bytes, bytes their length, numbers ~21 bytes at most, sets and lists
    their members, mappings their JSON; None (an absent attribute) counts nothing. An estimate on
    the safe side, so what fits here fits in DynamoDB's 400 KB.
    """
    total = 0
    for name, value in values.items():
        if value is None:
            continue
        total += len(name.encode()) + _value_size(value)
    return total


BLOB_FROM_BYTES = 64 * 1024
"""A binary value above this (bytes) counts as a reference to a blob (`BLOB_REFERENCE_BYTES`), as
`DynamoDBStore` with a blob store keeps such a value outside its item; the SQLite store keeps it in
its own row. A value above `MAX_MESSAGE_BYTES` counts whole, so it never fits."""
BLOB_REFERENCE_BYTES = 256


def _value_size(value: object) -> int:
    if isinstance(value, bytes | bytearray):
        if BLOB_FROM_BYTES < len(value) <= MAX_MESSAGE_BYTES:
            return BLOB_REFERENCE_BYTES
        return len(value)
    if isinstance(value, str):
        return len(value.encode())
    if isinstance(value, bool | int | float):
        return 21
    if isinstance(value, set | frozenset | list | tuple):
        return sum(_value_size(v) + 1 for v in value)
    return len(json.dumps(value, default=str).encode())


class KeyedTables:
    """`control_plane.ports.KeyStore` (virtual objects and workflows); `SQLiteStore` provides `_write`/`_read`."""

    KEYED_SCHEMA = """
    CREATE TABLE IF NOT EXISTS object_keys (
        scope TEXT NOT NULL, key TEXT NOT NULL, holder TEXT, expires_at_s INTEGER,
        PRIMARY KEY (scope, key)
    ) WITHOUT ROWID;
    CREATE TABLE IF NOT EXISTS queue (
        scope TEXT NOT NULL, key TEXT NOT NULL, seq TEXT NOT NULL, invocation_id TEXT NOT NULL,
        expires_at_s INTEGER,
        PRIMARY KEY (scope, key, seq, invocation_id)
    ) WITHOUT ROWID;
    CREATE TABLE IF NOT EXISTS rates (
        scope TEXT NOT NULL, key TEXT NOT NULL, tat_ms INTEGER NOT NULL, expires_at_s INTEGER,
        PRIMARY KEY (scope, key)
    ) WITHOUT ROWID;
    CREATE TABLE IF NOT EXISTS slots (
        scope TEXT NOT NULL, key TEXT NOT NULL, holder TEXT NOT NULL, expires_at_s INTEGER,
        PRIMARY KEY (scope, key, holder)
    ) WITHOUT ROWID;
    CREATE TABLE IF NOT EXISTS state (
        scope TEXT NOT NULL, key TEXT NOT NULL, state_key BLOB NOT NULL, value BLOB NOT NULL,
        expires_at_s INTEGER,
        PRIMARY KEY (scope, key, state_key)
    ) WITHOUT ROWID;
    CREATE TABLE IF NOT EXISTS promises (
        scope TEXT NOT NULL, key TEXT NOT NULL, name TEXT NOT NULL, value BLOB, failure TEXT,
        completed_by TEXT NOT NULL, expires_at_s INTEGER,
        PRIMARY KEY (scope, key, name)
    ) WITHOUT ROWID;
    CREATE TABLE IF NOT EXISTS promise_waiters (
        scope TEXT NOT NULL, key TEXT NOT NULL, name TEXT NOT NULL, invocation_id TEXT NOT NULL,
        expires_at_s INTEGER,
        PRIMARY KEY (scope, key, name, invocation_id)
    ) WITHOUT ROWID;
    """

    def _write(self, method: str) -> contextlib.AbstractContextManager[sqlite3.Connection]:
        raise NotImplementedError

    def _read(self, method: str) -> contextlib.AbstractContextManager[sqlite3.Connection]:
        raise NotImplementedError

    # --- helpers ---------------------------------------------------------------------------------

    @staticmethod
    def _holder(db: sqlite3.Connection, scope: str, key: str) -> str | None:
        row = db.execute("SELECT holder FROM object_keys WHERE scope = ? AND key = ?", (scope, key)).fetchone()
        return None if row is None else row["holder"]

    @staticmethod
    def _set_holder(db: sqlite3.Connection, scope: str, key: str, holder: str | None) -> None:
        db.execute(
            "INSERT INTO object_keys (scope, key, holder) VALUES (?, ?, ?) "
            "ON CONFLICT (scope, key) DO UPDATE SET holder = excluded.holder",
            (scope, key, holder),
        )

    @staticmethod
    def _head(db: sqlite3.Connection, scope: str, key: str) -> tuple[str, str] | None:
        row = db.execute(
            "SELECT seq, invocation_id FROM queue WHERE scope = ? AND key = ? ORDER BY seq, invocation_id LIMIT 1",
            (scope, key),
        ).fetchone()
        return None if row is None else (row["seq"], row["invocation_id"])

    @staticmethod
    def _state(db: sqlite3.Connection, scope: str, key: str) -> dict[bytes, bytes]:
        rows = db.execute("SELECT state_key, value FROM state WHERE scope = ? AND key = ?", (scope, key)).fetchall()
        return {bytes(row["state_key"]): bytes(row["value"]) for row in rows}

    # --- state -----------------------------------------------------------------------------------

    def load_state(self, scope: str, key: str) -> dict[bytes, bytes]:
        """The whole state of `scope/key`: `{state key: value}`; empty if it has none."""
        with self._read("load_state") as db:
            return self._state(db, scope, key)

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
        """Apply the state changes of one commit in one transaction: `clear` first, then `writes`
        (`{state key: value, or None to remove it}`); idempotent. With `holder`, only while that
        invocation holds the key. `expires_at_s` (the TTL DynamoDB would apply), if not 0, is written to
        the key's `object_keys` row (not to the state rows). One row per entry: like DynamoDB's pages
        (`adapters.aws.store_keyed`), no limit on an object's state, only on each value.

        Raises:
            StoreConflict: `holder` does not hold the key; nothing was written.
            ItemTooLarge: A value (with its key) does not fit in one 400 KB DynamoDB item; nothing was
                written.
        """
        for state_key, value in writes.items():
            if value is not None and (len(value) > MAX_MESSAGE_BYTES or len(state_key) > MAX_ITEM_BYTES - 200):
                raise ItemTooLarge(
                    f"{scope}/{key}: a state value takes {len(value)} bytes, more than the {MAX_MESSAGE_BYTES} "
                    "bytes (32 MiB) a value may take"
                )
        with self._write("apply_state") as db:
            current = self._state(db, scope, key) if clear else {}
            if not writes and not current and not expires_at_s:
                return  # nothing to change: no condition to check (as DynamoDB skips an empty update)
            if holder is not None and self._holder(db, scope, key) != holder:
                raise StoreConflict(f"{scope}/{key}: {holder} does not hold the key")
            if clear:
                db.execute("DELETE FROM state WHERE scope = ? AND key = ?", (scope, key))
            for state_key, value in writes.items():
                if value is None:
                    db.execute(
                        "DELETE FROM state WHERE scope = ? AND key = ? AND state_key = ?", (scope, key, state_key)
                    )
                else:
                    db.execute(
                        "INSERT INTO state (scope, key, state_key, value) VALUES (?, ?, ?, ?) "
                        "ON CONFLICT (scope, key, state_key) DO UPDATE SET value = excluded.value",
                        (scope, key, state_key, value),
                    )
            if expires_at_s:
                db.execute(
                    "INSERT INTO object_keys (scope, key, expires_at_s) VALUES (?, ?, ?) "
                    "ON CONFLICT (scope, key) DO UPDATE SET expires_at_s = excluded.expires_at_s",
                    (scope, key, expires_at_s),
                )

    def clear_state(self, scope: str, key: str) -> None:
        """Remove every state entry of `scope/key`, keeping its lock and queue."""
        self.apply_state(scope, key, {}, clear=True)

    def state_keys(self, scope: str, limit: int) -> list[str]:
        """The keys of `scope` with state rows, sorted, at most `limit`: `SELECT DISTINCT` over the
        `state` table's primary key `(scope, key, state_key)`, so a cleared key is not listed."""
        with self._read("state_keys") as db:
            rows = db.execute(
                "SELECT DISTINCT key FROM state WHERE scope = ? ORDER BY key LIMIT ?", (scope, limit)
            ).fetchall()
        return [row["key"] for row in rows]

    # --- lock and queue --------------------------------------------------------------------------

    def take_key(self, scope: str, key: str, invocation_id: str) -> dict[bytes, bytes] | None:
        """Take the key for a new invocation if nobody holds it and nobody waits (or it holds it
        already), reading its state in the same transaction; None if it must wait its turn."""
        with self._write("take_key") as db:
            holder = self._holder(db, scope, key)
            if holder != invocation_id and (holder is not None or self._head(db, scope, key) is not None):
                return None
            self._set_holder(db, scope, key, invocation_id)
            return self._state(db, scope, key)

    def grant_key(self, scope: str, key: str, seq: str, invocation_id: str) -> bool:
        """Hand the free key to the queued entry and take it out of the queue, in one transaction;
        False if the key is held or the entry is not queued."""
        with self._write("grant_key") as db:
            if self._holder(db, scope, key) is not None:
                return False
            deleted = db.execute(
                "DELETE FROM queue WHERE scope = ? AND key = ? AND seq = ? AND invocation_id = ?",
                (scope, key, seq, invocation_id),
            ).rowcount
            if not deleted:
                return False
            self._set_holder(db, scope, key, invocation_id)
            return True

    def release_key(self, scope: str, key: str, invocation_id: str) -> bool | None:
        """Release the key if `invocation_id` holds it: None if it did not, else whether calls wait."""
        with self._write("release_key") as db:
            if self._holder(db, scope, key) != invocation_id:
                return None
            db.execute("UPDATE object_keys SET holder = NULL WHERE scope = ? AND key = ?", (scope, key))
            return self._head(db, scope, key) is not None

    def key_status(self, scope: str, key: str) -> tuple[str | None, tuple[str, str] | None]:
        """`(holder, (seq, invocation_id) of the queue's head)` of `scope/key`, one snapshot."""
        with self._read("key_status") as db:
            return self._holder(db, scope, key), self._head(db, scope, key)

    def lock_holder(self, scope: str, key: str) -> str | None:
        """The invocation holding the lock of `scope/key`, or None."""
        with self._read("lock_holder") as db:
            return self._holder(db, scope, key)

    # --- concurrency limits: N holders of `scope/key`, the queue above --------------------------

    @staticmethod
    def _slots(db: sqlite3.Connection, scope: str, key: str) -> frozenset[str]:
        rows = db.execute("SELECT holder FROM slots WHERE scope = ? AND key = ?", (scope, key)).fetchall()
        return frozenset(row["holder"] for row in rows)

    def take_slot(self, scope: str, key: str, invocation_id: str, limit: int) -> bool:
        """Take a slot if `limits.slot_free` (fewer than `limit` held, nobody waits) or it holds one
        already, in one transaction; False if it must wait its turn (nothing changed)."""
        with self._write("take_slot") as db:
            holders = self._slots(db, scope, key)
            if invocation_id in holders:
                return True
            if not slot_free(len(holders), limit, self._head(db, scope, key) is not None):
                return False
            db.execute("INSERT INTO slots (scope, key, holder) VALUES (?, ?, ?)", (scope, key, invocation_id))
            return True

    def grant_slot(self, scope: str, key: str, seq: str, invocation_id: str, limit: int) -> bool:
        """Give a free slot (fewer than `limit` held) to the queued entry and take it out of the queue,
        in one transaction; False if all slots are held or the entry is not queued."""
        with self._write("grant_slot") as db:
            if not slot_free(len(self._slots(db, scope, key)), limit, waiting=False):
                return False
            deleted = db.execute(
                "DELETE FROM queue WHERE scope = ? AND key = ? AND seq = ? AND invocation_id = ?",
                (scope, key, seq, invocation_id),
            ).rowcount
            if not deleted:
                return False
            db.execute("INSERT OR IGNORE INTO slots (scope, key, holder) VALUES (?, ?, ?)", (scope, key, invocation_id))
            return True

    def release_slot(self, scope: str, key: str, invocation_id: str) -> bool | None:
        """Release the slot `invocation_id` holds: None if it held none, else whether calls wait."""
        with self._write("release_slot") as db:
            deleted = db.execute(
                "DELETE FROM slots WHERE scope = ? AND key = ? AND holder = ?", (scope, key, invocation_id)
            ).rowcount
            if not deleted:
                return None
            return self._head(db, scope, key) is not None

    def reserve_start(self, scope: str, key: str, now_ms: int, interval_ms: int, burst: int) -> int:
        """Reserve the next start of rate limit `scope/key` (`limits.reserve`), in one transaction."""
        with self._write("reserve_start") as db:
            row = db.execute("SELECT tat_ms FROM rates WHERE scope = ? AND key = ?", (scope, key)).fetchone()
            start, tat = reserve(0 if row is None else int(row["tat_ms"]), now_ms, interval_ms, burst)
            db.execute(
                "INSERT INTO rates (scope, key, tat_ms) VALUES (?, ?, ?) "
                "ON CONFLICT (scope, key) DO UPDATE SET tat_ms = excluded.tat_ms",
                (scope, key, tat),
            )
            return start

    def slot_status(self, scope: str, key: str) -> tuple[frozenset[str], tuple[str, str] | None]:
        """`(holders, (seq, invocation_id) of the queue's head)` of `scope/key`, one snapshot."""
        with self._read("slot_status") as db:
            return self._slots(db, scope, key), self._head(db, scope, key)

    def enqueue(self, scope: str, key: str, seq: str, invocation_id: str) -> None:
        """Queue `invocation_id` at `seq` (again: nothing changes)."""
        with self._write("enqueue") as db:
            db.execute(
                "INSERT OR IGNORE INTO queue (scope, key, seq, invocation_id) VALUES (?, ?, ?, ?)",
                (scope, key, seq, invocation_id),
            )

    def dequeue(self, scope: str, key: str, seq: str, invocation_id: str) -> None:
        """Take that entry out of the queue; an absent entry changes nothing."""
        with self._write("dequeue") as db:
            db.execute(
                "DELETE FROM queue WHERE scope = ? AND key = ? AND seq = ? AND invocation_id = ?",
                (scope, key, seq, invocation_id),
            )

    # --- workflows -------------------------------------------------------------------------------

    def complete_promise(self, scope: str, key: str, name: str, promise: PromiseRecord) -> PromiseRecord:
        """Complete promise `name` unless it is completed; the promise as stored (the first completion wins).

        Raises:
            ItemTooLarge: The value does not fit in one 400 KB DynamoDB item; nothing was written.
        """
        size = len(promise.value or b"")
        if size > MAX_MESSAGE_BYTES or len(json.dumps(promise.failure)) + len(name) > MAX_ITEM_BYTES - 200:
            raise ItemTooLarge(
                f"{scope}/{key}: promise '{name}' ({size} bytes) takes more than a value may (32 MiB)"
            )
        failure = None if promise.failure is None else json.dumps(dict(promise.failure))
        with self._write("complete_promise") as db:
            inserted = db.execute(
                "INSERT OR IGNORE INTO promises (scope, key, name, value, failure, completed_by) "
                "VALUES (?, ?, ?, ?, ?, ?)",
                (scope, key, name, promise.value, failure, promise.completed_by),
            ).rowcount
            if inserted:
                return promise
            stored = self._promise(db, scope, key, name)
        assert stored is not None  # in the same transaction as the failed insert
        return stored

    @staticmethod
    def _promise(db: sqlite3.Connection, scope: str, key: str, name: str) -> PromiseRecord | None:
        row = db.execute(
            "SELECT value, failure, completed_by FROM promises WHERE scope = ? AND key = ? AND name = ?",
            (scope, key, name),
        ).fetchone()
        if row is None:
            return None
        value = None if row["value"] is None else bytes(row["value"])
        failure = None if row["failure"] is None else json.loads(row["failure"])
        return PromiseRecord(value=value, failure=failure, completed_by=row["completed_by"])

    def get_promise(self, scope: str, key: str, name: str) -> PromiseRecord | None:
        """Promise `name` of workflow `scope/key` if it is completed, else None."""
        with self._read("get_promise") as db:
            return self._promise(db, scope, key, name)

    def add_promise_waiter(self, scope: str, key: str, name: str, invocation_id: str) -> None:
        """Record that `invocation_id` awaits promise `name` (adding it again changes nothing)."""
        with self._write("add_promise_waiter") as db:
            db.execute(
                "INSERT OR IGNORE INTO promise_waiters (scope, key, name, invocation_id) VALUES (?, ?, ?, ?)",
                (scope, key, name, invocation_id),
            )

    def promise_waiters(self, scope: str, key: str, name: str) -> list[str]:
        """Invocations awaiting promise `name`, ordered by id."""
        with self._read("promise_waiters") as db:
            rows = db.execute(
                "SELECT invocation_id FROM promise_waiters WHERE scope = ? AND key = ? AND name = ? "
                "ORDER BY invocation_id",
                (scope, key, name),
            ).fetchall()
        return [row["invocation_id"] for row in rows]

    # --- retention -------------------------------------------------------------------------------

    def expire_keyed(self, scope: str, key: str, expires_at_s: int) -> None:
        """Set `expires_at_s` on every row of `scope/key` (0: none); rows written later carry none."""
        with self._write("expire_keyed") as db:
            for table in KEYED_TABLES:
                db.execute(
                    f"UPDATE {table} SET expires_at_s = ? WHERE scope = ? AND key = ?",
                    (expires_at_s or None, scope, key),
                )

    def delete_keyed(self, scope: str, key: str) -> None:
        """Delete every row of `scope/key` (state, lock, queue, promises, waiters); idempotent."""
        with self._write("delete_keyed") as db:
            for table in KEYED_TABLES:
                db.execute(f"DELETE FROM {table} WHERE scope = ? AND key = ?", (scope, key))
