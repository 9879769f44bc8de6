"""`Invoker` over HTTP/1.1 with urllib3: one keep-alive pool per endpoint, shared by every thread.

A deployment endpoint is an `http(s)://` URL, possibly with a path prefix
(`http://127.0.0.1:9080/restate`); the request goes to `endpoint.rstrip("/") + path`. Every way the
exchange can break in transport (refused, reset, timed out, malformed answer) becomes one
`InvokerError` with a short message; an HTTP error status is an answer, not an error, and is
returned as an `HttpReply` for the core to judge.

Every attempt of every invocation crosses this path, and it is most of the control plane's CPU in
`torpor dev` (`bench/README.md`, "the invoker's HTTP client"). So an endpoint reached directly is
spoken to with the standard library's `http.client` over kept-alive connections (`_Endpoint`), about
half urllib3's CPU per request; through a proxy (`HTTP(S)_PROXY`), urllib3's `ProxyManager` carries it.
"""

from __future__ import annotations

import functools
import http.client
import io
import os
import select
import socket
import ssl
import struct
import threading
import time
import urllib.request
from collections.abc import Callable, Mapping
from urllib.parse import urlsplit

import certifi
import urllib3
from urllib3.exceptions import (
    ConnectTimeoutError,
    HTTPError,
    LocationParseError,
    MaxRetryError,
    NewConnectionError,
    ProtocolError,
    ProxyError,
    ReadTimeoutError,
    SSLError,
)

from control_plane.ports import AnswerTooLarge, HttpReply, InvokerError

_CONNECT_TIMEOUT_S = 10.0  # at most this long to open a TCP (and TLS) connection, within timeout_s
_READ_CHUNK_BYTES = 64 * 1024
_DEADLINE_SLACK_S = 0.01  # a read that failed this close to the deadline failed for want of time


class _OneSend:
    """Mixed into `http.client`'s connections: a request's head and a `bytes` body leave in one
    `send` (`http.client` sends them in two: two system calls, each a GIL hand-off, and two
    segments). Other bodies (files, iterables, chunked) are sent as `http.client` sends them."""

    _buffer: list[bytes]

    def _send_output(self, message_body: object = None, encode_chunked: bool = False) -> None:
        if isinstance(message_body, bytes) and not encode_chunked:
            self._buffer.extend((b"", message_body))  # joined: head, blank line, body
            message = b"\r\n".join(self._buffer)
            del self._buffer[:]
            self.send(message)  # type: ignore[attr-defined]
            return
        super()._send_output(message_body, encode_chunked=encode_chunked)  # type: ignore[misc]


class _Connection(_OneSend, http.client.HTTPConnection):
    """A plain HTTP connection that sends head and body at once (`_OneSend`)."""


class _TlsConnection(_OneSend, http.client.HTTPSConnection):
    """An HTTPS connection that sends head and body at once (`_OneSend`)."""


def _arm(sock: socket.socket, seconds: float, *, reads_only: bool = False) -> None:
    """Let each following `send`/`recv` on the blocking plain socket `sock` wait at most `seconds`
    (at least 1 ms): the kernel's `SO_SNDTIMEO`/`SO_RCVTIMEO`, one `setsockopt` each, where
    `settimeout` would switch the socket to non-blocking (an `ioctl` that releases the GIL) and make
    every read and write a `poll` and the call (two GIL hand-offs). A read or write that times out
    fails with `EAGAIN`, which `http.client` reports as a short or missing answer; `request` tells it
    from a broken connection by the deadline."""
    seconds = max(0.001, seconds)
    whole = int(seconds)
    timeval = struct.pack("ll", whole, int((seconds - whole) * 1_000_000))
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVTIMEO, timeval)
    if not reads_only:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_SNDTIMEO, timeval)


