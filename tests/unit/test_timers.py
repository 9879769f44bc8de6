"""The timers seam (control_plane/timers.py): a timer's record is written before the scheduler's
hop, sleeps are armed the scheduler's lead early, cancelling a sleep deletes both places its timer
may be, and a wake-up of a completed invocation's timer deletes it after a lost lease."""

from __future__ import annotations

from typing import Any

from control_plane.held import Held
from control_plane.journal import Journal
from control_plane.ports import MAX_TIMER_MS
from control_plane.timers import LEAD_MIN_SLEEP_MS, Timers, Wake
from tests.helpers.records import invocation

NOW = 1_000_000


class Clock:
    def now_ms(self) -> int:
        return NOW


class Log:
    """Store and scheduler in one: every timer request, in order."""

    def __init__(self, status: str = "running", sleep_lead_ms: int = 0) -> None:
        self.calls: list[tuple[str, str, int]] = []
        self.status = status
        if sleep_lead_ms:
            self.sleep_lead_ms = sleep_lead_ms

    def put_timer(self, due_ms: int, invocation_id: str) -> None:
        self.calls.append(("put", invocation_id, due_ms))

    def delete_timer(self, due_ms: int, invocation_id: str) -> None:
        self.calls.append(("delete", invocation_id, due_ms))

    def wake_at(self, invocation_id: str, due_ms: int) -> None:
        self.calls.append(("hop", invocation_id, due_ms))

    def get_invocation(self, invocation_id: str) -> Any:
        return invocation(invocation_id, status=self.status)


def timers(log: Log) -> Timers:
    return Timers(log, log, Clock())  # type: ignore[arg-type]


def held() -> Held:
    return Held(invocation("inv_1", status="running", epoch=1), Journal(), [])


def test_arming_records_the_timer_first_then_hops_and_notes_it_for_the_lease_holder() -> None:
    log, mine = Log(), held()
    timers(log).arm("inv_1", NOW + 5_000, mine)
    assert log.calls == [("put", "inv_1", NOW + 5_000), ("hop", "inv_1", NOW + 5_000)]
    assert mine.timers == {NOW + 5_000}


def test_a_due_time_beyond_what_a_timer_holds_is_armed_at_the_limit() -> None:
    log = Log()
    timers(log).arm("inv_1", MAX_TIMER_MS + 1)
    assert log.calls == [("put", "inv_1", MAX_TIMER_MS), ("hop", "inv_1", MAX_TIMER_MS)]


def test_a_sleep_is_armed_the_lead_early_unless_it_is_short() -> None:
    log = Log(sleep_lead_ms=25)
    timers(log).arm_sleep("inv_1", NOW + 5_000)
    timers(log).arm_sleep("inv_1", NOW + LEAD_MIN_SLEEP_MS - 1)
    assert [c for c in log.calls if c[0] == "put"] == [
        ("put", "inv_1", NOW + 5_000 - 25),
        ("put", "inv_1", NOW + LEAD_MIN_SLEEP_MS - 1),
    ]
    assert timers(log).sleep_dues(NOW + 5_000) == {NOW + 5_000, NOW + 5_000 - 25}
    assert timers(Log()).sleep_dues(NOW + 5_000) == {NOW + 5_000}


def test_a_lost_lease_deletes_the_timers_it_recorded_only_if_the_invocation_completed() -> None:
    for status, deleted in (("completed", True), ("running", False)):
        log, mine = Log(status=status), held()
        timers(log).record("inv_1", NOW + 1, mine)
        timers(log).drop_orphans(mine)
        assert (("delete", "inv_1", NOW + 1) in log.calls) is deleted
        assert mine.timers == set()


def test_a_wake_up_is_one_value_due_now_by_default() -> None:
    assert Wake("inv_1") == Wake.at("inv_1", 0) == Wake("inv_1", ())
    assert Wake.at("inv_1", NOW) == Wake("inv_1", (NOW,))
