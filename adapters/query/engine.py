"""`POST /query` on Apache DataFusion (the SQL engine restate-server embeds): plan, read, run.

1. The query is planned over empty tables (`adapters.query.schema`); `adapters.query.pushdown` reads
   from the optimized plan what each table scan needs (ids, statuses, services, handlers, keys,
   `LIMIT`, newest n).
2. Only that is read from the store, through its indexes: one `get_invocation` per id, else pages
   of `list_invocations` by status, service, handler and key, stopping at the limit when every filter
   on the scan is one the store applies; a journal per id (`load_invocation`), state per key
   (`load_state`).
3. The same query runs over what was read, so DataFusion applies every filter, join and
   aggregate itself: what the store skipped could never have matched.

A query that would read more than `max_rows` invocations is refused (400) rather than reading the
table: narrow it by id, status or service, or add a `LIMIT`.
"""

from __future__ import annotations

import itertools
import json
import math
import re
from base64 import b16encode
from collections.abc import Callable, Iterable, Iterator
from datetime import UTC, datetime
from typing import Any

import pyarrow as pa
import pyarrow.dataset as ds
from datafusion import SessionConfig, SessionContext

from adapters.query import rows as R
from adapters.query.pushdown import JoinOnId, ScanNeed, analyse
from adapters.query.schema import TABLES
from control_plane.errors import BadRequest
from control_plane.ports import INVOCATION_STATUSES, InvocationRecord, Store
from control_plane.query import ARROW_STREAM, JSON, QueryAnswer

MAX_ROWS = 100_000
"""The most invocation records one query may read (`DataFusionQuery.max_rows`)."""

_PAGE = 500
_INVOCATION_TABLES = ("sys_invocation", "sys_invocation_status")
_KEYED_TABLES = ("state", "sys_keyed_service_status", "sys_inbox")
_STORE_COLUMNS = {
    "sys_invocation": {"id", "status", "target_service_name", "target_handler_name", "target_service_key"},
    "sys_invocation_status": {"id", "status", "target_service_name", "target_handler_name", "target_service_key"},
    "sys_journal": {"id"},
    "state": {"service_name", "service_key"},
    "sys_keyed_service_status": {"service_name", "service_key"},
    "sys_inbox": {"service_name", "service_key"},
    "sys_promise": {"service_name", "service_key"},
}
"""The columns whose equalities the store answers from an index, by table."""

_RECORD_STATUSES = {"inboxed": {"pending"}, "invoked": {"ready", "running", "backing-off"}}
"""`sys_invocation_status` words back to the statuses they stand for."""

_SEMI_JOINS = {"Inner", "LeftSemi", "RightSemi"}
_UNFINISHED = [s for s in INVOCATION_STATUSES if s != "completed"]
_STRING_LITERAL = re.compile(r"'(?:[^']|'')*'")


