"""`torpor services list|describe|status|config view|config edit|config patch`: the admin API's
`/services` (and `/invocations`, which `status` counts)."""

from __future__ import annotations

import json
from typing import Any
from urllib.parse import quote

import click
from rich.table import Table

from adapters.cli.client import ApiClient, CliConfig, admin_api, console, edit_json_object, emit_json, json_option, pass_config
from adapters.cli.render import handlers_table, service_details, services_table
from control_plane.durations import parse_duration_ms


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


# The options `torpor services config edit` shows, as `PATCH /services/{name}` names them, and the
# options `GET /services/{name}` shows in its `config` (durations in ms); also `public` and `retry_policy`.
_DURATIONS = {
    "inactivity_timeout": "inactivityTimeout",
    "abort_timeout": "abortTimeout",
    "journal_retention": "journalRetention",
    "idempotency_retention": "idempotencyRetention",
    "workflow_completion_retention": "workflowCompletionRetention",
}
_RETRY = {
    "initial_interval": "retryPolicyInitialInterval",
    "max_interval": "retryPolicyMaxInterval",
    "max_attempts": "retryPolicyMaxAttempts",
    "exponentiation_factor": "retryPolicyExponentiationFactor",
    "on_max_attempts": "retryPolicyOnMaxAttempts",
}
_OVERRIDE = "admin override"


def current_overrides(settings: dict[str, Any]) -> dict[str, Any]:
    """The editable options of a service as `PATCH /services/{name}` takes them: the admin overrides
    its `config` shows (source "admin override"), None for the options without one; a duration the
    config does not list (workflow completion retention, but for a workflow) is left out."""

    def overridden(option: str) -> Any:
        entry = settings.get(option) or {}
        return entry.get("value") if entry.get("source") == _OVERRIDE else None

    def duration(option: str) -> str | None:
        value = overridden(option)
        return duration_text(value) if isinstance(value, int) and not isinstance(value, bool) else value

    out: dict[str, Any] = {name: duration(option) for name, option in _DURATIONS.items() if option in settings}
    private = overridden("ingressPrivate")
    out["public"] = None if private is None else not private
    retry = {name: (duration if name.endswith("_interval") else overridden)(option) for name, option in _RETRY.items()}
    if isinstance(retry["on_max_attempts"], str):
        retry["on_max_attempts"] = retry["on_max_attempts"].lower()
    out["retry_policy"] = {k: v for k, v in retry.items() if v is not None} or None
    return out


def changed_options(before: dict[str, Any], after: dict[str, Any]) -> dict[str, Any]:
    """The `PATCH /services/{name}` body that turns the overrides `before` into `after`: the options
    whose value changed, None removing an override (an option left out of `after` counts as null);
    of `retry_policy`, only the changed fields. Options not in `before` are passed on as they are
    (the admin API names an unknown one)."""

    def same(a: object, b: object) -> bool:
        return json.dumps(a, sort_keys=True) == json.dumps(b, sort_keys=True)  # 1 is not true

    changes = {k: v for k, v in after.items() if k not in before}
    for option, old in before.items():
        new = after.get(option)
        if same(old, new):
            continue
        if option == "retry_policy" and isinstance(new, dict):
            old_fields = old if isinstance(old, dict) else {}
            names = dict.fromkeys([*old_fields, *new])
            fields = {k: new.get(k) for k in names if not same(old_fields.get(k), new.get(k))}
            if fields:
                changes[option] = fields
        else:
            changes[option] = new
    return changes


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
        api_name = api_option_name(option)
        handlers = ", ".join(f"{h}={option_text(option, v)}" for h, v in (entry.get("handlers") or {}).items())
        table.add_row(api_name, option_text(option, entry.get("value")), entry.get("source", ""), handlers)
    console().print(table)
    console().print(
        f"Change an option with `torpor services config edit {name}` (the same names and units).", markup=False
    )


_PRIVATE = "ingressPrivate"
_DURATION_NAMES = {option: name for name, option in _DURATIONS.items()} | {
    option: f"retry_policy.{name}" for name, option in _RETRY.items() if name.endswith("_interval")
}


def api_option_name(option: str) -> str:
    """The name `PATCH /services/{name}` takes for an option of `GET /services/{name}`'s `config`
    (`inactivityTimeout` → `inactivity_timeout`, `retryPolicyMaxAttempts` → `retry_policy.max_attempts`,
    `ingressPrivate` → `public`); an unknown option keeps its name."""
    if option in _DURATIONS.values():
        return next(name for name, o in _DURATIONS.items() if o == option)
    if option in _RETRY.values():
        return "retry_policy." + next(name for name, o in _RETRY.items() if o == option)
    return "public" if option == _PRIVATE else option


def option_text(option: str, value: Any) -> str:
    """A config value as `PATCH /services/{name}` takes it: durations as "1m" / "1h 30m" / "500ms"
    (from ms), `ingressPrivate` as `public` (negated), `on_max_attempts` in lower case."""
    if value is None:
        return "-"
    if option in _DURATION_NAMES and isinstance(value, int) and not isinstance(value, bool):
        return duration_text(value)
    if option == _PRIVATE and isinstance(value, bool):
        return json.dumps(not value)
    if isinstance(value, str):
        return value.lower() if option == _RETRY["on_max_attempts"] else value
    return json.dumps(value)


