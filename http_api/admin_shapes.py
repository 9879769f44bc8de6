"""The admin API's JSON for services, handlers, deployments and state, in restate-server 1.7's shapes.

restate-server's admin API v4 (what its `restate` CLI 1.7 reads) spells enums in PascalCase
(`"ty": "VirtualObject"`, handler `"ty": "Exclusive"`, `"on_max_attempts": "Pause"`), writes durations
in jiff's compact friendly form (`"10m"`, `"1h 30m"`), and describes a handler's input and output in
words (`"JSON object"`, `"none"`). Torpor's own fields (a service's `config` with where each value
comes from, a deployment's `auth`) are added beside them.
"""

from __future__ import annotations

import base64
import hashlib
from collections.abc import Mapping, Sequence
from typing import Any, cast

from control_plane.durations import format_duration_ms
from control_plane.ports import DeploymentRecord, ServiceRecord
from control_plane.protocol import manifest_entries

SERVICE_TYPES = {"SERVICE": "Service", "VIRTUAL_OBJECT": "VirtualObject", "WORKFLOW": "Workflow"}
"""Endpoint manifest service types -> the admin API's (`ServiceType` in restate-server's OpenAPI)."""

HANDLER_TYPES = {"EXCLUSIVE": "Exclusive", "SHARED": "Shared", "WORKFLOW": "Workflow"}
"""Endpoint manifest handler types -> the admin API's (`HandlerMetadataType`)."""

ADMIN_API_VERSION = 4
"""The admin API version whose shapes Torpor serves (restate-server 1.7: `/v4/...`, `GET /version`)."""

RESTATE_SERVER_VERSION = "1.7.12"
"""The restate-server release whose admin API, SQL tables and behaviour Torpor's admin API matches.
`GET /version` names it (with Torpor's own version as semver build metadata, `1.7.12+torpor.0.1.0`):
Restate's web UI picks its queries by the server version it reads there."""

RESTATE_FEATURES = (
    "invoker_yield", "kafka_scope", "preflight_invocation_termination_retention", "protocol_v7",
    "scoped_promise_table_migration", "scoped_state_table_migration", "scoped_virtual_objects",
    "unique_random_seeds", "vqueue_obsolete_cleanup", "vqueues", "vqueues_async_refill",
    "vqueues_migration_skip_completed",
)  # fmt: skip
"""The feature flags restate-server 1.7.12 lists in `GET /version` (each `false` there too): Restate's
web UI switches to the queries of virtual queues, scopes and protocol V7 on those that are `true`,
which Torpor's tables do not serve."""

_HANDLER_DURATIONS = {
    "inactivity_timeout": "inactivityTimeout",
    "abort_timeout": "abortTimeout",
    "journal_retention": "journalRetention",
    "idempotency_retention": "idempotencyRetention",
    "workflow_completion_retention": "workflowCompletionRetention",
}


def payload_description(payload: Mapping[str, Any] | None) -> str:
    """A handler's input or output in words, from its manifest `input`/`output` entry: `none` when it
    takes or returns nothing, `JSON <type>` for JSON with a schema naming its type (`JSON object`),
    `JSON value` for JSON without one, else the content type."""
    payload = payload or {}
    content_type = payload.get("contentType")
    if not content_type:
        return "none"
    if str(content_type).split(";")[0].strip() == "application/json":
        schema = payload.get("jsonSchema")
        kind = schema.get("type") if isinstance(schema, Mapping) else None
        return f"JSON {kind}" if isinstance(kind, str) else "JSON value"
    return str(content_type)


def _ms(value: object) -> str | None:
    return format_duration_ms(int(value)) if isinstance(value, int | float) else None


def handler_json(service: ServiceRecord, handler: Mapping[str, Any], public: bool) -> dict[str, Any]:
    """One handler as `GET /services/{name}/handlers/{handler}` shows it (`HandlerMetadata`): name,
    `ty` (absent for a plain service's handlers, as restate-server leaves it), documentation,
    metadata (left out when empty), public, input/output descriptions and JSON schemas, and the
    per-handler options the handler's code sets (durations as `10m`; unset ones are left out, as
    restate-server leaves them out, but for the retry policy's `max_attempts`, null)."""
    out: dict[str, Any] = {"name": handler.get("name")}
    ty = handler.get("ty") or ("EXCLUSIVE" if service.ty == "VIRTUAL_OBJECT" else None)
    if service.ty != "SERVICE" and ty:
        out["ty"] = HANDLER_TYPES.get(str(ty), str(ty))
    out["documentation"] = handler.get("documentation")
    if handler.get("metadata"):
        out["metadata"] = dict(handler["metadata"])
    out["public"] = public and not handler.get("ingressPrivate", False)
    out["input_description"] = payload_description(handler.get("input"))
    out["output_description"] = payload_description(handler.get("output"))
    for side in ("input", "output"):
        schema = (handler.get(side) or {}).get("jsonSchema")
        if schema is not None:
            out[f"{side}_json_schema"] = schema
    options: dict[str, Any] = {name: _ms(handler.get(option)) for name, option in _HANDLER_DURATIONS.items()}
    options["enable_lazy_state"] = handler.get("enableLazyState")
    out.update((k, v) for k, v in options.items() if v is not None)
    on_max = handler.get("retryPolicyOnMaxAttempts")
    retry = {
        "initial_interval": _ms(handler.get("retryPolicyInitialInterval")),
        "exponentiation_factor": handler.get("retryPolicyExponentiationFactor"),
        "max_interval": _ms(handler.get("retryPolicyMaxInterval")),
        "on_max_attempts": str(on_max).capitalize() if on_max else None,
    }
    out["retry_policy"] = {
        "max_attempts": handler.get("retryPolicyMaxAttempts"),
        **{k: v for k, v in retry.items() if v is not None},
    }
    return out


