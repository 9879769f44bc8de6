"""`torpor invocations list|describe|cancel|kill|pause|resume|restart-as-new|purge` (the admin API's `/invocations`),
`torpor invoke` (the ingress's `/restate/call|send/...`) and `torpor awakeables resolve|reject` (the
ingress's `/restate/awakeables/{id}/...`)."""

from __future__ import annotations

import json
from urllib.parse import quote

import click
import httpx

from adapters.cli.client import (
    CliConfig,
    admin_api,
    api_message,
    confirm,
    console,
    emit_json,
    emit_response,
    ingress_api,
    interactive,
    json_option,
    pass_config,
)
from adapters.cli.local import DURATION
from adapters.cli.render import details, invocation_details, invocations_table, journal_table


@click.group()
def invocations() -> None:
    """List, describe, cancel, kill, pause, resume, restart as new and purge invocations."""


STATUSES = ("pending", "scheduled", "ready", "running", "backing-off", "suspended", "paused", "completed")
COMPLETIONS = ("succeeded", "failed", "cancelled", "killed")


@invocations.command("list")
@click.option(
    "--status",
    type=click.Choice([*STATUSES, *COMPLETIONS]),
    help="Only this status, or only completed invocations that ended so (succeeded, failed, cancelled, killed).",
)
@click.option("--service", metavar="NAME", help="Only invocations of this service.")
@click.option("--handler", metavar="NAME", help="Only invocations of this handler.")
@click.option("--key", metavar="KEY", help="Only invocations of this object key or workflow id.")
@click.option(
    "--completion",
    type=click.Choice(["succeeded", "failed", "cancelled", "killed"]),
    help="Only completed invocations that ended so.",
)
@click.option(
    "--limit", type=click.IntRange(1, 1000), default=None, help="At most this many, newest first [admin API: 100]."
)
@click.option("--page-token", metavar="TOKEN", help="The next page: the token the previous page printed.")
@json_option
@pass_config
def list_invocations(
    config: CliConfig,
    status: str | None,
    service: str | None,
    handler: str | None,
    key: str | None,
    completion: str | None,
    limit: int | None,
    page_token: str | None,
) -> None:
    """List invocations, newest first by creation time."""
    if status in COMPLETIONS:
        if completion not in (None, status):
            raise click.UsageError(f"--status {status} and --completion {completion} contradict each other")
        status, completion = None, status
    filters = (
        ("status", status),
        ("service", service),
        ("handler", handler),
        ("key", key),
        ("completion", completion),
        ("limit", limit),
        ("page_token", page_token),
    )
    params = {name: str(value) for name, value in filters if value}
    with admin_api(config) as api:
        body = api.request("GET", "/invocations", params=params).json()
    if config.as_json:
        emit_json(body)
        return
    found = body.get("invocations") or []
    for unreadable in body.get("unreadable") or []:  # rows the store could not decode: named, not hidden
        click.echo(f"warning: {unreadable.get('message') or unreadable.get('invocation_id')}", err=True)
    if not found:
        console().print("No invocations" + (" match those filters." if params else "."))
        return
    console().print(invocations_table(found))
    if body.get("next_page_token"):
        console().print(f"More: --page-token {body['next_page_token']}", markup=False)


@invocations.command()
@click.argument("invocation_id", metavar="ID")
@json_option
@pass_config
def describe(config: CliConfig, invocation_id: str) -> None:
    """Show one invocation (ID, e.g. inv_1…): status, target, attempts, failures, waits, and its journal."""
    with admin_api(config) as api:
        invocation = api.request("GET", f"/invocations/{quote(invocation_id, safe='')}").json()
    if config.as_json:
        emit_json(invocation)
        return
    out = console()
    out.print(invocation_details(invocation))
    out.print(journal_table(invocation.get("journal") or []))


@invocations.command()
@click.argument("invocation_id", metavar="ID")
@click.option("--yes", "-y", is_flag=True, help="Cancel without asking (asked only in a terminal).")
@json_option
@pass_config
def cancel(config: CliConfig, invocation_id: str, yes: bool) -> None:
    """Cancel an invocation (ID): the handler gets a terminal error at its next await and may compensate.

    It then completes with code 409. A handler that fails before its first await never sees a
    cancel: kill it instead.
    """
    _confirm_about(config, invocation_id, f"Cancel invocation {invocation_id}?", yes=yes, completed=False)
    _patch(config, invocation_id, "cancel")
    if not config.as_json:
        console().print(
            f"Cancel requested for {invocation_id}: a started handler gets a terminal error at its next "
            "await and may run compensation; one not started yet (pending, scheduled, in an inbox) ends "
            "at once. Either way it completes with 409.",
            markup=False,
        )


