"""The control plane's Lambda functions end to end on moto: API Gateway events in, SQS wake-ups through.

DynamoDB, SQS and EventBridge Scheduler are a moto server over HTTP; the example services are
registered by Lambda ARN and served by the local Lambda emulator, reached through the real boto3
`Invoke` path. The ingress and admin handlers get synthetic API Gateway HTTP API (v2) events; the
worker handler gets the SQS batches received from the wake queue, and the messages it reports as
failed stay on the queue, as the Lambda event source mapping would do.
"""

from __future__ import annotations

import json
import os
import threading
import time
import uuid
from collections.abc import Iterator
from datetime import UTC, datetime
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, ClassVar
from urllib.parse import quote

import boto3
import httpx
import pytest
from click.testing import CliRunner

from adapters.aws import lambda_app
from adapters.cli import client as cli_client
from adapters.cli import main as cli_main
from adapters.local.aws_functions import Context, LocalFunctions, iam_authorizer, jwt_authorizer
from adapters.local.lambda_emulator import LambdaEmulatorProcess
from tests.helpers.moto import REGION, fresh_store
from tests.helpers.services import REPO_ROOT
from tests.helpers.sigv4_gateway import SigV4Gateway

ARN = "arn:aws:lambda:us-east-1:123456789012:function:examples:1"
SCHEDULER_ROLE = "arn:aws:iam::123456789012:role/torpor-scheduler"


@pytest.fixture(scope="module")
def functions(moto_endpoint: str) -> Iterator[LocalFunctions]:
    store = fresh_store(moto_endpoint)
    sqs = boto3.client("sqs", region_name=REGION, endpoint_url=moto_endpoint)
    queue_url = sqs.create_queue(QueueName=f"wake-{uuid.uuid4().hex[:8]}")["QueueUrl"]
    queue_arn = sqs.get_queue_attributes(QueueUrl=queue_url, AttributeNames=["QueueArn"])["Attributes"]["QueueArn"]
    dlq_url = sqs.create_queue(QueueName=f"schedules-dlq-{uuid.uuid4().hex[:8]}")["QueueUrl"]
    dlq_arn = sqs.get_queue_attributes(QueueUrl=dlq_url, AttributeNames=["QueueArn"])["Attributes"]["QueueArn"]
    with LambdaEmulatorProcess({"examples": "examples.app:app"}, cwd=REPO_ROOT) as emulator:
        emulator_url = emulator.url
        env = {
            "TORPOR_TABLE": store.table_name,
            "TORPOR_WAKE_QUEUE_URL": queue_url,
            "AWS_ENDPOINT_URL_DYNAMODB": moto_endpoint,
            "AWS_ENDPOINT_URL_SQS": moto_endpoint,
            "AWS_ENDPOINT_URL_SCHEDULER": moto_endpoint,
            "AWS_ENDPOINT_URL_LAMBDA": emulator_url,
            "TORPOR_CALL_WAIT_MS": "3000",
            "TORPOR_WAKE_QUEUE_ARN": queue_arn,
            "TORPOR_SCHEDULER_ROLE_ARN": SCHEDULER_ROLE,
            "TORPOR_SCHEDULE_DLQ_ARN": dlq_arn,
            "POWERTOOLS_METRICS_NAMESPACE": "TorporTest",
        }
        saved = {name: os.environ.get(name) for name in env}
        os.environ.update(env)
        lambda_app.reset()
        try:
            functions = LocalFunctions(sqs, queue_url)
            status, body, _ = functions.http("admin", "POST", "/deployments", {"arn": ARN})
            assert status == 201, body
            assert body["arn"] == ARN
            yield functions
        finally:
            lambda_app.reset()
            for name, value in saved.items():
                if value is None:
                    os.environ.pop(name, None)
                else:
                    os.environ[name] = value


def test_a_call_through_api_gateway_runs_the_lambda_handler_and_answers_its_result(functions: LocalFunctions) -> None:
    status, body, headers = functions.http("ingress", "POST", "/Greeter/greet", "Ann")
    assert (status, body) == (200, "Hello, Ann!")
    assert headers["x-restate-id"].startswith("inv_")


COGNITO_CLAIMS = {
    "sub": "5f1c2d3e-0000-4000-8000-000000000001",
    "iss": "https://cognito-idp.us-east-1.amazonaws.com/us-east-1_Example1",
    "client_id": "4example0client0id",
    "token_use": "access",
    "scope": "torpor/invoke",
}
"""What API Gateway's JWT authorizer puts in the event for a Cognito access token it accepted."""


