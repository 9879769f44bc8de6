"""Virtual objects and workflows with real restate-sdk handlers: keyed state, one writer per key,
workflows that run once, durable promises.

`torpor dev` wiring on a moto server over HTTP; the example services run under hypercorn.
"""

from __future__ import annotations

import hashlib
import itertools
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any
from urllib.parse import quote

import boto3
import httpx
import pytest

from adapters.local.dev import DevServer
from control_plane.settings import Settings
from examples.side_effects import read_side_effects
from tests.helpers.dev import describe, dev_with_examples, unique, wait_for
from tests.helpers.moto import DUMMY_AWS_ENV, REGION, moto_server, unique_table_name

# Calls wait up to 100 s before a 202: exclusive calls on one key run one after another (0.4 s to 2 s
# each on moto here, more as the key's inbox grows), and these tests check order and exclusion, not
# speed (that is bench/'s).
SETTINGS = Settings(inactivity_timeout_ms=10_000, lease_margin_ms=2_000, call_wait_ms=100_000)


@pytest.fixture(scope="module")
def dev(examples_url: str) -> Iterator[DevServer]:
    # one writer per key rests on atomic conditional writes: a serial moto, as `torpor dev` embeds
    # (the shared threaded one may let two conditional writers of one item both win)
    with moto_server(serial=True) as endpoint, dev_with_examples(endpoint, examples_url, SETTINGS) as server:
        yield server


def _dynamodb(dev: DevServer) -> Any:
    """A boto3 DynamoDB client on the test's moto server (dummy credentials), to read items as stored."""
    return boto3.client(
        "dynamodb",
        endpoint_url=dev.dynamodb_endpoint,
        region_name=REGION,
        aws_access_key_id=DUMMY_AWS_ENV["AWS_ACCESS_KEY_ID"],
        aws_secret_access_key=DUMMY_AWS_ENV["AWS_SECRET_ACCESS_KEY"],
    )


def parallel(calls: list[Callable[[], httpx.Response]]) -> list[httpx.Response]:
    results: list[httpx.Response | None] = [None] * len(calls)

    def run(i: int) -> None:
        results[i] = calls[i]()

    threads = [threading.Thread(target=run, args=(i,)) for i in range(len(calls))]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    assert all(r is not None for r in results)
    return [r for r in results if r is not None]


# --- one writer per key --------------------------------------------------------------------------


def test_twenty_concurrent_adds_on_one_key_end_at_twenty_and_never_overlap(dev: DevServer, effects_file: Path) -> None:
    key = unique("one-key")
    url = f"{dev.ingress_url}/Counter/{key}/add"
    replies = parallel([lambda: httpx.post(url, json=1, timeout=120) for _ in range(20)])
    assert [r.status_code for r in replies] == [200] * 20
    assert sorted(r.json() for r in replies) == list(range(1, 21))
    assert httpx.post(f"{dev.ingress_url}/Counter/{key}/get", timeout=30).json() == 20
    requests = sorted(
        (e["start"], e["end"])
        for e in read_side_effects(effects_file)
        if e.get("key") == key and e["step"] == "request"
    )
    assert len(requests) == 20
    for (_, end), (next_start, _) in itertools.pairwise(requests):
        assert end <= next_start, "two handler requests for one key overlapped"


def test_fifty_adds_over_ten_keys_run_concurrently(dev: DevServer, effects_file: Path) -> None:
    keys = [unique(f"k{i}") for i in range(10)]
    calls = [lambda k=k: httpx.post(f"{dev.ingress_url}/Counter/{k}/add", json=1, timeout=120) for k in keys * 5]
    replies = parallel(calls)
    assert all(r.status_code == 200 for r in replies)
    for k in keys:
        assert httpx.post(f"{dev.ingress_url}/Counter/{k}/get", timeout=30).json() == 5
    spans = [(e["start"], e["end"]) for e in read_side_effects(effects_file) if e.get("key") in keys]
    overlapping = sum(1 for a in spans for b in spans if a is not b and a[0] < b[1] and b[0] < a[1])
    assert overlapping > 0, "requests for different keys never ran at the same time"


