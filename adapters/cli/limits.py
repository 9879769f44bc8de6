"""`torpor limits list|set|delete`: the admin API's concurrency rules (`/limits/rules`, the rule
book of restate-server's rules API: a rule's pattern selects the `scope`/`limitKey` of V7 calls and
holds them to at most N running at once; docs/guide.md, "Concurrency limits").

A service's or handler's own limits are set with `PATCH /services/{name}` and shown by
`torpor services describe`."""

from __future__ import annotations

from typing import Any

import click
from rich.table import Table

from adapters.cli.client import CliConfig, admin_api, confirm, console, emit_json, json_option, pass_config


def rules_table(rules: list[dict[str, Any]]) -> Table:
    """Rules as a table: pattern, concurrency, enabled, version, description."""
    table = Table(title=f"Concurrency rules ({len(rules)})", title_justify="left")
    for column in ("PATTERN", "CONCURRENCY", "ENABLED", "VERSION", "DESCRIPTION"):
        table.add_column(column, overflow="fold")
    for rule in rules:
        concurrency = (rule.get("limits") or {}).get("concurrency")
        table.add_row(
            str(rule.get("pattern")),
            "-" if concurrency is None else str(concurrency),
            "no" if rule.get("disabled") else "yes",
            str(rule.get("version", "")),
            str(rule.get("description") or ""),
        )
    return table


@click.group()
def limits() -> None:
    """Concurrency rules for scoped calls: PATTERN is `*`, `scope`, `scope/*`, `scope/key` or
    `scope/key/sub`; a call made with that scope (and limit key) counts against every rule level
    that matches it."""


@limits.command(name="list")
@json_option
@pass_config
def list_rules(config: CliConfig) -> None:
    """List the concurrency rules."""
    with admin_api(config) as api:
        body = api.request("GET", "/limits/rules").json()
    if config.as_json:
        emit_json(body)
        return
    found = body.get("rules") or []
    if not found:
        console().print("No concurrency rules. Add one with `torpor limits set 'tenants/*' 5`.", markup=False)
        return
    console().print(rules_table(found))


@limits.command(name="set")
@click.argument("pattern")
@click.argument("concurrency", type=click.IntRange(min=1))
@click.option("--description", default=None, help="A note kept with the rule.")
@click.option("--disabled", is_flag=True, help="Store the rule switched off (it limits nothing).")
@click.option("--if-version", type=int, default=None, help="Only if the rule is at this version now.")
@click.option("--if-new", is_flag=True, help="Only if no rule has this pattern yet.")
@json_option
@pass_config
def set_rule(
    config: CliConfig,
    pattern: str,
    concurrency: int,
    description: str | None,
    disabled: bool,
    if_version: int | None,
    if_new: bool,
) -> None:
    """Add or change the rule PATTERN: at most CONCURRENCY calls it matches run at once (one pool per
    match: `tenants/*` gives each limit key under scope `tenants` its own CONCURRENCY)."""
    if if_new and if_version is not None:
        raise click.UsageError("give --if-new or --if-version, not both")
    rule: dict[str, Any] = {"pattern": pattern, "limits": {"concurrency": concurrency}, "disabled": disabled}
    if description is not None:
        rule["description"] = description
    if if_new:
        rule["precondition"] = {"type": "does_not_exist"}
    elif if_version is not None:
        rule["precondition"] = {"type": "matches", "version": if_version}
    with admin_api(config) as api:
        stored = api.request("PUT", "/limits/rules", json_body=[rule]).json()
    if config.as_json:
        emit_json(stored)
        return
    console().print(f"Set rule {pattern} (version {stored[0].get('version')})", markup=False)
    console().print(rules_table(stored))


@limits.command(name="delete")
@click.argument("patterns", nargs=-1, required=True, metavar="PATTERN...")
@click.option("--if-version", type=int, default=None, help="Only if the rule is at this version now (one PATTERN).")
@click.option("-y", "--yes", is_flag=True, help="Do not ask for confirmation.")
@json_option
@pass_config
def delete_rules(config: CliConfig, patterns: tuple[str, ...], if_version: int | None, yes: bool) -> None:
    """Remove the rules PATTERN... (all or none); calls they held start as others' limits allow."""
    if if_version is not None and len(patterns) != 1:
        raise click.UsageError("--if-version applies to one PATTERN")
    body = [{"pattern": p} if if_version is None else {"pattern": p, "expected_version": if_version} for p in patterns]
    confirm(f"Remove the concurrency rule(s) {', '.join(patterns)}?", yes=yes)
    with admin_api(config) as api:
        removed = api.request("POST", "/limits/rules/bulk-delete", json_body=body).json()
    if config.as_json:
        emit_json(removed)
        return
    if not removed:
        names = ", ".join(patterns)
        console().print(f"No rule had the pattern(s) {names}; list them with `torpor limits list`.", markup=False)
        return
    console().print(f"Removed rule(s) {', '.join(removed)}", markup=False)
