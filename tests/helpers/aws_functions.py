"""Drive the control plane's Lambda functions on this machine, as API Gateway and SQS would.

`LocalFunctions` sends synthetic API Gateway HTTP API (payload 2.0) events to the ingress and admin
handlers of `adapters.aws.lambda_app`, and runs its worker handler on batches received from the wake
queue, deleting the messages the worker did not report as failed (what the Lambda event source
mapping does), and on the asynchronous invokes of the worker (`TORPOR_WAKE=invoke`) the local Lambda
emulator holds for it (`--hold`), retrying one that raised twice, as Lambda does. With DynamoDB and
SQS on a moto server and handlers on the local Lambda emulator,
that is the whole AWS wiring without an AWS account (tests and `bench.aws_requests` use it; test-only:
no function of Torpor runs it).
The environment of `adapters.aws.lambda_app.build_control_plane` must be set first.
"""

from __future__ import annotations

import base64
import json
import os
import threading
import time
import uuid
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

from adapters.aws import lambda_app


@contextmanager
def lambda_environment(env: Mapping[str, str]) -> Iterator[None]:
    """Set `env` in `os.environ` for `adapters.aws.lambda_app.build_control_plane` while the block runs,
    its control planes built afresh (`lambda_app.reset`) on entry and dropped on exit, and every
    variable put back as it was (removed if it was unset)."""
    saved = {name: os.environ.get(name) for name in env}
    os.environ.update(env)
    lambda_app.reset()
    try:
        yield
    finally:
        lambda_app.reset()
        for name, value in saved.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value


@dataclass
class Context:
    """The parts of a Lambda context that powertools reads (a stand-in for the real one)."""

    function_name: str = "torpor-test"
    function_version: str = "$LATEST"
    invoked_function_arn: str = "arn:aws:lambda:us-east-1:123456789012:function:torpor-test"
    memory_limit_in_mb: int = 512
    aws_request_id: str = "req"
    log_group_name: str = "/aws/lambda/torpor-test"
    log_stream_name: str = "stream"

    def get_remaining_time_in_millis(self) -> int:
        return 30_000


def iam_authorizer(access_key: str = "AKIAEXAMPLE", account: str = "123456789012", user: str = "caller") -> dict:
    """`requestContext.authorizer` of an HTTP API event whose route API Gateway authorized by SigV4 (AWS_IAM)."""
    return {
        "iam": {
            "accessKey": access_key,
            "accountId": account,
            "callerId": f"AIDAEXAMPLE:{user}",
            "principalOrgId": None,
            "userArn": f"arn:aws:iam::{account}:user/{user}",
            "userId": "AIDAEXAMPLE",
            "cognitoIdentity": None,
        }
    }


def jwt_authorizer(claims: dict[str, Any], scopes: list[str] | None = None) -> dict:
    """`requestContext.authorizer` of an HTTP API event whose JWT authorizer accepted a token with `claims`."""
    return {"jwt": {"claims": claims, "scopes": scopes}}


WORKER_NAME = "torpor-worker"
"""The worker function's name in the harness: `TORPOR_WAKE_FUNCTION` (`WORKER_ARN`) with `TORPOR_WAKE=invoke`,
held by the Lambda emulator (`LambdaEmulatorProcess(hold=[WORKER_NAME])`)."""

WORKER_ARN = f"arn:aws:lambda:us-east-1:123456789012:function:{WORKER_NAME}"

ASYNC_RETRIES = 2
"""Lambda's retries of an asynchronous event whose run raised (its default `MaximumRetryAttempts`)."""


