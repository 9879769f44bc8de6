"""Services whose journals touch one of everything, for the journal-naming and stack-trace tests.

`Journaled/{id}/run` (a workflow) sets, gets and clears the state key `email`, runs a step named
`charge card`, calls `Tally/{id}/add`, sends `Tally/{id}/add`, sleeps 10 ms, creates an awakeable
(whose id it keeps in the state key `awakeable`), completes the promise `note`, peeks the promise
`approval` and then waits on it: it stays suspended until `Journaled/{id}/approve` resolves it.
`Crashing/boom` fails with a retryable `ValueError` raised three functions deep (a stack trace to
keep); `Crashing/deep 400` fails the same way with a trace of about 100 KB.

`python -m tests.helpers.journal_services --port 0` serves them over HTTP/1.1 and prints
`serving journal services on URL` once listening; `serve_journal_services()` runs that in a
subprocess for a test.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import logging
import os
import re
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from datetime import timedelta
from typing import Any

import restate
from hypercorn.asyncio import serve as hypercorn_serve
from hypercorn.config import Config
from restate.server import install_shutdown_hook

from examples.serve import bind_socket, http11_only
from tests.helpers.services import REPO_ROOT, stop_process

tally = restate.VirtualObject("Tally")


@tally.handler()
async def add(ctx: restate.ObjectContext, delta: int) -> int:
    """Add `delta` to the state key `total`; the new total."""
    total = (await ctx.get("total", type_hint=int) or 0) + delta
    ctx.set("total", total)
    return total


journaled = restate.Workflow("Journaled")


@journaled.main()
async def run(ctx: restate.WorkflowContext, email: str) -> str:
    """One of every journal entry that names what it touches (see the module's docstring)."""
    ctx.set("email", email)
    await ctx.get("email", type_hint=str)
    ctx.clear("email")
    await ctx.run_typed("charge card", lambda: "charged")
    await ctx.object_call(add, key=ctx.key(), arg=1)
    ctx.object_send(add, key=ctx.key(), arg=2)
    await ctx.sleep(timedelta(milliseconds=10))
    awakeable_id, _awakeable = ctx.awakeable(type_hint=str)
    ctx.set("awakeable", awakeable_id)
    await ctx.promise("note", type_hint=str).resolve("noted")
    await ctx.promise("approval", type_hint=str).peek()
    return await ctx.promise("approval", type_hint=str).value()


@journaled.handler()
async def approve(ctx: restate.WorkflowSharedContext, answer: str) -> None:
    """Resolve the promise `approval` that `run` waits on."""
    await ctx.promise("approval", type_hint=str).resolve(answer)


crashing = restate.Service("Crashing")


def _charge(amount: int) -> None:
    raise ValueError(f"card declined for {amount}")


def _checkout(amount: int) -> None:
    _charge(amount)


def _ping(depth: int) -> None:
    if depth == 0:
        raise ValueError("too deep")
    _pong(depth - 1)


def _pong(depth: int) -> None:
    _ping(depth)  # two functions in turn: Python folds only a frame repeated in a row


@crashing.handler()
async def boom(ctx: restate.Context, amount: int) -> None:
    """Fail with `ValueError('card declined for AMOUNT')` from `_charge`, retried."""
    _checkout(amount)


@crashing.handler()
async def deep(ctx: restate.Context, depth: int) -> None:
    """Fail with `ValueError('too deep')` after `2 * depth` nested calls: a long stack trace."""
    _ping(depth)


SERVICES = (tally, journaled, crashing)

LOG = logging.getLogger("tests.helpers.journal_services")


async def serve(host: str, port: int) -> None:
    """Serve the services on `host:port` (HTTP/1.1) until SIGTERM or SIGINT."""
    app: Any = http11_only(restate.app(services=list(SERVICES)))
    sock = bind_socket(host, port)
    bound_port = sock.getsockname()[1]
    config = Config()
    config.bind = [f"fd://{sock.detach()}"]
    config.alpn_protocols = ["http/1.1"]
    config.accesslog = None
    config.errorlog = LOG
    config.graceful_timeout = 2.0
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for signum in (signal.SIGTERM, signal.SIGINT):
        install_shutdown_hook(loop, stop.set, signum)
    print(f"serving journal services on http://{host}:{bound_port}", flush=True)
    await hypercorn_serve(app, config, shutdown_trigger=stop.wait, mode="asgi")


def main(argv: list[str] | None = None) -> int:
    """Parse `--host` / `--port` and serve; exit status 0 after a clean shutdown."""
    parser = argparse.ArgumentParser(prog="python -m tests.helpers.journal_services", description=__doc__)
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=0)
    args = parser.parse_args(argv)
    logging.basicConfig(level="WARNING", stream=sys.stderr)
    logging.getLogger("restate").setLevel(logging.CRITICAL)  # the failures on purpose, logged at every attempt
    os.environ.pop("AWS_LAMBDA_FUNCTION_NAME", None)  # the SDK would build a Lambda handler
    asyncio.run(serve(args.host, args.port))
    return 0


@contextlib.contextmanager
def serve_journal_services(startup_timeout_s: float = 60.0) -> Iterator[str]:
    """Serve these services in a subprocess (a free port) until the block exits; yields the base URL.

    Raises:
        RuntimeError: the process exited or printed no ready line within `startup_timeout_s`.
    """
    env = {**os.environ, "PYTHONPATH": str(REPO_ROOT), "PYTHONUNBUFFERED": "1"}
    command = [sys.executable, "-m", "tests.helpers.journal_services", "--port", "0"]
    process = subprocess.Popen(command, cwd=REPO_ROOT, env=env, stdout=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + startup_timeout_s
        assert process.stdout is not None
        line = process.stdout.readline()  # blocks until the ready line or EOF
        match = re.search(r"serving journal services on (http://\S+)", line)
        if match is None or time.monotonic() > deadline:
            raise RuntimeError(f"tests.helpers.journal_services did not start: {line!r}")
        yield match.group(1)
    finally:
        stop_process(process)
        if process.stdout is not None:
            process.stdout.close()


if __name__ == "__main__":
    sys.exit(main())
