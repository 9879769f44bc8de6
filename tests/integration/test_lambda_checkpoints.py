"""In-process checkpoints on Lambda (`adapters.aws.checkpoints`), end to end through `torpor dev`'s
Lambda path: the local Lambda emulator (its own process) hosts the example app and a paced test app
with the checkpoint wrapper, committing run results to the dev server's SQLite store; the control
plane invokes them through the real `LambdaInvoker`.

What a user sees: a handler of ten `ctx.run` steps costs one Invoke (`attempts` in
`GET /invocations/{id}`), five steps + a sleep + five steps costs two, and the result and the
journal are those of request/response mode; a function killed mid-way never runs a committed step
again; a stale epoch commits nothing.
"""

from __future__ import annotations

import base64
import json
import os
import signal
import time
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any

import httpx
import pytest

from adapters.aws.checkpoints import FENCE_EVERY_MS, Checkpoints, asgi_app_of
from adapters.local.dev import DevServer
from adapters.local.lambda_emulator import function_arn
from adapters.local.sqlite_store import SQLiteStore
from control_plane import ids
from control_plane.held import Held
from control_plane.protocol import MessageType, decode_frames, encode_frames, frame, invocation_content_type
from control_plane.protocol import protocol_pb2 as pb
from control_plane.retry import RetryPolicy
from control_plane.settings import Settings
from examples.side_effects import SIDE_EFFECTS_ENV, read_side_effects
from tests.helpers import checkpoint_app
from tests.helpers.dev import describe, wait_for

SETTINGS = Settings(
    inactivity_timeout_ms=20_000,
    lease_margin_ms=2_000,
    call_wait_ms=30_000,
    retry_policy=RetryPolicy(initial_interval_ms=100, max_attempts=20),
)
FUNCTIONS = {"Examples": "examples.app:app", "Paced": "tests.helpers.checkpoint_app:app"}


def start(checkpoints: bool, side_effects: Path, settings: Settings = SETTINGS) -> DevServer:
    os.environ[SIDE_EFFECTS_ENV] = str(side_effects)  # the emulator's process inherits it
    server = DevServer(
        ingress_port=0,
        admin_port=0,
        in_memory=True,
        settings=settings,
        lambda_functions=FUNCTIONS,
        lambda_checkpoints=checkpoints,
    ).start()
    for name in FUNCTIONS:
        reply = httpx.post(f"{server.admin_url}/deployments", json={"arn": function_arn(name, "1")}, timeout=30)
        assert reply.status_code == 201, reply.text
    return server


