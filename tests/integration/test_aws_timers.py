"""`SqsScheduler`, `handle_wake_message` and `drain` against a real moto server over HTTP.

SQS delays are real in moto (a delayed message becomes visible after `DelaySeconds`), so the short
waits are tested in real time, polling with a deadline. moto's EventBridge Scheduler stores schedules
but never fires them: the long-wait tests read the stored schedule back and hand its `Input` to the
worker's handler themselves, at chosen times.
"""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import boto3
import pytest
from botocore.exceptions import ClientError

from adapters.aws.timers import SqsScheduler, drain, handle_wake_message, schedule_name
from control_plane import ids
from control_plane.timers import Wake
from tests.helpers.moto import DUMMY_AWS_ENV, REGION

ROLE_ARN = "arn:aws:iam::123456789012:role/torpor-scheduler"
JAN_1_2030_MS = 1_893_456_000_000  # 2030-01-01T00:00:00Z
HOUR_MS = 3_600_000


def wall_ms() -> int:
    """The wall clock, ms since the UNIX epoch (the same clock moto's SQS delays run on)."""
    return time.time_ns() // 1_000_000


@dataclass
class FixedClock:
    """A `Clock` that says what the test sets."""

    now: int

    def now_ms(self) -> int:
        return self.now


def client(service: str, endpoint: str) -> Any:
    """A boto3 client for `service` on the moto server, with dummy credentials."""
    return boto3.client(
        service,
        endpoint_url=endpoint,
        region_name=REGION,
        aws_access_key_id=DUMMY_AWS_ENV["AWS_ACCESS_KEY_ID"],
        aws_secret_access_key=DUMMY_AWS_ENV["AWS_SECRET_ACCESS_KEY"],
        aws_session_token=DUMMY_AWS_ENV["AWS_SESSION_TOKEN"],
    )


@dataclass
class Queue:
    """A queue of its own for one test: URL and ARN."""

    url: str
    arn: str


@pytest.fixture
def sqs(moto_endpoint: str) -> Any:
    """An SQS client on the moto server."""
    return client("sqs", moto_endpoint)


@pytest.fixture
def scheduler_client(moto_endpoint: str) -> Any:
    """An EventBridge Scheduler client on the moto server."""
    return client("scheduler", moto_endpoint)


@pytest.fixture
def new_queue(sqs: Any) -> Iterator[Callable[[], Queue]]:
    """Make standard queues with unique names (deleted after the test), so tests never share messages."""
    made: list[str] = []

    def make() -> Queue:
        url = sqs.create_queue(QueueName=f"torpor-wake-{uuid.uuid4().hex[:12]}")["QueueUrl"]
        made.append(url)
        arn = sqs.get_queue_attributes(QueueUrl=url, AttributeNames=["QueueArn"])["Attributes"]["QueueArn"]
        return Queue(url, arn)

    yield make
    for url in made:
        sqs.delete_queue(QueueUrl=url)


@pytest.fixture
def queue(new_queue: Callable[[], Queue]) -> Queue:
    """The test's worker queue."""
    return new_queue()


def new_id() -> str:
    """A fresh invocation id (`inv_1` + 33 characters, the longest Torpor makes)."""
    return ids.new_invocation_id()


def counts(sqs: Any, queue: Queue) -> tuple[int, int, int]:
    """`(visible, in flight, delayed)` messages on the queue (exact in moto)."""
    names = [
        "ApproximateNumberOfMessages",
        "ApproximateNumberOfMessagesNotVisible",
        "ApproximateNumberOfMessagesDelayed",
    ]
    attributes = sqs.get_queue_attributes(QueueUrl=queue.url, AttributeNames=names)["Attributes"]
    visible, in_flight, delayed = (int(attributes[name]) for name in names)
    return visible, in_flight, delayed


def record_calls(aws_client: Any, operation: str) -> list[dict[str, Any]]:
    """Record the parameters of every `operation` call the client makes (a botocore event hook, no patch)."""
    calls: list[dict[str, Any]] = []

    def on_call(params: dict[str, Any], **_: Any) -> None:
        calls.append(dict(params))

    service = aws_client.meta.service_model.service_name
    aws_client.meta.events.register(f"provide-client-params.{service}.{operation}", on_call)
    return calls


def record_sends(sqs: Any) -> list[dict[str, Any]]:
    """Record the parameters of every SendMessage the SQS client makes."""
    return record_calls(sqs, "SendMessage")