@invocations.command()
@click.argument("invocation_id", metavar="ID")
@click.option("--yes", "-y", is_flag=True, help="Kill without asking (asked only in a terminal).")
@json_option
@pass_config
def kill(config: CliConfig, invocation_id: str, yes: bool) -> None:
    """Kill an invocation (ID): it completes with code 409 at once, no more handler code runs, timers are dropped.

    Unlike cancel, no compensation runs.
    """
    _confirm_about(
        config, invocation_id, f"Kill invocation {invocation_id}? No compensation will run.", yes=yes, completed=False
    )
    _patch(config, invocation_id, "kill")
    if not config.as_json:
        console().print(f"Killed {invocation_id}: it completed with 409.", markup=False)


@invocations.command()
@click.argument("invocation_id", metavar="ID")
@json_option
@pass_config
def pause(config: CliConfig, invocation_id: str) -> None:
    """Pause an invocation (ID): no more attempts until `torpor invocations resume ID`."""
    _patch(config, invocation_id, "pause")
    if not config.as_json:
        console().print(f"Paused {invocation_id}.", markup=False)


@invocations.command()
@click.argument("invocation_id", metavar="ID")
@click.option(
    "--deployment",
    metavar="DP_ID|latest|keep",
    help="Resume on this deployment (latest: the one its handler resolves to now) instead of the one it started on.",
)
@json_option
@pass_config
def resume(config: CliConfig, invocation_id: str, deployment: str | None) -> None:
    """Resume a paused or suspended invocation (ID) now, or retry a backing-off one at once, with a
    fresh retry budget."""
    query = f"?deployment={quote(deployment, safe='')}" if deployment else ""
    _patch(config, invocation_id, "resume" + query)
    if not config.as_json:
        console().print(f"Resumed {invocation_id}.", markup=False)


@invocations.command("restart-as-new")
@click.argument("invocation_id", metavar="ID")
@click.option(
    "--from",
    "from_index",
    type=click.IntRange(0, 2**32 - 1),
    default=0,
    show_default=True,
    help="Keep the journal up to this entry index (included; see `torpor invocations describe ID`) with the "
    "completions of its commands: ctx.run steps in it are not run again. 0 keeps only the input.",
)
@click.option(
    "--deployment",
    metavar="keep|latest|DP_ID",
    help="With --from > 0: run on the old invocation's deployment (keep), the latest one, or this one [latest].",
)
@json_option
@pass_config
def restart_as_new(config: CliConfig, invocation_id: str, from_index: int, deployment: str | None) -> None:
    """Run a completed invocation (ID) again as a new invocation, with the same input and headers.

    The old invocation is left as it is; the new id is printed. Workflows cannot be restarted.
    """
    query = f"?from={from_index}"
    if deployment:
        query += f"&deployment={quote(deployment, safe='')}"
    with admin_api(config) as api:
        reply = api.request("PATCH", f"/invocations/{quote(invocation_id, safe='')}/restart-as-new{query}")
    if config.as_json:
        emit_response(reply)
        return
    new_id = reply.json().get("new_invocation_id", "")
    console().print(f"Restarted {invocation_id} as new invocation {new_id}.", markup=False)


@invocations.command()
@click.argument("invocation_id", metavar="ID")
@click.option("--yes", "-y", is_flag=True, help="Purge without asking (asked only in a terminal).")
@json_option
@pass_config
def purge(config: CliConfig, invocation_id: str, yes: bool) -> None:
    """Delete a completed invocation (ID): its record and journal (its result is gone for attach and
    idempotency keys)."""
    _confirm_about(config, invocation_id, f"Purge invocation {invocation_id} and its journal?", yes=yes, completed=True)
    _patch(config, invocation_id, "purge")
    if not config.as_json:
        console().print(f"Purged {invocation_id}.", markup=False)


