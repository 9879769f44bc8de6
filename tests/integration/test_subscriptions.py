"""Event subscriptions through a real `torpor dev` (DynamoDB store on a moto server, the example
services over HTTP): the admin API in restate-server 1.7's `/subscriptions` shape, Restate's CLI
`restate subscriptions list|create|describe|delete` against it, and the dev server polling an SQS
FIFO queue of the same moto server: each message invokes the object once, in the group's order."""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import boto3
import httpx
import pytest

from adapters.local.dev import DevServer
from control_plane.settings import Settings
from tests.helpers.dev import wait_for
from tests.helpers.moto import DUMMY_AWS_ENV, REGION, unique_table_name
from tests.integration.test_restate_cli import RESTATE_CLI, ok, restate

SETTINGS = Settings(inactivity_timeout_ms=10_000, call_wait_ms=20_000)


@pytest.fixture(scope="module")
def dev(moto_endpoint: str, examples_url: str) -> Iterator[DevServer]:
    """`torpor dev` with its store and its subscriptions' SQS queues on the moto server."""
    server = DevServer(
        ingress_port=0,
        admin_port=0,
        dynamodb_endpoint=moto_endpoint,
        table=unique_table_name(),
        settings=SETTINGS,
        sqs_endpoint=moto_endpoint,
    )
    server.start()
    try:
        reply = httpx.post(f"{server.admin_url}/deployments", json={"uri": examples_url}, timeout=30)
        assert reply.status_code == 201, reply.text
        yield server
    finally:
        server.stop()


@pytest.fixture
def sqs(moto_endpoint: str) -> Any:
    return boto3.client(
        "sqs",
        endpoint_url=moto_endpoint,
        region_name=REGION,
        aws_access_key_id=DUMMY_AWS_ENV["AWS_ACCESS_KEY_ID"],
        aws_secret_access_key=DUMMY_AWS_ENV["AWS_SECRET_ACCESS_KEY"],
    )


def create(dev: DevServer, body: object) -> httpx.Response:
    return httpx.post(f"{dev.admin_url}/subscriptions", json=body, timeout=10)


def test_a_subscription_is_created_listed_read_and_removed(dev: DevServer) -> None:
    # WHEN an SQS queue is subscribed to an object handler
    reply = create(dev, {"source": "sqs://orders.fifo", "sink": "service://Counter/add", "options": {"a": "b"}})

    # THEN it answers restate-server's shape, with a sub_ id and the location
    assert reply.status_code == 201, reply.text
    created = reply.json()
    assert set(created) == {"id", "source", "sink", "options"}
    assert created["id"].startswith("sub_1") and len(created["id"]) == 27
    assert created["source"] == "sqs://orders.fifo" and created["sink"] == "service://Counter/add"
    assert created["options"] == {"a": "b"}
    assert reply.headers["location"] == f"subscriptions/{created['id']}"
    # AND it is listed (also by an exact sink) and read back
    listed = httpx.get(f"{dev.admin_url}/subscriptions", timeout=10).json()["subscriptions"]
    assert created in listed
    by_sink = httpx.get(f"{dev.admin_url}/v4/subscriptions", params={"sink": "service://Counter/add"}, timeout=10)
    assert created in by_sink.json()["subscriptions"]
    other = httpx.get(f"{dev.admin_url}/subscriptions", params={"source": "sqs://other"}, timeout=10)
    assert created not in other.json()["subscriptions"]
    assert httpx.get(f"{dev.admin_url}/subscriptions/{created['id']}", timeout=10).json() == created

    # WHEN it is removed
    removed = httpx.delete(f"{dev.admin_url}/subscriptions/{created['id']}", timeout=10)

    # THEN 202, and it is gone (404 with code and message), a second removal too
    assert removed.status_code == 202, removed.text
    gone = httpx.get(f"{dev.admin_url}/subscriptions/{created['id']}", timeout=10)
    assert gone.status_code == 404 and gone.json()["code"] == 404 and created["id"] in gone.json()["message"]
    assert httpx.delete(f"{dev.admin_url}/subscriptions/{created['id']}", timeout=10).status_code == 404
    assert created not in httpx.get(f"{dev.admin_url}/subscriptions", timeout=10).json()["subscriptions"]


