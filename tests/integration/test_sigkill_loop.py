"""The SIGKILL loop (issue 22): `torpor dev` is killed with SIGKILL at random moments, again and again,
while clients keep sending a mixed workload; after a last restart every invocation completes, none is
lost, and every counter is exact. On SQLite (a file store) and on DynamoDB (dynalite over the wire).

The workload (`TORPOR_SIGKILL_INVOCATIONS`, default 520) mixes one-way sends and request/response calls
of `Counter/{key}/add` on a few contended keys, `Counter/{key}/add_after_sleep`, callers that call
callees (`Calls/count_to`, which calls `Counter/{key}/add`; `Chain/a` → `b` → `c`, which sleeps) and
sleeps (`Waits/sleep`). Every request carries an idempotency key, so a client that loses its answer to
a kill sends it again, unchanged, to the next process and gets the same invocation id.

A killer thread SIGKILLs the process `TORPOR_SIGKILL_KILLS` times (default 12) at moments drawn from
`TORPOR_SIGKILL_SEED` (printed; default fixed), spread over the workload, and restarts it on the same
store each time. dynalite runs through `tests/helpers/dynalite_survive_aborts.js`: plain dynalite
exits when a killed client aborts a request mid-body.

The checks do not depend on timing: after the last restart every invocation (and every callee named
in a journal) must complete within 120 s, each read by id where the admin list does not show it
completed (0 stuck, 0 lost: a 404 or a request that never got an id), none may fail, and each counter
must equal the sum of the deltas sent (and, when it does not, the sum of its completed adds tells
whether an add was applied twice or only left stuck). One summary line is printed per store
(`pytest -s` shows it on success); a stuck invocation is described (status, what it waits for, pending
notifications, doorbell, journal tail, its callees, the first kill after its last write) and
classified by the crash point that most likely left it behind (`stuck_kind`). Another seed:
`TORPOR_SIGKILL_SEED=7 pytest -s tests/integration/test_sigkill_loop.py`.
"""

from __future__ import annotations

import contextlib
import os
import random
import signal
import subprocess
import threading
import time
from collections import Counter, defaultdict
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.helpers.dev import torpor_dev_process
from tests.helpers.dynalite import dynalite_server
from tests.helpers.services import serve_examples

SEED = int(os.environ.get("TORPOR_SIGKILL_SEED", "22"))
KILLS = int(os.environ.get("TORPOR_SIGKILL_KILLS", "12"))
INVOCATIONS = int(os.environ.get("TORPOR_SIGKILL_INVOCATIONS", "520"))
CLIENTS = 4
KEYS = [f"k{i}" for i in range(4)]
DRAIN_S = 120  # how long the last process gets to complete everything
STALL_S = 20  # how long the drain waits while nothing moves (a crashed attempt's lease ends after 4 s)
OP_DEADLINE_S = 90  # how long a client retries one request before it gives up on it


@dataclass
class Op:
    """One request of the workload: where it goes, what it adds to which counter, and what came of it."""

    index: int
    method: str  # "send" or "call"
    path: str  # after the ingress URL, e.g. /Counter/k1/add/send
    body: Any
    key: str = ""  # the counter it adds to ("" for none)
    delta: int = 0
    idempotency_key: str = ""
    invocation_id: str | None = None
    attempts: int = 0
    errors: list[str] = field(default_factory=list)


