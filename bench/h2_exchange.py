"""The HTTP/2 invoker alone: CPU and work per bidirectional exchange, without the engine or the store.

    python -m bench.h2_exchange [--path /Greeter/greet] [--body '"bench"'] [--exchanges 1000] [--rounds 5]

One call goes through `torpor dev`'s control plane (`DevServer` in this process, on SQLite in a
temporary directory) to the example services over HTTP/2 (`python -m examples.serve --http2`, their
own process); its request (headers and body: Start and the input) is captured. Then `H2Invoker`
replays it, `--exchanges` times in a row, as `control_plane.bidi` drives a stream: send the body,
read the head, read the answer up to End (Suspension, Error), end the body, close. Printed:

- CPU per exchange (µs): this process's CPU time (all threads: the caller and the connection's
  reader thread) over each round of `--exchanges`, the minimum and the median of `--rounds` rounds
  (the minimum is the least disturbed by other processes on the machine);
- the caller thread's work per exchange, counted under cProfile (so independent of the machine's
  load): Python function calls, socket writes (`sendall`) and rounds of the connection's lock.

What it does not show: the engine and store around the stream (`bench.profile --http2`), and
contention between many streams on one connection (`bench.side_by_side --http2`).
"""

from __future__ import annotations

import argparse
import cProfile
import os
import pstats
import statistics
import tempfile
import time
from typing import Any

import httpx

from adapters.http.streaming import H2Invoker, H2Stream
from adapters.local.dev import DevServer
from control_plane.protocol import MessageType, decode_frames
from control_plane.protocol.framing import HEADER_SIZE
from http_api.http import HttpRequest
from tests.helpers.services import serve_examples

_ENDINGS = {MessageType.End, MessageType.Suspension, MessageType.Error}


def _capture(services_url: str, path: str, body: str) -> tuple[tuple[str, str, str, dict[str, str]], bytes]:
    """`((endpoint, method, path, headers), body)` of the first `/invoke` request one call to the
    services at `services_url` makes."""
    captured: dict[str, Any] = {}
    open_stream, send = H2Invoker.open_stream, H2Stream.send

    def opening(self: H2Invoker, endpoint: str, method: str, target: str, headers: Any, timeout_s: float) -> H2Stream:
        if target.startswith("/invoke"):
            captured.setdefault("request", (endpoint, method, target, dict(headers)))
        return open_stream(self, endpoint, method, target, headers, timeout_s)

    def sending(self: H2Stream, data: bytes, timeout_s: float) -> None:
        if "request" in captured:
            captured.setdefault("body", bytes(data))
        send(self, data, timeout_s)

    H2Invoker.open_stream, H2Stream.send = opening, sending  # type: ignore[method-assign,assignment]
    try:
        with tempfile.TemporaryDirectory() as data_dir:
            dev = DevServer(data_dir=data_dir, ingress_port=0, admin_port=0).start()
            try:
                httpx.post(dev.admin_url + "/deployments", json={"uri": services_url}, timeout=30).raise_for_status()
                request = HttpRequest(
                    method="POST", path=path, headers={"content-type": "application/json", "host": "127.0.0.1"},
                    body=body.encode(),
                )  # fmt: skip
                answer = dev.control_plane.ingress.router.dispatch(request)
                if answer.status >= 300:
                    raise SystemExit(f"{path} answered {answer.status}: {answer.body[:200]!r}")
            finally:
                dev.stop()
    finally:
        H2Invoker.open_stream, H2Stream.send = open_stream, send  # type: ignore[method-assign]
    return captured["request"], captured["body"]


def _ended(answer: bytes) -> bool:
    """True once `answer` holds a whole End, Suspension or Error message."""
    offset = 0
    while len(answer) - offset >= HEADER_SIZE:
        length = int.from_bytes(answer[offset + 4 : offset + 8], "big")
        if len(answer) - offset - HEADER_SIZE < length:
            return False
        offset += HEADER_SIZE + length
    return any(f.type in _ENDINGS for f in decode_frames(answer[:offset]))


def main(argv: list[str] | None = None) -> int:
    """Capture one call's request, replay it and print the figures."""
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--path", default="/Greeter/greet", help="ingress path (default /Greeter/greet)")
    parser.add_argument("--body", default='"bench"', help='JSON body (default "bench")')
    parser.add_argument("--exchanges", type=int, default=1000, help="exchanges per round (default 1000)")
    parser.add_argument("--rounds", type=int, default=5, help="rounds timed (default 5)")
    args = parser.parse_args(argv)
    exchanges: int = args.exchanges
    print(f"load before: {os.getloadavg()[0]:.2f}")
    with serve_examples(http2=True) as (services_url, _):
        (endpoint, method, target, headers), body = _capture(services_url, args.path, args.body)
        invoker = H2Invoker()

        def exchange() -> None:
            stream = invoker.open_stream(endpoint, method, target, headers, 10)
            try:
                stream.send(body, 10)
                status, _ = stream.head(10)
                if status != 200:
                    raise SystemExit(f"{target} answered {status}")
                answer = b""
                while not _ended(answer):
                    chunk = stream.receive(10)
                    if not chunk:
                        raise SystemExit(f"{target} ended its answer without End: {answer[:200]!r}")
                    answer += chunk
                stream.end()
            finally:
                stream.close()

        for _ in range(100):  # the connection, lazy imports
            exchange()
        profiler = cProfile.Profile()
        profiler.enable()
        for _ in range(args.exchanges):
            exchange()
        profiler.disable()
        rounds = []
        for _ in range(args.rounds):
            started = time.process_time()
            for _ in range(args.exchanges):
                exchange()
            rounds.append(1e6 * (time.process_time() - started) / args.exchanges)
        invoker.close()
    stats: dict[tuple[str, int, str], tuple[int, ...]] = pstats.Stats(profiler).stats  # type: ignore[attr-defined]

    def counted(name: str) -> float:  # calls of the function `name` (as cProfile names it) per exchange
        return sum(int(row[1]) for key, row in stats.items() if key[2] == name) / exchanges

    calls = sum(int(row[1]) for row in stats.values()) / exchanges
    print(f"load after: {os.getloadavg()[0]:.2f}\n")
    print(f"{args.path} replayed over HTTP/2, {args.rounds} rounds of {args.exchanges} exchanges\n")
    print("| figure | per exchange |\n| --- | --- |")
    print(f"| CPU, all threads (min of rounds) | {min(rounds):.0f} µs |")
    print(f"| CPU, all threads (median of rounds) | {statistics.median(rounds):.0f} µs |")
    print(f"| caller thread: Python function calls | {calls:.0f} |")
    writes = counted("<method 'sendall' of '_socket.socket' objects>")
    locks = counted("<method '__enter__' of '_thread.RLock' objects>")
    print(f"| caller thread: socket writes | {writes:.2f} |")
    print(f"| caller thread: rounds of the connection's lock | {locks:.2f} |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
