"""`torpor services list|describe|config view|config edit`: the admin API's `/services`."""

from __future__ import annotations

import json
from urllib.parse import quote

import click
from rich.table import Table

from adapters.cli.client import CliConfig, admin_api, console, emit_json, json_option, pass_config
from adapters.cli.render import handlers_table, service_details, services_table


@click.group()
def services() -> None:
    """List and describe the registered services and their handlers."""


@services.command("list")
@json_option
@pass_config
def list_services(config: CliConfig) -> None:
    """List the registered services: type, handlers, revision and deployment."""
    with admin_api(config) as api:
        body = api.request("GET", "/services").json()
    if config.as_json:
        emit_json(body)
        return
    found = body.get("services") or []
    if not found:
        console().print("No services. Register a deployment with `torpor deployments register http://localhost:9080`.")
        return
    console().print(services_table(found))


@services.command()
@click.argument("name")
@json_option
@pass_config
def describe(config: CliConfig, name: str) -> None:
    """Show the service NAME and its handlers: type, input and output content types."""
    with admin_api(config) as api:
        service = api.request("GET", f"/services/{quote(name, safe='')}").json()
    if config.as_json:
        emit_json(service)
        return
    out = console()
    out.print(service_details(service))
    out.print(handlers_table(service.get("handlers") or []))


@services.group("config")
def config_group() -> None:
    """View or edit a service's configuration (admin overrides, until it is registered again)."""


_EDITABLE = (
    "inactivity_timeout",
    "abort_timeout",
    "journal_retention",
    "idempotency_retention",
    "workflow_completion_retention",
    "public",
    "retry_policy",
)


@config_group.command("view")
@click.argument("name")
@json_option
@pass_config
def config_view(config: CliConfig, name: str) -> None:
    """Show each option of service NAME: its effective value and where it comes from."""
    with admin_api(config) as api:
        service = api.request("GET", f"/services/{quote(name, safe='')}").json()
    settings = service.get("config") or {}
    if config.as_json:
        emit_json(settings)
        return
    table = Table(title=f"{name} configuration", title_justify="left")
    for column in ("option", "value", "source", "set by handlers"):
        table.add_column(column)
    for option, entry in settings.items():
        handlers = ", ".join(f"{h}={v}" for h, v in (entry.get("handlers") or {}).items())
        table.add_row(option, json.dumps(entry.get("value")), entry.get("source", ""), handlers)
    console().print(table)


@config_group.command("edit")
@click.argument("name")
@json_option
@pass_config
def config_edit(config: CliConfig, name: str) -> None:
    """Open $EDITOR on the overridable options of service NAME (JSON), then apply what changed.

    Durations are written as "30s", "PT1H" or ms; `null` removes an override; `public: false`
    makes the service private to the ingress.
    """
    template = dict.fromkeys(_EDITABLE)
    edited = click.edit(json.dumps(template, indent=2) + "\n", extension=".json")
    if edited is None:
        console().print("No change.")
        return
    try:
        changes = json.loads(edited)
    except ValueError as exc:
        raise click.ClickException(f"the edited text is not JSON ({exc}); nothing was changed") from exc
    if not isinstance(changes, dict):
        raise click.ClickException("the edited text must be a JSON object; nothing was changed")
    changes = {k: v for k, v in changes.items() if v is not None or k not in template}
    if not changes:
        console().print("No change.")
        return
    with admin_api(config) as api:
        body = api.request("PATCH", f"/services/{quote(name, safe='')}", json_body=changes).json()
    if config.as_json:
        emit_json(body)
        return
    console().print(f"Applied to {name}: {', '.join(sorted(changes))}.", markup=False)
