"""`control_plane.subscriptions.delivery` and the URI parsers: what invocation an event becomes."""

from __future__ import annotations

import pytest

from control_plane.errors import BadRequest, Unprocessable
from control_plane.ports import SubscriptionRecord
from control_plane.subscriptions import Event, canonical_source, delivery, parse_sink, parse_source

SUB = SubscriptionRecord("sub_1x", "sqs://orders.fifo", "service://Counter/add")


def event(**changes: object) -> Event:
    values: dict[str, object] = {
        "source": "sqs://orders.fifo", "event_id": "m-1", "key": "g1", "body": b"5", "headers": {"Trace": "t"},
    }  # fmt: skip
    return Event(**{**values, **changes})  # type: ignore[arg-type]


def test_an_object_event_is_invoked_on_its_key_with_its_id_as_idempotency_key() -> None:
    planned = delivery(SUB, "VIRTUAL_OBJECT", "application/json", event())
    assert (planned.service, planned.handler, planned.key, planned.idempotency_key) == ("Counter", "add", "g1", "m-1")
    assert planned.body == b"5"
    assert planned.headers == {"trace": "t", "content-type": "application/json"}


def test_a_plain_service_gets_no_key_and_a_given_content_type_stays() -> None:
    planned = delivery(SUB, "SERVICE", "application/json", event(headers={"content-type": "text/plain"}))
    assert planned.key == "" and planned.headers == {"content-type": "text/plain"}


def test_a_keyed_sink_takes_the_key_option_when_the_event_has_none() -> None:
    with_option = SubscriptionRecord("sub_1y", "eventbridge://r", "service://Counter/add", {"key": "fixed"})
    assert delivery(with_option, "VIRTUAL_OBJECT", None, event(key="", body=b"")).key == "fixed"
    with pytest.raises(BadRequest, match="has no key"):
        delivery(SUB, "VIRTUAL_OBJECT", None, event(key=""))


def test_an_event_without_id_cannot_be_invoked_once() -> None:
    with pytest.raises(BadRequest, match="no id"):
        delivery(SUB, "SERVICE", None, event(event_id=""))


@pytest.mark.parametrize(
    ("uri", "parsed"),
    [("sqs://q.fifo", ("sqs", "q.fifo")), ("kinesis://s/", ("kinesis", "s")), ("dynamodb://T", ("dynamodb", "T"))],
)
def test_sources(uri: str, parsed: tuple[str, str]) -> None:
    assert parse_source(uri) == parsed
    assert canonical_source(uri) == "{}://{}".format(*parsed)


@pytest.mark.parametrize(
    "uri",
    [
        "kafka://c/t", "sqs:/q", "sqs://", "q", "sqs://a b",
        # a queue's URL or ARN, not its name: Lambda's and the poller's events name the queue, never matching
        "sqs://http://127.0.0.1:5000/123456789012/orders.fifo", "sqs://arn:aws:sqs:us-east-1:123456789012:orders",
        "kinesis://arn:aws:kinesis:us-east-1:123456789012:stream/s", "dynamodb://T/stream/2026", "sqs://a.b",
    ],
)  # fmt: skip
def test_bad_sources(uri: str) -> None:
    with pytest.raises(BadRequest):
        parse_source(uri)


def test_sinks() -> None:
    assert parse_sink("service://Counter/add") == ("Counter", "add")
    for bad in ("service://Counter", "service://Counter/a/b", "svc://C/h", "service:///h"):
        with pytest.raises(BadRequest):
            parse_sink(bad)
    with pytest.raises(Unprocessable):
        parse_sink(3)
