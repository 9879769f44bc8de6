"""Calls between services with real restate-sdk handlers: a chain A → B → C, cancel through it,
idempotency keys on calls, journal and idempotency retention, and a call cycle on one object key.

`torpor dev` wiring on a moto server over HTTP; the example services run under hypercorn.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import boto3
import httpx
import pytest
from click.testing import CliRunner
from prometheus_client.parser import text_string_to_metric_families

from adapters.cli import main as cli
from adapters.local.dev import DevServer
from control_plane.settings import Settings
from examples.side_effects import read_side_effects
from tests.helpers.dev import describe, dev_with_examples, unique, wait_for

SETTINGS = Settings(inactivity_timeout_ms=10_000, lease_margin_ms=2_000, call_wait_ms=30_000)


@pytest.fixture(scope="module")
def dev(moto_endpoint: str, examples_url: str) -> Iterator[DevServer]:
    with dev_with_examples(moto_endpoint, examples_url, SETTINGS) as server:
        yield server


def callee_of(dev: DevServer, caller: str) -> str | None:
    """The invocation id the caller's first Call was given, once it is journaled."""
    journal = describe(dev, caller)["journal"]
    ids = [e.get("invocation_id") for e in journal if e["type"] == "CallInvocationIdCompletion"]
    return ids[0] if ids else None


def steps_of(effects_file: Path, *invocation_ids: str) -> list[str]:
    wanted = set(invocation_ids)
    return [e["step"] for e in read_side_effects(effects_file) if e["invocation_id"] in wanted]


def test_a_chain_of_three_calls_returns_the_innermost_result_through_each_caller(
    dev: DevServer, effects_file: Path
) -> None:
    reply = httpx.post(f"{dev.ingress_url}/Chain/a", json=0, timeout=30)
    assert reply.status_code == 200, reply.text
    assert reply.json() == "a(b(c))"
    a = reply.headers["x-restate-id"]
    b = callee_of(dev, a)
    assert b is not None
    c = callee_of(dev, b)
    assert c is not None
    assert describe(dev, c)["status"] == "completed"
    assert sorted(steps_of(effects_file, a, b, c)) == sorted(
        ["a-start", "b-start", "c-start", "c-done", "b-done", "a-done"]
    )


def test_cancel_of_the_chain_head_travels_down_through_each_sdk(dev: DevServer, effects_file: Path) -> None:
    # as restate-server 1.7.12 does: A sees the signal, its SDK cancels B (and B's SDK, C) while A compensates
    a = httpx.post(f"{dev.ingress_url}/Chain/a/send", json=60_000, timeout=30).json()["invocationId"]
    b = wait_for(lambda: callee_of(dev, a), 10, "a's call to b")
    c = wait_for(lambda: callee_of(dev, b), 10, "b's call to c")
    wait_for(lambda: describe(dev, c)["status"] == "suspended", 10, "c's sleep")

    assert httpx.patch(f"{dev.admin_url}/invocations/{a}/cancel").status_code == 202

    for invocation in (a, b, c):
        outcome = httpx.get(f"{dev.ingress_url}/restate/invocation/{invocation}/attach", timeout=30)
        assert outcome.status_code == 409, outcome.text
    compensations = [s for s in steps_of(effects_file, a, b, c) if s.endswith("-compensate")]
    assert compensations == ["a-compensate", "b-compensate", "c-compensate"]
    assert "c-done" not in steps_of(effects_file, c)


