"""`control_plane.ports.Invoker` for every kind of deployment: routes each request by its endpoint.

- `arn:aws:lambda:…` → the Lambda invoker (boto3 `Invoke`, `adapters.aws.lambda_invoker`);
- a Cloud Run service name, or an endpoint whose `auth` asks for a Google ID token → the Cloud Run
  invoker (`adapters.gcp.cloud_run`);
- any other `http(s)://` URL → the plain HTTP invoker.

The Lambda and Cloud Run invokers are built on first use, so a process that never meets such a
deployment never imports boto3's Lambda client or google-auth.

With a `RequestSigner`, every request (discovery and invoke, whatever the kind) carries the request
identity headers (`control_plane.request_identity`): for Lambda they go in the API-Gateway-proxy
event's `headers`, where the SDK's Lambda handler reads them.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Mapping

from adapters.http.streaming import H2Invoker
from control_plane.ports import DuplexStream, HttpReply, Invoker, InvokerError, StreamingInvoker
from control_plane.request_identity import RequestSigner


def cloud_run_invoker() -> Invoker:
    """The Cloud Run invoker with Google ID tokens from the application default credentials (a factory
    for `RoutingInvoker`; google-auth is imported only now)."""
    from adapters.gcp.cloud_run import CloudRunInvoker

    return CloudRunInvoker()


class RoutingInvoker:
    """Sends each request to the invoker for its endpoint's kind (see the module doc). Thread-safe.

    Args:
        http: The invoker for plain HTTP endpoints.
        lambda_factory: Builds the Lambda invoker on first use; None: Lambda deployments are refused
            with an `InvokerError` naming the fix.
        cloud_run_factory: Builds the Cloud Run invoker on first use; None: likewise.
        signer: Signs every request with Torpor's request identity key; None: requests go unsigned.
        streams: Opens HTTP/2 streams for bidirectional mode (default: `adapters.http.streaming.H2Invoker`).
    """

    def __init__(
        self,
        http: Invoker,
        *,
        lambda_factory: Callable[[], Invoker] | None = None,
        cloud_run_factory: Callable[[], Invoker] | None = None,
        signer: RequestSigner | None = None,
        streams: StreamingInvoker | None = None,
    ) -> None:
        self.http = http
        self.streams = streams or H2Invoker()
        self.signer = signer
        self._factories = {"lambda": lambda_factory, "cloud_run": cloud_run_factory}
        self._built: dict[str, Invoker] = {}
        self._lock = threading.Lock()

    @property
    def request_identity(self) -> str | None:
        """The public key (`publickeyv1_…`) requests are signed with; None when they go unsigned."""
        return self.signer.public_key if self.signer is not None else None

    def _invoker(self, kind: str) -> Invoker:
        with self._lock:
            if kind not in self._built:
                factory = self._factories[kind]
                if factory is None:
                    what = "Lambda" if kind == "lambda" else "Cloud Run"
                    raise InvokerError(f"this control plane was started without a {what} invoker")
                self._built[kind] = factory()
            return self._built[kind]

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
        """`Invoker.request` on the invoker for `endpoint`'s kind, signed. Raises `InvokerError`."""
        if self.signer is not None:
            identity = self.signer.headers(path)
            headers = {**{k: v for k, v in headers.items() if k.lower() not in identity}, **identity}
        if endpoint.startswith("arn:"):
            invoker = self._invoker("lambda")
        elif endpoint.startswith("projects/") or (auth and "google_id_token" in auth):
            invoker = self._invoker("cloud_run")
        else:
            invoker = self.http
        return invoker.request(endpoint, method, path, headers, body, timeout_s, auth=auth)

    def open_stream(
        self, endpoint: str, method: str, path: str, headers: Mapping[str, str], timeout_s: float
    ) -> DuplexStream:
        """A full-duplex HTTP/2 request to a plain `http(s)://` endpoint, signed (bidirectional mode).

        Raises `InvokerError` for a Lambda or Cloud Run deployment (request/response only), or when
        the endpoint cannot be reached over HTTP/2.
        """
        if not endpoint.startswith(("http://", "https://")):
            raise InvokerError(f"{endpoint}: only http(s):// deployments are invoked over HTTP/2")
        if self.signer is not None:
            identity = self.signer.headers(path)
            headers = {**{k: v for k, v in headers.items() if k.lower() not in identity}, **identity}
        return self.streams.open_stream(endpoint, method, path, headers, timeout_s)

    def close(self) -> None:
        """Close every invoker built so far that can be closed, and the HTTP/2 connections."""
        for invoker in [self.http, *self._built.values(), self.streams]:
            close = getattr(invoker, "close", None)
            if callable(close):
                close()
