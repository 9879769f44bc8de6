"""`control_plane.ports.Invoker` for AWS Lambda deployments: boto3 `Invoke`, one request at a time.

A Lambda deployment's endpoint is a function ARN with its published version
(`arn:aws:lambda:eu-west-1:123456789012:function:NAME:3`). Each request becomes one synchronous
`Invoke` (`InvocationType=RequestResponse`) whose payload is an API-Gateway-proxy event, the shape
the Restate SDKs' Lambda adapters take (restate-sdk `restate/aws_lambda.py`):

    request:  {"path": "/invoke/Greeter/greet", "httpMethod": "POST", "headers": {...},
               "body": "<base64 of the body>", "isBase64Encoded": true}
    response: {"statusCode": 200, "headers": {...}, "body": "<base64>", "isBase64Encoded": true}

Requests announce `accept-encoding: zstd`; a response body with `content-encoding: zstd` is
decompressed here (the SDK compresses bodies over 3 MiB when it can). Requests go uncompressed:
whether a deployment can decompress them depends on its runtime, which the invoker cannot see.

What becomes an `InvokerError` (a failed attempt, retried by the engine's policy):

- a payload over Lambda's 6 MB synchronous-invoke limit, request or response (the message names the
  limit and the fix);
- throttling (`TooManyRequestsException`) that lasts the whole `timeout_s`: retried here with
  exponential backoff first, since throttling is transient;
- a function error (an exception the handler did not catch, a crash, a timeout of the function):
  the message carries Lambda's `errorType` and `errorMessage`;
- any other refusal of the Lambda API (function not found, access denied, ...), naming the ARN and
  the fix; no answer within `timeout_s`; the Lambda API unreachable.

Credentials come from the session (botocore's default chain unless one is given). A deployment
registered with `assume_role_arn` is invoked with that role's credentials (STS `AssumeRole`), cached
per role until 5 minutes before they expire.
"""

from __future__ import annotations

import base64
import io
import json
import math
import random
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

import boto3
import zstandard
from botocore.config import Config
from botocore.exceptions import (
    BotoCoreError,
    ClientError,
    ConnectTimeoutError,
    EndpointConnectionError,
    NoCredentialsError,
    ReadTimeoutError,
)

from adapters.aws.client_errors import error_code, error_message
from control_plane.observability import record
from control_plane.ports import HttpReply, InvokerError

MAX_PAYLOAD_BYTES = 6 * 1024 * 1024
"""Lambda's limit on a synchronous invocation's payload, request and response each: 6 MB (6,291,456 bytes).
See https://docs.aws.amazon.com/lambda/latest/dg/gettingstarted-limits.html"""

MAX_DECOMPRESSED_BYTES = 64 * 1024 * 1024
"""A zstd response body may expand to at most this many bytes; beyond it the answer is refused."""

ROLE_SESSION_NAME = "torpor"
"""`RoleSessionName` of the sessions Torpor opens with `AssumeRole` (shown in CloudTrail)."""

_THROTTLED = frozenset({"TooManyRequestsException", "ThrottlingException", "Throttling", "EC2ThrottledException"})
_TOO_LARGE_REQUEST = frozenset({"RequestEntityTooLargeException", "RequestTooLargeException"})
_NOT_FOUND = frozenset({"ResourceNotFoundException"})
_DENIED = frozenset(
    {
        "AccessDeniedException",
        "AccessDenied",
        "UnrecognizedClientException",
        "InvalidSignatureException",
        "ExpiredTokenException",
        "InvalidClientTokenId",
        "KMSAccessDeniedException",
    }
)
_RESPONSE_TOO_LARGE = "Function.ResponseSizeTooLarge"
_CONNECT_TIMEOUT_S = 10.0  # at most this long to open a connection to the Lambda API, within timeout_s
_BACKOFF_INITIAL_S = 0.05  # first wait after a throttled Invoke; doubles up to _BACKOFF_MAX_S
_BACKOFF_MAX_S = 2.0
_REFRESH_BEFORE = timedelta(minutes=5)  # assumed-role credentials are renewed this long before they expire
_ROLE_DURATION_S = 3600  # lifetime asked for assumed-role credentials (STS' default)
_STS_TIMEOUT_S = 10.0


