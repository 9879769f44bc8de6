"""`torpor ui --admin-url https://ID.execute-api.REGION.amazonaws.com`: the web UI of a deployed admin API.

The admin API on AWS takes SigV4-signed requests only (API Gateway, IAM authorization), which a
browser does not make. This command serves the UI on a loopback port and signs each of its admin
calls with the user's AWS credentials (`adapters.local.ui_proxy`); see docs/ui.md "On AWS".
"""

from __future__ import annotations

import os
import signal
import threading
from types import FrameType
from urllib.parse import urlsplit

import click
import httpx

from adapters.cli.aws_auth import SigV4, execute_api_region
from adapters.cli.client import ADMIN_URL_ENV, api_message

_LOOPBACK_HOSTS = ("127.0.0.1", "localhost", "::1")


def _admin_url(ctx: click.Context, param: click.Parameter, value: str) -> str:
    """`--admin-url`: an https:// URL (http:// only on a loopback address), trailing slash removed."""
    try:
        parts = urlsplit(value)
        host = (parts.hostname or "").lower()
    except ValueError as exc:
        raise click.BadParameter(f"{value!r} is not a valid URL: {exc}", ctx, param) from exc
    if parts.scheme == "https" and host:
        return value.rstrip("/")
    if parts.scheme == "http" and host in _LOOPBACK_HOSTS:  # a local stand-in for API Gateway
        return value.rstrip("/")
    raise click.BadParameter(
        f"{value!r} is not an https:// URL: the admin API's URL is https://ID.execute-api.REGION.amazonaws.com "
        "(the stack output AdminUrl); signed requests are not sent over plain http",
        ctx,
        param,
    )


def _region(admin_url: str, given: str | None, profile: str | None) -> str:
    """The region to sign for: `--region`, the execute-api URL's, else the AWS configuration's."""
    import botocore.exceptions
    import botocore.session

    if given:
        return given
    from_url = execute_api_region(admin_url)
    if from_url:
        return from_url
    try:
        configured = botocore.session.Session(profile=profile).get_config_variable("region")
    except botocore.exceptions.BotoCoreError:
        configured = None
    region = configured or os.environ.get("AWS_REGION")
    if not region:
        raise click.UsageError("no AWS region to sign for: pass --region (the admin API's region)")
    return str(region)


@click.command()
@click.option(
    "--admin-url",
    envvar=ADMIN_URL_ENV,
    show_envvar=True,
    required=True,
    metavar="URL",
    callback=_admin_url,
    help="The deployed admin API, e.g. https://ID.execute-api.REGION.amazonaws.com (stack output AdminUrl).",
)
@click.option(
    "--port",
    type=click.IntRange(0, 65535),
    default=9071,
    show_default=True,
    help="Port on 127.0.0.1 to serve the UI on (0: a free port).",
)
@click.option("--region", default=None, help="AWS region to sign for [default: the URL's, else AWS_REGION/config].")
@click.option("--profile", default=None, envvar="AWS_PROFILE", help="AWS profile whose credentials sign the calls.")
def ui(admin_url: str, port: int, region: str | None, profile: str | None) -> None:
    """Open the web UI of an admin API on AWS: serve it on 127.0.0.1 and sign its calls (SigV4).

    Each admin call the page makes is forwarded to --admin-url, signed with your AWS credentials
    (environment, AWS_PROFILE, ~/.aws, SSO), which need execute-api:Invoke on the admin API. Only
    this machine's browser can use it: the server listens on loopback, answers only to its own
    address and takes changes only from its own page. Stop it with Ctrl+C.
    """
    from adapters.local.dev import DevServerError
    from adapters.local.ui_proxy import UiProxy, UiProxyServer, gateway_refusal

    auth = SigV4(_region(admin_url, region, profile), profile)
    proxy = UiProxy(admin_url, auth)
    try:  # one signed request first, so a refusal is said here rather than in the page
        probe = httpx.get(f"{admin_url}/ui/config.json", auth=auth, timeout=30)
    except httpx.HTTPError as exc:
        proxy.close()
        raise click.ClickException(f"cannot reach the admin API at {admin_url}: {exc or type(exc).__name__}") from exc
    if probe.status_code == 403:
        proxy.close()
        raise click.ClickException(gateway_refusal(probe, admin_url))
    if probe.status_code >= 400:
        proxy.close()
        raise click.ClickException(
            f"the admin API at {admin_url} answered GET /ui/config.json with HTTP {probe.status_code} "
            f"({api_message(probe)}): is it Torpor's admin API?"
        )
    server = UiProxyServer(proxy, port)
    try:
        server.start()
    except DevServerError as exc:
        proxy.close()
        raise click.ClickException(exc.message) from exc
    stop = threading.Event()

    def request_stop(signum: int, frame: FrameType | None) -> None:
        stop.set()

    previous = {sig: signal.signal(sig, request_stop) for sig in (signal.SIGINT, signal.SIGTERM)}
    click.echo(f"torpor ui: open {server.url}/ui/ (admin API {admin_url}, signed for {auth.region}); Ctrl+C stops")
    try:
        while not stop.wait(0.5):
            pass
    finally:
        server.stop()
        for sig, handler in previous.items():
            signal.signal(sig, handler)
