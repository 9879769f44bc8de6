"""A notification delivered by one function while another holds the invocation's lease, on a moto server.

On AWS the ingress (which may not delete items) resolves an awakeable while a worker holds the
lease of the invocation waiting on it. The wake-up the ingress sends finds the lease held (`BUSY`)
and is used up, exactly as an SQS message is; the holder must then not suspend without the
notification. The interleaving is forced step by step, with a real restate-sdk handler over HTTP.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from adapters.aws.dynamodb_store import DynamoDBStore
from adapters.http.invoker import HttpInvoker
from control_plane.held import Outcome
from control_plane.http import HttpRequest
from control_plane.ids import awakeable_id
from control_plane.runtime import ControlPlane
from control_plane.settings import Settings
from tests.helpers.moto import DUMMY_AWS_ENV, fresh_store
from tests.helpers.services import serve_examples

FIRST_AWAKEABLE = 17  # the SDK's first awakeable signal index


class QueueScheduler:
    """Wake-ups as a queue the test delivers by hand, as the worker takes SQS messages: one delivery
    per wake-up, a `BUSY` advance uses it up."""

    def __init__(self) -> None:
        self.queued: list[str] = []

    def wake_now(self, invocation_id: str) -> None:
        self.queued.append(invocation_id)

    def wake_at(self, invocation_id: str, due_ms: int) -> None:
        self.queued.append(invocation_id)

    def deliver(self, advance: Callable[[str], Outcome]) -> list[Outcome]:
        outcomes = []
        while self.queued:
            outcomes.append(advance(self.queued.pop(0)))
        return outcomes


@pytest.fixture(scope="module")
def examples_url() -> Iterator[str]:
    with serve_examples() as (url, _process):
        yield url


@pytest.fixture
def planes(moto_endpoint: str, examples_url: str) -> Iterator[tuple[ControlPlane, ControlPlane, QueueScheduler]]:
    """The worker's control plane and the ingress's (a store that may not delete) on one table."""
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
    settings = Settings(inactivity_timeout_ms=10_000)
    worker = ControlPlane(worker_store, invokers[0], scheduler, settings=settings)
    ingress = ControlPlane(ingress_store, invokers[1], scheduler, settings=settings)
    worker.registry.register(examples_url)
    yield worker, ingress, scheduler
    for invoker in invokers:
        invoker.close()


def test_an_awakeable_resolved_while_another_function_holds_the_lease_is_never_missed(
    planes: tuple[ControlPlane, ControlPlane, QueueScheduler], monkeypatch: pytest.MonkeyPatch
) -> None:
    worker, ingress, scheduler = planes
    # GIVEN an invocation suspended on an awakeable
    record = worker.engine.create("Waits", "awakeable", b"", {}, leased=False)
    invocation_id = record.invocation_id
    scheduler.deliver(worker.advance)
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
    assert scheduler.deliver(worker.advance) == [Outcome.BUSY]
    go.set()
    holder.join(30)
    scheduler.deliver(worker.advance)  # whatever the holder left to do

    # THEN the invocation got the value: it is not left suspended with the notification stored
    loaded_after = worker.store.load_invocation(invocation_id)
    assert loaded_after is not None
    assert [n.key for n in loaded_after.notifications] == [f"s{FIRST_AWAKEABLE}"]
    assert (loaded_after.record.status, loaded_after.record.output) == ("completed", b'"got yes"'), holder_outcome
