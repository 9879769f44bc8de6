"""Timer lateness through `torpor dev`: how long after its due time a sleeping handler resumes.

Sends 100 invocations of `Waits/sleep` (1 s each, 20 ms apart; `--gap-ms 0`: all due in the same
instant), then reads each journal: the lateness of one sleep is the time its completing attempt's
batch was committed minus the Sleep's wake-up time, i.e. timer delay + lease + load + one handler
request + commit.

Then the hand-off of a virtual object's key: `--handoff` calls of `Counter/add` sent at once on one
key, each queued behind the previous one; the gap between two is the commit of one call's last batch
to the commit of the next one's (release of the key + hand-off + load + one handler request).

    python -m bench.timers [--count 100] [--sleep-ms 1000] [--gap-ms 20] [--handoff 50] [--moto]

`torpor dev` runs on its default store (SQLite in a temporary data directory), or on moto over HTTP
with `--moto`.
"""

from __future__ import annotations

import argparse
import contextlib
import itertools
import logging
import os
import statistics
import tempfile
import time
from collections.abc import Mapping
from typing import Any

import httpx

from adapters.local.dev import DevServer
from bench.latency import moto_process, percentile
from control_plane.protocol import MessageType, decode_frames
from control_plane.protocol import protocol_pb2 as pb
from control_plane.settings import Settings
from tests.helpers.moto import DUMMY_AWS_ENV, unique_table_name
from tests.helpers.services import serve_examples


def lateness_ms(dev: DevServer, invocation_id: str) -> float | None:
    """Commit time of the SleepCompletion's batch minus the Sleep's wake-up time, in ms."""
    loaded = dev.store.load_invocation(invocation_id)
    if loaded is None or loaded.record.status != "completed":
        return None
    wake_up = None
    for batch in loaded.batches:
        for entry in decode_frames(batch.entries):
            if entry.type == MessageType.Sleep:
                wake_up = pb.SleepCommandMessage.FromString(entry.payload).wake_up_time
            elif entry.type == MessageType.SleepCompletion and wake_up is not None:
                return batch.committed_at_ms - wake_up
    return None


def watch_starts(dev: DevServer) -> dict[str, list[float]]:
    """Record when each attempt of an invocation sends its request to the deployment (ms since the
    epoch), by invocation id: the moment the handler is started, whatever was read ahead of it."""
    started: dict[str, list[float]] = {}
    invoker: Any = dev.invoker
    request = invoker.request

    def timed(endpoint: str, method: str, path: str, headers: Mapping[str, str], *args: Any, **kwargs: Any) -> Any:
        invocation_id = headers.get("x-restate-invocation-id", "")
        started.setdefault(invocation_id, []).append(time.time_ns() / 1e6)
        return request(endpoint, method, path, headers, *args, **kwargs)

    invoker.request = timed
    return started


def handoff_gaps_ms(
    dev: DevServer, client: httpx.Client, calls: int, started: dict[str, list[float]]
) -> tuple[list[float], list[float]]:
    """Send `calls` `Counter/add` on one fresh key at once. Returns the gaps (ms) between consecutive
    commits and, for each call after the first, from the previous one's commit to its own start."""
    key = f"handoff-{time.time_ns()}"
    url = f"{dev.ingress_url}/Counter/{key}/add/send"
    ids = [client.post(url, json=1).json()["invocationId"] for _ in range(calls)]
    deadline = time.monotonic() + 60
    done: dict[str, int] = {}
    while len(done) < len(ids) and time.monotonic() < deadline:
        for invocation_id in ids:
            loaded = dev.store.load_invocation(invocation_id)
            if invocation_id not in done and loaded is not None and loaded.record.status == "completed":
                done[invocation_id] = max(batch.committed_at_ms for batch in loaded.batches)
        time.sleep(0.1)
    order = sorted(done, key=done.__getitem__)
    gaps = [float(done[b] - done[a]) for a, b in itertools.pairwise(order)]
    starts = [max(started.get(b, [0.0])) - done[a] for a, b in itertools.pairwise(order)]
    return gaps, starts


