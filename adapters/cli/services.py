"""`torpor services list|describe`: the admin API's `/services`."""

from __future__ import annotations

from urllib.parse import quote

import click

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
