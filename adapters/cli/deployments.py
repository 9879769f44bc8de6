"""`torpor deployments register|list|describe|remove`: the admin API's `/deployments`."""

from __future__ import annotations

from urllib.parse import quote

import click

from adapters.cli.client import (
    CliConfig,
    admin_api,
    confirm,
    console,
    emit_json,
    emit_response,
    interactive,
    json_option,
    pass_config,
)
from adapters.cli.render import deployment_details, deployments_table, discovered_table, services_table


def parse_headers(ctx: click.Context, param: click.Parameter, values: tuple[str, ...]) -> dict[str, str]:
    """Click callback for `--header NAME=VALUE` (repeatable): the headers as a dict.

    Raises:
        click.BadParameter: a value without `=`, or with an empty name.
    """
    headers: dict[str, str] = {}
    for item in values:
        name, sep, value = item.partition("=")
        if not sep or not name.strip():
            raise click.BadParameter(
                f"{item!r} is not NAME=VALUE: write e.g. --header 'Authorization=Bearer my-token'", ctx, param
            )
        headers[name.strip()] = value
    return headers


@click.group()
def deployments() -> None:
    """Register, list, describe and remove deployments (endpoints serving Restate SDK services)."""


@deployments.command()
@click.argument("url")
@click.option(
    "--force",
    is_flag=True,
    help="Register again a URI already registered whose services changed (replaces the old deployment's services).",
)
@click.option(
    "--header",
    "headers",
    multiple=True,
    metavar="NAME=VALUE",
    callback=parse_headers,
    help="A header Torpor adds to every request to the deployment, e.g. Authorization=Bearer… (repeatable).",
)
@click.option(
    "--assume-role-arn",
    metavar="ROLE_ARN",
    default=None,
    help="For a Lambda ARN: invoke the function with this IAM role's credentials (STS AssumeRole).",
)
@click.option(
    "--google-id-token",
    is_flag=True,
    help="For Cloud Run: send a Google ID token (audience: the service URL, or --audience). Implied for a "
    "service name projects/P/locations/L/services/S.",
)
@click.option("--audience", default=None, help="The ID token's audience for --google-id-token (implies it).")
@click.option(
    "--use-http1.1",
    "use_http_11",
    is_flag=True,
    help="Invoke over HTTP/1.1 in request/response mode even if the deployment speaks HTTP/2 "
    "(by default an HTTP/2 deployment is streamed: one request per suspension).",
)
@click.option("--yes", "-y", is_flag=True, help="Register without asking (asked only in a terminal).")
@json_option
@pass_config
def register(
    config: CliConfig,
    url: str,
    force: bool,
    headers: dict[str, str],
    assume_role_arn: str | None,
    google_id_token: bool,
    audience: str | None,
    use_http_11: bool,
    yes: bool,
) -> None:
    """Register the deployment at URL: discover its services and route their handlers to it.

    URL is the deployment's base URL, e.g. http://localhost:9080, or a Lambda function version's
    ARN, e.g. arn:aws:lambda:eu-west-1:123456789012:function:NAME:3 (an unqualified, $LATEST or alias
    ARN needs --force), or a Cloud Run service's URL (with --google-id-token) or name
    (projects/P/locations/L/services/S). In a terminal, the discovered services are shown first and you are asked to
    confirm; --yes skips the question.
    """
    is_lambda = url.startswith("arn:")
    if assume_role_arn is not None and not is_lambda:
        raise click.UsageError("--assume-role-arn applies to Lambda ARNs only (arn:aws:lambda:…)")
    body: dict[str, object] = {"arn": url} if is_lambda else {"uri": url}
    if assume_role_arn is not None:
        body["assume_role_arn"] = assume_role_arn
    if google_id_token or audience is not None:
        if is_lambda:
            raise click.UsageError("--google-id-token and --audience apply to Cloud Run URLs, not Lambda ARNs")
        body["auth"] = {"google_id_token": {"audience": audience} if audience else {}}
    body.update({"additional_headers": headers, "force": force})
    if use_http_11:
        body["use_http_11"] = True
    with admin_api(config) as api:
        if not yes and interactive():
            dry_run = api.request("POST", "/deployments", json_body={**body, "dry_run": True}).json()
            registered = {s["name"] for s in api.request("GET", "/services").json().get("services", [])}
            console(stderr=True).print(discovered_table(dry_run.get("services") or [], registered))
            confirm(f"Register the deployment at {url}?", yes=False)
        reply = api.request(
            "POST", "/deployments", json_body=body, hint="pass --force to replace the registered deployment"
        )
    deployment = reply.json()
    if config.as_json:
        emit_json(deployment)
        return
    out = console()
    out.print(f"Registered deployment [bold]{deployment.get('id')}[/bold] at ", end="")
    out.print(deployment.get("uri", url), markup=False)
    out.print(services_table(deployment.get("services") or [], title="Services"))


@deployments.command("list")
@json_option
@pass_config
def list_deployments(config: CliConfig) -> None:
    """List the registered deployments."""
    with admin_api(config) as api:
        body = api.request("GET", "/deployments").json()
    if config.as_json:
        emit_json(body)
        return
    found = body.get("deployments") or []
    if not found:
        console().print("No deployments. Register one with `torpor deployments register http://localhost:9080`.")
        return
    console().print(deployments_table(found))


@deployments.command()
@click.argument("deployment_id", metavar="ID")
@json_option
@pass_config
def describe(config: CliConfig, deployment_id: str) -> None:
    """Show one deployment (ID, e.g. dp_…) and the services it serves."""
    with admin_api(config) as api:
        deployment = api.request("GET", f"/deployments/{quote(deployment_id, safe='')}").json()
    if config.as_json:
        emit_json(deployment)
        return
    out = console()
    out.print(deployment_details(deployment))
    out.print(services_table(deployment.get("services") or [], title="Services"))


@deployments.command()
@click.argument("deployment_id", metavar="ID")
@click.option(
    "--force",
    is_flag=True,
    help="Remove it even if it serves the latest revision of a service (the service goes with it) or "
    "unfinished invocations are pinned to it (they will fail).",
)
@click.option("--yes", "-y", is_flag=True, help="Remove without asking (asked only in a terminal).")
@json_option
@pass_config
def remove(config: CliConfig, deployment_id: str, force: bool, yes: bool) -> None:
    """Remove a deployment (ID, e.g. dp_…) once it is drained.

    Refused, unless --force, while it serves the latest revision of a service (removing it removes
    the service, and calls to it fail) or while unfinished invocations are pinned to it, as
    `restate deployments remove` refuses an active or draining deployment.
    """
    path = f"/deployments/{quote(deployment_id, safe='')}"
    with admin_api(config) as api:
        api.request("GET", path)  # an unknown deployment is a 404 before any question
        latest = sorted(
            s["name"] for s in api.request("GET", "/services").json().get("services") or []
            if s.get("deployment_id") == deployment_id
        )
        if latest and not force:
            raise click.ClickException(
                f"deployment {deployment_id} serves the latest revision of {', '.join(latest)}: removing it "
                "removes those services and their calls fail; register their new deployment first, or pass "
                "--force to remove it anyway"
            )
        confirm(f"Remove deployment {deployment_id} and its services?", yes=yes)
        reply = api.request(
            "DELETE", path, params={"force": "true"} if force else None, hint="pass --force to remove it anyway"
        )
    if config.as_json:
        emit_response(reply)  # the admin API answers 202 without a body: nothing to print
        return
    console().print(f"Removed deployment {deployment_id}", markup=False)
