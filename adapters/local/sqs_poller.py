"""`torpor dev`'s event subscriptions: it polls the SQS queues its subscriptions name (`sqs://QUEUE`)
on an SQS endpoint (a moto server, or AWS) and delivers their messages as the worker function does
on AWS (`adapters.aws.subscriptions`).

One thread; each round lists the subscriptions, then long-polls each subscribed queue in turn (1 s,
up to 10 messages) and delivers its messages in the order received, deleting each once its
invocation is stored (`Subscriptions.deliver`: created now, or by an earlier delivery of the same
message). A message that fails stays in its queue and comes back after its visibility timeout; the
later messages of its FIFO group in that batch are left with it, so a group keeps its order. A queue
with no subscription any more is not polled; a message received just as its subscription went
stays in the queue. A queue that does not exist (or is deleted while subscribed) is reported once
and tried again each round; the other queues go on.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from typing import Any

from adapters.aws.subscriptions import deliver_event, sqs_message_event
from control_plane.errors import TorporError
from control_plane.subscriptions import Subscriptions, parse_source

log = logging.getLogger("torpor.subscriptions")

POLL_WAIT_S = 1
"""How long one receive waits for messages (SQS long polling), seconds."""
IDLE_S = 2
"""How long to wait before listing the subscriptions again when none names an SQS queue, seconds."""


class SqsPoller:
    """Polls the subscribed SQS queues until `stop`.

    Args:
        subscriptions: The control plane's subscriptions (what to poll, and delivery).
        sqs: Makes the boto3 SQS client of the endpoint the queues live on, once a subscription
            names one (building a client takes a while: a dev server without any is not slowed).
        wait_s: The long poll of each receive, seconds.
    """

    def __init__(self, subscriptions: Subscriptions, sqs: Callable[[], Any], wait_s: int = POLL_WAIT_S) -> None:
        self.subscriptions = subscriptions
        self._make_sqs = sqs
        self._sqs: Any = None
        self.wait_s = wait_s
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._urls: dict[str, str] = {}
        self._missing: set[str] = set()
        self._bad: set[str] = set()

    @property
    def sqs(self) -> Any:
        """The boto3 SQS client, made on first use."""
        if self._sqs is None:
            self._sqs = self._make_sqs()
        return self._sqs

    def start(self) -> None:
        """Start polling on a daemon thread."""
        self._thread = threading.Thread(target=self._run, name="torpor-sqs-poller", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        """Stop after the receive in progress (at most `wait_s`, and the delivery of its batch)."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=self.wait_s + 30)

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                queues = self.queues()
                for queue in queues:
                    if self._stop.is_set():
                        return
                    self._poll_one(queue)
                if not queues:
                    self._stop.wait(IDLE_S)
            except Exception:  # the store or SQS failed this round: say so, go on
                log.exception("polling the subscribed SQS queues failed; trying again")
                self._stop.wait(self.wait_s)

    def _poll_one(self, queue: str) -> None:
        """`poll`, a failure of this queue's (deleted since its URL was read, the endpoint down)
        reported once and not kept from the other queues; its URL is read again next round."""
        try:
            self.poll(queue)
        except Exception as exc:
            self._urls.pop(queue, None)
            if queue not in self._missing:
                log.warning("cannot poll sqs://%s: %s (create the queue, or fix the SQS endpoint)", queue, exc)
                self._missing.add(queue)
            self._stop.wait(self.wait_s)

    def queues(self) -> list[str]:
        """The names of the queues subscriptions name, each once, by name."""
        names = set()
        for subscription in self.subscriptions.list():
            try:
                scheme, name = parse_source(subscription.source)
            except TorporError as exc:  # stored before sources were checked as now (a queue's URL): skip it
                if subscription.subscription_id not in self._bad:
                    log.warning("subscription %s is not polled: %s; delete it and create it again",
                                subscription.subscription_id, exc.message)  # fmt: skip
                    self._bad.add(subscription.subscription_id)
                continue
            if scheme == "sqs":
                names.add(name)
        return sorted(names)

    def poll(self, queue: str) -> int:
        """One receive from `queue`, its messages delivered; how many were delivered (and deleted)."""
        url = self._url(queue)
        if url is None:
            return 0
        messages = self.sqs.receive_message(
            QueueUrl=url,
            MaxNumberOfMessages=10,
            WaitTimeSeconds=self.wait_s,
            AttributeNames=["All"],
            MessageAttributeNames=["All"],
        ).get("Messages", [])
        failed_groups: set[str] = set()
        delivered = 0
        for message in messages:
            group = (message.get("Attributes") or {}).get("MessageGroupId")
            if group is not None and group in failed_groups:
                continue  # an earlier message of its group failed: keep the group's order
            event = sqs_message_event(queue, message)
            try:
                invocations = deliver_event(self.subscriptions, event)
            except Exception as exc:
                log.warning("message %s of sqs://%s not delivered (it stays in the queue): %s", event.event_id,
                            queue, getattr(exc, "message", None) or exc)  # fmt: skip
                if group is not None:
                    failed_groups.add(group)
                continue
            try:
                self.sqs.delete_message(QueueUrl=url, ReceiptHandle=message["ReceiptHandle"])
            except Exception as exc:  # e.g. its receipt expired: it comes back, and finds its invocation
                log.warning("message %s of sqs://%s invoked but not deleted (%s): it comes back and invokes "
                            "nothing more", event.event_id, queue, exc)  # fmt: skip
            log.info("message %s of sqs://%s invoked %s", event.event_id, queue, ", ".join(invocations))
            delivered += 1
        return delivered

    def _url(self, queue: str) -> str | None:
        url = self._urls.get(queue)
        if url is not None:
            return url
        try:
            url = str(self.sqs.get_queue_url(QueueName=queue)["QueueUrl"])
        except Exception as exc:  # QueueDoesNotExist, no credentials, endpoint down
            if queue not in self._missing:
                log.warning("cannot poll sqs://%s: %s (create the queue, or fix the SQS endpoint)", queue, exc)
                self._missing.add(queue)
            self._stop.wait(self.wait_s)
            return None
        self._missing.discard(queue)
        self._urls[queue] = url
        return url
