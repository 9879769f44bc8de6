"""Full-duplex HTTP/2 requests to deployments, for the service protocol's bidirectional mode.

`H2Invoker` keeps HTTP/2 connections per endpoint (scheme, host, port) and carries each request as
one stream on them (RFC 9113 §5): concurrent attempts to one deployment share a connection, up to
the peer's SETTINGS_MAX_CONCURRENT_STREAMS on it (at most 100); more open another connection. A
connection stays open between attempts and is closed after `idle_s` without a stream. h2c with
prior knowledge for `http://` endpoints, TLS with ALPN `h2` for `https://` ones (an endpoint that
does not pick `h2` is refused), the certificate verified against `SSL_CERT_FILE` when set, else
certifi's roots. `HTTPS_PROXY` (for `https://`) and `HTTP_PROXY` (for `http://`), any case, are
honoured with a CONNECT tunnel through an `http://` proxy unless `NO_PROXY` names the host, like the
HTTP/1.1 invoker; a proxy that refuses the tunnel, or one named by an `https://` URL, is an
`InvokerError` naming the setting (registration then discovers over HTTP/1.1, request/response).

Each connection has one reader thread that feeds what arrives to the `h2` state machine
(python-hyper) and hands each stream its events; callers on any thread write through the same
state machine under the connection's lock. TLS runs on memory BIOs under that lock too, so the
socket is read by the reader alone and written by one caller at a time. A request body and its
answer flow at the same time: the caller sends frames while it reads the deployment's.

A connection that breaks (closed, reset, a protocol error) fails the streams open on it, and only
those; the next request opens a new connection. After a GOAWAY no new stream goes on the
connection; the streams it still carried fail unless their answer had already ended (`h2` reads
nothing after a GOAWAY), so a connection is retired after `max_requests` streams (new ones go on a
new connection, it closes once its last stream ends), before servers that count requests per
connection send theirs (hypercorn: after 1000). Every such failure, a reset stream or a wait that timed out is one
`InvokerError` (`StreamIdle` for a wait), for the engine to retry.
"""

from __future__ import annotations

import base64
import contextlib
import functools
import os
import socket
import ssl
import threading
import time
import urllib.request
from collections.abc import Iterable, Mapping
from urllib.parse import SplitResult, unquote, urlsplit

import certifi
import h2.config
import h2.connection
import h2.errors
import h2.events
import h2.exceptions
import h2.settings
from hpack import Encoder, HeaderTuple, NeverIndexedHeaderTuple

from control_plane.ports import InvokerError, StreamIdle

_CONNECT_TIMEOUT_S = 10.0
_IO_TIMEOUT_S = 30.0  # a socket write blocked this long breaks the connection; the reader wakes this often
_READ_CHUNK_BYTES = 64 * 1024
_WINDOW_BYTES = 16 * 1024 * 1024  # receive window per stream (bytes): what one answer may buffer unread
_CONNECTION_WINDOW_BYTES = 2**31 - 1  # the largest (RFC 9113 §6.9.1): more than _MAX_STREAMS full stream windows,
# so a stream whose reader is slow never stalls the others on the connection
_MAX_STREAMS = 100  # streams per connection at most, whatever the peer allows (RFC 9113 §6.5.2 suggests >= 100)
_MAX_PROXY_HEAD_BYTES = 16 * 1024
_Field = tuple[str, str] | HeaderTuple  # a request header field; a `NeverIndexedHeaderTuple` for credentials
_NOT_ON_H2 = frozenset({"connection", "keep-alive", "proxy-connection", "transfer-encoding", "upgrade", "host", "te"})
"""Request headers HTTP/2 forbids (connection-specific, RFC 9113 §8.2.2) or that `:authority` replaces (§8.3.1):
not sent (registration refuses them in `additional_headers` already: `control_plane.endpoints.RESERVED_HEADERS`)."""
_CREDENTIALS = frozenset({"authorization", "proxy-authorization"})
"""Request headers sent never-indexed (HPACK, RFC 7541 §7.1.3), out of the compression context, as h2 would."""