class _DeadlineReader(io.RawIOBase):
    """The raw reads of one answer from `sock`, each bounded by what is left until `deadline`
    (`time.monotonic()`, s): a read that finds it passed, or that the socket's timeout ends, raises
    `TimeoutError`. `http.client` reads an answer's head line by line through a buffer, so one
    timeout set before `getresponse` let a head arriving a byte at a time run on unbounded; and a
    blocking read that timed out (`_arm`'s `SO_RCVTIMEO`: `EAGAIN`, which `socket.SocketIO` turns
    into `None`) read as the end of a body without a length, a stalled answer taken as complete."""

    def __init__(self, sock: socket.socket, deadline: float) -> None:
        super().__init__()
        self._sock = sock
        self._deadline = deadline
        # counted by the socket as http.client's own file is, so an answer that closes the connection
        # (`getresponse` closes it at once) keeps the descriptor open until the answer is closed
        self._hold = sock.makefile("rb", buffering=0)

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: bytearray | memoryview) -> int:  # type: ignore[override]
        remaining = self._deadline - time.monotonic()
        if remaining <= 0:
            raise TimeoutError("timed out")
        HttpInvoker._arm(self._sock, remaining, reads_only=True)
        try:
            return self._sock.recv_into(buffer)
        except BlockingIOError:  # EAGAIN: the blocking read's kernel timeout ran out
            raise TimeoutError("timed out") from None

    def close(self) -> None:
        self._hold.close()
        super().close()

    def makefile(self, mode: str) -> io.BufferedReader:
        """This, buffered: what `http.client.HTTPResponse` reads the answer from (`_Answer`)."""
        return io.BufferedReader(self)


class _Answer(http.client.HTTPResponse):
    """An `http.client` answer whose every socket read ends by `deadline` (`_DeadlineReader`)."""

    def __init__(
        self,
        sock: socket.socket,
        debuglevel: int = 0,
        method: str | None = None,
        url: str | None = None,
        *,
        deadline: float,
    ) -> None:
        super().__init__(_DeadlineReader(sock, deadline), debuglevel, method, url)  # type: ignore[arg-type]


class _Endpoint:
    """Kept-alive `http.client` connections to one endpoint reached directly, shared by every thread.

    `take` hands out an idle connection the server has not closed meanwhile (a readable socket on an
    idle HTTP/1.1 connection is its end, or bytes nobody asked for: it is dropped), else a new,
    not yet connected one; `give_back` keeps at most `max_idle` and closes the rest.
    """

    def __init__(self, base: str, max_idle: int, context: ssl.SSLContext | None) -> None:
        parts = urlsplit(base)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise LocationParseError(base)
        self.prefix = parts.path
        self.https = parts.scheme == "https"
        self._host = parts.hostname
        self._port = parts.port or (443 if self.https else 80)  # ValueError for a bad port
        self._context = context
        self._max_idle = max_idle
        self._idle: list[http.client.HTTPConnection] = []
        self._lock = threading.Lock()
        self._closed = False

    def take(self, connect_timeout_s: float) -> http.client.HTTPConnection:
        """An idle connection still open, else a new one (not connected yet: its first request connects
        within `connect_timeout_s`)."""
        while True:
            with self._lock:
                conn = self._idle.pop() if self._idle else None
            if conn is None:
                break
            if conn.sock is not None and not _readable(conn.sock):
                return conn
            conn.close()
        if self.https:
            return _TlsConnection(self._host, self._port, timeout=connect_timeout_s, context=self._context)
        return _Connection(self._host, self._port, timeout=connect_timeout_s)

    def give_back(self, conn: http.client.HTTPConnection) -> None:
        """Keep `conn` for the next request (its answer was read whole), unless enough are idle."""
        with self._lock:
            if not self._closed and len(self._idle) < self._max_idle:
                self._idle.append(conn)
                return
        conn.close()

    def close(self) -> None:
        """Close the idle connections; those in use are closed when given back."""
        with self._lock:
            self._closed = True
            idle, self._idle = self._idle, []
        for conn in idle:
            conn.close()


def _readable(sock: socket.socket) -> bool:
    """Whether an idle connection's socket has something to read (its end, or stray bytes) now."""
    poller = select.poll()
    try:
        poller.register(sock, select.POLLIN)
        return bool(poller.poll(0))
    except (OSError, ValueError):  # closed meanwhile
        return True


