"""Schedules on the AWS path: `EventBridgeSchedules` and the worker's tick messages on a moto server.

moto's EventBridge Scheduler stores schedules but never fires them: the tests read a schedule back
(expression, target queue, role, dead-letter queue, retry policy, state) and deliver its `Input` to
the wake queue themselves, filled in as EventBridge Scheduler fills it, then let the worker's
`handle_wake_message` take it, as the worker Lambda does.
"""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import boto3
import pytest
from botocore.exceptions import ClientError

from adapters.aws.schedules import EventBridgeSchedules, eventbridge_expression, eventbridge_schedule_name, tick_input
from adapters.aws.timers import SCHEDULE_RETRY_POLICY, SqsScheduler, handle_wake_message
from adapters.http.invoker import HttpInvoker
from control_plane.durations import rfc3339
from control_plane.ports import ScheduleRecord
from control_plane.schedules import Schedules
from control_plane.settings import Settings
from http_api import HttpControlPlane
from http_api.http import HttpRequest
from tests.helpers.moto import DUMMY_AWS_ENV, REGION, fresh_store

ROLE_ARN = "arn:aws:iam::123456789012:role/torpor-scheduler"


def client(service: str, endpoint: str) -> Any:
    return boto3.client(
        service,
        endpoint_url=endpoint,
        region_name=REGION,
        aws_access_key_id=DUMMY_AWS_ENV["AWS_ACCESS_KEY_ID"],
        aws_secret_access_key=DUMMY_AWS_ENV["AWS_SECRET_ACCESS_KEY"],
    )


@dataclass
class Wiring:
    cp: HttpControlPlane
    sqs: Any
    eventbridge: Any
    wake_scheduler: SqsScheduler
    queue_url: str
    queue_arn: str
    dlq_arn: str
    group: str


@pytest.fixture
def aws(moto_endpoint: str, examples_url: str) -> Iterator[Wiring]:
    sqs, eventbridge = client("sqs", moto_endpoint), client("scheduler", moto_endpoint)
    suffix = uuid.uuid4().hex[:12]
    queue_url = sqs.create_queue(QueueName=f"wake-{suffix}")["QueueUrl"]
    dlq_url = sqs.create_queue(QueueName=f"schedule-dlq-{suffix}")["QueueUrl"]
    arn = lambda url: sqs.get_queue_attributes(QueueUrl=url, AttributeNames=["QueueArn"])["Attributes"]["QueueArn"]  # noqa: E731
    group = f"torpor-{suffix}"
    eventbridge.create_schedule_group(Name=group)
    wake_scheduler = SqsScheduler(sqs, queue_url)
    trigger = EventBridgeSchedules(
        eventbridge, queue_arn=wake_scheduler.queue_arn, role_arn=ROLE_ARN, dead_letter_arn=arn(dlq_url), group=group
    )
    invoker = HttpInvoker()
    store = fresh_store(moto_endpoint)
    cp = HttpControlPlane(
        store,
        invoker,
        wake_scheduler,
        settings=Settings(inactivity_timeout_ms=10_000),
        schedule_trigger=trigger,
        facts=store.facts,
    )
    cp.registry.register(examples_url)
    yield Wiring(cp, sqs, eventbridge, wake_scheduler, queue_url, arn(queue_url), arn(dlq_url), group)
    invoker.close()
    for url in (queue_url, dlq_url):
        sqs.delete_queue(QueueUrl=url)


def stored(aws: Wiring, name: str) -> dict[str, Any]:
    reply: dict[str, Any] = aws.eventbridge.get_schedule(Name=f"torpor-schedule-{name}", GroupName=aws.group)
    return reply


def admin(aws: Wiring, method: str, path: str, body: object = None) -> tuple[int, Any]:
    raw = b"" if body is None else json.dumps(body).encode()
    reply = aws.cp.admin.router.dispatch(HttpRequest(method, path, "", {"content-type": "application/json"}, raw))
    return reply.status, json.loads(reply.body) if reply.body else None


