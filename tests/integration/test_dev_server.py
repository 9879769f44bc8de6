"""`torpor dev` in-process: the DevServer on free ports with its default store (SQLite in memory), over real HTTP."""

from __future__ import annotations

import contextlib
import os
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator

import httpx
import pytest

from adapters.aws.dynamodb_store import DynamoDBStore
from adapters.http.invoker import HttpInvoker
from adapters.local import http_server
from adapters.local.dev import DevServer, DevServerError
from adapters.local.sqlite_store import SQLiteStore
from control_plane.ports import InvokerError
from control_plane.settings import Settings


@pytest.fixture(scope="module")
def dev() -> Iterator[DevServer]:
    """One dev server for this module: free ports, the default store, short call wait."""
    server = DevServer(ingress_port=0, admin_port=0, settings=Settings(call_wait_ms=2_000), concurrency=4)
    with server:
        yield server


@pytest.fixture
def client() -> Iterator[httpx.Client]:
    with httpx.Client(trust_env=False, timeout=10.0) as c:
        yield c


def test_start_exposes_urls_and_the_default_store_sqlite_in_memory(dev: DevServer) -> None:
    assert dev.ingress_url.startswith("http://127.0.0.1:")
    assert dev.admin_url.startswith("http://127.0.0.1:")
    assert dev.ingress_url != dev.admin_url
    assert isinstance(dev.store, SQLiteStore)
    assert (dev.store.path, dev.store_location, dev.data_dir) == (":memory:", "memory (lost when it stops)", None)
    assert not dev.embedded_moto
    with pytest.raises(RuntimeError, match="stores in SQLite"):
        _ = dev.dynamodb_endpoint
    assert dev.control_plane.store is dev.store
    assert dev.store.list_deployments() == []


def test_the_embedded_moto_store_has_one_shard() -> None:
    with DevServer(ingress_port=0, admin_port=0, moto=True, concurrency=2) as dev:
        assert dev.embedded_moto
        assert dev.dynamodb_endpoint.startswith("http://127.0.0.1:")
        assert isinstance(dev.store, DynamoDBStore)
        assert dev.store.shards == 1  # its table lives with the process: nothing to spread, nothing else reads it
        assert dev.store.list_deployments() == []


def test_the_embedded_moto_without_the_moto_extra_names_it(monkeypatch: pytest.MonkeyPatch) -> None:
    """A plain install has no moto (the `moto` extra): DevServer and `torpor dev --moto` say what to install."""
    from click.testing import CliRunner

    from adapters.cli import main
    from adapters.local import dev as dev_module

    monkeypatch.setitem(sys.modules, "adapters.local.moto_server", None)  # importing it raises ImportError
    with pytest.raises(DevServerError, match=r"pip install 'torpor\[moto\]'"):
        DevServer(ingress_port=0, admin_port=0, moto=True).start()
    monkeypatch.setattr(dev_module, "moto_installed", lambda: False)
    result = CliRunner().invoke(main, ["dev", "--moto", "--ingress-port", "0", "--admin-port", "0"])
    assert result.exit_code == 1
    assert "pip install 'torpor[moto]'" in result.output
    assert result.exception is None or isinstance(result.exception, SystemExit)


def test_two_store_options_are_refused() -> None:
    with pytest.raises(ValueError, match="give one store option, not data_dir and moto"):
        DevServer(data_dir="x", moto=True)


def test_admin_health_is_200(dev: DevServer, client: httpx.Client) -> None:
    response = client.get(f"{dev.admin_url}/health")
    assert response.status_code == 200


def test_unknown_ingress_path_is_404_json(dev: DevServer, client: httpx.Client) -> None:
    response = client.get(f"{dev.ingress_url}/no/such/path/here")
    assert response.status_code == 404
    assert response.headers["content-type"] == "application/json"
    body = response.json()
    assert body["code"] == 404
    assert "/no/such/path/here" in body["message"]


def test_call_to_unknown_service_is_404_naming_it(dev: DevServer, client: httpx.Client) -> None:
    response = client.post(f"{dev.ingress_url}/restate/call/Nope/x", json={"name": "ann"})
    assert response.status_code == 404
    body = response.json()
    assert body["code"] == 404
    assert "service 'Nope' not found" in body["message"]


