"""The admin API described as an OpenAPI 3.1 document (`GET /openapi`).

The routes and shapes Restate's admin API also has carry restate-server's operation ids and schema
names (`list_services`, `ServiceMetadata`, ...), so a client generated from either document reads
both; Torpor's own routes and fields (invocation listing and details, a service's `config`, state
by key, `/metrics`, the web UI) follow. Paths are shown unversioned; each is also served under
`/v4` (admin API version 4, restate-server 1.7's), where Restate's clients send them.
"""

from __future__ import annotations

from typing import Any

_DURATION = {
    "type": "string",
    "description": "A duration as restate-server reads it: `500ms`, `10m`, `1h 30m`, `90sec`, `1 hour`, `1d`, "
    "ISO 8601 `PT10S`; or ms.",
}
_NULLABLE_DURATION = {**_DURATION, "type": ["string", "null"]}
_STRING_MAP = {"type": "object", "additionalProperties": {"type": "string"}}


def _ref(name: str) -> dict[str, str]:
    return {"$ref": f"#/components/schemas/{name}"}


def _obj(required: list[str], **properties: Any) -> dict[str, Any]:
    return {"type": "object", "required": required, "properties": properties}


_SCHEMAS: dict[str, Any] = {
    "ErrorDescriptionResponse": _obj(
        ["code", "message"],
        code={"type": "integer", "description": "The HTTP status."},
        message={"type": "string", "description": "What went wrong and, where there is one, the fix."},
        restate_code={"type": "string", "description": "restate-server's code for the same case (META0009)."},
    ),
    "VersionInformation": _obj(
        ["version", "min_admin_api_version", "max_admin_api_version", "features"],
        version={"type": "string", "description": "Torpor's version."},
        min_admin_api_version={"type": "integer"},
        max_admin_api_version={"type": "integer"},
        ingress_endpoint={"type": ["string", "null"], "format": "uri"},
        features={"type": "object", "additionalProperties": {"type": "boolean"}},
    ),
    "ServiceType": {"type": "string", "enum": ["Service", "VirtualObject", "Workflow"]},
    "HandlerMetadataType": {"type": "string", "enum": ["Exclusive", "Shared", "Workflow"]},
    "OnMaxAttempts": {"type": "string", "enum": ["Pause", "Kill"]},
    "ProtocolType": {"type": "string", "enum": ["RequestResponse", "BidiStream"]},
    "HandlerRetryPolicyMetadata": _obj(
        [],
        initial_interval=_NULLABLE_DURATION,
        exponentiation_factor={"type": ["number", "null"]},
        max_attempts={"type": ["integer", "null"], "minimum": 1},
        max_interval=_NULLABLE_DURATION,
        on_max_attempts={"oneOf": [{"type": "null"}, _ref("OnMaxAttempts")]},
    ),
    "ServiceRetryPolicyMetadata": _obj(
        [],
        initial_interval=_DURATION,
        exponentiation_factor={"type": "number"},
        max_attempts={"type": ["integer", "null"], "minimum": 1, "description": "null: no limit."},
        max_interval=_NULLABLE_DURATION,
        on_max_attempts=_ref("OnMaxAttempts"),
    ),
    "HandlerMetadata": _obj(
        ["name", "input_description", "output_description"],
        name={"type": "string"},
        ty={**_ref("HandlerMetadataType"), "description": "Absent for the handlers of a plain service."},
        documentation={"type": ["string", "null"]},
        metadata=_STRING_MAP,
        public={"type": "boolean"},
        input_description={"type": "string", "description": "`none`, `JSON <type>`, or a content type."},
        output_description={"type": "string"},
        input_json_schema={},
        output_json_schema={},
        inactivity_timeout=_NULLABLE_DURATION,
        abort_timeout=_NULLABLE_DURATION,
        journal_retention=_NULLABLE_DURATION,
        idempotency_retention=_NULLABLE_DURATION,
        workflow_completion_retention=_NULLABLE_DURATION,
        enable_lazy_state={"type": ["boolean", "null"]},
        retry_policy=_ref("HandlerRetryPolicyMetadata"),
    ),
    "ServiceMetadata": _obj(
        ["name", "ty", "handlers", "deployment_id", "revision"],
        name={"type": "string"},
        ty=_ref("ServiceType"),
        handlers={"type": "array", "items": _ref("HandlerMetadata")},
        deployment_id={"type": "string", "description": "The deployment serving the latest revision (`dp_…`)."},
        revision={"type": "integer", "minimum": 1},
        public={"type": "boolean"},
        documentation={"type": ["string", "null"]},
        metadata=_STRING_MAP,
        idempotency_retention=_DURATION,
        workflow_completion_retention={**_NULLABLE_DURATION, "description": "Workflows only."},
        journal_retention=_NULLABLE_DURATION,
        inactivity_timeout=_DURATION,
        abort_timeout=_DURATION,
        enable_lazy_state={"type": "boolean"},
        retry_policy=_ref("ServiceRetryPolicyMetadata"),
        info={"type": "array", "items": {"type": "object"}},
        config={
            "type": "object",
            "description": "Torpor: each option's effective value (ms for durations) and where it comes from "
            "(`GET /services/{service}` only).",
            "additionalProperties": _obj(["value", "source"], value={}, source={"type": "string"}),
        },
    ),
    "ListServicesResponse": _obj(["services"], services={"type": "array", "items": _ref("ServiceMetadata")}),
    "ListServiceHandlersResponse": _obj(["handlers"], handlers={"type": "array", "items": _ref("HandlerMetadata")}),
    "ModifyServiceRequest": {
        "type": "object",
        "description": "Admin overrides of a service's options, until it is registered again. Unversioned, "
        "null removes an override; under `/v4`, null leaves the option unchanged (as Restate reads it).",
        "properties": {
            "public": {"type": ["boolean", "null"]},
            "idempotency_retention": _NULLABLE_DURATION,
            "workflow_completion_retention": _NULLABLE_DURATION,
            "journal_retention": _NULLABLE_DURATION,
            "inactivity_timeout": _NULLABLE_DURATION,
            "abort_timeout": _NULLABLE_DURATION,
            "retry_policy": {"oneOf": [{"type": "null"}, _ref("HandlerRetryPolicyMetadata")]},
            "concurrency_limit": {"type": ["integer", "null"], "minimum": 1},
            "handler_concurrency_limits": {"type": "object", "additionalProperties": {"type": ["integer", "null"]}},
            "rate_limit": {"type": ["number", "null"], "exclusiveMinimum": 0, "maximum": 1000},
            "handler_rate_limits": {"type": "object", "additionalProperties": {"type": ["number", "null"]}},
        },
    },
    "ModifyServiceStateRequest": _obj(
        ["object_key", "new_state"],
        object_key={"type": "string"},
        new_state={
            "type": "object",
            "description": "The whole new state: each name to its value as bytes.",
            "additionalProperties": {"type": "array", "items": {"type": "integer", "minimum": 0, "maximum": 255}},
        },
        version={"type": ["string", "null"], "description": "The version of the state the change was based on."},
    ),
    "ServiceNameRevPair": _obj(["name", "revision"], name={"type": "string"}, revision={"type": "integer"}),
    "RegisterDeploymentRequest": {
        "type": "object",
        "description": "Either `uri` (HTTP, Cloud Run) or `arn` (a Lambda function version).",
        "properties": {
            "uri": {"type": "string"},
            "arn": {"type": "string"},
            "assume_role_arn": {"type": ["string", "null"]},
            "additional_headers": _STRING_MAP,
            "metadata": _STRING_MAP,
            "use_http_11": {"type": "boolean"},
            "force": {"type": ["boolean", "null"]},
            "breaking": {"type": "boolean"},
            "dry_run": {"type": "boolean"},
        },
    },
    "DeploymentResponse": _obj(
        ["id", "created_at", "min_protocol_version", "max_protocol_version", "services"],
        id={"type": "string"},
        uri={"type": "string", "description": "An HTTP deployment's endpoint."},
        arn={"type": "string", "description": "A Lambda deployment's function version."},
        assume_role_arn={"type": "string"},
        protocol_type=_ref("ProtocolType"),
        http_version={"type": "string"},
        additional_headers=_STRING_MAP,
        metadata=_STRING_MAP,
        created_at={"type": "string", "format": "date-time"},
        min_protocol_version={"type": "integer"},
        max_protocol_version={"type": "integer"},
        sdk_version={"type": ["string", "null"]},
        services={
            "type": "array",
            "description": "`ServiceNameRevPair` in a list, `ServiceMetadata` in one deployment's details.",
            "items": {"oneOf": [_ref("ServiceNameRevPair"), _ref("ServiceMetadata")]},
        },
        info={"type": "array", "items": {"type": "object"}},
    ),
    "ListDeploymentsResponse": _obj(
        ["deployments"], deployments={"type": "array", "items": _ref("DeploymentResponse")}
    ),
    "Invocation": {
        "type": "object",
        "description": "Torpor: an invocation's target, status, attempts, times and outcome; with its "
        "journal decoded entry by entry in `GET /invocations/{invocation_id}`.",
        "properties": {
            "id": {"type": "string"},
            "target": {"type": "string"},
            "status": {
                "type": "string",
                "enum": ["pending", "ready", "running", "backing-off", "suspended", "paused", "completed"],
            },
            "completion_kind": {"type": "string", "enum": ["succeeded", "failed", "cancelled", "killed"]},
            "journal": {"type": "array", "items": {"type": "object"}},
        },
        "additionalProperties": True,
    },
    "ListInvocationsResponse": _obj(
        ["invocations"],
        invocations={"type": "array", "items": _ref("Invocation")},
        next_page_token={"type": "string"},
        unreadable={
            "type": "array",
            "description": "stored records the store could not decode, left out of `invocations`",
            "items": _obj(["invocation_id", "message"], invocation_id={"type": "string"}, message={"type": "string"}),
        },
    ),
    "ObjectState": _obj(
        ["key", "state", "version"],
        key={"type": "string"},
        state={"type": "object", "description": "Values for display, or whole in base64 with ?encoding=base64."},
        version={"type": "string", "description": "The state's version, for ModifyServiceStateRequest.version."},
        raw={"type": "object", "description": "with ?raw=true: each value's stored bytes, base64"},
    ),
    "StateKeys": _obj(
        ["keys"], keys={"type": "array", "items": {"type": "string"}}, truncated={"type": "boolean"}
    ),
}


