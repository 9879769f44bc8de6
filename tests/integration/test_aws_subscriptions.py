"""Event subscriptions through the control plane's Lambda functions on moto: the admin function stores
a subscription of an SQS FIFO queue, and the worker function, handed the queue's messages as the
event source mapping hands them (a redelivery included), invokes the example `Counter/add` once per
message, in the queue's order; an EventBridge rule's event and a Kinesis record arrive the same way;
after the subscription is removed, messages stay in their queue."""

from __future__ import annotations

import base64
import json
import uuid
from typing import Any

import boto3
import pytest

from adapters.aws import lambda_app
from tests.helpers.aws_functions import Context, LocalFunctions
from tests.helpers.moto import REGION
from tests.infra.facts import SAM_TEMPLATE, Facts
from tests.integration.test_aws_lambda_functions import (  # noqa: F401  (`functions`: the fixture)
    _allowed,
    _DynamoDBRecorder,
    functions,
)


def lambda_records(sqs: Any, queue_url: str) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """Receive up to 10 messages and write them as the SQS event source mapping does: `(records, messages)`."""
    arn = sqs.get_queue_attributes(QueueUrl=queue_url, AttributeNames=["QueueArn"])["Attributes"]["QueueArn"]
    messages = sqs.receive_message(
        QueueUrl=queue_url, MaxNumberOfMessages=10, AttributeNames=["All"], MessageAttributeNames=["All"]
    ).get("Messages", [])
    records = [
        {
            "messageId": m["MessageId"],
            "receiptHandle": m["ReceiptHandle"],
            "body": m["Body"],
            "attributes": m.get("Attributes", {}),
            "messageAttributes": {
                name: {"stringValue": value.get("StringValue"), "dataType": value["DataType"]}
                for name, value in m.get("MessageAttributes", {}).items()
            },
            "md5OfBody": m["MD5OfBody"],
            "eventSource": "aws:sqs",
            "eventSourceARN": arn,
            "awsRegion": REGION,
        }
        for m in messages
    ]
    return records, messages


def adds(functions: LocalFunctions, key: str) -> list[dict[str, Any]]:  # noqa: F811
    status, body, _ = functions.http("admin", "GET", f"/invocations?key={key}&handler=add")
    assert status == 200, body
    return sorted(body["invocations"], key=lambda i: (i["created_at"], i["id"]))


def all_completed(functions: LocalFunctions, key: str, count: int) -> list[dict[str, Any]] | None:  # noqa: F811
    found = adds(functions, key)
    return found if len(found) == count and all(i["status"] == "completed" for i in found) else None


