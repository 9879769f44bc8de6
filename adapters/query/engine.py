"""`POST /query` on Apache DataFusion (the SQL engine restate-server embeds): plan, read, run.

1. The query is planned over empty tables (`adapters.query.schema`); `adapters.query.pushdown` reads
   from the optimized plan what each table scan needs (ids, statuses, services, handlers, keys,
   `LIMIT`, newest n).
2. Only that is read from the store, through its indexes: one `get_invocation` per id, else pages
   of `list_invocations` by status, service, handler and key, stopping at the limit when every filter
   on the scan is one the store applies; a journal per id (`load_invocation`), state per key
   (`load_state`) of the keys named, else of every key with state (`state_keys`).
3. The same query runs over what was read, so DataFusion applies every filter, join and
   aggregate itself: what the store skipped could never have matched.

Only queries run: `SQLOptions` forbid DDL (`CREATE [EXTERNAL] TABLE`, `DROP`), DML (`INSERT`,
`COPY … TO`) and statements (`SET`), and any statement other than a query is refused (400) before it
is planned. Every query is bounded, and one over a bound is refused (400) naming it:
- reads: at most `max_reads` invocation records listed, and at most `max_rows` point reads (ids
  listed, journals, listings of an `IN` product, objects' state), counted before the store is read;
- memory: DataFusion's memory pool of `memory_bytes` for sorts, joins and aggregates, nothing spilled
  to disk; the functions that build values of a size given by an argument (`range`,
  `generate_series`, `repeat`, …, as table or as scalar functions) and recursive CTEs are refused,
  and only the introspection tables (and `information_schema`) can be scanned;
- answer: at most `max_rows` rows (`TORPOR_QUERY_MAX_ROWS`), counted as DataFusion streams them;
- time: `timeout_s` of wall-clock time, checked between store reads and between streamed batches.
"""

from __future__ import annotations

import itertools
import json
import math
import re
import threading
import time
from base64 import b16encode
from collections.abc import Callable, Iterable, Iterator
from datetime import UTC, datetime
from typing import Any

import pyarrow as pa
import pyarrow.dataset as ds
from datafusion import RuntimeEnvBuilder, SessionConfig, SessionContext, SQLOptions

from adapters.query import rows as R
from adapters.query.entries import LazyServiceKinds
from adapters.query.pushdown import JoinOnId, ScanNeed, analyse
from adapters.query.schema import TABLES
from control_plane.errors import BadRequest
from control_plane.ports import INVOCATION_STATUSES, InvocationRecord, Store
from http_api.query import ARROW_STREAM, JSON, QueryAnswer

MAX_READS = 100_000
"""The most invocation records one query may list from the store (`DataFusionQuery.max_reads`)."""
MAX_ROWS = 10_000
"""The most rows in an answer, and point reads of the store, by default (`Settings.query_max_rows`)."""
MEMORY_BYTES = 256 * 1024 * 1024
"""DataFusion's memory pool for one query by default (`Settings.query_memory_bytes`)."""
TIMEOUT_S = 30.0
"""The wall-clock time one query may take by default (`Settings.query_timeout_ms`)."""

