"""Processes and clients for the conformance suite: a runtime (`torpor dev` or `restate-server`), the
test services of one language, and `Env`, the ingress/admin client the tests drive.

The suite is a port of Restate's SDK conformance tests (`restatedev/e2e`, `sdk-tests/`) in their
request/response ("alwaysSuspending") flavour; `conftest.py` describes the fixtures, and
`services_py/` the test-service contract both service sets implement.

Every process writes its output to a log file under `.cache/conformance-logs/` (git-ignored); a
failure message that concerns a process names its log.
"""

from __future__ import annotations

import contextlib
import json
import os
import platform
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from collections.abc import Callable, Mapping
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any, TypeVar

import httpx
from base58 import b58encode

REPO_ROOT = Path(__file__).resolve().parents[2]
CACHE = REPO_ROOT / ".cache"
LOG_DIR = CACHE / "conformance-logs"
SERVICES_TS = REPO_ROOT / "tests" / "conformance" / "services_ts"

RUNTIMES = ("torpor", "restate")
LANGS = ("python", "typescript")
MODES = ("request-response", "bidi", "lambda")
MODE = os.environ.get("TORPOR_CONFORMANCE_MODE", "request-response")
"""`TORPOR_CONFORMANCE_MODE`: `request-response` (default); `bidi`: the Python services also speak
HTTP/2 (h2c) and are registered over it, so the runtime streams every invocation (bidirectional
mode); `lambda` (`torpor dev` only): the Python services are a Lambda function in `torpor dev
--lambda` (`LambdaServices`: the local Lambda emulator, in-process checkpoints), registered by ARN.
In both other modes the TypeScript services stay as they are: HTTP/1.1, request/response."""

LAMBDA_FUNCTION = "ConformanceServices"
LAMBDA_TARGET = "tests.conformance.services_py.aws_lambda:handler"
LAMBDA_ARN = f"arn:aws:lambda:us-east-1:123456789012:function:{LAMBDA_FUNCTION}:1"
"""Lambda mode: the function `torpor dev --lambda {LAMBDA_FUNCTION}={LAMBDA_TARGET}` hosts, and the
ARN it is registered by (the emulator's account, version 1)."""

RESTATE_VERSION = "1.7.12"
"""The restate-server the differential run compares against (npm `@restatedev/restate-server`)."""
_ARCH = {"x86_64": "x64", "aarch64": "arm64"}.get(platform.machine(), platform.machine())
RESTATE_DIR = CACHE / "conformance-restate"
"""Where `restate-server` is installed with npm (git-ignored); its data dirs go to a temp dir."""

T = TypeVar("T")


# --- polling ---------------------------------------------------------------------------------------


def poll_until(fn: Callable[[], T], timeout_s: float = 10, interval_s: float = 0.1) -> T:
    """Call `fn` until it returns a truthy value without raising AssertionError; return that value.

    The suite's "await until" (every 100 ms for up to 10 s). Other exceptions propagate at once.

    Raises:
        AssertionError: after `timeout_s` seconds, with the last AssertionError (or the last falsy value).
    """
    deadline = time.monotonic() + timeout_s
    last: str = "never called"
    while True:
        try:
            value = fn()
            if value:
                return value
            last = f"last value {value!r}"
        except AssertionError as exc:
            last = f"last assertion: {exc}"
        if time.monotonic() >= deadline:
            raise AssertionError(f"poll_until: nothing truthy within {timeout_s} s; {last}")
        time.sleep(interval_s)


def idem() -> str:
    """A fresh random idempotency key (or object key): `uuid4().hex`."""
    return uuid.uuid4().hex


def json_bytes(value: Any) -> list[int]:
    """`value` as JSON, as the list of byte values a ProxyRequest's `message` carries."""
    return list(json.dumps(value).encode())


