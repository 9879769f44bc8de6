"""SigV4 signing for an admin API behind API Gateway with IAM authorization.

The admin API deployed by `template.yaml` or the CDK stack only answers requests signed with AWS
credentials allowed `execute-api:Invoke` on it. `ApiClient` signs every request to a URL like
`https://{api-id}.execute-api.{region}.amazonaws.com` with the default credentials (environment,
`~/.aws`, SSO, instance role); other URLs are sent unsigned.
"""

from __future__ import annotations

import re
from collections.abc import Generator

import click
import httpx

_EXECUTE_API = re.compile(r"^[a-z0-9]+\.execute-api\.(?P<region>[a-z0-9-]+)\.amazonaws\.com(\.cn)?$")


def execute_api_region(url: str) -> str | None:
    """The AWS region of an API Gateway URL (`https://ID.execute-api.REGION.amazonaws.com/...`), else None."""
    match = _EXECUTE_API.match(httpx.URL(url).host)
    return match.group("region") if match else None


class SigV4(httpx.Auth):
    """Signs each request for `execute-api` in `region` with botocore's default credentials (or those of
    the named `profile` of `~/.aws`).

    Raises `click.ClickException` naming the fix when no credentials are configured, or the profile
    does not exist.
    """

    requires_request_body = True

    def __init__(self, region: str, profile: str | None = None) -> None:
        import botocore.exceptions
        import botocore.session

        self.region = region
        try:
            self._credentials = botocore.session.Session(profile=profile).get_credentials()
        except botocore.exceptions.BotoCoreError as exc:  # e.g. ProfileNotFound, a broken SSO cache
            raise click.ClickException(f"cannot load AWS credentials: {exc}") from exc
        if self._credentials is None:
            raise click.ClickException(
                "an API on API Gateway with IAM authorization (the admin API, an AWS_IAM ingress) needs AWS "
                "credentials: configure them "
                "(aws configure, AWS_PROFILE, or AWS_ACCESS_KEY_ID/AWS_SECRET_ACCESS_KEY)"
            )

    def auth_flow(self, request: httpx.Request) -> Generator[httpx.Request, httpx.Response, None]:
        from botocore.auth import SigV4Auth
        from botocore.awsrequest import AWSRequest

        headers = {k: v for k, v in request.headers.items() if k.lower() not in ("connection", "accept-encoding")}
        signed = AWSRequest(method=request.method, url=str(request.url), data=request.content, headers=headers)
        SigV4Auth(self._credentials.get_frozen_credentials(), "execute-api", self.region).add_auth(signed)
        for name in ("Authorization", "X-Amz-Date", "X-Amz-Security-Token", "X-Amz-Content-SHA256"):
            if name in signed.headers:
                request.headers[name] = signed.headers[name]
        yield request