def _lean_config() -> h2.config.H2Configuration:
    """h2's settings for a connection: what it would check and rewrite in each request's headers (lower-case
    names, trimmed values, no connection-specific fields, credentials never indexed) is done once per request by
    `_request_fields` instead, on headers built here (issue 24: a sixth of h2's work per request). The
    deployment's answers are still validated (`validate_inbound_headers`)."""
    return h2.config.H2Configuration(
        client_side=True, header_encoding="utf-8", validate_outbound_headers=False, normalize_outbound_headers=False
    )


_HeaderBlock = (
    Iterable[HeaderTuple | tuple[bytes | str, bytes | str] | tuple[bytes | str, bytes | str, bool | None]]
    | dict[bytes | str, bytes | str]
)  # what `hpack.Encoder.encode` takes


class _PlainEncoder(Encoder):
    """HPACK (RFC 7541) without Huffman-coded literals (§5.2 lets each literal be either): hpack codes
    Huffman in Python, bit by bit, a quarter of the CPU of sending a request's headers; each request
    carries two new values (`x-restate-invocation-id`, `traceparent`), a few dozen bytes more
    uncoded. Every other field is indexed after its first request, as before."""

    def encode(self, headers: _HeaderBlock, huffman: bool = True) -> bytes:
        """`headers` as a header block, literals uncoded whatever `huffman` says."""
        return super().encode(headers, huffman=False)


