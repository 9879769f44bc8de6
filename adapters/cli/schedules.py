"""`torpor schedules create|list|describe|pause|resume|delete`: the admin API's `/schedules`."""

from __future__ import annotations

import json
from typing import Any
from urllib.parse import quote

import click
from rich.table import Table

from adapters.cli.client import (
    CliConfig,
    admin_api,
    confirm,
    console,
    emit_json,
    emit_response,
    json_option,
    pass_config,
)


def _path(name: str) -> str:
    return f"/schedules/{quote(name, safe='')}"


def _cadence(schedule: dict[str, Any]) -> str:
    return f"cron {schedule['cron']}" if schedule.get("cron") else f"every {schedule.get('every')}"


def _target(schedule: dict[str, Any]) -> str:
    key = schedule.get("key")
    return f"{schedule['service']}/{key}/{schedule['handler']}" if key else str(schedule["target"])


def schedules_table(found: list[dict[str, Any]]) -> Table:
    """Schedules as a table: name, cadence, target, state, next and last tick."""
    table = Table(title="Schedules")
    for column in ("Name", "Cadence (UTC)", "Target", "State", "Next tick", "Last tick"):
        table.add_column(column)
    for s in found:
        state = "paused" if s.get("paused") else "active"
        table.add_row(s["name"], _cadence(s), _target(s), state, s.get("next_tick") or "-", s.get("last_tick") or "-")
    return table


def schedule_details(s: dict[str, Any]) -> Table:
    """One schedule, field by field."""
    table = Table(show_header=False, box=None)
    table.add_column(style="bold")
    table.add_column()
    rows = [
        ("Name", s["name"]),
        ("Cadence (UTC)", _cadence(s)),
        ("Target", _target(s)),
        ("Body", "-" if s.get("body") is None else json.dumps(s["body"])),
        ("State", "paused" if s.get("paused") else "active"),
        ("Next tick", s.get("next_tick") or "-"),
        ("Last tick", s.get("last_tick") or "-"),
        ("Last invocation", s.get("last_invocation_id") or "-"),
        ("Created", s.get("created_at") or "-"),
    ]
    for label, value in rows:
        table.add_row(label, str(value))
    return table


def _print_schedule(config: CliConfig, schedule: dict[str, Any], verb: str = "") -> None:
    if config.as_json:
        emit_json(schedule)
        return
    if verb:
        console().print(f"{verb} schedule {schedule['name']}", markup=False)
    console().print(schedule_details(schedule))


@click.group()
def schedules() -> None:
    """Durable schedules: send to a handler on a cron expression (UTC) or every period.

    Every tick is a send whose idempotency key is made of the schedule name and the tick time, so a
    tick runs once; ticks missed while Torpor was down run as one catch-up send.
    """


def _parse_body(ctx: click.Context, param: click.Parameter, value: str | None) -> object:
    if value is None:
        return None
    try:
        return json.loads(value)
    except ValueError as exc:
        raise click.BadParameter(f'{value!r} is not JSON: write e.g. --body \'{{"name": "x"}}\' or --body 1') from exc


@schedules.command()
@click.argument("name")
@click.option("--cron", metavar="EXPR", help="5-field cron expression in UTC, e.g. '0 * * * *' (hourly).")
@click.option("--every", metavar="DURATION", help="A period such as 30s, 5m, 1h (ticks at its multiples).")
@click.option("--target", required=True, metavar="SERVICE/HANDLER", help="The handler each tick sends to.")
@click.option("--key", default=None, help="The virtual object key or workflow id (required for those).")
@click.option("--body", default=None, metavar="JSON", callback=_parse_body, help="The JSON body each tick sends.")
@json_option
@pass_config
def create(
    config: CliConfig, name: str, cron: str | None, every: str | None, target: str, key: str | None, body: object
) -> None:
    """Create schedule NAME sending to --target on --cron or --every."""
    if (cron is None) == (every is None):
        raise click.UsageError("give exactly one of --cron '0 * * * *' and --every 5m")
    request: dict[str, Any] = {"name": name, "target": target}
    request.update({k: v for k, v in (("cron", cron), ("every", every), ("key", key)) if v is not None})
    if body is not None:
        request["body"] = body
    with admin_api(config) as api:
        schedule = api.request("POST", "/schedules", json_body=request).json()
    _print_schedule(config, schedule, "Created")


@schedules.command(name="list")
@json_option
@pass_config
def list_schedules(config: CliConfig) -> None:
    """List schedules with their next tick."""
    with admin_api(config) as api:
        body = api.request("GET", "/schedules").json()
    if config.as_json:
        emit_json(body)
        return
    found = body.get("schedules") or []
    if not found:
        console().print(
            "No schedules. Create one with "
            "`torpor schedules create hourly --cron '0 * * * *' --target Service/handler`."
        )
        return
    console().print(schedules_table(found))


@schedules.command()
@click.argument("name")
@json_option
@pass_config
def describe(config: CliConfig, name: str) -> None:
    """Show one schedule."""
    with admin_api(config) as api:
        schedule = api.request("GET", _path(name)).json()
    _print_schedule(config, schedule)


@schedules.command()
@click.argument("name")
@json_option
@pass_config
def pause(config: CliConfig, name: str) -> None:
    """Stop a schedule's ticks until it is resumed."""
    with admin_api(config) as api:
        schedule = api.request("PATCH", f"{_path(name)}/pause").json()
    _print_schedule(config, schedule, "Paused")


@schedules.command()
@click.argument("name")
@json_option
@pass_config
def resume(config: CliConfig, name: str) -> None:
    """Tick again from the next future tick (ticks missed while paused do not run)."""
    with admin_api(config) as api:
        schedule = api.request("PATCH", f"{_path(name)}/resume").json()
    _print_schedule(config, schedule, "Resumed")


@schedules.command()
@click.argument("name")
@click.option("--yes", "-y", is_flag=True, help="Delete without asking (asked only in a terminal).")
@json_option
@pass_config
def delete(config: CliConfig, name: str, yes: bool) -> None:
    """Delete a schedule (the invocations its ticks sent stay)."""
    with admin_api(config) as api:
        api.request("GET", _path(name))  # an unknown schedule is an error before any question
        confirm(f"Delete schedule {name}?", yes=yes)
        reply = api.request("DELETE", _path(name))
    if config.as_json:
        emit_response(reply)
        return
    console().print(f"Deleted schedule {name}", markup=False)