def test_two_callers_with_one_idempotency_key_share_one_callee_run(dev: DevServer, effects_file: Path) -> None:
    key = unique("once")
    request = {"key": key, "ms": 1500}
    replies: list[httpx.Response] = []
    callers = [
        threading.Thread(
            target=lambda: replies.append(httpx.post(f"{dev.ingress_url}/Chain/call_once", json=request, timeout=30))
        )
        for _ in range(2)
    ]
    for caller in callers:
        caller.start()
        time.sleep(0.3)  # the second caller arrives while the callee sleeps
    for caller in callers:
        caller.join(30)
    assert [r.status_code for r in replies] == [200, 200]
    work_ids = {r.json() for r in replies}
    assert len(work_ids) == 1, "both callers must get the one callee's result"
    (work,) = work_ids
    assert {r.headers["x-restate-id"] for r in replies} != {work}
    assert steps_of(effects_file, work) == ["work"]
    # a caller arriving after the callee completed gets its stored result at once
    late = httpx.post(f"{dev.ingress_url}/Chain/call_once", json=request, timeout=30)
    assert late.json() == work
    assert steps_of(effects_file, work) == ["work"]
    # another key is another callee
    other = httpx.post(f"{dev.ingress_url}/Chain/call_once", json={"key": unique("other"), "ms": 0}, timeout=30)
    assert other.json() != work


