"""Where one call's CPU goes in the control plane: per-part CPU time of sequential ingress calls.

    python -m bench.profile [--path /Greeter/greet] [--body '"bench"'] [--calls 2000] [--http2]

`torpor dev`'s control plane (`DevServer` on a fresh SQLite data directory, in this process) and
the example services (`python -m examples.serve`, its own process, `--http2`: h2c and bidirectional
mode) run side by side; the calls go straight to the ingress router from this thread, so neither
the HTTP server nor other threads take part, and everything the call does runs here. The parts are
wrapped with a timer of this thread's CPU (`time.thread_time`, inclusive of what they call): a
row is the part's CPU per call and how many times a call enters it. The wrapping costs a few µs per
entry, so the rows add up to a little more than a call without it.

What it does not show: the HTTP server's share and what many concurrent calls add (threads taking
turns on the GIL and the store's lock); for those, `bench.side_by_side` measures CPU per call under
32 clients, and `py-spy record --gil -p PID` on a loaded `torpor dev` samples it (bench/README.md,
section 1).
"""

from __future__ import annotations

import argparse
import functools
import tempfile
import time
from collections import Counter
from collections.abc import Callable
from typing import Any

import httpx

from adapters.http.invoker import HttpInvoker
from adapters.local.dev import DevServer
from adapters.local.sqlite_store import SQLiteStore
from control_plane.attempts import Bidirectional, RequestResponse
from control_plane.creation import Creation
from control_plane.endings import Endings
from control_plane.executor import Executor
from control_plane.invocation import Engine
from http_api.http import HttpRequest
from http_api.ingress import Ingress
from tests.helpers.services import serve_examples

PARTS: list[tuple[type, str]] = [
    (Ingress, "call"),
    (Creation, "create"),
    (Engine, "drive"),
    (RequestResponse, "run"),
    (Bidirectional, "run"),
    (HttpInvoker, "request"),
    (Executor, "commit_new"),
    (Executor, "end"),
    (Executor, "complete"),
    (Endings, "ended"),
    (SQLiteStore, "create_invocation"),
    (SQLiteStore, "append_batch"),
    (SQLiteStore, "_update_invocation"),
    (SQLiteStore, "get_invocation"),
    (SQLiteStore, "load_invocation"),
]
"""(class, method) pairs timed: the call's path from the ingress route to the store."""


def _timed(spent: Counter[str], entered: Counter[str], label: str, method: Callable[..., Any]) -> Callable[..., Any]:
    @functools.wraps(method)
    def timed(*args: Any, **kwargs: Any) -> Any:
        started = time.thread_time()
        try:
            return method(*args, **kwargs)
        finally:
            spent[label] += time.thread_time() - started
            entered[label] += 1

    return timed


def main(argv: list[str] | None = None) -> int:
    """Run the calls and print the table (ms of CPU per call, by part)."""
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--path", default="/Greeter/greet", help="ingress path (default /Greeter/greet)")
    parser.add_argument("--body", default='"bench"', help='JSON body (default "bench")')
    parser.add_argument("--calls", type=int, default=2000, help="calls measured, after 100 of warm-up (default 2000)")
    parser.add_argument("--http2", action="store_true", help="serve and register over HTTP/2: bidirectional mode")
    args = parser.parse_args(argv)
    spent: Counter[str] = Counter()
    entered: Counter[str] = Counter()
    for cls, name in PARTS:
        setattr(cls, name, _timed(spent, entered, f"{cls.__name__}.{name}", getattr(cls, name)))
    with serve_examples(http2=args.http2) as (services_url, _), tempfile.TemporaryDirectory() as data_dir:
        dev = DevServer(data_dir=data_dir, ingress_port=0, admin_port=0).start()
        try:
            httpx.post(dev.admin_url + "/deployments", json={"uri": services_url}, timeout=30).raise_for_status()
            router = dev.control_plane.ingress.router
            request = HttpRequest(
                method="POST", path=args.path, headers={"content-type": "application/json", "host": "127.0.0.1"},
                body=args.body.encode(),
            )  # fmt: skip
            for _ in range(100):  # connections, caches, lazy imports
                answer = router.dispatch(request)
            if answer.status >= 300:
                raise SystemExit(f"{args.path} answered {answer.status}: {answer.body[:200]!r}")
            spent.clear()
            entered.clear()
            started = time.thread_time()
            for _ in range(args.calls):
                router.dispatch(request)
            total = time.thread_time() - started
        finally:
            dev.stop()
    mode = "bidirectional (HTTP/2)" if args.http2 else "request/response"
    print(f"{args.path}, {args.calls} sequential calls, {mode}: {1000 * total / args.calls:.3f} ms CPU per call\n")
    print("| part | ms CPU per call | entered per call |\n| --- | --- | --- |")
    for label, seconds in spent.most_common():
        print(f"| `{label}` | {1000 * seconds / args.calls:.3f} | {entered[label] / args.calls:.1f} |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
