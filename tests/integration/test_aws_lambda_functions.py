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
from adapters.local.lambda_emulator import LambdaEmulatorProcess
from tests.helpers.aws_functions import Context, LocalFunctions, iam_authorizer, jwt_authorizer, lambda_environment
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
        with lambda_environment(env):
            functions = LocalFunctions(sqs, queue_url)
            status, body, _ = functions.http("admin", "POST", "/deployments", {"arn": ARN})
            assert status == 201, body
            assert body["arn"] == ARN
            yield functions


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
    store = lambda_app.build_control_plane(may_delete=False).store  # the ingress's
    before = store.request_count
    status, body, headers = functions.http("ingress", "POST", "/Greeter/greet", "Mallory", **authorizer)
    assert status == 401, body
    assert body["code"] == 401
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
    assert body["code"] == 500
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


def _table_items() -> set[tuple[str, str]]:
    table = boto3.resource("dynamodb", region_name=REGION).Table(os.environ["TORPOR_TABLE"])
    return {(item["PK"], item["SK"]) for item in table.scan()["Items"]}  # type: ignore[misc]


def test_an_awakeable_value_that_no_journal_entry_holds_is_a_413_and_the_handler_still_runs(
    functions: LocalFunctions,
) -> None:
    """A 395 KB value fits a notification item but not a journal entry: refused at the ingress (it
    would fail the invocation when folded into its journal), whatever awakeable id it names."""
    from control_plane.ids import awakeable_id

    invocation_id = functions.http("ingress", "POST", "/Waits/awakeable/send")[1]["invocationId"]
    functions.until(lambda: functions.describe(invocation_id)["status"] == "suspended", 15, "the handler to wait")
    journal = functions.describe(invocation_id)["journal"]
    (published,) = [e["value"] for e in journal if str(e.get("value", "")).startswith("sign_1")]
    before = _table_items()
    for target in (published, awakeable_id(invocation_id, 999)):  # its awakeable, and one it never made
        status, body, _ = functions.http(
            "ingress", "POST", f"/restate/awakeables/{quote(target)}/resolve", "x" * 395_000
        )
        assert status == 413, body
        assert "more than the 393216 bytes a journal entry holds" in body["message"]
    assert _table_items() == before
    assert functions.http("ingress", "POST", f"/restate/awakeables/{quote(published)}/resolve", "ok")[0] == 202
    functions.until(lambda: functions.describe(invocation_id)["status"] == "completed", 15, "the resolution")
    assert functions.http("ingress", "GET", f"/restate/invocation/{invocation_id}/output")[1] == "got ok"


def test_completing_an_awakeable_of_a_completed_invocation_is_accepted_and_stores_nothing(
    functions: LocalFunctions,
) -> None:
    from control_plane.ids import awakeable_id

    status, _, headers = functions.http("ingress", "POST", "/Greeter/greet", "Ann")
    assert status == 200
    before = _table_items()
    for index in (17, 18, 999):  # nothing takes them any more: as many as anyone sends, none is kept
        path = f"/restate/awakeables/{quote(awakeable_id(headers['x-restate-id'], index))}/resolve"
        assert functions.http("ingress", "POST", path, "x" * 300_000)[0] == 202
    assert _table_items() == before


def test_a_refused_delayed_send_writes_no_item_and_a_repeated_one_keeps_one_timer(functions: LocalFunctions) -> None:
    before = _table_items()
    status, body, _ = functions.http("ingress", "POST", "/Greeter/greet/send?delay=3650d", "x" * 420_000)
    assert status == 413, body
    assert _table_items() == before  # not even the timer
    key = {"idempotency-key": f"k-{uuid.uuid4().hex[:8]}"}
    for _ in range(3):
        assert functions.http("ingress", "POST", "/Greeter/greet/send?delay=1h", "Ann", **key)[0] == 202
    timers = {sk for pk, sk in _table_items() - before if pk.startswith("TIMER#")}
    live = [sk for sk in timers if "expires_at" not in _raw_timer(sk)]
    assert len(live) == 1, timers  # the repeats' timers (for nothing) expire at once


