"""A deterministic simulator of Torpor: one process, a virtual clock, faults chosen by a seed.

`run_scenario(seed)` builds a fresh in-memory SQLite store, a `ControlPlane` over it with a
virtual `Clock` and `Scheduler` and the in-process deployment of `tests.simulator.sdk`, submits
a workload chosen by the seed, and runs it in virtual-time order. The workload: `Flow/main`
requests whose steps are runs, sleeps, calls (`Echo`), calls and delayed sends to a virtual
object's counter on one or two contended keys (`Counter/add`), awakeables resolved by another
invocation (`Resolver`) and a run result over the item-size limit; direct `Counter/add` requests;
workflows whose run awaits a durable promise a shared handler completes. Every request has an
idempotency key; some are sent twice; some are killed, cancelled or paused (then resumed). Faults:

- a crash before a chosen store call (`SimulatedCrash` unwinds the engine; a NEW `ControlPlane`
  over the same store continues after a start-up `sweep`; the in-process wake-ups are lost; the
  client sends again what got no answer);
- a concurrent executor at a chosen store call: the clock jumps past the lease, and a second
  `ControlPlane` advances the same invocation before the first one's call goes on;
- failed effect writes (state writes, callee creations, timers, notifications): a transient error;
- wake-ups dropped, duplicated, delivered late or early (a dropped one is recovered by the
  periodic `sweep_due`/`sweep`).

Then it checks invariants (`Scenario.check`, `check_counter`, `check_journal`,
`check_after_retention`, and as it goes: `on_run`, the completion-is-final check of `SimStore`)
and returns the violations (`Scenario.violations`). `MUTANTS` break the engine on purpose, to
show that the checks can fail. `python -m tests.simulator` (scripts/simulate.sh) runs many seeds.
"""

from __future__ import annotations

import contextlib
import heapq
import itertools
import json
import logging
import random
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

from adapters.local.sqlite_store import SQLiteStore
from control_plane.effects import Effects
from control_plane.errors import Conflict, NotFound
from control_plane.held import Held
from control_plane.ports import INVOCATION_STATUSES, InvocationRecord, StoreConflict
from control_plane.protocol import MessageType, decode_frames, is_command, is_notification
from control_plane.protocol import protocol_pb2 as pb
from control_plane.runtime import ControlPlane
from control_plane.settings import Settings
from control_plane.timers import Wake
from tests.simulator.sdk import DEPLOYMENT_URL, Ctx, SimDeployment

START_MS = 1_800_000_000_000
_SWEEP_DUE_EVERY_MS = 60_000
_SWEEP_EVERY_MS = 300_000
_HORIZON_MS = 6 * 3600 * 1000  # a scenario not done by then has stuck invocations
_MAX_STEPS = 20_000
_EFFECT_WRITES = frozenset({"apply_state", "create_invocation", "put_timer", "put_notification"})

_RECORD_WRITES = frozenset({"update_invocation", "update_unless_completed", "acquire_lease", "attach_caller"})

MUTANTS = ("skip-fence", "ignore-effect-failure")
"""Deliberate bugs the simulator must catch: the executor ignores the epoch condition of its
record writes; an effect whose write failed after its commit is dropped (counted as applied)."""


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
            if name == "update_invocation" and self._sim.mutant == "skip-fence":
                current = self._inner.get_invocation(args[0])
                if current is not None:
                    args = (args[0], current.epoch, *args[2:])
            before = self._inner.get_invocation(args[0]) if name in _RECORD_WRITES else None
            result = value(*args, **kwargs)
            if name == "append_batch":
                self._sim.committed(args[0], args[1])
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

    def creation_requests(self, *, delayed: bool, on_key: bool) -> dict[str, int]:
        self._sim.before_store_call("creation_requests")
        return self._facts.creation_requests(delayed=delayed, on_key=on_key)


# --- the workload: services, handlers and the reference model -------------------------------------


def _counter_add(ctx: Ctx) -> bytes:
    delta = int(ctx.input)
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
        elif op == "big":  # a run result over the item-size limit: the invocation fails with 413
            ctx.run(f"b{i}", lambda: b"x" * 400_000)
    return "|".join(parts).encode()


def _resolve(ctx: Ctx) -> bytes:
    awakeable_id, text = json.loads(ctx.input)
    ctx.complete_awakeable(awakeable_id, text.upper().encode())
    return b"ok"


def _workflow_run(ctx: Ctx) -> bytes:
    value = ctx.promise("p")
    return ctx.run("wf", lambda: value.upper())


def _workflow_signal(ctx: Ctx) -> bytes:
    return b"ok" if ctx.resolve_promise("p", ctx.input) else b"late"


_workflow_run.handler_type = "WORKFLOW"  # type: ignore[attr-defined]
_workflow_signal.handler_type = "SHARED"  # type: ignore[attr-defined]