def _confirm_about(config: CliConfig, invocation_id: str, question: str, *, yes: bool, completed: bool) -> None:
    """Ask `question` (see `confirm`), but only about an invocation the verb can act on: in a terminal
    the invocation is read first, and an unknown one, or one that has (`completed=False`) or has not
    (`completed=True`) completed, is an error without a question.

    Raises:
        click.ClickException: unknown invocation, or the wrong state for the verb.
        click.Abort: the user answered no.
    """
    if yes or not interactive():
        return
    with admin_api(config) as api:
        found = api.request("GET", f"/invocations/{quote(invocation_id, safe='')}").json()
    status = found.get("status")
    if completed and status != "completed":
        raise click.ClickException(
            f"invocation {invocation_id} is {status}, not completed: cancel or kill it first, then purge it"
        )
    if not completed and status == "completed":
        kind = found.get("completion_kind") or "completed"
        raise click.ClickException(f"invocation {invocation_id} already completed ({kind}): nothing to stop")
    confirm(question, yes=False)


def _patch(config: CliConfig, invocation_id: str, action: str) -> None:
    with admin_api(config) as api:
        reply = api.request("PATCH", f"/invocations/{quote(invocation_id, safe='')}/{action}")
    if config.as_json:
        emit_response(reply)  # the admin API answers 202 without a body: nothing to print


def parse_json_argument(ctx: click.Context, param: click.Parameter, value: str | None) -> bytes | None:
    """Click callback for invoke's JSON argument: the UTF-8 bytes of a valid JSON text, or None.

    Raises:
        click.BadParameter: the text is not JSON (a bare word, say), with how to quote it.
    """
    if value is None:
        return None
    try:
        json.loads(value)
    except ValueError as exc:
        raise click.BadParameter(
            f"{value!r} is not JSON ({exc}). Quote a string as JSON, e.g. '\"Ann\"', or pass a number, "
            "an array or an object like '{\"n\": 1}'",
            ctx,
            param,
        ) from exc
    return value.encode()


@click.command()
@click.argument("service")
@click.argument("handler")
@click.argument("payload", metavar="[JSON]", required=False, callback=parse_json_argument)
@click.option("--key", "-k", metavar="KEY", help="The virtual object's key, or the workflow's id.")
@click.option("--send", is_flag=True, help="Do not wait for the result: print the invocation id and status.")
@click.option("--idempotency-key", metavar="KEY", help="Run once per target and KEY: a repeat gets the first result.")
@click.option(
    "--delay",
    type=DURATION,
    default=None,
    help="With --send: start no earlier than this from now (500ms, 10s, 1m30s, 1 hour, PT10S, or ms).",
)
@json_option
@pass_config
def invoke(
    config: CliConfig,
    service: str,
    handler: str,
    payload: bytes | None,
    key: str | None,
    send: bool,
    idempotency_key: str | None,
    delay: int | None,
) -> None:
    """Invoke HANDLER of SERVICE through the ingress with an optional JSON input, and print its result.

    Examples: `torpor invoke Greeter greet '"Ann"'`, `torpor invoke Counter add 1 --key my-key`,
    `torpor invoke Steps ten_steps '"x"' --send --delay 10s`. A call that outlasts the ingress's
    call wait prints the invocation id instead; follow it with `torpor invocations describe ID`.
    """
    if delay is not None and not send:
        raise click.UsageError("--delay needs --send: a call waits for its result, so it cannot start later")
    if "/" in service:
        words = service.split("/")
        example = f"torpor invoke {words[0]} {words[-1]}" + (f" --key {words[1]}" if len(words) == 3 else "")
        raise click.UsageError(f"write the service and the handler as two words, the key with --key: {example} [JSON]")
    segments = [service] if key is None else [service, key]
    path = "/restate/{}/{}/{}".format(
        "send" if send else "call", "/".join(quote(s, safe="") for s in segments), quote(handler, safe="")
    )
    headers = {"content-type": "application/json"} if payload is not None else {}
    if idempotency_key is not None:
        headers["idempotency-key"] = idempotency_key
    params = {"delay": f"{delay}ms"} if delay is not None else None
    with ingress_api(config) as api:
        reply = api.request("POST", path, content=payload or b"", headers=headers, params=params, check=False)
        invocation_id = reply.headers.get("x-restate-id")
        if reply.status_code >= 400:
            message = _flag_hint(_failure_message(reply, invocation_id), service, handler, key)
            if reply.status_code == 404 and message.startswith("no route for "):
                message += api.other_api_hint()
            raise click.ClickException(message)
    if reply.status_code == 202:  # sent, or a call past the ingress's call wait
        _print_accepted(config, reply, still_running=not send)
        return
    if config.as_json:
        emit_response(reply)
        return
    if reply.content:
        _print_result(reply)
    if invocation_id:
        console(stderr=True).print(f"invocation {invocation_id}", style="dim", markup=False)


