"""`control_plane.ports.Store` on one SQLite file (Python's `sqlite3`, WAL): the embedded store of `torpor dev`.

One connection, shared by the control plane's threads behind a lock (`check_same_thread=False`);
every write is one transaction opened with `BEGIN IMMEDIATE`, so a conditional transition (read the
row, check the condition, write) is atomic and serialised, as DynamoDB's conditional writes are,
also against another process on the same file. Reads that span several statements run in one
deferred transaction (one snapshot). `synchronous=NORMAL`: a commit survives the process being
killed (not a power cut).

| table | key | what |
| --- | --- | --- |
| `invocations` | `invocation_id` | the record (`record`, JSON; `input_entry`, `output` BLOBs), indexed columns |
| `batches` | `(invocation_id, start_index)` | journal batches |
| `notifications` | `(invocation_id, key)` | stored notifications |
| `timers` | `(due_ms, invocation_id)` | timers, earliest first |
| `deployments` / `services` | id / name | the records as JSON |
| `object_keys` | `(scope, key)` | the lock (`holder`) of an object key or workflow id |
| `queue` | `(scope, key, seq, invocation_id)` | calls waiting for a key, in `seq` order |
| `state` | `(scope, key, state_key)` | keyed state |
| `promises`, `promise_waiters` | `(scope, key, name[, invocation_id])` | durable promises and who awaits them |

The indexed columns of `invocations` are `status`, `created_at_ms`, `service`, `handler`, `key`,
`completion` and `retention_due_ms`. Indexes: `invocations(status, created_at_ms, invocation_id)`
and `(created_at_ms, invocation_id)` for the listing (newest first, no scan),
`invocations(retention_due_ms)` (partial: completed invocations with a retention) for the sweep.

A DynamoDB condition becomes a `SELECT` of the row and a check in Python inside the write's
transaction; a lost condition raises `StoreConflict` with the messages `DynamoDBStore` uses. Sizes
are checked as DynamoDB would (`ItemTooLarge` above 400 KB for an invocation record, a journal
batch, a notification, a promise or the small state values of one key), so what works here fits in
DynamoDB too, with a blob store: a binary value above 64 KiB counts as the reference `DynamoDBStore`
would keep in its item (`sqlite_keyed.BLOB_FROM_BYTES`) and is kept here in its own row, up to
`MAX_MESSAGE_BYTES` (32 MiB). There is no TTL: retention is carried out by the sweep (`due_retention`), and
`expires_at_s` of keyed rows is kept but not acted on.

`request_count` / `request_counts` count one per port call, by method name (`{"append_batch": 3}`).

Faults of the file or its disk: a full disk (`SQLITE_FULL`) raises `StoreUnavailable` with HTTP 507,
an I/O error, a corrupt page, a file that is not a database or cannot be written raise it with 503;
each names the file and the fix, and is logged once (one line) until a write succeeds again. The
transaction was rolled back: nothing of the call was written. `check_integrity` finds corrupt pages
at start. A row whose record cannot be decoded raises `UnreadableRecord` where it is read alone, and
is skipped and named (`InvocationPage.unreadable`) by `list_invocations`.
"""

from __future__ import annotations

import contextlib
import dataclasses
import heapq
import json
import logging
import operator
import os
import sqlite3
import threading
from collections.abc import Iterable, Iterator, Mapping
from contextlib import contextmanager
from itertools import islice
from pathlib import Path
from typing import Any

from adapters.local.sqlite_keyed import KeyedTables, item_size
from adapters.local.sqlite_registry import RegistryTables
from adapters.local.sqlite_schedules import ScheduleTables
from control_plane.ports import (
    INVOCATION_STATUSES,
    MAX_ITEM_BYTES,
    MAX_MESSAGE_BYTES,
    MAX_TIMER_MS,
    InvocationPage,
    InvocationRecord,
    InvocationTransitions,
    ItemTooLarge,
    JournalBatch,
    LoadedInvocation,
    RetentionDue,
    StoreConflict,
    StoredNotification,
    StoreUnavailable,
    UnreadableRecord,
)

__all__ = ["SQLiteFacts", "SQLiteStore"]

log = logging.getLogger(__name__)

COMPLETED = "completed"
RUNNING = "running"
_FIELDS = {f.name: f for f in dataclasses.fields(InvocationRecord)}
_REQUIRED = frozenset(
    n for n, f in _FIELDS.items() if f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING
)
_BLOBS = ("input_entry", "output")
_FILE_FAULTS = frozenset(
    (sqlite3.SQLITE_IOERR, sqlite3.SQLITE_CORRUPT, sqlite3.SQLITE_NOTADB, sqlite3.SQLITE_READONLY,
     sqlite3.SQLITE_CANTOPEN, sqlite3.SQLITE_BUSY, sqlite3.SQLITE_LOCKED, sqlite3.SQLITE_PROTOCOL)
)  # fmt: skip
"""SQLite's primary result codes of a file that cannot be read or written now (`StoreUnavailable`, 503)."""

APPLICATION_ID = 0x546F7270
"""SQLite's `PRAGMA application_id` of a Torpor store ("Torp"): a file without it and with other
tables is another program's, and is refused."""
META_SCHEMA = """
CREATE TABLE IF NOT EXISTS meta (name TEXT PRIMARY KEY, value TEXT NOT NULL);
"""
"""Facts about the file: `short_ids` = it was first written by a Torpor with 16-byte invocation ids."""
SCHEMA_VERSION = 1
"""`PRAGMA user_version` of the tables below; a file with a higher one was written by a newer Torpor."""