def receive_now(sqs: Any, queue: Queue) -> list[dict[str, Any]]:
    """Messages visible right now (no long poll)."""
    reply = sqs.receive_message(QueueUrl=queue.url, MaxNumberOfMessages=10, WaitTimeSeconds=0)
    messages: list[dict[str, Any]] = reply.get("Messages", [])
    return messages


def ids_into(out: list[str]) -> Callable[[Wake], None]:
    """A `wake` stand-in that records the woken ids in `out`."""
    return lambda wake: out.append(wake.invocation_id)


def never(*args: object) -> None:
    """A callback that must not run."""
    raise AssertionError(f"unexpected call with {args!r}")


# --- (a) a short wait is a real SQS delay ---------------------------------------------------------


def test_wake_at_2_s_ahead_arrives_at_due_time_not_before(sqs: Any, queue: Queue) -> None:
    # GIVEN a scheduler on the queue, and a wake-up due 2 s from now
    scheduler = SqsScheduler(sqs, queue.url)
    invocation_id = new_id()
    due_ms = wall_ms() + 2_000

    # WHEN it is armed and the queue is polled until the message shows (deadline 10 s)
    scheduler.wake_at(invocation_id, due_ms)
    seen_empty_at: list[int] = []
    messages: list[dict[str, Any]] = []
    deadline = time.monotonic() + 10
    while not messages and time.monotonic() < deadline:
        before = wall_ms()
        messages = receive_now(sqs, queue)
        if not messages:
            seen_empty_at.append(before)
            time.sleep(0.05)  # poll interval, not synchronisation
    arrived_ms = wall_ms()

    # THEN it was not receivable before the due time, and was after it
    assert len(messages) == 1, "the message never became visible"
    assert arrived_ms >= due_ms, f"arrived {due_ms - arrived_ms} ms early"
    assert seen_empty_at, "the first poll already found it"
    assert seen_empty_at[0] < due_ms - 1_000  # polled, and found nothing, well before the due time
    assert arrived_ms < due_ms + 3_000
    body = messages[0]["Body"]
    assert json.loads(body) == {"invocation_id": invocation_id, "due_ms": due_ms}

    # AND the worker's handler fires advance exactly once with the id
    advanced: list[str] = []
    outcome = handle_wake_message(body, wake=ids_into(advanced), scheduler=scheduler, now_ms=wall_ms())
    assert outcome == "fired"
    assert advanced == [invocation_id]
    sqs.delete_message(QueueUrl=queue.url, ReceiptHandle=messages[0]["ReceiptHandle"])
    assert counts(sqs, queue) == (0, 0, 0)  # firing re-armed nothing


def test_wake_at_rounds_the_delay_up_and_a_past_due_time_to_no_delay(sqs: Any, queue: Queue) -> None:
    # GIVEN a scheduler whose clock stands still
    clock = FixedClock(JAN_1_2030_MS)
    scheduler = SqsScheduler(sqs, queue.url, clock=clock)
    sent = record_sends(sqs)

    # WHEN wake-ups are armed 1 ms, 900 s exactly, and 5 s in the past
    scheduler.wake_at("inv_a", JAN_1_2030_MS + 1)
    scheduler.wake_at("inv_b", JAN_1_2030_MS + 900_000)
    scheduler.wake_at("inv_c", JAN_1_2030_MS - 5_000)

    # THEN the delays are rounded up to whole seconds, never below 0 or above 900
    assert [params["DelaySeconds"] for params in sent] == [1, 900, 0]
    assert [json.loads(params["MessageBody"])["invocation_id"] for params in sent] == ["inv_a", "inv_b", "inv_c"]
    assert counts(sqs, queue) == (1, 0, 2)


