"""`adapters.local.sqs_poller.SqsPoller.poll` over a fake SQS client: what one receive delivers and deletes."""

from __future__ import annotations

from typing import Any

import pytest

from adapters.local.sqs_poller import SqsPoller
from control_plane.ports import SubscriptionRecord
from control_plane.subscriptions import Event

SUBSCRIPTION = SubscriptionRecord("sub_1a", "sqs://q", "service://Greeter/greet", {}, 0)


class FakeSubscriptions:
    def __init__(self) -> None:
        self.delivered: list[str] = []

    def list(self, source: str | None = None, sink: str | None = None) -> list[SubscriptionRecord]:
        return [SUBSCRIPTION]

    def deliver(self, subscription: SubscriptionRecord, event: Event) -> str:
        self.delivered.append(event.event_id)
        return f"inv_{event.event_id}"


class FakeSqs:
    def __init__(self, count: int) -> None:
        self.messages = [{"MessageId": f"m{n}", "ReceiptHandle": f"r{n}", "Body": "{}"} for n in range(count)]
        self.deleted: list[str] = []

    def get_queue_url(self, QueueName: str) -> dict[str, str]:  # noqa: N803 (boto3's names)
        return {"QueueUrl": f"http://sqs/{QueueName}"}

    def receive_message(self, **kwargs: Any) -> dict[str, Any]:
        return {"Messages": self.messages}

    def delete_message(self, QueueUrl: str, ReceiptHandle: str) -> None:  # noqa: N803
        if ReceiptHandle == "r0":
            raise RuntimeError("ReceiptHandleIsInvalid: the receipt handle has expired")
        self.deleted.append(ReceiptHandle)


def test_a_delete_that_fails_does_not_keep_the_rest_of_the_batch_from_being_delivered() -> None:
    subscriptions, sqs = FakeSubscriptions(), FakeSqs(3)
    poller = SqsPoller(subscriptions, lambda: sqs, wait_s=0)  # type: ignore[arg-type]

    # WHEN a receive returns three messages and the first one's delete fails (its receipt expired)
    poller.poll("q")

    # THEN all three were delivered, and the other two deleted (the first comes back, invoking nothing more)
    assert subscriptions.delivered == ["m0", "m1", "m2"]
    assert sqs.deleted == ["r1", "r2"]


def test_a_stored_source_that_no_longer_parses_is_skipped_not_fatal_to_every_queue() -> None:
    """A subscription stored before sources were checked as now (a queue's URL) is not polled; the
    others are."""
    subscriptions = FakeSubscriptions()
    stored = [SubscriptionRecord("sub_1b", "sqs://http://sqs/123/q", SUBSCRIPTION.sink, {}, 0), SUBSCRIPTION]
    subscriptions.list = lambda source=None, sink=None: stored  # type: ignore[method-assign]
    poller = SqsPoller(subscriptions, lambda: FakeSqs(0), wait_s=0)  # type: ignore[arg-type]

    assert poller.queues() == ["q"]


def test_a_subscription_whose_sink_is_gone_holds_back_no_other_subscription_of_its_queue() -> None:
    from adapters.aws.subscriptions import deliver_event
    from control_plane.errors import NotFound

    gone = SubscriptionRecord("sub_1c", "sqs://q", "service://Removed/h", {}, 0)

    class OneSinkGone(FakeSubscriptions):
        def list(self, source: str | None = None, sink: str | None = None) -> list[SubscriptionRecord]:
            return [gone, SUBSCRIPTION]

        def deliver(self, subscription: SubscriptionRecord, event: Event) -> str:
            if subscription is gone:
                raise NotFound("service 'Removed' not found")
            return super().deliver(subscription, event)

    subscriptions = OneSinkGone()

    # WHEN an event of a queue with two subscriptions arrives, the first one's sink removed
    with pytest.raises(NotFound):  # THEN the event fails (it comes back for the removed sink)
        deliver_event(subscriptions, Event("sqs://q", "m1", "", b"{}"))  # type: ignore[arg-type]

    # AND the other subscription got it all the same
    assert subscriptions.delivered == ["m1"]