def test_raw_path_reaches_the_router_percent_encoded(dev: DevServer, client: httpx.Client) -> None:
    # an encoded slash must stay one path segment: the router decodes it into the service name
    response = client.post(f"{dev.ingress_url}/restate/call/No%2Fpe/x", content=b"")
    assert response.status_code == 404
    assert "service 'No/pe' not found" in response.json()["message"]


def test_wrong_method_is_405(dev: DevServer, client: httpx.Client) -> None:
    response = client.delete(f"{dev.admin_url}/health")
    assert response.status_code == 405
    assert response.json()["code"] == 405


def test_invoker_reaches_a_server_and_lowercases_headers(dev: DevServer) -> None:
    with HttpInvoker() as invoker:
        reply = invoker.request(dev.ingress_url + "/", "GET", "/nope/at/all/here", {"X-Test": "1"}, b"", 5.0)
    assert reply.status == 404
    assert reply.headers["content-type"] == "application/json"
    assert all(name == name.lower() for name in reply.headers)
    assert b'"code":404' in reply.body


def test_invoker_maps_a_refused_connection_to_invoker_error() -> None:
    with socket.socket() as probe:  # a port that was free a moment ago, and nobody listens on
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    with HttpInvoker() as invoker, pytest.raises(InvokerError, match=f"connection refused by http://127.0.0.1:{port}"):
        invoker.request(f"http://127.0.0.1:{port}", "POST", "/invoke/Greeter/greet", {}, b"", 5.0)


def test_invoker_maps_a_silent_server_to_a_timeout() -> None:
    with socket.create_server(("127.0.0.1", 0)) as silent:  # accepts (backlog), never answers
        port = silent.getsockname()[1]
        with HttpInvoker() as invoker, pytest.raises(InvokerError, match=r"no answer from .* within 0\.3 s"):
            invoker.request(f"http://127.0.0.1:{port}", "POST", "/invoke/Greeter/greet", {}, b"x", 0.3)


def test_a_taken_port_names_the_flag_to_change(dev: DevServer) -> None:
    port = int(dev.admin_url.rsplit(":", 1)[1])
    second = DevServer(ingress_port=0, admin_port=port, in_memory=True)
    with pytest.raises(DevServerError, match="--admin-port"):
        second.start()
    second.stop()  # idempotent after a failed start


# --- the local admin API against other web pages ----------------------------------------------------


def test_a_cross_site_post_to_the_admin_api_is_refused_and_registers_nothing(dev: DevServer) -> None:
    # GIVEN a web page on another site that posts a "simple" (no preflight) text/plain request
    forged = {"content-type": "text/plain", "origin": "https://evil.example"}
    body = '{"uri": "http://evil.example/restate"}'
    # WHEN it reaches the local admin API
    reply = httpx.post(f"{dev.admin_url}/deployments", content=body, headers=forged)
    # THEN it is refused with a 403 naming why, and no deployment was registered
    assert reply.status_code == 403
    assert reply.json()["code"] == 403
    assert "https://evil.example" in reply.json()["message"]
    no_origin = {"content-type": "text/plain", "sec-fetch-site": "cross-site"}  # older browsers: only this
    assert httpx.post(f"{dev.admin_url}/deployments", content=body, headers=no_origin).status_code == 403
    assert dev.store.list_deployments() == []
    # AND reading stays open to it (no CORS headers: its page cannot read the answer)
    assert httpx.get(f"{dev.admin_url}/health", headers={"origin": "https://evil.example"}).status_code == 200


def test_the_admin_api_answers_only_to_its_own_address(dev: DevServer) -> None:
    # GIVEN a DNS-rebinding page whose name now points at 127.0.0.1
    reply = httpx.get(f"{dev.admin_url}/deployments", headers={"host": "evil.example"})
    # THEN the admin API refuses the foreign Host, and answers to its own names
    assert reply.status_code == 403
    assert "Host evil.example" in reply.json()["message"]
    port = dev.admin_url.rsplit(":", 1)[1]
    assert httpx.get(f"{dev.admin_url}/deployments", headers={"host": f"localhost:{port}"}).status_code == 200