def test_a_failed_attempts_state_write_is_never_visible(dev: DevServer) -> None:
    key = unique("fail")
    assert httpx.post(f"{dev.ingress_url}/Counter/{key}/add", json=5, timeout=30).json() == 5
    sent = httpx.post(f"{dev.ingress_url}/Counter/{key}/add_then_fail/send", json=100).json()
    wait_for(lambda: describe(dev, sent["invocationId"])["attempts"] >= 2, 20, "two failed attempts")
    state = httpx.get(f"{dev.admin_url}/services/Counter/state/{key}").json()
    assert state == {"key": key, "state": {"count": 5}, "version": state["version"]}
    assert httpx.patch(f"{dev.admin_url}/invocations/{sent['invocationId']}/kill").status_code == 202
    # the key is released by the kill: the next call runs at once
    assert httpx.post(f"{dev.ingress_url}/Counter/{key}/add", json=1, timeout=30).json() == 6


def test_a_sleeping_exclusive_handler_keeps_its_key_and_cancel_releases_it(dev: DevServer) -> None:
    key = unique("sleepy")
    sleeper = httpx.post(f"{dev.ingress_url}/Counter/{key}/add_after_sleep/send", json={"ms": 60_000, "delta": 1})
    sleeper_id = sleeper.json()["invocationId"]
    wait_for(lambda: describe(dev, sleeper_id)["status"] == "suspended", 10, "the sleep")
    waiting = httpx.post(f"{dev.ingress_url}/Counter/{key}/add/send", json=10).json()["invocationId"]
    time.sleep(0.5)
    assert describe(dev, waiting)["status"] == "pending"
    # shared handlers are not held up by the key's lock
    assert httpx.post(f"{dev.ingress_url}/Counter/{key}/get", timeout=10).json() == 0
    assert httpx.patch(f"{dev.admin_url}/invocations/{sleeper_id}/cancel").status_code == 202
    done = httpx.get(f"{dev.ingress_url}/restate/invocation/{waiting}/attach", timeout=30)
    assert done.json() == 10
    assert describe(dev, sleeper_id)["completion_failure"]["code"] == 409


def test_cancel_and_kill_of_pending_invocations_leave_the_inbox(dev: DevServer) -> None:
    key = unique("queue")
    holder = httpx.post(f"{dev.ingress_url}/Counter/{key}/add_after_sleep/send", json={"ms": 60_000, "delta": 1})
    holder_id = holder.json()["invocationId"]
    wait_for(lambda: describe(dev, holder_id)["status"] == "suspended", 10, "the sleep")
    first = httpx.post(f"{dev.ingress_url}/Counter/{key}/add/send", json=100).json()["invocationId"]
    second = httpx.post(f"{dev.ingress_url}/Counter/{key}/add/send", json=7).json()["invocationId"]
    assert httpx.patch(f"{dev.admin_url}/invocations/{first}/cancel").status_code == 202
    assert httpx.get(f"{dev.ingress_url}/restate/invocation/{first}/output").status_code == 409
    assert httpx.patch(f"{dev.admin_url}/invocations/{holder_id}/kill").status_code == 202
    assert httpx.get(f"{dev.ingress_url}/restate/invocation/{second}/attach", timeout=30).json() == 7


@pytest.mark.parametrize("key", ["with/slash", "spaces and ünïcödé 🎉", "x" * 1000, "%2F?&#"])
def test_keys_of_any_utf8_round_trip(dev: DevServer, key: str) -> None:
    path = quote(key, safe="")
    assert httpx.post(f"{dev.ingress_url}/Counter/{path}/add", json=3, timeout=30).json() == 3
    assert httpx.post(f"{dev.ingress_url}/restate/call/Counter/{path}/add", json=4, timeout=30).json() == 7
    described = httpx.post(f"{dev.ingress_url}/Counter/{path}/describe", timeout=30).json()
    assert described == {"key": key, "keys": ["count"]}
    shown = httpx.get(f"{dev.admin_url}/services/Counter/state/{path}").json()
    assert (shown["key"], shown["state"]) == (key, {"count": 7})


def test_admin_clears_an_objects_state(dev: DevServer) -> None:
    key = unique("clear")
    httpx.post(f"{dev.ingress_url}/Counter/{key}/add", json=2, timeout=30)
    assert httpx.delete(f"{dev.admin_url}/services/Counter/state/{key}").status_code == 202
    cleared = httpx.get(f"{dev.admin_url}/services/Counter/state/{key}").json()
    assert (cleared["key"], cleared["state"]) == (key, {})
    assert httpx.get(f"{dev.admin_url}/services/Greeter/state/{key}").status_code == 400