def free_port() -> int:
    """A TCP port free on 127.0.0.1 right now (reserved only until this returns)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


# --- processes -------------------------------------------------------------------------------------


class ManagedProcess:
    """A child process started (and restarted) with the same command, its output appended to a log file."""

    def __init__(self, name: str, argv: list[str], env: Mapping[str, str], cwd: Path = REPO_ROOT) -> None:
        self.name = name
        self.argv = argv
        self.env = dict(env)
        self.cwd = cwd
        LOG_DIR.mkdir(parents=True, exist_ok=True)
        self.log_path = LOG_DIR / f"{name}-{uuid.uuid4().hex[:8]}.log"
        self.process: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        """Start the command (again); its stdout and stderr go to `log_path`."""
        with open(self.log_path, "ab") as log:
            log.write(f"--- start {time.strftime('%H:%M:%S')}: {' '.join(self.argv)}\n".encode())
            log.flush()
            self.process = subprocess.Popen(
                self.argv,
                cwd=self.cwd,
                env=self.env,
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,  # a signal to the test run does not reach it; we end it ourselves
            )

    @property
    def alive(self) -> bool:
        return self.process is not None and self.process.poll() is None

    def check_alive(self) -> None:
        """Raise RuntimeError naming the log if the process has exited."""
        if self.process is not None and self.process.poll() is not None:
            raise RuntimeError(f"{self.name} exited with status {self.process.returncode}; see {self.log_path}")

    def kill(self) -> None:
        """SIGKILL the process group (the process and any children it started) and reap it."""
        if self.process is not None and self.process.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.process.pid, signal.SIGKILL)
            self.process.wait()

    def stop(self, timeout_s: float = 15) -> None:
        """SIGTERM the process, wait up to `timeout_s`, then SIGKILL."""
        if self.process is not None and self.process.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.process.pid, signal.SIGTERM)
            try:
                self.process.wait(timeout_s)
            except subprocess.TimeoutExpired:
                self.kill()
        # children left in the group (e.g. a shell's node) go too
        if self.process is not None:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(self.process.pid, signal.SIGKILL)


def wait_http(
    url: str, process: ManagedProcess, timeout_s: float = 60, ok: Callable[[httpx.Response], bool] | None = None
) -> None:
    """Poll `GET url` until `ok(response)` (default: status 200), failing early if `process` exits."""
    ok = ok or (lambda r: r.status_code == 200)
    deadline = time.monotonic() + timeout_s
    last = "no answer"
    delay = 0.02
    while time.monotonic() < deadline:
        process.check_alive()
        try:
            response = httpx.get(url, timeout=2)
            if ok(response):
                return
            last = f"{response.status_code} {response.text[:200]}"
        except httpx.HTTPError as exc:
            last = repr(exc)
        time.sleep(delay)
        delay = min(delay * 2, 0.25)
    raise RuntimeError(f"{process.name}: {url} not ready within {timeout_s} s ({last}); see {process.log_path}")


def hosted_on_lambda(lang: str) -> bool:
    """Whether `lang`'s services run as a Lambda function in `torpor dev` (lambda mode, Python)."""
    return MODE == "lambda" and lang == "python"


def child_env(extra: Mapping[str, str] | None = None) -> dict[str, str]:
    """The environment for a child: ours, the repo on PYTHONPATH, no Lambda hints, plus `extra`."""
    env = dict(os.environ)
    for name in ("AWS_LAMBDA_FUNCTION_NAME", "TORPOR_CONFORMANCE_IDENTITY_KEY", "TORPOR_CONFIG"):
        env.pop(name, None)
    env["PYTHONPATH"] = os.pathsep.join([str(REPO_ROOT), *filter(None, env.get("PYTHONPATH", "").split(os.pathsep))])
    env["PYTHONUNBUFFERED"] = "1"
    if extra:
        env.update(extra)
    return env


# --- test services ---------------------------------------------------------------------------------

_ts_installed = threading.Lock()
_ts_install_done = False


