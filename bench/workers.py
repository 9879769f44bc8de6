"""Throughput of `torpor dev --workers 1` beside `--workers 2` (orchestrator processes over one store).

    python -m bench.workers [--load-s 15] [--rounds 2] [--clients 32] [--store sqlite|dynalite] [--quick]

Two `torpor dev` run at once on free loopback ports, one with `--workers 1` and one with
`--workers 2`, each on its own store (SQLite in a fresh data directory under `.cache/bench`;
`--store dynalite`: a table each on one dynalite in another process), both on one process of the
example services (`python -m examples.serve`). For each workload, `Steps/one_step` (one journaled
`ctx.run`) and `Greeter/greet` (nothing journaled), `hey` drives `--clients` concurrent clients for
`--load-s` seconds, the two alternating round by round so that other load on the machine falls on
both alike. Figures: successful calls per second, p50 and p99 latency, CPU per call of Torpor (the
`torpor dev` process and its workers, from /proc; plus dynalite's with `--store dynalite`) and of
the example services, how Torpor's CPU splits over its worker processes, and errors. The load
average is printed before and after: on a small machine the services and `hey` take CPU too, so
two workers cannot double the rate.
"""

from __future__ import annotations

import argparse
import json
from contextlib import ExitStack

from bench.common import HeyRun, children, cpu_seconds, hey, load, store, summary, torpor_dev, tree_cpu_seconds
from tests.helpers.services import serve_examples

WORKLOADS = {
    "Steps/one_step": ("/Steps/one_step", "1"),
    "Greeter/greet": ("/Greeter/greet", '"bench"'),
}
PROCESSES = (1, 2)


def main(argv: list[str] | None = None) -> int:
    """Run both `torpor dev` alternately under load and print a table of the figures."""
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--load-s", type=float, default=15, help="seconds of each load run (default 15)")
    parser.add_argument("--rounds", type=int, default=2, help="load runs per workload and worker count (default 2)")
    parser.add_argument("--clients", type=int, default=32, help="concurrent clients (default 32)")
    parser.add_argument("--store", choices=("sqlite", "dynalite"), default="sqlite", help="store (default sqlite)")
    parser.add_argument("--quick", action="store_true", help="1 round of 5 s")
    args = parser.parse_args(argv)
    if args.quick:
        args.load_s, args.rounds = 5, 1
    print(f"before: {load()}", flush=True)
    runs: dict[tuple[str, int], list[HeyRun]] = {}
    cpu_ms: dict[tuple[str, int], float] = {}
    services_ms: dict[tuple[str, int], float] = {}
    split: dict[tuple[str, int, int], float] = {}  # CPU s of each worker process
    with ExitStack() as stack:
        services_url, services = stack.enter_context(serve_examples())
        dynamodb, store_pid = stack.enter_context(store(args.store))
        devs = {n: stack.enter_context(torpor_dev(dynamodb, processes=n)) for n in PROCESSES}
        for dev in devs.values():
            dev.register(services_url)
            for path, body in WORKLOADS.values():  # warm-up: connections, caches, lazy imports
                hey(dev.ingress_url + path, body, requests=200, concurrency=args.clients)

        def torpor_cpu(n: int) -> float:
            own = tree_cpu_seconds(devs[n].process.pid)
            return own + (cpu_seconds(store_pid) if store_pid is not None else 0.0)

        def worker_cpu(n: int) -> dict[int, float]:
            pids = children(devs[n].process.pid) or [devs[n].process.pid]
            return {pid: cpu_seconds(pid) for pid in pids}

        for _ in range(args.rounds):
            for name, (path, body) in WORKLOADS.items():
                for n, dev in devs.items():
                    before, services_before = torpor_cpu(n), cpu_seconds(services.pid)
                    workers_before = worker_cpu(n)
                    run = hey(dev.ingress_url + path, body, concurrency=args.clients, duration_s=args.load_s)
                    spent = {pid: cpu - workers_before.get(pid, 0.0) for pid, cpu in worker_cpu(n).items()}
                    for index, pid in enumerate(sorted(spent)):
                        split[name, n, index] = split.get((name, n, index), 0.0) + spent[pid]
                    runs.setdefault((name, n), []).append(run)
                    cpu_ms[name, n] = cpu_ms.get((name, n), 0.0) + (torpor_cpu(n) - before) * 1000
                    services_ms[name, n] = (
                        services_ms.get((name, n), 0.0) + (cpu_seconds(services.pid) - services_before) * 1000
                    )
                    print(f"  {name}, --workers {n}: {run.rate:.0f} calls/s, {run.errors} errors", flush=True)
    print(f"after: {load()}")
    print_table(args, runs, cpu_ms, services_ms, split)
    return 0


def print_table(
    args: argparse.Namespace,
    runs: dict[tuple[str, int], list[HeyRun]],
    cpu_ms: dict[tuple[str, int], float],
    services_ms: dict[tuple[str, int], float],
    split: dict[tuple[str, int, int], float],
) -> None:
    """A markdown table, one row per (workload, worker count), and a JSON line of the rates."""
    store_note = " (with dynalite's)" if args.store == "dynalite" else ""
    print(f"\n{args.clients} concurrent clients, {args.rounds} run(s) of {args.load_s:.0f} s each; store {args.store}")
    print(
        f"\n| workload | --workers | calls/s | p50 | p99 | Torpor CPU per call{store_note} | services CPU per call "
        "| CPU per worker | errors |\n| --- | --- | --- | --- | --- | --- | --- | --- | --- |"
    )
    rates: dict[str, float] = {}
    for (name, n), done in runs.items():
        calls = sum(len(run.latencies_ms) for run in done)
        rate = calls / sum(run.seconds for run in done)
        latency = summary([x for run in done for x in run.latencies_ms])
        rates[f"{name} x{n}"] = round(rate, 1)
        shares = [split.get((name, n, index), 0.0) for index in range(n)]
        shares_text = " / ".join(f"{100 * share / max(1e-9, sum(shares)):.0f} %" for share in shares)
        print(
            f"| {name} | {n} | {rate:.0f} | {latency['p50']:.0f} ms | {latency['p99']:.0f} ms "
            f"| {cpu_ms[name, n] / max(1, calls):.1f} ms | {services_ms[name, n] / max(1, calls):.1f} ms "
            f"| {shares_text} | {sum(run.errors for run in done)} |"
        )
    print("\n" + json.dumps({"rate": rates}))


if __name__ == "__main__":
    raise SystemExit(main())