SCHEMA = """
CREATE TABLE IF NOT EXISTS invocations (
    invocation_id TEXT PRIMARY KEY,
    status TEXT NOT NULL,
    created_at_ms INTEGER NOT NULL,
    service TEXT NOT NULL,
    handler TEXT NOT NULL,
    key TEXT NOT NULL,
    completion TEXT NOT NULL,
    retention_due_ms INTEGER,
    input_entry BLOB NOT NULL,
    output BLOB,
    record TEXT NOT NULL
);
CREATE INDEX IF NOT EXISTS invocations_by_status ON invocations (status, created_at_ms, invocation_id);
CREATE INDEX IF NOT EXISTS invocations_by_creation ON invocations (created_at_ms, invocation_id);
CREATE INDEX IF NOT EXISTS invocations_by_retention ON invocations (retention_due_ms, invocation_id)
    WHERE retention_due_ms IS NOT NULL;
CREATE TABLE IF NOT EXISTS batches (
    invocation_id TEXT NOT NULL,
    start_index INTEGER NOT NULL,
    entries BLOB NOT NULL,
    epoch INTEGER NOT NULL,
    committed_at_ms INTEGER NOT NULL,
    PRIMARY KEY (invocation_id, start_index)
) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS notifications (
    invocation_id TEXT NOT NULL,
    key TEXT NOT NULL,
    entry BLOB NOT NULL,
    created_at_ms INTEGER NOT NULL,
    PRIMARY KEY (invocation_id, key)
) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS timers (
    due_ms INTEGER NOT NULL,
    invocation_id TEXT NOT NULL,
    PRIMARY KEY (due_ms, invocation_id)
) WITHOUT ROWID;
"""


def _checked_due(due_ms: int) -> int:
    """`due_ms`, if a timer can hold it (as `DynamoDBStore`: 0 .. `MAX_TIMER_MS`)."""
    if not 0 <= due_ms <= MAX_TIMER_MS:
        raise ValueError(f"timer due_ms must be within 0..{MAX_TIMER_MS}, got {due_ms}")
    return due_ms


def _retention_due_ms(journal_expires_at_ms: int | None, expires_at_s: int | None) -> int:
    """When the next part of a completed invocation's retention ends: its journal's, else its record's; 0: never."""
    return journal_expires_at_ms or 1000 * (expires_at_s or 0)


_FIXED_COLUMNS = ("created_at_ms", "service", "handler", "key", "input_entry")
"""Columns of the `invocations` row that hold record fields set at creation."""
_JSON_FIELDS = tuple(name for name in _FIELDS if name not in _BLOBS)
_SET_FIELDS = tuple(name for name, f in _FIELDS.items() if "frozenset" in str(f.type))
_MAPPING_FIELDS = tuple(name for name, f in _FIELDS.items() if "Mapping" in str(f.type))
_encode_json = json.JSONEncoder(separators=(",", ":")).encode


_json_values = operator.attrgetter(*_JSON_FIELDS)  # the fields' values as one tuple, read in C


def _record_json(record: InvocationRecord) -> str:
    """The record's fields except the BLOB columns, as JSON (sets as sorted lists, mappings as objects)."""
    values: dict[str, Any] = dict(zip(_JSON_FIELDS, _json_values(record), strict=True))
    for name in _SET_FIELDS:
        values[name] = sorted(values[name])
    for name in _MAPPING_FIELDS:
        value = values[name]
        if value is not None and type(value) is not dict:
            values[name] = dict(value)
    return _encode_json(values)


def _decoded(row: sqlite3.Row) -> InvocationRecord:
    """The record of an `invocations` row. Raises ValueError, TypeError, KeyError or AttributeError
    for a row that does not hold one (see `_record_of`)."""
    values = json.loads(row["record"])
    values["callers"] = frozenset(values.get("callers") or ())
    values["input_entry"] = bytes(row["input_entry"])
    values["output"] = None if row["output"] is None else bytes(row["output"])
    record = InvocationRecord(**{name: value for name, value in values.items() if name in _FIELDS})
    if record.invocation_id != row["invocation_id"] or not isinstance(record.epoch, int):
        raise ValueError("its record names another invocation or has no whole-number epoch")
    return record


def _record_of(row: sqlite3.Row) -> InvocationRecord:
    """The record of an `invocations` row.

    Raises:
        UnreadableRecord: The row does not hold a record Torpor wrote (changed by hand, damaged).
    """
    try:
        return _decoded(row)
    except (ValueError, TypeError, KeyError, AttributeError) as exc:
        raise UnreadableRecord(_unreadable_reason(row, exc)) from exc


def _unreadable_reason(row: sqlite3.Row, exc: Exception) -> str:
    """Why the row cannot be read, naming the invocation and what to do (one line)."""
    return (
        f"the stored record of invocation {row['invocation_id']} cannot be read ({type(exc).__name__}: {exc}); "
        "it is left as it is in the SQLite store's `invocations` table: restore the file from a backup, or "
        "delete that row"
    )


def _check_batch(invocation_id: str, batch: JournalBatch) -> None:
    """Raise `ValueError` for a negative `batch.start_index`, `ItemTooLarge` for entries that would not
    fit in one DynamoDB item (the limit both stores keep)."""
    if batch.start_index < 0:
        raise ValueError(f"journal batch start_index must be >= 0, got {batch.start_index}")
    if item_size({"PK": f"INV#{invocation_id}", "SK": "J#0000000000", "entries": batch.entries,
                  "epoch": batch.epoch, "committed_at_ms": batch.committed_at_ms}) > MAX_ITEM_BYTES:  # fmt: skip
        raise ItemTooLarge(
            f"invocation {invocation_id}: the journal entries committed at index {batch.start_index} "
            f"({len(batch.entries)} bytes) do not fit in one DynamoDB item (400 KB); keep run results, state "
            "values and call payloads below ~350 KB"
        )


