"""The embedded moto server of `torpor dev`, one request at a time.

moto applies a DynamoDB request to its in-memory tables in place, without a lock: a concurrent
`GetItem` can read an item half way through an `UpdateItem` (a record already `completed` whose
`output` is not set yet), and two conditional writes to one item can both succeed. DynamoDB makes
every single-item write atomic and serialises conditional writes on an item. Serving one request at a
time restores both guarantees; moto's work is Python under the GIL, so little throughput is lost.
SQS requests are left out of the lock: a subscription's long poll (`ReceiveMessage` with a wait)
would hold every DynamoDB request up for its wait, and moto's SQS keeps its own lock.

The listening socket has a timeout (`ACCEPT_TIMEOUT_S`): `socketserver` accepts on a blocking socket
after `select` said a connection was there, and a connection gone in between left the server's loop
blocked in `accept` for ever, so that `stop()` never returned.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterable
from typing import Any

from moto.moto_server.werkzeug_app import DomainDispatcherApplication, MotoRequestHandler, create_backend_app
from moto.server import ThreadedMotoServer
from werkzeug.serving import make_server

WsgiApp = Callable[[dict[str, Any], Callable[..., Any]], Iterable[bytes]]


ACCEPT_TIMEOUT_S = 1.0
"""How long (s) the server's loop may wait in `accept` before it looks for `stop()` again."""


def is_sqs_request(environ: dict[str, Any]) -> bool:
    """Whether a WSGI request is for SQS: its `X-Amz-Target` (`AmazonSQS.*`, SQS's JSON protocol) or
    its signature's credential scope (`.../sqs/aws4_request`) says so."""
    target = str(environ.get("HTTP_X_AMZ_TARGET", ""))
    return target.startswith("AmazonSQS.") or "/sqs/aws4_request" in str(environ.get("HTTP_AUTHORIZATION", ""))


def serialized(app: WsgiApp) -> WsgiApp:
    """`app` (a WSGI application) behind one lock: each request, its body included, runs alone; SQS
    requests (`is_sqs_request`) run beside them."""
    lock = threading.Lock()

    def serial_app(environ: dict[str, Any], start_response: Callable[..., Any]) -> list[bytes]:
        if is_sqs_request(environ):
            return list(app(environ, start_response))
        with lock:
            return list(app(environ, start_response))

    return serial_app


def make_moto_server(host: str, port: int, app: WsgiApp) -> Any:
    """werkzeug's threaded server for `app` on `host:port` (0: the OS picks), its listening socket
    with a timeout of `ACCEPT_TIMEOUT_S` (see the module docstring)."""
    server = make_server(host, port, app, True, request_handler=MotoRequestHandler)
    server.socket.settimeout(ACCEPT_TIMEOUT_S)
    return server


class SerialMotoServer(ThreadedMotoServer):
    """A `ThreadedMotoServer` whose requests run one at a time (see the module docstring).

    SQS requests are not serialised (`serialized`), so a long poll holds no other request up.
    """

    def _server_entry(self) -> None:
        app = serialized(DomainDispatcherApplication(create_backend_app))
        self._server = make_moto_server(self._ip_address, self._port, app)
        self._server_ready_event.set()
        self._server.serve_forever()


__all__ = ["SerialMotoServer", "is_sqs_request", "make_moto_server", "serialized"]
