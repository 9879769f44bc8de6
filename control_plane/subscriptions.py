"""Event subscriptions: events of a queue, an event bus rule or a stream become invocations of a handler.

Restate subscribes a handler to a Kafka topic (`kafka://cluster/topic`); Torpor's sources are AWS's
serverless event sources, named by URI:

| source | what it names | event id (the idempotency key) | key (virtual objects, workflows) |
| --- | --- | --- | --- |
| `sqs://QUEUE` | an SQS queue (`orders.fifo`) | the message id | group id, else `key` attribute |
| `eventbridge://RULE` | an EventBridge rule that targets Torpor | the event's `id` | the subscription's `key` option |
| `kinesis://STREAM` | a Kinesis data stream | `{shard id}:{sequence number}` | the record's partition key |
| `dynamodb://TABLE` | a DynamoDB table's stream | `{shard}:{sequence number}` | the item's keys, as JSON |

A sink is `service://Service/handler` (restate-server's shape). Each event is one invocation of the
sink whose idempotency key is the event's id (`delivery`), so an event delivered twice (SQS and the
streams deliver at least once) is invoked once while the idempotency retention keeps it. For a
virtual object the object key is the event's key; its exclusive handler's inbox runs the
invocations of one key in the order they were created, so a source that orders events per key (an
SQS FIFO queue's message group, a stream's partition key) and an adapter that delivers them in that
order (`adapters/aws/subscriptions.py`, the local poller) keep that order.

The admin API (`http_api/admin_subscriptions.py`) follows restate-server 1.7's `/subscriptions`.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Mapping
from dataclasses import dataclass, field

from control_plane import ids
from control_plane.errors import BadRequest, NotFound, Unprocessable
from control_plane.invocation import Engine
from control_plane.ports import Clock, StoreConflict, SubscriptionRecord, SubscriptionStore

log = logging.getLogger("torpor.subscriptions")

SOURCE_SCHEMES = ("sqs", "eventbridge", "kinesis", "dynamodb")
"""The sources a subscription can name, as URI schemes (`sqs://QUEUE`, `eventbridge://RULE`, ...)."""

_NAMES = {
    "sqs": (re.compile(r"[A-Za-z0-9_-]{1,80}(\.fifo)?"), "an SQS queue name (letters, digits, - and _, up to 80, "
            "and .fifo for a FIFO queue)"),
    "eventbridge": (re.compile(r"[A-Za-z0-9._-]{1,64}"), "an EventBridge rule name (letters, digits, . - _, up to 64)"),
    "kinesis": (re.compile(r"[A-Za-z0-9._-]{1,128}"), "a Kinesis stream name (letters, digits, . - _, up to 128)"),
    "dynamodb": (re.compile(r"[A-Za-z0-9._-]{1,255}"), "a DynamoDB table name (letters, digits, . - _, up to 255)"),
}
"""Each scheme's resource name, as AWS names it (what Lambda's events carry): `(pattern, words)`."""
class InvalidSubscription(BadRequest):
    """A subscription that cannot be created: a bad source or sink URI, an unknown sink (HTTP 400, with
    restate-server's code for the case, `META0009`)."""

    restate_code = "META0009"


_SUBSCRIPTION_ID = re.compile(r"sub_[0-9A-Za-z]{1,40}")


@dataclass(frozen=True, slots=True)
class Event:
    """One event of a source, as an adapter reads it.

    Attributes:
        source: The subscription source URI it came from (`sqs://orders.fifo`).
        event_id: Unique per event and the same on every delivery of it (the idempotency key).
        key: The source's ordering key (SQS message group id, partition key); "" if it has none.
        body: The payload's bytes, as sent.
        headers: Header-like metadata (SQS string message attributes, ...), names as given.
    """

    source: str
    event_id: str
    key: str
    body: bytes
    headers: Mapping[str, str] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class Delivery:
    """The invocation an event becomes: `Engine.create(service, handler, body, headers, key=...,
    idempotency_key=...)`."""

    service: str
    handler: str
    key: str
    idempotency_key: str
    body: bytes
    headers: Mapping[str, str]


def parse_source(uri: object) -> tuple[str, str]:
    """`(scheme, name)` of a source URI such as `sqs://orders.fifo` (a trailing `/` is dropped).

    Raises:
        BadRequest: A scheme other than `SOURCE_SCHEMES`, or no name, or not a name AWS gives that
            resource (a queue URL or an ARN: Lambda's events name the resource, so it would never match).
        Unprocessable: Not a string.
    """
    if not isinstance(uri, str):
        raise Unprocessable('"source" must be a string such as "sqs://my-queue"')
    scheme, sep, rest = uri.partition("://")
    name = rest.rstrip("/")
    if not sep or scheme not in SOURCE_SCHEMES:
        schemes = ", ".join(SOURCE_SCHEMES)
        raise InvalidSubscription(
            f"invalid source URI '{uri}': must be SCHEME://NAME with a scheme of: {schemes} "
            "(e.g. sqs://orders.fifo; Torpor reads AWS event sources, not Kafka)"
        )
    if not name:
        raise InvalidSubscription(f"invalid source URI '{uri}': name the {scheme} resource after '{scheme}://'")
    pattern, words = _NAMES[scheme]
    if not pattern.fullmatch(name):
        raise InvalidSubscription(
            f"invalid source URI '{uri}': '{name}' is not {words}; name the resource itself, not its URL or "
            f"ARN (e.g. {scheme}://orders)"
        )
    return scheme, name


def parse_sink(uri: object) -> tuple[str, str]:
    """`(service, handler)` of a sink URI `service://Service/handler`.

    Raises:
        BadRequest: Not that shape.
    """
    if not isinstance(uri, str):
        raise Unprocessable('"sink" must be a string such as "service://Counter/add"')
    scheme, sep, rest = uri.partition("://")
    service, slash, handler = rest.partition("/")
    if scheme != "service" or not sep:
        raise InvalidSubscription(f"invalid sink URI '{uri}': must be service://Service/handler")
    if not service or not slash or not handler or "/" in handler:
        raise InvalidSubscription(f"invalid sink URI '{uri}': must be service://Service/handler, naming both")
    return service, handler


def canonical_source(uri: str) -> str:
    """The source URI as stored and matched: `scheme://name` (`parse_source`)."""
    scheme, name = parse_source(uri)
    return f"{scheme}://{name}"


def delivery(
    subscription: SubscriptionRecord, service_type: str, input_content_type: str | None, event: Event
) -> Delivery:
    """The invocation `event` becomes under `subscription` (pure).

    Rules: the idempotency key is the event's id; a plain service gets no key; a virtual object or
    workflow gets the event's key, else the subscription's `key` option. Headers are the event's, with
    `content-type` set to the handler's input content type (`input_content_type`) when the event
    names none and has a body.

    Args:
        subscription: The subscription the event came through.
        service_type: The sink service's type (`SERVICE`, `VIRTUAL_OBJECT`, `WORKFLOW`).
        input_content_type: The sink handler's input content type (None: it takes no input).
        event: The event.

    Raises:
        BadRequest: The event has no id, or a keyed sink gets neither an event key nor a `key` option.
    """
    service, handler = parse_sink(subscription.sink)
    if not event.event_id:
        raise BadRequest(f"an event of {event.source} has no id: it cannot be invoked once")
    key = ""
    if service_type != "SERVICE":
        key = event.key or subscription.options.get("key", "")
        if not key:
            raise BadRequest(
                f"'{service}' is keyed but the event {event.event_id} of {event.source} has no key: send to an SQS "
                "FIFO queue (the message group id is the key), add a 'key' message attribute, or create the "
                "subscription with the option key=VALUE"
            )
    headers = {name.lower(): value for name, value in event.headers.items()}
    if event.body and "content-type" not in headers and input_content_type:
        headers["content-type"] = input_content_type
    return Delivery(service, handler, key, event.event_id, event.body, headers)


def subscription_json(subscription: SubscriptionRecord) -> dict[str, object]:
    """A subscription as restate-server's admin API shows it: `{"id", "source", "sink", "options"}`."""
    return {
        "id": subscription.subscription_id,
        "source": subscription.source,
        "sink": subscription.sink,
        "options": dict(subscription.options),
    }


class Subscriptions:
    """Creates, lists and removes subscriptions, and delivers their events.

    Args:
        store: Where subscriptions are kept (`SubscriptionStore`).
        engine: Creates the invocations events become (and resolves sinks).
        clock: Wall clock, ms since the UNIX epoch.
    """

    def __init__(self, store: SubscriptionStore, engine: Engine, clock: Clock) -> None:
        self.store = store
        self.engine = engine
        self.clock = clock

    def create(self, source: object, sink: object, options: object = None) -> SubscriptionRecord:
        """Store a new subscription of `sink` to `source` (restate-server's `POST /subscriptions`).

        Args:
            source: A source URI (`parse_source`).
            sink: `service://Service/handler` of a registered handler.
            options: String pairs (None: none). `key` is the object key for sources without one.

        Raises:
            BadRequest: A bad source or sink URI, an unknown sink, an EventBridge source to a keyed
                sink without a `key` option.
            Unprocessable: Options that are not an object of strings (422, as restate-server).
        """
        scheme, name = parse_source(source)
        service, handler = parse_sink(sink)
        if options is None:
            options = {}
        if not isinstance(options, dict) or not all(isinstance(v, str) for v in options.values()):
            raise Unprocessable('"options" must be an object of strings, e.g. {"key": "k1"}')
        try:
            target = self.engine.registry.resolve(service, handler)
        except NotFound as exc:
            raise InvalidSubscription(
                f"invalid sink URI '{sink}': cannot find service/handler specified in the sink URI "
                f"({exc.message})"
            ) from exc
        if target.service_type != "SERVICE" and scheme == "eventbridge" and not options.get("key"):
            raise InvalidSubscription(
                f"'{service}' is keyed and EventBridge events carry no key: give the option key=VALUE "
                "(every event goes to that object key), or subscribe through an SQS FIFO queue"
            )
        subscription = SubscriptionRecord(
            subscription_id=ids.new_subscription_id(),
            source=f"{scheme}://{name}",
            sink=f"service://{service}/{handler}",
            options=dict(options),
            created_at_ms=self.clock.now_ms(),
        )
        self.store.create_subscription(subscription)
        return subscription

    def get(self, subscription_id: str) -> SubscriptionRecord:
        """The subscription; `BadRequest` for an id not shaped `sub_…`, `NotFound` for an unknown one."""
        if not _SUBSCRIPTION_ID.fullmatch(subscription_id):
            raise BadRequest(f"bad subscription id {subscription_id!r}: ids look like sub_1…")
        subscription = self.store.get_subscription(subscription_id)
        if subscription is None:
            raise NotFound(f"subscription {subscription_id} does not exist; list them with GET /subscriptions")
        return subscription

    def list(self, source: str | None = None, sink: str | None = None) -> list[SubscriptionRecord]:
        """Every subscription (by id), or those with exactly this `source` and/or `sink`."""
        return [
            s
            for s in self.store.list_subscriptions()
            if (source is None or s.source == source) and (sink is None or s.sink == sink)
        ]

    def delete(self, subscription_id: str) -> None:
        """Remove the subscription: no more events are delivered through it (invocations it made stay).

        Raises:
            BadRequest, NotFound: As `get`.
        """
        self.get(subscription_id)
        if not self.store.delete_subscription(subscription_id):
            raise NotFound(f"subscription {subscription_id} does not exist (removed meanwhile)")

    def deliver(self, subscription: SubscriptionRecord, event: Event) -> str:
        """Invoke the sink with `event` (`delivery`), once per event id: returns the invocation's id,
        created now or by an earlier delivery of the same event.

        The body is not checked against the handler's input here: a body the handler refuses fails
        its invocation (listed, and restartable once fixed), rather than holding back the events
        behind it in its source (as restate-server's Kafka ingress does).

        Raises:
            NotFound: The sink is no longer registered.
            BadRequest: The event cannot be invoked (`delivery`: no id, or no key for a keyed sink).
            Exception: A store error: the adapter leaves the event to be delivered again.
        """
        service, handler = parse_sink(subscription.sink)
        target = self.engine.registry.resolve(service, handler)
        planned = delivery(subscription, target.service_type, target.input_content_type, event)
        try:
            record = self.engine.create(
                planned.service,
                planned.handler,
                planned.body,
                planned.headers,
                key=planned.key,
                leased=False,
                idempotency_key=planned.idempotency_key,
            )
        except StoreConflict:  # delivered before (the same idempotency key), or the workflow ran for this key
            if target.service_type == "WORKFLOW" and target.handler_type == "WORKFLOW":  # `Creation._plan`
                existing = self.engine.workflow_run_id(planned.service, planned.key)
                log.warning("event %s of %s: workflow %s/%s has run already (%s); a workflow runs once per key",
                            event.event_id, event.source, planned.service, planned.key, existing)  # fmt: skip
                return existing
            existing = self.engine.idempotent_invocation_id(
                planned.service, planned.handler, planned.key, planned.idempotency_key
            )
            log.info("event %s of %s was invoked before (%s)", event.event_id, event.source, existing)
            return existing
        log.info("event %s of %s invoked %s", event.event_id, event.source, record.invocation_id)
        return record.invocation_id
