"""Torpor's records as rows of the introspection tables (`adapters.query.schema`).

Each function returns plain dicts keyed by column name (times in ms since the epoch, bytes as bytes);
`pyarrow.Table.from_pylist` turns them into a batch of the table's schema, leaving absent columns null.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from adapters.query.entries import ServiceKinds, entry_json
from control_plane import ids
from control_plane.entry_names import name_entry, name_journal
from control_plane.journal import AwaitPoint, Journal
from control_plane.ports import DeploymentRecord, InvocationRecord, LoadedInvocation, PromiseRecord, ServiceRecord
from http_api.admin import stored_times

SERVICE_TYPES = {"SERVICE": "service", "VIRTUAL_OBJECT": "virtual_object", "WORKFLOW": "workflow"}
"""Restate's spelling of a service type in the introspection tables (`target_service_ty`, `sys_service.ty`)."""

STATUS_OF_RECORD = {"pending": "inboxed", "ready": "invoked", "running": "invoked", "backing-off": "invoked"}
"""`sys_invocation_status.status` for the `sys_invocation` statuses that differ (the rest are the same)."""


def _failure_text(failure: Mapping[str, object] | None) -> str | None:
    """`[code] message` of a stored failure, or None."""
    if not failure:
        return None
    return f"[{failure.get('code')}] {failure.get('message', '')}"


ERROR_CODE_NAMES = {
    400: "Bad request",
    404: "Not found",
    409: "Conflict",
    410: "Gone",
    415: "Unsupported media type",
    470: "Not ready",
    500: "Internal",
    570: "Journal mismatch",
    571: "Protocol violation",
    572: "Awaiting two async results",
    573: "Unsupported feature",
}
"""The names restate-server gives its invocation error codes (`[500 Internal] ...`)."""


def last_failure_text(failure: Mapping[str, object] | None) -> str | None:
    """`sys_invocation.last_failure` as restate-server 1.7 writes it: `[500 Internal] message`, then
    the SDK's stack trace on the next lines (kept, bounded, with the failure: see
    `failures.clip_stacktrace`), then `metadata:` and one `  key: value` line each, when there are."""
    if not failure:
        return None
    code = failure.get("code")
    name = ERROR_CODE_NAMES.get(code) if isinstance(code, int) else None
    text = f"[{code} {name}] " if name else f"[{code}] "
    text += str(failure.get("message", ""))
    trace = failure.get("stacktrace")
    if isinstance(trace, str) and trace:
        text += "\n" + trace
    metadata = failure.get("metadata")
    if isinstance(metadata, Mapping) and metadata:
        text += "\nmetadata:" + "".join(f"\n  {k}: {v}" for k, v in metadata.items())
    return text


def key_partition(key: str) -> int:
    """The `partition_key` column of a virtual object's or workflow's rows: its key's partition key,
    which every invocation of that key carries in its id (`ids.partition_key`)."""
    return int.from_bytes(ids.partition_key(key), "big")


def target_of(record: InvocationRecord) -> str:
    """`Service/handler`, or `Object/key/handler` for a virtual object or workflow (Restate's `target`)."""
    return f"{record.service}/{record.key}/{record.handler}" if record.key else f"{record.service}/{record.handler}"


def invocation_row(record: InvocationRecord, caller: InvocationRecord | None = None) -> dict[str, Any]:
    """One `sys_invocation` row; `caller`, when given, fills `invoked_by_service_name` and
    `invoked_by_target`. `journal_size` is the stored journal length at the last status change."""
    target = target_of(record)
    waiting = AwaitPoint.from_json(record.waiting_on) if record.status == "suspended" else None
    failure = record.last_failure or {}
    completed = record.status == "completed"
    row: dict[str, Any] = {
        "partition_key": ids.partition_key_number(record.invocation_id),
        "id": record.invocation_id,
        "target": target,
        "target_service_name": record.service,
        "target_service_key": record.key or None,
        "target_handler_name": record.handler,
        "target_service_ty": SERVICE_TYPES.get(record.service_type, record.service_type.lower()),
        "idempotency_key": record.idempotency_key or None,
        "invoked_by": "service" if record.caller_id else "ingress",
        "invoked_by_id": record.caller_id or None,
        "invoked_by_service_name": caller.service if caller is not None else None,
        "invoked_by_target": target_of(caller) if caller is not None else None,
        "pinned_deployment_id": record.deployment_id or None,
        "pinned_service_protocol_version": record.protocol_version or None,
        "trace_id": record.trace_id or None,
        "journal_size": record.journal_length,
        "created_at": record.created_at_ms,
        "modified_at": record.modified_at_ms,
        "inboxed_at": record.created_at_ms if record.inbox_seq or record.status == "pending" else None,
        "scheduled_at": record.created_at_ms if record.execution_time_ms else None,
        "scheduled_start_at": record.execution_time_ms or None,
        "completed_at": record.completed_at_ms or None,
        "suspended_waiting_for_completions": sorted(waiting.completions) if waiting else None,
        "suspended_waiting_for_signals": sorted(waiting.signals) if waiting else None,
        "retry_count": record.retry_count,
        "next_retry_at": (record.next_retry_at_ms or None) if record.status == "backing-off" else None,
        "last_attempt_deployment_id": record.deployment_id if record.attempts else None,
        "last_failure": last_failure_text(record.last_failure),
        "last_failure_error_code": str(failure["code"]) if "code" in failure else None,
        "last_failure_related_command_index": failure.get("related_command_index"),
        "last_failure_related_command_name": failure.get("related_command_name"),
        "last_failure_related_command_type": failure.get("related_command_type"),
        "status": record.status,
        "scope": record.scope or None,
        "limit_key": record.limit_key or None,
        "completion_result": ("failure" if record.failure else "success") if completed else None,
        "completion_failure": _failure_text(record.failure) if completed else None,
    }
    return row


