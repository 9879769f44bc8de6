"""The AWS ingress (a store that may not delete items) beside a worker, on a moto server, with real
restate-sdk handlers over HTTP; each interleaving is forced step by step.

- The ingress resolves an awakeable while a worker holds the lease of the invocation waiting on it.
  The wake-up the ingress sends finds the lease held (`BUSY`) and is used up, exactly as an SQS
  message is; the holder must then not suspend without the notification.
- A workflow id runs again after its retention ended: the ingress hands the old run's removal to
  the worker and waits for it; the new run must not see the old run's state or promises.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import pytest

from adapters.aws.dynamodb_store import DynamoDBStore
from adapters.http.invoker import HttpInvoker
from control_plane.held import Outcome
from control_plane.ids import awakeable_id
from control_plane.settings import Settings
from control_plane.timers import Wake
from http_api import HttpControlPlane
from http_api.http import HttpRequest
from tests.helpers.moto import DUMMY_AWS_ENV, fresh_store
from tests.helpers.services import serve_examples

FIRST_AWAKEABLE = 17  # the SDK's first awakeable signal index


class QueueScheduler:
    """Wake-ups as a queue the test delivers by hand, as the worker takes SQS messages: one delivery
    per wake-up, a `BUSY` advance uses it up; a timer's (`wake_at`) goes to `wake` with its due time."""

    def __init__(self) -> None:
        self.queued: list[tuple[str, int]] = []
        self._lock = threading.Lock()

    def wake_now(self, invocation_id: str) -> None:
        with self._lock:
            self.queued.append((invocation_id, 0))

    def wake_at(self, invocation_id: str, due_ms: int) -> None:
        with self._lock:
            self.queued.append((invocation_id, max(due_ms, 1)))

    def deliver(self, worker: HttpControlPlane) -> list[Outcome]:
        outcomes = []
        while self.queued:
            with self._lock:
                invocation_id, due_ms = self.queued.pop(0)
            if due_ms:
                outcomes.append(worker.wake(Wake.at(invocation_id, min(due_ms, worker.clock.now_ms()))))
            else:
                outcomes.append(worker.advance(invocation_id))
        return outcomes


@pytest.fixture(scope="module")
def examples_url() -> Iterator[str]:
    with serve_examples() as (url, _process):
        yield url


@contextmanager
def two_planes(
    moto_endpoint: str, examples_url: str, settings: Settings
) -> Iterator[tuple[HttpControlPlane, HttpControlPlane]]:
    """The worker's control plane and the ingress's (a store that may not delete) on one table, one
    `QueueScheduler` between them."""
    worker_store = fresh_store(moto_endpoint)
    ingress_store = DynamoDBStore(
        worker_store.table_name,
        region=worker_store.region,
        endpoint_url=moto_endpoint,
        aws_access_key_id=DUMMY_AWS_ENV["AWS_ACCESS_KEY_ID"],
        aws_secret_access_key=DUMMY_AWS_ENV["AWS_SECRET_ACCESS_KEY"],
        may_delete=False,
    )
    scheduler = QueueScheduler()
    invokers = [HttpInvoker(), HttpInvoker()]
    worker = HttpControlPlane(worker_store, invokers[0], scheduler, settings=settings, facts=worker_store.facts)
    ingress = HttpControlPlane(ingress_store, invokers[1], scheduler, settings=settings, facts=ingress_store.facts)
    worker.registry.register(examples_url)
    try:
        yield worker, ingress
    finally:
        for invoker in invokers:
            invoker.close()


@pytest.fixture
def planes(
    moto_endpoint: str, examples_url: str
) -> Iterator[tuple[HttpControlPlane, HttpControlPlane, QueueScheduler]]:
    with two_planes(moto_endpoint, examples_url, Settings(inactivity_timeout_ms=10_000)) as (worker, ingress):
        yield worker, ingress, worker.scheduler  # type: ignore[misc]


def test_an_awakeable_resolved_while_another_function_holds_the_lease_is_never_missed(
    planes: tuple[HttpControlPlane, HttpControlPlane, QueueScheduler], monkeypatch: pytest.MonkeyPatch
) -> None:
    worker, ingress, scheduler = planes
    # GIVEN an invocation suspended on an awakeable
    record = worker.engine.create("Waits", "awakeable", b"", {}, leased=False)
    invocation_id = record.invocation_id
    scheduler.deliver(worker)
    assert worker.store.get_invocation(invocation_id).status == "suspended"  # type: ignore[union-attr]

    # AND a worker that takes the lease while the ingress resolves the awakeable: it reads the
    # invocation after the ingress's first write, before the notification is stored
    loaded, go = threading.Event(), threading.Event()
    holder_outcome: list[Outcome] = []
    original_load = worker.store.load_invocation

    def load_invocation(invocation_id: str) -> Any:
        found = original_load(invocation_id)
        if threading.current_thread().name == "holder" and not loaded.is_set():
            loaded.set()
            assert go.wait(30)
        return found

    monkeypatch.setattr(worker.store, "load_invocation", load_invocation)
    holder = threading.Thread(target=lambda: holder_outcome.append(worker.advance(invocation_id)), name="holder")
    original_put = ingress.store.put_notification

    def put_notification(*args: Any) -> bool:
        holder.start()
        assert loaded.wait(30)
        return original_put(*args)

    monkeypatch.setattr(ingress.store, "put_notification", put_notification)

    # WHEN the ingress resolves it, and the worker takes the wake-up it sent while the lease is held
    request = HttpRequest("POST", "/restate/awakeables/x/resolve", body=b'"yes"')
    assert ingress.ingress.resolve_awakeable(request, awakeable_id(invocation_id, FIRST_AWAKEABLE)).status == 202
    assert scheduler.deliver(worker) == [Outcome.BUSY]
    go.set()
    holder.join(30)
    scheduler.deliver(worker)  # whatever the holder left to do

    # THEN the invocation got the value: it is not left suspended with the notification stored
    loaded_after = worker.store.load_invocation(invocation_id)
    assert loaded_after is not None
    assert [n.key for n in loaded_after.notifications] == [f"s{FIRST_AWAKEABLE}"]
    assert (loaded_after.record.status, loaded_after.record.output) == ("completed", b'"got yes"'), holder_outcome