def _op(
    operation_id: str,
    summary: str,
    ok: str | None = None,
    *,
    status: str = "200",
    body: str | None = None,
    parameters: list[dict[str, Any]] | None = None,
    tag: str = "",
) -> dict[str, Any]:
    """One operation: its answer `ok` (a schema name, or None for an empty answer) and the error shape."""
    answer: dict[str, Any] = {"description": "OK" if status == "200" else "Accepted" if status == "202" else "Created"}
    if ok is not None:
        answer["content"] = {"application/json": {"schema": _ref(ok)}}
    error = {"description": "Error", "content": {"application/json": {"schema": _ref("ErrorDescriptionResponse")}}}
    out: dict[str, Any] = {
        "operationId": operation_id,
        "summary": summary,
        "tags": [tag] if tag else [],
        "responses": {status: answer, "400": error, "404": error, "409": error},
    }
    if body is not None:
        out["requestBody"] = {"required": True, "content": {"application/json": {"schema": _ref(body)}}}
    if parameters:
        out["parameters"] = parameters
    return out


def _path(*names: str) -> list[dict[str, Any]]:
    return [{"name": n, "in": "path", "required": True, "schema": {"type": "string"}} for n in names]


def _query(*names: str) -> list[dict[str, Any]]:
    return [{"name": n, "in": "query", "required": False, "schema": {"type": "string"}} for n in names]


