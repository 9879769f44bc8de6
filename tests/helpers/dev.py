"""Small helpers for tests that drive a `DevServer`: read an invocation, wait for a condition."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import httpx

from adapters.local.dev import DevServer
from control_plane.settings import Settings
from tests.helpers.moto import unique_table_name


def describe(dev: DevServer, invocation_id: str) -> dict[str, Any]:
    """`GET /invocations/{id}` on the admin API (asserts 200): status, attempts, journal, ..."""
    reply = httpx.get(f"{dev.admin_url}/invocations/{invocation_id}", timeout=10)
    assert reply.status_code == 200, reply.text
    body: dict[str, Any] = reply.json()
    return body


def unique(prefix: str) -> str:
    """A name no other test uses: `{prefix}-{nanoseconds}` (object keys, idempotency keys, ...)."""
    return f"{prefix}-{time.time_ns()}"


def wait_for(condition: Callable[[], Any], deadline_s: float, what: str) -> Any:
    """Poll `condition` every 10 ms until it returns something truthy (returned); AssertionError after the deadline."""
    deadline = time.monotonic() + deadline_s
    while time.monotonic() < deadline:
        value = condition()
        if value:
            return value
        time.sleep(0.01)
    raise AssertionError(f"timed out after {deadline_s} s waiting for {what}")


@contextmanager
def dev_with_examples(moto_endpoint: str, examples_url: str, settings: Settings) -> Iterator[DevServer]:
    """A `DevServer` on a fresh table of the moto server, with the examples registered (asserts 201)."""
    server = DevServer(
        ingress_port=0, admin_port=0, dynamodb_endpoint=moto_endpoint, table=unique_table_name(), settings=settings
    )
    server.start()
    try:
        reply = httpx.post(f"{server.admin_url}/deployments", json={"uri": examples_url}, timeout=30)
        assert reply.status_code == 201, reply.text
        yield server
    finally:
        server.stop()
