"""`torpor dev`: the whole control plane in one process, for development and tests.

Parts, started in this order and stopped in reverse:

1. the store: `SQLiteStore` in `DIR/torpor.sqlite3` (`data_dir`) or in memory (`in_memory`); or
   `DynamoDBStore` on an external endpoint (`dynamodb_endpoint`) or on an embedded moto server on
   127.0.0.1 (`moto`); with none of them, `DEFAULT_STORE`; its schema created;
3. with `lambda_functions` (`torpor dev --lambda NAME=module:attr`), the local Lambda emulator in a
   subprocess (`adapters.local.lambda_emulator`, started again if it dies), which the Lambda invoker
   then calls (and STS too);
4. `HttpInvoker`, `LocalScheduler` and the `ControlPlane` over them; the scheduler starts calling
   `ControlPlane.advance`, and the start-up sweep re-arms unfinished invocations;
5. the poller of the SQS queues event subscriptions name (`adapters.local.sqs_poller`);
6. two uvicorn servers (HTTP/1.1, the httptools parser) in one event loop (uvloop where it is
   installed) on a background thread: ingress (default 127.0.0.1:8080) and admin (default
   127.0.0.1:9070). See `adapters.local.http_server`.

`DevServer(...).start()` returns once both servers answer HTTP; `.stop()` shuts everything down.
`run_dev(...)` does the same in the foreground until SIGINT or SIGTERM; with `workers` above 1 it
binds both ports and runs that many processes, each a `DevServer` on them (`adapters.local.workers`).
"""

from __future__ import annotations

import asyncio
import contextlib
import importlib.util
import logging
import os
import signal
import socket
import sqlite3
import tempfile
import threading
import time
from collections.abc import Callable, Iterable, Mapping
from types import FrameType
from typing import TYPE_CHECKING, Any, TypeVar
from urllib.parse import urlsplit

import httpx
import uvicorn

from adapters.aws.blobs import S3BlobStore
from adapters.aws.dynamodb_store import DynamoDBStore
from adapters.http.invoker import HttpInvoker
from adapters.invokers import RoutingInvoker
from adapters.invokers import cloud_run_invoker as _cloud_run_invoker  # tests replace it here
from adapters.local import http_server
from adapters.local.asgi import AsgiApp, Dispatcher, asgi_app
from adapters.local.guard import LocalGuard
from adapters.local.restate_ui import RestateUi, RestateUiFiles
from adapters.local.scheduler import LocalScheduler
from adapters.local.sqs_poller import SqsPoller
from adapters.local.sqlite_store import SQLiteStore
from adapters.otel import OtelTracer, tracer_from_env
from adapters.query import sql_engine
from adapters.request_identity import signer_from_environment, signer_from_file
from control_plane.errors import TorporError
from control_plane.observability import PrometheusMetrics, time_store_calls
from control_plane.ports import Invoker, Store, StoreUnavailable
from control_plane.request_identity import RequestSigner
from control_plane.settings import Settings
from http_api import HttpControlPlane
from http_api.http import Router
from http_api.ingress import CorsRouter

if TYPE_CHECKING:  # imported when used: `python -m adapters.local.lambda_emulator` must not find it loaded
    from adapters.local.lambda_emulator import LambdaEmulatorProcess
    from adapters.local.moto_server import SerialMotoServer  # only with --moto: the moto extra

_STORE_OPERATIONS = tuple(name for name in dir(Store) if not name.startswith("_"))
"""The store's operations, each timed for `/metrics` (`torpor_store_call_duration_seconds`)."""

log = logging.getLogger("torpor.dev")

_T = TypeVar("_T")

_DUMMY_CREDENTIALS = {"AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing"}
_DUMMY_SESSION = {"aws_access_key_id": "testing", "aws_secret_access_key": "testing"}
_READY_TIMEOUT_S = 15.0  # how long start() waits for both servers to answer
_SWEEP_INTERVAL_S = 60.0  # the safety net for lost wake-ups also runs while the server runs
SQLITE_FILE = "torpor.sqlite3"
"""The SQLite database's name in a data directory (`DevServer(data_dir=...)`, `torpor dev --data-dir`)."""
DEFAULT_STORE = "sqlite"
"""The store when no store option is given: "moto" (DynamoDB on an embedded moto server, lost when it
stops) or "sqlite" (a `DevServer` then keeps it in memory, `torpor dev` in `DEFAULT_DATA_DIR`)."""
DEFAULT_DATA_DIR = ".torpor"
"""Where `torpor dev` keeps the SQLite store by default (under the working directory)."""


class DevServerError(TorporError):
    """The dev server could not start: a port is taken, the DynamoDB endpoint is unusable, ..."""

    code = "dev_server"


MOTO_EXTRA_MISSING = (
    "--moto (DynamoDB on an embedded moto server) needs the moto extra, which a plain install leaves out: "
    "pip install 'torpor[moto]' (or use the default SQLite store, or --dynamodb-endpoint URL)"
)
"""What `torpor dev --moto` says when moto is not installed."""


def moto_installed() -> bool:
    """True when moto's server (the `moto` extra: `pip install 'torpor[moto]'`) can be imported."""
    return importlib.util.find_spec("moto") is not None


