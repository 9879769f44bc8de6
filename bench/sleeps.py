"""Sleeps due together, and zero-length sleeps: `torpor dev` beside restate-server (issue 24).

    python -m bench.sleeps [--quick] [--rounds 3] [--zero-calls 40] [--http2] [--dev-workers N]
                           [--aws] [--aws-count 1000]

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

`--quick`: one round, 10 sequential calls, (c) with 300 sleeps. `--dev-workers N`: `torpor dev
--workers N` (N orchestrator processes over its one SQLite store).

`--aws`: the Lambda path instead, on this machine (`bench.aws_requests.aws_on_this_machine`: a
moto server in its own process, `bench.common.moto`, for SQS, and DynamoDB on dynalite,
`bench.common.dynalite`, or with `--store moto` on moto too; the example services on the Lambda
emulator): `--aws-count` `Waits/timed_sleep/send` 1000 through the ingress function (16 threads),
after an untimed warm-up (4 sleeps per worker process), while the worker function is fed by SQS
batches as the event source mapping does: `--workers` processes (Lambda's concurrent execution
environments, each with its own GIL), each with `--pollers` SQS pollers receiving up to 10
messages, calling the worker once per batch and deleting its successes in one batch (`--workers
0`: the pollers are threads of this process), and `--timer-workers` more processes on the timer
queue, as the stack's second event source mapping (`--single-queue`: no timer queue, every
wake-up on the wake queue, as before); the sweeper function runs every 60 s, as the stack
schedules it. It waits until every sleep completed, or nothing completed for `--stall-s`, then
names the sleeps that did not complete (and their status) and the sends the ingress refused.
Lateness = what the handler measured on resuming (as in (c)); end to end = the invocation's
`completed_at_ms` - (its send time + 1000 ms), which includes the queueing of its first attempt.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import os
import statistics
import subprocess
import sys
import threading
import time
import warnings
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager, nullcontext
from typing import Any

import boto3
import httpx

from bench.common import dynalite, hey, load, moto, torpor_dev
from bench.latency import percentile
from tests.helpers.aws_functions import LocalFunctions
from tests.helpers.services import REPO_ROOT, serve_examples

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
        torpor_dev(None, concurrency=args.concurrency, processes=args.dev_workers) as dev,
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
    command = f"python -m bench.sleeps {' '.join(sys.argv[1:])}"
    print(f"\ncommand: {command}; torpor dev --concurrency {args.concurrency} --workers {args.dev_workers}; {mode}")
    for title, results in parts.items():
        print_table(title, results)
    summary = {
        title: {s: {"p50": _cell(v[0], 0.5), "p99": _cell(v[0], 0.99), "errors": v[1]} for s, v in res.items()}
        for title, res in parts.items()
    }
    print("\n" + json.dumps(summary))
    return 0 if all(v[1] == 0 for res in parts.values() for v in res.values()) else 1


def _quiet() -> None:
    for name in ("werkzeug", "torpor", "botocore", "urllib3", "aws_lambda_powertools"):
        logging.getLogger(name).setLevel(logging.ERROR)
    warnings.filterwarnings("ignore", message="No application metrics to publish")


def _poll_queue(
    functions: LocalFunctions, stop: threading.Event, errors: list[str], wait_s: int = 1, queue_url: str | None = None
) -> None:
    """One SQS poller of an event source mapping (of `queue_url`; None: both queues in turn):
    receive a batch, run the worker on it, again.

    A batch whose worker call raised is counted and its messages stay on the queue (visible again
    after the visibility timeout), as Lambda does with a failed invocation; the poller goes on.
    """
    while not stop.is_set():
        try:
            if not functions.work(wait_s=wait_s, queue_url=queue_url) and not wait_s:
                time.sleep(0.05)  # short polls: an empty queue is asked again 50 ms later
        except Exception as exc:  # noqa: BLE001  # the worker or SQS failed: Lambda retries the batch, so do we
            errors.append(f"{type(exc).__name__}: {exc}")


def worker_loop(pollers: int, wait_s: int = 1, queue: str = "wake") -> int:
    """`--worker-loop`: one worker execution environment in this process, fed by `pollers` SQS
    pollers (threads) of one queue's event source mapping (`queue`: "wake" or "timer") until stdin
    closes; its environment comes from the bench's process."""
    from adapters.aws import lambda_app

    _quiet()
    sqs = boto3.client("sqs")  # AWS_ENDPOINT_URL_SQS, AWS_DEFAULT_REGION: from the parent
    wake_url = os.environ["TORPOR_WAKE_QUEUE_URL"]
    timer_url = os.environ.get("TORPOR_TIMER_QUEUE_URL") or None
    functions = LocalFunctions(sqs, wake_url, timer_url)
    queue_url = timer_url if queue == "timer" and timer_url else wake_url
    shards = lambda_app.build_control_plane().store.shards  # type: ignore[attr-defined]  # its first DynamoDB read
    print("ready", shards, flush=True)  # warm: the parent starts timing once every worker said so
    stop = threading.Event()
    errors: list[str] = []
    threads = [
        threading.Thread(target=_poll_queue, args=(functions, stop, errors, wait_s, queue_url), daemon=True)
        for _ in range(pollers)
    ]
    for thread in threads:
        thread.start()
    sys.stdin.read()  # the parent closes it to stop us
    stop.set()
    for thread in threads:
        thread.join(timeout=5)
    for error in errors:
        print(f"worker error: {error}", file=sys.stderr)
    return 0