class H2Stream:
    """One HTTP/2 request whose body is sent while its answer is read (`control_plane.ports.DuplexStream`).

    One caller drives it (its methods are safe against the connection's other streams, not against
    each other). `send` and `end` write the request body; `head` waits for the response headers;
    `receive` returns answer bytes as they arrive; `close` releases the stream (reset if still open)
    and leaves the connection to other requests. Every wait is bounded by the `timeout_s` it is
    given. Raises `InvokerError` when the connection breaks or the stream is reset, `StreamIdle`
    when a wait timed out.
    """

    def __init__(self, connection: _Connection, request: list[_Field]) -> None:
        self._conn = connection
        self._request = request  # sent with the first `send` or `end` (see `_start_locked`)
        self._id = 0
        self._endpoint = connection.endpoint
        # set by the connection's reader thread, under its lock:
        self.status: int | None = None
        self.headers: dict[str, str] = {}
        self.inbox = bytearray()
        self.unacked = 0  # flow-controlled bytes received and not yet handed back to the peer
        self.remote_ended = False
        self.error: str | None = None
        self._local_ended = False  # `end` was called
        self._end_sent = False  # END_STREAM went out (not when the answer had ended first)
        self._released = False
        self.ready = threading.Condition(connection.lock)  # notified when the reader changed this stream

    def send(self, data: bytes, timeout_s: float) -> None:
        """Write `data` to the request body, waiting (at most `timeout_s`) for flow-control room."""
        view = memoryview(data)
        deadline = time.monotonic() + timeout_s
        c = self._conn
        with c.cond:
            self._start_locked(end_stream=False)
            while view:
                if self.remote_ended:  # the deployment answered in full: what it no longer reads is moot
                    break
                if self.error is not None:
                    raise InvokerError(self.error)
                try:
                    room = min(c.h2.local_flow_control_window(self._id), c.h2.max_outbound_frame_size)
                    if room > 0:
                        c.h2.send_data(self._id, view[:room].tobytes())
                except h2.exceptions.StreamClosedError:
                    break  # the deployment reset or ended its side; its answer says why
                if room <= 0:
                    c.flush_locked()
                    c.blocked.add(self)  # woken by a window update for the connection too
                    try:
                        self._wait(deadline, timeout_s)
                    finally:
                        c.blocked.discard(self)
                    continue
                view = view[room:]
            c.flush_locked()

    def end(self) -> None:
        """End the request body (the deployment sees its input closed). A request with no body
        goes as one HEADERS frame with END_STREAM, written now. On a started stream the END_STREAM
        frame leaves with the stream's next write: `head`, `receive` and `close` write what is queued
        before anything else (so a `close` right after it, as when the answer ended, makes one write
        of END_STREAM and RST_STREAM). Nothing is sent once the answer has ended (a server may
        forget a stream it answered in full; hypercorn then drops the whole connection on a DATA
        frame for it): `close` resets such a stream instead."""
        c = self._conn
        with c.cond:
            if self._local_ended or self.error is not None:
                return
            self._local_ended = True
            if not self._id:
                self._start_locked(end_stream=True)
                self._end_sent = True
                c.flush_locked()
            elif not self.remote_ended:
                try:
                    c.h2.end_stream(self._id)
                except h2.exceptions.StreamClosedError:
                    return
                self._end_sent = True

    def head(self, timeout_s: float) -> tuple[int, dict[str, str]]:
        """The response status and headers (lower-case names), waiting at most `timeout_s`."""
        deadline = time.monotonic() + timeout_s
        with self._conn.cond:
            self._start_locked(end_stream=False)
            self._conn.flush_locked()
            while self.status is None:
                if self.remote_ended:
                    raise InvokerError(f"{self._endpoint} ended the stream without a response")
                self._wait(deadline, timeout_s)
            return self.status, self.headers

    def receive(self, timeout_s: float) -> bytes:
        """Answer bytes as they arrive (at least one byte), or b"" once the answer has ended.

        Waits at most `timeout_s` for the next bytes; raises `StreamIdle` if none came. The bytes
        taken are handed back to the deployment's flow-control window only now, so an answer never
        buffers more than the window (16 MiB) here.
        """
        deadline = time.monotonic() + timeout_s
        c = self._conn
        with c.cond:
            self._start_locked(end_stream=False)
            c.flush_locked()
            while not self.inbox and not self.remote_ended:
                self._wait(deadline, timeout_s)
            data = bytes(self.inbox)
            self.inbox.clear()
            if self.unacked and self.error is None:
                c.h2.acknowledge_received_data(self.unacked, self._id)
                self.unacked = 0
                c.flush_locked()
            return data

    def close(self) -> None:
        """Release the stream: reset it if either side is still open; the connection stays for
        other requests (closed once idle or after a GOAWAY). Never raises."""
        c = self._conn
        with c.cond:
            if self._released:
                return
            self._released = True
            c.forget_locked(self._id)
            if c.broken is not None or not self._id:
                return
            try:
                if not (self._end_sent and self.remote_ended) and self.error is None:  # else closed
                    c.h2.reset_stream(self._id, h2.errors.ErrorCodes.CANCEL)
                if self.unacked:  # the connection's window, for bytes never read
                    c.h2.acknowledge_received_data(self.unacked, self._id)
                    self.unacked = 0
                c.flush_locked()
            except (InvokerError, h2.exceptions.H2Error):
                pass
            drained = c.draining and not c.handed_out and c.broken is None
        if drained:  # the connection takes no new streams and this was its last (one lock round a call)
            c.close("it was drained")

    def _start_locked(self, end_stream: bool) -> None:
        """Send the request's HEADERS (lock held) unless sent already: the stream id is taken only
        now, so ids go out in order (RFC 9113 §5.1.1), and the first body bytes leave with the
        headers in one write. Raises `InvokerError` if the connection broke or takes no stream."""
        if self._id:
            return
        c = self._conn
        if c.broken is not None:
            raise InvokerError(c.broken)
        if self._released:
            raise InvokerError(f"the stream to {self._endpoint} was closed")
        try:
            stream_id = c.h2.get_next_available_stream_id()
            c.h2.send_headers(stream_id, self._request, end_stream=end_stream)
        except (h2.exceptions.TooManyStreamsError, h2.exceptions.NoAvailableStreamIDError) as exc:
            c.draining = True  # the peer lowered its limit, or ids ran out: new requests go elsewhere
            raise InvokerError(f"{self._endpoint} takes no more streams on this connection") from exc
        except h2.exceptions.ProtocolError as exc:  # a GOAWAY came meanwhile
            raise InvokerError(f"{self._endpoint} closed the connection before this request") from exc
        self._id = stream_id
        c.streams[stream_id] = self

    def _wait(self, deadline: float, timeout_s: float) -> None:
        """Wait for the reader thread (lock held); `InvokerError` if the stream failed, `StreamIdle`
        past `deadline`."""
        if self.error is not None:
            raise InvokerError(self.error)
        left = deadline - time.monotonic()
        if left <= 0:
            raise StreamIdle(f"{self._endpoint} sent nothing for {timeout_s:.1f} s")
        self.ready.wait(left)
        if self.error is not None and not self.inbox and not self.remote_ended:
            raise InvokerError(self.error)


