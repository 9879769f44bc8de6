"""What the benchmarks share: `hey` as the load generator, `torpor dev` as a process, /proc readings.

Linux only (process figures come from /proc). `hey` is the Debian package `hey`
(`apt-get install -y hey`); it runs in its own process, so the client never competes for the GIL of
what it measures.
"""

from __future__ import annotations

import csv
import io
import os
import shutil
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx

from bench.latency import percentile
from tests.helpers.moto import DUMMY_AWS_ENV
from tests.helpers.services import REPO_ROOT, free_port, stop_process

CACHE = REPO_ROOT / ".cache" / "bench"
"""Scratch folder of the benchmarks (git-ignored): restate-server's install and data."""


def load() -> str:
    """The machine's load averages (1, 5, 15 min) and core count, for the record."""
    one, five, fifteen = os.getloadavg()
    return f"load average {one:.2f} {five:.2f} {fifteen:.2f} on {os.cpu_count()} cores"


def summary(samples: list[float]) -> dict[str, float]:
    """p50, p99 and count of latency samples (ms)."""
    return {"p50": percentile(samples, 0.50), "p99": percentile(samples, 0.99), "n": len(samples)}


# --- hey ------------------------------------------------------------------------------------------


@dataclass
class HeyRun:
    """One run of `hey`: per-request latencies (ms) of the 2xx answers, errors, and wall time (s)."""

    latencies_ms: list[float]
    errors: int
    seconds: float

    @property
    def rate(self) -> float:
        """Successful requests per second."""
        return len(self.latencies_ms) / self.seconds if self.seconds else 0.0


def hey(url: str, body: str, *, requests: int = 0, concurrency: int = 1, duration_s: float = 0) -> HeyRun:
    """POST `body` (JSON) to `url` with `hey`: `requests` in all, or for `duration_s` seconds.

    Raises:
        SystemExit: `hey` is not installed.
    """
    binary = shutil.which("hey")
    if binary is None:
        raise SystemExit("hey is not installed: apt-get update && apt-get install -y hey")
    command = [binary, "-c", str(concurrency), "-m", "POST", "-T", "application/json", "-d", body, "-o", "csv"]
    command += ["-z", f"{duration_s}s"] if duration_s else ["-n", str(requests)]
    started = time.monotonic()
    output = subprocess.run([*command, url], capture_output=True, text=True, check=True, timeout=600).stdout
    seconds = time.monotonic() - started
    latencies, errors, end = [], 0, 0.0
    for row in csv.DictReader(io.StringIO(output)):
        latency = float(row["response-time"])
        end = max(end, float(row["offset"]) + latency)
        if row["status-code"].startswith("2"):
            latencies.append(latency * 1000)
        else:
            errors += 1
    errors += max(0, requests - len(latencies) - errors)  # hey leaves out requests that got no answer
    return HeyRun(latencies, errors, end or seconds)


# --- processes ------------------------------------------------------------------------------------