def _insert_batch(db: sqlite3.Connection, invocation_id: str, batch: JournalBatch) -> None:
    """Insert `batch` (one statement, in the caller's transaction); `StoreConflict` if its index is taken."""
    cursor = db.execute(
        "INSERT OR IGNORE INTO batches (invocation_id, start_index, entries, epoch, committed_at_ms) "
        "VALUES (?, ?, ?, ?, ?)",
        (invocation_id, batch.start_index, batch.entries, batch.epoch, batch.committed_at_ms),
    )
    if cursor.rowcount != 1:
        raise StoreConflict(f"invocation {invocation_id}: journal index {batch.start_index} is committed already")


def _checked_changes(changes: Mapping[str, object], caller: str) -> None:
    """Raise `TypeError` as `DynamoDBStore` does for unknown fields or a required field set to None."""
    unknown = sorted(set(changes) - set(_FIELDS))
    if unknown:
        raise TypeError(f"{caller}() got unknown InvocationRecord field(s): {', '.join(unknown)}")
    nulled = sorted(name for name, value in changes.items() if value is None and name in _REQUIRED)
    if nulled:
        raise TypeError(f"{caller}() cannot set required field(s) to None: {', '.join(nulled)}")


def _changed(record: InvocationRecord, changes: Mapping[str, object]) -> InvocationRecord:
    """`record` with `changes`; None resets a field to its default (DynamoDB: the attribute is removed)."""
    values: dict[str, Any] = {}
    for name, value in changes.items():
        if value is None:
            field = _FIELDS[name]
            value = field.default if field.default is not dataclasses.MISSING else field.default_factory()  # type: ignore[misc]
        elif name == "callers":
            value = frozenset(value)  # type: ignore[arg-type]
        values[name] = value
    return record.evolve(**values)


_JSON_SLACK_BYTES = 1_024  # what the JSON may count below DynamoDB's sizes (numbers: 21 bytes each)


def _fits(record: InvocationRecord, encoded: str) -> bool:
    """Whether `record` (whose `_record_json` is `encoded`) fits in one DynamoDB item (400 KB).

    The JSON holds every attribute name and value with punctuation, so it counts more than DynamoDB
    does except for numbers (at most 21 bytes each there); with that slack it settles nearly every
    record without walking it. Only a record near the limit is counted exactly, as DynamoDB counts.
    """
    blobs = len(record.input_entry) + len(record.output or b"")
    if len(encoded) + blobs + _JSON_SLACK_BYTES <= MAX_ITEM_BYTES:
        return True
    return item_size({field: getattr(record, field) for field in _FIELDS}) <= MAX_ITEM_BYTES


class SQLiteFacts:
    """`control_plane.ports.StoreFacts` of a `SQLiteStore` (its `facts`): its file is this process's
    own, so it may delete; it costs no AWS requests; a file from an earlier Torpor may hold 16-byte ids.

    Args:
        store: The store whose file these facts describe.
    """

    may_delete = True
    """Always: the store's file is this process's own (`StoreFacts.may_delete`)."""
    value_limit_bytes = MAX_MESSAGE_BYTES
    """The store keeps large values in its own rows (`StoreFacts.value_limit_bytes`)."""

    def __init__(self, store: SQLiteStore) -> None:
        self._store = store

    @property
    def holds_short_ids(self) -> bool:
        """True for a file first written before Torpor's ids took restate-server's 24-byte shape
        (its `meta` table says so): it may hold 16-byte ids (`StoreFacts.holds_short_ids`)."""
        return self._store._holds_short_ids()

    def creation_requests(self, *, delayed: bool, on_key: bool) -> dict[str, int]:
        """None: a local file costs no AWS requests (`StoreFacts.creation_requests`)."""
        return {}