class HttpInvoker:
    """Sends Restate service-protocol requests (request/response mode) to HTTP deployments.

    Thread-safe: one set of kept-alive connections per endpoint serves all callers; it keeps up to
    `max_keepalive_connections` idle connections per endpoint (host and port) and opens more when
    more requests run at once (those are closed after use). A pooled connection the server closed
    meanwhile is noticed before reuse and replaced. Requests are never retried here: a failed
    attempt is the engine's to retry (with backoff), after it re-reads the journal.

    Args:
        max_keepalive_connections: Most idle connections kept for reuse, per endpoint.
        trust_env: Honour `HTTP_PROXY`/`HTTPS_PROXY`/`NO_PROXY` (any case) and `SSL_CERT_FILE`
            from the environment; without it, requests go direct and TLS trusts certifi's roots.
        max_answer_bytes: The largest answer body read (bytes); a larger one is an `AnswerTooLarge`
            as soon as its `content-length` or the bytes read so far exceed it.
    """

    def __init__(
        self, *, max_keepalive_connections: int = 64, trust_env: bool = True, max_answer_bytes: int = 32 * 1024 * 1024
    ) -> None:
        self.max_answer_bytes = max_answer_bytes
        cafile = os.environ.get("SSL_CERT_FILE") if trust_env else None
        self._pool_kw: dict[str, object] = {
            "maxsize": max_keepalive_connections,
            "block": False,
            "retries": False,
            "ca_certs": cafile or certifi.where(),
        }
        self._max_idle = max_keepalive_connections
        self._cafile = cafile or certifi.where()
        self._context: ssl.SSLContext | None = None  # made on the first https endpoint
        self._endpoints: dict[str, _Endpoint] = {}  # reached directly, by base URL
        self._proxies = urllib.request.getproxies_environment() if trust_env else {}
        self._via_proxy: dict[str, urllib3.ProxyManager] = {}
        self._lock = threading.Lock()
        self._closed = False

    def __enter__(self) -> HttpInvoker:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def _endpoint(self, base: str) -> _Endpoint | None:
        """The kept-alive connections to `base` when it is reached directly (made once per endpoint),
        None when the environment sends it through a proxy. Raises `LocationParseError` or
        `ValueError` for a URL that names no host or a bad port."""
        known = self._endpoints.get(base)
        if known is not None:
            return known
        if self._manager(base) is not None:
            return None
        with self._lock:
            if base not in self._endpoints:
                context = None
                if base.startswith("https://"):
                    if self._context is None:
                        self._context = ssl.create_default_context(cafile=self._cafile)
                    context = self._context
                self._endpoints[base] = _Endpoint(base, self._max_idle, context)
            return self._endpoints[base]

    def _manager(self, url: str) -> urllib3.ProxyManager | None:
        """The proxy's manager when the environment names one for this URL's scheme and host, else None."""
        if not self._proxies:
            return None
        parts = urlsplit(url)
        proxy = self._proxies.get(parts.scheme)
        if not proxy or urllib.request.proxy_bypass_environment(parts.hostname or "", self._proxies):
            return None
        with self._lock:
            if proxy not in self._via_proxy:
                self._via_proxy[proxy] = urllib3.ProxyManager(proxy, num_pools=64, **self._pool_kw)  # type: ignore[arg-type]
            return self._via_proxy[proxy]

    def request(
        self,
        endpoint: str,
        method: str,
        path: str,
        headers: Mapping[str, str],
        body: bytes,
        timeout_s: float,
        auth: Mapping[str, object] | None = None,
    ) -> HttpReply:
        """Send `method endpoint+path` with `body` and return the complete answer.

        Args:
            endpoint: Base URL of the deployment, `http(s)://host[:port][/prefix]`.
            method: HTTP method, e.g. `POST`.
            path: Path below the endpoint, starting with `/` (e.g. `/invoke/Greeter/greet`).
            headers: Request headers.
            body: Request body bytes.
            timeout_s: The whole answer, body included, must arrive within this many seconds
                (connecting takes at most 10 s of it).
            auth: Ignored: a plain HTTP deployment needs none (see `adapters.invokers`).

        Returns:
            The status, headers (lower-case names; repeated headers joined with ", ") and body.

        Raises:
            AnswerTooLarge: The answer announced or brought more than `max_answer_bytes`.
            InvokerError: The endpoint is not an http(s) URL, the connection was refused or broke,
                or no complete answer arrived within `timeout_s`.
        """
        base = endpoint.rstrip("/")
        if self._closed:
            raise InvokerError(f"cannot call {base}: the HTTP invoker was closed")
        if not base.startswith(("http://", "https://")):
            raise InvokerError(f"deployment endpoint {base!r} is not an http:// or https:// URL")
        deadline = time.monotonic() + timeout_s
        try:
            peer = self._endpoint(base)
        except (LocationParseError, ValueError) as exc:
            raise InvokerError(f"invalid deployment endpoint {base!r}: {exc}") from exc
        if peer is None:
            return self._through_proxy(base, method, path, headers, body, timeout_s, deadline)
        conn = peer.take(min(timeout_s, _CONNECT_TIMEOUT_S))
        connecting = conn.sock is None
        reusable = False
        try:
            if connecting:
                conn.connect()
                connecting = False
                if not peer.https:  # blocking from here on, bounded by `_arm` (TLS keeps `settimeout`)
                    conn.sock.settimeout(None)
            self._arm(conn.sock, deadline - time.monotonic())
            conn.response_class = functools.partial(_Answer, deadline=deadline)  # type: ignore[assignment]
            conn.request(method, peer.prefix + path, body=body, headers=dict(headers))
            response = conn.getresponse()
            declared = response.getheader("content-length", "")
            if declared.isdigit() and int(declared) > self.max_answer_bytes:
                raise AnswerTooLarge(self.max_answer_bytes)
            data = self._read(response.read1, None, base, timeout_s, deadline)  # each read bounded by `_Answer`
            if response.length:  # the connection ended before the announced body came whole
                raise http.client.IncompleteRead(data, response.length)
            response.close()  # read whole: the connection may carry the next request
            reusable = not response.will_close
            return HttpReply(status=response.status, headers=_merged(response.getheaders()), body=data)
        except (OSError, http.client.HTTPException) as exc:
            seen: BaseException = exc
            if not connecting and not peer.https and time.monotonic() >= deadline - _DEADLINE_SLACK_S:
                seen = TimeoutError("timed out")  # a blocking read or write ran out of time (`_arm`)
            raise InvokerError(_describe_direct(seen, base, timeout_s, connecting)) from exc
        finally:
            if reusable:
                peer.give_back(conn)
            else:  # unread bytes, or the server's end: the connection cannot serve another request
                conn.close()

    def _read(
        self, read1: Callable[[int], bytes], sock: socket.socket | None, base: str, timeout_s: float, deadline: float
    ) -> bytes:
        """An answer's whole body, one socket read at a time, each given only what is left of
        `timeout_s`. Raises `AnswerTooLarge` past `max_answer_bytes`, `InvokerError` past the deadline."""
        chunks: list[bytes] = []
        size = 0
        while True:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise InvokerError(f"no complete answer from {base} within {timeout_s:.1f} s")
            if sock is not None:
                self._arm(sock, remaining)
            chunk = read1(_READ_CHUNK_BYTES)
            if not chunk:
                return b"".join(chunks)
            size += len(chunk)
            if size > self.max_answer_bytes:
                raise AnswerTooLarge(self.max_answer_bytes)
            chunks.append(chunk)

    @staticmethod
    def _arm(sock: socket.socket, seconds: float, *, reads_only: bool = False) -> None:
        """Bound the next reads (and writes, unless `reads_only`) on `sock` to `seconds`: `_arm` on a
        blocking plain socket, `settimeout` on another (TLS, or urllib3's through a proxy)."""
        if sock.gettimeout() is None:
            _arm(sock, seconds, reads_only=reads_only)
        else:
            sock.settimeout(max(0.001, seconds))

    def _through_proxy(
        self,
        base: str,
        method: str,
        path: str,
        headers: Mapping[str, str],
        body: bytes,
        timeout_s: float,
        deadline: float,
    ) -> HttpReply:
        """`request` through the proxy the environment names for `base` (urllib3's `ProxyManager`)."""
        url = base + path
        manager = self._manager(url)
        assert manager is not None
        timeout = urllib3.Timeout(connect=min(timeout_s, _CONNECT_TIMEOUT_S), read=timeout_s)
        try:
            response = manager.urlopen(
                method, url, body=body, headers=dict(headers), timeout=timeout,
                redirect=False, retries=False, preload_content=False, decode_content=False,
            )  # fmt: skip
            complete = False
            try:
                declared = response.headers.get("content-length", "")
                if declared.isdigit() and int(declared) > self.max_answer_bytes:
                    raise AnswerTooLarge(self.max_answer_bytes)
                sock = getattr(getattr(response, "connection", None), "sock", None)
                data = self._read(lambda n: response.read1(n, decode_content=False), sock, base, timeout_s, deadline)
                complete = True
                return HttpReply(
                    status=response.status,
                    headers={name.lower(): value for name, value in response.headers.itermerged()},
                    body=data,
                )
            finally:
                if not complete:  # unread bytes: the connection cannot serve another request
                    response.close()
                response.release_conn()
        except (HTTPError, OSError) as exc:
            raise InvokerError(_describe(exc, base, timeout_s)) from exc

    def close(self) -> None:
        """Close every pooled connection. Requests after this raise `InvokerError`."""
        self._closed = True
        with self._lock:
            endpoints, self._endpoints = list(self._endpoints.values()), {}
        for endpoint in endpoints:
            endpoint.close()
        with self._lock:
            for manager in self._via_proxy.values():
                manager.clear()


