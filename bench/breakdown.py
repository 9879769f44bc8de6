"""Where the time of an invocation goes in `torpor dev`: the store, the handler, Torpor's own code.

    python -m bench.breakdown [--calls 100] [--profile-calls 30] [--store sqlite|moto|dynalite] [--quick]

The control plane runs in this process with `torpor dev`'s wiring (`DevServer`), on its default
store, SQLite in a fresh data directory under `.cache/bench` (`--store moto` / `--store dynalite`:
DynamoDB on a moto server or dynalite in its own process), the example services another
(`python -m examples.serve`), and `hey` sends sequential calls from a fourth. Counters, no
profiler, give the figures per invocation:

- **store**: every DynamoDB request passes through the store's connection (`dispatch`), timed there
  (wall time, and this thread's CPU time: botocore's signing, serialising and parsing); the store
  process's own CPU is shown apart (in production that work is DynamoDB's). On SQLite every call of
  a `Store` port method is timed instead (the outermost one, if one calls another): SQLite's work
  is in this process, so it is all in "store client CPU";
- **handler**: every request to the deployment passes through `invoker.request`, timed the same
  way (wall: the handler's answer time as Torpor sees it; CPU: httpx on Torpor's side); the handler
  process's CPU is shown apart;
- **Torpor's own CPU**: this process's CPU time (all threads, /proc) minus the two CPU figures
  above: the ingress HTTP server, the engine, protocol framing, pynamodb's item mapping, logging;
  "per request" divides it by the handler requests (a `ctx.run` step is one request).

Then cProfile, on every thread the server starts (one profiler per thread, merged), runs another
`--profile-calls` calls of the 10-step workload and lists where Torpor's process spends its CPU,
by package; the profiler slows everything down, so only the shares mean something.
"""

from __future__ import annotations

import argparse
import cProfile
import logging
import os
import pstats
import shutil
import sys
import tempfile
import threading
import time
from collections import Counter
from collections.abc import Callable
from typing import Any

from adapters.local.dev import DevServer
from bench.common import CACHE, STORES, cpu_seconds, hey, load, store, summary
from control_plane.ports import InvocationStore, KeyStore, RegistryStore, ScheduleStore, Store, TimerStore
from control_plane.settings import Settings
from tests.helpers.moto import DUMMY_AWS_ENV, unique_table_name
from tests.helpers.services import serve_examples

WORKLOADS = {
    "one-step call (Steps/one_step)": ("/Steps/one_step", "1"),
    "state read+write (Counter/add)": ("/Counter/breakdown/add", "1"),
    "10 ctx.run steps (Steps/ten_steps)": ("/Steps/ten_steps", '"b"'),
}