def invocation_status_row(record: InvocationRecord, caller: InvocationRecord | None = None) -> dict[str, Any]:
    """One `sys_invocation_status` row: as `invocation_row`, with Restate's stored-status words."""
    row = invocation_row(record, caller)
    row["status"] = STATUS_OF_RECORD.get(record.status, record.status)
    return row


def journal_rows(loaded: LoadedInvocation, kinds: ServiceKinds | None = None) -> list[dict[str, Any]]:
    """The `sys_journal` rows of one invocation: every entry of its journal, in order.

    `entry_type`, `name`, `entry_json` and `entry_lite_json` are as restate-server 1.7 writes them
    for a journal v2 entry (`adapters.query.entries`: what Restate's CLI parses to show an entry's
    state key, promise, call target and sleep); `kinds` gives a call target's service and handler
    types (`ServiceKinds`; without it a keyed target is taken for a virtual object's exclusive
    handler). Torpor also fills the columns restate-server fills only for its older journal v1
    (`invoked_id`, `invoked_target`, `sleep_wakeup_at`, `promise_name`), from the same naming
    (`control_plane.entry_names`). `raw` is the entry's protobuf message.
    """
    record = loaded.record
    journal = list(Journal.load(record.input_entry, loaded.batches))
    times = stored_times(record, loaded.batches, len(journal))
    namings = name_journal(record.invocation_id, journal)
    partition_key = ids.partition_key_number(record.invocation_id)
    kinds = kinds if kinds is not None else {}
    rows = []
    for index, (entry, naming, at_ms) in enumerate(zip(journal, namings, times, strict=True)):
        full = entry_json(entry, naming, kinds)
        lite = entry_json(entry, naming, kinds, full=False)
        rows.append(
            {
                "partition_key": partition_key,
                "id": record.invocation_id,
                "index": index,
                "entry_type": naming.entry_type,
                "name": naming.name,
                "invoked_id": naming.invoked_id if naming.target is not None else None,
                "invoked_target": str(naming.target) if naming.target is not None else None,
                "sleep_wakeup_at": naming.wake_up_at_ms,
                "promise_name": naming.promise_name,
                "raw": entry.payload,
                "raw_length": len(entry.payload),
                "version": 2,
                "entry_json": _json(full),
                "entry_lite_json": _json(lite),
                "appended_at": at_ms or None,
            }
        )
    return rows


def _json(value: dict[str, Any] | None) -> str | None:
    return None if value is None else json.dumps(value, separators=(",", ":"), ensure_ascii=False)


def service_row(service: ServiceRecord) -> dict[str, Any]:
    """One `sys_service` row."""
    private = bool(service.overrides.get("ingressPrivate", service.manifest.get("ingressPrivate", False)))
    return {
        "name": service.name,
        "revision": service.revision,
        "public": not private,
        "ty": SERVICE_TYPES.get(service.ty, service.ty.lower()),
        "deployment_id": service.deployment_id,
    }


def deployment_row(deployment: DeploymentRecord) -> dict[str, Any]:
    """One `sys_deployment` row; `ty` is `lambda` for a Lambda ARN, else `http`."""
    return {
        "id": deployment.deployment_id,
        "ty": "lambda" if deployment.endpoint.startswith("arn:") else "http",
        "endpoint": deployment.endpoint,
        "created_at": deployment.created_at_ms,
        "min_service_protocol_version": deployment.min_protocol_version,
        "max_service_protocol_version": deployment.max_protocol_version,
        "services": list(deployment.services),
    }


def state_rows(service: str, key: str, state: Mapping[bytes, bytes]) -> list[dict[str, Any]]:
    """The `state` rows of one virtual object or workflow key, by state key."""
    rows = []
    for name, value in sorted(state.items()):
        try:
            text: str | None = value.decode("utf-8")
        except UnicodeDecodeError:
            text = None
        rows.append(
            {
                "partition_key": key_partition(key),
                "service_name": service,
                "service_key": key,
                "key": name.decode("utf-8", "replace"),
                "key_length": len(name),
                "value_utf8": text,
                "value": value,
                "value_length": len(value),
            }
        )
    return rows


def promise_names(loaded: LoadedInvocation) -> set[str]:
    """The durable promises an invocation's journal names (GetPromise, PeekPromise, CompletePromise)."""
    journal = Journal.load(loaded.record.input_entry, loaded.batches)
    names = (name_entry(entry).promise_name for entry in journal)
    return {name for name in names if name is not None}


def promise_row(service: str, key: str, name: str, promise: PromiseRecord | None) -> dict[str, Any]:
    """One `sys_promise` row: completed with a value or a failure (`[code] message`), or not completed."""
    value = promise.value if promise is not None else None
    try:
        text = value.decode("utf-8") if value is not None else None
    except UnicodeDecodeError:
        text = None
    return {
        "partition_key": key_partition(key),
        "service_name": service,
        "service_key": key,
        "key": name,
        "completed": promise is not None,
        "completion_success_value": value,
        "completion_success_value_utf8": text,
        "completion_failure": _failure_text(promise.failure) if promise is not None else None,
    }
