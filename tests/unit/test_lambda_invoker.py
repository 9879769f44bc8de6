"""`LambdaInvoker` against botocore's `Stubber` (exact Lambda answers) and the emulator (real signing).

The Stubber answers `Invoke` the way the Lambda API does (errors by code and HTTP status, function
errors by `FunctionError` and payload); the assume-role tests sign real requests to the local
emulator, served from a thread, which records each request's access key id.
"""

from __future__ import annotations

import base64
import io
import json
import subprocess
import sys
import time
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

import boto3
import pytest
import zstandard
from botocore.response import StreamingBody
from botocore.stub import ANY, Stubber

from adapters.aws.lambda_invoker import MAX_PAYLOAD_BYTES, LambdaInvoker
from adapters.local.lambda_emulator import function_arn, serve_in_thread
from control_plane.ports import InvokerError

ARN = "arn:aws:lambda:us-east-1:123456789012:function:Examples:1"
ROLE = "arn:aws:iam::123456789012:role/torpor-invoker"
DUMMY = {"aws_access_key_id": "testing", "aws_secret_access_key": "testing", "region_name": "us-east-1"}


def lambda_client() -> Any:
    return boto3.client("lambda", **DUMMY)


def invoke_answer(payload: dict[str, Any] | bytes, function_error: str | None = None) -> dict[str, Any]:
    """An `Invoke` response as botocore parses it: the payload as a streaming body."""
    raw = payload if isinstance(payload, bytes) else json.dumps(payload).encode()
    answer: dict[str, Any] = {
        "StatusCode": 200,
        "Payload": StreamingBody(io.BytesIO(raw), len(raw)),
        "ExecutedVersion": "1",
    }
    if function_error:
        answer["FunctionError"] = function_error
    return answer


def proxy_response(body: bytes, headers: dict[str, str] | None = None, status: int = 200) -> dict[str, Any]:
    return {
        "statusCode": status,
        "headers": headers or {"content-type": "application/vnd.restate.invocation.v5"},
        "body": base64.b64encode(body).decode(),
        "isBase64Encoded": True,
    }


@pytest.fixture
def stubbed() -> Iterator[tuple[LambdaInvoker, Stubber, list[dict[str, Any]]]]:
    """An invoker on a stubbed Lambda client, and the `Invoke` parameters it sent (in order)."""
    client = lambda_client()
    sent: list[dict[str, Any]] = []
    client.meta.events.register("provide-client-params.lambda.Invoke", lambda params, **_: sent.append(params))
    with Stubber(client) as stubber:
        yield LambdaInvoker("us-east-1", client=client), stubber, sent


# --- the API-Gateway-proxy payload -----------------------------------------------------------------


def test_the_request_is_an_api_gateway_proxy_event_and_the_answer_its_response(stubbed: Any) -> None:
    invoker, stubber, sent = stubbed
    stubber.add_response(
        "invoke",
        invoke_answer(proxy_response(b"\x00\x01frames", {"Content-Type": "application/x"}, status=202)),
        {"FunctionName": ARN, "InvocationType": "RequestResponse", "Payload": ANY},
    )
    reply = invoker.request(ARN, "POST", "/invoke/Greeter/greet", {"Content-Type": "a/b"}, b"\xffbody", 5)
    assert (reply.status, reply.headers, reply.body) == (202, {"content-type": "application/x"}, b"\x00\x01frames")
    event = json.loads(sent[0]["Payload"])
    assert event == {
        "path": "/invoke/Greeter/greet",
        "httpMethod": "POST",
        "headers": {"content-type": "a/b", "accept-encoding": "zstd"},
        "body": base64.b64encode(b"\xffbody").decode(),
        "isBase64Encoded": True,
    }
    stubber.assert_no_pending_responses()


def test_a_zstd_response_body_is_decompressed(stubbed: Any) -> None:
    invoker, stubber, _ = stubbed
    frames = b"journal entry " * 200_000  # 2.8 MB, as the SDK would compress past 3 MiB
    compressed = zstandard.ZstdCompressor().compress(frames)
    headers = {"content-type": "application/vnd.restate.invocation.v5", "content-encoding": "zstd"}
    stubber.add_response("invoke", invoke_answer(proxy_response(compressed, headers)))
    reply = invoker.request(ARN, "POST", "/invoke/Greeter/greet", {}, b"", 5)
    assert reply.body == frames
    assert reply.headers == {"content-type": "application/vnd.restate.invocation.v5"}


def test_a_zstd_body_that_does_not_decompress_is_an_invoker_error(stubbed: Any) -> None:
    invoker, stubber, _ = stubbed
    stubber.add_response("invoke", invoke_answer(proxy_response(b"not zstd", {"content-encoding": "zstd"})))
    with pytest.raises(InvokerError, match=f"^the zstd body from {ARN} does not decompress"):
        invoker.request(ARN, "POST", "/invoke/Greeter/greet", {}, b"", 5)


