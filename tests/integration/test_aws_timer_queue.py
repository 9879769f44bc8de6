"""The Lambda path with a timer queue beside the wake queue (`TORPOR_TIMER_QUEUE_URL`), on moto.

The stack feeds the worker from two queues, each with its own event source mapping and
concurrency: starts, hand-overs and completions on the wake queue, every timer's wake-up on the
timer queue. A sleep that falls due resumes through the timer queue while a burst of starts still
waits on the wake queue; before, its wake-up sat behind every start sent before it.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator
from datetime import datetime

import boto3
import pytest

from adapters.local.lambda_emulator import LambdaEmulatorProcess
from tests.helpers.aws_functions import LocalFunctions, lambda_environment
from tests.helpers.moto import REGION, fresh_store
from tests.helpers.services import REPO_ROOT

ARN = "arn:aws:lambda:us-east-1:123456789012:function:examples:1"


@pytest.fixture(scope="module")
def functions(moto_endpoint: str) -> Iterator[LocalFunctions]:
    store = fresh_store(moto_endpoint)
    sqs = boto3.client("sqs", region_name=REGION, endpoint_url=moto_endpoint)
    suffix = uuid.uuid4().hex[:8]
    wake_url = sqs.create_queue(QueueName=f"wake-{suffix}")["QueueUrl"]
    timer_url = sqs.create_queue(QueueName=f"timers-{suffix}")["QueueUrl"]
    with LambdaEmulatorProcess({"examples": "examples.app:app"}, cwd=REPO_ROOT) as emulator:
        env = {
            "TORPOR_TABLE": store.table_name,
            "TORPOR_WAKE_QUEUE_URL": wake_url,
            "TORPOR_TIMER_QUEUE_URL": timer_url,
            "AWS_ENDPOINT_URL_DYNAMODB": moto_endpoint,
            "AWS_ENDPOINT_URL_SQS": moto_endpoint,
            "AWS_ENDPOINT_URL_LAMBDA": emulator.url,
            "POWERTOOLS_METRICS_NAMESPACE": "TorporTest",
        }
        with lambda_environment(env):
            functions = LocalFunctions(sqs, wake_url, timer_url)
            status, body, _ = functions.http("admin", "POST", "/deployments", {"arn": ARN})
            assert status == 201, body
            yield functions


def visible(functions: LocalFunctions, queue_url: str) -> int:
    """Messages visible on a queue now (exact in moto)."""
    attributes = functions.sqs.get_queue_attributes(QueueUrl=queue_url, AttributeNames=["ApproximateNumberOfMessages"])
    return int(attributes["Attributes"]["ApproximateNumberOfMessages"])


def test_a_due_sleep_resumes_through_the_timer_queue_while_a_burst_of_starts_waits(
    functions: LocalFunctions,
) -> None:
    assert functions.timer_queue_url is not None
    # GIVEN a one-second sleep whose first attempt ran (from the wake queue) and suspended
    status, body, _ = functions.http("ingress", "POST", "/Waits/sleep/send", 1000)
    assert status == 202, body
    sleeper = body["invocationId"]
    functions.until(lambda: functions.describe(sleeper)["status"] == "suspended", 15, "the sleep")
    due = datetime.fromisoformat(functions.describe(sleeper)["wake_up_at"])

    # AND then a burst of 25 starts that no worker has taken yet
    burst = []
    for _ in range(25):
        status, body, _ = functions.http("ingress", "POST", "/Waits/sleep/send", 0)
        assert status == 202, body
        burst.append(body["invocationId"])
    assert visible(functions, functions.queue_url) == 25

    # WHEN only the timer queue's mapping runs the worker, for up to 10 s
    deadline = time.monotonic() + 10
    while functions.describe(sleeper)["status"] != "completed" and time.monotonic() < deadline:
        functions.work(wait_s=1, queue_url=functions.timer_queue_url)

    # THEN the sleep resumed and completed, not before its due time, with every start still queued
    done = functions.describe(sleeper)
    assert done["status"] == "completed"
    assert datetime.fromisoformat(done["completed_at"]) >= due  # the times the store recorded, not the test's
    assert visible(functions, functions.queue_url) == 25
    assert {functions.describe(i)["status"] for i in burst} == {"ready"}

    # AND the burst completes once the wake queue's mapping runs too (each start's zero-length sleep
    # completes in its own attempt: nothing arms a timer)
    functions.until(
        lambda: all(functions.describe(i)["status"] == "completed" for i in burst), 60, "the burst to complete"
    )
    status, output, _ = functions.http("ingress", "GET", f"/restate/invocation/{sleeper}/output")
    assert (status, output) == (200, "slept 1000 ms")
