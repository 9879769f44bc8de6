"""Answers restate-server 1.7.12 refuses are refused here too: a failed attempt (571, the reason in
`last_failure`) under the handler's retry policy, with nothing of the answer committed.

`torpor dev` on its embedded SQLite store (in memory); the deployments are fakes
(`tests.helpers.fake_deployment`) of a plain service, a virtual object and a workflow that answer
crafted frames.
"""

from __future__ import annotations

import itertools
import threading
import time
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from adapters.local.dev import DevServer
from control_plane.protocol import Frame, frame
from control_plane.protocol import protocol_pb2 as pb
from control_plane.retry import RetryPolicy
from control_plane.settings import Settings
from tests.helpers.asgi import serve_asgi
from tests.helpers.dev import describe, wait_for
from tests.helpers.fake_deployment import Answer, FakeDeployment

MAX_ATTEMPTS = 4
SETTINGS = Settings(
    inactivity_timeout_ms=10_000,
    lease_margin_ms=2_000,
    call_wait_ms=20_000,
    retry_policy=RetryPolicy(initial_interval_ms=100, exponentiation_factor=2, max_attempts=MAX_ATTEMPTS),
)
SEEN: dict[str, list[float]] = {}
"""`time.monotonic()` of each attempt the fakes received, by invocation id."""


def _answer(*frames: Frame) -> Any:
    def script(start: pb.StartMessage, journal: list[Frame]) -> Answer:
        SEEN.setdefault(start.debug_id, []).append(time.monotonic())
        return Answer(list(frames))

    return script


END = frame(pb.EndMessage())
OUTPUT = frame(pb.OutputCommandMessage(value=pb.Value(content=b'"done"')))
SET_STATE = frame(pb.SetStateCommandMessage(key=b"k", value=pb.Value(content=b"1")))
SLEEP = frame(pb.SleepCommandMessage(wake_up_time=4_000_000_000_000, result_completion_id=1))

ATTEMPT_STARTED = threading.Event()
RELEASE_ATTEMPT = threading.Event()


def slow_error(start: pb.StartMessage, journal: list[Frame]) -> Answer:
    """An attempt that answers only once the test lets it: an Error whose retry is an hour away."""
    ATTEMPT_STARTED.set()
    RELEASE_ATTEMPT.wait(30)
    return Answer([frame(pb.ErrorMessage(code=500, message="later", next_retry_delay=3_600_000))])


PLAIN = FakeDeployment(
    {
        "slow_error": slow_error,
        "end_only": _answer(END),
        "set_state": _answer(SET_STATE, OUTPUT, END),
        "same_completion_id": _answer(SLEEP, SLEEP, frame(pb.SuspensionMessage(waiting_completions=[1]))),
        "reserved_signal": _answer(frame(pb.SuspensionMessage(waiting_signals=[5]))),
    },
    name="Plain",
)
OBJECT = FakeDeployment(
    {
        "shared_set_state": _answer(SET_STATE, OUTPUT, END),
        "promise": _answer(
            frame(pb.GetPromiseCommandMessage(key="p", result_completion_id=1)),
            frame(pb.SuspensionMessage(waiting_completions=[1])),
        ),
    },
    "VIRTUAL_OBJECT",
    name="Obj",
    handler_types={"shared_set_state": "SHARED"},
)


@pytest.fixture(scope="module")
def dev() -> Iterator[DevServer]:
    with serve_asgi(PLAIN) as plain_url, serve_asgi(OBJECT) as object_url:
        server = DevServer(ingress_port=0, admin_port=0, in_memory=True, settings=SETTINGS)
        server.start()
        try:
            for url in (plain_url, object_url):
                reply = httpx.post(f"{server.admin_url}/deployments", json={"uri": url}, timeout=30)
                assert reply.status_code == 201, reply.text
            yield server
        finally:
            server.stop()


def _paused(dev: DevServer, path: str) -> dict[str, Any]:
    """Send `path` (`Service/handler` or `Object/key/handler`) and wait until the policy pauses it."""
    sent = httpx.post(f"{dev.ingress_url}/{path}/send", timeout=30)
    assert sent.status_code == 202, sent.text
    invocation_id = sent.json()["invocationId"]
    invocation: dict[str, Any] = wait_for(
        lambda: (d := describe(dev, invocation_id))["status"] == "paused" and d, 30, f"{path} to pause"
    )
    return invocation


def test_an_answer_of_only_end_backs_off_by_the_retry_policy_then_pauses(dev: DevServer) -> None:
    invocation = _paused(dev, "Plain/end_only")
    assert invocation["attempts"] == MAX_ATTEMPTS
    failure = invocation["last_failure"]
    assert failure["code"] == 571
    assert "an End without an Output command" in failure["message"]
    assert [e["type"] for e in invocation["journal"]] == ["Input"]
    # the policy's backoff between attempts (100, 200, 400 ms), not the initial interval each time
    gaps_ms = [(b - a) * 1000 for a, b in itertools.pairwise(SEEN[invocation["id"]])]
    assert len(gaps_ms) == MAX_ATTEMPTS - 1
    assert gaps_ms[-1] >= 350, gaps_ms


@pytest.mark.parametrize(
    ("path", "expected"),
    [
        ("Plain/set_state", "a SetState command from a plain service, which has no state"),
        ("Plain/same_completion_id", "a command given completion id 1, which another command was given already"),
        ("Plain/reserved_signal", "a Suspension awaiting signal 5, a reserved signal index nothing sends"),
        ("Obj/k1/shared_set_state", "a SetState command from a shared handler, which may read state but not write it"),
        ("Obj/k2/promise", "a GetPromise command outside a workflow"),
    ],
)
def test_what_restate_refuses_is_a_571_that_commits_nothing(dev: DevServer, path: str, expected: str) -> None:
    invocation = _paused(dev, path)
    assert invocation["attempts"] == MAX_ATTEMPTS
    failure = invocation["last_failure"]
    assert failure["code"] == 571
    assert expected in failure["message"]
    assert [e["type"] for e in invocation["journal"]] == ["Input"]
    if path.startswith("Obj/"):  # no state was written for the key
        key = path.split("/")[1]
        state = httpx.get(f"{dev.admin_url}/services/Obj/state/{key}", timeout=10)
        assert state.status_code in (200, 404), state.text
        assert state.status_code == 404 or not state.json().get("state"), state.text


def test_an_invocation_killed_during_an_attempt_that_fails_leaves_no_timer(dev: DevServer) -> None:
    # GIVEN an attempt under way, which will fail with its retry an hour away
    sent = httpx.post(f"{dev.ingress_url}/Plain/slow_error/send", timeout=30)
    assert sent.status_code == 202, sent.text
    invocation_id = sent.json()["invocationId"]
    assert ATTEMPT_STARTED.wait(30)
    # WHEN it is killed, then the attempt fails
    killed = httpx.patch(f"{dev.admin_url}/invocations/{invocation_id}/kill", timeout=30)
    assert killed.status_code in (200, 202), killed.text
    RELEASE_ATTEMPT.set()
    assert dev.scheduler.wait_idle(30), "the attempt did not end"
    # THEN it stays killed, and no timer of it is left to fire in an hour
    store = dev.control_plane.store
    record = store.get_invocation(invocation_id)
    assert record is not None
    assert (record.status, record.completion) == ("completed", "killed")
    assert [t for t in store.due_timers(time.time_ns() // 1_000_000 + 7_200_000) if t[1] == invocation_id] == []