def _paths() -> dict[str, Any]:
    invocation = _path("invocation_id")
    return {
        "/version": {
            "get": _op("version", "Torpor's version and the admin API version it serves", "VersionInformation",
                       tag="health"),
        },
        "/health": {"get": _op("health", "200 once the store answers", tag="health")},
        "/openapi": {"get": _op("openapi", "This document", tag="health")},
        "/deployments": {
            "get": _op("list_deployments", "List deployments", "ListDeploymentsResponse", tag="deployment"),
            "post": _op(
                "create_deployment", "Register a deployment (discovery); `dry_run` stores nothing",
                "DeploymentResponse", status="201", body="RegisterDeploymentRequest", tag="deployment",
            ),
        },
        "/deployments/{deployment}": {
            "get": _op("get_deployment", "One deployment with its services", "DeploymentResponse",
                       parameters=_path("deployment"), tag="deployment"),
            "delete": _op("delete_deployment", "Remove a deployment; `?force=true` even with invocations pinned to it",
                          status="202", parameters=_path("deployment") + _query("force"), tag="deployment"),
        },
        "/services": {"get": _op("list_services", "List services", "ListServicesResponse", tag="service")},
        "/limits/rules": {
            "get": _op("list_rules", "Torpor: the concurrency rule book", tag="rule"),
            "put": _op("upsert_rules", "Upsert a batch of rules (`[{pattern, limits: {concurrency}, disabled?, "
                       "description?, precondition?}]`), all or nothing; answers them as stored", tag="rule"),
        },
        "/limits/rules/bulk-delete": {
            "post": _op("bulk_delete_rules", "Delete rules by pattern (`[{pattern, expected_version?}]`); answers "
                        "the patterns removed", tag="rule"),
        },
        "/services/{service}": {
            "get": _op("get_service", "One service, with Torpor's `config`", "ServiceMetadata",
                       parameters=_path("service"), tag="service"),
            "patch": _op("modify_service", "Override a service's options", "ServiceMetadata",
                         body="ModifyServiceRequest", parameters=_path("service"), tag="service"),
        },
        "/services/{service}/handlers": {
            "get": _op("list_service_handlers", "A service's handlers", "ListServiceHandlersResponse",
                       parameters=_path("service"), tag="service"),
        },
        "/services/{service}/handlers/{handler}": {
            "get": _op("get_service_handler", "One handler", "HandlerMetadata",
                       parameters=_path("service", "handler"), tag="service"),
        },
        "/services/{service}/state": {
            "post": _op("modify_service_state", "Replace all state of one object key", status="202",
                        body="ModifyServiceStateRequest", parameters=_path("service"), tag="service"),
            "get": _op("list_service_state_keys", "Torpor: the keys that have state, sorted", "StateKeys",
                       parameters=[*_path("service"), *_query("limit")], tag="service"),
        },
        "/services/{service}/state/{key}": {
            "get": _op("get_service_state", "Torpor: all state of one key and its version",
                       "ObjectState", parameters=[*_path("service", "key"), *_query("encoding", "raw")],
                       tag="service"),
            "delete": _op("clear_service_state", "Torpor: delete all state of one key", status="202",
                          parameters=_path("service", "key"), tag="service"),
        },
        "/invocations": {
            "get": _op("list_invocations", "Torpor: list invocations, newest first", "ListInvocationsResponse",
                       parameters=_query(
                           "status", "completion", "service", "handler", "key", "limit", "page_token", "waiting_for"
                       ),
                       tag="invocation"),
        },
        "/invocations/{invocation_id}": {
            "get": _op("get_invocation", "Torpor: one invocation with its journal", "Invocation",
                       parameters=invocation, tag="invocation"),
            "delete": _op("delete_invocation", "Purge a completed invocation", status="202",
                          parameters=invocation, tag="invocation"),
        },
        **{
            f"/invocations/{{invocation_id}}/{verb}": {
                "patch": _op(f"{verb}_invocation", summary, status="202", parameters=invocation, tag="invocation")
            }
            for verb, summary in (
                ("cancel", "Cancel: the handler sees a terminal error at its next await"),
                ("kill", "Kill: complete at once without running more handler code"),
                ("pause", "Pause: no more attempts until resumed"),
                ("resume", "Resume a paused invocation; `?deployment=dp_…` on another deployment"),
                ("purge", "Purge a completed invocation"),
            )
        },
        "/invocations/{invocation_id}/restart-as-new": {
            "patch": _op(
                "restart_as_new_invocation",
                "Run a completed invocation again under a new id; `?from=N` keeps its journal up to entry N "
                "included (default 0: the input alone), `?deployment=keep|latest|dp_…` (only with from > 0)",
                "RestartAsNewInvocationResponse", parameters=invocation + _query("from", "deployment"),
                tag="invocation",
            ),
        },
        "/metrics": {
            "get": _op("metrics", "Torpor: metrics in the Prometheus text format (`torpor dev`)", tag="health"),
        },
        **_schedule_paths(),
        **_subscription_paths(),
    }  # fmt: skip


