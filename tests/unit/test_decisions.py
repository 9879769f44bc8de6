"""The engine's pure decisions (control_plane/decisions.py): a completing write's fields, and what a
failed attempt, a wake-up, a cancel or a resume leads to, each one `Decision` (a named transition,
its fields, its effects). No store, no process, no clock."""

from __future__ import annotations

import pytest

from control_plane.attempt import AttemptFailure
from control_plane.decisions import (
    RUN,
    ArmTimer,
    CancelSleeps,
    Decision,
    Enqueue,
    KillCalleesBehind,
    KillStartedCallees,
    NotifyWaiters,
    Signal,
    TellCallers,
    Transition,
    WakeNow,
    check_open,
    check_pausable,
    check_purge,
    completion_changes,
    decide_cancel,
    decide_failure,
    decide_kill,
    decide_pause,
    decide_resume,
    decide_start,
    decide_suspension,
    due_sleeps,
    key_unsure,
    not_due,
    retry_not_due,
    suspension_changes,
)
from control_plane.errors import Conflict, TooEarly
from control_plane.protocol import protocol_pb2 as pb
from control_plane.retry import RetryPolicy
from tests.helpers.records import invocation

NOW = 50_000
RETENTION = {"expires_at_s": 9_999, "journal_expires_at_ms": 9_000_000}
POLICY = RetryPolicy(initial_interval_ms=100, exponentiation_factor=2.0, max_interval_ms=1_000, max_attempts=5)


def test_a_success_stores_the_output_clears_the_last_failure_and_leaves_nothing_to_wake() -> None:
    changes = completion_changes(NOW, "succeeded", RETENTION, output=b'"hi"', journal_length=7)
    assert changes == {
        "status": "completed",
        "completion": "succeeded",
        "completed_at_ms": NOW,
        "lease_until_ms": 0,
        "next_retry_at_ms": 0,
        "waiting_on": None,
        "wake_up_at_ms": 0,
        "output": b'"hi"',
        "last_failure": None,
        "journal_length": 7,
        "effects_applied_upto": 7,
        **RETENTION,
    }


def test_a_kill_from_outside_keeps_the_journal_length_and_the_last_failure_as_stored() -> None:
    changes = completion_changes(NOW, "killed", RETENTION, failure={"code": 409, "message": "killed"})
    assert changes["failure"] == {"code": 409, "message": "killed"}
    assert "journal_length" not in changes
    assert "effects_applied_upto" not in changes
    assert "last_failure" not in changes
    assert "output" not in changes


@pytest.mark.parametrize("result", [{}, {"output": b"x", "failure": {"code": 500, "message": "m"}}])
def test_a_completion_has_exactly_one_result(result: dict[str, object]) -> None:
    with pytest.raises(ValueError, match="exactly one"):
        completion_changes(NOW, "failed", RETENTION, **result)  # type: ignore[arg-type]


def test_a_retryable_failure_backs_off_exponentially_with_failures_in_a_row() -> None:
    record = invocation(attempts=3, failures_in_a_row=2, retry_count=2, retry_at_length=4, retry_since_ms=10_000)
    decision = decide_failure(record, 4, AttemptFailure(500, "boom"), POLICY, NOW, RETENTION)
    assert decision.transition is Transition.BACK_OFF
    assert decision.effects == (ArmTimer(NOW + 400),)  # 100 ms x 2 x 2: the third failure in a row
    assert decision.doorbell is None
    assert decision.changes["status"] == "backing-off"
    assert decision.changes["wake_up_at_ms"] == NOW + 400
    assert decision.changes["failures_in_a_row"] == 3
    assert decision.changes["retry_count"] == 3  # the journal did not grow: the SDK's count goes on
    assert decision.changes["retry_since_ms"] == 10_000
    assert decision.changes["last_failure"] == {"code": 500, "message": "boom", "at_ms": NOW, "attempt": 3}
    assert decision.changes["lease_until_ms"] == 0


def test_a_journal_that_grew_restarts_the_sdks_retry_count_but_not_the_backoff() -> None:
    record = invocation(failures_in_a_row=2, retry_count=2, retry_at_length=4, retry_since_ms=10_000)
    decision = decide_failure(record, 6, AttemptFailure(500, "boom"), POLICY, NOW, RETENTION)
    assert decision.changes["retry_count"] == 1
    assert decision.changes["retry_since_ms"] == NOW
    assert decision.effects == (ArmTimer(NOW + 400),)


