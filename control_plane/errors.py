"""Errors a user can see. One root, `TorporError`; each subclass carries its HTTP status.

Ingress and admin render every `TorporError` as `{"code": <status>, "message": ...}` in one place
(`http_api.http.error_response`); messages name the fix where there is one.
"""

from __future__ import annotations


class TorporError(Exception):
    """Root of Torpor's errors. `status` is the HTTP status the edge answers with."""

    status: int = 500
    code: str = "internal"
    restate_code: str | None = None
    """restate-server's error code for the same case (`META0009`), sent as `restate_code` when set."""

    def __init__(self, message: str, *, status: int | None = None) -> None:
        super().__init__(message)
        self.message = message
        if status is not None:
            self.status = status


class BadRequest(TorporError):
    """Malformed input: bad JSON, bad parameter, bad manifest (HTTP 400)."""

    status = 400
    code = "bad_request"


class NotFound(TorporError):
    """Unknown service, handler, deployment or invocation (HTTP 404)."""

    status = 404
    code = "not_found"


class Conflict(TorporError):
    """The request contradicts stored state, e.g. re-registering changed handlers without force (409)."""

    status = 409
    code = "conflict"


class Gone(TorporError):
    """What the request needs was removed by retention (HTTP 410)."""

    status = 410
    code = "gone"


class Unprocessable(TorporError):
    """The request is well formed but cannot be carried out on this invocation (HTTP 422)."""

    status = 422
    code = "unprocessable"


class TooEarly(TorporError):
    """The invocation has not started yet: scheduled, or waiting for its object key (HTTP 425)."""

    status = 425
    code = "too_early"


class UnsupportedProtocol(TorporError):
    """No service protocol or manifest version both sides support (Restate code 415)."""

    status = 415
    code = "unsupported_protocol"


class ProtocolViolation(TorporError):
    """The deployment sent bytes that break the service protocol (Restate code 571)."""

    status = 571
    code = "protocol_violation"