class _Connection:
    """One HTTP/2 connection to an endpoint and the reader thread that serves its streams.

    Opening it connects (through a CONNECT tunnel if `proxy`), does the TLS handshake for `https`,
    sends the connection preface and waits for the peer's SETTINGS (so the first streams respect
    its SETTINGS_MAX_CONCURRENT_STREAMS); raises `InvokerError` if any of that fails or takes
    longer than `timeout_s` (10 s at most). Everything about the `h2` state machine, the TLS
    object and socket writes happens under `cond`.
    """

    def __init__(
        self,
        endpoint: str,
        url: SplitResult,
        port: int,
        proxy: tuple[str, str] | None,
        cafile: str,
        timeout_s: float,
        idle_s: float,
        max_requests: int,
    ) -> None:
        self.endpoint = endpoint
        self.idle_s = idle_s
        self.requests_left = max_requests  # streams it may still start before it is retired
        self.lock = threading.RLock()
        self.cond = threading.Condition(self.lock)  # the connection's own waits (its SETTINGS)
        self.streams: dict[int, H2Stream] = {}  # the started ones, by stream id
        self._touched: set[H2Stream] = set()  # streams events changed since the last wake-up (lock held)
        self._touched_all = False  # an event that concerns every stream (a GOAWAY) came
        self.blocked: set[H2Stream] = set()  # streams waiting for flow-control room (lock held)
        self.handed_out = 0  # streams given to callers and not closed yet, started or not
        self.broken: str | None = None  # why the connection failed, once it did
        self.draining = False  # a GOAWAY came, or it is closing: no new streams
        self.idle_since = time.monotonic()
        self._settled = False  # the peer's SETTINGS came
        self._goaway = False  # the peer's GOAWAY came
        self._tls: ssl.SSLObject | None = None
        self._tls_in = ssl.MemoryBIO()
        self._tls_out = ssl.MemoryBIO()
        host = url.hostname or ""
        deadline = time.monotonic() + min(timeout_s, _CONNECT_TIMEOUT_S)
        early = b""
        try:
            if proxy is None:
                sock = socket.create_connection((host, port), timeout=_left(deadline))
            else:
                sock, early = _tunnel(proxy, host, port, deadline)
        except OSError as exc:
            raise InvokerError(f"cannot connect to {endpoint}: {exc}") from exc
        try:
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            if url.scheme == "https":
                early = self._handshake(sock, host, cafile, early, deadline)
            sock.settimeout(_IO_TIMEOUT_S)
        except BaseException:
            sock.close()
            raise
        self.sock = sock
        self.h2 = h2.connection.H2Connection(_lean_config())
        self.h2.encoder = _PlainEncoder()
        self.h2.initiate_connection()
        self.h2.increment_flow_control_window(_CONNECTION_WINDOW_BYTES - self.h2.inbound_flow_control_window)
        self.h2.update_settings({h2.settings.SettingCodes.INITIAL_WINDOW_SIZE: _WINDOW_BYTES})
        with self.cond:
            self.flush_locked()
            if early or self._tls is not None:
                self._received_locked(early)  # what came with the proxy's answer or the TLS handshake
        name = f"h2-{host}:{port}"
        threading.Thread(target=self._read_loop, name=name, daemon=True).start()
        with self.cond:  # its limits (SETTINGS_MAX_CONCURRENT_STREAMS) before any stream goes on it
            while not self._settled and self.broken is None:
                left = deadline - time.monotonic()
                if left <= 0:
                    self._break_locked(f"{endpoint} sent no HTTP/2 SETTINGS within {timeout_s:.1f} s")
                    break
                self.cond.wait(left)
            if self.broken is not None:
                raise InvokerError(self.broken)

    def _handshake(self, sock: socket.socket, host: str, cafile: str, early: bytes, deadline: float) -> bytes:
        """TLS over `sock` on memory BIOs, ALPN `h2`; returns application bytes that came with the
        handshake's last flight (decrypted later). Raises `InvokerError`."""
        context = ssl.create_default_context(cafile=cafile)
        context.set_alpn_protocols(["h2"])
        tls = context.wrap_bio(self._tls_in, self._tls_out, server_hostname=host)
        if early:
            self._tls_in.write(early)
        try:
            while True:
                try:
                    tls.do_handshake()
                    break
                except ssl.SSLWantReadError:
                    sock.settimeout(_left(deadline))
                    sock.sendall(self._tls_out.read())
                    raw = sock.recv(_READ_CHUNK_BYTES)
                    if not raw:
                        raise InvokerError(f"{self.endpoint} closed the connection during the TLS handshake") from None
                    self._tls_in.write(raw)
            sock.sendall(self._tls_out.read())
        except ssl.SSLError as exc:
            hint = ""
            if isinstance(exc, ssl.SSLCertVerificationError):
                trusted = f"SSL_CERT_FILE={cafile}" if cafile != certifi.where() else "certifi's roots"
                hint = f" (trusted: {trusted}; set SSL_CERT_FILE to a CA bundle that has its issuer)"
            why = getattr(exc, "verify_message", None) or exc.reason or str(exc)
            raise InvokerError(f"TLS with {self.endpoint} failed: {why}{hint}") from exc
        except OSError as exc:
            raise InvokerError(f"cannot connect to {self.endpoint}: {exc}") from exc
        if tls.selected_alpn_protocol() != "h2":
            raise InvokerError(f"{self.endpoint} does not offer HTTP/2 (TLS ALPN h2)")
        self._tls = tls
        return b""  # what came after the handshake stays in the incoming BIO; read with the first recv

    def open(self, method: str, path: str, headers: list[_Field]) -> H2Stream | None:
        """A request on this connection (its headers go with its first `send` or `end`); None if
        the connection takes no new stream (broken, draining, or at the peer's
        SETTINGS_MAX_CONCURRENT_STREAMS, at most 100)."""
        with self.cond:
            if self.broken is not None or self.draining:
                return None
            limit = min(self.h2.remote_settings.max_concurrent_streams, _MAX_STREAMS)
            if self.handed_out >= limit:
                return None
            self.handed_out += 1
            self.requests_left -= 1
            if self.requests_left <= 0:
                self.draining = True  # retired: closed once its last stream ends (see the module doc)
            return H2Stream(self, [(":method", method), (":path", path), *headers])

    def usable(self) -> bool:
        """True while the connection may take new streams (not broken, no GOAWAY)."""
        return self.broken is None and not self.draining

    def forget_locked(self, stream_id: int) -> None:
        """A stream was closed (lock held)."""
        self.streams.pop(stream_id, None)
        self.handed_out -= 1
        if not self.handed_out:
            self.idle_since = time.monotonic()

    def close(self, why: str) -> None:
        """Close the connection (GOAWAY, then the socket); streams still on it fail. Never raises."""
        with self.cond:
            if self.broken is not None:
                return
            self.draining = True
            try:
                self.h2.close_connection()
                self.flush_locked()
            except (InvokerError, h2.exceptions.H2Error):
                pass
            self._break_locked(f"the connection to {self.endpoint} was closed: {why}")

    def flush_locked(self) -> None:
        """Write what the state machine has queued (lock held); a failed write breaks the connection
        and raises `InvokerError`."""
        data = self.h2.data_to_send()
        if not data:
            return
        try:
            if self._tls is not None:
                self._tls.write(data)
                data = self._tls_out.read()
            self.sock.sendall(data)
        except OSError as exc:  # ssl.SSLError is one
            message = f"the connection to {self.endpoint} broke: {exc}"
            self._break_locked(message)
            raise InvokerError(message) from exc

    def _break_locked(self, message: str) -> None:
        """Mark the connection broken, fail its open streams with `message`, close the socket."""
        if self.broken is not None:
            return
        self.broken = message
        for stream in self.streams.values():
            if not stream.remote_ended and stream.error is None:
                stream.error = message
        self._wake_locked(everyone=True)
        with contextlib.suppress(OSError):
            self.sock.shutdown(socket.SHUT_RDWR)  # wakes the reader thread
        self.sock.close()

    def _read_loop(self) -> None:
        """The reader thread: feed what arrives to `h2` until the connection breaks or closes."""
        while True:
            try:
                raw = self.sock.recv(_READ_CHUNK_BYTES)
            except TimeoutError:
                with self.cond:
                    if self.broken is not None:
                        return
                    idle = not self.handed_out and time.monotonic() - self.idle_since >= self.idle_s
                    if idle:  # decided under the lock: `open` hands out no stream from now on
                        self.draining = True
                if idle:
                    self.close(f"idle for {self.idle_s:g} s")
                    return
                continue
            except OSError as exc:
                with self.cond:
                    self._break_locked(f"the connection to {self.endpoint} broke: {exc}")
                return
            with self.cond:
                if self.broken is not None:
                    return
                if not raw:
                    self._break_locked(f"{self.endpoint} closed the connection")
                    return
                self._received_locked(raw)
                if self.broken is not None:
                    return

    def _received_locked(self, raw: bytes) -> None:
        """Decrypt and handle bytes from the socket (lock held); breaks the connection on errors."""
        try:
            if self._tls is not None:
                self._tls_in.write(raw)
                plain = bytearray()
                while True:
                    try:
                        chunk = self._tls.read(_READ_CHUNK_BYTES)
                    except ssl.SSLWantReadError:
                        break
                    if not chunk:
                        break
                    plain += chunk
                raw = bytes(plain)
            events = self.h2.receive_data(raw) if raw else []
        except ssl.SSLZeroReturnError:
            self._break_locked(f"{self.endpoint} closed the TLS session")
            return
        except (ssl.SSLError, h2.exceptions.H2Error) as exc:
            self._break_locked(f"{self.endpoint} broke the HTTP/2 protocol: {exc}")
            return
        for event in events:
            self._dispatch(event)
        try:
            self.flush_locked()  # SETTINGS and PING acks, window updates
        except InvokerError:
            return
        self._wake_locked()
        if self._goaway and not self.handed_out and self.broken is None:
            self._break_locked(f"{self.endpoint} closed the connection (GOAWAY)")

    def _wake_locked(self, everyone: bool = False) -> None:
        """Wake the streams the events since the last call changed, and those waiting for room after a
        window update (each waits on its own condition, so 32 streams on a connection do not all wake
        for one's data); every stream and the connection's own waits when `everyone` or a GOAWAY."""
        if everyone or self._touched_all:
            for stream in self.streams.values():
                stream.ready.notify_all()
            self.cond.notify_all()
        else:
            for stream in self._touched:
                stream.ready.notify_all()
        self._touched.clear()
        self._touched_all = False

    def _dispatch(self, event: h2.events.Event) -> None:
        stream_id = getattr(event, "stream_id", None)
        stream = self.streams.get(stream_id) if stream_id else None
        if stream is not None:
            self._touched.add(stream)
        elif isinstance(event, h2.events.WindowUpdated | h2.events.RemoteSettingsChanged):
            self._touched |= self.blocked  # more room on the connection, or new stream windows
            self.cond.notify_all()  # the wait for the peer's first SETTINGS
        elif isinstance(event, h2.events.ConnectionTerminated):
            self._touched_all = True
        if isinstance(event, h2.events.ResponseReceived) and stream is not None:
            fields = {str(k): str(v) for k, v in event.headers or []}
            stream.status = int(fields.pop(":status", "0"))
            stream.headers = fields
        elif isinstance(event, h2.events.DataReceived) and event.stream_id:
            if stream is not None:
                stream.inbox += event.data or b""
                stream.unacked += event.flow_controlled_length or 0
            else:  # a stream already released: hand the connection's window back at once
                self.h2.acknowledge_received_data(event.flow_controlled_length or 0, event.stream_id)
        elif isinstance(event, h2.events.StreamEnded) and stream is not None:
            stream.remote_ended = True
        elif isinstance(event, h2.events.StreamReset) and stream is not None and not stream.remote_ended:
            stream.error = f"{self.endpoint} reset the stream (HTTP/2 error code {event.error_code})"
        elif isinstance(event, h2.events.RemoteSettingsChanged):
            self._settled = True
        elif isinstance(event, h2.events.ConnectionTerminated):
            self.draining = self._goaway = True
            message = f"{self.endpoint} closed the connection (GOAWAY {event.error_code})"
            for open_stream in self.streams.values():
                if not open_stream.remote_ended and open_stream.error is None:
                    open_stream.error = message