def test_with_hold_ms_a_wake_up_arrives_up_to_1_s_early_and_is_held_until_due_never_fired_early(
    sqs: Any, queue: Queue
) -> None:
    # GIVEN a scheduler that may send wake-ups up to 1 s early, and a clock that stands still
    scheduler = SqsScheduler(sqs, queue.url, hold_ms=1000, clock=FixedClock(JAN_1_2030_MS))
    sent = record_sends(sqs)

    # WHEN wake-ups are armed 1 ms, 950 ms, 1 s, 1.5 s and 900 s ahead
    for ahead_ms in (1, 950, 1000, 1500, 900_000):
        scheduler.wake_at("inv_a", JAN_1_2030_MS + ahead_ms)

    # THEN their delays are rounded up from the remaining time less 1 s: at most 1 s early, never late
    assert [p["DelaySeconds"] for p in sent] == [0, 0, 0, 1, 899]

    # AND a body that arrives at most 1 s early is held until its due time and then fired
    held: list[float] = []
    woken: list[str] = []
    due_ms = JAN_1_2030_MS + 950
    body = json.dumps({"invocation_id": "inv_a", "due_ms": due_ms})
    outcome = handle_wake_message(
        body, wake=ids_into(woken), scheduler=scheduler, now_ms=JAN_1_2030_MS, sleep=held.append
    )
    assert (outcome, woken, held) == ("fired", ["inv_a"], [0.95])

    # AND one that arrives more than 1 s early is re-delayed, held by nobody
    early = json.dumps({"invocation_id": "inv_a", "due_ms": JAN_1_2030_MS + 1001})
    outcome = handle_wake_message(early, wake=never, scheduler=scheduler, now_ms=JAN_1_2030_MS, sleep=held.append)
    assert (outcome, held, sent[-1]["DelaySeconds"]) == ("redelayed", [0.95], 1)

    # AND hold_ms is at most 1 s
    with pytest.raises(ValueError, match="hold_ms"):
        SqsScheduler(sqs, queue.url, hold_ms=1001)


# --- (b) a long wait is a one-time schedule that lands early, and the worker re-delays the rest ---


def test_wait_of_an_hour_makes_a_schedule_and_the_worker_redelays_then_fires(
    sqs: Any, scheduler_client: Any, new_queue: Callable[[], Queue]
) -> None:
    # GIVEN a scheduler with EventBridge Scheduler, a dead-letter queue, the default 60 s lead,
    # no queue ARN (it looks it up), and a clock at 2030-01-01T00:00:00Z
    queue, dead_letters = new_queue(), new_queue()
    scheduler = SqsScheduler(
        sqs,
        queue.url,
        scheduler_client=scheduler_client,
        schedule_target_role_arn=ROLE_ARN,
        dead_letter_arn=dead_letters.arn,
        clock=FixedClock(JAN_1_2030_MS),
    )
    invocation_id = new_id()
    due_ms = JAN_1_2030_MS + HOUR_MS + 250  # 01:00:00.250
    created = record_calls(scheduler_client, "CreateSchedule")

    # WHEN a wake-up is armed an hour ahead
    scheduler.wake_at(invocation_id, due_ms)

    # THEN no message is sent, and one schedule exists that lands 60 s early on the queue
    assert counts(sqs, queue) == (0, 0, 0)
    name = f"torpor-{invocation_id}-{due_ms}"
    assert schedule_name(invocation_id, due_ms) == name
    schedule = scheduler_client.get_schedule(Name=name, GroupName="default")
    assert schedule["ScheduleExpression"] == "at(2030-01-01T00:59:00)"
    assert schedule["ScheduleExpressionTimezone"] == "UTC"
    assert schedule["FlexibleTimeWindow"] == {"Mode": "OFF"}
    assert schedule["ActionAfterCompletion"] == "DELETE"
    assert schedule["State"] == "ENABLED"
    target = schedule["Target"]
    assert target["Arn"] == queue.arn
    assert target["RoleArn"] == ROLE_ARN
    assert json.loads(target["Input"]) == {"invocation_id": invocation_id, "due_ms": due_ms}
    assert target["DeadLetterConfig"] == {"Arn": dead_letters.arn}
    # moto stores AWS's default policy when none is sent (the same figures), so check what was sent
    assert target["RetryPolicy"] == {"MaximumEventAgeInSeconds": 86_400, "MaximumRetryAttempts": 185}
    assert [call["Target"]["RetryPolicy"] for call in created] == [target["RetryPolicy"]]

    # WHEN the schedule's Input reaches the worker when the schedule lands (60 s before due)
    sent = record_sends(sqs)
    timers: list[tuple[str, int]] = []

    def handle(now_ms: int) -> str:
        return handle_wake_message(
            target["Input"],
            wake=lambda w: timers.append((w.invocation_id, *w.dues)),
            scheduler=scheduler,
            now_ms=now_ms,
        )

    # THEN it is re-delayed by the remaining 60 s through SQS, and nothing fires
    assert handle(due_ms - 60_000) == "redelayed"
    assert [(p["DelaySeconds"], json.loads(p["MessageBody"])) for p in sent] == [
        (60, {"invocation_id": invocation_id, "due_ms": due_ms})
    ]
    assert counts(sqs, queue) == (0, 0, 1)
    assert timers == []

    # AND 6 ms before due it is still early; 5 ms before, at, and after due it fires the timer
    assert handle(due_ms - 6) == "redelayed"
    assert [p["DelaySeconds"] for p in sent] == [60, 1]
    assert handle(due_ms - 5) == "fired"
    assert handle(due_ms) == "fired"
    assert handle(due_ms + 1_000) == "fired"
    assert timers == [(invocation_id, due_ms)] * 3