def _raw_timer(sk: str) -> dict[str, Any]:
    table = boto3.resource("dynamodb", region_name=REGION).Table(os.environ["TORPOR_TABLE"])
    (item,) = [i for i in table.scan()["Items"] if i["SK"] == sk]  # type: ignore[misc]
    return item  # type: ignore[no-any-return]


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
    threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True).start()
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


def test_the_deploy_hook_declares_a_schedule_on_create_replaces_it_on_update_and_deletes_it(
    functions: LocalFunctions, moto_endpoint: str
) -> None:
    """`Custom::TorporSchedule` (template.yaml's ExampleDailyGreeting, the CDK's TorporSchedule): the
    schedule and its recurring EventBridge schedule as `torpor schedules create` makes them."""
    server = ThreadingHTTPServer(("127.0.0.1", 0), _CloudFormation)
    threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True).start()
    name = f"declared-{uuid.uuid4().hex[:6]}"
    base = {
        "ResponseURL": f"http://127.0.0.1:{server.server_address[1]}/r",
        "StackId": "stack",
        "RequestId": "r1",
        "LogicalResourceId": "Daily",
        "ResourceType": "Custom::TorporSchedule",
    }
    declared = {"ServiceToken": "arn", "Name": name, "Cron": "0 6 * * *", "Target": "Greeter/greet", "Body": '"hi"'}
    scheduler = boto3.client("scheduler", region_name=REGION, endpoint_url=moto_endpoint)

    def eventbridge_expression() -> str | None:
        try:
            return str(scheduler.get_schedule(Name=f"torpor-schedule-{name}")["ScheduleExpression"])
        except scheduler.exceptions.ResourceNotFoundException:
            return None

    try:
        lambda_app.deploy_hook_handler({**base, "RequestType": "Create", "ResourceProperties": declared}, Context())
        created = _CloudFormation.answers[-1]
        assert created["Status"] == "SUCCESS", created
        assert (created["PhysicalResourceId"], created["Data"]) == (f"schedule/{name}", {"Name": name})
        status, body, _ = functions.http("admin", "GET", f"/schedules/{name}")
        assert status == 200, body
        assert (body["service"], body["handler"], body["cron"], body["body"]) == ("Greeter", "greet", "0 6 * * *", "hi")
        assert eventbridge_expression() == "cron(0 6 * * ? *)"

        # an update replaces it (here: every 5 minutes instead)
        update = {"RequestType": "Update", "PhysicalResourceId": f"schedule/{name}"}
        changed = {**{k: v for k, v in declared.items() if k != "Cron"}, "Every": "5m"}
        lambda_app.deploy_hook_handler({**base, **update, "ResourceProperties": changed}, Context())
        assert _CloudFormation.answers[-1]["Status"] == "SUCCESS", _CloudFormation.answers[-1]
        assert functions.http("admin", "GET", f"/schedules/{name}")[1]["every"] == "5m"
        assert eventbridge_expression() == "rate(5 minutes)"

        # what POST /schedules refuses fails the resource, with the reason, and creates nothing
        bad = {**declared, "Name": f"{name}-bad", "Target": "Nope/greet"}
        lambda_app.deploy_hook_handler({**base, "RequestType": "Create", "ResourceProperties": bad}, Context())
        failed = _CloudFormation.answers[-1]
        assert failed["Status"] == "FAILED"
        assert "Nope" in failed["Reason"]
        assert failed["PhysicalResourceId"] == "unregistered"  # its Delete on rollback removes nothing
        assert functions.http("admin", "GET", f"/schedules/{name}-bad")[0] == 404
        not_json = {**declared, "Name": f"{name}-bad", "Body": "hi"}
        lambda_app.deploy_hook_handler({**base, "RequestType": "Create", "ResourceProperties": not_json}, Context())
        assert _CloudFormation.answers[-1]["Status"] == "FAILED"
        assert "Body must be JSON" in _CloudFormation.answers[-1]["Reason"]

        # a name taken (by `torpor schedules create`, or another stack) is not adopted
        lambda_app.deploy_hook_handler({**base, "RequestType": "Create", "ResourceProperties": declared}, Context())
        assert _CloudFormation.answers[-1]["Status"] == "FAILED"

        # stack deletion removes both; a second delete (a retried request) is fine
        delete = {"RequestType": "Delete", "PhysicalResourceId": f"schedule/{name}", "ResourceProperties": changed}
        for _ in range(2):
            lambda_app.deploy_hook_handler({**base, **delete}, Context())
            assert _CloudFormation.answers[-1]["Status"] == "SUCCESS", _CloudFormation.answers[-1]
        assert functions.http("admin", "GET", f"/schedules/{name}")[0] == 404
        assert eventbridge_expression() is None
    finally:
        server.shutdown()


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


