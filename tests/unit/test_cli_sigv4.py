"""The CLI signs requests to an admin API on API Gateway (IAM authorization) and no others."""

from __future__ import annotations

import httpx
import pytest

from adapters.cli.aws_auth import SigV4, execute_api_region
from adapters.cli.client import ApiClient


def test_execute_api_urls_name_their_region_and_others_none() -> None:
    assert execute_api_region("https://abc123.execute-api.eu-west-1.amazonaws.com") == "eu-west-1"
    assert execute_api_region("https://abc123.execute-api.eu-west-1.amazonaws.com/prod/") == "eu-west-1"
    assert execute_api_region("http://127.0.0.1:9070") is None
    assert execute_api_region("https://execute-api.example.com") is None


def test_requests_to_api_gateway_carry_a_sigv4_signature_for_execute_api(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "AKIDEXAMPLE")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "secret")
    monkeypatch.delenv("AWS_SESSION_TOKEN", raising=False)
    seen: list[httpx.Request] = []

    def answer(request: httpx.Request) -> httpx.Response:
        seen.append(request)
        return httpx.Response(200, json={"deployments": []})

    url = "https://abc123.execute-api.eu-west-1.amazonaws.com"
    with httpx.Client(base_url=url, auth=SigV4("eu-west-1"), transport=httpx.MockTransport(answer)) as client:
        client.post("/deployments", json={"arn": "x"})
    authorization = seen[0].headers["authorization"]
    assert authorization.startswith("AWS4-HMAC-SHA256 Credential=AKIDEXAMPLE/")
    assert "/eu-west-1/execute-api/aws4_request" in authorization
    assert "x-amz-date" in seen[0].headers


def test_a_local_admin_api_is_not_signed() -> None:
    client = ApiClient("http://127.0.0.1:9070", "admin API", "--admin-url", 5)
    assert client._client.auth is None
