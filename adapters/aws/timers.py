"""`Scheduler` on AWS: wake-ups are SQS messages or asynchronous invokes of the worker, long waits
go through EventBridge Scheduler.

Every wake-up ends as one message, body `{"invocation_id": ..., "due_ms": ...}` (JSON; `due_ms` in
ms since the UNIX epoch, 0 for "now"), on one of two queues that both feed the worker: the wake
queue takes `wake_now` (a new invocation's first attempt, a hand-over, a completion to deliver),
the timer queue takes every `wake_at` (sleeps, retries' back-offs, delayed invocations, schedules'
ticks, the re-delays below). Each queue has its own event source mapping and concurrency, so a
timer that falls due never waits behind a burst of starts sent before it (SQS hands out a standard
queue's messages roughly in the order they became visible). Without a timer queue
(`timer_queue_url` None) both kinds share the wake queue. The worker (a Lambda fed by SQS batches,
or `drain` in tests and a local poller) hands each body to `handle_wake_message`, which delivers it
as one `Wake` to the core's one wake entry (`ControlPlane.wake`) once the due time has come.

How a wake-up gets onto a queue:

- `wake_now(id)`: SendMessage to the wake queue, no delay; or, with a Lambda client (`TORPOR_WAKE`
  `invoke`), an asynchronous `Invoke` (`InvocationType` `Event`) of the worker function whose event
  is the same body: one Lambda request instead of SQS's send, receive and delete (see "Wake-ups
  now: SQS or Invoke" below).
- `wake_at(id, due_ms)` with at most 900 s to wait (SQS's largest `DelaySeconds`): SendMessage to the
  timer queue with
  `DelaySeconds = ceil((remaining ms - hold_ms) / 1000)`: with `hold_ms` 0 the message never becomes
  visible before the due time (but up to 1 s after it); with `hold_ms` 1,000 it becomes visible up
  to 1 s before, and the worker holds it until the due time.
- a longer wait: an EventBridge Scheduler one-time schedule, `at(...)` `lead_ms` before the due time,
  whose target sends the same body to the timer queue (with a Lambda client: invokes the worker
  with it, no queue in between); it deletes itself after it ran.
- a longer wait without a Scheduler client: a 900 s SendMessage; each time the message arrives
  early, `handle_wake_message` re-delays the remainder (one message per 15 minutes of waiting).

Nothing fires early: whatever delivers a body before its `due_ms` (a schedule that lands `lead_ms`
ahead, a relayed hop, a clock that runs slightly ahead), `handle_wake_message` re-delays it, or holds
it until due if it is at most `hold_ms` early.

Duplicates are harmless by construction: SQS delivers at least once, a schedule created twice is one
schedule, and a wake-up that runs twice just calls `advance` twice, which is idempotent (a second
run finds the lease held, or nothing new to do). A lost wake-up is repaired by the sweep over the
stored timer records (see ARCHITECTURE.md, "Who calls advance").

The queue must be a standard queue: FIFO queues ignore per-message `DelaySeconds`.

Wake-ups now: SQS or Invoke. Per wake-up, SQS costs a SendMessage ($0.40 per million) and its
share of the event source mapping's ReceiveMessage and DeleteMessageBatch and of the worker's
invocation ($1.00 per million per batch: $1.40 for a wake-up alone, $0.50 in a full batch of 10);
an asynchronous Invoke costs one Lambda request ($0.20 per million), the worker's invocation
itself. Requests are always cheaper with Invoke; what SQS's batches save is billed time: a batch's
wake-ups run at once, so a full batch is billed about as long as its slowest wake-up, where 10
Invokes are billed 10 times (at 512 MB, 100 ms of a wake-up costs $0.67 per million). So Invoke is
the cheaper one unless the worker mostly receives full batches of long wake-ups (sustained load).
What bounds the worker's concurrency: with SQS the event source mapping's `MaximumConcurrency`;
with Invoke the worker's reserved concurrency (Lambda keeps the events past it and retries
throttled ones for up to 6 hours). A lost Invoke (Lambda gave up after its 2 retries, or the call
itself failed after the state change was stored) loses no invocation: it stays `ready` (or
`suspended` with its doorbell rung) in the store, and the sweep wakes those
(`ControlPlane.sweep_due`), as for a lost message.
"""