_SCHEDULE = _obj(
    ["name", "target", "service", "handler", "paused", "created_at"],
    name={"type": "string"},
    cron={"type": ["string", "null"], "description": "5-field cron expression, UTC."},
    every={**_NULLABLE_DURATION, "description": "The period of an `every` schedule."},
    every_ms={"type": ["integer", "null"]},
    target={"type": "string", "description": "`Service/handler`."},
    service={"type": "string"},
    handler={"type": "string"},
    key={"type": ["string", "null"]},
    body={"description": "The JSON value each tick sends, or null."},
    paused={"type": "boolean"},
    next_tick={"type": ["string", "null"], "format": "date-time"},
    last_tick={"type": ["string", "null"], "format": "date-time"},
    last_invocation_id={"type": ["string", "null"]},
    created_at={"type": "string", "format": "date-time"},
    modified_at={"type": "string", "format": "date-time"},
)
_SCHEMAS["Schedule"] = _SCHEDULE
_SCHEMAS["RestartAsNewInvocationResponse"] = _obj(
    ["new_invocation_id"], new_invocation_id={"type": "string", "description": "The new invocation's id."}
)
_SCHEMAS["ListSchedulesResponse"] = _obj(["schedules"], schedules={"type": "array", "items": _ref("Schedule")})
_SCHEMAS["CreateScheduleRequest"] = _obj(
    ["name", "target"],
    name={"type": "string", "description": "1 to 48 of `[A-Za-z0-9_.-]`."},
    cron={"type": "string", "description": "5-field cron expression, UTC; exactly one of `cron` and `every`."},
    every=_DURATION,
    target={"type": "string", "description": "`Service/handler`; the handler must exist."},
    key={"type": "string", "description": "Object key or workflow id (required for those)."},
    body={"description": "Any JSON value, sent by every tick."},
)


