"""Registering deployments through the admin API, and negotiating the service protocol version.

Discovery edge cases use a small real HTTP server whose manifest the test controls; protocol
negotiation uses the real restate-sdk services, capped to advertise V5, V6 or V7.
"""

from __future__ import annotations

import contextlib
import json
import socket
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import httpx
import pytest

from adapters.local.dev import DevServer
from control_plane.settings import Settings
from tests.helpers.dev import wait_for
from tests.helpers.moto import unique_table_name
from tests.helpers.services import free_port, serve_examples

MANIFEST_V3 = "application/vnd.restate.endpointmanifest.v3+json"


def manifest(*handlers: str, min_version: int = 5, max_version: int = 7) -> dict[str, Any]:
    return {
        "protocolMode": "REQUEST_RESPONSE",
        "minProtocolVersion": min_version,
        "maxProtocolVersion": max_version,
        "services": [
            {
                "name": "Fake",
                "ty": "SERVICE",
                "handlers": [{"name": h, "input": {}, "output": {}} for h in handlers],
            }
        ],
    }


class FakeDeployment:
    """A real HTTP server answering `GET /discover` with `self.manifest` (or `self.status`)."""

    def __init__(self) -> None:
        self.manifest: Any = manifest("a")
        self.status = 200
        self.content_type = MANIFEST_V3
        fake = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                body = json.dumps(fake.manifest).encode() if not isinstance(fake.manifest, bytes) else fake.manifest
                self.send_response(fake.status)
                self.send_header("content-type", fake.content_type)
                self.send_header("content-length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args: object) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True).start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def fake() -> Iterator[FakeDeployment]:
    deployment = FakeDeployment()
    yield deployment
    deployment.close()


@pytest.fixture(scope="module")
def dev(moto_endpoint: str) -> Iterator[DevServer]:
    server = DevServer(ingress_port=0, admin_port=0, dynamodb_endpoint=moto_endpoint, table=unique_table_name())
    server.start()
    yield server
    server.stop()


def register(dev: DevServer, **body: Any) -> httpx.Response:
    return httpx.post(f"{dev.admin_url}/deployments", json=body, timeout=30)


def test_register_lists_and_removes_a_deployment(dev: DevServer, fake: FakeDeployment) -> None:
    created = register(dev, uri=fake.url)
    assert created.status_code == 201, created.text
    body = created.json()
    assert body["id"].startswith("dp_")
    assert [s["name"] for s in body["services"]] == ["Fake"]
    assert body["min_protocol_version"] == 5
    assert body["max_protocol_version"] == 7
    listed = httpx.get(f"{dev.admin_url}/deployments").json()["deployments"]
    assert body["id"] in [d["id"] for d in listed]
    one = httpx.get(f"{dev.admin_url}/deployments/{body['id']}").json()
    assert one["uri"] == fake.url
    assert [s["name"] for s in one["services"]] == ["Fake"]
    service = httpx.get(f"{dev.admin_url}/services/Fake").json()
    assert service["deployment_id"] == body["id"]
    assert [h["name"] for h in service["handlers"]] == ["a"]
    assert httpx.delete(f"{dev.admin_url}/deployments/{body['id']}").status_code == 202
    assert httpx.get(f"{dev.admin_url}/deployments/{body['id']}").status_code == 404
    assert httpx.get(f"{dev.admin_url}/services/Fake").status_code == 404


def test_reregistering_changed_handlers_needs_force(dev: DevServer, fake: FakeDeployment) -> None:
    first = register(dev, uri=fake.url).json()
    again = register(dev, uri=fake.url)
    assert again.status_code == 201
    assert again.json()["id"] == first["id"]
    fake.manifest = manifest("a", "b")
    refused = register(dev, uri=fake.url)
    assert refused.status_code == 409
    assert "force" in refused.json()["message"]
    assert [h["name"] for h in httpx.get(f"{dev.admin_url}/services/Fake").json()["handlers"]] == ["a"]
    forced = register(dev, uri=fake.url, force=True)
    assert forced.status_code == 201
    assert forced.json()["id"] == first["id"]
    assert [h["name"] for h in httpx.get(f"{dev.admin_url}/services/Fake").json()["handlers"]] == ["a", "b"]


def test_a_uri_that_does_not_answer_discovery_is_a_400_naming_the_cause(dev: DevServer) -> None:
    reply = register(dev, uri=f"http://127.0.0.1:{free_port()}")
    assert reply.status_code == 400
    assert "discovery" in reply.json()["message"]
    assert "refused" in reply.json()["message"]


@pytest.mark.parametrize(
    ("status", "body", "content_type", "expected"),
    [
        (500, {"oops": 1}, MANIFEST_V3, "HTTP 500"),
        (200, b"not json", MANIFEST_V3, "manifest"),
        (200, {"services": []}, MANIFEST_V3, "minProtocolVersion"),
        (200, manifest("a"), "text/html", "text/html"),
    ],
)
def test_bad_discovery_answers_are_a_400(
    dev: DevServer, fake: FakeDeployment, status: int, body: Any, content_type: str, expected: str
) -> None:
    fake.status, fake.manifest, fake.content_type = status, body, content_type
    reply = register(dev, uri=fake.url)
    assert reply.status_code == 400, reply.text
    assert expected in reply.json()["message"]


def test_a_protocol_range_without_overlap_is_refused(dev: DevServer, fake: FakeDeployment) -> None:
    fake.manifest = manifest("a", min_version=1, max_version=4)
    reply = register(dev, uri=fake.url)
    assert reply.status_code == 415
    assert "5" in reply.json()["message"]


@pytest.mark.parametrize("bad", [{}, {"uri": "ftp://x"}, {"uri": 3}, {"uri": "http://x", "force": "yes"}, []])
def test_malformed_registration_bodies_are_a_400(dev: DevServer, bad: Any) -> None:
    reply = httpx.post(f"{dev.admin_url}/deployments", json=bad, timeout=10)
    assert reply.status_code == 400
    assert set(reply.json()) == {"code", "message"}


@pytest.mark.parametrize(
    ("field", "make"),
    [
        ("additional_headers", lambda url: {"uri": url, "additional_headers": {"x-a\nb": "v"}}),
        ("additional_headers", lambda url: {"uri": url, "additional_headers": {"x-a": "v\r\nx-injected: 1"}}),
        ("additional_headers", lambda url: {"uri": url, "additional_headers": {"": "v"}}),
        ("additional_headers", lambda url: {"uri": url, "additional_headers": {"x-caf\u00e9": "v"}}),
        ("additional_headers", lambda url: {"uri": url, "additional_headers": {"x-a": "caf\u00e9\u20ac"}}),
        ("additional_headers", lambda url: {"uri": url, "additional_headers": {"Host": "elsewhere.example"}}),
        ("additional_headers", lambda url: {"uri": url, "additional_headers": {"content-length": "0"}}),
        ("additional_headers", lambda url: {"uri": url, "additional_headers": {"x-a": 1}}),
        ("uri", lambda url: {"uri": "http://[::1"}),
        ("uri", lambda url: {"uri": "http://[::1]:99999"}),
        ("uri", lambda url: {"uri": url + "\n/x"}),
        ("uri", lambda url: {"uri": url.replace("http://", "http://user:s3cret@")}),
        ("uri", lambda url: {"uri": "http://"}),
        ("metadata", lambda url: {"uri": url, "metadata": {"team": 1}}),
        ("dry_run", lambda url: {"uri": url, "dry_run": "yes"}),
    ],
)
def test_bad_registration_fields_are_a_400_naming_the_field_and_register_nothing(
    dev: DevServer, fake: FakeDeployment, field: str, make: Any
) -> None:
    # GIVEN a deployment that answers discovery, registered with one bad field
    reply = register(dev, **make(fake.url))
    # THEN the answer is a 400 naming the field (not a 500), and nothing was registered
    assert reply.status_code == 400, reply.text
    assert set(reply.json()) == {"code", "message"}
    assert f'"{field}"' in reply.json()["message"]
    listed = httpx.get(f"{dev.admin_url}/deployments", timeout=10).json()["deployments"]
    port = fake.url.rsplit(":", 1)[1]
    assert not [d for d in listed if port in d.get("uri", "")], listed
    assert "s3cret" not in json.dumps(listed)


def test_a_stalled_discovery_holds_up_no_other_registration_and_ends_with_a_400_naming_the_timeout(
    dev: DevServer, fake: FakeDeployment
) -> None:
    # GIVEN a deployment that accepts connections and never answers
    with socket.create_server(("127.0.0.1", 0)) as stalled:
        accepted: list[socket.socket] = []
        threading.Thread(target=lambda: accepted.extend(stalled.accept() for _ in range(4)), daemon=True).start()
        slow: dict[str, httpx.Response] = {}
        slow_port = stalled.getsockname()[1]
        waiting = threading.Thread(target=lambda: slow.update(reply=register(dev, uri=f"http://127.0.0.1:{slow_port}")))
        waiting.start()
        wait_for(lambda: accepted, 10, "the stalled deployment to be asked for discovery")
        # WHEN another deployment is registered meanwhile
        prompt = register(dev, uri=fake.url)
        # THEN it is registered while the first discovery still waits
        assert prompt.status_code == 201, prompt.text
        assert waiting.is_alive()
        # AND the stalled one ends, with a 400 naming the time discovery may take
        waiting.join(30)
        assert not waiting.is_alive()
        reply = slow["reply"]
        assert reply.status_code == 400, reply.text
        assert "within 10 s" in reply.json()["message"]
        for conn, _ in accepted:
            conn.close()


def _dripping_h2_deployment(server: socket.socket, stop: threading.Event) -> None:
    """Serve one h2c (prior knowledge) connection: answer `GET /discover` with a 200 and a manifest
    content type, then one body byte every 0.2 s until `stop`."""
    import h2.config
    import h2.connection
    import h2.events

    conn, _ = server.accept()
    with conn:
        h2c = h2.connection.H2Connection(h2.config.H2Configuration(client_side=False, header_encoding="utf-8"))
        h2c.initiate_connection()
        conn.sendall(h2c.data_to_send())
        stream_id = None
        while stream_id is None:
            data = conn.recv(65536)
            if not data:
                return
            for event in h2c.receive_data(data):
                if isinstance(event, h2.events.RequestReceived):
                    stream_id = event.stream_id
            conn.sendall(h2c.data_to_send())
        h2c.send_headers(stream_id, [(":status", "200"), ("content-type", MANIFEST_V3)])
        conn.sendall(h2c.data_to_send())
        conn.settimeout(0.2)
        while not stop.is_set():
            with contextlib.suppress(TimeoutError):
                if conn.recv(65536) == b"":
                    return
            try:
                h2c.send_data(stream_id, b" ")
                conn.sendall(h2c.data_to_send())
            except OSError:
                return


def test_a_discovery_answer_dripping_over_http2_ends_at_the_discovery_deadline(dev: DevServer) -> None:
    # GIVEN a deployment speaking HTTP/2 whose discovery answer drips one byte every 0.2 s, forever
    stop = threading.Event()
    with socket.create_server(("127.0.0.1", 0)) as server:
        threading.Thread(target=_dripping_h2_deployment, args=(server, stop), daemon=True).start()
        try:
            # WHEN it is registered
            reply = httpx.post(
                f"{dev.admin_url}/deployments", json={"uri": f"http://127.0.0.1:{server.getsockname()[1]}"}, timeout=30
            )
        finally:
            stop.set()
    # THEN discovery gives up at its deadline with a 400 naming it (it used to wait as long as bytes came)
    assert reply.status_code == 400, reply.text
    assert "within 10 s" in reply.json()["message"]


def test_health(dev: DevServer) -> None:
    assert httpx.get(f"{dev.admin_url}/health").status_code == 200


@pytest.mark.parametrize("max_version", [5, 6, 7])
def test_each_protocol_version_is_negotiated_with_the_real_sdk(moto_endpoint: str, max_version: int) -> None:
    with serve_examples(max_protocol_version=max_version) as (url, _process):
        server = DevServer(
            ingress_port=0,
            admin_port=0,
            dynamodb_endpoint=moto_endpoint,
            table=unique_table_name(),
            settings=Settings(inactivity_timeout_ms=10_000),
        )
        server.start()
        try:
            created = httpx.post(f"{server.admin_url}/deployments", json={"uri": url}, timeout=30)
            assert created.json()["max_protocol_version"] == max_version
            reply = httpx.post(f"{server.ingress_url}/Steps/one_step", json=1, timeout=30)
            assert reply.status_code == 200
            assert reply.json() == 2
            invocation = httpx.get(f"{server.admin_url}/invocations/{reply.headers['x-restate-id']}").json()
            assert invocation["protocol_version"] == max_version
            assert [e["type"] for e in invocation["journal"]] == ["Input", "Run", "RunCompletion", "Output"]
        finally:
            server.stop()