class DataFusionQuery:
    """`control_plane.query.SqlEngine` on DataFusion over a `Store` (see the module doc).

    Args:
        store: where invocations, journals, state, services and deployments are read.
        max_rows: the most invocation records one query may read before it is refused (400).
    """

    def __init__(self, store: Store, max_rows: int = MAX_ROWS) -> None:
        self.store = store
        self.max_rows = max_rows

    def run(self, sql: str, *, as_json: bool) -> QueryAnswer:
        """Plan `sql`, read what its scans need, run it; JSON rows or an Arrow IPC stream.

        Raises:
            BadRequest: (400) a query that does not parse or plan, fails on its values, or would
                read more than `max_rows` invocations.
        """
        planner = _context({name: schema.empty_table() for name, schema in TABLES.items()})
        try:
            plan = planner.sql(sql).optimized_logical_plan()
        except Exception as exc:  # DataFusion raises bare Exceptions for plan errors too
            raise BadRequest(f"bad query: {_message(exc)}") from exc
        needs, joins = analyse(plan)
        named = {n.table for n in needs}
        words = _STRING_LITERAL.sub("''", sql)
        for table in TABLES:  # a table the plan hides (a subquery in an expression): read it whole
            if table not in named and re.search(rf"\b{table}\b", words, re.IGNORECASE):
                needs.append(ScanNeed(table, exact=False))
        tables = self._read(needs, joins)
        runner = _context(tables)
        try:
            frame = runner.sql(sql)
            batches = frame.collect()
            schema = frame.schema()
        except Exception as exc:  # ditto, for errors on values (a bad cast)
            raise BadRequest(f"bad query: {_message(exc)}") from exc
        if as_json:
            return QueryAnswer(_json_rows(batches, schema), JSON)
        sink = pa.BufferOutputStream()
        with pa.ipc.new_stream(sink, schema) as writer:
            for batch in batches:
                writer.write_batch(batch)
        return QueryAnswer(sink.getvalue().to_pybytes(), ARROW_STREAM)

    # --- reading ---------------------------------------------------------------------------------

    def _read(self, needs: list[ScanNeed], joins: list[JoinOnId]) -> dict[str, pa.Table]:
        """The rows of every table the scans name, read once per table (the union of its scans' needs)."""
        by_table: dict[str, list[ScanNeed]] = {}
        for need in needs:
            if need.table in TABLES:
                by_table.setdefault(need.table, []).append(need)
        records: dict[str, InvocationRecord] = {}
        out: dict[str, pa.Table] = {}
        for table in _INVOCATION_TABLES:
            if table in by_table:
                found = self._invocations(by_table[table], table)
                records.update(found)
                callers = self._callers(found, by_table[table])
                row = R.invocation_row if table == "sys_invocation" else R.invocation_status_row
                rows = [row(r, callers.get(r.caller_id)) for r in found.values()]
                out[table] = pa.Table.from_pylist(rows, TABLES[table])
        if "sys_journal" in by_table:
            ids = self._journal_ids(by_table["sys_journal"], joins, records)
            journal: list[dict[str, Any]] = []
            for invocation_id in sorted(ids):
                loaded = self.store.load_invocation(invocation_id)
                if loaded is not None:
                    journal.extend(R.journal_rows(loaded))
            out["sys_journal"] = pa.Table.from_pylist(journal, TABLES["sys_journal"])
        for table in _KEYED_TABLES:
            if table in by_table:
                out[table] = pa.Table.from_pylist(self._keyed(table, by_table[table]), TABLES[table])
        if "sys_promise" in by_table:
            out["sys_promise"] = pa.Table.from_pylist(self._promises(by_table["sys_promise"]), TABLES["sys_promise"])
        if "sys_service" in by_table:
            services = [R.service_row(s) for s in self.store.list_services()]
            out["sys_service"] = pa.Table.from_pylist(services, TABLES["sys_service"])
        if "sys_deployment" in by_table:
            deployments = [R.deployment_row(d) for d in self.store.list_deployments()]
            out["sys_deployment"] = pa.Table.from_pylist(deployments, TABLES["sys_deployment"])
        for table, schema in TABLES.items():
            out.setdefault(table, schema.empty_table())
        return out

    def _callers(self, found: dict[str, InvocationRecord], needs: list[ScanNeed]) -> dict[str, InvocationRecord]:
        """The records of the invocations that called those `found`, by id, if a scan reads
        `invoked_by_service_name` or `invoked_by_target` (one read per caller not found already)."""
        wanted = {"invoked_by_service_name", "invoked_by_target"}
        if not any(n.columns is None or n.columns & wanted for n in needs):
            return {}
        callers: dict[str, InvocationRecord] = {}
        for caller_id in sorted({r.caller_id for r in found.values() if r.caller_id}):
            caller = found.get(caller_id) or self.store.get_invocation(caller_id)
            if caller is not None:
                callers[caller_id] = caller
        return callers

    def _invocations(self, needs: list[ScanNeed], table: str) -> dict[str, InvocationRecord]:
        """The invocation records the scans of `table` need, by id (the union over the scans)."""
        found: dict[str, InvocationRecord] = {}
        for need in needs:
            found.update((r.invocation_id, r) for r in self._invocations_for(need, table))
            if len(found) > self.max_rows:
                raise self._too_many()
        return found

    def _invocations_for(self, need: ScanNeed, table: str) -> Iterable[InvocationRecord]:
        statuses = _statuses(need, table)
        if statuses is not None and not statuses:
            return []
        ids = need.allowed("id")
        if ids is not None:  # by id: one read each
            records = (self.store.get_invocation(i) for i in sorted(ids))
            return [r for r in records if r is not None and (statuses is None or r.status in statuses)]
        exact = need.exact and set(need.constraints) <= _STORE_COLUMNS[table]
        want = (need.newest or need.fetch) if exact else None
        combos = itertools.product(
            _choices(need.allowed("target_service_name")),
            _choices(need.allowed("target_handler_name")),
            _choices(need.allowed("target_service_key")),
        )
        out: list[InvocationRecord] = []
        for service, handler, key in combos:

            def page(
                size: int, before: tuple[int, str] | None, s: Any = service, h: Any = handler, k: Any = key
            ) -> Any:
                listed = sorted(statuses) if statuses is not None else None
                return self.store.list_invocations(listed, s, size, handler=h, key=k, before=before)

            out.extend(self._pages(page, want, ties=need.newest is not None))
        return out

    def _pages(
        self,
        page: Callable[[int, tuple[int, str] | None], list[InvocationRecord]],
        want: int | None,
        *,
        ties: bool,
    ) -> Iterator[InvocationRecord]:
        """Records newest first, page by page, until `want` are read (and, with `ties`, every one
        created in the same ms as the last wanted: SQL may order those by id the other way)."""
        read = 0
        boundary: int | None = None
        before: tuple[int, str] | None = None
        while True:
            size = _PAGE if want is None else max(1, min(_PAGE, want - read + 1))
            records = page(size, before)
            for record in records:
                if boundary is not None and record.created_at_ms < boundary:
                    return
                yield record
                read += 1
                if read > self.max_rows:
                    raise self._too_many()
                if want is not None and read == want:
                    if not ties:
                        return
                    boundary = record.created_at_ms
            if len(records) < size:
                return
            before = (records[-1].created_at_ms, records[-1].invocation_id)

    def _journal_ids(self, needs: list[ScanNeed], joins: list[JoinOnId], records: dict[str, Any]) -> set[str]:
        """The invocations whose journals the `sys_journal` scans need: their `id` filters; else, when
        the journal is joined on `id` with a constrained invocation scan, that scan's ids; else all."""
        ids: set[str] = set()
        joined = len(needs) == 1 and any(_narrowed_by_join(j) for j in joins)  # the one journal scan is the joined one
        for need in needs:
            allowed = need.allowed("id")
            if allowed is not None:
                ids |= allowed
            elif joined:
                ids |= set(records)
            else:
                ids |= {r.invocation_id for r in self._all_invocations()}
        return ids

    def _all_invocations(self) -> Iterator[InvocationRecord]:
        return self._every(None, None)

    def _every(
        self, statuses: list[str] | None, service: str | None, key: str | None = None
    ) -> Iterator[InvocationRecord]:
        """Every invocation with one of `statuses` (None: any) of `service` (and `key`), page by page."""
        return self._pages(
            lambda size, before: self.store.list_invocations(statuses, service, size, key=key, before=before),
            None,
            ties=False,
        )

    def _keyed(self, table: str, needs: list[ScanNeed]) -> list[dict[str, Any]]:
        """Rows of `state`, `sys_keyed_service_status` or `sys_inbox` for the keys the scans name.

        Keys are found from invocations (the store keeps no list of an object's keys): a key named
        in the query is read directly; otherwise the keys of the service's retained invocations.
        """
        keyed = {s.name for s in self.store.list_services() if s.ty != "SERVICE"}
        pairs: set[tuple[str, str]] = set()
        for need in needs:
            services = need.allowed("service_name")
            services = keyed if services is None else services & keyed
            keys = need.allowed("service_key")
            if table == "sys_inbox":
                for service in sorted(services):
                    pending = self.store.list_invocations(["pending"], service, self.max_rows + 1)
                    pairs |= {(r.service, r.key) for r in pending if keys is None or r.key in keys}
            elif keys is not None:
                pairs |= {(s, k) for s in services for k in keys}
            else:  # a key is held by an invocation that has not completed
                statuses = _UNFINISHED if table == "sys_keyed_service_status" else None
                for service in sorted(services):
                    pairs |= {(r.service, r.key) for r in self._every(statuses, service) if r.key}
        out: list[dict[str, Any]] = []
        for service, key in sorted(pairs):
            if table == "state":
                out.extend(R.state_rows(service, key, self.store.load_state(service, key)))
            elif table == "sys_keyed_service_status":
                holder = self.store.lock_holder(service, key)
                if holder is not None:
                    out.append(
                        {
                            "partition_key": R.key_partition(key),
                            "service_name": service,
                            "service_key": key,
                            "invocation_id": holder,
                        }
                    )
            else:
                pending = self.store.list_invocations(["pending"], service, self.max_rows + 1, key=key)
                ordered = sorted(pending, key=lambda r: (r.inbox_seq, r.created_at_ms))
                out.extend(
                    {
                        "partition_key": R.key_partition(key),
                        "service_name": service,
                        "service_key": key,
                        "id": r.invocation_id,
                        "sequence_number": n,
                        "created_at": r.created_at_ms,
                    }
                    for n, r in enumerate(ordered)
                )
        return out

    def _promises(self, needs: list[ScanNeed]) -> list[dict[str, Any]]:
        """`sys_promise` rows of the workflows the scans name: the promises their invocations' journals
        name (the store keeps no list of a workflow's promises), each completed or not."""
        workflows = {s.name for s in self.store.list_services() if s.ty == "WORKFLOW"}
        names: dict[tuple[str, str], set[str]] = {}
        for need in needs:
            services = need.allowed("service_name")
            keys = need.allowed("service_key")
            for service in sorted(workflows if services is None else services & workflows):
                for key in _choices(keys):
                    for record in self._every(None, service, key):
                        loaded = self.store.load_invocation(record.invocation_id)
                        if loaded is not None and record.key:
                            names.setdefault((service, record.key), set()).update(R.promise_names(loaded))
        return [
            R.promise_row(service, key, name, self.store.get_promise(service, key, name))
            for (service, key), found in sorted(names.items())
            for name in sorted(found)
        ]

    def _too_many(self) -> BadRequest:
        return BadRequest(
            f"the query would read more than {self.max_rows} invocations: narrow it with a WHERE on id, "
            "status, target_service_name, target_handler_name or target_service_key, or add a LIMIT"
        )


