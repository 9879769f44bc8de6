"""Fixtures of the conformance suite (Restate's SDK tests, `restatedev/e2e` `sdk-tests/`, as pytest).

Environment:
- `TORPOR_CONFORMANCE_RUNTIME`: `torpor` (default: `torpor dev`) or `restate` (`restate-server`
  1.7.12 from npm, the differential check); `scripts/conformance.sh --runtime ...` sets it.
- `TORPOR_CONFORMANCE_MODE`: `request-response` (default), `bidi` (the Python services are served
  over HTTP/2 too and registered over it: every invocation is streamed) or `lambda` (`torpor dev`
  only: the Python services are a Lambda function of `torpor dev --lambda`, run by its local Lambda
  emulator with in-process checkpoints and registered by ARN; killing the services kills the
  function's process); see `harness.MODE`.
- `TORPOR_CONFORMANCE_LANGS`: comma-separated languages of the test services, default
  `python,typescript`. A language whose services cannot start is an error, not a skip.

Fixtures:
- `lang`: the language (session-scoped, parametrized: test ids end in `[python]` / `[typescript]`).
- `env`: one runtime per language per session with that language's services registered (`Env`).
- `private_env(lang, *, max_attempts=None, request_identity=False)`: a factory of `PrivateEnv`s, each
  with its own runtime and services processes, torn down after the test.
- `poll_until` lives in `harness.py` (import it from there).
"""

from __future__ import annotations

import os
import tempfile
import uuid
from collections.abc import Callable, Iterator
from contextlib import ExitStack
from pathlib import Path

import pytest

from tests.conformance.harness import (
    LANGS,
    MODE,
    MODES,
    RUNTIMES,
    Env,
    LambdaServices,
    PrivateEnv,
    RestateRuntime,
    Services,
    TorporRuntime,
    hosted_on_lambda,
    make_identity_key,
)
from tests.helpers.moto import moto_server


def _runtime() -> str:
    runtime = os.environ.get("TORPOR_CONFORMANCE_RUNTIME", "torpor")
    if runtime not in RUNTIMES:
        raise pytest.UsageError(f"TORPOR_CONFORMANCE_RUNTIME={runtime!r}: expected one of {', '.join(RUNTIMES)}")
    return runtime


def _langs() -> list[str]:
    langs = [s.strip() for s in os.environ.get("TORPOR_CONFORMANCE_LANGS", ",".join(LANGS)).split(",") if s.strip()]
    unknown = [lang for lang in langs if lang not in LANGS]
    if unknown or not langs:
        raise pytest.UsageError(f"TORPOR_CONFORMANCE_LANGS: expected some of {', '.join(LANGS)}, got {langs!r}")
    return langs


RUNTIME = _runtime()
if MODE not in MODES:
    raise pytest.UsageError(f"TORPOR_CONFORMANCE_MODE={MODE!r}: expected one of {', '.join(MODES)}")
if MODE == "lambda" and RUNTIME != "torpor":
    raise pytest.UsageError(
        f"TORPOR_CONFORMANCE_MODE=lambda runs on torpor dev only (its --lambda emulator with in-process "
        f"checkpoints), not TORPOR_CONFORMANCE_RUNTIME={RUNTIME}"
    )
SELECTED_LANGS = _langs()


def pytest_report_header(config: pytest.Config) -> str:
    langs = ", ".join(SELECTED_LANGS)
    return f"conformance: runtime {RUNTIME}, mode {MODE}, languages {langs}; logs in .cache/conformance-logs/"


@pytest.fixture(scope="session", params=SELECTED_LANGS)
def lang(request: pytest.FixtureRequest) -> str:
    """The test services' language: `"python"` or `"typescript"`."""
    return str(request.param)


@pytest.fixture(scope="session")
def env(lang: str) -> Iterator[Env]:
    """The runtime shared by every test of one language, with that language's services registered."""
    if hosted_on_lambda(lang):
        lambda_runtime = TorporRuntime(lambda_services=True)
        shared = Env(lambda_runtime, LambdaServices(lambda_runtime))
    else:
        runtime = TorporRuntime() if RUNTIME == "torpor" else RestateRuntime()
        shared = Env(runtime, Services(lang))
    try:
        shared.start()
        yield shared
    finally:
        shared.close()


