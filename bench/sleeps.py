"""Sleeps due together, and zero-length sleeps: `torpor dev` beside restate-server (issue 24).

    python -m bench.sleeps [--quick] [--rounds 3] [--zero-calls 40] [--http2] [--aws] [--aws-count 1000]

One process of the example services (`tests.helpers.services.serve_examples`) serves both
`torpor dev` (`bench.common.torpor_dev`, SQLite in a fresh data directory) and restate-server
1.7.12 (`bench.side_by_side.restate_server`), in request/response mode (HTTP/1.1), or in
bidirectional mode with `--http2` (both register the services over h2c). The two systems alternate
round by round:

- (a) zero-length sleeps: `Waits/sleeps` with body 1 and 3 (one, three `ctx.sleep(0)` in a row),
  `--zero-calls` sequential calls per round with `hey`; latency = the call's answer time;
- (b) 100 one-second sleeps at once: `hey -n 100 -c 100` on `Waits/sleep` 1000; lateness = answer
  time - 1000 ms (it includes the call's own work before the sleep and the answer after it);
- (c) 1,000 one-second sleeps at once: 1,000 `Waits/timed_sleep/send` 1000 sent together (one
  asyncio loop of `httpx.AsyncClient`, at most 200 requests open at once), then an attach to each;
  lateness = what each handler measured when it resumed: its wall time after the sleep - (the time
  journaled beside the sleep, in a `ctx.run` of the same attempt, + 1000 ms). The client's own
  speed does not enter it.

`--quick`: one round, 10 sequential calls, (c) with 300 sleeps.

`--aws`: the Lambda path instead, on this machine (`bench.aws_requests.aws_on_this_machine`: a
moto server in its own process, `bench.common.moto`, with DynamoDB and SQS; the example services on
the Lambda emulator): `--aws-count` `Waits/sleep/send` 1000 through the ingress function (16
threads), then the worker function fed by SQS batches (as the event source mapping does:
`--pollers` threads, each receiving up to 10 messages and calling the worker once per batch) until
every sleep completed. Every control-plane function runs in this one process (one GIL), unlike
Lambda's one execution environment per concurrent batch. Lateness = the invocation's
`completed_at_ms` - (its send time + 1000 ms).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import statistics
import sys
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor

import httpx

from bench.common import hey, load, moto, torpor_dev
from bench.latency import percentile
from tests.helpers.services import serve_examples

SLEEP_MS = 1000


def _now_ms() -> float:
    return time.time_ns() / 1e6


def _client(concurrency: int) -> httpx.AsyncClient:
    limits = httpx.Limits(max_connections=concurrency + 10, max_keepalive_connections=concurrency + 10)
    return httpx.AsyncClient(timeout=httpx.Timeout(300.0, connect=120.0), limits=limits)


def zero_sleeps(ingress: str, calls: int, count: int) -> tuple[list[float], int]:
    """`calls` sequential `Waits/sleeps(count)` (`count` zero-length sleeps each) with `hey`:
    (latencies in ms, errors)."""
    run = hey(f"{ingress}/Waits/sleeps", str(count), requests=calls)
    return run.latencies_ms, run.errors


def sleeps_together(ingress: str, count: int) -> tuple[list[float], int]:
    """`count` blocking `Waits/sleep(1000)` calls at once with `hey -c count`: (lateness in ms, errors)."""
    run = hey(f"{ingress}/Waits/sleep", str(SLEEP_MS), requests=count, concurrency=count)
    return [x - SLEEP_MS for x in run.latencies_ms], run.errors


async def timed_sleeps(ingress: str, count: int, in_flight: int = 200) -> tuple[list[float], int]:
    """`count` `Waits/timed_sleep(1000)` sent together (at most `in_flight` requests open at once:
    a thousand connections opened in one go get some reset), then an attach to each: the lateness
    each handler measured when it resumed (ms), and the errors (a request that broke twice)."""
    gate = asyncio.Semaphore(in_flight)
    async with _client(in_flight) as client:

        async def request(method: str, url: str, **kwargs: object) -> httpx.Response | None:
            async with gate:
                for _ in range(2):
                    try:
                        return await client.request(method, url, **kwargs)  # type: ignore[arg-type]
                    except httpx.TransportError:
                        await asyncio.sleep(0.1)
                return None

        async def send() -> str | None:
            response = await request("POST", f"{ingress}/Waits/timed_sleep/send", json=SLEEP_MS)
            ok = response is not None and response.status_code in (200, 202)
            return response.json().get("invocationId") if ok and response is not None else None

        async def attach(invocation_id: str) -> float | None:
            response = await request("GET", f"{ingress}/restate/invocation/{invocation_id}/attach")
            return float(response.json()) if response is not None and response.status_code == 200 else None

        ids = await asyncio.gather(*(send() for _ in range(count)))
        late = await asyncio.gather(*(attach(i) for i in ids if i is not None))
    samples = [x for x in late if x is not None]
    return samples, count - len(samples)


def _cell(samples: list[float], q: float) -> float:
    return percentile(samples, q) if samples else float("nan")


def print_table(title: str, results: dict[str, tuple[list[float], int]]) -> None:
    """A markdown table: p50, p99, max of torpor and restate, torpor ÷ restate."""
    (t, te), (r, re_) = results["torpor"], results["restate"]
    print(f"\n{title}\n")
    print("| figure | torpor | restate | torpor ÷ restate |\n| --- | --- | --- | --- |")
    for label, q in (("p50", 0.50), ("p99", 0.99), ("max", 1.0)):
        tv, rv = _cell(t, q), _cell(r, q)
        print(f"| {label} | {tv:.1f} ms | {rv:.1f} ms | {tv / rv if rv else float('nan'):.2f} |")
    print(f"| samples (errors) | {len(t)} ({te}) | {len(r)} ({re_}) | |")


def local(args: argparse.Namespace) -> int:
    """Parts (a), (b), (c) on `torpor dev` and restate-server, alternating; prints the tables."""
    from bench.side_by_side import restate_server  # npm install on first use

    rounds = 1 if args.quick else args.rounds
    zero_calls = 10 if args.quick else args.zero_calls
    big = 300 if args.quick else args.big
    print(f"before: {load()}", flush=True)
    parts: dict[str, dict[str, tuple[list[float], int]]] = {}

    def add(part: str, system: str, result: tuple[list[float], int]) -> None:
        samples, errors = parts.setdefault(part, {}).setdefault(system, ([], 0))
        parts[part][system] = (samples + result[0], errors + result[1])

    with (
        serve_examples(http2=args.http2) as (services_url, _),
        torpor_dev(None, concurrency=args.concurrency) as dev,
        restate_server() as rs,
    ):
        dev.register(services_url)
        rs.register(services_url, http2=args.http2)
        systems = {"torpor": dev.ingress_url, "restate": rs.ingress_url}
        for url in systems.values():  # warm-up: connections, lazy imports
            zero_sleeps(url, 5, 1)
            sleeps_together(url, 10)
        one = f"(a) one zero-length sleep: Waits/sleeps(1), {zero_calls} sequential calls x {rounds} rounds, latency"
        three = f"(a) three zero-length sleeps: Waits/sleeps(3), {zero_calls} sequential calls x {rounds} rounds"
        hundred = f"(b) {args.count} one-second sleeps at once (hey -c {args.count}) x {rounds} rounds, lateness"
        thousand = f"(c) {big} one-second sleeps sent at once (Waits/timed_sleep) x {rounds} rounds, lateness"
        for _ in range(rounds):
            for system, url in systems.items():
                add(one, system, zero_sleeps(url, zero_calls, 1))
                add(three, system, zero_sleeps(url, zero_calls, 3))
            for system, url in systems.items():
                add(hundred, system, sleeps_together(url, args.count))
                time.sleep(0.5)
            for system, url in systems.items():
                add(thousand, system, asyncio.run(timed_sleeps(url, big)))
                time.sleep(0.5)
                print(f"  round done on {system}: {load()}", file=sys.stderr, flush=True)
    print(f"after: {load()}")
    mode = "bidirectional (HTTP/2)" if args.http2 else "request/response (HTTP/1.1)"
    command = f"python -m bench.sleeps {' '.join(sys.argv[1:])}; torpor dev --concurrency {args.concurrency}"
    print(f"\ncommand: {command}; {mode}")
    for title, results in parts.items():
        print_table(title, results)
    summary = {
        title: {s: {"p50": _cell(v[0], 0.5), "p99": _cell(v[0], 0.99), "errors": v[1]} for s, v in res.items()}
        for title, res in parts.items()
    }
    print("\n" + json.dumps(summary))
    return 0 if all(v[1] == 0 for res in parts.values() for v in res.values()) else 1


def aws(args: argparse.Namespace) -> int:
    """1,000 one-second sleeps through the Lambda path (moto, SQS delays, the worker function)."""
    from bench.aws_requests import aws_on_this_machine  # moto, the emulator: only with --aws

    count = 200 if args.quick else args.aws_count
    print(f"before: {load()}", flush=True)
    for name in ("werkzeug", "torpor", "botocore", "urllib3"):
        logging.getLogger(name).setLevel(logging.ERROR)
    with moto() as (endpoint, _pid), aws_on_this_machine(endpoint=endpoint) as (functions, poll, _, _):
        sent_at: dict[str, float] = {}
        lock = threading.Lock()

        def send(_: int) -> None:
            started = _now_ms()
            status, body, _headers = functions.http("ingress", "POST", "/Waits/sleep/send", SLEEP_MS)
            if status == 202:
                with lock:
                    sent_at[str(body["invocationId"])] = started

        stop = threading.Event()

        def poller() -> None:
            while not stop.is_set():
                functions.work(wait_s=1)

        pollers = [threading.Thread(target=poller, daemon=True) for _ in range(args.pollers)]
        for thread in pollers:
            thread.start()
        started = time.monotonic()
        with ThreadPoolExecutor(max_workers=16) as pool:
            list(pool.map(send, range(count)))
        sending_s = time.monotonic() - started
        late: dict[str, float] = {}
        deadline = time.monotonic() + 120 + count / 10
        while len(late) < len(sent_at) and time.monotonic() < deadline:
            for invocation_id, sent in list(sent_at.items()):
                if invocation_id in late:
                    continue
                record = poll.get_invocation(invocation_id)
                if record is not None and record.status == "completed":
                    late[invocation_id] = record.completed_at_ms - sent - SLEEP_MS
            time.sleep(0.2)
        stop.set()
        for thread in pollers:
            thread.join(timeout=5)
    samples = list(late.values())
    print(f"after: {load()}")
    print(f"\ncommand: python -m bench.sleeps {' '.join(sys.argv[1:])}")
    print(
        f"\nLambda path (moto: DynamoDB + SQS; worker fed by {args.pollers} pollers): {count} one-second sleeps "
        f"sent in {sending_s:.1f} s, {len(samples)} completed"
    )
    print("lateness = completed_at_ms - (send time + 1000 ms)\n")
    print("| figure | value |\n| --- | --- |")
    for label, q in (("p50", 0.50), ("p99", 0.99), ("max", 1.0)):
        print(f"| {label} | {_cell(samples, q):.1f} ms |")
    if samples:
        print(f"| mean | {statistics.mean(samples):.1f} ms |")
    print(f"| completed / sent | {len(samples)} / {count} |")
    return 0 if len(samples) == count else 1


def main(argv: list[str] | None = None) -> int:
    """Run the local parts, or with `--aws` the Lambda path."""
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="one round, small counts")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--zero-calls", type=int, default=40)
    parser.add_argument("--count", type=int, default=100, help="sleeps of part (b)")
    parser.add_argument("--big", type=int, default=1000, help="sleeps of part (c)")
    parser.add_argument("--concurrency", type=int, default=32, help="torpor dev's --concurrency")
    parser.add_argument("--http2", action="store_true", help="serve and register over HTTP/2: bidirectional mode")
    parser.add_argument("--aws", action="store_true", help="the Lambda path (moto + SQS + the worker function)")
    parser.add_argument("--aws-count", type=int, default=1000)
    parser.add_argument("--pollers", type=int, default=8, help="--aws: SQS pollers calling the worker")
    args = parser.parse_args(argv)
    run: Callable[[argparse.Namespace], int] = aws if args.aws else local
    return run(args)


if __name__ == "__main__":
    raise SystemExit(main())
