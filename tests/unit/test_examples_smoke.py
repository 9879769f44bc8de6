"""Smoke tests for the example services: discovery over HTTP/1.1 and the protocol-version cap.

These start ``python -m examples.serve`` in a subprocess (``tests.helpers.services``) and look at
what the real SDK (restate-sdk 1.3.0) advertises, so the control plane's discovery code can rely
on these facts.
"""

from __future__ import annotations

import asyncio
import json
import signal
import socket
import subprocess
import sys
from pathlib import Path
from typing import Any

import httpx
import pytest

from examples.app import cap_manifest, make_app
from examples.side_effects import SIDE_EFFECTS_ENV, read_side_effects, record_side_effect
from tests.helpers.services import MANIFEST_V3, MANIFEST_V4, free_port, serve_examples

SERVICE_TYPES = {
    "Counter": "VIRTUAL_OBJECT",
    "LazyCounter": "VIRTUAL_OBJECT",
    "Signup": "WORKFLOW",
    "Sequence": "VIRTUAL_OBJECT",
}
STRING_INPUT = {"required": False, "contentType": "application/json", "jsonSchema": {"type": "string"}}
STRING_OUTPUT = {"contentType": "application/json", "setContentTypeIfEmpty": False, "jsonSchema": {"type": "string"}}
OBJECT_INPUT = {"required": False, "contentType": "application/json", "jsonSchema": {"type": "object"}}
OBJECT_OUTPUT = {"contentType": "application/json", "setContentTypeIfEmpty": False, "jsonSchema": {"type": "object"}}

EXPECTED_HANDLERS = {
    "Greeter": {"greet"},
    "OrderService": {"place"},
    "Steps": {"ten_steps", "n_steps", "flaky", "fail_terminal", "no_input", "one_step", "slow_steps", "big_step"},
    "Waits": {
        "sleep", "sleeps", "timed_sleep", "call_sleep", "awakeable", "resolve", "signal", "send_signal", "booking",
        "send_later", "stamp",
    },  # fmt: skip
    "Counter": {"add", "get", "add_then_fail", "add_after_sleep", "reset", "describe", "add_via_self"},
    "LazyCounter": {"lazy_add", "read_many", "put"},
    "Signup": {"run", "confirm", "status", "peek", "await_confirmation"},
    "Calls": {"greet_twice", "count_to", "call_failing", "book_via", "send_then_sleep"},
    "Chain": {"a", "b", "c", "work", "call_once", "trace", "headers"},
    "Bench": {"steps_sleep_steps"},
    "Sequence": {"append", "get", "fill", "digests"},
}


@pytest.fixture(scope="module")
def examples_url() -> Any:
    """Serve the examples once for this module and yield their base URL."""
    with serve_examples() as (base_url, _process):
        yield base_url


def _handlers(manifest: dict[str, Any]) -> dict[tuple[str, str], dict[str, Any]]:
    return {(svc["name"], h["name"]): h for svc in manifest["services"] for h in svc["handlers"]}


@pytest.mark.parametrize("accept", [MANIFEST_V3, MANIFEST_V4])
def test_discovery_manifest(examples_url: str, accept: str) -> None:
    response = httpx.get(f"{examples_url}/discover", headers={"accept": accept})
    print(f"\nGET /discover accept={accept} -> {response.status_code} {dict(response.headers)}")
    print(response.text)

    assert response.status_code == 200
    assert response.http_version == "HTTP/1.1"
    assert response.headers["content-type"] == accept
    manifest = response.json()
    assert manifest["protocolMode"] == "REQUEST_RESPONSE"
    assert manifest["minProtocolVersion"] == 5
    assert manifest["maxProtocolVersion"] == 7
    assert "lambdaCompression" not in manifest  # only on Lambda with zstd available (v4+)
    services = {svc["name"]: svc for svc in manifest["services"]}
    assert set(services) == set(EXPECTED_HANDLERS)
    for name, handler_names in EXPECTED_HANDLERS.items():
        assert services[name]["ty"] == SERVICE_TYPES.get(name, "SERVICE")
        assert {h["name"] for h in services[name]["handlers"]} == handler_names

    handlers = _handlers(manifest)
    # A str handler, a dict handler and a handler without input; plain services give no handler "ty".
    assert "ty" not in handlers["Greeter", "greet"]
    assert handlers["Greeter", "greet"]["input"] == STRING_INPUT
    assert handlers["Greeter", "greet"]["output"] == STRING_OUTPUT
    assert handlers["OrderService", "place"]["input"] == OBJECT_INPUT
    assert handlers["OrderService", "place"]["output"] == OBJECT_OUTPUT
    assert handlers["Steps", "no_input"]["input"] == {}
    assert handlers["Steps", "no_input"]["output"] == STRING_OUTPUT
    assert handlers["Steps", "n_steps"]["input"]["jsonSchema"] == {"type": "integer"}
    assert handlers["Steps", "ten_steps"]["output"]["jsonSchema"] == {"type": "array", "items": True}
    # The handler's docstring is advertised as its documentation.
    assert handlers["Greeter", "greet"]["documentation"].startswith("Greet someone by name.")


