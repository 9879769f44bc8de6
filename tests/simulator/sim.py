"""A deterministic simulator of Torpor: one process, a virtual clock, faults chosen by a seed.

`run_scenario(seed)` builds a fresh in-memory SQLite store, a `ControlPlane` over it with a
virtual `Clock` and `Scheduler` and the in-process deployment of `tests.simulator.sdk`, submits
a workload chosen by the seed, and runs it in virtual-time order. The workload: `Flow/main`
requests whose steps are runs, sleeps, calls (`Echo`), calls and delayed sends to a virtual
object's counter on one or two contended keys (`Counter/add`), awakeables resolved by another
invocation (`Resolver`) and a run result over the item-size limit; direct `Counter/add` requests;
workflows whose run awaits a durable promise a shared handler completes. Every request has an
idempotency key; some are sent twice; some are killed, cancelled or paused (then resumed). Newer
parts, drawn from a second generator (`xrng`, so the older parts of a seed's workload stay):

- failing attempts (`Flaky/main`, `Flaky/doomed`, retry policy `FLAKY_POLICY`): a run, then attempts
  that fail `times` in a row as a mode of `sdk.FAILURE_MODES` says (an ErrorMessage, with
  `next_retry_delay`, with the PAUSE behaviour; a terminal failure; HTTP 500; a transport error; End
  without Output; a truncated frame) or a run whose closure fails; at the policy's attempts `main`
  pauses (an operator resumes it) and `doomed` is killed;
- attaches through the ingress (by idempotency key, by id, a workflow's by its id), before and after
  the invocation completes;
- purges of completed invocations (admin purge), some then sent again with the same idempotency key
  (`RESEND_WITH_CALLS`);
- named signals (`Waiter/main`, `Signaller/signal`, from a third generator): sent twice, before or
  after the await, awaited once or twice;
- a durable schedule (`every` 1 to 3 min, ticking `Counter/add` on key `t`), created, maybe paused
  and resumed, then deleted by the client, its ticks delivered by the faulty scheduler; in some, paused
  a little before a tick and resumed after it, that tick's timer delivered again after the resume
  (`pause_across_tick`, a generator of its own: the tick must not run);
- a concurrency limit of 1 to 3 on `Limited`, in some scenarios also a rate limit (0.5 to 2 starts
  per second: no window holds more reserved starts than the burst and the pace allow, and no
  invocation's first attempt comes before its reserved start) (`limited_requests`, a generator of its own) and more
  requests than slots, some killed, cancelled or paused; in some scenarios also a limit of 1 to 3 on
  the handler `Limited/work` (both count: its slots are taken one after the other): never more than
  N started and not completed, nor more holders of a pool than its limit (`check_limit`, at each attempt), none passed in the queue by a later arrival (without crashes),
  and at the end no slot held by a completed invocation without a crash, nobody left queued.

Faults:

- a crash before a chosen store call (`SimulatedCrash` unwinds the engine; a NEW `ControlPlane`
  over the same store continues after a start-up `sweep`; the in-process wake-ups are lost; the
  client sends again what got no answer);
- a concurrent executor at a chosen store call: the clock jumps past the lease, and a second
  `ControlPlane` advances the same invocation before the first one's call goes on;
- failed effect writes (state writes, callee creations, timers, notifications): a transient error;
- wake-ups dropped, duplicated, delivered late or early (a dropped one is recovered by the
  periodic `sweep_due`/`sweep`).

Then it checks invariants (`Scenario.check`, `check_counter`, `check_journal`, `check_attached`,
`check_schedules`, `check_gone`, `check_after_retention`, and as it goes: `on_run`, `on_attempt`,
`observe_flaky`, the completion-is-final check of `SimStore`) and returns the violations
(`Scenario.violations`); `Scenario.covered` counts what the newer parts exercised. `run_scenario(seed,
store="dynamodb")` runs the same scenario over `adapters.aws.dynamodb_store` on an in-process moto
(slow: seconds a seed).

A share of the scenarios (`BIDI_SHARE`) invoke the deployment in bidirectional mode: it registers
as `BIDI_STREAM` and answers on `sdk.SimStream`s (run results committed and sent back on the open
stream, the body ended when the handler awaits something else); the driver's quiet and abort waits
pass in virtual seconds (`control_plane.bidi.time` is replaced for the scenario).
`MUTANTS` break the engine on purpose, to show that the checks can fail. `python -m
tests.simulator` (scripts/simulate.sh) runs many seeds.
"""

from __future__ import annotations

import collections
import contextlib
import dataclasses
import hashlib
import heapq
import itertools
import json
import logging
import random
import unittest.mock
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

from adapters.local.sqlite_store import SQLiteStore
from control_plane import bidi as bidi_module
from control_plane.effects import Effects
from control_plane.errors import BadRequest, Conflict, NotFound, ProtocolViolation, TooEarly
from control_plane.held import Held
from control_plane.journal import Journal, parse_named_signal_key, stored_sender
from control_plane.limits import HANDLER_LIMITS, SERVICE_LIMIT, SERVICE_RATE, pacing, pool_scope
from control_plane.ports import INVOCATION_STATUSES, InvocationRecord, StoreConflict, StoreUnavailable
from control_plane.protocol import MessageType, decode_frames, is_command, is_notification
from control_plane.protocol import protocol_pb2 as pb
from control_plane.retry import RetryPolicy
from control_plane.runtime import ControlPlane
from control_plane.schedules import Cadence, Schedules, schedule_of_wake_id, schedule_wake_id, tick_idempotency_key
from control_plane.settings import Settings
from control_plane.subscriptions import Event
from control_plane.timers import Wake
from http_api.http import HttpRequest, HttpResponse
from http_api.ingress import Ingress
from tests.simulator.sdk import DEPLOYMENT_URL, FAIL_MESSAGE, FAILURE_MODES, BidiDeployment, Ctx, SimDeployment

START_MS = 1_800_000_000_000
_SWEEP_DUE_EVERY_MS = 60_000
_SWEEP_EVERY_MS = 300_000
_HORIZON_MS = 6 * 3600 * 1000  # a scenario not done by then has stuck invocations
_MAX_STEPS = 20_000
_EFFECT_WRITES = frozenset({"apply_state", "create_invocation", "put_timer", "put_notification"})

BIDI_SHARE = 0.25
"""The share of scenarios whose deployment is invoked in bidirectional mode (`sdk.BidiDeployment`)."""

# what a client sends (again, if unanswered); "message": a subscribed queue's message, to the worker
_CLIENT_EVENTS = ("submit", "op", "attach", "purge", "schedule", "restart", "message")

# the named transitions of `InvocationTransitions` on the lease holder's epoch (the `skip-fence` mutant
# drops that condition), and those that move the epoch whoever holds it
_FENCED_WRITES = frozenset(
    {"renew_lease", "record_progress", "release_lease", "wait_for_key", "leave_queue", "suspend", "back_off",
     "pause", "complete"}
)  # fmt: skip
_FORCED_WRITES = frozenset({"force_complete", "force_pause", "resume"})
_RECORD_WRITES = _FENCED_WRITES | _FORCED_WRITES | {"acquire_lease", "attach_caller"}

MUTANTS = (
    "skip-fence", "ignore-effect-failure", "retry-forever", "drop-ending", "ignore-limit", "keep-slot", "run-paused-tick"
)  # fmt: skip
"""Deliberate bugs the simulator must catch: the executor ignores the epoch condition of its
record writes; an effect whose write failed after its commit is dropped (counted as applied); a
retry policy never runs out of attempts (a failing invocation never pauses nor is killed); a
completing write drops the journal batch it carries (`Executor.end`: the Output is lost); the
store's concurrency limit admits every newcomer (`ignore-limit`); a slot is never given back
(`keep-slot`); a schedule's tick that fell while it was paused, delivered after the resume, runs
(`run-paused-tick`: `Schedules.tick` without its guard "a tick a pause skipped")."""


class SimulatedCrash(BaseException):  # not an error of the engine: the process dies
    """The process dies here: a BaseException, so no `except Exception` in the engine catches it."""


class SimulatedWriteFailure(RuntimeError):
    """A transient store failure of one effect write (throttling, a network blip): nothing written."""


class VirtualClock:
    """The `Clock` port on virtual time, moved only by the simulation loop."""

    def __init__(self, now_ms: int = START_MS) -> None:
        self.now = now_ms

    def now_ms(self) -> int:
        """The virtual time, ms since the epoch."""
        return self.now


@dataclass(order=True)
class _Event:
    due_ms: int
    seq: int
    kind: str = field(compare=False)  # "now" | "timer" | "submit" | "sweep" | "sweep_due" | "startup"
    target: Any = field(compare=False, default=None)
    arg: int = field(compare=False, default=0)


class VirtualScheduler:
    """The `Scheduler` port as a heap of wake-ups in virtual time; the seed's `rng` may drop,
    duplicate, delay or advance each one (`p_drop`, `p_dup`, `p_late`, `p_early`)."""

    def __init__(self, clock: VirtualClock, rng: random.Random, faults: bool) -> None:
        self.clock = clock
        self.rng = rng
        self.heap: list[_Event] = []
        self.seq = itertools.count()
        self.faults = faults
        self.p_drop, self.p_dup, self.p_late, self.p_early = (
            (rng.choice([0, 0.03, 0.1]), rng.choice([0, 0.1]), rng.choice([0, 0.2]), rng.choice([0, 0.1]))
            if faults
            else (0, 0, 0, 0)
        )
        self.enabled = True
        self.duplicates_left = 5  # duplicates of duplicates would compound (each BUSY delivery re-arms)

    def push(self, due_ms: int, kind: str, target: Any = None, arg: int = 0) -> None:
        """Add an event (no faults)."""
        heapq.heappush(self.heap, _Event(due_ms, next(self.seq), kind, target, arg))

    def _wake(self, kind: str, invocation_id: str, due_ms: int) -> None:
        if self.enabled and self.rng.random() < self.p_drop:
            return
        at = due_ms
        if self.enabled and self.rng.random() < self.p_late:
            at += self.rng.randint(1, 20_000)
        if self.enabled and kind == "timer" and self.rng.random() < self.p_early:
            at -= self.rng.randint(1, 5_000)
        self.push(max(at, self.clock.now), kind, invocation_id, due_ms)
        if self.enabled and self.duplicates_left and self.rng.random() < self.p_dup:
            self.duplicates_left -= 1
            self.push(max(at, self.clock.now) + self.rng.randint(0, 3_000), kind, invocation_id, due_ms)

    def wake_now(self, invocation_id: str) -> None:
        """Advance `invocation_id` as soon as the loop gets to it."""
        self._wake("now", invocation_id, self.clock.now)

    def wake_at(self, invocation_id: str, due_ms: int) -> None:
        """Deliver a timer for `due_ms` (`ControlPlane.wake`)."""
        self._wake("timer", invocation_id, due_ms)

    def forget_wake_ups(self) -> None:
        """A crash: every in-process wake-up is lost (client requests and sweeps stay)."""
        self.heap = [e for e in self.heap if e.kind not in ("now", "timer")]
        heapq.heapify(self.heap)