class SQLiteStore(KeyedTables, RegistryTables, ScheduleTables, InvocationTransitions):
    """`control_plane.ports.Store` on one SQLite database (see the module docstring for the tables).

    Every read is consistent (there is one copy); every write that changes an invocation is one
    `BEGIN IMMEDIATE` transaction that checks its condition first; a lost condition raises
    `StoreConflict` (`put_notification` answers False instead), an item above 400 KB raises
    `ItemTooLarge`, with the messages of `DynamoDBStore`. The port's families: invocations and
    journals (`InvocationStore`) and timers (`TimerStore`) are here; keyed state, locks, queues and
    promises (`KeyStore`) come from `KeyedTables`, deployments and services (`RegistryStore`) from
    `RegistryTables`, schedules (`ScheduleStore`) from `ScheduleTables`.

    Attributes:
        path: The database file, or ":memory:".
        facts: What the core needs to know of this store that is not storage (`SQLiteFacts`): hand
            it to `ControlPlane(facts=...)` with the store.

    Args:
        path: The database file (created with its directory if missing), or ":memory:" for a
            store that lives as long as this object.
        shards: Accepted for the wiring's sake (`Settings.store_shards`) and ignored: SQLite needs
            no sharding.
    """

    def __init__(self, path: str | Path = ":memory:", *, shards: int = 1) -> None:
        del shards
        self.path = str(path)
        if self.path != ":memory:":
            Path(self.path).parent.mkdir(parents=True, exist_ok=True)
            if os.path.isfile(self.path) and os.path.getsize(self.path) == 0:
                log.warning(
                    "the SQLite store %s is an empty file (0 bytes): starting it as a new, empty store", self.path
                )
        self._failing: str | None = None
        """The SQLite error name of the fault logged last (`StoreUnavailable`), until a write succeeds."""
        self._lock = threading.RLock()
        self._db = sqlite3.connect(self.path, isolation_level=None, check_same_thread=False, timeout=30.0)
        self._db.row_factory = sqlite3.Row
        if self.path != ":memory:":
            self._db.execute("PRAGMA journal_mode=WAL")
        self._db.execute("PRAGMA synchronous=NORMAL")
        self._db.execute("PRAGMA busy_timeout=30000")
        self._request_counts: dict[str, int] = {}
        self._schema_ready = False
        self._short_ids = False
        self.facts = SQLiteFacts(self)

    def __repr__(self) -> str:
        return f"SQLiteStore(path={self.path!r})"

    def close(self) -> None:
        """Close the connection (the store cannot be used after)."""
        with self._lock:
            self._db.close()

    # --- plumbing --------------------------------------------------------------------------------

    @property
    def request_count(self) -> int:
        """Port calls this store has answered so far."""
        with self._lock:
            return sum(self._request_counts.values())

    @property
    def request_counts(self) -> dict[str, int]:
        """Port calls so far by method name, e.g. `{"append_batch": 3}` (a copy)."""
        with self._lock:
            return dict(self._request_counts)

    def _count(self, method: str) -> None:
        with self._lock:
            self._request_counts[method] = self._request_counts.get(method, 0) + 1

    @contextmanager
    def _write(self, method: str, *, one_statement: bool = False) -> Iterator[sqlite3.Connection]:
        """One `BEGIN IMMEDIATE` transaction: committed if the block returns, rolled back if it raises.
        `one_statement`: the block writes with a single statement, which SQLite runs as a transaction
        of its own (autocommit), so no `BEGIN` and `COMMIT` go around it.

        Raises:
            StoreUnavailable: The disk is full (507) or the file cannot be written (503); rolled back.
        """
        with self._lock, self._faults():
            self._count(method)
            self._ensure_tables()
            if not one_statement:
                self._db.execute("BEGIN IMMEDIATE")
            try:
                yield self._db
                if not one_statement:
                    self._db.execute("COMMIT")
            except BaseException:
                if self._db.in_transaction:  # a failed COMMIT (disk full, I/O error) leaves it open
                    with contextlib.suppress(sqlite3.Error):  # the error that got here is the one to tell
                        self._db.execute("ROLLBACK")
                raise
            if self._failing is not None:
                log.warning("the SQLite store %s takes writes again", self.path)
                self._failing = None

    @contextmanager
    def _read(self, method: str) -> Iterator[sqlite3.Connection]:
        """One deferred transaction: the statements of the block see one snapshot.

        Raises:
            StoreUnavailable: The file cannot be read (503: an I/O error, a corrupt page).
        """
        with self._lock, self._faults():
            self._count(method)
            self._ensure_tables()
            self._db.execute("BEGIN")
            try:
                yield self._db
            finally:
                try:
                    self._db.execute("COMMIT")
                except sqlite3.Error:  # the read is done; leave no transaction open for the next call
                    if self._db.in_transaction:
                        with contextlib.suppress(sqlite3.Error):
                            self._db.execute("ROLLBACK")

    @contextmanager
    def _faults(self) -> Iterator[None]:
        """Turn a fault of the file or its disk into `StoreUnavailable`, logged once per episode."""
        try:
            yield
        except sqlite3.Error as exc:
            error = self._unavailable(exc)
            if error is None:
                raise
            name = getattr(exc, "sqlite_errorname", "")
            if self._failing != name:
                self._failing = name
                log.error("%s", error.message)
            raise error from exc

    def _unavailable(self, exc: sqlite3.Error) -> StoreUnavailable | None:
        """The `StoreUnavailable` for a fault of the file or its disk; None for another error (a bug)."""
        code = getattr(exc, "sqlite_errorcode", None)
        if code is None:
            return None
        primary = code & 0xFF  # extended codes (SQLITE_IOERR_WRITE, ...) carry the primary in the low byte
        where = os.path.dirname(os.path.abspath(self.path)) if self.path != ":memory:" else "memory"
        if primary == sqlite3.SQLITE_FULL:
            return StoreUnavailable(
                f"the disk of the SQLite store {self.path} is full: nothing was written; free space on the disk "
                f"holding {where} (or start torpor dev with another --data-dir), then retry",
                status=507,
            )
        if primary in _FILE_FAULTS:
            return StoreUnavailable(
                f"the SQLite store {self.path} cannot be used: {exc} ({exc.sqlite_errorname}); nothing was "
                f"written; check the disk and the file (restore it from a backup if it is damaged), then retry"
            )
        return None

    def check_integrity(self) -> None:
        """Read every page of the file (SQLite's `PRAGMA quick_check`, O(file size)): a corrupt one
        is found at start rather than by a request.

        Raises:
            sqlite3.DatabaseError: A page is corrupt (the message names the file and the first fault).
        """
        with self._lock:
            try:
                found = [row[0] for row in self._db.execute("PRAGMA quick_check(1)")]
            except sqlite3.DatabaseError as exc:
                raise sqlite3.DatabaseError(f"{self.path} is damaged: {exc}") from exc
            if found != ["ok"]:
                raise sqlite3.DatabaseError(f"{self.path} is damaged: {'; '.join(found)}")

    def _ensure_tables(self) -> None:
        if self._schema_ready:
            return
        application_id = self._db.execute("PRAGMA application_id").fetchone()[0]
        version = self._db.execute("PRAGMA user_version").fetchone()[0]
        tables = {row[0] for row in self._db.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
        ours = application_id == APPLICATION_ID or (application_id == 0 and (not tables or "invocations" in tables))
        if not ours:
            raise sqlite3.DatabaseError(f"{self.path} is not a Torpor store (another program's SQLite file)")
        if version > SCHEMA_VERSION:
            raise sqlite3.DatabaseError(
                f"{self.path} was written by a newer Torpor (schema {version}; this one knows {SCHEMA_VERSION})"
            )
        # a file from before the `meta` table may hold 16-byte invocation ids (`SQLiteFacts.holds_short_ids`)
        from_before = "invocations" in tables and "meta" not in tables
        self._db.executescript(SCHEMA + self.KEYED_SCHEMA + self.REGISTRY_SCHEMA + self.SCHEDULES_SCHEMA + META_SCHEMA)
        if from_before:
            self._db.execute("INSERT OR IGNORE INTO meta (name, value) VALUES ('short_ids', '1')")
        found = self._db.execute("SELECT 1 FROM meta WHERE name = 'short_ids'").fetchone()
        self._short_ids = found is not None
        # a write: a file this process cannot write fails here, at start, not at the first request
        self._db.execute(f"PRAGMA application_id = {APPLICATION_ID}")
        self._db.execute(f"PRAGMA user_version = {SCHEMA_VERSION}")
        self._schema_ready = True

    def _holds_short_ids(self) -> bool:
        """`SQLiteFacts.holds_short_ids`: the file's `meta` table says so."""
        with self._lock:
            self._ensure_tables()
            return self._short_ids

    def ensure_schema(self) -> None:
        """Create the tables and indexes if they are missing (idempotent, also across processes)."""
        with self._lock:
            self._count("ensure_schema")
            self._ensure_tables()

    # --- invocations -----------------------------------------------------------------------------

    @staticmethod
    def _insert_record(
        db: sqlite3.Connection, record: InvocationRecord, retention_due_ms: int | None, encoded: str
    ) -> None:
        """Insert the row of `record` (`encoded`: its `_record_json`). Raises `sqlite3.IntegrityError`
        if a row with its id exists (nothing written)."""
        db.execute(
            "INSERT INTO invocations (invocation_id, status, created_at_ms, service, handler, key, "
            "completion, retention_due_ms, input_entry, output, record) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
            (
                record.invocation_id, record.status, record.created_at_ms, record.service, record.handler,
                record.key, record.completion, retention_due_ms, record.input_entry, record.output,
                encoded,
            ),
        )  # fmt: skip

    @staticmethod
    def _rewrite_record(
        db: sqlite3.Connection,
        before: InvocationRecord,
        after: InvocationRecord,
        retention_due_ms: int | None,
        encoded: str,
    ) -> None:
        """Update the row of `before` to hold `after` (`encoded` its `_record_json`): an UPDATE of the
        columns that may change, so only the indexes over those are touched (an INSERT OR REPLACE
        deletes and inserts the row and every index entry)."""
        columns = ["status", "completion", "retention_due_ms", "output", "record"]
        values: list[object] = [after.status, after.completion, retention_due_ms, after.output, encoded]
        for name in _FIXED_COLUMNS:  # set at creation; written only if a change names them
            if getattr(after, name) != getattr(before, name):
                columns.append(name)
                values.append(getattr(after, name))
        assignments = ", ".join(f"{name} = ?" for name in columns)
        db.execute(f"UPDATE invocations SET {assignments} WHERE invocation_id = ?", (*values, after.invocation_id))

    @staticmethod
    def _get_row(db: sqlite3.Connection, invocation_id: str) -> sqlite3.Row | None:
        row: sqlite3.Row | None = db.execute(
            "SELECT * FROM invocations WHERE invocation_id = ?", (invocation_id,)
        ).fetchone()
        return row

    def create_invocation(self, invocation: InvocationRecord) -> None:
        """Insert a new invocation, if no invocation with its id exists.

        Raises:
            StoreConflict: An invocation with this id exists already (nothing was written).
            ItemTooLarge: The record (its input entry, mostly) does not fit in a 400 KB item.
        """
        encoded = _record_json(invocation)
        if not _fits(invocation, encoded):
            raise ItemTooLarge(
                f"the request ({len(invocation.input_entry)} bytes of input) does not fit in one DynamoDB item "
                "(400 KB, 409,600 bytes, with the invocation's other fields); send a smaller body"
            )
        due = _retention_due_ms(invocation.journal_expires_at_ms, invocation.expires_at_s)
        with self._write("create_invocation", one_statement=True) as db:
            try:
                self._insert_record(db, invocation, due if due and invocation.status == COMPLETED else None, encoded)
            except sqlite3.IntegrityError as exc:  # the primary key: one query, not a read before the write
                if "UNIQUE" not in str(exc):
                    raise
                raise StoreConflict(f"invocation {invocation.invocation_id} exists already") from None

    def get_invocation(self, invocation_id: str) -> InvocationRecord | None:
        """The invocation's record, or None if there is no such invocation."""
        with self._read("get_invocation") as db:
            row = self._get_row(db, invocation_id)
        return None if row is None else _record_of(row)

    def read_fence(self, invocation_id: str) -> tuple[int, int] | None:
        """The invocation's `(epoch, doorbell)`; None if there is no such invocation (`InvocationStore`)."""
        record = self.get_invocation(invocation_id)
        return None if record is None else (record.epoch, record.doorbell)

    def load_invocation(self, invocation_id: str) -> LoadedInvocation | None:
        """The invocation, its batches by `start_index` and its notifications by `created_at_ms` then key
        (one snapshot); None if the invocation does not exist (even if notifications were stored for it)."""
        with self._read("load_invocation") as db:
            row = self._get_row(db, invocation_id)
            if row is None:
                return None
            batches = db.execute(
                "SELECT * FROM batches WHERE invocation_id = ? ORDER BY start_index", (invocation_id,)
            ).fetchall()
            notifications = db.execute(
                "SELECT * FROM notifications WHERE invocation_id = ? ORDER BY created_at_ms, key", (invocation_id,)
            ).fetchall()
        return LoadedInvocation(
            _record_of(row),
            [JournalBatch(b["start_index"], bytes(b["entries"]), b["epoch"], b["committed_at_ms"]) for b in batches],
            [StoredNotification(n["key"], bytes(n["entry"]), n["created_at_ms"]) for n in notifications],
        )

    def delete_invocation(self, invocation_id: str, created_at_ms: int | None = None) -> None:
        """Delete the invocation's journal, notifications and record (one transaction); idempotent.
        With `created_at_ms`, nothing is deleted unless the invocation stored is the one created then."""
        with self._write("delete_invocation") as db:
            if created_at_ms is not None:
                row = self._get_row(db, invocation_id)
                if row is not None and _record_of(row).created_at_ms != created_at_ms:
                    return
            db.execute("DELETE FROM batches WHERE invocation_id = ?", (invocation_id,))
            db.execute("DELETE FROM notifications WHERE invocation_id = ?", (invocation_id,))
            db.execute("DELETE FROM invocations WHERE invocation_id = ?", (invocation_id,))

    def _update(
        self,
        db: sqlite3.Connection,
        row: sqlite3.Row,
        changes: Mapping[str, object],
        too_large: str,
        before: InvocationRecord | None = None,
    ) -> InvocationRecord:
        """Write `changes` to the invocation of `row` (inside the caller's transaction); the record after.
        `before`: the row's record, if decoded already."""
        if before is None:
            before = _record_of(row)
        after = _changed(before, changes)
        encoded = _record_json(after)
        if not _fits(after, encoded):
            raise ItemTooLarge(too_large)
        due: int | None = row["retention_due_ms"]
        if "journal_expires_at_ms" in changes or "expires_at_s" in changes:
            due = (
                _retention_due_ms(
                    changes.get("journal_expires_at_ms"),  # type: ignore[arg-type]
                    changes.get("expires_at_s"),  # type: ignore[arg-type]
                )
                or None
            )
        self._rewrite_record(db, before, after, due, encoded)
        return after

    def attach_caller(self, invocation_id: str, caller: str) -> None:
        """Add `caller` ("{caller_id}/{completion_id}") to `callers` unless the invocation completed,
        and ring its doorbell (`doorbell + 1`, same transaction), as `Store.attach_caller` says.

        Raises:
            StoreConflict: The invocation completed or does not exist (nothing written).
        """
        with self._write("attach_caller") as db:
            row = self._get_row(db, invocation_id)
            if row is None or row["status"] == COMPLETED:
                raise StoreConflict(f"invocation {invocation_id} has completed or does not exist")
            record = _record_of(row)
            self._update(
                db, row, {"callers": record.callers | {caller}, "doorbell": record.doorbell + 1},
                f"invocation {invocation_id}: too many callers attached to fit in its 400 KB metadata item",
            )  # fmt: skip

    def acquire_lease(
        self, invocation_id: str, now_ms: int, lease_until_ms: int, runnable: Iterable[str]
    ) -> InvocationRecord:
        """Take the lease: `epoch + 1`, `lease_until_ms`, status `running`, `modified_at_ms = now_ms`, if the
        invocation exists, its lease expired (`lease_until_ms < now_ms`) and its status is in `runnable`.

        Returns:
            The record after the update.

        Raises:
            StoreConflict: Another worker holds the lease, the status is not runnable, or the
                invocation does not exist.
            ValueError: `runnable` is empty.
        """
        statuses = tuple(dict.fromkeys(runnable))
        if not statuses:
            raise ValueError("acquire_lease needs at least one runnable status")
        with self._write("acquire_lease") as db:
            row = self._get_row(db, invocation_id)
            record = None if row is None else _record_of(row)
            if row is None or record is None or not (record.lease_until_ms < now_ms and record.status in statuses):
                raise StoreConflict(
                    f"invocation {invocation_id}: leased by another worker, not in {'/'.join(statuses)}, or unknown"
                )
            lease = {
                "epoch": record.epoch + 1,
                "lease_until_ms": lease_until_ms,
                "status": RUNNING,
                "modified_at_ms": now_ms,
            }
            too_large = f"invocation {invocation_id}: the metadata item exceeds DynamoDB's 400 KB limit"
            return self._update(db, row, lease, too_large, record)

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
        """Set fields of the invocation record if its epoch is still `epoch` (and, with `doorbell`, its
        doorbell still reads that); None resets a field to its default. See `InvocationTransitions`.
        With `ending`, that journal batch is inserted in the same transaction (`InvocationStore.complete`):
        both are written or neither.

        Returns:
            With `returning`, the record after the update; else None.

        Raises:
            StoreConflict: The epoch (or the doorbell) moved on, the invocation does not exist, or
                `ending`'s index is taken; nothing was written.
            ItemTooLarge: The record (or `ending`) would exceed 400 KB; nothing was written.
            TypeError: An unknown field, or a required field set to None.
            ValueError: No changes were given.
        """
        if not changes:
            raise ValueError(f"_update_invocation({invocation_id!r}) needs at least one field to change")
        _checked_changes(changes, "_update_invocation")
        if ending is not None:
            _check_batch(invocation_id, ending)
        held = f"epoch {epoch}" + ("" if doorbell is None else f" or doorbell {doorbell}")
        conflict = f"invocation {invocation_id}: {held} no longer holds (another worker took the lease" + (
            ", or a notification arrived)" if doorbell is not None else ")"
        )
        too_large = (
            f"invocation {invocation_id}: setting {', '.join(sorted(changes))} would make its metadata item larger "
            "than DynamoDB's 400 KB limit; keep handler outputs and failure messages below ~350 KB"
        )
        with self._write("update_invocation") as db:
            row = self._get_row(db, invocation_id)
            record = None if row is None else _record_of(row)
            if row is None or record is None or record.epoch != epoch:
                raise StoreConflict(conflict)
            if doorbell is not None and record.doorbell != doorbell:
                raise StoreConflict(conflict)
            if ending is not None:
                _insert_batch(db, invocation_id, ending)
            after = self._update(db, row, changes, too_large, record)
        return after if returning else None

    def _update_unless_completed(self, invocation_id: str, **changes: object) -> InvocationRecord:
        """Set fields and bump the epoch, whoever holds the lease, unless the invocation completed.

        Returns:
            The record after the update.

        Raises:
            StoreConflict: The invocation completed or does not exist; nothing was written.
            ItemTooLarge: The record would exceed 400 KB; nothing was written.
            TypeError: `epoch` or `doorbell` among the changes, an unknown field, or a required
                field set to None.
        """
        fenced = sorted({"epoch", "doorbell"} & set(changes))
        if fenced:
            raise TypeError(f"_update_unless_completed() cannot set {', '.join(fenced)}: the store moves it")
        _checked_changes(changes, "_update_unless_completed")
        with self._write("update_unless_completed") as db:
            row = self._get_row(db, invocation_id)
            if row is None or row["status"] == COMPLETED:
                raise StoreConflict(f"invocation {invocation_id} has completed or does not exist")
            return self._update(
                db, row, {**changes, "epoch": _record_of(row).epoch + 1},
                f"invocation {invocation_id}: setting {', '.join(sorted(changes))} would make its metadata item "
                "larger than DynamoDB's 400 KB limit",
            )  # fmt: skip

    # --- notifications ---------------------------------------------------------------------------

    def put_notification(self, invocation_id: str, notification: StoredNotification) -> bool:
        """Store a notification unless one with its key is stored already; True if this call stored it.

        It does not check that the invocation exists, nor ring its doorbell (see `ring`).

        Raises:
            ItemTooLarge: The entry does not fit in one 400 KB item; nothing was written.
        """
        if item_size({"PK": f"INV#{invocation_id}", "SK": f"N#{notification.key}", "entry": notification.entry,
                      "created_at_ms": notification.created_at_ms}) > MAX_ITEM_BYTES:  # fmt: skip
            raise ItemTooLarge(
                f"invocation {invocation_id}: notification {notification.key} ({len(notification.entry)} bytes) does "
                "not fit in one DynamoDB item (400 KB)"
            )
        with self._write("put_notification") as db:
            cursor = db.execute(
                "INSERT OR IGNORE INTO notifications (invocation_id, key, entry, created_at_ms) VALUES (?, ?, ?, ?)",
                (invocation_id, notification.key, notification.entry, notification.created_at_ms),
            )
            return cursor.rowcount == 1

    def get_notification(self, invocation_id: str, key: str) -> StoredNotification | None:
        """The notification stored with `key` for the invocation, or None (one primary-key lookup)."""
        with self._read("get_notification") as db:
            row = db.execute(
                "SELECT entry, created_at_ms FROM notifications WHERE invocation_id = ? AND key = ?", (invocation_id, key)
            ).fetchone()
        return None if row is None else StoredNotification(key, bytes(row["entry"]), row["created_at_ms"])

    def delete_notification(self, invocation_id: str, key: str) -> None:
        """Delete the notification with `key`; deleting one that is not there does nothing."""
        with self._write("delete_notification") as db:
            db.execute("DELETE FROM notifications WHERE invocation_id = ? AND key = ?", (invocation_id, key))

    def ring(self, invocation_id: str) -> None:
        """Add 1 to the invocation's `doorbell`; nothing else changes.

        Raises:
            StoreConflict: The invocation does not exist or has completed; nothing was written.
        """
        with self._write("ring") as db:
            row = self._get_row(db, invocation_id)
            record = None if row is None else _record_of(row)
            if record is None or record.status == "completed":
                raise StoreConflict(f"invocation {invocation_id} does not exist or has completed")
            rung = dataclasses.replace(record, doorbell=record.doorbell + 1)
            self._rewrite_record(db, record, rung, row["retention_due_ms"], _record_json(rung))

    # --- timers ----------------------------------------------------------------------------------

    def put_timer(self, due_ms: int, invocation_id: str) -> None:
        """Store the timer; storing it again changes nothing.

        Raises:
            ValueError: `due_ms` is negative or has more than 13 digits.
        """
        _checked_due(due_ms)
        with self._write("put_timer") as db:
            db.execute("INSERT OR IGNORE INTO timers (due_ms, invocation_id) VALUES (?, ?)", (due_ms, invocation_id))

    def delete_timer(self, due_ms: int, invocation_id: str) -> None:
        """Remove the timer; removing one that is not there does nothing.

        Raises:
            ValueError: `due_ms` is negative or has more than 13 digits.
        """
        _checked_due(due_ms)
        with self._write("delete_timer") as db:
            db.execute("DELETE FROM timers WHERE due_ms = ? AND invocation_id = ?", (due_ms, invocation_id))

    def due_timers(self, until_ms: int, limit: int = 1000) -> list[tuple[int, str]]:
        """`(due_ms, invocation_id)` of timers due at or before `until_ms`, earliest first (then by id);
        at most `limit` (0 or less: [] without a request)."""
        if limit <= 0 or until_ms < 0:
            return []
        with self._read("due_timers") as db:
            rows = db.execute(
                "SELECT due_ms, invocation_id FROM timers WHERE due_ms <= ? ORDER BY due_ms, invocation_id LIMIT ?",
                (until_ms, limit),
            ).fetchall()
        return [(row["due_ms"], row["invocation_id"]) for row in rows]

    # --- retention -------------------------------------------------------------------------------

    def due_retention(self, until_ms: int, limit: int = 1000) -> list[RetentionDue]:
        """Completed invocations whose journal or record retention ended at or before `until_ms`, earliest
        first (then by id), from the partial index on `retention_due_ms`; at most `limit`. A row whose
        record cannot be decoded is logged (one line) and left out."""
        if limit <= 0 or until_ms < 0:
            return []
        with self._read("due_retention") as db:
            rows = db.execute(
                "SELECT invocation_id, retention_due_ms, record FROM invocations WHERE retention_due_ms IS NOT NULL "
                "AND retention_due_ms <= ? ORDER BY retention_due_ms, invocation_id LIMIT ?",
                (until_ms, limit),
            ).fetchall()
        found = []
        for row in rows:
            try:
                values = json.loads(row["record"])
                due = RetentionDue(
                    row["invocation_id"],
                    row["retention_due_ms"],
                    int(values.get("journal_expires_at_ms") or 0),
                    int(values.get("expires_at_s") or 0),
                )
            except (ValueError, TypeError, AttributeError) as exc:  # one broken row must not stop the sweep
                log.warning("%s", _unreadable_reason(row, exc))
                continue
            found.append(due)
        return found

    def remove_journal(self, due: RetentionDue) -> bool:
        """Remove a completed invocation's journal once its journal retention ended, in one transaction:
        if it is completed and `journal_expires_at_ms` is still `due.journal_expires_at_ms` (and set),
        clear that field, move it to its record's retention (`due.expires_at_s`; none if 0), delete
        the batches and notifications. False if the condition failed (nothing removed)."""
        invocation_id = due.invocation_id
        with self._write("remove_journal") as db:
            row = self._get_row(db, invocation_id)
            record = None if row is None else _record_of(row)
            if (
                record is None
                or record.status != COMPLETED
                or not record.journal_expires_at_ms
                or record.journal_expires_at_ms != due.journal_expires_at_ms
            ):
                return False
            kept = dataclasses.replace(record, journal_expires_at_ms=0)
            self._rewrite_record(db, record, kept, due.expires_at_s * 1000 or None, _record_json(kept))
            db.execute("DELETE FROM batches WHERE invocation_id = ?", (invocation_id,))
            db.execute("DELETE FROM notifications WHERE invocation_id = ?", (invocation_id,))
        return True

    def append_batch(self, invocation_id: str, batch: JournalBatch) -> None:
        """Store a journal batch at `batch.start_index`, if that index is still free.

        Raises:
            StoreConflict: A batch at `batch.start_index` exists already; the stored one is unchanged.
            ItemTooLarge: The batch's entries do not fit in one 400 KB item; nothing was written.
            ValueError: `batch.start_index` is negative.
        """
        _check_batch(invocation_id, batch)
        with self._write("append_batch", one_statement=True) as db:
            _insert_batch(db, invocation_id, batch)

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
    ) -> InvocationPage:
        """Invocations, newest `created_at_ms` first (then by id, descending), filtered by status,
        service, handler, key and completion kind; a page of at most `limit`, older than `before`
        (`(created_at_ms, invocation_id)`). Indexed queries that stop at `limit`: of the creation index
        for every status, else one of the status index per status, merged.

        A row whose record cannot be decoded is skipped, logged (one line) and named in the page's
        `unreadable` as `(invocation_id, reason)`; the rows after it fill the page."""
        page = InvocationPage()
        if limit <= 0:
            return page
        wanted = tuple(dict.fromkeys(INVOCATION_STATUSES if statuses is None else statuses))
        if not wanted:
            return page
        while len(page) < limit:
            asked = limit - len(page)
            rows = self._invocation_rows(wanted, statuses is None, service, handler, key, completion, before, asked)
            for row in rows:
                try:
                    page.append(_decoded(row))
                except (ValueError, TypeError, KeyError, AttributeError) as exc:
                    reason = _unreadable_reason(row, exc)
                    log.warning("%s", reason)
                    page.unreadable.append((row["invocation_id"], reason))
            if len(rows) < asked:
                break
            before = (rows[-1]["created_at_ms"], rows[-1]["invocation_id"])
        return page

    def _invocation_rows(
        self,
        wanted: tuple[str, ...],
        every_status: bool,
        service: str | None,
        handler: str | None,
        key: str | None,
        completion: str | None,
        before: tuple[int, str] | None,
        limit: int,
    ) -> list[sqlite3.Row]:
        """The rows of one page of `list_invocations` (one snapshot), undecoded."""
        where: list[str] = []
        args: list[object] = []
        for column, value in (("service", service), ("handler", handler), ("key", key), ("completion", completion)):
            if value is not None:
                where.append(f"{column} = ?")
                args.append(value)
        if before is not None:
            where.append("(created_at_ms, invocation_id) < (?, ?)")
            args += [before[0], before[1]]
        order = "ORDER BY created_at_ms DESC, invocation_id DESC LIMIT ?"
        with self._read("list_invocations") as db:
            if every_status:  # every status: the creation index, newest first, stops at `limit`
                condition = f"WHERE {' AND '.join(where)}" if where else ""
                return db.execute(f"SELECT * FROM invocations {condition} {order}", (*args, limit)).fetchall()
            # one ordered range of the status index per status, merged (no sort of a whole status)
            query = f"SELECT * FROM invocations WHERE {' AND '.join(['status = ?', *where])} {order}"
            pages = [db.execute(query, (status, *args, limit)).fetchall() for status in wanted]
            newest = heapq.merge(*pages, key=lambda row: (row["created_at_ms"], row["invocation_id"]), reverse=True)
            return list(islice(newest, limit))