def test_the_admin_api_takes_changes_from_its_own_web_ui_and_from_clients_that_are_not_pages(dev: DevServer) -> None:
    # a bad registration: the guard lets it through, the admin API judges it (not a 403)
    body = {"uri": "ftp://nowhere"}
    assert httpx.post(f"{dev.admin_url}/deployments", json=body, headers={"origin": dev.admin_url}).status_code == 400
    assert httpx.post(f"{dev.admin_url}/deployments", json=body).status_code == 400


def test_the_invoker_bounds_the_whole_answer_by_its_timeout() -> None:
    # GIVEN a deployment that answers its headers, then drips one byte every 0.3 s, forever
    stop = threading.Event()

    def drip(server: socket.socket) -> None:
        conn, _ = server.accept()
        with conn:
            conn.recv(65536)
            conn.sendall(b"HTTP/1.1 200 OK\r\ncontent-type: application/octet-stream\r\ncontent-length: 1000\r\n\r\n")
            while not stop.wait(0.3):
                try:
                    conn.sendall(b"x")
                except OSError:
                    return

    with socket.create_server(("127.0.0.1", 0)) as server:
        threading.Thread(target=drip, args=(server,), daemon=True).start()
        started = time.monotonic()
        # WHEN Torpor calls it with a 1 s timeout
        with HttpInvoker() as invoker, pytest.raises(InvokerError, match=r"within 1\.0 s"):
            invoker.request(f"http://127.0.0.1:{server.getsockname()[1]}", "POST", "/invoke/A/b", {}, b"x", 1.0)
        stop.set()
    # THEN it gives up after about that long, not when the drip ends
    assert time.monotonic() - started < 3.0


def test_on_every_address_the_web_ui_can_still_make_changes() -> None:
    # GIVEN torpor dev listening on every address (no Host check), its UI opened as localhost
    with DevServer(host="0.0.0.0", ingress_port=0, admin_port=0, in_memory=True, concurrency=2) as dev:
        port = dev.admin_url.rsplit(":", 1)[1]
        ui = f"http://localhost:{port}"
        body = {"uri": "ftp://nowhere"}
        # THEN a change from the UI's page reaches the admin API (a 400 for this bad registration, not a 403)
        reply = httpx.post(
            f"http://127.0.0.1:{port}/deployments", json=body, headers={"origin": ui, "host": f"localhost:{port}"}
        )
        assert reply.status_code == 400, reply.text
        # AND another site's page is still refused
        evil = httpx.post(f"http://127.0.0.1:{port}/deployments", json=body, headers={"origin": "https://evil.example"})
        assert evil.status_code == 403


# --- slow and stalled requests ------------------------------------------------------------------------


def _read_answer(sock: socket.socket, limit_s: float) -> tuple[bytes, bool]:
    """Everything the server sends on `sock` until it closes the connection, or `limit_s` passes:
    `(bytes, closed)`."""
    sock.settimeout(limit_s)
    received = b""
    try:
        while chunk := sock.recv(65536):
            received += chunk
    except TimeoutError:
        return received, False
    return received, True


@pytest.mark.parametrize("port_of", ["ingress_url", "admin_url"])
def test_a_body_shorter_than_its_content_length_is_answered_408_and_the_connection_closed(port_of: str) -> None:
    # GIVEN torpor dev with a 1 s read timeout
    settings = Settings(request_read_timeout_ms=1_000)
    with DevServer(ingress_port=0, admin_port=0, in_memory=True, settings=settings, concurrency=2) as dev:
        url = getattr(dev, port_of)
        host, port = url.removeprefix("http://").rsplit(":", 1)
        # WHEN a client announces 100 bytes of body, sends 10 and stalls
        with socket.create_connection((host, int(port))) as sock:
            path = "/deployments" if port_of == "admin_url" else "/Greeter/greet"
            head = f"POST {path} HTTP/1.1\r\nhost: {host}:{port}\r\ncontent-type: application/json\r\n"
            sock.sendall(head.encode() + b'content-length: 100\r\n\r\n{"uri": "h')
            answer, closed = _read_answer(sock, 20)
    # THEN it gets a 408 naming the setting, and the connection is closed (not left hanging)
    status_line, _, rest = answer.partition(b"\r\n")
    assert status_line.split(b" ")[:2] == [b"HTTP/1.1", b"408"], answer
    assert b"TORPOR_REQUEST_READ_TIMEOUT_MS" in rest
    assert closed