@dataclass
class _Role:
    """Assumed credentials of one role, and the Lambda clients signing with them (per timeout bucket)."""

    credentials: Mapping[str, str]
    expires_at: datetime
    clients: dict[int, Any] = field(default_factory=dict)


class LambdaInvoker:
    """Sends Restate service-protocol requests to Lambda function versions with boto3 `Invoke`.

    Thread-safe: boto3 clients are shared between threads; they are built (and roles assumed) under
    locks. One client is kept per role and per timeout bucket (`timeout_s` rounded up to whole
    seconds), since botocore fixes the read timeout when it builds a client.

    Args:
        region: Region of the Lambda API (and of STS) the clients call, e.g. `eu-west-1`.
        endpoint_url: Another Lambda API endpoint, e.g. the local emulator
            (`adapters.local.lambda_emulator`) or a moto server; None: AWS's.
        sts_endpoint_url: Another STS endpoint for `AssumeRole` (the local emulator answers it too);
            None: AWS's regional one.
        client: A ready Lambda client used for every request without a role, as it is: its own
            timeouts and retries apply, not `timeout_s` (tests hand in a client with a `Stubber`).
        session: The boto3 session clients are built from (its credentials sign the requests, or
            call `AssumeRole`); None: `boto3.Session(region_name=region)`.
        sts_client: A ready STS client for `AssumeRole`; None: built from `session`.
        max_pool_connections: Connections each Lambda client keeps open at most (concurrent
            invocations through one client wait beyond it).
        now: The wall clock, timezone-aware, used to tell when assumed credentials expire.
    """

    def __init__(
        self,
        region: str,
        *,
        endpoint_url: str | None = None,
        sts_endpoint_url: str | None = None,
        client: Any = None,
        session: boto3.Session | None = None,
        sts_client: Any = None,
        max_pool_connections: int = 64,
        now: Callable[[], datetime] = lambda: datetime.now(UTC),
    ) -> None:
        self.region = region
        self.endpoint_url = endpoint_url
        self.sts_endpoint_url = sts_endpoint_url
        self._client = client
        self._session = session if session is not None else boto3.Session(region_name=region)
        self._sts = sts_client
        self._max_pool_connections = max_pool_connections
        self._now = now
        self._lock = threading.Lock()  # guards the caches and the (not thread-safe) session
        self._clients: dict[int, Any] = {}  # without a role, per timeout bucket
        self._roles: dict[str, _Role] = {}
        self._role_locks: dict[str, threading.Lock] = {}

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
        """Invoke the function version `endpoint` with `method path` and `body`; return its answer.

        Args:
            endpoint: The function's ARN, qualified with its version
                (`arn:aws:lambda:REGION:ACCOUNT:function:NAME:3`); any `FunctionName` form `Invoke`
                takes works.
            method: HTTP method of the request the handler sees, e.g. `POST`.
            path: Path the handler sees, starting with `/` (e.g. `/invoke/Greeter/greet`).
            headers: Request headers (sent in the event; `accept-encoding: zstd` is added).
            body: Request body bytes (sent base64-encoded in the event).
            timeout_s: The answer must arrive within this many seconds, throttled retries included;
                it becomes the client's read timeout, rounded up to whole seconds.
            auth: The deployment's auth: `{"assume_role_arn": ARN}` invokes with that role's
                credentials; None or empty: the session's own.

        Returns:
            The handler's status, headers (lower-case names; multi-value headers joined with ", ")
            and body (zstd decompressed).

        Raises:
            InvokerError: a payload over 6 MB, throttling for the whole `timeout_s`, a function
                error, a refusal of the Lambda or STS API, no answer in time, an unreachable API or
                an answer that is not an API-Gateway-proxy response (see the module doc).
        """
        deadline = time.monotonic() + timeout_s
        role = _role_of(auth)
        payload = _event(method, path, headers, body)
        if len(payload) > MAX_PAYLOAD_BYTES:
            raise InvokerError(
                f"the request to {endpoint} takes {len(payload)} bytes, more than Lambda's 6 MB payload limit for "
                f"synchronous invocations ({MAX_PAYLOAD_BYTES} bytes; the journal is sent whole, base64-encoded, "
                "with every attempt): keep the values passed through ctx.run, state, calls and awakeables smaller, "
                "or serve this service over HTTP"
            )
        backoff_s = _BACKOFF_INITIAL_S
        throttled = 0
        last_throttle = ""
        while True:
            remaining_s = deadline - time.monotonic()
            if remaining_s <= 0 and throttled:  # the time went on throttled calls: say so
                raise InvokerError(last_throttle)
            if remaining_s <= 0:
                raise InvokerError(f"no answer from Lambda function {endpoint} within {timeout_s:.1f} s")
            client = self._lambda_client(role, remaining_s)
            try:
                record("lambda Invoke")
                response = client.invoke(FunctionName=endpoint, InvocationType="RequestResponse", Payload=payload)
            except ClientError as exc:
                code = error_code(exc) or "Unknown"
                if code not in _THROTTLED:
                    raise InvokerError(_describe_refusal(exc, endpoint, role)) from exc
                throttled += 1
                last_throttle = (
                    f"Lambda throttled {endpoint} {throttled} time(s) within {timeout_s:.1f} s ({code}: "
                    f"{error_message(exc)}); raise the function's reserved concurrency or the account's "
                    "concurrent executions quota (Service Quotas)"
                )
                wait_s = max(min(backoff_s, _BACKOFF_MAX_S) * random.uniform(0.5, 1.0), _retry_after_s(exc))
                if time.monotonic() + wait_s >= deadline:
                    raise InvokerError(last_throttle) from exc
                time.sleep(wait_s)  # backoff between throttled calls, bounded by the deadline
                backoff_s *= 2
                continue
            except BotoCoreError as exc:
                raise InvokerError(self._describe_transport(exc, endpoint, timeout_s)) from exc
            return _reply(endpoint, response)

    def close(self) -> None:
        """Close the connections of every client built here (an injected client is left open)."""
        with self._lock:
            clients = [*self._clients.values(), *(c for r in self._roles.values() for c in r.clients.values())]
            self._clients.clear()
            self._roles.clear()
        for client in clients:
            client.close()

    # --- clients and credentials ----------------------------------------------------------------

    def _lambda_client(self, role: str | None, remaining_s: float) -> Any:
        """The Lambda client for `role` (None: the session's credentials) with a read timeout ≥ `remaining_s`."""
        if role is None and self._client is not None:
            return self._client
        bucket = max(1, math.ceil(remaining_s))
        assumed = self._assumed(role) if role is not None else None
        with self._lock:
            cache = assumed.clients if assumed is not None else self._clients
            client = cache.get(bucket)
            if client is None:
                config = Config(
                    region_name=self.region,
                    connect_timeout=min(float(bucket), _CONNECT_TIMEOUT_S),
                    read_timeout=bucket,
                    retries={"total_max_attempts": 1, "mode": "standard"},  # throttling is retried in request()
                    max_pool_connections=self._max_pool_connections,
                    tcp_keepalive=True,  # long invocations: keep NAT gateways from dropping the idle connection
                )
                credentials: Mapping[str, str] = assumed.credentials if assumed is not None else {}
                client = self._session.client(
                    "lambda", region_name=self.region, endpoint_url=self.endpoint_url, config=config, **credentials
                )
                cache[bucket] = client
            return client

    def _assumed(self, role: str) -> _Role:
        """`role`'s credentials, assumed once and renewed 5 minutes before they expire. Raises `InvokerError`."""
        with self._lock:
            lock = self._role_locks.setdefault(role, threading.Lock())
        with lock:  # one AssumeRole per role at a time; other roles go on
            with self._lock:
                current = self._roles.get(role)
            if current is not None and self._now() < current.expires_at - _REFRESH_BEFORE:
                return current
            try:
                answer = self._sts_client().assume_role(
                    RoleArn=role, RoleSessionName=ROLE_SESSION_NAME, DurationSeconds=_ROLE_DURATION_S
                )
            except ClientError as exc:
                code = error_code(exc) or "Unknown"
                raise InvokerError(
                    f"could not assume role {role} ({code}: {error_message(exc)}): let Torpor's own "
                    "identity call sts:AssumeRole on it, and the role's trust policy allow that identity"
                ) from exc
            except BotoCoreError as exc:
                raise InvokerError(f"could not assume role {role}: {exc}") from exc
            granted = answer["Credentials"]
            expires_at = granted["Expiration"]
            if expires_at.tzinfo is None:
                expires_at = expires_at.replace(tzinfo=UTC)
            fresh = _Role(
                credentials={
                    "aws_access_key_id": granted["AccessKeyId"],
                    "aws_secret_access_key": granted["SecretAccessKey"],
                    "aws_session_token": granted["SessionToken"],
                },
                expires_at=expires_at,
            )
            with self._lock:
                self._roles[role] = fresh  # the old clients may still be in use: garbage, not closed
            return fresh

    def _sts_client(self) -> Any:
        with self._lock:
            if self._sts is None:
                config = Config(region_name=self.region, connect_timeout=_STS_TIMEOUT_S, read_timeout=_STS_TIMEOUT_S)
                self._sts = self._session.client(
                    "sts", region_name=self.region, endpoint_url=self.sts_endpoint_url, config=config
                )
            return self._sts

    def _describe_transport(self, exc: BotoCoreError, endpoint: str, timeout_s: float) -> str:
        """A one-line reason for an `Invoke` of `endpoint` that got no answer from the Lambda API."""
        api = self.endpoint_url or f"the Lambda API in {self.region}"
        if isinstance(exc, ReadTimeoutError):
            return f"no answer from Lambda function {endpoint} within {timeout_s:.1f} s"
        if isinstance(exc, ConnectTimeoutError | EndpointConnectionError):
            return f"could not connect to {api} to invoke {endpoint}: {exc}"
        if isinstance(exc, NoCredentialsError):
            return (
                f"no AWS credentials to invoke {endpoint}: configure them (AWS_PROFILE, environment variables, "
                "or an instance or task role)"
            )
        return f"invoking {endpoint} through {api} failed: {type(exc).__name__}: {exc}"


