"""Signed requests end to end: restate-sdk deployments started with `identity_keys` accept only Torpor.

The deployment is `tests.helpers.signed_services` (restate-sdk 1.3.0, `restate.app(...,
identity_keys=[public key])`), served over HTTP by hypercorn in its own process, and as a Lambda
handler in the local Lambda emulator (`torpor dev --lambda`). Torpor signs with the key of
`DevServer(request_identity_key_file=...)`; the negative cases swap the invoker's signer (none, or
another key) on the same server, so the deployment and its key stay the same.
"""

from __future__ import annotations

import os
import stat
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from adapters.local.dev import DevServer
from adapters.local.lambda_emulator import function_arn
from adapters.request_identity import signer_from_file
from control_plane.request_identity import RequestSigner, generate_pem
from control_plane.retry import RetryPolicy
from control_plane.settings import Settings
from tests.helpers.dev import describe, wait_for
from tests.helpers.moto import unique_table_name
from tests.helpers.services import REPO_ROOT, free_port, stop_process
from tests.helpers.signed_services import IDENTITY_KEYS_ENV

SETTINGS = Settings(
    inactivity_timeout_ms=10_000,
    lease_margin_ms=2_000,
    call_wait_ms=20_000,
    retry_policy=RetryPolicy(initial_interval_ms=100, max_attempts=3),
)
SIGNED_ARN = function_arn("Signed", "1")


def other_signer() -> RequestSigner:
    return RequestSigner.from_pem(generate_pem(), source="a key the deployment does not know")