@pytest.mark.parametrize(
    ("body", "status", "words"),
    [
        ({"source": "kafka://my-cluster/topic", "sink": "service://Counter/add"}, 400, "sqs, eventbridge"),
        ({"source": "sqs://", "sink": "service://Counter/add"}, 400, "name the sqs resource"),
        ({"source": "sqs://q", "sink": "service://Nope/add"}, 400, "cannot find service/handler"),
        ({"source": "sqs://q", "sink": "service://Counter/nope"}, 400, "cannot find service/handler"),
        ({"source": "sqs://q", "sink": "service://Counter"}, 400, "service://Service/handler"),
        ({"source": "sqs://q", "sink": "bla://Counter/add"}, 400, "service://Service/handler"),
        ({"source": "eventbridge://rule", "sink": "service://Counter/add"}, 400, "key=VALUE"),
        ({"sink": "service://Counter/add"}, 422, '"source"'),
        ({"source": "sqs://q", "sink": "service://Counter/add", "options": {"x": 1}}, 422, "strings"),
    ],
)
def test_what_cannot_be_a_subscription_is_refused(dev: DevServer, body: object, status: int, words: str) -> None:
    reply = create(dev, body)
    assert reply.status_code == status, reply.text
    assert words in reply.json()["message"] and reply.json()["code"] == status


def test_a_malformed_id_is_a_bad_request(dev: DevServer) -> None:
    reply = httpx.get(f"{dev.admin_url}/subscriptions/garbage", timeout=10)
    assert reply.status_code == 400 and "sub_" in reply.json()["message"]


@pytest.mark.skipif(not RESTATE_CLI.exists(), reason=f"restate CLI not installed at {RESTATE_CLI}: run scripts/test.sh")
def test_restates_cli_creates_lists_describes_and_deletes(dev: DevServer, tmp_path: Path) -> None:
    # WHEN Restate's CLI creates a subscription
    args = ("-y", "subscriptions", "create", "sqs://cli-queue", "service://Counter/add", "k=v")
    out = ok(restate(dev, *args, home=tmp_path))

    # THEN it names the new id, which the admin API lists
    listed_now = httpx.get(f"{dev.admin_url}/subscriptions").json()["subscriptions"]
    created = next(s for s in listed_now if s["source"] == "sqs://cli-queue")
    assert f"Subscription {created['id']} created" in out
    assert created["options"] == {"k": "v"}
    # AND list and describe show it
    listed = ok(restate(dev, "subscriptions", "list", home=tmp_path))
    assert created["id"] in listed and "sqs://cli-queue" in listed and "service://Counter/add" in listed
    described = ok(restate(dev, "subscriptions", "describe", created["id"], home=tmp_path))
    assert "sqs://cli-queue" in described and "service://Counter/add" in described

    # WHEN it deletes it
    ok(restate(dev, "-y", "subscriptions", "delete", created["id"], home=tmp_path))

    # THEN it is gone
    assert httpx.get(f"{dev.admin_url}/subscriptions/{created['id']}").status_code == 404


def adds(dev: DevServer, key: str) -> list[dict[str, Any]]:
    """The `Counter/add` invocations of `key`, oldest first."""
    reply = httpx.get(f"{dev.admin_url}/invocations", params={"key": key, "handler": "add"}, timeout=10)
    assert reply.status_code == 200, reply.text
    return sorted(reply.json()["invocations"], key=lambda i: (i["created_at"], i["id"]))


