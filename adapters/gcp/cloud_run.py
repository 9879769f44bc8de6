"""`control_plane.ports.Invoker` for Cloud Run: Google ID tokens on top of the plain HTTP invoker.

A Cloud Run service that requires authentication (the default) accepts a request only with a
Google-signed OpenID Connect ID token whose audience (`aud`) is the service's `*.run.app` URL or
one of its custom audiences, from a principal holding `roles/run.invoker` on the service. For each
request `CloudRunInvoker`:

1. resolves the endpoint: a service name `projects/P/locations/L/services/S` becomes the service's
   URL (google-cloud-run `ServicesClient.get_service(name=...).uri`, cached for the life of the
   invoker: a service keeps its URL); an `https://` URL is used as it is;
2. picks the audience: `auth["google_id_token"]["audience"]` when the deployment names one, else
   the origin of the URL (`https://svc-abc-ew.a.run.app`, without path);
3. gets an ID token for that audience (google-auth, application default credentials, see
   `fetch_google_id_token`), cached per audience until 5 minutes before its `exp`;
4. sends it as `authorization: Bearer <token>`, or as `x-serverless-authorization: Bearer <token>`
   when the deployment's own headers already carry an `authorization` (Cloud Run checks either and
   passes the other on to the service), through the wrapped HTTP invoker;
5. on a 401 or 403 answer, drops the cached token and tries once more with a new one (a revoked or
   rotated key, a token the service no longer accepts). A second refusal is returned as the answer,
   its body prefixed with what to fix (audience, or `roles/run.invoker`). A refusal from the
   Restate SDK itself (it carries `x-restate-server`: the service did not accept Torpor's request
   identity) is returned at once, as it is.

Failures to get a URL or a token (no credentials, token endpoint refusing, service not found, the
`gcp` extra not installed) raise `InvokerError` naming the fix. From AWS (no Google key files), ID
tokens come through workload identity federation (`adapters.gcp.workload_identity`). google-auth
and google-cloud-run are imported on first use only.
"""

from __future__ import annotations

import base64
import binascii
import functools
import json
import os
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from adapters.gcp.workload_identity import credential_config, workload_identity_id_token
from adapters.http.invoker import HttpInvoker
from control_plane.ports import HttpReply, Invoker, InvokerError

__all__ = ["NO_CREDENTIALS_FIX", "CloudRunInvoker", "IdTokenFetcher", "fetch_google_id_token"]

IdTokenFetcher = Callable[[str], str]
"""`fetch(audience) -> ID token` (a JWT). Raises `InvokerError`, or a `google.auth.exceptions` error."""

REFRESH_MARGIN_S = 300.0
"""A cached token is replaced this many seconds before its `exp` (or halfway to it, if sooner)."""

UNKNOWN_EXPIRY_TTL_S = 300.0
"""How long a token whose `exp` cannot be read (not a JWT) is reused."""

TOKEN_FETCH_TIMEOUT_S = 30.0
"""The default fetcher's bound on each HTTP request to a token endpoint or the metadata server."""

LOOKUP_TIMEOUT_S = 30.0
"""Bound on one `get_service` call that resolves a service name (within the request's timeout)."""

NO_CREDENTIALS_FIX = (
    "on AWS, set TORPOR_GOOGLE_CREDENTIAL_CONFIG to a workload identity federation configuration "
    "(docs/cloud-run.md); else set GOOGLE_APPLICATION_CREDENTIALS to a service-account key file, run Torpor "
    "on Google Cloud (its service account, from the metadata server), or run `gcloud auth application-default login "
    "--impersonate-service-account=SA@PROJECT.iam.gserviceaccount.com`"
)
"""The ways to give Torpor credentials that can mint Google ID tokens."""

_MISSING_EXTRA = "Cloud Run deployments need google-auth and google-cloud-run: pip install 'torpor[gcp]'"


@dataclass(frozen=True, slots=True)
class _Token:
    value: str
    fresh_until: float  # seconds since the UNIX epoch; reused before this