def test_discovery_content_negotiation(examples_url: str) -> None:
    # No accept header at all (or an empty one): the SDK falls back to manifest v2, which cannot
    # express LazyCounter's `enableLazyState` (a v3 option), so the SDK fails discovery (500).
    # Torpor therefore always sends an explicit accept header listing v1..v4.
    with httpx.Client() as client:
        del client.headers["accept"]  # httpx would send "accept: */*", which gets 415
        response = client.get(f"{examples_url}/discover")
    assert response.status_code == 500
    # Several versions offered: the SDK picks the highest it knows (v5 > v4 > v3 > v2).
    offered = "application/vnd.restate.endpointmanifest.v3+json, application/vnd.restate.endpointmanifest.v4+json"
    response = httpx.get(f"{examples_url}/discover", headers={"accept": offered})
    assert response.headers["content-type"] == MANIFEST_V4
    # Only unknown versions (or */*): 415 with a plain-text reason.
    for accept in ("application/vnd.restate.endpointmanifest.v99+json", "*/*"):
        response = httpx.get(f"{examples_url}/discover", headers={"accept": accept})
        print(f"accept={accept} -> {response.status_code} {response.text!r}")
        assert response.status_code == 415
        assert response.headers["content-type"] == "text/plain"


def test_health_and_unknown_paths(examples_url: str) -> None:
    assert httpx.get(f"{examples_url}/health").json() == {"status": "ok"}
    assert httpx.post(f"{examples_url}/invoke/Nope/nothing", content=b"").status_code == 404
    assert httpx.post(f"{examples_url}/invoke/Greeter/nothing", content=b"").status_code == 404


async def _asgi_get(app: Any, path: str, headers: dict[str, str]) -> tuple[int, dict[str, str], bytes]:
    """Make one HTTP/1.1 GET against an ASGI app in this process."""
    scope = {
        "type": "http",
        "asgi": {"version": "3.0"},
        "http_version": "1.1",
        "method": "GET",
        "scheme": "http",
        "path": path,
        "raw_path": path.encode(),
        "query_string": b"",
        "root_path": "",
        "headers": [(k.encode(), v.encode()) for k, v in headers.items()],
        "client": ("127.0.0.1", 1),
        "server": ("127.0.0.1", 2),
    }
    sent: list[dict[str, Any]] = []
    requests = [{"type": "http.request", "body": b"", "more_body": False}]

    async def receive() -> dict[str, Any]:
        if requests:
            return requests.pop(0)
        await asyncio.Event().wait()  # never: nothing else arrives
        raise AssertionError("unreachable")

    async def send(message: dict[str, Any]) -> None:
        sent.append(message)

    await app(scope, receive, send)
    start = next(m for m in sent if m["type"] == "http.response.start")
    body = b"".join(m.get("body", b"") for m in sent if m["type"] == "http.response.body")
    return start["status"], {k.decode(): v.decode() for k, v in start["headers"]}, body


@pytest.mark.parametrize("cap", [5, 6])
def test_make_app_caps_max_protocol_version_in_process(cap: int) -> None:
    status, headers, body = asyncio.run(
        _asgi_get(make_app(max_protocol_version=cap), "/discover", {"accept": MANIFEST_V3})
    )
    assert status == 200
    assert headers["content-type"] == MANIFEST_V3
    assert int(headers["content-length"]) == len(body)
    manifest = json.loads(body)
    assert (manifest["minProtocolVersion"], manifest["maxProtocolVersion"]) == (5, cap)
    assert manifest["protocolMode"] == "REQUEST_RESPONSE"
    # Everything except discovery passes through untouched.
    status, _headers, body = asyncio.run(_asgi_get(make_app(max_protocol_version=cap), "/health", {}))
    assert (status, json.loads(body)) == (200, {"status": "ok"})