def test_dev_polls_a_fifo_queue_and_invokes_the_object_once_per_message_in_order(
    dev: DevServer, sqs: Any, tmp_path: Path
) -> None:
    name, key = f"orders-{uuid.uuid4().hex[:8]}.fifo", uuid.uuid4().hex[:8]
    url = sqs.create_queue(QueueName=name, Attributes={"FifoQueue": "true", "VisibilityTimeout": "1"})["QueueUrl"]
    # GIVEN the dev server's SQS poller loses its first delete (as if it crashed after the invocation
    # was stored): that message comes back after its visibility timeout, a redelivery
    poller = dev._sqs_poller
    assert poller is not None
    original, lost = poller.sqs.delete_message, []

    def delete_message(**kwargs: Any) -> Any:
        if not lost:
            lost.append(kwargs["ReceiptHandle"])
            return {}
        return original(**kwargs)

    poller.sqs.delete_message = delete_message
    # AND Counter/add subscribed to the queue (through Restate's CLI when it is installed)
    source, sink = f"sqs://{name}", "service://Counter/add"
    if RESTATE_CLI.exists():
        ok(restate(dev, "-y", "subscriptions", "create", source, sink, home=tmp_path))
        listed = httpx.get(f"{dev.admin_url}/subscriptions").json()["subscriptions"]
        (created,) = [s for s in listed if s["source"] == source]
    else:
        created = httpx.post(f"{dev.admin_url}/subscriptions", json={"source": source, "sink": sink}).json()

    # WHEN three messages of one group are sent, the second one twice (the same deduplication id)
    message_ids: dict[str, str] = {}
    for dedup, delta in (("d0", 1), ("d1", 10), ("d1", 10), ("d2", 100)):
        sent = sqs.send_message(QueueUrl=url, MessageBody=str(delta), MessageGroupId=key, MessageDeduplicationId=dedup)
        message_ids.setdefault(dedup, sent["MessageId"])

    # THEN the object's add ran three times, in the queue's order, each message once
    def three_done() -> list[dict[str, Any]] | None:
        found = adds(dev, key)
        return found if len(found) == 3 and all(i["status"] == "completed" for i in found) else None

    done = wait_for(three_done, 60, "three completed adds")
    assert [i["completion_output"] for i in done] == [1, 11, 111]
    assert [i["idempotency_key"] for i in done] == [message_ids[d] for d in ("d0", "d1", "d2")]  # the event ids
    assert lost  # the redelivery happened (and invoked nothing more)
    attributes = ["ApproximateNumberOfMessages", "ApproximateNumberOfMessagesNotVisible"]

    def drained() -> bool:
        counts = sqs.get_queue_attributes(QueueUrl=url, AttributeNames=attributes)["Attributes"]
        return all(counts[a] == "0" for a in attributes)

    wait_for(drained, 30, "the queue drained")

    # WHEN the subscription is removed and another message is sent
    assert httpx.delete(f"{dev.admin_url}/subscriptions/{created['id']}").status_code == 202
    time.sleep(2)  # a receive in flight ends (1 s long poll)
    sqs.send_message(QueueUrl=url, MessageBody="1000", MessageGroupId=key, MessageDeduplicationId="d3")

    # THEN it is not delivered: it stays in the queue, and the object ran three times
    time.sleep(3)
    assert len(adds(dev, key)) == 3
    left = sqs.receive_message(QueueUrl=url, MaxNumberOfMessages=10, WaitTimeSeconds=1).get("Messages", [])
    assert [m["Body"] for m in left] == ["1000"]


@pytest.fixture(scope="module")
def restate_admin(examples_url: str) -> Iterator[str]:
    """restate-server 1.7.12 with the same example app registered: its admin URL."""
    from tests.conformance.harness import RestateRuntime

    server = RestateRuntime()
    server.start()
    try:
        body = {"uri": examples_url, "use_http_11": True}
        reply = httpx.post(f"{server.admin_url}/deployments", json=body, timeout=60)
        assert reply.status_code == 201, reply.text
        yield server.admin_url
    finally:
        server.close()


UNKNOWN_ID = "sub_1" + "0" * 21 + "1"
"""A well-formed subscription id nobody has (restate-server parses it, then finds nothing)."""

DIFFERENTIAL = {
    # case: (method, path, Torpor's body, restate-server's body): each server's own source scheme
    "unknown sink service": ("POST", "/subscriptions", {"source": "sqs://q", "sink": "service://Nope/add"},
                             {"source": "kafka://c/t", "sink": "service://Nope/add"}),
    "unknown sink handler": ("POST", "/subscriptions", {"source": "sqs://q", "sink": "service://Counter/nope"},
                             {"source": "kafka://c/t", "sink": "service://Counter/nope"}),
    "sink without handler": ("POST", "/subscriptions", {"source": "sqs://q", "sink": "service://Counter"},
                             {"source": "kafka://c/t", "sink": "service://Counter"}),
    "sink of another scheme": ("POST", "/subscriptions", {"source": "sqs://q", "sink": "bla://Counter/add"},
                               {"source": "kafka://c/t", "sink": "bla://Counter/add"}),
    "the other's source": ("POST", "/subscriptions", {"source": "kafka://c/t", "sink": "service://Counter/add"},
                           {"source": "sqs://q", "sink": "service://Counter/add"}),
    "no source": ("POST", "/subscriptions", {"sink": "service://Counter/add"}, {"sink": "service://Counter/add"}),
    "an option not a string": ("POST", "/subscriptions",
                               {"source": "sqs://q", "sink": "service://Counter/add", "options": {"x": 1}},
                               {"source": "kafka://c/t", "sink": "service://Counter/add", "options": {"x": 1}}),
    "get an unknown id": ("GET", f"/subscriptions/{UNKNOWN_ID}", None, None),
    "delete an unknown id": ("DELETE", f"/subscriptions/{UNKNOWN_ID}", None, None),
    "get a malformed id": ("GET", "/subscriptions/garbage", None, None),
}  # fmt: skip


