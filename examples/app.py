"""All example services in one Restate app.

``app`` is what a deployment serves: an ASGI app for an HTTP server (``python -m examples.serve``)
or, when ``AWS_LAMBDA_FUNCTION_NAME`` is set, a Lambda handler (``restate.app`` switches by
itself).

How the SDK (1.3.0) picks the protocol mode: ``restate.app(..., protocol=None)`` answers
discovery with ``BIDI_STREAM`` when the discovery request arrived over HTTP/2 and
``REQUEST_RESPONSE`` when it arrived over HTTP/1.1 (the Lambda adapter always reports 1.1);
``protocol="request_response"`` or ``"bidi"`` overrides that. The app leaves the choice to the
SDK: served over HTTP/1.1 (``python -m examples.serve``) it is in request/response mode, served
with ``--http2`` and registered over HTTP/2 the control plane streams each invocation (bidirectional
mode).

``make_app(max_protocol_version=N)`` lowers the ``maxProtocolVersion`` advertised on discovery
(the SDK says 5..7), so tests can make the control plane negotiate V5 or V6 with the real SDK.
"""

from __future__ import annotations

import base64
import json
from collections.abc import Awaitable, Callable, MutableMapping
from typing import Any

import restate
from restate.aws_lambda import is_running_on_lambda

from examples.fixtures.bench import bench, sequence
from examples.fixtures.calls import calls
from examples.fixtures.chain import chain
from examples.greeter import greeter
from examples.objects import counter, lazy_counter
from examples.orders import orders
from examples.steps import steps
from examples.waits import waits
from examples.workflows import signup

TUTORIAL_SERVICES = (greeter, orders, steps, waits, counter, lazy_counter, signup)
"""The services the README shows (modules in `examples/`)."""

FIXTURE_SERVICES = (calls, chain, bench, sequence)
"""Services only tests and benchmarks use (`examples/fixtures/`)."""

SERVICES = TUTORIAL_SERVICES + FIXTURE_SERVICES
"""The services every example app hosts."""

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
ASGIApp = Callable[[Scope, Receive, Send], Awaitable[None]]


def cap_manifest(body: bytes, max_protocol_version: int) -> bytes:
    """Lower the ``maxProtocolVersion`` of a JSON endpoint manifest.

    The advertised maximum becomes ``min(advertised, max_protocol_version)``. When that falls
    below ``minProtocolVersion``, the minimum is lowered too, so the manifest stays consistent
    (a deployment that only speaks that one version).

    Args:
        body: The discovery response body, as the SDK produced it.
        max_protocol_version: The highest service-protocol version to advertise.

    Returns:
        The rewritten JSON body (UTF-8).
    """
    manifest = json.loads(body)
    new_max = min(int(manifest["maxProtocolVersion"]), max_protocol_version)
    manifest["maxProtocolVersion"] = new_max
    if int(manifest.get("minProtocolVersion", new_max)) > new_max:
        manifest["minProtocolVersion"] = new_max
    return json.dumps(manifest).encode("utf-8")


def _is_discovery_path(path: str) -> bool:
    """Tell whether the SDK would route ``path`` to discovery (``…/discover``)."""
    return path.rsplit("/", 1)[-1] == "discover"


class ProtocolVersionCap:
    """ASGI middleware that lowers ``maxProtocolVersion`` in discovery responses.

    Every request other than discovery passes through untouched. A successful discovery
    response is buffered, its JSON rewritten with :func:`cap_manifest`, and sent again in one
    piece with a correct ``content-length``.

    Args:
        app: The Restate ASGI app to wrap.
        max_protocol_version: The highest protocol version to advertise.
    """

    def __init__(self, app: ASGIApp, max_protocol_version: int) -> None:
        self.app = app
        self.max_protocol_version = max_protocol_version

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        """Serve one ASGI connection scope.

        Args:
            scope: The ASGI scope.
            receive: The ASGI receive channel.
            send: The ASGI send channel.
        """
        if scope.get("type") != "http" or not _is_discovery_path(str(scope.get("path", ""))):
            await self.app(scope, receive, send)
            return

        start: Message | None = None
        chunks: list[bytes] = []

        async def capture(message: Message) -> None:
            nonlocal start
            kind = message.get("type")
            if kind == "http.response.start":
                start = message
                return
            if kind != "http.response.body" or start is None:
                await send(message)
                return
            chunks.append(bytes(message.get("body", b"")))
            if message.get("more_body", False):
                return
            body = b"".join(chunks)
            headers = list(start.get("headers", []))
            if start.get("status") == 200:
                body = cap_manifest(body, self.max_protocol_version)
                headers = [(k, v) for k, v in headers if bytes(k).lower() != b"content-length"]
                headers.append((b"content-length", str(len(body)).encode("ascii")))
            await send({**start, "headers": headers})
            await send({"type": "http.response.body", "body": body, "more_body": False})

        await self.app(scope, receive, capture)


def _cap_lambda_handler(handler: Callable[[Any, Any], Any], max_protocol_version: int) -> Callable[[Any, Any], Any]:
    """Wrap the SDK's Lambda handler so discovery answers carry a lowered maximum.

    Args:
        handler: What ``restate.app`` returns on Lambda.
        max_protocol_version: The highest protocol version to advertise.

    Returns:
        A Lambda handler with the same signature.
    """

    def capped_handler(event: Any, context: Any) -> Any:
        response = handler(event, context)
        if (
            _is_discovery_path(str(event.get("path", "")))
            and response.get("statusCode") == 200
            and "content-encoding" not in {k.lower() for k in response.get("headers", {})}
        ):
            raw = base64.b64decode(response["body"]) if response.get("isBase64Encoded") else response["body"]
            body = cap_manifest(raw if isinstance(raw, bytes) else raw.encode("utf-8"), max_protocol_version)
            response = {**response, "body": base64.b64encode(body).decode("ascii"), "isBase64Encoded": True}
            headers = {k: v for k, v in response.get("headers", {}).items() if k.lower() != "content-length"}
            response["headers"] = headers
        return response

    return capped_handler


def make_app(max_protocol_version: int | None = None, tutorial_only: bool = False) -> Any:
    """Build the example app, optionally advertising a lower maximum protocol version.

    Args:
        max_protocol_version: When given, discovery advertises
            ``min(SDK maximum, max_protocol_version)`` as ``maxProtocolVersion`` (e.g. 5 or 6
            to make the control plane negotiate V5 or V6). ``None`` keeps the SDK's range.
        tutorial_only: Host only `TUTORIAL_SERVICES` (what the demo registers), not the fixtures
            tests and benchmarks use.

    Returns:
        An ASGI app in request/response mode — or, when ``AWS_LAMBDA_FUNCTION_NAME`` is set,
        the SDK's Lambda handler (wrapped the same way).

    Raises:
        ValueError: If ``max_protocol_version`` is not a positive integer.
    """
    if max_protocol_version is not None and (
        isinstance(max_protocol_version, bool) or not isinstance(max_protocol_version, int) or max_protocol_version < 1
    ):
        raise ValueError(f"max_protocol_version must be a positive integer, got {max_protocol_version!r}")
    base = restate.app(list(TUTORIAL_SERVICES if tutorial_only else SERVICES))
    if max_protocol_version is None:
        return base
    if is_running_on_lambda():
        return _cap_lambda_handler(base, max_protocol_version)
    return ProtocolVersionCap(base, max_protocol_version)


app = make_app()
"""The example app with the SDK's own protocol range (request/response mode)."""
