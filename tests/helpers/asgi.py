"""Serve an ASGI app (real restate-sdk services, or a fake deployment) over HTTP/1.1 in this process.

A test that needs services of its own (a retry policy, a crafted protocol answer) defines them in
the test module and serves them here, on a free loopback port, with hypercorn in a background thread::

    with serve_asgi(restate.app([svc], protocol="request_response")) as url:
        httpx.post(f"{admin_url}/deployments", json={"uri": url})
"""

from __future__ import annotations

import asyncio
import contextlib
import socket
import threading
from collections.abc import Iterator
from typing import Any

from hypercorn.asyncio import serve
from hypercorn.config import Config


@contextlib.contextmanager
def serve_asgi(app: Any, host: str = "127.0.0.1") -> Iterator[str]:
    """Serve `app` until the block exits; yields its base URL (`http://127.0.0.1:{port}`).

    Raises RuntimeError if the server does not come up within 10 s.
    """
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind((host, 0))
    port = sock.getsockname()[1]
    config = Config()
    config.bind = [f"fd://{sock.detach()}"]
    config.accesslog = None
    config.graceful_timeout = 1.0
    loop = asyncio.new_event_loop()
    stop = asyncio.Event()
    started = threading.Event()

    async def main() -> None:
        started.set()
        await serve(app, config, shutdown_trigger=stop.wait, mode="asgi")

    thread = threading.Thread(target=loop.run_until_complete, args=(main(),), daemon=True)
    thread.start()
    if not started.wait(10):
        raise RuntimeError("the ASGI server did not start")
    url = f"http://{host}:{port}"
    try:
        yield url
    finally:
        loop.call_soon_threadsafe(stop.set)
        thread.join(10)
