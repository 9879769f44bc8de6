"""A request's input checked against the handler it targets, and JSON parsed with a clear 400.

Shared by the ingress (`http_api.ingress`) and the schedules (`control_plane.schedules`), which check
a body before anything is stored.
"""

from __future__ import annotations

import json
from typing import Any

from control_plane.errors import BadRequest
from control_plane.registry import Target


def parse_json(data: bytes, what: str, **options: Any) -> Any:
    """`data` parsed as JSON (`options` go to `json.loads`).

    Raises:
        BadRequest: (400) naming `what`, if `data` is not valid JSON (an error raised by a
            `parse_constant` option included), or if it nests arrays and objects deeper than Python's
            parser can follow (about 1000 levels, the recursion limit).
    """
    try:
        return json.loads(data, **options)
    except RecursionError as exc:
        raise BadRequest(f"{what} is JSON nested too deeply to parse (at most about 1000 levels)") from exc
    except ValueError as exc:
        raise BadRequest(f"{what} is not valid JSON: {exc}") from exc


def _reject_constant(name: str) -> object:
    raise ValueError(f"{name} is not JSON")  # Python's json accepts NaN and Infinity; JSON does not


def _media_type(content_type: str) -> tuple[str, str] | None:
    """`(type, subtype)` of a content type, lower-case, parameters dropped; None without a `/`."""
    kind, slash, sub = content_type.split(";")[0].strip().lower().partition("/")
    return (kind.strip(), sub.strip()) if slash and kind.strip() and sub.strip() else None


def content_type_matches(content_type: str, accepted: str) -> bool:
    """Whether a request's `content_type` is one the handler's `accepted` type admits.

    `accepted` is the manifest's input `contentType`, which may hold wildcards as in `accept`
    (`*/*`, `text/*`). Parameters (`; charset=utf-8`) are ignored and type and subtype compare
    case-insensitively (RFC 9110, section 8.3.1).
    """
    given, wanted = _media_type(content_type), _media_type(accepted)
    if given is None or wanted is None:
        return wanted == ("*", "*")
    return wanted[0] in ("*", given[0]) and wanted[1] in ("*", given[1])


def validate_input(target: Target, body: bytes, content_type: str | None = None) -> None:
    """Check the request body and its `content-type` header against the handler's input description
    (endpoint manifest: `input.contentType`, `input.required`).

    The rules follow restate-server's ingress: a body needs a content type the handler accepts, and
    a request without body needs no content type (unless the input is required). Torpor also admits
    a content type without a body on a handler whose input is optional, and parses a JSON body.

    Raises:
        BadRequest: (400) a handler without input gets a body; a body comes without content type;
            the content type is not the handler's (the message names both); a required input is
            missing; a JSON handler gets a body that is not JSON or is nested too deeply.
    """
    where = f"handler '{target.service}/{target.handler}'"
    if target.input_content_type is None:
        if body.strip():
            raise BadRequest(f"{where} takes no input, but the request has a body")
        return
    accepted = target.input_content_type
    content_type = (content_type or "").strip()
    if not content_type and body:
        raise BadRequest(f"{where} takes '{accepted}': the request has a body but no content-type header")
    if content_type and not content_type_matches(content_type, accepted):
        raise BadRequest(f"content type '{content_type}' does not match the input of {where}, which takes '{accepted}'")
    if not body:
        if target.input_required:
            raise BadRequest(f"{where} needs an input body")
        return
    if accepted.split(";")[0].strip().endswith("json"):
        parse_json(body, f"the body for {where} (which takes JSON)", parse_constant=_reject_constant)
