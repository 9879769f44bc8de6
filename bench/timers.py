"""Timer lateness through `torpor dev`: how long after its due time a sleeping handler resumes.

Sends 100 invocations of `Waits/sleep` (1 s each, 20 ms apart), then reads each journal: the
lateness of one sleep is the time its completing attempt's batch was committed minus the Sleep's
wake-up time, i.e. timer delay + lease + load + one handler request + commit.

    python -m bench.timers [--count 100] [--sleep-ms 1000] [--gap-ms 20]
"""

from __future__ import annotations

import argparse
import logging
import os
import statistics
import time

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


def main(argv: list[str] | None = None) -> int:
    """Run the benchmark and print p50/p99 lateness."""
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--count", type=int, default=100)
    parser.add_argument("--sleep-ms", type=int, default=1000)
    parser.add_argument("--gap-ms", type=int, default=20, help="time between two sends (spreads the wake-ups)")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.WARNING)
    os.environ.update({k: v for k, v in DUMMY_AWS_ENV.items() if k not in os.environ})
    with serve_examples() as (services_url, _), moto_process() as dynamodb:
        dev = DevServer(ingress_port=0, admin_port=0, dynamodb_endpoint=dynamodb, table=unique_table_name("bench"),
                        settings=Settings())  # fmt: skip
        dev.start()
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
        finally:
            dev.stop()
    samples = list(late.values())
    print(
        f"torpor dev, moto over HTTP: {len(samples)}/{args.count} sleeps of {args.sleep_ms} ms, {args.gap_ms} ms apart"
    )
    print("lateness = commit of the resumed attempt - wake-up time (timer + lease + load + 1 handler request)")
    print(
        f"p50 {statistics.median(samples):.1f} ms   p99 {percentile(samples, 0.99):.1f} ms   max {max(samples):.1f} ms"
    )
    return 0 if len(samples) == args.count else 1


if __name__ == "__main__":
    raise SystemExit(main())