from __future__ import annotations

import hashlib
import json
import logging
import math
import re
import time
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any, Literal

from botocore.exceptions import ClientError

from adapters.aws.client_errors import error_code
from control_plane.observability import record
from control_plane.ports import MAX_TIMER_MS, Clock, SystemClock
from control_plane.schedules import schedule_wake_id
from control_plane.timers import Wake

log = logging.getLogger("torpor.timers")

__all__ = [
    "MAX_SQS_DELAY_S",
    "SqsScheduler",
    "WakeOutcome",
    "drain",
    "handle_wake_message",
    "schedule_name",
    "wake_body",
]

MAX_SQS_DELAY_S = 900
"""SQS's largest per-message `DelaySeconds` (15 minutes)."""

MAX_LEAD_MS = 840_000
"""Largest `lead_ms`: a schedule must land with at most 900 s left, so the re-delay goes by SQS."""

EARLY_TOLERANCE_MS = 5
"""A body that arrives at most this many ms before its due time fires (re-delaying would cost more)."""

MAX_HOLD_MS = 1000
"""Largest `hold_ms`: SQS delays are whole seconds, so a wake-up need never come more than 1 s early."""

SCHEDULE_RETRY_POLICY = {"MaximumEventAgeInSeconds": 86_400, "MaximumRetryAttempts": 185}
"""EventBridge Scheduler's largest retry window (24 h, 185 attempts): a wake-up is worth retrying for
as long as the service allows; what still fails goes to the dead-letter queue, and the sweep re-arms it."""

_NAME_OK = re.compile(r"[0-9A-Za-z_.-]{1,64}")

WakeOutcome = Literal["fired", "redelayed", "dropped"]
"""What `handle_wake_message` did with a body; every outcome means the message may be deleted."""


def wake_body(invocation_id: str, due_ms: int) -> str:
    """The JSON body of a wake-up message (and of a schedule's target `Input`).

    Args:
        invocation_id: The invocation to advance.
        due_ms: When, in ms since the UNIX epoch; 0 for "now".
    """
    return json.dumps({"invocation_id": invocation_id, "due_ms": due_ms}, separators=(",", ":"))


def schedule_name(invocation_id: str, due_ms: int) -> str:
    """The EventBridge schedule name of one timer: deterministic, ≤ 64 characters of `[0-9A-Za-z_.-]`.

    `torpor-{invocation_id}-{due_ms}` when that is a valid name (always, for `inv_1…` ids: 59
    characters, 48 for an id of an earlier Torpor); otherwise the id is replaced by the first 32 hex
    digits of its SHA-256.

    Args:
        invocation_id: The invocation the timer wakes.
        due_ms: The timer's due time, ms since the UNIX epoch.
    """
    name = f"torpor-{invocation_id}-{due_ms}"
    if _NAME_OK.fullmatch(name):
        return name
    digest = hashlib.sha256(invocation_id.encode()).hexdigest()[:32]
    return f"torpor-{digest}-{due_ms}"


