"""The deployment's side of the service protocol is untrusted input: answers no SDK sends.

Each answer here is a failed attempt with a clear `last_failure` and the policy's backoff; nothing
of it is committed, and nothing hangs. `torpor dev` wiring on a moto server over HTTP; the
deployment is a fake (`tests.helpers.fake_deployment`) that answers discovery, then crafted frames.
"""

from __future__ import annotations

import itertools
import time
from collections.abc import Iterator
from datetime import datetime
from typing import Any

import httpx
import pytest

from adapters.local.dev import DevServer
from control_plane.ports import JournalBatch
from control_plane.protocol import Frame, encode_frames, frame
from control_plane.protocol import protocol_pb2 as pb
from control_plane.retry import RetryPolicy
from control_plane.settings import Settings
from tests.helpers.asgi import serve_asgi
from tests.helpers.dev import describe, wait_for
from tests.helpers.fake_deployment import Answer, FakeDeployment
from tests.helpers.moto import unique_table_name

MAX_ATTEMPTS = 4
SETTINGS = Settings(
    inactivity_timeout_ms=10_000,
    lease_margin_ms=2_000,
    call_wait_ms=20_000,
    retry_policy=RetryPolicy(initial_interval_ms=100, exponentiation_factor=2, max_attempts=MAX_ATTEMPTS),
)


def output(text: str) -> Frame:
    return frame(pb.OutputCommandMessage(value=pb.Value(content=f'"{text}"'.encode())))


def commands_in(journal: list[Frame]) -> int:
    """Commands in the journal the runtime sent (Input included): the next command's index."""
    return sum(1 for f in journal if 0x0400 <= f.type < 0x8000)


def growing_run(start: pb.StartMessage, journal: list[Frame]) -> Answer:
    """Each attempt sends one more Run command and fails on it, as a step that keeps failing would."""
    index = commands_in(journal)
    run = pb.RunCommandMessage(result_completion_id=index, name=f"step-{index}")
    error = pb.ErrorMessage(code=500, message="step failed", related_command_index=index, related_command_type=0x0411)
    return Answer([frame(run), frame(error)])


LOOP_BOUND = 40
"""Attempts after which the suspending fakes give up and answer an Output: bounds a runtime that loops."""

CALLED: dict[str, list[float]] = {}
"""`time.monotonic()` of each attempt a suspending fake received, by handler."""


def suspends_on_what_it_was_sent(suspension: pb.SuspensionMessage) -> Any:
    """A fake whose first attempt runs a step and suspends on its result (legitimate: the result is
    proposed in the same answer), and whose next attempts, sent that result, suspend on it again."""

    def script(start: pb.StartMessage, journal: list[Frame]) -> Answer:
        called = CALLED.setdefault(start.debug_id, [])
        called.append(time.monotonic())
        if len(journal) == 1:  # the Input command alone
            run = pb.RunCommandMessage(result_completion_id=1, name="step")
            proposal = pb.ProposeRunCompletionMessage(result_completion_id=1, value=b'"1"')
            return Answer([frame(run), frame(proposal), frame(suspension)])
        if len(called) > LOOP_BOUND:
            return Answer([output("looped"), frame(pb.EndMessage())])
        return Answer([frame(suspension)])

    return script


PARALLEL_RUNS_SEEN: list[list[int]] = []
"""The entry types of each journal the `parallel_runs` fake was sent, one list per attempt."""


def parallel_runs(start: pb.StartMessage, journal: list[Frame]) -> Answer:
    """Steps a (completion 1) and b (completion 2) run side by side: a's result is proposed, then b
    fails (an Error about Run b); later attempts fail before any new command."""
    PARALLEL_RUNS_SEEN.append([f.type for f in journal])
    if commands_in(journal) == 1:  # the Input command alone
        return Answer(
            [
                frame(pb.RunCommandMessage(result_completion_id=1, name="a")),
                frame(pb.RunCommandMessage(result_completion_id=2, name="b")),
                frame(pb.ProposeRunCompletionMessage(result_completion_id=1, value=b'"a-done"')),
                frame(
                    pb.ErrorMessage(code=500, message="b failed", related_command_index=2, related_command_type=0x0411)
                ),
            ]
        )
    return Answer([frame(pb.ErrorMessage(code=500, message="b failed again"))])


def run_then_send(start: pb.StartMessage, journal: list[Frame]) -> Answer:
    """A step that fails, then a one-way call the handler sends after it (the step not awaited), then
    the Error about the step; later attempts replay the step and do the same."""
    frames = [] if commands_in(journal) > 1 else [frame(pb.RunCommandMessage(result_completion_id=1, name="a"))]
    send = pb.OneWayCallCommandMessage(service_name="Fake", handler_name="sink", invocation_id_notification_idx=2)
    error = pb.ErrorMessage(code=500, message="a failed", related_command_index=1, related_command_type=0x0411)
    return Answer([*frames, frame(send), frame(error)])


