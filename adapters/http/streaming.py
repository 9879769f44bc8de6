"""Full-duplex HTTP/2 requests to deployments, for the service protocol's bidirectional mode.

One `H2Stream` is one request on its own connection: h2c with prior knowledge for `http://`
endpoints, TLS with ALPN `h2` for `https://` ones (an endpoint that does not pick `h2` is refused).
The request body and the response body flow at the same time: the caller sends frames while it
reads the deployment's. The HTTP/2 framing is the `h2` library's (python-hyper); this module only
drives a blocking socket with it. Every way the exchange can break (refused, reset, timed out, a
GOAWAY) becomes one `InvokerError`.
"""

from __future__ import annotations

import socket
import ssl
import time
from collections.abc import Mapping
from urllib.parse import urlsplit

import certifi
import h2.config
import h2.connection
import h2.events
import h2.exceptions
import h2.settings

from control_plane.ports import InvokerError, StreamIdle

_CONNECT_TIMEOUT_S = 10.0
_READ_CHUNK_BYTES = 64 * 1024
_WINDOW_BYTES = 16 * 1024 * 1024  # receive window: the deployment never waits on our reads


class H2Stream:
    """One HTTP/2 request whose body is sent while its answer is read (`control_plane.ports.DuplexStream`).

    Not thread-safe: one caller drives it. `send` and `end` write the request body; `head` waits
    for the response headers; `receive` returns answer bytes as they arrive. Every wait is bounded
    by the `timeout_s` it is given. Raises `InvokerError` for a connection that cannot be opened or
    breaks, a reset stream, or a wait that timed out.
    """

    def __init__(self, endpoint: str, method: str, path: str, headers: Mapping[str, str], timeout_s: float) -> None:
        url = urlsplit(endpoint)
        if url.scheme not in ("http", "https") or not url.hostname:
            raise InvokerError(f"{endpoint} is not an http(s):// URL")
        port = url.port or (443 if url.scheme == "https" else 80)
        try:
            sock = socket.create_connection((url.hostname, port), timeout=min(timeout_s, _CONNECT_TIMEOUT_S))
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            if url.scheme == "https":
                context = ssl.create_default_context(cafile=certifi.where())
                context.set_alpn_protocols(["h2"])
                sock = context.wrap_socket(sock, server_hostname=url.hostname)
                if sock.selected_alpn_protocol() != "h2":
                    sock.close()
                    raise InvokerError(f"{endpoint} does not offer HTTP/2 (TLS ALPN h2)")
        except OSError as exc:
            raise InvokerError(f"cannot connect to {endpoint}: {exc}") from exc
        self._sock = sock
        self._conn = h2.connection.H2Connection(h2.config.H2Configuration(client_side=True, header_encoding="utf-8"))
        self._conn.initiate_connection()
        self._conn.increment_flow_control_window(_WINDOW_BYTES)
        self._conn.update_settings({h2.settings.SettingCodes.INITIAL_WINDOW_SIZE: _WINDOW_BYTES})
        self._id = self._conn.get_next_available_stream_id()
        authority = url.netloc.rsplit("@", 1)[-1]
        request = [(":method", method), (":scheme", url.scheme), (":authority", authority)]
        request.append((":path", url.path.rstrip("/") + path))
        request += [(k.lower(), v) for k, v in headers.items()]
        self._conn.send_headers(self._id, request)
        self._status: int | None = None
        self._headers: dict[str, str] = {}
        self._inbox = bytearray()
        self._ended = False
        self._endpoint = endpoint
        self._flush()

    def send(self, data: bytes, timeout_s: float) -> None:
        """Write `data` to the request body, waiting (at most `timeout_s`) for flow-control room."""
        view = memoryview(data)
        deadline = time.monotonic() + timeout_s
        while view:
            room = min(self._conn.local_flow_control_window(self._id), self._conn.max_outbound_frame_size)
            if room <= 0:
                if self._ended:  # the deployment answered in full: what it no longer reads is moot
                    return
                self._pump(deadline - time.monotonic())
                continue
            try:
                self._conn.send_data(self._id, view[:room].tobytes())
            except h2.exceptions.StreamClosedError:
                return  # the deployment reset or ended its side; its answer says why
            view = view[room:]
            self._flush()

    def end(self) -> None:
        """End the request body (the deployment sees its input closed)."""
        try:
            self._conn.end_stream(self._id)
        except h2.exceptions.StreamClosedError:
            return
        self._flush()

    def head(self, timeout_s: float) -> tuple[int, dict[str, str]]:
        """The response status and headers (lower-case names), waiting at most `timeout_s`."""
        deadline = time.monotonic() + timeout_s
        while self._status is None:
            if self._ended:
                raise InvokerError(f"{self._endpoint} ended the stream without a response")
            self._pump(deadline - time.monotonic())
        return self._status, self._headers

    def receive(self, timeout_s: float) -> bytes:
        """Answer bytes as they arrive (at least one byte), or b"" once the answer has ended.

        Waits at most `timeout_s` for the next bytes; raises `StreamIdle` if none came.
        """
        deadline = time.monotonic() + timeout_s
        while not self._inbox and not self._ended:
            self._pump(deadline - time.monotonic())
        data = bytes(self._inbox)
        self._inbox.clear()
        return data

    def close(self) -> None:
        """Close the connection (resetting the stream if it is still open); never raises."""
        try:
            if not self._ended:
                self._conn.reset_stream(self._id)
            self._conn.close_connection()
            self._sock.sendall(self._conn.data_to_send())
        except (OSError, h2.exceptions.H2Error):
            pass
        finally:
            self._sock.close()

    def _pump(self, timeout_s: float) -> None:
        """Read once from the socket (waiting at most `timeout_s`) and handle what came."""
        if timeout_s <= 0:
            raise StreamIdle(f"{self._endpoint} sent nothing in time")
        self._sock.settimeout(timeout_s)
        try:
            raw = self._sock.recv(_READ_CHUNK_BYTES)
        except TimeoutError as exc:
            raise StreamIdle(f"{self._endpoint} sent nothing for {timeout_s:.1f} s") from exc
        except OSError as exc:
            raise InvokerError(f"the stream to {self._endpoint} broke: {exc}") from exc
        if not raw:
            raise InvokerError(f"{self._endpoint} closed the connection mid-stream")
        try:
            events = self._conn.receive_data(raw)
        except h2.exceptions.H2Error as exc:
            raise InvokerError(f"{self._endpoint} broke the HTTP/2 protocol: {exc}") from exc
        for event in events:
            if isinstance(event, h2.events.ResponseReceived) and event.stream_id == self._id:
                fields = {str(k): str(v) for k, v in event.headers}
                self._status = int(fields.pop(":status", "0"))
                self._headers = fields
            elif isinstance(event, h2.events.DataReceived) and event.stream_id == self._id:
                self._inbox += event.data
                self._conn.acknowledge_received_data(event.flow_controlled_length, self._id)
            elif isinstance(event, h2.events.StreamEnded) and event.stream_id == self._id:
                self._ended = True
            elif isinstance(event, h2.events.StreamReset) and event.stream_id == self._id:
                raise InvokerError(f"{self._endpoint} reset the stream (HTTP/2 error code {event.error_code})")
            elif isinstance(event, h2.events.ConnectionTerminated) and not self._ended:
                raise InvokerError(f"{self._endpoint} closed the connection (GOAWAY {event.error_code})")
        self._flush()

    def _flush(self) -> None:
        data = self._conn.data_to_send()
        if data:
            try:
                self._sock.sendall(data)
            except OSError as exc:
                raise InvokerError(f"the stream to {self._endpoint} broke: {exc}") from exc


class H2Invoker:
    """Opens `H2Stream`s (`control_plane.ports.StreamingInvoker`) for plain `http(s)://` endpoints."""

    def open_stream(
        self, endpoint: str, method: str, path: str, headers: Mapping[str, str], timeout_s: float
    ) -> H2Stream:
        """Open `method path` on `endpoint` over HTTP/2 and send its headers; raises `InvokerError`."""
        return H2Stream(endpoint, method, path, headers, timeout_s)
