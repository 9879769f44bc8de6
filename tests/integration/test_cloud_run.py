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
import re
import threading
import time
import uuid
from base64 import b64encode
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from types import SimpleNamespace
from typing import Any
from urllib.parse import parse_qs, unquote

import boto3
import httpx
import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import rsa
from google.api_core import exceptions as api_exceptions
from google.auth import crypt, jwt

import adapters.local.dev as dev_module
from adapters.aws import lambda_app
from adapters.gcp.cloud_run import CloudRunInvoker
from adapters.local.dev import DevServer
from control_plane.settings import Settings
from tests.helpers.aws_functions import LocalFunctions
from tests.helpers.moto import fresh_store, unique_table_name
from tests.helpers.sigv4 import check_sigv4

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
        threading.Thread(target=self.server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True).start()

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


# --- from AWS: workload identity federation -----------------------------------------------------

POOL_PROVIDER = "//iam.googleapis.com/projects/123/locations/global/workloadIdentityPools/aws/providers/torpor"
CONTROL_PLANE_ROLE = "arn:aws:iam::123456789012:role/torpor-worker"
ADMITTED_AWS_ROLES = {"arn:aws:sts::123456789012:assumed-role/torpor-worker"}  # the provider's principal set


class FakeGoogleFederation(_Server):
    """Google's STS token exchange (`/v1/token`) and IAM credentials `generateIdToken`, as for a pool
    with one AWS provider, and the principal set of `ADMITTED_AWS_ROLES` allowed to mint ID tokens
    for `SERVICE_ACCOUNT`.

    The exchange checks the subject token (a signed STS `GetCallerIdentity` request) as Google does:
    its SigV4 signature (recomputed with the moto role's secret), then the identity AWS (moto) answers
    for it; the federated access token it hands out is then the only one `generateIdToken` takes.
    """

    def __init__(self, moto_endpoint: str, secrets: dict[str, str]) -> None:
        self.moto_endpoint = moto_endpoint
        self.secrets = secrets
        self.signing_private_pem, self.signing_public_pem = _rsa_pems()
        self.signer = crypt.RSASigner.from_string(self.signing_private_pem, key_id="fake-google-key")
        self.exchanges: list[str] = []  # the AWS ARN of each accepted exchange
        self.id_token_requests: list[tuple[str, str]] = []  # (service account, audience)
        self.other_paths: list[str] = []
        self.federated_tokens: set[str] = set()
        super().__init__()

    def handle(self, request: BaseHTTPRequestHandler) -> None:
        body = self.body(request)
        if request.path == "/v1/token":
            self._exchange(request, body)
        elif request.path == f"/v1/projects/-/serviceAccounts/{SERVICE_ACCOUNT}:generateIdToken":
            self._generate_id_token(request, body)
        else:
            self.other_paths.append(request.path)
            self.reply(request, 404, b'{"error": {"code": 404}}', "application/json")

    def _error(self, request: BaseHTTPRequestHandler, status: int, description: str) -> None:
        body = json.dumps({"error": "invalid_grant", "error_description": description}).encode()
        self.reply(request, status, body, "application/json")

    def _exchange(self, request: BaseHTTPRequestHandler, body: bytes) -> None:
        form = {name: values[0] for name, values in parse_qs(body.decode()).items()}
        if form.get("grant_type") != "urn:ietf:params:oauth:grant-type:token-exchange":
            return self._error(request, 400, "unsupported grant_type")
        if form.get("subject_token_type") != "urn:ietf:params:aws:token-type:aws4_request":
            return self._error(request, 400, "unsupported subject_token_type")
        if form.get("audience") != POOL_PROVIDER:
            return self._error(request, 400, f"unknown provider {form.get('audience')}")
        signed = json.loads(unquote(form["subject_token"]))
        headers = {item["key"].lower(): item["value"] for item in signed["headers"]}
        if headers.get("x-goog-cloud-target-resource") != POOL_PROVIDER:
            return self._error(request, 400, "the subject token is for another provider")
        if not signed["url"].startswith("https://sts.us-east-1.amazonaws.com"):
            return self._error(request, 400, f"not an STS GetCallerIdentity URL: {signed['url']}")
        _, refusal = check_sigv4(
            signed["method"], signed["url"], headers, b"", self.secrets, service="sts", region="us-east-1"
        )
        if refusal is not None:
            return self._error(request, 403, f"AWS refused the subject token: {refusal}")
        # ask AWS (moto) who signed it, with the very request the workload signed
        query = signed["url"].split("?", 1)[1]
        answer = httpx.post(f"{self.moto_endpoint}/?{query}", headers=headers, timeout=10)
        arn = re.search(r"<Arn>([^<]+)</Arn>", answer.text)
        if answer.status_code != 200 or arn is None:
            return self._error(request, 403, f"GetCallerIdentity answered {answer.status_code}")
        aws_role = arn.group(1).rsplit("/", 1)[0]  # the provider's default attribute.aws_role mapping
        if aws_role not in ADMITTED_AWS_ROLES:
            return self._error(
                request, 403, f"The given credential is rejected by the attribute condition ({aws_role})"
            )
        self.exchanges.append(arn.group(1))
        token = f"federated-{len(self.exchanges)}"
        self.federated_tokens.add(token)
        reply = {
            "access_token": token,
            "issued_token_type": "urn:ietf:params:oauth:token-type:access_token",
            "token_type": "Bearer",
            "expires_in": 3600,
        }
        self.reply(request, 200, json.dumps(reply).encode(), "application/json")

    def _generate_id_token(self, request: BaseHTTPRequestHandler, body: bytes) -> None:
        token = request.headers.get("authorization", "").removeprefix("Bearer ")
        if token not in self.federated_tokens:
            self.reply(request, 403, b'{"error": {"code": 403, "status": "PERMISSION_DENIED"}}', "application/json")
            return
        audience = json.loads(body)["audience"]
        self.id_token_requests.append((SERVICE_ACCOUNT, audience))
        now = int(time.time())
        claims = {
            "iss": "https://accounts.google.com",
            "aud": audience,
            "azp": "1234567890",
            "email": SERVICE_ACCOUNT,
            "sub": "1234567890",
            "iat": now,
            "exp": now + 3600,
        }
        id_token = jwt.encode(self.signer, claims).decode()
        self.reply(request, 200, json.dumps({"token": id_token}).encode(), "application/json")

    def credential_config(self) -> dict[str, Any]:
        """What `gcloud iam workload-identity-pools create-cred-config … --aws --service-account` writes,
        with Google's endpoints moved to this fake."""
        return {
            "universe_domain": "googleapis.com",
            "type": "external_account",
            "audience": POOL_PROVIDER,
            "subject_token_type": "urn:ietf:params:aws:token-type:aws4_request",
            "token_url": self.url + "/v1/token",
            "service_account_impersonation_url": (
                f"{self.url}/v1/projects/-/serviceAccounts/{SERVICE_ACCOUNT}:generateAccessToken"
            ),
            "credential_source": {
                "environment_id": "aws1",
                "region_url": "http://169.254.169.254/latest/meta-data/placement/availability-zone",
                "url": "http://169.254.169.254/latest/meta-data/iam/security-credentials",
                "regional_cred_verification_url": (
                    "https://sts.{region}.amazonaws.com?Action=GetCallerIdentity&Version=2011-06-15"
                ),
            },
        }