@contextmanager
def _worker_processes(count: int, pollers: int, wait_s: int, timer_count: int = 0) -> Iterator[None]:
    """`count` worker processes (`worker_loop`) on the wake queue and `timer_count` on the timer
    queue, each one Lambda execution environment of the worker (each mapping scales on its own)."""
    env = {**os.environ, "PYTHONPATH": str(REPO_ROOT)}
    command = [sys.executable, "-m", "bench.sleeps", "--worker-loop", "--pollers", str(pollers)]
    command += ["--poll-wait-s", str(wait_s)]
    processes = [
        subprocess.Popen(
            [*command, "--worker-queue", queue], stdin=subprocess.PIPE, stdout=subprocess.PIPE, env=env, cwd=REPO_ROOT
        )
        for queue in ["wake"] * count + ["timer"] * timer_count
    ]
    try:
        for process in processes:  # each imports and builds its control plane: a cold start, untimed
            if process.stdout is None or not process.stdout.readline().startswith(b"ready"):
                raise SystemExit("a worker process did not start")
        yield
    finally:
        for process in processes:
            if process.stdin is not None:
                process.stdin.close()
        for process in processes:
            try:
                process.wait(timeout=15)
            except subprocess.TimeoutExpired:
                process.kill()


def warm_up(functions: LocalFunctions, poll: Any, count: int, timeout_s: float = 120) -> None:
    """`count` one-second sleeps sent and waited for, untimed: every worker process has imported,
    built its control plane and opened its clients (cold starts are not what this bench measures)."""
    ids = []
    for _ in range(count):
        status, body, _headers = functions.http("ingress", "POST", "/Waits/timed_sleep/send", SLEEP_MS)
        if status == 202:
            ids.append(str(body["invocationId"]))
    deadline = time.monotonic() + timeout_s
    while ids and time.monotonic() < deadline:
        time.sleep(0.5)
        ids = [i for i in ids if (r := poll.get_invocation(i)) is None or r.status != "completed"]
    if ids:
        raise SystemExit(f"the warm-up did not complete within {timeout_s:.0f} s: {len(ids)} open")