def _schedule_paths() -> dict[str, Any]:
    """Torpor's durable schedules (`http_api.admin_schedules`)."""
    name = _path("name")
    return {
        "/schedules": {
            "get": _op("list_schedules", "Torpor: list schedules", "ListSchedulesResponse", tag="schedule"),
            "post": _op("create_schedule", "Torpor: create a schedule", "Schedule", status="201",
                        body="CreateScheduleRequest", tag="schedule"),
        },
        "/schedules/{name}": {
            "get": _op("get_schedule", "Torpor: one schedule", "Schedule", parameters=name, tag="schedule"),
            "delete": _op("delete_schedule", "Torpor: delete a schedule", status="202", parameters=name,
                          tag="schedule"),
        },
        **{
            f"/schedules/{{name}}/{verb}": {
                "patch": _op(f"{verb}_schedule", summary, "Schedule", parameters=name, tag="schedule")
            }
            for verb, summary in (("pause", "Torpor: stop the ticks"), ("resume", "Torpor: tick again"))
        },
    }  # fmt: skip


_STRINGS = {"type": "object", "additionalProperties": {"type": "string"}}
_SCHEMAS["SubscriptionResponse"] = _obj(
    ["id", "source", "sink", "options"],
    id={"type": "string", "description": "`sub_1…`."},
    source={"type": "string", "description": "`sqs://Q`, `eventbridge://RULE`, `kinesis://S`, `dynamodb://TABLE`."},
    sink={"type": "string", "description": "`service://Service/handler`."},
    options=_STRINGS,
)
_SCHEMAS["ListSubscriptionsResponse"] = _obj(
    ["subscriptions"], subscriptions={"type": "array", "items": _ref("SubscriptionResponse")}
)
_SCHEMAS["CreateSubscriptionRequest"] = _obj(
    ["source", "sink"],
    source={"type": "string", "description": "e.g. `sqs://orders.fifo`."},
    sink={"type": "string", "description": "e.g. `service://Counter/add`; the handler must be registered."},
    options={**_STRINGS, "description": "`key`: the object key for events that carry none (EventBridge)."},
)


def _subscription_paths() -> dict[str, Any]:
    """Event subscriptions (`http_api.admin_subscriptions`), restate-server's paths."""
    sid = _path("subscription")
    return {
        "/subscriptions": {
            "get": _op("list_subscriptions", "List subscriptions", "ListSubscriptionsResponse", tag="subscription"),
            "post": _op("create_subscription", "Create subscription", "SubscriptionResponse", status="201",
                        body="CreateSubscriptionRequest", tag="subscription"),
        },
        "/subscriptions/{subscription}": {
            "get": _op("get_subscription", "Get subscription", "SubscriptionResponse", parameters=sid,
                       tag="subscription"),
            "delete": _op("delete_subscription", "Delete subscription", status="202", parameters=sid,
                          tag="subscription"),
        },
    }  # fmt: skip


def document(version: str) -> dict[str, Any]:
    """The OpenAPI 3.1 document of the admin API, `version` being Torpor's."""
    return {
        "openapi": "3.1.0",
        "info": {
            "title": "Torpor admin API",
            "description": "Deployments, services, invocations and state of a Torpor control plane. Compatible "
            "with Restate's admin API version 4 for what Restate's CLI uses; every path is also served under `/v4`.",
            "version": version,
        },
        "paths": _paths(),
        "components": {"schemas": _SCHEMAS},
    }
