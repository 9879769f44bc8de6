"""The introspection tables' Arrow schemas: the names and types restate-server 1.7.12 reports in
`information_schema.columns`, so the `restate` CLI's queries and `SELECT *` see the same columns.

Columns Torpor has nothing for (partition keys, virtual queues, scopes) exist and are null; which ones,
and the few that differ, are listed in docs/conformance.md.
"""

from __future__ import annotations

import pyarrow as pa

_TEXT = pa.large_utf8()
_TIME = pa.timestamp("ms", tz="+00:00")
_DURATION = pa.duration("ms")


def _schema(*columns: tuple[str, pa.DataType] | tuple[str, pa.DataType, bool]) -> pa.Schema:
    return pa.schema([pa.field(c[0], c[1], nullable=c[2] if len(c) > 2 else True) for c in columns])  # type: ignore[misc]


_INVOCATION_COMMON = (
    ("target", _TEXT),
    ("target_service_name", _TEXT),
    ("target_service_key", _TEXT),
    ("target_handler_name", _TEXT),
    ("target_service_ty", _TEXT),
    ("scope", _TEXT),
    ("limit_key", _TEXT),
    ("idempotency_key", _TEXT),
    ("invoked_by", _TEXT),
)

SYS_INVOCATION = _schema(
    ("id", _TEXT),
    ("vqueue_id", _TEXT),
    *_INVOCATION_COMMON,
    ("invoked_by_service_name", _TEXT),
    ("invoked_by_id", _TEXT),
    ("invoked_by_subscription_id", _TEXT),
    ("invoked_by_target", _TEXT),
    ("restarted_from", _TEXT),
    ("pinned_deployment_id", _TEXT),
    ("pinned_service_protocol_version", pa.uint32()),
    ("trace_id", _TEXT),
    ("journal_size", pa.uint32()),
    ("journal_commands_size", pa.uint32()),
    ("created_at", _TIME),
    ("created_using_restate_version", _TEXT),
    ("modified_at", _TIME),
    ("inboxed_at", _TIME),
    ("scheduled_at", _TIME),
    ("scheduled_start_at", _TIME),
    ("running_at", _TIME),
    ("completed_at", _TIME),
    ("completion_retention", _DURATION),
    ("journal_retention", _DURATION),
    ("suspended_waiting_for_completions", pa.list_(pa.uint32())),
    ("suspended_waiting_for_signals", pa.list_(pa.uint32())),
    ("suspended_waiting_future_json", _TEXT),
    ("retry_count", pa.uint64()),
    ("last_start_at", _TIME),
    ("next_retry_at", _TIME),
    ("last_attempt_deployment_id", _TEXT),
    ("last_attempt_server", _TEXT),
    ("last_failure", _TEXT),
    ("last_failure_error_code", _TEXT),
    ("last_failure_related_entry_index", pa.uint64()),
    ("last_failure_related_entry_name", _TEXT),
    ("last_failure_related_entry_type", _TEXT),
    ("last_failure_related_command_index", pa.uint64()),
    ("last_failure_related_command_name", _TEXT),
    ("last_failure_related_command_type", _TEXT),
    ("last_awaiting_on_future_json", _TEXT),
    ("status", _TEXT, False),
    ("completion_result", _TEXT),
    ("completion_failure", _TEXT),
)
"""`sys_invocation`: one row per invocation; `status` is one of Torpor's (and Restate's) invocation statuses."""

SYS_INVOCATION_STATUS = _schema(
    ("partition_key", pa.uint64()),
    ("id", _TEXT),
    ("vqueue_id", _TEXT),
    ("status", _TEXT),
    ("completion_result", _TEXT),
    ("completion_failure", _TEXT),
    *_INVOCATION_COMMON,
    ("invoked_by_id", _TEXT),
    ("invoked_by_subscription_id", _TEXT),
    ("invoked_by_service_name", _TEXT),
    ("invoked_by_target", _TEXT),
    ("restarted_from", _TEXT),
    ("pinned_deployment_id", _TEXT),
    ("pinned_service_protocol_version", pa.uint32()),
    ("trace_id", _TEXT),
    ("journal_size", pa.uint32()),
    ("journal_commands_size", pa.uint32()),
    ("created_at", _TIME),
    ("created_using_restate_version", _TEXT),
    ("modified_at", _TIME),
    ("inboxed_at", _TIME),
    ("scheduled_at", _TIME),
    ("scheduled_start_at", _TIME),
    ("running_at", _TIME),
    ("completed_at", _TIME),
    ("completion_retention", _DURATION),
    ("journal_retention", _DURATION),
    ("suspended_waiting_for_completions", pa.list_(pa.uint32())),
    ("suspended_waiting_for_signals", pa.list_(pa.uint32())),
    ("suspended_waiting_future_json", _TEXT),
)
"""`sys_invocation_status`: the stored status, in Restate's coarser words (`inboxed`, `scheduled`,
`invoked`, `suspended`, `paused`, `completed`)."""