def _failure_message(reply: httpx.Response, invocation_id: str | None) -> str:
    message = api_message(reply)
    if invocation_id is None:  # refused before an invocation existed: unknown handler, bad input, ...
        return message
    try:
        code = reply.json().get("code", reply.status_code)
    except (ValueError, AttributeError):
        code = reply.status_code
    return f"invocation {invocation_id} failed with code {code}: {message}"


def _flag_hint(message: str, service: str, handler: str, key: str | None) -> str:
    """The ingress names URL shapes (`/Counter/{key}/add`); the CLI names its flags instead."""
    if " call it with a key" in message and key is None:
        kind = message.split("' is a ", 1)[-1].split(":", 1)[0] if "' is a " in message else "keyed service"
        return f"'{service}' is a {kind}: pass its key with --key, e.g. torpor invoke {service} {handler} --key KEY"
    if "is a service, not a virtual object or workflow" in message and key is not None:
        return f"'{service}' is a service, not a virtual object or workflow: leave out --key"
    return message.replace("drop the idempotency-key header", "leave out --idempotency-key")


def _print_result(reply: httpx.Response) -> None:
    if "json" in reply.headers.get("content-type", ""):
        try:
            emit_json(reply.json())
            return
        except ValueError:
            pass
    click.echo(reply.text)


def _print_accepted(config: CliConfig, reply: httpx.Response, *, still_running: bool) -> None:
    if config.as_json:
        emit_response(reply)
        return
    body = reply.json()
    invocation_id = body.get("invocationId") or reply.headers.get("x-restate-id")
    console().print(
        details(
            [
                ("Invocation", invocation_id),
                ("Status", body.get("status")),
                ("Starts at", body.get("executionTime")),
            ]
        )
    )
    note = "still running: the ingress stopped waiting for it. " if still_running else ""
    console(stderr=True).print(
        f"{note}Follow it with `torpor invocations describe {invocation_id}`.", style="dim", markup=False
    )


@click.group()
def awakeables() -> None:
    """Resolve or reject an awakeable by its id (as `torpor invocations describe` prints it)."""


@awakeables.command("resolve")
@click.argument("awakeable_id", metavar="ID")
@click.argument("payload", metavar="[JSON]", required=False, callback=parse_json_argument)
@json_option
@pass_config
def resolve_awakeable(config: CliConfig, awakeable_id: str, payload: bytes | None) -> None:
    """Complete awakeable ID (sign_1…) with a JSON value (none: null), through the ingress
    (`POST /restate/awakeables/{id}/resolve`). The first completion wins."""
    headers = {"content-type": "application/json"}
    with ingress_api(config) as api:
        reply = api.request(
            "POST",
            f"/restate/awakeables/{quote(awakeable_id, safe='')}/resolve",
            content=payload or b"null",
            headers=headers,
        )
    if config.as_json:
        emit_response(reply)
        return
    console().print(
        f"Resolve of {awakeable_id} accepted (if it was completed already, the first completion stands).",
        markup=False,
    )


@awakeables.command("reject")
@click.argument("awakeable_id", metavar="ID")
@click.argument("reason")
@json_option
@pass_config
def reject_awakeable(config: CliConfig, awakeable_id: str, reason: str) -> None:
    """Fail awakeable ID (sign_1…) with REASON: the awaiting handler gets a terminal error
    (`POST /restate/awakeables/{id}/reject`). The first completion wins."""
    with ingress_api(config) as api:
        reply = api.request(
            "POST",
            f"/restate/awakeables/{quote(awakeable_id, safe='')}/reject",
            content=reason.encode(),
            headers={"content-type": "text/plain"},
        )
    if config.as_json:
        emit_response(reply)
        return
    console().print(
        f"Reject of {awakeable_id} accepted (if it was completed already, the first completion stands).",
        markup=False,
    )