def test_wait_longer_than_900_s_without_a_scheduler_client_hops_through_sqs(sqs: Any, queue: Queue) -> None:
    # GIVEN a scheduler without EventBridge Scheduler
    clock = FixedClock(JAN_1_2030_MS)
    scheduler = SqsScheduler(sqs, queue.url, clock=clock)
    sent = record_sends(sqs)
    due_ms = JAN_1_2030_MS + HOUR_MS

    # WHEN an hour's wait is armed, and each hop is handled as it arrives
    scheduler.wake_at("inv_long", due_ms)
    outcomes: list[str] = []
    for hop_ms in (900_000, 1_800_000, 2_700_000):
        outcomes.append(
            handle_wake_message(
                sent[-1]["MessageBody"],
                wake=never,
                scheduler=scheduler,
                now_ms=JAN_1_2030_MS + hop_ms,
            )
        )

    # THEN it travels in 900 s steps, the last one exactly the remainder, and never early
    assert outcomes == ["redelayed"] * 3
    assert [p["DelaySeconds"] for p in sent] == [900, 900, 900, 900]
    advanced: list[str] = []
    last = sent[-1]["MessageBody"]
    assert handle_wake_message(last, wake=ids_into(advanced), scheduler=scheduler, now_ms=due_ms) == ("fired")
    assert advanced == ["inv_long"]


# --- (c) duplicates are harmless -----------------------------------------------------------------


def test_the_same_message_delivered_twice_advances_twice_and_nothing_else(sqs: Any, queue: Queue) -> None:
    # GIVEN the same wake-up body on the queue twice (SQS delivers at least once)
    scheduler = SqsScheduler(sqs, queue.url)
    invocation_id = new_id()
    scheduler.wake_now(invocation_id)
    scheduler.wake_now(invocation_id)
    advanced: list[str] = []

    def handle(body: str) -> str:
        return handle_wake_message(body, wake=ids_into(advanced), scheduler=scheduler, now_ms=wall_ms())

    # WHEN the worker drains the queue (deadline 10 s)
    handled = 0
    deadline = time.monotonic() + 10
    while handled < 2 and time.monotonic() < deadline:
        handled += drain(sqs, queue.url, handle, wait_s=0)

    # THEN each delivery advanced once, without error, and both messages are gone
    assert handled == 2
    assert advanced == [invocation_id, invocation_id]
    assert counts(sqs, queue) == (0, 0, 0)


# --- (d) malformed bodies are dropped, never raised ----------------------------------------------


@pytest.mark.parametrize(
    "body",
    [
        "",
        "not json",
        "{",
        "[]",
        "null",
        '"inv_1"',
        "{}",
        '{"due_ms": 0}',
        '{"invocation_id": "inv_1x"}',
        '{"invocation_id": "", "due_ms": 0}',
        '{"invocation_id": 7, "due_ms": 0}',
        '{"invocation_id": "inv_1x", "due_ms": "soon"}',
        '{"invocation_id": "inv_1x", "due_ms": -1}',
        '{"invocation_id": "inv_1x", "due_ms": 1.5}',
        '{"invocation_id": "inv_1x", "due_ms": true}',
        '{"invocation_id": "inv_1x", "due_ms": null}',
    ],
)
def test_malformed_bodies_are_dropped(sqs: Any, queue: Queue, body: str, caplog: pytest.LogCaptureFixture) -> None:
    scheduler = SqsScheduler(sqs, queue.url)

    outcome = handle_wake_message(body, wake=never, scheduler=scheduler, now_ms=wall_ms())

    assert outcome == "dropped"
    assert counts(sqs, queue) == (0, 0, 0)  # nothing re-armed
    assert any("malformed wake-up message" in record.getMessage() for record in caplog.records)