class CloudRunInvoker:
    """Sends requests to Cloud Run services with a Google ID token (see the module doc). Thread-safe.

    Args:
        http: The invoker that carries the requests; None: a new `HttpInvoker` (closed by `close`).
        id_token_fetcher: `fetch(audience) -> token`; None: `fetch_google_id_token` (application
            default credentials). Called at most once at a time per audience.
        services_client_factory: Builds (once, on first use) the client that resolves service names:
            an object with `get_service(name=..., timeout=...)` returning something with a `uri`
            (`str`, the service URL); None: `google.cloud.run_v2.ServicesClient()`.
        clock: Seconds since the UNIX epoch (for token expiry); None: `time.time`.
    """

    def __init__(
        self,
        http: Invoker | None = None,
        *,
        id_token_fetcher: IdTokenFetcher | None = None,
        services_client_factory: Callable[[], Any] | None = None,
        clock: Callable[[], float] | None = None,
    ) -> None:
        self._own_http = http is None
        self._http: Invoker = http if http is not None else HttpInvoker()
        self._fetch = id_token_fetcher or fetch_google_id_token
        self._services_client_factory = services_client_factory or _default_services_client
        self._services_client: Any = None
        self._clock = clock or time.time
        self._lock = threading.Lock()  # guards the dicts and the client below; never held while waiting
        self._tokens: dict[str, _Token] = {}
        self._urls: dict[str, str] = {}
        self._key_locks: dict[tuple[str, str], threading.Lock] = {}

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
        """Send `method url+path` with an ID token and return the answer (see the module doc).

        Args:
            endpoint: The service's URL (`https://svc-abc-ew.a.run.app[/prefix]`) or its name
                (`projects/P/locations/L/services/S`).
            method: HTTP method, e.g. `POST`.
            path: Path below the endpoint, starting with `/`.
            headers: Request headers (the deployment's additional headers among them).
            body: Request body bytes.
            timeout_s: Everything (resolving the name, fetching a token, the exchange and its one
                retry) must be done within this many seconds.
            auth: The deployment's auth, `{"google_id_token": {"audience"?: str}}`; None or
                without an audience: the URL's origin is the audience.

        Returns:
            The service's answer. A 401 or 403 after the retry comes back with a body that starts
            with what to fix, followed by Cloud Run's own body.

        Raises:
            InvokerError: The name could not be resolved, no ID token could be had, the service could
                not be reached, or the time ran out.
        """
        deadline = time.monotonic() + timeout_s
        url = self.service_url(endpoint, timeout_s)
        audience = audience_for(url, auth)
        has_authorization = any(name.lower() == "authorization" for name in headers)
        header = "x-serverless-authorization" if has_authorization else "authorization"
        sent = {name: value for name, value in headers.items() if name.lower() != header}
        reply: HttpReply | None = None
        for _ in range(2):
            token = self.id_token(audience, max(deadline - time.monotonic(), 0.0))
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise InvokerError(f"no time left to call {url} within {timeout_s:.1f} s (fetching an ID token)")
            sent[header] = f"Bearer {token}"
            reply = self._http.request(url, method, path, sent, body, remaining, auth=None)
            if reply.status not in (401, 403) or _from_sdk(reply):
                return reply
            self.forget_token(audience, token)
        assert reply is not None
        return _explain_refusal(reply, audience)

    # --- service names ----------------------------------------------------------------------------

    def service_url(self, endpoint: str, timeout_s: float = LOOKUP_TIMEOUT_S) -> str:
        """The URL to send requests to: `endpoint` itself, or the URL of the service it names.

        Args:
            endpoint: An `http(s)://` URL, or `projects/P/locations/L/services/S`.
            timeout_s: Bound on the look-up (at most `LOOKUP_TIMEOUT_S` is used).

        Returns:
            The URL without a trailing `/`, e.g. `https://svc-abc-ew.a.run.app`.

        Raises:
            InvokerError: The service does not exist, cannot be read by these credentials, has no
                URL yet, or the look-up failed (no credentials, `gcp` extra missing, timeout).
        """
        if not endpoint.startswith("projects/"):
            return endpoint.rstrip("/")
        with self._lock:
            if endpoint in self._urls:
                return self._urls[endpoint]
        with self._held(("url", endpoint), timeout_s, f"resolving {endpoint}"):
            with self._lock:
                if endpoint in self._urls:  # another thread resolved it while this one waited
                    return self._urls[endpoint]
            url = self._look_up(endpoint, min(timeout_s, LOOKUP_TIMEOUT_S))
            with self._lock:
                self._urls[endpoint] = url
            return url

    def _look_up(self, name: str, timeout_s: float) -> str:
        api_errors, auth_errors = _google_exceptions()
        try:
            service = self._client(timeout_s).get_service(name=name, timeout=timeout_s)
        except api_errors.NotFound as exc:
            raise InvokerError(
                f"Cloud Run service {name} not found: check the project, region and service name "
                "(`gcloud run services list`)"
            ) from exc
        except api_errors.PermissionDenied as exc:
            raise InvokerError(
                f"not allowed to read Cloud Run service {name} (needs run.services.get, e.g. roles/run.viewer), "
                "or register the service by its URL instead"
            ) from exc
        except auth_errors.DefaultCredentialsError as exc:
            raise InvokerError(f"no Google credentials to look up {name}: {NO_CREDENTIALS_FIX}") from exc
        except (api_errors.GoogleAPIError, auth_errors.GoogleAuthError) as exc:
            raise InvokerError(f"could not look up Cloud Run service {name}: {exc}") from exc
        url = str(getattr(service, "uri", "") or "")
        if not url.startswith(("https://", "http://")):
            raise InvokerError(f"Cloud Run service {name} has no URL yet: is it deployed and ready?")
        return url.rstrip("/")

    def _client(self, timeout_s: float) -> Any:
        with self._held(("client", ""), timeout_s, "the Cloud Run services client"):
            with self._lock:
                client = self._services_client
            if client is None:
                client = self._services_client_factory()  # may be slow (credentials): not under _lock
                with self._lock:
                    self._services_client = client
            return client

    # --- ID tokens --------------------------------------------------------------------------------

    def id_token(self, audience: str, timeout_s: float = TOKEN_FETCH_TIMEOUT_S) -> str:
        """A Google ID token for `audience`: the cached one while fresh, else a new one (cached).

        A token is fresh until `REFRESH_MARGIN_S` before its `exp` (or halfway to `exp` if that is
        sooner); one without a readable `exp` for `UNKNOWN_EXPIRY_TTL_S`. Concurrent callers for one
        audience share one fetch.

        Args:
            audience: The `aud` the token must carry.
            timeout_s: How long to wait for another thread's fetch of the same audience.

        Raises:
            InvokerError: No credentials, the token endpoint refused, or it could not be reached.
        """
        token = self._fresh_token(audience)
        if token is not None:
            return token
        with self._held(("token", audience), timeout_s, f"an ID token for {audience}"):
            token = self._fresh_token(audience)  # another thread may have fetched it meanwhile
            if token is not None:
                return token
            value = self._fetch_token(audience)
            now = self._clock()
            expiry = jwt_expiry(value)
            if expiry is None:
                fresh_until = now + UNKNOWN_EXPIRY_TTL_S
            else:
                fresh_until = expiry - min(REFRESH_MARGIN_S, max(expiry - now, 0.0) / 2)
            with self._lock:
                self._tokens[audience] = _Token(value, fresh_until)
            return value

    def forget_token(self, audience: str, token: str | None = None) -> None:
        """Drop the cached token for `audience` (only if it is still `token`, when given)."""
        with self._lock:
            cached = self._tokens.get(audience)
            if cached is not None and (token is None or cached.value == token):
                del self._tokens[audience]

    def _fresh_token(self, audience: str) -> str | None:
        with self._lock:
            cached = self._tokens.get(audience)
        if cached is not None and self._clock() < cached.fresh_until:
            return cached.value
        return None

    def _fetch_token(self, audience: str) -> str:
        try:  # google-auth alone: the Lambda bundle has no google-api-core (a service name needs it, a URL not)
            from google.auth import exceptions as auth_errors
        except ImportError as exc:
            if self._fetch is fetch_google_id_token:
                raise InvokerError(_MISSING_EXTRA) from exc
            return self._fetch(audience)  # an injected fetcher may do without google-auth
        try:
            token = self._fetch(audience)
        except auth_errors.DefaultCredentialsError as exc:
            raise InvokerError(f"no Google credentials for an ID token ({_reason(exc)}): {NO_CREDENTIALS_FIX}") from exc
        except auth_errors.RefreshError as exc:
            raise InvokerError(
                f"the Google token endpoint refused an ID token for audience {audience}: {_reason(exc)}. "
                "Check that the service-account key is valid (its key and service account not deleted or disabled)"
            ) from exc
        except auth_errors.TransportError as exc:
            raise InvokerError(f"could not reach the Google token endpoint for an ID token: {_reason(exc)}") from exc
        except auth_errors.GoogleAuthError as exc:
            raise InvokerError(f"no ID token for audience {audience}: {_reason(exc)}") from exc
        if not isinstance(token, str) or not token:
            raise InvokerError(f"no ID token for audience {audience}: the fetcher returned {token!r}")
        return token

    # --- helpers ----------------------------------------------------------------------------------

    def _held(self, key: tuple[str, str], timeout_s: float, what: str) -> _Held:
        with self._lock:
            lock = self._key_locks.setdefault(key, threading.Lock())
        return _Held(lock, timeout_s, what)

    def close(self) -> None:
        """Close the HTTP invoker if this invoker built it, and the services client if it was built."""
        if self._own_http:
            close = getattr(self._http, "close", None)
            if callable(close):
                close()
        with self._lock:
            client, self._services_client = self._services_client, None
        transport = getattr(client, "transport", None)
        if transport is not None and callable(getattr(transport, "close", None)):
            transport.close()


