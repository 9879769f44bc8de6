"""`torpor state get|edit|clear`: the state of virtual object and workflow keys, as `restate state`.

Reads with `GET /services/{name}/state/{key}?encoding=base64` (whole values and the state's
version) and `GET /services/{name}/state` (the keys that have state); writes with
`POST /services/{name}/state` (Restate's `ModifyServiceStateRequest`): the key's whole new state
and the version it was based on, so a write fails (409) if the state changed since it was read,
unless `--force`. The admin API holds the key like an exclusive invocation while it writes, and
refuses (409) while an invocation holds the key.
"""

from __future__ import annotations

import base64
import binascii
import json
from typing import Any
from urllib.parse import quote

import click
from rich.table import Table

from adapters.cli.client import (
    ApiClient,
    CliConfig,
    admin_api,
    confirm,
    console,
    edit_json_object,
    emit_json,
    json_option,
    pass_config,
)

_CHANGED = "the state changed since it was read, or an invocation holds the key: run the command again, or pass --force"


@click.group()
def state() -> None:
    """Read, edit or clear the state of a virtual object or workflow key."""


def _state_path(service: str, key: str | None = None) -> str:
    path = f"/services/{quote(service, safe='')}/state"
    return path if key is None else f"{path}/{quote(key, safe='')}"


def read_state(api: ApiClient, service: str, key: str) -> tuple[dict[str, bytes], str]:
    """The whole state of `service/key` (`{name: value bytes}`) and its version.

    Raises:
        click.ClickException: the admin API refused (unknown service, a service without state).
    """
    body = api.request("GET", _state_path(service, key), params={"encoding": "base64"}).json()
    values = {name: base64.b64decode(value) for name, value in (body.get("state") or {}).items()}
    return values, str(body.get("version", ""))


def as_json(values: dict[str, bytes], *, binary: bool) -> dict[str, Any]:
    """State values as JSON: each value parsed as JSON, or with `binary` as URL-safe base64 text.

    Raises:
        click.ClickException: a value is not JSON (naming it and `--binary`).
    """
    if binary:
        return {name: base64.urlsafe_b64encode(value).decode() for name, value in sorted(values.items())}
    out: dict[str, Any] = {}
    for name, value in sorted(values.items()):
        try:
            out[name] = json.loads(value)
        except ValueError as exc:
            raise click.ClickException(
                f"the value of state key {name!r} is not JSON: pass --binary to see every value as base64"
            ) from exc
    return out


def from_json(edited: dict[str, Any], *, binary: bool) -> dict[str, list[int]]:
    """The `new_state` of `POST /services/{name}/state` from edited JSON: each value as compact JSON
    bytes, or with `binary` decoded from base64 text.

    Raises:
        click.ClickException: with `binary`, a value that is not base64 text.
    """
    out: dict[str, list[int]] = {}
    for name, value in edited.items():
        if binary:
            try:
                raw = base64.urlsafe_b64decode(value) if isinstance(value, str) else None
            except (binascii.Error, ValueError):
                raw = None
            if raw is None:
                raise click.ClickException(f"the value of state key {name!r} is not base64 text; nothing was changed")
        else:
            raw = json.dumps(value, separators=(",", ":"), ensure_ascii=False).encode()
        out[name] = list(raw)
    return out


def state_table(values: dict[str, Any], title: str) -> Table:
    """A KEY / VALUE table of state values (JSON, indented)."""
    table = Table(title=title, title_justify="left")
    table.add_column("KEY")
    table.add_column("VALUE")
    for name, value in values.items():
        table.add_row(name, json.dumps(value, indent=2, ensure_ascii=False))
    return table


def write_state(api: ApiClient, service: str, key: str, new_state: dict[str, list[int]], version: str | None) -> None:
    """Replace the whole state of `service/key`; `version` None writes whatever it is now (--force).

    Raises:
        click.ClickException: the admin API refused (409: the state changed, or the key is held).
    """
    body: dict[str, Any] = {"object_key": key, "new_state": new_state}
    if version is not None:
        body["version"] = version
    # --force skips the version check only: a key held by an invocation stays refused, and saying --force then misleads
    api.request("POST", _state_path(service), json_body=body, hint=_CHANGED if version is not None else None)


