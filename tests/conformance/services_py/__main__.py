"""`python -m tests.conformance.services_py --port P [--host 127.0.0.1]`: serve the test services with
hypercorn (one worker, HTTP/1.1 only; `--http2` adds h2c with prior knowledge: bidirectional mode) until
SIGTERM or SIGINT. Prints `serving test services on URL` once
listening."""

from __future__ import annotations

import argparse
import asyncio
import logging
import os
import signal
import sys

from hypercorn.asyncio import serve as hypercorn_serve
from hypercorn.config import Config
from restate.server import install_shutdown_hook

from examples.serve import bind_socket, http11_only
from tests.conformance.services_py import make_app

LOG = logging.getLogger("tests.conformance.services_py")


async def serve(host: str, port: int, http2: bool = False) -> None:
    """Serve the test services on `host:port` until SIGTERM or SIGINT (`http2`: also h2c)."""
    app = http11_only(make_app(), allow_http2=http2)
    sock = bind_socket(host, port)
    bound_port = sock.getsockname()[1]
    config = Config()
    config.bind = [f"fd://{sock.detach()}"]
    config.alpn_protocols = ["http/1.1"]
    config.accesslog = None
    config.errorlog = LOG
    config.graceful_timeout = 2.0
    config.keep_alive_timeout = 75.0
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for signum in (signal.SIGTERM, signal.SIGINT):
        install_shutdown_hook(loop, stop.set, signum)
    print(f"serving test services on http://{host}:{bound_port}", flush=True)
    await hypercorn_serve(app, config, shutdown_trigger=stop.wait, mode="asgi")


def main(argv: list[str] | None = None) -> int:
    """Parse `--host` / `--port` / `--log-level` / `--http2` and serve; exit status 0 after a clean shutdown."""
    parser = argparse.ArgumentParser(prog="python -m tests.conformance.services_py", description=__doc__)
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=9080)
    parser.add_argument("--log-level", default="WARNING")
    parser.add_argument("--http2", action="store_true", help="also serve HTTP/2 with prior knowledge (h2c)")
    args = parser.parse_args(argv)
    logging.basicConfig(level=args.log_level.upper(), stream=sys.stderr)
    os.environ.pop("AWS_LAMBDA_FUNCTION_NAME", None)  # the SDK would build a Lambda handler
    asyncio.run(serve(args.host, args.port, args.http2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
