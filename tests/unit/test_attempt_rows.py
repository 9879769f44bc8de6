"""`sys_invocation_state` and `sys_journal_events` rows (adapters.query.attempt_rows), in
restate-server 1.7.12's shapes; `GET /version` as Restate's web UI reads it."""

from __future__ import annotations

import dataclasses
import json

import pytest

pytest.importorskip("pyarrow")

from adapters.query.attempt_rows import invocation_state_row, journal_event_rows  # noqa: E402
from control_plane.ports import InvocationRecord  # noqa: E402

INVOCATION_ID = "inv_1l3Hc716hrBy5i1MdPQv1DncrGATKCyIeW"
BASE = InvocationRecord(
    invocation_id=INVOCATION_ID, service="Counter", handler="add", key="bob", deployment_id="dp_1",
    protocol_version=6, status="running", input_entry=b"", created_at_ms=1_000, modified_at_ms=2_000,
    attempts=1, journal_length=3,
)  # fmt: skip
FAILURE = {"code": 500, "message": "boom", "at_ms": 5_000, "stacktrace": "Traceback ...", "related_command_index": 2,
           "related_command_type": "Run", "related_command_name": "charge"}  # fmt: skip


def test_a_running_invocation_is_in_flight_and_a_suspended_one_has_no_row() -> None:
    row = invocation_state_row(BASE)
    assert row is not None and row["in_flight"] is True and row["last_start_at"] == 2_000
    assert invocation_state_row(dataclasses.replace(BASE, status="suspended")) is None
    assert invocation_state_row(dataclasses.replace(BASE, status="completed")) is None


def test_a_backing_off_invocation_names_its_retries_next_attempt_and_last_failure() -> None:
    record = dataclasses.replace(
        BASE, status="backing-off", retry_count=2, next_retry_at_ms=9_000, last_failure=FAILURE
    )
    row = invocation_state_row(record)
    assert row is not None
    assert (row["in_flight"], row["retry_count"], row["next_retry_at"]) == (False, 2, 9_000)
    assert row["last_failure"] == "[500] boom" and row["last_failure_error_code"] == "500"
    assert row["last_failure_related_command_name"] == "charge"


def test_the_last_failed_attempt_is_one_transient_error_event_after_the_entry_it_reached() -> None:
    assert journal_event_rows(BASE) == []
    [row] = journal_event_rows(dataclasses.replace(BASE, status="backing-off", last_failure=FAILURE, retry_at_length=3))
    assert (row["event_type"], row["after_journal_entry_index"], row["appended_at"]) == ("TransientError", 2, 5_000)
    assert json.loads(row["event_json"]) == {
        "ty": "TransientError", "error_code": 500, "error_message": "boom", "error_stacktrace": "Traceback ...",
        "related_command_index": 2, "related_command_name": "charge", "related_command_type": "Run",
    }  # fmt: skip