def test_the_handlers_next_retry_delay_overrides_the_policy_once() -> None:
    failure = AttemptFailure(500, "later", next_retry_delay_ms=7_000)
    assert decide_failure(invocation(), 1, failure, POLICY, NOW, RETENTION).effects == (ArmTimer(NOW + 7_000),)


def test_the_last_attempt_pauses_or_kills_as_the_policy_says() -> None:
    record = invocation(failures_in_a_row=4, doorbell=3)
    paused = decide_failure(record, 1, AttemptFailure(500, "boom"), POLICY, NOW, RETENTION)
    assert paused.transition is Transition.PAUSE
    assert paused.changes["status"] == "paused"
    assert paused.changes["next_retry_at_ms"] == 0
    assert paused.doorbell == 3  # a cancel stored meanwhile must not be parked
    assert paused.effects == (NotifyWaiters(),)
    kill_policy = RetryPolicy(max_attempts=5, on_max_attempts="kill")
    killed = decide_failure(record, 1, AttemptFailure(500, "boom"), kill_policy, NOW, RETENTION)
    assert killed.transition is Transition.COMPLETE
    assert killed.effects == (CancelSleeps(), KillCalleesBehind(), TellCallers(), KillStartedCallees())
    assert killed.changes["status"] == "completed"
    assert killed.changes["completion"] == "killed"
    assert killed.changes["failure"] == {"code": 500, "message": "boom"}
    assert killed.changes["expires_at_s"] == RETENTION["expires_at_s"]


def test_the_handlers_behaviour_fails_or_pauses_at_once() -> None:
    failed = decide_failure(invocation(), 2, AttemptFailure(400, "bad", behavior=pb.FAIL), POLICY, NOW, RETENTION)
    assert failed.transition is Transition.COMPLETE
    assert failed.effects == (CancelSleeps(), TellCallers())
    assert failed.changes["completion"] == "failed"
    assert failed.changes["journal_length"] == 2
    assert failed.changes["last_failure"]["code"] == 400
    paused = decide_failure(invocation(), 2, AttemptFailure(500, "wait", behavior=pb.PAUSE), POLICY, NOW, RETENTION)
    assert paused.transition is Transition.PAUSE


def test_no_limit_means_it_never_stops_backing_off() -> None:
    record = invocation(failures_in_a_row=10_000)
    unlimited = RetryPolicy(max_attempts=0, max_interval_ms=60_000)
    decision = decide_failure(record, 1, AttemptFailure(500, "boom"), unlimited, NOW, RETENTION)
    assert decision.transition is Transition.BACK_OFF
    assert decision.effects == (ArmTimer(NOW + 60_000),)


def test_a_suspension_records_the_doorbell_it_read_and_wakes_at_the_soonest_awaited_sleep() -> None:
    waiting_on = {"completions": [1, 2], "signals": [], "named_signals": []}
    changes = suspension_changes(7, waiting_on, [NOW + 900, NOW + 300], 5)
    assert changes["doorbell_read"] == 7
    assert changes["status"] == "suspended"
    assert changes["wake_up_at_ms"] == NOW + 300
    assert changes["waiting_on"] == waiting_on
    assert changes["failures_in_a_row"] == 0
    assert changes["effects_applied_upto"] == 5
    assert suspension_changes(0, waiting_on, [], 5)["wake_up_at_ms"] == 0  # only a notification wakes it
    decision = decide_suspension(7, waiting_on, [NOW + 900, NOW + 300], 5, NOW)
    assert decision == Decision(Transition.SUSPEND, changes, doorbell=7)  # conditional on the doorbell it read


@pytest.mark.parametrize("due", [NOW - 5, NOW])
def test_an_awaited_sleep_already_due_resumes_at_once_instead_of_suspending(due: int) -> None:
    """A zero-length sleep (or one whose time came while the attempt ran) is not suspended on: no
    write, no timer round trip; the holder looks again and delivers its completion (issue 24)."""
    waiting_on = {"completions": [1, 2], "signals": [], "named_signals": []}
    assert decide_suspension(7, waiting_on, [NOW + 900, due], 5, NOW) == RUN
    assert decide_suspension(7, waiting_on, [NOW + 1], 5, NOW).transition is Transition.SUSPEND
    assert decide_suspension(7, waiting_on, [], 5, NOW).transition is Transition.SUSPEND  # a notification wakes it


