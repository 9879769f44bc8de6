"""The embedded moto server of `torpor dev`, one request at a time.

moto applies a DynamoDB request to its in-memory tables in place, without a lock: a concurrent
`GetItem` can read an item half way through an `UpdateItem` (a record already `completed` whose
`output` is not set yet), and two conditional writes to one item can both succeed. DynamoDB makes
every single-item write atomic and serialises conditional writes on an item. Serving one request at a
time restores both guarantees; moto's work is Python under the GIL, so little throughput is lost.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterable
from typing import Any

from moto.moto_server.werkzeug_app import DomainDispatcherApplication, MotoRequestHandler, create_backend_app
from moto.server import ThreadedMotoServer
from werkzeug.serving import make_server

WsgiApp = Callable[[dict[str, Any], Callable[..., Any]], Iterable[bytes]]


def serialized(app: WsgiApp) -> WsgiApp:
    """`app` (a WSGI application) behind one lock: each request, its body included, runs alone."""
    lock = threading.Lock()

    def serial_app(environ: dict[str, Any], start_response: Callable[..., Any]) -> list[bytes]:
        with lock:
            return list(app(environ, start_response))

    return serial_app


class SerialMotoServer(ThreadedMotoServer):
    """A `ThreadedMotoServer` whose requests run one at a time (see the module docstring).

    Only for the DynamoDB of `torpor dev`: a blocking request (an SQS long poll) would hold every
    other request up.
    """

    def _server_entry(self) -> None:
        app = serialized(DomainDispatcherApplication(create_backend_app))
        self._server = make_server(self._ip_address, self._port, app, True, request_handler=MotoRequestHandler)
        self._server_ready_event.set()
        self._server.serve_forever()


__all__ = ["SerialMotoServer", "serialized"]
