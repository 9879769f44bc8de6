"""What each table scan of a query needs from the store, read off DataFusion's optimized logical plan.

The plan is made over empty tables registered as pyarrow datasets, so DataFusion pushes every filter
it can into the `TableScan` (`full_filters`) and a `LIMIT` without ordering into its `fetch`. Filters
it keeps above the scan (an `IN` list of more than three values) are collected through the nodes that
keep rows as they are (`Filter`, `SubqueryAlias`, plain-column `Projection`). A `Sort` on `created_at`
descending with a `fetch` (`ORDER BY created_at DESC LIMIT n`) over such a path asks for the newest
n rows. The constraints found are equalities, `IN` lists, `!=` and `NOT IN` on one column each; the
rest are left to DataFusion, which runs the whole query again over what the store returned, so a
constraint understood here only ever narrows what is read, never what is answered.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any


@dataclass(slots=True)
class Constraint:
    """Values a column may take (`allowed`, None: any) and must not take (`excluded`)."""

    allowed: set[str] | None = None
    excluded: set[str] = field(default_factory=set)


@dataclass(slots=True)
class ScanNeed:
    """One scan of `table`: its column constraints, whether every filter on it was understood
    (`exact`), and how many rows it needs at most: any `fetch` rows, or the `newest` n by `created_at`."""

    table: str
    constraints: dict[str, Constraint] = field(default_factory=dict)
    exact: bool = True
    fetch: int | None = None
    newest: int | None = None
    columns: set[str] | None = None  # the columns the scan reads; None: all of them

    def allowed(self, column: str) -> set[str] | None:
        """The values `column` may take (None: unconstrained); an empty set means no row can match."""
        constraint = self.constraints.get(column)
        if constraint is None:
            return None
        if constraint.allowed is None:
            return None
        return constraint.allowed - constraint.excluded

    def excluded(self, column: str) -> set[str]:
        """The values `column` must not take."""
        constraint = self.constraints.get(column)
        return set() if constraint is None else constraint.excluded


@dataclass(slots=True)
class JoinOnId:
    """An equi-join `a.id = b.id` between the tables scanned on its `left` and `right` sides (names),
    `kind` as DataFusion names it (`Inner`, `Left`, `Right`, `LeftSemi`, …). A side whose `id` is
    computed (a projection or aggregate makes a column named `id` of something else) is left out: its
    tables set is empty."""

    left: set[str]
    right: set[str]
    kind: str


def _kind(node: Any) -> str:
    return type(node).__name__


def conjuncts(expr: Any) -> list[Any]:
    """`a AND b AND c` as `[a, b, c]`."""
    node = expr.to_variant()
    if _kind(node) == "BinaryExpr" and str(node.op()).upper() == "AND":
        return conjuncts(node.left()) + conjuncts(node.right())
    return [expr]


def _column(expr: Any) -> str | None:
    node = expr.to_variant()
    return str(node.name()) if _kind(node) == "Column" else None


def _literal(expr: Any) -> str | None:
    node = expr.to_variant()
    if _kind(node) != "Literal":
        return None
    value = expr.python_value()
    if hasattr(value, "as_py"):  # a pyarrow scalar (large strings come back as such)
        value = value.as_py()
    return value if isinstance(value, str) else None


def understand(expr: Any) -> tuple[str, set[str], bool] | None:
    """`(column, values, negated)` for `col = 'v'`, `col != 'v'`, `col IN (…)`, `col NOT IN (…)` and an
    `OR` of equalities on one column; None for anything else."""
    node = expr.to_variant()
    kind = _kind(node)
    if kind == "BinaryExpr":
        op = str(node.op()).upper()
        if op in ("=", "!="):
            left, right = node.left(), node.right()
            column, value = _column(left), _literal(right)
            if column is None:
                column, value = _column(right), _literal(left)
            if column is None or value is None:
                return None
            return column, {value}, op == "!="
        if op == "OR":
            a, b = understand(node.left()), understand(node.right())
            if a is None or b is None or a[0] != b[0] or a[2] or b[2]:
                return None
            return a[0], a[1] | b[1], False
        return None
    if kind == "InList":
        column = _column(node.expr())
        values = [_literal(item) for item in node.list()]
        if column is None or any(v is None for v in values):
            return None
        return column, {v for v in values if v is not None}, bool(node.negated())
    return None


def need_of(table: str, filters: list[Any], fetch: int | None, newest: int | None) -> ScanNeed:
    """The `ScanNeed` of a scan of `table` under `filters` (conjuncts)."""
    need = ScanNeed(table, fetch=fetch, newest=newest)
    for expr in filters:
        for part in conjuncts(expr):
            understood = understand(part)
            if understood is None:
                need.exact = False
                continue
            column, values, negated = understood
            constraint = need.constraints.setdefault(column, Constraint())
            if negated:
                constraint.excluded |= values
            else:
                constraint.allowed = values if constraint.allowed is None else constraint.allowed & values
    return need


def _plain_projection(node: Any) -> bool:
    return all(_kind(expr.to_variant()) == "Column" for expr in node.projections())


def _newest_fetch(node: Any) -> int | None:
    """`n` for a `Sort` whose first key is `created_at` descending and which keeps `n` rows."""
    fetch = node.get_fetch_val()
    keys = node.sort_exprs()
    if fetch is None or not keys:
        return None
    first = keys[0]
    return int(fetch) if _column(first.expr()) == "created_at" and not first.ascending() else None


def _tables_under(plan: Any) -> set[str]:
    node = plan.to_variant()
    found = {str(node.table_name())} if _kind(node) == "TableScan" else set()
    for child in plan.inputs():
        found |= _tables_under(child)
    return found


def _renames_id(plan: Any) -> bool:
    """True if a projection or aggregate under `plan` makes a column named `id` from an expression."""
    node = plan.to_variant()
    kind = _kind(node)
    exprs = list(node.projections()) if kind == "Projection" else []
    if kind == "Aggregate":
        exprs = [*node.group_by_exprs(), *node.aggregate_exprs()]
    if any(e.variant_name() != "Column" and str(e.schema_name()) == "id" for e in exprs):
        return True
    return any(_renames_id(child) for child in plan.inputs())


def _side(plan: Any) -> set[str]:
    """The tables a join side scans, or none when its `id` may not be a table's `id` column."""
    return set() if _renames_id(plan) else _tables_under(plan)


def analyse(plan: Any) -> tuple[list[ScanNeed], list[JoinOnId]]:
    """Every table scan of an optimized logical plan with what it needs, and the joins on `id`."""
    needs: list[ScanNeed] = []
    joins: list[JoinOnId] = []

    def walk(plan: Any, above: list[Any], newest: int | None) -> None:
        node = plan.to_variant()
        kind = _kind(node)
        if kind == "TableScan":
            need = need_of(str(node.table_name()), [*node.filters(), *above], node.fetch(), newest)
            need.columns = {str(name) for _, name in node.projection()}
            needs.append(need)
            return
        if kind == "Filter":
            walk(plan.inputs()[0], [*above, node.predicate()], newest)
            return
        if kind == "SubqueryAlias" or (kind == "Projection" and _plain_projection(node)):
            walk(plan.inputs()[0], above, newest)
            return
        if kind == "Sort":
            walk(plan.inputs()[0], [], _newest_fetch(node))
            return
        if kind == "Join":
            left, right = plan.inputs()
            for a, b in node.on():
                if _column(a) == "id" and _column(b) == "id":
                    joins.append(JoinOnId(_side(left), _side(right), str(node.join_type())))
        for child in plan.inputs():
            walk(child, [], None)

    walk(plan, [], None)
    return needs, joins
