"""`Invoker` over HTTP/1.1 with httpx: one pooled client shared by every thread of the process.

A deployment endpoint is an `http(s)://` URL, possibly with a path prefix
(`http://127.0.0.1:9080/restate`); the request goes to `endpoint.rstrip("/") + path`. Every way the
exchange can break in transport (refused, reset, timed out, malformed answer) becomes one
`InvokerError` with a short message; an HTTP error status is an answer, not an error, and is
returned as an `HttpReply` for the core to judge.
"""

from __future__ import annotations

import time
from collections.abc import Mapping

import httpx

from control_plane.ports import HttpReply, InvokerError

_CONNECT_TIMEOUT_S = 10.0  # at most this long to open a TCP (and TLS) connection, within timeout_s


class HttpInvoker:
    """Sends Restate service-protocol requests (request/response mode) to HTTP deployments.

    Thread-safe: one `httpx.Client` (HTTP/1.1 only, keep-alive pool) serves all callers.

    Args:
        max_connections: Most connections open at once, over all endpoints; a request that finds
            them all busy waits for one (within its `timeout_s`).
        max_keepalive_connections: Most idle connections kept for reuse.
        keepalive_expiry_s: An idle connection is closed after this many seconds.
        trust_env: Honour `HTTP(S)_PROXY`, `NO_PROXY` and `SSL_CERT_FILE` from the environment.
    """

    def __init__(
        self,
        *,
        max_connections: int = 100,
        max_keepalive_connections: int = 64,
        keepalive_expiry_s: float = 30.0,
        trust_env: bool = True,
    ) -> None:
        self._client = httpx.Client(
            http1=True,
            http2=False,
            follow_redirects=False,
            trust_env=trust_env,
            limits=httpx.Limits(
                max_connections=max_connections,
                max_keepalive_connections=max_keepalive_connections,
                keepalive_expiry=keepalive_expiry_s,
            ),
        )

    def __enter__(self) -> HttpInvoker:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

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
            InvokerError: The endpoint is not an http(s) URL, the connection was refused or broke,
                or no complete answer arrived within `timeout_s`.
        """
        base = endpoint.rstrip("/")
        url = base + path
        if self._client.is_closed:
            raise InvokerError(f"cannot call {base}: the HTTP invoker was closed")
        deadline = time.monotonic() + timeout_s
        timeout = httpx.Timeout(timeout_s, connect=min(timeout_s, _CONNECT_TIMEOUT_S))
        try:
            with self._client.stream(method, url, headers=dict(headers), content=body, timeout=timeout) as response:
                chunks: list[bytes] = []
                for chunk in response.iter_raw():
                    chunks.append(chunk)
                    if time.monotonic() > deadline:
                        raise InvokerError(f"no complete answer from {base} within {timeout_s:.1f} s")
                return HttpReply(
                    status=response.status_code,
                    headers={name.lower(): value for name, value in response.headers.items()},
                    body=b"".join(chunks),
                )
        except httpx.HTTPError as exc:
            raise InvokerError(_describe(exc, base, timeout_s)) from exc
        except httpx.InvalidURL as exc:
            raise InvokerError(f"invalid deployment endpoint {endpoint!r}: {exc}") from exc

    def close(self) -> None:
        """Close every pooled connection. Requests after this raise `InvokerError`."""
        self._client.close()


def _describe(exc: httpx.HTTPError, base: str, timeout_s: float) -> str:
    """A one-line reason for a failed exchange with the deployment at `base`."""
    if isinstance(exc, httpx.ConnectTimeout):
        return f"could not connect to {base} within {min(timeout_s, _CONNECT_TIMEOUT_S):.1f} s"
    if isinstance(exc, httpx.PoolTimeout):
        return f"no free connection to {base} within {timeout_s:.1f} s (connection pool exhausted)"
    if isinstance(exc, httpx.TimeoutException):
        return f"no answer from {base} within {timeout_s:.1f} s"
    if isinstance(exc, httpx.ConnectError):
        if "refused" in str(exc).lower():
            return f"connection refused by {base}"
        return f"could not connect to {base}: {exc or type(exc).__name__}"
    if isinstance(exc, httpx.UnsupportedProtocol):
        return f"deployment endpoint {base!r} is not an http:// or https:// URL"
    if isinstance(exc, httpx.RemoteProtocolError):
        return f"{base} broke the HTTP exchange: {exc or 'connection closed without a complete answer'}"
    if isinstance(exc, httpx.ReadError | httpx.WriteError):
        return f"connection to {base} broke: {exc or type(exc).__name__}"
    return f"request to {base} failed: {type(exc).__name__}: {exc}"