SERVICES = {
    "Wf": ("WORKFLOW", {"run": _workflow_run, "signal": _workflow_signal}),
    "Counter": ("VIRTUAL_OBJECT", {"add": _counter_add}),
    "Echo": ("SERVICE", {"echo": _echo}),
    "Flow": ("SERVICE", {"main": _flow}),
    "Resolver": ("SERVICE", {"resolve": _resolve}),
}


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
    too_large: bool = False  # a run result over the item-size limit: it must fail with 413
    op: tuple[str, int] | None = None  # ("kill" | "cancel" | "pause", when): what the client does to it
    ops_done: list[str] = field(default_factory=list)  # the operations sent (they may have taken effect)


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
            elif op == "sleep":
                steps.append(["sleep", rng.choice([10, 1_000, 60_000, 600_000])])
            elif op == "call":
                steps.append(["call", f"hi{i}.{j}"])
            else:
                key, delta = rng.choice(keys), rng.randint(1, 9)
                adds.append((key, delta))
                steps.append(["add", key, delta] if op == "add" else ["send", key, delta, rng.choice([0, 5_000])])
        big = rng.random() < 0.03
        if big:  # what comes after it never runs
            position = rng.randint(0, len(steps))
            steps.insert(position, ["big"])
            adds = [(s[1], s[2]) for s in steps[:position] if s[0] in ("add", "send")]
        body = json.dumps(steps).encode()
        request = Request("Flow", "main", "", body, f"r{i}", at, expected_flow(steps), adds, too_large=big)
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


_ENDS = {"kill": "killed", "cancel": "cancelled"}  # how an operation may end an invocation


def _delta(record: InvocationRecord) -> int:
    """The delta a `Counter/add` invocation was asked to add (its input)."""
    (entry,) = decode_frames(record.input_entry)
    return int(pb.InputCommandMessage.FromString(entry.payload).value.content)


# --- one scenario ---------------------------------------------------------------------------------


