"""`LocalScheduler`: timers fire on time and never early, wake-ups coalesce, failures are contained."""

from __future__ import annotations

import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator

import pytest

from adapters.local.scheduler import LocalScheduler
from control_plane.ports import UnreadableRecord
from control_plane.timers import Wake


def _now_ms() -> int:
    return time.time_ns() // 1_000_000


def wait_for(condition: Callable[[], bool], timeout_s: float = 5.0) -> bool:
    """Poll `condition` until it holds or `timeout_s` passes; returns whether it held."""
    deadline = time.monotonic() + timeout_s
    while not condition():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.001)
    return True


class Recorder:
    """A `ControlPlane.wake` stand-in that records calls (and the wake-ups); `block` holds chosen ids until released."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.calls: list[tuple[str, int]] = []  # (invocation id, wall-clock ms when called)
        self.in_flight: Counter[str] = Counter()
        self.max_in_flight: Counter[str] = Counter()
        self.started = threading.Event()
        self.release = threading.Event()
        self.block: set[str] = set()
        self.fail: set[str] = set()
        self.unreadable: set[str] = set()
        self.wakes: list[Wake] = []

    def __call__(self, wake: Wake) -> str:
        invocation_id = wake.invocation_id
        with self.lock:
            self.wakes.append(wake)
            self.calls.append((invocation_id, _now_ms()))
            self.in_flight[invocation_id] += 1
            self.max_in_flight[invocation_id] = max(self.max_in_flight[invocation_id], self.in_flight[invocation_id])
            blocking = invocation_id in self.block
            self.block.discard(invocation_id)  # block only the first run
        try:
            if blocking:
                self.started.set()
                assert self.release.wait(10), "the test never released the blocked advance"
            if invocation_id in self.unreadable:
                raise UnreadableRecord(f"the record of invocation {invocation_id} cannot be read")
            if invocation_id in self.fail:
                raise RuntimeError(f"advance of {invocation_id} blew up")
            return "busy"
        finally:
            with self.lock:
                self.in_flight[invocation_id] -= 1

    def count(self) -> Counter[str]:
        with self.lock:
            return Counter(invocation_id for invocation_id, _ in self.calls)


@pytest.fixture
def recorder() -> Recorder:
    return Recorder()


@pytest.fixture
def scheduler(recorder: Recorder) -> Iterator[LocalScheduler]:
    sched = LocalScheduler(workers=4)
    sched.start(recorder)
    yield sched
    recorder.release.set()
    sched.stop()


def test_wake_at_fires_not_early_and_within_50ms(scheduler: LocalScheduler, recorder: Recorder) -> None:
    # GIVEN timers a little in the future, added out of order
    now = _now_ms()
    due = {"inv_a": now + 75, "inv_b": now + 60, "inv_c": now + 200}  # a and b close: no early batch
    for invocation_id, due_ms in due.items():
        scheduler.wake_at(invocation_id, due_ms)
    assert scheduler.pending_timers() == 3

    # WHEN they come due
    assert wait_for(lambda: len(recorder.calls) == 3, timeout_s=5)

    # THEN each ran once, at or after its due time, and at most 50 ms after it
    for invocation_id, called_ms in recorder.calls:
        lateness = called_ms - due[invocation_id]
        assert 0 <= lateness <= 50, f"{invocation_id} ran {lateness} ms after its due time"
    assert [invocation_id for invocation_id, _ in recorder.calls] == ["inv_b", "inv_a", "inv_c"]
    assert scheduler.pending_timers() == 0
    assert scheduler.wait_idle(timeout_s=5)


def test_wake_at_in_the_past_runs_now(scheduler: LocalScheduler, recorder: Recorder) -> None:
    scheduler.wake_at("inv_past", _now_ms() - 10_000)
    assert scheduler.pending_timers() == 0
    assert wait_for(lambda: recorder.count()["inv_past"] == 1)


def test_far_timer_is_pending_and_does_not_block_idle(scheduler: LocalScheduler, recorder: Recorder) -> None:
    scheduler.wake_at("inv_later", _now_ms() + 60_000)
    assert scheduler.pending_timers() == 1
    assert scheduler.idle(within_ms=1_000)
    assert not scheduler.idle(within_ms=120_000)
    assert recorder.count()["inv_later"] == 0


def test_duplicate_wake_now_is_coalesced_while_queued(recorder: Recorder) -> None:
    # GIVEN one worker, busy with another invocation, so that inv_q stays queued
    sched = LocalScheduler(workers=1)
    sched.start(recorder)
    try:
        recorder.block.add("inv_blocker")
        sched.wake_now("inv_blocker")
        assert recorder.started.wait(5)

        # WHEN inv_q is woken three times before it can start
        for _ in range(3):
            sched.wake_now("inv_q")
        assert not sched.idle()
        recorder.release.set()

        # THEN it runs once
        assert sched.wait_idle(timeout_s=5)
        assert recorder.count() == Counter({"inv_blocker": 1, "inv_q": 1})
    finally:
        recorder.release.set()
        sched.stop()


def test_wake_while_running_reruns_once_after(scheduler: LocalScheduler, recorder: Recorder) -> None:
    # GIVEN an advance of inv_r that is running (as a lease holder would)
    recorder.block.add("inv_r")
    scheduler.wake_now("inv_r")
    assert recorder.started.wait(5)

    # WHEN it is woken several times meanwhile (a concurrent run would only have answered BUSY)
    for _ in range(3):
        scheduler.wake_now("inv_r")
    # no second run starts while the first holds on (three workers are free to start one)
    assert not wait_for(lambda: recorder.count()["inv_r"] > 1, timeout_s=0.2)
    recorder.release.set()

    # THEN it runs exactly once more, after the first run ended, never two at a time
    assert scheduler.wait_idle(timeout_s=5)
    assert recorder.count()["inv_r"] == 2
    assert recorder.max_in_flight["inv_r"] == 1


def test_no_rerun_without_a_wake_during_the_run(scheduler: LocalScheduler, recorder: Recorder) -> None:
    scheduler.wake_now("inv_once")
    assert scheduler.wait_idle(timeout_s=5)
    assert recorder.count()["inv_once"] == 1


def test_exception_is_logged_and_does_not_kill_the_worker(recorder: Recorder, caplog: pytest.LogCaptureFixture) -> None:
    # GIVEN a single worker whose first advance raises
    sched = LocalScheduler(workers=1)
    sched.start(recorder)
    try:
        recorder.fail.add("inv_bad")
        sched.wake_now("inv_bad")
        assert wait_for(lambda: recorder.count()["inv_bad"] == 1)
        assert wait_for(lambda: sched.pending_timers() == 1)  # the failed advance is tried again later

        # WHEN other invocations are woken afterwards
        sched.wake_now("inv_good")
        sched.wake_at("inv_timer", _now_ms() + 20)

        # THEN the same worker runs them, and the failure was logged with the invocation id
        assert wait_for(lambda: recorder.count()["inv_good"] == 1 and recorder.count()["inv_timer"] == 1)
        assert any("inv_bad" in record.getMessage() and record.exc_info for record in caplog.records)
        assert wait_for(lambda: recorder.count()["inv_bad"] == 2, timeout_s=3)  # retried after ~1 s
    finally:
        sched.stop()


def test_an_unreadable_record_is_logged_once_in_one_line_and_not_retried(
    scheduler: LocalScheduler, recorder: Recorder, caplog: pytest.LogCaptureFixture
) -> None:
    # GIVEN an invocation whose stored record cannot be read
    recorder.unreadable.add("inv_broken")

    # WHEN it is woken, by a timer too
    scheduler.wake_now("inv_broken")
    scheduler.wake_at("inv_broken", _now_ms() + 10)
    assert wait_for(lambda: recorder.count()["inv_broken"] == 2)
    time.sleep(1.5)  # past the retry delay of a failed advance

    # THEN each wake-up ran once, nothing is retried, and each said so in one line without a traceback
    assert recorder.count()["inv_broken"] == 2
    assert scheduler.pending_timers() == 0
    said = [r for r in caplog.records if "inv_broken" in r.getMessage()]
    assert len(said) == 2, said
    assert all(r.exc_info is None and "cannot be read" in r.getMessage() for r in said), said


def test_wake_before_start_runs_on_start(recorder: Recorder) -> None:
    sched = LocalScheduler(workers=2)
    try:
        sched.wake_now("inv_early")
        sched.wake_now("inv_early")
        assert recorder.count()["inv_early"] == 0
        sched.start(recorder)
        assert sched.wait_idle(timeout_s=5)
        assert recorder.count()["inv_early"] == 1
    finally:
        sched.stop()


def test_timers_of_one_invocation_that_fired_together_arrive_as_one_wake_with_their_due_times(
    recorder: Recorder,
) -> None:
    # GIVEN two timers of one invocation, both due, and a wake-up now of another, before the start
    sched = LocalScheduler(workers=2)
    now = _now_ms()
    try:
        sched.wake_at("inv_timers", now - 20)
        sched.wake_at("inv_timers", now - 10)
        sched.wake_now("inv_now")
        # WHEN the scheduler starts
        sched.start(recorder)
        assert sched.wait_idle(timeout_s=5)
        # THEN each invocation got one wake-up: the timers' with both due times, in order; the other none
        assert sorted(recorder.wakes, key=lambda w: w.invocation_id) == [
            Wake("inv_now"),
            Wake("inv_timers", (now - 20, now - 10)),
        ]
    finally:
        sched.stop()


def test_stop_drops_pending_timers_and_later_wakes(recorder: Recorder) -> None:
    sched = LocalScheduler(workers=2)
    sched.start(recorder)
    sched.wake_at("inv_never", _now_ms() + 60_000)
    sched.stop()
    sched.wake_now("inv_after_stop")
    assert sched.pending_timers() == 0
    assert recorder.count() == Counter()


def test_the_worker_threads_are_started_with_the_scheduler_not_one_per_wake_up_of_a_burst() -> None:
    # GIVEN a scheduler of 12 workers, started, that has woken nothing yet
    scheduler = LocalScheduler(workers=12)
    scheduler.start(lambda wake: None)
    try:

        def advance_threads() -> int:
            return sum(t.name.startswith("torpor-advance") for t in threading.enumerate())

        # THEN its 12 threads run already: a burst of wake-ups does not start them one by one
        assert wait_for(lambda: advance_threads() == 12)
    finally:
        scheduler.stop()


def test_the_http_pool_starts_its_threads_at_startup() -> None:
    from concurrent.futures import ThreadPoolExecutor

    from adapters.local.asgi import prestart

    # GIVEN a pool of 20 threads, of which none has started
    pool = ThreadPoolExecutor(max_workers=20, thread_name_prefix="prestart-test")
    try:
        # WHEN it is prestarted
        prestart(pool, 20)

        # THEN 20 threads run, and a burst of 20 tasks starts no more
        assert wait_for(lambda: sum(t.name.startswith("prestart-test") for t in threading.enumerate()) == 20)
        gate = threading.Barrier(21, timeout=5)
        for _ in range(20):
            pool.submit(gate.wait)
        gate.wait()
        assert sum(t.name.startswith("prestart-test") for t in threading.enumerate()) == 20
    finally:
        pool.shutdown()
