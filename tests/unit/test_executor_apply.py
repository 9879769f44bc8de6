"""`Executor.apply`, the one entry that carries out a held invocation's `Decision`: what goes before
the conditional write (a timer's record, a new place in the key's queue), the write through the
store's transition of the decision's name, then the effects in the decision's order; nothing after a
lost write. The engine's parts are mocks: one `Mock` records every call, in order."""

from __future__ import annotations

import threading
from unittest.mock import ANY, Mock, call

import pytest

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
)
from control_plane.executor import Executor
from control_plane.held import Held
from control_plane.journal import Journal
from control_plane.ports import StoreConflict
from tests.helpers.records import invocation

NOW = 50_000


def _executor() -> tuple[Executor, Mock, Held]:
    parts = Mock()
    parts.clock.now_ms.return_value = NOW
    parts.timers.record.side_effect = lambda _id, due_ms, _held: due_ms
    for transition in ("renew_lease", "release_lease", "wait_for_key", "suspend", "back_off", "pause", "complete"):
        getattr(parts.store, transition).return_value = None  # the store's transitions read nothing back
    executor = Executor(
        parts.store,
        parts.registry,
        parts.clock,
        parts.settings,
        parts.metrics,
        parts.waiters,
        parts.retention,
        parts.timers,
        parts.keys,
        parts.effects,
        parts.endings,
        parts.operations,
        threading.Event(),
    )
    record = invocation(epoch=3, doorbell=5)
    return executor, parts, Held(record, Journal.load(record.input_entry, ()), [])


def test_a_back_off_records_its_timer_before_the_write_and_asks_for_its_wake_up_after() -> None:
    executor, parts, held = _executor()
    decision = Decision(
        Transition.BACK_OFF, {"status": "backing-off", "next_retry_at_ms": NOW + 400}, (ArmTimer(NOW + 400),)
    )
    assert executor.apply(held, decision)
    assert parts.mock_calls == [
        call.timers.record("inv_1", NOW + 400, held),
        call.clock.now_ms(),  # the write's modified_at_ms
        call.store.back_off(
            "inv_1", 3, status="backing-off", next_retry_at_ms=NOW + 400, modified_at_ms=NOW, attempts=0
        ),
        call.timers.hop("inv_1", NOW + 400),
    ]
    assert held.record.status == "backing-off"


def test_each_transition_writes_the_store_transition_of_its_name_on_the_decisions_doorbell() -> None:
    executor, parts, held = _executor()
    assert executor.apply(held, Decision(Transition.PAUSE, {"status": "paused"}, (NotifyWaiters(),), doorbell=5))
    parts.store.pause.assert_called_once_with("inv_1", 3, doorbell=5, status="paused", modified_at_ms=NOW, attempts=0)
    parts.waiters.notify.assert_called_once_with("inv_1")
    parts.metrics.count.assert_called_once_with("invocations_paused", service="Greeter", handler="greet")
    assert executor.apply(held, Decision(Transition.RELEASE_LEASE, {"lease_until_ms": 0}, (WakeNow(),)))
    parts.store.release_lease.assert_called_once_with("inv_1", 3, lease_until_ms=0, modified_at_ms=NOW, attempts=0)
    parts.timers.scheduler.wake_now.assert_called_once_with("inv_1")


def test_run_writes_nothing() -> None:
    executor, parts, held = _executor()
    assert executor.apply(held, RUN)
    assert parts.store.mock_calls == []


def test_a_new_place_in_the_keys_queue_is_drawn_before_the_write_and_queued_after() -> None:
    executor, parts, held = _executor()
    assert executor.apply(held, Decision(Transition.WAIT_FOR_KEY, {"status": "pending"}, (Enqueue(place_ms=NOW),)))
    inbox_seq = parts.store.wait_for_key.call_args.kwargs["inbox_seq"]
    assert inbox_seq.startswith(f"{NOW:013d}")
    assert inbox_seq.endswith("inv_1")
    parts.keys.enqueue.assert_called_once_with(held.record)


def test_a_lost_write_does_nothing_after_it() -> None:
    executor, parts, held = _executor()
    parts.store.suspend.side_effect = StoreConflict("the doorbell rang")
    decision = Decision(Transition.SUSPEND, {"status": "suspended"}, (ArmTimer(NOW + 1),), doorbell=5)
    assert not executor.apply(held, decision)
    parts.timers.record.assert_called_once_with("inv_1", NOW + 1, held)  # before the write: it stays
    parts.timers.hop.assert_not_called()
    parts.metrics.count.assert_not_called()


def test_a_kill_tells_callers_before_and_after_the_completing_write_and_kills_its_callees_in_order() -> None:
    executor, parts, held = _executor()
    executor.completing_write = Mock(return_value=frozenset({"inv_0/1"}))  # type: ignore[method-assign]
    effects = (CancelSleeps(), KillCalleesBehind(), TellCallers(), KillStartedCallees())
    assert executor.apply(held, Decision(Transition.COMPLETE, {"status": "completed"}, effects))
    executor.completing_write.assert_called_once_with(held, {"status": "completed"})
    assert parts.mock_calls == [
        call.timers.cancel_sleeps(held),
        call.operations.kill_callees_behind(held, ANY),
        call.endings.ended(held.record, frozenset({"inv_0/1"})),
        call.operations.kill_started_callees("inv_1", 1, ANY, held),
    ]


def test_the_cancel_signal_is_no_effect_of_a_held_invocations_decision() -> None:
    executor, _, held = _executor()
    with pytest.raises(TypeError, match="Signal"):
        executor.apply(held, Decision(Transition.RUN, {}, (Signal(),)))
