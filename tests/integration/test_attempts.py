"""Failed attempts with real restate-sdk handlers: `ctx.run` retry policies, terminal-failure
metadata, a service's own retry policy, and what `last_failure` says.

`torpor dev` wiring on a moto server over HTTP; the services are defined here and served by
hypercorn (HTTP/1.1, request/response) in this process, so each test states its handler's code.
Executions of a `ctx.run` closure are counted in this process's memory, by invocation id.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator
from datetime import timedelta
from typing import Any

import httpx
import pytest
import restate
from restate import RunOptions, TerminalError
from restate.retry_policy import InvocationRetryPolicy

from adapters.local.dev import DevServer
from control_plane.ports import JournalBatch
from control_plane.protocol import encode_frames, frame
from control_plane.protocol import protocol_pb2 as pb
from control_plane.retry import RetryPolicy
from control_plane.settings import Settings
from tests.helpers.asgi import serve_asgi
from tests.helpers.dev import describe, wait_for
from tests.helpers.moto import unique_table_name

SETTINGS = Settings(
    inactivity_timeout_ms=10_000,
    lease_margin_ms=2_000,
    call_wait_ms=20_000,
    retry_policy=RetryPolicy(initial_interval_ms=50, max_interval_ms=200, max_attempts=20),
)

EXECUTIONS: Counter[str] = Counter()
"""`ctx.run` closure executions, by `{invocation id}/{step}` (test fixture only)."""

retries = restate.Service("Retries")


def _counted(ctx: restate.Context, step: str) -> int:
    key = f"{ctx.request().id}/{step}"
    EXECUTIONS[key] += 1
    return EXECUTIONS[key]


@retries.handler()
async def run_gives_up(ctx: restate.Context, max_attempts: int) -> dict:
    """A step that always fails with a retryable error, tried `max_attempts` times; the handler
    catches the TerminalError the SDK raises when it gives up."""

    def always_fails() -> str:
        raise ValueError(f"attempt {_counted(ctx, 'always fails')} of the step fails")

    options: RunOptions[str] = RunOptions(max_attempts=max_attempts, initial_retry_interval=timedelta(milliseconds=10))
    try:
        await ctx.run_typed("always fails", always_fails, options)
    except TerminalError as exc:
        return {"caught": exc.message, "executions": EXECUTIONS[f"{ctx.request().id}/always fails"]}
    return {"caught": None}


@retries.handler()
async def run_gives_up_after(ctx: restate.Context, max_duration_ms: int) -> dict:
    """A step that always fails, retried for at most `max_duration_ms` (RunOptions.max_duration)."""

    def always_fails() -> str:
        raise ValueError(f"execution {_counted(ctx, 'timed')} fails")

    options: RunOptions[str] = RunOptions(
        max_duration=timedelta(milliseconds=max_duration_ms), initial_retry_interval=timedelta(milliseconds=100)
    )
    try:
        await ctx.run_typed("timed", always_fails, options)
    except TerminalError as exc:
        return {"caught": exc.message, "executions": EXECUTIONS[f"{ctx.request().id}/timed"]}
    return {"caught": None}


@retries.handler()
async def run_succeeds_on(ctx: restate.Context, succeed_on: int) -> int:
    """A step that fails until its `succeed_on`-th execution, under a run retry policy of 5 attempts."""

    def flaky() -> int:
        n = _counted(ctx, "flaky")
        if n < succeed_on:
            raise ValueError(f"execution {n} fails")
        return n

    options: RunOptions[int] = RunOptions(max_attempts=5, initial_retry_interval=timedelta(milliseconds=10))
    return await ctx.run_typed("flaky", flaky, options)


@retries.handler()
async def set_then_run_gives_up(ctx: restate.Context, value: str) -> dict:
    """A state-less service has no state; a sleep-free command before the failing step: a one-way
    call (its callee runs once, however often the step is retried)."""
    ctx.generic_send("Retries", "echo", f'"{value}"'.encode())
    return await run_gives_up(ctx, 3)


@retries.handler()
async def echo(ctx: restate.Context, value: str) -> str:
    _counted(ctx, "echo")
    EXECUTIONS[f"echo/{value}"] += 1
    return value


@retries.handler()
async def fail_with_metadata(ctx: restate.Context, message: str) -> str:
    raise TerminalError(message, status_code=418, metadata={"reason": "teapot", "hint": "use coffee"})


@retries.handler()
async def call_fails_with_metadata(ctx: restate.Context, message: str) -> str:
    """Calls `fail_with_metadata` and lets its TerminalError through."""
    await ctx.generic_call("Retries", "fail_with_metadata", f'"{message}"'.encode())
    return "unreachable"


@retries.handler()
async def run_fails_with_metadata(ctx: restate.Context, message: str) -> str:
    """A step that fails terminally with metadata; the handler lets the error through."""

    def fails() -> str:
        raise TerminalError(message, status_code=422, metadata={"step": "charge"})

    return await ctx.run_typed("charge", fails)


one_shot = restate.Service("OneShot", invocation_retry_policy=InvocationRetryPolicy(max_attempts=0))


@one_shot.handler()
async def always_fails(ctx: restate.Context) -> str:
    _counted(ctx, "handler")
    raise ValueError("this attempt fails")


patched = restate.Service("Patched")


@patched.handler()
async def fails(ctx: restate.Context) -> str:
    _counted(ctx, "handler")
    raise ValueError("this attempt fails")


killed_by_policy = restate.Service(
    "KilledByPolicy", invocation_retry_policy=InvocationRetryPolicy(max_attempts=2, on_max_attempts="kill")
)


@killed_by_policy.handler()
async def sleeps_long(ctx: restate.Context) -> str:
    await ctx.sleep(timedelta(hours=1))
    return "woke"


@killed_by_policy.handler()
async def calls_then_fails(ctx: restate.Context) -> str:
    """Starts a call and an hour's sleep (neither awaited), suspends once on a short sleep (so both
    are stored), then fails on every attempt until its policy kills it."""
    ctx.generic_call("KilledByPolicy", "sleeps_long", b"")
    ctx.sleep(timedelta(hours=1))
    await ctx.sleep(timedelta(milliseconds=50))
    raise ValueError("this attempt fails")


@pytest.fixture(scope="module")
def services_url() -> Iterator[str]:
    app = restate.app([retries, one_shot, patched, killed_by_policy], protocol="request_response")
    with serve_asgi(app) as url:
        yield url


@pytest.fixture(scope="module")
def dev(moto_endpoint: str, services_url: str) -> Iterator[DevServer]:
    server = DevServer(
        ingress_port=0, admin_port=0, dynamodb_endpoint=moto_endpoint, table=unique_table_name(), settings=SETTINGS
    )
    server.start()
    try:
        reply = httpx.post(f"{server.admin_url}/deployments", json={"uri": services_url}, timeout=30)
        assert reply.status_code == 201, reply.text
        yield server
    finally:
        server.stop()


def call(dev: DevServer, path: str, body: Any) -> httpx.Response:
    return httpx.post(f"{dev.ingress_url}/{path}", json=body, timeout=60)


# --- ctx.run retry policies ------------------------------------------------------------------------


def test_a_step_that_always_fails_is_tried_max_attempts_times_then_the_handler_catches_a_terminal_error(
    dev: DevServer,
) -> None:
    reply = call(dev, "Retries/run_gives_up", 2)
    assert reply.status_code == 200, reply.text
    body = reply.json()
    assert body["executions"] == 2
    assert "attempt 2 of the step fails" in body["caught"]
    invocation = describe(dev, reply.headers["x-restate-id"])
    assert invocation["status"] == "completed"
    assert invocation["attempts"] == 3  # two executions of the step, then one that reads its failure
    assert [e["type"] for e in invocation["journal"]] == ["Input", "Run", "RunCompletion", "Output"]


def test_a_step_retried_for_a_max_duration_gives_up_once_it_has_passed(dev: DevServer) -> None:
    # the SDK adds up StartMessage.duration_since_last_stored_entry and the execution's own time
    reply = call(dev, "Retries/run_gives_up_after", 400)
    assert reply.status_code == 200, reply.text
    body = reply.json()
    assert body["caught"] is not None
    assert 2 <= body["executions"] < 20  # 20: the invocation's own policy, which it never reaches


def test_a_step_that_succeeds_on_its_third_execution_returns_that_execution(dev: DevServer) -> None:
    reply = call(dev, "Retries/run_succeeds_on", 3)
    assert reply.status_code == 200, reply.text
    assert reply.json() == 3
    assert describe(dev, reply.headers["x-restate-id"])["last_failure"] is None


def test_commands_before_a_failing_step_take_effect_once_however_often_it_is_retried(dev: DevServer) -> None:
    reply = call(dev, "Retries/set_then_run_gives_up", "once-only")
    assert reply.status_code == 200, reply.text
    assert reply.json()["executions"] == 3
    wait_for(lambda: EXECUTIONS["echo/once-only"] >= 1, 10, "the one-way call's callee to run")
    assert EXECUTIONS["echo/once-only"] == 1
    types = [e["type"] for e in describe(dev, reply.headers["x-restate-id"])["journal"]]
    assert types[:3] == ["Input", "OneWayCall", "Run"]


# --- terminal-failure metadata ---------------------------------------------------------------------


def test_a_terminal_error_with_metadata_answers_it_in_the_error_body(dev: DevServer) -> None:
    reply = call(dev, "Retries/fail_with_metadata", "no tea")
    assert reply.status_code == 418
    assert reply.json() == {
        "code": 418,
        "message": "no tea",
        "metadata": {"reason": "teapot", "hint": "use coffee"},
        "source": "invocation",
    }
    failure = describe(dev, reply.headers["x-restate-id"])["completion_failure"]
    assert failure["metadata"] == {"reason": "teapot", "hint": "use coffee"}


def test_a_callee_failure_keeps_its_metadata_through_the_caller(dev: DevServer) -> None:
    reply = call(dev, "Retries/call_fails_with_metadata", "still no tea")
    assert reply.status_code == 418
    assert reply.json() == {
        "code": 418,
        "message": "still no tea",
        "metadata": {"reason": "teapot", "hint": "use coffee"},
        "source": "invocation",
    }
    # the caller's journal shows the failure it was told, metadata included
    journal = describe(dev, reply.headers["x-restate-id"])["journal"]
    (told,) = [e for e in journal if e["type"] == "CallCompletion"]
    assert told["failure"] == {
        "code": 418,
        "message": "still no tea",
        "metadata": {"reason": "teapot", "hint": "use coffee"},
    }


def test_a_step_failure_keeps_its_metadata(dev: DevServer) -> None:
    reply = call(dev, "Retries/run_fails_with_metadata", "declined")
    assert reply.status_code == 422
    assert reply.json() == {"code": 422, "message": "declined", "metadata": {"step": "charge"}, "source": "invocation"}


def test_a_terminal_failure_with_a_large_message_and_input_completes_with_its_message_cut(dev: DevServer) -> None:
    # GIVEN a handler that fails terminally with its 250 KB input as the message
    message = "x" * 250_000
    sent = httpx.post(f"{dev.ingress_url}/restate/send/Retries/fail_with_metadata", json=message, timeout=30)
    assert sent.status_code == 202, sent.text
    invocation_id = sent.json()["invocationId"]
    # THEN it completes (it is not retried or paused), its failure cut with a marker saying how long it was
    invocation = wait_for(
        lambda: (d := describe(dev, invocation_id))["status"] not in ("running", "ready", "backing-off") and d,
        30,
        "the invocation to complete",
    )
    assert invocation["status"] == "completed", invocation.get("last_failure")
    assert invocation["attempts"] == 1
    output = httpx.get(f"{dev.ingress_url}/restate/invocation/{invocation_id}/output", timeout=30)
    assert output.status_code == 418
    assert len(output.json()["message"]) <= 4096
    assert output.json()["message"].endswith("[truncated: 250000 characters in all]")
    assert output.json()["metadata"] == {"reason": "teapot", "hint": "use coffee"}


# --- a service's own retry policy ------------------------------------------------------------------


def test_a_service_whose_policy_allows_zero_attempts_gets_exactly_one(dev: DevServer) -> None:
    reply = httpx.post(f"{dev.ingress_url}/restate/send/OneShot/always_fails", timeout=30)
    assert reply.status_code == 202, reply.text
    invocation_id = reply.json()["invocationId"]
    invocation = wait_for(
        lambda: (d := describe(dev, invocation_id))["status"] == "paused" and d, 20, "the invocation to pause"
    )
    assert invocation["attempts"] == 1
    assert EXECUTIONS[f"{invocation_id}/handler"] == 1


def test_max_attempts_zero_through_the_admin_api_is_a_400_naming_the_field(dev: DevServer) -> None:
    reply = httpx.patch(f"{dev.admin_url}/services/Patched", json={"retry_policy": {"max_attempts": 0}}, timeout=30)
    assert reply.status_code == 400
    assert "retry_policy.max_attempts" in reply.json()["message"]


def test_max_attempts_one_through_the_admin_api_gets_exactly_one_attempt(dev: DevServer) -> None:
    reply = httpx.patch(f"{dev.admin_url}/services/Patched", json={"retry_policy": {"max_attempts": 1}}, timeout=30)
    assert reply.status_code == 200, reply.text
    sent = httpx.post(f"{dev.ingress_url}/restate/send/Patched/fails", timeout=30)
    invocation_id = sent.json()["invocationId"]
    invocation = wait_for(
        lambda: (d := describe(dev, invocation_id))["status"] == "paused" and d, 20, "the invocation to pause"
    )
    assert invocation["attempts"] == 1
    assert EXECUTIONS[f"{invocation_id}/handler"] == 1


def test_an_invocation_killed_by_its_policy_kills_its_callees_and_drops_its_sleep_timers(dev: DevServer) -> None:
    sent = httpx.post(f"{dev.ingress_url}/restate/send/KilledByPolicy/calls_then_fails", timeout=30)
    assert sent.status_code == 202, sent.text
    invocation_id = sent.json()["invocationId"]
    invocation = wait_for(
        lambda: (d := describe(dev, invocation_id))["status"] == "completed" and d, 30, "the policy to kill it"
    )
    assert invocation["completion_kind"] == "killed"
    assert [e["type"] for e in invocation["journal"]][:4] == ["Input", "Call", "Sleep", "Sleep"]
    callee_id = next(e for e in invocation["journal"] if e["type"] == "CallInvocationIdCompletion")["invocation_id"]
    callee = wait_for(lambda: (d := describe(dev, callee_id))["status"] == "completed" and d, 10, "the callee's kill")
    assert callee["completion_kind"] == "killed", (invocation["journal"], callee)
    # no timer is left for the hour's sleep (the journal's retention timer is not due for a day)
    now_ms = dev.control_plane.clock.now_ms()
    timers = dev.control_plane.store.due_timers(now_ms + 2 * 3600 * 1000)
    assert [due for due, who in timers if who == invocation_id and due > now_ms + 1800 * 1000] == []


# --- what last_failure says --------------------------------------------------------------------------


def test_a_journal_mismatch_names_the_recorded_call_and_the_new_step(dev: DevServer) -> None:
    # GIVEN an invocation whose journal records a Call where the handler's code now runs a step
    cp = dev.control_plane
    record = cp.engine.create("Retries", "run_succeeds_on", b"1", {}, leased=True)
    cp.store._update_invocation(record.invocation_id, record.epoch, lease_until_ms=0, status="ready")
    recorded = pb.CallCommandMessage(
        service_name="Retries", handler_name="echo", parameter=b'"x"', result_completion_id=1, name="ask"
    )
    cp.store.append_batch(record.invocation_id, JournalBatch(1, encode_frames([frame(recorded)]), record.epoch, 1))
    # WHEN it is advanced
    cp.advance(record.invocation_id)
    # THEN its last failure names both sides: kind, name, index, and the call's target
    failure = describe(dev, record.invocation_id)["last_failure"]
    assert failure["code"] == 570
    assert "the journal recorded Call 'ask' to Retries/echo at command index 1" in failure["message"]
    assert "the handler now sends Run 'flaky' at command index 1" in failure["message"]
    assert failure["recorded_command"] == {"index": 1, "type": "Call", "name": "ask", "target": "Retries/echo"}
    assert failure["related_command_index"] == 1
    assert failure["related_command_type"] == "Run"
    assert failure["related_command_name"] == "flaky"
    assert "related_command" not in failure  # the name is said once, as related_command_name
    cp.engine.operations.kill(record.invocation_id)


def test_a_journal_mismatch_clips_a_long_recorded_target(dev: DevServer) -> None:
    # GIVEN an invocation whose journal records a Call with a 3000-character key where a step now runs
    cp = dev.control_plane
    record = cp.engine.create("Retries", "run_succeeds_on", b"1", {}, leased=True)
    cp.store._update_invocation(record.invocation_id, record.epoch, lease_until_ms=0, status="ready")
    recorded = pb.CallCommandMessage(
        service_name="Retries", handler_name="echo", key="k" * 3000, parameter=b'"x"', result_completion_id=1
    )
    cp.store.append_batch(record.invocation_id, JournalBatch(1, encode_frames([frame(recorded)]), record.epoch, 1))
    # WHEN it is advanced
    cp.advance(record.invocation_id)
    # THEN the recorded call's target is cut with a marker, as its name would be
    target = describe(dev, record.invocation_id)["last_failure"]["recorded_command"]["target"]
    assert len(target) <= 256
    assert target.startswith("Retries/kkk")
    assert target.endswith("[truncated: 3013 characters in all]")
    cp.engine.operations.kill(record.invocation_id)
