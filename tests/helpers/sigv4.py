"""Checking AWS Signature Version 4 the way AWS does: recompute it with botocore and compare.

For the stand-ins of AWS endpoints in tests (API Gateway with IAM authorization, STS
GetCallerIdentity): `check_sigv4` reads the `Authorization` header, recomputes the signature over
the headers it names with the secret of its access key, and says why a request is refused.
"""

from __future__ import annotations

import hmac
import re
from collections.abc import Mapping

from botocore.auth import SigV4Auth
from botocore.awsrequest import AWSRequest
from botocore.credentials import Credentials

_AUTHORIZATION = re.compile(
    r"^AWS4-HMAC-SHA256 Credential=(?P<key>[^/]+)/(?P<date>\d{8})/(?P<region>[^/]+)/(?P<service>[^/]+)/aws4_request,"
    r"\s*SignedHeaders=(?P<signed>[^,]+),\s*Signature=(?P<signature>[0-9a-f]{64})$"
)


def check_sigv4(
    method: str,
    url: str,
    headers: Mapping[str, str],
    body: bytes,
    secrets: Mapping[str, str],
    *,
    service: str,
    region: str,
) -> tuple[str | None, str | None]:
    """`(access key id, None)` if the request is correctly signed for `service` in `region` by a key
    in `secrets` (access key id → secret access key); else `(None, why it is refused)`.

    `url` is the URL as the client addressed it (scheme, the `Host` it sent, path, query).
    """
    lowered = {name.lower(): value for name, value in headers.items()}
    match = _AUTHORIZATION.match(lowered.get("authorization", ""))
    if match is None:
        return None, "Missing Authentication Token"
    if (match["service"], match["region"]) != (service, region):
        return None, f"Credential should be scoped to {region}/{service}"
    secret = secrets.get(match["key"])
    if secret is None:
        return None, "The security token included in the request is invalid."
    timestamp = lowered.get("x-amz-date", "")
    signed_names = match["signed"].split(";")
    if "host" not in signed_names or not timestamp.startswith(match["date"]):
        return None, "Signature expired or malformed"
    signed_headers = {name: lowered.get(name, "") for name in signed_names}
    request = AWSRequest(method=method, url=url, headers=signed_headers, data=body)
    request.context["timestamp"] = timestamp
    auth = SigV4Auth(Credentials(match["key"], secret, lowered.get("x-amz-security-token")), service, region)
    expected = auth.signature(auth.string_to_sign(request, auth.canonical_request(request)), request)
    if not hmac.compare_digest(expected, match["signature"]):
        return None, (
            "The request signature we calculated does not match the signature you provided. Check your AWS "
            "Secret Access Key and signing method."
        )
    return match["key"], None