def _statuses(need: ScanNeed, table: str) -> set[str] | None:
    """The record statuses the scan allows (None: all), Restate's `sys_invocation_status` words mapped back."""
    allowed, excluded = need.allowed("status"), need.excluded("status")
    if allowed is None and not excluded:
        return None

    def records(words: Iterable[str]) -> set[str]:
        if table == "sys_invocation":
            return set(words)
        return set().union(*(_RECORD_STATUSES.get(w, {w}) for w in words))

    base = records(allowed) if allowed is not None else set(INVOCATION_STATUSES)
    return (base - records(excluded)) & set(INVOCATION_STATUSES)


def _choices(values: set[str] | None) -> list[str | None]:
    return [None] if values is None else sorted(values)


def _narrowed_by_join(join: JoinOnId) -> bool:
    """True if `join` pairs `sys_journal` with an invocation table on `id` and keeps only the journal
    rows whose id the invocation side has (inner and semi joins; an outer join that keeps the other side)."""
    invocations = set(_INVOCATION_TABLES)
    journal_left = join.left == {"sys_journal"} and bool(join.right) and join.right <= invocations
    journal_right = join.right == {"sys_journal"} and bool(join.left) and join.left <= invocations
    if not (journal_left or journal_right):
        return False
    if join.kind in _SEMI_JOINS:
        return True
    return (join.kind == "Left" and journal_right) or (join.kind == "Right" and journal_left)