def test_a_body_dripping_slower_than_the_read_timeout_is_answered_408() -> None:
    # GIVEN torpor dev with a 1 s read timeout
    settings = Settings(request_read_timeout_ms=1_000)
    with DevServer(ingress_port=0, admin_port=0, in_memory=True, settings=settings, concurrency=2) as dev:
        host, port = dev.ingress_url.removeprefix("http://").rsplit(":", 1)
        stop = threading.Event()
        # WHEN a client sends its 1,000-byte body one byte every 0.2 s (each read well within 1 s)
        with socket.create_connection((host, int(port))) as sock:
            head = f"POST /Greeter/greet HTTP/1.1\r\nhost: {host}:{port}\r\ncontent-type: application/json\r\n"
            sock.sendall(head.encode() + b"content-length: 1000\r\n\r\n")

            def drip() -> None:
                while not stop.wait(0.2):
                    try:
                        sock.sendall(b" ")
                    except OSError:
                        return

            threading.Thread(target=drip, daemon=True).start()
            answer, closed = _read_answer(sock, 20)
            stop.set()
    # THEN the whole body's deadline ends it: a 408, the connection closed
    assert answer.split(b" ")[:2] == [b"HTTP/1.1", b"408"], answer
    assert closed


@pytest.mark.parametrize("port_of", ["ingress_url", "admin_url"])
def test_a_connection_that_sends_nothing_is_closed_after_the_keep_alive_timeout(port_of: str) -> None:
    # GIVEN torpor dev
    with DevServer(ingress_port=0, admin_port=0, in_memory=True, concurrency=2) as dev:
        host, port = getattr(dev, port_of).removeprefix("http://").rsplit(":", 1)
        # WHEN a client opens a connection and sends nothing
        with socket.create_connection((host, int(port))) as sock:
            started = time.monotonic()
            answer, closed = _read_answer(sock, 20)
            waited = time.monotonic() - started
    # THEN the server closes it after its keep-alive timeout (5 s), without an answer
    assert closed
    assert answer == b""
    assert http_server.KEEP_ALIVE_TIMEOUT_S - 0.5 <= waited < http_server.KEEP_ALIVE_TIMEOUT_S + 5


@pytest.mark.parametrize("port_of", ["ingress_url", "admin_url"])
def test_a_request_head_over_the_bound_is_refused_and_the_connection_closed(port_of: str) -> None:
    # GIVEN torpor dev
    with DevServer(ingress_port=0, admin_port=0, in_memory=True, concurrency=2) as dev:
        host, port = getattr(dev, port_of).removeprefix("http://").rsplit(":", 1)
        # WHEN a client sends a request whose headers add up to more than the bound
        with socket.create_connection((host, int(port))) as sock:
            padding = "".join(f"x-pad-{i}: {'a' * 1000}\r\n" for i in range(http_server.MAX_HEAD_BYTES // 1000 + 2))
            head = f"GET /health HTTP/1.1\r\nhost: {host}:{port}\r\n{padding}\r\n"
            with contextlib.suppress(OSError):  # the server may close before it has read it all
                sock.sendall(head.encode())
            answer, closed = _read_answer(sock, 20)
        # AND one just under it
        with httpx.Client(base_url=getattr(dev, port_of)) as client:
            fits = client.get("/health", headers={"x-pad": "a" * (http_server.MAX_HEAD_BYTES - 1000)})
    # THEN the first gets a 400 and its connection is closed; the second is served
    assert answer.split(b" ")[:2] == [b"HTTP/1.1", b"400"], answer[:200]
    assert closed
    assert fits.status_code != 400, fits.text


def test_torpor_dev_refuses_an_unknown_log_level_naming_the_fix() -> None:
    # WHEN torpor dev starts with TORPOR_LOG_LEVEL set to something that is not a level
    result = subprocess.run(
        [sys.executable, "-m", "adapters.cli", "dev", "--in-memory", "--ingress-port", "0", "--admin-port", "0"],
        env={**os.environ, "TORPOR_LOG_LEVEL": "loud"},
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    # THEN it exits at once with a usage error naming the variable and the levels, not a stack trace
    assert result.returncode == 2, result.stderr
    assert "TORPOR_LOG_LEVEL='loud' is not a log level; use debug, info, warning or error" in result.stderr
    assert "Traceback" not in result.stderr
