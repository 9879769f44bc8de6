"""The local Lambda emulator enforces each function's timeout as Lambda does: the handler sees its
remaining time count down, an Invoke still running at the timeout answers Lambda's timeout error
(`X-Amz-Function-Error: Unhandled`, `Sandbox.Timedout`, "Task timed out after N.NN seconds"), and the
handler is stopped there: it runs no further instruction. Served from a thread of this process over
HTTP; the invoker side is Torpor's own `LambdaInvoker` (boto3)."""

from __future__ import annotations

import threading
import time
from typing import Any

import boto3
import httpx
import pytest

from adapters.aws.lambda_invoker import LambdaInvoker
from adapters.local.lambda_emulator import EmulatorApp, function_arn, serve_in_thread
from control_plane.ports import InvokerError

DUMMY = {"aws_access_key_id": "testing", "aws_secret_access_key": "testing", "region_name": "us-east-1"}


class Busy:
    """A function that counts while it runs, for `seconds` of its event (else 5); remembers what it saw."""

    def __init__(self) -> None:
        self.ticks = 0
        self.finished = threading.Event()
        self.remaining_ms: list[int] = []

    def __call__(self, event: dict[str, Any], context: Any) -> dict[str, Any]:
        self.remaining_ms.append(context.get_remaining_time_in_millis())
        deadline = time.monotonic() + float(event.get("seconds", 5))  # 5 s for an API Gateway event
        while time.monotonic() < deadline:
            self.ticks += 1
            time.sleep(0.01)
        self.finished.set()
        return {"ticks": self.ticks}


def invoke(url: str, seconds: float) -> httpx.Response:
    return httpx.post(f"{url}/2015-03-31/functions/Busy/invocations", json={"seconds": seconds}, timeout=30)


def test_an_invoke_past_the_timeout_answers_lambdas_timeout_error_and_the_handler_stops() -> None:
    busy = Busy()
    with serve_in_thread({"Busy": busy}, timeout_s=0.5) as (url, _app):
        answer = invoke(url, 5)

        assert answer.status_code == 200
        assert answer.headers["X-Amz-Function-Error"] == "Unhandled"
        error = answer.json()
        assert error["errorType"] == "Sandbox.Timedout"
        assert error["errorMessage"].endswith("Task timed out after 0.50 seconds"), error
        assert 0 < busy.remaining_ms[0] <= 500
        time.sleep(0.1)
        ticks = busy.ticks
        time.sleep(0.3)
        assert busy.ticks == ticks  # stopped: it counts no more
        assert not busy.finished.is_set()

        done = invoke(url, 0.05)  # the next call gets a fresh environment and completes
        assert done.status_code == 200, done.text
        assert "X-Amz-Function-Error" not in done.headers, done.text
        assert busy.finished.is_set()


def test_torpors_invoker_reports_the_timeout_as_a_function_error() -> None:
    busy = Busy()
    with serve_in_thread({"Busy": busy}, timeout_s=0.5) as (url, _app):
        invoker = LambdaInvoker("us-east-1", endpoint_url=url, session=boto3.Session(**DUMMY))
        with pytest.raises(InvokerError, match=r"Sandbox.Timedout: RequestId: \S+ Error: Task timed out after 0.50"):
            invoker.request(function_arn("Busy", "1"), "POST", "/invoke/S/h", {}, b'{"seconds": 5}', 10)


def test_a_timeout_must_be_above_zero() -> None:
    with pytest.raises(ValueError, match="must be above 0 seconds"):
        EmulatorApp({"Busy": Busy()}, timeout_s=0)