def test_keyed_paths_need_a_key_and_plain_services_take_none(dev: DevServer) -> None:
    assert httpx.post(f"{dev.ingress_url}/restate/call/Counter/add", json=1).status_code == 400
    assert httpx.post(f"{dev.ingress_url}/restate/call/Greeter/k/greet", json="x").status_code == 400
    assert httpx.post(f"{dev.ingress_url}/Greeter/greet/send", json="x").status_code == 202


# --- lazy state ------------------------------------------------------------------------------------


def test_lazy_state_reads_work_and_cost_one_suspension_each(dev: DevServer) -> None:
    key = unique("lazy")
    assert httpx.post(f"{dev.ingress_url}/LazyCounter/{key}/put", json={"a": "1", "b": "2"}, timeout=30).json() == 2
    reply = httpx.post(f"{dev.ingress_url}/LazyCounter/{key}/read_many", json=["a", "b", "zz"], timeout=30)
    assert reply.json() == {"values": {"a": "1", "b": "2", "zz": None}, "keys": ["a", "b"]}
    invocation = describe(dev, reply.headers["x-restate-id"])
    # 3 reads + 1 key listing, each a completion from Torpor: 4 suspensions, 5 requests
    assert invocation["attempts"] == 5
    types = [e["type"] for e in invocation["journal"]]
    assert types.count("GetLazyState") == 3
    assert types.count("GetLazyStateKeys") == 1


def test_state_above_the_eager_limit_is_sent_lazily(moto_endpoint: str, examples_url: str) -> None:
    server = DevServer(
        ingress_port=0,
        admin_port=0,
        dynamodb_endpoint=moto_endpoint,
        table=unique_table_name(),
        settings=SETTINGS.with_overrides(eager_state_max_bytes=1),
    )
    server.start()
    try:
        server.control_plane.registry.register(examples_url)
        assert httpx.post(f"{server.ingress_url}/Counter/big/add", json=7, timeout=30).json() == 7
        reply = httpx.post(f"{server.ingress_url}/Counter/big/add", json=1, timeout=30)
        assert reply.json() == 8
        invocation = describe(server, reply.headers["x-restate-id"])
        assert "GetLazyState" in [e["type"] for e in invocation["journal"]]
        assert invocation["attempts"] == 2
    finally:
        server.stop()


def test_a_crash_between_creating_a_call_and_taking_its_key_leaves_it_to_wait_its_turn(examples_url: str) -> None:
    settings = SETTINGS.with_overrides(inactivity_timeout_ms=1_000, lease_margin_ms=500)
    with moto_server(serial=True) as endpoint, dev_with_examples(endpoint, examples_url, settings) as server:
        store = server.control_plane.store
        take_key = store.take_key
        crashed: list[str] = []

        def crash_once(scope: str, key: str, invocation_id: str) -> Any:
            if not crashed:
                crashed.append(invocation_id)
                raise RuntimeError("the process died between creating the invocation and taking its key")
            return take_key(scope, key, invocation_id)

        store.take_key = crash_once  # type: ignore[method-assign]
        key = unique("crash")
        assert httpx.post(f"{server.ingress_url}/Counter/{key}/add", json=1, timeout=30).status_code >= 500
        # created (running, leased) but never holding the key: a later call takes the free key
        assert httpx.post(f"{server.ingress_url}/Counter/{key}/add", json=10, timeout=30).json() == 10
        wait_for(lambda: store.get_invocation(crashed[0]).lease_until_ms < time.time() * 1000, 10, "lease to expire")
        server.control_plane.engine.advance(crashed[0])  # what the sweep does for an expired lease
        wait_for(lambda: describe(server, crashed[0])["status"] == "completed", 30, "the crashed call to complete")
        assert store.get_invocation(crashed[0]).output == b"11"  # type: ignore[union-attr]
        assert store.key_status("Counter", key) == (None, None)


# --- workflows -------------------------------------------------------------------------------------


