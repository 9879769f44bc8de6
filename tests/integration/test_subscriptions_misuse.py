"""Event subscriptions used as a new user might misuse them, through a real `torpor dev` polling a
moto server's SQS (the `dev` fixture of `test_subscriptions`): what each case delivers, and that the
rest keeps flowing."""

from __future__ import annotations

import json
import time
import uuid
from typing import Any

import httpx

from adapters.local.dev import DevServer
from control_plane.subscriptions import Event
from tests.helpers.dev import wait_for
from tests.integration.test_subscriptions import create, dev, sqs  # noqa: F401  (fixtures)


def invocations(dev: DevServer, query: str) -> list[dict[str, Any]]:  # noqa: F811
    reply = httpx.get(f"{dev.admin_url}/invocations?{query}", timeout=10)
    assert reply.status_code == 200, reply.text
    return list(reply.json()["invocations"])


def test_a_second_event_for_a_workflow_id_names_the_run_that_took_it(dev: DevServer) -> None:  # noqa: F811
    # GIVEN a queue subscribed to a workflow's run handler (the message group id is the workflow id)
    source = f"sqs://wf-{uuid.uuid4().hex[:8]}.fifo"
    reply = create(dev, {"source": source, "sink": "service://Signup/run"})
    assert reply.status_code == 201, reply.text
    subscriptions = dev.control_plane.subscriptions
    subscription = subscriptions.get(reply.json()["id"])
    workflow_id = f"w-{uuid.uuid4().hex[:8]}"

    # WHEN two events of one workflow id arrive
    first = subscriptions.deliver(subscription, Event(source, "m-1", workflow_id, json.dumps({"name": "a"}).encode()))
    second = subscriptions.deliver(subscription, Event(source, "m-2", workflow_id, json.dumps({"name": "b"}).encode()))

    # THEN the workflow runs once, and the second event is reported as that run (an id that exists)
    runs = invocations(dev, f"key={workflow_id}&handler=run")
    assert [run["id"] for run in runs] == [first]
    assert second == first


def test_a_queue_deleted_under_its_subscription_does_not_stop_the_other_queues(dev: DevServer, sqs: Any) -> None:  # noqa: F811
    # GIVEN two subscribed queues, the first (by name) polled once, then deleted
    tag = uuid.uuid4().hex[:8]
    gone = sqs.create_queue(QueueName=f"a-gone-{tag}")["QueueUrl"]
    kept = sqs.create_queue(QueueName=f"b-kept-{tag}")["QueueUrl"]
    for name in (f"a-gone-{tag}", f"b-kept-{tag}"):
        assert create(dev, {"source": f"sqs://{name}", "sink": "service://Counter/add"}).status_code == 201
    sqs.send_message(QueueUrl=gone, MessageBody="1", MessageAttributes={"key": {"DataType": "String",
                                                                                   "StringValue": f"g-{tag}"}})  # fmt: skip
    wait_for(lambda: invocations(dev, f"key=g-{tag}"), 20, "the first queue's message invoked")
    sqs.delete_queue(QueueUrl=gone)
    time.sleep(3)  # a round or two polls the deleted queue

    # WHEN a message is sent to the other queue
    key = f"k-{tag}"
    sqs.send_message(QueueUrl=kept, MessageBody="2", MessageAttributes={"key": {"DataType": "String",
                                                                                "StringValue": key}})  # fmt: skip

    # THEN it is delivered: the deleted queue is reported, and skipped
    wait_for(lambda: invocations(dev, f"key={key}"), 20, "the second queue's message invoked")


def test_a_dev_server_restarted_mid_stream_loses_and_repeats_no_message(
    moto_endpoint: str, examples_url: str, sqs: Any  # noqa: F811
) -> None:
    from tests.helpers.moto import unique_table_name
    from tests.integration.test_subscriptions import SETTINGS

    table = unique_table_name()

    def start() -> DevServer:
        server = DevServer(ingress_port=0, admin_port=0, dynamodb_endpoint=moto_endpoint, table=table,
                           settings=SETTINGS, sqs_endpoint=moto_endpoint)  # fmt: skip
        server.start()
        return server

    # GIVEN a dev server with Counter/add subscribed to a FIFO queue holding 30 messages of one group
    name, key = f"restart-{uuid.uuid4().hex[:8]}.fifo", uuid.uuid4().hex[:8]
    url = sqs.create_queue(QueueName=name, Attributes={"FifoQueue": "true", "VisibilityTimeout": "2"})["QueueUrl"]
    first = start()
    try:
        reply = httpx.post(f"{first.admin_url}/deployments", json={"uri": examples_url}, timeout=30)
        assert reply.status_code == 201, reply.text
        assert create(first, {"source": f"sqs://{name}", "sink": "service://Counter/add"}).status_code == 201
        for n in range(30):
            sqs.send_message(QueueUrl=url, MessageBody="1", MessageGroupId=key, MessageDeduplicationId=f"m{n}")
        # WHEN it is stopped once it has delivered some of them
        wait_for(lambda: len(invocations(first, f"key={key}&handler=add")) >= 3, 30, "deliveries under way")
    finally:
        first.stop()

    # AND a new one starts on the same store and queue
    second = start()
    try:
        # THEN every message is invoked once, in the group's order: the counter goes 1, 2, ... 30
        def all_done() -> list[dict[str, Any]] | None:
            found = invocations(second, f"key={key}&handler=add")
            return found if len(found) >= 30 and all(i["status"] == "completed" for i in found) else None

        done = wait_for(all_done, 90, "30 completed adds")
        time.sleep(3)  # a redelivery after the visibility timeout would add one more
        done = invocations(second, f"key={key}&handler=add")
        assert sorted(i["completion_output"] for i in done) == list(range(1, 31))
        by_output = [i["id"] for i in sorted(done, key=lambda i: i["completion_output"])]
        assert by_output == [i["id"] for i in sorted(done, key=lambda i: (i["created_at"], i["id"]))]
    finally:
        second.stop()