def cpu_seconds(pid: int) -> float:
    """User + system CPU time a process has used so far (all its threads), from /proc."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def children(pid: int) -> list[int]:
    """The live child processes of `pid`, from /proc."""
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
            except OSError:  # it ended meanwhile
                continue
            if int(fields[1]) == pid:
                found.append(int(entry.name))
    return found


def tree_cpu_seconds(pid: int) -> float:
    """CPU time of `pid` and of its live children (`torpor dev --workers N`: the parent and its
    workers), from /proc; a child that ends is counted no more."""
    total = cpu_seconds(pid)
    for child in children(pid):
        try:
            total += cpu_seconds(child)
        except OSError:
            continue
    return total


def memory_mb(pid: int) -> tuple[float, float]:
    """(current, peak) resident set size of a process in MB (VmRSS, VmHWM from /proc)."""
    values = {}
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        name, _, rest = line.partition(":")
        if name in ("VmRSS", "VmHWM"):
            values[name] = int(rest.split()[0]) / 1024
    return values["VmRSS"], values["VmHWM"]


def pss_mb(pid: int) -> float:
    """Proportional set size of a process in MB (`Pss` of /proc/PID/smaps_rollup): its resident set
    with each page shared by n processes counted 1/n, so the figures of a parent and the workers
    it forked add up to what they take together (their resident sets would count shared pages
    once per process)."""
    for line in Path(f"/proc/{pid}/smaps_rollup").read_text().splitlines():
        name, _, rest = line.partition(":")
        if name == "Pss":
            return int(rest.split()[0]) / 1024
    raise RuntimeError(f"no Pss in /proc/{pid}/smaps_rollup")


def wait_http(url: str, deadline_s: float = 30.0, process: subprocess.Popen[bytes] | None = None) -> None:
    """Wait until `url` answers HTTP (any status). Raises RuntimeError at the deadline or if `process` exits."""
    deadline = time.monotonic() + deadline_s
    while True:
        if process is not None and process.poll() is not None:
            raise RuntimeError(f"{process.args!r} exited with status {process.returncode}")
        try:
            httpx.get(url, timeout=1)
            return
        except httpx.TransportError:
            if time.monotonic() > deadline:
                raise RuntimeError(f"{url} did not answer within {deadline_s:.0f} s") from None
            time.sleep(0.05)


@contextmanager
def moto() -> Iterator[tuple[str, int]]:
    """A moto server in its own process on a free loopback port: (endpoint URL, pid)."""
    port = free_port()
    command = [sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(port)]
    process = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    url = f"http://127.0.0.1:{port}"
    try:
        wait_http(f"{url}/moto-api/", 30, process)
        yield url, process.pid
    finally:
        stop_process(process)  # type: ignore[arg-type]


DYNALITE_VERSION = "4.0.0"
DYNALITE_DIR = CACHE / "dynalite"


@contextmanager
def dynalite() -> Iterator[tuple[str, int]]:
    """dynalite (npm, in memory) on a free loopback port: (endpoint URL, pid); installed on first use.

    A DynamoDB implementation whose queries read one partition (moto 5's Query scans the whole
    table, so it slows down as the table grows): the store for runs that fill a table.
    """
    script = DYNALITE_DIR / "node_modules/dynalite/cli.js"
    if not script.exists():
        npm = shutil.which("npm")
        if npm is None:
            raise SystemExit("npm is needed to install dynalite (apt-get install -y npm)")
        subprocess.run(
            [npm, "install", "--prefix", str(DYNALITE_DIR), "--no-save", "--no-audit", "--no-fund", "--ignore-scripts",
             f"dynalite@{DYNALITE_VERSION}"],
            check=True, stdout=subprocess.DEVNULL,
        )  # fmt: skip
    port = free_port()
    command = ["node", str(script), "--host", "127.0.0.1", "--port", str(port), "--createTableMs", "0"]
    process = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    url = f"http://127.0.0.1:{port}"
    try:
        wait_http(url, 30, process)
        yield url, process.pid
    finally:
        stop_process(process)  # type: ignore[arg-type]


@contextmanager
def sqlite() -> Iterator[tuple[None, None]]:
    """No store process: `torpor dev` on its default store, SQLite inside its own process: (None, None)."""
    yield None, None


STORES = ("sqlite", "moto", "dynalite")
"""The stores a benchmark can run `torpor dev` on (`store(name)`)."""


def store(name: str) -> Any:
    """Torpor's store for `torpor_dev`: `sqlite()`, `moto()` or `dynalite()`, each (endpoint URL, pid).

    For "sqlite" both are None: the store is a file `torpor dev` opens itself, its CPU is that process's.
    """
    return {"sqlite": sqlite, "moto": moto, "dynalite": dynalite}[name]()


@dataclass
class TorporDev:
    """A running `torpor dev` process: its URLs, process and (SQLite) data directory."""

    ingress_url: str
    admin_url: str
    process: subprocess.Popen[bytes]
    data_dir: Path | None = None
    """The SQLite store's data directory, None when the store is DynamoDB."""

    def register(self, services_url: str) -> None:
        """Register the deployment at `services_url` through the admin API."""
        httpx.post(f"{self.admin_url}/deployments", json={"uri": services_url}, timeout=30).raise_for_status()


@contextmanager
def torpor_dev(dynamodb_endpoint: str | None, *, concurrency: int = 32, processes: int = 1) -> Iterator[TorporDev]:
    """`torpor dev` in its own process on free loopback ports: `--concurrency concurrency` (invocations
    each process advances at once), `--workers processes` (orchestrator processes: above 1, children
    of the one started here; `tree_cpu_seconds` counts their CPU).

    With `dynamodb_endpoint` None, on its default store (SQLite) in a fresh data directory under
    `.cache/bench`, removed when it stops; else its table is on that DynamoDB (a moto server or
    dynalite in another process: `moto()`, `dynalite()`, as DynamoDB is another machine in
    production). Logs go to `.cache/bench/torpor-dev.log`.
    """
    ingress, admin = free_port(), free_port()
    CACHE.mkdir(parents=True, exist_ok=True)
    command = [sys.executable, "-m", "adapters.cli", "dev", "--ingress-port", str(ingress), "--admin-port", str(admin)]
    data_dir = None
    if dynamodb_endpoint is None:
        data_dir = Path(tempfile.mkdtemp(prefix="torpor-dev-", dir=CACHE))
        command += ["--data-dir", str(data_dir)]
    else:
        command += ["--dynamodb-endpoint", dynamodb_endpoint, "--table", f"bench-{uuid.uuid4().hex[:8]}"]
    command += ["--concurrency", str(concurrency), "--workers", str(processes)]
    env = {**os.environ, **DUMMY_AWS_ENV, "PYTHONPATH": str(REPO_ROOT)}
    with open(CACHE / "torpor-dev.log", "ab") as log:
        process = subprocess.Popen(command, cwd=REPO_ROOT, env=env, stdout=log, stderr=log)  # type: ignore[arg-type]
    dev = TorporDev(f"http://127.0.0.1:{ingress}", f"http://127.0.0.1:{admin}", process, data_dir)
    try:
        wait_http(dev.admin_url + "/health", 60, process)
        yield dev
    finally:
        stop_process(process)  # type: ignore[arg-type]
        if data_dir is not None:
            shutil.rmtree(data_dir, ignore_errors=True)