def _context(tables: dict[str, pa.Table]) -> SessionContext:
    context = SessionContext(SessionConfig().with_information_schema(True))
    for name, table in tables.items():
        context.register_dataset(name, ds.dataset(table))
    return context


def _message(exc: Exception) -> str:
    """DataFusion's error text, without its Python-side prefix."""
    text = str(exc).strip()
    return text.removeprefix("DataFusion error: ")


# --- JSON rows, as restate-server writes them (arrow-json: nulls left out) ---------------------------


def _json_rows(batches: list[pa.RecordBatch], schema: pa.Schema) -> bytes:
    """`{"rows": [{column: value}, …]}`: a null column is left out of its row."""
    rows: list[dict[str, Any]] = []
    for batch in batches:
        columns = [(f.name, _json_column(batch.column(i), f.type)) for i, f in enumerate(schema)]
        for n in range(batch.num_rows):
            rows.append({name: values[n] for name, values in columns if values[n] is not None})
    return json.dumps({"rows": rows}, separators=(",", ":")).encode()


_DIGITS = {"s": 0, "ms": 3, "us": 6, "ns": 9}


def _json_column(column: pa.Array, type_: pa.DataType) -> list[Any]:
    if pa.types.is_timestamp(type_):
        return [_timestamp(v, type_) for v in column.cast(pa.int64()).to_pylist()]
    if pa.types.is_duration(type_):
        return [_duration(v, type_.unit) for v in column.cast(pa.int64()).to_pylist()]
    if pa.types.is_binary(type_) or pa.types.is_large_binary(type_) or pa.types.is_fixed_size_binary(type_):
        return [None if v is None else b16encode(v).decode().lower() for v in column.to_pylist()]
    values = column.to_pylist()
    return [_plain(v) for v in values]