binary_option = click.option(
    "--binary", is_flag=True, help="Show values as base64 text instead of parsing them as JSON."
)


@state.command("get")
@click.argument("service")
@click.argument("key")
@binary_option
@click.option("--plain", "-p", is_flag=True, help="Print only the state, as one JSON object.")
@json_option
@pass_config
def get(config: CliConfig, service: str, key: str, binary: bool, plain: bool) -> None:
    """Show the state of KEY of the virtual object or workflow SERVICE: each name and its value."""
    with admin_api(config) as api:
        if config.as_json:
            emit_json(api.request("GET", _state_path(service, key), params={"encoding": "base64"}).json())
            return
        values, _ = read_state(api, service, key)
    shown = as_json(values, binary=binary)
    if plain:
        emit_json(shown)
    elif not shown:
        console().print(f"No state for {service}/{key}.", markup=False)
    else:
        console().print(state_table(shown, f"{service}/{key}"))


@state.command("edit")
@click.argument("service")
@click.argument("key")
@binary_option
@click.option("--force", "-f", is_flag=True, help="Write even if the state changed since it was read.")
@click.option("--yes", "-y", is_flag=True, help="Write without asking (asked only in a terminal).")
@pass_config
def edit(config: CliConfig, service: str, key: str, binary: bool, force: bool, yes: bool) -> None:
    """Open $EDITOR on the state of KEY of SERVICE (a JSON object), then write the edited state.

    The whole state is replaced: a name removed from the object is deleted. The write carries the
    version of the state that was read, so it fails if a handler changed the state meanwhile
    (--force writes anyway); it waits for no invocation: while one holds the key it is refused.
    """
    with admin_api(config) as api:
        values, version = read_state(api, service, key)
    current = as_json(values, binary=binary)
    edited = edit_json_object(current, "a JSON object of state names", ensure_ascii=False)
    if edited is None or edited == current:
        console().print("No change.")
        return
    new_state = from_json(edited, binary=binary)
    console(stderr=True).print(state_table(edited, f"New state of {service}/{key}"))
    confirm(f"Replace the state of {service}/{key}?", yes=yes)
    with admin_api(config) as api:
        write_state(api, service, key, new_state, None if force else version)
    console().print(f"Wrote the state of {service}/{key}.", markup=False)


@state.command("clear")
@click.argument("target", metavar="SERVICE[/KEY]")
@click.option("--force", "-f", is_flag=True, help="Clear even if the state changed since it was read.")
@click.option("--yes", "-y", is_flag=True, help="Clear without asking (asked only in a terminal).")
@pass_config
def clear(config: CliConfig, target: str, force: bool, yes: bool) -> None:
    """Delete the state of SERVICE/KEY, or of every key of SERVICE that has state (1000 at a time).

    Each key is cleared with the version of the state that was read (--force: whatever it is);
    a key an invocation holds is refused, and the keys before it stay cleared.
    """
    service, _, key = target.partition("/")
    more = False
    with admin_api(config) as api:
        if key:
            keys = [key]
        else:
            listing = api.request("GET", _state_path(service)).json()
            keys, more = list(listing.get("keys") or []), bool(listing.get("truncated"))
        found = [(k, *read_state(api, service, k)) for k in keys]
        found = [(k, values, version) for k, values, version in found if values]
        if not found:
            raise click.ClickException(f"no state found for {target}")
        table = Table(title="To clear", title_justify="left")
        for column in ("SERVICE", "KEY", "STATE KEYS"):
            table.add_column(column)
        for k, values, _ in found:
            table.add_row(service, k, ", ".join(sorted(values)))
        console(stderr=True).print(table)
        confirm(f"Delete the state of {len(found)} key(s) of {service}?", yes=yes)
        for k, _, version in found:
            write_state(api, service, k, {}, None if force else version)
            console().print(f"Cleared the state of {service}/{k}.", markup=False)
    if more:
        console().print(f"More keys of {service} have state: run `torpor state clear {service}` again.", markup=False)