def _serial_moto_server() -> type[SerialMotoServer]:
    """`adapters.local.moto_server.SerialMotoServer`, imported on first use.

    Raises:
        DevServerError: moto is not installed (`MOTO_EXTRA_MISSING` names the extra).
    """
    try:
        from adapters.local.moto_server import SerialMotoServer
    except ImportError as exc:
        raise DevServerError(f"{MOTO_EXTRA_MISSING} ({exc})") from exc
    return SerialMotoServer


def _has_aws_credentials() -> bool:
    """True if botocore's default chain finds credentials (environment, profile, instance role)."""
    import botocore.session

    return botocore.session.get_session().get_credentials() is not None


def _loop_factory() -> Callable[[], asyncio.AbstractEventLoop]:
    """uvloop's event loop where it is installed (not on Windows), else asyncio's."""
    try:
        import uvloop
    except ImportError:
        return asyncio.new_event_loop
    return uvloop.new_event_loop


def http_url(host: str, port: int) -> str:
    """`http://host:port`, an IPv6 address in brackets (`http://[::1]:9070`)."""
    return f"http://[{host}]:{port}" if ":" in host else f"http://{host}:{port}"


def browser_origins(url: str) -> frozenset[str]:
    """The origins a browser may name for the server at `url` (`http://127.0.0.1:9070`): loopback
    addresses also by their other names (`localhost`, `127.0.0.1`, `[::1]`)."""
    parts = urlsplit(url)
    host, port = (parts.hostname or "").lower(), parts.port
    wildcard = host in ("0.0.0.0", "::")  # every address: the UI is opened as localhost, or by the machine's name
    names = set(_LOOPBACK_NAMES) if host in _LOOPBACK_NAMES or wildcard else {f"[{host}]" if ":" in host else host}
    return frozenset(f"{parts.scheme}://{name}:{port}" for name in names)


_LOOPBACK_NAMES = ("127.0.0.1", "localhost", "[::1]", "::1")


def listen_socket(host: str, port: int, role: str, flag: str) -> socket.socket:
    """A listening TCP socket on `host:port` (port 0: a free port). Raises `DevServerError`."""
    try:
        family = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)[0][0]
    except OSError as exc:
        raise DevServerError(f"cannot listen on host {host!r}: {exc.strerror or exc}; check --host") from exc
    try:
        return socket.create_server((host, port), family=family, backlog=1024)
    except OSError as exc:
        raise DevServerError(
            f"cannot listen on {host}:{port} for the {role} API: {exc.strerror or exc}; "
            f"choose another port with {flag} (0 picks a free one)"
        ) from exc