class _Held:
    """Holds `lock` for a `with` block, waiting at most `timeout_s` for it (else `InvokerError`)."""

    def __init__(self, lock: threading.Lock, timeout_s: float, what: str) -> None:
        self._lock, self._timeout_s, self._what = lock, timeout_s, what

    def __enter__(self) -> None:
        if not self._lock.acquire(timeout=max(self._timeout_s, 0.0)):
            raise InvokerError(f"timed out after {self._timeout_s:.1f} s waiting for {self._what}")

    def __exit__(self, *exc_info: object) -> None:
        self._lock.release()


def audience_for(url: str, auth: Mapping[str, object] | None) -> str:
    """The ID token audience for a request to `url`: the deployment's `audience`, else `url`'s origin.

    >>> audience_for("https://svc-abc-ew.a.run.app/restate", None)
    'https://svc-abc-ew.a.run.app'
    """
    options = (auth or {}).get("google_id_token")
    if isinstance(options, Mapping):
        audience = options.get("audience")
        if isinstance(audience, str) and audience:
            return audience
    parts = urlsplit(url)
    return f"{parts.scheme}://{parts.netloc}"


def jwt_expiry(token: str) -> float | None:
    """The `exp` claim (seconds since the UNIX epoch) of a JWT, read without checking it; None if unreadable."""
    segments = token.split(".")
    if len(segments) != 3:
        return None
    payload = segments[1] + "=" * (-len(segments[1]) % 4)
    try:
        claims = json.loads(base64.urlsafe_b64decode(payload))
    except (binascii.Error, ValueError):
        return None
    exp = claims.get("exp") if isinstance(claims, dict) else None
    if isinstance(exp, bool) or not isinstance(exp, int | float):
        return None
    return float(exp)


