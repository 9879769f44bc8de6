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
