"""Run one action in several threads released at the same instant, for race tests."""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import TypeVar

T = TypeVar("T")


def race(n: int, action: Callable[[int], T]) -> list[T | BaseException]:
    """Run `action(i)` in `n` threads released at the same instant; results or exceptions, in order."""
    barrier = threading.Barrier(n)
    results: list[T | BaseException] = [RuntimeError("did not run")] * n

    def run(i: int) -> None:
        barrier.wait()
        try:
            results[i] = action(i)
        except BaseException as exc:  # noqa: BLE001 - collected for the assertions
            results[i] = exc

    threads = [threading.Thread(target=run, args=(i,)) for i in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    return results
