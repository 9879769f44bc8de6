"""`torpor dev --workers 2` (issue 24): two orchestrator processes on the same ports over one store,
SQLite in a data directory and DynamoDB (dynalite over the wire), under a load from concurrent clients.

The load mixes exclusive `Counter/{key}/add` calls on a few contended keys (every delta 1, so the
answers on a key must be exactly 1..n, each once), some sent twice at once with one idempotency key
(both answers the same, applied once), one-shot `Greeter/greet` and `Steps/one_step` calls. Checks:
every answer right, each counter exact, no handler run twice (the example services record one side
effect per `Counter/add` run and per executed `ctx.run` of `one_step`, with the invocation id), and
both processes served (`/health` names the pid that answered: both children of `torpor dev`).
Both processes sweep every 200 ms meanwhile (`tests.helpers.sweeping_dev`), each re-arming every
unfinished invocation, the other's included.
Then one worker is SIGKILLed: it is started again and the load goes on, counters still exact.
Sleeps whose timers were armed in two workers that both die fire in the workers started again.
A last test checks the refusals of `--workers` above 1 with a store one process owns.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import uuid
from collections import Counter
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.helpers.dev import torpor_dev_process, wait_for
from tests.helpers.dynalite import dynalite_server
from tests.helpers.moto import unique_table_name
from tests.helpers.services import REPO_ROOT
from tests.helpers.sweeping_dev import SWEEP_ENV

KEYS = 4
ADDS_PER_KEY = 30
TWINS = 8  # adds sent twice at once with one idempotency key
GREETS = 40
STEPS = 40
CLIENTS = 12
SLEEP_MS = 3_000
LEASE_ARGS = ("--inactivity-timeout", "30s", "--lease-margin", "10s")  # no takeover of a slow attempt under load


@pytest.fixture(scope="module")
def dynalite_url() -> Iterator[str]:
    # the tests SIGKILL workers, possibly mid-request: plain dynalite exits when a client dies so
    with dynalite_server(survive_aborts=True) as url:
        yield url


@pytest.fixture(params=["sqlite", "dynalite"])
def store_args(request: pytest.FixtureRequest, tmp_path: Path) -> tuple[str, ...]:
    """`torpor dev` arguments naming a fresh store: a SQLite data directory, or a dynalite table."""
    if request.param == "sqlite":
        return ("--data-dir", str(tmp_path / "data"))
    endpoint = request.getfixturevalue("dynalite_url")
    return ("--dynamodb-endpoint", endpoint, "--table", unique_table_name())


def _children(parent: int) -> set[int]:
    """The pids whose parent is `parent` (from /proc)."""
    found = set()
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                stat = (entry / "stat").read_text()
            except OSError:
                continue
            if int(stat.rsplit(")", 1)[1].split()[1]) == parent:
                found.add(int(entry.name))
    return found


def _two_workers(parent: int, *killed: int) -> set[int] | None:
    """The two worker pids of `parent` (none of them `killed`), or None while there are not two."""
    found = _children(parent) - set(killed)
    return found if len(found) == 2 else None


def _health_pids(admin: str, tries: int = 60) -> set[int]:
    """The pids named by `/health` over `tries` fresh connections."""
    return {httpx.get(f"{admin}/health", timeout=10).json()["pid"] for _ in range(tries)}


def _side_effects(effects_file: Path, invocation_ids: set[str]) -> Counter[tuple[str, str]]:
    """How many times each (invocation id, step) of `invocation_ids` ran, from the side-effects file."""
    counts: Counter[tuple[str, str]] = Counter()
    if effects_file.exists():
        for line in effects_file.read_text().splitlines():
            record = json.loads(line)
            if record["invocation_id"] in invocation_ids:
                counts[(record["invocation_id"], record["step"])] += 1
    return counts


class Load:
    """The mixed load on one `torpor dev --workers 2`, its answers, and the checks on them."""

    def __init__(self, ingress: str) -> None:
        self.ingress = ingress
        self.prefix = f"w{uuid.uuid4().hex[:8]}"
        self.keys = [f"{self.prefix}-{i}" for i in range(KEYS)]
        self.answers: dict[str, list[int]] = {key: [] for key in self.keys}
        self.twins: list[tuple[httpx.Response, httpx.Response]] = []
        self.ids: dict[str, set[str]] = {"add": set(), "greet": set(), "one_step": set()}

    def _post(
        self, client: httpx.Client, path: str, body: Any, headers: dict[str, str] | None = None
    ) -> httpx.Response:
        reply = client.post(f"{self.ingress}{path}", json=body, headers=headers or {}, timeout=60)
        assert reply.status_code == 200, f"{path}: {reply.status_code} {reply.text}"
        return reply

    def _op(self, op: tuple[str, int]) -> None:
        kind, n = op
        with httpx.Client(timeout=60) as client:  # a connection per request: both processes get some
            if kind == "add":
                key = self.keys[n % KEYS]
                reply = self._post(client, f"/Counter/{key}/add", 1)
                self.answers[key].append(reply.json())
                self.ids["add"].add(reply.headers["x-restate-id"])
            elif kind == "twin":
                key = self.keys[n % KEYS]
                headers = {"idempotency-key": f"{self.prefix}-twin-{n}"}
                with ThreadPoolExecutor(2) as pool:
                    first, second = pool.map(lambda _: self._post(client, f"/Counter/{key}/add", 1, headers), (0, 1))
                self.twins.append((first, second))
                self.answers[key].append(first.json())
                self.ids["add"].add(first.headers["x-restate-id"])
            elif kind == "greet":
                name = f"{self.prefix}-{n}"
                reply = self._post(client, "/Greeter/greet", name)
                assert reply.json() == f"Hello, {name}!"
                self.ids["greet"].add(reply.headers["x-restate-id"])
            else:
                reply = self._post(client, "/Steps/one_step", n)
                assert reply.json() == n + 1
                self.ids["one_step"].add(reply.headers["x-restate-id"])

    def run(self, scale: int = 1) -> None:
        """Send the load from `CLIENTS` concurrent clients (`scale` times fewer of each kind)."""
        ops = (
            [("add", n) for n in range(KEYS * ADDS_PER_KEY // scale)]
            + [("twin", n) for n in range(TWINS // scale)]
            + [("greet", n) for n in range(GREETS // scale)]
            + [("one_step", n) for n in range(STEPS // scale)]
        )
        ops.sort(key=lambda op: hash((op, self.prefix)))  # interleaved
        with ThreadPoolExecutor(CLIENTS) as pool:
            list(pool.map(self._op, ops))

    def check(self, effects_file: Path) -> None:
        """Every add applied once (answers 1..n per key, counters exact), twins answered alike, no
        handler run twice."""
        with httpx.Client(timeout=30) as client:
            for key, answers in self.answers.items():
                assert sorted(answers) == list(range(1, len(answers) + 1)), f"{key}: {sorted(answers)}"
                value = client.post(f"{self.ingress}/Counter/{key}/get", json=None).json()
                assert value == len(answers), f"{key}: counter {value}, {len(answers)} adds"
        for first, second in self.twins:
            assert first.headers["x-restate-id"] == second.headers["x-restate-id"]
            assert first.json() == second.json()
        runs = _side_effects(effects_file, self.ids["add"] | self.ids["one_step"])
        adds = {invocation for invocation, step in runs if step == "request"}
        steps = {invocation for invocation, step in runs if step == "add-one"}
        assert adds == self.ids["add"], "a Counter/add left no record of its run"
        assert steps == self.ids["one_step"], "a Steps/one_step left no record of its step"
        twice = {entry: count for entry, count in runs.items() if count > 1}
        assert not twice, f"handlers that ran more than once: {twice}"


def test_two_workers_share_a_load_with_no_invocation_run_twice(
    store_args: tuple[str, ...], examples_url: str, effects_file: Path
) -> None:
    with torpor_dev_process(
        *store_args, "--workers", "2", *LEASE_ARGS, module="tests.helpers.sweeping_dev", env={SWEEP_ENV: "200"}
    ) as (ingress, admin, process):
        workers = wait_for(lambda: _two_workers(process.pid), 30, "2 workers")
        reply = httpx.post(f"{admin}/deployments", json={"uri": examples_url}, timeout=30)
        assert reply.status_code == 201, reply.text
        load = Load(ingress)
        load.run()
        load.check(effects_file)
        served = _health_pids(admin)
        assert served == workers, f"/health answered from {served}, the workers are {workers}"

        # a worker killed outright is started again; what it held goes on, counters stay exact
        killed = min(workers)
        os.kill(killed, signal.SIGKILL)
        restarted = wait_for(lambda: _two_workers(process.pid, killed), 30, "the killed worker to start again")
        assert killed not in restarted
        after = Load(ingress)
        after.run(scale=2)
        after.check(effects_file)
        assert process.poll() is None
    assert process.returncode in (0, -signal.SIGTERM)
    assert not _children(process.pid)


def test_sleeps_armed_in_workers_that_died_fire_in_the_workers_started_again(
    store_args: tuple[str, ...], examples_url: str
) -> None:
    """Timers live in the memory of the worker that armed them: with both workers SIGKILLed while the
    sleeps wait (and the periodic sweep a minute away), only the start-up sweeps of the workers started
    again can re-arm them; every sleep then completes, none before its time."""
    with torpor_dev_process(*store_args, "--workers", "2") as (ingress, admin, process):
        workers = wait_for(lambda: _two_workers(process.pid), 30, "2 workers")
        reply = httpx.post(f"{admin}/deployments", json={"uri": examples_url}, timeout=30)
        assert reply.status_code == 201, reply.text
        sent_at = time.time()
        ids = []
        with httpx.Client(timeout=30) as client:  # a connection each: both workers arm some
            for _ in range(10):
                with httpx.Client(timeout=30) as one:
                    ids.append(one.post(f"{ingress}/Waits/sleep/send", json=SLEEP_MS).json()["invocationId"])
            wait_for(
                lambda: all(client.get(f"{admin}/invocations/{i}").json()["status"] == "suspended" for i in ids),
                30,
                "every sleep to suspend",
            )
            for pid in workers:
                os.kill(pid, signal.SIGKILL)
            wait_for(lambda: _two_workers(process.pid, *workers), 30, "both workers to start again")
            for invocation_id in ids:
                reply = client.get(f"{ingress}/restate/invocation/{invocation_id}/attach", timeout=60)
                assert reply.status_code == 200, reply.text
                assert reply.json() == f"slept {SLEEP_MS} ms"
                completed = client.get(f"{admin}/invocations/{invocation_id}").json()
                assert completed["status"] == "completed"
        assert time.time() - sent_at >= SLEEP_MS / 1000


@pytest.mark.parametrize(
    ("args", "says"),
    [
        (["--in-memory"], "not --in-memory"),
        (["--moto"], "not the embedded --moto"),
        (["--data-dir", "{tmp}", "--lambda", "Examples=examples.app:app"], "does not run the local Lambda emulator"),
    ],
)
def test_workers_above_one_refuse_a_store_one_process_owns(args: list[str], says: str, tmp_path: Path) -> None:
    command = [sys.executable, "-m", "adapters.cli", "dev", "--workers", "2"]
    command += [arg.replace("{tmp}", str(tmp_path)) for arg in args]
    started = time.monotonic()
    result = subprocess.run(command, cwd=REPO_ROOT, capture_output=True, text=True, timeout=60, check=False)
    assert result.returncode == 2, result.stderr
    assert says in result.stderr
    assert "--workers 2 " in result.stderr
    assert "--workers 1" in result.stderr
    error_lines = [line for line in result.stderr.splitlines() if line.startswith("Error:")]
    assert len(error_lines) == 1, result.stderr
    assert time.monotonic() - started < 30


def test_a_worker_that_cannot_start_fails_the_start_with_its_error(tmp_path: Path) -> None:
    not_a_directory = tmp_path / "file"
    not_a_directory.write_text("")
    command = [sys.executable, "-m", "adapters.cli", "dev", "--workers", "2", "--data-dir", str(not_a_directory / "d")]
    command += ["--ingress-port", "0", "--admin-port", "0"]
    result = subprocess.run(command, cwd=REPO_ROOT, capture_output=True, text=True, timeout=60, check=False)
    assert result.returncode == 1, result.stderr
    assert "worker 0: cannot open the SQLite store" in result.stderr
    assert "pick another --data-dir" in result.stderr
    assert result.stderr.rstrip().endswith("Error: torpor dev: worker 0 did not start (its error is above)")