def test_a_payload_that_is_not_a_proxy_response_names_what_is_expected(stubbed: Any) -> None:
    invoker, stubber, _ = stubbed
    stubber.add_response("invoke", invoke_answer({"hello": "world"}))
    with pytest.raises(InvokerError, match="did not answer with an API-Gateway-proxy response") as raised:
        invoker.request(ARN, "POST", "/invoke/Greeter/greet", {}, b"", 5)
    assert raised.value.message.endswith("is it a Restate SDK Lambda handler?")


# --- function errors and the 6 MB limit ------------------------------------------------------------


def test_a_function_error_carries_the_error_type_and_message(stubbed: Any) -> None:
    invoker, stubber, _ = stubbed
    error = {"errorType": "RuntimeError", "errorMessage": "boom", "stackTrace": ["..."]}
    stubber.add_response("invoke", invoke_answer(error, function_error="Unhandled"))
    with pytest.raises(InvokerError) as raised:
        invoker.request(ARN, "POST", "/invoke/Greeter/greet", {}, b"", 5)
    assert raised.value.message == f"Lambda function {ARN} failed (Unhandled): RuntimeError: boom"


def test_a_response_over_6_mb_names_the_limit_and_the_fix(stubbed: Any) -> None:
    invoker, stubber, _ = stubbed
    error = {
        "errorType": "Function.ResponseSizeTooLarge",
        "errorMessage": "Response payload size exceeded maximum allowed payload size (6291556 bytes).",
    }
    stubber.add_response("invoke", invoke_answer(error, function_error="Unhandled"))
    with pytest.raises(InvokerError) as raised:
        invoker.request(ARN, "POST", "/invoke/Greeter/greet", {}, b"", 5)
    message = raised.value.message
    assert message.startswith("the handler's response exceeded Lambda's 6 MB payload limit for synchronous invocations")
    assert "return less data from handlers" in message


def test_a_request_lambda_refuses_as_too_large_names_the_limit_and_the_fix(stubbed: Any) -> None:
    invoker, stubber, _ = stubbed
    stubber.add_client_error(
        "invoke",
        service_error_code="RequestEntityTooLargeException",
        service_message="Request must be smaller than 6291456 bytes for the InvokeFunction operation",
        http_status_code=413,
    )
    with pytest.raises(InvokerError) as raised:
        invoker.request(ARN, "POST", "/invoke/Greeter/greet", {}, b"x" * 1000, 5)
    message = raised.value.message
    assert message.startswith(f"the request to {ARN} exceeded Lambda's 6 MB payload limit for synchronous invocations")
    assert "keep the values passed through ctx.run, state, calls and awakeables smaller" in message


