"""Pure decisions of the invocation engine: given what is loaded and what happened, what to write.

Nothing here reads or writes a store, sends a request or reads a clock: each function takes the
invocation's record, the event and `now_ms`, and returns values the engine then carries out. So
every rule here is tested without processes (tests/unit/test_decisions.py).

Every decision is one `Decision`: one named `Transition` (a named transition of the store,
`InvocationTransitions`, or RUN: nothing written), the fields it writes (`changes`), the doorbell it
is conditional on, and the `Effect`s that follow the write, in order. One executor entry,
`Executor.apply`, carries out any of them for an invocation held under its lease; the operations
from outside (`control_plane/operations.py`) carry out theirs with the forced transitions.

- `completion_changes`: the fields of an invocation's completing write, whoever completes it (the
  handler's Output, a terminal failure, the retry policy giving up, a cancel or a kill).
- `decide_failure`: what a failed attempt leads to under the retry policy: back off, pause, fail or
  kill (Restate's retry policy: exponential backoff, then `on_max_attempts`).
- `decide_suspension` (`suspension_changes`): a suspension (Restate service protocol,
  SuspensionMessage), or none when an awaited sleep is already due (`due_sleeps`: resumed at once).
- `decide_start`: what a wake-up that took the lease does first: queue for the object key, end a
  delayed invocation cancelled before its time, go back to sleep (not due yet), or run;
  `retry_not_due` and `not_due`: a back-off woken before its time sleeps again.
- the operations from outside the handler (`control_plane/operations.py` carries them out):
  `decide_cancel` (end now, or deliver the cancel signal, resuming a paused one first),
  `decide_resume` (runnable now, or back in its key's queue in its old place), `decide_kill` (a
  forced completion, then its callees killed), `decide_pause` (`check_pausable`: only a started
  one), `check_open` (each refused once completed) and `check_purge` (only a completed one).
"""

from __future__ import annotations

from collections.abc import Collection, Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

from control_plane.attempt import AttemptFailure
from control_plane.errors import Conflict, TooEarly
from control_plane.keyed import is_exclusive, takes_turn
from control_plane.limits import POOL_PREFIX
from control_plane.ports import InvocationRecord
from control_plane.protocol import protocol_pb2 as pb
from control_plane.retry import RetryPolicy

Changes = dict[str, Any]
"""Fields of `InvocationRecord` and their new values, as the store's named transitions take them
(`InvocationTransitions`: `complete`, `suspend`, `back_off`, `pause`, `wait_for_key`)."""


class Transition(StrEnum):
    """The one named transition of a `Decision`: the store's transition it writes
    (`InvocationTransitions`, same name), or RUN, which writes nothing."""

    RUN = "run"  # nothing written: the attempt goes on (or, from outside, the cancel signal is delivered)
    RENEW_LEASE = "renew_lease"  # a longer lease for the next attempt
    RELEASE_LEASE = "release_lease"  # handed off, or woken before its time
    WAIT_FOR_KEY = "wait_for_key"  # wait in its object key's queue (`pending`)
    SUSPEND = "suspend"  # wait for a notification (`suspended`)
    BACK_OFF = "back_off"  # retried later (`backing-off`)
    PAUSE = "pause"  # parked until resumed (`paused`)
    COMPLETE = "complete"  # completed (succeeded, failed, cancelled or killed)
    RESUME = "resume"  # a paused one runs again (forced, from outside)
    FORCE_PAUSE = "force_pause"  # parked from outside, whoever holds the lease (the epoch moves on)
    FORCE_COMPLETE = "force_complete"  # completed from outside (a kill), whoever holds the lease


@dataclass(frozen=True, slots=True)
class ArmTimer:
    """A timer due at `due_ms` (ms since the epoch): its record is written BEFORE the transition (a
    crash after the write cannot lose it), its wake-up asked of the scheduler after."""

    due_ms: int