def _post(plane: HttpControlPlane, path: str, value: str, **headers: str) -> tuple[int, object]:
    headers = {"content-type": "application/json", **headers}
    request = HttpRequest("POST", path, headers=headers, body=json.dumps(value).encode())
    response = plane.ingress.router.dispatch(request)
    return response.status, json.loads(response.body) if response.body else None


def test_a_workflow_id_run_again_after_its_retention_starts_from_nothing_when_the_worker_removes_the_old_run(
    moto_endpoint: str, examples_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    settings = Settings(
        inactivity_timeout_ms=10_000, workflow_retention_ms=1_000, completed_retention_ms=1_000, call_wait_ms=2_000
    )
    with two_planes(moto_endpoint, examples_url, settings) as (worker, ingress):
        scheduler: QueueScheduler = worker.scheduler  # type: ignore[assignment]
        # GIVEN a workflow run that completed, confirmed with "c1", whose retention (1 s) has ended
        assert _post(worker, "/Signup/w1/confirm", "c1") == (200, "confirmed")
        assert _post(worker, "/Signup/w1/run", "a@example.com") == (
            200,
            {"email": "a@example.com", "confirmed_with": "c1"},
        )
        scheduler.deliver(worker)
        time.sleep(2.2)
        # AND a worker that is slow to carry out the removal the ingress hands it
        answered = threading.Event()
        original_delete_keyed = worker.store.delete_keyed

        def delete_keyed(scope: str, key: str) -> None:
            answered.wait(1.5)  # until the ingress answered (it cannot while the old run is there)
            original_delete_keyed(scope, key)

        monkeypatch.setattr(worker.store, "delete_keyed", delete_keyed)

        # WHEN the same workflow id runs again through the ingress, while the worker removes the old run
        answer: list[tuple[int, object]] = []
        runner = threading.Thread(
            target=lambda: (answer.append(_post(ingress, "/Signup/w1/run", "b@example.com")), answered.set())
        )
        runner.start()
        deadline = time.monotonic() + 5
        while not scheduler.queued and time.monotonic() < deadline:
            time.sleep(0.01)
        scheduler.deliver(worker)  # the hand-off: the worker removes the expired run
        runner.join(30)

        # THEN the new run starts from nothing: it waits for a new confirmation, not the old run's
        assert answer
        assert answer[0][1] != {"email": "b@example.com", "confirmed_with": "c1"}, answer
        assert answer[0][0] == 202, answer
        assert _post(ingress, "/Signup/w1/confirm", "c2") == (200, "confirmed")
        scheduler.deliver(worker)
        run = worker.store.get_invocation(worker.engine.workflow_run_id("Signup", "w1"))
        assert run is not None
        assert (run.status, json.loads(run.output or b"null")) == (
            "completed",
            {"email": "b@example.com", "confirmed_with": "c2"},
        )


def test_a_removal_that_read_the_expired_invocation_before_another_removed_it_keeps_the_new_one(
    moto_endpoint: str, examples_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    settings = Settings(inactivity_timeout_ms=10_000, completed_retention_ms=1_000)
    with two_planes(moto_endpoint, examples_url, settings) as (worker, ingress):
        # GIVEN a call with an idempotency key whose retention (1 s) has ended
        assert _post(ingress, "/Greeter/greet", "Ann", **{"idempotency-key": "k1"}) == (200, "Hello, Ann!")
        invocation_id = worker.engine.idempotent_invocation_id("Greeter", "greet", "", "k1")
        first = worker.store.get_invocation(invocation_id)
        assert first is not None
        time.sleep(2.2)
        # AND a worker woken by a timer of it (the ingress's hand-off, a late sleep) that read it
        # expired and is slow to delete it
        read, go = threading.Event(), threading.Event()
        original_delete = worker.store.delete_invocation

        def delete_invocation(*args: Any, **kwargs: Any) -> None:
            if threading.current_thread().name == "slow-worker":
                read.set()
                assert go.wait(30)
            original_delete(*args, **kwargs)

        monkeypatch.setattr(worker.store, "delete_invocation", delete_invocation)
        slow = threading.Thread(
            target=worker.engine._timer_done, args=(invocation_id, 1, Outcome.BUSY), name="slow-worker"
        )
        slow.start()
        assert read.wait(30)

        # WHEN the sweeper removes it meanwhile, the key runs anew, and then the slow worker deletes
        assert worker.retire_due() == 1
        assert _post(ingress, "/Greeter/greet", "Bob", **{"idempotency-key": "k1"}) == (200, "Hello, Bob!")
        go.set()
        slow.join(30)

        # THEN the new run is kept: its result is the key's, until its own retention ends
        second = worker.store.get_invocation(invocation_id)
        assert second is not None
        assert (second.created_at_ms > first.created_at_ms, second.output) == (True, b'"Hello, Bob!"')
        output = ingress.ingress.router.dispatch(HttpRequest("GET", "/restate/invocation/Greeter/greet/k1/output"))
        assert (output.status, output.body) == (200, b'"Hello, Bob!"')