def test_the_due_sleeps_are_those_whose_wake_up_time_is_reached_soonest_first() -> None:
    sleeps = {3: NOW + 10, 1: NOW, 2: NOW - 20, 4: NOW - 20}
    assert due_sleeps(sleeps, NOW) == [2, 4, 1]
    assert due_sleeps(sleeps, NOW + 10) == [2, 4, 1, 3]
    assert due_sleeps(sleeps, NOW - 21) == []
    assert due_sleeps({}, NOW) == []


# --- decide_start: what a wake-up that took the lease does first ----------------------------------

CANCEL = "s1"
OBJECT = {"service_type": "VIRTUAL_OBJECT", "handler_type": "EXCLUSIVE", "key": "k"}


def test_an_exclusive_invocation_that_never_took_its_key_queues_in_its_place() -> None:
    record = invocation(**OBJECT, inbox_seq="0001")
    assert key_unsure(record)
    decision = decide_start(record, False, set(), NOW, CANCEL)
    assert (decision.transition, decision.effects) == (Transition.WAIT_FOR_KEY, (Enqueue(),))
    assert decision.changes == {"status": "pending", "lease_until_ms": 0, "inbox_seq": "0001"}
    assert decide_start(record, True, set(), NOW, CANCEL) == RUN


def test_a_delayed_exclusive_invocation_whose_time_came_queues_in_a_new_place() -> None:
    record = invocation(**OBJECT, execution_time_ms=NOW - 1)
    assert not key_unsure(record)
    decision = decide_start(record, None, set(), NOW, CANCEL)
    assert (decision.transition, decision.effects) == (Transition.WAIT_FOR_KEY, (Enqueue(place_ms=NOW),))
    assert decision.changes == {"status": "pending", "lease_until_ms": 0, "execution_time_ms": 0}


def test_a_delayed_invocation_starts_at_its_time_unless_cancelled_before() -> None:
    record = invocation(execution_time_ms=NOW + 5_000)
    decision = decide_start(record, None, {"c3"}, NOW, CANCEL)
    assert decision == not_due("scheduled", NOW + 5_000)
    assert decision.transition is Transition.RELEASE_LEASE
    assert decision.changes == {"status": "scheduled", "lease_until_ms": 0}
    assert decision.effects == (ArmTimer(NOW + 5_000),)
    cancelled = decide_start(record, None, {CANCEL}, NOW, CANCEL)
    assert cancelled.transition is Transition.COMPLETE
    assert cancelled.ending() == ("cancelled", {"code": 409, "message": "cancelled"})
    assert decide_start(invocation(execution_time_ms=NOW), None, set(), NOW, CANCEL) == RUN


def test_a_back_off_waits_again_only_when_nothing_new_came() -> None:
    record = invocation(status="backing-off", next_retry_at_ms=NOW + 1)
    assert retry_not_due(record, False, False, NOW)
    assert not retry_not_due(record, True, False, NOW)  # a notification: run now
    assert not retry_not_due(record, False, True, NOW)  # a sleep is due: run now
    assert not retry_not_due(record, False, False, NOW + 1)


# --- operations from outside the handler ---------------------------------------------------------


@pytest.mark.parametrize(
    ("status", "started", "expected"),
    [
        ("ready", False, Transition.COMPLETE),
        ("scheduled", False, Transition.COMPLETE),
        ("pending", False, Transition.COMPLETE),
        ("ready", True, Transition.RUN),  # it ran and was woken again: its handler may compensate
        ("running", False, Transition.RUN),
        ("suspended", True, Transition.RUN),
        ("backing-off", True, Transition.RUN),
        ("paused", True, Transition.RESUME),
    ],
)
def test_a_cancel_ends_what_never_started_resumes_what_is_paused_and_signals_the_rest(
    status: str, started: bool, expected: Transition
) -> None:
    decision = decide_cancel(invocation(status=status), started)
    assert decision.transition is expected
    if expected is Transition.COMPLETE:
        assert decision.ending() == ("cancelled", {"code": 409, "message": "cancelled"})
        assert decision.effects == ()
    else:  # the signal, after a paused one is made runnable
        assert decision.effects == (Signal(),)
        assert decision.changes == {}


