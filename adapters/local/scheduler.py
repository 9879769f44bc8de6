"""`Scheduler` for one process: a thread-pool work queue and a timer thread.

`wake_now(id)` queues a wake-up of `id` on a pool of worker threads; `wake_at(id, due_ms)` keeps
the wake-up in a heap until its due time (ms since the UNIX epoch, wall clock), then queues it.
Each run delivers one `Wake(id, dues)` (the core's one wake entry, `ControlPlane.wake`), `dues`
being the due times of every timer of `id` that fired since its last run. Timers
live in memory only: after a restart, `ControlPlane.sweep()` re-arms every unfinished invocation
from the store.

At most one `advance` per invocation id runs at a time, and wake-ups are coalesced:

- a wake-up for an id that is queued and not started yet is dropped (the queued run will see
  everything the wake-up announced);
- a wake-up for an id whose `advance` is running marks it, and the id is queued once more when the
  run ends, however many wake-ups arrived meanwhile. A running `advance` may have read the journal
  before the news arrived (or a second concurrent run would only have found the lease held and
  returned `BUSY`), so the wake-up must not be lost.

An `advance` that raises is tried again after a second, except for `UnreadableRecord` (a row
changed by hand or damaged): that is logged once, in one line, and left until the next start.
"""

from __future__ import annotations

import heapq
import itertools
import logging
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor

from adapters.local.asgi import prestart
from control_plane.ports import StoreUnavailable, UnreadableRecord
from control_plane.timers import Wake

log = logging.getLogger("torpor.scheduler")


def _now_ms() -> int:
    return time.time_ns() // 1_000_000


_RETRY_AFTER_ERROR_MS = 1_000  # an advance that raised (store unreachable, a bug) is tried again


