"""An effect that fails after its journal commit is retried or fails the invocation visibly; it
never completes the invocation as succeeded without it.

Real restate-sdk handlers over HTTP on `torpor dev` with the SQLite store; the store's
`apply_state` (the effect of SetState) is wrapped to fail once, or every time.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from adapters.local.dev import DevServer
from control_plane.errors import TorporError
from control_plane.retry import RetryPolicy
from control_plane.settings import Settings
from tests.helpers.dev import describe, unique, wait_for

SETTINGS = Settings(
    inactivity_timeout_ms=10_000,
    lease_margin_ms=2_000,
    call_wait_ms=30_000,
    retry_policy=RetryPolicy(initial_interval_ms=20, max_interval_ms=100, max_attempts=4, on_max_attempts="pause"),
)


@pytest.fixture
def dev(examples_url: str) -> Iterator[DevServer]:
    server = DevServer(ingress_port=0, admin_port=0, in_memory=True, settings=SETTINGS)
    server.start()
    try:
        assert httpx.post(f"{server.admin_url}/deployments", json={"uri": examples_url}, timeout=30).status_code == 201
        yield server
    finally:
        server.stop()


def _failing_apply_state(dev: DevServer, times: int) -> list[str]:
    """Make the store's `apply_state` raise `times` times (after its journal commit); returns the log."""
    store = dev.control_plane.store
    apply_state = store.apply_state
    failed: list[str] = []

    def flaky(scope: str, key: str, *args: Any, **kwargs: Any) -> None:
        if len(failed) < times:
            failed.append(key)
            raise RuntimeError("the state write failed after the journal commit")
        apply_state(scope, key, *args, **kwargs)

    store.apply_state = flaky  # type: ignore[method-assign]
    return failed


def _state(dev: DevServer, key: str) -> dict[str, Any]:
    state: dict[str, Any] = httpx.get(f"{dev.admin_url}/services/Counter/state/{key}", timeout=10).json()["state"]
    return state


def test_a_state_write_failing_once_after_its_commit_is_applied_by_the_retry(dev: DevServer) -> None:
    failed = _failing_apply_state(dev, 1)
    key = unique("once")
    reply = httpx.post(f"{dev.ingress_url}/Counter/{key}/add", json=5, timeout=60)
    assert reply.status_code == 200, reply.text
    assert reply.json() == 5
    assert failed == [key]
    assert _state(dev, key) == {"count": 5}  # the write the answer stands for is there
    assert describe(dev, reply.headers["x-restate-id"])["completion_result"] == "success"
    # and the next call builds on it
    assert httpx.post(f"{dev.ingress_url}/Counter/{key}/add", json=1, timeout=60).json() == 6


def test_a_state_write_failing_every_time_never_completes_the_invocation_as_succeeded(dev: DevServer) -> None:
    _failing_apply_state(dev, 1_000_000)
    key = unique("always")
    reply = httpx.post(f"{dev.ingress_url}/restate/send/Counter/{key}/add", json=5, timeout=60)
    assert reply.status_code == 202, reply.text
    invocation_id = reply.json()["invocationId"]
    wait_for(lambda: describe(dev, invocation_id)["status"] == "paused", 30, "the invocation to pause")
    invocation = describe(dev, invocation_id)
    assert "completion_result" not in invocation or invocation["completion_result"] is None
    assert "the state write failed after the journal commit" in str(invocation["last_failure"])
    assert _state(dev, key) == {}


def test_a_callee_whose_creation_fails_after_the_call_is_committed_is_created_by_the_retry(dev: DevServer) -> None:
    engine = dev.control_plane.engine
    create = engine.create
    refused: list[str] = []

    def flaky_create(service: str, handler: str, *args: Any, **kwargs: Any) -> Any:
        if service == "Greeter" and not refused:  # the Call's effect, after its journal commit
            refused.append(handler)
            raise TorporError("the callee could not be created this time")
        return create(service, handler, *args, **kwargs)

    engine.create = flaky_create  # type: ignore[method-assign]
    reply = httpx.post(f"{dev.ingress_url}/Calls/greet_twice", json="Ann", timeout=60)
    assert reply.status_code == 200, reply.text  # not a caller waiting forever for a callee never created
    assert reply.json() == ["Hello, Ann!", "Hello, ANN!"]
    assert refused == ["greet"]
