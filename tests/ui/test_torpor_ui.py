"""`torpor ui --admin-url`: the web UI of an admin API that takes SigV4-signed requests only.

The admin Lambda handler (`adapters.aws.lambda_app.admin_handler`, DynamoDB and SQS on a moto server,
the example services registered by URL) sits behind `SigningFront`, a stand-in for API Gateway with
IAM authorization: it recomputes each request's SigV4 signature with botocore from the test's
credentials, refuses unsigned or wrongly signed requests with API Gateway's `403`, and hands the
others to the handler as HTTP API (v2) events. `torpor ui` runs as the user would run it (a
subprocess, credentials from the environment) and headless Chromium opens the page it serves.
"""

from __future__ import annotations

import base64
import json
import os
import queue
import subprocess
import sys
import threading
import uuid
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import boto3
import httpx
import pytest

from adapters.aws import lambda_app
from tests.helpers.aws_functions import Context, LocalFunctions, lambda_environment
from tests.helpers.moto import REGION, fresh_store, moto_server
from tests.helpers.services import REPO_ROOT, serve_examples, stop_process
from tests.helpers.sigv4 import check_sigv4
from tests.ui.browser import require_browser

require_browser()

from playwright.sync_api import Browser, Page, expect  # noqa: E402 (after the skip)

pytestmark = pytest.mark.slow

ACCESS_KEY = "AKIATORPORUITEST0001"
SECRET_KEY = "ui-test-secret-access-key"


class SigningFront:
    """API Gateway with IAM authorization in front of the admin Lambda handler, on 127.0.0.1."""

    def __init__(self, secrets: dict[str, str]) -> None:
        self.secrets = secrets
        self.accepted: list[tuple[str, str, str]] = []  # (access key, method, path) of each signed request
        self.refused: list[tuple[str, str, str]] = []  # (reason, method, path) of each refused one
        self._lambda_lock = threading.Lock()  # one request at a time, as one Lambda instance
        owner = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def do_GET(self) -> None:
                owner.handle(self)

            do_POST = do_PATCH = do_DELETE = do_PUT = do_HEAD = do_GET

            def log_message(self, *args: object) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True).start()

    def handle(self, request: BaseHTTPRequestHandler) -> None:
        body = request.rfile.read(int(request.headers.get("content-length") or 0))
        headers = {name.lower(): value for name, value in request.headers.items()}
        url = f"http://{headers.get('host', '')}{request.path}"
        key, refusal = check_sigv4(
            request.command, url, headers, body, self.secrets, service="execute-api", region=REGION
        )
        path, _, query = request.path.partition("?")
        if refusal is not None:
            self.refused.append((refusal, request.command, path))
            self._reply(request, 403, {"content-type": "application/json"}, json.dumps({"message": refusal}).encode())
            return
        self.accepted.append((str(key), request.command, path))
        event = {
            "version": "2.0",
            "routeKey": "$default",
            "rawPath": path,
            "rawQueryString": query,
            "headers": {k: v for k, v in headers.items() if k not in ("authorization", "x-amz-date")},
            "requestContext": {
                "http": {"method": request.command, "path": path, "protocol": "HTTP/1.1", "sourceIp": "127.0.0.1"},
                "requestId": uuid.uuid4().hex,
                "routeKey": "$default",
                "stage": "$default",
            },
            "body": base64.b64encode(body).decode() if body else None,
            "isBase64Encoded": bool(body),
        }
        with self._lambda_lock:
            answer = lambda_app.admin_handler(event, Context(aws_request_id=uuid.uuid4().hex))
        payload = answer.get("body") or ""
        content = base64.b64decode(payload) if answer.get("isBase64Encoded") else payload.encode()
        self._reply(request, answer["statusCode"], answer.get("headers") or {}, content)

    @staticmethod
    def _reply(request: BaseHTTPRequestHandler, status: int, headers: dict[str, str], body: bytes) -> None:
        request.send_response(status)
        for name, value in headers.items():
            if name.lower() not in ("content-length", "connection"):
                request.send_header(name, value)
        request.send_header("content-length", str(len(body)))
        request.end_headers()
        if request.command != "HEAD":
            request.wfile.write(body)

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture(scope="module")
def functions() -> Iterator[LocalFunctions]:
    """The control plane's Lambda functions on moto, the example services registered by URL."""
    with moto_server() as moto_endpoint, serve_examples() as (examples_url, _process):
        store = fresh_store(moto_endpoint)
        sqs = boto3.client("sqs", region_name=REGION, endpoint_url=moto_endpoint)
        queue_url = sqs.create_queue(QueueName=f"wake-{uuid.uuid4().hex[:8]}")["QueueUrl"]
        env = {
            "TORPOR_TABLE": store.table_name,
            "TORPOR_WAKE_QUEUE_URL": queue_url,
            "AWS_ENDPOINT_URL_DYNAMODB": moto_endpoint,
            "AWS_ENDPOINT_URL_SQS": moto_endpoint,
            "TORPOR_INGRESS_URL": "https://ingress.example",
            "POWERTOOLS_METRICS_NAMESPACE": "TorporTest",
        }
        with lambda_environment(env):
            local = LocalFunctions(sqs, queue_url)
            status, body, _ = local.http("admin", "POST", "/deployments", {"uri": examples_url})
            assert status == 201, body
            yield local