class DevServer:
    """The control plane with local adapters and its two HTTP servers, in this process.

    Usable as a context manager (`with DevServer(ingress_port=0, admin_port=0) as dev: ...`).

    Args:
        host: Address both HTTP servers listen on.
        ingress_port: Ingress API port; 0 picks a free port.
        admin_port: Admin API port; 0 picks a free port.
        dynamodb_endpoint: URL of an external DynamoDB-compatible endpoint (dynalite, DynamoDB Local,
            a moto server, AWS). Credentials for it come from botocore's default chain.
        data_dir: Directory of the SQLite store (`SQLITE_FILE` in it; both created if missing): what
            a restart on the same directory finds again (deployments, invocations, state, timers).
        in_memory: The SQLite store in memory: lost when the server stops.
        moto: DynamoDB on an embedded moto server (lost when it stops).
        moto_port: Port of the embedded moto server; 0 picks a free port.
        table: DynamoDB table name (created if missing).
        region: AWS region the store signs requests for.
        settings: Runtime settings; None reads them with `Settings.load()`.
        concurrency: Size of the scheduler's worker pool (concurrent `advance` calls).
        http_concurrency: Requests each HTTP server dispatches at the same time (threads made as needed;
            a blocking call holds one while it waits: 64 made the 37th of 100 one-second sleeps called
            at once wait for the first to end, issue 24).
        lambda_functions: Function name → `module:attr` of its Lambda handler: runs them in the local
            Lambda emulator (a subprocess, stopped by `stop`; started again on the same port if it
            dies, as Lambda replaces a dead execution environment), so `arn:aws:lambda:REGION:ACCOUNT:
            function:NAME:VERSION` deployments invoke them (any account; every version runs the same
            code). None: Lambda deployments go to `lambda_endpoint` or AWS.
        lambda_endpoint: URL of another Lambda API endpoint (and STS endpoint) for Lambda
            deployments, e.g. an emulator already running; None: AWS's (or the emulator's).
        lambda_checkpoints: Run the emulator's restate-sdk apps with in-process checkpoints
            (`adapters.aws.checkpoints`: one Invoke per suspension, committing run results to this
            server's store); False: request/response, one Invoke per `ctx.run`. With the store in
            memory and `lambda_functions`, the SQLite store goes to a temporary file instead, which
            the emulator's process opens too (deleted by `stop`).
        lambda_timeout_ms: The timeout of each `lambda_functions` function (Lambda's `Timeout`, at
            most 900,000 ms), which the emulator enforces as Lambda does: an Invoke still running
            then is stopped and fails with "Task timed out after N seconds". None: 900 s.
        request_identity_key_file: PEM file of the Ed25519 key that signs every request to
            deployments (written, mode 0600, if missing); None: the key the `TORPOR_REQUEST_IDENTITY_KEY*`
            environment names (`adapters.request_identity`), or unsigned requests.
        listen_sockets: `(ingress, admin)` sockets already listening (`listen_socket`), served instead
            of binding `ingress_port` and `admin_port` (whose URLs then name their ports): how each
            process of `torpor dev --workers N` serves the sockets its parent bound
            (`adapters.local.workers`). Closed by `stop`.
        restate_ui: Restate's web UI (`adapters.local.restate_ui.load_restate_ui`), served at `/ui/`
            on `restate_ui_port` in front of the admin API; None: not served.
        restate_ui_port: Port of Restate's web UI (with `restate_ui`); 0 picks a free port.
        sqs_endpoint: The SQS endpoint of the queues event subscriptions name (`sqs://QUEUE`), which
            `adapters.local.sqs_poller` polls; None: `TORPOR_AWS_ENDPOINT_URL`, else the embedded moto
            server's (`moto`), else boto3's own (`AWS_ENDPOINT_URL_SQS`, or AWS).
    """

    def __init__(
        self,
        *,
        host: str = "127.0.0.1",
        ingress_port: int = 8080,
        admin_port: int = 9070,
        dynamodb_endpoint: str | None = None,
        data_dir: str | os.PathLike[str] | None = None,
        in_memory: bool = False,
        moto: bool = False,
        moto_port: int = 0,
        table: str = "torpor",
        region: str = "us-east-1",
        settings: Settings | None = None,
        concurrency: int = 32,
        http_concurrency: int = 256,
        lambda_functions: Mapping[str, str] | None = None,
        lambda_endpoint: str | None = None,
        lambda_checkpoints: bool = True,
        lambda_timeout_ms: int | None = None,
        request_identity_key_file: str | os.PathLike[str] | None = None,
        listen_sockets: tuple[socket.socket, socket.socket] | None = None,
        restate_ui: RestateUiFiles | None = None,
        restate_ui_port: int = 9072,
        blob_bucket: str | None = None,
        sqs_endpoint: str | None = None,
    ) -> None:
        if restate_ui is not None and listen_sockets is not None:
            raise ValueError("Restate's web UI is served by a single dev server, not by workers on given sockets")
        if lambda_functions and lambda_endpoint:
            raise ValueError("give lambda_functions (run the local emulator) or lambda_endpoint, not both")
        chosen = [name for name, given in (("dynamodb_endpoint", dynamodb_endpoint is not None),
                  ("data_dir", data_dir is not None), ("in_memory", in_memory), ("moto", moto)) if given]  # fmt: skip
        if len(chosen) > 1:
            raise ValueError(f"give one store option, not {' and '.join(chosen)}")
        if not chosen:
            moto, in_memory = DEFAULT_STORE == "moto", DEFAULT_STORE == "sqlite"
        self.data_dir = None if data_dir is None else os.fspath(data_dir)
        """The SQLite store's directory, or None (in memory, or DynamoDB)."""
        self._sqlite = data_dir is not None or in_memory
        self.blob_bucket = blob_bucket
        """With DynamoDB: the S3 bucket values too large for an item go to (on the DynamoDB endpoint's
        host when it is a local one, e.g. moto; created if missing), or None (such values are a 413).
        The SQLite store keeps large values itself."""
        self.host = host
        self._ingress_port = ingress_port
        self._admin_port = admin_port
        self._external_endpoint = dynamodb_endpoint
        self._moto_port = moto_port
        self.table = table
        self.region = region
        self.settings = settings if settings is not None else Settings.load()
        self.concurrency = concurrency
        self.http_concurrency = http_concurrency
        self.lambda_functions = dict(lambda_functions or {})
        self._lambda_endpoint = lambda_endpoint
        self.lambda_checkpoints = lambda_checkpoints
        self.lambda_timeout_ms = lambda_timeout_ms
        self._emulator: LambdaEmulatorProcess | None = None
        self._sqlite_path: str | None = None
        self._temp_dir: tempfile.TemporaryDirectory[str] | None = None
        self._request_identity_key_file = request_identity_key_file
        self.request_signer: RequestSigner | None = None
        """Signs requests to deployments (after `start`); None: they go unsigned."""

        self._moto: SerialMotoServer | None = None
        self._dynamodb_endpoint: str | None = None
        self._store: DynamoDBStore | SQLiteStore | None = None
        self._invoker: RoutingInvoker | None = None
        self._scheduler: LocalScheduler | None = None
        self._tracer: OtelTracer | None = None
        self._sweeper: threading.Thread | None = None
        self._sweeping = threading.Event()
        self._control_plane: HttpControlPlane | None = None
        self._ingress_url: str | None = None
        self._admin_url: str | None = None
        self._sockets: list[socket.socket] = list(listen_sockets or ())  # bound, not yet handed to the HTTP servers
        self._given_sockets = listen_sockets is not None
        self.restate_ui = restate_ui
        self._restate_ui_port = restate_ui_port
        self._restate_ui_url: str | None = None
        self._thread: threading.Thread | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._shutdown: asyncio.Event | None = None
        self._loop_ready = threading.Event()
        self._serve_error: BaseException | None = None
        self._started = False
        self._sqs_endpoint = sqs_endpoint or os.environ.get("TORPOR_AWS_ENDPOINT_URL") or None
        self._sqs_poller: SqsPoller | None = None

    # --- what a started server exposes ------------------------------------------------------------

    @property
    def ingress_url(self) -> str:
        """Base URL of the ingress API, e.g. `http://127.0.0.1:8080` (after `start`)."""
        return self._require(self._ingress_url)

    @property
    def admin_url(self) -> str:
        """Base URL of the admin API, e.g. `http://127.0.0.1:9070` (after `start`)."""
        return self._require(self._admin_url)

    @property
    def restate_ui_url(self) -> str:
        """Base URL of Restate's web UI, e.g. `http://127.0.0.1:9072` (after `start`, with `restate_ui`)."""
        return self._require(self._restate_ui_url)

    @property
    def dynamodb_endpoint(self) -> str:
        """URL of the DynamoDB endpoint in use: the embedded moto server's or the external one.

        Raises:
            RuntimeError: Not started, or the store is SQLite.
        """
        if self._sqlite:
            raise RuntimeError("this dev server stores in SQLite, not DynamoDB")
        return self._require(self._dynamodb_endpoint)

    @property
    def embedded_moto(self) -> bool:
        """True when DynamoDB is the embedded moto server."""
        return self._external_endpoint is None and not self._sqlite

    @property
    def store_location(self) -> str:
        """Where the data lives, for people: the SQLite file, "memory", or the DynamoDB endpoint and table."""
        if self._sqlite:
            return "memory (lost when it stops)" if self.data_dir is None else os.path.join(self.data_dir, SQLITE_FILE)
        kind = "embedded moto, lost when it stops" if self.embedded_moto else "DynamoDB"
        return f"{self._dynamodb_endpoint} table {self.table} ({kind})"

    @property
    def control_plane(self) -> HttpControlPlane:
        """The `ControlPlane` serving both APIs (after `start`)."""
        return self._require(self._control_plane)

    @property
    def store(self) -> DynamoDBStore | SQLiteStore:
        """The store (after `start`): `SQLiteStore` or `DynamoDBStore`."""
        return self._require(self._store)

    @property
    def scheduler(self) -> LocalScheduler:
        """The `LocalScheduler` (after `start`); tests wait on `scheduler.wait_idle(...)`."""
        return self._require(self._scheduler)

    @property
    def invoker(self) -> RoutingInvoker:
        """The `RoutingInvoker` (after `start`): HTTP endpoints, Lambda ARNs and Cloud Run services."""
        return self._require(self._invoker)

    @property
    def lambda_emulator(self) -> LambdaEmulatorProcess:
        """The local Lambda emulator's process (after `start`, with `lambda_functions`): its `url`, `calls()`."""
        return self._require(self._emulator)

    @staticmethod
    def _require(value: _T | None) -> _T:
        if value is None:
            raise RuntimeError("the dev server is not started: call start() first")
        return value

    # --- life cycle -------------------------------------------------------------------------------

    def __enter__(self) -> DevServer:
        return self.start()

    def __exit__(self, *exc_info: object) -> None:
        self.stop()

    def start(self) -> DevServer:
        """Start every part; return once both HTTP servers answer requests.

        Returns:
            `self`, started.

        Raises:
            DevServerError: A port is taken, or a server did not come up within 15 s.
            RuntimeError: `start` was called before on this object.
        """
        if self._started:
            raise RuntimeError("a DevServer can be started once; build a new one")
        self._started = True
        try:
            self._load_request_identity()  # a bad key fails before anything starts
            self._bind()  # first: a taken port fails before anything else starts
            self._start_store()
            if self.lambda_functions:
                self._start_lambda_emulator()
            self._start_control_plane()
            self._start_sqs_poller()
            self._start_http()
        except StoreUnavailable as exc:  # the start-up sweep read a page it could not (one line, no traceback)
            self.stop()
            raise DevServerError(f"cannot start on the store: {exc.message}") from exc
        except BaseException:
            self.stop()
            raise
        log.info(
            "torpor dev: ingress %s, admin %s (UI %s/ui), data: %s",
            self._ingress_url,
            self._admin_url,
            self._admin_url,
            self.store_location,
        )
        if self.restate_ui is not None:
            log.info(
                "torpor dev: Restate's web UI %s/ui/ over the admin API (%d files from %s)",
                self._restate_ui_url,
                len(self.restate_ui.files),
                self.restate_ui.source,
            )
        if self.request_signer is not None:
            log.info("torpor dev: request identity public key: %s", self.request_signer.public_key)
        return self

    def _load_request_identity(self) -> None:
        """Read (or, with `request_identity_key_file` missing, write) the key. Raises `RequestIdentityKeyError`."""
        if self._request_identity_key_file is not None:
            self.request_signer = signer_from_file(self._request_identity_key_file, create=True)
        else:
            self.request_signer = signer_from_environment(region=self.region)

    def _start_store(self) -> None:
        if self._sqlite:
            path = ":memory:" if self.data_dir is None else os.path.join(self.data_dir, SQLITE_FILE)
            if path == ":memory:" and self.lambda_functions and self.lambda_checkpoints:
                # the emulator's process commits run results too: one file both open (SQLite WAL)
                self._temp_dir = tempfile.TemporaryDirectory(prefix="torpor-dev-")
                path = os.path.join(self._temp_dir.name, SQLITE_FILE)
            self._sqlite_path = path
            try:
                self._store = SQLiteStore(path)
                self._store.ensure_schema()
                self._store.check_integrity()  # a corrupt page: refused here, not by a request later
            except (OSError, sqlite3.Error, StoreUnavailable) as exc:
                raise DevServerError(
                    f"cannot open the SQLite store {path}: {exc}; make it writable, move it away to start "
                    "afresh, or pick another --data-dir (--in-memory for a throwaway run)"
                ) from exc
            return
        credentials: dict[str, str | None] = {"aws_access_key_id": None, "aws_secret_access_key": None}
        if self._external_endpoint is None:
            if not any(name in os.environ for name in _DUMMY_CREDENTIALS):
                os.environ.update(_DUMMY_CREDENTIALS)  # for any other AWS client in this process
            werkzeug_log = logging.getLogger("werkzeug")
            if werkzeug_log.level == logging.NOTSET:  # moto logs every request at INFO: noise here
                werkzeug_log.setLevel(logging.WARNING)
            self._moto = _serial_moto_server()(ip_address="127.0.0.1", port=self._moto_port, verbose=False)
            self._moto.start()
            host, port = self._moto.get_host_and_port()
            self._dynamodb_endpoint = http_url(host, port)
            credentials = {"aws_access_key_id": "testing", "aws_secret_access_key": "testing"}
        else:
            self._dynamodb_endpoint = self._external_endpoint
            if not _has_aws_credentials():  # a local endpoint (moto, dynalite) takes any key
                log.info("no AWS credentials configured: using dummy ones for %s", self._dynamodb_endpoint)
                credentials = {"aws_access_key_id": "testing", "aws_secret_access_key": "testing"}
        blobs = None
        if self.blob_bucket:
            blobs = S3BlobStore(self.blob_bucket, region=self.region, endpoint_url=self._dynamodb_endpoint)
            blobs.ensure_bucket()
        self._store = DynamoDBStore(
            self.table,
            region=self.region,
            endpoint_url=self._dynamodb_endpoint,
            shards=self._store_shards(),
            blobs=blobs,
            **credentials,
        )
        self._store.ensure_schema()

    def _store_shards(self) -> int:
        """`Settings.store_shards`, except on the embedded moto unless it was set: 1 there.

        The embedded table lives and dies with this process, so nothing else reads it with another
        count; it has no partitions to spread writes over, and moto reads the whole table for each
        index query, so each shard would cost a full read of it per listing.
        """
        chosen = "store_shards" in self.settings.sources or self.settings.store_shards != Settings().store_shards
        if self._external_endpoint is None and not chosen:
            return 1
        return self.settings.store_shards

    def _start_control_plane(self) -> None:
        self._invoker = RoutingInvoker(
            HttpInvoker(max_answer_bytes=self.settings.max_answer_bytes),
            lambda_factory=self._lambda_invoker,
            cloud_run_factory=_cloud_run_invoker,
            signer=self.request_signer,
        )
        self._scheduler = LocalScheduler(workers=self.concurrency)
        self._tracer = tracer_from_env()  # OTLP traces if OTEL_EXPORTER_OTLP_ENDPOINT is set (docs/observability.md)
        metrics = PrometheusMetrics()  # GET /metrics of this process
        time_store_calls(self.store, metrics, _STORE_OPERATIONS)
        self._control_plane = HttpControlPlane(
            self.store,
            self._invoker,
            self._scheduler,
            settings=self.settings,
            facts=self.store.facts,
            metrics=metrics,
            tracer=self._tracer,
        )
        self._control_plane.admin.ingress_url = self._ingress_url  # the web UI's playground calls it
        # POST /query; None without the `query` extra
        self._control_plane.admin.sql = sql_engine(self.store, self.settings)
        router = self._control_plane.ingress.router  # from the UI's origin (the admin API), with CORS
        router.allowed_origins = router.allowed_origins | browser_origins(self._admin_url)
        if self._restate_ui_url is not None:  # its playground calls the ingress too
            router.allowed_origins = router.allowed_origins | browser_origins(self._restate_ui_url)
        self._scheduler.start(self._control_plane.wake)
        self._control_plane.sweep()
        self._sweeping = threading.Event()
        self._sweeper = threading.Thread(target=self._sweep_loop, name="torpor-sweep", daemon=True)
        self._sweeper.start()

    def _start_sqs_poller(self) -> None:
        """Poll the queues of the SQS subscriptions (`adapters.local.sqs_poller`) on `sqs_endpoint`."""
        endpoint = self._sqs_endpoint or (self._dynamodb_endpoint if self.embedded_moto else None)
        dummy = endpoint is not None and not _has_aws_credentials()  # a local endpoint takes any key
        keys = {"aws_access_key_id": "testing", "aws_secret_access_key": "testing"} if dummy else {}

        def sqs() -> Any:
            import boto3

            return boto3.client("sqs", region_name=self.region, endpoint_url=endpoint, **keys)

        self._sqs_poller = SqsPoller(self.control_plane.subscriptions, sqs)
        self._sqs_poller.start()

    def _start_lambda_emulator(self) -> None:
        """Start the local Lambda emulator with `lambda_functions`. Raises `DevServerError`."""
        from adapters.local.lambda_emulator import LambdaEmulatorProcess, function_arn

        env: dict[str, str] = {}
        if self.lambda_checkpoints and self._sqlite_path is not None:
            env["TORPOR_SQLITE"] = self._sqlite_path
        elif self.lambda_checkpoints and self._dynamodb_endpoint is not None:
            env.update(TORPOR_TABLE=self.table, TORPOR_DYNAMODB_ENDPOINT=self._dynamodb_endpoint)
            if self.blob_bucket:  # its commits of large run results go to the same bucket
                env.update(TORPOR_BLOB_BUCKET=self.blob_bucket, TORPOR_S3_ENDPOINT=self._dynamodb_endpoint)
        timeout_s = {} if self.lambda_timeout_ms is None else {"timeout_s": self.lambda_timeout_ms / 1000}
        self._emulator = LambdaEmulatorProcess(
            self.lambda_functions, region=self.region, env=env, keep_running=True, **timeout_s
        )
        try:
            self._emulator.start()
        except RuntimeError as exc:
            raise DevServerError(
                f"the local Lambda emulator did not start: {exc}; check each --lambda NAME=module:attr "
                "(the module must import from the current directory)"
            ) from exc
        self._lambda_endpoint = self._emulator.url
        for name in self.lambda_functions:
            log.info(
                "lambda function %s on %s: register it with torpor deployments register %s",
                name,
                self._emulator.url,
                function_arn(name, "1", region=self.region),
            )

    def _lambda_invoker(self) -> Invoker:
        """The Lambda invoker: boto3 `Invoke` (and STS `AssumeRole`) on AWS, or on `lambda_endpoint`.

        A local endpoint takes any key: with no AWS credentials configured, dummy ones sign its requests.
        """
        import boto3

        from adapters.aws.lambda_invoker import LambdaInvoker

        endpoint = self._lambda_endpoint
        session = None
        if endpoint is not None and not _has_aws_credentials():
            session = boto3.Session(region_name=self.region, **_DUMMY_SESSION)
        return LambdaInvoker(region=self.region, endpoint_url=endpoint, sts_endpoint_url=endpoint, session=session)

    def _sweep_loop(self) -> None:
        """Sweep every `_SWEEP_INTERVAL_S` until `stop` (a failed sweep is logged and tried again)."""
        while not self._sweeping.wait(_SWEEP_INTERVAL_S):
            try:
                self.control_plane.sweep()
            except StoreUnavailable:  # the store logged it (once); the next sweep tries again
                pass
            except Exception:  # logged; the next sweep tries again
                log.exception("periodic sweep failed")

    def _bind(self) -> None:
        if not self._given_sockets:
            self._sockets.append(listen_socket(self.host, self._ingress_port, "ingress", "--ingress-port"))
            self._sockets.append(listen_socket(self.host, self._admin_port, "admin", "--admin-port"))
            if self.restate_ui is not None:
                ui_socket = listen_socket(self.host, self._restate_ui_port, "Restate web UI", "--restate-ui-port")
                self._sockets.append(ui_socket)
        self._ingress_url = http_url(self.host, self._sockets[0].getsockname()[1])
        self._admin_url = http_url(self.host, self._sockets[1].getsockname()[1])
        if self.restate_ui is not None:
            self._restate_ui_url = http_url(self.host, self._sockets[2].getsockname()[1])

    def _guard(self, router: Dispatcher, url: str, origins: Iterable[str], api: str) -> LocalGuard:
        """`router` behind the guard (`adapters.local.guard`): the server at `url` answers only to its
        own address when listening on loopback (and to `TORPOR_ALLOWED_HOSTS`), and takes changes
        only from `origins`, its own origin, or clients that are not web pages."""
        loopback = urlsplit(url).hostname in _LOOPBACK_NAMES
        hosts = {origin.split("://", 1)[1] for origin in browser_origins(url)} if loopback else None
        return LocalGuard(router, hosts, origins, api=api, extra_hosts=self.settings.allowed_hosts)

    def _admin_guard(self, router: Router) -> LocalGuard:
        """The admin router behind the guard: its own address only (listening on loopback), and
        changes only from its own origin (the web UI) or from clients that are not web pages."""
        return self._guard(router, self._admin_url, browser_origins(self._admin_url), "admin API")

    def _ingress_guard(self, router: CorsRouter) -> LocalGuard:
        """The ingress router behind the guard: its own address only (listening on loopback), and
        calls from web pages only from the origins its CORS allows (`TORPOR_UI_ORIGINS`, the admin
        API's web UI)."""
        return self._guard(router, self._ingress_url, router.allowed_origins, "ingress")

    def _start_http(self) -> None:
        control_plane = self.control_plane
        ingress_socket, admin_socket = self._sockets[:2]
        restate_ui_sockets = self._sockets[2:]
        self._sockets = []

        def served(router: Dispatcher) -> AsgiApp:
            return asgi_app(
                router,
                max_concurrency=self.http_concurrency,
                max_body_bytes=self.settings.max_request_bytes,
                read_timeout_s=self.settings.request_read_timeout_ms / 1000,
            )

        apps = [
            (served(self._ingress_guard(control_plane.ingress.router)), ingress_socket),
            (served(self._admin_guard(control_plane.admin.router)), admin_socket),
        ]
        urls = [self.ingress_url, self.admin_url]
        if self.restate_ui is not None:
            ui_url = self.restate_ui_url
            restate_ui = RestateUi(self.restate_ui, control_plane.admin.router)
            guarded = self._guard(restate_ui, ui_url, browser_origins(ui_url), "admin API")
            apps.append((served(guarded), restate_ui_sockets[0]))
            urls.append(ui_url)
        servers = [(http_server.server(app), sock) for app, sock in apps]  # each closes its socket when it stops
        self._thread = threading.Thread(target=self._serve, args=(servers,), name="torpor-http", daemon=True)
        self._thread.start()
        self._wait_until_answering(urls)

    def _serve(self, servers: list[tuple[uvicorn.Server, socket.socket]]) -> None:
        try:
            with asyncio.Runner(loop_factory=_loop_factory()) as runner:
                runner.run(self._serve_all(servers))
        except BaseException as exc:  # reported by start() and logged; the thread ends
            self._serve_error = exc
            log.exception("the dev server's HTTP loop failed")
        finally:
            self._loop_ready.set()  # never leave stop() waiting for a loop that will not come

    async def _serve_all(self, servers: list[tuple[uvicorn.Server, socket.socket]]) -> None:
        self._loop = asyncio.get_running_loop()
        self._shutdown = shutdown = asyncio.Event()
        self._loop_ready.set()

        async def stop_on_shutdown() -> None:
            await shutdown.wait()
            for server, _ in servers:
                server.should_exit = True  # each stops within 0.1 s (uvicorn's tick), open requests get a grace

        stopper = asyncio.ensure_future(stop_on_shutdown())
        try:
            await asyncio.gather(*(server.serve(sockets=[sock]) for server, sock in servers))
        finally:
            stopper.cancel()

    def _wait_until_answering(self, urls: list[str]) -> None:
        """Block until each URL answers an HTTP request (any status). Raises `DevServerError`."""
        deadline = time.monotonic() + _READY_TIMEOUT_S
        with httpx.Client(trust_env=False, timeout=1.0) as client:
            for url in urls:
                while True:
                    if self._thread is None or not self._thread.is_alive():
                        raise DevServerError(f"the HTTP server for {url} stopped at start-up: {self._serve_error!r}")
                    try:
                        client.get(url + "/")
                        break
                    except httpx.TransportError:
                        if time.monotonic() > deadline:
                            raise DevServerError(
                                f"the HTTP server for {url} did not answer within {_READY_TIMEOUT_S:.0f} s"
                            ) from None
                        time.sleep(0.01)  # poll interval while waiting for the condition, not a fixed sleep

    def stopping(self) -> None:
        """Say a shutdown has begun (safe from a signal handler): the Lambda emulator's process, which a
        signal to the process group reaches too, is not started again when it exits."""
        if self._emulator is not None:
            self._emulator.stop_watching()

    def stop(self) -> None:
        """Stop the HTTP servers, then the scheduler (running advances finish), the invoker and moto.

        Safe to call more than once, and on a server that failed half-way through `start`.
        """
        self.stopping()
        for sock in self._sockets:
            sock.close()
        self._sockets = []
        if self._control_plane is not None:
            self._control_plane.stop()
        if self._thread is not None:
            self._loop_ready.wait(timeout=_READY_TIMEOUT_S)
            loop, shutdown = self._loop, self._shutdown
            if loop is not None and shutdown is not None and not loop.is_closed():
                with contextlib.suppress(RuntimeError):  # the loop closed in between
                    loop.call_soon_threadsafe(shutdown.set)
            self._thread.join(timeout=http_server.GRACEFUL_TIMEOUT_S + 10)
            if self._thread.is_alive():
                log.warning("the HTTP servers did not stop within %.0f s", http_server.GRACEFUL_TIMEOUT_S + 10)
            self._thread = None
        if self._sqs_poller is not None:
            self._sqs_poller.stop()
            self._sqs_poller = None
        if self._sweeper is not None:
            self._sweeping.set()
            self._sweeper.join(timeout=10)
            self._sweeper = None
        if self._scheduler is not None:
            self._scheduler.stop(wait=True)
            self._scheduler = None
        if self._invoker is not None:
            self._invoker.close()
            self._invoker = None
        if self._tracer is not None:  # the spans still buffered go out
            self._tracer.shutdown()
            self._tracer = None
        if self._emulator is not None:
            self._emulator.stop()
        if self._moto is not None:
            self._moto.stop()
            self._moto = None
        if isinstance(self._store, SQLiteStore):
            self._store.close()
        if self._temp_dir is not None:
            self._temp_dir.cleanup()
            self._temp_dir = None