def duration_text(ms: int) -> str:
    """Milliseconds as the largest units that divide them, e.g. 60000 → "1m", 5400000 → "1h 30m",
    1050 → "1s 50ms", 0 → "0s" (the humantime form the admin API parses back to the same ms)."""
    if ms == 0:
        return "0s"
    parts: list[str] = []
    for unit, size in (("d", 86_400_000), ("h", 3_600_000), ("m", 60_000), ("s", 1000), ("ms", 1)):
        count, ms = divmod(ms, size)
        if count:
            parts.append(f"{count}{unit}")
    return " ".join(parts)


@config_group.command("edit")
@click.argument("name")
@json_option
@pass_config
def config_edit(config: CliConfig, name: str) -> None:
    """Open $EDITOR on the overridable options of service NAME (JSON), then apply what changed.

    The editor shows the service's current admin overrides (durations as "1m", "1h 30m") and null
    for the options without one. Durations are written as "30s", "1 hour", "PT1H" or ms; setting an override to
    `null` removes it; `public: false` makes the service private to the ingress.
    """
    path = f"/services/{quote(name, safe='')}"
    with admin_api(config) as api:
        service = api.request("GET", path).json()
    template = current_overrides(service.get("config") or {})
    edited = edit_json_object(template, "a JSON object")
    if edited is None:
        console().print("No change.")
        return
    changes = changed_options(template, edited)
    if not changes:
        console().print("No change.")
        return
    with admin_api(config) as api:
        body = api.request("PATCH", path, json_body=changes).json()
    if config.as_json:
        emit_json(body)
        return
    applied = [f"{k} (override removed)" if changes[k] is None else k for k in sorted(changes)]
    console().print(f"Applied to {name}: {', '.join(applied)}.", markup=False)


class _DurationText(click.ParamType):
    """A duration option passed on as written, once `parse_duration_ms` reads it (so a bad one is a
    usage error naming the forms, before any request)."""

    name = "duration"

    def convert(self, value: object, param: click.Parameter | None, ctx: click.Context | None) -> str:
        try:
            parse_duration_ms(str(value))
        except ValueError as exc:
            self.fail(str(exc), param, ctx)
        return str(value)


_DURATION_TEXT = _DurationText()
_PATCH_HELP = {
    "inactivity_timeout": "How long an invocation may wait for its handler without progress before it is "
    "asked to suspend.",
    "abort_timeout": "After the inactivity timeout, how long before the attempt is aborted.",
    "journal_retention": "How long a completed invocation's journal is kept.",
    "idempotency_retention": "How long the answer to a call with an idempotency key is kept.",
    "workflow_completion_retention": "How long a completed workflow's answer, state and promises are kept.",
}


def _patch_options(command: Any) -> Any:
    for name in reversed(list(_DURATIONS)):
        command = click.option(
            f"--{name.replace('_', '-')}",
            name,
            type=_DURATION_TEXT,
            default=None,
            help=f"{_PATCH_HELP[name]} A duration: 5d 1h 30m 15s, 90sec, 1 hour, PT1H30M, or ms.",
        )(command)
    return command


@config_group.command("patch")
@click.argument("name")
@click.option(
    "--public",
    type=click.BOOL,
    default=None,
    metavar="true|false",
    help="Whether the ingress may call the service (false: only other services may).",
)
@_patch_options
@json_option
@pass_config
def config_patch(config: CliConfig, name: str, public: bool | None, **durations: str | None) -> None:
    """Set options of service NAME from the flags given (admin overrides, until it is registered again).

    Durations are written as Restate writes them (5d 1h 30m 15s, 90sec, 1 hour, PT1H30M) or in ms.
    `torpor services config edit` also removes overrides and sets the retry policy.
    """
    changes: dict[str, Any] = {k: v for k, v in durations.items() if v is not None}
    if public is not None:
        changes["public"] = public
    if not changes:
        flags = ", ".join(["--public", *(f"--{k.replace('_', '-')}" for k in _DURATIONS)])
        raise click.UsageError(f"nothing to change: pass at least one of {flags}")
    with admin_api(config) as api:
        body = api.request("PATCH", f"/services/{quote(name, safe='')}", json_body=changes).json()
    if config.as_json:
        emit_json(body)
        return
    console().print(f"Applied to {name}: {', '.join(sorted(changes))}.", markup=False)
    console().print(f"See the options with `torpor services config view {name}`.", markup=False)


ACTIVE_STATUSES = ("pending", "scheduled", "ready", "running", "backing-off", "suspended", "paused")
"""The statuses of an invocation that has not completed, as `services status` counts them."""
_PAGE = 1000