@dataclass(frozen=True, slots=True)
class Enqueue:
    """Into its object key's queue after the write. `place_ms`: a new place in the queue at that time
    (ms since the epoch), drawn before the write (`creation.inbox_seq`); 0 keeps its place."""

    place_ms: int = 0


@dataclass(frozen=True, slots=True)
class WakeNow:
    """Wake it now (the scheduler's work queue) after the write."""


@dataclass(frozen=True, slots=True)
class NotifyWaiters:
    """Tell the in-process waiters on its result to look again (it paused)."""


@dataclass(frozen=True, slots=True)
class CancelSleeps:
    """Delete the timers of the sleeps it no longer awaits (it completed)."""


@dataclass(frozen=True, slots=True)
class KillCalleesBehind:
    """Kill the callees waiting in the queue of the object key it holds (killed: before the key goes on)."""


@dataclass(frozen=True, slots=True)
class TellCallers:
    """What follows a completing write (`Endings.ended`): waiters woken, callers attached since told,
    the object key handed on, a workflow's retention started. Its callers known before the write
    were told before it (`Endings.tell_callers`, part of the COMPLETE transition)."""


@dataclass(frozen=True, slots=True)
class KillStartedCallees:
    """Kill the callees it started that have not completed (killed: the retry policy's `kill`)."""


@dataclass(frozen=True, slots=True)
class Signal:
    """Deliver the cancel signal (a notification: stored, its doorbell rung, it is woken)."""


Effect = (
    ArmTimer
    | Enqueue
    | WakeNow
    | NotifyWaiters
    | CancelSleeps
    | KillCalleesBehind
    | TellCallers
    | KillStartedCallees
    | Signal
)
"""What follows a decision's write, in its order (`Decision.effects`); each is idempotent."""


@dataclass(frozen=True, slots=True)
class Decision:
    """The one result of every decision here: `transition`, the fields it writes (`changes`), the
    doorbell the write is conditional on (`doorbell`, None: the epoch only) and the `effects` that
    follow it, in order (`ArmTimer`'s record goes before the write). A COMPLETE decided before the
    completion's time is known (a cancel) names only its `completion` and `failure` (`ending`)."""

    transition: Transition
    changes: Changes = field(default_factory=dict)
    effects: tuple[Effect, ...] = ()
    doorbell: int | None = None

    def ending(self) -> tuple[str, dict[str, Any]]:
        """`(completion, failure)` of a COMPLETE or FORCE_COMPLETE decision: how it ends (`cancelled`,
        `killed`, ...) and its failure."""
        return str(self.changes["completion"]), dict(self.changes["failure"])


RUN = Decision(Transition.RUN)
"""Nothing to write: go on."""


def completion_changes(
    now_ms: int,
    completion: str,
    retention: Mapping[str, int],
    *,
    output: bytes | None = None,
    failure: Mapping[str, object] | None = None,
    journal_length: int | None = None,
) -> Changes:
    """The fields every completing write sets: status `completed`, `completion` (`succeeded`,
    `failed`, `cancelled`, `killed`), `completed_at_ms` = `now_ms`, no lease, no wake-up, no retry,
    nothing awaited; the `retention` fields (`Retention.changes`: `expires_at_s`,
    `journal_expires_at_ms`); and the result, `output` (bytes) or `failure` (`{"code", "message",
    ...}`), exactly one of them. With `journal_length`, the journal's length and every effect applied
    up to it (the engine completes only after applying them); a cancel or kill from outside leaves
    both as stored. A success clears `last_failure` (an earlier attempt's failure is no news then).

    Raises:
        ValueError: neither or both of `output` and `failure` given.
    """
    if (output is None) == (failure is None):
        raise ValueError("a completion has an output or a failure, exactly one")
    changes: Changes = {
        "status": "completed",
        "completion": completion,
        "completed_at_ms": now_ms,
        "lease_until_ms": 0,
        "next_retry_at_ms": 0,
        "waiting_on": None,
        "wake_up_at_ms": 0,
        **retention,
    }
    if output is not None:
        changes["output"] = output
        changes["last_failure"] = None
    else:
        changes["failure"] = dict(failure or {})
    if journal_length is not None:
        changes["journal_length"] = journal_length
        changes["effects_applied_upto"] = journal_length
    return changes