ANSWERS = {
    "parallel_runs": parallel_runs,
    "run_then_send": run_then_send,
    "sink": lambda s, j: Answer([output("sunk"), frame(pb.EndMessage())]),
    "always_fails": lambda s, j: Answer([frame(pb.ErrorMessage(code=500, message="boom"))]),
    "run_completion_without_run": lambda s, j: Answer(
        [
            frame(pb.ProposeRunCompletionMessage(result_completion_id=5, value=b"1")),
            frame(pb.SuspensionMessage(waiting_completions=[5])),
        ]
    ),
    "unknown_command": lambda s, j: Answer([Frame(0x0415, b""), output("x"), frame(pb.EndMessage())]),
    "suspension_on_nothing": lambda s, j: Answer([frame(pb.SuspensionMessage())]),
    "suspension_on_unknown_completion": lambda s, j: Answer([frame(pb.SuspensionMessage(waiting_completions=[9]))]),
    "two_outputs": lambda s, j: Answer([output("a"), output("b"), frame(pb.EndMessage())]),
    "wrong_content_type": lambda s, j: Answer([output("a"), frame(pb.EndMessage())], content_type="application/json"),
    "huge_error": lambda s, j: Answer(
        [frame(pb.ErrorMessage(code=500, message="m" * 3_000_000, related_command_name="n" * 3_000_000))]
    ),
    "growing_run": growing_run,
    "suspension_on_sent_completion": suspends_on_what_it_was_sent(pb.SuspensionMessage(waiting_completions=[1])),
    "suspension_tree_on_sent_completion": suspends_on_what_it_was_sent(
        pb.SuspensionMessage(
            awaiting_on=pb.Future(
                combinator_type=pb.FIRST_SUCCEEDED_OR_ALL_FAILED,
                nested_futures=[pb.Future(combinator_type=pb.ALL_COMPLETED, waiting_completions=[1])],
            )
        )
    ),
}


@pytest.fixture(scope="module")
def fake() -> FakeDeployment:
    return FakeDeployment(ANSWERS)


@pytest.fixture(scope="module")
def dev(moto_endpoint: str, fake: FakeDeployment) -> Iterator[DevServer]:
    with serve_asgi(fake) as url:
        server = DevServer(
            ingress_port=0, admin_port=0, dynamodb_endpoint=moto_endpoint, table=unique_table_name(), settings=SETTINGS
        )
        server.start()
        try:
            reply = httpx.post(f"{server.admin_url}/deployments", json={"uri": url}, timeout=30)
            assert reply.status_code == 201, reply.text
            yield server
        finally:
            server.stop()


def paused_after_retries(dev: DevServer, handler: str) -> dict[str, Any]:
    """Send `Fake/{handler}` and wait until the policy's attempts are spent (status `paused`)."""
    sent = httpx.post(f"{dev.ingress_url}/restate/send/Fake/{handler}", timeout=30)
    assert sent.status_code == 202, sent.text
    invocation_id = sent.json()["invocationId"]
    invocation: dict[str, Any] = wait_for(
        lambda: (d := describe(dev, invocation_id))["status"] == "paused" and d, 30, f"{handler} to pause"
    )
    return invocation


@pytest.mark.parametrize(
    ("handler", "expected"),
    [
        ("run_completion_without_run", "a run completion for completion id 5, which no Run command was given"),
        ("unknown_command", "unknown command type 0x0415"),
        ("suspension_on_nothing", "a Suspension that awaits nothing"),
        ("suspension_on_unknown_completion", "a Suspension awaiting completion id 9, which no command was given"),
        ("two_outputs", "a second Output command"),
        ("wrong_content_type", "answered with application/json, not the negotiated service protocol's"),
    ],
)
def test_an_answer_no_sdk_sends_is_a_failed_attempt_that_commits_nothing(
    dev: DevServer, fake: FakeDeployment, handler: str, expected: str
) -> None:
    invocation = paused_after_retries(dev, handler)
    assert invocation["attempts"] == MAX_ATTEMPTS
    assert fake.attempts[handler] >= MAX_ATTEMPTS
    assert invocation["last_failure"]["code"] == 571
    assert expected in invocation["last_failure"]["message"]
    assert [e["type"] for e in invocation["journal"]] == ["Input"]


def test_an_error_message_megabytes_long_is_stored_truncated_with_a_marker(dev: DevServer) -> None:
    invocation = paused_after_retries(dev, "huge_error")
    assert invocation["attempts"] == MAX_ATTEMPTS
    failure = invocation["last_failure"]
    assert failure["code"] == 500
    assert len(failure["message"]) <= 4096
    assert failure["message"].startswith("mmm")
    assert failure["message"].endswith("[truncated: 3000000 characters in all]")
    assert failure["related_command_name"].endswith("[truncated: 3000000 characters in all]")
    assert len(failure["related_command_name"]) <= 256


