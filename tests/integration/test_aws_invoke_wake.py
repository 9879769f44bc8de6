"""Wake-ups as asynchronous invokes of the worker (`TORPOR_WAKE=invoke`, issue 24), end to end.

DynamoDB, SQS and EventBridge Scheduler are a moto server over HTTP; the example services run on
the local Lambda emulator, which also takes the control plane's asynchronous `Invoke`s of the worker
(`InvocationType` `Event`, over boto3) and holds them (`--hold torpor-worker`) for
`LocalFunctions.work_invokes`, which runs the worker on each, as Lambda's event queue would. What a
user sees: a sent invocation completes with no message on the wake queue; an hour-long sleep's
schedule invokes the worker directly, whose early arrival is re-delayed through the timer queue and
never resumes the sleep early; a lost Invoke loses no invocation (the sweep wakes it); a malformed
event is dropped with a log line, not retried.
"""

from __future__ import annotations

import functools
import json
import logging
import os
import time
import uuid
from collections.abc import Iterator
from datetime import UTC, datetime
from typing import Any

import boto3
import pytest

from adapters.aws import lambda_app
from adapters.local.lambda_emulator import LambdaEmulatorProcess
from control_plane.durations import rfc3339
from tests.helpers.aws_functions import WORKER_ARN, WORKER_NAME, LocalFunctions, lambda_environment
from tests.helpers.moto import REGION, fresh_store
from tests.helpers.services import REPO_ROOT

ARN = "arn:aws:lambda:us-east-1:123456789012:function:examples:1"
SCHEDULER_ROLE = "arn:aws:iam::123456789012:role/torpor-scheduler"


def _queue(sqs: Any, name: str) -> tuple[str, str]:
    url: str = sqs.create_queue(QueueName=f"{name}-{uuid.uuid4().hex[:8]}")["QueueUrl"]
    attributes = sqs.get_queue_attributes(QueueUrl=url, AttributeNames=["QueueArn"])["Attributes"]
    return url, str(attributes["QueueArn"])


@pytest.fixture(scope="module")
def functions(moto_endpoint: str) -> Iterator[LocalFunctions]:
    store = fresh_store(moto_endpoint)
    sqs = boto3.client("sqs", region_name=REGION, endpoint_url=moto_endpoint)
    wake_url, wake_arn = _queue(sqs, "wake")
    timer_url, timer_arn = _queue(sqs, "timers")
    _, dlq_arn = _queue(sqs, "schedules-dlq")
    with LambdaEmulatorProcess({"examples": "examples.app:app"}, cwd=REPO_ROOT, hold=[WORKER_NAME]) as emulator:
        env = {
            "TORPOR_TABLE": store.table_name,
            "TORPOR_WAKE": "invoke",
            "TORPOR_WAKE_FUNCTION": WORKER_ARN,
            "TORPOR_WAKE_QUEUE_URL": wake_url,
            "TORPOR_WAKE_QUEUE_ARN": wake_arn,
            "TORPOR_TIMER_QUEUE_URL": timer_url,
            "TORPOR_TIMER_QUEUE_ARN": timer_arn,
            "AWS_ENDPOINT_URL_DYNAMODB": moto_endpoint,
            "AWS_ENDPOINT_URL_SQS": moto_endpoint,
            "AWS_ENDPOINT_URL_SCHEDULER": moto_endpoint,
            "AWS_ENDPOINT_URL_LAMBDA": emulator.url,
            "TORPOR_CALL_WAIT_MS": "3000",
            "TORPOR_SCHEDULER_ROLE_ARN": SCHEDULER_ROLE,
            "TORPOR_SCHEDULE_DLQ_ARN": dlq_arn,
            "POWERTOOLS_METRICS_NAMESPACE": "TorporTest",
        }
        with lambda_environment(env):
            functions = LocalFunctions(sqs, wake_url, timer_url, invokes=functools.partial(emulator.held, WORKER_NAME))
            status, body, _ = functions.http("admin", "POST", "/deployments", {"arn": ARN})
            assert status == 201, body
            yield functions


def _messages(functions: LocalFunctions, queue_url: str) -> int:
    attributes = functions.sqs.get_queue_attributes(
        QueueUrl=queue_url, AttributeNames=["ApproximateNumberOfMessages", "ApproximateNumberOfMessagesDelayed"]
    )["Attributes"]
    return int(attributes["ApproximateNumberOfMessages"]) + int(attributes["ApproximateNumberOfMessagesDelayed"])


def _status(functions: LocalFunctions, invocation_id: str) -> str:
    return str(functions.describe(invocation_id)["status"])


