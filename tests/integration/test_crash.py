"""Crash test: `torpor dev` is killed with SIGKILL while a 10-step invocation is in flight.

A new `torpor dev` on the same DynamoDB (a moto server over HTTP) picks the invocation up in its
start-up sweep once the dead process's lease expires, and completes it: the right result, no step
journaled twice, and at most the step in flight when the process died executed twice.
"""

from __future__ import annotations

import signal
import subprocess
import threading
import time
from collections import Counter
from contextlib import AbstractContextManager
from pathlib import Path
from typing import Any

import httpx

from adapters.local.dev import DevServer
from control_plane.settings import Settings
from examples.side_effects import read_side_effects
from tests.helpers.dev import torpor_dev_process, wait_completed, wait_for
from tests.helpers.moto import unique_table_name
from tests.helpers.services import serve_examples

STEPS = 10


def torpor_dev(moto_endpoint: str, table: str) -> AbstractContextManager[tuple[str, str, subprocess.Popen[bytes]]]:
    """`torpor dev` on the moto table in a subprocess (see `torpor_dev_process`)."""
    return torpor_dev_process("--dynamodb-endpoint", moto_endpoint, "--table", table)


def test_sigkill_mid_invocation_loses_nothing_and_repeats_at_most_the_step_in_flight(
    moto_endpoint: str, tmp_path: Path
) -> None:
    effects = tmp_path / "effects.jsonl"
    table = unique_table_name()
    with serve_examples(side_effects_file=effects) as (services_url, _services):
        # GIVEN an invocation of 10 slow steps in flight, with some steps committed
        with torpor_dev(moto_endpoint, table) as (ingress, admin, first):
            assert httpx.post(f"{admin}/deployments", json={"uri": services_url}, timeout=30).status_code == 201
            sent = httpx.post(
                f"{ingress}/restate/send/Steps/slow_steps", json={"n": STEPS, "step_ms": 150}, timeout=30
            ).json()
            invocation_id = sent["invocationId"]

            def committed_steps() -> int:
                journal = httpx.get(f"{admin}/invocations/{invocation_id}", timeout=5).json().get("journal", [])
                return sum(1 for e in journal if e["type"] == "RunCompletion")

            wait_for(lambda: committed_steps() >= 3, 30, "three committed steps")
            # WHEN the control plane dies without any chance to clean up
            first.send_signal(signal.SIGKILL)
            first.wait(10)
        steps_before = [e["step"] for e in read_side_effects(effects) if e["invocation_id"] == invocation_id]
        assert len(steps_before) < STEPS, "the invocation finished before the kill; make the steps slower"

        # THEN a new process on the same table resumes it from the journal
        with torpor_dev(moto_endpoint, table) as (ingress, admin, _second):
            invocation = wait_completed(admin, invocation_id)
            output = httpx.get(f"{ingress}/restate/invocation/{invocation_id}/output", timeout=10)
            assert output.status_code == 200
            assert output.json() == STEPS * (STEPS + 1) // 2

    journal = invocation["journal"]
    runs = [e["name"] for e in journal if e["type"] == "Run"]
    completions = [e["completion_id"] for e in journal if e["type"] == "RunCompletion"]
    assert runs == [f"step-{i}" for i in range(1, STEPS + 1)]
    assert len(completions) == len(set(completions)) == STEPS
    executed = Counter(e["step"] for e in read_side_effects(effects) if e["invocation_id"] == invocation_id)
    assert set(executed) == {f"step-{i}" for i in range(1, STEPS + 1)}
    repeated = [step for step, count in executed.items() if count > 1]
    assert len(repeated) <= 1
    assert all(executed[s] == 2 for s in repeated)


def test_a_sleep_survives_sigkill_and_fires_at_once_after_a_restart_past_its_due_time(
    moto_endpoint: str, tmp_path: Path
) -> None:
    table = unique_table_name()
    with serve_examples(side_effects_file=tmp_path / "effects.jsonl") as (services_url, _services):
        # GIVEN an invocation sleeping 5 s under a torpor dev that is then killed
        with torpor_dev(moto_endpoint, table) as (ingress, admin, first):
            assert httpx.post(f"{admin}/deployments", json={"uri": services_url}, timeout=30).status_code == 201
            invocation_id = httpx.post(f"{ingress}/Waits/sleep/send", json=5000, timeout=30).json()["invocationId"]
            wait_for(
                lambda: httpx.get(f"{admin}/invocations/{invocation_id}").json()["status"] == "suspended",
                10,
                "the sleep to suspend",
            )
            due_ms = int(time.time() * 1000) + 5000
            first.send_signal(signal.SIGKILL)
            first.wait(10)
        # WHEN nothing runs until after the due time, then torpor dev starts again
        time.sleep(max(0.0, (due_ms - time.time() * 1000) / 1000) + 0.3)
        with torpor_dev(moto_endpoint, table) as (ingress, admin, _second):
            restarted_at = time.monotonic()  # it answers: its start-up (imports, table checks) is not timed
            # THEN the invocation completes at once, with exactly one more handler request
            done = wait_for(
                lambda: (d := httpx.get(f"{admin}/invocations/{invocation_id}").json())["status"] == "completed" and d,
                10,
                "the invocation to complete after the restart",
            )
            assert time.monotonic() - restarted_at < 5
            assert done["attempts"] == 2
            assert [e["type"] for e in done["journal"]] == ["Input", "Sleep", "SleepCompletion", "Output"]
            assert httpx.get(f"{ingress}/restate/invocation/{invocation_id}/output").json() == "slept 5000 ms"