def test_concurrent_duplicates_at_the_ingress_attach_to_the_one_run(dev: DevServer, effects_file: Path) -> None:
    headers = {"idempotency-key": unique("dup")}
    replies: list[httpx.Response] = []

    def post() -> None:
        replies.append(httpx.post(f"{dev.ingress_url}/Chain/work", json=1000, headers=headers, timeout=30))

    threads = [threading.Thread(target=post) for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(30)
    assert [r.status_code for r in replies] == [200] * 4
    ids = {r.headers["x-restate-id"] for r in replies}
    assert len(ids) == 1
    assert {r.json() for r in replies} == ids
    assert steps_of(effects_file, *ids) == ["work"]


def test_journal_goes_after_its_retention_and_the_key_runs_again_after_the_idempotency_retention(
    dev: DevServer, effects_file: Path
) -> None:
    config = {"journal_retention": "1s", "idempotency_retention": "4s"}
    assert httpx.patch(f"{dev.admin_url}/services/Chain", json=config).status_code == 200
    try:
        headers = {"idempotency-key": unique("kept")}
        first = httpx.post(f"{dev.ingress_url}/Chain/work", json=0, headers=headers, timeout=30)
        invocation = first.headers["x-restate-id"]
        assert len(describe(dev, invocation)["journal"]) > 1

        # after the journal retention: the journal is gone, the result still answers the same key
        def journal_removed() -> bool:
            dev.control_plane.sweep()
            return len(describe(dev, invocation)["journal"]) == 1  # the input alone, kept in the record

        wait_for(journal_removed, 10, "the journal to be removed")
        assert not dev.store.load_invocation(invocation).batches  # type: ignore[union-attr]
        again = httpx.post(f"{dev.ingress_url}/Chain/work", json=0, headers=headers, timeout=30)
        assert again.headers["x-restate-id"] == invocation
        assert again.json() == first.json()

        # after the idempotency retention: the invocation is gone and the same key runs anew
        def record_removed() -> bool:
            dev.control_plane.sweep()
            return httpx.get(f"{dev.admin_url}/invocations/{invocation}").status_code == 404

        wait_for(record_removed, 15, "the invocation to be removed")
        third = httpx.post(f"{dev.ingress_url}/Chain/work", json=0, headers=headers, timeout=30)
        assert third.status_code == 200
        assert third.headers["x-restate-id"] == invocation  # the key's id, free again
        assert steps_of(effects_file, invocation) == ["work", "work"]
    finally:
        httpx.patch(f"{dev.admin_url}/services/Chain", json={"journal_retention": None, "idempotency_retention": None})


def test_a_completed_call_writes_no_timer_its_retention_is_found_by_the_sweep(dev: DevServer) -> None:
    reply = httpx.post(f"{dev.ingress_url}/Chain/work", json=0, timeout=30)
    assert reply.status_code == 200
    invocation = reply.headers["x-restate-id"]
    assert dev.store.shards == 16  # an external table: the setting's count

    client = boto3.client("dynamodb", region_name=dev.store.region, endpoint_url=dev.store.endpoint_url)
    items = [
        item
        for page in client.get_paginator("scan").paginate(TableName=dev.store.table_name)
        for item in page["Items"]
        if item["PK"]["S"].startswith("TIMER")
    ]
    assert [item for item in items if item.get("invocation_id", {}).get("S") == invocation] == []
    record = dev.store.get_invocation(invocation)
    assert record is not None
    assert record.journal_expires_at_ms > 0
    assert invocation in [due.invocation_id for due in dev.store.due_retention(record.journal_expires_at_ms, 10_000)]


def test_an_expired_idempotency_key_runs_anew_even_before_the_sweep(dev: DevServer, effects_file: Path) -> None:
    assert httpx.patch(f"{dev.admin_url}/services/Chain", json={"idempotency_retention": "1s"}).status_code == 200
    assert httpx.patch(f"{dev.admin_url}/services/Chain", json={"journal_retention": "1s"}).status_code == 200
    try:
        headers = {"idempotency-key": unique("expired")}
        first = httpx.post(f"{dev.ingress_url}/Chain/work", json=0, headers=headers, timeout=30)
        time.sleep(2.2)
        second = httpx.post(f"{dev.ingress_url}/Chain/work", json=0, headers=headers, timeout=30)
        assert second.status_code == 200
        assert second.headers["x-restate-id"] == first.headers["x-restate-id"]
        assert steps_of(effects_file, first.headers["x-restate-id"]) == ["work", "work"]
    finally:
        httpx.patch(f"{dev.admin_url}/services/Chain", json={"journal_retention": None, "idempotency_retention": None})


def test_an_object_calling_its_own_key_is_a_deadlock_named_by_describe_and_broken_by_kill(dev: DevServer) -> None:
    key = unique("self")
    caller = httpx.post(f"{dev.ingress_url}/Counter/{key}/add_via_self/send", json=5).json()["invocationId"]
    callee = wait_for(lambda: callee_of(dev, caller), 10, "the call to its own key")
    wait_for(lambda: describe(dev, callee)["status"] == "pending", 10, "the callee to queue for the key")

    described: dict[str, Any] = wait_for(lambda: describe(dev, caller).get("deadlock"), 10, "a deadlock report")
    assert described["cycle"] == [caller, callee, caller]
    assert "cancel or kill" in described["message"]
    callee_view = describe(dev, callee)
    assert callee_view["waiting_for_key_holder"] == caller
    assert callee_view["deadlock"]["cycle"] == [callee, caller, callee]

    shown = CliRunner().invoke(
        cli, ["--admin-url", dev.admin_url, "invocations", "describe", caller], env={"COLUMNS": "200"}
    )
    assert shown.exit_code == 0, shown.output
    assert "DEADLOCK" in shown.output

    # killing the caller releases the key and kills its queued callee first (restate-server 1.7.12 kills it too)
    assert httpx.patch(f"{dev.admin_url}/invocations/{caller}/kill").status_code == 202
    assert httpx.get(f"{dev.ingress_url}/restate/invocation/{callee}/attach", timeout=30).status_code == 409
    assert describe(dev, callee)["completion_kind"] == "killed"
    assert describe(dev, callee)["attempts"] == 0
    assert httpx.post(f"{dev.ingress_url}/Counter/{key}/add", json=1, timeout=30).json() == 1


def test_metrics_costs_and_trace_context_of_an_invocation(dev: DevServer) -> None:
    trace = "4bf92f3577b34da6a3ce929d0e0e4736"
    reply = httpx.post(
        f"{dev.ingress_url}/Chain/trace", headers={"traceparent": f"00-{trace}-00f067aa0ba902b7-01"}, timeout=30
    )
    assert reply.status_code == 200, reply.text
    # the handler's attempt carried the caller's trace, with the invocation's own span
    sent = reply.json()["traceparent"]
    assert sent.startswith(f"00-{trace}-")
    assert not sent.startswith(f"00-{trace}-00f067aa0ba902b7")
    invocation = describe(dev, reply.headers["x-restate-id"])
    assert invocation["trace_id"] == trace
    # the AWS requests it caused, and their cost at list prices
    requests = invocation["aws_requests"]
    assert requests["dynamodb PutItem META"] == 1  # its creation
    # a call that ends in one write (Executor.end): its completing write cannot count itself in the record it writes
    assert sum(n for kind, n in requests.items() if kind.startswith("dynamodb")) >= 1
    assert 0 < invocation["aws_cost_usd"]["dynamodb"] < 1e-4

    metrics = httpx.get(f"{dev.admin_url}/metrics", timeout=10)
    assert metrics.headers["content-type"].startswith("text/plain")
    text = metrics.text
    sleeper = httpx.post(f"{dev.ingress_url}/Waits/sleep", json=50, timeout=30)  # a timer fires
    assert sleeper.status_code == 200
    text = httpx.get(f"{dev.admin_url}/metrics", timeout=10).text
    # the exposition parses, with help text, and the durations are histograms (see docs/observability.md)
    families = {family.name: family for family in text_string_to_metric_families(text)}
    for name in ("timer_lateness", "attempt_duration", "invocation_duration", "store_call_duration"):
        family = families[f"torpor_{name}_seconds"]
        assert family.type == "histogram", name
        assert family.documentation, name
        assert any(s.name.endswith("_bucket") and s.labels["le"] == "+Inf" and s.value >= 1 for s in family.samples)
    samples = {
        (s.name, tuple(sorted(s.labels.items()))): s.value for family in families.values() for s in family.samples
    }
    chain = (("handler", "trace"), ("service", "Chain"))
    assert samples[("torpor_invocations_completed_total", (*chain[:1], ("outcome", "success"), chain[1]))] >= 1
    assert samples[("torpor_attempts_total", chain)] >= 1
    assert samples[("torpor_attempt_duration_seconds_count", chain)] >= 1
    assert samples[("torpor_invocation_duration_seconds_count", (*chain[:1], ("outcome", "success"), chain[1]))] >= 1
    assert samples[("torpor_store_call_duration_seconds_count", (("operation", "create_invocation"),))] >= 2

    shown = CliRunner().invoke(
        cli, ["--admin-url", dev.admin_url, "invocations", "describe", invocation["id"]], env={"COLUMNS": "200"}
    )
    assert "AWS requests" in shown.output
    assert "dynamodb" in shown.output
    assert "per million" in shown.output


def test_cancelling_a_caller_takes_its_callee_out_of_another_holders_inbox(dev: DevServer, effects_file: Path) -> None:
    # as restate-server 1.7.12 does (which keeps no record of the callee; Torpor keeps it, cancelled)
    key = unique("held")
    holder = httpx.post(f"{dev.ingress_url}/Counter/{key}/add_after_sleep/send", json={"ms": 3000, "delta": 1})
    wait_for(lambda: describe(dev, holder.json()["invocationId"])["status"] == "suspended", 10, "the holder's sleep")
    caller = httpx.post(f"{dev.ingress_url}/Calls/count_to/send", json={"key": key, "n": 1}).json()["invocationId"]
    callee = wait_for(lambda: callee_of(dev, caller), 10, "the call")
    wait_for(lambda: describe(dev, callee)["status"] == "pending", 10, "the callee to queue for the key")
    assert httpx.patch(f"{dev.admin_url}/invocations/{caller}/cancel").status_code == 202
    assert httpx.get(f"{dev.ingress_url}/restate/invocation/{caller}/attach", timeout=30).status_code == 409
    wait_for(lambda: describe(dev, callee)["status"] == "completed", 10, "the callee to leave the inbox")
    assert describe(dev, callee)["completion_kind"] == "cancelled"
    assert describe(dev, callee)["attempts"] == 0
    assert (
        httpx.get(f"{dev.ingress_url}/restate/invocation/{holder.json()['invocationId']}/attach", timeout=30).json()
        == 1
    )
    assert httpx.post(f"{dev.ingress_url}/Counter/{key}/get", timeout=30).json() == 1


def test_killing_one_caller_of_a_shared_callee_kills_it_for_every_caller(dev: DevServer, effects_file: Path) -> None:
    # as restate-server 1.7.12 does: a kill reaches every callee the killed handler started
    request = {"key": unique("shared"), "ms": 3000}
    callers = [
        httpx.post(f"{dev.ingress_url}/Chain/call_once/send", json=request, timeout=30).json()["invocationId"]
        for _ in range(2)
    ]
    work = wait_for(lambda: callee_of(dev, callers[0]), 10, "the first caller's call")
    wait_for(lambda: dev.store.get_invocation(work).callers, 10, "the second caller to attach")  # type: ignore[union-attr]
    assert httpx.patch(f"{dev.admin_url}/invocations/{callers[0]}/kill").status_code == 202
    killed = httpx.get(f"{dev.ingress_url}/restate/invocation/{callers[0]}/attach", timeout=30)
    assert killed.status_code == 409
    other = httpx.get(f"{dev.ingress_url}/restate/invocation/{callers[1]}/attach", timeout=30)
    assert (other.status_code, other.json()["message"]) == (409, "killed")
    assert describe(dev, work)["completion_kind"] == "killed"
    assert describe(dev, callers[1])["completion_kind"] == "failed"  # it failed with its callee's 409
    assert steps_of(effects_file, work) == []


def test_cancelling_a_deadlocked_caller_lets_its_queued_callee_run_after_it(dev: DevServer) -> None:
    # as restate-server 1.7.12 does: the callee waiting for the caller's key is not cancelled with
    # it; the caller's SDK sends it the cancel signal, which it gets once it runs (`add` never awaits)
    key = unique("self-cancel")
    caller = httpx.post(f"{dev.ingress_url}/Counter/{key}/add_via_self/send", json=5).json()["invocationId"]
    callee = wait_for(lambda: callee_of(dev, caller), 10, "the call to its own key")
    wait_for(lambda: describe(dev, caller).get("deadlock"), 10, "a deadlock report")
    assert httpx.patch(f"{dev.admin_url}/invocations/{caller}/cancel").status_code == 202
    ended = httpx.get(f"{dev.ingress_url}/restate/invocation/{caller}/attach", timeout=30)
    assert (ended.status_code, ended.json()["message"]) == (409, "cancelled")
    ran = httpx.get(f"{dev.ingress_url}/restate/invocation/{callee}/attach", timeout=30)
    assert (ran.status_code, ran.json()) == (200, 5)
    assert httpx.post(f"{dev.ingress_url}/Counter/{key}/get", timeout=30).json() == 5
    assert describe(dev, caller)["completion_kind"] == "cancelled"
    assert describe(dev, callee)["completion_kind"] == "succeeded"


def test_an_unexpected_error_in_the_control_plane_is_a_counted_failed_attempt(
    dev: DevServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    executor = dev.control_plane.engine.executor
    real_commit = executor.commit
    broken: list[str] = []

    def commit_once_broken(held: Any, entries: Any) -> Any:
        if not broken:
            broken.append(held.record.invocation_id)
            raise RuntimeError("store went away")
        return real_commit(held, entries)

    monkeypatch.setattr(executor, "commit", commit_once_broken)
    real_end = executor.end

    def end_once_broken(held: Any, entries: Any) -> Any:  # Greeter/greet ends in one write: the same fault there
        if not broken:
            broken.append(held.record.invocation_id)
            raise RuntimeError("store went away")
        return real_end(held, entries)

    monkeypatch.setattr(executor, "end", end_once_broken)
    reply = httpx.post(f"{dev.ingress_url}/Greeter/greet", json="Bug", timeout=30)
    assert reply.status_code == 200, reply.text  # retried by the policy, and then it went through
    assert reply.json() == "Hello, Bug!"
    invocation = describe(dev, reply.headers["x-restate-id"])
    assert invocation["attempts"] == 2  # the failed attempt was counted (its last_failure went with the success)
    assert invocation["last_failure"] is None
