"""A moto server over HTTP for integration tests, and fresh DynamoDB stores on it.

One server serves the whole run (`moto_server`); each test gets its own table (`fresh_store`), so
tests share the server, not its state.
"""

from __future__ import annotations

import os
import threading
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from moto.moto_server.werkzeug_app import DomainDispatcherApplication, create_backend_app
from moto.server import ThreadedMotoServer

from adapters.aws.dynamodb_store import DynamoDBStore
from adapters.local.moto_server import make_moto_server, serialized

REGION = "us-east-1"
DUMMY_AWS_ENV = {
    "AWS_ACCESS_KEY_ID": "testing",
    "AWS_SECRET_ACCESS_KEY": "testing",
    "AWS_SESSION_TOKEN": "testing",
    "AWS_DEFAULT_REGION": REGION,
}
"""Credentials moto accepts, set while the server runs so no client can reach a real account."""

STOP_POLL_S = 0.05
"""How often the server's loop looks for `stop()` (werkzeug's default, 0.5 s, made each stop take ~0.5 s)."""


class _MotoServer(ThreadedMotoServer):
    """moto's `ThreadedMotoServer`, its loop checking for `stop()` every `STOP_POLL_S`."""

    def _app(self) -> Any:
        return DomainDispatcherApplication(create_backend_app)

    def _server_entry(self) -> None:
        self._server = make_moto_server(self._ip_address, self._port, self._app())
        self._server_ready_event.set()
        self._server.serve_forever(poll_interval=STOP_POLL_S)


class _SerialMotoServer(_MotoServer):
    """`adapters.local.moto_server.SerialMotoServer` (one request at a time), stopping as promptly."""

    def _app(self) -> Any:
        return serialized(super()._app())


@contextmanager
def moto_server(*, serial: bool = False) -> Iterator[str]:
    """Run moto's threaded server on 127.0.0.1, on a port the OS picks, for the duration of the block.

    `serial=True` serves one request at a time, as `torpor dev`'s embedded server does (atomic item
    writes; SQS requests run beside them, so a long poll holds nothing up).

    Sets `DUMMY_AWS_ENV` in `os.environ` while any moto server runs and restores the previous values
    when the last one stops: servers may stop in any order (a module's server started before the
    session's and stopped while the session's still runs must not take its credentials away).

    Yields:
        The endpoint URL, e.g. `http://127.0.0.1:54321`.
    """
    with _ENV_LOCK:
        if not _RUNNING:
            _SAVED_ENV.update({name: os.environ.get(name) for name in DUMMY_AWS_ENV})
            os.environ.update(DUMMY_AWS_ENV)
        _RUNNING.append(None)
    server = (_SerialMotoServer if serial else _MotoServer)(ip_address="127.0.0.1", port=0, verbose=False)
    try:
        server.start()
        host, port = server.get_host_and_port()
        yield f"http://{host}:{port}"
    finally:
        server.stop()
        with _ENV_LOCK:
            _RUNNING.pop()
            if not _RUNNING:
                for name, value in _SAVED_ENV.items():
                    if value is None:
                        os.environ.pop(name, None)
                    else:
                        os.environ[name] = value
                _SAVED_ENV.clear()


_ENV_LOCK = threading.Lock()
_RUNNING: list[None] = []  # one per moto server running in this process
_SAVED_ENV: dict[str, str | None] = {}  # the environment's values before the first one started


def unique_table_name(prefix: str = "torpor-test") -> str:
    """A table name no other test uses: `{prefix}-{12 hex digits}`."""
    return f"{prefix}-{uuid.uuid4().hex[:12]}"


def fresh_store(endpoint_url: str, *, create_table: bool = True) -> DynamoDBStore:
    """A `DynamoDBStore` on a new, uniquely named table at `endpoint_url` (dummy credentials).

    Args:
        endpoint_url: The moto server's URL (from `moto_server`).
        create_table: Run `ensure_schema` before returning (False leaves the table uncreated).
    """
    store = DynamoDBStore(
        unique_table_name(),
        region=REGION,
        endpoint_url=endpoint_url,
        aws_access_key_id=DUMMY_AWS_ENV["AWS_ACCESS_KEY_ID"],
        aws_secret_access_key=DUMMY_AWS_ENV["AWS_SECRET_ACCESS_KEY"],
    )
    if create_table:
        store.ensure_schema()
    return store
