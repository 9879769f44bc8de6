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

from control_plane.errors import BadRequest

LAMBDA_ARN = re.compile(
    r"^arn:aws[a-z-]*:lambda:(?P<region>[a-z0-9-]+):(?P<account>\d{12}):function:(?P<name>[A-Za-z0-9_-]{1,64})"
    r"(?::(?P<qualifier>[A-Za-z0-9$_-]{1,128}))?$"
)
"""A Lambda function ARN, optionally qualified (`:VERSION`, `:ALIAS` or `:$LATEST`)."""

ROLE_ARN = re.compile(r"^arn:aws[a-z-]*:iam::\d{12}:role/[\w+=,.@/-]{1,512}$")
CLOUD_RUN_NAME = re.compile(r"^projects/[^/]+/locations/[^/]+/services/[^/]+$")


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