def test_make_app_without_cap_and_bad_cap() -> None:
    status, _headers, body = asyncio.run(_asgi_get(make_app(), "/discover", {"accept": MANIFEST_V4}))
    assert status == 200
    assert json.loads(body)["maxProtocolVersion"] == 7
    for bad in (0, -1, True, "5"):
        with pytest.raises(ValueError, match="max_protocol_version"):
            make_app(max_protocol_version=bad)  # type: ignore[arg-type]


def test_cap_manifest_never_raises_and_keeps_the_range_consistent() -> None:
    body = json.dumps({"minProtocolVersion": 5, "maxProtocolVersion": 7, "services": []}).encode()
    assert json.loads(cap_manifest(body, 9))["maxProtocolVersion"] == 7
    capped = json.loads(cap_manifest(body, 4))
    assert (capped["minProtocolVersion"], capped["maxProtocolVersion"]) == (4, 4)


def test_serve_with_max_protocol_version_5() -> None:
    with serve_examples(max_protocol_version=5) as (base_url, _process):
        for accept in (MANIFEST_V3, MANIFEST_V4):
            response = httpx.get(f"{base_url}/discover", headers={"accept": accept})
            assert response.status_code == 200
            assert response.headers["content-type"] == accept
            assert int(response.headers["content-length"]) == len(response.content)
            manifest = response.json()
            print(
                f"\ncapped at 5, accept={accept}: min={manifest['minProtocolVersion']} "
                f"max={manifest['maxProtocolVersion']} mode={manifest['protocolMode']}"
            )
            assert (manifest["minProtocolVersion"], manifest["maxProtocolVersion"]) == (5, 5)
            assert manifest["protocolMode"] == "REQUEST_RESPONSE"


def test_serve_on_a_fixed_port_stops_on_sigterm_and_restarts(tmp_path: Path) -> None:
    port = free_port()
    with serve_examples(port=port) as (base_url, process):
        assert base_url == f"http://127.0.0.1:{port}"
        with httpx.Client() as client:  # an idle keep-alive connection must not hold shutdown up
            assert client.get(f"{base_url}/health").status_code == 200
            process.send_signal(signal.SIGTERM)
            assert process.wait(timeout=10) == 0
    # Same port again at once (SO_REUSEADDR), as after a crash of the deployment.
    with serve_examples(port=port) as (base_url, process):
        assert httpx.get(f"{base_url}/health").status_code == 200
        process.kill()
        process.wait(timeout=10)


def test_serve_on_a_busy_port_says_so_in_one_line_and_exits_non_zero() -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        done = subprocess.run(
            [sys.executable, "-m", "examples.serve", "--port", str(port)], capture_output=True, text=True, timeout=60
        )
    assert done.returncode == 2
    assert done.stdout == ""
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1, done.stderr
    assert f"127.0.0.1:{port}" in lines[0]
    assert "--port" in lines[0]


def test_http2_is_refused() -> None:
    """An HTTP/2 (prior knowledge) request gets 505, so discovery never reports BIDI_STREAM."""
    h2 = pytest.importorskip("h2")
    del h2
    with serve_examples() as (base_url, _process), httpx.Client(http1=False, http2=True) as client:
        response = client.get(f"{base_url}/discover", headers={"accept": MANIFEST_V3})
        assert response.http_version == "HTTP/2"
        assert response.status_code == 505


def test_side_effects_file_round_trip(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = tmp_path / "effects.jsonl"
    monkeypatch.delenv(SIDE_EFFECTS_ENV, raising=False)
    assert record_side_effect("Steps", "one_step", "inv_1", "add-one") is None
    assert read_side_effects(path) == []
    monkeypatch.setenv(SIDE_EFFECTS_ENV, str(path))
    first = record_side_effect("Steps", "one_step", "inv_1", "add-one")
    record_side_effect("OrderService", "place", "inv_2", "charge payment")
    with path.open("a", encoding="utf-8") as handle:
        handle.write('{"partial": ')  # a write still under way is not a record yet
    records = read_side_effects(path)
    assert records[0] == first
    assert [(r["service"], r["handler"], r["invocation_id"], r["step"]) for r in records] == [
        ("Steps", "one_step", "inv_1", "add-one"),
        ("OrderService", "place", "inv_2", "charge payment"),
    ]
    assert set(records[0]) == {"service", "handler", "invocation_id", "step", "pid", "t_ms"}