def active_invocations(api: ApiClient, service: str | None) -> list[dict[str, Any]]:
    """Every invocation that has not completed (of `service`, or of all), page by page.

    Raises:
        click.ClickException: the admin API refused.
    """
    found: list[dict[str, Any]] = []
    for status in ACTIVE_STATUSES:
        params = {"status": status, "limit": str(_PAGE)}
        if service is not None:
            params["service"] = service
        while True:
            body = api.request("GET", "/invocations", params=params).json()
            found.extend(body.get("invocations") or [])
            token = body.get("next_page_token")
            if not token:
                break
            params["page_token"] = token
    return found


def status_summary(services: list[dict[str, Any]], invocations: list[dict[str, Any]]) -> dict[str, Any]:
    """`{"services": [{"name", "ty", "handlers": {handler: {status: count}}, "oldest": {...}|None}],
    "active_keys": [{"service", "key", "holder", "holder_status", "queued"}]}` from active invocations.

    `oldest` is the oldest invocation that is not suspended (`{"id", "status", "created_at"}`), as
    `restate services status` shows it. An active key is a virtual object key with an invocation of an
    exclusive handler that has started (it holds the key) or is pending (it waits in the key's queue).
    """
    exclusive = {
        (s["name"], h["name"])
        for s in services
        if s.get("ty") == "VirtualObject"
        for h in s.get("handlers") or []
        if h.get("ty") == "Exclusive"
    }
    counts: dict[str, dict[str, dict[str, int]]] = {s["name"]: {} for s in services}
    oldest: dict[str, dict[str, Any]] = {}
    keys: dict[tuple[str, str], dict[str, Any]] = {}
    for inv in invocations:
        service, handler, status = inv.get("target_service_name", ""), inv.get("target_handler_name", ""), inv["status"]
        by_status = counts.setdefault(service, {}).setdefault(handler, {})
        by_status[status] = by_status.get(status, 0) + 1
        if status != "suspended" and (service not in oldest or inv["created_at"] < oldest[service]["created_at"]):
            oldest[service] = {"id": inv["id"], "status": status, "created_at": inv["created_at"]}
        key = inv.get("target_service_key")
        if key is not None and (service, handler) in exclusive:
            entry = keys.setdefault(
                (service, key), {"service": service, "key": key, "holder": None, "holder_status": None, "queued": 0}
            )
            if status == "pending":
                entry["queued"] += 1
            elif status != "scheduled":
                entry["holder"], entry["holder_status"] = inv["id"], status
    summary = [
        {"name": s["name"], "ty": s.get("ty"), "handlers": counts.get(s["name"], {}), "oldest": oldest.get(s["name"])}
        for s in services
    ]
    active = sorted((k for k in keys.values() if k["holder"] or k["queued"]), key=lambda k: (-k["queued"], k["key"]))
    return {"services": summary, "active_keys": active}


@services.command("status")
@click.argument("service", required=False)
@click.option("--locked-keys-limit", default=5, show_default=True, help="Active keys shown per virtual object.")
@json_option
@pass_config
def status(config: CliConfig, service: str | None, locked_keys_limit: int) -> None:
    """Show what each handler of SERVICE (or of every service) is doing: its invocations by status.

    Counts the invocations that have not completed (pending, scheduled, ready, running,
    backing-off, suspended, paused), names the oldest one that is not suspended, and lists the
    virtual object keys that are held or have calls waiting.
    """
    with admin_api(config) as api:
        if service is None:
            found = api.request("GET", "/services").json().get("services") or []
        else:
            found = [api.request("GET", f"/services/{quote(service, safe='')}").json()]
        summary = status_summary(found, active_invocations(api, service))
    if config.as_json:
        emit_json(summary)
        return
    out = console()
    if not found:
        out.print("No services. Register a deployment with `torpor deployments register http://localhost:9080`.")
        return
    table = Table(title="Invocations by status", title_justify="left")
    table.add_column("")
    for column in ACTIVE_STATUSES:
        table.add_column(column.upper(), justify="right")
    table.add_column("OLDEST NOT SUSPENDED")
    handlers_of = {s["name"]: sorted(h["name"] for h in s.get("handlers") or []) for s in found}
    for entry in summary["services"]:
        oldest = entry["oldest"]
        table.add_row(
            f"[bold]{entry['name']}[/bold] ({entry['ty']})",
            *[""] * len(ACTIVE_STATUSES),
            f"{oldest['id']} {oldest['status']} since {oldest['created_at']}" if oldest else "-",
        )
        for handler in handlers_of.get(entry["name"], []):
            by_status = entry["handlers"].get(handler, {})
            table.add_row(f"  {handler}", *[str(by_status.get(s, "-")) for s in ACTIVE_STATUSES], "")
    out.print(table)
    if summary["active_keys"]:
        keys = Table(title="Active keys", title_justify="left")
        for column in ("SERVICE", "KEY", "QUEUED", "HELD BY"):
            keys.add_column(column)
        shown: dict[str, int] = {}
        for key in summary["active_keys"]:
            shown[key["service"]] = shown.get(key["service"], 0) + 1
            if shown[key["service"]] > locked_keys_limit:
                continue
            holder = f"{key['holder']} ({key['holder_status']})" if key["holder"] else "-"
            keys.add_row(key["service"], key["key"], str(key["queued"]), holder)
        out.print(keys)
