"""Scale: 10,000 invocations across 1,000 object keys through `torpor dev`, checked for loss, duplicates, order.

    python -m bench.scale [--keys 1000] [--per-key 10] [--senders 16] [--quick]

`torpor dev` runs in its own process (DynamoDB in another, the example services in a
third). This process sends `Sequence/{key}/append/send` with body `n` for n = 0..per-key-1, round
by round: every key's `n` is acknowledged before any key's `n + 1` is sent, so each key's arrival
order is 0, 1, 2, ... The handler (`examples/fixtures/bench.py`) appends `n` to the key's state. Then it
waits until no invocation is left unfinished (the admin API's status index), and reads every key's
list (`Sequence/{key}/get`): it must be exactly [0, 1, ..., per-key-1]: a missing number is a lost
invocation, a repeated one an invocation whose effect was applied twice, a swapped pair a broken
per-key order.

Reported: the time to send, the time until all finished, invocations per second, and the peak
resident memory (VmHWM) and CPU time of the `torpor dev` process, and of the store beside it.
`--quick`: 100 keys x 10.

The store is dynalite (`--store dynalite`, the default; npm, in memory, installed into
`.cache/bench/dynalite`): moto 5 answers a Query by scanning the whole table, so on moto each
invocation costs more than the one before and 10,000 do not fit in 20 minutes (`--store moto`).
"""

from __future__ import annotations

import argparse
import time
from concurrent.futures import ThreadPoolExecutor

import httpx

from bench.common import cpu_seconds, load, memory_mb, store, torpor_dev
from tests.helpers.services import serve_examples

UNFINISHED = ("pending", "scheduled", "ready", "running", "backing-off", "suspended", "paused")


def unfinished(admin_url: str, client: httpx.Client) -> str | None:
    """A status some invocation is still in, or None when every invocation finished."""
    for status in UNFINISHED:
        if client.get(f"{admin_url}/invocations", params={"status": status, "limit": 1}).json()["invocations"]:
            return status
    return None


def main(argv: list[str] | None = None) -> int:
    """Send, wait, check, print a table; exit status 1 if a check failed."""
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--keys", type=int, default=1000, help="object keys (default 1000)")
    parser.add_argument("--per-key", type=int, default=10, help="invocations per key (default 10)")
    parser.add_argument("--senders", type=int, default=16, help="concurrent sending connections (default 16)")
    parser.add_argument("--timeout-s", type=float, default=1800, help="give up waiting after this (default 1800)")
    parser.add_argument("--store", choices=("dynalite", "moto"), default="dynalite", help="DynamoDB (default dynalite)")
    parser.add_argument("--quick", action="store_true", help="100 keys x 10")
    args = parser.parse_args(argv)
    if args.quick:
        args.keys = 100
    keys = [f"k{i:04d}" for i in range(args.keys)]
    total = args.keys * args.per_key
    print(f"before: {load()}", flush=True)
    limits = httpx.Limits(max_connections=args.senders, max_keepalive_connections=args.senders)
    with (
        serve_examples() as (services_url, _),
        store(args.store) as (dynamodb, store_pid),
        torpor_dev(dynamodb) as dev,
        httpx.Client(timeout=120, limits=limits) as client,
        ThreadPoolExecutor(args.senders) as pool,
    ):
        dev.register(services_url)
        pid = dev.process.pid
        cpu_before = {"torpor": cpu_seconds(pid), "store": cpu_seconds(store_pid)}
        started = time.monotonic()

        def send(key: str, n: int) -> str:
            reply = client.post(f"{dev.ingress_url}/Sequence/{key}/append/send", json=n)
            reply.raise_for_status()
            return str(reply.json()["invocationId"])

        ids: set[str] = set()
        for n in range(args.per_key):  # round n: every key's n, all acknowledged before n + 1
            ids.update(pool.map(lambda key, n=n: send(key, n), keys))
            print(f"  sent round {n + 1}/{args.per_key} at {time.monotonic() - started:.0f} s", flush=True)
        sent_s = time.monotonic() - started
        deadline = started + args.timeout_s
        while (status := unfinished(dev.admin_url, client)) is not None and time.monotonic() < deadline:
            print(f"  {time.monotonic() - started:.0f} s: some still {status}", flush=True)
            time.sleep(5)
        done_s = time.monotonic() - started
        cpu = {"torpor": cpu_seconds(pid) - cpu_before["torpor"], "store": cpu_seconds(store_pid) - cpu_before["store"]}
        memory = {"torpor": memory_mb(pid), "store": memory_mb(store_pid)}
        lists = {key: client.post(f"{dev.ingress_url}/Sequence/{key}/get").json() for key in keys}
    expected = list(range(args.per_key))
    lost = sum(len(set(expected) - set(seen)) for seen in lists.values())
    twice = sum(len(seen) - len(set(seen)) for seen in lists.values())
    out_of_order = sum(1 for seen in lists.values() if seen != sorted(seen))
    print(f"after: {load()}")
    print(f"\n{total} invocations ({args.keys} keys x {args.per_key}), {args.senders} senders, store {args.store}\n")
    print("| figure | value |\n| --- | --- |")
    print(f"| distinct invocation ids acknowledged | {len(ids)} of {total} |")
    print(f"| unfinished at the end | {status or 'none'} |")
    print(f"| lost (a number missing from its key's list) | {lost} |")
    print(f"| run twice (a number repeated) | {twice} |")
    print(f"| keys out of order | {out_of_order} |")
    print(f"| time to send all | {sent_s:.0f} s |")
    print(f"| time until all finished | {done_s:.0f} s ({total / done_s:.1f} invocations/s) |")
    peak, end = memory["torpor"][1], memory["torpor"][0]
    print(f"| torpor dev: peak memory (VmHWM), at the end (VmRSS) | {peak:.0f} MB, {end:.0f} MB |")
    print(f"| torpor dev: CPU time | {cpu['torpor']:.0f} s ({cpu['torpor'] * 1000 / total:.1f} ms per invocation) |")
    print(f"| {args.store} (DynamoDB): peak memory, CPU time | {memory['store'][1]:.0f} MB, {cpu['store']:.0f} s |")
    ok = len(ids) == total and status is None and lost == twice == out_of_order == 0
    print(f"\n{'OK' if ok else 'FAILED'}")
    return 0 if ok else 1


if __name__ == "__main__":
    raise SystemExit(main())
