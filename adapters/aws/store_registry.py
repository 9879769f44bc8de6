"""Deployments, services and subscriptions, the registry half of `DynamoDBStore` (`DEP`, `SVC`, `SUB`).

Items: `DEP` / `DEP#{deployment_id}` (one attribute per `DeploymentRecord` field), `SVC` /
`SVC#{name}` (one per `ServiceRecord` field), see `adapters.aws.store_items`, and `SUB` /
`SUB#{subscription_id}` (`SubscriptionItem`). Reads are strongly consistent; deployments and
services are written whatever was there, a subscription is created on its item being absent and
deleted on it existing.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from botocore.exceptions import ClientError
from pynamodb.attributes import JSONAttribute, UnicodeAttribute
from pynamodb.connection import TableConnection
from pynamodb.exceptions import DeleteError, PutError

from adapters.aws.store_items import (
    CONDITION_FAILED,
    DEPLOYMENTS_PK,
    IntAttribute,
    Item,
    SERVICES_PK,
    DeploymentItem,
    ServiceItem,
    deployment_record,
    deployment_sk,
    service_record,
    service_sk,
    item_absent,
    item_exists,
    translated_write,
)
from control_plane.ports import DeploymentRecord, ServiceRecord, StoreConflict, SubscriptionRecord

SUBSCRIPTIONS_PK = "SUB"


def subscription_sk(subscription_id: str) -> str:
    """The sort key of a subscription in the `SUB` partition."""
    return f"SUB#{subscription_id}"


class SubscriptionItem(Item):
    """`SUB` / `SUB#{subscription_id}`: one attribute per `SubscriptionRecord` field."""

    subscription_id = UnicodeAttribute()
    source = UnicodeAttribute()
    sink = UnicodeAttribute()
    options = JSONAttribute(null=True)
    created_at_ms = IntAttribute()


def subscription_record(item: SubscriptionItem) -> SubscriptionRecord:
    """The record an item holds."""
    return SubscriptionRecord(
        subscription_id=item.subscription_id,
        source=item.source,
        sink=item.sink,
        options=dict(item.options or {}),
        created_at_ms=item.created_at_ms,
    )

_RULES_KEY = {"PK": {"S": "RULES"}, "SK": {"S": "RULES"}}
"""The concurrency rule book's item: every rule in one JSON attribute `rules`, and `version`."""


