"""`torpor dev` that hard-exits at a named point between two store requests (tests only).

Run as `python -m tests.helpers.crashing_dev dev ARGS...` instead of `python -m adapters.cli dev
ARGS...`: before the CLI starts, the store classes (SQLite and DynamoDB) and `Effects.tell_caller`
are patched so that the process calls `os._exit(137)` (no clean-up, as SIGKILL) at the point the
environment variable `TORPOR_TEST_CRASH_AT` names, as `POINT:N` (the N-th time, counted from 1):

| point | exits |
| --- | --- |
| `ring` | after the N-th `Store.ring` returned (the doorbell moved) |
| `before-ring` | instead of the N-th `Store.ring` |
| `put_notification` | after the N-th notification was stored (before any ring after it) |
| `complete` | after the N-th completing write (`status="completed"`, by a worker or an operation) |
| `release_key` | after the N-th `Store.release_key` (before the key is handed on) |
| `before-enqueue` | instead of the N-th `Store.enqueue` (an invocation `pending`, not in its key's queue) |
| `tell` | after the N-th `Effects.tell_caller` returned (a caller told, the callee not yet completed) |

`crashing_dev_process` runs it like `tests.helpers.dev.torpor_dev_process` and yields the process;
the product code knows nothing of this.
"""

from __future__ import annotations

import functools
import inspect
import os
import subprocess
import sys
import threading
from collections.abc import Callable
from contextlib import AbstractContextManager
from typing import Any

from tests.helpers.dev import torpor_dev_process

CRASH_ENV = "TORPOR_TEST_CRASH_AT"
CRASH_STATUS = 137
POINTS = ("ring", "before-ring", "put_notification", "complete", "release_key", "before-enqueue", "tell")

_lock = threading.Lock()
_counts: dict[str, int] = {}
_quiet = threading.Condition()  # store calls in flight, and whether the process is about to exit
_in_flight = 0
_dying = False
_depth = threading.local()  # this thread's nesting of store calls


def _reached(point: str, wanted: str, n: int) -> bool:
    """Count one arrival at `point`; True if it is the `n`-th and `point` is the `wanted` one."""
    if point != wanted:
        return False
    with _lock:
        _counts[point] = _counts.get(point, 0) + 1
        return _counts[point] == n


def _die(point: str) -> None:
    """Exit at once, as SIGKILL would, but once the store calls other threads have in flight are
    done (new ones wait forever): dynalite exits itself when a request is aborted mid-way, which
    would take the store down with the control plane. What this thread was to do next never runs."""
    global _dying
    mine = getattr(_depth, "n", 0)
    with _quiet:
        _dying = True
        _quiet.wait_for(lambda: _in_flight <= mine, timeout=5)
    sys.stderr.write(f"crashing_dev: hard exit at {point}\n")
    sys.stderr.flush()
    os._exit(CRASH_STATUS)


def _tracked(method: Callable[..., Any]) -> Callable[..., Any]:
    """`method` counted while in flight (see `_die`); blocks forever once the process is dying."""

    @functools.wraps(method)
    def tracked(*args: Any, **kwargs: Any) -> Any:
        global _in_flight
        with _quiet:
            while _dying:
                _quiet.wait()
            _in_flight += 1
        _depth.n = getattr(_depth, "n", 0) + 1
        try:
            return method(*args, **kwargs)
        finally:
            _depth.n -= 1
            with _quiet:
                _in_flight -= 1
                _quiet.notify_all()

    return tracked


def _wrap(method: Callable[..., Any], before: str | None, after: str | None, wanted: str, n: int) -> Callable[..., Any]:
    @functools.wraps(method)
    def wrapped(*args: Any, **kwargs: Any) -> Any:
        if before is not None and _reached(before, wanted, n):
            _die(before)
        result = method(*args, **kwargs)
        if after is not None and _reached(after, wanted, n):
            _die(after)
        return result

    return wrapped


def _wrap_completing(method: Callable[..., Any], wanted: str, n: int) -> Callable[..., Any]:
    @functools.wraps(method)
    def wrapped(*args: Any, **kwargs: Any) -> Any:
        result = method(*args, **kwargs)
        if kwargs.get("status") == "completed" and _reached("complete", wanted, n):
            _die("complete")
        return result

    return wrapped


def install(spec: str) -> None:
    """Patch the store classes and `Effects.tell_caller` to exit at `spec` (`POINT:N`).

    Raises ValueError for an unknown point or a count below 1."""
    wanted, _, count = spec.rpartition(":")
    n = int(count)
    if wanted not in POINTS or n < 1:
        raise ValueError(f"{CRASH_ENV}={spec!r}: expected POINT:N with POINT one of {', '.join(POINTS)}")
    from adapters.aws.dynamodb_store import DynamoDBStore
    from adapters.local.sqlite_store import SQLiteStore
    from control_plane.effects import Effects

    for cls in (SQLiteStore, DynamoDBStore):
        for name in dir(cls):
            if not name.startswith("_") and inspect.isfunction(getattr(cls, name)):
                setattr(cls, name, _tracked(getattr(cls, name)))
        cls.ring = _wrap(cls.ring, "before-ring", "ring", wanted, n)  # type: ignore[method-assign]
        cls.put_notification = _wrap(cls.put_notification, None, "put_notification", wanted, n)  # type: ignore[method-assign]
        cls.release_key = _wrap(cls.release_key, None, "release_key", wanted, n)  # type: ignore[method-assign]
        cls.enqueue = _wrap(cls.enqueue, "before-enqueue", None, wanted, n)  # type: ignore[method-assign]
        cls._update_invocation = _wrap_completing(cls._update_invocation, wanted, n)  # type: ignore[method-assign]
        cls._update_unless_completed = _wrap_completing(cls._update_unless_completed, wanted, n)  # type: ignore[method-assign]
    Effects.tell_caller = _wrap(Effects.tell_caller, None, "tell", wanted, n)  # type: ignore[method-assign]


def crashing_dev_process(
    crash_at: str, *store_args: str
) -> AbstractContextManager[tuple[str, str, subprocess.Popen[bytes]]]:
    """`torpor dev STORE_ARGS` (3 s inactivity timeout, 1 s lease margin, as `torpor_dev_process`)
    that exits with status 137 at `crash_at` (`POINT:N`, see the module doc):
    `(ingress URL, admin URL, process)`. Terminated on exit if it is still running."""
    return torpor_dev_process(*store_args, module="tests.helpers.crashing_dev", env={CRASH_ENV: crash_at})


if __name__ == "__main__":
    install(os.environ[CRASH_ENV])
    from adapters.cli import main

    main()