# --- what each function's code really asks of DynamoDB, against its role in template.yaml -------------


class _DynamoDBRecorder:
    """Every DynamoDB request the store makes while `phase` names a function: (action, resource, partition keys)."""

    def __init__(self) -> None:
        self.phase: str | None = None
        self.requests: dict[str, set[tuple[str, str, tuple[str, ...]]]] = {}
        self._lock = threading.Lock()

    def record(self, operation: str, kwargs: dict[str, Any], *, ingress: bool = False) -> None:
        from tests.infra.facts import dynamodb_request_context

        index = kwargs.get("IndexName")
        resource = "${Table.Arn}" + (f"/index/{index}" if index else "")
        keys = dynamodb_request_context(operation, kwargs)["dynamodb:LeadingKeys"]
        with self._lock:
            if self.phase is not None:
                function = self.phase
                if function == "IngressFunction" and not ingress:
                    function = "WorkerFunction"
                self.requests.setdefault(function, set()).add((f"dynamodb:{operation}", resource, tuple(keys)))


def _quiet(seconds: float = 1.0) -> None:
    """Wait until the stores (the ingress's and the other functions') have made no request for `seconds`
    (attempts still running in the background end)."""
    stores = [lambda_app.build_control_plane(may_delete=m).store for m in (False, True)]

    def count() -> int:
        return sum(store.request_count for store in stores)

    last, since = count(), time.monotonic()
    deadline = time.monotonic() + 30
    while time.monotonic() - since < seconds and time.monotonic() < deadline:
        time.sleep(0.1)
        if count() != last:
            last, since = count(), time.monotonic()


def _allowed(facts: Any, function: str, action: str, resource: str, keys: tuple[str, ...]) -> bool:
    from tests.infra.facts import condition_holds

    role = facts.target(facts.function(function)["Role"])
    for statement in facts.role_statements(role):
        if statement.guarded or action not in statement.actions or resource not in statement.resources:
            continue
        if condition_holds(statement.condition, {"dynamodb:LeadingKeys": list(keys)}):
            return True
    return False


