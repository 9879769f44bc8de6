"""`torpor sql "SELECT …"`: SQL introspection through the admin API's `POST /query`.

The query runs on the control plane (`http_api/query.py`); the CLI asks for JSON rows and prints
them as a table (columns in the order of the query's first row that has them all), or as the API's
JSON with `--json`. A bad query prints the engine's message and exits 1.
"""

from __future__ import annotations

from typing import Any

import click
from rich.table import Table
from rich.text import Text

from adapters.cli.client import CliConfig, admin_api, console, emit_json, json_option, pass_config
from adapters.cli.render import compact


def rows_table(rows: list[dict[str, Any]]) -> Table:
    """One column per name that appears in `rows` (in first-seen order), one line per row; a null is empty."""
    names: dict[str, None] = {}
    for row in rows:
        names.update(dict.fromkeys(row))
    table = Table(*(name.upper() for name in names))
    for row in rows:
        cells = []
        for name in names:
            value = row.get(name)
            cells.append(Text("" if value is None else value if isinstance(value, str) else compact(value, 200)))
        table.add_row(*cells)
    return table


@click.command("sql")
@click.argument("query")
@json_option
@pass_config
def sql(config: CliConfig, query: str) -> None:
    """Run a SQL query over sys_invocation, sys_journal, state, sys_service, sys_deployment, … .

    \b
    Example: torpor sql "SELECT id, target, status FROM sys_invocation WHERE status = 'suspended'"
    """
    with admin_api(config) as api:
        reply = api.request("POST", "/query", json_body={"query": query}, headers={"accept": "application/json"})
    rows: list[dict[str, Any]] = reply.json().get("rows") or []
    if config.as_json:
        emit_json(rows)
        return
    if rows:
        console().print(rows_table(rows))
    console(stderr=True).print(f"{len(rows)} row{'' if len(rows) == 1 else 's'}.")
