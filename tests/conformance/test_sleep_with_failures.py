"""SleepWithFailures (upstream `sdk-tests` SleepWithFailures): a 4 s sleep outlives SIGKILL / SIGTERM of
the *service* process, restarted on the same port while the invocation sleeps."""

from __future__ import annotations

import random
import threading
import time
from collections.abc import Callable

import httpx
import pytest

from tests.conformance.harness import PrivateEnv, idem

SLEEP_S = 4.0

pytestmark = pytest.mark.slow


def sleep_through(env: PrivateEnv, action: Callable[[], None]) -> None:
    """Start a 4 s sleep, run `action` 1-2 s in, then the call must answer 200 after at least 4 s."""
    replies: list[httpx.Response] = []

    def call() -> None:
        command = {"type": "awaitOne", "command": {"type": "sleep", "timeoutMillis": int(SLEEP_S * 1000)}}
        replies.append(env.call("VirtualObjectCommandInterpreter", "interpretCommands", {"commands": [command]},
                                key=idem(), idempotency_key=idem()))  # fmt: skip

    started = time.monotonic()
    caller = threading.Thread(target=call)
    caller.start()
    time.sleep(random.uniform(SLEEP_S / 4, SLEEP_S / 2))
    action()
    caller.join(60)
    assert not caller.is_alive(), "the call did not answer within 60 s"
    assert time.monotonic() - started >= SLEEP_S
    assert replies[0].status_code == 200, replies[0].text
    assert replies[0].json() == "sleep"


def test_sleep_and_kill_service_endpoint(private_env: Callable[..., PrivateEnv], lang: str) -> None:
    env = private_env(lang)

    def kill_and_restart() -> None:
        env.kill_services()
        env.start_services()

    sleep_through(env, kill_and_restart)


def test_sleep_and_terminate_service_endpoint(private_env: Callable[..., PrivateEnv], lang: str) -> None:
    env = private_env(lang)

    def terminate_and_restart() -> None:
        env.stop_services()
        env.start_services()

    sleep_through(env, terminate_and_restart)
