"""Stores for the contract tests: the same `Store` port on DynamoDB (moto, dynalite) and on SQLite.

`STORE_KINDS` names the kinds a parametrized `store` fixture runs over; `make_store` builds one
fresh, empty store of a kind (its own table, or its own database file).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from adapters.aws.blobs import S3BlobStore
from adapters.aws.dynamodb_store import DynamoDBStore
from adapters.aws.store_items import shard_of
from adapters.local.sqlite_store import SQLiteStore
from tests.helpers.dynamodb_items import as_dynamodb
from tests.helpers.moto import DUMMY_AWS_ENV, REGION, unique_table_name

Store = DynamoDBStore | SQLiteStore
"""Either store adapter, as tests annotate it."""

DEFAULT_SHARDS = 16
"""The shard count `ids_in_distinct_shards` assumes of a store that has none (SQLite)."""

STORE_KINDS = ("dynamodb", "sqlite")
"""The stores every contract test runs on: DynamoDB (on moto, or dynalite for races) and SQLite."""


def make_store(
    kind: str, *, endpoint_url: str | None = None, directory: Path | None = None, blobs: bool = False
) -> DynamoDBStore | SQLiteStore:
    """A fresh store of `kind` with its schema ensured.

    Args:
        kind: "dynamodb" (a new table at `endpoint_url`) or "sqlite" (a new file in `directory`,
            or in memory if None).
        endpoint_url: The DynamoDB endpoint (moto or dynalite), for "dynamodb".
        directory: Where the SQLite file goes, for "sqlite".
        blobs: For "dynamodb": with an S3 blob store (a new bucket at `endpoint_url`, a moto server),
            as the SQLite store keeps large values itself.

    Raises:
        ValueError: An unknown kind.
    """
    store: DynamoDBStore | SQLiteStore
    if kind == "dynamodb":
        table = unique_table_name()
        blob_store = None
        if blobs:
            blob_store = S3BlobStore(table, region=REGION, endpoint_url=endpoint_url)
            blob_store.ensure_bucket()
        store = DynamoDBStore(
            table,
            region=REGION,
            endpoint_url=endpoint_url,
            aws_access_key_id=DUMMY_AWS_ENV["AWS_ACCESS_KEY_ID"],
            aws_secret_access_key=DUMMY_AWS_ENV["AWS_SECRET_ACCESS_KEY"],
            blobs=blob_store,
        )
    elif kind == "sqlite":
        store = SQLiteStore(":memory:" if directory is None else directory / f"{unique_table_name()}.sqlite3")
    else:
        raise ValueError(f"unknown store kind {kind!r}; expected one of {', '.join(STORE_KINDS)}")
    store.ensure_schema()
    return store


def store_of_param(
    request: pytest.FixtureRequest, directory: Path, endpoint_fixture: str
) -> DynamoDBStore | SQLiteStore:
    """The fresh store a fixture parametrized over `STORE_KINDS` asks for (`request.param`).

    DynamoDB is reached at the URL of the fixture named `endpoint_fixture` (e.g. "dynalite_endpoint"),
    requested only then, so the SQLite runs need no DynamoDB server; SQLite gets a file in `directory`.
    """
    if request.param == "dynamodb":
        return make_store("dynamodb", endpoint_url=request.getfixturevalue(endpoint_fixture))
    return make_store("sqlite", directory=directory)


def dev_store_options(request: pytest.FixtureRequest, directory: Path) -> dict[str, object]:
    """`DevServer` store options for a fixture parametrized over `STORE_KINDS`: a new table on the
    dynalite server (`dynalite_endpoint` fixture), or SQLite in `directory`."""
    if request.param == "dynamodb":
        return {"dynamodb_endpoint": request.getfixturevalue("dynalite_endpoint"), "table": unique_table_name()}
    return {"data_dir": directory / f"sqlite-{unique_table_name()}"}


def queries_per_scan(store: Store) -> int:
    """Requests one read over every shard makes: DynamoDB queries each shard, SQLite makes one call."""
    dynamodb = as_dynamodb(store)
    return 1 if dynamodb is None else dynamodb.shards


def ids_in_distinct_shards(store: Store, count: int) -> list[str]:
    """`count` invocation ids, each in a DynamoDB shard of its own (so a test spans shards for sure)."""
    shards = getattr(store, "shards", DEFAULT_SHARDS)
    found: dict[int, str] = {}
    n = 0
    while len(found) < count:
        found.setdefault(shard_of(f"inv_s{n}", shards), f"inv_s{n}")
        n += 1
    return list(found.values())
