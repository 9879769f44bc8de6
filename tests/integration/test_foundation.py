"""Durable invocations of real restate-sdk services through Torpor's ingress, journaled in DynamoDB.

Wiring as `torpor dev` has it (ingress, admin, local work queue and timers) on a moto server over
HTTP; the example services run in their own process under hypercorn (HTTP/1.1, request/response).
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from adapters.local.dev import DevServer
from control_plane.ports import JournalBatch
from control_plane.protocol import encode_frames, frame
from control_plane.protocol import protocol_pb2 as pb
from control_plane.retry import RetryPolicy
from control_plane.settings import Settings
from examples.side_effects import read_side_effects
from tests.helpers.dev import describe, dev_with_examples
from tests.helpers.moto import unique_table_name

SETTINGS = Settings(
    inactivity_timeout_ms=10_000,
    lease_margin_ms=2_000,
    call_wait_ms=20_000,
    retry_policy=RetryPolicy(initial_interval_ms=200, max_attempts=5),
)


@pytest.fixture(scope="module")
def dev(moto_endpoint: str, examples_url: str) -> Iterator[DevServer]:
    with dev_with_examples(moto_endpoint, examples_url, SETTINGS) as server:
        yield server


def effects_of(effects_file: Path, invocation_id: str) -> list[str]:
    return [e["step"] for e in read_side_effects(effects_file) if e["invocation_id"] == invocation_id]


# --- calls ---------------------------------------------------------------------------------------


@pytest.mark.parametrize("path", ["/restate/call/Greeter/greet", "/Greeter/greet"])
def test_greeter_call_answers_the_handlers_result_with_its_invocation_id(dev: DevServer, path: str) -> None:
    reply = httpx.post(dev.ingress_url + path, json="Ann", timeout=30)
    assert reply.status_code == 200
    assert reply.json() == "Hello, Ann!"
    assert reply.headers["content-type"] == "application/json"
    invocation = describe(dev, reply.headers["x-restate-id"])
    assert invocation["status"] == "completed"
    assert invocation["target"] == "Greeter/greet"
    assert [e["type"] for e in invocation["journal"]] == ["Input", "Output"]


def test_ten_sequential_steps_take_eleven_requests_and_run_each_closure_once(
    dev: DevServer, effects_file: Path
) -> None:
    reply = httpx.post(f"{dev.ingress_url}/Steps/ten_steps", json="ten", timeout=30)
    assert reply.status_code == 200, reply.text
    assert reply.json() == list(range(1, 11))
    invocation_id = reply.headers["x-restate-id"]
    invocation = describe(dev, invocation_id)
    assert invocation["attempts"] == 11
    types = [e["type"] for e in invocation["journal"]]
    assert types == ["Input"] + ["Run", "RunCompletion"] * 10 + ["Output"]
    assert effects_of(effects_file, invocation_id) == [f"step-{i}" for i in range(1, 11)]


def test_terminal_error_answers_its_code_and_message_and_is_not_retried(dev: DevServer) -> None:
    reply = httpx.post(f"{dev.ingress_url}/Steps/fail_terminal", json="card declined", timeout=30)
    assert reply.status_code == 422
    assert reply.json() == {"code": 422, "message": "card declined", "source": "invocation"}
    invocation = describe(dev, reply.headers["x-restate-id"])
    assert invocation["attempts"] == 1
    assert invocation["completion_failure"] == {"code": 422, "message": "card declined"}


def test_retryable_error_is_retried_with_backoff_until_the_third_attempt_succeeds(dev: DevServer) -> None:
    started = time.monotonic()
    reply = httpx.post(f"{dev.ingress_url}/Steps/flaky", json=3, timeout=30)
    elapsed = time.monotonic() - started
    assert reply.status_code == 200, reply.text
    assert reply.json() == "ok after 3 attempts"
    invocation = describe(dev, reply.headers["x-restate-id"])
    assert invocation["attempts"] == 3
    assert invocation["last_failure"] is None  # the failures of attempts 1 and 2 are no news once it succeeded
    # backoff of the policy in SETTINGS: 200 ms, then 400 ms
    assert elapsed >= 0.6


def test_send_answers_202_and_the_result_is_attached_and_read_by_id(dev: DevServer) -> None:
    sent = httpx.post(f"{dev.ingress_url}/restate/send/Steps/one_step", json=41, timeout=30)
    assert sent.status_code == 202
    body = sent.json()
    assert body["status"] == "Accepted"
    assert body["invocationId"].startswith("inv_1")
    assert sent.headers["x-restate-id"] == body["invocationId"]
    attached = httpx.get(f"{dev.ingress_url}/restate/invocation/{body['invocationId']}/attach", timeout=30)
    assert attached.status_code == 200
    assert attached.json() == 42
    output = httpx.get(f"{dev.ingress_url}/restate/invocation/{body['invocationId']}/output", timeout=30)
    assert output.status_code == 200
    assert output.json() == 42
    assert describe(dev, body["invocationId"])["status"] == "completed"


def test_plain_send_path_is_accepted_too(dev: DevServer) -> None:
    sent = httpx.post(f"{dev.ingress_url}/Greeter/greet/send", json="Bo", timeout=30)
    assert sent.status_code == 202
    attached = httpx.get(f"{dev.ingress_url}/restate/invocation/{sent.json()['invocationId']}/attach", timeout=30)
    assert attached.json() == "Hello, Bo!"


# --- bad requests ----------------------------------------------------------------------------------


def test_unknown_service_is_a_404_naming_it(dev: DevServer) -> None:
    reply = httpx.post(f"{dev.ingress_url}/restate/call/Nope/greet", json="x", timeout=10)
    assert reply.status_code == 404
    assert reply.json()["code"] == 404
    assert "'Nope'" in reply.json()["message"]


def test_unknown_handler_is_a_404_naming_it(dev: DevServer) -> None:
    reply = httpx.post(f"{dev.ingress_url}/Greeter/shout", json="x", timeout=10)
    assert reply.status_code == 404
    assert "'shout'" in reply.json()["message"]
    assert "greet" in reply.json()["message"]


@pytest.mark.parametrize("body", [b"NaN", b"[Infinity]"])
def test_non_standard_json_constants_are_a_400(dev: DevServer, body: bytes) -> None:
    reply = httpx.post(f"{dev.ingress_url}/Greeter/greet", content=body, headers={"content-type": "application/json"})
    assert reply.status_code == 400
    assert "is not JSON" in reply.json()["message"]


def test_bad_json_for_a_json_handler_is_a_400(dev: DevServer) -> None:
    reply = httpx.post(
        f"{dev.ingress_url}/Greeter/greet", content=b"{not json", headers={"content-type": "application/json"}
    )
    assert reply.status_code == 400
    assert "not valid JSON" in reply.json()["message"]


def test_a_body_for_a_handler_without_input_is_a_400(dev: DevServer) -> None:
    reply = httpx.post(f"{dev.ingress_url}/Steps/no_input", json="surprise", timeout=10)
    assert reply.status_code == 400
    assert "takes no input" in reply.json()["message"]
    assert httpx.post(f"{dev.ingress_url}/Steps/no_input", timeout=30).json() == "done"


def test_delay_on_a_call_is_a_400(dev: DevServer) -> None:
    reply = httpx.post(f"{dev.ingress_url}/Greeter/greet?delay=10s", json="x", timeout=10)
    assert reply.status_code == 400


def test_unknown_invocation_is_a_404(dev: DevServer) -> None:
    unknown = "inv_1" + "0" * 22
    assert httpx.get(f"{dev.ingress_url}/restate/invocation/{unknown}/output").status_code == 404
    assert httpx.get(f"{dev.admin_url}/invocations/{unknown}").status_code == 404


def test_journal_mismatch_is_reported_and_the_invocation_pauses_after_max_attempts(dev: DevServer) -> None:
    # GIVEN an invocation whose stored journal no longer matches the handler's code: a Sleep where
    # Steps/one_step runs a step (as if the code changed under a running invocation)
    cp = dev.control_plane
    record = cp.engine.create("Steps", "one_step", b"1", {}, leased=True)
    cp.store._update_invocation(record.invocation_id, record.epoch, lease_until_ms=0, status="ready")
    sleep = encode_frames([frame(pb.SleepCommandMessage(wake_up_time=1, result_completion_id=1, name="nap"))])
    cp.store.append_batch(record.invocation_id, JournalBatch(1, sleep, record.epoch, 1))
    # WHEN it is advanced
    cp.advance(record.invocation_id)

    # THEN every attempt fails with 570, and after the policy's 5 attempts it is paused
    def paused() -> dict[str, Any] | None:
        described = describe(dev, record.invocation_id)
        return described if described["status"] == "paused" else None

    deadline = time.monotonic() + 30
    invocation = paused()
    while invocation is None and time.monotonic() < deadline:
        time.sleep(0.05)
        invocation = paused()
    assert invocation is not None
    assert invocation["last_failure"]["code"] == 570
    assert invocation["attempts"] == 5
    assert invocation["next_retry_at"] is None


def test_a_call_that_outlasts_the_bound_answers_202_and_can_be_attached(moto_endpoint: str, examples_url: str) -> None:
    server = DevServer(
        ingress_port=0,
        admin_port=0,
        dynamodb_endpoint=moto_endpoint,
        table=unique_table_name(),
        settings=SETTINGS.with_overrides(call_wait_ms=300),
    )
    server.start()
    try:
        server.control_plane.registry.register(examples_url)
        reply = httpx.post(f"{server.ingress_url}/Steps/slow_steps", json={"n": 3, "step_ms": 250}, timeout=30)
        assert reply.status_code == 202
        assert reply.json() == {"invocationId": reply.headers["x-restate-id"], "status": "Accepted"}
        early = httpx.get(f"{server.ingress_url}/restate/invocation/{reply.headers['x-restate-id']}/output")
        assert early.status_code == 470
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            attached = httpx.get(f"{server.ingress_url}/restate/invocation/{reply.headers['x-restate-id']}/attach")
            if attached.status_code == 200:
                break
            assert attached.status_code == 202
        assert attached.status_code == 200
        assert attached.json() == 6
    finally:
        server.stop()


# --- DynamoDB's 400 KB item limit ------------------------------------------------------------------


def test_an_input_too_large_for_an_item_is_a_413_and_stores_nothing(dev: DevServer) -> None:
    reply = httpx.post(f"{dev.ingress_url}/Greeter/greet", json="x" * 500_000, timeout=30)
    assert reply.status_code == 413
    assert "400 KB" in reply.json()["message"] or "bytes" in reply.json()["message"]
    assert "x-restate-id" not in reply.headers


def test_an_output_that_does_not_fit_beside_its_input_fails_with_413(dev: DevServer) -> None:
    reply = httpx.post(f"{dev.ingress_url}/Greeter/greet", json="y" * 250_000, timeout=30)
    assert reply.status_code == 413
    assert "TORPOR_BLOB_BUCKET" in reply.json()["message"]  # this store has no blob store
    invocation = describe(dev, reply.headers["x-restate-id"])
    assert invocation["status"] == "completed"
    assert invocation["completion_failure"]["code"] == 413


def test_a_run_result_too_large_for_an_item_fails_with_413_and_is_not_retried(dev: DevServer) -> None:
    reply = httpx.post(f"{dev.ingress_url}/Steps/big_step", json=450_000, timeout=30)
    assert reply.status_code == 413
    assert "journal entry" in reply.json()["message"]
    invocation = describe(dev, reply.headers["x-restate-id"])
    assert invocation["attempts"] == 1
    assert "RunCompletion" not in [e["type"] for e in invocation["journal"]]
    fits = httpx.post(f"{dev.ingress_url}/Steps/big_step", json=300_000, timeout=30)
    assert fits.status_code == 200
    assert fits.json() == 300_000


def test_a_journal_entry_that_fits_in_an_item_is_kept_without_a_blob_store(dev: DevServer) -> None:
    # 400 000 bytes: above the 393 216 bytes the journal once took, below DynamoDB's 409 600-byte item
    reply = httpx.post(f"{dev.ingress_url}/Steps/big_step", json=400_000, timeout=30)
    assert reply.status_code == 200, reply.text[:300]
    assert reply.json() == 400_000


# --- idempotency keys ------------------------------------------------------------------------------


def test_a_repeated_call_with_an_idempotency_key_gets_the_first_result_and_id(
    dev: DevServer, effects_file: Path
) -> None:
    key = {"idempotency-key": f"order-{time.time_ns()}"}
    first = httpx.post(f"{dev.ingress_url}/Steps/one_step", json=1, headers=key, timeout=30)
    again = httpx.post(f"{dev.ingress_url}/Steps/one_step", json=99, headers=key, timeout=30)
    assert first.status_code == again.status_code == 200
    assert first.json() == again.json() == 2
    assert again.headers["x-restate-id"] == first.headers["x-restate-id"]
    assert effects_of(effects_file, first.headers["x-restate-id"]) == ["add-one"]
    other = httpx.post(f"{dev.ingress_url}/Steps/one_step", json=1, headers={"idempotency-key": "other"}, timeout=30)
    assert other.headers["x-restate-id"] != first.headers["x-restate-id"]


def test_a_repeated_send_with_an_idempotency_key_is_previously_accepted(dev: DevServer) -> None:
    key = {"idempotency-key": f"send-{time.time_ns()}"}
    first = httpx.post(f"{dev.ingress_url}/Greeter/greet/send", json="a", headers=key).json()
    again = httpx.post(f"{dev.ingress_url}/Greeter/greet/send", json="b", headers=key).json()
    assert first["status"] == "Accepted"
    assert again == {"invocationId": first["invocationId"], "status": "PreviouslyAccepted"}
    attached = httpx.get(f"{dev.ingress_url}/restate/invocation/{first['invocationId']}/attach", timeout=30)
    assert attached.json() == "Hello, a!"


def test_an_empty_idempotency_key_is_a_400(dev: DevServer) -> None:
    reply = httpx.post(f"{dev.ingress_url}/Greeter/greet", json="a", headers={"idempotency-key": ""})
    assert reply.status_code == 400