class H2Invoker:
    """Opens `H2Stream`s (`control_plane.ports.StreamingInvoker`) for plain `http(s)://` endpoints,
    on connections kept per endpoint and shared by every thread (see the module doc). Thread-safe.

    Args:
        trust_env: Honour `SSL_CERT_FILE` and `HTTP_PROXY`/`HTTPS_PROXY`/`NO_PROXY` (any case),
            read now; without it, connections go direct and TLS trusts certifi's roots.
        idle_s: A connection without a stream for this long (s, checked every 30 s) is closed.
        max_requests: Streams a connection carries in all before new requests go on a new one.
    """

    def __init__(self, *, trust_env: bool = True, idle_s: float = 60.0, max_requests: int = 500) -> None:
        self._cafile = (os.environ.get("SSL_CERT_FILE") if trust_env else None) or certifi.where()
        self._proxies = urllib.request.getproxies_environment() if trust_env else {}
        self._idle_s = idle_s
        self._max_requests = max_requests
        self._pools: dict[tuple[str, str, int], list[_Connection]] = {}
        self._connecting: dict[tuple[str, str, int], threading.Lock] = {}
        self._lock = threading.Lock()
        self._closed = False
        self.connections_opened = 0
        """How many connections this invoker has opened so far."""

    def open_stream(
        self, endpoint: str, method: str, path: str, headers: Mapping[str, str], timeout_s: float
    ) -> H2Stream:
        """Open `method path` on `endpoint` over HTTP/2 and send its headers, on a pooled connection
        with room for a stream or a new one. Raises `InvokerError` if it cannot (connecting takes
        at most `timeout_s`, 10 s at most)."""
        url, key, authority = _target(endpoint)
        port = key[2]
        if self._closed:
            raise InvokerError(f"cannot call {endpoint}: the HTTP/2 invoker was closed")
        fields = [(":scheme", url.scheme), (":authority", authority), *_request_fields(headers)]
        full_path = url.path.rstrip("/") + path
        started = time.monotonic()

        def opened(connections: list[_Connection]) -> H2Stream | None:
            for connection in connections:
                stream = connection.open(method, full_path, fields)
                if stream is not None:
                    return stream
            return None

        stream = opened(self._pooled(key))
        if stream is not None:
            return stream
        with self._lock:
            gate = self._connecting.setdefault(key, threading.Lock())
        if not gate.acquire(timeout=max(timeout_s, 0.001)):  # one connect per endpoint at a time
            raise InvokerError(f"could not connect to {endpoint} within {timeout_s:.1f} s")
        try:
            stream = opened(self._pooled(key))  # another thread connected meanwhile
            if stream is not None:
                return stream
            left = timeout_s - (time.monotonic() - started)
            connection = _Connection(
                endpoint, url, port, self._proxy(url), self._cafile, max(left, 0.001), self._idle_s, self._max_requests
            )
            stream = connection.open(method, full_path, fields)
            if stream is None:
                connection.close("it took no stream")
                raise InvokerError(f"{endpoint} took no stream on a new HTTP/2 connection")
            with self._lock:
                self.connections_opened += 1
                self._pools.setdefault(key, []).append(connection)
                if self._closed:
                    connection.close("the invoker was closed")
            return stream
        finally:
            gate.release()

    def _pooled(self, key: tuple[str, str, int]) -> list[_Connection]:
        """The usable connections to `key`, oldest first; drops the others from the pool."""
        with self._lock:
            kept = [c for c in self._pools.get(key, []) if c.usable() or c.handed_out]
            self._pools[key] = kept
            return [c for c in kept if c.usable()]

    def _proxy(self, url: SplitResult) -> tuple[str, str] | None:
        """`(proxy URL, the setting that named it)` for `url`, or None to connect directly."""
        proxy = self._proxies.get(url.scheme)
        if not proxy or urllib.request.proxy_bypass_environment(url.hostname or "", self._proxies):
            return None
        return proxy, f"{url.scheme.upper()}_PROXY"

    def close(self) -> None:
        """Close every connection; streams still open fail and later `open_stream` calls raise."""
        with self._lock:
            self._closed = True
            connections = [c for pool in self._pools.values() for c in pool]
            self._pools.clear()
        for connection in connections:
            connection.close("the invoker was closed")


