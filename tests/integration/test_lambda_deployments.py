"""Lambda deployments end to end: the example services as Lambda functions, registered by ARN.

The functions run in the local Lambda emulator (`adapters.local.lambda_emulator`, its own process,
`AWS_LAMBDA_FUNCTION_NAME` set so the SDK builds its Lambda handler); the control plane reaches
them through the real `LambdaInvoker` (boto3 `Invoke`, API-Gateway-proxy events). The emulator's
call log tells which function version every request asked for.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from click.testing import CliRunner

from adapters.cli import main
from adapters.local.dev import DevServer
from adapters.local.lambda_emulator import LambdaEmulatorProcess, function_arn
from control_plane.retry import RetryPolicy
from control_plane.settings import Settings
from tests.helpers.dev import describe, wait_for
from tests.helpers.moto import unique_table_name
from tests.helpers.services import REPO_ROOT

SETTINGS = Settings(
    inactivity_timeout_ms=10_000,
    lease_margin_ms=2_000,
    call_wait_ms=20_000,
    retry_policy=RetryPolicy(initial_interval_ms=100, max_attempts=5),
)
EXAMPLES_1 = function_arn("Examples", "1")
EXAMPLES_2 = function_arn("Examples", "2")
FUNCTIONS = {"Examples": "examples.app:app", "Flaky": "tests.helpers.lambda_functions:flaky"}


@pytest.fixture(scope="module")
def emulator() -> Iterator[LambdaEmulatorProcess]:
    """The local Lambda emulator hosting `Examples` (the example app) and `Flaky`, for the module."""
    with LambdaEmulatorProcess(FUNCTIONS, cwd=REPO_ROOT) as process:
        yield process


def start_dev(moto_endpoint: str, emulator: LambdaEmulatorProcess) -> DevServer:
    server = DevServer(
        ingress_port=0,
        admin_port=0,
        dynamodb_endpoint=moto_endpoint,
        table=unique_table_name(),
        settings=SETTINGS,
        lambda_endpoint=emulator.url,
    )
    return server.start()


def register(dev: DevServer, arn: str, **extra: object) -> httpx.Response:
    return httpx.post(f"{dev.admin_url}/deployments", json={"arn": arn, **extra}, timeout=30)


@pytest.fixture(scope="module")
def dev(moto_endpoint: str, emulator: LambdaEmulatorProcess) -> Iterator[DevServer]:
    """A dev server with `Examples:1` registered by ARN (asserts 201)."""
    server = start_dev(moto_endpoint, emulator)
    try:
        reply = register(server, EXAMPLES_1)
        assert reply.status_code == 201, reply.text
        yield server
    finally:
        server.stop()


@pytest.fixture
def fresh_dev(moto_endpoint: str, emulator: LambdaEmulatorProcess) -> Iterator[DevServer]:
    """A dev server of this test alone, nothing registered, on the module's emulator."""
    server = start_dev(moto_endpoint, emulator)
    try:
        yield server
    finally:
        server.stop()


def calls_of(emulator: LambdaEmulatorProcess, invocation_id: str) -> list[dict[str, Any]]:
    """The emulator's log of `Invoke` calls that carried `invocation_id`, oldest first."""
    return [c for c in emulator.calls()["calls"] if c["invocation_id"] == invocation_id]


# --- through the ingress ---------------------------------------------------------------------------


def test_registration_by_arn_discovers_the_services_through_lambda(
    dev: DevServer, emulator: LambdaEmulatorProcess
) -> None:
    [deployment] = httpx.get(f"{dev.admin_url}/deployments", timeout=10).json()["deployments"]
    assert deployment["arn"] == EXAMPLES_1
    assert "uri" not in deployment
    assert {"Greeter", "Waits", "Counter", "Signup"} <= {s["name"] for s in deployment["services"]}
    discovers = [c for c in emulator.calls()["calls"] if c["path"] == "/discover"]
    assert [(c["function"], c["qualifier"]) for c in discovers][:1] == [("Examples", "1")]


