"""What a deployment registration names: an HTTP endpoint, a Lambda function version, or a Cloud Run
service, and how Torpor is to authenticate when it invokes it.

The body of `POST /deployments` follows Restate's admin API (see docs/deploying.md):

- `{"uri": "http://host:9080"}`: an HTTP endpoint (a local server, or any URL).
- `{"uri": "https://svc-….run.app", "auth": {"google_id_token": {"audience"?}}}`: Cloud Run, with a
  Google ID token (audience: the URL unless given). Restate's spelling `{"GoogleIdToken": {...}}`
  is accepted too. `uri` may also be the service's name, `projects/P/locations/L/services/S`.
- `{"arn": "arn:aws:lambda:REGION:ACCOUNT:function:NAME:VERSION", "assume_role_arn"?}`: a Lambda
  function version, invoked through the Lambda `Invoke` API.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from urllib.parse import urlsplit

from control_plane.errors import BadRequest

LAMBDA_ARN = re.compile(
    r"^arn:aws[a-z-]*:lambda:(?P<region>[a-z0-9-]+):(?P<account>\d{12}):function:(?P<name>[A-Za-z0-9_-]{1,64})"
    r"(?::(?P<qualifier>[A-Za-z0-9$_-]{1,128}))?$"
)
"""A Lambda function ARN, optionally qualified (`:VERSION`, `:ALIAS` or `:$LATEST`)."""

ROLE_ARN = re.compile(r"^arn:aws[a-z-]*:iam::\d{12}:role/[\w+=,.@/-]{1,512}$")
CLOUD_RUN_NAME = re.compile(r"^projects/[^/]+/locations/[^/]+/services/[^/]+$")

HEADER_NAME = re.compile(r"^[!#$%&'*+\-.^_`|~0-9A-Za-z]{1,256}$")
"""An HTTP field name: a token (RFC 9110, section 5.1), at most 256 characters."""
HEADER_VALUE = re.compile(r"^[\t\x20-\x7e]{0,8192}$")
"""A header value Torpor sends: visible ASCII, spaces and tabs (RFC 9110, section 5.5, without
obs-text), no CR, LF or NUL, at most 8,192 characters."""
RESERVED_HEADERS = frozenset(
    {"host", "content-length", "transfer-encoding", "connection", "keep-alive", "upgrade", "te", "trailer",
     "proxy-connection", "expect", "http2-settings"}
)  # fmt: skip
"""Headers the HTTP client sets itself (framing, connection, target): an `additional_headers` entry
naming one would corrupt or re-target every request to the deployment (RFC 9110, section 7.6.1;
RFC 9113, section 8.2.2 forbids the connection-specific ones on HTTP/2)."""


@dataclass(frozen=True, slots=True)
class Registration:
    """A parsed registration: the `endpoint` string the invoker routes on, and its `auth`."""

    endpoint: str
    auth: Mapping[str, object] = field(default_factory=dict)


def lambda_arn_problem(arn: str) -> str | None:
    """Why `arn` cannot be registered as a Lambda deployment without `force`, or None if it can.

    Torpor pins each invocation to the deployment it started on (Restate's rule), so the ARN must
    name a published version: an unqualified ARN, `$LATEST` or an alias can change code under a
    running invocation, whose journal then no longer matches (error 570).
    """
    match = LAMBDA_ARN.match(arn)
    if match is None:
        return f'"{arn}" is not a Lambda function ARN like arn:aws:lambda:eu-west-1:123456789012:function:NAME:3'
    qualifier = match.group("qualifier")
    pin = f"{arn.rsplit(':', 1)[0] if qualifier else arn}:<version>"
    if qualifier is None or qualifier == "$LATEST" or not qualifier.isdigit():
        what = "an unqualified ARN" if qualifier is None else f'the qualifier "{qualifier}"'
        return (
            f"{what} can change the code under a running invocation; register a published version "
            f"({pin}, e.g. from `aws lambda publish-version` or AutoPublishAlias in SAM), "
            'or pass "force": true (torpor deployments register --force) to register it anyway'
        )
    return None


def parse_registration(body: Mapping[str, object], *, force: bool) -> Registration:
    """The endpoint and auth a `POST /deployments` body names.

    Raises `BadRequest` naming the fix: neither or both of `uri` and `arn`, a malformed URI or ARN,
    an unpinned Lambda ARN (unless `force`), a bad `assume_role_arn` or `auth`.
    """
    uri, arn = body.get("uri"), body.get("arn")
    if (uri is None) == (arn is None):
        raise BadRequest(
            'give either "uri" (an HTTP or Cloud Run endpoint, e.g. {"uri": "http://localhost:9080"}) or "arn" '
            '(a Lambda function version, e.g. {"arn": "arn:aws:lambda:eu-west-1:123456789012:function:NAME:3"})'
        )
    if arn is not None:
        if not isinstance(arn, str):
            raise BadRequest('"arn" must be a string')
        problem = lambda_arn_problem(arn)
        if problem is not None and (not force or LAMBDA_ARN.match(arn) is None):
            raise BadRequest(problem)
        auth: dict[str, object] = {}
        role = body.get("assume_role_arn")
        if role is not None:
            if not isinstance(role, str) or not ROLE_ARN.match(role):
                raise BadRequest('"assume_role_arn" must be an IAM role ARN like arn:aws:iam::123456789012:role/NAME')
            auth["assume_role_arn"] = role
        return Registration(arn, auth)
    if not isinstance(uri, str) or not (uri.startswith(("http://", "https://")) or CLOUD_RUN_NAME.match(uri)):
        raise BadRequest(
            '"uri" must be an http:// or https:// URL (e.g. {"uri": "http://localhost:9080"}) or a Cloud Run '
            "service name projects/P/locations/L/services/S"
        )
    if not CLOUD_RUN_NAME.match(uri):
        http_uri_problem(uri)
    auth = _google_auth(body.get("auth"))
    if CLOUD_RUN_NAME.match(uri) and not auth:
        auth = {"google_id_token": {}}
    return Registration(uri.rstrip("/"), auth)


def _google_auth(raw: object) -> dict[str, object]:
    if raw is None:
        return {}
    if not isinstance(raw, Mapping) or len(raw) != 1:
        raise BadRequest('"auth" must be {"google_id_token": {"audience": "..."}} (the audience is optional)')
    ((kind, options),) = raw.items()
    if kind not in ("google_id_token", "GoogleIdToken"):
        raise BadRequest(f'unknown "auth" kind "{kind}"; the one known is "google_id_token"')
    options = options or {}
    if not isinstance(options, Mapping):
        raise BadRequest('"google_id_token" must be an object like {"audience": "https://svc-….run.app"}')
    unknown = sorted(set(options) - {"audience"})
    if unknown:
        raise BadRequest(
            f'"google_id_token" does not support {", ".join(unknown)}: Torpor fetches the token as its own '
            'identity, so grant that service account roles/run.invoker on the service; give only "audience"'
        )
    audience = options.get("audience")
    if audience is not None and not (isinstance(audience, str) and audience):
        raise BadRequest('"audience" must be a non-empty string')
    return {"google_id_token": {"audience": audience} if audience else {}}


def http_uri_problem(uri: str) -> None:
    """Check that `uri` is an `http://` or `https://` URL Torpor can call.

    Raises:
        BadRequest: (400) naming `"uri"` and the fix: control characters or spaces, no host, an
            unclosed IPv6 bracket, a port that is not 1..65535, credentials (`user:password@`,
            refused: they would be shown by `GET /deployments`; pass an `authorization` header in
            `"additional_headers"`), a query or a fragment.
    """
    shown = uri[:200]
    if any(ord(c) <= 0x20 or ord(c) == 0x7F for c in uri):
        raise BadRequest(f'"uri" {shown!r} holds spaces or control characters; percent-encode them')
    try:
        parts = urlsplit(uri)
        port = parts.port
    except ValueError as exc:
        raise BadRequest(f'"uri" {shown!r} is not a valid URL: {exc}') from exc
    if not parts.hostname:
        raise BadRequest(f'"uri" {shown!r} names no host; e.g. {{"uri": "http://localhost:9080"}}')
    if port == 0:
        raise BadRequest(f'"uri" {shown!r}: port 0 is not a port to call; use 1..65535')
    if "@" in parts.netloc:
        raise BadRequest(
            '"uri" must not hold credentials (user:password@): they would be stored and shown by GET /deployments; '
            'give them as a header instead, e.g. "additional_headers": {"authorization": "Basic ..."}'
        )
    if parts.query or parts.fragment or uri.endswith(("?", "#")):
        raise BadRequest(f'"uri" {shown!r} has a query or fragment; a deployment URI is scheme, host, port and path')


def parse_additional_headers(raw: object) -> dict[str, str]:
    """The `"additional_headers"` of a registration: sent with every request to the deployment.

    Returns the headers as given (an absent or null field is `{}`).

    Raises:
        BadRequest: (400) naming `"additional_headers"` and the header: not an object of strings; a
            name that is not an HTTP token (empty, spaces, CR/LF, non-ASCII; `HEADER_NAME`); a value
            with CR, LF, NUL or other control or non-ASCII characters (`HEADER_VALUE`); a name the HTTP
            client sets itself (`RESERVED_HEADERS`: `host`, `content-length`, ...).
    """
    if raw is None:
        return {}
    if not isinstance(raw, dict) or not all(isinstance(v, str) for v in raw.values()):
        raise BadRequest('"additional_headers" must be an object of string values')
    for name, value in raw.items():
        if not HEADER_NAME.match(name):
            raise BadRequest(
                f'"additional_headers": {name[:100]!r} is not an HTTP header name (letters, digits and '
                "!#$%&'*+-.^_`|~, 1 to 256 of them)"
            )
        if name.lower() in RESERVED_HEADERS:
            raise BadRequest(
                f'"additional_headers": {name!r} is set by Torpor\'s HTTP client for each request and cannot be added'
            )
        if not HEADER_VALUE.match(value):
            raise BadRequest(
                f'"additional_headers": the value of {name!r} holds CR, LF, control or non-ASCII characters, or is '
                "longer than 8192; give visible ASCII only"
            )
    return dict(raw)


def parse_metadata(raw: object) -> dict[str, str]:
    """The `"metadata"` of a registration (kept with the deployment, shown by `GET /deployments`):
    an object of string values; absent or null is `{}`. Raises `BadRequest` (400) naming it otherwise."""
    if raw is None:
        return {}
    if not isinstance(raw, dict) or not all(isinstance(v, str) for v in raw.values()):
        raise BadRequest('"metadata" must be an object of string values, e.g. {"team": "billing"}')
    return dict(raw)