@pytest.fixture(scope="session")
def _private_moto() -> Iterator[Callable[[], str]]:
    """A moto server for private `torpor dev`s (each on its own table), started on first use."""
    with ExitStack() as stack:
        endpoint: list[str] = []

        def get() -> str:
            if not endpoint:
                endpoint.append(stack.enter_context(moto_server(serial=True)))
            return endpoint[0]

        yield get


@pytest.fixture(scope="session")
def _private_pool() -> Iterator[tuple[Path, dict[tuple[str, int | None, bool], list[PrivateEnv]]]]:
    """Private envs a finished test left running, by `(lang, max_attempts, request_identity)`, for
    the next test that asks for the same settings, in this module or a later one (test_kill_runtime's
    are taken up by test_sleep_with_failures); all stopped at the end of the run. Also the folder for
    request-identity keys (a restarted runtime reads its key file again)."""
    idle: dict[tuple[str, int | None, bool], list[PrivateEnv]] = {}
    with tempfile.TemporaryDirectory(prefix="conformance-private-") as scratch:
        try:
            yield Path(scratch), idle
        finally:
            for envs in idle.values():
                for private in envs:
                    private.close()


@pytest.fixture
def private_env(
    _private_moto: Callable[[], str],
    _private_pool: tuple[Path, dict[tuple[str, int | None, bool], list[PrivateEnv]]],
) -> Iterator[Callable[..., PrivateEnv]]:
    """A factory: `private_env(lang, *, max_attempts=None, request_identity=False)` → a started `PrivateEnv`.

    - `max_attempts=1`: the runtime's retry policy allows one attempt, then kills the invocation
      (torpor: `TORPOR_RETRY_POLICY_MAX_ATTEMPTS=1`, `..._ON_MAX_ATTEMPTS=kill`;
      restate: `default-retry-policy` max-attempts 1, on-max-attempts kill, as upstream).
    - `request_identity=True`: a new Ed25519 key; the runtime signs with the private key
      (torpor: `--request-identity-key-file`; restate: `request-identity-private-key-pem-file`),
      the services accept only requests signed by it (`TORPOR_CONFORMANCE_IDENTITY_KEY`);
      `env.identity_public_key` holds the `publickeyv1_...` key.

    Each env has its own runtime and services processes, used by this test alone. When the test
    ends with both processes running (a test that kills one and starts it again counts), the env
    is kept for the next test asking for the same settings (random keys keep tests apart); otherwise
    it is stopped. Start-up is the slow part of these tests.
    """
    scratch, idle = _private_pool
    used: list[tuple[tuple[str, int | None, bool], PrivateEnv]] = []

    def make(lang: str, *, max_attempts: int | None = None, request_identity: bool = False) -> PrivateEnv:
        settings = (lang, max_attempts, request_identity)
        if idle.get(settings):
            private = idle[settings].pop()
            used.append((settings, private))
            return private
        key_file: Path | None = None
        public_key: str | None = None
        if request_identity:
            directory = scratch / uuid.uuid4().hex[:8]
            directory.mkdir()
            key_file, public_key = make_identity_key(directory)
        runtime: TorporRuntime | RestateRuntime
        services: Services | LambdaServices
        if RUNTIME == "torpor":
            table = f"conformance-{uuid.uuid4().hex[:12]}"
            on_lambda = hosted_on_lambda(lang)
            runtime = TorporRuntime(
                dynamodb_endpoint=_private_moto(),
                table=table,
                max_attempts=max_attempts,
                identity_key_file=key_file,
                lambda_services=on_lambda,
                identity_public_key=public_key if on_lambda else None,
            )
            services = LambdaServices(runtime) if on_lambda else Services(lang, identity_public_key=public_key)
        else:
            runtime = RestateRuntime(max_attempts=max_attempts, identity_key_file=key_file)
            services = Services(lang, identity_public_key=public_key)
        private = PrivateEnv(runtime, services, identity_public_key=public_key)
        used.append((settings, private))
        private.start()
        return private

    try:
        yield make
    finally:
        for settings, private in used:
            if private.running:
                idle.setdefault(settings, []).append(private)
            else:
                private.close()
