"""Cloud Run deployments end to end, against a fake Google token endpoint and a fake Cloud Run.

Everything is local plain HTTP:

- a service-account key file (a fresh RSA key) whose `token_uri` is `FakeTokenEndpoint`: google-auth's
  service-account ID-token flow posts a JWT assertion signed with that key; the fake checks the
  signature and answers `{"id_token": ...}`, a JWT it signs itself, with `aud` = the assertion's
  `target_audience`;
- `FakeCloudRun` checks `authorization: Bearer` (or `x-serverless-authorization`, as Cloud Run
  does): the JWT's signature and that its `aud` is one the service accepts; 401 otherwise. Then it
  forwards the request to the real example services (restate-sdk under hypercorn).

`torpor dev` (`DevServer`) builds its Cloud Run invoker with no arguments, as in production, so the
ID tokens come from google-auth's application default credentials: `GOOGLE_APPLICATION_CREDENTIALS`
points at the key file. Only the services client (which resolves `projects/…/services/…` names) is a
fake, injected through `adapters.local.dev._cloud_run_invoker`.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from types import SimpleNamespace
from typing import Any
from urllib.parse import parse_qs

import httpx
import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import rsa
from google.api_core import exceptions as api_exceptions
from google.auth import crypt, jwt

import adapters.local.dev as dev_module
from adapters.gcp.cloud_run import CloudRunInvoker
from adapters.local.dev import DevServer
from control_plane.settings import Settings
from tests.helpers.moto import unique_table_name

AUDIENCE = "https://greeter-xyz.a.run.app"
SERVICE_NAME = "projects/p/locations/l/services/s"
SERVICE_ACCOUNT = "torpor@p.iam.gserviceaccount.com"
GOOGLE_TOKEN_ENDPOINT = "https://oauth2.googleapis.com/token"


def _rsa_pems() -> tuple[str, str]:
    """A new RSA key: (private key PEM, PKCS#8; public key PEM)."""
    key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    private = key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    ).decode()
    public = (
        key.public_key()
        .public_bytes(serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo)
        .decode()
    )
    return private, public


class _Server:
    """A threaded HTTP/1.1 server on 127.0.0.1 running `handle(request_handler)` for every request."""

    def __init__(self) -> None:
        owner = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def do_GET(self) -> None:
                owner.handle(self)

            do_POST = do_GET

            def log_message(self, *args: object) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def handle(self, request: BaseHTTPRequestHandler) -> None:
        raise NotImplementedError

    @staticmethod
    def reply(request: BaseHTTPRequestHandler, status: int, body: bytes, content_type: str) -> None:
        request.send_response(status)
        request.send_header("content-type", content_type)
        request.send_header("content-length", str(len(body)))
        request.end_headers()
        request.wfile.write(body)

    @staticmethod
    def body(request: BaseHTTPRequestHandler) -> bytes:
        return request.rfile.read(int(request.headers.get("content-length") or 0))

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


class FakeTokenEndpoint(_Server):
    """Google's OAuth token endpoint for the service-account ID-token grant (JWT bearer assertion)."""

    def __init__(self, service_account_public_pem: str) -> None:
        self.service_account_public_pem = service_account_public_pem
        self.signing_private_pem, self.signing_public_pem = _rsa_pems()
        self.signer = crypt.RSASigner.from_string(self.signing_private_pem, key_id="fake-google-key")
        self.audiences: list[str] = []  # target_audience of every ID token handed out, in order
        self.refuse = False
        self.lock = threading.Lock()
        super().__init__()

    def handle(self, request: BaseHTTPRequestHandler) -> None:
        form = parse_qs(self.body(request).decode())
        if form.get("grant_type") != ["urn:ietf:params:oauth:grant-type:jwt-bearer"]:
            self.reply(request, 400, b'{"error": "unsupported_grant_type"}', "application/json")
            return
        try:  # signed with the service account's key; google-auth addresses it to Google's token endpoint
            assertion = form["assertion"][0]
            claims = jwt.decode(assertion, certs=self.service_account_public_pem, audience=GOOGLE_TOKEN_ENDPOINT)
        except ValueError as exc:
            body = json.dumps({"error": "invalid_grant", "error_description": str(exc)}).encode()
            self.reply(request, 400, body, "application/json")
            return
        if self.refuse:
            body = b'{"error": "invalid_grant", "error_description": "Invalid JWT Signature."}'
            self.reply(request, 400, body, "application/json")
            return
        audience = claims["target_audience"]
        with self.lock:
            self.audiences.append(audience)
        now = int(time.time())
        id_token = jwt.encode(
            self.signer,
            {
                "iss": "https://accounts.google.com",
                "aud": audience,
                "azp": claims["iss"],
                "email": claims["iss"],
                "sub": "1234567890",
                "iat": now,
                "exp": now + 3600,
            },
        )
        self.reply(request, 200, json.dumps({"id_token": id_token.decode()}).encode(), "application/json")

    def write_key_file(self, path: Path, private_pem: str) -> Path:
        """A service-account JSON key whose `token_uri` is this endpoint."""
        key = {
            "type": "service_account",
            "project_id": "p",
            "private_key_id": "k1",
            "private_key": private_pem,
            "client_email": SERVICE_ACCOUNT,
            "client_id": "1234567890",
            "token_uri": self.url + "/token",
        }
        path.write_text(json.dumps(key))
        return path


