"""The embedded moto server of `torpor dev` serves one request at a time (moto updates items in place
without a lock; a concurrent read could see half an update)."""

from __future__ import annotations

import threading
import time
from concurrent.futures import ThreadPoolExecutor

from adapters.local.moto_server import serialized


def test_serialized_runs_one_request_at_a_time() -> None:
    running, most = 0, 0
    guard = threading.Lock()

    def slow_app(environ: dict, start_response: object) -> list[bytes]:
        nonlocal running, most
        with guard:
            running += 1
            most = max(most, running)
        time.sleep(0.02)
        with guard:
            running -= 1
        return [b"ok"]

    app = serialized(slow_app)
    with ThreadPoolExecutor(8) as pool:
        answers = list(pool.map(lambda _: app({}, lambda *a: None), range(16)))
    assert answers == [[b"ok"]] * 16
    assert most == 1
