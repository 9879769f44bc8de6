"""No lost wake-up (issue 22, item 2): whatever request the control plane dies after, a stored
completion leads to a resumed caller, and a key's queue is handed on.

Each case runs `torpor dev` that hard-exits (`os._exit(137)`, as SIGKILL) at a named point between
two store requests (`tests.helpers.crashing_dev`), then a normal `torpor dev` on the same store
(a SQLite file; DynamoDB through dynalite), and checks that what was in flight completes with the
right result, and that the counter the callees add to is exact (each add applied once: the journal
guarantees it; a lost add or a repeated one would show).

The points, on the call path (`Calls/count_to` calls `Counter/{key}/add` three times):

- `put_notification:1`: the callee's CallCompletion is stored for the caller, no ring after it;
- `ring:1`: the first ring of that notification (before it is stored, since the fix);
- `tell:1`: the caller was told, the callee's completing write not yet made;
- `complete:1`: the callee's completing write is made (its callers were told before it).

On a key's queue (`Counter/{key}/add_after_sleep` holds the key while two adds wait):

- `release_key:1`: the key released, not yet handed to the next in its queue;
- `before-enqueue:2`: an add is `pending` but not in the queue (behind another that is).

On a kill of a callee (`Calls/book_via` awaits `Waits/booking`, which sleeps a minute):

- `tell:1`: the caller was told the kill's 409, the kill's completing write not yet made;
- `complete:1`: the kill's completing write is made.
"""

from __future__ import annotations

import subprocess
from collections.abc import Iterator
from contextlib import AbstractContextManager, suppress
from pathlib import Path
from typing import Any

import httpx
import pytest

from adapters.local.dev import DevServer
from control_plane.ports import StoredNotification
from control_plane.protocol import frame
from control_plane.protocol import protocol_pb2 as pb
from control_plane.settings import Settings
from tests.helpers.asgi import serve_asgi
from tests.helpers.crashing_dev import CRASH_STATUS, crashing_dev_process
from tests.helpers.dev import torpor_dev_process, unique, wait_completed, wait_for
from tests.helpers.dynalite import dynalite_server
from tests.helpers.fake_deployment import Answer, FakeDeployment
from tests.helpers.moto import unique_table_name
from tests.helpers.records import invocation
from tests.helpers.services import serve_examples

ADDS = 3
OUTPUT = frame(pb.OutputCommandMessage(value=pb.Value(content=b'"done"')))
END = frame(pb.EndMessage())
RECOVERY_S = 30  # the dead process's lease (3 s inactivity + 1 s margin) expires well within this


@pytest.fixture(scope="module")
def services_url() -> Iterator[str]:
    with serve_examples() as (url, _process):
        yield url


@pytest.fixture(scope="module")
def dynalite_url() -> Iterator[str]:
    with dynalite_server() as url:
        yield url


@pytest.fixture(params=["sqlite", "dynalite"])
def store_args(request: pytest.FixtureRequest, tmp_path: Path) -> tuple[str, ...]:
    """`torpor dev` arguments naming a fresh store: a SQLite data directory, or a dynalite table."""
    if request.param == "sqlite":
        return ("--data-dir", str(tmp_path / "data"))
    endpoint = request.getfixturevalue("dynalite_url")
    return ("--dynamodb-endpoint", endpoint, "--table", unique_table_name())


def _crashing(crash_at: str, store_args: tuple[str, ...]) -> AbstractContextManager[tuple[str, str, Any]]:
    return crashing_dev_process(crash_at, *store_args)


def _register(admin: str, services_url: str) -> None:
    reply = httpx.post(f"{admin}/deployments", json={"uri": services_url}, timeout=30)
    assert reply.status_code == 201, reply.text


def _send(ingress: str, path: str, body: object) -> str | None:
    """Send a request (`/send`); its invocation id, or None if the process died answering it."""
    try:
        reply = httpx.post(f"{ingress}/{path}/send", json=body, timeout=30)
    except httpx.HTTPError:
        return None
    assert reply.status_code == 202, reply.text
    invocation_id: str = reply.json()["invocationId"]
    return invocation_id


def _died(process: subprocess.Popen[bytes]) -> None:
    """Wait for the crashing process to hard-exit at its point (asserts its status)."""
    wait_for(lambda: process.poll() is not None, RECOVERY_S, "the control plane to die at its crash point")
    assert process.returncode == CRASH_STATUS


def _counter(ingress: str, key: str) -> int:
    reply = httpx.post(f"{ingress}/Counter/{key}/get", json=None, timeout=30)
    assert reply.status_code == 200, reply.text
    value: int = reply.json()
    return value


def _output(ingress: str, invocation_id: str) -> httpx.Response:
    return httpx.get(f"{ingress}/restate/invocation/{invocation_id}/output", timeout=30)


@pytest.mark.parametrize("crash_at", ["put_notification:1", "ring:1", "tell:1", "complete:1"])
def test_a_caller_resumes_whatever_request_the_callee_s_control_plane_died_after(
    crash_at: str, store_args: tuple[str, ...], services_url: str
) -> None:
    key = unique("wake")
    # GIVEN a caller making three calls to a counter, under a control plane that dies at `crash_at`
    with _crashing(crash_at, store_args) as (ingress, admin, first):
        _register(admin, services_url)
        caller = _send(ingress, "Calls/count_to", {"key": key, "n": ADDS})
        assert caller is not None
        # WHEN it dies there, on the first call's completion
        _died(first)
    # THEN a new control plane on the same store completes the caller, each add applied once
    with torpor_dev_process(*store_args) as (ingress, admin, _second):
        wait_completed(admin, caller, RECOVERY_S)
        output = _output(ingress, caller)
        assert output.status_code == 200, output.text
        assert output.json() == ADDS
        assert _counter(ingress, key) == ADDS