def workload(rng: random.Random, count: int) -> list[Op]:
    """`count` requests drawn from `rng`: counter adds (sent and called), callers, chains and sleeps."""
    ops: list[Op] = []
    for index in range(count):
        key = rng.choice(KEYS)
        roll = rng.random()
        if roll < 0.30:
            delta = rng.randint(1, 5)
            op = Op(index, "send", f"/Counter/{key}/add/send", delta, key, delta)
        elif roll < 0.45:
            delta = rng.randint(1, 5)
            op = Op(index, "call", f"/Counter/{key}/add", delta, key, delta)
        elif roll < 0.60:
            n = rng.randint(1, 3)
            op = Op(index, "send", "/Calls/count_to/send", {"n": n, "key": key}, key, n)
        elif roll < 0.65:
            n = rng.randint(1, 3)
            op = Op(index, "call", "/Calls/count_to", {"n": n, "key": key}, key, n)
        elif roll < 0.72:
            delta = rng.randint(1, 5)
            body = {"ms": rng.randint(50, 300), "delta": delta}
            op = Op(index, "send", f"/Counter/{key}/add_after_sleep/send", body, key, delta)
        elif roll < 0.85:
            op = Op(index, "send", "/Chain/a/send", rng.randint(50, 300))
        else:
            op = Op(index, "send", "/Waits/sleep/send", rng.randint(50, 300))
        op.idempotency_key = f"sigloop-{SEED}-{index}"
        ops.append(op)
    return ops


class RestartingTorpor:
    """`torpor dev` on one store, in a subprocess that `kill` SIGKILLs and `start` starts again.

    Clients read `ingress` through `wait_up`, which blocks while no process answers.
    """

    def __init__(self, store_args: list[str]) -> None:
        self.store_args = store_args
        self.ingress = ""
        self.admin = ""
        self.started_at = 0.0
        self.kills = 0
        self.down_s = 0.0  # time without a process answering, from each kill to the next start's /health
        self._killed_at: float | None = None
        self.kill_times: list[float] = []  # wall-clock time of each kill, to tell where a stuck one was cut off
        self._up = threading.Event()
        self._process: subprocess.Popen[bytes] | None = None
        self._context: AbstractContextManager[tuple[str, str, subprocess.Popen[bytes]]] | None = None

    def start(self) -> None:
        """Start a new process on the store (3 s inactivity timeout, 1 s lease margin, 3 s call wait)."""
        self._context = torpor_dev_process(*self.store_args, "--call-wait", "3s")
        self.ingress, self.admin, self._process = self._context.__enter__()
        self.started_at = time.monotonic()
        if self._killed_at is not None:
            self.down_s += self.started_at - self._killed_at
        self._up.set()

    def kill(self) -> None:
        """SIGKILL the process: no clean-up, whatever it was doing."""
        assert self._process is not None
        assert self._context is not None
        self._up.clear()
        self._process.send_signal(signal.SIGKILL)
        self._killed_at = time.monotonic()
        self.kill_times.append(time.time())
        self._process.wait(10)
        self._context.__exit__(None, None, None)
        self.kills += 1

    def stop(self) -> None:
        """Stop the process if it runs (SIGTERM, by `torpor_dev_process`)."""
        self._up.clear()
        if self._context is not None:
            self._context.__exit__(None, None, None)
            self._context = None

    def wait_up(self, timeout_s: float) -> str:
        """The ingress URL of the running process, waiting up to `timeout_s` for one ("" if none)."""
        return self.ingress if self._up.wait(timeout_s) else ""


def send_until_answered(torpor: RestartingTorpor, op: Op, client: httpx.Client, give_up: Callable[[], bool]) -> None:
    """Send `op` until an answer names its invocation (again with the same idempotency key after a
    connection error or a 5xx); sets `op.invocation_id`, or records why not in `op.errors`."""
    deadline = time.monotonic() + OP_DEADLINE_S
    while time.monotonic() < deadline and not give_up():
        ingress = torpor.wait_up(1)
        if not ingress:
            continue
        op.attempts += 1
        try:
            reply = client.post(
                f"{ingress}{op.path}", json=op.body, headers={"idempotency-key": op.idempotency_key}, timeout=15
            )
        except httpx.TransportError as exc:
            op.errors.append(type(exc).__name__)
            time.sleep(0.05)
            continue
        if reply.status_code in (200, 202) and reply.headers.get("x-restate-id"):
            op.invocation_id = reply.headers["x-restate-id"]
            return
        op.errors.append(f"{reply.status_code} {reply.text[:200]}")
        if reply.status_code < 500:
            return  # a refusal, not a crash: the test reports it
        time.sleep(0.05)