@contextlib.contextmanager
def _mutant_effects(mutant: str | None) -> Iterator[None]:
    """Install the `ignore-effect-failure` mutant on `Effects.apply` for the block."""
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

    def __init__(self, seed: int, mutant: str | None = None) -> None:
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
        self.raw = SQLiteStore(":memory:")  # what the checks read, without faults
        self.store = SimStore(self.raw, self)
        self.deployment = SimDeployment(SERVICES, self.clock, self.on_run)
        self.settings = Settings()
        self.plane = self.new_plane()

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
        self.current = event.target if event.kind in ("now", "timer") else ""
        if event.kind == "now":
            self.note(f"advance {event.target}")
            self.note(f"  -> {self.plane.advance(event.target)}")
        elif event.kind == "timer":
            self.note(f"timer {event.target} due {(event.arg - START_MS) / 1000}")
            self.note(f"  -> {self.plane.wake(Wake.at(event.target, event.arg))}")
        elif event.kind == "submit":
            self.submit(event.target)
        elif event.kind == "op":
            self.operate(*event.target)
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
        except StoreConflict:  # sent before: the same invocation
            engine = self.plane.engine
            if request.service == "Wf" and request.handler == "run":
                request.invocation_id = engine.workflow_run_id(request.service, request.key)
            else:
                request.invocation_id = engine.idempotent_invocation_id(
                    request.service, request.handler, request.key, request.idempotency_key
                )

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
        except (NotFound, Conflict) as exc:  # completed already (or not paused any more)
            self.note(f"  -> {type(exc).__name__}")

    def done(self, requests: list[Request]) -> bool:
        """True when every request was accepted and its invocation completed, no invocation is left
        unfinished and the client sends nothing more."""
        if any(e.kind in ("submit", "op") for e in self.scheduler.heap):
            return False
        for request in requests:
            if not request.invocation_id:
                return False
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
            except SimulatedWriteFailure:  # outside an attempt: the worker logs it; the client sends again
                if event.kind in ("submit", "op"):
                    self.scheduler.push(self.clock.now + 1_000, event.kind, event.target)
            except SimulatedCrash:
                if event.kind in ("submit", "op"):  # the client saw no answer: it sends again
                    self.scheduler.push(self.clock.now + 1_000, event.kind, event.target)
                self.scheduler.forget_wake_ups()
                self.plane = self.new_plane()
                self.scheduler.push(self.clock.now + 1, "startup")
            if requests is not None and (steps % 20 == 0 or event.kind == "sweep_due") and self.done(requests):
                return

    def run(self) -> list[str]:
        """The whole scenario: workload, driving with faults, then the checks. Returns the violations."""
        with _mutant_effects(self.mutant):
            self.plane.registry.register(DEPLOYMENT_URL)
            requests = workload(self.rng)
            for request in requests:
                self.scheduler.push(request.at_ms, "submit", request)
                if request.op is not None:
                    self.scheduler.push(request.op[1], "op", (request, request.op[0]))
                if self.rng.random() < 0.15:  # the client sends it twice
                    self.scheduler.push(request.at_ms + self.rng.randint(0, 30_000), "submit", request)
            self.scheduler.push(START_MS + _SWEEP_DUE_EVERY_MS, "sweep_due")
            self.scheduler.push(START_MS + _SWEEP_EVERY_MS, "sweep")
            self.armed = True
            self.drive(START_MS + _HORIZON_MS, requests)
            self.armed = False
            self.scheduler.heap = [e for e in self.scheduler.heap if e.kind not in ("submit", "op")]  # gave up
            heapq.heapify(self.scheduler.heap)
            self.scheduler.enabled = False  # no more faults: the checks and the retention phase
            self.check(requests)
            self.check_after_retention(requests)
        return self.violations

    # --- invariants ---

    def check(self, requests: list[Request]) -> None:
        """Every accepted invocation completed with the model's output; counters exact; journals
        without a completion id given or completed twice; every object key released."""
        counters: dict[str, int] = {}
        for request in requests:
            for key, delta in request.adds:
                counters[key] = counters.get(key, 0) + delta
            if not request.invocation_id:
                self.violate(f"request {request.idempotency_key} was never accepted")
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
            allowed = {"failed" if request.too_large else "succeeded"}
            allowed |= {_ENDS[op] for op in request.ops_done if op in _ENDS}
            if record.completion not in allowed:
                self.violate(
                    f"{request.invocation_id} ({request.service}) ended {record.completion}: {record.failure}"
                    f" (the model allows {'/'.join(sorted(allowed))})"
                )
            elif (
                record.completion == "succeeded" and request.expected is not None and record.output != request.expected
            ):
                self.violate(f"{request.invocation_id} output {record.output!r}, the model says {request.expected!r}")
        if any(v for v in self.violations if "did not complete" in v or "never accepted" in v):
            return  # counters and keys are not settled yet: the stuck invocation says why
        ended_early = any(op in _ENDS for r in requests for op in r.ops_done)
        for key in sorted(set(counters) | {"a", "b"}):
            self.check_counter(key, None if ended_early else counters.get(key, 0))
        for key in ("a", "b"):
            holder, queued = self.raw.key_status("Counter", key)
            record = self.raw.get_invocation(holder) if holder else None
            if holder is not None and (record is None or record.status == "completed") and queued is None:
                self.lazy_keys += 1  # a release lost in a crash: the next arrival's pump releases it
            elif holder is not None or queued is not None:
                self.violate(f"Counter/{key} is left held by {holder} / queued {queued}")
        for record in self.raw.list_invocations(None, None, 10_000):
            self.check_journal(record.invocation_id)
            if record.status != "completed":
                self.violate(f"{record.invocation_id} ({record.service}) left {record.status}")

    def check_counter(self, key: str, total: int | None) -> None:
        """Counter `key` holds `total` (the model's, when nothing was killed or cancelled), and its
        adds were serializable: the succeeded ones, in the order of their outputs, each add their
        delta to the one before. A killed add may or may not have written (bounds only then)."""
        got = int(self.raw.load_state("Counter", key).get(b"n", b"0"))
        if total is not None and got != total:
            self.violate(f"Counter/{key} holds {got}, the model says {total} (a state write lost or doubled)")
        adds = [r for r in self.raw.list_invocations(["completed"], "Counter", 10_000) if r.key == key]
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
        committed call and one-way call exists (a committed effect was carried out)."""
        loaded = self.raw.load_invocation(invocation_id)
        if loaded is None:
            return
        given: set[int] = set()
        completed: set[int] = set()
        index = 0  # journal index (entry 0 is the Input command)
        for batch in sorted(loaded.batches, key=lambda b: b.start_index):
            for index, f in enumerate(decode_frames(batch.entries), start=batch.start_index):
                message = f.decode()
                if f.type in (MessageType.Call, MessageType.OneWayCall):
                    callee = self.plane.engine.effects._callee_of(invocation_id, index, message)  # type: ignore[arg-type]
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
                elif is_notification(f.type) and f.type != MessageType.Signal:
                    cid = message.completion_id  # type: ignore[attr-defined]
                    if cid in completed:
                        self.violate(f"{invocation_id}: completion {cid} committed twice in its journal")
                    completed.add(cid)

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
            if self.raw.get_invocation(invocation_id) is not None:
                self.violate(f"{invocation_id} is still stored after its retention")


def run_scenario(seed: int, mutant: str | None = None) -> Scenario:
    """Run the scenario of `seed` (with `mutant`, one of `MUTANTS`, installed) and return it."""
    disabled = logging.root.manager.disable
    logging.disable(logging.CRITICAL)  # the engine logs the faults it meets; the report says what matters
    scenario = Scenario(seed, mutant)
    try:
        scenario.run()
    except Exception as exc:  # noqa: BLE001  # an exception out of the engine's ports is a finding too
        scenario.violate(f"the simulation raised {type(exc).__name__}: {exc}")
    finally:
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
