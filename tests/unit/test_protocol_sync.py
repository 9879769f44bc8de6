# ruff: noqa: E501
"""The committed generated code matches protocol.proto, and the proto matches the wire spec."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from control_plane.protocol import protocol_pb2 as pb

PROTOCOL_DIR = Path(__file__).resolve().parents[2] / "control_plane" / "protocol"
HINT = "protocol_pb2 is stale: run scripts/gen_protocol.sh and commit the regenerated files"


def test_generated_code_matches_the_proto(tmp_path: Path) -> None:
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "grpc_tools.protoc",
            f"-I{PROTOCOL_DIR}",
            f"--python_out={tmp_path}",
            f"--pyi_out={tmp_path}",
            "protocol.proto",
        ],
        capture_output=True,
        text=True,
        check=False,
    )
    assert proc.returncode == 0, f"protoc failed: {proc.stderr}"
    for name in ("protocol_pb2.py", "protocol_pb2.pyi"):
        fresh = (tmp_path / name).read_bytes()
        committed_path = PROTOCOL_DIR / name
        assert committed_path.exists(), f"{name} is missing: {HINT}"
        assert committed_path.read_bytes() == fresh, f"{name} differs from protoc's output: {HINT}"


# Wire field numbers of every message, from the public service protocol (V5..V7; SuspensionMessage keeps
# the V5/V6 fields 1..3 next to V7's awaiting_on). A change here is a wire break.
FIELD_NUMBERS: dict[str, dict[str, int]] = {
    "StartMessage": {"id": 1, "debug_id": 2, "known_entries": 3, "state_map": 4, "partial_state": 5, "key": 6, "retry_count_since_last_stored_entry": 7, "duration_since_last_stored_entry": 8, "random_seed": 9, "scope": 10, "limit_key": 11, "idempotency_key": 12},
    "StartMessage.StateEntry": {"key": 1, "value": 2},
    "Future": {"waiting_completions": 1, "waiting_signals": 2, "waiting_named_signals": 3, "nested_futures": 4, "combinator_type": 5},
    "SuspensionMessage": {"waiting_completions": 1, "waiting_signals": 2, "waiting_named_signals": 3, "awaiting_on": 4},
    "ErrorMessage": {"code": 1, "message": 2, "stacktrace": 3, "related_command_index": 4, "related_command_name": 5, "related_command_type": 6, "next_retry_delay": 8, "behavior": 9},
    "EndMessage": {},
    "CommandAckMessage": {"command_index": 1},
    "ProposeRunCompletionMessage": {"result_completion_id": 1, "value": 14, "failure": 15},
    "AwaitingOnMessage": {"awaiting_on": 1, "executing_side_effects": 2},
    "ProposeRunCompletionAckMessage": {"completion_id": 1},
    "NotificationTemplate": {"completion_id": 1, "signal_id": 2, "signal_name": 3, "void": 4, "value": 5, "failure": 6, "invocation_id": 16, "state_keys": 17},
    "InputCommandMessage": {"headers": 1, "name": 12, "value": 14},
    "OutputCommandMessage": {"name": 12, "value": 14, "failure": 15},
    "GetLazyStateCommandMessage": {"key": 1, "result_completion_id": 11, "name": 12},
    "GetLazyStateCompletionNotificationMessage": {"completion_id": 1, "void": 4, "value": 5},
    "SetStateCommandMessage": {"key": 1, "value": 3, "name": 12},
    "ClearStateCommandMessage": {"key": 1, "name": 12},
    "ClearAllStateCommandMessage": {"name": 12},
    "GetLazyStateKeysCommandMessage": {"result_completion_id": 11, "name": 12},
    "GetLazyStateKeysCompletionNotificationMessage": {"completion_id": 1, "state_keys": 17},
    "GetEagerStateCommandMessage": {"key": 1, "name": 12, "void": 13, "value": 14},
    "GetEagerStateKeysCommandMessage": {"name": 12, "value": 14},
    "GetPromiseCommandMessage": {"key": 1, "result_completion_id": 11, "name": 12},
    "GetPromiseCompletionNotificationMessage": {"completion_id": 1, "value": 5, "failure": 6},
    "PeekPromiseCommandMessage": {"key": 1, "result_completion_id": 11, "name": 12},
    "PeekPromiseCompletionNotificationMessage": {"completion_id": 1, "void": 4, "value": 5, "failure": 6},
    "CompletePromiseCommandMessage": {"key": 1, "completion_value": 2, "completion_failure": 3, "result_completion_id": 11, "name": 12},
    "CompletePromiseCompletionNotificationMessage": {"completion_id": 1, "void": 4, "failure": 6},
    "SleepCommandMessage": {"wake_up_time": 1, "result_completion_id": 11, "name": 12},
    "SleepCompletionNotificationMessage": {"completion_id": 1, "void": 4},
    "CallCommandMessage": {"service_name": 1, "handler_name": 2, "parameter": 3, "headers": 4, "key": 5, "idempotency_key": 6, "scope": 7, "limit_key": 8, "invocation_id_notification_idx": 10, "result_completion_id": 11, "name": 12},
    "CallCompletionNotificationMessage": {"completion_id": 1, "value": 5, "failure": 6},
    "CallInvocationIdCompletionNotificationMessage": {"completion_id": 1, "invocation_id": 16},
    "OneWayCallCommandMessage": {"service_name": 1, "handler_name": 2, "parameter": 3, "invoke_time": 4, "headers": 5, "key": 6, "idempotency_key": 7, "scope": 8, "limit_key": 9, "invocation_id_notification_idx": 10, "name": 12},
    "SendSignalCommandMessage": {"target_invocation_id": 1, "idx": 2, "name": 3, "void": 4, "value": 5, "failure": 6, "entry_name": 12},
    "RunCommandMessage": {"result_completion_id": 11, "name": 12},
    "RunCompletionNotificationMessage": {"completion_id": 1, "value": 5, "failure": 6},
    "AttachInvocationCommandMessage": {"invocation_id": 1, "idempotent_request_target": 3, "workflow_target": 4, "result_completion_id": 11, "name": 12},
    "AttachInvocationCompletionNotificationMessage": {"completion_id": 1, "value": 5, "failure": 6},
    "GetInvocationOutputCommandMessage": {"invocation_id": 1, "idempotent_request_target": 3, "workflow_target": 4, "result_completion_id": 11, "name": 12},
    "GetInvocationOutputCompletionNotificationMessage": {"completion_id": 1, "void": 4, "value": 5, "failure": 6},
    "CompleteAwakeableCommandMessage": {"awakeable_id": 1, "value": 2, "failure": 3, "name": 12},
    "SignalNotificationMessage": {"idx": 2, "name": 3, "void": 4, "value": 5, "failure": 6},
    "StateKeys": {"keys": 1},
    "Value": {"content": 1},
    "Failure": {"code": 1, "message": 2, "metadata": 3},
    "FailureMetadata": {"key": 1, "value": 2},
    "Header": {"key": 1, "value": 2},
    "WorkflowTarget": {"workflow_name": 1, "workflow_key": 2, "scope": 3},
    "IdempotentRequestTarget": {"service_name": 1, "service_key": 2, "handler_name": 3, "idempotency_key": 4, "scope": 5},
    "Void": {},
}  # fmt: skip

ENUMS: dict[str, dict[str, int]] = {
    "ServiceProtocolVersion": {
        "SERVICE_PROTOCOL_VERSION_UNSPECIFIED": 0, "V1": 1, "V2": 2, "V3": 3, "V4": 4, "V5": 5, "V6": 6, "V7": 7,
    },
    "CombinatorType": {
        "COMBINATOR_TYPE_UNKNOWN": 0, "FIRST_COMPLETED": 1, "ALL_COMPLETED": 2,
        "FIRST_SUCCEEDED_OR_ALL_FAILED": 3, "ALL_SUCCEEDED_OR_FIRST_FAILED": 4,
    },
    "ErrorBehavior": {"RETRY": 0, "PAUSE": 1, "FAIL": 2},
    "BuiltInSignal": {"SIGNAL_UNKNOWN": 0, "CANCEL": 1},
}  # fmt: skip


def _all_messages():
    def walk(descs, prefix):
        for d in descs:
            yield prefix + d.name, d
            yield from walk(d.nested_types, f"{prefix}{d.name}.")

    return dict(walk(pb.DESCRIPTOR.message_types_by_name.values(), ""))


def test_message_set_is_complete() -> None:
    assert set(_all_messages()) == set(FIELD_NUMBERS)


@pytest.mark.parametrize("message", sorted(FIELD_NUMBERS))
def test_field_numbers(message: str) -> None:
    desc = _all_messages()[message]
    assert {f.name: f.number for f in desc.fields} == FIELD_NUMBERS[message]


@pytest.mark.parametrize("enum", sorted(ENUMS))
def test_enum_values(enum: str) -> None:
    desc = pb.DESCRIPTOR.enum_types_by_name[enum]
    assert {v.name: v.number for v in desc.values} == ENUMS[enum]