def suspension_changes(
    doorbell: int, waiting_on: Mapping[str, object], sleeps_due_ms: list[int], journal_length: int
) -> Changes:
    """The fields of a suspension: status `suspended`, no lease, no retry; what it awaits
    (`waiting_on`, `AwaitPoint.to_json`); `wake_up_at_ms`, the soonest of the awaited sleeps' due
    times (`sleeps_due_ms`, ms since the epoch; 0 if it awaits none: only a notification wakes it);
    the journal's length with every effect applied up to it; and `doorbell_read`, the doorbell the
    suspension is conditional on, so a ring after it shows even if its wake-up is lost (the sweeps
    wake what was rung since). A suspension ends a run of failures (`failures_in_a_row` 0)."""
    return {
        "doorbell_read": doorbell,
        "status": "suspended",
        "lease_until_ms": 0,
        "next_retry_at_ms": 0,
        "waiting_on": dict(waiting_on),
        "wake_up_at_ms": min(sleeps_due_ms, default=0),
        "failures_in_a_row": 0,
        "journal_length": journal_length,
        "effects_applied_upto": journal_length,
    }


def due_sleeps(sleeps: Mapping[int, int], now_ms: int) -> list[int]:
    """The completion ids of `sleeps` (`{completion_id: wake_up_time}`, ms since the epoch) due at
    `now_ms`, soonest first: each is completed at once (a SleepCompletion delivered now, on the next
    attempt's request or on the open stream), with no timer armed and no suspension first. A sleep
    is due once its wake-up time is reached (Restate service protocol, SleepCommandMessage: the
    runtime completes it at `wake_up_time`; restate-server 1.7.12 completes one already past at
    once, on the open stream), so a zero-length sleep never waits for a timer."""
    return [cid for cid, at in sorted(sleeps.items(), key=lambda kv: (kv[1], kv[0])) if at <= now_ms]


def decide_suspension(
    doorbell: int, waiting_on: Mapping[str, object], sleeps_due_ms: list[int], journal_length: int, now_ms: int
) -> Decision:
    """A suspension (`suspension_changes`, same arguments), conditional on `doorbell`: a
    notification stored since it was read makes the write fail, and the holder looks again.

    Unless an awaited sleep is due at `now_ms` (ms since the epoch; `due_sleeps`): then RUN, nothing
    written, and the holder resumes the handler at once with the sleep's completion, instead of
    suspending and waiting for a timer round trip (or a sweep) to wake it."""
    if due_sleeps(dict(enumerate(sleeps_due_ms)), now_ms):
        return RUN
    return Decision(
        Transition.SUSPEND, suspension_changes(doorbell, waiting_on, sleeps_due_ms, journal_length), doorbell=doorbell
    )