def test_a_request_over_6_mb_is_refused_before_it_is_sent(stubbed: Any) -> None:
    invoker, _, sent = stubbed
    body = b"\x00" * (MAX_PAYLOAD_BYTES * 3 // 4 + 1)  # base64 makes it larger than the limit
    with pytest.raises(InvokerError, match=r"more than Lambda's 6 MB payload limit for synchronous invocations"):
        invoker.request(ARN, "POST", "/invoke/Greeter/greet", {}, body, 5)
    assert sent == []


@pytest.mark.parametrize(
    ("code", "status", "expected"),
    [
        ("ResourceNotFoundException", 404, f"Lambda function {ARN} not found (ResourceNotFoundException: nope): "),
        ("AccessDeniedException", 403, f"not allowed to invoke {ARN} (AccessDeniedException: nope): grant "),
    ],
)
def test_a_refusal_names_the_arn_and_the_fix(stubbed: Any, code: str, status: int, expected: str) -> None:
    invoker, stubber, _ = stubbed
    stubber.add_client_error("invoke", service_error_code=code, service_message="nope", http_status_code=status)
    with pytest.raises(InvokerError) as raised:
        invoker.request(ARN, "POST", "/invoke/Greeter/greet", {}, b"", 5)
    assert raised.value.message.startswith(expected)


# --- throttling ------------------------------------------------------------------------------------


def throttle(stubber: Stubber) -> None:
    stubber.add_client_error(
        "invoke", service_error_code="TooManyRequestsException", service_message="Rate exceeded", http_status_code=429
    )


def test_throttling_is_retried_with_backoff_within_the_timeout(stubbed: Any) -> None:
    invoker, stubber, sent = stubbed
    throttle(stubber)
    throttle(stubber)
    stubber.add_response("invoke", invoke_answer(proxy_response(b"done")))
    started = time.monotonic()
    reply = invoker.request(ARN, "POST", "/invoke/Greeter/greet", {}, b"", 5)
    assert reply.body == b"done"
    assert len(sent) == 3
    assert 0.05 <= time.monotonic() - started < 2  # 25-50 ms, then 50-100 ms of backoff
    stubber.assert_no_pending_responses()


def test_throttling_that_outlasts_the_timeout_is_an_invoker_error(stubbed: Any) -> None:
    invoker, stubber, sent = stubbed
    for _ in range(50):
        throttle(stubber)
    started = time.monotonic()
    with pytest.raises(InvokerError) as raised:
        invoker.request(ARN, "POST", "/invoke/Greeter/greet", {}, b"", 0.5)
    elapsed = time.monotonic() - started
    assert elapsed < 1.5  # the deadline (0.5 s) and one stubbed call's overrun on a loaded machine
    assert 2 <= len(sent) < 10
    assert raised.value.message.startswith(f"Lambda throttled {ARN} {len(sent)} time(s) within 0.5 s")
    assert "reserved concurrency" in raised.value.message


# --- assume role -----------------------------------------------------------------------------------


def echo(event: dict[str, Any], context: Any) -> dict[str, Any]:
    """A Lambda handler answering its request body, as an API-Gateway-proxy response."""
    return {"statusCode": 200, "headers": {}, "body": event["body"], "isBase64Encoded": True}


class Clock:
    def __init__(self) -> None:
        self.now = datetime(2026, 11, 30, 12, 0, tzinfo=UTC)

    def __call__(self) -> datetime:
        return self.now


def role_credentials(key_id: str, expires: datetime) -> dict[str, Any]:
    return {
        "Credentials": {
            "AccessKeyId": key_id,
            "SecretAccessKey": "secret-" + key_id,
            "SessionToken": "token-" + key_id,
            "Expiration": expires,
        },
        "AssumedRoleUser": {"AssumedRoleId": "AROAEXAMPLE:torpor", "Arn": f"{ROLE}/torpor"},
    }


def test_assumed_role_credentials_sign_the_calls_and_are_renewed_shortly_before_they_expire() -> None:
    clock = Clock()
    sts = boto3.client("sts", **DUMMY)
    expected = {"RoleArn": ROLE, "RoleSessionName": "torpor", "DurationSeconds": 3600}
    with serve_in_thread({"Echo": echo}) as (url, app), Stubber(sts) as stubber:
        stubber.add_response(
            "assume_role", role_credentials("ASIAFIRSTFIRSTFIRST", clock.now + timedelta(hours=1)), expected
        )
        stubber.add_response(
            "assume_role", role_credentials("ASIASECONDSECONDSEC", clock.now + timedelta(hours=2)), expected
        )
        invoker = LambdaInvoker(
            "us-east-1", endpoint_url=url, session=boto3.Session(**DUMMY), sts_client=sts, now=clock
        )
        arn = function_arn("Echo", "1")

        def call(auth: dict[str, str] | None) -> None:
            assert invoker.request(arn, "POST", "/invoke/S/h", {}, b"hi", 5, auth=auth).body == b"hi"

        call({"assume_role_arn": ROLE})
        call({"assume_role_arn": ROLE})
        clock.now += timedelta(minutes=54)  # 6 minutes before expiry: still good
        call({"assume_role_arn": ROLE})
        call(None)  # without a role: the session's own credentials
        clock.now += timedelta(minutes=2)  # 4 minutes before expiry: renewed
        call({"assume_role_arn": ROLE})
        stubber.assert_no_pending_responses()
        invoker.close()
        keys = [c["access_key_id"] for c in app.calls()["calls"]]
    assert keys == ["ASIAFIRSTFIRSTFIRST"] * 3 + ["testing", "ASIASECONDSECONDSEC"]


def test_a_role_that_cannot_be_assumed_is_an_invoker_error_naming_it() -> None:
    sts = boto3.client("sts", **DUMMY)
    with Stubber(sts) as stubber:
        stubber.add_client_error("assume_role", service_error_code="AccessDenied", service_message="not trusted")
        invoker = LambdaInvoker("us-east-1", session=boto3.Session(**DUMMY), sts_client=sts)
        with pytest.raises(InvokerError) as raised:
            invoker.request(ARN, "POST", "/invoke/S/h", {}, b"", 5, auth={"assume_role_arn": ROLE})
    assert raised.value.message.startswith(f"could not assume role {ROLE} (AccessDenied: not trusted): ")


def test_the_emulator_process_loads_none_of_the_dev_server() -> None:
    """`python -m adapters.local.lambda_emulator` (started by `torpor dev --lambda`, and again after its
    process dies) imports the emulator alone: not moto, hypercorn or the dev server, seconds of start-up."""
    code = (
        "import sys, adapters.local.lambda_emulator\n"
        "print(sorted(m for m in ('moto', 'hypercorn', 'adapters.local.dev') if m in sys.modules))"
    )
    loaded = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=60)
    assert loaded.stdout.strip() == "[]", loaded.stdout + loaded.stderr
