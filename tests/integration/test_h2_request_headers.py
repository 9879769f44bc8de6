"""The request headers the HTTP/2 invoker puts on the wire, as an HTTP/2 server decodes them.

`H2Invoker` turns off h2's own checks and rewriting of outbound headers and does them once per request
(issue 24): these tests read the header block a real server receives over a socket.
"""

from __future__ import annotations

import socket
import threading
from collections.abc import Iterator
from contextlib import contextmanager

import h2.config
import h2.connection
import h2.events
from hpack import NeverIndexedHeaderTuple

from adapters.http.streaming import H2Invoker

TRACEPARENT = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"


@contextmanager
def h2_server() -> Iterator[tuple[str, dict[str, object]]]:
    """An h2c server on a free port that answers one request 200 and records its header fields
    (`seen["headers"]`: as decoded, `NeverIndexedHeaderTuple` for never-indexed ones) and every
    byte it read (`seen["raw"]`)."""
    listener = socket.create_server(("127.0.0.1", 0))
    seen: dict[str, object] = {"raw": b""}

    def serve() -> None:
        sock, _ = listener.accept()
        conn = h2.connection.H2Connection(h2.config.H2Configuration(client_side=False))
        conn.initiate_connection()
        sock.sendall(conn.data_to_send())
        with sock:
            while data := sock.recv(65536):
                seen["raw"] = bytes(seen["raw"]) + data  # type: ignore[arg-type]
                for event in conn.receive_data(data):
                    if isinstance(event, h2.events.RequestReceived):
                        seen["headers"] = list(event.headers or [])
                        conn.send_headers(event.stream_id, [(":status", "200")], end_stream=True)
                sock.sendall(conn.data_to_send())
                if "headers" in seen:
                    return

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{listener.getsockname()[1]}", seen
    finally:
        thread.join(5)
        listener.close()


def _send(url: str, headers: dict[str, str]) -> None:
    invoker = H2Invoker(trust_env=False)
    stream = invoker.open_stream(url, "POST", "/invoke/Greeter/greet", headers, 5)
    try:
        stream.end()
        assert stream.head(5)[0] == 200
    finally:
        stream.close()
        invoker.close()


def test_request_headers_are_normalized_and_credentials_never_indexed() -> None:
    with h2_server() as (url, seen):
        # WHEN a request goes with mixed-case names, padded values, a credential and a connection header
        _send(url, {"Authorization": " Bearer t0ken ", "X-Custom": "a b\t", "Connection": "close", "Cookie": "k=v"})
    headers = seen["headers"]
    assert isinstance(headers, list)
    fields = {bytes(k).decode(): bytes(v).decode() for k, v in headers}
    # THEN the server reads lower-case names and trimmed values, no connection-specific field
    assert fields["authorization"] == "Bearer t0ken" and fields["x-custom"] == "a b" and "connection" not in fields
    assert fields[":method"] == "POST" and fields[":path"] == "/invoke/Greeter/greet"
    # AND the credential and the short cookie are never indexed (RFC 7541 §7.1.3), the rest may be
    never = {bytes(h[0]) for h in headers if isinstance(h, NeverIndexedHeaderTuple)}
    assert never == {b"authorization", b"cookie"}


def test_header_values_go_uncoded() -> None:
    with h2_server() as (url, seen):
        # WHEN a request carries a value new to the connection
        _send(url, {"traceparent": TRACEPARENT})
    # THEN its literal is on the wire as is (no Huffman coding, which costs CPU in Python)
    assert TRACEPARENT.encode() in bytes(seen["raw"])  # type: ignore[arg-type]
    headers = seen["headers"]
    assert isinstance(headers, list)
    assert ("traceparent", TRACEPARENT) in {(bytes(k).decode(), bytes(v).decode()) for k, v in headers}
