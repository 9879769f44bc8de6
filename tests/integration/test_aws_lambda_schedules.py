"""A durable schedule through the control plane's Lambda functions on moto: the admin function creates
the EventBridge Scheduler recurring schedule, and its message, delivered twice to the worker function
as an SQS event, starts one invocation that runs the target once."""

from __future__ import annotations

import json
import os
import uuid
from typing import Any

import boto3
import pytest

from adapters.aws import lambda_app
from control_plane.durations import rfc3339
from tests.helpers.aws_functions import Context, LocalFunctions
from tests.helpers.moto import REGION
from tests.infra.facts import SAM_TEMPLATE, Facts
from tests.integration.test_aws_lambda_functions import (  # noqa: F401  (`functions`: the fixture)
    SCHEDULER_ROLE,
    _allowed,
    _DynamoDBRecorder,
    functions,
)


def test_a_schedule_created_by_the_admin_function_ticks_once_through_the_worker(
    functions: LocalFunctions,  # noqa: F811
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """... and every DynamoDB request the admin and worker functions make for it is one their roles in
    `template.yaml` allow, partition keys included (the worker writes the schedule's `SCHED` item)."""
    from cfnlint.decode.cfn_yaml import load

    from adapters.aws import dynamodb_store

    recorder = _DynamoDBRecorder()
    original = dynamodb_store._CountingConnection.dispatch

    def dispatch(self: Any, operation_name: str, operation_kwargs: dict[str, Any]) -> dict[str, Any]:
        recorder.record(operation_name, operation_kwargs)
        return original(self, operation_name, operation_kwargs)

    monkeypatch.setattr(dynamodb_store._CountingConnection, "dispatch", dispatch)
    recorder.phase = "AdminFunction"
    name, key = f"lambda-{uuid.uuid4().hex[:8]}", f"k-{uuid.uuid4().hex[:8]}"
    status, body, _ = functions.http(
        "admin", "POST", "/schedules", {"name": name, "every": "1m", "target": "Counter/add", "key": key, "body": 5}
    )
    assert status == 201, body
    next_tick_ms = lambda_app.build_control_plane().store.get_schedule(name).next_tick_ms  # type: ignore[union-attr]

    eventbridge = boto3.client("scheduler", region_name=REGION)
    schedule = eventbridge.get_schedule(Name=f"torpor-schedule-{name}", GroupName="default")
    assert schedule["ScheduleExpression"] == "rate(1 minute)"
    target = schedule["Target"]
    assert (target["Arn"], target["RoleArn"]) == (os.environ["TORPOR_WAKE_QUEUE_ARN"], SCHEDULER_ROLE)
    assert target["DeadLetterConfig"] == {"Arn": os.environ["TORPOR_SCHEDULE_DLQ_ARN"]}

    # EventBridge Scheduler fills in the scheduled time; the worker gets the message twice
    recorder.phase = "WorkerFunction"
    message = target["Input"].replace("<aws.scheduler.scheduled-time>", rfc3339(next_tick_ms) or "")
    for _ in range(2):
        record = {"messageId": uuid.uuid4().hex, "receiptHandle": "r", "body": message, "attributes": {}}
        record.update(
            eventSource="aws:sqs",
            eventSourceARN=os.environ["TORPOR_WAKE_QUEUE_ARN"],
            awsRegion=REGION,
            md5OfBody="",
            messageAttributes={},
        )
        assert lambda_app.worker_handler({"Records": [record]}, Context()) == {"batchItemFailures": []}

    recorder.phase = None
    facts = Facts(json.loads(json.dumps(load(str(SAM_TEMPLATE)))))
    refused = {
        function: sorted(r for r in requests if not _allowed(facts, function, *r))
        for function, requests in recorder.requests.items()
    }
    assert all(not r for r in refused.values()), refused
    assert ("dynamodb:UpdateItem", "${Table.Arn}", ("SCHED",)) in recorder.requests["WorkerFunction"]

    status, listed, _ = functions.http("admin", "GET", f"/invocations?key={key}")
    assert status == 200
    assert len(listed["invocations"]) == 1
    invocation_id = listed["invocations"][0]["id"]
    assert listed["invocations"][0]["idempotency_key"] == f"schedule/{name}/{next_tick_ms}"
    functions.until(lambda: functions.describe(invocation_id)["status"] == "completed", 20, "the tick's invocation")
    status, value, _ = functions.http("ingress", "POST", f"/Counter/{key}/get")
    assert (status, value) == (200, 5)
    status, described, _ = functions.http("admin", "GET", f"/schedules/{name}")
    assert described["last_invocation_id"] == invocation_id
    assert json.loads(message)["schedule"] == name
