"""Torpor beside Restate: the same example app driven through `torpor dev` and through `restate-server`.

    python -m bench.side_by_side [--rounds 5] [--calls 40] [--sleeps 10] [--load-s 15] [--load-rounds 2]
                                 [--store sqlite|moto|dynalite] [--quick] [--http2] [--workers N]

One process of the example services (`python -m examples.serve`: hypercorn, HTTP/1.1,
request/response) serves both systems. `torpor dev` runs in its own process on its default store,
SQLite, in a fresh data directory under `.cache/bench` (`--store moto` or `--store dynalite`: on a
moto server or dynalite as DynamoDB, in another process); `restate-server` 1.7.12 is installed from npm into
`.cache/bench/restate` on first use, started on loopback with its data in a fresh folder there, and
the deployment is registered through its admin API with `"use_http_11": true`. All ports are free
ones picked at start, so nothing clashes with another `torpor dev` or Restate on the machine.

`--http2`: the services also speak HTTP/2 (h2c, `examples.serve --http2`) and both systems register
them over it (restate-server without `use_http_11`): both run in bidirectional mode, so ten steps are
one streamed request on each. The ten-step p50 ratio is printed on its own line at the end.

`--workers N`: `torpor dev --workers N`, N orchestrator processes over the one SQLite store
(restate-server uses every core by default); CPU per call counts the parent and all its workers,
and the memory figure is their proportional set sizes added (a page they share counted once).

Each workload alternates the two systems round by round (torpor, restate, torpor, restate, ...);
the client is `hey` (its own process):

- one-step call: `Steps/one_step`, sequential calls;
- object state read + write: `Counter/{key}/add` (its handler also pauses 10 ms), sequential;
- ten `ctx.run` steps: `Steps/ten_steps`, sequential;
- sleep lateness: `Waits/sleep` 1000 ms, `--sleeps` calls at once; lateness = answer time - 1 s;
- throughput, each of `LOADS` (a call without steps, `Greeter/greet`, and one step,
  `Steps/one_step`): 32 concurrent clients for `--load-s` seconds; CPU per call is the CPU time of
  the orchestrator's processes (torpor dev, plus the moto or dynalite process if it is one;
  restate-server) over the calls; the resident set is torpor dev's at the end of its runs.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import subprocess
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass

import httpx

from bench.common import (
    CACHE,
    STORES,
    HeyRun,
    children,
    free_port,
    hey,
    load,
    memory_mb,
    pss_mb,
    store,
    summary,
    torpor_dev,
    tree_cpu_seconds,
    wait_http,
)
from tests.helpers.services import serve_examples, stop_process

RESTATE_VERSION = "1.7.12"
RESTATE_DIR = CACHE / "restate"
_ARCH = {"x86_64": "x64", "aarch64": "arm64"}.get(platform.machine(), platform.machine())
RESTATE_BINARY = RESTATE_DIR / f"node_modules/@restatedev/restate-server-linux-{_ARCH}/bin/restate-server"


def install_restate() -> str:
    """restate-server's binary, installed with npm into `.cache/bench/restate` unless it is there."""
    if not RESTATE_BINARY.exists():
        RESTATE_DIR.mkdir(parents=True, exist_ok=True)
        npm = shutil.which("npm")
        if npm is None:
            raise SystemExit("npm is needed to install restate-server (apt-get install -y npm)")
        subprocess.run(
            [npm, "install", "--prefix", str(RESTATE_DIR), "--no-save", "--no-audit", "--no-fund", "--ignore-scripts",
             f"@restatedev/restate-server@{RESTATE_VERSION}"],
            check=True, stdout=subprocess.DEVNULL,
        )  # fmt: skip
    version = subprocess.run([RESTATE_BINARY, "--version"], capture_output=True, text=True, check=True).stdout
    if RESTATE_VERSION not in version:
        raise SystemExit(f"{RESTATE_BINARY} is {version.strip()}, not {RESTATE_VERSION}: remove {RESTATE_DIR}")
    return str(RESTATE_BINARY)


@dataclass
class Restate:
    """A running restate-server: its ingress and admin URLs and process."""

    ingress_url: str
    admin_url: str
    process: subprocess.Popen[bytes]

    def register(self, services_url: str, http2: bool = False) -> None:
        """Register the deployment (HTTP/1.1, request/response; `http2`: over HTTP/2, bidirectional)
        and wait until the ingress routes to it."""
        body = {"uri": services_url, "use_http_11": not http2}
        httpx.post(f"{self.admin_url}/deployments", json=body, timeout=30).raise_for_status()
        for _ in range(200):
            if httpx.post(f"{self.ingress_url}/Greeter/greet", json="x", timeout=30).status_code == 200:
                return
            time.sleep(0.05)
        raise RuntimeError("restate-server's ingress did not route to the registered deployment")


