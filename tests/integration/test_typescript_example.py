"""The TypeScript example (`examples/typescript`, the Restate TypeScript SDK) on `torpor dev`.

The README's "TypeScript handlers" commands, as a user runs them: `scripts/node_app.sh` installs and
runs the example (node's http server, `http1Handler({bidirectional: false})`, HTTP/1.1), it is
registered through the admin API next to the Python examples, and called through the ingress: a
call, state of a virtual object, and a sleep that suspends the invocation between two requests.
The first run downloads the npm packages (and a Node 22 binary on a machine with an older node).
"""

from __future__ import annotations

import subprocess
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from adapters.local.dev import DevServer
from control_plane.settings import Settings
from tests.conformance.harness import ManagedProcess, child_env, free_port, wait_http
from tests.helpers.dev import describe, unique, wait_for
from tests.helpers.moto import unique_table_name
from tests.helpers.services import REPO_ROOT

NODE_APP = REPO_ROOT / "scripts" / "node_app.sh"
EXAMPLE = REPO_ROOT / "examples" / "typescript"
TS_SERVICES = {"TsGreeter", "TsCounter", "TsSleeper"}
SETTINGS = Settings(call_wait_ms=20_000)


@pytest.fixture(scope="module")
def ts_example_url() -> Iterator[str]:
    """The TypeScript example, installed and run with `scripts/node_app.sh` on a free port, for the module."""
    install = subprocess.run(
        [str(NODE_APP), "install", "ts-example", str(EXAMPLE)], capture_output=True, text=True, timeout=600
    )
    assert install.returncode == 0, f"node_app.sh install failed:\n{install.stdout[-2000:]}\n{install.stderr[-2000:]}"
    port = free_port()
    argv = [str(NODE_APP), "run", "ts-example", str(EXAMPLE), "src/app.ts", "--port", str(port)]
    process = ManagedProcess("ts-example", argv, child_env())
    process.start()
    try:
        url = f"http://127.0.0.1:{port}"
        wait_http(f"{url}/discover", process, timeout_s=60, ok=lambda r: True)  # any answer: it listens
        yield url
    finally:
        process.stop()


@pytest.fixture(scope="module")
def dev(moto_endpoint: str) -> Iterator[DevServer]:
    """`torpor dev` (in process) on a fresh table of the session's moto server."""
    server = DevServer(
        ingress_port=0, admin_port=0, dynamodb_endpoint=moto_endpoint, table=unique_table_name(), settings=SETTINGS
    )
    with server:
        yield server


@pytest.fixture(scope="module")
def registration(dev: DevServer, ts_example_url: str, examples_url: str) -> dict[str, Any]:
    """Both example deployments registered on `dev`: `POST /deployments` answers of TypeScript, Python."""
    answers = {}
    for lang, url in (("typescript", ts_example_url), ("python", examples_url)):
        reply = httpx.post(f"{dev.admin_url}/deployments", json={"uri": url}, timeout=30)
        assert reply.status_code == 201, reply.text
        answers[lang] = reply.json()
    return answers


def test_registration_discovers_the_typescript_services_next_to_the_python_ones(
    dev: DevServer, registration: dict[str, Any]
) -> None:
    assert {s["name"] for s in registration["typescript"]["services"]} == TS_SERVICES
    assert "Greeter" in {s["name"] for s in registration["python"]["services"]}
    listed = httpx.get(f"{dev.admin_url}/services", timeout=10).json()["services"]
    assert TS_SERVICES | {"Greeter", "Counter"} <= {s["name"] for s in listed}


def test_a_call_answers_the_handlers_result(dev: DevServer, registration: dict[str, Any]) -> None:
    reply = httpx.post(f"{dev.ingress_url}/TsGreeter/greet", json="Ann", timeout=30)
    assert reply.status_code == 200, reply.text
    assert reply.json() == "Hello, Ann!"
    assert describe(dev, reply.headers["x-restate-id"])["status"] == "completed"
    # the Python Greeter answers beside it on the same runtime
    assert httpx.post(f"{dev.ingress_url}/Greeter/greet", json="Bob", timeout=30).json() == "Hello, Bob!"


def test_an_object_keeps_its_state_between_calls(dev: DevServer, registration: dict[str, Any]) -> None:
    key = unique("k")
    first = httpx.post(f"{dev.ingress_url}/TsCounter/{key}/add", json=5, timeout=30)
    second = httpx.post(f"{dev.ingress_url}/TsCounter/{key}/add", json=5, timeout=30)
    assert (first.status_code, second.status_code) == (200, 200), (first.text, second.text)
    assert (first.json(), second.json()) == (5, 10)
    assert httpx.post(f"{dev.ingress_url}/TsCounter/{key}/get", timeout=30).json() == 10
    state = httpx.get(f"{dev.admin_url}/services/TsCounter/state/{key}", timeout=10)
    assert (state.json()["key"], state.json()["state"]) == (key, {"count": 10})


def test_a_sleep_suspends_the_invocation_until_its_timer_fires(dev: DevServer, registration: dict[str, Any]) -> None:
    sent = httpx.post(f"{dev.ingress_url}/restate/send/TsSleeper/sleep", json=1500, timeout=30)
    assert sent.status_code == 202, sent.text
    invocation_id = sent.json()["invocationId"]
    suspended = wait_for(
        lambda: (d := describe(dev, invocation_id))["status"] == "suspended" and d, 10, "the sleep's suspension"
    )
    assert suspended["wake_up_at"] is not None
    done = httpx.get(f"{dev.ingress_url}/restate/invocation/{invocation_id}/attach", timeout=30)
    assert done.status_code == 200, done.text
    assert done.json() == "slept 1500 ms"
    invocation = describe(dev, invocation_id)
    assert invocation["attempts"] == 2  # one request up to the sleep, one after the timer fired
    assert [e["type"] for e in invocation["journal"]] == ["Input", "Sleep", "SleepCompletion", "Output"]