def _role_of(auth: Mapping[str, object] | None) -> str | None:
    role = (auth or {}).get("assume_role_arn")
    if role is not None and not isinstance(role, str):
        raise InvokerError(f"the deployment's assume_role_arn must be a role ARN, not {role!r}")
    return role or None


def _event(method: str, path: str, headers: Mapping[str, str], body: bytes) -> bytes:
    """The API-Gateway-proxy event for one request, as the JSON `Invoke` payload."""
    event_headers = {name.lower(): value for name, value in headers.items()}
    event_headers.setdefault("accept-encoding", "zstd")
    event = {
        "path": path,
        "httpMethod": method,
        "headers": event_headers,
        "body": base64.b64encode(body).decode("ascii"),
        "isBase64Encoded": True,
    }
    return json.dumps(event, separators=(",", ":")).encode("utf-8")


def _reply(endpoint: str, response: Mapping[str, Any]) -> HttpReply:
    """The `HttpReply` in an `Invoke` response. Raises `InvokerError` for a function error or a bad payload."""
    raw = response["Payload"].read()
    if response.get("FunctionError"):
        error_type, message = _function_error(raw)
        if error_type == _RESPONSE_TOO_LARGE:
            raise InvokerError(
                f"the handler's response exceeded Lambda's 6 MB payload limit for synchronous invocations "
                f"({endpoint}: {message}); return less data from handlers and keep the values passed through ctx.run "
                "and state smaller, or serve this service over HTTP"
            )
        raise InvokerError(f"Lambda function {endpoint} failed ({response['FunctionError']}): {error_type}: {message}")
    try:
        answer = json.loads(raw)
        status = int(answer["statusCode"])
        headers = {str(k).lower(): str(v) for k, v in (answer.get("headers") or {}).items()}
        for name, values in (answer.get("multiValueHeaders") or {}).items():
            headers[str(name).lower()] = ", ".join(str(v) for v in values)
        text = answer.get("body") or ""
        body = base64.b64decode(text, validate=True) if answer.get("isBase64Encoded") else text.encode("utf-8")
    except (ValueError, TypeError, KeyError, AttributeError) as exc:
        raise InvokerError(
            f"Lambda function {endpoint} did not answer with an API-Gateway-proxy response "
            f"({type(exc).__name__}: {exc}; payload starts {raw[:120]!r}); is it a Restate SDK Lambda handler?"
        ) from exc
    if "zstd" in headers.get("content-encoding", ""):
        body = _zstd_decompress(endpoint, body)
        headers.pop("content-encoding")
        headers.pop("content-length", None)
    return HttpReply(status=status, headers=headers, body=body)


