"""Event subscriptions on AWS: what Lambda hands the worker function from an event source becomes
`control_plane.subscriptions.Event`s, delivered through the subscriptions of their source.

| Lambda event | source | delivered |
| --- | --- | --- |
| SQS batch (event source mapping) | `sqs://QUEUE` | FIFO: in order, a failure stops its group; else each |
| EventBridge rule target (input below) | `eventbridge://RULE` | the event; a failure fails the call |
| Kinesis batch (event source mapping) | `kinesis://STREAM` | in order; the first failure ends the batch |
| DynamoDB stream batch (event source mapping) | `dynamodb://TABLE` | as Kinesis |

A FIFO queue's batch goes through powertools' `SqsFifoPartialProcessor` (a failed message's group
stops there, the others go on), a standard queue's through `BatchProcessor`. An EventBridge rule's
target passes the input transformer `{"rule": <aws.events.rule-name>, "event": <aws.events.event>}`
(a failure is retried by EventBridge, then goes to its dead-letter queue). A stream's first failure
is reported, so Lambda retries from it and no later record of its key is delivered ahead of it.

An event whose source has no subscription fails (stays in its queue or stream, then reaches the
dead-letter queue or expires): removing a subscription stops deliveries without dropping events.
Partial batch failures need `FunctionResponseTypes: [ReportBatchItemFailures]` on the mapping.
"""

from __future__ import annotations

import base64
import json
import logging
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from aws_lambda_powertools.utilities.batch import (
    BatchProcessor,
    EventType,
    SqsFifoPartialProcessor,
    process_partial_response,
)
from aws_lambda_powertools.utilities.data_classes.sqs_event import SQSRecord

from control_plane.errors import NotFound
from control_plane.subscriptions import Event, Subscriptions

log = logging.getLogger("torpor.subscriptions")

KEY_ATTRIBUTE = "key"
"""The SQS message attribute that carries the object key on a standard queue (a FIFO queue's message
group id is the key)."""


class NoSubscription(NotFound):
    """An event of a source no subscription names (404 in words; the event is left to its source)."""


def _resource_name(arn: str) -> str:
    """The name in an ARN: `...:queue-name`, `...:stream/NAME`, `...:table/NAME/stream/TIME`."""
    resource = arn.split(":", 5)[-1]
    parts = resource.split("/")
    return parts[1] if len(parts) > 1 else parts[0]


def sqs_event(record: Mapping[str, Any]) -> Event:
    """The event of one SQS record as Lambda delivers it (`eventSourceARN`, `messageId`, `body`,
    `attributes`, `messageAttributes`): its id is the message id (the same on every redelivery; not a
    FIFO deduplication id, which SQS keeps only 5 minutes and content-based deduplication makes equal
    for equal bodies); its key the message group id, else the `key` message attribute; its headers the
    string message attributes."""
    attributes = record.get("attributes") or {}
    message_attributes = record.get("messageAttributes") or {}
    headers = {
        name: str(value.get("stringValue"))
        for name, value in message_attributes.items()
        if isinstance(value, Mapping) and value.get("stringValue") is not None
    }
    key = attributes.get("MessageGroupId") or headers.pop(KEY_ATTRIBUTE, "")
    return Event(
        source=f"sqs://{_resource_name(str(record.get('eventSourceARN', '')))}",
        event_id=str(record.get("messageId") or ""),
        key=str(key),
        body=str(record.get("body") or "").encode(),
        headers=headers,
    )


def sqs_message_event(queue_name: str, message: Mapping[str, Any]) -> Event:
    """`sqs_event` of a message as SQS's `ReceiveMessage` returns it (boto3's shape: `MessageId`,
    `Body`, `Attributes`, `MessageAttributes`), received from the queue `queue_name`."""
    return sqs_event(
        {
            "eventSourceARN": f"arn:aws:sqs:local:000000000000:{queue_name}",
            "messageId": message.get("MessageId"),
            "body": message.get("Body"),
            "attributes": message.get("Attributes") or {},
            "messageAttributes": {
                name: {"stringValue": value.get("StringValue")}
                for name, value in (message.get("MessageAttributes") or {}).items()
            },
        }
    )


def eventbridge_event(event: Mapping[str, Any]) -> Event:
    """The event an EventBridge rule delivers through the input transformer `{"rule":
    <aws.events.rule-name>, "event": <aws.events.event>}`: its `detail` as JSON, its id the event's
    `id`, headers `eventbridge-source` and `eventbridge-detail-type`; no key."""
    inner = event.get("event") or {}
    return Event(
        source=f"eventbridge://{event.get('rule', '')}",
        event_id=str(inner.get("id") or ""),
        key="",
        body=json.dumps(inner.get("detail", {}), separators=(",", ":")).encode(),
        headers={
            "eventbridge-source": str(inner.get("source", "")),
            "eventbridge-detail-type": str(inner.get("detail-type", "")),
        },
    )