class FakeCloudRun(_Server):
    """A Cloud Run service that requires authentication, in front of the example services."""

    def __init__(self, issuer_public_pem: str, backend_url: str) -> None:
        self.issuer_public_pem = issuer_public_pem
        self.backend_url = backend_url
        self.audiences: set[str] = {AUDIENCE}  # the run.app URL and custom audiences it accepts
        self.seen: list[dict[str, str]] = []  # the headers of every request, in order
        self.client = httpx.Client(timeout=60)
        super().__init__()
        self.audiences.add(self.url)

    def handle(self, request: BaseHTTPRequestHandler) -> None:
        headers = {name.lower(): value for name, value in request.headers.items()}
        self.seen.append(headers)
        body = self.body(request)
        # as Cloud Run: x-serverless-authorization is checked if present (authorization then goes through)
        header = "x-serverless-authorization" if "x-serverless-authorization" in headers else "authorization"
        scheme, _, token = headers.get(header, "").partition(" ")
        if scheme.lower() != "bearer" or not token:
            self.reply(request, 401, b"no bearer token", "text/plain")
            return
        try:
            claims = jwt.decode(token, certs=self.issuer_public_pem)
        except ValueError as exc:
            self.reply(request, 401, f"invalid token: {exc}".encode(), "text/plain")
            return
        if claims["aud"] not in self.audiences:
            self.reply(request, 401, f"wrong audience {claims['aud']}".encode(), "text/plain")
            return
        forwarded = {
            name: value
            for name, value in headers.items()
            if name not in ("host", "content-length", "connection", header)
        }
        answer = self.client.request(request.command, self.backend_url + request.path, headers=forwarded, content=body)
        self.reply(request, answer.status_code, answer.content, answer.headers.get("content-type", ""))

    def close(self) -> None:
        super().close()
        self.client.close()


class FakeServicesClient:
    """`run_v2.ServicesClient` for one service name; counts `get_service` calls."""

    def __init__(self, urls: dict[str, str]) -> None:
        self.urls = urls
        self.calls: list[str] = []

    def get_service(self, *, name: str, timeout: float | None = None) -> Any:
        self.calls.append(name)
        if name not in self.urls:
            raise api_exceptions.NotFound(f"Resource '{name}' was not found")
        return SimpleNamespace(uri=self.urls[name])