@pytest.fixture(scope="module")
def side_effects(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("checkpoints") / "side_effects.jsonl"


@pytest.fixture(scope="module")
def dev(side_effects: Path) -> Iterator[DevServer]:
    server = start(True, side_effects)
    try:
        yield server
    finally:
        server.stop()
        os.environ.pop(SIDE_EFFECTS_ENV, None)


def call(dev: DevServer, path: str, body: Any) -> tuple[Any, str]:
    reply = httpx.post(f"{dev.ingress_url}/{path}", json=body, timeout=60)
    assert reply.status_code == 200, reply.text
    return reply.json(), reply.headers["x-restate-id"]


def journal_of(dev: DevServer, invocation_id: str) -> list[Any]:
    body = describe(dev, invocation_id)
    return list(body["journal"])


def steps_of(side_effects: Path, invocation_id: str) -> list[str]:
    return [e["step"] for e in read_side_effects(side_effects) if e["invocation_id"] == invocation_id]


def test_ten_steps_take_one_invoke(dev: DevServer, side_effects: Path) -> None:
    result, invocation_id = call(dev, "Steps/ten_steps", "one invoke")
    assert result == list(range(1, 11))
    invocation = describe(dev, invocation_id)
    assert invocation["attempts"] == 1
    assert steps_of(side_effects, invocation_id) == [f"step-{i}" for i in range(1, 11)]


def test_five_steps_sleep_five_steps_take_two_invokes(dev: DevServer, side_effects: Path) -> None:
    result, invocation_id = call(dev, "Paced/five_sleep_five", 300)
    assert result == list(range(1, 11))
    assert describe(dev, invocation_id)["attempts"] == 2
    assert steps_of(side_effects, invocation_id) == [f"step-{i}" for i in range(1, 11)]


def test_results_and_journal_match_request_response(dev: DevServer, side_effects: Path, tmp_path: Path) -> None:
    checkpointed = {}
    for path, body in (("Steps/ten_steps", "same"), ("Paced/five_sleep_five", 100)):
        checkpointed[path] = call(dev, path, body)
    plain = start(False, tmp_path / "plain.jsonl")
    try:
        for path, body in (("Steps/ten_steps", "same"), ("Paced/five_sleep_five", 100)):
            result, invocation_id = call(plain, path, body)
            assert result == checkpointed[path][0]
            assert describe(plain, invocation_id)["attempts"] > describe(dev, checkpointed[path][1])["attempts"]
            assert strip(journal_of(plain, invocation_id)) == strip(journal_of(dev, checkpointed[path][1]))
    finally:
        plain.stop()
        os.environ[SIDE_EFFECTS_ENV] = str(side_effects)


def test_a_run_after_a_command_with_effects_is_left_to_the_control_plane(dev: DevServer, side_effects: Path) -> None:
    """A one-way call's effect is carried out by the control plane after its commit: the run proposed
    after it ends the Invoke (one more than with runs alone), and the call is made once."""
    result, invocation_id = call(dev, "Paced/send_between_steps", "effects")
    assert result == 6
    assert describe(dev, invocation_id)["attempts"] == 2  # step 1 and 3 in-process, step 2 by the control plane
    assert steps_of(side_effects, invocation_id) == ["step-1", "step-2", "step-3"]
    journal = describe(dev, invocation_id)["journal"]
    commands = [e["type"] for e in journal if e["kind"] == "command"]
    assert commands == ["Input", "Run", "OneWayCall", "Run", "Run", "Output"]
    sent = wait_for(lambda: one_way_calls_completed(dev), 30, "the one-way call to run")
    assert sent == [0]  # made once, ran (`slow_steps` of no steps returns 0)


@pytest.mark.parametrize("version", [5, 6])
def test_run_completions_ack_before_v7(version: int, side_effects: Path, tmp_path: Path) -> None:
    """V5/V6 have no ProposeRunCompletionAck: the function feeds the RunCompletion notification back."""
    server = start(True, tmp_path / "effects.jsonl", replace(SETTINGS, max_protocol_version=version))
    try:
        result, invocation_id = call(server, "Steps/ten_steps", f"v{version}")
        assert result == list(range(1, 11))
        invocation = describe(server, invocation_id)
        assert invocation["protocol_version"] == version
        assert invocation["attempts"] == 1
    finally:
        server.stop()
        os.environ[SIDE_EFFECTS_ENV] = str(side_effects)


def one_way_calls_completed(dev: DevServer) -> list[Any] | None:
    """Outputs of the `Paced/slow_steps` invocations of no steps (only the one-way call makes those),
    once all of them completed; None before."""
    reply = httpx.get(f"{dev.admin_url}/invocations", params={"limit": 1000}, timeout=10)
    found = [describe(dev, i["id"]) for i in reply.json()["invocations"] if i["target"] == "Paced/slow_steps"]
    found = [i for i in found if i["journal"][0]["value"] == {"n": 0, "pause_ms": 0}]
    if not found or any(i["status"] != "completed" for i in found):
        return None
    return [i["completion_output"] for i in found]


def strip(journal: list[Any]) -> list[Any]:
    """Journal entries without what differs between two runs (times, wake-up times)."""
    drop = {"stored_at", "wake_up_time", "wake_up_at", "invoke_at"}
    return [
        {k: v for k, v in entry.items() if k not in drop and not (k == "details" and entry.get("type") == "Sleep")}
        for entry in journal
    ]  # a Sleep's details name its due time


def test_a_killed_function_never_runs_a_committed_step_again(dev: DevServer, side_effects: Path) -> None:
    emulator = dev.lambda_emulator
    sent = httpx.post(f"{dev.ingress_url}/Paced/slow_steps/send", json={"n": 8, "pause_ms": 150}, timeout=30)
    assert sent.status_code == 202, sent.text
    invocation_id = sent.json()["invocationId"]
    wait_for(lambda: len(steps_of(side_effects, invocation_id)) >= 4, 30, "four steps to run")
    assert emulator.process is not None
    url, restarts = emulator.url, emulator.restarts
    finished = [c for c in emulator.calls()["calls"] if c["invocation_id"] == invocation_id]
    assert finished == []  # its first Invoke is still running (the call log has calls that ended)
    killed = emulator.process
    os.kill(killed.pid, signal.SIGKILL)  # the function's process, mid-invoke
    killed.wait()
    at_kill = describe(dev, invocation_id)
    committed = [e["completion_id"] for e in at_kill["journal"] if e["type"] == "RunCompletion"]
    assert len(committed) >= 3  # committed by the function itself, within that first Invoke
    # torpor dev starts the function's process again on the same port, as Lambda a new environment
    wait_for(lambda: describe(dev, invocation_id)["status"] == "completed", 60, "the invocation to complete")
    invocation = describe(dev, invocation_id)
    assert invocation["completion_output"] == sum(range(1, 9))
    ran = steps_of(side_effects, invocation_id)
    for completion_id in committed:  # a committed step never runs again
        assert ran.count(f"step-{completion_id}") == 1, ran
    assert sorted(set(ran)) == sorted(f"step-{i}" for i in range(1, 9))
    results = [e for e in invocation["journal"] if e["type"] == "RunCompletion"]
    assert [e["completion_id"] for e in results] == list(range(1, 9))  # each step stored once
    assert (emulator.url, emulator.restarts) == (url, restarts + 1)


def test_a_stale_epoch_commits_nothing(dev: DevServer, side_effects: Path) -> None:
    sent = httpx.post(f"{dev.ingress_url}/Paced/five_sleep_five/send", json=3_600_000, timeout=30)
    invocation_id = sent.json()["invocationId"]
    wait_for(lambda: describe(dev, invocation_id)["status"] == "suspended", 30, "the invocation to suspend")
    store = SQLiteStore(dev._sqlite_path)  # what the function opens (TORPOR_SQLITE)
    try:
        loaded = store.load_invocation(invocation_id)
        assert loaded is not None
        held = Held.of(loaded)
        [(sleep_id, _)] = held.journal.open_sleeps().items()
        length = len(held.journal)
        wake = frame(pb.SleepCompletionNotificationMessage(completion_id=sleep_id, void=pb.Void()))
        event = invoke_event(held, [wake], epoch=held.record.epoch - 1)  # the lease moved on since
        app = asgi_app_of(checkpoint_app.app)
        assert app is not None
        answer = Checkpoints(app, store)(event, None)
        assert answer["statusCode"] == 200
        assert "x-torpor-journal-length" not in answer["headers"]
        after = store.load_invocation(invocation_id)
        assert after is not None
        assert len(Held.of(after).journal) == length  # nothing written
        kinds = [MessageType(f.type).name for f in decode_frames(base64.b64decode(answer["body"]))]
        assert kinds[-1] == "Suspension"  # the SDK was told nothing and suspended
    finally:
        store.close()


def invoke_event(held: Held, delivered: list[Any], *, epoch: int, doorbell: int | None = None) -> dict[str, Any]:
    """The event the Lambda invoker sends for an attempt of `held` with `delivered` notifications."""
    record = held.record
    start = pb.StartMessage(
        id=ids.invocation_id_bytes(record.invocation_id),
        debug_id=record.invocation_id,
        known_entries=len(held.journal) + len(delivered),
        random_seed=record.random_seed,
    )
    body = encode_frames([frame(start), *held.journal.frames, *delivered])
    content_type = invocation_content_type(record.protocol_version)
    headers = {
        "content-type": content_type,
        "accept": content_type,
        "x-restate-invocation-id": record.invocation_id,
        "x-torpor-epoch": str(epoch),
        "x-torpor-journal-length": str(len(held.journal)),
        "x-torpor-deadline-ms": str(int(time.time() * 1000) + 60_000),
    }
    if doorbell is not None:
        headers["x-torpor-doorbell"] = str(doorbell)
    return {
        "path": f"/invoke/{record.service}/{record.handler}",
        "httpMethod": "POST",
        "headers": headers,
        "body": base64.b64encode(body).decode(),
        "isBase64Encoded": True,
    }


def test_a_cancel_reaches_a_function_committing_steps_within_a_second(dev: DevServer, side_effects: Path) -> None:
    sent = httpx.post(f"{dev.ingress_url}/Paced/slow_steps/send", json={"n": 30, "pause_ms": 200}, timeout=30)
    invocation_id = sent.json()["invocationId"]
    wait_for(lambda: len(steps_of(side_effects, invocation_id)) >= 3, 30, "three steps to run")
    assert httpx.patch(f"{dev.admin_url}/invocations/{invocation_id}/cancel").status_code == 202
    done = httpx.get(f"{dev.ingress_url}/restate/invocation/{invocation_id}/attach", timeout=60)
    assert done.status_code == 409  # the handler got the cancel at a step's await, not after all 30
    ran = steps_of(side_effects, invocation_id)
    assert len(ran) <= 3 + 1 + 1_000 // 200 + 1, ran  # steps after the cancel: those of one fence interval
    assert len(ran) == len(set(ran))  # none ran twice
    assert describe(dev, invocation_id)["completion_kind"] == "cancelled"


class CountingStore:
    """The function's store, counting its requests (what each checkpoint costs): fences (reads) and batches."""

    def __init__(self, store: SQLiteStore) -> None:
        self.store = store
        self.fences = 0
        self.batches = 0

    def read_fence(self, *args: Any, **kwargs: Any) -> Any:
        self.fences += 1
        return self.store.read_fence(*args, **kwargs)

    def append_batch(self, *args: Any, **kwargs: Any) -> Any:
        self.batches += 1
        return self.store.append_batch(*args, **kwargs)


@pytest.mark.parametrize(("tick_ms", "fences"), [(0, 1), (FENCE_EVERY_MS, 5)])
def test_steps_within_a_second_of_the_last_fence_cost_one_write_each(dev: DevServer, tick_ms: int, fences: int) -> None:
    sent = httpx.post(f"{dev.ingress_url}/Paced/five_sleep_five/send", json=3_600_000, timeout=30)
    invocation_id = sent.json()["invocationId"]
    wait_for(lambda: describe(dev, invocation_id)["status"] == "suspended", 30, "the invocation to suspend")
    store = SQLiteStore(dev._sqlite_path)
    try:
        loaded = store.load_invocation(invocation_id)
        assert loaded is not None
        held = Held.of(loaded)
        [(sleep_id, _)] = held.journal.open_sleeps().items()
        wake = frame(pb.SleepCompletionNotificationMessage(completion_id=sleep_id, void=pb.Void()))
        clock = iter(range(int(time.time() * 1000), 2**62, tick_ms or 1))
        counting = CountingStore(store)
        app = asgi_app_of(checkpoint_app.app)
        assert app is not None
        answer = Checkpoints(app, counting, now_ms=lambda: next(clock) if tick_ms else 1)(  # type: ignore[arg-type]
            invoke_event(held, [wake], epoch=held.record.epoch, doorbell=held.record.doorbell), None
        )
        assert answer["statusCode"] == 200
        assert counting.batches == 5  # steps 6..10, each committed at once
        assert counting.fences == fences
    finally:
        store.close()


def test_a_step_longer_than_the_functions_timeout_is_cut_off_retried_within_the_policy_and_named(
    side_effects: Path, tmp_path: Path
) -> None:
    # the function's timeout (4 s) ends each Invoke, as Lambda's would, long before Torpor's (20 s)
    settings = replace(SETTINGS, retry_policy=RetryPolicy(initial_interval_ms=100, max_attempts=3))
    os.environ[SIDE_EFFECTS_ENV] = str(side_effects)
    server = DevServer(
        ingress_port=0, admin_port=0, data_dir=tmp_path, settings=settings,
        lambda_functions={"Paced": FUNCTIONS["Paced"]}, lambda_timeout_ms=4_000,
    )  # fmt: skip
    server.start()
    try:
        reply = httpx.post(f"{server.admin_url}/deployments", json={"arn": function_arn("Paced", "1")}, timeout=30)
        assert reply.status_code == 201, reply.text
        sent = httpx.post(
            f"{server.ingress_url}/Paced/steps_then_a_long_one/send", json={"n": 3, "long_ms": 6_000}, timeout=30
        )
        assert sent.status_code == 202, sent.text
        invocation_id = sent.json()["invocationId"]

        paused = wait_for(lambda: (d := describe(server, invocation_id))["status"] == "paused" and d, 90, "a pause")
        assert paused["attempts"] == 3  # bounded by the retry policy
        failure = paused["last_failure"]
        assert "Sandbox.Timedout" in failure["message"]
        assert "Task timed out after 4.00 seconds" in failure["message"]
        time.sleep(2.5)  # past the last cut-off step's 6 s: a handler still running would have recorded it
        ran = steps_of(side_effects, invocation_id)
        assert sorted(ran) == ["step-1", "step-2", "step-3"], ran  # each once, before the first timeout
        assert [e["completion_id"] for e in paused["journal"] if e["type"] == "RunCompletion"] == [1, 2, 3]
        timed_out = [c for c in server.lambda_emulator.calls()["calls"] if c["invocation_id"] == invocation_id]
        assert [c["error_type"] for c in timed_out] == ["Sandbox.Timedout"] * 3
    finally:
        server.stop()
        os.environ.pop(SIDE_EFFECTS_ENV, None)


def test_the_checkpoints_dynamodb_writes_are_all_the_example_handler_role_allows(moto_endpoint: str) -> None:
    """The function commits steps on DynamoDB (moto) with every request recorded: each is one its role
    in `template.yaml` allows, condition keys included; writes that would rewrite an invocation
    (its status and output, a whole record, a read-back) and reads of more than its epoch and
    doorbell (a whole record, a journal) are not."""
    from cfnlint.decode.cfn_yaml import load

    from adapters.aws import dynamodb_store
    from control_plane.ports import InvocationRecord
    from tests.helpers.moto import fresh_store
    from tests.infra.facts import SAM_TEMPLATE, Facts, condition_holds, dynamodb_request_context

    store = fresh_store(moto_endpoint)
    now = int(time.time() * 1000)
    invocation_id = ids.new_invocation_id()
    body = b'{"n": 3, "pause_ms": 0}'
    input_entry = encode_frames([frame(pb.InputCommandMessage(value=pb.Value(content=body)))])
    store.create_invocation(
        InvocationRecord(invocation_id=invocation_id, service="Paced", handler="slow_steps", key="",
                         deployment_id="dp_1", protocol_version=5, status="ready", input_entry=input_entry,
                         created_at_ms=now, modified_at_ms=now)
    )  # fmt: skip
    leased = store.acquire_lease(invocation_id, now, now + 60_000, ["ready"])
    loaded = store.load_invocation(invocation_id)
    assert loaded is not None
    requests: list[tuple[str, dict[str, Any]]] = []
    original = dynamodb_store._CountingConnection.dispatch

    def dispatch(self: Any, operation_name: str, operation_kwargs: dict[str, Any]) -> dict[str, Any]:
        requests.append((operation_name, operation_kwargs))
        return original(self, operation_name, operation_kwargs)

    app = asgi_app_of(checkpoint_app.app)
    assert app is not None
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(dynamodb_store._CountingConnection, "dispatch", dispatch)
        event = invoke_event(Held.of(loaded), [], epoch=leased.epoch, doorbell=leased.doorbell)
        answer = Checkpoints(app, store)(event, None)
        committed = requests[:]
        store._update_invocation(invocation_id, leased.epoch, status="completed", output=b'"forged"')
        store._update_invocation(invocation_id, leased.epoch, returning=True, modified_at_ms=now)
        store.create_invocation(replace(loaded.record, invocation_id=ids.new_invocation_id(), status="completed"))
        store.get_invocation(invocation_id)  # a whole record read back
        store.load_invocation(invocation_id)  # a journal read
    assert answer["headers"]["x-torpor-journal-length"] == str(1 + 3 * 2)  # input, then 3 x (Run, its result)
    forged = requests[len(committed) :]

    facts = Facts(json.loads(json.dumps(load(str(SAM_TEMPLATE)))))
    role = facts.target(facts.function("ExampleHandlerFunction")["Role"])
    statements = [s for s in facts.role_statements(role) if not s.guarded]

    def allowed(operation: str, kwargs: dict[str, Any]) -> bool:
        context = dynamodb_request_context(operation, kwargs)
        return any(
            f"dynamodb:{operation}" in s.actions and "${Table.Arn}" in s.resources
            and condition_holds(s.condition, context)
            for s in statements
        )  # fmt: skip

    assert {op for op, _ in committed} == {"GetItem", "PutItem"}
    assert [op for op, kwargs in committed if not allowed(op, kwargs)] == []
    assert [op for op, kwargs in forged if allowed(op, kwargs)] == []


def test_a_checkpointed_step_costs_one_write_unit_and_the_record_writes_one_each(moto_endpoint: str) -> None:
    """The AWS-cost goal (issue 24): with in-process checkpoints, a `ctx.run` step costs at most 1
    DynamoDB write unit (its journal batch, under 1 KB), plus a constant per Invoke: the fence, a
    read of the record's epoch and doorbell (1 read unit, no write); and every write to the record
    of an invocation that went through a suspension costs 1 unit in the table: the record stays
    under 1 KB (a write unit is 1 KB of the larger of the old and new item), with realistic fields
    (`bench.cost`'s workflow: a trace id, the AWS requests counted so far, what it waited on).
    Units are metered at the wire by `bench.partitions`' proxy, DynamoDB's rules."""
    from bench.partitions import MeterProxy
    from control_plane.ports import InvocationRecord
    from tests.helpers.moto import fresh_store

    steps = 5
    with MeterProxy(moto_endpoint) as proxy:
        store = fresh_store(proxy.url)
        now = int(time.time() * 1000)
        invocation_id = ids.new_invocation_id()
        body = json.dumps({"n": steps, "pause_ms": 0, "padding": "x" * 40}).encode()
        input_entry = encode_frames([frame(pb.InputCommandMessage(value=pb.Value(content=body)))])
        requests = {
            "dynamodb PutItem META": 1,
            "dynamodb GetItem": 3,
            "dynamodb UpdateItem META": 1,
            "dynamodb Query": 2,
            "lambda Invoke": 1,
            "dynamodb PutItem": 2,
            "scheduler CreateSchedule": 1,
        }
        record = InvocationRecord(
            invocation_id=invocation_id, service="Paced", handler="slow_steps", key="",
            deployment_id="dp_10xnMSRD4HruVXdXDn1X2RM", protocol_version=5, status="ready", input_entry=input_entry,
            created_at_ms=now, modified_at_ms=now, random_seed=6561927396010995930,
            trace_id="e526a75e161aba157e07d21c476e6a5b", requests={"dynamodb PutItem META": 1},
        )  # fmt: skip
        proxy.meter.take()
        store.create_invocation(record)
        first = store.acquire_lease(invocation_id, now, now + 60_000, ["ready"])
        store.suspend(
            invocation_id, first.epoch, doorbell=first.doorbell, doorbell_read=first.doorbell,
            waiting_on={"completions": [6], "signals": [1], "named_signals": []}, wake_up_at_ms=now + 3_600_000,
            journal_length=1, effects_applied_upto=1, modified_at_ms=now, attempts=1, requests=requests,
        )  # fmt: skip
        leased = store.acquire_lease(invocation_id, now + 1, now + 60_000, ["suspended"])
        loaded = store.load_invocation(invocation_id)
        assert loaded is not None
        before = proxy.meter.take()
        app = asgi_app_of(checkpoint_app.app)
        assert app is not None
        answer = Checkpoints(app, store)(invoke_event(Held.of(loaded), [], epoch=leased.epoch, doorbell=0), None)
        assert answer["headers"]["x-torpor-journal-length"] == str(1 + steps * 2)  # every step committed here
        function = proxy.meter.take()
        store.complete(
            invocation_id, leased.epoch, completion="succeeded", completed_at_ms=now + 2, modified_at_ms=now + 2,
            output=b"55", expires_at_s=(now // 1000) + 86_400, journal_expires_at_ms=now + 86_400_000,
            journal_length=1 + steps * 2, effects_applied_upto=1 + steps * 2, attempts=2,
            requests={**requests, "dynamodb GetItem": 5, "dynamodb Query": 4, "lambda Invoke": 2},
        )  # fmt: skip
        after = proxy.meter.take()

    units = [w.units for w in function.writes]
    assert sum(units) <= steps, function.writes  # 1 unit a step
    assert all(u == 1 for u in units), function.writes
    assert function.read_units == 1  # the fence: one strongly consistent read of a record under 4 KB
    mine = f"INV#{invocation_id}"
    on_record = [
        w for w in (*before.writes, *function.writes, *after.writes) if (w.where, w.partition) == ("table", mine)
    ]
    assert len(on_record) == 5 + steps, on_record  # create, lease, suspend, lease again, the steps, complete
    assert [w.units for w in on_record] == [1] * len(on_record), on_record
    indexed = [w for w in (*before.writes, *after.writes) if w.where != "table"]
    # create (1), lease, suspension and lease again in place under STATUS#active (1 each), the
    # completion's move to STATUS#completed (2) and its by_expiry entry (1)
    assert sum(w.units for w in indexed) == 7, indexed