def test_stopping_torpor_dev_mid_call_answers_202_and_the_next_start_finishes_it(
    moto_endpoint: str, tmp_path: Path
) -> None:
    table = unique_table_name()
    settings = Settings(inactivity_timeout_ms=5_000, lease_margin_ms=1_000, call_wait_ms=60_000)
    with serve_examples(side_effects_file=tmp_path / "effects.jsonl") as (services_url, _services):
        wiring = {"ingress_port": 0, "admin_port": 0, "dynamodb_endpoint": moto_endpoint, "table": table}
        first = DevServer(**wiring, settings=settings)  # type: ignore[arg-type]
        first.start()
        first.control_plane.registry.register(services_url)
        replies: list[httpx.Response] = []
        caller = threading.Thread(
            target=lambda: replies.append(
                httpx.post(f"{first.ingress_url}/Steps/slow_steps", json={"n": 6, "step_ms": 300}, timeout=60)
            )
        )
        caller.start()
        wait_for(lambda: first.store.list_invocations(["running"], None, 10), 10, "the call to start")
        # WHEN the control plane is stopped while the call runs
        stop_started = time.monotonic()
        first.stop()
        caller.join(30)
        # THEN it stops within an attempt, not after the 60 s call wait, and the caller gets the id
        assert time.monotonic() - stop_started < 10
        assert replies[0].status_code == 202
        invocation_id = replies[0].json()["invocationId"]
        # AND the next start picks the invocation up and finishes it
        second = DevServer(
            ingress_port=0, admin_port=0, dynamodb_endpoint=moto_endpoint, table=table, settings=settings
        )
        second.start()
        try:
            done = httpx.get(f"{second.ingress_url}/restate/invocation/{invocation_id}/attach", timeout=60)
            assert done.status_code == 200
            assert done.json() == 21
        finally:
            second.stop()


def test_sigkill_mid_chain_and_a_restart_complete_the_chain_once(moto_endpoint: str, tmp_path: Path) -> None:
    effects = tmp_path / "effects.jsonl"
    table = unique_table_name()
    with serve_examples(side_effects_file=effects) as (services_url, _services):
        # GIVEN a chain A → B → C where C sleeps, under a torpor dev that is then killed
        with torpor_dev(moto_endpoint, table) as (ingress, admin, first):
            assert httpx.post(f"{admin}/deployments", json={"uri": services_url}, timeout=30).status_code == 201
            a = httpx.post(f"{ingress}/Chain/a/send", json=2000, timeout=30).json()["invocationId"]

            def described(invocation_id: str) -> dict[str, Any]:
                body: dict[str, Any] = httpx.get(f"{admin}/invocations/{invocation_id}", timeout=5).json()
                return body

            def callee(caller: str) -> str | None:
                ids = [e["invocation_id"] for e in described(caller)["journal"] if "invocation_id" in e]
                return ids[0] if ids else None

            b = wait_for(lambda: callee(a), 10, "a's call to b")
            c = wait_for(lambda: callee(b), 10, "b's call to c")
            wait_for(lambda: described(c)["status"] == "suspended", 10, "c's sleep")
            first.send_signal(signal.SIGKILL)
            first.wait(10)
        # WHEN torpor dev starts again on the same table
        with torpor_dev(moto_endpoint, table) as (ingress, admin, _second):
            # THEN the chain completes, each caller getting its callee's result
            done = httpx.get(f"{ingress}/restate/invocation/{a}/attach", timeout=60)
            assert done.status_code == 200, done.text
            assert done.json() == "a(b(c))"
    # AND every step of every link ran exactly once
    executed = Counter(e["step"] for e in read_side_effects(effects) if e["invocation_id"] in {a, b, c})
    assert executed == Counter(["a-start", "b-start", "c-start", "c-done", "b-done", "a-done"])
