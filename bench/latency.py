"""Latency of calls through `torpor dev`, and DynamoDB requests per invocation.

Runs the example services (hypercorn, HTTP/1.1, own process), a moto server (own process) and the
control plane with `torpor dev`'s wiring in this process, then calls, one at a time:
`Steps/one_step` (one `ctx.run`, 2 handler requests) and `Steps/ten_steps` (10 `ctx.run`, 11
handler requests). Prints p50/p99 latency and the DynamoDB requests each invocation cost.

    python -m bench.latency [--calls 200] [--warmup 20]
"""

from __future__ import annotations

import argparse
import logging
import os
import statistics
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager

import httpx

from adapters.local.dev import DevServer
from control_plane.settings import Settings
from tests.helpers.moto import DUMMY_AWS_ENV, unique_table_name
from tests.helpers.services import free_port, serve_examples


@contextmanager
def moto_process() -> Iterator[str]:
    """A moto server in its own process (so it does not share this process's GIL)."""
    port = free_port()
    process = subprocess.Popen(
        [sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(port)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 30
        while True:
            try:
                httpx.get(f"{url}/moto-api/", timeout=1)
                break
            except httpx.HTTPError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.05)
        yield url
    finally:
        process.terminate()
        process.wait(10)


def percentile(samples: list[float], q: float) -> float:
    """The `q` quantile (0..1) of `samples`, nearest-rank."""
    ordered = sorted(samples)
    return ordered[min(len(ordered) - 1, max(0, round(q * len(ordered)) - 1))]


def measure(dev: DevServer, client: httpx.Client, path: str, body: object, calls: int, warmup: int) -> dict[str, float]:
    """Call `path` `warmup + calls` times; latency in ms and store requests per call."""
    for _ in range(warmup):
        client.post(dev.ingress_url + path, json=body).raise_for_status()
    samples: list[float] = []
    before = dev.store.request_count
    for _ in range(calls):
        started = time.perf_counter()
        reply = client.post(dev.ingress_url + path, json=body)
        samples.append((time.perf_counter() - started) * 1000)
        reply.raise_for_status()
    requests = (dev.store.request_count - before) / calls
    return {
        "p50": statistics.median(samples),
        "p99": percentile(samples, 0.99),
        "mean": statistics.fmean(samples),
        "dynamodb_requests": requests,
    }


def main(argv: list[str] | None = None) -> int:
    """Run the benchmark and print a table."""
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--calls", type=int, default=200)
    parser.add_argument("--warmup", type=int, default=20)
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.WARNING)
    os.environ.update({k: v for k, v in DUMMY_AWS_ENV.items() if k not in os.environ})
    with serve_examples() as (services_url, _), moto_process() as dynamodb:
        dev = DevServer(
            ingress_port=0, admin_port=0, dynamodb_endpoint=dynamodb, table=unique_table_name("bench"),
            settings=Settings(),
        )  # fmt: skip
        dev.start()
        try:
            dev.control_plane.registry.register(services_url)
            with httpx.Client(timeout=60) as client:
                rows = [
                    (
                        "one-step call (Steps/one_step)",
                        measure(dev, client, "/Steps/one_step", 1, args.calls, args.warmup),
                    ),
                    (
                        "10-step call (Steps/ten_steps)",
                        measure(dev, client, "/Steps/ten_steps", "b", args.calls, args.warmup),
                    ),
                ]
        finally:
            dev.stop()
    print(
        f"torpor dev, moto server over HTTP, restate-sdk services under hypercorn; {args.calls} sequential calls each"
    )
    print(f"{'workload':34} {'p50 ms':>8} {'p99 ms':>8} {'mean ms':>8} {'DynamoDB req/inv':>17}")
    for name, r in rows:
        print(f"{name:34} {r['p50']:8.1f} {r['p99']:8.1f} {r['mean']:8.1f} {r['dynamodb_requests']:17.1f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