def _plain(value: Any) -> Any:
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, datetime):
        return value.isoformat()
    if isinstance(value, bytes):
        return b16encode(value).decode().lower()
    if isinstance(value, list):
        return [_plain(v) for v in value]
    if isinstance(value, dict):
        return {k: _plain(v) for k, v in value.items()}
    if value is not None and not isinstance(value, str | int | bool | float):
        return str(value)
    return value


def _timestamp(value: int | None, type_: pa.TimestampType) -> str | None:
    """`2026-12-01T23:21:00.006Z`, as arrow-json writes a time with a zone (every table's times are
    UTC; another zone is shown in UTC, the same instant); without the `Z` for a time without a zone.
    A time beyond the year 9999 is shown as its number."""
    if value is None:
        return None
    digits = _DIGITS[type_.unit]
    seconds, fraction = divmod(value, 10**digits)
    try:
        text = datetime.fromtimestamp(seconds, tz=UTC).strftime("%Y-%m-%dT%H:%M:%S")
    except (OverflowError, ValueError, OSError):
        return str(value)
    if digits:
        text += f".{fraction:0{digits}d}"
    return text if type_.tz is None else text + "Z"


def _duration(value: int | None, unit: str) -> str | None:
    """ISO 8601 `PT86400S` (`PT1.5S`), as arrow-json writes durations."""
    if value is None:
        return None
    digits = _DIGITS[unit]
    seconds, fraction = divmod(abs(value), 10**digits)
    sign = "-" if value < 0 else ""
    text = f"{seconds}" + (f".{fraction:0{digits}d}".rstrip("0") if fraction else "")
    return f"{sign}PT{text}S"
