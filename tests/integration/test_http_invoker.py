"""`HttpInvoker` against scripted HTTP/1.1 servers on loopback: kept-alive connections, a server that
closes them, malformed and oversized answers, TLS; each way an exchange breaks is one `InvokerError`."""

from __future__ import annotations

import datetime
import http.client
import ipaddress
import socket
import ssl
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

from adapters.http.invoker import HttpInvoker
from control_plane.ports import AnswerTooLarge, InvokerError

OK = b"HTTP/1.1 200 OK\r\ncontent-type: application/vnd.restate.invocation.v5\r\ncontent-length: 2\r\n\r\nok"


class Scripted:
    """A loopback server: each accepted connection is handed to `serve(conn)` on its own thread;
    `connections` counts the connections accepted."""

    def __init__(self, serve: Callable[[socket.socket], None], wrap: ssl.SSLContext | None = None) -> None:
        self._listener = socket.create_server(("127.0.0.1", 0))
        self.port = self._listener.getsockname()[1]
        self._serve, self._wrap = serve, wrap
        self.connections = 0
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while True:
            try:
                conn, _ = self._listener.accept()
            except OSError:
                return
            self.connections += 1
            threading.Thread(target=self._handle, args=(conn,), daemon=True).start()

    def _handle(self, conn: socket.socket) -> None:
        try:
            if self._wrap is not None:
                conn = self._wrap.wrap_socket(conn, server_side=True)
            self._serve(conn)
        except OSError:
            pass
        finally:
            conn.close()

    def close(self) -> None:
        self._listener.close()


@contextmanager
def scripted(serve: Callable[[socket.socket], None], wrap: ssl.SSLContext | None = None) -> Iterator[Scripted]:
    server = Scripted(serve, wrap)
    try:
        yield server
    finally:
        server.close()


def _read_request(conn: socket.socket) -> bytes:
    """One request's head and its content-length body; b"" at the connection's end."""
    data = b""
    while b"\r\n\r\n" not in data:
        chunk = conn.recv(65536)
        if not chunk:
            return b""
        data += chunk
    head, _, body = data.partition(b"\r\n\r\n")
    length = next(
        (int(line.split(b":")[1]) for line in head.split(b"\r\n") if line.lower().startswith(b"content-length:")), 0
    )
    while len(body) < length:
        body += conn.recv(65536)
    return head


def answer_each(answer: bytes) -> Callable[[socket.socket], None]:
    def serve(conn: socket.socket) -> None:
        while _read_request(conn):
            conn.sendall(answer)

    return serve


def test_sequential_requests_share_one_kept_alive_connection() -> None:
    with scripted(answer_each(OK)) as server, HttpInvoker() as invoker:
        replies = [
            invoker.request(f"http://127.0.0.1:{server.port}", "POST", "/invoke/A/b", {}, b"x", 5) for _ in range(5)
        ]
    assert [r.body for r in replies] == [b"ok"] * 5
    assert server.connections == 1


def test_a_connection_the_server_closed_while_idle_is_replaced_without_an_error() -> None:
    def one_answer_then_close(conn: socket.socket) -> None:
        _read_request(conn)
        conn.sendall(OK)  # kept alive as far as HTTP says, then closed before the next request

    with scripted(one_answer_then_close) as server, HttpInvoker() as invoker:
        first = invoker.request(f"http://127.0.0.1:{server.port}", "POST", "/invoke/A/b", {}, b"x", 5)
        threading.Event().wait(0.2)  # the close has reached us
        second = invoker.request(f"http://127.0.0.1:{server.port}", "POST", "/invoke/A/b", {}, b"x", 5)
    assert first.body == second.body == b"ok"
    assert server.connections == 2


def test_a_chunked_answer_with_repeated_headers_is_read_whole() -> None:
    answer = (
        b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\nX-Twice: a\r\nx-twice: b\r\n\r\n"
        b"3\r\nabc\r\n2\r\nde\r\n0\r\n\r\n"
    )
    with scripted(answer_each(answer)) as server, HttpInvoker() as invoker:
        reply = invoker.request(f"http://127.0.0.1:{server.port}/prefix", "POST", "/invoke/A/b", {}, b"x", 5)
    assert reply.body == b"abcde"
    assert reply.headers["x-twice"] == "a, b"


def test_the_endpoint_path_prefix_is_kept() -> None:
    seen: list[bytes] = []

    def record(conn: socket.socket) -> None:
        while head := _read_request(conn):
            seen.append(head.split(b"\r\n")[0])
            conn.sendall(OK)

    with scripted(record) as server, HttpInvoker() as invoker:
        invoker.request(f"http://127.0.0.1:{server.port}/restate/", "POST", "/invoke/A/b", {}, b"x", 5)
    assert seen == [b"POST /restate/invoke/A/b HTTP/1.1"]