def kill_loop(
    torpor: RestartingTorpor, rng: random.Random, progress: Callable[[], int], failed: list[BaseException]
) -> None:
    """SIGKILL and restart `torpor` `KILLS` times: each kill once the workload has passed a threshold
    drawn from `rng` and the process has been up for a random 0.2-1.5 s (so some kills hit start-up
    sweeps), then at a random extra delay. An error (a process that does not come up) goes to `failed`."""
    thresholds = sorted(rng.uniform(0.02, 0.95) * INVOCATIONS for _ in range(KILLS))
    plan = [(threshold, rng.uniform(0.2, 1.5), rng.uniform(0.0, 0.4)) for threshold in thresholds]
    try:
        for threshold, uptime_s, delay_s in plan:
            while progress() < threshold:
                time.sleep(0.01)
            time.sleep(max(0.0, torpor.started_at + uptime_s - time.monotonic()) + delay_s)
            torpor.kill()
            torpor.start()
    except BaseException as exc:
        failed.append(exc)
        raise


def admin_get(admin: str, invocation_id: str) -> dict[str, Any] | None:
    """`GET /invocations/{id}`: the description, `{}` for a 404, None if the admin API did not answer."""
    try:
        reply = httpx.get(f"{admin}/invocations/{invocation_id}", timeout=10)
    except httpx.TransportError:
        return None
    if reply.status_code == 404:
        return {}
    assert reply.status_code == 200, reply.text
    body: dict[str, Any] = reply.json()
    return body


def callees(described: dict[str, Any]) -> list[str]:
    """The ids of the invocations an invocation's journal called or sent."""
    return [e["invocation_id"] for e in described.get("journal", []) if e.get("invocation_id")]


def listed_completed(admin: str) -> dict[str, dict[str, Any]]:
    """The invocations the admin API lists as completed, by id (without journals)."""
    listed: dict[str, dict[str, Any]] = {}
    token: str | None = None
    while True:
        params = {"status": "completed", "limit": "1000", **({"page_token": token} if token else {})}
        reply = httpx.get(f"{admin}/invocations", params=params, timeout=30)
        assert reply.status_code == 200, reply.text
        body = reply.json()
        listed.update((i["id"], i) for i in body["invocations"])
        token = body.get("next_page_token")
        if not token:
            return listed


CALLERS = {"Calls", "Chain"}  # services whose handlers call others: their journals name callees


def drain(admin: str, watched: set[str], deadline_s: float, stall_s: float) -> dict[str, dict[str, Any]]:
    """Wait until every watched invocation (and every callee their journals name, so a stuck callee
    shows as stuck too) completed, up to `deadline_s`, or until none has changed for `stall_s`
    (stuck: lease take-overs and retries come sooner). The admin API's list of completed ones is
    taken as it is (one request), every other invocation is read by id (the list may lag), and so
    is each completed caller, for its callees. The last description of each (`{}` for one the
    admin API does not know; without journal for a listed one that is no caller)."""
    described: dict[str, dict[str, Any]] = {}
    deadline = time.monotonic() + deadline_s
    last_seen: object = None
    changed_at = next_report = time.monotonic()
    while True:
        listed = listed_completed(admin)
        for invocation_id in sorted(watched):
            if described.get(invocation_id, {}).get("status") == "completed":
                continue
            summary = listed.get(invocation_id)
            if summary is not None and summary["target_service_name"] not in CALLERS:
                described[invocation_id] = summary
                continue
            fresh = admin_get(admin, invocation_id)
            if fresh is not None:
                described[invocation_id] = fresh
                watched.update(callees(fresh))
        open_ = [i for i in watched if described.get(i, {}).get("status") != "completed"]
        seen = sorted(
            (i, described.get(i, {}).get("modified_at"), described.get(i, {}).get("journal_length")) for i in open_
        )
        if seen != last_seen or any(described.get(i, {}).get("next_retry_at") for i in open_):
            last_seen, changed_at = seen, time.monotonic()  # (one waiting for a retry is not stuck yet)
        if time.monotonic() >= next_report:  # how the drain goes, for a slow or stuck run
            statuses = Counter(str(described.get(i, {}).get("status")) for i in open_)
            print(f"drain: {len(open_)} open of {len(watched)}: {dict(statuses)}")
            next_report = time.monotonic() + 5
        if not open_ or time.monotonic() >= min(deadline, changed_at + stall_s):
            return {i: described.get(i, {"status": "unread"}) for i in watched}
        time.sleep(0.5)