def install_typescript_services() -> None:
    """Run `services_ts/install.sh` once per test run (idempotent; npm packages and Node 22)."""
    global _ts_install_done
    with _ts_installed:
        if _ts_install_done:
            return
        script = SERVICES_TS / "install.sh"
        if not script.exists():
            raise RuntimeError(f"{script} does not exist: the TypeScript services are not there yet")
        result = subprocess.run(["bash", str(script)], cwd=REPO_ROOT, capture_output=True, text=True, timeout=600)
        if result.returncode != 0:
            raise RuntimeError(
                f"{script} failed ({result.returncode}):\n{result.stdout[-2000:]}\n{result.stderr[-2000:]}"
            )
        _ts_install_done = True


class Services:
    """The test services of one language at `http://127.0.0.1:{port}` (one process, same port on restart)."""

    def __init__(self, lang: str, *, identity_public_key: str | None = None) -> None:
        if lang not in LANGS:
            raise ValueError(f"unknown language {lang!r}; known: {', '.join(LANGS)}")
        self.lang = lang
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        extra = {"TORPOR_CONFORMANCE_IDENTITY_KEY": identity_public_key} if identity_public_key else {}
        if lang == "python":
            argv = [sys.executable, "-m", "tests.conformance.services_py", "--port", str(self.port)]
            argv += ["--http2"] if MODE == "bidi" else []
        else:
            install_typescript_services()
            argv = ["bash", str(SERVICES_TS / "run.sh"), "--port", str(self.port)]
        self.process = ManagedProcess(f"services-{lang}", argv, child_env(extra))

    def start(self) -> None:
        """Start the services and wait until they answer HTTP (any status: discovery may need a signature)."""
        self.process.start()
        wait_http(f"{self.url}/discover", self.process, timeout_s=60, ok=lambda r: True)

    def kill(self) -> None:
        self.process.kill()

    def stop(self) -> None:
        self.process.stop()


class LambdaServices:
    """The Python test services as the Lambda function `LAMBDA_FUNCTION` of a `torpor dev --lambda`
    (lambda mode): the local Lambda emulator, a child process of that runtime, runs them behind
    in-process checkpoints (`adapters.aws.checkpoints`), committing run results to its store.

    `kill` / `stop` act on that child (the function's process: SIGKILL / SIGTERM, waited for);
    `torpor dev` starts it again on the same port, as Lambda replaces an execution environment that
    died, and `start` waits until a new one answers. The runtime's process and log stand for it.
    """

    lang = "python"

    def __init__(self, runtime: TorporRuntime) -> None:
        self.runtime = runtime
        self._gone: int | None = None  # the pid of the child last killed or stopped

    @property
    def process(self) -> ManagedProcess:
        return self.runtime.process

    @property
    def url(self) -> str:
        """The emulator's base URL, from the runtime's log (`lambda function NAME on URL: ...`)."""
        text = self.runtime.process.log_path.read_text(errors="replace")
        found = re.findall(rf"lambda function {LAMBDA_FUNCTION} on (http://[^\s:]+:\d+)", text)
        if not found:
            raise RuntimeError(f"no Lambda emulator URL in {self.runtime.process.log_path}")
        return str(found[-1])

    def pid(self) -> int | None:
        """The pid of the emulator's process (a child of the runtime's), or None if there is none."""
        process = self.runtime.process.process
        if process is None or process.poll() is not None:
            return None
        for stat in Path("/proc").glob("[0-9]*/stat"):
            try:
                state, ppid = stat.read_text().rsplit(")", 1)[1].split()[:2]  # after "pid (comm)"
                if int(ppid) != process.pid or state == "Z":  # a zombie: killed, not reaped yet
                    continue
                if b"adapters.local.lambda_emulator" in (stat.parent / "cmdline").read_bytes():
                    return int(stat.parent.name)
            except (OSError, IndexError, ValueError):  # gone meanwhile
                continue
        return None

    def start(self, timeout_s: float = 60) -> None:
        """Wait until the emulator (a new one after `kill` / `stop`) answers HTTP."""

        def answering() -> bool:
            self.runtime.process.check_alive()
            pid = self.pid()
            assert pid is not None, "no emulator process yet"
            assert pid != self._gone, "no new emulator process yet"
            try:
                return httpx.get(f"{self.url}/_emulator/calls", timeout=2).status_code == 200
            except httpx.HTTPError as exc:
                raise AssertionError(f"the emulator does not answer yet: {exc!r}") from exc

        poll_until(answering, timeout_s=timeout_s, interval_s=0.05)

    def _signal(self, signum: int) -> None:
        pid = self.pid()
        if pid is None:
            return
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signum)
        self._gone = pid
        poll_until(lambda: self.pid() != pid, timeout_s=15, interval_s=0.05)  # reaped by torpor dev

    def kill(self) -> None:
        """SIGKILL the function's process (the emulator); torpor dev starts another."""
        self._signal(signal.SIGKILL)

    def stop(self) -> None:
        """SIGTERM the function's process and wait for it to exit; torpor dev starts another."""
        self._signal(signal.SIGTERM)