@pytest.mark.parametrize(
    ("answer", "error"),
    [
        (b"garbage\r\n\r\n", "broke the HTTP exchange"),
        (b"", "connection to .* broke: Remote end closed connection without response"),
        (b"HTTP/1.1 200 OK\r\ncontent-length: 10\r\n\r\nabc", "broke the HTTP exchange"),
    ],
    ids=["not HTTP", "closed without an answer", "closed mid-body"],
)
def test_a_broken_answer_is_an_invoker_error_naming_the_endpoint(answer: bytes, error: str) -> None:
    def once(conn: socket.socket) -> None:
        _read_request(conn)
        conn.sendall(answer)

    with scripted(once) as server, HttpInvoker() as invoker, pytest.raises(InvokerError, match=error):
        invoker.request(f"http://127.0.0.1:{server.port}", "POST", "/invoke/A/b", {}, b"x", 5)


def test_an_answer_over_the_limit_is_refused_by_its_announced_and_by_its_read_length() -> None:
    announced = b"HTTP/1.1 200 OK\r\ncontent-length: 5000\r\n\r\n" + b"a" * 5000
    streamed = b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n1388\r\n" + b"a" * 5000 + b"\r\n0\r\n\r\n"
    for answer in (announced, streamed):
        with (
            scripted(answer_each(answer)) as server,
            HttpInvoker(max_answer_bytes=1000) as invoker,
            pytest.raises(AnswerTooLarge),
        ):
            invoker.request(f"http://127.0.0.1:{server.port}", "POST", "/invoke/A/b", {}, b"x", 5)


def test_an_answer_that_drips_past_the_timeout_is_an_invoker_error() -> None:
    def drip(conn: socket.socket) -> None:
        _read_request(conn)
        conn.sendall(b"HTTP/1.1 200 OK\r\ncontent-length: 100\r\n\r\n")
        for _ in range(100):
            conn.sendall(b"a")
            threading.Event().wait(0.05)

    with scripted(drip) as server, HttpInvoker() as invoker, pytest.raises(InvokerError, match=r"within 0\.5 s"):
        invoker.request(f"http://127.0.0.1:{server.port}", "POST", "/invoke/A/b", {}, b"x", 0.5)


def _self_signed(tmp: Path) -> tuple[Path, Path]:
    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "127.0.0.1")])
    now = datetime.datetime.now(datetime.UTC)
    cert = (
        x509.CertificateBuilder().subject_name(name).issuer_name(name).public_key(key.public_key())
        .serial_number(x509.random_serial_number()).not_valid_before(now - datetime.timedelta(days=1))
        .not_valid_after(now + datetime.timedelta(days=1))
        .add_extension(x509.SubjectAlternativeName([x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]), False)
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), True)
        .sign(key, hashes.SHA256())
    )  # fmt: skip
    cert_path, key_path = tmp / "cert.pem", tmp / "key.pem"
    cert_path.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    key_path.write_bytes(
        key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption())
    )
    return cert_path, key_path


