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

import os
import signal
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from adapters.aws.checkpoints import Checkpoints, asgi_app_of
from adapters.local.dev import DevServer
from adapters.local.lambda_emulator import function_arn
from adapters.local.sqlite_store import SQLiteStore
from control_plane.retry import RetryPolicy
from control_plane.settings import Settings
from examples.side_effects import SIDE_EFFECTS_ENV, read_side_effects
from tests.helpers.dev import describe, wait_for

SETTINGS = Settings(
    inactivity_timeout_ms=20_000,
    lease_margin_ms=2_000,
    call_wait_ms=30_000,
    retry_policy=RetryPolicy(initial_interval_ms=100, max_attempts=20),
)
FUNCTIONS = {"Examples": "examples.app:app", "Paced": "tests.helpers.checkpoint_app:app"}


def start(checkpoints: bool, side_effects: Path) -> DevServer:
    os.environ[SIDE_EFFECTS_ENV] = str(side_effects)  # the emulator's process inherits it
    server = DevServer(
        ingress_port=0,
        admin_port=0,
        in_memory=True,
        settings=SETTINGS,
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
    return [{k: v for k, v in entry.items() if k not in ("committed_at", "committed_at_ms")} for entry in body["journal"]]


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