@pytest.fixture
def token_endpoint(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[FakeTokenEndpoint]:
    """The fake token endpoint, with GOOGLE_APPLICATION_CREDENTIALS pointing at a key that uses it."""
    private_pem, public_pem = _rsa_pems()
    endpoint = FakeTokenEndpoint(public_pem)
    key_file = endpoint.write_key_file(tmp_path / "key.json", private_pem)
    monkeypatch.setenv("GOOGLE_APPLICATION_CREDENTIALS", str(key_file))
    yield endpoint
    endpoint.close()


@pytest.fixture
def cloud_run(token_endpoint: FakeTokenEndpoint, examples_url: str) -> Iterator[FakeCloudRun]:
    service = FakeCloudRun(token_endpoint.signing_public_pem, examples_url)
    yield service
    service.close()


@pytest.fixture
def services_client(cloud_run: FakeCloudRun) -> FakeServicesClient:
    return FakeServicesClient({SERVICE_NAME: cloud_run.url})


@pytest.fixture
def dev(
    moto_endpoint: str, monkeypatch: pytest.MonkeyPatch, services_client: FakeServicesClient
) -> Iterator[DevServer]:
    """`torpor dev` whose Cloud Run invoker has the default token fetcher and the fake services client."""
    monkeypatch.setattr(
        dev_module, "_cloud_run_invoker", lambda: CloudRunInvoker(services_client_factory=lambda: services_client)
    )
    server = DevServer(
        ingress_port=0,
        admin_port=0,
        dynamodb_endpoint=moto_endpoint,
        table=unique_table_name(),
        settings=Settings(inactivity_timeout_ms=10_000),
    )
    server.start()
    yield server
    server.stop()


def register(dev: DevServer, **body: Any) -> httpx.Response:
    return httpx.post(f"{dev.admin_url}/deployments", json=body, timeout=30)


def greet(dev: DevServer, name: str) -> httpx.Response:
    return httpx.post(f"{dev.ingress_url}/Greeter/greet", json=name, timeout=30)


def test_a_cloud_run_url_with_an_audience_serves_calls_with_one_token(
    dev: DevServer, token_endpoint: FakeTokenEndpoint, cloud_run: FakeCloudRun
) -> None:
    created = register(dev, uri=cloud_run.url, auth={"google_id_token": {"audience": AUDIENCE}})
    assert created.status_code == 201, created.text
    assert "Greeter" in [s["name"] for s in created.json()["services"]]
    for name in ["Ann", "Bob", "Cy", "Di", "Ed"]:
        reply = greet(dev, name)
        assert reply.status_code == 200, reply.text
        assert reply.json() == f"Hello, {name}!"
    assert token_endpoint.audiences == [AUDIENCE]  # one token for discovery and five calls
    assert len(cloud_run.seen) >= 6
    tokens = {headers["authorization"] for headers in cloud_run.seen}
    assert len(tokens) == 1
    assert jwt.decode(tokens.pop().removeprefix("Bearer "), verify=False)["aud"] == AUDIENCE


def test_restates_spelling_of_the_auth_is_accepted(
    dev: DevServer, token_endpoint: FakeTokenEndpoint, cloud_run: FakeCloudRun
) -> None:
    created = register(dev, uri=cloud_run.url, auth={"GoogleIdToken": {"audience": AUDIENCE}})
    assert created.status_code == 201, created.text
    assert greet(dev, "Ann").json() == "Hello, Ann!"
    assert token_endpoint.audiences == [AUDIENCE]


def test_a_wrong_audience_is_refused_with_a_400_saying_why(
    dev: DevServer, token_endpoint: FakeTokenEndpoint, cloud_run: FakeCloudRun
) -> None:
    reply = register(dev, uri=cloud_run.url, auth={"google_id_token": {"audience": "https://other-xyz.a.run.app"}})
    assert reply.status_code == 400, reply.text
    message = reply.json()["message"]
    assert "HTTP 401" in message
    assert "audience https://other-xyz.a.run.app" in message
    # the refused token was dropped and a new one tried, once
    assert token_endpoint.audiences == ["https://other-xyz.a.run.app"] * 2
    assert len(cloud_run.seen) == 2
    assert httpx.get(f"{dev.admin_url}/services/Greeter").status_code == 404


def test_without_an_audience_the_url_is_the_audience(
    dev: DevServer, token_endpoint: FakeTokenEndpoint, cloud_run: FakeCloudRun
) -> None:
    created = register(dev, uri=cloud_run.url, auth={"google_id_token": {}})
    assert created.status_code == 201, created.text
    assert greet(dev, "Ann").json() == "Hello, Ann!"
    assert token_endpoint.audiences == [cloud_run.url]


def test_a_service_name_is_resolved_once_to_its_url(
    dev: DevServer, token_endpoint: FakeTokenEndpoint, cloud_run: FakeCloudRun, services_client: FakeServicesClient
) -> None:
    created = register(dev, uri=SERVICE_NAME)
    assert created.status_code == 201, created.text
    for name in ["Ann", "Bob", "Cy"]:
        assert greet(dev, name).json() == f"Hello, {name}!"
    assert services_client.calls == [SERVICE_NAME]
    assert token_endpoint.audiences == [cloud_run.url]
    assert httpx.get(f"{dev.admin_url}/deployments/{created.json()['id']}").json()["uri"] == SERVICE_NAME


def test_an_unknown_service_name_is_a_400_saying_so(dev: DevServer, cloud_run: FakeCloudRun) -> None:
    reply = register(dev, uri="projects/p/locations/l/services/missing")
    assert reply.status_code == 400, reply.text
    message = reply.json()["message"]
    assert "projects/p/locations/l/services/missing not found" in message
    assert "gcloud run services list" in message
    assert cloud_run.seen == []


def test_the_deployments_own_authorization_header_moves_the_token_aside(
    dev: DevServer, token_endpoint: FakeTokenEndpoint, cloud_run: FakeCloudRun
) -> None:
    created = register(
        dev,
        uri=cloud_run.url,
        auth={"google_id_token": {"audience": AUDIENCE}},
        additional_headers={"Authorization": "Basic dXNlcjpwdw=="},
    )
    assert created.status_code == 201, created.text
    assert greet(dev, "Ann").json() == "Hello, Ann!"
    for headers in cloud_run.seen:
        assert headers["authorization"] == "Basic dXNlcjpwdw=="
        assert headers["x-serverless-authorization"].startswith("Bearer ")


def test_without_credentials_registration_names_the_fix(
    dev: DevServer, cloud_run: FakeCloudRun, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("GOOGLE_APPLICATION_CREDENTIALS", str(tmp_path / "missing.json"))
    reply = register(dev, uri=cloud_run.url, auth={"google_id_token": {"audience": AUDIENCE}})
    assert reply.status_code == 400, reply.text
    message = reply.json()["message"]
    assert "no Google credentials" in message
    assert "set GOOGLE_APPLICATION_CREDENTIALS" in message
    assert cloud_run.seen == []


def test_a_refusing_token_endpoint_is_a_400_saying_so(
    dev: DevServer, token_endpoint: FakeTokenEndpoint, cloud_run: FakeCloudRun
) -> None:
    token_endpoint.refuse = True
    reply = register(dev, uri=cloud_run.url, auth={"google_id_token": {"audience": AUDIENCE}})
    assert reply.status_code == 400, reply.text
    message = reply.json()["message"]
    assert "token endpoint refused" in message
    assert "Invalid JWT Signature" in message
    assert cloud_run.seen == []
