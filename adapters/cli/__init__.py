"""The `torpor` command line (console entry point `main`), mirroring the `restate` CLI.

`torpor version` and `torpor dev` run Torpor itself (`torpor request-identity` makes and reads the key
it signs requests to deployments with; `torpor ui` serves the web UI of an admin API on AWS, signing
its calls); the client commands talk HTTP to a running control plane: `torpor deployments`,
`torpor services`, `torpor invocations`, `torpor state`, `torpor limits`, `torpor schedules`, `torpor subscriptions` and
`torpor sql` to the admin API
(`--admin-url`, `TORPOR_ADMIN_URL`, default http://127.0.0.1:9070), `torpor invoke` to the ingress
(`--ingress-url`, `TORPOR_INGRESS_URL`, default http://127.0.0.1:8080), as does `torpor awakeables`.
They print rich tables, or the API's JSON with `--json`. An API error prints its message and exits 1.

Confirmation rule: the verbs that destroy or stop work (`invocations cancel|kill|purge`,
`deployments remove`, `deployments register` of what it discovered, `schedules delete`,
`subscriptions delete`, `limits delete`, `state
edit|clear`) ask in a terminal, after
checking that the request can succeed (an unknown or already completed invocation is an error with no
question), unless `-y/--yes` is given; without a terminal they never ask. Shell completion is click's:
`eval "$(_TORPOR_COMPLETE=bash_source torpor)"` (`zsh_source`, `fish_source`).
"""

from __future__ import annotations

import click

from adapters.cli.client import (
    ADMIN_URL_ENV,
    DEFAULT_ADMIN_URL,
    DEFAULT_INGRESS_URL,
    INGRESS_URL_ENV,
    CliConfig,
    base_url,
)
from adapters.cli.deployments import deployments
from adapters.cli.invocations import awakeables, invocations, invoke
from adapters.cli.limits import limits
from adapters.cli.local import VERSION, dev, version
from adapters.cli.request_identity import request_identity
from adapters.cli.schedules import schedules
from adapters.cli.services import services
from adapters.cli.sql import sql
from adapters.cli.state import state
from adapters.cli.subscriptions import subscriptions
from adapters.cli.ui import ui


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(VERSION, "--version", "-V", prog_name="torpor", message="%(prog)s %(version)s")
@click.option(
    "--admin-url",
    envvar=ADMIN_URL_ENV,
    show_envvar=True,
    default=DEFAULT_ADMIN_URL,
    show_default=True,
    metavar="URL",
    callback=base_url,
    help="The admin API the client commands talk to.",
)
@click.option(
    "--ingress-url",
    envvar=INGRESS_URL_ENV,
    show_envvar=True,
    default=DEFAULT_INGRESS_URL,
    show_default=True,
    metavar="URL",
    callback=base_url,
    help="The ingress `torpor invoke` talks to.",
)
@click.option("--json", "as_json", is_flag=True, help="Print the API's JSON as it is instead of tables.")
@click.pass_context
def main(ctx: click.Context, admin_url: str, ingress_url: str, as_json: bool) -> None:
    """Torpor: durable execution for Restate SDK handlers, backed by DynamoDB."""
    ctx.obj = CliConfig(admin_url=admin_url, ingress_url=ingress_url, as_json=as_json)


main.add_command(version)
main.add_command(dev)
main.add_command(deployments)
main.add_command(services)
main.add_command(invocations)
main.add_command(invoke)
main.add_command(awakeables)
main.add_command(request_identity)
main.add_command(ui)
main.add_command(sql)
main.add_command(schedules)
main.add_command(subscriptions)
main.add_command(state)
main.add_command(limits)

__all__ = ["VERSION", "main"]