def _from_sdk(reply: HttpReply) -> bool:
    """True if `reply` came from the Restate SDK behind Cloud Run (it names itself in `x-restate-server`)."""
    return "x-restate-server" in reply.headers


def _explain_refusal(reply: HttpReply, audience: str) -> HttpReply:
    """`reply` (401 or 403 from Cloud Run) with a first line saying what to fix."""
    if reply.status == 401:
        hint = (
            f"Cloud Run refused the ID token for audience {audience}: the audience must be the service's "
            "run.app URL or one of its custom audiences"
        )
    else:
        hint = (
            "Cloud Run refused Torpor's service account: grant it roles/run.invoker on the service "
            f"(token audience {audience})"
        )
    headers = {k: v for k, v in reply.headers.items() if k not in ("content-length", "content-encoding")}
    headers["content-type"] = "text/plain; charset=utf-8"
    return HttpReply(status=reply.status, headers=headers, body=f"{hint}. It said: ".encode() + reply.body)


def _reason(exc: BaseException) -> str:
    """A google-auth error's message: its first argument (the others are raw response data)."""
    return str(exc.args[0]) if exc.args else type(exc).__name__


def _google_exceptions() -> tuple[Any, Any]:
    """`(google.api_core.exceptions, google.auth.exceptions)`, imported now; `InvokerError` if absent."""
    try:
        from google.api_core import exceptions as api_errors
        from google.auth import exceptions as auth_errors
    except ImportError as exc:
        raise InvokerError(_MISSING_EXTRA) from exc
    return api_errors, auth_errors


def _default_services_client() -> Any:
    """`google.cloud.run_v2.ServicesClient()` with the application default credentials."""
    try:
        from google.cloud import run_v2
    except ImportError as exc:
        raise InvokerError(_MISSING_EXTRA) from exc
    _, auth_errors = _google_exceptions()
    try:
        return run_v2.ServicesClient()
    except auth_errors.DefaultCredentialsError as exc:
        raise InvokerError(f"no Google credentials to look up Cloud Run services: {NO_CREDENTIALS_FIX}") from exc