class SimStore:
    """The store of a scenario: the SQLite store, with faults at chosen call numbers, a log of the
    run results committed (`committed_runs`), and the `skip-fence` mutant."""

    def __init__(self, inner: SQLiteStore, sim: Scenario) -> None:
        self._inner = inner
        self._sim = sim

    def __getattr__(self, name: str) -> Any:
        value = getattr(self._inner, name)
        if not callable(value):
            return value

        def call(*args: Any, **kwargs: Any) -> Any:
            self._sim.before_store_call(name)
            if name in _FENCED_WRITES and self._sim.mutant == "skip-fence":
                current = self._inner.get_invocation(args[0])
                if current is not None:
                    args = (args[0], current.epoch, *args[2:])
            if name == "complete" and kwargs.get("ending") is not None and self._sim.mutant == "drop-ending":
                kwargs = {k: v for k, v in kwargs.items() if k != "ending"}
            before = self._inner.get_invocation(args[0]) if name in _RECORD_WRITES else None
            now = self._sim.clock.now_ms()
            result = value(*args, **kwargs)
            if self._sim.crash_after_write:  # its values went to the blob store, its item was written
                self._sim.crash_after_write = False
                self._sim.crashes += 1
                self._sim.note(f"CRASH after store call {self._sim.calls} ({name}), its large values in the blob store")
                raise SimulatedCrash(f"crash after store call {self._sim.calls} ({name})")
            if name == "suspend" and 0 < kwargs.get("wake_up_at_ms", 0) <= now:
                self._sim.violate(
                    f"{args[0]} suspended on a sleep due at {kwargs['wake_up_at_ms']} (now {now}): an awaited "
                    "sleep already due resumes at once (decide_suspension)"
                )
            if name == "append_batch":
                self._sim.committed(args[0], args[1])
            if name == "reserve_start":
                self._sim.reserved.append(result)
            if name == "complete" and kwargs.get("ending") is not None:  # the ending batch, with the completion
                self._sim.committed(args[0], kwargs["ending"])
                self._sim.covered["ended in one write"] += 1
            if before is not None and before.status == "completed":
                after = self._inner.get_invocation(args[0])
                if after is not None and (after.status, after.output, after.completion) != (
                    before.status,
                    before.output,
                    before.completion,
                ):
                    self._sim.violate(
                        f"{args[0]} completed ({before.completion}), then {name} made it {after.status} "
                        f"({after.completion or 'no completion'}): a completion must be final"
                    )
            return result

        return call


class SimBlobs:
    """The blob store of a scenario over the DynamoDB store (S3 on the in-process moto), with its
    faults drawn from the scenario's `brng`: a crash after an object's put, before the item that
    refers to it is written; a crash after that item's write (`Scenario.crash_after_write`); a
    GetObject that fails (S3 unavailable: the store call must fail retryably, never answer without
    the value)."""

    def __init__(self, inner: Any) -> None:
        self._inner = inner
        self.sim: Scenario | None = None
        self.puts: dict[str, str] = {}  # key -> sha256 of the bytes put (the same key: the same bytes)

    def put(self, key: str, data: bytes) -> None:
        digest = hashlib.sha256(data).hexdigest()
        if self.puts.setdefault(key, digest) != digest:
            assert self.sim is not None
            self.sim.violate(f"blob {key} put again with other bytes: a reference must always resolve the same")
        self._inner.put(key, data)
        sim = self.sim
        if sim is None or not sim.armed:
            return
        draw = sim.brng.random()
        if draw < BLOB_CRASH_SHARE:
            sim.crashes += 1
            sim.note(f"CRASH after the blob put of {key}, before its item's write")
            raise SimulatedCrash(f"crash after the blob put of {key}")
        if draw < 2 * BLOB_CRASH_SHARE:
            sim.crash_after_write = True

    def get(self, key: str) -> bytes:
        sim = self.sim
        if sim is not None and sim.armed and sim.brng.random() < BLOB_GET_FAILURE_SHARE:
            sim.blob_get_failures += 1
            sim.note(f"FAIL the blob get of {key} (S3 unavailable)")
            raise ConnectionError(f"S3 unavailable (simulated) for {key}")
        data: bytes = self._inner.get(key)
        return data

    def delete(self, prefix: str) -> int:
        deleted: int = self._inner.delete(prefix)
        return deleted


BLOB_CRASH_SHARE = 0.15
"""How often a blob put is followed by a crash (before its item's write; as often, after it)."""
BLOB_GET_FAILURE_SHARE = 0.1
"""How often a blob get fails while faults are armed."""


class SimFacts:
    """The store's facts (`SQLiteStore.facts`), `creation_requests` still a fault point ("store call")
    as when it was a `Store` method: the seeds of `tests/unit/test_simulator.py` `FOUND` were found
    with it counted, and replay their scenarios only so."""

    may_delete = True

    def __init__(self, inner: SQLiteStore, sim: Scenario) -> None:
        self._facts = inner.facts
        self._sim = sim

    @property
    def holds_short_ids(self) -> bool:
        return self._facts.holds_short_ids

    @property
    def value_limit_bytes(self) -> int:
        return self._facts.value_limit_bytes

    def creation_requests(self, *, delayed: bool, on_key: bool) -> dict[str, int]:
        self._sim.before_store_call("creation_requests")
        return self._facts.creation_requests(delayed=delayed, on_key=on_key)


# --- the workload: services, handlers and the reference model -------------------------------------


def _counter_add(ctx: Ctx) -> bytes:
    delta = int(ctx.input or b"1")  # a schedule's tick sends no body: 1
    before = int(ctx.get(b"n") or b"0")
    ctx.run("audit", lambda: b"ok")
    ctx.set(b"n", str(before + delta).encode())
    return str(before + delta).encode()


def _echo(ctx: Ctx) -> bytes:
    text = ctx.input
    return ctx.run("shout", lambda: text.upper())


def _flow(ctx: Ctx) -> bytes:
    parts: list[str] = []
    for i, step in enumerate(json.loads(ctx.input)):
        op = step[0]
        if op == "run":
            parts.append(ctx.run(f"r{i}", lambda tag=step[1]: tag.encode()).decode())
        elif op == "sleep":
            ctx.sleep(f"z{i}", step[1])
            parts.append("z")
        elif op == "call":
            parts.append(ctx.call("Echo", "echo", step[1].encode(), name=f"c{i}").decode())
        elif op == "add":
            ctx.call("Counter", "add", str(step[2]).encode(), key=step[1], name=f"a{i}")
            parts.append("+")
        elif op == "send":
            ctx.send("Counter", "add", str(step[2]).encode(), key=step[1], delay_ms=step[3], name=f"s{i}")
            parts.append("s")
        elif op == "awake":  # an awakeable another invocation resolves
            awakeable_id, index = ctx.awakeable()
            ctx.send("Resolver", "resolve", json.dumps([awakeable_id, step[1]]).encode(), name=f"w{i}")
            parts.append(ctx.await_signal(index).decode())
        elif op == "big":  # a run result larger than an item: kept in the blob store, replayed intact
            parts.append("b" if ctx.run(f"b{i}", lambda: BIG_VALUE) == BIG_VALUE else "!")
    return "|".join(parts).encode()


def _resolve(ctx: Ctx) -> bytes:
    awakeable_id, text = json.loads(ctx.input)
    ctx.complete_awakeable(awakeable_id, text.upper().encode())
    return b"ok"


def _flaky(ctx: Ctx) -> bytes:
    """`[mode, times, delay_ms]`: a run, then `times` failing attempts as `mode` says (`FAILURE_MODES`,
    or `run-error`: a run whose closure fails), then another run."""
    mode, times, delay_ms = json.loads(ctx.input)
    first = ctx.run("before", lambda: b"A")
    if mode == "run-error":
        return first + ctx.flaky_run("flaky", times, b"B")
    ctx.fail_point(mode, times, delay_ms)
    return first + ctx.run("after", lambda: b"B")


FLAKY_POLICY = RetryPolicy(initial_interval_ms=100, exponentiation_factor=2.0, max_interval_ms=1_000, max_attempts=4)
"""The retry policy of `Flaky/main` (on max attempts: pause); `Flaky/doomed` kills instead."""


def _flaky_options(on_max: str) -> dict[str, Any]:
    return {
        "retryPolicyInitialInterval": FLAKY_POLICY.initial_interval_ms,
        "retryPolicyExponentiationFactor": FLAKY_POLICY.exponentiation_factor,
        "retryPolicyMaxInterval": FLAKY_POLICY.max_interval_ms,
        "retryPolicyMaxAttempts": FLAKY_POLICY.max_attempts,
        "retryPolicyOnMaxAttempts": on_max.upper(),
    }


FLAKY_OPTIONS = {"Flaky": {"main": _flaky_options("pause"), "doomed": _flaky_options("kill")}}


def _signal_waiter(ctx: Ctx) -> bytes:
    """`[awaits, delay_ms, sleep_ms]`: send `Signaller/signal` (delayed by `delay_ms`), which sends
    this invocation the signal `go` twice (values 1 then 2); sleep `sleep_ms` (0: not at all), so
    the signals may arrive before the await; then await `go` `awaits` times."""
    awaits, delay_ms, sleep_ms = json.loads(ctx.input)
    ctx.send("Signaller", "signal", json.dumps([ctx.invocation_id, "go"]).encode(), delay_ms=delay_ms, name="s")
    if sleep_ms:
        ctx.sleep("z", sleep_ms)
    return b",".join(ctx.await_named("go") for _ in range(awaits))


def _signaller(ctx: Ctx) -> bytes:
    target, name = json.loads(ctx.input)
    ctx.send_signal(target, name, b"1")
    ctx.send_signal(target, name, b"2")
    return b"ok"


def _workflow_run(ctx: Ctx) -> bytes:
    value = ctx.promise("p")
    return ctx.run("wf", lambda: value.upper())


def _workflow_signal(ctx: Ctx) -> bytes:
    return b"ok" if ctx.resolve_promise("p", ctx.input) else b"late"


def _limited_work(ctx: Ctx) -> bytes:
    """A handler under a concurrency limit: a run, a sleep of `input` ms, a run."""
    ctx.run("before", lambda: b"a")
    ctx.sleep("nap", int(ctx.input or b"0"))
    ctx.run("after", lambda: b"b")
    return b"done"


_workflow_run.handler_type = "WORKFLOW"  # type: ignore[attr-defined]
_workflow_signal.handler_type = "SHARED"  # type: ignore[attr-defined]

SERVICES = {
    "Wf": ("WORKFLOW", {"run": _workflow_run, "signal": _workflow_signal}),
    "Counter": ("VIRTUAL_OBJECT", {"add": _counter_add}),
    "Echo": ("SERVICE", {"echo": _echo}),
    "Flow": ("SERVICE", {"main": _flow}),
    "Resolver": ("SERVICE", {"resolve": _resolve}),
    "Flaky": ("SERVICE", {"main": _flaky, "doomed": _flaky}),
    "Limited": ("SERVICE", {"work": _limited_work}),
    "Waiter": ("SERVICE", {"main": _signal_waiter}),
    "Signaller": ("SERVICE", {"signal": _signaller}),
}


BIG_VALUE = bytes(range(256)) * 4096
"""The result of a `big` step's run: 1 MiB, more than a DynamoDB item holds (but less than a message)."""