# --- runtimes --------------------------------------------------------------------------------------


class TorporRuntime:
    """`torpor dev` as a process on free loopback ports.

    With `dynamodb_endpoint` None it uses the SQLite store in memory (`--in-memory`, lost when the
    process ends); a private env passes an external moto server so data outlives a restart.
    """

    name = "torpor"

    def __init__(
        self,
        *,
        dynamodb_endpoint: str | None = None,
        table: str = "torpor",
        max_attempts: int | None = None,
        identity_key_file: Path | None = None,
        lambda_services: bool = False,
        identity_public_key: str | None = None,
    ) -> None:
        """`lambda_services`: host the Python test services with `--lambda` (`LambdaServices`), which
        accept only requests signed with `identity_public_key` if given."""
        self.ingress_port, self.admin_port = free_port(), free_port()
        self.ingress_url = f"http://127.0.0.1:{self.ingress_port}"
        self.admin_url = f"http://127.0.0.1:{self.admin_port}"
        argv = [
            sys.executable, "-m", "adapters.cli", "dev",
            "--ingress-port", str(self.ingress_port), "--admin-port", str(self.admin_port),
        ]  # fmt: skip
        if dynamodb_endpoint is not None:
            argv += ["--dynamodb-endpoint", dynamodb_endpoint, "--table", table]
        else:
            argv += ["--in-memory"]
        if identity_key_file is not None:
            argv += ["--request-identity-key-file", str(identity_key_file)]
        if lambda_services:
            argv += ["--lambda", f"{LAMBDA_FUNCTION}={LAMBDA_TARGET}"]
        extra = {"AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing", "AWS_DEFAULT_REGION": "us-east-1"}
        extra = extra if dynamodb_endpoint else {}
        if max_attempts is not None:  # the default retry policy, as NonDeterminismErrors configures it upstream
            extra |= {
                "TORPOR_RETRY_POLICY_MAX_ATTEMPTS": str(max_attempts),
                "TORPOR_RETRY_POLICY_ON_MAX_ATTEMPTS": "kill",
                "TORPOR_RETRY_POLICY_INITIAL_INTERVAL_MS": "1",
            }
        if identity_public_key is not None:  # the emulator's process inherits it
            extra |= {"TORPOR_CONFORMANCE_IDENTITY_KEY": identity_public_key}
        self.process = ManagedProcess("torpor-dev", argv, child_env(extra or None))

    def start(self) -> None:
        self.process.start()
        wait_http(f"{self.admin_url}/health", self.process, timeout_s=90)

    def kill(self) -> None:
        self.process.kill()

    def stop(self) -> None:
        self.process.stop()

    def close(self) -> None:
        self.process.stop()


