"""`torpor subscriptions create|list|describe|delete`: the admin API's `/subscriptions` (event
subscriptions: an SQS queue, an EventBridge rule, a Kinesis or DynamoDB stream invoking a handler)."""

from __future__ import annotations

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


def _path(subscription_id: str) -> str:
    return f"/subscriptions/{quote(subscription_id, safe='')}"


def _options(subscription: dict[str, Any]) -> str:
    options = subscription.get("options") or {}
    return ", ".join(f"{k}={v}" for k, v in sorted(options.items())) or "-"


def subscriptions_table(found: list[dict[str, Any]]) -> Table:
    """Subscriptions as a table: id, source, sink, options."""
    table = Table(title="Subscriptions")
    for column in ("ID", "Source", "Sink", "Options"):
        table.add_column(column)
    for s in found:
        table.add_row(s["id"], s["source"], s["sink"], _options(s))
    return table


def _print(config: CliConfig, subscription: dict[str, Any], verb: str = "") -> None:
    if config.as_json:
        emit_json(subscription)
        return
    if verb:
        console().print(f"{verb} subscription {subscription['id']}", markup=False)
    table = Table(show_header=False, box=None)
    table.add_column(style="bold")
    table.add_column()
    for label, value in (("ID", subscription["id"]), ("Source", subscription["source"]),
                         ("Sink", subscription["sink"]), ("Options", _options(subscription))):  # fmt: skip
        table.add_row(label, str(value))
    console().print(table)


@click.group()
def subscriptions() -> None:
    """Event subscriptions: the events of an SQS queue (sqs://QUEUE), an EventBridge rule
    (eventbridge://RULE), a Kinesis stream (kinesis://STREAM) or a DynamoDB stream (dynamodb://TABLE)
    invoke a handler (service://Service/handler), each event once, in order per key.
    """


def _parse_option(ctx: click.Context, param: click.Parameter, values: tuple[str, ...]) -> dict[str, str]:
    options: dict[str, str] = {}
    for value in values:
        name, equals, setting = value.partition("=")
        if not equals or not name:
            raise click.BadParameter(f"{value!r} is not KEY=VALUE; write e.g. key=alice")
        options[name] = setting
    return options


@subscriptions.command()
@click.argument("source")
@click.argument("sink")
@click.argument("options", nargs=-1, metavar="[KEY=VALUE]...", callback=_parse_option)
@json_option
@pass_config
def create(config: CliConfig, source: str, sink: str, options: dict[str, str]) -> None:
    """Subscribe SINK (service://Service/handler) to SOURCE (sqs://QUEUE, eventbridge://RULE,
    kinesis://STREAM, dynamodb://TABLE); KEY=VALUE options (key=K: the object key of events without one)."""
    with admin_api(config) as api:
        body = {"source": source, "sink": sink, "options": options}
        subscription = api.request("POST", "/subscriptions", json_body=body).json()
    _print(config, subscription, "Created")


@subscriptions.command(name="list")
@click.option("--source", default=None, help="Only those of this source URI.")
@click.option("--sink", default=None, help="Only those of this sink URI.")
@json_option
@pass_config
def list_subscriptions(config: CliConfig, source: str | None, sink: str | None) -> None:
    """List subscriptions."""
    query = "&".join(f"{k}={quote(v, safe='')}" for k, v in (("source", source), ("sink", sink)) if v)
    with admin_api(config) as api:
        body = api.request("GET", "/subscriptions" + (f"?{query}" if query else "")).json()
    if config.as_json:
        emit_json(body)
        return
    found = body.get("subscriptions") or []
    if not found:
        console().print("No subscriptions. Create one with `torpor subscriptions create sqs://QUEUE service://S/h`.")
        return
    console().print(subscriptions_table(found))


@subscriptions.command()
@click.argument("subscription_id")
@json_option
@pass_config
def describe(config: CliConfig, subscription_id: str) -> None:
    """Show one subscription."""
    with admin_api(config) as api:
        subscription = api.request("GET", _path(subscription_id)).json()
    _print(config, subscription)


@subscriptions.command()
@click.argument("subscription_id")
@click.option("--yes", "-y", is_flag=True, help="Delete without asking (asked only in a terminal).")
@json_option
@pass_config
def delete(config: CliConfig, subscription_id: str, yes: bool) -> None:
    """Delete a subscription: its events are no longer delivered (they stay in their source)."""
    with admin_api(config) as api:
        api.request("GET", _path(subscription_id))  # an unknown id is an error before any question
        confirm(f"Delete subscription {subscription_id}?", yes=yes)
        reply = api.request("DELETE", _path(subscription_id))
    if config.as_json:
        emit_response(reply)
        return
    console().print(f"Deleted subscription {subscription_id}", markup=False)