def test_a_greeter_call_runs_on_version_1(dev: DevServer, emulator: LambdaEmulatorProcess) -> None:
    reply = httpx.post(f"{dev.ingress_url}/Greeter/greet", json="Ann", timeout=30)
    assert reply.status_code == 200, reply.text
    assert reply.json() == "Hello, Ann!"
    calls = calls_of(emulator, reply.headers["x-restate-id"])
    assert [(c["function"], c["qualifier"], c["path"], c["error_type"]) for c in calls] == [
        ("Examples", "1", "/invoke/Greeter/greet", None)
    ]


def test_a_sleep_suspends_and_resumes_through_lambda(dev: DevServer, emulator: LambdaEmulatorProcess) -> None:
    started = time.monotonic()
    reply = httpx.post(f"{dev.ingress_url}/Waits/sleep", json=1000, timeout=30)
    assert reply.status_code == 200, reply.text
    assert reply.json() == "slept 1000 ms"
    assert time.monotonic() - started >= 1.0
    calls = calls_of(emulator, reply.headers["x-restate-id"])
    assert len(calls) == 2  # the attempt that suspended, the one the timer resumed
    assert calls[1]["started_at_ms"] - calls[0]["ended_at_ms"] >= 900
    assert {c["qualifier"] for c in calls} == {"1"}


def test_a_virtual_object_keeps_its_state_between_lambda_invocations(dev: DevServer) -> None:
    key = f"lambda-{uuid.uuid4().hex[:8]}"
    first = httpx.post(f"{dev.ingress_url}/Counter/{key}/add", json=5, timeout=30)
    second = httpx.post(f"{dev.ingress_url}/Counter/{key}/add", json=5, timeout=30)
    assert (first.status_code, first.json()) == (200, 5)
    assert (second.status_code, second.json()) == (200, 10)
    state = httpx.get(f"{dev.admin_url}/services/Counter/state/{key}", timeout=10).json()
    assert state == {"key": key, "state": {"count": 10}, "version": state["version"]}


def test_a_workflow_waits_for_its_promise_through_lambda(dev: DevServer) -> None:
    workflow_id = f"wf-{uuid.uuid4().hex[:8]}"
    sent = httpx.post(f"{dev.ingress_url}/Signup/{workflow_id}/run/send", json="ann@example.com", timeout=30)
    assert sent.status_code == 202, sent.text
    wait_for(lambda: describe(dev, sent.json()["invocationId"])["status"] == "suspended", 20, "the workflow to suspend")
    confirmed = httpx.post(f"{dev.ingress_url}/Signup/{workflow_id}/confirm", json="C-1", timeout=30)
    assert (confirmed.status_code, confirmed.json()) == (200, "confirmed")
    result = httpx.get(f"{dev.ingress_url}/restate/workflow/Signup/{workflow_id}/attach", timeout=30)
    assert (result.status_code, result.json()) == (200, {"email": "ann@example.com", "confirmed_with": "C-1"})


# --- registration rules ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("arn", "what"),
    [
        (function_arn("Examples", "$LATEST"), 'the qualifier "$LATEST"'),
        (function_arn("Examples"), "an unqualified ARN"),
    ],
)
def test_an_unpinned_arn_is_refused_and_accepted_with_force(
    fresh_dev: DevServer, emulator: LambdaEmulatorProcess, arn: str, what: str
) -> None:
    refused = register(fresh_dev, arn)
    assert refused.status_code == 400, refused.text
    message = refused.json()["message"]
    assert message.startswith(f"{what} can change the code under a running invocation")
    assert message.endswith('or pass "force": true (torpor deployments register --force) to register it anyway')
    assert httpx.get(f"{fresh_dev.admin_url}/deployments", timeout=10).json() == {"deployments": []}

    forced = register(fresh_dev, arn, force=True)
    assert forced.status_code == 201, forced.text
    assert forced.json()["arn"] == arn
    reply = httpx.post(f"{fresh_dev.ingress_url}/Greeter/greet", json="Bo", timeout=30)
    assert (reply.status_code, reply.json()) == (200, "Hello, Bo!")
    [call] = calls_of(emulator, reply.headers["x-restate-id"])
    assert call["qualifier"] == ("$LATEST" if "$LATEST" in arn else None)
    assert call["executed_version"] == "$LATEST"


# --- failures and versions -------------------------------------------------------------------------