@pytest.fixture(scope="module")
def key_file(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Where torpor dev writes its key: the file does not exist before the dev server starts."""
    return tmp_path_factory.mktemp("identity") / "torpor-key.pem"


@pytest.fixture(scope="module")
def dev(moto_endpoint: str, key_file: Path) -> Iterator[DevServer]:
    server = DevServer(
        ingress_port=0,
        admin_port=0,
        dynamodb_endpoint=moto_endpoint,
        table=unique_table_name(),
        settings=SETTINGS,
        request_identity_key_file=key_file,
    )
    with server:
        yield server


@pytest.fixture(scope="module")
def signed_url(dev: DevServer) -> Iterator[str]:
    """The signed services over HTTP (hypercorn, its own process), trusting `dev`'s public key only."""
    assert dev.request_signer is not None
    port = free_port()
    env = {**os.environ, IDENTITY_KEYS_ENV: dev.request_signer.public_key, "PYTHONPATH": str(REPO_ROOT)}
    env.pop("AWS_LAMBDA_FUNCTION_NAME", None)
    command = [sys.executable, "-m", "hypercorn", "tests.helpers.signed_services:app", "--bind", f"127.0.0.1:{port}"]
    process = subprocess.Popen(command, cwd=REPO_ROOT, env=env, stdin=subprocess.DEVNULL)
    url = f"http://127.0.0.1:{port}"
    try:

        def healthy() -> bool:
            try:
                return httpx.get(f"{url}/health", timeout=1).status_code == 200
            except httpx.TransportError:
                assert process.poll() is None, "the signed services exited at start-up (stderr above)"
                return False

        wait_for(healthy, 30, "the signed services to answer /health")
        yield url
    finally:
        stop_process(process)


def register(dev: DevServer, **deployment: object) -> httpx.Response:
    return httpx.post(f"{dev.admin_url}/deployments", json={**deployment, "force": True}, timeout=30)


def greet(dev: DevServer, name: str) -> httpx.Response:
    return httpx.post(f"{dev.ingress_url}/SignedGreeter/greet", json=name, timeout=30)


def test_dev_writes_a_key_file_only_its_owner_reads(dev: DevServer, key_file: Path) -> None:
    assert stat.S_IMODE(key_file.stat().st_mode) == 0o600
    assert dev.request_signer is not None
    assert signer_from_file(key_file).public_key == dev.request_signer.public_key


def test_a_deployment_with_identity_keys_registers_and_runs_signed_requests(dev: DevServer, signed_url: str) -> None:
    reply = register(dev, uri=signed_url)
    assert reply.status_code == 201, reply.text
    answer = greet(dev, "signed")
    assert answer.status_code == 200, answer.text
    assert answer.json() == "hello signed"


@pytest.mark.parametrize("signer", [None, "other"], ids=["unsigned", "another-key"])
def test_discovery_without_the_trusted_key_is_refused_with_a_clear_400(
    dev: DevServer, signed_url: str, signer: str | None, monkeypatch: pytest.MonkeyPatch
) -> None:
    other = other_signer() if signer else None
    monkeypatch.setattr(dev.invoker, "signer", other)
    reply = register(dev, uri=signed_url)
    assert reply.status_code == 400, reply.text
    message = reply.json()["message"]
    assert "GET /discover answered HTTP 401" in message
    assert "--request-identity-key-file" in message
    if other is None:
        assert "Torpor signs nothing (no request identity key is configured)" in message
    else:
        assert f"Torpor signed with {other.public_key}, which the deployment does not accept" in message


def test_an_invoke_signed_with_another_key_fails_the_attempt_with_the_hint(
    dev: DevServer, signed_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Invocations are signed too, not only discovery: with the signer swapped after registration,
    each attempt gets the SDK's 401 and the invocation's last failure says what to fix."""
    assert register(dev, uri=signed_url).status_code == 201
    monkeypatch.setattr(dev.invoker, "signer", other_signer())
    sent = httpx.post(f"{dev.ingress_url}/SignedGreeter/greet/send", json="stranger", timeout=30)
    assert sent.status_code == 202, sent.text
    invocation_id = sent.json()["invocationId"]

    def failed() -> dict | None:
        status = describe(dev, invocation_id)
        failure = status.get("last_failure") or {}
        return status if "401" in str(failure) else None

    status = wait_for(failed, 20, "an attempt refused with 401")
    assert "request identity" in str(status["last_failure"])
    assert "which the deployment does not accept" in str(status["last_failure"])
    monkeypatch.undo()  # the right key again: the retry goes through
    wait_for(lambda: describe(dev, invocation_id)["status"] == "completed", 30, "the invocation to complete")


# --- Lambda: the signature rides in the API-Gateway-proxy event's headers ---------------------------


@pytest.fixture(scope="module")
def lambda_dev(moto_endpoint: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[DevServer]:
    """`torpor dev --lambda Signed=tests.helpers.signed_services:app --request-identity-key-file K`,
    the function trusting K's public key (the emulator inherits the variable)."""
    key = tmp_path_factory.mktemp("lambda-identity") / "key.pem"
    key.write_bytes(generate_pem())
    saved = os.environ.get(IDENTITY_KEYS_ENV)
    os.environ[IDENTITY_KEYS_ENV] = signer_from_file(key).public_key
    cwd = os.getcwd()
    os.chdir(REPO_ROOT)  # the emulator imports `tests.helpers...` from the working directory
    try:
        server = DevServer(
            ingress_port=0,
            admin_port=0,
            dynamodb_endpoint=moto_endpoint,
            table=unique_table_name(),
            settings=SETTINGS,
            lambda_functions={"Signed": "tests.helpers.signed_services:app"},
            request_identity_key_file=key,
        )
        server.start()
    finally:
        os.chdir(cwd)
        if saved is None:
            os.environ.pop(IDENTITY_KEYS_ENV, None)
        else:
            os.environ[IDENTITY_KEYS_ENV] = saved
    try:
        yield server
    finally:
        server.stop()


def test_a_lambda_deployment_with_identity_keys_accepts_signed_requests(lambda_dev: DevServer) -> None:
    reply = register(lambda_dev, arn=SIGNED_ARN)
    assert reply.status_code == 201, reply.text
    answer = greet(lambda_dev, "lambda")
    assert answer.status_code == 200, answer.text
    assert answer.json() == "hello lambda"
    calls = [c for c in lambda_dev.lambda_emulator.calls()["calls"] if (c.get("path") or "").startswith("/invoke/")]
    assert len(calls) >= 2  # the sleep suspended: a second, resuming request, signed as well


def test_a_lambda_deployment_refuses_unsigned_discovery(lambda_dev: DevServer, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(lambda_dev.invoker, "signer", None)
    reply = register(lambda_dev, arn=SIGNED_ARN)
    assert reply.status_code == 400, reply.text
    assert "GET /discover answered HTTP 401" in reply.json()["message"]


# --- the command line ------------------------------------------------------------------------------


def test_torpor_dev_flag_generates_the_key_and_prints_its_public_key(tmp_path: Path) -> None:
    key = tmp_path / "dev-key.pem"
    torpor = [sys.executable, "-m", "adapters.cli"]
    command = [*torpor, "dev", "--in-memory", "--ingress-port", "0", "--admin-port", "0"]
    command += ["--request-identity-key-file", str(key)]
    process = subprocess.Popen(command, cwd=REPO_ROOT, stderr=subprocess.PIPE, text=True)
    banner = ""
    try:
        assert process.stderr is not None
        deadline = time.monotonic() + 60
        while "request identity public key:" not in banner and time.monotonic() < deadline:
            line = process.stderr.readline()
            if not line:
                break
            banner = line
    finally:
        stop_process(process)
    assert "request identity public key: publickeyv1_" in banner, banner
    printed = subprocess.run(
        [*torpor, "request-identity", "public-key", str(key)], cwd=REPO_ROOT, capture_output=True, text=True, check=True
    )
    assert banner.rstrip().endswith(printed.stdout.strip())
    assert stat.S_IMODE(key.stat().st_mode) == 0o600


@pytest.mark.parametrize("command", ["public-key", "dev"])
@pytest.mark.parametrize(
    ("content", "expected"),
    [
        (None, "does not exist"),
        ("not a key", "is not a PEM private key"),
    ],
)
def test_a_bad_key_file_is_a_clear_error_not_a_traceback(
    tmp_path: Path, command: str, content: str | None, expected: str
) -> None:
    key = tmp_path / "key.pem"
    if content is not None:
        key.write_text(content)
    elif command == "dev":  # torpor dev writes a missing file: make the directory missing instead
        key, expected = tmp_path / "missing-dir" / "key.pem", "choose a path in a directory that exists"
    arguments = ["request-identity", "public-key", str(key)]
    if command == "dev":
        arguments = ["dev", "--in-memory", "--ingress-port", "0", "--admin-port", "0"]
        arguments += ["--request-identity-key-file", str(key)]
    result = subprocess.run(
        [sys.executable, "-m", "adapters.cli", *arguments], cwd=REPO_ROOT, capture_output=True, text=True, timeout=60
    )
    assert result.returncode == 1
    assert expected in result.stderr
    assert "Traceback" not in result.stderr
