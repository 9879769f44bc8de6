"""Sleep (upstream `sdk-tests` Sleep): a sleep (500 ms here, not upstream's 10 ms, so the elapsed time
shows it was not skipped), and many concurrent invocations of many sleeps."""

from __future__ import annotations

import random
import time
from concurrent.futures import ThreadPoolExecutor

from tests.conformance.harness import Env, idem


def interpret(env: Env, key: str, commands: list[dict]) -> object:
    reply = env.call("VirtualObjectCommandInterpreter", "interpretCommands", {"commands": commands}, key=key,
                     idempotency_key=idem())  # fmt: skip
    assert reply.status_code == 200, reply.text
    return reply.json()


def test_sleep(env: Env) -> None:
    started = time.monotonic()
    result = interpret(env, idem(), [{"type": "awaitOne", "command": {"type": "sleep", "timeoutMillis": 500}}])
    assert time.monotonic() - started >= 0.5  # the sleep was not skipped: 500 ms is more than a call takes
    assert result == "sleep"


def test_many_sleeps(env: Env) -> None:
    """50 concurrent keys, each awaiting 20 sleeps of 10-50 ms (all completed), within the test's 60 s."""

    def one(_: int) -> None:
        sleeps = [{"type": "sleep", "timeoutMillis": random.randint(10, 50)} for _ in range(20)]
        result = interpret(env, idem(), [{"type": "awaitAllCompleted", "commands": sleeps}])
        assert result == "|".join(["ok:sleep"] * 20)

    started = time.monotonic()
    with ThreadPoolExecutor(max_workers=50) as pool:
        list(pool.map(one, range(50)))
    assert time.monotonic() - started < 60