def test_a_function_error_is_a_failed_attempt_that_is_retried(
    fresh_dev: DevServer, emulator: LambdaEmulatorProcess
) -> None:
    assert register(fresh_dev, function_arn("Flaky", "1")).status_code == 201
    reply = httpx.post(f"{fresh_dev.ingress_url}/Greeter/greet", json="Cy", timeout=30)
    assert (reply.status_code, reply.json()) == (200, "Hello, Cy!")
    invocation_id = reply.headers["x-restate-id"]
    calls = calls_of(emulator, invocation_id)
    assert [(c["function"], c["error_type"]) for c in calls] == [("Flaky", "RuntimeError"), ("Flaky", None)]
    invocation = describe(fresh_dev, invocation_id)
    assert invocation["attempts"] == 2
    assert invocation["last_failure"] is None  # attempt 1's failure is no news once the invocation succeeded


def test_an_invocation_stays_on_version_1_after_version_2_is_registered(
    fresh_dev: DevServer, emulator: LambdaEmulatorProcess
) -> None:
    assert register(fresh_dev, EXAMPLES_1).status_code == 201
    sent = httpx.post(f"{fresh_dev.ingress_url}/Waits/sleep/send", json=1500, timeout=30)
    assert sent.status_code == 202, sent.text
    sleeping = sent.json()["invocationId"]
    wait_for(lambda: describe(fresh_dev, sleeping)["status"] == "suspended", 20, "the sleep to suspend")

    second = register(fresh_dev, EXAMPLES_2)
    assert second.status_code == 201, second.text
    registered_at_ms = int(time.time() * 1000)
    greeted = httpx.post(f"{fresh_dev.ingress_url}/Greeter/greet", json="Di", timeout=30)
    assert (greeted.status_code, greeted.json()) == (200, "Hello, Di!")
    assert [c["qualifier"] for c in calls_of(emulator, greeted.headers["x-restate-id"])] == ["2"]

    wait_for(lambda: describe(fresh_dev, sleeping)["status"] == "completed", 20, "the sleep to complete")
    calls = calls_of(emulator, sleeping)
    assert len(calls) == 2
    assert calls[1]["started_at_ms"] >= registered_at_ms  # the resumed attempt ran after :2 was registered
    assert [c["qualifier"] for c in calls] == ["1", "1"]
    assert describe(fresh_dev, sleeping)["deployment_id"] != second.json()["id"]


# --- torpor dev --lambda ---------------------------------------------------------------------------


def test_dev_server_runs_the_emulator_and_the_cli_registers_an_arn_with_a_role(moto_endpoint: str) -> None:
    server = DevServer(
        ingress_port=0,
        admin_port=0,
        dynamodb_endpoint=moto_endpoint,
        table=unique_table_name(),
        settings=SETTINGS,
        lambda_functions={"Examples": "examples.app:app"},
    )
    with server:
        emulator = server.lambda_emulator
        role = "arn:aws:iam::123456789012:role/torpor-invoker"
        result = CliRunner().invoke(
            main,
            ["--admin-url", server.admin_url, "deployments", "register", EXAMPLES_1, "--assume-role-arn", role],
            catch_exceptions=False,
        )
        assert result.exit_code == 0, result.output
        assert "Registered deployment dp_" in result.stdout
        reply = httpx.post(f"{server.ingress_url}/Greeter/greet", json="Ed", timeout=30)
        assert (reply.status_code, reply.json()) == (200, "Hello, Ed!")
        log = emulator.calls()
        [assumed] = log["assume_role_calls"]  # discovery and the call share the role's credentials
        assert (assumed["role_arn"], assumed["session_name"]) == (role, "torpor")
        [call] = calls_of(emulator, reply.headers["x-restate-id"])
        assert call["access_key_id"] == assumed["access_key_id"]
        assert emulator.running
    assert not emulator.running


def test_assume_role_arn_is_refused_for_a_url(fresh_dev: DevServer) -> None:
    result = CliRunner().invoke(
        main,
        ["--admin-url", fresh_dev.admin_url, "deployments", "register", "http://localhost:9080", "--assume-role-arn",
         "arn:aws:iam::123456789012:role/r"],
    )  # fmt: skip
    assert result.exit_code == 2
    assert "--assume-role-arn applies to Lambda ARNs only" in result.output