@functools.lru_cache(maxsize=1024)
def _target(endpoint: str) -> tuple[SplitResult, tuple[str, str, int], str]:
    """`(URL, pool key (scheme, host, port), :authority)` of `endpoint`, parsed once per endpoint (a
    call's share of CPU otherwise); `InvokerError` if it is not an `http(s)://` URL."""
    url = urlsplit(endpoint)
    if url.scheme not in ("http", "https") or not url.hostname:
        raise InvokerError(f"{endpoint} is not an http(s):// URL")
    port = url.port or (443 if url.scheme == "https" else 80)
    return url, (url.scheme, url.hostname, port), url.netloc.rsplit("@", 1)[-1]


def _request_fields(headers: Mapping[str, str]) -> list[_Field]:
    """`headers` as HTTP/2 request fields: lower-case names, values without surrounding whitespace, the
    connection-specific ones left out (`_NOT_ON_H2`), credentials never indexed (`_CREDENTIALS`, and a
    cookie under 20 bytes), the normalization h2 does when `normalize_outbound_headers` is on (see `_lean_config`)."""
    fields: list[_Field] = []
    for name, value in headers.items():
        name, value = name.lower(), value.strip()
        if name in _NOT_ON_H2:
            continue
        if name in _CREDENTIALS or (name == "cookie" and len(value) < 20):
            fields.append(NeverIndexedHeaderTuple(name, value))
        else:
            fields.append((name, value))
    return fields