def decide_failure(
    record: InvocationRecord,
    journal_length: int,
    failure: AttemptFailure,
    policy: RetryPolicy,
    now_ms: int,
    retention: Mapping[str, int],
) -> Decision:
    """Decide what the failed attempt `failure` of `record` (its journal now `journal_length`
    entries long) leads to under `policy`, at `now_ms`.

    Rules (Restate service protocol V7 ErrorMessage behaviour; Restate's retry policy):
    - the handler's `FAIL` behaviour completes it with the failure;
    - once `policy.max_attempts` failures came in a row, `on_max_attempts` decides: `kill`
      completes it as killed, `pause` parks it;
    - the handler's `PAUSE` behaviour parks it;
    - otherwise it backs off `policy.delay_ms(failures in a row, the handler's next_retry_delay)`.
    Failures in a row grow however the journal did (the backoff and the attempt limit count them);
    `retry_count`, the SDK's count, restarts at 1 when the journal grew since the last failure.
    `retention` is what `Retention.changes` gives for a completion now (used by FAIL and KILL).
    Every outcome keeps the failure as `last_failure` (`code`, `message`, `at_ms`, `attempt`, the
    related command, and the SDK's `stacktrace` when it sent one, already bounded to 4 KiB by
    `failures.clip_stacktrace`): one per invocation, the previous one replaced.

    Returns COMPLETE (failed: then `CancelSleeps`, `TellCallers`; killed, as the kill API: its open
    callees are killed too, `KillCalleesBehind` before the key goes on, `KillStartedCallees` after),
    PAUSE (conditional on the record's doorbell: a cancel stored meanwhile must not be parked; then
    `NotifyWaiters`), or BACK_OFF with `ArmTimer` at the retry's due time (its record written first,
    so a crash cannot lose it).
    """
    grew = journal_length > record.retry_at_length
    in_a_row = record.failures_in_a_row + 1
    common: Changes = {
        "lease_until_ms": 0,
        "attempts": record.attempts,
        "retry_count": 1 if grew else record.retry_count + 1,
        "retry_at_length": journal_length,
        "retry_since_ms": now_ms if grew else record.retry_since_ms or now_ms,
        "failures_in_a_row": in_a_row,
        "last_failure": {
            "code": failure.code,
            "message": failure.message,
            "at_ms": now_ms,
            "attempt": record.attempts,
            **failure.related(),
            **({"stacktrace": failure.stacktrace} if failure.stacktrace else {}),
        },
        "journal_length": journal_length,
        "effects_applied_upto": journal_length,
    }
    exhausted = policy.exhausted(in_a_row)
    if failure.behavior == pb.FAIL or (exhausted and policy.on_max_attempts == "kill"):
        killed = failure.behavior != pb.FAIL
        ending = completion_changes(
            now_ms,
            "killed" if killed else "failed",
            retention,
            failure={"code": failure.code, "message": failure.message},
        )
        then: tuple[Effect, ...] = (CancelSleeps(), TellCallers())
        if killed:
            then = (CancelSleeps(), KillCalleesBehind(), TellCallers(), KillStartedCallees())
        return Decision(Transition.COMPLETE, {**common, **ending}, then)
    if failure.behavior == pb.PAUSE or exhausted:
        paused = {**common, "status": "paused", "next_retry_at_ms": 0}
        return Decision(Transition.PAUSE, paused, (NotifyWaiters(),), doorbell=record.doorbell)
    due = now_ms + policy.delay_ms(in_a_row, failure.next_retry_delay_ms)
    backing_off = {**common, "status": "backing-off", "next_retry_at_ms": due, "wake_up_at_ms": due}
    return Decision(Transition.BACK_OFF, backing_off, (ArmTimer(due),))


def key_unsure(record: InvocationRecord) -> bool:
    """True if `record`, an exclusive invocation created on its key (still marked with its place,
    `inbox_seq`), may not hold its key: a crash between creating it and taking the key. The
    engine then reads the key's holder (`Store.lock_holder`) for `decide_start`."""
    return takes_turn(record) and bool(record.inbox_seq)


def decide_start(
    record: InvocationRecord, holds_key: bool | None, fresh: Collection[str], now_ms: int, cancel_key: str
) -> Decision:
    """Decide what a wake-up that took the lease on `record` does first, at `now_ms`.

    `holds_key` is whether it holds its object key (read only when `key_unsure`, else None);
    `fresh` the keys of the notifications stored and not yet journaled; `cancel_key` the cancel
    signal's notification key. Rules, in order:
    - an exclusive invocation that never took its key (`holds_key` False) queues, in its place
      (WAIT_FOR_KEY, then `Enqueue`);
    - a delayed exclusive invocation whose time has come queues, in a new place (its turn for the
      key starts now: `Enqueue(place_ms=now_ms)`);
    - a delayed invocation not yet due starts at its time, whatever arrives: cancelled now if the
      cancel signal arrived (COMPLETE, `ending` 409 `cancelled`), else back to sleep as `scheduled`
      until `execution_time_ms` (`not_due`);
    - otherwise it runs (RUN).
    """
    if holds_key is False:
        changes: Changes = {"status": "pending", "lease_until_ms": 0, "inbox_seq": record.inbox_seq}
        return Decision(Transition.WAIT_FOR_KEY, changes, (Enqueue(),))
    if takes_turn(record) and record.execution_time_ms and record.execution_time_ms <= now_ms:
        changes = {"status": "pending", "lease_until_ms": 0, "execution_time_ms": 0}
        return Decision(Transition.WAIT_FOR_KEY, changes, (Enqueue(place_ms=now_ms),))
    if record.execution_time_ms > now_ms:
        if cancel_key in fresh:
            return Decision(
                Transition.COMPLETE, {"completion": "cancelled", "failure": {"code": 409, "message": "cancelled"}}
            )
        return not_due("scheduled", record.execution_time_ms)
    return RUN