@pytest.mark.parametrize("crash_at", ["release_key:1", "before-enqueue:2"])
def test_a_key_s_queue_is_handed_on_whatever_request_the_control_plane_died_after(
    crash_at: str, store_args: tuple[str, ...], services_url: str
) -> None:
    key = unique("queue")
    # GIVEN an add holding the counter's key (it sleeps), and two adds waiting for it
    with _crashing(crash_at, store_args) as (ingress, admin, first):
        _register(admin, services_url)
        holder = _send(ingress, f"Counter/{key}/add_after_sleep", {"delta": 1, "ms": 1500})
        assert holder is not None
        wait_for(
            lambda: httpx.get(f"{admin}/invocations/{holder}", timeout=5).json()["status"] == "suspended",
            RECOVERY_S,
            "the holder to sleep with the key",
        )
        for _ in range(ADDS - 1):
            _send(ingress, f"Counter/{key}/add", 1)
        # WHEN the control plane dies releasing the key, or queueing the last add
        _died(first)
    # THEN a new control plane hands the key on to every add: the counter reaches 3
    with torpor_dev_process(*store_args) as (ingress, _admin, _second):
        wait_for(lambda: _counter(ingress, key) == ADDS, RECOVERY_S, f"the counter to reach {ADDS}")


@pytest.mark.parametrize("crash_at", ["tell:1", "complete:1"])
def test_a_caller_learns_of_its_callee_s_kill_whatever_request_the_kill_died_after(
    crash_at: str, store_args: tuple[str, ...], services_url: str
) -> None:
    # GIVEN a caller awaiting a callee that sleeps a minute
    with _crashing(crash_at, store_args) as (ingress, admin, first):
        _register(admin, services_url)
        caller = _send(ingress, "Calls/book_via", 60_000)
        assert caller is not None

        def sleeping_callee() -> str | None:
            listed = httpx.get(f"{admin}/invocations", params={"service": "Waits"}, timeout=5).json()
            found = [i["id"] for i in listed["invocations"] if i["status"] == "suspended"]
            return found[0] if found else None

        callee = wait_for(sleeping_callee, RECOVERY_S, "the callee to sleep")
        wait_for(
            lambda: httpx.get(f"{admin}/invocations/{caller}", timeout=5).json()["status"] == "suspended",
            RECOVERY_S,
            "the caller to suspend on its call",
        )
        # WHEN the callee is killed, and the control plane dies in the middle of it
        with suppress(httpx.HTTPError):
            httpx.patch(f"{admin}/invocations/{callee}/kill", timeout=30)
        _died(first)
    # THEN a new control plane resumes the caller with the kill's failure
    with torpor_dev_process(*store_args) as (ingress, admin, _second):
        described = wait_completed(admin, caller, RECOVERY_S)
        assert described["completion_result"] == "failure", described
        assert "killed" in described["completion_failure"]["message"], described


def test_a_caller_attached_while_its_callee_completes_is_told_before_the_completing_write() -> None:
    """An attach between the completing worker's read of its callers and its completing write rings
    the callee, so that write fails and the caller is told before it is tried again: a crash right
    after the write can lose no caller (in-process, SQLite; the attach is injected at that point)."""
    fake = FakeDeployment({"done": lambda start, journal: Answer([OUTPUT, END])})
    settings = Settings(inactivity_timeout_ms=60_000, lease_margin_ms=5_000, call_wait_ms=5_000)
    with serve_asgi(fake) as url:
        server = DevServer(ingress_port=0, admin_port=0, in_memory=True, settings=settings)
        server.start()
        try:
            assert httpx.post(f"{server.admin_url}/deployments", json={"uri": url}, timeout=30).status_code == 201
            store = server.control_plane.store
            caller = invocation("inv_caller", service="Fake", handler="done", status="paused")  # never run
            store.create_invocation(caller)
            events: list[str] = []
            original_update, original_put = store._update_invocation, store.put_notification

            def update(invocation_id: str, epoch: int, **kwargs: Any) -> Any:
                if kwargs.get("status") == "completed" and not events:
                    events.append("attach")  # another caller attaches just before the write
                    store.attach_caller(invocation_id, "inv_caller/5")
                written = original_update(invocation_id, epoch, **kwargs)
                events.append("completed")
                return written

            def put(invocation_id: str, notification: StoredNotification) -> bool:
                events.append(f"told {invocation_id}")
                return original_put(invocation_id, notification)

            store._update_invocation = update  # type: ignore[method-assign]
            store.put_notification = put  # type: ignore[method-assign]
            reply = httpx.post(f"{server.ingress_url}/Fake/done", headers={"idempotency-key": unique("k")}, timeout=30)
            assert reply.status_code == 200, reply.text
            assert events.index("told inv_caller") < events.index("completed"), events
            loaded = store.load_invocation("inv_caller")
            assert loaded is not None
            assert [n.key for n in loaded.notifications] == ["c5"]
        finally:
            server.stop()
