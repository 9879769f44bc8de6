"""`torpor dev` on its default store (SQLite) wakes what is due without waiting for a sweep: a burst of
timers due in the same second, and a call queued on a virtual object's key once the holder ends.

Only behaviour is asserted, with bounds a loaded 2-core machine meets; the speed figures are in
bench/README.md (`python -m bench.timers`).
"""

from __future__ import annotations

import time
from collections.abc import Iterator

import httpx
import pytest

from adapters.local.dev import DevServer
from control_plane.protocol import MessageType, decode_frames
from control_plane.protocol import protocol_pb2 as pb
from control_plane.settings import Settings
from tests.helpers.dev import unique, wait_for

SETTINGS = Settings(inactivity_timeout_ms=10_000, call_wait_ms=30_000)


@pytest.fixture(scope="module")
def dev(tmp_path_factory: pytest.TempPathFactory, examples_url: str) -> Iterator[DevServer]:
    """A `DevServer` on a SQLite data directory with the example services registered."""
    server = DevServer(ingress_port=0, admin_port=0, data_dir=tmp_path_factory.mktemp("data"), settings=SETTINGS)
    server.start()
    try:
        server.control_plane.registry.register(examples_url)
        yield server
    finally:
        server.stop()


def completed_ids(dev: DevServer, ids: list[str]) -> list[str]:
    """The ids among `ids` whose invocation completed."""
    done = []
    for invocation_id in ids:
        loaded = dev.store.load_invocation(invocation_id)
        if loaded is not None and loaded.record.status == "completed":
            done.append(invocation_id)
    return done


def sleep_wake_up_and_resumed_ms(dev: DevServer, invocation_id: str) -> tuple[int, int]:
    """`(the Sleep's wake-up time, commit time of the batch holding its SleepCompletion)`, ms since the epoch."""
    loaded = dev.store.load_invocation(invocation_id)
    assert loaded is not None
    wake_up = resumed = None
    for batch in loaded.batches:
        for entry in decode_frames(batch.entries):
            if entry.type == MessageType.Sleep:
                wake_up = pb.SleepCommandMessage.FromString(entry.payload).wake_up_time
            elif entry.type == MessageType.SleepCompletion and resumed is None:
                resumed = batch.committed_at_ms
    assert wake_up is not None, f"{invocation_id}: no Sleep"
    assert resumed is not None, f"{invocation_id}: no SleepCompletion"
    return wake_up, resumed


def commits_ms(dev: DevServer, invocation_id: str) -> tuple[int, int]:
    """`(first, last)` commit time of the invocation's journal batches, ms since the epoch."""
    loaded = dev.store.load_invocation(invocation_id)
    assert loaded is not None
    assert loaded.batches
    times = [batch.committed_at_ms for batch in loaded.batches]
    return min(times), max(times)


def test_a_hundred_sleeps_due_in_the_same_second_all_resume_on_time(dev: DevServer) -> None:
    # GIVEN 100 invocations that each sleep 1 s, sent back to back (all due within about a second)
    with httpx.Client(timeout=30) as client:
        ids = [client.post(f"{dev.ingress_url}/Waits/sleep/send", json=1000).json()["invocationId"] for _ in range(100)]

    # WHEN their timers come due
    # THEN every one completes soon after, none resumed before its wake-up time, each once
    wait_for(lambda: len(completed_ids(dev, ids)) == len(ids), 30, "all 100 sleeps to complete")
    late_ms = []
    for invocation_id in ids:
        wake_up, resumed = sleep_wake_up_and_resumed_ms(dev, invocation_id)
        assert resumed >= wake_up, f"{invocation_id} resumed {wake_up - resumed} ms before its wake-up time"
        late_ms.append(resumed - wake_up)
    assert max(late_ms) < 10_000, f"a sleep resumed {max(late_ms)} ms late (a sweep, not its timer, woke it)"


def test_a_call_queued_on_a_key_starts_when_the_holder_ends(dev: DevServer) -> None:
    key = unique("handoff")
    with httpx.Client(timeout=30) as client:
        # GIVEN a call holding an object's key for 1.5 s, and a second call queued behind it
        holder = client.post(f"{dev.ingress_url}/Counter/{key}/add_after_sleep/send", json={"ms": 1500, "delta": 1})
        holder_id = holder.json()["invocationId"]
        queued_id = client.post(f"{dev.ingress_url}/Counter/{key}/add/send", json=10).json()["invocationId"]

        # WHEN the holder ends
        # THEN the queued call runs after it, on the state it left, and soon after (not at a sweep)
        done = client.get(f"{dev.ingress_url}/restate/invocation/{queued_id}/attach")
    assert done.status_code == 200, done.text
    assert done.json() == 11
    _, holder_ended = commits_ms(dev, holder_id)
    queued_started, _ = commits_ms(dev, queued_id)
    assert queued_started >= holder_ended, "the queued call ran while the key was held"
    assert queued_started - holder_ended < 5_000, f"the queued call started {queued_started - holder_ended} ms late"


def test_a_sleep_is_read_ahead_within_the_schedulers_lead_and_resumed_not_before_its_time(examples_url: str) -> None:
    # GIVEN torpor dev whose scheduler reads sleeps ahead by 600 ms (25 ms by default: too short to watch)
    server = DevServer(ingress_port=0, admin_port=0, in_memory=True, settings=SETTINGS).start()
    try:
        server.control_plane.registry.register(examples_url)
        server._scheduler.sleep_lead_ms = 600  # type: ignore[union-attr]
        with httpx.Client(timeout=30) as client:
            # WHEN an invocation sleeps 1.5 s
            invocation_id = client.post(f"{server.ingress_url}/Waits/sleep/send", json=1500).json()["invocationId"]
            wait_for(lambda: server.store.get_invocation(invocation_id).status == "suspended", 10, "suspension")
            # THEN within the lead before its wake-up time it holds the lease, journal read, waiting
            wait_for(lambda: server.store.get_invocation(invocation_id).status == "running", 10, "read-ahead")
            wake_up = 0
            loaded = server.store.load_invocation(invocation_id)
            assert loaded is not None
            for batch in loaded.batches:
                for entry in decode_frames(batch.entries):
                    if entry.type == MessageType.Sleep:
                        wake_up = pb.SleepCommandMessage.FromString(entry.payload).wake_up_time
            assert wake_up - 650 <= time.time() * 1000 < wake_up, "the read-ahead came outside the lead"
            # AND it resumes at its wake-up time, not before
            wait_for(lambda: server.store.get_invocation(invocation_id).status == "completed", 10, "completion")
            assert client.get(f"{server.admin_url}/invocations/{invocation_id}").json()["attempts"] == 2
        wake_up, resumed = sleep_wake_up_and_resumed_ms(server, invocation_id)
        assert resumed >= wake_up, f"resumed {wake_up - resumed} ms before its wake-up time"
    finally:
        server.stop()