def test_kill_pause_and_cancel_refuse_a_completed_invocation_and_purge_takes_only_completed_ones() -> None:
    with pytest.raises(Conflict, match="already completed"):
        decide_cancel(invocation(status="completed"), True)
    with pytest.raises(Conflict, match="already completed"):
        check_open(invocation(status="completed"))
    check_open(invocation(status="suspended"))
    with pytest.raises(Conflict, match="cancel or kill it first"):
        check_purge(invocation(status="suspended"))
    check_purge(invocation(status="completed"))


def test_a_resume_gives_a_fresh_retry_budget_and_wakes_now() -> None:
    decision = decide_resume(invocation(status="paused", retry_count=4, failures_in_a_row=4), True, NOW)
    assert (decision.transition, decision.effects) == (Transition.RESUME, (WakeNow(),))
    assert decision.changes == {
        "status": "ready",
        "retry_count": 0,
        "failures_in_a_row": 0,
        "next_retry_at_ms": 0,
        "lease_until_ms": 0,
    }


def test_a_resume_of_an_exclusive_one_paused_before_its_key_queues_it_in_its_old_place_else_a_new_one() -> None:
    exclusive = {"status": "paused", "service_type": "VIRTUAL_OBJECT", "handler_type": "EXCLUSIVE", "key": "k"}
    waiting = invocation(**exclusive)
    kept = decide_resume(invocation(**exclusive, inbox_seq="0000000001000inv_1"), False, NOW)
    assert (kept.transition, kept.effects) == (Transition.RESUME, (Enqueue(),))
    assert kept.changes["status"] == "pending"
    assert kept.changes["inbox_seq"] == "0000000001000inv_1"  # its entry stayed in the queue (seed 317)
    fresh = decide_resume(waiting, False, NOW)
    assert fresh.changes["inbox_seq"] == f"{NOW:013d}inv_1"
    assert decide_resume(waiting, True, NOW).effects == (WakeNow(),)  # it holds its key: it runs now


@pytest.mark.parametrize("status", ["suspended", "backing-off"])
def test_a_suspended_or_backing_off_invocation_resumes_now_as_restate_server_resumes_it(status: str) -> None:
    decision = decide_resume(invocation(status=status, retry_count=2, next_retry_at_ms=NOW + 60_000), True, NOW)
    assert (decision.transition, decision.effects) == (Transition.RESUME, (WakeNow(),))
    assert decision.changes["status"] == "ready" and decision.changes["next_retry_at_ms"] == 0


def test_a_running_invocation_resumes_as_it_is_but_does_not_move() -> None:
    assert decide_resume(invocation(status="running"), True, NOW) == Decision(Transition.RUN, {}, ())
    assert decide_resume(invocation(status="ready"), True, NOW).effects == (WakeNow(),)
    with pytest.raises(Conflict, match="pause it first"):
        decide_resume(invocation(status="running"), True, NOW, moves=True)


@pytest.mark.parametrize(("status", "error"), [("scheduled", TooEarly), ("pending", TooEarly), ("completed", Conflict)])
def test_an_invocation_not_started_or_completed_does_not_resume(status: str, error: type[Exception]) -> None:
    with pytest.raises(error):
        decide_resume(invocation(status=status), True, NOW)


@pytest.mark.parametrize("status", ["pending", "scheduled", "completed"])
def test_only_a_started_invocation_is_paused(status: str) -> None:
    with pytest.raises(Conflict):
        check_pausable(invocation(status=status))
    with pytest.raises(Conflict):
        decide_pause(invocation(status=status))


@pytest.mark.parametrize("status", ["ready", "running", "suspended", "backing-off", "paused"])
def test_a_started_invocation_may_be_paused(status: str) -> None:
    check_pausable(invocation(status=status))
    assert decide_pause(invocation(status=status)) == Decision(Transition.FORCE_PAUSE, {}, (NotifyWaiters(),))


def test_a_kill_completes_whoever_holds_the_lease_then_kills_its_callees() -> None:
    decision = decide_kill(invocation(status="running", epoch=7))
    assert decision.transition is Transition.FORCE_COMPLETE
    assert decision.ending() == ("killed", {"code": 409, "message": "killed"})
    # the callees queued behind it for its key before the key goes on; the others after
    assert decision.effects == (CancelSleeps(), KillCalleesBehind(), TellCallers(), KillStartedCallees())
    with pytest.raises(Conflict, match="already completed"):
        decide_kill(invocation(status="completed"))
