"""The DynamoDB requests of one sleep on the Lambda path, counted at the wire.

The ingress and worker functions (`LocalFunctions`, as API Gateway and the SQS event source
mapping drive them) reach moto through `bench.partitions`' metering proxy, which forwards every
request and logs it with the keys it names. A `Waits/sleep(1000)` sent through the ingress makes
its life there: created, started by the worker (lease, the Sleep command, its timer, the
suspension), resumed by the timer's message (lease, journal read, the completion), its timer
record dropped. The registry's reads (service and deployment records, cached 2 s per process) are
not the invocation's and are left out.
"""

from __future__ import annotations

import time
import uuid
from collections import Counter
from collections.abc import Iterator

import boto3
import pytest

from adapters.aws.dynamodb_store import DynamoDBStore
from adapters.local.lambda_emulator import LambdaEmulatorProcess
from bench.partitions import MeterProxy
from tests.helpers.aws_functions import LocalFunctions, lambda_environment
from tests.helpers.moto import REGION, fresh_store
from tests.helpers.services import REPO_ROOT

ARN = "arn:aws:lambda:us-east-1:123456789012:function:examples:1"


@pytest.fixture(scope="module")
def metered(moto_endpoint: str) -> Iterator[tuple[LocalFunctions, MeterProxy, DynamoDBStore]]:
    """The functions with DynamoDB behind the metering proxy; a store reading moto directly (unmetered)."""
    store = fresh_store(moto_endpoint)
    sqs = boto3.client("sqs", region_name=REGION, endpoint_url=moto_endpoint)
    suffix = uuid.uuid4().hex[:8]
    wake_url = sqs.create_queue(QueueName=f"wake-{suffix}")["QueueUrl"]
    timer_url = sqs.create_queue(QueueName=f"timers-{suffix}")["QueueUrl"]
    examples = {"examples": "examples.app:app"}
    with MeterProxy(moto_endpoint) as proxy, LambdaEmulatorProcess(examples, cwd=REPO_ROOT) as emulator:
        env = {
            "TORPOR_TABLE": store.table_name,
            "TORPOR_WAKE_QUEUE_URL": wake_url,
            "TORPOR_TIMER_QUEUE_URL": timer_url,
            "AWS_ENDPOINT_URL_DYNAMODB": proxy.url,
            "AWS_ENDPOINT_URL_SQS": moto_endpoint,
            "AWS_ENDPOINT_URL_LAMBDA": emulator.url,
            "POWERTOOLS_METRICS_NAMESPACE": "TorporTest",
        }
        with lambda_environment(env):
            functions = LocalFunctions(sqs, wake_url, timer_url)
            status, body, _ = functions.http("admin", "POST", "/deployments", {"arn": ARN})
            assert status == 201, body
            yield functions, proxy, store


def test_a_one_second_sleep_makes_nine_dynamodb_requests_on_the_lambda_path(
    metered: tuple[LocalFunctions, MeterProxy, DynamoDBStore],
) -> None:
    functions, proxy, store = metered
    proxy.meter.take()
    # GIVEN a one-second sleep sent through the ingress function
    status, body, _ = functions.http("ingress", "POST", "/Waits/sleep/send", 1000)
    assert status == 202, body
    invocation_id = body["invocationId"]

    # WHEN the worker function runs its start and its resumption from the queues
    deadline = time.monotonic() + 30
    while (record := store.get_invocation(invocation_id)) is None or record.status != "completed":
        assert time.monotonic() < deadline, f"the sleep did not complete: {record}"
        functions.work(wait_s=1)

    # THEN its requests, one line each with the keys it named, are these nine
    mine = [line for line in proxy.meter.take().log if invocation_id[:24] in line]
    assert Counter(line.split()[0] for line in mine) == {
        "PutItem": 3,  # the record (ingress); the Sleep command's batch, its timer (first attempt)
        "UpdateItem": 4,  # lease and suspension; lease and the completion carrying its last batch
        "Query": 1,  # the resumption's read of the journal (the first attempt's is the record alone)
        "DeleteItem": 1,  # the fired timer's record
    }, "\n".join(mine)
    assert record.output == b'"slept 1000 ms"'
