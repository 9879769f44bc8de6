"""Pure decisions of the invocation engine: given what is loaded and what happened, what to write.

Nothing here reads or writes a store, sends a request or reads a clock: each function takes the
invocation's record, the event and `now_ms`, and returns values the engine then carries out (the
journal first, conditionally, then each effect). So every rule here is tested without processes
(tests/unit/test_decisions.py).

- `completion_changes`: the fields of an invocation's completing write, whoever completes it (the
  handler's Output, a terminal failure, the retry policy giving up, a cancel or a kill).
- `decide_failure`: what a failed attempt leads to under the retry policy: back off, pause, fail or
  kill (Restate's retry policy: exponential backoff, then `on_max_attempts`).
- `suspension_changes`: the fields of a suspension (Restate service protocol, SuspensionMessage).
- `decide_start`: what a wake-up that took the lease does first: queue for the object key, end a
  delayed invocation cancelled before its time, go back to sleep (not due yet), or run.
- the operations from outside the handler (`control_plane/operations.py` carries them out):
  `decide_cancel` (end now, or deliver the cancel signal, resuming a paused one first),
  `decide_resume` (runnable now, or back in its key's queue in its old place), `check_open` (kill:
  refused once completed), `check_pausable` (only a started one) and `check_purge` (only a
  completed one is purged).
"""

from __future__ import annotations

from collections.abc import Collection, Mapping
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

from control_plane.attempt import AttemptFailure
from control_plane.errors import Conflict
from control_plane.keyed import is_exclusive
from control_plane.ports import InvocationRecord
from control_plane.protocol import protocol_pb2 as pb
from control_plane.retry import RetryPolicy

Changes = dict[str, Any]
"""Fields of `InvocationRecord` and their new values, as the store's named transitions take them
(`InvocationTransitions`: `complete`, `suspend`, `back_off`, `pause`, `wait_for_key`)."""


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


class AfterFailure(StrEnum):
    """What a failed attempt leads to (`decide_failure`)."""

    BACK_OFF = "back-off"  # retried at `FailureDecision.retry_at_ms`
    PAUSE = "pause"  # parked until resumed (the handler asked, or the policy's attempts ran out)
    FAIL = "fail"  # completed with the failure (the handler said it is terminal)
    KILL = "kill"  # completed as killed (the policy's attempts ran out, `on_max_attempts = kill`)


@dataclass(frozen=True, slots=True)
class FailureDecision:
    """The decision on a failed attempt: `then`, the fields to write (`changes`, the completing
    write's included for FAIL and KILL), and for BACK_OFF the due time of the retry (ms since the
    epoch; its timer is written before `changes`, so a crash cannot lose it)."""

    then: AfterFailure
    changes: Changes
    retry_at_ms: int = 0


def decide_failure(
    record: InvocationRecord,
    journal_length: int,
    failure: AttemptFailure,
    policy: RetryPolicy,
    now_ms: int,
    retention: Mapping[str, int],
) -> FailureDecision:
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
        },
        "journal_length": journal_length,
        "effects_applied_upto": journal_length,
    }
    exhausted = policy.exhausted(in_a_row)
    if failure.behavior == pb.FAIL or (exhausted and policy.on_max_attempts == "kill"):
        then = AfterFailure.FAIL if failure.behavior == pb.FAIL else AfterFailure.KILL
        ending = completion_changes(
            now_ms,
            "failed" if then is AfterFailure.FAIL else "killed",
            retention,
            failure={"code": failure.code, "message": failure.message},
        )
        return FailureDecision(then, {**common, **ending})
    if failure.behavior == pb.PAUSE or exhausted:
        return FailureDecision(AfterFailure.PAUSE, {**common, "status": "paused", "next_retry_at_ms": 0})
    due = now_ms + policy.delay_ms(in_a_row, failure.next_retry_delay_ms)
    return FailureDecision(
        AfterFailure.BACK_OFF, {**common, "status": "backing-off", "next_retry_at_ms": due, "wake_up_at_ms": due}, due
    )


class Start(StrEnum):
    """What a wake-up that took the lease does first (`decide_start`)."""

    QUEUE = "queue"  # wait in the object key's queue (`pending`): `StartDecision.changes`, then enqueue
    CANCEL = "cancel"  # a delayed invocation cancelled before its time: completed as cancelled (409)
    NOT_DUE = "not-due"  # woken before its time: re-arm `StartDecision.due_ms`, release as `status`
    RUN = "run"  # go on: attempt, unless `retry_not_due` says the back-off is not over


@dataclass(frozen=True, slots=True)
class StartDecision:
    """The decision of `decide_start`: `then`; for QUEUE the fields of the `pending` write
    (`changes`) and whether it needs a new place in the queue (`new_place`: the engine draws it,
    `creation.inbox_seq`); for NOT_DUE the status it is released with and when it is due (ms)."""

    then: Start
    changes: Changes | None = None
    new_place: bool = False
    status: str = ""
    due_ms: int = 0