def _describe(exc: BaseException, base: str, timeout_s: float) -> str:
    """A one-line reason for a failed exchange with the deployment at `base`."""
    if isinstance(exc, MaxRetryError) and exc.reason is not None:
        exc = exc.reason
    if isinstance(exc, NewConnectionError | ConnectionRefusedError):  # before: it subclasses ConnectTimeoutError
        if "refused" in str(exc).lower() or isinstance(exc, ConnectionRefusedError):
            return f"connection refused by {base}"
        return f"could not connect to {base}: {_reason(exc)}"
    if isinstance(exc, ConnectTimeoutError):
        return f"could not connect to {base} within {min(timeout_s, _CONNECT_TIMEOUT_S):.1f} s"
    if isinstance(exc, ReadTimeoutError | TimeoutError):
        return f"no answer from {base} within {timeout_s:.1f} s"
    if isinstance(exc, NewConnectionError | ConnectionRefusedError):
        if "refused" in str(exc).lower() or isinstance(exc, ConnectionRefusedError):
            return f"connection refused by {base}"
        return f"could not connect to {base}: {_reason(exc)}"
    if isinstance(exc, LocationParseError):
        return f"invalid deployment endpoint {base!r}: {exc}"
    if isinstance(exc, ProxyError):
        return f"could not reach {base} through the proxy: {_reason(exc)}"
    if isinstance(exc, SSLError):
        return f"TLS with {base} failed: {_reason(exc)}"
    if isinstance(exc, ProtocolError):
        cause = exc.args[1] if len(exc.args) > 1 else None
        if isinstance(cause, ConnectionResetError | BrokenPipeError):
            return f"connection to {base} broke: {_reason(cause)}"
        why = _reason(cause or exc) or "connection closed without a complete answer"
        return f"{base} broke the HTTP exchange: {why}"
    if isinstance(exc, OSError):
        return f"connection to {base} broke: {_reason(exc)}"
    return f"request to {base} failed: {type(exc).__name__}: {exc}"