def test_a_sent_invocation_starts_by_an_asynchronous_invoke_of_the_worker_not_a_wake_queue_message(
    functions: LocalFunctions,
) -> None:
    status, body, _ = functions.http("ingress", "POST", "/Greeter/greet/send", "Ann")
    assert status == 202, body
    invocation_id = body["invocationId"]
    assert _messages(functions, functions.queue_url) == 0  # nothing on the wake queue
    assert functions.work_invokes() == 1  # the worker's one asynchronous event ran it
    assert _status(functions, invocation_id) == "completed"
    assert functions.http("ingress", "GET", f"/restate/invocation/{invocation_id}/output")[1] == "Hello, Ann!"
    assert _messages(functions, functions.queue_url) == 0


def test_an_hour_long_sleep_is_a_schedule_that_invokes_the_worker_and_never_resumes_it_early(
    functions: LocalFunctions, monkeypatch: pytest.MonkeyPatch
) -> None:
    status, body, _ = functions.http("ingress", "POST", "/Waits/sleep/send", 3_600_000)
    assert status == 202, body
    invocation_id = body["invocationId"]
    functions.until(lambda: _status(functions, invocation_id) == "suspended", 10, "the sleep")

    # the schedule: 60 s before the due time, its target the worker function itself
    scheduler = boto3.client("scheduler", region_name=REGION)
    [name] = [s["Name"] for s in scheduler.list_schedules()["Schedules"] if invocation_id in s["Name"]]
    schedule = scheduler.get_schedule(Name=name, GroupName="default")
    due_ms = int(name.rsplit("-", 1)[1])
    expected_at = datetime.fromtimestamp((due_ms - 60_000) // 1000, tz=UTC).strftime("at(%Y-%m-%dT%H:%M:%S)")
    assert schedule["ScheduleExpression"] == expected_at
    target = schedule["Target"]
    assert (target["Arn"], target["RoleArn"]) == (WORKER_ARN, SCHEDULER_ROLE)
    event = json.loads(target["Input"])
    assert event == {"invocation_id": invocation_id, "due_ms": due_ms}

    # the schedule fires (EventBridge Scheduler invokes the worker with its Input), 60 s early:
    # re-delayed through the timer queue, the sleep not resumed
    plane = lambda_app.build_control_plane()
    monkeypatch.setattr(plane.clock, "now_ms", lambda: due_ms - 60_000)
    assert functions.run_worker(event) == {"outcome": "redelayed"}
    assert _status(functions, invocation_id) == "suspended"
    assert functions.describe(invocation_id)["attempts"] == 1
    assert _messages(functions, functions.timer_queue_url or "") == 1  # the last minute, an SQS delay

    # at the due time the same event resumes it
    monkeypatch.setattr(plane.clock, "now_ms", lambda: due_ms + 1_000)
    assert functions.run_worker(event) == {"outcome": "fired"}
    assert _status(functions, invocation_id) == "completed"
    assert functions.http("ingress", "GET", f"/restate/invocation/{invocation_id}/output")[1] == "slept 3600000 ms"


def test_a_lost_invoke_loses_no_invocation_the_sweep_wakes_it(functions: LocalFunctions) -> None:
    status, body, _ = functions.http("ingress", "POST", "/Greeter/greet/send", "Bo")
    assert status == 202, body
    invocation_id = body["invocationId"]
    assert functions.invokes is not None
    assert len(functions.invokes()) == 1  # taken and never run: Lambda gave up on it
    time.sleep(0.2)
    assert functions.work_invokes() == 0
    assert _status(functions, invocation_id) == "ready"
    assert lambda_app.build_control_plane().sweep_due(grace_ms=0) >= 1  # an Invoke again
    functions.until(lambda: _status(functions, invocation_id) == "completed", 15, "the swept wake-up")
    assert functions.http("ingress", "GET", f"/restate/invocation/{invocation_id}/output")[1] == "Hello, Bo!"


def test_a_send_whose_invoke_is_refused_after_its_commit_is_acknowledged_and_the_sweep_starts_it(
    functions: LocalFunctions, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The invocation is stored before its wake-up: an Invoke refused then (throttled) answers 202
    with the id, not a 500 that a client without an idempotency key would send again."""
    plane = lambda_app.build_control_plane(may_delete=False)  # the ingress function's
    scheduler = plane.scheduler

    def refused(invocation_id: str) -> None:
        raise RuntimeError("TooManyRequestsException: Rate exceeded")

    monkeypatch.setattr(scheduler, "wake_now", refused)
    status, body, _ = functions.http("ingress", "POST", "/Greeter/greet/send", "Di")
    assert status == 202, body
    invocation_id = body["invocationId"]
    assert functions.invokes is not None
    assert len(functions.invokes()) == 0  # no Invoke went out
    assert _status(functions, invocation_id) == "ready"
    monkeypatch.undo()
    assert lambda_app.build_control_plane().sweep_due(grace_ms=0) >= 1  # the hand-off, again
    functions.until(lambda: _status(functions, invocation_id) == "completed", 15, "the swept wake-up")
    assert functions.http("ingress", "GET", f"/restate/invocation/{invocation_id}/output")[1] == "Hello, Di!"


def test_a_wake_up_that_raises_is_retried_by_lambda_and_runs(
    functions: LocalFunctions, monkeypatch: pytest.MonkeyPatch
) -> None:
    plane = lambda_app.build_control_plane()
    wake = plane.wake
    failures = {"left": 1}

    def flaky(event: object) -> object:
        if failures["left"]:
            failures["left"] -= 1
            raise RuntimeError("throttled")
        return wake(event)  # type: ignore[arg-type]

    monkeypatch.setattr(plane, "wake", flaky)
    status, body, _ = functions.http("ingress", "POST", "/Greeter/greet/send", "Cy")
    assert status == 202, body
    invocation_id = body["invocationId"]
    assert functions.work_invokes() == 1
    assert len(functions.retrying) == 1  # raised: Lambda runs it again
    functions.until(lambda: _status(functions, invocation_id) == "completed", 15, "the retried wake-up")


@pytest.mark.parametrize(
    "event",
    [
        {"invocation_id": 5, "due_ms": 0},
        {"hello": "world"},
        "not a wake-up",
        [1, 2],
        {"invocation_id": "inv_1"},
        {"invocation_id": "inv_1", "due_ms": 10**30},  # beyond any timer: its re-delay once raised OverflowError
        {"Records": []},  # these three raised (powertools' UnexpectedBatchTypeError, an AttributeError)
        {"Records": "x"},
        {"Records": [1]},
    ],
)
def test_a_malformed_event_is_dropped_with_a_log_line_not_retried(
    functions: LocalFunctions, event: object, caplog: pytest.LogCaptureFixture
) -> None:
    with caplog.at_level(logging.ERROR, logger="torpor.timers"):
        assert functions.run_worker(event) == {"outcome": "dropped"}
    assert any("malformed wake-up message" in record.getMessage() for record in caplog.records)


def test_a_wake_transport_other_than_sqs_or_invoke_is_refused_naming_the_variable(functions: LocalFunctions) -> None:
    lambda_app.reset()
    try:
        with pytest.raises(lambda_app.ConfigurationError, match="TORPOR_WAKE is 'eventbridge'"):
            lambda_app.build_control_plane({**os.environ, "TORPOR_WAKE": "eventbridge"})
    finally:
        lambda_app.reset()


@pytest.mark.parametrize("hold", ["abc", "5000", "-1"])
def test_a_hold_other_than_0_to_1000_ms_is_refused_naming_the_variable(functions: LocalFunctions, hold: str) -> None:
    lambda_app.reset()
    try:
        with pytest.raises(lambda_app.ConfigurationError, match=f"TORPOR_WAKE_HOLD_MS is '{hold}'"):
            lambda_app.build_control_plane({**os.environ, "TORPOR_WAKE_HOLD_MS": hold})
    finally:
        lambda_app.reset()


def test_a_durable_schedules_tick_invokes_the_worker_and_starts_one_invocation(functions: LocalFunctions) -> None:
    name, key = f"inv-{uuid.uuid4().hex[:8]}", f"k-{uuid.uuid4().hex[:8]}"
    status, body, _ = functions.http(
        "admin", "POST", "/schedules", {"name": name, "every": "1m", "target": "Counter/add", "key": key, "body": 5}
    )
    assert status == 201, body
    next_tick_ms = lambda_app.build_control_plane().store.get_schedule(name).next_tick_ms  # type: ignore[union-attr]
    target = boto3.client("scheduler", region_name=REGION).get_schedule(
        Name=f"torpor-schedule-{name}", GroupName="default"
    )["Target"]
    assert (target["Arn"], target["RoleArn"]) == (WORKER_ARN, SCHEDULER_ROLE)
    # EventBridge Scheduler fills in the scheduled time and invokes the worker, twice (at least once)
    event = json.loads(target["Input"].replace("<aws.scheduler.scheduled-time>", rfc3339(next_tick_ms) or ""))
    assert [functions.run_worker(event) for _ in range(2)] == [{"outcome": "fired"}] * 2
    functions.until(lambda: functions.http("ingress", "POST", f"/Counter/{key}/get")[1] == 5, 20, "the tick's add")
    status, listed, _ = functions.http("admin", "GET", f"/invocations?key={key}")
    adds = [i for i in listed["invocations"] if i["target_handler_name"] == "add"]
    assert [i["idempotency_key"] for i in adds] == [f"schedule/{name}/{next_tick_ms}"]  # one, for two deliveries