def restate_binary() -> Path:
    """restate-server's binary: `.cache/conformance-restate/` (installed with npm on first use) or the bench's."""
    relative = Path(f"node_modules/@restatedev/restate-server-linux-{_ARCH}/bin/restate-server")
    for base in (RESTATE_DIR, CACHE / "bench" / "restate"):
        if (base / relative).exists():
            return base / relative
    RESTATE_DIR.mkdir(parents=True, exist_ok=True)
    npm = shutil.which("npm")
    if npm is None:
        raise RuntimeError("npm is needed to install restate-server")
    subprocess.run(
        [npm, "install", "--prefix", str(RESTATE_DIR), "--no-save", "--no-audit", "--no-fund", "--ignore-scripts",
         f"@restatedev/restate-server@{RESTATE_VERSION}"],
        check=True, capture_output=True, timeout=600,
    )  # fmt: skip
    return RESTATE_DIR / relative


class RestateRuntime:
    """`restate-server` on loopback ports with a temp base dir, configured like the suite's alwaysSuspending mode.

    alwaysSuspending: `worker.invoker.inactivity-timeout = 0s` (every await that is not complete
    suspends), as `restatedev/e2e` `sdk-tests` sets with `RESTATE_WORKER__INVOKER__INACTIVITY_TIMEOUT`.
    """

    name = "restate"

    def __init__(self, *, max_attempts: int | None = None, identity_key_file: Path | None = None) -> None:
        binary = restate_binary()
        version = subprocess.run([str(binary), "--version"], capture_output=True, text=True, check=True).stdout
        if RESTATE_VERSION not in version:
            raise RuntimeError(f"{binary} is {version.strip()}, not {RESTATE_VERSION}")
        self.ingress_port, self.admin_port, self.node_port = free_port(), free_port(), free_port()
        self.ingress_url = f"http://127.0.0.1:{self.ingress_port}"
        self.admin_url = f"http://127.0.0.1:{self.admin_port}"
        self.base_dir = Path(tempfile.mkdtemp(prefix="conformance-restate-"))
        env = {
            "RESTATE_INGRESS__BIND_ADDRESS": f"127.0.0.1:{self.ingress_port}",
            "RESTATE_ADMIN__BIND_ADDRESS": f"127.0.0.1:{self.admin_port}",
            "RESTATE_BIND_ADDRESS": f"127.0.0.1:{self.node_port}",
            "RESTATE_ADVERTISED_ADDRESS": f"http://127.0.0.1:{self.node_port}/",
            "RESTATE_DISABLE_TELEMETRY": "true",
            "RESTATE_LOG_DISABLE_ANSI_CODES": "true",
            # a lighter footprint for a shared 2-core machine; neither changes what a test observes
            "RESTATE_DEFAULT_NUM_PARTITIONS": "4",
            "RESTATE_ROCKSDB_TOTAL_MEMORY_SIZE": "512MiB",
            "DO_NOT_TRACK": "true",
            "RESTATE_WORKER__INVOKER__INACTIVITY_TIMEOUT": "0s",
        }
        if max_attempts is not None:  # as NonDeterminismErrors configures it upstream
            env["RESTATE_DEFAULT_RETRY_POLICY__MAX_ATTEMPTS"] = str(max_attempts)
            env["RESTATE_DEFAULT_RETRY_POLICY__ON_MAX_ATTEMPTS"] = "kill"
            env["RESTATE_DEFAULT_RETRY_POLICY__INITIAL_INTERVAL"] = "1ms"
        if identity_key_file is not None:
            env["RESTATE_REQUEST_IDENTITY_PRIVATE_KEY_PEM_FILE"] = str(identity_key_file)
        argv = [str(binary), "--no-logo", "--listen-mode", "tcp", "--base-dir", str(self.base_dir)]
        self.process = ManagedProcess("restate-server", argv, child_env(env))

    def start(self) -> None:
        self.process.start()
        wait_http(f"{self.admin_url}/health", self.process, timeout_s=90)
        wait_http(f"{self.ingress_url}/restate/health", self.process, timeout_s=90)

    def kill(self) -> None:
        self.process.kill()

    def stop(self) -> None:
        self.process.stop()

    def close(self) -> None:
        self.process.stop()
        shutil.rmtree(self.base_dir, ignore_errors=True)