def expected_flow(steps: list[list[Any]]) -> bytes:
    """The reference model of `Flow/main`: its output for `steps`."""
    parts = []
    for step in steps:
        parts.append(
            {
                "run": lambda s: s[1],
                "sleep": lambda s: "z",
                "call": lambda s: s[1].upper(),
                "add": lambda s: "+",
                "awake": lambda s: s[1].upper(),
                "big": lambda s: "b",
            }.get(step[0], lambda s: "s")(step)
        )
    return "|".join(parts).encode()


@dataclass
class Request:
    """One client request: target, body, idempotency key, when it is sent; what the model expects."""

    service: str
    handler: str
    key: str
    body: bytes
    idempotency_key: str
    at_ms: int
    expected: bytes | None  # None: not checked by value (a counter's output depends on the order)
    adds: list[tuple[str, int]]  # (key, delta) it adds to counters, directly or through calls and sends
    invocation_id: str = ""
    too_large: bool = False  # a run result over the message limit: it must fail with 413
    op: tuple[str, int] | None = None  # ("kill" | "cancel" | "pause", when): what the client does to it
    ops_done: list[str] = field(default_factory=list)  # the operations sent (they may have taken effect)
    allowed: set[str] | None = None  # the completions the model allows, if not "succeeded" (or 413's "failed")
    flaky: tuple[str, int, int] | None = None  # Flaky/*: (mode, times, next_retry_delay ms)
    attaches: int = 0  # attaches sent and not answered yet
    attached: list[tuple[int, bytes]] = field(default_factory=list)  # what each attach got: (status, body)
    purge_at: int = 0  # when the client purges it once completed (0: never)
    resend: bool = False  # the client sends it again after the purge: a new invocation
    purged_at: int = 0  # when a purge of it returned (0: not purged)


def workload(rng: random.Random) -> list[Request]:
    """The requests of a scenario, chosen by `rng`."""
    keys = ["a", "b"][: rng.randint(1, 2)]
    requests: list[Request] = []
    for i in range(rng.randint(3, 8)):
        at = START_MS + rng.randint(0, 20_000)
        if rng.random() < 0.4:
            delta = rng.randint(1, 9)
            key = rng.choice(keys)
            requests.append(Request("Counter", "add", key, str(delta).encode(), f"r{i}", at, None, [(key, delta)]))
            continue
        steps: list[list[Any]] = []
        adds = []
        for j in range(rng.randint(1, 5)):
            op = rng.choice(["run", "run", "sleep", "call", "add", "send", "awake"])
            if op == "run":
                steps.append(["run", f"v{i}.{j}"])
            elif op == "awake":
                steps.append(["awake", f"w{i}.{j}"])
            elif op == "sleep":  # every other 10 ms one is zero-length: due when issued (no extra draw: seeds keep)
                ms = rng.choice([10, 1_000, 60_000, 600_000])
                steps.append(["sleep", 0 if ms == 10 and j % 2 else ms])
            elif op == "call":
                steps.append(["call", f"hi{i}.{j}"])
            else:
                key, delta = rng.choice(keys), rng.randint(1, 9)
                adds.append((key, delta))
                steps.append(["add", key, delta] if op == "add" else ["send", key, delta, rng.choice([0, 5_000])])
        if rng.random() < 0.03:  # a run result above an item's 400 KB
            steps.insert(rng.randint(0, len(steps)), ["big"])
        body = json.dumps(steps).encode()
        request = Request("Flow", "main", "", body, f"r{i}", at, expected_flow(steps), adds)
        requests.append(request)
    for n in range(rng.choice([0, 0, 1, 2])):  # workflows: the run waits for a promise a signal completes
        text = f"p{n}"
        run_at, signal_at = START_MS + rng.randint(0, 20_000), START_MS + rng.randint(0, 40_000)
        requests.append(Request("Wf", "run", f"w{n}", b"", f"wr{n}", run_at, text.upper().encode(), []))
        requests.append(Request("Wf", "signal", f"w{n}", text.encode(), f"ws{n}", signal_at, b"ok", []))
    for request in requests:
        if rng.random() < 0.15 and request.handler != "signal":  # a signal that never ran would leave its run waiting
            soon = rng.random() < 0.5  # while it runs or waits for its key, or any time later
            request.op = (
                rng.choice(["kill", "cancel", "pause"]),
                request.at_ms + rng.randint(0, 2_000 if soon else 120_000),
            )
    return requests


def limited_requests(rng: random.Random) -> tuple[int, list[Request]]:
    """`(N, requests)`: a concurrency limit of N on `Limited` and requests to `Limited/work` that
    contend for its slots (none in a third of the seeds); some are killed, cancelled or paused."""
    if rng.random() < 0.33:
        return 0, []
    limit = rng.choice([1, 2, 3])
    requests = []
    for n in range(rng.randint(limit + 1, limit + 5)):
        at = START_MS + rng.randint(0, 10_000)
        body = str(rng.choice([0, 100, 5_000, 60_000])).encode()
        request = Request("Limited", "work", "", body, f"l{n}", at, b"done", [])
        if rng.random() < 0.2:
            request.op = (rng.choice(["kill", "cancel", "pause"]), at + rng.randint(0, 60_000))
        requests.append(request)
    return limit, requests


def flaky_requests(rng: random.Random) -> list[Request]:
    """Requests to `Flaky`: attempts that fail as a `FAILURE_MODES` mode (or a failing run) says,
    `times` in a row; at `FLAKY_POLICY.max_attempts` failures `Flaky/main` pauses (an operator
    resumes it), `Flaky/doomed` is killed."""
    requests = []
    for n in range(rng.choice([0, 0, 1, 1, 2])):
        mode = rng.choice([*FAILURE_MODES, "run-error"])
        times = 1_000 if mode == "terminal" else rng.choice([1, 2, 3, 6])  # terminal: every attempt
        handler = "doomed" if rng.random() < 0.3 else "main"
        body = json.dumps([mode, times, rng.choice([10, 3_000])]).encode()
        if mode == "terminal":
            allowed, expected = {"failed"}, None
        elif handler == "doomed" and times >= FLAKY_POLICY.max_attempts:
            allowed, expected = {"killed", "succeeded"}, b"AB"  # succeeded: a crash lost a failure's record
        else:
            allowed, expected = {"succeeded"}, b"AB"
        at = START_MS + rng.randint(0, 20_000)
        request = Request("Flaky", handler, "", body, f"f{n}", at, expected, [], allowed=allowed)
        request.flaky = (mode, times, json.loads(body)[2])
        requests.append(request)
    return requests


def signal_requests(rng: random.Random) -> list[Request]:
    """Requests to `Waiter/main`: named signals sent before or after the await, twice, awaited once
    (the first one's value) or twice (both, in the order sent)."""
    requests = []
    for n in range(rng.choice([0, 1, 1, 2])):
        awaits = rng.choice([1, 2])
        body = json.dumps([awaits, rng.choice([0, 0, 5_000]), rng.choice([0, 0, 10_000])]).encode()
        expected = b"1,2" if awaits == 2 else b"1"
        requests.append(Request("Waiter", "main", "", body, f"g{n}", START_MS + rng.randint(0, 20_000), expected, []))
    return requests


@dataclass
class SimSchedule:
    """A schedule of the workload: `Counter/add` of 1 to key `t` every `every_ms`; the client creates
    it, may pause and resume it, and deletes it. Times are when each operation was first sent and
    when it returned (it takes effect in between), and the ticks delivered (`(at, due)`)."""

    name: str
    every_ms: int
    ops: list[tuple[str, int]]  # (op, when): create, [pause, resume,] delete
    sent: dict[str, int] = field(default_factory=dict)
    returned: dict[str, int] = field(default_factory=dict)
    deliveries: list[tuple[int, int]] = field(default_factory=list)
    late: tuple[int, int] | None = None  # (at, due): a tick's timer armed before the pause, delivered after the resume

    def active(self, at_ms: int, margin_ms: int = 0) -> bool:
        """True if the schedule surely runs at `at_ms` (`margin_ms` clear of any change)."""
        if "create" not in self.returned or at_ms < self.returned["create"] + margin_ms:
            return False
        if at_ms + margin_ms >= self.sent.get("delete", 1 << 62):
            return False
        if "pause" in self.sent and at_ms + margin_ms >= self.sent["pause"]:
            return "resume" in self.returned and at_ms >= self.returned["resume"] + margin_ms
        return True

    def active_over(self, start_ms: int, end_ms: int) -> bool:
        """True if the schedule surely runs from `start_ms` to `end_ms`, not paused in between."""
        pause = self.sent.get("pause", 0)
        return self.active(start_ms) and self.active(end_ms) and not start_ms <= pause <= end_ms

    def paused(self, at_ms: int) -> bool:
        """True if the schedule is surely paused (or deleted) at `at_ms`."""
        if "delete" in self.returned and at_ms > self.returned["delete"]:
            return True
        return self.in_pause(at_ms)

    def in_pause(self, at_ms: int) -> bool:
        """True if `at_ms` surely falls while the schedule was paused: after the pause returned and
        before the resume was sent (a deletion is not a pause: see `paused`)."""
        if "pause" not in self.returned or at_ms <= self.returned["pause"]:
            return False
        return at_ms < self.sent.get("resume", 1 << 62)


@dataclass
class SimMessages:
    """An SQS FIFO queue's messages of one group, subscribed to `Counter/add` on key `s` (the group
    id): message `i` (id `m{i}`, body its delta) is delivered once message `i - 1` was (the queue's
    order), and some are delivered again later (a redelivery). Each must invoke once, in order."""

    deltas: list[int]
    subscription: Any = None  # the SubscriptionRecord, created before the scenario runs
    delivered: dict[int, int] = field(default_factory=dict)  # index -> deliveries that returned


SIM_SOURCE = "sqs://sim.fifo"


def messages(rng: random.Random) -> SimMessages | None:
    """The subscribed queue's messages of a scenario (a quarter of them have some), chosen by `rng`."""
    if rng.random() < 0.75:
        return None
    return SimMessages([rng.randint(1, 9) for _ in range(rng.randint(2, 5))])


def schedules(rng: random.Random) -> list[SimSchedule]:
    """The schedules of a scenario (at most one), chosen by `rng`."""
    if rng.random() < 0.8:
        return []
    every = rng.choice([60_000, 120_000, 180_000])
    created = START_MS + rng.randint(0, 20_000)
    ops = [("create", created)]
    end = created + rng.randint(4, 10) * 60_000
    if rng.random() < 0.5:
        pause = created + rng.randint(60_000, 300_000)
        ops += [("pause", pause), ("resume", pause + rng.randint(10_000, 300_000))]
        end = max(end, ops[-1][1] + rng.randint(60_000, 300_000))
    return [SimSchedule(f"tick{rng.randint(0, 99)}", every, [*ops, ("delete", end)])]


