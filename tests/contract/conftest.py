"""The contract suite: every test here runs against each `Store` adapter (DynamoDB on moto, SQLite).

One file per family of the port (`control_plane.ports`), so each adapter proves each family:
`test_invocation_store_contract.py` (`InvocationStore`), `test_key_store_contract.py` (`KeyStore`),
`test_timer_store_contract.py` (`TimerStore`), `test_registry_store_contract.py` (`RegistryStore`),
`test_schedule_store_contract.py` (`ScheduleStore`); `test_store_families.py` checks the cut, that
each adapter has each family's methods, and the facts each store gives beside itself (`StoreFacts`).

Tests that check DynamoDB's item layout, request counts or index keys live in
`tests/integration/test_dynamodb_store*.py`; what every store must do lives here, so the adapters
cannot drift apart.
"""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

_REPO_ROOT = str(Path(__file__).resolve().parents[2])
if _REPO_ROOT not in sys.path:
    sys.path.insert(0, _REPO_ROOT)

from adapters.aws.dynamodb_store import DynamoDBStore  # noqa: E402
from adapters.local.sqlite_store import SQLiteStore  # noqa: E402
from tests.helpers.moto import moto_server  # noqa: E402
from tests.helpers.stores import STORE_KINDS, make_store  # noqa: E402


@pytest.fixture(scope="session")
def moto_endpoint() -> Iterator[str]:
    """The URL of a moto server on 127.0.0.1, started once for the whole run (dummy AWS credentials)."""
    with moto_server() as endpoint_url:
        yield endpoint_url


@pytest.fixture(params=STORE_KINDS)
def store(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[DynamoDBStore | SQLiteStore]:
    """A fresh, empty store of each kind: DynamoDB on its own moto table, SQLite in its own file."""
    if request.param == "dynamodb":
        yield make_store("dynamodb", endpoint_url=request.getfixturevalue("moto_endpoint"), blobs=True)
        return
    store = make_store("sqlite", directory=tmp_path)
    assert isinstance(store, SQLiteStore)
    yield store
    store.close()