Runtime = TorporRuntime | RestateRuntime


# --- request identity ------------------------------------------------------------------------------


def make_identity_key(directory: Path) -> tuple[Path, str]:
    """A new Ed25519 key: `(PKCS#8 PEM file of the private key, "publickeyv1_<base58 raw public key>")`."""
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

    key = Ed25519PrivateKey.generate()
    pem = key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption())
    path = directory / "request-identity.pem"
    path.write_bytes(pem)
    raw = key.public_key().public_bytes(serialization.Encoding.Raw, serialization.PublicFormat.Raw)
    return path, "publickeyv1_" + b58encode(raw).decode()


# --- the env the tests drive -----------------------------------------------------------------------


class Env:
    """A runtime with one language's services registered, and HTTP clients for its ingress and admin API.

    Attributes:
        runtime: `"torpor"` or `"restate"`.
        lang: `"python"` or `"typescript"`.
        ingress_url, admin_url: base URLs.
        ingress, admin: `httpx.Client`s with those base URLs (timeout 60 s).
        identity_public_key: the `publickeyv1_...` key the services require, or None.
    """

    def __init__(
        self, runtime: Runtime, services: Services | LambdaServices, *, identity_public_key: str | None = None
    ) -> None:
        self._runtime = runtime
        self._services = services
        self.runtime: str = runtime.name
        self.lang = services.lang
        self.ingress_url = runtime.ingress_url
        self.admin_url = runtime.admin_url
        self.identity_public_key = identity_public_key
        self.ingress = httpx.Client(base_url=self.ingress_url, timeout=60)
        self.admin = httpx.Client(base_url=self.admin_url, timeout=60)

    # set-up ---------------------------------------------------------------------------------------

    @property
    def services_url(self) -> str:
        """The services' base URL (lambda mode: the Lambda emulator's, which `torpor dev` started)."""
        return self._services.url

    @property
    def on_lambda(self) -> bool:
        """Whether the services are a Lambda function in the runtime (lambda mode, `LambdaServices`)."""
        return isinstance(self._services, LambdaServices)

    def start(self) -> Env:
        """Start the services and the runtime (side by side), register the deployment."""
        if self.on_lambda:  # the runtime starts them
            self._runtime.start()
            self._services.start()
            self.register()
            return self
        with ThreadPoolExecutor(max_workers=2) as pool:
            started = [pool.submit(self._services.start), pool.submit(self._runtime.start)]
            for future in started:
                future.result()
        self.register()
        return self

    def register(self) -> None:
        """`POST /deployments {"uri": services, "force": false}` (lambda mode: `{"arn": LAMBDA_ARN}`);
        asserts 201 (200: already known)."""
        body: dict[str, Any] = {"uri": self.services_url, "force": False}
        if self.on_lambda:
            body = {"arn": LAMBDA_ARN, "force": False}
        if self.runtime == "restate" and MODE != "bidi":
            body["use_http_11"] = True
        reply = self.admin.post("/deployments", json=body)
        assert reply.status_code in (200, 201), f"registration: {reply.status_code} {reply.text}"
        if MODE == "bidi" and self.lang == "python" and self.runtime == "torpor":
            assert reply.json().get("protocol_type") == "BidiStream", f"not registered for bidi mode: {reply.text}"

    def close(self) -> None:
        """Stop the runtime and the services; close the clients."""
        try:
            self._runtime.close()
        finally:
            self._services.stop()
            self.ingress.close()
            self.admin.close()

    @property
    def running(self) -> bool:
        """Whether the runtime and the services processes are both running."""
        return self._runtime.process.alive and self._services.process.alive

    @property
    def logs(self) -> list[Path]:
        """The log files of the runtime and the services."""
        return [self._runtime.process.log_path, self._services.process.log_path]

    def unsigned(self, method: str, path: str, *, headers: Mapping[str, str] | None = None) -> int:
        """Send `method path` (empty body, no request identity) straight to the services, not through
        the runtime; returns the HTTP status they answer (lambda mode: the function's `statusCode`,
        through the emulator's Invoke API)."""
        if not self.on_lambda:
            return httpx.request(
                method, f"{self.services_url}{path}", headers=headers, content=b"", timeout=10
            ).status_code
        event = {
            "path": path,
            "httpMethod": method,
            "headers": dict(headers or {}),
            "body": "",
            "isBase64Encoded": True,
        }
        reply = httpx.post(
            f"{self.services_url}/2015-03-31/functions/{LAMBDA_FUNCTION}/invocations", json=event, timeout=10
        )
        assert reply.status_code == 200, f"Invoke: {reply.status_code} {reply.text}"
        return int(reply.json()["statusCode"])

    # ingress --------------------------------------------------------------------------------------

    @staticmethod
    def _path(service: str, handler: str, key: str | None) -> str:
        return f"/{service}/{key}/{handler}" if key is not None else f"/{service}/{handler}"

    @staticmethod
    def _request(
        body: Any, raw: bytes | None, idempotency_key: str | None, headers: Mapping[str, str] | None
    ) -> dict[str, Any]:
        all_headers = dict(headers or {})
        if idempotency_key is not None:
            all_headers["idempotency-key"] = idempotency_key
        if raw is not None:
            all_headers.setdefault("content-type", "application/octet-stream")
            return {"content": raw, "headers": all_headers}
        if body is None:
            return {"headers": all_headers}
        return {"json": body, "headers": all_headers}

    def call(
        self,
        service: str,
        handler: str,
        body: Any = None,
        *,
        key: str | None = None,
        idempotency_key: str | None = None,
        headers: Mapping[str, str] | None = None,
        raw: bytes | None = None,
    ) -> httpx.Response:
        """`POST /{service}[/{key}]/{handler}`: JSON `body` (none when None) unless `raw` bytes are given."""
        return self.ingress.post(
            self._path(service, handler, key), **self._request(body, raw, idempotency_key, headers)
        )

    def send(
        self,
        service: str,
        handler: str,
        body: Any = None,
        *,
        key: str | None = None,
        idempotency_key: str | None = None,
        delay: str | None = None,
        headers: Mapping[str, str] | None = None,
    ) -> httpx.Response:
        """`POST /{service}[/{key}]/{handler}/send[?delay=...]` (delay as `"5s"` / `"500ms"`)."""
        params = {"delay": delay} if delay is not None else None
        return self.ingress.post(
            self._path(service, handler, key) + "/send",
            params=params,
            **self._request(body, None, idempotency_key, headers),
        )

    def attach(self, invocation_id: str) -> httpx.Response:
        """`GET /restate/invocation/{id}/attach`: wait for the invocation's result."""
        return self.ingress.get(f"/restate/invocation/{invocation_id}/attach")

    def output(self, invocation_id: str) -> httpx.Response:
        """`GET /restate/invocation/{id}/output`: the result if there is one (470 while running)."""
        return self.ingress.get(f"/restate/invocation/{invocation_id}/output")


class PrivateEnv(Env):
    """An `Env` with its own runtime and services processes, which a test may kill, stop and restart."""

    def kill_runtime(self) -> None:
        """SIGKILL the runtime."""
        self._runtime.kill()

    def stop_runtime(self) -> None:
        """SIGTERM the runtime and wait for it to exit."""
        self._runtime.stop()

    def start_runtime(self) -> None:
        """Start the runtime again: same data, same ports."""
        self._runtime.start()

    def kill_services(self) -> None:
        """SIGKILL the services process."""
        self._services.kill()

    def stop_services(self) -> None:
        """SIGTERM the services process and wait for it to exit."""
        self._services.stop()

    def start_services(self) -> None:
        """Start the services again on the same port."""
        self._services.start()