def test_an_sqs_fifo_queue_invokes_an_object_once_per_message_in_order(
    functions: LocalFunctions,  # noqa: F811
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """... and every DynamoDB request the admin and worker functions make for it is one their roles in
    `template.yaml` allow, partition keys included (the admin writes the `SUB` item)."""
    from cfnlint.decode.cfn_yaml import load

    from adapters.aws import dynamodb_store

    recorder = _DynamoDBRecorder()
    original = dynamodb_store._CountingConnection.dispatch

    def dispatch(self: Any, operation_name: str, operation_kwargs: dict[str, Any]) -> dict[str, Any]:
        recorder.record(operation_name, operation_kwargs)
        return original(self, operation_name, operation_kwargs)

    monkeypatch.setattr(dynamodb_store._CountingConnection, "dispatch", dispatch)
    recorder.phase = "AdminFunction"
    sqs = boto3.client("sqs", region_name=REGION, endpoint_url=functions.sqs.meta.endpoint_url)
    name = f"orders-{uuid.uuid4().hex[:8]}.fifo"
    queue_url = sqs.create_queue(QueueName=name, Attributes={"FifoQueue": "true"})["QueueUrl"]
    key = uuid.uuid4().hex[:8]
    # GIVEN the admin function subscribed Counter/add to the queue
    status, created, _ = functions.http(
        "admin", "POST", "/subscriptions", {"source": f"sqs://{name}", "sink": "service://Counter/add"}
    )
    assert status == 201, created
    # AND three messages of one group (the object key) on the queue
    sent = [
        sqs.send_message(QueueUrl=queue_url, MessageBody=str(delta), MessageGroupId=key, MessageDeduplicationId=f"d{n}")
        for n, delta in enumerate((1, 10, 100))
    ]

    # WHEN the worker gets the batch, and then the same batch again (a redelivery)
    recorder.phase = "WorkerFunction"
    records, messages = lambda_records(sqs, queue_url)
    assert len(records) == 3
    assert lambda_app.worker_handler({"Records": records}, Context()) == {"batchItemFailures": []}
    assert lambda_app.worker_handler({"Records": records}, Context()) == {"batchItemFailures": []}
    for message in messages:  # done: the event source mapping deletes them
        sqs.delete_message(QueueUrl=queue_url, ReceiptHandle=message["ReceiptHandle"])

    recorder.phase = None
    # THEN Counter/add ran three times on the group's key, in the queue's order, each message once
    done = functions.until(lambda: all_completed(functions, key, 3), 60, "three completed adds")
    assert [i["completion_output"] for i in done] == [1, 11, 111]
    assert [i["idempotency_key"] for i in done] == [m["MessageId"] for m in sent]  # the event ids

    # WHEN the subscription is removed and another message arrives
    recorder.phase = "AdminFunction"
    assert functions.http("admin", "DELETE", f"/subscriptions/{created['id']}")[0] == 202
    recorder.phase = None
    facts = Facts(json.loads(json.dumps(load(str(SAM_TEMPLATE)))))
    refused = {
        function: sorted(r for r in requests if not _allowed(facts, function, *r))
        for function, requests in recorder.requests.items()
    }
    assert all(not r for r in refused.values()), refused
    assert ("dynamodb:PutItem", "${Table.Arn}", ("SUB",)) in recorder.requests["AdminFunction"]
    assert ("dynamodb:DeleteItem", "${Table.Arn}", ("SUB",)) in recorder.requests["AdminFunction"]
    sqs.send_message(QueueUrl=queue_url, MessageBody="1000", MessageGroupId=key, MessageDeduplicationId="d3")
    records, _ = lambda_records(sqs, queue_url)

    # THEN the worker fails it (it stays on the queue) and nothing more is invoked
    assert len(records) == 1
    answer = lambda_app.worker_handler({"Records": records}, Context())
    assert answer == {"batchItemFailures": [{"itemIdentifier": records[0]["messageId"]}]}
    assert len(adds(functions, key)) == 3


def test_an_eventbridge_rule_and_a_kinesis_stream_invoke_their_sinks(functions: LocalFunctions) -> None:  # noqa: F811
    rule, stream, key = f"rule-{uuid.uuid4().hex[:6]}", f"clicks-{uuid.uuid4().hex[:6]}", uuid.uuid4().hex[:8]
    for body in (
        {"source": f"eventbridge://{rule}", "sink": "service://Counter/add", "options": {"key": key}},
        {"source": f"kinesis://{stream}", "sink": "service://Counter/add"},
    ):
        status, created, _ = functions.http("admin", "POST", "/subscriptions", body)
        assert status == 201, created
    event = {
        "rule": rule,
        "event": {"id": str(uuid.uuid4()), "source": "shop", "detail-type": "Order", "detail": 5, "resources": []},
    }
    # WHEN EventBridge delivers one event twice, and Kinesis one record
    first = lambda_app.worker_handler(event, Context())
    assert lambda_app.worker_handler(event, Context()) == first
    record = {
        "eventSource": "aws:kinesis",
        "eventSourceARN": f"arn:aws:kinesis:{REGION}:123456789012:stream/{stream}",
        "eventID": "shardId-000000000000:4960",
        "kinesis": {"partitionKey": key, "sequenceNumber": "4960", "data": base64.b64encode(b"7").decode()},
    }
    assert lambda_app.worker_handler({"Records": [record]}, Context()) == {"batchItemFailures": []}

    # THEN the object key got 5, then 7, each once
    done = functions.until(lambda: all_completed(functions, key, 2), 60, "two completed adds")
    assert [i["completion_output"] for i in done] == [5, 12]
    assert first == {"invocations": [done[0]["id"]]}


def test_a_kinesis_record_that_cannot_be_invoked_ends_the_batch_there(functions: LocalFunctions) -> None:  # noqa: F811
    stream = f"bad-{uuid.uuid4().hex[:6]}"
    status, created, _ = functions.http(
        "admin", "POST", "/subscriptions", {"source": f"kinesis://{stream}", "sink": "service://Counter/add"}
    )
    assert status == 201, created

    def record(sequence: str, key: str) -> dict[str, Any]:
        return {
            "eventSource": "aws:kinesis",
            "eventSourceARN": f"arn:aws:kinesis:{REGION}:123456789012:stream/{stream}",
            "eventID": f"shardId-000000000000:{sequence}",
            "kinesis": {"partitionKey": key, "sequenceNumber": sequence, "data": base64.b64encode(b"1").decode()},
        }

    # WHEN the second of three records has no key (Counter is a virtual object)
    key = uuid.uuid4().hex[:8]
    batch = {"Records": [record("1", key), record("2", ""), record("3", key)]}
    answer = lambda_app.worker_handler(batch, Context())

    # THEN the batch fails from it: Lambda retries from record 2, and record 3 is not delivered ahead of it
    assert answer == {"batchItemFailures": [{"itemIdentifier": "2"}]}
    assert [i["idempotency_key"] for i in adds(functions, key)] == ["shardId-000000000000:1"]


@pytest.mark.parametrize("source", ["sqs://nobody-subscribed", "kinesis://nobody"])
def test_an_event_of_a_source_without_subscription_fails(functions: LocalFunctions, source: str) -> None:  # noqa: F811
    scheme, _, name = source.partition("://")
    if scheme == "sqs":
        record: dict[str, Any] = {
            "messageId": "m1", "receiptHandle": "r", "body": "1", "attributes": {}, "messageAttributes": {},
            "md5OfBody": "", "eventSource": "aws:sqs", "eventSourceARN": f"arn:aws:sqs:{REGION}:123456789012:{name}",
        }  # fmt: skip
        expected = "m1"
    else:
        record = {
            "eventSource": "aws:kinesis", "eventSourceARN": f"arn:aws:kinesis:{REGION}:123456789012:stream/{name}",
            "eventID": "s:9", "kinesis": {"partitionKey": "k", "sequenceNumber": "9", "data": "MQ=="},
        }  # fmt: skip
        expected = "9"
    answer = lambda_app.worker_handler({"Records": [record]}, Context())
    assert answer == {"batchItemFailures": [{"itemIdentifier": expected}]}
    assert json.dumps(answer)


def test_the_deploy_hook_creates_and_deletes_a_declared_subscription(
    functions: LocalFunctions,  # noqa: F811
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """`Custom::TorporSubscription` (SAM's `SubscriptionQueueArn`, the CDK's `TorporSubscription`):
    Create stores it, Delete removes it (twice is fine), a bad sink fails the resource; every DynamoDB
    request is one the deploy hook's role allows."""
    from cfnlint.decode.cfn_yaml import load

    from adapters.aws import dynamodb_store
    from control_plane.errors import BadRequest

    recorder = _DynamoDBRecorder()
    original = dynamodb_store._CountingConnection.dispatch

    def dispatch(self: Any, operation_name: str, operation_kwargs: dict[str, Any]) -> dict[str, Any]:
        recorder.record(operation_name, operation_kwargs)
        return original(self, operation_name, operation_kwargs)

    monkeypatch.setattr(dynamodb_store._CountingConnection, "dispatch", dispatch)
    recorder.phase = "DeployHookFunction"
    plane = lambda_app.build_control_plane()
    properties = {"Source": "sqs://declared.fifo", "Sink": "service://Counter/add", "Options": {"key": "k"}}
    physical_id, data = lambda_app._subscription_resource(plane, "Create", properties, "unregistered")
    assert physical_id.startswith("sub_1") and data == {"SubscriptionId": physical_id}
    assert plane.subscriptions.get(physical_id).options == {"key": "k"}
    with pytest.raises(BadRequest, match="cannot find service/handler"):
        lambda_app._subscription_resource(plane, "Create", {**properties, "Sink": "service://Nope/x"}, "x")
    for _ in range(2):
        assert lambda_app._subscription_resource(plane, "Delete", properties, physical_id) == (physical_id, {})
    assert not plane.subscriptions.list(source="sqs://declared.fifo")
    recorder.phase = None
    facts = Facts(json.loads(json.dumps(load(str(SAM_TEMPLATE)))))
    made = recorder.requests["DeployHookFunction"]
    refused = sorted(r for r in made if not _allowed(facts, "DeployHookFunction", *r))
    assert not refused, refused