def deliver(aws: Wiring, body: str, times: int) -> int:
    """Put `body` on the wake queue once, then have the worker handle each received message `times` times."""
    aws.sqs.send_message(QueueUrl=aws.queue_url, MessageBody=body)
    handled = 0
    deadline = time.monotonic() + 10
    while not handled and time.monotonic() < deadline:
        for message in aws.sqs.receive_message(QueueUrl=aws.queue_url, MaxNumberOfMessages=10).get("Messages", []):
            for _ in range(times):
                outcome = handle_wake_message(
                    message["Body"],
                    wake=aws.cp.wake,
                    scheduler=aws.wake_scheduler,
                    now_ms=aws.cp.clock.now_ms(),
                )
                assert outcome == "fired"
            aws.sqs.delete_message(QueueUrl=aws.queue_url, ReceiptHandle=message["ReceiptHandle"])
            handled += 1
    return handled


def test_a_cron_schedule_becomes_an_eventbridge_schedule_targeting_the_wake_queue(aws: Wiring) -> None:
    # WHEN a weekday-mornings schedule is created through the admin API
    status, body = admin(
        aws, "POST", "/schedules",
        {"name": "mornings", "cron": "0 9 * * 1-5", "target": "Counter/add", "key": "k", "body": 1},
    )  # fmt: skip
    assert status == 201, body

    # THEN EventBridge Scheduler holds a recurring schedule with its cadence, sending to the wake queue
    schedule = stored(aws, "mornings")
    assert schedule["ScheduleExpression"] == "cron(0 9 ? * MON,TUE,WED,THU,FRI *)"
    assert schedule["ScheduleExpressionTimezone"] == "UTC"
    assert schedule["State"] == "ENABLED"
    assert schedule["FlexibleTimeWindow"] == {"Mode": "OFF"}
    assert "ActionAfterCompletion" not in schedule or schedule["ActionAfterCompletion"] == "NONE"
    target = schedule["Target"]
    assert target["Arn"] == aws.queue_arn
    assert target["RoleArn"] == ROLE_ARN
    assert target["DeadLetterConfig"] == {"Arn": aws.dlq_arn}
    assert target["RetryPolicy"] == SCHEDULE_RETRY_POLICY
    assert json.loads(target["Input"]) == {"schedule": "mornings", "scheduled_time": "<aws.scheduler.scheduled-time>"}


def test_an_every_schedule_is_a_rate_starting_at_its_next_tick(aws: Wiring) -> None:
    schedule = aws.cp.schedules.create("often", service="Greeter", handler="greet", body="x", every="5m")
    stored_schedule = stored(aws, "often")
    assert stored_schedule["ScheduleExpression"] == "rate(5 minutes)"
    assert int(stored_schedule["StartDate"].timestamp() * 1000) == schedule.next_tick_ms
    assert schedule.next_tick_ms % 300_000 == 0


def test_what_eventbridge_cannot_carry_is_a_400(aws: Wiring) -> None:
    status, body = admin(aws, "POST", "/schedules", {"name": "fast", "every": "30s", "target": "Greeter/greet"})
    assert status == 400
    assert "whole minutes" in body["message"]
    status, body = admin(aws, "POST", "/schedules", {"name": "both", "cron": "0 0 1 * 1", "target": "Greeter/greet"})
    assert status == 400
    assert "day of month and day of week" in body["message"]
    with pytest.raises(ClientError):
        stored(aws, "fast")
    for cron, message in (("0 9 * * 1#2", "field '1#2' is not supported"), ("0 0 30 2 *", "never fires")):
        status, body = admin(aws, "POST", "/schedules", {"name": "odd", "cron": cron, "target": "Greeter/greet"})
        assert status == 400, body
        assert message in body["message"]
    with pytest.raises(ClientError):
        stored(aws, "odd")


