"""Where an ingress error came from, as restate-server 1.7.12 marks it, side by side with it.

The same requests go to restate-server and to `torpor dev`, each serving the same example app
(real restate-sdk handlers under hypercorn): every error answer carries `x-restate-error-source`
(`ingress`: refused by the ingress; `invocation`: the invocation's own result) and the same word
in its body's `"source"`, beside `code` and `message`; the status codes agree.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable, Iterator

import httpx
import pytest

from adapters.local.dev import DevServer
from control_plane.settings import Settings
from tests.helpers.dev import dev_with_examples

SETTINGS = Settings(call_wait_ms=20_000)
LONG_MS = 60_000

Request = Callable[[str, str], httpx.Response]


def _workflow_run_twice(ingress: str, tag: str) -> httpx.Response:
    sent = httpx.post(f"{ingress}/Signup/wf-{tag}/run/send", json="ann@example.com", timeout=30)
    assert sent.status_code == 202, sent.text
    return httpx.post(f"{ingress}/Signup/wf-{tag}/run", json="ann@example.com", timeout=30)


def _running_workflow_output(ingress: str, tag: str) -> httpx.Response:
    sent = httpx.post(f"{ingress}/Signup/out-{tag}/run/send", json="bob@example.com", timeout=30)
    assert sent.status_code == 202, sent.text
    time.sleep(0.5)
    return httpx.get(f"{ingress}/restate/workflow/Signup/out-{tag}/output", timeout=30)


REQUESTS: dict[str, tuple[Request, int, str]] = {
    "unknown service": (lambda i, t: httpx.post(f"{i}/Nope/greet", json="x", timeout=30), 404, "ingress"),
    "unknown handler": (lambda i, t: httpx.post(f"{i}/Greeter/nope", json="x", timeout=30), 404, "ingress"),
    "a content type the handler does not take": (
        lambda i, t: httpx.post(f"{i}/Greeter/greet", content=b'"x"', headers={"content-type": "text/plain"}),
        400,
        "ingress",
    ),
    "a terminal error of the handler": (
        lambda i, t: httpx.post(f"{i}/OrderService/place", json="not an order", timeout=30),
        400,
        "invocation",
    ),
    "a workflow's run invoked twice": (_workflow_run_twice, 409, "invocation"),
    "the output of an unknown workflow": (
        lambda i, t: httpx.get(f"{i}/restate/workflow/Signup/none-{t}/output", timeout=30),
        404,
        "ingress",
    ),
    "the output of a running workflow": (_running_workflow_output, 470, "ingress"),
    "a bad delay": (
        lambda i, t: httpx.post(f"{i}/restate/send/Greeter/greet?delay=soon", json="x", timeout=30),
        400,
        "ingress",
    ),
    "a malformed awakeable id": (
        lambda i, t: httpx.post(f"{i}/restate/awakeables/sign_1bad/resolve", json=1, timeout=30),
        400,
        "ingress",
    ),
    "a malformed invocation id": (
        lambda i, t: httpx.get(f"{i}/restate/invocation/inv_1bad/output", timeout=30),
        400,
        "ingress",
    ),
}


@pytest.fixture(scope="module")
def dev(moto_endpoint: str, examples_url: str) -> Iterator[DevServer]:
    with dev_with_examples(moto_endpoint, examples_url, SETTINGS) as server:
        yield server


@pytest.fixture(scope="module")
def restate_ingress(examples_url: str) -> Iterator[str]:
    """restate-server 1.7.12 with the same example app registered: its ingress URL."""
    from tests.conformance.harness import RestateRuntime

    server = RestateRuntime()
    server.start()
    try:
        registered = httpx.post(
            f"{server.admin_url}/deployments", json={"uri": examples_url, "use_http_11": True}, timeout=60
        )
        assert registered.status_code == 201, registered.text
        yield server.ingress_url
    finally:
        server.stop()


def _source(reply: httpx.Response) -> tuple[int, str | None, object]:
    body = reply.json()
    assert {"code", "message"} <= set(body), body
    return reply.status_code, reply.headers.get("x-restate-error-source"), body.get("source")


@pytest.mark.parametrize("case", list(REQUESTS))
def test_an_error_names_its_source_as_restate_server_does(case: str, dev: DevServer, restate_ingress: str) -> None:
    request, status, source = REQUESTS[case]
    tag = uuid.uuid4().hex[:8]
    on_restate = _source(request(restate_ingress, tag))
    on_torpor = _source(request(dev.ingress_url, tag))
    assert on_restate == (status, source, source), f"restate-server changed its answer to {case}"
    assert on_torpor == on_restate


def test_a_killed_invocations_result_is_the_invocations_error(dev: DevServer) -> None:
    sent = httpx.post(f"{dev.ingress_url}/Waits/sleep/send", json=LONG_MS, timeout=30).json()["invocationId"]
    killed = httpx.patch(f"{dev.admin_url}/invocations/{sent}/kill", timeout=30)
    assert killed.status_code < 300, killed.text
    attached = httpx.get(f"{dev.ingress_url}/restate/invocation/{sent}/attach", timeout=30)
    assert _source(attached)[1:] == ("invocation", "invocation")


def test_successes_carry_no_error_source(dev: DevServer) -> None:
    reply = httpx.post(f"{dev.ingress_url}/Greeter/greet", json="Ann", timeout=30)
    assert reply.status_code == 200 and "x-restate-error-source" not in reply.headers
