"""Rows of the tables about attempts, in restate-server 1.7.12's shapes (`adapters.query.schema`):

- `sys_invocation_state`: restate-server's invoker state, one row per invocation being run or
  retried. Torpor's records say as much: `running` is in flight (an attempt is running now),
  `ready` and `backing-off` wait for their next attempt (`retry_count`, `next_retry_at`, the last
  failure). Restate's web UI reads `in_flight` and `retry_count` to tell running from ready and
  backing-off.
- `sys_journal_events`: the events restate-server records between journal entries. Torpor keeps
  the last failed attempt of each invocation (`InvocationRecord.last_failure`): it is one
  `TransientError` event after the journal entry the failed attempt had reached, with
  restate-server's `event_json` (`{"ty": "TransientError", "error_code", "error_message",
  "error_stacktrace"?, "related_command_index"?, "related_command_name"?, "related_command_type"?}`),
  which Restate's web UI shows in the journal as the attempt's error.

Each function returns plain dicts keyed by column name (times in ms since the epoch), as
`adapters.query.rows` does.
"""

from __future__ import annotations

import json
from typing import Any

from control_plane import ids
from control_plane.ports import InvocationRecord

IN_FLIGHT_STATUSES = ("ready", "running", "backing-off")
"""The statuses of invocations with a `sys_invocation_state` row: being run, or waiting to be run again."""


def _failure_text(failure: dict[str, Any]) -> str | None:
    return f"[{failure.get('code')}] {failure.get('message', '')}" if failure else None


def invocation_state_row(record: InvocationRecord) -> dict[str, Any] | None:
    """The `sys_invocation_state` row of `record`, or None if it is not being run or retried.

    `last_start_at` is when a running attempt started (the record's last change); the entry-index
    columns of the last failure are null (Torpor knows the command index, not the entry index)."""
    if record.status not in IN_FLIGHT_STATUSES:
        return None
    failure = dict(record.last_failure or {})
    running = record.status == "running"
    return {
        "partition_key": ids.partition_key_number(record.invocation_id),
        "id": record.invocation_id,
        "in_flight": running,
        "retry_count": record.retry_count,
        "last_start_at": record.modified_at_ms if running else None,
        "last_attempt_deployment_id": (record.deployment_id or None) if record.attempts else None,
        "next_retry_at": (record.next_retry_at_ms or None) if record.status == "backing-off" else None,
        "last_failure": _failure_text(failure),
        "last_failure_error_code": str(failure["code"]) if "code" in failure else None,
        "last_failure_related_command_index": failure.get("related_command_index"),
        "last_failure_related_command_name": failure.get("related_command_name"),
        "last_failure_related_command_type": failure.get("related_command_type"),
    }


def journal_event_rows(record: InvocationRecord) -> list[dict[str, Any]]:
    """The `sys_journal_events` rows of `record`: its last failed attempt as a `TransientError`
    event (none if no attempt failed), after the last journal entry it had reached
    (`retry_at_length`, else the journal's length), at the failure's time."""
    failure = dict(record.last_failure or {})
    if not failure:
        return []
    event: dict[str, Any] = {
        "ty": "TransientError",
        "error_code": int(failure["code"]) if isinstance(failure.get("code"), int) else 500,
        "error_message": str(failure.get("message", "")),
    }
    if failure.get("stacktrace"):
        event["error_stacktrace"] = str(failure["stacktrace"])
    for name in ("related_command_index", "related_command_name", "related_command_type"):
        if failure.get(name) is not None:
            event[name] = failure[name]
    reached = record.retry_at_length or record.journal_length
    at_ms = failure.get("at_ms")
    return [
        {
            "partition_key": ids.partition_key_number(record.invocation_id),
            "id": record.invocation_id,
            "after_journal_entry_index": max(reached - 1, 0),
            "appended_at": at_ms if isinstance(at_ms, int) else record.modified_at_ms,
            "event_type": "TransientError",
            "event_json": json.dumps(event, separators=(",", ":")),
        }
    ]