class FailingScheduler:
    """An EventBridge Scheduler client whose next `failures` UpdateSchedule calls fail (a throttle)."""

    def __init__(self, client: Any, failures: int) -> None:
        self._client, self.failures = client, failures

    def __getattr__(self, name: str) -> Any:
        return getattr(self._client, name)

    def update_schedule(self, **params: Any) -> Any:
        if self.failures:
            self.failures -= 1
            raise ClientError({"Error": {"Code": "ThrottlingException", "Message": "slow down"}}, "UpdateSchedule")
        return self._client.update_schedule(**params)


@pytest.mark.parametrize("verb", ["resume", "pause"])
def test_a_pause_or_resume_whose_eventbridge_update_failed_is_repaired_by_the_next_call(aws: Wiring, verb: str) -> None:
    # GIVEN a schedule (paused, to resume it), and EventBridge Scheduler failing the next UpdateSchedule
    aws.cp.schedules.create("flaky", service="Greeter", handler="greet", body="x", cron="0 * * * *")
    if verb == "resume":
        aws.cp.schedules.pause("flaky")
    failing = FailingScheduler(aws.eventbridge, failures=1)
    aws.cp.schedules.trigger = EventBridgeSchedules(
        failing, queue_arn=aws.queue_arn, role_arn=ROLE_ARN, dead_letter_arn=aws.dlq_arn, group=aws.group
    )
    paused_before = verb == "resume"

    # WHEN the call fails, THEN the store still says what EventBridge does
    status, _ = admin(aws, "PATCH", f"/schedules/flaky/{verb}")
    assert status == 500
    assert aws.cp.store.get_schedule("flaky").paused is paused_before  # type: ignore[union-attr]
    assert stored(aws, "flaky")["State"] == ("DISABLED" if paused_before else "ENABLED")

    # WHEN it is called again, THEN both agree
    status, body = admin(aws, "PATCH", f"/schedules/flaky/{verb}")
    assert status == 200, body
    assert body["paused"] is not paused_before
    assert stored(aws, "flaky")["State"] == ("ENABLED" if paused_before else "DISABLED")


class SetClock:
    def __init__(self, now_ms: int) -> None:
        self.now = now_ms

    def now_ms(self) -> int:
        return self.now


