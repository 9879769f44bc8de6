"""Serve the example services over HTTP/1.1 with Hypercorn.

Usage::

    python -m examples.serve --port 9080 [--host 127.0.0.1] [--max-protocol-version N] [--http2]
                             [--certfile cert.pem --keyfile key.pem] [--max-concurrent-streams N]
                             [--tutorial-only]

``--port 0`` lets the kernel pick a free port. Once the socket listens, one line goes to stdout::

    serving examples on http://127.0.0.1:9080

SIGTERM or SIGINT stops the server gracefully (exit status 0). A port that cannot be bound (in use)
gives one line on stderr and exit status 2. Only HTTP/1.x is served: TLS is
not used, so there is no ALPN, and a request that still reaches the app over HTTP/2 (an ``h2c``
upgrade or prior knowledge) is answered ``505``. With ``--http2`` the server also speaks HTTP/2 with
prior knowledge (h2c): the SDK then announces the bidirectional protocol mode on discovery, and a
control plane that registers it over HTTP/2 streams each invocation on one request. With
``--certfile`` and ``--keyfile`` it serves TLS instead (``https://`` in the ready line), offering
``h2`` by ALPN with ``--http2``. ``--max-concurrent-streams`` is the HTTP/2
SETTINGS_MAX_CONCURRENT_STREAMS it announces (hypercorn's default: 100). Logs go to stderr.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import os
import signal
import socket
import sys

from hypercorn.asyncio import serve as hypercorn_serve
from hypercorn.config import Config
from restate.server import install_shutdown_hook

from examples.app import ASGIApp, Message, Receive, Scope, Send, make_app

LOG = logging.getLogger("examples.serve")


def http11_only(app: ASGIApp, allow_http2: bool = False) -> ASGIApp:
    """Wrap an ASGI app so that HTTP requests other than HTTP/1.0 or 1.1 (or 2 if `allow_http2`) get ``505``.

    The wrapper also answers the ASGI lifespan protocol, which the Restate app does not implement.

    Args:
        app: The ASGI app to protect.

    Returns:
        The wrapping ASGI app.
    """

    async def guarded(scope: Scope, receive: Receive, send: Send) -> None:
        if scope.get("type") == "lifespan":
            # The SDK has no lifespan support; acknowledge startup and shutdown here so the
            # server does not log a lifespan error at every start.
            while True:
                event = await receive()
                if event.get("type") == "lifespan.startup":
                    await send({"type": "lifespan.startup.complete"})
                elif event.get("type") == "lifespan.shutdown":
                    await send({"type": "lifespan.shutdown.complete"})
                    return
        allowed = ("1.0", "1.1", "2") if allow_http2 else ("1.0", "1.1")
        if scope.get("type") == "http" and scope.get("http_version") not in allowed:
            body = f"examples.serve only speaks HTTP/1.1, not HTTP/{scope.get('http_version')}\n".encode()
            headers = [(b"content-type", b"text/plain"), (b"content-length", str(len(body)).encode())]
            await send({"type": "http.response.start", "status": 505, "headers": headers})
            message: Message = {"type": "http.response.body", "body": body, "more_body": False}
            await send(message)
            return
        await app(scope, receive, send)

    return guarded


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    """Parse the command line.

    Args:
        argv: Arguments without the program name; ``None`` reads ``sys.argv``.

    Returns:
        The parsed options: ``host``, ``port``, ``max_protocol_version``, ``http2``, ``log_level``.
    """
    parser = argparse.ArgumentParser(prog="python -m examples.serve", description=__doc__.split("\n")[0])
    parser.add_argument("--host", default="127.0.0.1", help="address to bind (default 127.0.0.1)")
    parser.add_argument("--port", type=int, default=9080, help="port to bind, 0 for any free port (default 9080)")
    parser.add_argument(
        "--max-protocol-version",
        type=int,
        default=None,
        help="advertise at most this service-protocol version on discovery (e.g. 5 or 6)",
    )
    parser.add_argument(
        "--http2", action="store_true", help="also serve HTTP/2 with prior knowledge (h2c): bidirectional mode"
    )
    parser.add_argument("--certfile", default=None, help="serve TLS with this PEM certificate (chain)")
    parser.add_argument("--keyfile", default=None, help="the PEM private key of --certfile")
    parser.add_argument(
        "--max-concurrent-streams", type=int, default=100, help="HTTP/2 streams per connection at most (default 100)"
    )
    parser.add_argument(
        "--tutorial-only",
        action="store_true",
        help="serve only the services the README shows, not the fixtures tests and benchmarks use",
    )
    parser.add_argument("--log-level", default="WARNING", help="Python log level for stderr (default WARNING)")
    return parser.parse_args(argv)


class CannotBind(OSError):
    """The listening socket could not be bound (an `OSError`): `host`, `port`, and the OS error's text in `reason`."""

    def __init__(self, host: str, port: int, reason: str) -> None:
        super().__init__(f"cannot listen on {host}:{port}: {reason}")
        self.host, self.port, self.reason = host, port, reason