def service_json(service: ServiceRecord, config: Mapping[str, Mapping[str, Any]]) -> dict[str, Any]:
    """A service as `GET /services/{name}` shows it (`ServiceMetadata`): name, `ty`, handlers,
    deployment, revision, public, documentation, metadata, and its effective options at service
    level from `config` (`Registry.config_of`: `{manifest option name: {"value", "source"}}`,
    durations in ms), written as restate-server writes them."""

    def value(option: str) -> Any:
        return (config.get(option) or {}).get("value")

    public = not bool(value("ingressPrivate"))
    max_attempts = value("retryPolicyMaxAttempts")
    out: dict[str, Any] = {
        "name": service.name,
        "ty": SERVICE_TYPES.get(service.ty, service.ty),
        "handlers": [handler_json(service, h, public) for h in manifest_entries(service.manifest, "handlers")],
        "deployment_id": service.deployment_id,
        "revision": service.revision,
        "public": public,
        "documentation": service.manifest.get("documentation"),
        "idempotency_retention": _ms(value("idempotencyRetention")),
        "journal_retention": _ms(value("journalRetention")),
        "inactivity_timeout": _ms(value("inactivityTimeout")),
        "abort_timeout": _ms(value("abortTimeout")),
        "enable_lazy_state": bool(service.manifest.get("enableLazyState", False)),
        "retry_policy": {
            "initial_interval": _ms(value("retryPolicyInitialInterval")),
            "exponentiation_factor": float(value("retryPolicyExponentiationFactor") or 2.0),
            "max_attempts": max_attempts or None,  # Torpor's 0: no limit; Restate's null
            "max_interval": _ms(value("retryPolicyMaxInterval")),
            "on_max_attempts": str(value("retryPolicyOnMaxAttempts") or "pause").capitalize(),
        },
    }
    if service.manifest.get("metadata"):
        out["metadata"] = dict(cast(Mapping[str, str], service.manifest["metadata"]))
    if service.ty == "WORKFLOW":
        out["workflow_completion_retention"] = _ms(value("workflowCompletionRetention"))
    return out


def service_revisions(
    deployment: DeploymentRecord, deployments: Sequence[DeploymentRecord], services: Sequence[ServiceRecord]
) -> list[dict[str, Any]]:
    """`[{"name", "revision"}]` of the services `deployment` registered (`ServiceNameRevPair`, as
    `GET /deployments` lists them): a service's stored revision where this deployment still serves it,
    else that revision less one per newer deployment that registered the service since (at least 1)."""
    latest = {s.name: s for s in services}
    out: list[dict[str, Any]] = []
    for name in deployment.services:
        current = latest.get(name)
        if current is None:
            revision = 1
        elif current.deployment_id == deployment.deployment_id:
            revision = current.revision
        else:
            newer = sum(
                1
                for d in deployments
                if name in d.services and d.created_at_ms > deployment.created_at_ms
                and d.deployment_id != deployment.deployment_id
            )  # fmt: skip
            revision = max(1, current.revision - newer)
        out.append({"name": name, "revision": revision})
    return out


def state_version(state: Mapping[bytes, bytes]) -> str:
    """The version of an object's state that `POST /services/{name}/state` compares with the
    request's `version` (restate-server's `StateMutationVersion`, which the `restate` CLI computes
    from the state it read): SHA-256 over the entries sorted by key, each as its index (8 bytes,
    big-endian), 0x01, key, 0x02, value, 0x03; URL-safe base64 without padding."""
    digest = hashlib.sha256()
    for index, (key, value) in enumerate(sorted(state.items())):
        digest.update(index.to_bytes(8, "big") + b"\x01" + key + b"\x02" + value + b"\x03")
    return base64.urlsafe_b64encode(digest.digest()).rstrip(b"=").decode()