def aws(args: argparse.Namespace) -> int:
    """1,000 one-second sleeps through the Lambda path (SQS delays on moto, the worker function)."""
    from adapters.aws import lambda_app
    from bench.aws_requests import aws_on_this_machine  # moto, the emulator: only with --aws

    count = 200 if args.quick else args.aws_count
    print(f"before: {load()}", flush=True)
    _quiet()
    with (
        moto() as (endpoint, _pid),
        dynalite() if args.store == "dynalite" else nullcontext((None, None)) as (dynamodb, _),
        aws_on_this_machine(endpoint=endpoint, dynamodb_endpoint=dynamodb, timer_queue=not args.single_queue) as (
            functions,
            poll,
            _,
            _,
        ),
    ):
        sent_at: dict[str, float] = {}
        refused: list[str] = []
        lock = threading.Lock()

        def send(_: int) -> None:
            started = _now_ms()
            status, body, _headers = functions.http("ingress", "POST", "/Waits/timed_sleep/send", SLEEP_MS)
            with lock:
                if status == 202:
                    sent_at[str(body["invocationId"])] = started
                else:
                    refused.append(f"{status} {body!r:.200}")

        stop = threading.Event()
        errors: list[str] = []
        threads = [] if args.workers else [
            threading.Thread(target=_poll_queue, args=(functions, stop, errors, args.poll_wait_s), daemon=True)
            for _ in range(args.pollers)
        ]  # fmt: skip
        timer_workers = 0 if args.single_queue else args.timer_workers
        swept: list[int] = []

        def sweeper() -> None:  # the stack's sweeper function, every minute
            while not stop.wait(60):
                swept.append(lambda_app.build_control_plane().sweep_due())

        threads.append(threading.Thread(target=sweeper, daemon=True))
        with _worker_processes(args.workers, args.pollers, args.poll_wait_s, timer_workers if args.workers else 0):
            for thread in threads:
                thread.start()
            warm_up(functions, poll, 4 * max(args.workers, 1))
            started = time.monotonic()
            with ThreadPoolExecutor(max_workers=16) as pool:
                list(pool.map(send, range(count)))
            sending_s = time.monotonic() - started
            late: dict[str, float] = {}  # handler-measured: resumed - (journaled start + 1000 ms)
            end_to_end: dict[str, float] = {}  # completed_at_ms - (send time + 1000 ms)
            progress = time.monotonic()
            while len(late) < len(sent_at) and time.monotonic() - progress < args.stall_s:
                time.sleep(2)  # each pass reads every open invocation: not too often, it loads the store
                for invocation_id, sent in list(sent_at.items()):
                    if invocation_id in late:
                        continue
                    record = poll.get_invocation(invocation_id)
                    if record is not None and record.status == "completed" and record.output is not None:
                        late[invocation_id] = float(json.loads(record.output))
                        end_to_end[invocation_id] = record.completed_at_ms - sent - SLEEP_MS
                        progress = time.monotonic()
            stop.set()
            for thread in threads:
                thread.join(timeout=5)
        for invocation_id in sent_at.keys() - late.keys():
            record = poll.get_invocation(invocation_id)
            print(f"not completed: {invocation_id} {record.status if record else None}", file=sys.stderr)
        for answer in refused:
            print(f"send refused: {answer}", file=sys.stderr)
        for error in errors:
            print(f"worker error: {error}", file=sys.stderr)
    samples, totals = list(late.values()), list(end_to_end.values())
    print(f"after: {load()}")
    print(f"\ncommand: python -m bench.sleeps {' '.join(sys.argv[1:])}")
    feeders = f"{args.workers} worker processes x {args.pollers} pollers" if args.workers else f"{args.pollers} pollers"
    if args.workers:
        feeders += " on the wake queue" + ("" if args.single_queue else f", {timer_workers} on the timer queue")
    feeders += f"; hold_ms {os.environ.get('TORPOR_WAKE_HOLD_MS') or lambda_app.WAKE_HOLD_MS}"
    print(
        f"\nLambda path (SQS on moto, DynamoDB on {args.store}; worker fed by {feeders}): {count} one-second "
        f"sleeps (Waits/timed_sleep) sent in {sending_s:.1f} s; {len(sent_at)} accepted, {len(samples)} completed"
    )
    print("lateness = the handler's clock on resuming - (its journaled start + 1000 ms);")
    print("end to end = completed_at_ms - (send time + 1000 ms)\n")
    print("| figure | lateness | end to end |\n| --- | --- | --- |")
    for label, q in (("p50", 0.50), ("p99", 0.99), ("max", 1.0)):
        print(f"| {label} | {_cell(samples, q):.1f} ms | {_cell(totals, q):.1f} ms |")
    if samples:
        print(f"| mean | {statistics.mean(samples):.1f} ms | {statistics.mean(totals):.1f} ms |")
    print(f"| completed / sent | {len(samples)} / {count} | |")
    print(f"\nthe sweeper (every 60 s) sent {sum(swept)} wake-up(s) in {len(swept)} sweeps")
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
    parser.add_argument("--dev-workers", type=int, default=1, help="torpor dev's --workers (orchestrator processes)")
    parser.add_argument("--http2", action="store_true", help="serve and register over HTTP/2: bidirectional mode")
    parser.add_argument("--aws", action="store_true", help="the Lambda path (moto + SQS + the worker function)")
    parser.add_argument("--aws-count", type=int, default=1000)
    parser.add_argument("--pollers", type=int, default=1, help="--aws: SQS pollers per worker process")
    parser.add_argument("--workers", type=int, default=8, help="--aws: worker processes (0: pollers in this one)")
    parser.add_argument(
        "--timer-workers", type=int, default=8, help="--aws: worker processes on the timer queue (its own mapping)"
    )
    parser.add_argument(
        "--single-queue", action="store_true", help="--aws: no timer queue (every wake-up on the wake queue)"
    )
    parser.add_argument("--worker-queue", choices=("wake", "timer"), default="wake", help=argparse.SUPPRESS)
    parser.add_argument("--store", choices=("moto", "dynalite"), default="dynalite", help="--aws: DynamoDB")
    parser.add_argument("--stall-s", type=float, default=120, help="--aws: give up after this long without progress")
    parser.add_argument(
        "--poll-wait-s", type=int, default=1, help="--aws: each receive's WaitTimeSeconds (0: short polls 50 ms apart)"
    )
    parser.add_argument("--worker-loop", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.worker_loop:
        return worker_loop(args.pollers, args.poll_wait_s, args.worker_queue)
    run: Callable[[argparse.Namespace], int] = aws if args.aws else local
    return run(args)


if __name__ == "__main__":
    raise SystemExit(main())
