"""`torpor dev`'s HTTP/1.1 servers: uvicorn with the httptools parser, bounded against idle and bloated requests.

uvicorn arms its keep-alive timeout only after a response, and httptools takes request heads of any
size. `BoundedHttpToolsProtocol` adds the two bounds the dev server's ports keep:

- a connection that sends nothing within the keep-alive timeout (5 s) of opening is closed;
- a request head (request line and headers) over `MAX_HEAD_BYTES` is refused with uvicorn's 400
  "Invalid HTTP request received." and the connection closed, before more of it is held in memory.

The body is bounded by the application (`adapters.local.asgi`: 413 past the largest body, 408 when it
does not arrive in time).
"""

from __future__ import annotations

import asyncio
from typing import Any

import uvicorn
from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

MAX_HEAD_BYTES = 64 * 1024
"""The most bytes of a request line plus headers a request may bring (h11's bound is 16 KiB)."""

GRACEFUL_TIMEOUT_S = 2.0
"""How long open requests may finish after a shutdown starts (s)."""

KEEP_ALIVE_TIMEOUT_S = 5.0
"""An idle connection, new or kept alive, is closed after this long (s)."""


class HeadTooLarge(Exception):
    """A request head over `MAX_HEAD_BYTES`: raised inside the parser's callback, which fails the parse."""


class BoundedHttpToolsProtocol(HttpToolsProtocol):
    """uvicorn's httptools protocol with an idle timeout from the connection's start and a bounded head."""

    _head_bytes = 0

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        """As uvicorn's, and the keep-alive timeout armed at once (the first bytes received disarm it)."""
        super().connection_made(transport)
        self.timeout_keep_alive_task = self.loop.call_later(self.timeout_keep_alive, self.timeout_keep_alive_handler)

    def on_message_begin(self) -> None:
        """A new request: its head's byte count starts at 0."""
        self._head_bytes = 0
        super().on_message_begin()

    def on_url(self, url: bytes) -> None:
        """Count the request target into the head. Raises `HeadTooLarge` past `MAX_HEAD_BYTES`."""
        self._count_head(len(url))
        super().on_url(url)

    def on_header(self, name: bytes, value: bytes) -> None:
        """Count a header into the head. Raises `HeadTooLarge` past `MAX_HEAD_BYTES`."""
        self._count_head(len(name) + len(value) + 4)
        super().on_header(name, value)

    def _count_head(self, size: int) -> None:
        self._head_bytes += size
        if self._head_bytes > MAX_HEAD_BYTES:
            raise HeadTooLarge(f"the request head is larger than {MAX_HEAD_BYTES} bytes")


def server(app: Any) -> uvicorn.Server:
    """A uvicorn server for the ASGI `app`, to run with `Server.serve(sockets=[...])` on the caller's
    event loop: HTTP/1.1 through `BoundedHttpToolsProtocol`, lifespan events on, no access log, no
    `server` header, `X-Forwarded-*` left as plain headers (no proxy is trusted), and the process's
    logging left as it is (uvicorn's own at WARNING: its "running on" line would repeat `torpor
    dev`'s)."""
    config = uvicorn.Config(
        app,
        http=BoundedHttpToolsProtocol,
        loop="none",
        lifespan="on",
        access_log=False,
        server_header=False,
        proxy_headers=False,  # no proxy in front: X-Forwarded-* are the client's words, not facts
        log_config=None,
        log_level="warning",
        timeout_keep_alive=int(KEEP_ALIVE_TIMEOUT_S),
        timeout_graceful_shutdown=int(GRACEFUL_TIMEOUT_S),
    )
    return uvicorn.Server(config)