def key_unsure(record: InvocationRecord) -> bool:
    """True if `record`, an exclusive invocation created on its key (still marked with its place,
    `inbox_seq`), may not hold its key: a crash between creating it and taking the key. The
    engine then reads the key's holder (`Store.lock_holder`) for `decide_start`."""
    return is_exclusive(record) and bool(record.inbox_seq)


def decide_start(
    record: InvocationRecord, holds_key: bool | None, fresh: Collection[str], now_ms: int, cancel_key: str
) -> StartDecision:
    """Decide what a wake-up that took the lease on `record` does first, at `now_ms`.

    `holds_key` is whether it holds its object key (read only when `key_unsure`, else None);
    `fresh` the keys of the notifications stored and not yet journaled; `cancel_key` the cancel
    signal's notification key. Rules, in order:
    - an exclusive invocation that never took its key (`holds_key` False) queues, in its place;
    - a delayed exclusive invocation whose time has come queues, in a new place (its turn for the
      key starts now);
    - a delayed invocation not yet due starts at its time, whatever arrives: cancelled now if the
      cancel signal arrived, else back to sleep as `scheduled` until `execution_time_ms`;
    - otherwise it runs.
    """
    if holds_key is False:
        return StartDecision(Start.QUEUE, {"status": "pending", "lease_until_ms": 0, "inbox_seq": record.inbox_seq})
    if is_exclusive(record) and record.execution_time_ms and record.execution_time_ms <= now_ms:
        changes: Changes = {"status": "pending", "lease_until_ms": 0, "execution_time_ms": 0}
        return StartDecision(Start.QUEUE, changes, new_place=True)
    if record.execution_time_ms > now_ms:
        if cancel_key in fresh:
            return StartDecision(Start.CANCEL)
        return StartDecision(Start.NOT_DUE, status="scheduled", due_ms=record.execution_time_ms)
    return StartDecision(Start.RUN)


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
    would be granted the key and hold it, paused, before every later call on that key. Raises
    `Conflict`, naming the fix, for a `pending` or `scheduled` one (and for a completed one)."""
    check_open(record)
    if record.status in ("pending", "scheduled"):
        waits = "for its object key" if record.status == "pending" else "for its delay"
        raise Conflict(
            f"invocation {record.invocation_id} is not running yet (it waits {waits}): only a started "
            "invocation is paused; cancel or kill it instead"
        )


class Cancel(StrEnum):
    """What a cancel does (`decide_cancel`)."""

    END_NOW = "end-now"  # not started: completed as cancelled (409), only if no worker took it meanwhile
    SIGNAL = "signal"  # deliver the cancel signal: the handler sees a terminal error at its next await
    RESUME_THEN_SIGNAL = "resume-then-signal"  # paused: made runnable (fresh retry budget), then signalled


def decide_cancel(record: InvocationRecord, started: bool) -> Cancel:
    """Decide what cancelling `record` does; `started` is whether its journal holds more than its
    Input (an attempt committed something). One that never started and waits (`ready`, `scheduled`,
    `pending`) ends now; a paused one is resumed so the signal reaches it; any other gets the signal
    (as restate-server 1.7.12: the handler may compensate). Raises `Conflict` if it completed."""
    check_open(record)
    if record.status in ("ready", "scheduled", "pending") and not started:
        return Cancel.END_NOW
    if record.status == "paused":
        return Cancel.RESUME_THEN_SIGNAL
    return Cancel.SIGNAL


@dataclass(frozen=True, slots=True)
class ResumeDecision:
    """The decision of `decide_resume`: the fields of the `resume` write (`changes`, a fresh retry
    budget) and whether it goes back in its object key's queue (`queue`) rather than woken now."""

    changes: Changes
    queue: bool


def decide_resume(record: InvocationRecord, holds_key: bool, now_ms: int) -> ResumeDecision:
    """Decide how paused `record` runs again at `now_ms`, with a fresh retry budget. An exclusive
    invocation paused before it held its object key (`holds_key` False) goes back in the key's
    queue, in its old place if it had one (its entry stayed in the queue while it was paused: a new
    one would be left behind once it completes; found by the simulator, seed 317), else in a new
    place at `now_ms`. Raises `Conflict` if it is not paused."""
    if record.status != "paused":
        raise Conflict(f"invocation {record.invocation_id} is {record.status}, not paused; only paused ones resume")
    changes: Changes = {"status": "ready", "retry_count": 0, "failures_in_a_row": 0, "next_retry_at_ms": 0}
    changes["lease_until_ms"] = 0
    queue = is_exclusive(record) and not holds_key
    if queue:
        changes.update(status="pending", inbox_seq=record.inbox_seq or f"{now_ms:013d}{record.invocation_id}")
    return ResumeDecision(changes, queue)


def check_purge(record: InvocationRecord) -> None:
    """Only a completed invocation is purged (its record, journal and notifications deleted).
    Raises `Conflict` naming the fix otherwise."""
    if record.status != "completed":
        raise Conflict(
            f"invocation {record.invocation_id} is {record.status}: only completed ones are purged; "
            "cancel or kill it first, then purge it"
        )