def _left(deadline: float) -> float:
    """Seconds until `deadline`; `TimeoutError` if none are left."""
    left = deadline - time.monotonic()
    if left <= 0:
        raise TimeoutError("timed out")
    return left


def _tunnel(proxy: tuple[str, str], host: str, port: int, deadline: float) -> tuple[socket.socket, bytes]:
    """A socket tunnelled to `host:port` through the `http://` proxy `proxy = (URL, setting)` with
    HTTP CONNECT (RFC 9110 §9.3.6), and any bytes that came after the proxy's answer. Raises
    `InvokerError` naming the setting when the proxy URL is not `http://` or the proxy refuses, and
    `OSError` when it cannot be reached."""
    proxy_url, setting = proxy
    parts = urlsplit(proxy_url if "://" in proxy_url else f"http://{proxy_url}")
    if parts.scheme != "http" or not parts.hostname:
        raise InvokerError(
            f"{setting}={proxy_url}: HTTP/2 streams to deployments go through an http:// proxy (CONNECT) only"
        )
    sock = socket.create_connection((parts.hostname, parts.port or 80), timeout=_left(deadline))
    try:
        target = f"[{host}]:{port}" if ":" in host else f"{host}:{port}"
        request = f"CONNECT {target} HTTP/1.1\r\nHost: {target}\r\n"
        if parts.username is not None:
            credentials = f"{unquote(parts.username)}:{unquote(parts.password or '')}".encode()
            request += f"Proxy-Authorization: Basic {base64.b64encode(credentials).decode()}\r\n"
        sock.sendall((request + "\r\n").encode("latin-1"))
        answer = b""
        while b"\r\n\r\n" not in answer:
            sock.settimeout(_left(deadline))
            chunk = sock.recv(4096)
            if not chunk or len(answer) > _MAX_PROXY_HEAD_BYTES:
                raise InvokerError(f"the proxy {parts.hostname} ({setting}) closed the tunnel to {target}")
            answer += chunk
        head, _, early = answer.partition(b"\r\n\r\n")
        status_line = head.split(b"\r\n", 1)[0].decode("latin-1")
        status = status_line.split(" ", 2)
        if len(status) < 2 or status[1] != "200":
            raise InvokerError(
                f"the proxy {parts.hostname} ({setting}) refused to tunnel to {target}: {status_line.strip()}"
            )
        return sock, early
    except BaseException:
        sock.close()
        raise
