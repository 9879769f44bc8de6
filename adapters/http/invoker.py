"""`Invoker` over HTTP/1.1 with urllib3: one keep-alive pool per endpoint, shared by every thread.

A deployment endpoint is an `http(s)://` URL, possibly with a path prefix
(`http://127.0.0.1:9080/restate`); the request goes to `endpoint.rstrip("/") + path`. Every way the
exchange can break in transport (refused, reset, timed out, malformed answer) becomes one
`InvokerError` with a short message; an HTTP error status is an answer, not an error, and is
returned as an `HttpReply` for the core to judge.

urllib3 rather than httpx on this path: every attempt of every invocation crosses it, and urllib3
costs about a third less CPU per request (`bench/README.md`, "the invoker's HTTP client"), which
is most of the control plane's CPU in `torpor dev`.
"""

from __future__ import annotations

import os
import threading
import time
import urllib.request
from collections.abc import Mapping
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
from urllib3.poolmanager import SSL_KEYWORDS

from control_plane.ports import AnswerTooLarge, HttpReply, InvokerError

_CONNECT_TIMEOUT_S = 10.0  # at most this long to open a TCP (and TLS) connection, within timeout_s
_READ_CHUNK_BYTES = 64 * 1024


class HttpInvoker:
    """Sends Restate service-protocol requests (request/response mode) to HTTP deployments.

    Thread-safe: one `urllib3` connection pool per endpoint serves all callers; it keeps up to
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
        self._direct = urllib3.PoolManager(num_pools=64, **self._pool_kw)  # type: ignore[arg-type]
        self._pools: dict[str, tuple[urllib3.HTTPConnectionPool, str]] = {}  # direct ones by endpoint, with its path
        self._proxies = urllib.request.getproxies_environment() if trust_env else {}
        self._via_proxy: dict[str, urllib3.ProxyManager] = {}
        self._lock = threading.Lock()
        self._closed = False

    def __enter__(self) -> HttpInvoker:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def _opener(self, base: str, path: str) -> tuple[urllib3.PoolManager | urllib3.HTTPConnectionPool, str]:
        """What sends a request to `base + path`, and the target to give it: the endpoint's own
        connection pool and the URL's path when it is reached directly (the pool made once per
        endpoint: no URL parsed per request), else the proxy's manager and the whole URL."""
        known = self._pools.get(base)
        if known is not None:
            return known[0], known[1] + path
        url = base + path
        manager = self._manager(url)
        if manager is not self._direct:
            return manager, url
        with self._lock:
            if base not in self._pools:
                kw = (
                    self._pool_kw
                    if base.startswith("https://")
                    else {name: value for name, value in self._pool_kw.items() if name not in SSL_KEYWORDS}
                )
                self._pools[base] = (urllib3.connection_from_url(base, **kw), urlsplit(base).path)  # type: ignore[arg-type]
            pool, prefix = self._pools[base]
        return pool, prefix + path

    def _manager(self, url: str) -> urllib3.PoolManager:
        """The direct pool, or the proxy's when the environment names one for this URL's scheme and host."""
        if not self._proxies:
            return self._direct
        parts = urlsplit(url)
        proxy = self._proxies.get(parts.scheme)
        if not proxy or urllib.request.proxy_bypass_environment(parts.hostname or "", self._proxies):
            return self._direct
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
        timeout = urllib3.Timeout(connect=min(timeout_s, _CONNECT_TIMEOUT_S), read=timeout_s)
        try:
            opener, target = self._opener(base, path)
            response = opener.urlopen(
                method, target, body=body, headers=dict(headers), timeout=timeout,
                redirect=False, retries=False, preload_content=False, decode_content=False,
            )  # fmt: skip
            complete = False
            try:
                declared = response.headers.get("content-length", "")
                if declared.isdigit() and int(declared) > self.max_answer_bytes:
                    raise AnswerTooLarge(self.max_answer_bytes)
                chunks: list[bytes] = []
                size = 0
                sock = getattr(getattr(response, "connection", None), "sock", None)
                while True:  # one socket read at a time, each given only what is left of timeout_s
                    remaining = deadline - time.monotonic()
                    if remaining <= 0:
                        raise InvokerError(f"no complete answer from {base} within {timeout_s:.1f} s")
                    if sock is not None:
                        sock.settimeout(remaining)
                    chunk = response.read1(_READ_CHUNK_BYTES, decode_content=False)
                    if not chunk:
                        break
                    size += len(chunk)
                    if size > self.max_answer_bytes:
                        raise AnswerTooLarge(self.max_answer_bytes)
                    chunks.append(chunk)
                complete = True
                return HttpReply(
                    status=response.status,
                    headers={name.lower(): value for name, value in response.headers.itermerged()},
                    body=b"".join(chunks),
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
        self._direct.clear()
        with self._lock:
            pools, self._pools = [pool for pool, _ in self._pools.values()], {}
        for pool in pools:
            pool.close()
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


def _reason(exc: BaseException) -> str:
    """The exception's text, or its type's name when it has none."""
    return str(exc) or type(exc).__name__