def wake_ups(dev: DevServer, ids: list[str]) -> dict[str, float]:
    """The Sleep's wake-up time (ms since the epoch) of each completed invocation in `ids`."""
    out: dict[str, float] = {}
    for invocation_id in ids:
        loaded = dev.store.load_invocation(invocation_id)
        for batch in loaded.batches if loaded is not None else []:
            for entry in decode_frames(batch.entries):
                if entry.type == MessageType.Sleep:
                    out[invocation_id] = float(pb.SleepCommandMessage.FromString(entry.payload).wake_up_time)
    return out


def summary(samples: list[float]) -> str:
    """`p50 … ms   p99 … ms   max … ms` of `samples`."""
    if not samples:
        return "no samples"
    p50, p99 = statistics.median(samples), percentile(samples, 0.99)
    return f"p50 {p50:.1f} ms   p99 {p99:.1f} ms   max {max(samples):.1f} ms"


def main(argv: list[str] | None = None) -> int:
    """Run the benchmark and print p50/p99 lateness."""
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--count", type=int, default=100)
    parser.add_argument("--sleep-ms", type=int, default=1000)
    parser.add_argument("--gap-ms", type=int, default=20, help="time between two sends (spreads the wake-ups)")
    parser.add_argument("--handoff", type=int, default=50, help="calls queued on one object key (0: skip)")
    parser.add_argument("--moto", action="store_true", help="DynamoDB on a moto server instead of SQLite")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.WARNING)
    os.environ.update({k: v for k, v in DUMMY_AWS_ENV.items() if k not in os.environ})
    with contextlib.ExitStack() as stack:
        services_url, _ = stack.enter_context(serve_examples())
        if args.moto:
            dynamodb = stack.enter_context(moto_process())
            dev = DevServer(ingress_port=0, admin_port=0, dynamodb_endpoint=dynamodb,
                            table=unique_table_name("bench"), settings=Settings())  # fmt: skip
        else:
            data_dir = stack.enter_context(tempfile.TemporaryDirectory(prefix="torpor-bench-"))
            dev = DevServer(ingress_port=0, admin_port=0, data_dir=data_dir, settings=Settings())
        dev.start()
        started = watch_starts(dev)
        try:
            dev.control_plane.registry.register(services_url)
            with httpx.Client(timeout=60) as client:
                ids = []
                for _ in range(args.count):
                    ids.append(
                        client.post(f"{dev.ingress_url}/Waits/sleep/send", json=args.sleep_ms).json()["invocationId"]
                    )
                    time.sleep(args.gap_ms / 1000)
                deadline = time.monotonic() + args.sleep_ms / 1000 + 60
                late: dict[str, float] = {}
                while len(late) < len(ids) and time.monotonic() < deadline:
                    for invocation_id in ids:
                        if invocation_id not in late and (ms := lateness_ms(dev, invocation_id)) is not None:
                            late[invocation_id] = ms
                    time.sleep(0.2)
                gaps, starts = handoff_gaps_ms(dev, client, args.handoff, started) if args.handoff else ([], [])
                resumed = [min(t for t in started[i] if t >= wake) - wake for i, wake in wake_ups(dev, ids).items()]
        finally:
            dev.stop()
    samples = list(late.values())
    store = "moto over HTTP" if args.moto else "SQLite"
    print(f"torpor dev, {store}: {len(samples)}/{args.count} sleeps of {args.sleep_ms} ms, {args.gap_ms} ms apart")
    print("lateness = commit of the resumed attempt - wake-up time (timer + lease + load + 1 handler request)")
    print(summary(samples))
    print(f"the timer fired and the resuming attempt started: {summary(resumed)} after the wake-up time")
    if gaps:
        print(f"hand-off: {len(gaps) + 1} calls of Counter/add queued on one key")
        print(f"from one's commit to the next one's start: {summary(starts)}")
        print(f"from one's commit to the next one's commit: {summary(gaps)}")
    return 0 if len(samples) == args.count and len(gaps) == max(args.handoff - 1, 0) else 1


if __name__ == "__main__":
    raise SystemExit(main())