def test_a_malformed_message_is_deleted_not_left_to_poison_the_queue(sqs: Any, queue: Queue) -> None:
    # GIVEN a malformed message on the queue
    scheduler = SqsScheduler(sqs, queue.url)
    sqs.send_message(QueueUrl=queue.url, MessageBody="garbage")
    outcomes: list[str] = []

    def handle(body: str) -> str:
        outcome = handle_wake_message(body, wake=never, scheduler=scheduler, now_ms=wall_ms())
        outcomes.append(outcome)
        return outcome

    # WHEN the worker drains it
    handled = drain(sqs, queue.url, handle, wait_s=1)

    # THEN it was handled as dropped and deleted
    assert (handled, outcomes) == (1, ["dropped"])
    assert counts(sqs, queue) == (0, 0, 0)


def test_drain_leaves_a_message_whose_handling_raised_on_the_queue(sqs: Any, queue: Queue) -> None:
    # GIVEN two wake-ups, the first of which fails to advance
    sqs.send_message(QueueUrl=queue.url, MessageBody='{"invocation_id": "inv_fails", "due_ms": 0}')
    sqs.send_message(QueueUrl=queue.url, MessageBody='{"invocation_id": "inv_works", "due_ms": 0}')

    def handle(body: str) -> str:
        if "inv_fails" in body:
            raise RuntimeError("store throttled")
        return "fired"

    # WHEN the worker drains both (one batch, or two if moto splits it; deadline 10 s)
    handled = 0
    deadline = time.monotonic() + 10
    while counts(sqs, queue)[0] and time.monotonic() < deadline:
        handled += drain(sqs, queue.url, handle, wait_s=0)

    # THEN only the handled one was deleted; the failed one waits for redelivery
    assert handled == 1
    assert counts(sqs, queue) == (0, 1, 0)


# --- (e) wake_now is visible at once -------------------------------------------------------------


def test_wake_now_is_receivable_immediately(sqs: Any, queue: Queue) -> None:
    scheduler = SqsScheduler(sqs, queue.url)
    invocation_id = new_id()

    scheduler.wake_now(invocation_id)
    messages = receive_now(sqs, queue)

    assert len(messages) == 1
    body = messages[0]["Body"]
    assert json.loads(body) == {"invocation_id": invocation_id, "due_ms": 0}
    woken: list[Wake] = []
    # due_ms 0 is not a timer: a wake-up now, with no due times
    assert handle_wake_message(body, wake=woken.append, scheduler=scheduler, now_ms=0) == "fired"
    assert woken == [Wake(invocation_id)]


def test_wake_at_a_past_due_time_is_receivable_immediately_and_fires_the_timer(sqs: Any, queue: Queue) -> None:
    scheduler = SqsScheduler(sqs, queue.url)
    invocation_id = new_id()
    due_ms = wall_ms() - 5_000

    scheduler.wake_at(invocation_id, due_ms)
    messages = receive_now(sqs, queue)

    assert len(messages) == 1
    timers: list[tuple[str, int]] = []
    outcome = handle_wake_message(
        messages[0]["Body"],
        wake=lambda w: timers.append((w.invocation_id, *w.dues)),
        scheduler=scheduler,
        now_ms=wall_ms(),
    )
    assert outcome == "fired"
    assert timers == [(invocation_id, due_ms)]


# --- (f) schedules are idempotent, and deleting one is best effort ------------------------------


def test_creating_the_same_schedule_twice_keeps_one_and_delete_is_best_effort(
    sqs: Any, scheduler_client: Any, queue: Queue
) -> None:
    # GIVEN a scheduler with EventBridge Scheduler and its queue ARN
    scheduler = SqsScheduler(
        sqs,
        queue.url,
        scheduler_client=scheduler_client,
        schedule_target_role_arn=ROLE_ARN,
        queue_arn=queue.arn,
    )
    invocation_id = new_id()
    due_ms = wall_ms() + 2 * HOUR_MS
    name = schedule_name(invocation_id, due_ms)

    # WHEN the same wake-up is armed twice
    scheduler.wake_at(invocation_id, due_ms)
    scheduler.wake_at(invocation_id, due_ms)

    # THEN there is one schedule of that name, without a dead-letter queue (none was configured)
    listed = scheduler_client.list_schedules(NamePrefix=name)["Schedules"]
    assert [entry["Name"] for entry in listed] == [name]
    target = scheduler_client.get_schedule(Name=name)["Target"]
    assert "DeadLetterConfig" not in target
    assert counts(sqs, queue) == (0, 0, 0)

    # AND deleting it works once; a second delete (already gone) is not an error
    assert scheduler.delete_schedule(invocation_id, due_ms) is True
    assert scheduler.delete_schedule(invocation_id, due_ms) is False
    with pytest.raises(ClientError) as missing:
        scheduler_client.get_schedule(Name=name)
    assert missing.value.response["Error"]["Code"] == "ResourceNotFoundException"


