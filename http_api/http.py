"""A small request/response model for the ingress and admin APIs, shared by every edge.

The routes in `http_api.ingress` and `http_api.admin` are plain functions
`(HttpRequest, **path_params) -> HttpResponse`; the local server (ASGI) and the Lambda entry points
translate their own request shapes into `HttpRequest` and back. Errors are rendered in one place,
`Router.dispatch`, as `{"code": <status>, "message": ...}`.
"""

from __future__ import annotations

import json
import logging
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from urllib.parse import parse_qs, unquote

from control_plane.errors import BadRequest, NotFound, TorporError
from control_plane.ids import invocation_id_bytes
from control_plane.inputs import parse_json

log = logging.getLogger("torpor.http")


@dataclass(frozen=True, slots=True)
class HttpRequest:
    """An HTTP request: `path` is the raw (still percent-encoded) path, header names are lower-case."""

    method: str
    path: str
    query_string: str = ""
    headers: Mapping[str, str] = field(default_factory=dict)
    body: bytes = b""

    def query(self, name: str) -> str | None:
        """The first value of query parameter `name`, or None."""
        values = parse_qs(self.query_string, keep_blank_values=True).get(name)
        return values[0] if values else None

    def flag(self, name: str) -> bool:
        """Query parameter `name` as a boolean: `true`/`1` or `false`/`0`; absent is False.

        Raises `BadRequest` (400) for any other value (as restate-server's admin API refuses a query
        string it cannot read), so a typo never silently means false.
        """
        value = self.query(name)
        if value is None:
            return False
        if value.lower() in ("true", "1"):
            return True
        if value.lower() in ("false", "0"):
            return False
        raise BadRequest(f"query parameter {name!r} must be true or false, got {value[:40]!r}")

    def json(self) -> object:
        """The body parsed as JSON. Raises `BadRequest` (400) if it is not valid JSON or nested too deeply."""
        return parse_json(self.body or b"null", "the request body")


@dataclass(frozen=True, slots=True)
class HttpResponse:
    """An HTTP response; `headers` names are lower-case."""

    status: int
    body: bytes = b""
    headers: Mapping[str, str] = field(default_factory=dict)

    @staticmethod
    def json(value: object, status: int = 200, headers: Mapping[str, str] | None = None) -> HttpResponse:
        """A JSON response with `content-type: application/json`."""
        return HttpResponse(
            status,
            json.dumps(value, separators=(",", ":")).encode(),
            {"content-type": "application/json", **(headers or {})},
        )


def error_response(error: TorporError, headers: Mapping[str, str] | None = None) -> HttpResponse:
    """Render a `TorporError` as Restate does: HTTP status = code, body `{"code", "message"}` (and
    `restate_code` when the error has restate-server's code, which Restate's CLI prints)."""
    body: dict[str, object] = {"code": error.status, "message": error.message}
    if error.restate_code is not None:
        body["restate_code"] = error.restate_code
    return HttpResponse.json(body, error.status, headers)


Handler = Callable[..., HttpResponse]


def _decode_segment(segment: str) -> str:
    """One path segment percent-decoded as UTF-8; `BadRequest` if the bytes are not UTF-8.

    Decoding with replacement would make `%ff` and `%fe` the same key ("\\ufffd"), sharing state.
    """
    try:
        return unquote(segment, errors="strict")
    except UnicodeDecodeError as exc:
        raise BadRequest(f"path segment {segment!r} is not valid UTF-8 after percent-decoding") from exc


class Router:
    """Routes `(method, path pattern)` to handlers; `{name}` matches one path segment, URL-decoded
    (as UTF-8; a segment that is not answers 400). A segment named `{invocation_id}` must be a
    well-formed invocation id (`inv_1…`): else the answer is 400 "bad invocation id", not a 404.

    Patterns are tried in the order they were added. An unmatched path answers 404, a matched path
    with another method 405. `optional_prefix` (a regular expression, e.g. `/v4`) may precede every
    pattern: the admin API answers Restate's versioned paths (`/v4/services`) as its plain ones.
    """

    def __init__(self, optional_prefix: str = "") -> None:
        self._routes: list[tuple[str, re.Pattern[str], Handler]] = []
        self._prefix = f"(?:{optional_prefix})?" if optional_prefix else ""

    def add(self, method: str, pattern: str, handler: Handler) -> None:
        """Register `handler` for `method` and `pattern` (e.g. `/deployments/{deployment_id}`)."""
        regex = re.sub(r"\{(\w+)\}", r"(?P<\1>[^/]+)", pattern)
        self._routes.append((method.upper(), re.compile(f"^{self._prefix}{regex}/?$"), handler))

    def route(self, method: str, pattern: str) -> Callable[[Handler], Handler]:
        """Decorator form of `add`."""

        def register(handler: Handler) -> Handler:
            self.add(method, pattern, handler)
            return handler

        return register

    def dispatch(self, request: HttpRequest) -> HttpResponse:
        """Run the matching handler; render `TorporError` and unexpected exceptions as JSON errors."""
        try:
            allowed: list[str] = []
            for method, regex, handler in self._routes:
                match = regex.match(request.path)
                if match is None:
                    continue
                if method != request.method.upper():
                    allowed.append(method)
                    continue
                params = {name: _decode_segment(value) for name, value in match.groupdict().items()}
                if "invocation_id" in params:
                    invocation_id_bytes(params["invocation_id"])  # BadRequest (400) if malformed
                return handler(request, **params)
            if allowed:
                methods = ", ".join(allowed)
                error = TorporError(f"method {request.method} is not allowed here; use {methods}", status=405)
                return error_response(error, {"allow": methods})
            raise NotFound(f"no route for {request.method} {request.path}")
        except TorporError as error:
            return error_response(error)
        except Exception:
            log.exception("unexpected error handling %s %s", request.method, request.path)
            return error_response(TorporError("internal error; see the control plane's log"))
