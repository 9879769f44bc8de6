"""A stand-in for API Gateway's IAM authorization (HTTP API, `AWS_IAM` route) in front of a Lambda handler.

`SigV4Gateway` is an httpx transport handler (`httpx.MockTransport(gateway)`): it verifies each
request's SigV4 signature for `execute-api` with the secret of the access key it names (botocore's
signer recomputes it over the signed headers), answers 403 `{"message": "Forbidden"}` as API
Gateway does to an unsigned or badly signed request, and otherwise hands the handler an HTTP API
payload 2.0 event carrying `requestContext.authorizer.iam`, returning the handler's proxy answer.
"""

from __future__ import annotations

import base64
import hmac
import re
import uuid
from collections.abc import Callable, Mapping
from typing import Any

import httpx
from botocore.auth import SigV4Auth
from botocore.awsrequest import AWSRequest
from botocore.credentials import Credentials

from tests.helpers.aws_functions import Context, iam_authorizer

_AUTHORIZATION = re.compile(
    r"^AWS4-HMAC-SHA256 Credential=(?P<key>[^/]+)/(?P<date>\d{8})/(?P<region>[^/]+)/(?P<service>[^/]+)/aws4_request, "
    r"SignedHeaders=(?P<headers>[^,]+), Signature=(?P<signature>[0-9a-f]{64})$"
)


class SigV4Gateway:
    """Verifies SigV4 (`execute-api`, `region`) with `secrets` (access key id -> secret), then runs `handler`.

    Attributes:
        forwarded: How many requests reached the handler.
    """

    def __init__(
        self, handler: Callable[[dict[str, Any], Any], dict[str, Any]], region: str, secrets: Mapping[str, str]
    ) -> None:
        self.handler = handler
        self.region = region
        self.secrets = dict(secrets)
        self.forwarded = 0

    def verified_key(self, request: httpx.Request) -> str | None:
        """The access key id that signed `request` correctly for this region and `execute-api`, else None."""
        match = _AUTHORIZATION.match(request.headers.get("authorization", ""))
        if match is None or (match["region"], match["service"]) != (self.region, "execute-api"):
            return None
        secret = self.secrets.get(match["key"])
        timestamp = request.headers.get("x-amz-date", "")
        if secret is None or not timestamp.startswith(match["date"]):
            return None
        signed = match["headers"].split(";")
        body = request.read()
        copy = AWSRequest(
            method=request.method, url=str(request.url), data=body, headers={h: request.headers[h] for h in signed}
        )
        copy.context["timestamp"] = timestamp
        signer = SigV4Auth(
            Credentials(match["key"], secret, request.headers.get("x-amz-security-token")), "execute-api", self.region
        )
        expected = signer.signature(signer.string_to_sign(copy, signer.canonical_request(copy)), copy)
        return match["key"] if hmac.compare_digest(expected, match["signature"]) else None

    def __call__(self, request: httpx.Request) -> httpx.Response:
        key = self.verified_key(request)
        if key is None:
            return httpx.Response(403, json={"message": "Forbidden"})
        self.forwarded += 1
        body = request.read()
        event = {
            "version": "2.0",
            "routeKey": "$default",
            "rawPath": request.url.raw_path.decode().split("?", 1)[0],
            "rawQueryString": request.url.query.decode(),
            "headers": {k: v for k, v in request.headers.items() if k != "authorization"},
            "requestContext": {
                "http": {"method": request.method, "path": request.url.path, "protocol": "HTTP/1.1"},
                "requestId": uuid.uuid4().hex,
                "routeKey": "$default",
                "stage": "$default",
                "authorizer": iam_authorizer(access_key=key),
            },
            "body": base64.b64encode(body).decode() if body else None,
            "isBase64Encoded": bool(body),
        }
        answer = self.handler(event, Context(aws_request_id=uuid.uuid4().hex))
        payload = answer.get("body") or ""
        content = base64.b64decode(payload) if answer.get("isBase64Encoded") else payload.encode()
        return httpx.Response(answer["statusCode"], headers=answer.get("headers") or {}, content=content)