def _function_error(raw: bytes) -> tuple[str, str]:
    """`(errorType, errorMessage)` of a function error's payload (Lambda's JSON, or its raw text)."""
    try:
        error = json.loads(raw)
    except ValueError:
        return "Unknown", raw[:500].decode("utf-8", "replace")
    if not isinstance(error, dict):
        return "Unknown", str(error)[:500]
    return str(error.get("errorType", "Unknown")), str(error.get("errorMessage", ""))[:2000]


def _zstd_decompress(endpoint: str, body: bytes) -> bytes:
    """Decompress a zstd body (frames with or without their content size). Raises `InvokerError`."""
    try:
        with zstandard.ZstdDecompressor().stream_reader(io.BytesIO(body)) as reader:
            parts: list[bytes] = []
            size = 0
            while chunk := reader.read(1024 * 1024):
                parts.append(chunk)
                size += len(chunk)
                if size > MAX_DECOMPRESSED_BYTES:
                    raise InvokerError(
                        f"the zstd body from {endpoint} expands beyond {MAX_DECOMPRESSED_BYTES} bytes; refused"
                    )
    except zstandard.ZstdError as exc:
        raise InvokerError(f"the zstd body from {endpoint} does not decompress: {exc}") from exc
    return b"".join(parts)


def _retry_after_s(exc: ClientError) -> float:
    """The `Retry-After` a throttled answer carries, in seconds (0 if none)."""
    value = exc.response.get("ResponseMetadata", {}).get("HTTPHeaders", {}).get("retry-after", "")
    try:
        return max(0.0, float(value))
    except ValueError:
        return 0.0


def _describe_refusal(exc: ClientError, endpoint: str, role: str | None) -> str:
    """A one-line reason, with the fix, for an `Invoke` of `endpoint` the Lambda API refused."""
    code, message = error_code(exc) or "Unknown", error_message(exc)
    if code in _TOO_LARGE_REQUEST:
        return (
            f"the request to {endpoint} exceeded Lambda's 6 MB payload limit for synchronous invocations "
            f"({code}: {message}); the journal is sent whole with every attempt: keep the values passed through "
            "ctx.run, state, calls and awakeables smaller, or serve this service over HTTP"
        )
    if code in _NOT_FOUND:
        return (
            f"Lambda function {endpoint} not found ({code}: {message}): check the ARN's region, account, name and "
            "version (aws lambda list-versions-by-function), then register the version that exists"
        )
    if code in _DENIED:
        who = f"role {role}" if role else "Torpor's AWS identity"
        return f"not allowed to invoke {endpoint} ({code}: {message}): grant {who} lambda:InvokeFunction on it" + (
            "" if role else ", or register the deployment with assume_role_arn naming a role that may"
        )
    return f"Lambda refused to invoke {endpoint} ({code}: {message})"
