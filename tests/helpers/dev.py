"""Small helpers for tests that drive a `DevServer`: read an invocation, wait for a condition."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import httpx

from adapters.local.dev import DevServer
from control_plane.settings import Settings
from tests.helpers.moto import unique_table_name
from tests.helpers.services import REPO_ROOT


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


def wait_completed(admin_url: str, invocation_id: str, deadline_s: float = 60) -> dict[str, Any]:
    """Poll `GET /invocations/{id}` on the admin API at `admin_url` until the invocation completed;
    its description. Raises AssertionError after `deadline_s` seconds."""

    def completed() -> dict[str, Any] | None:
        described: dict[str, Any] = httpx.get(f"{admin_url}/invocations/{invocation_id}", timeout=5).json()
        return described if described["status"] == "completed" else None

    result: dict[str, Any] = wait_for(completed, deadline_s, "the invocation to complete after the restart")
    return result


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


_LISTENING = re.compile(r"torpor dev: ingress (http://\S+), admin (http://\S+) ")


@contextmanager
def torpor_dev_process(
    *store_args: str, module: str = "adapters.cli", env: dict[str, str] | None = None
) -> Iterator[tuple[str, str, subprocess.Popen[bytes]]]:
    """`torpor dev STORE_ARGS` in a subprocess with a 3 s inactivity timeout and a 1 s lease margin
    (so a crashed attempt is taken over quickly): `(ingress URL, admin URL, process)`.

    Both ports are 0 (the process binds free ones and logs them), so no other process can take a
    port between its choice and the bind. Its stderr is copied to this process's stderr.
    `module` is what runs the CLI (`python -m MODULE`; a wrapper such as `tests.helpers.crashing_dev`),
    with `env` added to the environment. Terminated on exit unless the test killed it."""
    process = subprocess.Popen(
        [
            sys.executable, "-m", module, "dev", *store_args,
            "--ingress-port", "0", "--admin-port", "0",
            "--inactivity-timeout", "3s", "--lease-margin", "1s",
        ],
        cwd=REPO_ROOT,
        env={**os.environ, "PYTHONPATH": str(REPO_ROOT), **(env or {})},
        stderr=subprocess.PIPE,
    )  # fmt: skip
    urls: list[tuple[str, str]] = []

    def copy_stderr() -> None:
        assert process.stderr is not None
        for raw in process.stderr:
            line = raw.decode(errors="replace")
            sys.stderr.write(line)
            if not urls and (match := _LISTENING.search(line)):
                urls.append((match[1], match[2]))

    threading.Thread(target=copy_stderr, name="torpor-dev-stderr", daemon=True).start()

    def healthy() -> bool:
        if not urls:
            assert process.poll() is None, "torpor dev exited before it listened"
            return False
        try:
            return httpx.get(f"{urls[0][1]}/health", timeout=1).status_code == 200
        except httpx.HTTPError:
            assert process.poll() is None, "torpor dev exited before it answered /health"
            return False

    try:
        wait_for(healthy, 60, "torpor dev to answer /health")
        ingress, admin = urls[0]
        yield ingress, admin, process
    finally:
        if process.poll() is None:
            process.terminate()
            process.wait(15)
