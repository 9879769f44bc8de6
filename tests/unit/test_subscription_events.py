"""`adapters.aws.subscriptions`: what Lambda hands the worker becomes events, and which events are a
subscription's (not wake-ups)."""

from __future__ import annotations

import base64
import json

from adapters.aws.subscriptions import (
    eventbridge_event,
    is_subscription_event,
    sqs_event,
    sqs_message_event,
    stream_event,
)
from control_plane.subscriptions import Event

ARN = "arn:aws:sqs:us-east-1:123456789012:"


def test_an_sqs_fifo_record_is_keyed_by_its_group_and_named_by_its_message_id() -> None:
    record = {
        "eventSourceARN": ARN + "orders.fifo", "messageId": "m-1", "body": "5",
        "attributes": {"MessageGroupId": "alice", "MessageDeduplicationId": "d-1"},
        "messageAttributes": {"trace": {"stringValue": "t1", "dataType": "String"}, "blob": {"binaryValue": "AA=="}},
    }  # fmt: skip
    assert sqs_event(record) == Event("sqs://orders.fifo", "m-1", "alice", b"5", {"trace": "t1"})


def test_two_fifo_messages_with_one_deduplication_id_are_two_events() -> None:
    """Content-based deduplication gives equal bodies one deduplication id, and SQS forgets it after 5
    minutes: the same body sent again later is a new message (a new message id), so a new event."""
    dedup = "sha256-of-5"
    first, later = (
        {"eventSourceARN": ARN + "orders.fifo", "messageId": message_id, "body": "5",
         "attributes": {"MessageGroupId": "alice", "MessageDeduplicationId": dedup}}
        for message_id in ("m-1", "m-2")
    )  # fmt: skip
    assert sqs_event(first).event_id != sqs_event(later).event_id


def test_a_standard_queue_message_takes_its_key_attribute_and_its_message_id() -> None:
    key = {"key": {"StringValue": "bob", "DataType": "String"}}
    message = {"MessageId": "m-2", "Body": "{}", "MessageAttributes": key}
    assert sqs_message_event("plain", message) == Event("sqs://plain", "m-2", "bob", b"{}", {})


def test_an_eventbridge_event_is_its_detail_with_source_and_type_as_headers() -> None:
    event = eventbridge_event({"rule": "orders", "event": {"id": "e-1", "source": "shop", "detail-type": "Paid",
                                                           "detail": {"n": 1}}})  # fmt: skip
    assert event == Event("eventbridge://orders", "e-1", "", b'{"n":1}',
                          {"eventbridge-source": "shop", "eventbridge-detail-type": "Paid"})  # fmt: skip


def test_stream_records() -> None:
    kinesis = stream_event({
        "eventSource": "aws:kinesis", "eventID": "shardId-1:42",
        "eventSourceARN": "arn:aws:kinesis:us-east-1:123456789012:stream/clicks",
        "kinesis": {"partitionKey": "u1", "sequenceNumber": "42", "data": base64.b64encode(b"7").decode()},
    })  # fmt: skip
    assert kinesis == Event("kinesis://clicks", "shardId-1:42", "u1", b"7", {})
    change = {"Keys": {"pk": {"S": "a"}}, "NewImage": {"pk": {"S": "a"}, "n": {"N": "1"}}, "SequenceNumber": "9"}
    dynamodb = stream_event({
        "eventSource": "aws:dynamodb", "eventID": "ev-9", "eventName": "INSERT", "dynamodb": change,
        "eventSourceARN": "arn:aws:dynamodb:us-east-1:123456789012:table/users/stream/2026-01-01T00:00:00.000",
    })  # fmt: skip
    assert (dynamodb.source, dynamodb.event_id, dynamodb.key) == ("dynamodb://users", "ev-9", '{"pk":{"S":"a"}}')
    assert json.loads(dynamodb.body) == {"eventName": "INSERT", **change}


def test_wake_ups_and_subscription_events_are_told_apart() -> None:
    wake = {"Records": [{"eventSource": "aws:sqs", "eventSourceARN": ARN + "torpor-wake"}]}
    assert not is_subscription_event(wake, ("torpor-wake", "torpor-timers"))
    assert not is_subscription_event(wake, ())  # no queue names known: every SQS batch is wake-ups
    other = {"Records": [{"eventSource": "aws:sqs", "eventSourceARN": ARN + "orders.fifo"}]}
    assert is_subscription_event(other, ("torpor-wake", "torpor-timers"))
    assert is_subscription_event({"Records": [{"eventSource": "aws:kinesis"}]}, ("torpor-wake",))
    assert is_subscription_event({"rule": "r", "event": {}}, ("torpor-wake",))


def test_a_dynamodb_stream_record_that_fails_is_reported_by_its_sequence_number() -> None:
    """Lambda retries a stream from the reported record; an empty identifier fails the whole batch."""
    from adapters.aws.subscriptions import handle_subscription_event
    from control_plane.errors import NotFound
    from control_plane.ports import SubscriptionRecord

    class SinkGone:
        def list(self, source: str | None = None, sink: str | None = None) -> list[SubscriptionRecord]:
            return [SubscriptionRecord("sub_1a", "dynamodb://Orders", "service://Removed/h", {}, 0)]

        def deliver(self, subscription: SubscriptionRecord, event: Event) -> str:
            raise NotFound("service 'Removed' not found")

    record = {
        "eventID": "e-9", "eventName": "INSERT", "eventSource": "aws:dynamodb",
        "eventSourceARN": "arn:aws:dynamodb:us-east-1:123456789012:table/Orders/stream/2026-12-07T00:00:00.000",
        "dynamodb": {"Keys": {"pk": {"S": "a"}}, "SequenceNumber": "900", "StreamViewType": "KEYS_ONLY"},
    }  # fmt: skip
    reply = handle_subscription_event({"Records": [record]}, None, SinkGone())  # type: ignore[arg-type]
    assert reply == {"batchItemFailures": [{"itemIdentifier": "900"}]}