def test_an_older_tick_recorded_after_a_newer_one_changes_nothing(aws: Wiring, monkeypatch: pytest.MonkeyPatch) -> None:
    # GIVEN a schedule every minute, on a clock the test sets
    start = (aws.cp.clock.now_ms() // 60_000 - 10) * 60_000 + 10_000
    clock = SetClock(start)
    schedules = Schedules(aws.cp.store, aws.cp.engine, aws.cp.schedules.trigger, clock)
    schedules.create("racy", service="Counter", handler="add", key="racy", body=1, every="1m")
    first, second = start - 10_000 + 60_000, start - 10_000 + 120_000

    # WHEN worker A runs the first tick and, while it sends, worker B runs the next tick to its end
    send = schedules._send
    raced: list[str | None] = []

    def slow_send(schedule: ScheduleRecord, tick_ms: int) -> str:
        if tick_ms == first:
            clock.now = second + 1_000
            raced.append(schedules.tick("racy"))
        return send(schedule, tick_ms)

    monkeypatch.setattr(schedules, "_send", slow_send)
    clock.now = first + 1_000
    older = schedules.tick("racy")

    # THEN both ticks sent, and the schedule keeps the newer tick: its next tick does not go backwards
    assert older
    assert raced[0]
    assert older != raced[0]
    after = aws.cp.store.get_schedule("racy")
    assert after is not None
    assert (after.last_tick_ms, after.last_invocation_id) == (second, raced[0])
    assert after.next_tick_ms == second + 60_000


def test_pause_resume_and_delete_update_the_eventbridge_schedule(aws: Wiring) -> None:
    aws.cp.schedules.create("cycle", service="Greeter", handler="greet", body="x", cron="*/15 * * * *")
    assert stored(aws, "cycle")["ScheduleExpression"] == "cron(0/15 * * * ? *)"
    assert admin(aws, "PATCH", "/schedules/cycle/pause")[0] == 200
    assert stored(aws, "cycle")["State"] == "DISABLED"
    assert admin(aws, "PATCH", "/schedules/cycle/resume")[0] == 200
    resumed = stored(aws, "cycle")
    assert resumed["State"] == "ENABLED"
    assert resumed["Target"]["Arn"] == aws.queue_arn
    assert admin(aws, "DELETE", "/schedules/cycle")[0] == 202
    with pytest.raises(ClientError, match="ResourceNotFound"):
        stored(aws, "cycle")
    assert admin(aws, "GET", "/schedules/cycle")[0] == 404


def test_a_tick_message_delivered_twice_to_the_worker_starts_one_invocation(aws: Wiring) -> None:
    # GIVEN a schedule every minute, and its EventBridge target Input filled in for its next tick
    schedule = aws.cp.schedules.create("minutely", service="Counter", handler="add", key="m", body=1, every="1m")
    template = stored(aws, "minutely")["Target"]["Input"]
    body = template.replace("<aws.scheduler.scheduled-time>", rfc3339(schedule.next_tick_ms) or "")

    # WHEN the worker receives it and handles it twice (a duplicate delivery)
    assert deliver(aws, body, times=2) == 1

    # THEN one invocation ran the target once; the schedule moved on to the tick after
    found = aws.cp.store.list_invocations(None, "Counter", 10, key="m")
    assert len(found) == 1
    invocation = found[0]
    assert invocation.idempotency_key == f"schedule/minutely/{schedule.next_tick_ms}"
    deadline = time.monotonic() + 20
    while aws.cp.store.get_invocation(invocation.invocation_id).status != "completed":  # type: ignore[union-attr]
        assert time.monotonic() < deadline, "the tick's invocation did not complete"
        for message in aws.sqs.receive_message(QueueUrl=aws.queue_url, MaxNumberOfMessages=10).get("Messages", []):
            handle_wake_message(
                message["Body"],
                wake=aws.cp.wake,
                scheduler=aws.wake_scheduler,
                now_ms=aws.cp.clock.now_ms(),
            )
            aws.sqs.delete_message(QueueUrl=aws.queue_url, ReceiptHandle=message["ReceiptHandle"])
    assert aws.cp.store.load_state("Counter", "m") == {b"count": b"1"}
    after = aws.cp.store.get_schedule("minutely")
    assert after is not None
    assert after.last_invocation_id == invocation.invocation_id


@pytest.mark.parametrize(
    ("cron", "expression"),
    [
        ("0 * * * *", "cron(0 * * * ? *)"),
        ("30 2 1 * *", "cron(30 2 1 * ? *)"),
        ("0 0 * * 0", "cron(0 0 ? * SUN *)"),
        ("0 0 * * 7", "cron(0 0 ? * SUN *)"),
        ("0 0 * * */2", "cron(0 0 ? * SUN,TUE,THU,SAT *)"),
        ("*/5 */2 * 1-6 *", "cron(0/5 0/2 * 1-6 ? *)"),
        ("0 9 * jan-mar mon-fri", "cron(0 9 ? JAN-MAR MON,TUE,WED,THU,FRI *)"),
    ],
)
def test_cron_expressions_in_eventbridge_terms(cron: str, expression: str) -> None:
    record = ScheduleRecord(name="n", service="S", handler="h", cron=cron)
    assert eventbridge_expression(record) == expression


def test_an_eventbridge_schedule_name_is_that_of_a_schedule() -> None:
    assert eventbridge_schedule_name("a" * 48) == "torpor-schedule-" + "a" * 48  # 64, EventBridge's limit
    with pytest.raises(ValueError, match="not a schedule name"):
        eventbridge_schedule_name("a" * 49)
    with pytest.raises(ValueError, match="not a schedule name"):
        tick_input("bad name")