def test_workflow_runs_once_and_a_shared_handler_resolves_its_promise(dev: DevServer) -> None:
    wf = unique("wf")
    sent = httpx.post(f"{dev.ingress_url}/Signup/{wf}/run/send", json="ann@example.com")
    assert sent.status_code == 202
    run_id = sent.json()["invocationId"]
    again = httpx.post(f"{dev.ingress_url}/Signup/{wf}/run/send", json="other@example.com")
    assert again.status_code == 202
    assert again.json() == {"invocationId": run_id, "status": "PreviouslyAccepted"}
    called = httpx.post(f"{dev.ingress_url}/Signup/{wf}/run", json="x", timeout=30)
    assert called.status_code == 409
    assert called.json() == {"code": 409, "message": "the workflow method was already invoked", "source": "invocation"}
    wait_for(lambda: describe(dev, run_id)["status"] == "suspended", 10, "run to await the promise")
    assert httpx.get(f"{dev.ingress_url}/restate/workflow/Signup/{wf}/output").status_code == 470
    assert httpx.post(f"{dev.ingress_url}/Signup/{wf}/peek", timeout=30).json() == "pending"
    status = httpx.post(f"{dev.ingress_url}/Signup/{wf}/status", timeout=30).json()
    assert status == {"email": "ann@example.com", "stage": "waiting for confirmation"}
    assert httpx.post(f"{dev.ingress_url}/Signup/{wf}/confirm", json="C-1", timeout=30).json() == "confirmed"
    attached = httpx.get(f"{dev.ingress_url}/restate/workflow/Signup/{wf}/attach", timeout=30)
    assert attached.json() == {"email": "ann@example.com", "confirmed_with": "C-1"}
    assert httpx.get(f"{dev.ingress_url}/restate/workflow/Signup/{wf}/output").json()["confirmed_with"] == "C-1"
    # completing the promise twice keeps the first value; the second completer gets a failure
    second = httpx.post(f"{dev.ingress_url}/Signup/{wf}/confirm", json="C-2", timeout=30)
    assert second.status_code == 409
    assert httpx.post(f"{dev.ingress_url}/Signup/{wf}/peek", timeout=30).json() == "C-1"
    assert httpx.post(f"{dev.ingress_url}/Signup/{wf}/status", timeout=30).json()["stage"] == "confirmed"


def test_a_promise_resolved_before_run_awaits_it(dev: DevServer) -> None:
    wf = unique("early")
    assert httpx.post(f"{dev.ingress_url}/Signup/{wf}/confirm", json="EARLY", timeout=30).json() == "confirmed"
    reply = httpx.post(f"{dev.ingress_url}/Signup/{wf}/run", json="bo@example.com", timeout=30)
    assert reply.status_code == 200
    assert reply.json() == {"email": "bo@example.com", "confirmed_with": "EARLY"}


def test_workflow_attach_and_output_of_an_unknown_id_are_404(dev: DevServer) -> None:
    assert httpx.get(f"{dev.ingress_url}/restate/workflow/Signup/nope/attach").status_code == 404
    assert httpx.get(f"{dev.ingress_url}/restate/workflow/Signup/nope/output").status_code == 404


def test_workflow_state_and_promises_get_the_retention_ttl(dev: DevServer) -> None:
    wf = unique("ttl")
    httpx.post(f"{dev.ingress_url}/Signup/{wf}/confirm", json="T", timeout=30)
    httpx.post(f"{dev.ingress_url}/Signup/{wf}/run", json="t@example.com", timeout=30)
    items = _dynamodb(dev).query(
        TableName=dev.table,
        KeyConditionExpression="PK = :pk",
        ExpressionAttributeValues={":pk": {"S": f"OBJ#Signup#{hashlib.sha256(wf.encode()).hexdigest()}"}},
    )["Items"]
    assert len(items) >= 3  # two state entries and the promise, at least
    horizon = time.time() + SETTINGS.workflow_retention_ms / 1000
    assert all(abs(int(item["expires_at"]["N"]) - horizon) < 120 for item in items)


def _workflow_items(dev: DevServer, wf: str) -> list[dict[str, Any]]:
    return _dynamodb(dev).query(
        TableName=dev.table,
        KeyConditionExpression="PK = :pk",
        ExpressionAttributeValues={":pk": {"S": f"OBJ#Signup#{hashlib.sha256(wf.encode()).hexdigest()}"}},
    )["Items"]