def _describe_direct(exc: BaseException, base: str, timeout_s: float, connecting: bool) -> str:
    """A one-line reason for a failed exchange with `base` over `http.client` (`connecting`: it
    failed while opening the connection, TLS included), worded as `_describe` words urllib3's."""
    if isinstance(exc, ssl.SSLError):
        return f"TLS with {base} failed: {_reason(exc)}"
    if connecting:
        if isinstance(exc, ConnectionRefusedError):
            return f"connection refused by {base}"
        if isinstance(exc, TimeoutError):
            return f"could not connect to {base} within {min(timeout_s, _CONNECT_TIMEOUT_S):.1f} s"
        return f"could not connect to {base}: {_reason(exc)}"
    if isinstance(exc, TimeoutError):
        return f"no answer from {base} within {timeout_s:.1f} s"
    if isinstance(exc, ConnectionResetError | BrokenPipeError):  # RemoteDisconnected too
        return f"connection to {base} broke: {_reason(exc)}"
    if isinstance(exc, http.client.HTTPException):
        why = str(exc) or "connection closed without a complete answer"  # IncompleteRead, BadStatusLine('')
        return f"{base} broke the HTTP exchange: {why}"
    return f"connection to {base} broke: {_reason(exc)}"


def _merged(headers: list[tuple[str, str]]) -> dict[str, str]:
    """Header names lower-cased; a repeated header's values joined with ", " in arrival order."""
    merged: dict[str, str] = {}
    for name, value in headers:
        key = name.lower()
        merged[key] = f"{merged[key]}, {value}" if key in merged else value
    return merged


def _reason(exc: BaseException) -> str:
    """The exception's text, or its type's name when it has none."""
    return str(exc) or type(exc).__name__
