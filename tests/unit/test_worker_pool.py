"""`adapters.local.asgi.WorkerPool`: the threads the dev server's HTTP requests run on."""

from __future__ import annotations

import logging
import threading
import time

import pytest

from adapters.local.asgi import WorkerPool


def _threads(prefix: str) -> int:
    return sum(t.name.startswith(prefix) for t in threading.enumerate())


def _wait_for(condition: object, timeout_s: float = 5.0) -> bool:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if condition():  # type: ignore[operator]
            return True
        time.sleep(0.01)
    return False


def test_requests_one_after_another_run_on_the_thread_idle_last() -> None:
    # GIVEN a pool with 8 threads started, all idle
    pool = WorkerPool(8, "pool-lifo")
    pool.start(8)
    try:
        assert _wait_for(lambda: _threads("pool-lifo") == 8)
        # WHEN 20 functions are submitted one after another, each after the previous one ended
        ran_on: list[str] = []
        for _ in range(20):
            done = threading.Event()

            def note(done: threading.Event = done) -> None:
                ran_on.append(threading.current_thread().name)
                done.set()

            pool.submit(note)
            assert done.wait(5)
            time.sleep(0.002)  # the thread is back among the idle ones
        # THEN one thread ran them all (the one idle last is woken; the others stay asleep)
        assert len(set(ran_on)) == 1
    finally:
        pool.close()


def test_past_max_workers_functions_wait_for_a_free_thread_and_no_more_threads_start() -> None:
    # GIVEN a pool of 3 threads, all busy
    pool = WorkerPool(3, "pool-bound")
    release = threading.Event()
    started = threading.Semaphore(0)

    def busy() -> None:
        started.release()
        release.wait(5)

    try:
        for _ in range(3):
            pool.submit(busy)
        for _ in range(3):
            assert started.acquire(timeout=5)
        # WHEN a fourth function is submitted
        fourth = threading.Event()
        pool.submit(fourth.set)
        # THEN it waits, no fourth thread starts, and it runs once a thread is free
        assert not fourth.wait(0.2)
        assert _threads("pool-bound") == 3
        release.set()
        assert fourth.wait(5)
    finally:
        release.set()
        pool.close()


def test_a_function_that_raises_is_logged_and_its_thread_serves_on(caplog: pytest.LogCaptureFixture) -> None:
    pool = WorkerPool(1, "pool-raise")
    try:

        def fail() -> None:
            raise ValueError("boom")

        with caplog.at_level(logging.ERROR, logger="torpor.asgi"):
            pool.submit(fail)
            after = threading.Event()
            pool.submit(after.set)
            assert after.wait(5)
        assert "boom" in caplog.text
        assert _threads("pool-raise") == 1
    finally:
        pool.close()


def test_close_ends_the_idle_threads_and_refuses_new_functions() -> None:
    pool = WorkerPool(4, "pool-close")
    pool.start(4)
    assert _wait_for(lambda: _threads("pool-close") == 4)
    pool.close()
    assert _wait_for(lambda: _threads("pool-close") == 0)
    with pytest.raises(RuntimeError):
        pool.submit(lambda: None)