def test_a_promise_completed_before_its_workflow_ever_ran_expires_after_the_workflow_retention(
    dev: DevServer,
) -> None:
    wf = unique("no-run")
    assert httpx.post(f"{dev.ingress_url}/Signup/{wf}/confirm", json="C", timeout=30).json() == "confirmed"
    items = _workflow_items(dev, wf)
    assert len(items) == 1  # the promise
    horizon = time.time() + SETTINGS.workflow_retention_ms / 1000
    assert abs(int(items[0]["expires_at"]["N"]) - horizon) < 120
    # a run started later keeps it for as long as it runs: the TTL goes, and comes back when it ends
    run = httpx.post(f"{dev.ingress_url}/Signup/{wf}/run/send", json="c@example.com", timeout=30)
    assert run.status_code == 202
    done = httpx.get(f"{dev.ingress_url}/restate/workflow/Signup/{wf}/attach", timeout=30)
    assert done.json() == {"email": "c@example.com", "confirmed_with": "C"}
    wait_for(lambda: all("expires_at" in item for item in _workflow_items(dev, wf)), 10, "the run's retention TTL")


def test_a_run_created_while_a_promise_s_expiry_is_written_keeps_the_promise(
    dev: DevServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    # GIVEN a workflow run created (delayed: it stays under way) just after `confirm` found no run,
    # just before the promise's expiry is written
    wf = unique("race")
    store = dev.control_plane.engine.store
    expire_keyed = store.expire_keyed

    def run_created_first(scope: str, key: str, expires_at_s: int) -> None:
        if key == wf and expires_at_s and not run_created:
            run_created.append(
                dev.control_plane.engine.create(
                    "Signup",
                    "run",
                    b'"r@example.com"',
                    {},
                    key=wf,
                    leased=False,
                    execution_time_ms=int(time.time() * 1000) + 3_600_000,
                )
            )
        expire_keyed(scope, key, expires_at_s)

    run_created: list[Any] = []
    monkeypatch.setattr(store, "expire_keyed", run_created_first)
    # WHEN the shared handler completes the promise
    assert httpx.post(f"{dev.ingress_url}/Signup/{wf}/confirm", json="R", timeout=30).json() == "confirmed"
    # THEN the promise carries no TTL: the run, still to come, will read it
    assert run_created
    items = _workflow_items(dev, wf)
    assert items
    assert [item.get("expires_at") for item in items] == [None] * len(items)
    dev.control_plane.engine.operations.kill(run_created[0].invocation_id)


# --- calls between services ------------------------------------------------------------------------


def test_a_handler_calls_another_service_and_gets_its_result(dev: DevServer) -> None:
    reply = httpx.post(f"{dev.ingress_url}/Calls/greet_twice", json="ann", timeout=30)
    assert reply.status_code == 200, reply.text
    assert reply.json() == ["Hello, ann!", "Hello, ANN!"]
    journal = [e["type"] for e in describe(dev, reply.headers["x-restate-id"])["journal"]]
    assert journal.count("Call") == 2
    assert journal.count("CallCompletion") == 2
    assert journal.count("CallInvocationIdCompletion") == 2


def test_calls_to_an_object_key_go_through_its_inbox(dev: DevServer) -> None:
    key = unique("called")
    reply = httpx.post(f"{dev.ingress_url}/Calls/count_to", json={"key": key, "n": 3}, timeout=60)
    assert reply.status_code == 200, reply.text
    assert reply.json() == 3
    assert httpx.post(f"{dev.ingress_url}/Counter/{key}/get", timeout=30).json() == 3


def test_a_callees_terminal_failure_reaches_the_caller(dev: DevServer) -> None:
    reply = httpx.post(f"{dev.ingress_url}/Calls/call_failing", json="no stock", timeout=30)
    assert reply.status_code == 200, reply.text
    assert reply.json() == "callee failed with 422: no stock"


def test_cancel_propagates_to_the_open_callee_first_and_kill_kills_it_too(dev: DevServer, effects_file: Path) -> None:
    for action in ("cancel", "kill"):
        caller = httpx.post(f"{dev.ingress_url}/Calls/book_via/send", json=60_000).json()["invocationId"]

        def callee_id(caller: str = caller) -> str | None:
            journal = describe(dev, caller)["journal"]
            ids = [e.get("invocation_id") for e in journal if e["type"] == "CallInvocationIdCompletion"]
            return ids[0] if ids else None

        wait_for(lambda c=caller: describe(dev, c)["status"] == "suspended", 10, "the caller to wait")
        callee = wait_for(callee_id, 10, "the callee's id")
        wait_for(lambda c=callee: describe(dev, c)["status"] == "suspended", 10, "the callee's sleep")
        assert httpx.patch(f"{dev.admin_url}/invocations/{caller}/{action}").status_code == 202
        done = httpx.get(f"{dev.ingress_url}/restate/invocation/{callee}/attach", timeout=30)
        assert done.status_code == 409
        steps = [e["step"] for e in read_side_effects(effects_file) if e["invocation_id"] == callee]
        assert steps == (["reserve", "release"] if action == "cancel" else ["reserve"])
        outcome = httpx.get(f"{dev.ingress_url}/restate/invocation/{caller}/attach", timeout=30)
        assert outcome.status_code == 409


def test_invocations_are_listed_by_service_handler_and_key_and_paged(dev: DevServer) -> None:
    key = unique("listed")
    ids = [
        httpx.post(f"{dev.ingress_url}/Counter/{key}/add", json=1, timeout=30).headers["x-restate-id"] for _ in range(3)
    ]
    httpx.post(f"{dev.ingress_url}/Counter/{key}/get", timeout=30)
    query = {"service": "Counter", "handler": "add", "key": key, "limit": "2"}
    first = httpx.get(f"{dev.admin_url}/invocations", params=query).json()
    assert [i["id"] for i in first["invocations"]] == ids[::-1][:2]
    second = httpx.get(f"{dev.admin_url}/invocations", params={**query, "page_token": first["next_page_token"]}).json()
    assert [i["id"] for i in second["invocations"]] == ids[:1]
    assert "next_page_token" not in second
    with_status = httpx.get(f"{dev.admin_url}/invocations", params={**query, "status": "completed", "limit": "10"})
    assert [i["id"] for i in with_status.json()["invocations"]] == ids[::-1]
    assert httpx.get(f"{dev.admin_url}/invocations", params={"page_token": "garbage"}).status_code == 400
    assert httpx.get(f"{dev.admin_url}/invocations", params={"limit": "0"}).status_code == 400


def test_a_call_waiting_for_its_key_is_not_paused_and_the_calls_behind_it_run(dev: DevServer) -> None:
    # GIVEN a key held by a sleeping call, and a second call waiting for it (pending)
    key = unique("paused-in-queue")
    holder = httpx.post(f"{dev.ingress_url}/Counter/{key}/add_after_sleep/send", json={"ms": 1500, "delta": 1})
    wait_for(lambda: describe(dev, holder.json()["invocationId"])["status"] == "suspended", 10, "the holder's sleep")
    waiting = httpx.post(f"{dev.ingress_url}/Counter/{key}/add/send", json=10).json()["invocationId"]
    wait_for(lambda: describe(dev, waiting)["status"] == "pending", 10, "the second call to queue up")
    # WHEN it is paused while it still waits (as restate-server: "not running")
    refused = httpx.patch(f"{dev.admin_url}/invocations/{waiting}/pause")
    # THEN the pause is refused, naming the fix; it keeps its one place in the key's queue
    assert refused.status_code == 409, refused.text
    assert "not running yet" in refused.json()["message"]
    assert "cancel or kill" in refused.json()["message"]
    assert describe(dev, waiting)["status"] == "pending"
    lock = _dynamodb(dev).get_item(
        TableName=dev.table,
        Key={"PK": {"S": f"OBJ#Counter#{hashlib.sha256(key.encode()).hexdigest()}"}, "SK": {"S": "LOCK"}},
    )["Item"]
    assert [entry.split("#")[-1] for entry in lock["queued"]["SS"]] == [waiting]
    # and it, then a call sent after it, complete in order (before the fix a paused one was granted the
    # key and held it, paused, before every later call), leaving the key free and its queue empty
    behind = httpx.post(f"{dev.ingress_url}/Counter/{key}/add/send", json=100).json()["invocationId"]
    wait_for(lambda: describe(dev, behind)["status"] == "completed", 30, "the call behind it")
    assert httpx.get(f"{dev.ingress_url}/restate/invocation/{waiting}/output").json() == 11
    assert httpx.get(f"{dev.ingress_url}/restate/invocation/{behind}/output").json() == 111
    assert dev.store.key_status("Counter", key) == (None, None)