def _lambda_environment(
    moto_endpoint: str, monkeypatch: pytest.MonkeyPatch, role_arn: str, config: dict[str, Any], *, base64: bool = False
) -> tuple[LocalFunctions, dict[str, str]]:
    """The control plane's Lambda functions on moto as the execution role `role_arn` (its temporary
    credentials in the environment, as Lambda sets them), with `TORPOR_GOOGLE_CREDENTIAL_CONFIG` the
    configuration's JSON, or base64 of it (as the template's GoogleCredentialConfig parameter gives it)."""
    config_text = json.dumps(config)
    if base64:
        config_text = b64encode(config_text.encode()).decode()
    sts = boto3.client("sts", region_name="us-east-1", endpoint_url=moto_endpoint)
    credentials = sts.assume_role(RoleArn=role_arn, RoleSessionName="torpor-worker")["Credentials"]
    store = fresh_store(moto_endpoint)
    sqs = boto3.client("sqs", region_name="us-east-1", endpoint_url=moto_endpoint)
    queue_url = sqs.create_queue(QueueName=f"wake-{uuid.uuid4().hex[:8]}")["QueueUrl"]
    monkeypatch.delenv("GOOGLE_APPLICATION_CREDENTIALS", raising=False)
    for name, value in {
        "AWS_ACCESS_KEY_ID": credentials["AccessKeyId"],
        "AWS_SECRET_ACCESS_KEY": credentials["SecretAccessKey"],
        "AWS_SESSION_TOKEN": credentials["SessionToken"],
        "AWS_REGION": "us-east-1",
        "TORPOR_TABLE": store.table_name,
        "TORPOR_WAKE_QUEUE_URL": queue_url,
        "AWS_ENDPOINT_URL_DYNAMODB": moto_endpoint,
        "AWS_ENDPOINT_URL_SQS": moto_endpoint,
        "TORPOR_GOOGLE_CREDENTIAL_CONFIG": config_text,
        "POWERTOOLS_METRICS_NAMESPACE": "TorporTest",
    }.items():
        monkeypatch.setenv(name, value)
    lambda_app.reset()
    return LocalFunctions(sqs, queue_url), {credentials["AccessKeyId"]: credentials["SecretAccessKey"]}