SYS_JOURNAL = _schema(
    ("partition_key", pa.uint64()),
    ("id", _TEXT),
    ("index", pa.uint32()),
    ("entry_type", _TEXT),
    ("name", _TEXT),
    ("completed", pa.bool_()),
    ("invoked_id", _TEXT),
    ("invoked_target", _TEXT),
    ("sleep_wakeup_at", _TIME),
    ("promise_name", _TEXT),
    ("raw", pa.large_binary()),
    ("raw_length", pa.uint64()),
    ("version", pa.uint32()),
    ("entry_json", _TEXT),
    ("entry_lite_json", _TEXT),
    ("appended_at", _TIME),
)
"""`sys_journal`: one row per journal entry (commands and notifications, Restate journal v2)."""

SYS_SERVICE = _schema(
    ("name", _TEXT),
    ("revision", pa.uint64()),
    ("public", pa.bool_()),
    ("ty", _TEXT),
    ("deployment_id", _TEXT),
)

SYS_DEPLOYMENT = _schema(
    ("id", _TEXT),
    ("ty", _TEXT),
    ("endpoint", _TEXT),
    ("created_at", _TIME),
    ("min_service_protocol_version", pa.uint32()),
    ("max_service_protocol_version", pa.uint32()),
    ("services", pa.list_(_TEXT)),
)

STATE = _schema(
    ("partition_key", pa.uint64()),
    ("scope", _TEXT),
    ("service_name", _TEXT),
    ("service_key", _TEXT),
    ("key", _TEXT),
    ("key_length", pa.uint64()),
    ("value_utf8", _TEXT),
    ("value", pa.large_binary()),
    ("value_length", pa.uint64()),
)

SYS_KEYED_SERVICE_STATUS = _schema(
    ("partition_key", pa.uint64()),
    ("service_name", _TEXT),
    ("service_key", _TEXT),
    ("invocation_id", _TEXT),
)

SYS_INBOX = _schema(
    ("partition_key", pa.uint64()),
    ("service_name", _TEXT),
    ("service_key", _TEXT),
    ("id", _TEXT),
    ("sequence_number", pa.uint64()),
    ("created_at", _TIME),
)

SYS_PROMISE = _schema(
    ("partition_key", pa.uint64()),
    ("scope", _TEXT),
    ("service_name", _TEXT),
    ("service_key", _TEXT),
    ("key", _TEXT),
    ("completed", pa.bool_()),
    ("completion_success_value", pa.large_binary()),
    ("completion_success_value_utf8", _TEXT),
    ("completion_failure", _TEXT),
)
"""`sys_promise`: the durable promises of workflows, one row per (workflow, id, promise name)."""

SYS_INVOCATION_STATE = _schema(
    ("partition_key", pa.uint64()),
    ("id", _TEXT),
    ("in_flight", pa.bool_()),
    ("retry_count", pa.uint64()),
    ("last_start_at", _TIME),
    ("last_attempt_deployment_id", _TEXT),
    ("last_attempt_server", _TEXT),
    ("next_retry_at", _TIME),
    ("last_failure", _TEXT),
    ("last_failure_error_code", _TEXT),
    ("last_failure_related_command_index", pa.uint64()),
    ("last_failure_related_command_name", _TEXT),
    ("last_failure_related_command_type", _TEXT),
    ("last_failure_related_entry_index", pa.uint64()),
    ("last_failure_related_entry_name", _TEXT),
    ("last_failure_related_entry_type", _TEXT),
    ("last_awaiting_on_future_json", _TEXT),
)
"""`sys_invocation_state`: one row per invocation that is being run or retried (restate-server's
invoker state): `ready`, `running` (`in_flight`) and `backing-off` ones (`adapters.query.attempt_rows`)."""

SYS_JOURNAL_EVENTS = _schema(
    ("partition_key", pa.uint64()),
    ("id", _TEXT),
    ("after_journal_entry_index", pa.uint32()),
    ("appended_at", _TIME),
    ("event_type", _TEXT),
    ("event_json", _TEXT),
)
"""`sys_journal_events`: what happened to an invocation between journal entries; Torpor's one
event is the last failed attempt (`TransientError`, `adapters.query.attempt_rows`)."""

TABLES: dict[str, pa.Schema] = {
    "sys_invocation": SYS_INVOCATION,
    "sys_invocation_status": SYS_INVOCATION_STATUS,
    "sys_journal": SYS_JOURNAL,
    "sys_service": SYS_SERVICE,
    "sys_deployment": SYS_DEPLOYMENT,
    "state": STATE,
    "sys_keyed_service_status": SYS_KEYED_SERVICE_STATUS,
    "sys_inbox": SYS_INBOX,
    "sys_promise": SYS_PROMISE,
    "sys_invocation_state": SYS_INVOCATION_STATE,
    "sys_journal_events": SYS_JOURNAL_EVENTS,
}
"""Every table `POST /query` knows, by name."""
