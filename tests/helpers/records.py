"""Records for store tests: an invocation as ingress creates it, one with every field set, a deployment."""

from __future__ import annotations

from typing import Any

from control_plane.ports import DeploymentRecord, InvocationRecord

RUNNABLE = ("ready", "running", "backing-off", "suspended")


def invocation(invocation_id: str = "inv_1", **overrides: Any) -> InvocationRecord:
    """A fresh invocation as ingress creates it (status `ready`, epoch 0, no lease)."""
    values: dict[str, Any] = {
        "invocation_id": invocation_id,
        "service": "Greeter",
        "handler": "greet",
        "key": "",
        "deployment_id": "dp_1",
        "protocol_version": 5,
        "status": "ready",
        "input_entry": b"\x00\x00\x04\x00\x00\x00\x00\x02\x0a\x00",
        "created_at_ms": 1_000,
        "modified_at_ms": 1_000,
    }
    values.update(overrides)
    return InvocationRecord(**values)


# Every field differs from its default, so a field the store forgot to write cannot round-trip.
EVERY_FIELD = InvocationRecord(
    invocation_id="inv_every",
    service="Counter",
    handler="add",
    key="user-7",
    deployment_id="dp_9",
    protocol_version=6,
    status="backing-off",
    input_entry=b"\x00\x01\xff\xfe",
    created_at_ms=1_700_000_000_000,
    modified_at_ms=1_700_000_000_500,
    epoch=3,
    lease_until_ms=1_700_000_060_000,
    journal_length=4,
    attempts=5,
    retry_count=2,
    retry_at_length=4,
    retry_since_ms=1_700_000_000_300,
    failures_in_a_row=3,
    next_retry_at_ms=1_700_000_001_000,
    last_failure={"code": 500, "message": "boom ü", "at_ms": 1_700_000_000_400, "attempt": 5, "nested": [1, 2.5]},
    waiting_on={"kind": "sleep", "wake_up_time_ms": 1_700_000_002_000, "ids": [1, 2]},
    output=b"\x00binary\xff",
    failure={"code": 409, "message": "already"},
    completed_at_ms=1_700_000_000_900,
    expires_at_s=1_700_086_400,
    random_seed=(1 << 63) - 1,
    callee_seed=(1 << 62) + 1,
    idempotency_key="idem-1",
    output_content_type="application/octet-stream",
    doorbell=4,
    doorbell_read=3,
    effects_applied_upto=3,
    execution_time_ms=1_700_000_003_000,
    wake_up_at_ms=1_700_000_002_000,
    service_type="WORKFLOW",
    handler_type="WORKFLOW",
    inbox_seq="0000000001-00",
    caller_id="inv_caller",
    caller_completion_id=3,
    callers=frozenset({"inv_other/4", "inv_third/1"}),
    journal_expires_at_ms=1_700_000_100_000,
    trace_id="4bf92f3577b34da6a3ce929d0e0e4736",
    trace_parent="00f067aa0ba902b7",
    requests={"dynamodb PutItem": 2, "sqs SendMessage": 1},
    completion="failed",
    slot="~limit/Greeter",
    slot_limit=4,
    more_slots="3 ~limit/Greeter/greet",
    scope="tenants",
    limit_key="acme",
)


def deployment(deployment_id: str, **overrides: Any) -> DeploymentRecord:
    """A deployment record with every field set (`overrides` replace some)."""
    values: dict[str, Any] = {
        "deployment_id": deployment_id,
        "endpoint": "http://127.0.0.1:9080",
        "additional_headers": {"x-api-key": "k"},
        "manifest": {"minProtocolVersion": 5, "services": [{"name": "Greeter", "ty": "SERVICE"}]},
        "min_protocol_version": 5,
        "max_protocol_version": 6,
        "created_at_ms": 1_000,
        "services": ("Greeter", "Counter"),
        "metadata": {"owner": "team-a"},
        "protocol_mode": "BIDI_STREAM",
    }
    values.update(overrides)
    return DeploymentRecord(**values)


KEYED_INVOCATION = invocation(
    "inv_keyed",
    service="Counter",
    handler="add",
    key="user-7",
    status="pending",
    input_entry=b"\x00",
    service_type="VIRTUAL_OBJECT",
    handler_type="EXCLUSIVE",
    inbox_seq="0000001000-00",
)
"""An exclusive object handler's invocation waiting in its key's queue."""