def _at_expression(fire_ms: int) -> str:
    """`at(yyyy-mm-ddThh:mm:ss)` in UTC, rounded down to the second (so never later than `fire_ms`)."""
    moment = datetime.fromtimestamp(fire_ms // 1000, tz=UTC)
    return f"at({moment.strftime('%Y-%m-%dT%H:%M:%S')})"


class SqsScheduler:
    """`control_plane.ports.Scheduler` on SQS delays and EventBridge Scheduler one-time schedules.

    Args:
        sqs_client: A ready boto3 SQS client.
        queue_url: URL of the worker's standard wake queue (`wake_now`).
        timer_queue_url: URL of the worker's standard timer queue (`wake_at`, the schedules'
            target), fed to the worker by an event source mapping of its own; None: timers go to
            `queue_url` too.
        scheduler_client: A ready boto3 EventBridge Scheduler (`scheduler`) client, for waits over
            900 s. Without it, long waits hop through SQS in 900 s steps.
        schedule_target_role_arn: The IAM role EventBridge Scheduler assumes to send to the queue
            (needs `sqs:SendMessage` on it). Required with `scheduler_client`.
        queue_arn: ARN of the timer queue (of the wake queue without one), the schedules' target.
            Looked up once (GetQueueAttributes) when first needed if not given.
        dead_letter_arn: ARN of an SQS queue for wake-ups a schedule could not deliver, or None.
        schedule_group: EventBridge Scheduler group the schedules go in (must exist).
        lead_ms: How long before the due time a schedule lands, in ms (0 to 840,000); the worker
            re-delays the rest through SQS, which has second precision.
        hold_ms: How early (0 to 1,000 ms) a message up to 900 s ahead may arrive: its `DelaySeconds`
            is rounded up from the remaining time less `hold_ms`, and the worker holds a body that
            arrives at most `hold_ms` early until it is due (`handle_wake_message`). 0: rounded up
            from the remaining time, so a wake-up arrives up to 1 s late (SQS delays are whole
            seconds); 1,000: on time, for up to 1 s of the worker's time per batch.
        clock: Wall clock, ms since the UNIX epoch; the system clock if None.
        lambda_client: A ready boto3 Lambda client: `wake_now` invokes `wake_function_arn`
            asynchronously instead of sending to `queue_url`, and schedules target that function
            instead of the timer queue (`schedule_target_role_arn` then needs
            `lambda:InvokeFunction` on it). None: SQS for both.
        wake_function_arn: The worker function's ARN (or name for `wake_now`; schedules need the
            ARN), with `lambda_client`. May be set later (`wake_function_arn` attribute: the worker
            learns its own from its Lambda context); a wake-up before then raises RuntimeError.

    Raises:
        ValueError: `scheduler_client` without `schedule_target_role_arn`, `lead_ms` or `hold_ms`
            out of range.
    """

    def __init__(
        self,
        sqs_client: Any,
        queue_url: str,
        *,
        timer_queue_url: str | None = None,
        scheduler_client: Any = None,
        schedule_target_role_arn: str | None = None,
        queue_arn: str | None = None,
        dead_letter_arn: str | None = None,
        schedule_group: str = "default",
        lead_ms: int = 60_000,
        hold_ms: int = 0,
        clock: Clock | None = None,
        lambda_client: Any = None,
        wake_function_arn: str | None = None,
    ) -> None:
        if scheduler_client is not None and not schedule_target_role_arn:
            raise ValueError("scheduler_client needs schedule_target_role_arn: the role the schedules send with")
        if not 0 <= lead_ms <= MAX_LEAD_MS:
            raise ValueError(f"lead_ms must be between 0 and {MAX_LEAD_MS} ms, got {lead_ms}")
        if not 0 <= hold_ms <= MAX_HOLD_MS:
            raise ValueError(f"hold_ms must be between 0 and {MAX_HOLD_MS} ms, got {hold_ms}")
        self.hold_ms = hold_ms
        self._sqs = sqs_client
        self._queue_url = queue_url
        self._timer_queue_url = timer_queue_url or queue_url
        self._scheduler = scheduler_client
        self._role_arn = schedule_target_role_arn
        self._queue_arn = queue_arn
        self._dead_letter_arn = dead_letter_arn
        self._group = schedule_group
        self._lead_ms = lead_ms
        self._clock: Clock = clock or SystemClock()
        self._lambda = lambda_client
        self.wake_function_arn = wake_function_arn
        """The worker function `wake_now` invokes and schedules target (with a Lambda client)."""

    @property
    def invokes(self) -> bool:
        """True if wake-ups now are asynchronous invokes of the worker (a Lambda client was given)."""
        return self._lambda is not None

    def _wake_function(self) -> str:
        if not self.wake_function_arn:
            raise RuntimeError(
                "TORPOR_WAKE is invoke but no worker function is known: set TORPOR_WAKE_FUNCTION to its ARN"
            )
        return self.wake_function_arn

    # --- the Scheduler port ----------------------------------------------------------------------

    def wake_now(self, invocation_id: str) -> None:
        """Send a wake-up that is visible at once (body `due_ms` 0) to the wake queue, or, with a
        Lambda client, invoke the worker with it asynchronously (`InvocationType` `Event`: Lambda
        queues the event, answers 202, and retries a failed run twice).

        Args:
            invocation_id: The invocation to advance.

        Raises:
            RuntimeError: Invoke mode without a known worker function.
            botocore.exceptions.ClientError: The send or the Invoke was refused (throttled, denied);
                the invocation stays `ready` and the sweep wakes it.
        """
        body = wake_body(invocation_id, 0)
        if self._lambda is None:
            self._send(self._queue_url, body, 0)
            return
        record("lambda WakeInvoke")  # the worker's invocation: priced as one Lambda request (http_api.prices)
        self._lambda.invoke(FunctionName=self._wake_function(), InvocationType="Event", Payload=body.encode())

    def wake_at(self, invocation_id: str, due_ms: int, *, now_ms: int | None = None) -> None:
        """Arrange a wake-up that reaches the worker no earlier than `due_ms` (as far as it decides).

        Up to 900 s ahead: a message on the timer queue delayed by the remaining time less `hold_ms`, rounded up to
        the second (a due time in the past: no delay). Further: a one-time schedule `lead_ms` before `due_ms`
        (or, without a Scheduler client, a 900 s message that the worker re-delays). Idempotent:
        the same `(invocation_id, due_ms)` twice makes one schedule, or two harmless messages.

        Args:
            invocation_id: The invocation to advance.
            due_ms: When, in ms since the UNIX epoch.
            now_ms: The current time in ms since the UNIX epoch; the clock's if None. The worker
                passes the time it decided by, so the remainder it re-delays is the one it computed.
        """
        now = self._clock.now_ms() if now_ms is None else now_ms
        remaining_ms = due_ms - now
        body = wake_body(invocation_id, due_ms)
        if remaining_ms <= MAX_SQS_DELAY_S * 1000:
            self._send(self._timer_queue_url, body, max(0, math.ceil((remaining_ms - self.hold_ms) / 1000)))
        elif self._scheduler is None:
            self._send(self._timer_queue_url, body, MAX_SQS_DELAY_S)
        else:
            self._create_schedule(invocation_id, due_ms, body)

    # --- schedules -------------------------------------------------------------------------------

    def delete_schedule(self, invocation_id: str, due_ms: int) -> bool:
        """Delete the schedule of one timer, best effort (for a killed invocation).

        A schedule that is gone already (it fired, or never existed) is fine; any other error is
        logged and swallowed: a schedule left behind only wakes an invocation that has nothing to do.

        Args:
            invocation_id: The invocation the timer wakes.
            due_ms: The timer's due time, ms since the UNIX epoch.

        Returns:
            True if a schedule was deleted.
        """
        if self._scheduler is None:
            return False
        name = schedule_name(invocation_id, due_ms)
        try:
            self._scheduler.delete_schedule(Name=name, GroupName=self._group)
        except ClientError as exc:
            if error_code(exc) != "ResourceNotFoundException":
                log.warning("could not delete schedule %s of %s: %s", name, invocation_id, exc)
            return False
        return True

    def _create_schedule(self, invocation_id: str, due_ms: int, body: str) -> None:
        target: dict[str, Any] = {
            "Arn": self._target_arn(),
            "RoleArn": self._role_arn,
            "Input": body,
            "RetryPolicy": dict(SCHEDULE_RETRY_POLICY),
        }
        if self._dead_letter_arn:
            target["DeadLetterConfig"] = {"Arn": self._dead_letter_arn}
        name = schedule_name(invocation_id, due_ms)
        try:
            record("scheduler CreateSchedule")
            self._scheduler.create_schedule(
                Name=name,
                GroupName=self._group,
                ScheduleExpression=_at_expression(due_ms - self._lead_ms),
                ScheduleExpressionTimezone="UTC",
                FlexibleTimeWindow={"Mode": "OFF"},
                ActionAfterCompletion="DELETE",
                State="ENABLED",
                Target=target,
            )
        except ClientError as exc:
            if error_code(exc) != "ConflictException":
                raise
            log.debug("schedule %s exists already; the wake-up is armed", name)

    def queue_arn(self) -> str:
        """The ARN schedules send to: the worker function's with a Lambda client; else the timer
        queue's (the wake queue's without one), looked up once with GetQueueAttributes if it was not given."""
        return self._target_arn()

    def _target_arn(self) -> str:
        if self._lambda is not None:
            return self._wake_function()
        if self._queue_arn is None:
            reply = self._sqs.get_queue_attributes(QueueUrl=self._timer_queue_url, AttributeNames=["QueueArn"])
            self._queue_arn = str(reply["Attributes"]["QueueArn"])
        return self._queue_arn

    def _send(self, queue_url: str, body: str, delay_s: int) -> None:
        # DelaySeconds always given, so a queue-level default delay never adds to ours.
        record("sqs SendMessage")
        self._sqs.send_message(QueueUrl=queue_url, MessageBody=body, DelaySeconds=delay_s)


def _parse(body: str) -> tuple[str, int] | None:
    """`(invocation_id, due_ms)` of a wake-up body, or None if it is not one (`due_ms` not an int in
    0..`MAX_TIMER_MS`, the latest due time the core arms)."""
    try:
        data = json.loads(body)
    except (TypeError, ValueError):
        return None
    if not isinstance(data, dict):
        return None
    invocation_id = data.get("invocation_id")
    due_ms = data.get("due_ms")
    if not isinstance(invocation_id, str) or not invocation_id:
        return None
    if not isinstance(due_ms, int) or isinstance(due_ms, bool) or not 0 <= due_ms <= MAX_TIMER_MS:
        return None  # past `MAX_TIMER_MS` no timer was armed: re-delaying it overflowed the schedule's date
    return invocation_id, due_ms


def _parse_tick(body: str) -> tuple[str, int] | None:
    """`(schedule name, scheduled time in ms or 0)` of a schedule's tick body
    (`{"schedule": name, "scheduled_time": RFC 3339}`, `adapters.aws.schedules.tick_input`), or None.

    Raises:
        Nothing: a body that is not a tick's (not JSON, not an object, no name) gives None, and a
            `scheduled_time` that is missing, not RFC 3339 or without an offset (a placeholder
            EventBridge did not fill) gives 0, the tick due now; the caller drops or runs it.
    """
    try:
        data = json.loads(body)
    except (TypeError, ValueError):
        return None
    if not isinstance(data, dict) or not isinstance(data.get("schedule"), str) or not data["schedule"]:
        return None
    scheduled_ms = 0
    scheduled = data.get("scheduled_time")
    if isinstance(scheduled, str):
        try:
            moment = datetime.fromisoformat(scheduled.replace("Z", "+00:00"))
            if moment.tzinfo is not None:
                scheduled_ms = int(moment.timestamp() * 1000)
        except ValueError:
            pass  # no time (a placeholder EventBridge did not fill): the tick due now
    return data["schedule"], scheduled_ms


def handle_wake_message(
    body: str,
    *,
    wake: Callable[[Wake], object],
    scheduler: SqsScheduler,
    now_ms: int,
    sleep: Callable[[float], object] = time.sleep,
) -> WakeOutcome:
    """Act on one wake-up body: deliver it if it is due, else put it back on the queue for the rest.

    A body before its due time (by more than 5 ms and more than `scheduler.hold_ms`) is re-delayed
    with `scheduler.wake_at`: that is how a schedule landing `lead_ms` early, or a long wait hopping
    through SQS, never fires early. One at most `hold_ms` early is held (`sleep`) until due, then fired.
    A due body calls `wake(Wake.at(id, due_ms))` (no due times for `due_ms` 0: a wake-up now); a
    schedule's tick body (EventBridge Scheduler's, `{"schedule", "scheduled_time"}`) calls
    `wake(Wake.at(schedule_wake_id(name), scheduled ms or 0))`, which `ControlPlane.wake` turns
    into `Schedules.tick`.

    Delivering the same body twice is harmless by construction: it calls `wake` twice, which is
    idempotent; nothing here deduplicates.

    Args:
        body: The message body, `{"invocation_id": str, "due_ms": int}` as JSON, or a tick's.
        wake: The one wake entry (`ControlPlane.wake`).
        scheduler: Where a body that came early goes back to.
        now_ms: The current time, ms since the UNIX epoch.
        sleep: Waits that many seconds: a body at most `scheduler.hold_ms` early is held until its
            due time, then fired (the scheduler sent it that early on purpose, see `SqsScheduler`).

    Returns:
        `"fired"`, `"redelayed"`, or `"dropped"` for a body that is not a wake-up (logged; raising
        would only make the queue deliver it again until it lands in the dead-letter queue). In
        every case the message may be deleted.

    Raises:
        Exception: Whatever `wake` or the re-delay raised, so the message stays on the queue and
            is delivered again.
    """
    parsed = _parse(body)
    tick = _parse_tick(body) if parsed is None else None
    if tick is not None:
        name, scheduled_ms = tick
        wake(Wake.at(schedule_wake_id(name), scheduled_ms))
        return "fired"
    if parsed is None:
        log.error("dropped a malformed wake-up message: %.200r", body)
        return "dropped"
    invocation_id, due_ms = parsed
    if due_ms > now_ms + max(EARLY_TOLERANCE_MS, scheduler.hold_ms):
        scheduler.wake_at(invocation_id, due_ms, now_ms=now_ms)
        return "redelayed"
    if due_ms > now_ms + EARLY_TOLERANCE_MS:  # sent early on purpose (`hold_ms`): hold it until due
        sleep((due_ms - now_ms) / 1000)
    wake(Wake.at(invocation_id, due_ms))
    return "fired"


def drain(
    sqs_client: Any,
    queue_url: str,
    handle: Callable[[str], str],
    *,
    max_messages: int = 10,
    wait_s: int = 1,
) -> int:
    """Receive one batch from the queue, hand each body to `handle`, delete the handled messages.

    A message whose `handle` raised is logged and left on the queue: it becomes visible again after
    the queue's visibility timeout (and moves to the dead-letter queue after the redrive limit), as
    with a Lambda's partial batch failure. For tests and a local poller; the worker Lambda gets
    SQS event batches instead.

    Args:
        sqs_client: A ready boto3 SQS client.
        queue_url: The queue to read.
        handle: Called with each message body, e.g. a `handle_wake_message` with its arguments bound.
        max_messages: Most messages to receive (1 to 10).
        wait_s: Long-poll time in seconds (0 to 20) if the queue is empty.

    Returns:
        How many messages were handled and deleted.

    Raises:
        ValueError: `max_messages` or `wait_s` out of range.
    """
    if not 1 <= max_messages <= 10:
        raise ValueError(f"max_messages must be between 1 and 10, got {max_messages}")
    if not 0 <= wait_s <= 20:
        raise ValueError(f"wait_s must be between 0 and 20 s, got {wait_s}")
    reply = sqs_client.receive_message(QueueUrl=queue_url, MaxNumberOfMessages=max_messages, WaitTimeSeconds=wait_s)
    handled: list[dict[str, str]] = []
    for index, message in enumerate(reply.get("Messages", [])):
        try:
            handle(message["Body"])
        except Exception:  # one failing message must not stop the batch; it stays queued and is retried
            log.exception("wake-up message %s failed; left on the queue", message.get("MessageId"))
            continue
        handled.append({"Id": str(index), "ReceiptHandle": message["ReceiptHandle"]})
    if not handled:
        return 0
    result = sqs_client.delete_message_batch(QueueUrl=queue_url, Entries=handled)
    for failure in result.get("Failed", []):
        log.warning("could not delete a handled wake-up message: %s", failure)
    return len(handled) - len(result.get("Failed", []))