def not_due(status: str, due_ms: int) -> Decision:
    """Woken before its time (a duplicate or early timer, a back-off not over): its timer armed again
    for `due_ms` (ms since the epoch; recorded before the write) and the lease released as `status`."""
    return Decision(Transition.RELEASE_LEASE, {"status": status, "lease_until_ms": 0}, (ArmTimer(due_ms),))


def retry_not_due(record: InvocationRecord, fresh: bool, due_sleep: bool, now_ms: int) -> bool:
    """True if a wake-up of a backing-off `record` came before its retry time (`next_retry_at_ms`)
    with nothing new (no `fresh` notification, no `due_sleep`): it waits again, `backing-off`."""
    return record.next_retry_at_ms > now_ms and not fresh and not due_sleep


# --- operations from outside the handler (cancel, kill, pause, resume, purge) ------------------------


def check_open(record: InvocationRecord) -> None:
    """Kill, pause and cancel act on an invocation that has not completed (Restate's admin API
    answers 409 otherwise). Raises `Conflict` if `record` completed."""
    if record.status == "completed":
        raise Conflict(f"invocation {record.invocation_id} has already completed")


def check_pausable(record: InvocationRecord) -> None:
    """Only an invocation that has started is paused (restate-server 1.7.12 answers "not running"
    for one waiting in its object key's queue or for its delay). A paused one waiting for its key
    would be granted the key and hold it, paused, before every later call on that key (one waiting for
    a concurrency limit's slot, its slot). Raises
    `Conflict`, naming the fix, for a `pending` or `scheduled` one (and for a completed one)."""
    check_open(record)
    if record.status in ("pending", "scheduled"):
        if record.status == "scheduled":
            waits = "for its start time: a delay, or a rate limit's pacing"
        elif record.slot_limit:  # queued behind a concurrency limit, not an object key
            waits = f"for a slot of the concurrency limit {record.slot.removeprefix(POOL_PREFIX)} ({record.slot_limit})"
        else:
            waits = "for its object key"
        raise Conflict(
            f"invocation {record.invocation_id} is not running yet (it waits {waits}): only a started "
            "invocation is paused; cancel or kill it instead"
        )


def decide_pause(record: InvocationRecord) -> Decision:
    """Decide the pause of `record` from outside: FORCE_PAUSE (the epoch moves on: an attempt under
    way is not cut short, but its outcome is discarded), then `NotifyWaiters`. Raises `Conflict` as
    `check_pausable` does (completed, or not started yet)."""
    check_pausable(record)
    return Decision(Transition.FORCE_PAUSE, {}, (NotifyWaiters(),))


def decide_cancel(record: InvocationRecord, started: bool) -> Decision:
    """Decide what cancelling `record` does; `started` is whether its journal holds more than its
    Input (an attempt committed something). One that never started and waits (`ready`, `scheduled`,
    `pending`) ends now (COMPLETE, `ending` 409 `cancelled`, only if no worker took it meanwhile: else
    the signal); a paused one is resumed so the signal reaches it (RESUME with a fresh retry budget,
    then `Signal`); any other gets the signal (RUN, then `Signal`; as restate-server 1.7.12: the
    handler may compensate). Raises `Conflict` if it completed."""
    check_open(record)
    if record.status in ("ready", "scheduled", "pending") and not started:
        return Decision(
            Transition.COMPLETE, {"completion": "cancelled", "failure": {"code": 409, "message": "cancelled"}}
        )
    if record.status == "paused":
        return Decision(Transition.RESUME, {}, (Signal(),))
    return Decision(Transition.RUN, {}, (Signal(),))