def test_each_function_asks_dynamodb_only_for_what_its_role_in_the_template_allows(
    functions: LocalFunctions, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Each function's code paths run on moto (calls, objects, a large state value replaced, sleeps,
    awakeables, workflows, an expired idempotency key, retention, kill and purge, registration) while
    every DynamoDB request is recorded;
    each must be one `template.yaml` allows that function's role, partition keys included."""
    from cfnlint.decode.cfn_yaml import load

    from adapters.aws import dynamodb_store
    from control_plane.ids import awakeable_id, new_invocation_id
    from tests.infra.facts import SAM_TEMPLATE, Facts

    recorder = _DynamoDBRecorder()
    original = dynamodb_store._CountingConnection.dispatch
    ingress_store = lambda_app.build_control_plane(may_delete=False).store

    def dispatch(self: Any, operation_name: str, operation_kwargs: dict[str, Any]) -> dict[str, Any]:
        # the ingress function's store is its own; the others share one, and while the ingress is
        # called what else uses it is the worker in the background (`LocalFunctions.working`)
        ingress = getattr(self._on_call, "__self__", None) is ingress_store
        recorder.record(operation_name, operation_kwargs, ingress=ingress)
        return original(self, operation_name, operation_kwargs)

    monkeypatch.setattr(dynamodb_store._CountingConnection, "dispatch", dispatch)
    retention = {"journal_retention": "1s", "idempotency_retention": "1s"}
    assert functions.http("admin", "PATCH", "/services/Greeter", retention)[0] == 200
    workflow_id = f"wf-{uuid.uuid4().hex[:8]}"
    _quiet()
    try:
        recorder.phase = "IngressFunction"
        status, _, headers = functions.http("ingress", "POST", "/Greeter/greet", "Ann", **{"idempotency-key": "k1"})
        assert status == 200
        recorder.phase = None  # the admin API's reads, not the ingress's
        first_run = functions.describe(headers["x-restate-id"])
        recorder.phase = "IngressFunction"
        assert functions.http("ingress", "POST", f"/Counter/{workflow_id}/add", 2)[0] == 200
        for big in ("a" * 40_000, "b" * 40_000):  # stored apart; the second replaces the first
            assert functions.http("ingress", "POST", f"/LazyCounter/{workflow_id}/put", {"big": big})[0] == 200
        sleeping = functions.http("ingress", "POST", "/Waits/sleep/send", 60_000)[1]["invocationId"]
        waiting = functions.http("ingress", "POST", "/Waits/awakeable/send")[1]["invocationId"]
        assert functions.http("ingress", "POST", f"/Signup/{workflow_id}/run/send", "a@example.com")[0] == 202
        unknown = quote(awakeable_id(new_invocation_id(), 17))
        assert functions.http("ingress", "POST", f"/restate/awakeables/{unknown}/resolve", "x")[0] == 404
        _quiet()

        recorder.phase = "WorkerFunction"
        for invocation_id in (sleeping, waiting):
            functions.until(lambda i=invocation_id: functions.describe(i)["status"] == "suspended", 15, "a wait")
        _quiet()

        recorder.phase = "IngressFunction"
        journal = functions.describe(waiting)["journal"]
        (published,) = [e["value"] for e in journal if str(e.get("value", "")).startswith("sign_1")]
        assert functions.http("ingress", "POST", f"/restate/awakeables/{quote(published)}/resolve", "yes")[0] == 202
        assert functions.http("ingress", "POST", f"/Signup/{workflow_id}/confirm", "secret")[0] == 200
        time.sleep(2.2)  # the idempotency key's retention (1 s) ends: the same key runs anew
        with functions.working():  # the worker removes the expired invocation for the ingress
            status, _, headers = functions.http("ingress", "POST", "/Greeter/greet", "Ann", **{"idempotency-key": "k1"})
        assert status == 200
        _quiet()
        recorder.phase = None
        assert functions.describe(headers["x-restate-id"])["created_at"] != first_run["created_at"]  # a new run

        recorder.phase = "WorkerFunction"
        functions.until(lambda: functions.describe(waiting)["status"] == "completed", 15, "the resolution")
        _quiet()

        recorder.phase = "AdminFunction"  # each route that writes: registration, options, state, kill, purge
        assert functions.http("admin", "GET", "/invocations?status=completed")[0] == 200
        assert functions.http("admin", "POST", "/deployments", {"arn": ARN, "force": True})[0] in (200, 201)
        assert functions.http("admin", "PATCH", "/services/Greeter", {"inactivity_timeout": "1m"})[0] == 200
        state = {"object_key": workflow_id, "new_state": {"count": [50]}}
        assert functions.http("admin", "POST", "/services/Counter/state", state)[0] in (200, 202)
        assert functions.http("admin", "PATCH", f"/invocations/{sleeping}/kill")[0] == 202
        assert functions.http("admin", "DELETE", f"/invocations/{waiting}")[0] in (200, 202)
        _quiet()

        time.sleep(2.2)  # Greeter's retention ends
        recorder.phase = "SweeperFunction"
        assert lambda_app.sweeper_handler({}, Context())["woken"] >= 1
        _quiet()

        recorder.phase = "DeployHookFunction"  # a stack registers a version, then deletes it
        server = ThreadingHTTPServer(("127.0.0.1", 0), _CloudFormation)
        threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True).start()
        base = {"ResponseURL": f"http://127.0.0.1:{server.server_address[1]}/r", "StackId": "s", "RequestId": "r"}
        version = {"FunctionVersionArn": "arn:aws:lambda:us-east-1:123456789012:function:examples:8"}
        try:
            lambda_app.deploy_hook_handler({**base, "RequestType": "Create", "ResourceProperties": version}, Context())
            created = _CloudFormation.answers[-1]
            assert created["Status"] == "SUCCESS", created
            schedule = {"Name": f"roles-{uuid.uuid4().hex[:6]}", "Every": "1h", "Target": "Greeter/greet"}
            declared = {**base, "ResourceType": "Custom::TorporSchedule", "ResourceProperties": schedule}
            lambda_app.deploy_hook_handler({**declared, "RequestType": "Create"}, Context())
            assert _CloudFormation.answers[-1]["Status"] == "SUCCESS", _CloudFormation.answers[-1]
            physical = {"PhysicalResourceId": _CloudFormation.answers[-1]["PhysicalResourceId"]}
            lambda_app.deploy_hook_handler({**declared, **physical, "RequestType": "Delete"}, Context())
            assert _CloudFormation.answers[-1]["Status"] == "SUCCESS"
            delete = {"RequestType": "Delete", "PhysicalResourceId": created["PhysicalResourceId"]}
            lambda_app.deploy_hook_handler({**base, **delete, "ResourceProperties": version}, Context())
            assert _CloudFormation.answers[-1]["Status"] == "SUCCESS"
        finally:
            server.shutdown()
        _quiet()
    finally:
        recorder.phase = None
        assert functions.http("admin", "POST", "/deployments", {"arn": ARN, "force": True})[0] in (200, 201)
        reset = {"journal_retention": None, "idempotency_retention": None, "inactivity_timeout": None}
        assert functions.http("admin", "PATCH", "/services/Greeter", reset)[0] == 200

    facts = Facts(json.loads(json.dumps(load(str(SAM_TEMPLATE)))))
    refused = {
        function: sorted(r for r in requests if not _allowed(facts, function, *r))
        for function, requests in recorder.requests.items()
    }
    assert all(not r for r in refused.values()), refused
    actions = {function: {action for action, _, _ in requests} for function, requests in recorder.requests.items()}
    assert {"dynamodb:PutItem", "dynamodb:UpdateItem"} <= actions["IngressFunction"]  # attempts run in-process
    assert not {"dynamodb:DeleteItem", "dynamodb:BatchWriteItem"} & actions["IngressFunction"]  # it never deletes
    # retention removed an invocation: its items one by one (a call that ends in one write has no journal
    # item apart from its record: DeleteItem) or in batches (BatchWriteItem)
    assert {"dynamodb:DeleteItem", "dynamodb:BatchWriteItem"} & actions["SweeperFunction"]
    assert {"dynamodb:DeleteItem", "dynamodb:BatchWriteItem"} <= actions["AdminFunction"]  # kill, purge
    admin_partitions = {key.split("#")[0] for _, _, keys in recorder.requests["AdminFunction"] for key in keys}
    assert {"DEP", "SVC", "INV", "OBJ"} <= admin_partitions  # registration, options, kill and purge, state
    assert {"dynamodb:PutItem", "dynamodb:DeleteItem"} <= actions["DeployHookFunction"]  # register, remove
    hook_partitions = {key.split("#")[0] for _, _, keys in recorder.requests["DeployHookFunction"] for key in keys}
    assert "SCHED" in hook_partitions  # a declared schedule