@dataclass
class LocalFunctions:
    """The control plane's functions wired to a wake queue and, if given, a timer queue (`sqs` is a
    boto3 SQS client): the worker is fed by both, as by the stack's two event source mappings, and,
    with `invokes` (a function taking the worker's held asynchronous events, e.g.
    `functools.partial(emulator.held, WORKER_NAME)`), by its asynchronous invokes."""

    sqs: Any
    queue_url: str
    timer_queue_url: str | None = None
    invokes: Callable[[], list[Any]] | None = None
    retrying: list[tuple[Any, int]] = field(default_factory=list)
    """Asynchronous events whose run raised, with their attempts so far: run again by `work_invokes`."""
    dropped: list[Any] = field(default_factory=list)
    """Asynchronous events Lambda would have given up on (raised `1 + ASYNC_RETRIES` times)."""

    def http(
        self, api: str, method: str, path: str, body: object = None, *, authorizer: dict | None = None, **headers: str
    ) -> tuple[int, Any, dict]:
        """Send an HTTP API v2 event to the ingress or admin handler; (status, JSON body or text, headers).

        `authorizer` is the event's `requestContext.authorizer`, what API Gateway adds for a route it
        authorized: `{"iam": {...}}` for a SigV4-signed request, `{"jwt": {"claims": ..., "scopes": ...}}`
        for a bearer token (`iam_authorizer`, `jwt_authorizer`). None: an unauthorized route's event.
        """
        raw_path, _, query = path.partition("?")
        event = {
            "version": "2.0",
            "routeKey": "$default",
            "rawPath": raw_path,
            "rawQueryString": query,
            "headers": {"content-type": "application/json", **headers},
            "requestContext": {
                "http": {"method": method, "path": raw_path, "protocol": "HTTP/1.1", "sourceIp": "127.0.0.1"},
                "requestId": uuid.uuid4().hex,
                "routeKey": "$default",
                "stage": "$default",
                **({"authorizer": authorizer} if authorizer is not None else {}),
            },
            "body": base64.b64encode(json.dumps(body).encode()).decode() if body is not None else None,
            "isBase64Encoded": body is not None,
        }
        handler = lambda_app.ingress_handler if api == "ingress" else lambda_app.admin_handler
        answer = handler(event, Context(aws_request_id=uuid.uuid4().hex))
        payload = answer.get("body") or ""
        if answer.get("isBase64Encoded"):
            payload = base64.b64decode(payload).decode()
        try:
            decoded: Any = json.loads(payload) if payload else None
        except json.JSONDecodeError:
            decoded = payload
        return answer["statusCode"], decoded, {k.lower(): v for k, v in (answer.get("headers") or {}).items()}

    def work(self, wait_s: int = 1, queue_url: str | None = None) -> int:
        """Receive one batch from `queue_url`, run the worker on it, delete what it did not fail; the
        number of messages received. `queue_url` None: the timer queue's batch (no wait), then the
        wake queue's (waiting `wait_s` if the timer queue had none); without a timer queue, the wake queue's."""
        invoked = self.work_invokes() if queue_url is None else 0
        if invoked:
            wait_s = 0
        if queue_url is None and self.timer_queue_url is not None:
            timers = self.work_queue(self.timer_queue_url, 0)
            return invoked + timers + self.work_queue(self.queue_url, 0 if timers else wait_s)
        return invoked + self.work_queue(queue_url or self.queue_url, wait_s)

    def work_invokes(self) -> int:
        """Run the worker on each asynchronous event held for it (and on those to retry), one invocation
        each, as Lambda runs an `Event` invoke; one that raises is retried up to `ASYNC_RETRIES` times,
        then dropped. The number of events run."""
        if self.invokes is None:
            return 0
        pending = [*self.retrying, *((event, 0) for event in self.invokes())]
        self.retrying.clear()
        for event, attempts in pending:
            try:
                self.run_worker(event)
            except Exception:  # Lambda's async retries: twice, then the event is gone
                if attempts < ASYNC_RETRIES:
                    self.retrying.append((event, attempts + 1))
                else:
                    self.dropped.append(event)
        return len(pending)

    def run_worker(self, event: Any) -> Any:
        """One invocation of the worker on `event` (its context's ARN is `WORKER_ARN`): what it returned."""
        return lambda_app.worker_handler(event, Context(function_name=WORKER_NAME, invoked_function_arn=WORKER_ARN))

    def work_queue(self, queue_url: str, wait_s: int) -> int:
        """One batch of one queue through the worker (see `work`): the number of messages received."""
        received = self.sqs.receive_message(
            QueueUrl=queue_url, MaxNumberOfMessages=10, WaitTimeSeconds=wait_s, AttributeNames=["All"]
        ).get("Messages", [])
        if not received:
            return 0
        records = [
            {
                "messageId": m["MessageId"],
                "receiptHandle": m["ReceiptHandle"],
                "body": m["Body"],
                "attributes": m.get("Attributes", {}),
                "messageAttributes": {},
                "md5OfBody": m["MD5OfBody"],
                "eventSource": "aws:sqs",
                "eventSourceARN": f"arn:aws:sqs:us-east-1:123456789012:{queue_url.rsplit('/', 1)[-1]}",
                "awsRegion": "us-east-1",
            }
            for m in received
        ]
        answer = lambda_app.worker_handler({"Records": records}, Context())
        failed = {f["itemIdentifier"] for f in answer["batchItemFailures"]}
        done = [
            {"Id": str(index), "ReceiptHandle": message["ReceiptHandle"]}
            for index, message in enumerate(received)
            if message["MessageId"] not in failed
        ]
        if done:  # one DeleteMessageBatch, as the event source mapping deletes a batch's successes
            self.sqs.delete_message_batch(QueueUrl=queue_url, Entries=done)
        return len(received)

    @contextmanager
    def working(self) -> Iterator[None]:
        """Run the worker on the queue in a background thread while the block runs, as the event source
        mapping does beside the ingress (the batch in hand is finished when the block ends)."""
        stop = threading.Event()

        def loop() -> None:
            while not stop.is_set():
                self.work(wait_s=1)

        thread = threading.Thread(target=loop, name="local-worker", daemon=True)
        thread.start()
        try:
            yield
        finally:
            stop.set()
            thread.join(timeout=30)

    def until(self, condition: Callable[[], Any], deadline_s: float, what: str) -> Any:
        """Run the worker on the queue until `condition()` holds."""
        deadline = time.monotonic() + deadline_s
        while time.monotonic() < deadline:
            value = condition()
            if value:
                return value
            self.work(wait_s=1)
        raise AssertionError(f"timed out after {deadline_s} s waiting for {what}")

    def describe(self, invocation_id: str) -> dict[str, Any]:
        status, body, _ = self.http("admin", "GET", f"/invocations/{invocation_id}")
        assert status == 200, body
        return body  # type: ignore[no-any-return]