@pytest.fixture(scope="module")
def front(functions: LocalFunctions) -> Iterator[SigningFront]:
    server = SigningFront({ACCESS_KEY: SECRET_KEY})
    yield server
    server.close()


def _ui_env(secret: str) -> dict[str, str]:
    """The environment of `torpor ui`: these credentials only, no profile or config file."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("AWS_")}
    env.update(
        AWS_ACCESS_KEY_ID=ACCESS_KEY,
        AWS_SECRET_ACCESS_KEY=secret,
        AWS_REGION=REGION,
        AWS_DEFAULT_REGION=REGION,
        AWS_CONFIG_FILE=os.devnull,
        AWS_SHARED_CREDENTIALS_FILE=os.devnull,
        PYTHONUNBUFFERED="1",
    )
    return env


def _torpor_ui(admin_url: str, secret: str = SECRET_KEY) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-m", "adapters.cli", "ui", "--admin-url", admin_url, "--port", "0"],
        cwd=REPO_ROOT,
        env=_ui_env(secret),
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


@pytest.fixture(scope="module")
def ui_url(front: SigningFront) -> Iterator[str]:
    """`torpor ui --admin-url <front> --port 0` running; the URL it says to open, without `/ui/`."""
    process = _torpor_ui(front.url + "/")
    lines: queue.Queue[str] = queue.Queue()
    assert process.stdout is not None
    stdout = process.stdout
    threading.Thread(target=lambda: [lines.put(line) for line in stdout], daemon=True).start()
    try:
        line = lines.get(timeout=30)
        assert line.startswith("torpor ui: open http://127.0.0.1:"), line
        yield line.split("open ", 1)[1].split("/ui/", 1)[0]
    finally:
        stop_process(process)


@pytest.fixture
def page(browser: Browser, ui_url: str) -> Iterator[Page]:
    context = browser.new_context(base_url=ui_url, viewport={"width": 1280, "height": 900})
    context.set_default_timeout(15_000)
    page = context.new_page()
    errors: list[str] = []
    page.on("pageerror", lambda error: errors.append(str(error)))
    yield page
    context.close()
    assert not errors, f"JavaScript errors in the page: {errors}"


def _row(page: Page, invocation_id: str) -> Any:
    return page.locator(f'[data-testid=invocation-row][data-id="{invocation_id}"]')


def test_the_ui_lists_invocations_and_services_through_signed_calls_and_kills_one(
    page: Page, functions: LocalFunctions, front: SigningFront
) -> None:
    status, _, headers = functions.http("ingress", "POST", "/Greeter/greet", "Ann")
    assert status == 200
    done = headers["x-restate-id"]
    status, body, _ = functions.http("ingress", "POST", "/Waits/sleep/send", 60_000)
    assert status == 202, body
    waiting = body["invocationId"]

    page.goto("/")

    expect(_row(page, done)).to_have_attribute("data-status", "completed")
    expect(_row(page, done)).to_contain_text("Greeter/greet")
    expect(_row(page, waiting)).to_contain_text("Waits/sleep")

    page.goto("/ui/#/services")
    page.get_by_role("link", name="Greeter", exact=True).click()
    expect(page.get_by_role("cell", name="greet", exact=True)).to_be_visible()

    # a change (PATCH) from the page: through the guard (same origin), signed, done by the handler
    page.on("dialog", lambda dialog: dialog.accept())
    page.goto(f"/ui/#/invocations/{waiting}")
    page.get_by_role("button", name="Kill").click()
    expect(page.locator("body")).to_contain_text("Killed")
    assert functions.describe(waiting)["completion_kind"] == "killed"

    assert ("PATCH", f"/invocations/{waiting}/kill") in {(m, p) for _, m, p in front.accepted}
    assert {key for key, _, _ in front.accepted} == {ACCESS_KEY}
    assert ("GET", "/ui/config.json") in {(m, p) for _, m, p in front.accepted}  # the deployed ingress URL
    assert not any(path.startswith("/ui/") and path != "/ui/config.json" for _, _, path in front.accepted)
    assert front.refused == []


def test_the_front_refuses_unsigned_requests(front: SigningFront) -> None:
    reply = httpx.get(f"{front.url}/invocations", timeout=10)
    assert reply.status_code == 403
    assert reply.json() == {"message": "Missing Authentication Token"}


def test_other_web_pages_cannot_use_the_users_credentials_through_the_proxy(ui_url: str, front: SigningFront) -> None:
    port = ui_url.rsplit(":", 1)[1]
    accepted = len(front.accepted)
    # a cross-site POST (a simple request, no preflight) from another page
    cross_site = httpx.post(
        f"{ui_url}/deployments",
        content=b'{"uri": "https://evil.example"}',
        headers={"content-type": "text/plain", "origin": "https://evil.example"},
        timeout=10,
    )
    assert cross_site.status_code == 403
    assert "refused" in cross_site.json()["message"]
    # DNS rebinding: a page on evil.example whose name now points at 127.0.0.1
    rebound = httpx.get(f"{ui_url}/invocations", headers={"host": f"evil.example:{port}"}, timeout=10)
    assert rebound.status_code == 403
    assert len(front.accepted) == accepted  # neither reached the admin API


def test_wrong_credentials_stop_torpor_ui_with_one_line_naming_the_403(front: SigningFront) -> None:
    process = _torpor_ui(front.url, secret="not-the-secret")
    _, stderr = process.communicate(timeout=30)
    assert process.returncode == 1
    assert stderr.count("\n") == 1, stderr
    assert stderr.startswith("Error: API Gateway refused the signed request to " + front.url), stderr
    assert "The request signature we calculated does not match" in stderr
    assert "execute-api:Invoke" in stderr


def test_torpor_ui_refuses_a_plain_http_url_and_missing_credentials() -> None:
    run = subprocess.run(
        [sys.executable, "-m", "adapters.cli", "ui", "--admin-url", "http://abc.execute-api.us-east-1.amazonaws.com"],
        cwd=REPO_ROOT,
        env=_ui_env(SECRET_KEY),
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert run.returncode == 2
    assert "is not an https:// URL" in run.stderr
    env = {k: v for k, v in _ui_env(SECRET_KEY).items() if k not in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY")}
    run = subprocess.run(
        [sys.executable, "-m", "adapters.cli", "ui", "--admin-url", "https://abc.execute-api.us-east-1.amazonaws.com"],
        cwd=REPO_ROOT,
        env={**env, "AWS_EC2_METADATA_DISABLED": "true"},
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert run.returncode == 1
    assert run.stderr.count("\n") == 1, run.stderr
    assert "needs AWS credentials" in run.stderr
