"""What every client command shares: the group's settings, HTTP clients of the admin API and the
ingress, JSON output, confirmations and the rich console.

Failures become `click.ClickException`s, so click prints `Error: <message>` on stderr and exits 1
without a traceback: an HTTP 4xx/5xx shows the API's `message` (`{"code", "message"}`, as Torpor's
and Restate's APIs answer errors); an API that does not answer names `torpor dev` and the flag that
points the CLI elsewhere.
"""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, TypeVar

import click
import httpx
from rich.console import Console

from adapters.cli.aws_auth import SigV4, execute_api_region

DEFAULT_ADMIN_URL = "http://127.0.0.1:9070"
DEFAULT_INGRESS_URL = "http://127.0.0.1:8080"
ADMIN_URL_ENV = "TORPOR_ADMIN_URL"
INGRESS_URL_ENV = "TORPOR_INGRESS_URL"

CONNECT_TIMEOUT_S = 5.0
ADMIN_TIMEOUT_S = 60.0  # registration runs discovery against the deployment, which may be slow to start
NON_TERMINAL_WIDTH = 200  # rich's 80 columns would cut invocation ids in piped output

F = TypeVar("F", bound=Callable[..., Any])


@dataclass(slots=True)
class CliConfig:
    """What the `torpor` group's options set for the client commands (`ctx.obj`)."""

    admin_url: str
    """Base URL of the admin API, without a trailing slash."""
    ingress_url: str
    """Base URL of the ingress, without a trailing slash."""
    as_json: bool = False
    """Print the API's JSON instead of tables (`--json` on the group or on the command)."""


pass_config = click.make_pass_decorator(CliConfig)
"""Decorator handing a command the group's `CliConfig` as its first argument."""


def base_url(ctx: click.Context, param: click.Parameter, value: str) -> str:
    """Click callback for `--admin-url` and `--ingress-url`: an http(s) URL, trailing slash removed.

    Raises:
        click.BadParameter: the value is not an http:// or https:// URL.
    """
    if not value.startswith(("http://", "https://")):
        raise click.BadParameter(f"{value!r} is not a URL: write e.g. http://127.0.0.1:9070", ctx, param)
    try:
        httpx.URL(value)
    except httpx.InvalidURL as exc:
        raise click.BadParameter(f"{value!r} is not a valid URL: {exc}", ctx, param) from exc
    return value.rstrip("/")


def _turn_on_json(ctx: click.Context, param: click.Parameter, value: bool) -> bool:
    config = ctx.find_object(CliConfig)
    if value and config is not None:
        config.as_json = True
    return value


def json_option(command: F) -> F:
    """Add `--json` to a command; it means the same as `torpor --json ...`."""
    option = click.option(
        "--json",
        "as_json",
        is_flag=True,
        expose_value=False,
        callback=_turn_on_json,
        help="Print the API's JSON as it is (same as `torpor --json ...`).",
    )
    return option(command)


def emit_json(value: Any) -> None:
    """Print a JSON value on stdout, indented, non-ASCII kept."""
    click.echo(json.dumps(value, indent=2, ensure_ascii=False))


def emit_response(response: httpx.Response) -> None:
    """Print an API answer's body for `--json`: JSON indented, anything else as it is, nothing if empty."""
    if not response.content:
        return
    try:
        value = response.json()
    except ValueError:
        click.echo(response.text)
    else:
        emit_json(value)


def console(*, stderr: bool = False) -> Console:
    """A rich console on stdout (or stderr) of this moment, so click's test runner captures it.

    Colours follow the terminal (none when piped, none with NO_COLOR). Off a terminal the width is
    200 columns unless COLUMNS says otherwise, so tables keep whole ids.
    """
    stream = sys.stderr if stderr else sys.stdout
    width = None if stream.isatty() or "COLUMNS" in os.environ else NON_TERMINAL_WIDTH
    return Console(file=stream, width=width, highlight=False)


def interactive() -> bool:
    """True when stdin is a terminal, so there is someone to ask."""
    return sys.stdin.isatty()


def edit_json_object(value: Any, must_be: str, ensure_ascii: bool = True) -> dict[str, Any] | None:
    """Open `value` as indented JSON in the user's $EDITOR (`click.edit`) and return what was saved,
    parsed; None if the editor was closed without saving. `must_be` names the object expected
    (e.g. "a JSON object of state names") in the error when the text is not one.

    Raises:
        click.ClickException: the edited text is not JSON, or not a JSON object; nothing was changed.
    """
    edited_text = click.edit(json.dumps(value, indent=2, ensure_ascii=ensure_ascii) + "\n", extension=".json")
    if edited_text is None:
        return None
    try:
        edited = json.loads(edited_text)
    except ValueError as exc:
        raise click.ClickException(f"the edited text is not JSON ({exc}); nothing was changed") from exc
    if not isinstance(edited, dict):
        raise click.ClickException(f"the edited text must be {must_be}; nothing was changed")
    return edited


def confirm(question: str, *, yes: bool) -> None:
    """Ask `question` on stderr when stdin is a terminal, unless `--yes` was given.

    Without a terminal (scripts, CI) there is nobody to ask, and the command goes on, as with `--yes`.

    Raises:
        click.Abort: the user answered no (click prints `Aborted!` and exits 1).
    """
    if yes or not interactive():
        return
    click.confirm(question, abort=True, err=True)