def fetch_google_id_token(audience: str, request: Any = None) -> str:
    """A new Google ID token for `audience`, from the application default credentials.

    Where the credentials come from, in order:

    0. workload identity federation (`adapters.gcp.workload_identity`): the credential configuration
       `TORPOR_GOOGLE_CREDENTIAL_CONFIG` holds or names, or a `GOOGLE_APPLICATION_CREDENTIALS` file of
       type `external_account`: AWS credentials exchanged at Google's STS, then `generateIdToken` for
       the service account it impersonates;
    1. `GOOGLE_APPLICATION_CREDENTIALS`: a service-account key file (a JWT assertion signed with the
       key is exchanged at the key's `token_uri`) or an impersonated-service-account file;
    2. without it, gcloud's application default credentials file when it is an impersonated service
       account (`gcloud auth application-default login --impersonate-service-account=SA`);
    3. the metadata server (Compute Engine, Cloud Run, GKE, App Engine): its service account.

    A plain `gcloud auth application-default login` (user credentials) cannot mint ID tokens for an
    audience; impersonate a service account instead.

    Args:
        audience: The `aud` of the token, e.g. `https://svc-abc-ew.a.run.app`.
        request: A `google.auth.transport.Request`; None: a requests-based one whose every HTTP
            request is bounded by `TOKEN_FETCH_TIMEOUT_S`.

    Returns:
        The token, a JWT.

    Raises:
        InvokerError: google-auth is not installed.
        google.auth.exceptions.DefaultCredentialsError: None of the above is available.
        google.auth.exceptions.RefreshError: The token endpoint refused.
        google.auth.exceptions.TransportError: The token endpoint could not be reached.
    """
    try:
        import google.oauth2.id_token
    except ImportError as exc:
        raise InvokerError(_MISSING_EXTRA) from exc
    if request is None:
        request = _bounded_request(TOKEN_FETCH_TIMEOUT_S)
    federation = credential_config()
    if federation is not None:
        return workload_identity_id_token(federation, audience, request)
    if not os.environ.get("GOOGLE_APPLICATION_CREDENTIALS"):
        credentials = gcloud_impersonated_id_token_credentials(audience)
        if credentials is not None:
            credentials.refresh(request)
            return str(credentials.token)
    return str(google.oauth2.id_token.fetch_id_token(request, audience))


def gcloud_impersonated_id_token_credentials(audience: str) -> Any:
    """ID-token credentials from gcloud's application default credentials file, or None.

    The file is `$CLOUDSDK_CONFIG/application_default_credentials.json` (default
    `~/.config/gcloud/`, `%APPDATA%\\gcloud\\` on Windows); it counts only when its `type` is
    `impersonated_service_account`. Raises `google.auth.exceptions.DefaultCredentialsError` for a
    malformed file of that type.
    """
    from google.auth import exceptions, impersonated_credentials

    path = _gcloud_adc_path()
    try:
        info = json.loads(path.read_text())
    except (OSError, ValueError):
        return None
    if not isinstance(info, dict) or info.get("type") != "impersonated_service_account":
        return None
    try:
        target = impersonated_credentials.Credentials.from_impersonated_service_account_info(info)
    except (ValueError, KeyError, TypeError, AttributeError, exceptions.GoogleAuthError) as exc:
        raise exceptions.DefaultCredentialsError(f"{path} is not valid impersonated credentials: {exc}") from exc
    return impersonated_credentials.IDTokenCredentials(target, target_audience=audience, include_email=True)


def _gcloud_adc_path() -> Path:
    config = os.environ.get("CLOUDSDK_CONFIG")
    if config:
        base = Path(config)
    elif os.name == "nt":
        base = Path(os.environ.get("APPDATA", "")) / "gcloud"
    else:
        base = Path.home() / ".config" / "gcloud"
    return base / "application_default_credentials.json"


@functools.cache
def _bounded_request_class() -> Any:
    """A subclass of `google.auth.transport.requests.Request` that caps each request's timeout at `bound_s`."""
    import google.auth.transport.requests as transport

    class BoundedRequest(transport.Request):  # type: ignore[misc]
        bound_s = TOKEN_FETCH_TIMEOUT_S

        def __call__(self, *args: Any, **kwargs: Any) -> Any:
            given = kwargs.get("timeout")
            kwargs["timeout"] = self.bound_s if not isinstance(given, int | float) else min(given, self.bound_s)
            return super().__call__(*args, **kwargs)

    return BoundedRequest


def _bounded_request(timeout_s: float) -> Any:
    """A `google.auth.transport.requests.Request` whose HTTP requests each last at most `timeout_s`."""
    request = _bounded_request_class()()
    request.bound_s = timeout_s
    return request