def pause_across_tick(rng: random.Random, schedule: SimSchedule) -> None:
    """Half of the schedules without a pause (chosen by `rng`, a generator of its own: the other draws
    stay) are paused a little before a tick is due and resumed a little after it, and that tick's
    timer, armed before the pause, is delivered again after the resume and before the next tick (a
    late delivery of the trigger): the tick fell while the schedule was paused, so it must not run
    (docs/guide.md, "Durable schedules"; the guard "a tick a pause skipped" of `Schedules.tick`)."""
    if any(op == "pause" for op, _ in schedule.ops) or rng.random() < 0.5:
        return
    created = schedule.ops[0][1]
    due = Cadence(every_ms=schedule.every_ms).next_after(created + rng.randint(30_000, 200_000))
    pause, resume = due - rng.randint(1_000, 20_000), due + rng.randint(1_000, 30_000)
    schedule.late = (resume + rng.randint(1_000, 20_000), due)  # before the next tick (every >= 60 s)
    end = max(schedule.ops[-1][1], schedule.late[0] + rng.randint(60_000, 300_000))
    schedule.ops = [schedule.ops[0], ("pause", pause), ("resume", resume), ("delete", end)]


def extras(rng: random.Random, requests: list[Request]) -> None:
    """Attaches and purges for some of `requests` (by idempotency key or id, before or after they
    complete; a purged request may be sent again)."""
    for request in requests:
        if request.service == "Wf" and request.handler == "signal":
            continue
        if rng.random() < 0.2:
            request.attaches = rng.randint(1, 2)
        if request.service != "Wf" and rng.random() < 0.15:
            request.purge_at = request.at_ms + rng.randint(60_000, 600_000)  # after a second send (30 s)
            request.resend = rng.random() < 0.5 and _resend_is_modelled(request)


RESEND_WITH_CALLS = True
"""Whether a purged request whose handler calls, sends or makes awakeables may be sent again. The
invocation sent again has the purged one's id (its idempotency key's); its callees' ids are derived
with its own `callee_seed`, so they are new invocations, not the purged one's (which still exist).
Before the seed, a call got the old callee's result and a one-way call was taken as sent already and
never ran (found by the simulator: seeds 0 and 32, regression seeds in tests/unit/test_simulator.py)."""


def _resend_is_modelled(request: Request) -> bool:
    """A purged request sent again runs again: its runs and calls as new (`Counter/add` adds again)."""
    if RESEND_WITH_CALLS or request.service != "Flow":
        return True
    return all(step[0] in ("run", "sleep", "big") for step in json.loads(request.body))


_ENDS = {"kill": "killed", "cancel": "cancelled"}  # how an operation may end an invocation


def _delta(record: InvocationRecord) -> int:
    """The delta a `Counter/add` invocation was asked to add (its input)."""
    (entry,) = decode_frames(record.input_entry)
    return int(pb.InputCommandMessage.FromString(entry.payload).value.content or b"1")


# --- one scenario ---------------------------------------------------------------------------------


def _tick_without_pause_guard(tick: Callable[..., str | None]) -> Callable[..., str | None]:
    """`Schedules.tick` without its guard "a tick a pause skipped" (`last_tick_ms < tick <
    next_tick_ms`): it reads the schedule with `last_tick_ms` at `next_tick_ms`, so no tick is
    between the two (the store's own record, and its conditional writes, stay as they are)."""

    def without_guard(self: Schedules, name: str, scheduled_ms: int = 0) -> str | None:
        store = self.store

        class View:
            def __getattr__(self, attribute: str) -> Any:
                return getattr(store, attribute)

            def get_schedule(self, name: str) -> Any:
                record = store.get_schedule(name)
                return None if record is None else dataclasses.replace(record, last_tick_ms=record.next_tick_ms)

        self.store = View()  # type: ignore[assignment]
        try:
            return tick(self, name, scheduled_ms)
        finally:
            self.store = store

    return without_guard


@contextlib.contextmanager
def _mutant_effects(mutant: str | None) -> Iterator[None]:
    """Install the `ignore-effect-failure` mutant on `Effects.apply` (or `retry-forever` on
    `RetryPolicy.exhausted`) for the block."""
    if mutant == "retry-forever":
        exhausted = RetryPolicy.exhausted
        RetryPolicy.exhausted = lambda self, attempts: False  # type: ignore[method-assign]
        try:
            yield
        finally:
            RetryPolicy.exhausted = exhausted  # type: ignore[method-assign]
        return
    if mutant == "ignore-limit":  # the store's admission rule lets every newcomer take a slot
        with unittest.mock.patch("adapters.local.sqlite_keyed.slot_free", lambda held, limit, waiting: True):
            yield
        return
    if mutant == "keep-slot":  # a slot is never given back
        with unittest.mock.patch.object(SQLiteStore, "release_slot", lambda self, scope, key, invocation_id: None):
            yield
        return
    if mutant == "run-paused-tick":
        with unittest.mock.patch.object(Schedules, "tick", _tick_without_pause_guard(Schedules.tick)):
            yield
        return
    if mutant != "ignore-effect-failure":
        yield
        return
    original = Effects.apply

    def apply(self: Effects, held: Held, start: int) -> None:
        try:
            original(self, held, start)
        except StoreConflict:
            raise
        except Exception:  # noqa: BLE001  # the mutant: a failed effect write is dropped, counted as applied
            held.applied_upto = len(held.journal)

    Effects.apply = apply  # type: ignore[method-assign]
    try:
        yield
    finally:
        Effects.apply = original  # type: ignore[method-assign]