def run_dev(
    *,
    host: str = "127.0.0.1",
    ingress_port: int = 8080,
    admin_port: int = 9070,
    dynamodb_endpoint: str | None = None,
    data_dir: str | None = None,
    in_memory: bool = False,
    moto: bool = False,
    table: str = "torpor",
    blob_bucket: str | None = None,
    region: str = "us-east-1",
    settings: Settings | None = None,
    workers: int = 1,
    concurrency: int = 32,
    lambda_functions: Mapping[str, str] | None = None,
    lambda_checkpoints: bool = True,
    lambda_timeout_ms: int | None = None,
    request_identity_key_file: str | None = None,
    restate_ui: RestateUiFiles | None = None,
    restate_ui_port: int = 9072,
) -> None:
    """Run `torpor dev` in the foreground until SIGINT or SIGTERM, then stop cleanly.

    A second SIGINT during the shutdown interrupts it (KeyboardInterrupt). With `workers` above 1,
    this process binds both ports and supervises that many processes, each a `DevServer` on them
    (`adapters.local.workers.run_workers`).

    Args:
        host: Address both HTTP servers listen on.
        ingress_port: Ingress API port.
        admin_port: Admin API port.
        dynamodb_endpoint: External DynamoDB endpoint.
        data_dir: Directory of the SQLite store.
        in_memory: The SQLite store in memory.
        moto: DynamoDB on an embedded moto server.
        table: DynamoDB table name.
        blob_bucket: With DynamoDB, the S3 bucket for values too large for an item (`DevServer`).
        region: AWS region.
        settings: Runtime settings; None reads `Settings.load()`.
        workers: Orchestrator processes over the store (1: this process serves alone).
        concurrency: Size of each process's scheduler pool (invocations advanced at the same time).
        lambda_functions: Function name → `module:attr`, run in the local Lambda emulator.
        lambda_checkpoints: Run them with in-process checkpoints (False: request/response).
        lambda_timeout_ms: Their timeout, enforced as Lambda does (None: 900 s).
        request_identity_key_file: PEM file of the request identity key (written if missing).
        restate_ui: Restate's web UI, served on `restate_ui_port` over the admin API (None: not served).
        restate_ui_port: Its port.

    Raises:
        DevServerError: The server could not start (the message names the fix), or `workers` above
            1 with a store only one process can use (in memory, embedded moto), `lambda_functions`
            or `restate_ui`.
        RequestIdentityKeyError: The request identity key cannot be read or written.
    """

    def make_server(listen_sockets: tuple[socket.socket, socket.socket] | None = None) -> DevServer:
        return DevServer(
            host=host,
            ingress_port=ingress_port,
            admin_port=admin_port,
            dynamodb_endpoint=dynamodb_endpoint,
            data_dir=data_dir,
            in_memory=in_memory,
            moto=moto,
            table=table,
            blob_bucket=blob_bucket,
            region=region,
            settings=settings,
            concurrency=concurrency,
            lambda_functions=lambda_functions,
            lambda_checkpoints=lambda_checkpoints,
            lambda_timeout_ms=lambda_timeout_ms,
            request_identity_key_file=request_identity_key_file,
            listen_sockets=listen_sockets,
            **({} if listen_sockets is not None else {"restate_ui": restate_ui, "restate_ui_port": restate_ui_port}),
        )

    if workers > 1:
        if restate_ui is not None:
            raise DevServerError("--restate-ui is served by one process: leave out --workers, or use --workers 1")
        from adapters.local.workers import run_workers, shared_store_refusal

        refusal = shared_store_refusal(workers, dynamodb_endpoint, data_dir, in_memory, moto, lambda_functions)
        if refusal is not None:
            raise DevServerError(refusal)
        if request_identity_key_file is not None:  # written once, here, not by each process at once
            signer_from_file(request_identity_key_file, create=True)
        run_workers(workers, host, ingress_port, admin_port, make_server)
        return
    serve_until_signalled(make_server())


def serve_until_signalled(server: DevServer, started: Callable[[], object] | None = None) -> None:
    """Start `server`, call `started()` (if given), serve until SIGINT or SIGTERM, then stop it.

    A second SIGINT during the shutdown interrupts it (KeyboardInterrupt). The previous signal
    handlers are put back on return.

    Raises:
        DevServerError: The server could not start.
    """
    stop_requested = threading.Event()

    def request_stop(signum: int, frame: FrameType | None) -> None:
        log.info("torpor dev: %s received, shutting down", signal.Signals(signum).name)
        signal.signal(signal.SIGINT, signal.default_int_handler)  # a second Ctrl+C interrupts the shutdown
        server.stopping()
        stop_requested.set()

    previous = {sig: signal.signal(sig, request_stop) for sig in (signal.SIGINT, signal.SIGTERM)}
    began = False
    try:
        server.start()
        began = True
        if started is not None:
            started()
        while not stop_requested.wait(0.5):  # a timed wait keeps the main thread responsive to signals
            pass
    finally:
        server.stop()
        for sig, handler in previous.items():
            signal.signal(sig, handler)
        if began:
            log.info("torpor dev: stopped")