def stream_event(record: Mapping[str, Any]) -> Event:
    """The event of one Kinesis or DynamoDB stream record. Kinesis: the decoded `data`, the partition
    key as key, `{eventID}` (shard and sequence number) as id. DynamoDB: the record's `dynamodb`
    object with its `eventName` as JSON, the item's `Keys` (JSON, sorted) as key, `eventID` as id."""
    arn = str(record.get("eventSourceARN", ""))
    if record.get("eventSource") == "aws:kinesis":
        kinesis = record.get("kinesis") or {}
        return Event(
            source=f"kinesis://{_resource_name(arn)}",
            event_id=str(record.get("eventID") or ""),
            key=str(kinesis.get("partitionKey", "")),
            body=base64.b64decode(kinesis.get("data", "")),
        )
    change = record.get("dynamodb") or {}
    return Event(
        source=f"dynamodb://{_resource_name(arn)}",
        event_id=str(record.get("eventID") or ""),
        key=json.dumps(change.get("Keys", {}), sort_keys=True, separators=(",", ":")),
        body=json.dumps({"eventName": record.get("eventName"), **change}, separators=(",", ":")).encode(),
    )


def deliver_event(subscriptions: Subscriptions, event: Event) -> list[str]:
    """Deliver `event` through every subscription of its source; the invocation ids.

    Raises:
        NoSubscription: No subscription names its source.
        Exception: The first error `Subscriptions.deliver` raised, after every subscription was tried
            (the event is then delivered again; those it reached find their invocations).
    """
    matching = subscriptions.list(source=event.source)
    if not matching:
        raise NoSubscription(
            f"no subscription of {event.source}: the event {event.event_id} stays there; "
            f"create one with POST /subscriptions (restate subscriptions create {event.source} service://S/h)"
        )
    invocations: list[str] = []
    failure: Exception | None = None
    for subscription in matching:  # each subscription on its own: a broken one holds back no other
        try:
            invocations.append(subscriptions.deliver(subscription, event))
        except Exception as exc:
            failure = failure or exc
    if failure is not None:  # delivered again later: the subscriptions done find their invocations
        raise failure
    return invocations


def is_subscription_event(event: Mapping[str, Any], wake_queues: Sequence[str]) -> bool:
    """Whether a Lambda event for the worker is a subscription's (not wake-ups): an EventBridge rule's
    wrapped event, a Kinesis or DynamoDB stream batch, or an SQS batch from a queue whose name is
    none of `wake_queues` (none known: every SQS batch is wake-ups)."""
    if "rule" in event and "event" in event:
        return True
    records = event.get("Records") or []
    if not records:
        return False
    first = records[0]
    if first.get("eventSource") in ("aws:kinesis", "aws:dynamodb"):
        return True
    arn = str(first.get("eventSourceARN") or "")
    return bool(arn and wake_queues) and _resource_name(arn) not in wake_queues


def handle_subscription_event(
    event: Mapping[str, Any], context: Any, subscriptions: Subscriptions
) -> dict[str, Any]:
    """Deliver a subscription's Lambda event (see the module's table).

    Returns `{"batchItemFailures": [{"itemIdentifier": ...}]}` for a batch (SQS message id, stream
    sequence number), `{"invocations": [...]}` for an EventBridge event.

    Raises:
        Exception: For an EventBridge event, whatever its delivery raised (EventBridge retries it).
    """
    if "rule" in event and "event" in event:
        return {"invocations": deliver_event(subscriptions, eventbridge_event(event))}
    records = event.get("Records") or []
    if records and records[0].get("eventSource") in ("aws:kinesis", "aws:dynamodb"):
        return _stream_batch(records, lambda r: deliver_event(subscriptions, stream_event(r)))

    def one(record: SQSRecord) -> list[str]:
        return deliver_event(subscriptions, sqs_event(record.raw_event))

    fifo = str(records[0].get("eventSourceARN", "")).endswith(".fifo") if records else False
    processor = SqsFifoPartialProcessor(skip_group_on_error=True) if fifo else BatchProcessor(EventType.SQS)
    processor.raise_on_entire_batch_failure = False  # all failed: report them all, not a failed call
    return process_partial_response(event=dict(event), record_handler=one, processor=processor, context=context)


def _stream_batch(
    records: Sequence[Mapping[str, Any]], deliver: Callable[[Mapping[str, Any]], object]
) -> dict[str, Any]:
    """Deliver stream records in order; the first failure ends the batch and is reported (Lambda
    retries from its sequence number, so the records after it are not delivered ahead of it)."""
    for record in records:
        try:
            deliver(record)
        except Exception:
            log.exception("stream record %s not delivered; retried from it", record.get("eventID"))
            change = record.get("kinesis") or record.get("dynamodb") or {}  # Kinesis: sequenceNumber, DynamoDB:
            sequence = change.get("sequenceNumber") or change.get("SequenceNumber", "")  # SequenceNumber
            return {"batchItemFailures": [{"itemIdentifier": str(sequence)}]}
    return {"batchItemFailures": []}