def test_https_trusts_ssl_cert_file_and_refuses_an_unknown_certificate(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    cert, key = _self_signed(tmp_path)
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(cert, key)
    with scripted(answer_each(OK), wrap=context) as server:
        url = f"https://127.0.0.1:{server.port}"
        # an invoker that trusts certifi's roots only refuses it
        with HttpInvoker(trust_env=False) as invoker, pytest.raises(InvokerError, match=f"TLS with {url} failed"):
            invoker.request(url, "POST", "/invoke/A/b", {}, b"x", 5)
        # one told to trust the certificate (SSL_CERT_FILE) speaks to it, over one connection
        monkeypatch.setenv("SSL_CERT_FILE", str(cert))
        with HttpInvoker() as invoker:
            replies = [invoker.request(url, "POST", "/invoke/A/b", {}, b"x", 5) for _ in range(3)]
    assert [r.body for r in replies] == [b"ok"] * 3
    assert server.connections == 2  # the refused handshake, then one kept alive


def test_a_request_head_and_body_leave_in_one_send(monkeypatch: pytest.MonkeyPatch) -> None:
    # GIVEN the connections' writes recorded, and a server that reads the whole request
    sent: list[bytes] = []
    send = http.client.HTTPConnection.send

    def recorded(self: http.client.HTTPConnection, data: bytes) -> None:
        sent.append(bytes(data))
        send(self, data)

    monkeypatch.setattr(http.client.HTTPConnection, "send", recorded)
    # WHEN a request with a body is sent
    with scripted(answer_each(OK)) as server, HttpInvoker() as invoker:
        reply = invoker.request(f"http://127.0.0.1:{server.port}", "POST", "/invoke/A/b", {"x-a": "1"}, b"payload", 5)
    # THEN head and body left in one write (http.client alone writes them apart: two system calls)
    assert reply.status == 200
    assert len(sent) == 1
    assert sent[0].startswith(b"POST /invoke/A/b HTTP/1.1\r\n")
    assert sent[0].endswith(b"\r\n\r\npayload")


def test_a_deployment_that_never_answers_is_an_invoker_error_at_the_timeout() -> None:
    def mute(conn: socket.socket) -> None:
        _read_request(conn)
        threading.Event().wait(3)

    with scripted(mute) as server, HttpInvoker() as invoker:
        started = time.monotonic()
        with pytest.raises(InvokerError, match=r"no answer from .* within 0\.4 s"):
            invoker.request(f"http://127.0.0.1:{server.port}", "POST", "/invoke/A/b", {}, b"x", 0.4)
        assert 0.35 < time.monotonic() - started < 1.5


def test_an_answer_without_a_length_that_stalls_is_an_invoker_error_not_a_short_body() -> None:
    # GIVEN a deployment that answers half a close-delimited body (no length), then stalls
    def stall(conn: socket.socket) -> None:
        _read_request(conn)
        conn.sendall(b"HTTP/1.1 200 OK\r\nconnection: close\r\n\r\nhalf")
        threading.Event().wait(3)

    # THEN the timeout is an error (a timed-out blocking read once read as the body's end: b"half", 200)
    with (
        scripted(stall) as server,
        HttpInvoker() as invoker,
        pytest.raises(InvokerError, match=r"no answer from .* within 0\.4 s"),
    ):
        invoker.request(f"http://127.0.0.1:{server.port}", "POST", "/invoke/A/b", {}, b"x", 0.4)


def test_a_head_that_trickles_in_is_cut_at_the_timeout() -> None:
    # GIVEN a deployment that sends its answer's head a byte every 0.1 s (each read well within the timeout)
    def trickle(conn: socket.socket) -> None:
        _read_request(conn)
        for byte in OK:
            conn.sendall(bytes([byte]))
            time.sleep(0.1)

    with scripted(trickle) as server, HttpInvoker() as invoker:
        started = time.monotonic()
        with pytest.raises(InvokerError, match=r"no answer from .* within 0\.4 s"):
            invoker.request(f"http://127.0.0.1:{server.port}", "POST", "/invoke/A/b", {}, b"x", 0.4)
        # THEN at the timeout, not when the head is done (about 9 s)
        assert time.monotonic() - started < 1.5


def test_an_answer_that_ends_with_the_connection_is_read_whole() -> None:
    # GIVEN a deployment that answers without a length and closes the connection after the body
    def close_delimited(conn: socket.socket) -> None:
        _read_request(conn)
        conn.sendall(b"HTTP/1.1 200 OK\r\nconnection: close\r\n\r\n" + b"b" * 100_000)
        conn.close()

    with scripted(close_delimited) as server, HttpInvoker() as invoker:
        replies = [
            invoker.request(f"http://127.0.0.1:{server.port}", "POST", "/invoke/A/b", {}, b"x", 5) for _ in range(2)
        ]
    # THEN the whole body, each time on a new connection
    assert [(r.status, r.body) for r in replies] == [(200, b"b" * 100_000)] * 2
    assert server.connections == 2


def test_a_head_that_trickles_in_over_tls_is_cut_at_the_timeout(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # GIVEN an HTTPS deployment that sends its answer's head a byte every 0.1 s
    cert, key = _self_signed(tmp_path)
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(cert, key)
    monkeypatch.setenv("SSL_CERT_FILE", str(cert))

    def trickle(conn: socket.socket) -> None:
        _read_request(conn)
        for byte in OK:
            conn.sendall(bytes([byte]))
            time.sleep(0.1)

    with scripted(trickle, wrap=context) as server, HttpInvoker() as invoker:
        started = time.monotonic()
        with pytest.raises(InvokerError, match=r"no answer from .* within 0\.8 s"):
            invoker.request(f"https://127.0.0.1:{server.port}", "POST", "/invoke/A/b", {}, b"x", 0.8)
        # THEN at the timeout (the handshake included), not when the head is done (about 9 s)
        assert time.monotonic() - started < 2