@contextmanager
def restate_server() -> Iterator[Restate]:
    """restate-server on free loopback ports, its base dir a fresh folder under `.cache/bench/restate`."""
    binary = install_restate()
    ingress, admin, node = free_port(), free_port(), free_port()
    base_dir = RESTATE_DIR / f"data-{uuid.uuid4().hex[:8]}"
    env = {
        **os.environ,
        "RESTATE_INGRESS__BIND_ADDRESS": f"127.0.0.1:{ingress}",
        "RESTATE_ADMIN__BIND_ADDRESS": f"127.0.0.1:{admin}",
        "RESTATE_BIND_ADDRESS": f"127.0.0.1:{node}",
        "RESTATE_ADVERTISED_ADDRESS": f"http://127.0.0.1:{node}/",
        "RESTATE_DISABLE_TELEMETRY": "true",
    }
    with open(RESTATE_DIR / "restate.log", "ab") as log:
        process = subprocess.Popen(
            [binary, "--no-logo", "--listen-mode", "tcp", "--base-dir", str(base_dir)], env=env, stdout=log, stderr=log
        )
    server = Restate(f"http://127.0.0.1:{ingress}", f"http://127.0.0.1:{admin}", process)
    try:
        wait_http(server.admin_url + "/health", 60, process)
        yield server
    finally:
        stop_process(process)  # type: ignore[arg-type]
        shutil.rmtree(base_dir, ignore_errors=True)


WORKLOADS = {
    "one-step call (Steps/one_step)": ("/Steps/one_step", "1"),
    "state read+write (Counter/add)": ("/Counter/{system}/add", "1"),
    "10 ctx.run steps (Steps/ten_steps)": ("/Steps/ten_steps", '"b"'),
}

LOADS = {
    "no steps (Greeter/greet)": ("/Greeter/greet", '"bench"'),
    "one step (Steps/one_step)": ("/Steps/one_step", "1"),
}
"""The throughput workloads: (path, body), each run by 32 clients for `--load-s` seconds."""


def main(argv: list[str] | None = None) -> int:
    """Run both systems alternately and print a table per figure."""
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=5, help="rounds of each latency workload (default 5)")
    parser.add_argument("--calls", type=int, default=40, help="sequential calls per round (default 40)")
    parser.add_argument("--sleeps", type=int, default=10, help="concurrent 1 s sleeps per round (default 10)")
    parser.add_argument("--load-s", type=float, default=15, help="seconds of each throughput run (default 15)")
    parser.add_argument("--load-rounds", type=int, default=2, help="throughput runs per system (default 2)")
    parser.add_argument("--store", choices=STORES, default="sqlite", help="Torpor's store (default sqlite)")
    parser.add_argument("--quick", action="store_true", help="2 rounds of 10 calls, 1 throughput run of 5 s")
    parser.add_argument("--http2", action="store_true", help="serve and register over HTTP/2: bidirectional mode")
    parser.add_argument("--workers", type=int, default=1, help="torpor dev's orchestrator processes (default 1)")
    args = parser.parse_args(argv)
    if args.workers < 1:
        parser.error("--workers must be 1 or more")
    if args.quick:
        args.rounds, args.calls, args.sleeps, args.load_s, args.load_rounds = 2, 10, 5, 5, 1
    print(f"before: {load()}", flush=True)
    with (
        serve_examples(http2=args.http2) as (services_url, _),
        store(args.store) as (dynamodb, store_pid),
        torpor_dev(dynamodb, processes=args.workers) as dev,
        restate_server() as restate,
    ):
        dev.register(services_url)
        restate.register(services_url, http2=args.http2)
        systems = {
            "torpor": (dev.ingress_url, [pid for pid in (dev.process.pid, store_pid) if pid is not None]),
            "restate": (restate.ingress_url, [restate.process.pid]),
        }
        samples, runs, cpu_ms = measure(args, systems)
    print(f"after: {load()}")
    print_tables(args, samples, runs, cpu_ms)
    return 0