@pytest.mark.parametrize("case", sorted(DIFFERENTIAL))
def test_refusals_agree_with_restate_server(case: str, dev: DevServer, restate_admin: str) -> None:
    method, path, ours, theirs = DIFFERENTIAL[case]
    torpor = httpx.request(method, f"{dev.admin_url}{path}", json=ours, timeout=10)
    restate = httpx.request(method, f"{restate_admin}{path}", json=theirs, timeout=10)
    assert torpor.status_code == restate.status_code, (torpor.text, restate.text)
    assert torpor.json()["message"]  # {"code", "message"}, never a bare text
    if restate.headers.get("content-type", "").startswith("application/json"):  # its code (META0009), which
        assert torpor.json().get("restate_code") == restate.json().get("restate_code")  # Restate's CLI prints


def torpor(dev: DevServer, *args: str) -> Any:
    from click.testing import CliRunner

    from adapters.cli import main

    argv = ["--admin-url", dev.admin_url, *args]
    return CliRunner().invoke(main, argv, env={"COLUMNS": "200"}, catch_exceptions=False)


def test_torpors_cli_creates_lists_describes_and_deletes(dev: DevServer) -> None:
    created = torpor(dev, "--json", "subscriptions", "create", "kinesis://cli-clicks", "service://Counter/add", "a=b")
    assert created.exit_code == 0, created.output
    subscription = json.loads(created.output)
    assert (subscription["source"], subscription["options"]) == ("kinesis://cli-clicks", {"a": "b"})

    listed = torpor(dev, "subscriptions", "list", "--source", "kinesis://cli-clicks")
    assert listed.exit_code == 0 and subscription["id"] in listed.output and "a=b" in listed.output
    described = torpor(dev, "subscriptions", "describe", subscription["id"])
    assert described.exit_code == 0 and "service://Counter/add" in described.output
    refused = torpor(dev, "subscriptions", "create", "kafka://c/t", "service://Counter/add")
    assert refused.exit_code == 1 and "sqs, eventbridge" in refused.output
    bad_option = torpor(dev, "subscriptions", "create", "sqs://q", "service://Counter/add", "novalue")
    assert bad_option.exit_code == 2 and "KEY=VALUE" in bad_option.output

    deleted = torpor(dev, "subscriptions", "delete", subscription["id"], "-y")
    assert deleted.exit_code == 0 and f"Deleted subscription {subscription['id']}" in deleted.output
    assert torpor(dev, "subscriptions", "describe", subscription["id"]).exit_code == 1


def test_a_torpor_dev_process_polls_a_queue_of_the_endpoint_torpor_aws_endpoint_url_names(
    moto_endpoint: str, examples_url: str, sqs: Any
) -> None:
    """`TORPOR_AWS_ENDPOINT_URL=… torpor dev` (SQLite in memory) delivers a queue of that moto server."""
    from tests.helpers.dev import torpor_dev_process

    name, key = f"plain-{uuid.uuid4().hex[:8]}", uuid.uuid4().hex[:8]
    url = sqs.create_queue(QueueName=name)["QueueUrl"]
    with torpor_dev_process("--in-memory", env={"TORPOR_AWS_ENDPOINT_URL": moto_endpoint}) as (_, admin, _process):
        assert httpx.post(f"{admin}/deployments", json={"uri": examples_url}, timeout=30).status_code == 201
        body = {"source": f"sqs://{name}", "sink": "service://Counter/add"}
        assert httpx.post(f"{admin}/subscriptions", json=body, timeout=10).status_code == 201
        # a standard queue: the object key is the `key` message attribute
        attributes = {"key": {"DataType": "String", "StringValue": key}}
        sqs.send_message(QueueUrl=url, MessageBody="7", MessageAttributes=attributes)

        def added() -> list[dict[str, Any]] | None:
            reply = httpx.get(f"{admin}/invocations", params={"key": key, "handler": "add"}, timeout=10).json()
            found = reply["invocations"]
            return found if found and found[0]["status"] == "completed" else None

        (invocation,) = wait_for(added, 60, "the message's invocation")
        assert invocation["completion_output"] == 7