class Scenario:
    """One seed's run: build, drive, check. `violations` lists what went wrong, for people."""

    def __init__(self, seed: int, mutant: str | None = None, store: str = "sqlite") -> None:
        self.seed = seed
        self.mutant = mutant
        self.rng = random.Random(seed)
        self.violations: list[str] = []
        self.clock = VirtualClock()
        faults = self.rng.random() < 0.9  # a tenth of the seeds run without faults (the reference run)
        self.scheduler = VirtualScheduler(self.clock, self.rng, faults)
        self.calls = 0  # store calls made while faults are armed
        self.effect_writes = 0
        self.crash_at = (
            set(self.rng.sample(range(1, self.rng.choice([300, 1000])), self.rng.choice([0, 1, 2, 3])))
            if faults
            else set()
        )
        self.race_at = (
            set(self.rng.sample(range(1, self.rng.choice([300, 1000])), self.rng.choice([0, 1, 2])))
            if faults
            else set()
        )
        self.fail_effect_at = set(self.rng.sample(range(1, 40), self.rng.choice([0, 1, 2]))) if faults else set()
        self.armed = False  # faults only while the loop drives the control plane
        self.current = ""  # the invocation the loop is advancing (what a concurrent executor takes)
        self.crashes = 0
        self.races = 0
        self.committed_runs: set[tuple[str, int]] = set()
        self.run_executions: dict[tuple[str, int], int] = {}
        self.trace: list[str] = []  # what happened, in order, for `--trace`
        self.zombie_runs = 0  # runs executed again by an executor whose lease was taken over
        self.lazy_keys = 0  # keys left held by a completed invocation (released by the next arrival)
        self.brng = random.Random(seed * 15_485_863 + 5)  # the blob store's faults (other draws unchanged)
        self.crash_after_write = False  # a crash due after the store call under way (its values spilled)
        self.blob_get_failures = 0
        self.raw: Any = SQLiteStore(":memory:") if store == "sqlite" else _dynamodb_store()  # read without faults
        if getattr(self.raw, "blobs", None) is not None:
            self.raw.blobs.sim = self
        self.store = SimStore(self.raw, self)
        self.xrng = random.Random(seed * 1_000_003 + 7)  # the newer parts of the workload: the older parts stay
        self.bidi = self.xrng.random() < BIDI_SHARE
        self.deployment = (BidiDeployment if self.bidi else SimDeployment)(SERVICES, self.clock, self.on_run)
        self.deployment.options = FLAKY_OPTIONS
        self.deployment.on_attempt = self.on_attempt
        self.flaky: dict[str, Request] = {}  # invocation id -> its Flaky request
        self.retry_due: dict[str, int] = {}  # a backing-off Flaky invocation -> when it may be retried
        self.resuming: set[str] = set()  # Flaky invocations paused by their policy, an operator resume on its way
        self.schedules: list[SimSchedule] = []
        self.erng = random.Random(seed * 7_919 + 13)  # the subscribed queue's messages (other draws unchanged)
        self.messages: SimMessages | None = None
        self.covered: collections.Counter[str] = collections.Counter()  # what the newer parts exercised
        self.purged_adds: list[InvocationRecord] = []  # Counter/add invocations purged (the counters' checks)
        self.settings = Settings()
        self.plane = self.new_plane()
        self.restarts: list[tuple[str, tuple[Any, ...], Request]] = []  # (old id, its outcome then, the new one)
        self.copied: dict[str, int] = {}  # a restarted invocation -> the journal length it started with
        self.limit = 0  # the concurrency limit of `Limited` (0: none in this scenario)
        self.handler_limit = 0  # the concurrency limit of `Limited/work` as well (0: none)
        self.limited: set[str] = set()  # invocations of `Limited/work`
        self.limited_started: set[str] = set()  # those that had an attempt
        self.limited_place: dict[str, str] = {}  # each one's inbox_seq as last seen (cleared once it holds a slot)
        self.rate = 0.0  # starts per second of `Limited` (0: no rate limit)
        self.reserved: list[int] = []  # the starts reserved on `Limited`'s rate limit (some wasted: a resend)
        self.not_before: dict[str, int] = {}  # a `Limited` invocation -> its reserved start, when seen created

    def new_plane(self) -> ControlPlane:
        """A control plane as a (re)started process builds it, over the scenario's store."""
        return ControlPlane(
            self.store,  # type: ignore[arg-type]
            self.deployment,
            self.scheduler,
            clock=self.clock,
            settings=self.settings,
            facts=SimFacts(self.raw, self),
        )

    # --- hooks ---

    def before_store_call(self, name: str) -> None:
        """Called before every store call: the fault points."""
        if not self.armed:
            return
        self.calls += 1
        if self.calls in self.crash_at:
            self.crashes += 1
            self.note(f"CRASH before store call {self.calls} ({name})")
            raise SimulatedCrash(f"crash before store call {self.calls} ({name})")
        if name in _EFFECT_WRITES and self.current:
            self.effect_writes += 1
            if self.effect_writes in self.fail_effect_at:
                self.note(f"FAIL effect write {name} (store call {self.calls})")
                raise SimulatedWriteFailure(f"{name} failed (effect write {self.effect_writes})")
        if self.calls in self.race_at and self.current:
            self.concurrent_executor(self.current)

    def concurrent_executor(self, invocation_id: str) -> None:
        """Another process takes over `invocation_id` now: its lease expires (the clock jumps past
        it) and a second control plane advances it, without faults, before this call goes on."""
        self.races += 1
        self.note(f"RACE: another executor advances {invocation_id} (store call {self.calls})")
        self.armed = False
        try:
            self.clock.now += self.settings.lease_ms + 1
            other = self.new_plane()
            other.advance(invocation_id)
        finally:
            self.armed = True

    def committed(self, invocation_id: str, batch: Any) -> None:
        """A journal batch was stored: remember the run results in it."""
        for f in decode_frames(batch.entries):
            if f.type == MessageType.RunCompletion:
                cid = pb.RunCompletionNotificationMessage.FromString(f.payload).completion_id
                self.committed_runs.add((invocation_id, cid))

    def on_run(self, invocation_id: str, completion_id: int, name: str, epoch: int) -> None:
        """A run's closure executed in an attempt of `epoch`: never after its result was committed,
        unless by a zombie (an executor whose lease expired and was taken over: `zombie_runs`)."""
        key = (invocation_id, completion_id)
        self.run_executions[key] = self.run_executions.get(key, 0) + 1
        if key not in self.committed_runs:
            return
        current = self.raw.get_invocation(invocation_id)
        if current is not None and current.epoch != epoch:
            self.zombie_runs += 1  # the lease is gone: its commit will be refused
            return
        self.violate(
            f"run {name!r} (completion {completion_id}) of {invocation_id} executed again by the lease holder "
            f"(epoch {epoch}) after its result was committed"
        )

    def on_attempt(self, invocation_id: str, headers: Any) -> None:
        """An attempt reached the deployment: a Flaky invocation's retry never comes before its
        backoff ended (unless the client acted on it: a resume, a cancel, a kill)."""
        self.covered["bidirectional attempt" if self.bidi else "request/response attempt"] += 1
        if invocation_id in self.limited:
            self.check_limit(invocation_id)
        due = self.retry_due.pop(invocation_id, None)
        request = self.flaky.get(invocation_id)
        if due is not None and request is not None and self.clock.now < due and not request.ops_done:
            self.violate(
                f"{invocation_id} ({request.handler} {request.body.decode()}) was retried at "
                f"{(self.clock.now - START_MS) / 1000} s, before its backoff ended at {(due - START_MS) / 1000} s"
            )

    def limited_pools(self) -> list[tuple[str, int]]:
        """`(pool scope, N)` of the concurrency limits `Limited/work` counts against in this scenario."""
        pools = [(pool_scope("Limited"), self.limit)] if self.limit else []
        return pools + ([(pool_scope("Limited", "work"), self.handler_limit)] if self.handler_limit else [])

    def check_limit(self, invocation_id: str) -> None:
        """An attempt of a `Limited` invocation: at most `limit` of them have started and not completed
        (each holds a slot from its first attempt to its end); and, without crashes or races (a crash
        between creating one and queueing it lets later ones pass it, as with a key), none that
        arrived before it still waits `pending` when it starts."""
        first = invocation_id not in self.limited_started
        self.limited_started.add(invocation_id)
        if first and self.clock.now < self.not_before.get(invocation_id, 0):
            self.violate(f"{invocation_id} started at {self.clock.now}, before its reserved start {self.not_before[invocation_id]}")
        records = {i: self.raw.get_invocation(i) for i in self.limited}
        active = sorted(i for i in self.limited_started if (r := records[i]) is not None and r.status != "completed")
        most = min(self.limit, self.handler_limit or self.limit)
        if len(active) > most:
            self.violate(f"{len(active)} Limited invocations run at once, the limit is {most}: {active}")
        for pool, n in self.limited_pools():
            holders = self.raw.slot_status(pool, "")[0]
            if len(holders) > n:
                self.violate(f"{len(holders)} hold a slot of {pool}, its limit is {n}: {sorted(holders)}")
        self.covered["limited attempt"] += 1
        if self.handler_limit:
            self.covered["limited attempt: two pools"] += 1
        me = records[invocation_id]
        if not first or me is None or self.crashes or self.races:
            return
        for i, r in records.items():
            if r is not None and r.inbox_seq:
                self.limited_place[i] = r.inbox_seq
        # Its own place as the engine recorded it (creation time, then this process's creation order,
        # then the id: `creation.inbox_seq`); recomputing it would draw a later creation order and put
        # it behind one created after it in the same millisecond. Never seen (it took a slot at once):
        # only those created in an earlier millisecond surely arrived before it.
        place = self.limited_place.get(invocation_id) or f"{me.created_at_ms:013d}"
        for other, record in records.items():
            if record is not None and record.status == "pending" and record.inbox_seq and record.inbox_seq < place:
                self.violate(f"{invocation_id} started before {other}, which arrived earlier and still waits")

    def observe_flaky(self, invocation_id: str) -> None:
        """A Flaky invocation's failures stay visible and follow `FLAKY_POLICY`: backing off, it shows
        its last failure and retries at `at_ms + delay_ms(failures in a row, next_retry_delay)`, with
        fewer failures in a row than the policy's attempts; paused, it shows why (the policy's attempts
        spent, or the PAUSE behaviour), and an operator resumes it."""
        request = self.flaky[invocation_id]
        record = self.raw.get_invocation(invocation_id)
        if record is None or record.status not in ("backing-off", "paused"):
            return
        failure = record.last_failure or {}
        what = f"{invocation_id} ({request.handler} {request.body.decode()}) {record.status}"
        if not failure.get("message"):
            self.violate(f"{what} without its last failure (invisible)")
        if record.status == "backing-off":
            delay = (
                request.flaky[2] if request.flaky and failure.get("message") == FAIL_MESSAGE + "error-delay" else None
            )
            want = int(failure.get("at_ms", 0)) + FLAKY_POLICY.delay_ms(record.failures_in_a_row, delay)
            if record.next_retry_at_ms != want:
                self.violate(
                    f"{what} after {record.failures_in_a_row} failures in a row retries at {record.next_retry_at_ms}, "
                    f"the policy says {want}"
                )
            if record.failures_in_a_row >= FLAKY_POLICY.max_attempts:
                self.violate(
                    f"{what} after {record.failures_in_a_row} failures in a row: "
                    f"the policy allows {FLAKY_POLICY.max_attempts}"
                )
            self.retry_due[invocation_id] = record.next_retry_at_ms
            self.covered["backing off"] += 1
            return
        if invocation_id in self.resuming:
            return
        by_policy = record.failures_in_a_row >= FLAKY_POLICY.max_attempts
        if not by_policy and failure.get("message") != FAIL_MESSAGE + "error-pause" and "pause" not in request.ops_done:
            self.violate(
                f"{what} after {record.failures_in_a_row} failures in a row ({failure.get('message')}): "
                "its policy does not pause it yet"
            )
        self.covered["paused by its policy" if by_policy else "paused"] += 1
        self.resuming.add(invocation_id)
        self.scheduler.push(self.clock.now + self.xrng.randint(1_000, 60_000), "op", (request, "resume"))

    def note(self, what: str) -> None:
        """Add a line to the trace, with the virtual time (s since the start)."""
        self.trace.append(f"{(self.clock.now - START_MS) / 1000:10.3f} {what}")

    def violate(self, what: str) -> None:
        """Record a violation (once per text)."""
        if what not in self.violations:
            self.violations.append(what)

    # --- driving ---

    def step(self, event: _Event) -> None:
        """Carry out one event of the heap."""
        self.current = event.target if event.kind in ("now", "timer", "late_tick") else ""
        self.step_once(event)
        if event.kind in ("now", "timer", "late_tick"):
            name = schedule_of_wake_id(event.target)
            schedule = next((s for s in self.schedules if s.name == name), None)
            if schedule is not None:
                self.covered["tick delivered"] += 1
                schedule.deliveries.append((self.clock.now, event.arg if event.kind != "now" else 0))
            if event.target in self.flaky:
                self.observe_flaky(event.target)
        if event.kind == "sweep_due":  # an operator's look at the Flaky invocations
            for invocation_id in list(self.flaky):
                self.observe_flaky(invocation_id)

    def step_once(self, event: _Event) -> None:
        """`step` without what it observes after."""
        if event.kind == "now":
            self.note(f"advance {event.target}")
            self.note(f"  -> {self.plane.advance(event.target)}")
        elif event.kind in ("timer", "late_tick"):  # a late tick: the trigger's own delivery (no crash forgets it)
            self.note(f"timer {event.target} due {(event.arg - START_MS) / 1000}")
            self.note(f"  -> {self.plane.wake(Wake.at(event.target, event.arg))}")
        elif event.kind == "attach":
            self.attach(*event.target)
        elif event.kind == "purge":
            self.purge(event.target)
        elif event.kind == "schedule":
            self.schedule_op(*event.target)
        elif event.kind == "submit":
            self.submit(event.target)
        elif event.kind == "op":
            self.operate(*event.target)
        elif event.kind == "restart":
            self.restart(*event.target)
        elif event.kind == "message":
            self.deliver_message(*event.target)
        elif event.kind == "sweep_due":
            self.note("sweep_due")
            self.scheduler.push(self.clock.now + _SWEEP_DUE_EVERY_MS, "sweep_due")  # first: it may crash
            self.plane.sweep_due()
        elif event.kind == "sweep":
            self.note("sweep")
            self.scheduler.push(self.clock.now + _SWEEP_EVERY_MS, "sweep")
            self.plane.sweep()
        elif event.kind == "startup":
            self.note("start-up sweep of a new process")
            self.plane.sweep()

    def submit(self, request: Request) -> None:
        """The client sends `request` (with its idempotency key; again after a crash)."""
        self.note(
            f"submit {request.service}/{request.key}/{request.handler} {request.body!r} {request.idempotency_key}"
        )
        try:
            record = self.plane.engine.create(
                request.service,
                request.handler,
                request.body,
                {},
                key=request.key,
                leased=False,
                idempotency_key=request.idempotency_key,
            )
            request.invocation_id = record.invocation_id
            self.note(f"  -> {record.invocation_id}")
            if request.flaky is not None:
                self.flaky[record.invocation_id] = request
                self.covered[f"flaky {request.flaky[0]}"] += 1
            if request.service == "Limited":
                self.limited.add(record.invocation_id)
                self.not_before[record.invocation_id] = record.execution_time_ms or record.created_at_ms
                self.covered["limited: queued" if record.status == "pending" else "limited: took a slot"] += 1
            if request.purged_at:
                self.covered["sent again after its purge"] += 1
            if b'["sleep", 0]' in request.body:
                self.covered["zero-length sleep"] += 1
        except StoreConflict:  # sent before: the same invocation
            engine = self.plane.engine
            if request.service == "Wf" and request.handler == "run":
                request.invocation_id = engine.workflow_run_id(request.service, request.key)
            else:
                request.invocation_id = engine.idempotent_invocation_id(
                    request.service, request.handler, request.key, request.idempotency_key
                )
            if request.flaky is not None:
                self.flaky[request.invocation_id] = request
            if request.service == "Limited":
                self.limited.add(request.invocation_id)

    def plan_restarts(self, requests: list[Request]) -> None:
        """The client restarts some completed `Flow/main` invocations as new, once they completed (after
        a crash it sends the restart again): from 0, or from a prefix of their journal (`from` is that
        fraction of the journal). Only flows of runs, sleeps and calls: a restarted one's output is
        then the model's (`expected_flow`) again; adds would add again, and an awakeable copied in a
        prefix names the old invocation. Drawn from a generator of its own: the other draws stay."""
        rng = random.Random(self.seed * 7_919 + 13)
        for request in list(requests):
            plain = request.service == "Flow" and all(s[0] in ("run", "sleep", "call") for s in json.loads(request.body))
            if not plain or request.op or request.purge_at or request.too_large or rng.random() >= 0.3:
                continue
            fraction = 0.0 if rng.random() < 0.4 else rng.random()
            self.scheduler.push(request.at_ms + rng.randint(30_000, 600_000), "restart", (request, fraction, requests))

    def restart(self, request: Request, fraction: float, requests: list[Request]) -> None:
        """Restart `request`'s invocation as new from `fraction` of its journal (`Engine.restart_as_new`),
        once it completed (else again a minute later); the new invocation joins `requests`, expected
        to end as the model says, and the old one's outcome is kept to be compared (`check_restarts`)."""
        old = self.raw.load_invocation(request.invocation_id) if request.invocation_id else None
        if old is None or old.record.status != "completed":
            self.scheduler.push(self.clock.now + 60_000, "restart", (request, fraction, requests))
            return
        length = len(Journal.load(old.record.input_entry, old.batches))
        copy_upto = min(int(fraction * length), length - 1)
        self.note(f"restart-as-new {request.invocation_id} from {copy_upto}")
        try:
            new_id = self.plane.engine.restart_as_new(request.invocation_id, copy_upto, "keep" if copy_upto else None)
        except BadRequest:  # a prefix with a command whose completion never came: refused, nothing created
            self.covered["restart as new refused (prefix)"] += 1
            return
        self.note(f"  -> {new_id}")
        created = self.raw.get_invocation(new_id)
        self.copied[new_id] = created.journal_length if created is not None else 0
        self.covered["restart as new from a prefix" if copy_upto else "restart as new from 0"] += 1
        r = old.record
        again = Request(request.service, request.handler, "", request.body, "", self.clock.now, request.expected, [])
        again.invocation_id = new_id
        requests.append(again)
        self.restarts.append((r.invocation_id, (r.status, r.completion, r.output, r.failure, r.epoch), again))

    def check_restarts(self) -> None:
        """An invocation restarted as new is as it was (the new one was checked with the others)."""
        for old_id, outcome, _again in self.restarts:
            record = self.raw.get_invocation(old_id)
            now = None if record is None else (record.status, record.completion, record.output, record.failure, record.epoch)
            if now != outcome:
                self.violate(f"{old_id} changed after its restart as new: {outcome} -> {now}")

    def operate(self, request: Request, op: str) -> None:
        """The client kills, cancels, pauses or resumes `request`'s invocation (again after a crash)."""
        if not request.invocation_id:  # not accepted yet: later
            self.scheduler.push(self.clock.now + 5_000, "op", (request, op))
            return
        self.note(f"{op} {request.invocation_id}")
        operations = self.plane.engine.operations
        request.ops_done.append(op)  # sent: it may take effect even if this process dies before it answers
        try:
            if op == "kill":
                operations.kill(request.invocation_id)
            elif op == "cancel":
                operations.cancel(request.invocation_id)
            elif op == "pause":
                operations.pause(request.invocation_id)
                self.scheduler.push(self.clock.now + self.rng.randint(1_000, 60_000), "op", (request, "resume"))
            else:
                operations.resume(request.invocation_id)
        except (NotFound, Conflict, TooEarly) as exc:  # completed already (or not started yet: a resume)
            self.note(f"  -> {type(exc).__name__}")
        if op == "resume":
            self.resuming.discard(request.invocation_id)

    def attach(self, request: Request, by_id: bool | None) -> None:
        """A client attaches to `request`'s invocation (by id, by idempotency key, or a workflow's by
        its id), through the ingress without waiting: not completed yet, it asks again later."""
        by_id = self.xrng.random() < 0.5 if by_id is None else by_id
        ingress = Ingress(self.plane.engine, self.store, self.plane.waiters, 0)  # type: ignore[arg-type]
        asked = HttpRequest("GET", "/")
        response: HttpResponse | None = None
        try:
            if request.service == "Wf":
                response = ingress.attach_workflow(asked, request.service, request.key)
            elif by_id and request.invocation_id:
                response = ingress.attach(asked, request.invocation_id)
            else:
                response = ingress.attach_idempotent(
                    asked, request.service, request.handler, request.idempotency_key, request.key
                )
        except NotFound:  # not accepted yet
            pass
        if response is not None and response.status != 202:
            self.note(f"attach {request.idempotency_key} -> {response.status} {response.body[:40]!r}")
            request.attaches -= 1
            request.attached.append((response.status, response.body))
            self.covered["attach answered"] += 1
            return
        self.scheduler.push(self.clock.now + self.xrng.randint(5_000, 30_000), "attach", (request, by_id))

    def purge(self, request: Request) -> None:
        """The client purges `request`'s completed invocation (once its attaches were answered), then
        nothing is left of it; it may send the request again (a new invocation, the same id)."""
        if not request.invocation_id or request.attaches:
            self.scheduler.push(self.clock.now + 10_000, "purge", request)
            return
        self.note(f"purge {request.invocation_id}")
        record = self.raw.get_invocation(request.invocation_id)
        try:
            self.plane.engine.operations.purge(request.invocation_id)
        except Conflict:  # not completed yet
            self.scheduler.push(self.clock.now + 30_000, "purge", request)
            return
        except NotFound:  # purged before: its answer was lost in a crash
            pass
        request.purged_at = self.clock.now
        self.covered["purge"] += 1
        if record is not None and record.service == "Counter":
            self.purged_adds.append(record)
        self.check_gone(request.invocation_id, "purged")
        invocation_id = request.invocation_id
        self.committed_runs = {k for k in self.committed_runs if k[0] != invocation_id}
        self.deployment.failures = {k: v for k, v in self.deployment.failures.items() if k[0] != invocation_id}
        if request.resend:
            self.scheduler.push(self.clock.now + self.xrng.randint(1_000, 60_000), "submit", request)

    def check_gone(self, invocation_id: str, why: str) -> None:
        """Nothing is left of `invocation_id`: record, journal, notifications, queue entries, and no
        timer due 10 min ago or earlier (a timer is deleted when it fires, or by the sweep)."""
        left = []
        if self.raw.get_invocation(invocation_id) is not None:
            left.append("its record")
        stale = [due for due, i in self.raw.due_timers(self.clock.now - 600_000, 10_000) if i == invocation_id]
        if stale:
            left.append(f"timers due at {stale}")
        if not isinstance(self.raw, SQLiteStore):  # DynamoDB: through the store's own reads
            loaded = self.raw.load_invocation(invocation_id)
            if loaded is not None:
                left.append("its journal")
            for key in ("a", "b", "t"):
                if (self.raw.key_status("Counter", key)[1] or ("", ""))[1] == invocation_id:
                    left.append(f"its entry in Counter/{key}'s queue")
        tables = ("batches", "notifications", "queue", "promise_waiters") if isinstance(self.raw, SQLiteStore) else ()
        for table in tables:
            (count,) = self.raw._db.execute(
                f"SELECT count(*) FROM {table} WHERE invocation_id = ?",  # the names above
                (invocation_id,),
            ).fetchone()
            if count:
                left.append(f"{count} row(s) of {table}")
        if left:
            self.violate(f"{invocation_id} {why}: {', '.join(left)} left")

    def schedule_op(self, schedule: SimSchedule, op: str) -> None:
        """The client creates, pauses, resumes or deletes `schedule` (again, after a crash)."""
        schedule.sent.setdefault(op, self.clock.now)
        self.note(f"schedule {op} {schedule.name}")
        schedules = self.plane.schedules
        try:
            if op == "create":
                every = f"{schedule.every_ms // 1000}s"
                schedules.create(schedule.name, service="Counter", handler="add", key="t", every=every)
            elif op == "pause":
                schedules.pause(schedule.name)
            elif op == "resume":
                schedules.resume(schedule.name)
            else:
                schedules.delete(schedule.name)
        except (Conflict, NotFound) as exc:  # created or deleted before: the answer was lost in a crash
            self.note(f"  -> {type(exc).__name__}")
        schedule.returned[op] = self.clock.now

    def deliver_message(self, queue: SimMessages, index: int) -> None:
        """The worker delivers message `index` of the subscribed queue (again, after a crash: the
        message was not deleted); once it returned, the next message of the group comes."""
        self.note(f"message m{index} of {SIM_SOURCE}")
        event = Event(SIM_SOURCE, f"m{index}", "s", str(queue.deltas[index]).encode())
        self.note(f"  -> {self.plane.subscriptions.deliver(queue.subscription, event)}")
        first = index not in queue.delivered
        queue.delivered[index] = queue.delivered.get(index, 0) + 1
        if first and index + 1 < len(queue.deltas):
            self.scheduler.push(self.clock.now + self.erng.randint(0, 20_000), "message", (queue, index + 1))
        if first and self.erng.random() < 0.3:  # its deletion was lost: SQS delivers it again later
            self.covered["message redelivered"] += 1
            self.scheduler.push(self.clock.now + self.erng.randint(1_000, 200_000), "message", (queue, index))

    def done(self, requests: list[Request]) -> bool:
        """True when every request was accepted and its invocation completed, no invocation is left
        unfinished and the client sends nothing more."""
        if any(e.kind in _CLIENT_EVENTS for e in self.scheduler.heap):
            return False
        for request in requests:
            if not request.invocation_id:
                return False
            if request.purged_at and not request.resend:
                continue
            record = self.raw.get_invocation(request.invocation_id)
            if record is None or record.status != "completed":
                return False
        return not self.raw.list_invocations([s for s in INVOCATION_STATUSES if s != "completed"], None, 1)

    def drive(self, until_ms: int, requests: list[Request] | None = None) -> None:
        """Pop events in virtual-time order until `until_ms`, or until `requests` are all done."""
        steps = 0
        while self.scheduler.heap:
            if steps >= _MAX_STEPS:
                self.violate(f"the scenario did not settle within {_MAX_STEPS} events (a storm of wake-ups)")
                return
            event = heapq.heappop(self.scheduler.heap)
            if event.due_ms > until_ms:
                heapq.heappush(self.scheduler.heap, event)
                return
            self.clock.now = max(self.clock.now, event.due_ms)
            steps += 1
            try:
                self.step(event)
            except (SimulatedWriteFailure, StoreUnavailable):  # the worker logs it; the client sends again
                if event.kind in _CLIENT_EVENTS:
                    self.scheduler.push(self.clock.now + 1_000, event.kind, event.target)
            except SimulatedCrash:
                if event.kind in _CLIENT_EVENTS:  # the client saw no answer: it sends again
                    self.scheduler.push(self.clock.now + 1_000, event.kind, event.target)
                self.scheduler.forget_wake_ups()
                self.plane = self.new_plane()
                self.scheduler.push(self.clock.now + 1, "startup")
            if requests is not None and (steps % 20 == 0 or event.kind == "sweep_due") and self.done(requests):
                return

    def run(self) -> list[str]:
        """The whole scenario: workload, driving with faults, then the checks. Returns the violations."""
        with _mutant_effects(self.mutant), contextlib.ExitStack() as stack:
            if isinstance(self.deployment, BidiDeployment):  # its streams' idle waits pass in virtual time
                stack.callback(setattr, bidi_module, "time", bidi_module.time)
                bidi_module.time = self.deployment.monotonic  # type: ignore[assignment]
            self.plane.registry.register(DEPLOYMENT_URL)
            requests = workload(self.rng) + flaky_requests(self.xrng)
            extras(self.xrng, requests)
            requests += signal_requests(random.Random(self.seed * 1_000_003 + 11))  # the other draws stay
            self.limit, limited = limited_requests(random.Random(self.seed * 104_729 + 11))  # its own generator
            if self.limit:
                self.rate = random.Random(self.seed * 7_717 + 3).choice([0, 0, 0.5, 1, 2])
                self.handler_limit = random.Random(self.seed * 6_151 + 5).choice([0, 0, 1, 2, 3])
                limits = {SERVICE_LIMIT: self.limit, SERVICE_RATE: self.rate or None}
                if self.handler_limit:  # both count: the service's pool and the handler's
                    limits[HANDLER_LIMITS] = {"work": self.handler_limit}
                self.plane.registry.configure("Limited", limits)
                requests += limited
            self.schedules = schedules(self.xrng)
            for schedule in self.schedules:
                pause_across_tick(random.Random(self.seed * 3_571 + 17), schedule)  # its own generator
                for op, at in schedule.ops:
                    self.scheduler.push(at, "schedule", (schedule, op))
                if schedule.late is not None:
                    self.covered["tick delivered after the resume"] += 1
                    self.scheduler.push(schedule.late[0], "late_tick", schedule_wake_id(schedule.name), schedule.late[1])
            self.messages = messages(self.erng)
            if self.messages is not None:
                self.messages.subscription = self.plane.subscriptions.create(SIM_SOURCE, "service://Counter/add")
                self.scheduler.push(START_MS + self.erng.randint(0, 30_000), "message", (self.messages, 0))
            for request in requests:
                for _ in range(request.attaches):
                    self.scheduler.push(request.at_ms + self.xrng.randint(0, 200_000), "attach", (request, None))
                if request.purge_at:
                    self.scheduler.push(request.purge_at, "purge", request)
                self.scheduler.push(request.at_ms, "submit", request)
                if request.op is not None:
                    self.scheduler.push(request.op[1], "op", (request, request.op[0]))
                if self.rng.random() < 0.15:  # the client sends it twice
                    self.scheduler.push(request.at_ms + self.rng.randint(0, 30_000), "submit", request)
            self.plan_restarts(requests)
            self.scheduler.push(START_MS + _SWEEP_DUE_EVERY_MS, "sweep_due")
            self.scheduler.push(START_MS + _SWEEP_EVERY_MS, "sweep")
            self.armed = True
            self.drive(START_MS + _HORIZON_MS, requests)
            self.armed = False
            self.scheduler.heap = [e for e in self.scheduler.heap if e.kind not in _CLIENT_EVENTS]  # gave up
            heapq.heapify(self.scheduler.heap)
            self.scheduler.enabled = False  # no more faults: the checks and the retention phase
            self.check(requests)
            self.check_blobs()
            self.check_restarts()
            self.check_after_retention(requests)
        return self.violations

    # --- invariants ---

    def check(self, requests: list[Request]) -> None:
        """Every accepted invocation completed with the model's output; counters exact; journals
        without a completion id given or completed twice; every object key released."""
        counters: dict[str, int] = {}
        for request in requests:
            for key, delta in request.adds * (2 if request.purged_at and request.resend else 1):
                counters[key] = counters.get(key, 0) + delta
            if not request.invocation_id:
                self.violate(f"request {request.idempotency_key} was never accepted")
                continue
            if request.purged_at and not request.resend:
                self.check_gone(request.invocation_id, "purged")
                continue
            record = self.raw.get_invocation(request.invocation_id)
            if record is None:
                self.violate(f"{request.invocation_id} ({request.service}) is gone")
                continue
            if record.status != "completed":
                failure = (record.last_failure or {}).get("message", "")
                self.violate(
                    f"{request.invocation_id} ({request.service}) did not complete: {record.status}"
                    + (f", last failure: {failure}" if failure else "")
                )
                continue
            if request.purged_at and record.created_at_ms <= request.purged_at:
                self.violate(f"{request.invocation_id} sent again after its purge is the purged one")
            allowed = set(request.allowed or {"failed" if request.too_large else "succeeded"})
            allowed |= {_ENDS[op] for op in request.ops_done if op in _ENDS}
            self.check_attached(request, record)
            if request.flaky and not self.crashes and not self.races:  # no failure's record lost: exact
                self.check_flaky_end(request, record)
            terminal = (record.failure or {}).get("message") == FAIL_MESSAGE + "terminal"
            if request.flaky and record.completion == "failed" and not terminal:
                self.violate(f"{request.invocation_id} failed with {record.failure}, not its terminal failure")
            if record.completion not in allowed:
                self.violate(
                    f"{request.invocation_id} ({request.service}) ended {record.completion}: {record.failure}"
                    f" (the model allows {'/'.join(sorted(allowed))})"
                )
            elif (
                record.completion == "succeeded" and request.expected is not None and record.output != request.expected
            ):
                self.violate(f"{request.invocation_id} output {record.output!r}, the model says {request.expected!r}")
            elif request.service == "Waiter":
                self.covered["named signal awaited twice" if request.expected == b"1,2" else "named signal sent twice"] += 1
        if any(v for v in self.violations if "did not complete" in v or "never accepted" in v):
            return  # counters and keys are not settled yet: the stuck invocation says why
        ended_early = any(op in _ENDS for r in requests for op in r.ops_done)
        counters["t"] = self.check_schedules()
        counters["s"] = self.check_messages()
        for key in sorted(set(counters) | {"a", "b"}):
            self.check_counter(key, None if ended_early and key != "t" else counters.get(key, 0))
        for key in ("a", "b", "t", "s"):
            holder, queued = self.raw.key_status("Counter", key)
            record = self.raw.get_invocation(holder) if holder else None
            if holder is not None and (record is None or record.status == "completed") and queued is None:
                self.lazy_keys += 1  # a release lost in a crash: the next arrival's pump releases it
            elif holder is not None or queued is not None:
                self.violate(f"Counter/{key} is left held by {holder} / queued {queued}")
        if self.rate:  # no window holds more reserved starts than the rate limit's burst and pace allow
            interval, burst = pacing(self.rate)
            times = sorted(self.reserved)
            for i, j in itertools.combinations(range(len(times)), 2):
                if j - i + 1 > burst + (times[j] - times[i]) // interval:
                    self.violate(f"{j - i + 1} starts of Limited reserved within {times[j] - times[i]} ms at {self.rate}/s")
                    break
            self.covered["rate limited"] += 1
        if self.limit:
            for pool, _ in self.limited_pools():
                holders, queued = self.raw.slot_status(pool, "")
                for holder in sorted(holders):
                    record = self.raw.get_invocation(holder)
                    if record is not None and record.status != "completed":
                        self.violate(f"{holder} holds a slot of {pool} but is {record.status}")
                    elif self.crashes:
                        self.lazy_keys += 1  # a release lost in a crash: the sweep's pump gives it back
                    else:
                        self.violate(f"the slot of {holder} was never given back (it ended without a crash)")
                if queued is not None:
                    self.violate(f"{pool}'s queue is left with {queued}")
        for record in self.raw.list_invocations(None, None, 10_000):
            self.check_journal(record.invocation_id)
            if record.status != "completed":
                self.violate(f"{record.invocation_id} ({record.service}) left {record.status}")

    def check_blobs(self) -> None:
        """Over the DynamoDB store: every item's reference resolves to an object with the bytes it
        names (size, sha256); no item refers to a missing object (the put comes first)."""
        blobs = getattr(self.raw, "blobs", None)
        if not isinstance(blobs, SimBlobs):
            return
        import boto3

        from adapters.aws.blobs import Spiller, is_reference

        client = boto3.client("dynamodb", region_name="us-east-1")
        spiller = Spiller(blobs._inner)
        for table in client.list_tables()["TableNames"]:
            for page in client.get_paginator("scan").paginate(TableName=table):
                for item in page["Items"]:
                    for name, value in item.items():
                        if "B" not in value or not is_reference(value["B"]):
                            continue
                        self.covered["references checked"] += 1
                        try:
                            spiller.resolve(value["B"])
                        except (KeyError, ValueError) as exc:
                            where = f"{item['PK']['S']}/{item['SK']['S']} {name}"
                            self.violate(f"{where} refers to a blob that is missing or not its bytes: {exc!r}")

    def check_flaky_end(self, request: Request, record: InvocationRecord) -> None:
        """Without crashes or concurrent executors: a terminal failure was not retried (one failing
        attempt), and `Flaky/doomed` was killed once its failures reached the policy's attempts."""
        assert request.flaky is not None
        mode, times, _ = request.flaky
        made = self.deployment.failures.get((request.invocation_id, "fail"), 0)
        if mode == "terminal" and made != 1:
            self.violate(f"{request.invocation_id}'s terminal failure was attempted {made} times (retried)")
        doomed = request.handler == "doomed" and mode != "terminal" and times >= FLAKY_POLICY.max_attempts
        doomed = doomed and not request.ops_done  # the client's kill, cancel or pause decides otherwise
        if doomed and record.completion != "killed":
            self.violate(
                f"{request.invocation_id} ({request.body.decode()}) ended {record.completion}: its policy kills "
                f"it after {FLAKY_POLICY.max_attempts} failures in a row"
            )

    def check_attached(self, request: Request, record: InvocationRecord) -> None:
        """Every attach got the invocation's final result, and the model's output if it succeeded."""
        final = Ingress._result(None, record)  # type: ignore[arg-type]  # the ingress' answer for a completed one
        for status, body in request.attached:
            if request.expected is not None and status == 200 and body != request.expected:
                self.violate(f"an attach to {request.invocation_id} got {body!r}, the model says {request.expected!r}")
            elif not request.purged_at and (status, body) != (final.status, final.body):
                self.violate(
                    f"an attach to {request.invocation_id} got {status} {body!r}, its final result is "
                    f"{final.status} {final.body!r}"
                )

    def check_messages(self) -> int:
        """The subscribed queue's messages: each delivered, invoked once (its id the idempotency key)
        however often it was delivered, and in the queue's order (the adds' outputs are the running
        sums of the deltas). Returns what they add to Counter/s."""
        queue = self.messages
        if queue is None:
            return 0
        adds = [r for r in self.raw.list_invocations(None, "Counter", 10_000) if r.key == "s"]
        running = 0
        for index, delta in enumerate(queue.deltas):
            running += delta
            if index not in queue.delivered:
                self.violate(f"message m{index} of {SIM_SOURCE} was never delivered")
                continue
            made = [r for r in adds if r.idempotency_key == f"m{index}"]
            if len(made) != 1:
                times = queue.delivered[index]
                self.violate(f"message m{index}, delivered {times} times, made {len(made)} invocations")
            elif made[0].completion == "succeeded" and made[0].output != str(running).encode():
                self.violate(f"message m{index} added {delta} out of order: {made[0].output!r}, not {running}")
        return sum(queue.deltas)

    def check_schedules(self) -> int:
        """Each schedule's ticks: on its grid, one invocation each, none while it was paused or after
        it was deleted; every delivery of a due tick while it ran sent that tick; no tick is lost
        for good (one runs within `bound` of each grid tick). Returns how many ticks ran (each adds
        1 to Counter/t)."""
        total = 0
        records = [r for r in self.raw.list_invocations(None, "Counter", 10_000) if r.key == "t"]
        bound = 200_000 + self.races * self.settings.lease_ms
        for schedule in self.schedules:
            cadence = Cadence(every_ms=schedule.every_ms)
            prefix = tick_idempotency_key(schedule.name, 0)[:-1]
            created = {
                int(r.idempotency_key[len(prefix) :]): r.created_at_ms
                for r in records
                if r.idempotency_key.startswith(prefix)
            }
            ticks = sorted(created)
            total += len(ticks)
            name = f"schedule {schedule.name} (every {schedule.every_ms // 1000} s)"
            resumed = schedule.returned.get("resume", 1 << 62)
            for tick in ticks:
                at = (tick - START_MS) / 1000
                if tick % schedule.every_ms or schedule.paused(created[tick]) or tick < schedule.sent["create"]:
                    self.violate(f"{name} ran tick {at} s: off its grid, or sent while it did not run")
                elif schedule.in_pause(tick) and created[tick] >= resumed:
                    # docs/guide.md, "Durable schedules": resuming starts with the next future tick
                    # (ticks missed while paused do not run). A tick due after the deletion, sent by
                    # an early delivery while the schedule still ran, is no paused tick: the check
                    # above ("sent while it did not run") covers deletion by the send time.
                    self.violate(f"{name} ran tick {at} s, which fell while it was paused, after the resume")
            for at, due in schedule.deliveries:
                tick = cadence.latest_at_or_before(max(at, due))
                pending = "pause" in schedule.sent and at >= schedule.sent["pause"] and tick < resumed  # pause drops it
                if schedule.active(at) and schedule.active(tick) and not pending and tick not in ticks:
                    self.violate(
                        f"{name}: a delivery at {(at - START_MS) / 1000} s did not send tick "
                        f"{(tick - START_MS) / 1000} s"
                    )
            if "create" not in schedule.returned:
                continue
            tick = cadence.next_after(schedule.returned["create"])
            while tick + bound < schedule.sent.get("delete", self.clock.now):
                if schedule.active_over(tick, tick + bound) and not any(tick <= t <= tick + bound for t in ticks):
                    self.violate(
                        f"{name}: no tick ran within {bound / 1000} s of tick {(tick - START_MS) / 1000} s (lost)"
                    )
                tick += schedule.every_ms
        return total

    def check_counter(self, key: str, total: int | None) -> None:
        """Counter `key` holds `total` (the model's, when nothing was killed or cancelled), and its
        adds were serializable: the succeeded ones, in the order of their outputs, each add their
        delta to the one before. A killed add may or may not have written (bounds only then)."""
        got = int(self.raw.load_state("Counter", key).get(b"n", b"0"))
        if total is not None and got != total:
            self.violate(f"Counter/{key} holds {got}, the model says {total} (a state write lost or doubled)")
        adds = [r for r in self.raw.list_invocations(["completed"], "Counter", 10_000) if r.key == key]
        adds += [r for r in self.purged_adds if r.key == key]
        succeeded = sorted((int(r.output or b"0"), _delta(r)) for r in adds if r.completion == "succeeded")
        killed = sum(_delta(r) for r in adds if r.completion == "killed")
        low = sum(delta for _, delta in succeeded)
        if not low <= got <= low + killed:
            self.violate(f"Counter/{key} holds {got}, its succeeded adds make {low} (+ up to {killed} killed)")
        if killed:
            return
        previous = 0
        for output, delta in succeeded:
            if output != previous + delta:
                self.violate(f"Counter/{key}: an add of {delta} answered {output} after {previous} (not serializable)")
                return
            previous = output

    def check_journal(self, invocation_id: str) -> None:
        """Each completion id is given once and completed once in the journal; the callee of every
        committed call and one-way call exists (a committed effect was carried out); a succeeded
        invocation's journal, while kept, is whole and ends with the Output command of its `output`
        (whether its ending was committed before the completing write or with it, `Executor.end`)."""
        loaded = self.raw.load_invocation(invocation_id)
        if loaded is None:
            return
        record = loaded.record
        if record.completion == "succeeded" and record.journal_expires_at_ms:
            try:
                journal = Journal.load(record.input_entry, loaded.batches)
            except ProtocolViolation as exc:
                self.violate(f"{invocation_id} (succeeded): its journal reads back broken: {exc}")
                return
            output = journal.output()
            if output is None or output.value.content != (record.output or b""):
                self.violate(f"{invocation_id} (succeeded): its journal does not end with the Output of its result")
            elif len(journal) != record.journal_length:
                read_back, says = len(journal), record.journal_length
                self.violate(f"{invocation_id}: {read_back} journal entries read back, its record says {says}")
        given: set[int] = set()
        completed: set[int] = set()
        named: dict[str, int] = {}  # signal name -> its notifications in the journal
        index = 0  # journal index (entry 0 is the Input command)
        for batch in sorted(loaded.batches, key=lambda b: b.start_index):
            for index, f in enumerate(decode_frames(batch.entries), start=batch.start_index):
                message = f.decode()
                copied = index < self.copied.get(invocation_id, 0)  # a restart's prefix: the old one's callees
                if f.type in (MessageType.Call, MessageType.OneWayCall) and copied:
                    callee = self.plane.engine.effects._callee_of(loaded.record, index, message)  # type: ignore[arg-type]
                    if self.raw.get_invocation(callee) is not None:
                        self.violate(f"{invocation_id}: the call at entry {index}, copied by its restart, was sent again")
                elif f.type in (MessageType.Call, MessageType.OneWayCall):
                    callee = self.plane.engine.effects._callee_of(loaded.record, index, message)  # type: ignore[arg-type]
                    killed = loaded.record.completion == "killed"  # a kill drops effects not yet carried out
                    if not killed and self.raw.get_invocation(callee) is None:
                        self.violate(
                            f"{invocation_id} ({loaded.record.completion or loaded.record.status}): its journal "
                            f"commits a {MessageType(f.type).name} to {message.service_name}/{message.handler_name} "  # type: ignore[attr-defined]
                            f"at entry {index} whose callee {callee} was never created (a committed effect dropped)"
                        )
                if is_command(f.type):
                    for name in ("result_completion_id", "invocation_id_notification_idx"):
                        cid = getattr(message, name, 0)
                        if cid:
                            if cid in given:
                                self.violate(f"{invocation_id}: completion id {cid} given twice in its journal")
                            given.add(cid)
                elif f.type == MessageType.Signal and message.WhichOneof("signal_id") == "name":  # type: ignore[union-attr]
                    named[message.name] = named.get(message.name, 0) + 1  # type: ignore[union-attr]
                elif is_notification(f.type) and f.type != MessageType.Signal:
                    cid = message.completion_id  # type: ignore[attr-defined]
                    if cid in completed:
                        self.violate(f"{invocation_id}: completion {cid} committed twice in its journal")
                    completed.add(cid)
        sent: dict[str, int] = {}  # each named signal is stored once (by its sender) and journaled once
        for stored in loaded.notifications:
            if stored.key[0] == "q":
                name = parse_named_signal_key(stored.key)[1]
                sent[name] = sent.get(name, 0) + 1
        for name, count in named.items():
            if count > sent.get(name, 0):
                self.violate(f"{invocation_id}: {count} signals named {name!r} journaled, {sent.get(name, 0)} sent")
        senders = [stored_sender(n.entry) for n in loaded.notifications if n.key[0] == "q"]
        if len(senders) != len(set(senders)):
            self.violate(f"{invocation_id}: a named signal stored twice by one sender: {sorted(senders)}")

    def check_after_retention(self, requests: list[Request]) -> None:
        """After the retention of completed invocations (and the sweeps): nothing left for them."""
        completed = {r.invocation_id for r in requests if r.invocation_id}
        completed |= {r.invocation_id for r in self.raw.list_invocations(["completed"], None, 10_000)}
        self.clock.now += self.settings.completed_retention_ms + 3_600_000
        self.scheduler.push(self.clock.now, "sweep_due")
        self.scheduler.push(self.clock.now, "sweep")
        self.drive(self.clock.now + 120_000)
        for due_ms, invocation_id in self.raw.due_timers(10**13 - 1, 10_000):
            if invocation_id in completed:
                self.violate(
                    f"a timer at {due_ms} is left for completed invocation {invocation_id} after its retention"
                )
        for key in ("a", "b"):
            _, queued = self.raw.key_status("Counter", key)
            if queued is not None and queued[1] in completed:
                self.violate(f"Counter/{key}'s queue keeps an entry for {queued[1]} after its retention")
        for invocation_id in sorted(completed):
            self.check_gone(invocation_id, "after its retention")
        self.send_again_after_retention(requests)

    def send_again_after_retention(self, requests: list[Request]) -> None:
        """A request sent again with its idempotency key once its invocation's retention ended is a
        new invocation, not a duplicate of the one removed."""
        again = next(
            (
                r
                for r in requests
                if r.invocation_id and r.service != "Wf" and _resend_is_modelled(r) and not r.purged_at
            ),
            None,
        )
        if again is None:
            return
        try:
            self.plane.engine.create(
                again.service, again.handler, again.body, {}, key=again.key, leased=False,
                idempotency_key=again.idempotency_key,
            )  # fmt: skip
        except StoreConflict:
            self.violate(f"request {again.idempotency_key} sent again after its retention ended: refused as sent")
            return
        self.covered["sent again after its retention"] += 1


