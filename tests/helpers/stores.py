"""Stores for the contract tests: the same `Store` port on DynamoDB (moto, dynalite) and on SQLite.

`STORE_KINDS` names the kinds a parametrized `store` fixture runs over; `make_store` builds one
fresh, empty store of a kind (its own table, or its own database file).
"""

from __future__ import annotations

from pathlib import Path

from adapters.aws.dynamodb_store import DynamoDBStore
from adapters.local.sqlite_store import SQLiteStore
from tests.helpers.moto import DUMMY_AWS_ENV, REGION, unique_table_name

STORE_KINDS = ("dynamodb", "sqlite")
"""The stores every contract test runs on: DynamoDB (on moto, or dynalite for races) and SQLite."""


def make_store(
    kind: str, *, endpoint_url: str | None = None, directory: Path | None = None
) -> DynamoDBStore | SQLiteStore:
    """A fresh store of `kind` with its schema ensured.

    Args:
        kind: "dynamodb" (a new table at `endpoint_url`) or "sqlite" (a new file in `directory`,
            or in memory if None).
        endpoint_url: The DynamoDB endpoint (moto or dynalite), for "dynamodb".
        directory: Where the SQLite file goes, for "sqlite".

    Raises:
        ValueError: An unknown kind.
    """
    store: DynamoDBStore | SQLiteStore
    if kind == "dynamodb":
        store = DynamoDBStore(
            unique_table_name(),
            region=REGION,
            endpoint_url=endpoint_url,
            aws_access_key_id=DUMMY_AWS_ENV["AWS_ACCESS_KEY_ID"],
            aws_secret_access_key=DUMMY_AWS_ENV["AWS_SECRET_ACCESS_KEY"],
        )
    elif kind == "sqlite":
        store = SQLiteStore(":memory:" if directory is None else directory / f"{unique_table_name()}.sqlite3")
    else:
        raise ValueError(f"unknown store kind {kind!r}; expected one of {', '.join(STORE_KINDS)}")
    store.ensure_schema()
    return store
