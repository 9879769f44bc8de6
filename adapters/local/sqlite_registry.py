"""Deployments, services and subscriptions, the registry half of `SQLiteStore`: one row per record, the
record as JSON.

Tables: `deployments (deployment_id, record)`, `services (name, record)` and `subscriptions
(subscription_id, record)`. Writes replace whatever
was there; lists are ordered by id and by name (as `DynamoDBStore`'s sort keys order them).
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import sqlite3
from collections.abc import Mapping
from typing import Any

from adapters.local.sqlite_keyed import item_size
from control_plane.ports import (
    MAX_ITEM_BYTES,
    DeploymentRecord,
    ItemTooLarge,
    ServiceRecord,
    StoreConflict,
    SubscriptionRecord,
)


class RegistryTables:
    """`control_plane.ports.RegistryStore` (deployments and services); `SQLiteStore` provides `_write`/`_read`."""

    REGISTRY_SCHEMA = """
    CREATE TABLE IF NOT EXISTS deployments (deployment_id TEXT PRIMARY KEY, record TEXT NOT NULL) WITHOUT ROWID;
    CREATE TABLE IF NOT EXISTS services (name TEXT PRIMARY KEY, record TEXT NOT NULL) WITHOUT ROWID;
    CREATE TABLE IF NOT EXISTS rule_book (name TEXT PRIMARY KEY, rules TEXT NOT NULL, version INTEGER NOT NULL)
        WITHOUT ROWID;
    CREATE TABLE IF NOT EXISTS subscriptions (subscription_id TEXT PRIMARY KEY, record TEXT NOT NULL) WITHOUT ROWID;
    """

    def _write(self, method: str) -> contextlib.AbstractContextManager[sqlite3.Connection]:
        raise NotImplementedError

    def _read(self, method: str) -> contextlib.AbstractContextManager[sqlite3.Connection]:
        raise NotImplementedError

    # --- deployments and services ----------------------------------------------------------------

    def put_deployment(self, deployment: DeploymentRecord) -> None:
        """Store `deployment`, replacing any deployment with the same id.

        Raises:
            ItemTooLarge: The deployment (its manifest, mostly) does not fit in a 400 KB item.
        """
        values = dataclasses.asdict(deployment)
        values["services"] = list(deployment.services)
        if item_size(values) > MAX_ITEM_BYTES:
            raise ItemTooLarge(
                f"deployment {deployment.deployment_id}: its manifest does not fit in one DynamoDB item (400 KB); "
                "register fewer services per deployment"
            )
        with self._write("put_deployment") as db:
            db.execute(
                "INSERT OR REPLACE INTO deployments (deployment_id, record) VALUES (?, ?)",
                (deployment.deployment_id, json.dumps(values)),
            )

    @staticmethod
    def _deployment(raw: str) -> DeploymentRecord:
        values = json.loads(raw)
        values["services"] = tuple(values.get("services") or ())
        return DeploymentRecord(**values)

    def get_deployment(self, deployment_id: str) -> DeploymentRecord | None:
        """The deployment `deployment_id`, or None if it is not registered."""
        with self._read("get_deployment") as db:
            row = db.execute("SELECT record FROM deployments WHERE deployment_id = ?", (deployment_id,)).fetchone()
        return None if row is None else self._deployment(row["record"])

    def list_deployments(self) -> list[DeploymentRecord]:
        """Every deployment, ordered by id."""
        with self._read("list_deployments") as db:
            rows = db.execute("SELECT record FROM deployments ORDER BY deployment_id").fetchall()
        return [self._deployment(row["record"]) for row in rows]

    def delete_deployment(self, deployment_id: str) -> None:
        """Remove the deployment `deployment_id`; removing an unknown id does nothing."""
        with self._write("delete_deployment") as db:
            db.execute("DELETE FROM deployments WHERE deployment_id = ?", (deployment_id,))

    def put_service(self, service: ServiceRecord) -> None:
        """Store `service`, replacing any service with the same name.

        Raises:
            ItemTooLarge: The service's manifest entry does not fit in a 400 KB item.
        """
        values = dataclasses.asdict(service)
        if item_size(values) > MAX_ITEM_BYTES:
            raise ItemTooLarge(f"service {service.name}: its manifest entry does not fit in one DynamoDB item (400 KB)")
        with self._write("put_service") as db:
            db.execute(
                "INSERT OR REPLACE INTO services (name, record) VALUES (?, ?)", (service.name, json.dumps(values))
            )

    def get_service(self, name: str) -> ServiceRecord | None:
        """The service `name`, or None if no deployment registered it."""
        with self._read("get_service") as db:
            row = db.execute("SELECT record FROM services WHERE name = ?", (name,)).fetchone()
        return None if row is None else ServiceRecord(**json.loads(row["record"]))

    def list_services(self) -> list[ServiceRecord]:
        """Every service, ordered by name."""
        with self._read("list_services") as db:
            rows = db.execute("SELECT record FROM services ORDER BY name").fetchall()
        return [ServiceRecord(**json.loads(row["record"])) for row in rows]

    def delete_service(self, name: str) -> None:
        """Remove the service `name`; removing an unknown name does nothing."""
        with self._write("delete_service") as db:
            db.execute("DELETE FROM services WHERE name = ?", (name,))

    def get_rule_book(self) -> tuple[dict[str, dict[str, Any]], int]:
        """`({pattern: rule}, version)` of the concurrency rule book; `({}, 0)` if never written."""
        with self._read("get_rule_book") as db:
            row = db.execute("SELECT rules, version FROM rule_book WHERE name = 'rules'").fetchone()
        return ({}, 0) if row is None else (json.loads(row["rules"]), int(row["version"]))

    def put_rule_book(self, rules: Mapping[str, Mapping[str, Any]], version: int) -> None:
        """Replace the rule book read at `version` (one transaction); `StoreConflict` if it moved on."""
        with self._write("put_rule_book") as db:
            row = db.execute("SELECT version FROM rule_book WHERE name = 'rules'").fetchone()
            if (0 if row is None else int(row["version"])) != version:
                raise StoreConflict(f"the rule book changed since version {version}")
            db.execute(
                "INSERT OR REPLACE INTO rule_book (name, rules, version) VALUES ('rules', ?, ?)",
                (json.dumps({k: dict(v) for k, v in rules.items()}), version + 1),
            )

    # --- subscriptions -----------------------------------------------------------------------------

    def create_subscription(self, subscription: SubscriptionRecord) -> None:
        """Store a new subscription. Raises `StoreConflict` if its id exists (nothing written)."""
        values = dataclasses.asdict(subscription)
        values["options"] = dict(subscription.options)
        with self._write("create_subscription") as db:
            try:
                db.execute(
                    "INSERT INTO subscriptions (subscription_id, record) VALUES (?, ?)",
                    (subscription.subscription_id, json.dumps(values)),
                )
            except sqlite3.IntegrityError as exc:
                raise StoreConflict(f"subscription {subscription.subscription_id} exists") from exc

    def get_subscription(self, subscription_id: str) -> SubscriptionRecord | None:
        """The subscription `subscription_id`, or None."""
        with self._read("get_subscription") as db:
            row = db.execute(
                "SELECT record FROM subscriptions WHERE subscription_id = ?", (subscription_id,)
            ).fetchone()
        return None if row is None else SubscriptionRecord(**json.loads(row["record"]))

    def list_subscriptions(self) -> list[SubscriptionRecord]:
        """Every subscription, ordered by id."""
        with self._read("list_subscriptions") as db:
            rows = db.execute("SELECT record FROM subscriptions ORDER BY subscription_id").fetchall()
        return [SubscriptionRecord(**json.loads(row["record"])) for row in rows]

    def delete_subscription(self, subscription_id: str) -> bool:
        """Remove the subscription; True if it existed."""
        with self._write("delete_subscription") as db:
            cursor = db.execute("DELETE FROM subscriptions WHERE subscription_id = ?", (subscription_id,))
        return cursor.rowcount > 0