def api_message(response: httpx.Response) -> str:
    """The `message` of an error answer; else its text, else the HTTP reason (e.g. a proxy's 502 page)."""
    try:
        body = response.json()
    except ValueError:
        body = None
    if isinstance(body, dict) and isinstance(body.get("message"), str) and body["message"]:
        return str(body["message"])
    text = response.text.strip()
    if text:
        return text[:500]
    return f"HTTP {response.status_code} {response.reason_phrase}".strip()


class ApiClient:
    """One of Torpor's HTTP APIs (the admin API or the ingress) for the CLI.

    Use it as a context manager. `request` turns transport failures and error answers into
    `click.ClickException`s whose text says what to do.

    Args:
        base_url: The API's base URL, e.g. http://127.0.0.1:9070.
        api_name: How messages call it: "admin API" or "ingress".
        url_flag: The option that points the CLI at it: "--admin-url" or "--ingress-url".
        read_timeout_s: Seconds to wait for an answer; None waits as long as the API takes (the
            ingress bounds a call itself: past its call wait it answers 202).
    """

    def __init__(self, base_url: str, api_name: str, url_flag: str, read_timeout_s: float | None) -> None:
        self.base_url = base_url
        self.api_name = api_name
        self.url_flag = url_flag
        self.read_timeout_s = read_timeout_s
        timeout = httpx.Timeout(CONNECT_TIMEOUT_S, read=read_timeout_s)
        region = execute_api_region(base_url)  # an admin API behind API Gateway: IAM-signed requests
        self._client = httpx.Client(base_url=base_url, timeout=timeout, auth=SigV4(region) if region else None)

    def __enter__(self) -> ApiClient:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self._client.close()

    def request(
        self,
        method: str,
        path: str,
        *,
        json_body: Any = None,
        content: bytes | None = None,
        params: dict[str, str] | None = None,
        headers: dict[str, str] | None = None,
        check: bool = True,
        hint: str | None = None,
    ) -> httpx.Response:
        """Send one request and return the answer.

        Args:
            method: HTTP method.
            path: Path below the base URL, percent-encoded where needed.
            json_body: A JSON body; `content` sends raw bytes instead.
            content: A raw body.
            params: Query parameters.
            headers: Extra request headers.
            check: Raise on a 4xx/5xx answer; False hands it back to the caller.
            hint: Text added to the error message of a 409 answer (e.g. the flag that forces it).

        Returns:
            The answer.

        Raises:
            click.ClickException: the API is not reachable, did not answer in time, or (with
                `check`) answered 4xx/5xx; the message is the API's.
        """
        try:
            response = self._client.request(
                method, path, json=json_body, content=content, params=params, headers=headers
            )
        except (httpx.ConnectError, httpx.ConnectTimeout) as exc:
            raise click.ClickException(
                f"cannot reach the {self.api_name} at {self.base_url}: {_reason(exc)}; "
                f"start it with `torpor dev` or pass {self.url_flag}"
            ) from exc
        except httpx.TimeoutException as exc:
            raise click.ClickException(
                f"the {self.api_name} at {self.base_url} did not answer {method} {path} "
                f"within {self.read_timeout_s:g} s"
            ) from exc
        except httpx.HTTPError as exc:
            raise click.ClickException(
                f"the connection to the {self.api_name} at {self.base_url} failed during {method} {path}: "
                f"{_reason(exc)}"
            ) from exc
        if check and response.status_code >= 400:
            message = api_message(response)
            if hint and response.status_code == 409:
                message = f"{message} ({hint})"
            if response.status_code == 404 and message.startswith("no route for "):
                message += self.other_api_hint()
            raise click.ClickException(message)
        return response

    def other_api_hint(self) -> str:
        """After a 404 "no route": the admin API answers `GET /health`, the ingress does not. If the
        URL is the other API, say so and name the flag; else nothing (one more request)."""
        try:
            health = self._client.get("/health").status_code
        except httpx.HTTPError:
            return ""
        if self.api_name == "admin API" and health == 404:
            return (
                f"; {self.base_url} does not look like Torpor's admin API (the ingress?): pass the admin "
                f"API's URL with {self.url_flag} (torpor dev: http://127.0.0.1:9070)"
            )
        if self.api_name == "ingress" and health == 200:
            return (
                f"; {self.base_url} is Torpor's admin API, not the ingress: pass the ingress's URL with "
                f"{self.url_flag} (torpor dev: http://127.0.0.1:8080)"
            )
        return ""


def _reason(exc: Exception) -> str:
    return str(exc) or type(exc).__name__


def admin_api(config: CliConfig) -> ApiClient:
    """A client of the admin API at `config.admin_url`."""
    return ApiClient(config.admin_url, "admin API", "--admin-url", ADMIN_TIMEOUT_S)


def ingress_api(config: CliConfig) -> ApiClient:
    """A client of the ingress at `config.ingress_url`; it waits as long as a call takes."""
    return ApiClient(config.ingress_url, "ingress", "--ingress-url", None)
