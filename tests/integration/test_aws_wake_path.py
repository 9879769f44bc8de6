"""The AWS wake-up path end to end: the control plane with `SqsScheduler` on a moto server.

A real restate-sdk handler sleeps; its wake-ups travel as SQS messages (with a real delay) and are
handled the way the worker Lambda handles its batches; every message is delivered twice.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import boto3
import pytest

from adapters.aws.dynamodb_store import DynamoDBStore
from adapters.aws.timers import SqsScheduler, handle_wake_message
from adapters.http.invoker import HttpInvoker
from control_plane.runtime import ControlPlane
from control_plane.settings import Settings
from tests.helpers.moto import DUMMY_AWS_ENV, REGION, fresh_store


@pytest.fixture
def wiring(moto_endpoint: str, examples_url: str) -> Iterator[tuple[ControlPlane, SqsScheduler, Any, str]]:
    sqs = boto3.client(
        "sqs",
        endpoint_url=moto_endpoint,
        region_name=REGION,
        aws_access_key_id=DUMMY_AWS_ENV["AWS_ACCESS_KEY_ID"],
        aws_secret_access_key=DUMMY_AWS_ENV["AWS_SECRET_ACCESS_KEY"],
    )
    queue_url = sqs.create_queue(QueueName=f"wake-{time.time_ns()}")["QueueUrl"]
    scheduler = SqsScheduler(sqs, queue_url)
    store: DynamoDBStore = fresh_store(moto_endpoint)
    invoker = HttpInvoker()
    cp = ControlPlane(store, invoker, scheduler, settings=Settings(inactivity_timeout_ms=10_000), facts=store.facts)
    cp.registry.register(examples_url)
    yield cp, scheduler, sqs, queue_url
    invoker.close()


def deliver_each_twice(cp: ControlPlane, scheduler: SqsScheduler, sqs: Any, queue_url: str, until_s: float) -> int:
    """Receive wake-ups until the deadline; handle every one twice, as a duplicate delivery would."""
    handled = 0
    deadline = time.monotonic() + until_s
    while time.monotonic() < deadline:
        messages = sqs.receive_message(QueueUrl=queue_url, MaxNumberOfMessages=10, WaitTimeSeconds=0).get(
            "Messages", []
        )
        for message in messages:
            for _ in range(2):
                handle_wake_message(
                    message["Body"],
                    wake=cp.wake,
                    scheduler=scheduler,
                    now_ms=int(time.time() * 1000),
                )
            sqs.delete_message(QueueUrl=queue_url, ReceiptHandle=message["ReceiptHandle"])
            handled += 1
        time.sleep(0.05)
    return handled


def test_a_sleep_resumed_through_sqs_with_every_wake_up_delivered_twice(
    wiring: tuple[ControlPlane, SqsScheduler, Any, str],
) -> None:
    cp, scheduler, sqs, queue_url = wiring
    # GIVEN a send: the first wake-up is an SQS message without delay
    record = cp.engine.create("Waits", "sleep", b"1500", {}, leased=False)
    # WHEN the worker handles every wake-up message twice for 4 s (the sleep's is delayed ~2 s)
    handled = deliver_each_twice(cp, scheduler, sqs, queue_url, until_s=4.0)
    # THEN the invocation completed once: two handler requests, one Sleep, one completion
    loaded = cp.store.load_invocation(record.invocation_id)
    assert loaded is not None
    assert loaded.record.status == "completed"
    assert loaded.record.output == b'"slept 1500 ms"'
    assert loaded.record.attempts == 2
    assert handled >= 2
    assert cp.store.due_timers(int(time.time() * 1000) + 60_000) == []