def decide_kill(record: InvocationRecord) -> Decision:
    """Decide the kill of `record` (Restate's kill: no more handler code runs): FORCE_COMPLETE, killed
    with 409, whoever holds the lease (the epoch moves on, so its later writes fail), then
    `CancelSleeps`, `KillCalleesBehind` (callees queued behind it for its object key, before the key
    goes on), `TellCallers` (what follows the completing write) and `KillStartedCallees` (every callee
    it started that has not completed, as restate-server 1.7.12). Raises `Conflict` if it completed."""
    check_open(record)
    changes: Changes = {"completion": "killed", "failure": {"code": 409, "message": "killed"}}
    return Decision(
        Transition.FORCE_COMPLETE, changes, (CancelSleeps(), KillCalleesBehind(), TellCallers(), KillStartedCallees())
    )


RESUMABLE = ("paused", "suspended", "backing-off")
"""Statuses `decide_resume` runs again now (restate-server's resume: paused or suspended; a backing-off
one retries at once)."""


def decide_resume(record: InvocationRecord, holds_key: bool, now_ms: int, moves: bool = False) -> Decision:
    """Decide how `record` runs again at `now_ms` on a resume (Restate's admin API: resume "a paused
    or suspended invocation; if it is backing off, the retry happens at once"), with a fresh retry
    budget (RESUME). An exclusive invocation paused before it held its object key (`holds_key`
    False) goes back in the key's queue (`Enqueue`), in its old place if it had one (its entry stayed
    in the queue while it was paused: a new one would be left behind once it completes; found by the
    simulator, seed 317), else in a new place at `now_ms`; any other is woken now (`WakeNow`). A
    suspended invocation whose awaited completions are still missing suspends again at once.

    `moves`: the resume also moves it to another deployment. A `ready` or `running` invocation
    resumes as it is (RUN: woken if `ready`, nothing if `running`), unless it `moves`.

    Raises `TooEarly` (425) if it is `scheduled` or `pending` (not started yet) and `Conflict` (409)
    if it completed, or runs and `moves` (restate-server 1.7.12's answers)."""
    if record.status in ("scheduled", "pending"):
        raise TooEarly(
            f"invocation {record.invocation_id} is {record.status}: it has not started yet, so it cannot be resumed"
        )
    if record.status == "completed":
        raise Conflict(f"invocation {record.invocation_id} is completed, so it cannot be resumed")
    if record.status not in RESUMABLE:
        if moves:
            raise Conflict(
                f"invocation {record.invocation_id} is {record.status}: its deployment can change only while it "
                "is paused, suspended or backing off; pause it first"
            )
        return Decision(Transition.RUN, {}, (WakeNow(),) if record.status == "ready" else ())
    changes: Changes = {"status": "ready", "retry_count": 0, "failures_in_a_row": 0, "next_retry_at_ms": 0}
    changes["lease_until_ms"] = 0
    if takes_turn(record) and not holds_key:
        changes.update(status="pending", inbox_seq=record.inbox_seq or f"{now_ms:013d}{record.invocation_id}")
        return Decision(Transition.RESUME, changes, (Enqueue(),))
    return Decision(Transition.RESUME, changes, (WakeNow(),))


def check_purge(record: InvocationRecord) -> None:
    """Only a completed invocation is purged (its record, journal and notifications deleted).
    Raises `Conflict` naming the fix otherwise."""
    if record.status != "completed":
        raise Conflict(
            f"invocation {record.invocation_id} is {record.status}: only completed ones are purged; "
            "cancel or kill it first, then purge it"
        )