def completed_adds(admin: str, described: dict[str, dict[str, Any]]) -> dict[str, int]:
    """Per counter key, the sum of the deltas of the completed `Counter/{key}/add` and `add_after_sleep`
    invocations (each read by id for its input): what the counter holds if each ran exactly once,
    stuck ones aside."""
    sums = dict.fromkeys(KEYS, 0)
    for invocation_id, body in described.items():
        if body.get("status") != "completed" or body.get("target_service_name") != "Counter":
            continue
        if "journal" not in body:
            body = admin_get(admin, invocation_id) or {}
        value = body["journal"][0]["value"]
        if body.get("target_handler_name") == "add":
            sums[body["target_service_key"]] += int(value)
        elif body.get("target_handler_name") == "add_after_sleep":
            sums[body["target_service_key"]] += int(value["delta"])
    return sums


def _epoch_s(rfc3339: str | None) -> float:
    """Seconds since the epoch of an admin API time (`2026-12-07T00:14:36.192Z`); 0 for none."""
    if not rfc3339:
        return 0.0
    return datetime.fromisoformat(rfc3339.replace("Z", "+00:00")).timestamp()


def stuck_kind(body: dict[str, Any], bell: object, callee_bodies: list[dict[str, Any]]) -> str:
    """Which crash point most likely left an invocation stuck, from what the store shows:

    - `callee-stuck`: it waits for a callee that is stuck itself;
    - `result-not-stored`: its callee completed, but no CallCompletion was stored for it (a kill
      between the callee's completing write and telling its caller);
    - `stored-not-rung`: the CallCompletion is pending, its doorbell was not rung for it (a kill
      between storing the notification and ringing);
    - `rung-not-woken`: stored and rung after it suspended, but no process woke it (a kill before the
      in-process wake-up; no sweep looks at suspended invocations);
    - `pending-key-free` / `pending-behind-holder`: an exclusive call waiting in its key's queue
      while nobody holds the key (a kill between releasing the key and handing it on) or behind one;
    - `other`.
    """
    status = body.get("status")
    if status == "pending":
        return "pending-behind-holder" if body.get("waiting_for_key_holder") else "pending-key-free"
    if status != "suspended":
        return "other"
    awaited = set((body.get("waiting_on") or {}).get("completions", []))
    pending = [n for n in body.get("pending_notifications", []) if n.get("completion_id") in awaited]
    if pending:
        delivered = sum(1 for e in body.get("journal", []) if e.get("type") == "CallCompletion")
        rung = isinstance(bell, int) and bell >= delivered + len(body.get("pending_notifications", []))
        return "rung-not-woken" if rung else "stored-not-rung"
    if callee_bodies and callee_bodies[-1].get("status") == "completed":
        return "result-not-stored"
    if callee_bodies:
        return "callee-stuck"
    return "other"