def test_retries_back_off_even_when_each_failed_attempt_makes_the_journal_grow(dev: DevServer) -> None:
    invocation = paused_after_retries(dev, "growing_run")
    assert invocation["attempts"] == MAX_ATTEMPTS
    types = [e["type"] for e in invocation["journal"]]
    assert types == ["Input"] + ["Run"] * MAX_ATTEMPTS  # each failing step is kept (the SDK counts its retries)
    stored = [e["stored_at"] for e in invocation["journal"][1:]]
    gaps_ms = [_ms(b) - _ms(a) for a, b in itertools.pairwise(stored)]
    # the policy's backoff: 100 ms, 200 ms, 400 ms between attempts, not 100 ms each time
    assert gaps_ms[-1] >= 350, gaps_ms


def _ms(rfc3339: str) -> int:
    return int(datetime.fromisoformat(rfc3339.replace("Z", "+00:00")).timestamp() * 1000)


@pytest.mark.parametrize("handler", ["suspension_on_sent_completion", "suspension_tree_on_sent_completion"])
def test_a_suspension_on_a_completion_the_attempt_was_sent_backs_off_instead_of_looping(
    dev: DevServer, handler: str
) -> None:
    sent = httpx.post(f"{dev.ingress_url}/restate/send/Fake/{handler}", timeout=30)
    assert sent.status_code == 202, sent.text
    invocation_id = sent.json()["invocationId"]
    invocation: dict[str, Any] = wait_for(
        lambda: (d := describe(dev, invocation_id))["status"] in ("paused", "completed") and d, 30, f"{handler} to end"
    )
    assert invocation["status"] == "paused", f"re-invoked {len(CALLED[invocation_id])} times without backoff"
    assert invocation["attempts"] == 1 + MAX_ATTEMPTS  # the first suspension was fine
    failure = invocation["last_failure"]
    assert failure["code"] == 571
    assert "a Suspension awaiting completion id 1, already sent to it in this attempt" in failure["message"]
    # the step and its result of the first attempt; nothing of the refused suspensions
    assert [e["type"] for e in invocation["journal"]] == ["Input", "Run", "RunCompletion"]
    # attempt 2 runs at once (the step's result wakes it), then the policy's backoff: 100, 200, 400 ms
    gaps_ms = [(b - a) * 1000 for a, b in itertools.pairwise(CALLED[invocation_id])]
    assert len(gaps_ms) == MAX_ATTEMPTS
    assert gaps_ms[-1] >= 350, gaps_ms


def test_a_step_completed_beside_a_failing_step_keeps_its_result_for_the_retries(dev: DevServer) -> None:
    invocation = paused_after_retries(dev, "parallel_runs")
    # both Run commands and a's result are stored: step a is not run again by the next attempts
    assert [e["type"] for e in invocation["journal"]] == ["Input", "Run", "Run", "RunCompletion"]
    assert PARALLEL_RUNS_SEEN[1] == [0x0400, 0x0411, 0x0411, 0x8011]  # the second attempt is sent a's result


def test_what_a_failed_attempt_sent_after_its_failing_step_never_takes_effect(
    dev: DevServer, fake: FakeDeployment
) -> None:
    invocation = paused_after_retries(dev, "run_then_send")
    # the failing step is kept (the SDK counts its retries from it); the one-way call after it is not
    assert [e["type"] for e in invocation["journal"]] == ["Input", "Run"]
    time.sleep(0.5)  # a callee created by mistake would have been invoked by now
    assert fake.attempts.get("sink", 0) == 0


def test_cancelling_a_paused_invocation_gives_it_a_fresh_retry_budget(dev: DevServer) -> None:
    invocation = paused_after_retries(dev, "always_fails")
    assert invocation["attempts"] == MAX_ATTEMPTS
    invocation_id = invocation["id"]
    cancelled = httpx.patch(f"{dev.admin_url}/invocations/{invocation_id}/cancel", timeout=30)
    assert cancelled.status_code in (200, 202), cancelled.text
    # its attempts go on (the handler never reaches an await that would see the signal) until the
    # policy's attempts are spent again, not after one
    invocation = wait_for(
        lambda: (d := describe(dev, invocation_id))["status"] == "paused" and d["attempts"] > MAX_ATTEMPTS and d,
        30,
        "the cancelled invocation to pause again",
    )
    assert invocation["attempts"] == 2 * MAX_ATTEMPTS


def test_an_invocation_whose_journal_is_corrupt_can_still_be_killed(dev: DevServer) -> None:
    # GIVEN a paused invocation whose stored journal has a batch at the wrong index
    cp = dev.control_plane
    record = cp.engine.create("Fake", "always_fails", b"", {}, leased=True)
    cp.store._update_invocation(record.invocation_id, record.epoch, lease_until_ms=0, status="paused")
    entry = encode_frames([frame(pb.SetStateCommandMessage(key=b"k", value=pb.Value(content=b"1")))])
    cp.store.append_batch(record.invocation_id, JournalBatch(5, entry, record.epoch, 1))  # 1 is next
    # WHEN it is killed
    killed = httpx.patch(f"{dev.admin_url}/invocations/{record.invocation_id}/kill", timeout=30)
    # THEN it completes as killed
    assert killed.status_code in (200, 202), killed.text
    stored = cp.store.get_invocation(record.invocation_id)
    assert stored is not None
    assert (stored.status, stored.completion) == ("completed", "killed")