class DynamoRegistry:
    """`control_plane.ports.RegistryStore` (deployments and services); `DynamoDBStore` binds the two item classes.

    Attributes:
        _deployments: The store's bound `DeploymentItem`.
        _services: The store's bound `ServiceItem`.
        _connection: The store's counting table connection (the rule book's raw requests).
        _subscriptions: The store's bound `SubscriptionItem`.
    """

    _deployments: type[DeploymentItem]
    _services: type[ServiceItem]
    _connection: TableConnection
    _subscriptions: type[SubscriptionItem]

    def put_deployment(self, deployment: DeploymentRecord) -> None:
        """Store `deployment`, replacing any deployment with the same id.

        Raises:
            ItemTooLarge: The deployment (its manifest, mostly) does not fit in a 400 KB item.
        """
        item = self._deployments(
            DEPLOYMENTS_PK,
            deployment_sk(deployment.deployment_id),
            deployment_id=deployment.deployment_id,
            endpoint=deployment.endpoint,
            additional_headers=dict(deployment.additional_headers),
            manifest=dict(deployment.manifest),
            min_protocol_version=deployment.min_protocol_version,
            max_protocol_version=deployment.max_protocol_version,
            created_at_ms=deployment.created_at_ms,
            services=list(deployment.services),
            metadata=dict(deployment.metadata),
            auth=dict(deployment.auth) or None,
            protocol_mode=deployment.protocol_mode,
        )
        too_large = (
            f"deployment {deployment.deployment_id}: its manifest does not fit in one DynamoDB item (400 KB); "
            "register fewer services per deployment"
        )
        with translated_write(too_large=too_large):
            item.save()

    def get_deployment(self, deployment_id: str) -> DeploymentRecord | None:
        """The deployment `deployment_id`, or None if it is not registered.

        Read eventually consistent first (half the read units: a deployment item holds its whole
        manifest, often 10-20 KB, and every attempt's worker reads it), then, if that finds
        nothing, strongly consistent (one registered a moment ago). An update of a deployment
        (registered again) may so be seen up to about a second late, within the 2 s that
        `control_plane.registry` caches it anyway (issue 24)."""
        for consistent in (False, True):
            try:
                item = self._deployments.get(DEPLOYMENTS_PK, deployment_sk(deployment_id), consistent_read=consistent)
            except self._deployments.DoesNotExist:
                continue
            return deployment_record(item)
        return None

    def list_deployments(self) -> list[DeploymentRecord]:
        """Every deployment, ordered by id (one query, paged)."""
        items = self._deployments.query(DEPLOYMENTS_PK, self._deployments.sk.startswith("DEP#"), consistent_read=True)
        return [deployment_record(item) for item in items]

    def delete_deployment(self, deployment_id: str) -> None:
        """Remove the deployment `deployment_id`; removing an unknown id does nothing."""
        self._deployments(DEPLOYMENTS_PK, deployment_sk(deployment_id)).delete()

    def put_service(self, service: ServiceRecord) -> None:
        """Store `service`, replacing any service with the same name.

        Raises:
            ItemTooLarge: The service's manifest entry does not fit in a 400 KB item.
        """
        item = self._services(
            SERVICES_PK,
            service_sk(service.name),
            name=service.name,
            deployment_id=service.deployment_id,
            ty=service.ty,
            manifest=dict(service.manifest),
            revision=service.revision,
            overrides=dict(service.overrides) or None,
        )
        too_large = f"service {service.name}: its manifest entry does not fit in one DynamoDB item (400 KB)"
        with translated_write(too_large=too_large):
            item.save()

    def get_service(self, name: str) -> ServiceRecord | None:
        """The service `name`, or None if no deployment registered it."""
        try:
            item = self._services.get(SERVICES_PK, service_sk(name), consistent_read=True)
        except self._services.DoesNotExist:
            return None
        return service_record(item)

    def list_services(self) -> list[ServiceRecord]:
        """Every service, ordered by name (one query, paged)."""
        items = self._services.query(SERVICES_PK, self._services.sk.startswith("SVC#"), consistent_read=True)
        return [service_record(item) for item in items]

    def delete_service(self, name: str) -> None:
        """Remove the service `name`; removing an unknown name does nothing."""
        self._services(SERVICES_PK, service_sk(name)).delete()

    def get_rule_book(self) -> tuple[dict[str, dict[str, Any]], int]:
        """`({pattern: rule}, version)` of the concurrency rule book (item `RULES` / `RULES`, one
        consistent GetItem); `({}, 0)` if never written."""
        request = {"TableName": self._connection.table_name, "Key": _RULES_KEY, "ConsistentRead": True}
        item = (self._connection.connection.dispatch("GetItem", request) or {}).get("Item")
        if not item:
            return {}, 0
        return json.loads(item["rules"]["S"]), int(item["version"]["N"])

    def put_rule_book(self, rules: Mapping[str, Mapping[str, Any]], version: int) -> None:
        """Replace the rule book read at `version`: one PutItem of `RULES` / `RULES` conditional on
        `version` (absent for 0). Raises `StoreConflict` if it moved on, `ItemTooLarge` past 400 KB."""
        request = {
            "TableName": self._connection.table_name,
            "Item": {**_RULES_KEY, "rules": {"S": json.dumps({k: dict(v) for k, v in rules.items()})},
                     "version": {"N": str(version + 1)}},
            "ConditionExpression": "attribute_not_exists(PK)" if version == 0 else "version = :v",
        }  # fmt: skip
        if version:
            request["ExpressionAttributeValues"] = {":v": {"N": str(version)}}
        conflict, too_large = f"the rule book changed since version {version}", "the rule book does not fit in one item"
        with translated_write(conflict=conflict, too_large=too_large):
            try:
                self._connection.connection.dispatch("PutItem", request)
            except ClientError as exc:  # as pynamodb's own put_item raises it
                raise PutError("Failed to put item", exc) from exc

    def create_subscription(self, subscription: SubscriptionRecord) -> None:
        """Store a new subscription (PutItem, on the item being absent). `StoreConflict` if the id is taken."""
        item = self._subscriptions(
            SUBSCRIPTIONS_PK,
            subscription_sk(subscription.subscription_id),
            subscription_id=subscription.subscription_id,
            source=subscription.source,
            sink=subscription.sink,
            options=dict(subscription.options) or None,
            created_at_ms=subscription.created_at_ms,
        )
        with translated_write(
            too_large=f"subscription {subscription.subscription_id}: its options do not fit in one item (400 KB)",
            conflict=f"subscription {subscription.subscription_id} exists",
        ):
            item.save(condition=item_absent(self._subscriptions))

    def get_subscription(self, subscription_id: str) -> SubscriptionRecord | None:
        """The subscription `subscription_id`, or None."""
        try:
            item = self._subscriptions.get(SUBSCRIPTIONS_PK, subscription_sk(subscription_id), consistent_read=True)
        except self._subscriptions.DoesNotExist:
            return None
        return subscription_record(item)

    def list_subscriptions(self) -> list[SubscriptionRecord]:
        """Every subscription, ordered by id (one query, paged)."""
        model = self._subscriptions
        items = model.query(SUBSCRIPTIONS_PK, model.sk.startswith("SUB#"), consistent_read=True)
        return [subscription_record(item) for item in items]

    def delete_subscription(self, subscription_id: str) -> bool:
        """Remove the subscription (DeleteItem, on the item existing); True if it existed."""
        item = self._subscriptions(SUBSCRIPTIONS_PK, subscription_sk(subscription_id))
        try:
            item.delete(condition=item_exists(self._subscriptions))
        except DeleteError as exc:
            if exc.cause_response_code == CONDITION_FAILED:
                return False
            raise
        return True