def diagnose(
    admin: str, invocation_id: str, body: dict[str, Any], doorbell: Callable[[str], object], kill_times: list[float]
) -> tuple[str, str]:
    """One stuck invocation: its `stuck_kind`, and readably its status, what it waits for, its
    pending notifications, its doorbell, the tail of its journal, the state of each callee it names,
    and the first kill after the last write it shows (where the process that should have woken it
    was cut off)."""
    writes = [e.get("stored_at") for e in [*body.get("journal", []), *body.get("pending_notifications", [])]]
    last_write = max([_epoch_s(w) for w in writes] + [_epoch_s(body.get("modified_at"))])

    def first_kill_after(at: float) -> str:
        if not at:
            return "-"
        kills_after = [k for k in kill_times if k >= at - 0.05]
        return f"+{(kills_after[0] - at) * 1000:.0f} ms" if kills_after else "none"

    bell = doorbell(invocation_id)
    callee_bodies = [admin_get(admin, callee) or {} for callee in callees(body)]
    kind = stuck_kind(body, bell, callee_bodies)
    lines = [
        f"STUCK {kind} {invocation_id} {body.get('target')} status={body.get('status')} "
        f"attempts={body.get('attempts')} doorbell={bell} waiting_on={body.get('waiting_on')} "
        f"wake_up_at={body.get('wake_up_at')} next_retry_at={body.get('next_retry_at')} "
        f"last_failure={body.get('last_failure')} waiting_for_key_holder={body.get('waiting_for_key_holder')}",
        f"  pending_notifications={body.get('pending_notifications')}",
        f"  first kill after its last write ({datetime.fromtimestamp(last_write, UTC).isoformat()}): "
        f"{first_kill_after(last_write)}",
    ]
    for entry in body.get("journal", [])[-6:]:
        lines.append(f"  journal {entry}")
    for callee, other in zip(callees(body), callee_bodies, strict=True):
        lines.append(
            f"  callee {callee} {other.get('target')} status={other.get('status')} "
            f"completion={other.get('completion_kind')} completed_at={other.get('completed_at')} "
            f"first kill after it completed: {first_kill_after(_epoch_s(other.get('completed_at')))}"
        )
    return kind, "\n".join(lines)


@contextlib.contextmanager
def store_for(kind: str, tmp_path: Path) -> Iterator[tuple[list[str], Callable[[str], object]]]:
    """`torpor dev`'s store arguments for `kind` (a SQLite file, or a table on a fresh dynalite) and a
    function that reads an invocation's doorbell straight from that store (for diagnosis)."""
    if kind == "sqlite":
        from adapters.local.sqlite_store import SQLiteStore

        data_dir = tmp_path / "data"

        def sqlite_doorbell(invocation_id: str) -> object:
            record = SQLiteStore(str(data_dir / "torpor.sqlite3")).get_invocation(invocation_id)
            return record.doorbell if record else None

        yield ["--data-dir", str(data_dir)], sqlite_doorbell
    else:
        from adapters.aws.dynamodb_store import DynamoDBStore

        with dynalite_server(survive_aborts=True) as endpoint:

            def dynamodb_doorbell(invocation_id: str) -> object:
                store = DynamoDBStore("sigloop", region="us-east-1", endpoint_url=endpoint)
                record = store.get_invocation(invocation_id)
                return record.doorbell if record else None

            yield ["--dynamodb-endpoint", endpoint, "--table", "sigloop"], dynamodb_doorbell


