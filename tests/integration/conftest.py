"""Fixtures for integration tests: one moto server over HTTP and one examples process for the run, a
fresh table per test."""

from __future__ import annotations

import sys
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

# ``tests`` is not a package on sys.path when pytest runs from the venv's entry point.
_REPO_ROOT = str(Path(__file__).resolve().parents[2])
if _REPO_ROOT not in sys.path:
    sys.path.insert(0, _REPO_ROOT)

from adapters.aws.dynamodb_store import DynamoDBStore  # noqa: E402
from tests.helpers.moto import fresh_store, moto_server  # noqa: E402
from tests.helpers.services import serve_examples  # noqa: E402


@pytest.fixture(scope="session")
def moto_endpoint() -> Iterator[str]:
    """The URL of a moto server on 127.0.0.1, started once for the whole run (dummy AWS credentials)."""
    with moto_server() as endpoint_url:
        yield endpoint_url


@pytest.fixture
def store(moto_endpoint: str) -> DynamoDBStore:
    """A `DynamoDBStore` on its own new table (schema ensured), so tests never see each other's items."""
    return fresh_store(moto_endpoint)


@pytest.fixture
def new_store(moto_endpoint: str) -> Callable[..., DynamoDBStore]:
    """Make more stores on the same server, each on its own table: `new_store(create_table=True)`."""

    def make(*, create_table: bool = True) -> DynamoDBStore:
        return fresh_store(moto_endpoint, create_table=create_table)

    return make


@pytest.fixture(scope="session")
def effects_file(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The side-effects file of the run's example services (one JSON line per executed ctx.run);
    shared by every module, so read it filtered by invocation id or key (as every test does)."""
    return tmp_path_factory.mktemp("effects") / "side_effects.jsonl"


@pytest.fixture(scope="session")
def examples_url(effects_file: Path) -> Iterator[str]:
    """The example services, served by hypercorn (HTTP/1.1) in their own process, for the run (they
    keep no state between invocations; a test that kills or restarts them starts its own with
    `serve_examples`)."""
    with serve_examples(side_effects_file=effects_file) as (url, _process):
        yield url