@pytest.fixture
def federation(moto_endpoint: str) -> Iterator[FakeGoogleFederation]:
    google = FakeGoogleFederation(moto_endpoint, {})
    yield google
    google.close()
    lambda_app.reset()


def test_the_lambda_control_plane_calls_cloud_run_with_an_id_token_minted_through_workload_identity_federation(
    moto_endpoint: str, monkeypatch: pytest.MonkeyPatch, federation: FakeGoogleFederation, examples_url: str
) -> None:
    functions, secrets = _lambda_environment(
        moto_endpoint, monkeypatch, CONTROL_PLANE_ROLE, federation.credential_config(), base64=True
    )
    federation.secrets.update(secrets)
    cloud_run = FakeCloudRun(federation.signing_public_pem, examples_url)
    try:
        status, body, _ = functions.http(
            "admin", "POST", "/deployments", {"uri": cloud_run.url, "auth": {"google_id_token": {"audience": AUDIENCE}}}
        )
        assert status == 201, body
        discovery = len(cloud_run.seen)
        for name in ("Ann", "Bob"):
            status, body, _ = functions.http("ingress", "POST", "/Greeter/greet", name)
            assert (status, body) == (200, f"Hello, {name}!")
    finally:
        cloud_run.close()
    # the exchange: the function's role, as AWS told the fake Google; one per function (the admin
    # function's discovery, the ingress's calls: containers of their own), each ID token reused there
    role = "arn:aws:sts::123456789012:assumed-role/torpor-worker/torpor-worker"
    assert federation.exchanges == [role, role]
    assert federation.id_token_requests == [(SERVICE_ACCOUNT, AUDIENCE)] * 2
    assert federation.other_paths == []  # no generateAccessToken: the federated token mints the ID token
    calls = {headers["authorization"] for headers in cloud_run.seen[discovery:]}
    assert len(cloud_run.seen) - discovery >= 2
    assert len(calls) == 1
    claims = jwt.decode(calls.pop().removeprefix("Bearer "), certs=federation.signing_public_pem)
    assert (claims["aud"], claims["email"]) == (AUDIENCE, SERVICE_ACCOUNT)


def test_an_aws_role_the_pool_does_not_admit_is_a_400_naming_the_exchange(
    moto_endpoint: str, monkeypatch: pytest.MonkeyPatch, federation: FakeGoogleFederation, examples_url: str
) -> None:
    functions, secrets = _lambda_environment(
        moto_endpoint, monkeypatch, "arn:aws:iam::123456789012:role/someone-else", federation.credential_config()
    )
    federation.secrets.update(secrets)
    status, body, _ = functions.http(
        "admin", "POST", "/deployments", {"uri": "https://greeter-xyz.a.run.app", "auth": {"google_id_token": {}}}
    )
    assert status == 400, body
    assert "Google's token exchange refused this AWS identity" in body["message"]
    assert "rejected by the attribute condition" in body["message"]
    assert federation.id_token_requests == []


def test_a_configuration_without_a_service_account_is_refused_saying_so(
    moto_endpoint: str, monkeypatch: pytest.MonkeyPatch, federation: FakeGoogleFederation
) -> None:
    config = federation.credential_config()
    del config["service_account_impersonation_url"]
    functions, _ = _lambda_environment(moto_endpoint, monkeypatch, CONTROL_PLANE_ROLE, config)
    status, body, _ = functions.http(
        "admin", "POST", "/deployments", {"uri": "https://greeter-xyz.a.run.app", "auth": {"google_id_token": {}}}
    )
    assert status == 400, body
    assert "impersonates no service account" in body["message"]
    assert federation.exchanges == []