@pytest.mark.timeout(DRAIN_S + 240)
@pytest.mark.parametrize("kind", ["sqlite", "dynalite"])
def test_sigkill_loop_loses_nothing_leaves_nothing_stuck_and_counts_exactly(kind: str, tmp_path: Path) -> None:
    print(
        f"sigkill loop [{kind}]: TORPOR_SIGKILL_SEED={SEED} TORPOR_SIGKILL_KILLS={KILLS} "
        f"TORPOR_SIGKILL_INVOCATIONS={INVOCATIONS}"
    )
    rng = random.Random(SEED)
    ops = workload(rng, INVOCATIONS)
    expected: Counter[str] = Counter()
    for op in ops:
        if op.key:
            expected[op.key] += op.delta
    with (
        serve_examples() as (services_url, _services),
        store_for(kind, tmp_path) as (store_args, doorbell),
    ):
        torpor = RestartingTorpor(store_args)
        torpor.start()
        try:
            registered = httpx.post(f"{torpor.admin}/deployments", json={"uri": services_url}, timeout=30)
            assert registered.status_code == 201, registered.text
            started = time.monotonic()

            # GIVEN clients sending the workload while a killer SIGKILLs torpor dev again and again
            next_op = iter(ops)
            taken = threading.Lock()
            answered = [0]
            killer_failed: list[BaseException] = []

            def client() -> None:
                with httpx.Client() as http:
                    while not killer_failed:
                        with taken:
                            op = next(next_op, None)
                        if op is None:
                            return
                        send_until_answered(torpor, op, http, lambda: bool(killer_failed))
                        with taken:
                            answered[0] += 1

            clients = [threading.Thread(target=client, name=f"client-{i}") for i in range(CLIENTS)]
            killer = threading.Thread(
                target=kill_loop, args=(torpor, rng, lambda: answered[0], killer_failed), name="killer", daemon=True
            )
            for thread in [*clients, killer]:
                thread.start()
            for thread in clients:
                thread.join(OP_DEADLINE_S * 3)
            killer.join(120)
            assert not killer_failed, f"a restart failed: {killer_failed[0]!r}"
            assert not killer.is_alive(), "the killer did not finish its kills"
            sent_s = time.monotonic() - started

            # WHEN the last process (started after the last kill) runs on
            ids = {op.invocation_id for op in ops if op.invocation_id}
            described = drain(torpor.admin, set(ids), DRAIN_S, STALL_S)
            seconds = time.monotonic() - started

            # THEN nothing is lost, nothing is stuck, nothing failed, and every counter is exact
            unanswered = [op for op in ops if not op.invocation_id]
            lost = sorted(i for i, body in described.items() if not body) + [f"op{op.index}" for op in unanswered]
            stuck = sorted(i for i, body in described.items() if body and body.get("status") != "completed")
            failed = sorted(
                i
                for i, body in described.items()
                if body.get("status") == "completed" and body.get("completion_result") != "success"
            )
            counters: dict[str, int] = {}
            for key in KEYS:
                reply = httpx.post(f"{torpor.ingress}/Counter/{key}/get", timeout=30)
                assert reply.status_code == 200, reply.text
                counters[key] = reply.json()
            exact = counters == {key: expected[key] for key in KEYS}
            # when a counter is off: is it by the stuck adds alone (each completed add counted once)?
            applied = counters if exact else completed_adds(torpor.admin, described)
            by_status: defaultdict[str, int] = defaultdict(int)
            for i in stuck:
                by_status[f"{described[i].get('target')}:{described[i].get('status')}"] += 1
            retried = sum(1 for op in ops if op.attempts > 1)
            print(
                f"sigkill loop [{kind}]: seed={SEED} invocations={len(ops)} (+{len(described) - len(ids)} callees) "
                f"kills={torpor.kills} seconds={seconds:.1f} (sending {sent_s:.1f}, down {torpor.down_s:.1f}) "
                f"retried_requests={retried} "
                f"stuck={len(stuck)} lost={len(lost)} failed={len(failed)} counters_exact={exact} "
                f"counters={counters} expected={dict(sorted(expected.items()))} "
                f"counters_equal_completed_adds={counters == applied} stuck_by_target={dict(by_status)}"
            )
            kinds: Counter[str] = Counter()
            for invocation_id in stuck:
                kind_of, text = diagnose(
                    torpor.admin, invocation_id, described[invocation_id], doorbell, torpor.kill_times
                )
                kinds[kind_of] += 1
                print(text)
            if stuck:
                print(f"sigkill loop [{kind}]: stuck by kind: {dict(sorted(kinds.items()))}")
            for op in unanswered:
                print(f"UNANSWERED op{op.index} {op.method} {op.path} attempts={op.attempts} errors={op.errors[-5:]}")
            for invocation_id in failed:
                print(f"FAILED {invocation_id} {described[invocation_id].get('completion_failure')}")
            assert (len(stuck), len(lost), len(failed), exact, counters == applied) == (0, 0, 0, True, True)
        finally:
            torpor.stop()
