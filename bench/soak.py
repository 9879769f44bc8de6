"""Slowdown with use: `Counter/add`'s latency at the start of a `torpor dev` and after 10,000 invocations.

    python -m bench.soak [--invocations 10000] [--probe-calls 200] [--concurrency 8] [--store sqlite|moto|dynalite]

`torpor dev` runs in its own process on its default store, SQLite, in a fresh data directory under
`.cache/bench` (`--store moto` / `--store dynalite`: DynamoDB on a moto server or dynalite in
another process); the example services in another (`python -m examples.serve`); `hey` is the client.

1. warm-up: 20 calls of each workload;
2. probe: `--probe-calls` sequential calls of `Counter/soak-probe/add`, p50 and p99;
3. soak: `--invocations` more, mixed: 40 % `Greeter/greet`, 30 % `Steps/one_step`, 30 %
   `Counter/k{i}/add` over 10 keys; several `hey` runs at once, `--concurrency` clients in all;
4. the same probe again, on the same key.

Reported: both p50s and their ratio (issue 14's target: after ≤ 1.2 times start), the soak's rate and
errors, the `torpor dev` process's resident memory and CPU time, and the SQLite file's size.
"""

from __future__ import annotations

import argparse
import json
import time
from concurrent.futures import ThreadPoolExecutor
from itertools import zip_longest

from bench.common import STORES, HeyRun, cpu_seconds, hey, load, memory_mb, store, summary, torpor_dev
from tests.helpers.services import serve_examples

PROBE = ("/Counter/soak-probe/add", "1")
CLIENTS_PER_RUN = 2
MIX = (  # (share of the soak, path, body, how many URLs the share is spread over)
    (0.4, "/Greeter/greet", '"soak"', 1),
    (0.3, "/Steps/one_step", "1", 1),
    (0.3, "/Counter/k{i}/add", "1", 10),
)


def jobs(invocations: int, parallel: int) -> list[tuple[str, str, int]]:
    """The soak as `hey` runs: (path, body, requests), about `invocations` requests in all.

    Every share is cut into at least `parallel` runs so the runs in flight mix the workloads; each
    run's count is a multiple of `CLIENTS_PER_RUN` (`hey` sends requests // clients per client).
    """
    by_share = []
    for share, path, body, urls in MIX:
        pieces, pairs = max(urls, parallel), round(invocations * share / CLIENTS_PER_RUN)
        runs = [(path.format(i=n % urls), body, CLIENTS_PER_RUN * (pairs // pieces + (n < pairs % pieces)))
                for n in range(pieces)]  # fmt: skip
        by_share.append([run for run in runs if run[2]])
    return [run for runs in zip_longest(*by_share) for run in runs if run is not None]  # workloads interleaved


def soak(ingress_url: str, invocations: int, concurrency: int) -> tuple[int, int, float]:
    """Push the mix with `concurrency` clients in all (`hey` runs of 2 clients each): (calls, errors, seconds)."""
    parallel = max(1, concurrency // CLIENTS_PER_RUN)
    work = jobs(invocations, parallel)
    started = time.monotonic()
    with ThreadPoolExecutor(parallel) as pool:
        results: list[HeyRun] = list(
            pool.map(lambda job: hey(ingress_url + job[0], job[1], requests=job[2], concurrency=CLIENTS_PER_RUN), work)
        )
    seconds = time.monotonic() - started
    return sum(len(r.latencies_ms) for r in results), sum(r.errors for r in results), seconds


def main(argv: list[str] | None = None) -> int:
    """Probe, soak, probe; print a table. Exit status 1 if a call failed."""
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--invocations", type=int, default=10_000, help="invocations between probes (10000)")
    parser.add_argument("--probe-calls", type=int, default=200, help="sequential Counter/add calls per probe (200)")
    parser.add_argument("--concurrency", type=int, default=8, help="clients during the soak (default 8)")
    parser.add_argument("--store", choices=STORES, default="sqlite", help="Torpor's store (default sqlite)")
    args = parser.parse_args(argv)
    print(f"before: {load()}", flush=True)
    with (
        serve_examples() as (services_url, _),
        store(args.store) as (dynamodb, _),
        torpor_dev(dynamodb) as dev,
    ):
        dev.register(services_url)
        for _, path, body, _ in MIX:
            hey(dev.ingress_url + path.format(i=0), body, requests=20)
        hey(dev.ingress_url + PROBE[0], PROBE[1], requests=20)
        pid = dev.process.pid
        data = next(iter(dev.data_dir.glob("*.sqlite3")), None) if dev.data_dir else None
        first = hey(dev.ingress_url + PROBE[0], PROBE[1], requests=args.probe_calls)
        print(f"probe at the start: p50 {summary(first.latencies_ms)['p50']:.1f} ms", flush=True)
        cpu_before = cpu_seconds(pid)
        calls, errors, seconds = soak(dev.ingress_url, args.invocations, args.concurrency)
        cpu = cpu_seconds(pid) - cpu_before
        print(f"soak: {calls} calls, {errors} errors in {seconds:.0f} s", flush=True)
        second = hey(dev.ingress_url + PROBE[0], PROBE[1], requests=args.probe_calls)
        rss, peak = memory_mb(pid)
        size_mb = sum(p.stat().st_size for p in data.parent.glob(data.name + "*")) / 1e6 if data else None
    print(f"after: {load()}")
    start, end = summary(first.latencies_ms), summary(second.latencies_ms)
    ratio = end["p50"] / start["p50"]
    print(f"\nstore {args.store}; probe: {args.probe_calls} sequential calls of Counter/soak-probe/add\n")
    print("| figure | value |\n| --- | --- |")
    print(f"| Counter/add p50 (p99) at the start | {start['p50']:.1f} ms ({start['p99']:.1f} ms) |")
    print(f"| Counter/add p50 (p99) after the soak | {end['p50']:.1f} ms ({end['p99']:.1f} ms) |")
    print(f"| after ÷ start, p50 (target ≤ 1.2) | {ratio:.2f} |")
    print(f"| soak: invocations (40 % greet, 30 % one_step, 30 % Counter/add on 10 keys), errors | {calls}, {errors} |")
    print(f"| soak: {args.concurrency} clients, time, rate | {seconds:.0f} s, {calls / seconds:.0f} calls/s |")
    print(f"| torpor dev: CPU time during the soak | {cpu:.0f} s ({cpu * 1000 / max(1, calls):.1f} ms per call) |")
    print(f"| torpor dev: resident memory at the end, peak | {rss:.0f} MB, {peak:.0f} MB |")
    if size_mb is not None:
        print(f"| SQLite file (with WAL) at the end | {size_mb:.1f} MB |")
    errors += first.errors + second.errors
    print("\n" + json.dumps({"start_p50": start["p50"], "end_p50": end["p50"], "ratio": ratio, "errors": errors}))
    return 1 if errors else 0


if __name__ == "__main__":
    raise SystemExit(main())