_ONLY_QUERIES = SQLOptions().with_allow_ddl(False).with_allow_dml(False).with_allow_statements(False)
_QUERY_WORDS = {"SELECT", "WITH", "VALUES", "EXPLAIN", "SHOW", "DESCRIBE", "DESC"}
_FIRST_WORD = re.compile(r"(?:\s+|--[^\n]*(?:\n|$)|/\*.*?\*/|\()*([A-Za-z_]+)", re.DOTALL)
_REFUSED_BY_OPTIONS = re.compile(r"(DDL|DML|Statement) not supported: (.*)")
_GENERATORS = re.compile(r"\b(range|generate_series|array_repeat|list_repeat|repeat|lpad|rpad)\(", re.IGNORECASE)
"""Functions whose output size is an argument: a few bytes of SQL could ask for gigabytes."""

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
    """`http_api.query.SqlEngine` on DataFusion over a `Store` (see the module doc).

    Args:
        store: where invocations, journals, state, services and deployments are read.
        max_reads: the most invocation records one query may list before it is refused (400).
        max_rows: the most rows an answer may have, and the most point reads (ids, journals,
            listings, objects' state) one query may make, before it is refused (400).
        memory_bytes: DataFusion's memory pool for one query (bytes); over it, a 400.
        timeout_s: the wall-clock time one query may take (s); past it, a 400.
    """

    def __init__(
        self,
        store: Store,
        max_reads: int = MAX_READS,
        *,
        max_rows: int = MAX_ROWS,
        memory_bytes: int = MEMORY_BYTES,
        timeout_s: float = TIMEOUT_S,
    ) -> None:
        self.store = store
        self.max_reads = max_reads
        self.max_rows = max_rows
        self.memory_bytes = memory_bytes
        self.timeout_s = timeout_s
        self._deadline = threading.local()  # this thread's query's time.monotonic() deadline

    def run(self, sql: str, *, as_json: bool) -> QueryAnswer:
        """Plan `sql`, read what its scans need, run it; JSON rows or an Arrow IPC stream.

        Raises:
            BadRequest: (400) a statement that is not a query; a query that does not parse or plan,
                fails on its values, or goes over a bound (reads, point reads, memory, rows, time:
                see the module doc), the message naming it.
        """
        self._deadline.at = time.monotonic() + self.timeout_s
        word = _first_word(sql)
        planner = self._context({name: schema.empty_table() for name, schema in TABLES.items()}, planning=True)
        try:
            frame = planner.sql_with_options(sql, _ONLY_QUERIES)  # nothing runs: DDL and DML are refused
            if word not in _QUERY_WORDS:
                raise _not_a_query(word)
            _refuse_unbounded(frame.logical_plan())
            plan = frame.optimized_logical_plan()
        except BadRequest:
            raise
        except Exception as exc:  # DataFusion raises bare Exceptions for plan errors too
            if word not in _QUERY_WORDS and "ParserError" not in str(exc):  # `INSERT INTO nothing …`
                raise _not_a_query(word) from exc
            raise self._refusal(exc) from exc
        needs, joins = analyse(plan)
        named = {n.table for n in needs}
        words = _STRING_LITERAL.sub("''", sql)
        for table in TABLES:  # a table the plan hides (a subquery in an expression): read it whole
            if table not in named and re.search(rf"\b{table}\b", words, re.IGNORECASE):
                needs.append(ScanNeed(table, exact=False))
        tables = self._read(needs, joins)
        runner = self._context(tables)
        try:
            frame = runner.sql_with_options(sql, _ONLY_QUERIES)
            schema = frame.schema()
            batches = self._collect(frame)
        except BadRequest:
            raise
        except Exception as exc:  # ditto, for errors on values (a bad cast) and the memory pool
            raise self._refusal(exc) from exc
        if as_json:
            return QueryAnswer(_json_rows(batches, schema), JSON)
        sink = pa.BufferOutputStream()
        with pa.ipc.new_stream(sink, schema) as writer:
            for batch in batches:
                writer.write_batch(batch)
        return QueryAnswer(sink.getvalue().to_pybytes(), ARROW_STREAM)

    def _context(self, tables: dict[str, pa.Table], *, planning: bool = False) -> SessionContext:
        """A session over `tables`, its memory pool `memory_bytes`, no spilling, no recursive CTEs.

        Tables are Arrow datasets, whose scans take a `LIMIT` (`pushdown` reads it from the plan),
        except, to run a query (not `planning`), a table with no rows: a dataset of no batches is
        planned as a scan of no partitions, which a sort refuses (`SanityCheckPlan …
        UnknownPartitioning(0)`: `ORDER BY` over an empty table answered 400); one empty batch in
        memory is not."""
        config = (
            SessionConfig().with_information_schema(True).set("datafusion.execution.enable_recursive_ctes", "false")
        )
        runtime = RuntimeEnvBuilder().with_greedy_memory_pool(self.memory_bytes).with_disk_manager_disabled()
        context = SessionContext(config, runtime)
        for name, table in tables.items():
            if table.num_rows or planning:
                context.register_dataset(name, ds.dataset(table))
            else:
                context.register_record_batches(name, [[pa.RecordBatch.from_pylist([], schema=table.schema)]])
        return context

    def _collect(self, frame: Any) -> list[pa.RecordBatch]:
        """The answer's batches as DataFusion streams them, stopping at `max_rows` + 1 rows or the deadline."""
        batches: list[pa.RecordBatch] = []
        count = 0
        for batch in frame.execute_stream():
            self._check_deadline()
            arrow = batch.to_pyarrow()
            count += arrow.num_rows
            if count > self.max_rows:
                raise BadRequest(
                    f"the answer has more than {self.max_rows} rows (TORPOR_QUERY_MAX_ROWS): add a LIMIT "
                    "or narrow the query with a WHERE"
                )
            batches.append(arrow)
        return batches

    def _check_deadline(self) -> None:
        """Raise BadRequest once this thread's query has taken longer than `timeout_s`."""
        if time.monotonic() > getattr(self._deadline, "at", math.inf):
            raise BadRequest(
                f"the query took longer than {self.timeout_s:g} s (TORPOR_QUERY_TIMEOUT_MS) and was stopped: "
                "narrow it with a WHERE on id, status or target_service_name, or add a LIMIT"
            )

    def _checked(self, read: Callable[[str], Any], arg: str) -> Any:
        """`read(arg)`, once the deadline is checked."""
        self._check_deadline()
        return read(arg)

    def _check_lookups(self, count: int, what: str) -> None:
        """Refuse (400), before reading, a query that needs more than `max_rows` point reads."""
        if count > self.max_rows:
            raise BadRequest(
                f"the query would read {what} one by one, more than {self.max_rows} "
                "(TORPOR_QUERY_MAX_ROWS): narrow it with a WHERE on id, status or target_service_name"
            )

    def _refusal(self, exc: Exception) -> BadRequest:
        """DataFusion's error as a 400: the read-only rule and the memory pool named in our words."""
        message = _message(exc)
        refused = _REFUSED_BY_OPTIONS.search(message)
        if refused:
            return _not_a_query(refused.group(2).strip())
        if "Resources exhausted" in message:
            return BadRequest(
                f"the query needs more than {self.memory_bytes} bytes of memory (TORPOR_QUERY_MEMORY_BYTES): "
                f"narrow it with a WHERE or a LIMIT ({message})"
            )
        return BadRequest(f"bad query: {message}")

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
            self._check_lookups(len(ids), f"the journals of {len(ids)} invocations")
            journal: list[dict[str, Any]] = []
            kinds = LazyServiceKinds(lambda: {s.name: s for s in self.store.list_services()})
            for invocation_id in sorted(ids):
                self._check_deadline()
                loaded = self.store.load_invocation(invocation_id)
                if loaded is not None:
                    journal.extend(R.journal_rows(loaded, kinds))
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
        wanted_ids = {r.caller_id for r in found.values() if r.caller_id and r.caller_id not in found}
        self._check_lookups(len(wanted_ids), f"the callers of {len(wanted_ids)} invocations")
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
            if len(found) > self.max_reads:
                raise self._too_many()
        return found

    def _invocations_for(self, need: ScanNeed, table: str) -> Iterable[InvocationRecord]:
        statuses = _statuses(need, table)
        if statuses is not None and not statuses:
            return []
        ids = need.allowed("id")
        if ids is not None:  # by id: one read each
            self._check_lookups(len(ids), f"{len(ids)} invocations by id")
            records = (self._checked(self.store.get_invocation, i) for i in sorted(ids))
            return [r for r in records if r is not None and (statuses is None or r.status in statuses)]
        exact = need.exact and set(need.constraints) <= _STORE_COLUMNS[table]
        want = (need.newest or need.fetch) if exact else None
        choices = [
            _choices(need.allowed(column))
            for column in ("target_service_name", "target_handler_name", "target_service_key")
        ]
        listings = math.prod(len(c) for c in choices)
        self._check_lookups(listings, f"{listings} listings (service x handler x key named in IN lists)")
        combos = itertools.product(*choices)
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
            self._check_deadline()
            size = _PAGE if want is None else max(1, min(_PAGE, want - read + 1))
            records = page(size, before)
            for record in records:
                if boundary is not None and record.created_at_ms < boundary:
                    return
                yield record
                read += 1
                if read > self.max_reads:
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
            else:  # every journal: count the invocations first, reading no more than the bound allows
                every = self._pages(
                    lambda size, before: self.store.list_invocations(None, None, size, before=before),
                    self.max_rows + 1,
                    ties=False,
                )
                ids |= {r.invocation_id for r in every}
        return ids

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

        A key named in the query is read directly. Otherwise `state` reads the service's keys that
        have state (`Store.state_keys`: complete, whatever invocations are retained), and
        `sys_keyed_service_status` and `sys_inbox` the keys of the service's unfinished invocations
        (only those hold or wait for a key).
        """
        keyed = {s.name for s in self.store.list_services() if s.ty != "SERVICE"}
        pairs: set[tuple[str, str]] = set()
        for need in needs:
            services = need.allowed("service_name")
            services = keyed if services is None else services & keyed
            keys = need.allowed("service_key")
            if table == "sys_inbox":
                for service in sorted(services):
                    pending = self.store.list_invocations(["pending"], service, self.max_reads + 1)
                    pairs |= {(r.service, r.key) for r in pending if keys is None or r.key in keys}
            elif keys is not None:
                pairs |= {(s, k) for s in services for k in keys}
            elif table == "state":  # one more than the bound: enough to refuse a query over it
                for service in sorted(services):
                    self._check_deadline()
                    pairs |= {(service, k) for k in self.store.state_keys(service, self.max_rows + 1)}
                    self._check_lookups(len(pairs), f"the {table} of {len(pairs)} objects")
            else:  # a key is held by an invocation that has not completed
                for service in sorted(services):
                    pairs |= {(r.service, r.key) for r in self._every(_UNFINISHED, service) if r.key}
        self._check_lookups(len(pairs), f"the {table} of {len(pairs)} objects")
        out: list[dict[str, Any]] = []
        for service, key in sorted(pairs):
            self._check_deadline()
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
                pending = self.store.list_invocations(["pending"], service, self.max_reads + 1, key=key)
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
        records: dict[str, InvocationRecord] = {}
        for need in needs:
            services = need.allowed("service_name")
            keys = need.allowed("service_key")
            for service in sorted(workflows if services is None else services & workflows):
                for key in _choices(keys):
                    for record in itertools.islice(self._every(None, service, key), self.max_rows + 1):
                        records[record.invocation_id] = record
                    self._check_lookups(len(records), f"the journals of {len(records)} workflow runs")
        names: dict[tuple[str, str], set[str]] = {}
        for record in records.values():
            self._check_deadline()
            loaded = self.store.load_invocation(record.invocation_id)
            if loaded is not None and record.key:
                names.setdefault((record.service, record.key), set()).update(R.promise_names(loaded))
        return [
            R.promise_row(service, key, name, self.store.get_promise(service, key, name))
            for (service, key), found in sorted(names.items())
            for name in sorted(found)
        ]

    def _too_many(self) -> BadRequest:
        return BadRequest(
            f"the query would read more than {self.max_reads} invocations: narrow it with a WHERE on id, "
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


def _not_a_query(what: str) -> BadRequest:
    return BadRequest(f"only SELECT queries are accepted: SQL introspection is read-only ({what} is not a query)")


def _first_word(sql: str) -> str:
    """The statement's first keyword, upper case (`SELECT`, `INSERT`, …), past comments and `(`: a
    statement that parses and does not start as a query (`_QUERY_WORDS`) is refused as not a query;
    `SQLOptions` refuse the rest (a `COPY` inside an `EXPLAIN`)."""
    first = _FIRST_WORD.match(sql)
    return first.group(1).upper() if first else ""


def _refuse_unbounded(plan: Any) -> None:
    """Refuse (400) a plan that could build data of any size from a few bytes of SQL: a scan of
    anything but the introspection tables and `information_schema` (the `range` and
    `generate_series` table functions), or a call of a function whose output size is an argument.
    Checked on the plan before it is optimized: the optimizer evaluates constant calls."""
    found = _GENERATORS.search(plan.display_indent())
    if found:
        raise BadRequest(
            f"{found.group(1)}() is not available in SQL introspection: it builds values of any size "
            "(only the introspection tables can be queried)"
        )
    stack = [plan]
    while stack:
        node = stack.pop()
        variant = node.to_variant()
        if type(variant).__name__ == "TableScan":
            name = str(variant.table_name())
            if name not in TABLES and not name.startswith("information_schema."):
                raise BadRequest(f"{name} is not an introspection table (see SHOW TABLES)")
        stack.extend(node.inputs())


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