STORES = ("sqlite", "dynamodb")
"""The stores a scenario may run over: in-memory SQLite, or the DynamoDB store on an in-process moto."""


def _dynamodb_store() -> Any:
    """A `DynamoDBStore` on a fresh table of the in-process moto (`moto.mock_aws` must be active)."""
    from adapters.aws.blobs import S3BlobStore
    from adapters.aws.dynamodb_store import DynamoDBStore  # only here: boto3 and moto are slow to import

    s3 = S3BlobStore("sim-blobs")
    s3.ensure_bucket()
    blobs = SimBlobs(s3)
    store = DynamoDBStore(
        "sim", region="us-east-1", aws_access_key_id="testing", aws_secret_access_key="testing", shards=2, blobs=blobs
    )
    store.ensure_schema()
    return store


def run_scenario(seed: int, mutant: str | None = None, store: str = "sqlite") -> Scenario:
    """Run the scenario of `seed` (with `mutant`, one of `MUTANTS`, installed) over `store` (one of
    `STORES`) and return it."""
    disabled = logging.root.manager.disable
    logging.disable(logging.CRITICAL)  # the engine logs the faults it meets; the report says what matters
    with contextlib.ExitStack() as stack:
        if store == "dynamodb":
            from moto import mock_aws

            stack.enter_context(mock_aws())
        # the engine's own draws (`random`: a run's random seed, its callees' `callee_seed`, retry
        # jitter) follow the seed too, so a seed replays exactly
        state = random.getstate()
        random.seed(seed)
        stack.callback(random.setstate, state)
        scenario = Scenario(seed, mutant, store)
        try:
            scenario.run()
        except Exception as exc:  # noqa: BLE001  # an exception out of the engine's ports is a finding too
            scenario.violate(f"the simulation raised {type(exc).__name__}: {exc}")
        finally:
            if hasattr(scenario.raw, "close"):
                scenario.raw.close()
            logging.disable(disabled)
    return scenario


def simulate(seeds: Callable[[], Iterator[int]] | list[int], mutant: str | None = None) -> list[Scenario]:
    """Run several seeds; returns the scenarios with violations."""
    failed = []
    for seed in seeds() if callable(seeds) else seeds:
        scenario = run_scenario(seed, mutant)
        if scenario.violations:
            failed.append(scenario)
    return failed
