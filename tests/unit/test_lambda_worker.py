"""The worker function's batch handling: every message of a batch is delivered, by that batch's call.

Lambda runs one event at a time per execution environment, but a process may host several calls at
once (a local poller with several threads, `bench.sleeps --aws`): `worker_handler` must never mix
up the records of two batches. It did, through one module-level `AsyncBatchProcessor` whose
`records` a second call overwrote: the first call then processed the second's messages and reported
its own as done, so they were deleted undelivered and their sleeps never resumed (2 of 1,000 in
`bench.sleeps --aws`).
"""

from __future__ import annotations

import json
import threading
import time
from collections import Counter
from dataclasses import dataclass, field
from types import SimpleNamespace
from typing import Any

import pytest

from adapters.aws import lambda_app
from control_plane.timers import Wake
from tests.helpers.aws_functions import Context


@dataclass
class _Clock:
    def now_ms(self) -> int:
        return int(time.time() * 1000)


@dataclass
class _Plane:
    """Stands in for the `ControlPlane`: records each wake; ids starting with "fail" raise."""

    woken: Counter[str] = field(default_factory=Counter)
    lock: threading.Lock = field(default_factory=threading.Lock)
    clock: _Clock = field(default_factory=_Clock)
    scheduler: Any = field(default_factory=lambda: SimpleNamespace(hold_ms=0))  # no body is early here

    def wake(self, wake: Wake) -> None:
        time.sleep(0.01)  # a DynamoDB round trip: the calls overlap
        if wake.invocation_id.startswith("fail"):
            raise RuntimeError("advance failed")
        with self.lock:
            self.woken[wake.invocation_id] += 1


def _event(ids: list[str]) -> dict[str, Any]:
    records = [
        {
            "messageId": f"m-{i}",
            "receiptHandle": f"r-{i}",
            "body": json.dumps({"invocation_id": i, "due_ms": 0}),
            "attributes": {},
            "messageAttributes": {},
            "md5OfBody": "",
            "eventSource": "aws:sqs",
            "eventSourceARN": "arn:aws:sqs:us-east-1:123456789012:wake",
            "awsRegion": "us-east-1",
        }
        for i in ids
    ]
    return {"Records": records}


def test_concurrent_worker_calls_each_deliver_their_own_batch_and_report_only_their_own_failures(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    plane = _Plane()
    monkeypatch.setenv("POWERTOOLS_METRICS_DISABLED", "true")
    monkeypatch.setattr(lambda_app, "build_control_plane", lambda *a, **k: plane)
    batches = [[f"inv-{b}-{i}" for i in range(9)] + [f"fail-{b}"] for b in range(8)]
    answers: dict[int, dict[str, Any]] = {}
    start = threading.Barrier(len(batches))

    def call(b: int) -> None:
        start.wait()
        answers[b] = lambda_app.worker_handler(_event(batches[b]), Context())

    threads = [threading.Thread(target=call, args=(b,)) for b in range(len(batches))]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    expected = {i for batch in batches for i in batch if not i.startswith("fail")}
    assert set(plane.woken) == expected
    assert all(n == 1 for n in plane.woken.values())
    for b in range(len(batches)):
        assert answers[b] == {"batchItemFailures": [{"itemIdentifier": f"m-fail-{b}"}]}


def test_every_message_of_a_full_batch_is_delivered_at_once(monkeypatch: pytest.MonkeyPatch) -> None:
    """A wake-up mostly waits (DynamoDB, the handler): ten of them wait together, not six then four."""
    batch = [f"inv-{i}" for i in range(lambda_app.WORKER_BATCH_SIZE)]
    together = threading.Barrier(len(batch), timeout=5)

    class Waiting(_Plane):
        def wake(self, wake: Wake) -> None:
            together.wait()  # broken (an exception) unless every message of the batch is here at once
            super().wake(wake)

    plane = Waiting()
    monkeypatch.setenv("POWERTOOLS_METRICS_DISABLED", "true")
    monkeypatch.setattr(lambda_app, "build_control_plane", lambda *a, **k: plane)
    assert lambda_app.worker_handler(_event(batch), Context()) == {"batchItemFailures": []}
    assert set(plane.woken) == set(batch)
