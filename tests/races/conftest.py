"""Race tests run on dynalite, which serialises conditional writes as DynamoDB does (moto may not),
and on SQLite (`BEGIN IMMEDIATE` transactions); see `tests.helpers.stores`."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.helpers.dynalite import dynalite_server


@pytest.fixture(scope="session")
def dynalite_endpoint() -> Iterator[str]:
    """URL of a dynalite server with a temporary LevelDB directory, for the whole run."""
    with dynalite_server() as url:
        yield url