def measure(args: argparse.Namespace, systems: dict[str, tuple[str, list[int]]]) -> tuple[dict, dict, dict]:
    """Every workload, the systems alternating round by round: (latency samples, throughput runs, CPU ms).

    `systems` maps a name to (ingress URL, pids of the orchestrator's processes); throughput runs and
    CPU ms are keyed by (load name, system), and `cpu_ms["rss_mb", "torpor"]` is torpor dev's resident
    set after the load runs (MB).
    """
    samples: dict[tuple[str, str], list[float]] = {}
    runs: dict[tuple[str, str], list[HeyRun]] = {}
    cpu_ms: dict[tuple[str, str], float] = {}
    for system, (url, _) in systems.items():  # warm-up: connections, caches, lazy imports
        for path, body in [*WORKLOADS.values(), *LOADS.values()]:
            hey(url + path.format(system=system), body, requests=10)
    for _ in range(args.rounds):
        for name, (path, body) in WORKLOADS.items():
            for system, (url, _) in systems.items():
                run = hey(url + path.format(system=system), body, requests=args.calls)
                samples.setdefault((name, system), []).extend(run.latencies_ms)
        for system, (url, _) in systems.items():
            run = hey(url + "/Waits/sleep", "1000", requests=args.sleeps, concurrency=args.sleeps)
            samples.setdefault(("1 s sleep: lateness", system), []).extend(x - 1000 for x in run.latencies_ms)
    for _ in range(args.load_rounds):
        for load_name, (path, body) in LOADS.items():
            for system, (url, pids) in systems.items():
                before = sum(tree_cpu_seconds(pid) for pid in pids)
                runs.setdefault((load_name, system), []).append(
                    hey(url + path, body, concurrency=32, duration_s=args.load_s)
                )
                spent = (sum(tree_cpu_seconds(pid) for pid in pids) - before) * 1000
                cpu_ms[load_name, system] = cpu_ms.get((load_name, system), 0.0) + spent
    dev_pid = systems["torpor"][1][0]
    workers = children(dev_pid)
    cpu_ms["rss_mb", "torpor"] = sum(pss_mb(pid) for pid in [dev_pid, *workers]) if workers else memory_mb(dev_pid)[0]
    return samples, runs, cpu_ms


def print_tables(
    args: argparse.Namespace, samples: dict, runs: dict[tuple[str, str], list[HeyRun]], cpu_ms: dict
) -> None:
    """Markdown tables: latencies and throughput, torpor beside restate, with torpor ÷ restate."""
    print(
        f"\n{args.rounds} rounds of {args.calls} sequential calls each ({args.sleeps} concurrent sleeps), alternating"
    )
    mode = "bidirectional (HTTP/2)" if args.http2 else "request/response"
    print(f"\nTorpor's store: {args.store}; protocol mode: {mode}; torpor dev --workers {args.workers}")
    print("\n| workload | torpor p50 | restate p50 | torpor ÷ restate | torpor p99 | restate p99 | torpor ÷ restate |")
    print("| --- | --- | --- | --- | --- | --- | --- |")
    names = list(dict.fromkeys(name for name, _ in samples))
    for name in names:
        t, r = summary(samples[name, "torpor"]), summary(samples[name, "restate"])
        print(
            f"| {name} | {t['p50']:.1f} ms | {r['p50']:.1f} ms | {t['p50'] / r['p50']:.1f} "
            f"| {t['p99']:.1f} ms | {r['p99']:.1f} ms | {t['p99'] / r['p99']:.1f} |"
        )
    figures: dict[str, dict[str, float]] = {}
    for load_name in LOADS:
        by_system = {system: rs for (name, system), rs in runs.items() if name == load_name}
        rate = {s: sum(len(r.latencies_ms) for r in rs) / sum(r.seconds for r in rs) for s, rs in by_system.items()}
        errors = {s: sum(r.errors for r in rs) for s, rs in by_system.items()}
        calls = {s: sum(len(r.latencies_ms) for r in rs) for s, rs in by_system.items()}
        p50 = {s: summary([x for r in rs for x in r.latencies_ms])["p50"] for s, rs in by_system.items()}
        cpu = {s: cpu_ms[load_name, s] / max(1, calls[s]) for s in by_system}
        print(f"\nthroughput, {load_name}, 32 concurrent clients, {args.load_rounds} runs of {args.load_s:.0f} s")
        print("\n| figure | torpor | restate | torpor ÷ restate |\n| --- | --- | --- | --- |")
        for label, values, unit, digits in (
            ("calls per second", rate, "", 0),
            ("p50 latency under load", p50, " ms", 0),
            ("orchestrator CPU per call", cpu, " ms", 2),
        ):
            t, r = values["torpor"], values["restate"]
            print(f"| {label} | {t:.{digits}f}{unit} | {r:.{digits}f}{unit} | {t / r:.2f} |")
        print(f"| errors | {errors['torpor']} | {errors['restate']} | |")
        figures[load_name] = {"rate_torpor": rate["torpor"], "rate_restate": rate["restate"],
                              "cpu_ms_torpor": cpu["torpor"], "cpu_ms_restate": cpu["restate"],
                              "errors": errors["torpor"] + errors["restate"]}  # fmt: skip
    what = "resident set" if args.workers == 1 else "proportional set (Pss) of the parent and its workers"
    print(f"\ntorpor dev's {what} after the load runs: {cpu_ms['rss_mb', 'torpor']:.0f} MB")
    print("\n" + json.dumps(figures))
    steps = "10 ctx.run steps (Steps/ten_steps)"
    t, r = summary(samples[steps, "torpor"])["p50"], summary(samples[steps, "restate"])["p50"]
    mode = "over HTTP/2, bidirectional" if args.http2 else "request/response"
    print(f"\nten steps {mode}: p50 torpor {t:.1f} ms, restate {r:.1f} ms, torpor ÷ restate {t / r:.2f}")


if __name__ == "__main__":
    raise SystemExit(main())