class LocalScheduler:
    """In-process `control_plane.ports.Scheduler`: work queue + timer loop, with coalescing.

    Thread-safe: `wake_now` and `wake_at` may be called from any thread, including from inside
    `advance`.

    Attributes:
        sleep_lead_ms: How long before a sleep's due time the engine arms its wake-up (ms), to read
            ahead and wait out the rest (the `Scheduler` port's `sleep_lead_ms`).

    Args:
        workers: Most `advance` calls that run at the same time (size of the worker pool).
        sleep_lead_ms: See the attribute; 0 arms every wake-up at its due time.
    """

    def __init__(self, workers: int = 32, sleep_lead_ms: int = 25) -> None:
        if workers < 1:
            raise ValueError(f"workers must be at least 1, got {workers}")
        self._workers = workers
        self.sleep_lead_ms = sleep_lead_ms
        self._wake: Callable[[Wake], object] | None = None
        self._fired: dict[str, set[int]] = {}  # due times of timers that fired, per id, until an advance ran
        self._executor: ThreadPoolExecutor | None = None
        self._lock = threading.Lock()
        self._changed = threading.Condition(self._lock)  # timers added, runs ended, stop requested
        self._queued: set[str] = set()  # submitted, not started
        self._running: set[str] = set()
        self._rerun: set[str] = set()  # running, and woken again since it started
        self._timers: list[tuple[int, int, str]] = []  # heap of (due_ms, sequence, invocation_id)
        self._timer_keys: set[tuple[int, str]] = set()  # (due_ms, id) pairs in the heap
        self._sequence = itertools.count()
        self._timer_thread: threading.Thread | None = None
        self._started = False
        self._stopped = False

    # --- life cycle -------------------------------------------------------------------------------

    def start(self, wake: Callable[[Wake], object]) -> None:
        """Start the worker pool and the timer thread; from now on each run calls `wake(Wake(id, dues))`.

        Wake-ups that arrived before `start` run now.

        Args:
            wake: Called on a worker thread with the wake-up (`control_plane.timers.Wake`: the id and
                the due times of the timers that fired since its last run, none for a wake-up now);
                its return value is ignored and its exceptions are logged, then the wake-up (with
                its timers) is delivered again a second later.

        Raises:
            RuntimeError: The scheduler was started before, or stopped.
        """
        with self._lock:
            if self._started or self._stopped:
                raise RuntimeError("a LocalScheduler can be started once; build a new one")
            self._wake = wake
            self._executor = ThreadPoolExecutor(max_workers=self._workers, thread_name_prefix="torpor-advance")
            prestart(self._executor, self._workers)  # a burst of wake-ups does not start threads one by one
            self._started = True
            for invocation_id in self._queued:
                self._executor.submit(self._run, invocation_id)
        self._timer_thread = threading.Thread(target=self._timer_loop, name="torpor-timers", daemon=True)
        self._timer_thread.start()

    def stop(self, wait: bool = True) -> None:
        """Stop the timer thread and the workers; queued runs and pending timers are dropped.

        Args:
            wait: Wait for running `advance` calls to return (each at most one attempt's timeout).
        """
        with self._lock:
            self._stopped = True
            self._changed.notify_all()
            executor = self._executor
        if self._timer_thread is not None:
            self._timer_thread.join()
        if executor is not None:
            executor.shutdown(wait=wait, cancel_futures=True)
        with self._lock:
            self._queued.clear()
            self._rerun.clear()
            self._timers.clear()
            self._timer_keys.clear()
            self._changed.notify_all()

    # --- the Scheduler port -----------------------------------------------------------------------

    def wake_now(self, invocation_id: str) -> None:
        """Queue a wake-up of `invocation_id`, coalesced with a queued or running one (see the module doc)."""
        with self._lock:
            self._wake_locked(invocation_id)

    def wake_at(self, invocation_id: str, due_ms: int) -> None:
        """Queue a wake-up of `invocation_id` for its timer due at `due_ms` (ms since the UNIX epoch), never before.

        A due time in the past queues it now. The same `(id, due_ms)` twice is kept once.
        """
        with self._lock:
            if self._stopped:
                log.debug("scheduler stopped: dropping timer for %s at %d", invocation_id, due_ms)
                return
            if due_ms <= _now_ms():
                self._fired.setdefault(invocation_id, set()).add(due_ms)  # its record is settled too
                self._wake_locked(invocation_id)
                return
            key = (due_ms, invocation_id)
            if key in self._timer_keys:
                return
            self._timer_keys.add(key)
            heapq.heappush(self._timers, (due_ms, next(self._sequence), invocation_id))
            if self._timers[0][2] == invocation_id and self._timers[0][0] == due_ms:
                self._changed.notify_all()  # a new earliest timer: the timer thread sleeps less

    # --- for tests and diagnostics ----------------------------------------------------------------

    def idle(self, within_ms: int = 1_000) -> bool:
        """True when nothing is queued or running and no timer is due within `within_ms` ms."""
        with self._lock:
            if self._queued or self._running:
                return False
            return not self._timers or self._timers[0][0] > _now_ms() + within_ms

    def wait_idle(self, timeout_s: float, within_ms: int = 1_000) -> bool:
        """Block until `idle(within_ms)` holds or `timeout_s` seconds passed; returns `idle(within_ms)`."""
        deadline = time.monotonic() + timeout_s
        with self._lock:
            while True:
                busy = self._queued or self._running
                if not busy and (not self._timers or self._timers[0][0] > _now_ms() + within_ms):
                    return True
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    return False
                self._changed.wait(min(remaining, 0.05))

    def pending_timers(self) -> int:
        """How many timers wait for their due time."""
        with self._lock:
            return len(self._timers)

    # --- internals --------------------------------------------------------------------------------

    def _wake_locked(self, invocation_id: str) -> None:
        if self._stopped:
            log.debug("scheduler stopped: dropping wake-up of %s", invocation_id)
            return
        if invocation_id in self._queued:
            return
        if invocation_id in self._running:
            self._rerun.add(invocation_id)
            return
        self._queued.add(invocation_id)
        if self._executor is not None:
            self._executor.submit(self._run, invocation_id)

    def _run(self, invocation_id: str) -> None:
        with self._lock:
            self._queued.discard(invocation_id)
            if self._stopped:
                return
            self._running.add(invocation_id)
            fired = self._fired.pop(invocation_id, set())
        try:
            assert self._wake is not None  # set by start() before any submit
            self._wake(Wake(invocation_id, tuple(sorted(fired))))
        except UnreadableRecord as exc:  # retrying cannot help: one line, and the row waits for a hand
            log.error("invocation %s is not advanced: %s", invocation_id, exc.message)
        except Exception as exc:  # logged with the id; a failed advance must not take the worker down
            if isinstance(exc, StoreUnavailable):  # the store logged the fault once: no traceback per advance
                log.debug("advance of invocation %s: %s", invocation_id, exc.message)
            else:
                log.exception(
                    "advance of invocation %s failed; retrying in %d ms", invocation_id, _RETRY_AFTER_ERROR_MS
                )
            with self._lock:  # the timers that woke it still need their records settled
                self._fired.setdefault(invocation_id, set()).update(fired)
            self.wake_at(invocation_id, _now_ms() + _RETRY_AFTER_ERROR_MS)
        finally:
            with self._lock:
                self._running.discard(invocation_id)
                if invocation_id in self._rerun:
                    self._rerun.discard(invocation_id)
                    self._wake_locked(invocation_id)
                self._changed.notify_all()

    def _timer_loop(self) -> None:
        with self._lock:
            while not self._stopped:
                if not self._timers:
                    self._changed.wait()
                    continue
                due_ms, _, invocation_id = self._timers[0]
                delay_ms = due_ms - _now_ms()
                if delay_ms > 0:
                    self._changed.wait(delay_ms / 1000)
                    continue  # woken early, by a new earlier timer, or by stop: look again
                heapq.heappop(self._timers)
                self._timer_keys.discard((due_ms, invocation_id))
                self._fired.setdefault(invocation_id, set()).add(due_ms)
                self._wake_locked(invocation_id)