def test_other_schedule_errors_are_not_swallowed(sqs: Any, scheduler_client: Any, queue: Queue) -> None:
    # GIVEN a scheduler pointed at a schedule group that does not exist
    scheduler = SqsScheduler(
        sqs,
        queue.url,
        scheduler_client=scheduler_client,
        schedule_target_role_arn=ROLE_ARN,
        queue_arn=queue.arn,
        schedule_group=f"missing-{uuid.uuid4().hex[:8]}",
    )

    # WHEN a long wait is armed THEN the error reaches the caller (only a conflict means "armed").
    # AWS answers ResourceNotFoundException; moto 5.2.5 fails with a KeyError, answered as a 500.
    with pytest.raises(ClientError) as failed:
        scheduler.wake_at(new_id(), wall_ms() + HOUR_MS)
    assert failed.value.response["Error"]["Code"] != "ConflictException"


# --- names and configuration ---------------------------------------------------------------------


def test_schedule_names_are_valid_and_deterministic_for_any_id() -> None:
    odd = "order/42:" + "x" * 80
    name = schedule_name(odd, 1_893_459_600_000)

    assert name == schedule_name(odd, 1_893_459_600_000)
    assert name != schedule_name(odd + "y", 1_893_459_600_000)
    assert len(name) <= 64
    assert set(name) <= set("0123456789abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ-_.")
    assert name.startswith("torpor-")
    assert name.endswith("-1893459600000")


def test_configuration_errors_name_the_fix(sqs: Any, scheduler_client: Any, queue: Queue) -> None:
    with pytest.raises(ValueError, match="schedule_target_role_arn"):
        SqsScheduler(sqs, queue.url, scheduler_client=scheduler_client)
    with pytest.raises(ValueError, match="lead_ms must be between 0 and 840000 ms, got 900000"):
        SqsScheduler(sqs, queue.url, lead_ms=900_000)
    with pytest.raises(ValueError, match="max_messages"):
        drain(sqs, queue.url, str, max_messages=11)


def test_with_a_timer_queue_timers_go_there_and_wake_ups_now_to_the_wake_queue(
    sqs: Any, scheduler_client: Any, new_queue: Callable[[], Queue]
) -> None:
    # GIVEN a scheduler with a wake queue and a timer queue (its ARN looked up), and EventBridge Scheduler
    wake_queue, timer_queue = new_queue(), new_queue()
    now = wall_ms()
    scheduler = SqsScheduler(
        sqs,
        wake_queue.url,
        timer_queue_url=timer_queue.url,
        scheduler_client=scheduler_client,
        schedule_target_role_arn=ROLE_ARN,
        clock=FixedClock(now),
    )
    started, sleeping, overdue, far = new_id(), new_id(), new_id(), new_id()

    # WHEN a start is woken now, a timer armed 30 s ahead, an overdue timer re-armed, one an hour ahead
    scheduler.wake_now(started)
    scheduler.wake_at(sleeping, now + 30_000)
    scheduler.wake_at(overdue, now - 5_000)
    scheduler.wake_at(far, now + HOUR_MS)

    # THEN only the start is on the wake queue; both SQS timers are on the timer queue
    assert [json.loads(m["Body"])["invocation_id"] for m in receive_now(sqs, wake_queue)] == [started]
    assert counts(sqs, timer_queue) == (1, 0, 1)
    assert [json.loads(m["Body"])["invocation_id"] for m in receive_now(sqs, timer_queue)] == [overdue]
    # AND the hour-long wait's schedule lands on the timer queue
    schedule = scheduler_client.get_schedule(Name=schedule_name(far, now + HOUR_MS), GroupName="default")
    assert schedule["Target"]["Arn"] == timer_queue.arn
    assert scheduler.queue_arn() == timer_queue.arn

    # AND a timer body that came early is re-delayed onto the timer queue, not the wake queue
    body = json.dumps({"invocation_id": sleeping, "due_ms": now + 30_000})
    assert handle_wake_message(body, wake=lambda w: None, scheduler=scheduler, now_ms=now) == "redelayed"
    assert counts(sqs, timer_queue)[2] == 2
    assert counts(sqs, wake_queue) == (0, 1, 0)  # the start only, received above