def _refused_without_a_store_request(functions: LocalFunctions, **authorizer: Any) -> dict[str, Any]:
    """Send a call the ingress must refuse; assert it is a 401 `{"code","message"}` that touched no item."""
    store = lambda_app.build_control_plane().store
    before = store.request_count
    status, body, headers = functions.http("ingress", "POST", "/Greeter/greet", "Mallory", **authorizer)
    assert status == 401, body
    assert body["code"] == "unauthorized"
    assert headers["content-type"] == "application/json"
    assert store.request_count == before  # refused before anything was read or written
    return body  # type: ignore[no-any-return]


def test_with_aws_iam_a_signed_call_is_served_and_unsigned_or_jwt_ones_are_refused(
    functions: LocalFunctions, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("TORPOR_INGRESS_AUTH", "AWS_IAM")
    status, body, headers = functions.http("ingress", "POST", "/Greeter/greet", "Ann", authorizer=iam_authorizer())
    assert (status, body) == (200, "Hello, Ann!")
    assert headers["x-restate-id"].startswith("inv_")
    refused = _refused_without_a_store_request(functions)
    assert "SigV4-signed" in refused["message"]
    _refused_without_a_store_request(functions, authorizer=jwt_authorizer(COGNITO_CLAIMS))
    _refused_without_a_store_request(functions, authorizer={"iam": {}})  # no caller API Gateway verified


def test_with_jwt_a_call_with_verified_claims_is_served_and_others_are_refused(
    functions: LocalFunctions, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("TORPOR_INGRESS_AUTH", "JWT")
    authorizer = jwt_authorizer(COGNITO_CLAIMS, ["torpor/invoke"])
    status, body, _ = functions.http("ingress", "POST", "/Greeter/greet", "Bo", authorizer=authorizer)
    assert (status, body) == (200, "Hello, Bo!")
    refused = _refused_without_a_store_request(functions)
    assert "bearer token" in refused["message"]
    _refused_without_a_store_request(functions, authorizer=iam_authorizer())  # signed, but not what the API takes
    # a forged Authorization header is not a verified token: only API Gateway's authorizer context counts
    _refused_without_a_store_request(functions, authorization="Bearer eyJhbGciOiJub25lIn0.e30.")


def test_torpor_invoke_signs_its_call_to_an_execute_api_ingress_and_a_wrong_secret_is_refused(
    functions: LocalFunctions, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`torpor invoke --ingress-url https://ID.execute-api.REGION.amazonaws.com` signs with the caller's
    AWS credentials; a gateway that checks the signature hands the call to the ingress function."""
    monkeypatch.setenv("TORPOR_INGRESS_AUTH", "AWS_IAM")
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "AKIDCALLER")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "the-callers-secret")
    monkeypatch.delenv("AWS_SESSION_TOKEN", raising=False)
    monkeypatch.delenv("AWS_PROFILE", raising=False)
    gateway = SigV4Gateway(lambda_app.ingress_handler, "us-east-1", {"AKIDCALLER": "the-callers-secret"})
    real_client = httpx.Client

    def through_gateway(*args: Any, **kwargs: Any) -> httpx.Client:
        return real_client(*args, transport=httpx.MockTransport(gateway), **kwargs)

    monkeypatch.setattr(cli_client.httpx, "Client", through_gateway)
    ingress = ["--ingress-url", "https://abc123.execute-api.us-east-1.amazonaws.com"]
    result = CliRunner().invoke(cli_main, [*ingress, "invoke", "Greeter", "greet", '"Ann"'], catch_exceptions=False)
    assert result.exit_code == 0, result.output
    assert "Hello, Ann!" in result.stdout
    assert gateway.forwarded == 1

    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "not-the-secret")
    result = CliRunner().invoke(cli_main, [*ingress, "invoke", "Greeter", "greet", '"Eve"'], catch_exceptions=False)
    assert result.exit_code == 1
    assert "Forbidden" in result.output
    assert gateway.forwarded == 1  # the function never saw it

    # unsigned, straight to the gateway: refused there too
    with real_client(transport=httpx.MockTransport(gateway)) as client:
        answer = client.post("https://abc123.execute-api.us-east-1.amazonaws.com/Greeter/greet", json="Eve")
    assert answer.status_code == 403
    assert gateway.forwarded == 1


def test_without_ingress_auth_anyone_may_call_and_an_unknown_mode_refuses_everything(
    functions: LocalFunctions, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("TORPOR_INGRESS_AUTH", "NONE")
    assert functions.http("ingress", "POST", "/Greeter/greet", "Cy")[:2] == (200, "Hello, Cy!")
    monkeypatch.setenv("TORPOR_INGRESS_AUTH", "IAM")  # a typo fails closed
    status, body, _ = functions.http("ingress", "POST", "/Greeter/greet", "Cy", authorizer=iam_authorizer())
    assert status == 500
    assert body["code"] == "misconfigured"
    assert "AWS_IAM, JWT, NONE" in body["message"]


def test_a_two_second_sleep_resumes_through_the_wake_queue_not_before(functions: LocalFunctions) -> None:
    status, body, _ = functions.http("ingress", "POST", "/Waits/sleep/send", 2000)
    assert status == 202, body
    invocation_id = body["invocationId"]
    sent = time.monotonic()
    functions.until(lambda: functions.describe(invocation_id)["status"] == "suspended", 10, "the sleep")
    done = functions.until(
        lambda: functions.describe(invocation_id)["status"] == "completed", 15, "the sleep to end through SQS"
    )
    assert done
    assert time.monotonic() - sent >= 2.0
    status, output, _ = functions.http("ingress", "GET", f"/restate/invocation/{invocation_id}/output")
    assert (status, output) == (200, "slept 2000 ms")


def test_an_awakeable_resolved_through_the_ingress_wakes_its_handler(functions: LocalFunctions) -> None:
    status, body, _ = functions.http("ingress", "POST", "/Waits/awakeable/send")
    assert status == 202, body
    invocation_id = body["invocationId"]

    def awakeable_id() -> str | None:
        journal = functions.describe(invocation_id)["journal"]
        values = [e.get("value") for e in journal if e["type"] == "RunCompletion"]
        return values[0] if values and str(values[0]).startswith("sign_1") else None

    published = functions.until(awakeable_id, 15, "the awakeable id to be journaled")
    functions.until(lambda: functions.describe(invocation_id)["status"] == "suspended", 10, "the handler to wait")
    status, _, _ = functions.http("ingress", "POST", f"/restate/awakeables/{quote(published)}/resolve", "yes")
    assert status == 202
    functions.until(lambda: functions.describe(invocation_id)["status"] == "completed", 15, "the resolution")
    assert functions.http("ingress", "GET", f"/restate/invocation/{invocation_id}/output")[1] == "got yes"


def test_a_workflow_runs_once_and_its_promise_is_resolved_by_a_shared_handler(functions: LocalFunctions) -> None:
    workflow_id = f"wf-{uuid.uuid4().hex[:8]}"
    status, body, _ = functions.http("ingress", "POST", f"/Signup/{workflow_id}/run/send", "ann@example.com")
    assert status == 202, body
    again, body_again, _ = functions.http("ingress", "POST", f"/Signup/{workflow_id}/run/send", "ann@example.com")
    assert (again, body_again["status"]) == (202, "PreviouslyAccepted")
    invocation_id = body["invocationId"]
    functions.until(lambda: functions.describe(invocation_id)["status"] == "suspended", 15, "the run to wait")
    status, _, _ = functions.http("ingress", "POST", f"/Signup/{workflow_id}/confirm", "secret")
    assert status == 200
    functions.until(lambda: functions.describe(invocation_id)["status"] == "completed", 15, "the run to end")
    status, output, _ = functions.http("ingress", "GET", f"/restate/workflow/Signup/{workflow_id}/output")
    assert status == 200, output


def test_a_call_longer_than_the_ingress_wait_answers_202_and_the_worker_finishes_it(functions: LocalFunctions) -> None:
    status, body, _ = functions.http("ingress", "POST", "/Steps/slow_steps", {"n": 4, "step_ms": 1000})
    assert status == 202, body
    invocation_id = body["invocationId"]
    functions.until(lambda: functions.describe(invocation_id)["status"] == "completed", 30, "the worker to finish")
    assert functions.http("ingress", "GET", f"/restate/invocation/{invocation_id}/output")[1] == 10


def test_the_sweeper_wakes_an_overdue_timer_whose_message_was_lost(functions: LocalFunctions) -> None:
    status, body, _ = functions.http("ingress", "POST", "/Waits/sleep/send", 500)
    assert status == 202, body
    invocation_id = body["invocationId"]
    functions.until(lambda: functions.describe(invocation_id)["status"] == "suspended", 10, "the sleep")
    functions.sqs.purge_queue(QueueUrl=functions.queue_url)  # the wake-up is lost
    time.sleep(1.0)
    assert functions.work(wait_s=1) == 0
    assert functions.describe(invocation_id)["status"] == "suspended"
    plane = lambda_app.build_control_plane()
    assert plane.sweep_due(grace_ms=0) >= 1
    functions.until(lambda: functions.describe(invocation_id)["status"] == "completed", 10, "the swept wake-up")


def test_an_hour_long_sleep_is_a_schedule_whose_message_resumes_the_sleep_at_its_due_time_not_before(
    functions: LocalFunctions, monkeypatch: pytest.MonkeyPatch
) -> None:
    status, body, _ = functions.http("ingress", "POST", "/Waits/sleep/send", 3_600_000)
    assert status == 202, body
    invocation_id = body["invocationId"]
    functions.until(lambda: functions.describe(invocation_id)["status"] == "suspended", 10, "the sleep")

    # the stored schedule: one-time, 60 s before the due time, to the wake queue, DLQ, deleted after
    scheduler = boto3.client("scheduler", region_name=REGION)
    names = [s["Name"] for s in scheduler.list_schedules()["Schedules"] if invocation_id in s["Name"]]
    assert len(names) == 1
    schedule = scheduler.get_schedule(Name=names[0], GroupName="default")
    due_ms = int(names[0].rsplit("-", 1)[1])
    assert abs(due_ms - (time.time() * 1000 + 3_600_000)) < 15_000
    expected_at = datetime.fromtimestamp((due_ms - 60_000) // 1000, tz=UTC).strftime("at(%Y-%m-%dT%H:%M:%S)")
    assert schedule["ScheduleExpression"] == expected_at
    assert schedule["ActionAfterCompletion"] == "DELETE"
    assert schedule["FlexibleTimeWindow"] == {"Mode": "OFF"}
    target = schedule["Target"]
    queue_arn = os.environ["TORPOR_WAKE_QUEUE_ARN"]
    assert (target["Arn"], target["RoleArn"]) == (queue_arn, SCHEDULER_ROLE)
    assert target["DeadLetterConfig"] == {"Arn": os.environ["TORPOR_SCHEDULE_DLQ_ARN"]}
    assert json.loads(target["Input"]) == {"invocation_id": invocation_id, "due_ms": due_ms}

    def deliver(body: str) -> None:
        record = {"messageId": uuid.uuid4().hex, "receiptHandle": "r", "body": body, "attributes": {}}
        record.update(
            eventSource="aws:sqs", eventSourceARN=queue_arn, awsRegion=REGION, md5OfBody="", messageAttributes={}
        )
        assert lambda_app.worker_handler({"Records": [record]}, Context()) == {"batchItemFailures": []}

    # delivered early (as the schedule lands 60 s ahead, or a stray copy): nothing runs
    deliver(target["Input"])
    assert functions.describe(invocation_id)["status"] == "suspended"
    assert functions.describe(invocation_id)["attempts"] == 1

    # at the due time, the same message resumes the sleep
    plane = lambda_app.build_control_plane()
    real_now = plane.clock.now_ms
    monkeypatch.setattr(plane.clock, "now_ms", lambda: real_now() + 3_600_000 + 1_000)
    deliver(target["Input"])
    described = functions.describe(invocation_id)
    assert described["status"] == "completed", described
    assert functions.http("ingress", "GET", f"/restate/invocation/{invocation_id}/output")[1] == "slept 3600000 ms"


class _CloudFormation(BaseHTTPRequestHandler):
    """Stands in for CloudFormation's pre-signed response URL: keeps each PUT body."""

    answers: ClassVar[list[dict[str, Any]]] = []

    def do_PUT(self) -> None:
        length = int(self.headers["content-length"])
        type(self).answers.append(json.loads(self.rfile.read(length)))
        self.send_response(200)
        self.end_headers()

    def log_message(self, *args: object) -> None:
        return None


def test_the_deploy_hook_registers_a_version_on_create_and_answers_cloudformation(functions: LocalFunctions) -> None:
    server = ThreadingHTTPServer(("127.0.0.1", 0), _CloudFormation)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    url = f"http://127.0.0.1:{server.server_address[1]}/response?signed=1"
    version_arn = "arn:aws:lambda:us-east-1:123456789012:function:examples:7"
    base = {"ResponseURL": url, "StackId": "stack", "RequestId": "r1", "LogicalResourceId": "Handlers"}
    try:
        lambda_app.deploy_hook_handler(
            {**base, "RequestType": "Create", "ResourceProperties": {"FunctionVersionArn": version_arn}}, Context()
        )
        created = _CloudFormation.answers[-1]
        assert created["Status"] == "SUCCESS", created
        deployment_id = created["PhysicalResourceId"]
        assert deployment_id.startswith("dp_")
        assert created["Data"] == {"DeploymentId": deployment_id}
        status, body, _ = functions.http("admin", "GET", f"/deployments/{deployment_id}")
        assert (status, body["arn"]) == (200, version_arn)

        # a bad version ARN is reported as FAILED with the reason, not left hanging
        lambda_app.deploy_hook_handler(
            {**base, "RequestType": "Create", "ResourceProperties": {"FunctionVersionArn": "nope"}}, Context()
        )
        assert _CloudFormation.answers[-1]["Status"] == "FAILED"
        assert _CloudFormation.answers[-1]["Reason"]

        # so is an unexpected error (e.g. AccessDenied from AWS): CloudFormation is never left waiting
        plane = lambda_app.build_control_plane()
        with pytest.MonkeyPatch.context() as patch:
            patch.setattr(plane.registry, "register", lambda *a, **k: (_ for _ in ()).throw(RuntimeError("denied")))
            lambda_app.deploy_hook_handler(
                {**base, "RequestType": "Update", "ResourceProperties": {"FunctionVersionArn": version_arn}}, Context()
            )
        assert _CloudFormation.answers[-1]["Status"] == "FAILED"
        assert "RuntimeError: denied" in _CloudFormation.answers[-1]["Reason"]

        # stack deletion removes the deployment
        lambda_app.deploy_hook_handler(
            {**base, "RequestType": "Delete", "PhysicalResourceId": deployment_id, "ResourceProperties": {}}, Context()
        )
        assert _CloudFormation.answers[-1]["Status"] == "SUCCESS"
        assert functions.http("admin", "GET", f"/deployments/{deployment_id}")[0] == 404
    finally:
        server.shutdown()
        # the removed version took the services with it: route them to the module's deployment again
        assert functions.http("admin", "POST", "/deployments", {"arn": ARN, "force": True})[0] in (200, 201)


def test_the_sweeper_removes_an_invocation_after_its_retention_without_the_queue(functions: LocalFunctions) -> None:
    config = {"journal_retention": "1s", "idempotency_retention": "1s"}
    assert functions.http("admin", "PATCH", "/services/Greeter", config)[0] == 200
    try:
        status, _, headers = functions.http("ingress", "POST", "/Greeter/greet", "Old", **{"idempotency-key": "k-old"})
        assert status == 200
        invocation_id = headers["x-restate-id"]
        time.sleep(2.2)
        while functions.work(wait_s=0):  # whatever is queued, handled first
            pass
        assert lambda_app.build_control_plane().sweep_due(grace_ms=0) >= 1
        assert functions.http("admin", "GET", f"/invocations/{invocation_id}")[0] == 404
        assert functions.work(wait_s=1) == 0  # nothing went through the wake queue
        assert not [d for d, i in lambda_app.build_control_plane().store.due_timers(2**40) if i == invocation_id]
    finally:
        reset = {"journal_retention": None, "idempotency_retention": None}
        assert functions.http("admin", "PATCH", "/services/Greeter", reset)[0] == 200


def test_the_admin_function_serves_the_web_ui_and_metrics_go_to_emf(functions: LocalFunctions) -> None:
    status, _, headers = functions.http("admin", "GET", "/")
    assert (status, headers["location"]) == (302, "ui/")
    status, page, headers = functions.http("admin", "GET", "/ui/")
    assert status == 200
    assert headers["content-type"].startswith("text/html")
    assert "<html" in page.lower()
    status, script, headers = functions.http("admin", "GET", "/ui/app.js")
    assert (status, headers["content-type"].split(";")[0]) == (200, "text/javascript")
    assert "import" in script
    assert functions.http("admin", "GET", "/metrics")[0] == 404  # on Lambda they are EMF log lines