class Meter:
    """Calls, wall seconds and CPU seconds (of the calling thread) per bucket; thread-safe."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.totals: Counter[str] = Counter()

    def wrap(self, bucket: str, fn: Callable[..., Any], nested: threading.local | None = None) -> Callable[..., Any]:
        """`fn`, counted into `bucket`; with `nested` (shared by the wrapped functions), only the outermost call."""

        def counted(*args: Any, **kwargs: Any) -> Any:
            if nested is not None and getattr(nested, "depth", 0):
                return fn(*args, **kwargs)
            if nested is not None:
                nested.depth = 1
            wall, cpu = time.perf_counter(), time.thread_time()
            try:
                return fn(*args, **kwargs)
            finally:
                wall, cpu = time.perf_counter() - wall, time.thread_time() - cpu
                if nested is not None:
                    nested.depth = 0
                with self._lock:
                    self.totals.update({f"{bucket} calls": 1, f"{bucket} wall": wall, f"{bucket} cpu": cpu})

        return counted

    def snapshot(self) -> Counter[str]:
        with self._lock:
            return Counter(self.totals)


def measure(dev: DevServer, meter: Meter, pids: dict[str, int], path: str, body: str, calls: int) -> dict[str, float]:
    """`calls` sequential calls of `path`; every figure per invocation (ms, or a count)."""
    hey(dev.ingress_url + path, body, requests=10)  # warm-up
    ops_before = Counter(dev.store.request_counts)
    before, cpu_before = meter.snapshot(), {name: cpu_seconds(pid) for name, pid in pids.items()}
    run = hey(dev.ingress_url + path, body, requests=calls)
    after, cpu_after = meter.snapshot(), {name: cpu_seconds(pid) for name, pid in pids.items()}
    ops = Counter(dev.store.request_counts)
    ops.subtract(ops_before)
    d = {k: (after[k] - before[k]) / calls for k in after}
    cpu = {name: (cpu_after[name] - cpu_before[name]) * 1000 / calls for name in pids}
    return {
        "wall p50": summary(run.latencies_ms)["p50"],
        "wall mean": sum(run.latencies_ms) / len(run.latencies_ms),
        "store requests": d["store calls"],
        "store wall": d["store wall"] * 1000,
        "store cpu": d["store cpu"] * 1000,
        "handler requests": d["handler calls"],
        "handler wall": d["handler wall"] * 1000,
        "handler cpu": d["handler cpu"] * 1000,
        "torpor cpu": cpu["torpor"] - (d["store cpu"] + d["handler cpu"]) * 1000,
        "torpor process cpu": cpu["torpor"],
        "store process cpu": cpu.get("store", 0.0),
        "handler process cpu": cpu["handler"],
        "errors": run.errors,
        **{f"op {op}": n / calls for op, n in sorted(ops.items()) if n},
    }


def stop(dev: DevServer) -> None:
    """Stop `dev` and remove its SQLite data directory, if it has one."""
    dev.stop()
    if dev.data_dir is not None:
        shutil.rmtree(dev.data_dir, ignore_errors=True)


def package(filename: str) -> str:
    """The package a profiled function belongs to, e.g. `control_plane`, `botocore`, `stdlib json`."""
    if filename.startswith(("~", "<")):
        return "(builtins, C code)"
    parts = filename.replace(os.sep, "/").split("/")
    if "site-packages" in parts:
        return parts[parts.index("site-packages") + 1].removesuffix(".py")
    for top in ("control_plane", "adapters", "examples", "bench"):
        if top in parts:
            return top
    stdlib = next((i for i, part in enumerate(parts) if part.startswith("python3.")), len(parts) - 2)
    return "stdlib " + parts[stdlib + 1].removesuffix(".py")


def profile(dev_factory: Callable[[], DevServer], services_url: str, calls: int) -> list[tuple[str, float]]:
    """CPU seconds by package over `calls` calls of the 10-step workload, with cProfile on every thread."""
    profiles: list[cProfile.Profile] = []

    def start_profiler(*_: object) -> None:  # the first profile event of each new thread
        sys.setprofile(None)
        profiler = cProfile.Profile(time.thread_time)  # CPU time: waiting on a socket costs nothing
        profiles.append(profiler)
        profiler.enable()

    threading.setprofile(start_profiler)
    try:
        dev = dev_factory()
        try:
            dev.control_plane.registry.register(services_url)
            hey(dev.ingress_url + "/Steps/ten_steps", '"b"', requests=calls)
        finally:
            stop(dev)
    finally:
        threading.setprofile(None)  # type: ignore[arg-type]
    by_package: Counter[str] = Counter()
    for profiler in profiles:
        profiler.disable()
        stats: Any = pstats.Stats(profiler).stats
        for (filename, _, _), (_, _, tottime, _, _) in stats.items():
            by_package[package(filename)] += tottime
    return by_package.most_common()


def main(argv: list[str] | None = None) -> int:
    """Measure, then print the tables."""
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--calls", type=int, default=100, help="sequential calls per workload (default 100)")
    parser.add_argument("--profile-calls", type=int, default=30, help="10-step calls under cProfile (default 30)")
    parser.add_argument("--store", choices=STORES, default="sqlite", help="Torpor's store (default sqlite)")
    parser.add_argument("--quick", action="store_true", help="20 calls per workload, 10 under the profiler")
    args = parser.parse_args(argv)
    if args.quick:
        args.calls, args.profile_calls = 20, 10
    logging.basicConfig(level=logging.WARNING)
    os.environ.update({k: v for k, v in DUMMY_AWS_ENV.items() if k not in os.environ})
    print(f"before: {load()}", flush=True)
    with serve_examples() as (services_url, services), store(args.store) as (dynamodb, store_pid):

        def dev_factory() -> DevServer:
            if dynamodb is None:
                CACHE.mkdir(parents=True, exist_ok=True)
                data_dir = tempfile.mkdtemp(prefix="breakdown-", dir=CACHE)
                return DevServer(ingress_port=0, admin_port=0, data_dir=data_dir, settings=Settings()).start()
            table = unique_table_name("bench")
            dev = DevServer(ingress_port=0, admin_port=0, dynamodb_endpoint=dynamodb, table=table, settings=Settings())
            return dev.start()

        dev = dev_factory()
        meter = Meter()
        try:
            if dynamodb is None:  # SQLite: every port method, the outermost call only
                nested = threading.local()
                families = (Store, InvocationStore, KeyStore, TimerStore, RegistryStore, ScheduleStore)
                port = sorted({n for family in families for n in vars(family) if not n.startswith("_")})
                for name in [n for n in port if callable(getattr(dev.store, n, None))]:
                    setattr(dev.store, name, meter.wrap("store", getattr(dev.store, name), nested))
            else:
                connection: Any = dev.store._connection.connection  # every DynamoDB request goes through dispatch
                connection.dispatch = meter.wrap("store", connection.dispatch)
            invoker: Any = dev.invoker  # every request to a deployment goes through request
            invoker.request = meter.wrap("handler", invoker.request)
            dev.control_plane.registry.register(services_url)
            pids = {"torpor": os.getpid(), "handler": services.pid}
            if store_pid is not None:
                pids["store"] = store_pid
            rows = {name: measure(dev, meter, pids, path, body, args.calls) for name, (path, body) in WORKLOADS.items()}
        finally:
            stop(dev)
        shares = profile(dev_factory, services_url, args.profile_calls)
    print(f"after: {load()}")
    print_tables(args.calls, rows, shares)
    return 0


def print_tables(calls: int, rows: dict[str, dict[str, float]], shares: list[tuple[str, float]]) -> None:
    """Markdown: per invocation, per handler request, and CPU by package under the profiler."""
    print(f"\n{calls} sequential calls per workload; per invocation, in ms. Wall p50/mean: as the caller sees it;")
    print("store and handler wall: summed over the threads that did the work (a call may go on after its answer)\n")
    header = ["wall p50", "wall mean", "store requests", "store wall", "handler requests", "handler wall"]
    header += ["store client CPU", "Torpor's own CPU", "per handler request", "store process CPU", "handler CPU"]
    print("| workload | " + " | ".join(header) + " |")
    print("| --- " * 12 + "|")
    for name, r in rows.items():
        columns = [r["wall p50"], r["wall mean"], r["store requests"], r["store wall"], r["handler requests"]]
        columns += [r["handler wall"], r["store cpu"], r["torpor cpu"], r["torpor cpu"] / r["handler requests"]]
        columns += [r["store process cpu"], r["handler process cpu"]]
        print(f"| {name} | " + " | ".join(f"{x:.1f}" for x in columns) + " |")
    ops = sorted({k for r in rows.values() for k in r if k.startswith("op ")})
    print("\nStore requests per invocation, by operation (DynamoDB: ` META` is on the invocation record)\n")
    print("| operation | " + " | ".join(rows) + " |\n" + "| --- " * (len(rows) + 1) + "|")
    for op in ops:
        print(f"| {op[3:]} | " + " | ".join(f"{r.get(op, 0):.2f}" for r in rows.values()) + " |")
    total = sum(seconds for _, seconds in shares) or 1.0
    print("\nTorpor's process under cProfile, Steps/ten_steps: CPU by package\n\n| package | share |\n| --- | --- |")
    for name, seconds in shares[:15]:
        print(f"| {name} | {seconds / total:.0%} |")


if __name__ == "__main__":
    raise SystemExit(main())