def bind_socket(host: str, port: int) -> socket.socket:
    """Create a listening TCP socket.

    Args:
        host: Address to bind; an IPv6 literal selects IPv6.
        port: Port to bind; 0 picks a free one.

    Returns:
        The bound, listening socket (``SO_REUSEADDR`` and ``TCP_NODELAY`` set), so a restarted
        server can take the same port back at once.

    Raises:
        CannotBind: The address is in use, not permitted, or not available.
    """
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        sock.bind((host.strip("[]"), port))
        sock.listen(1024)
    except OSError as error:
        sock.close()
        raise CannotBind(host, port, error.strerror or str(error)) from error
    except BaseException:
        sock.close()
        raise
    return sock


async def serve(
    host: str,
    port: int,
    max_protocol_version: int | None = None,
    http2: bool = False,
    tls: tuple[str, str] | None = None,
    max_concurrent_streams: int = 100,
    tutorial_only: bool = False,
) -> None:
    """Serve the example app until SIGTERM or SIGINT.

    Args:
        host: Address to bind.
        port: Port to bind; 0 picks a free one.
        max_protocol_version: Passed to :func:`examples.app.make_app`.
        http2: Also accept HTTP/2 with prior knowledge (h2c), or by ALPN ``h2`` with TLS; otherwise
            HTTP/2 gets ``505``.
        tls: ``(certfile, keyfile)``: serve TLS (PEM files); None: plain TCP.
        max_concurrent_streams: The HTTP/2 SETTINGS_MAX_CONCURRENT_STREAMS announced.
        tutorial_only: Serve only the services the README and the demo show (no test fixtures).
    """
    app = http11_only(make_app(max_protocol_version, tutorial_only), allow_http2=http2)

    sock = bind_socket(host, port)
    bound_host, bound_port = sock.getsockname()[:2]
    shown_host = f"[{bound_host}]" if ":" in bound_host else bound_host

    config = Config()
    config.bind = [f"fd://{sock.detach()}"]  # hypercorn adopts the listening descriptor
    config.alpn_protocols = ["h2", "http/1.1"] if http2 else ["http/1.1"]  # only matters with TLS
    if tls is not None:
        config.certfile, config.keyfile = tls
    config.h2_max_concurrent_streams = max_concurrent_streams
    config.accesslog = None
    config.errorlog = LOG
    config.graceful_timeout = 5.0
    config.keep_alive_timeout = 75.0  # longer than typical client pool idle times

    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    # The SDK registers its own SIGTERM hook through this dispatcher (asyncio keeps one handler
    # per signal); going through it too means neither handler replaces the other.
    for signum in (signal.SIGTERM, signal.SIGINT):
        install_shutdown_hook(loop, stop.set, signum)

    scheme = "https" if tls is not None else "http"
    print(f"serving examples on {scheme}://{shown_host}:{bound_port}", flush=True)
    await hypercorn_serve(app, config, shutdown_trigger=stop.wait, mode="asgi")


def main(argv: list[str] | None = None) -> int:
    """Run the server from the command line.

    Args:
        argv: Arguments without the program name; ``None`` reads ``sys.argv``.

    Returns:
        The process exit status (0 after a clean shutdown, 2 when the port cannot be bound).
    """
    args = parse_args(argv)
    logging.basicConfig(
        level=args.log_level.upper(), stream=sys.stderr, format="%(asctime)s %(levelname)s %(name)s: %(message)s"
    )
    # On Lambda the SDK would hand back a Lambda handler instead of an ASGI app.
    os.environ.pop("AWS_LAMBDA_FUNCTION_NAME", None)
    try:
        tls = (args.certfile, args.keyfile) if args.certfile else None
        asyncio.run(
            serve(
                args.host,
                args.port,
                args.max_protocol_version,
                args.http2,
                tls,
                args.max_concurrent_streams,
                args.tutorial_only,
            )
        )
    except CannotBind as error:
        print(f"examples.serve: {error}; pick another port with --port N (--port 0: any free port)", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
