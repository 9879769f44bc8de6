"""What `last_failure` says about the command a failure is about, for every kind of command.

A journal mismatch (570) names the command the journal recorded (kind, name, index and, for what
reaches another invocation, its target) beside the one the handler now sends; a protocol violation
(571) fills `related_command_*` with the offending entry's kind (and index when it is a command).
"""

from __future__ import annotations

import pytest

from control_plane.attempt import AttemptFailure, check_answer, explain_mismatch, parse_answer
from control_plane.journal import Journal
from control_plane.protocol import Frame, MessageType, encode_frames, frame, type_name
from control_plane.protocol import protocol_pb2 as pb


def _journal(*messages: object) -> Journal:
    """A journal of the Input command and `messages`, as committed by earlier attempts."""
    journal = Journal.load(encode_frames([frame(pb.InputCommandMessage())]), [])
    journal.extend([frame(m) for m in messages])  # type: ignore[arg-type]
    return journal


VALUE = pb.Value(content=b"1")
IDEMPOTENT = pb.IdempotentRequestTarget(
    service_name="Counter", service_key="k", handler_name="add", idempotency_key="ik"
)
WORKFLOW = pb.WorkflowTarget(workflow_name="Signup", workflow_key="wf-1")

RECORDED = [
    (pb.SleepCommandMessage(result_completion_id=1, name="nap"), "Sleep 'nap' at command index 1"),
    (pb.RunCommandMessage(result_completion_id=1, name="charge"), "Run 'charge' at command index 1"),
    (pb.SetStateCommandMessage(key=b"count", value=VALUE), "SetState to count at command index 1"),
    (pb.GetLazyStateCommandMessage(key=b"count", result_completion_id=1), "GetLazyState to count at"),
    (pb.ClearAllStateCommandMessage(), "ClearAllState at command index 1"),
    (pb.CallCommandMessage(service_name="S", handler_name="h", key="k", result_completion_id=1), "Call to S/k/h at"),
    (pb.OneWayCallCommandMessage(service_name="S", handler_name="h", name="fire"), "OneWayCall 'fire' to S/h at"),
    (pb.SendSignalCommandMessage(target_invocation_id="inv_1x", idx=17, entry_name="s"), "SendSignal 's' to inv_1x"),
    (pb.AttachInvocationCommandMessage(invocation_id="inv_1y", result_completion_id=1), "AttachInvocation to inv_1y"),
    (
        pb.AttachInvocationCommandMessage(idempotent_request_target=IDEMPOTENT, result_completion_id=1),
        "AttachInvocation to Counter/k/add with idempotency key ik at command index 1",
    ),
    (
        pb.GetInvocationOutputCommandMessage(workflow_target=WORKFLOW, result_completion_id=1),
        "GetInvocationOutput to Signup/wf-1 at command index 1",
    ),
    (pb.GetPromiseCommandMessage(key="approval", result_completion_id=1), "GetPromise to approval at"),
    (
        pb.CompleteAwakeableCommandMessage(awakeable_id="sign_1abc", value=VALUE, name="approve"),
        "CompleteAwakeable 'approve' to sign_1abc at command index 1",
    ),
]


@pytest.mark.parametrize(
    ("recorded", "said"), RECORDED, ids=[type(m).__name__ + str(i) for i, (m, _) in enumerate(RECORDED)]
)
def test_a_mismatch_names_the_recorded_command_of_every_kind_with_its_target(recorded: object, said: str) -> None:
    # GIVEN a journal that recorded `recorded` where the handler now sends a Run 'flaky'
    sdk_error = AttemptFailure(
        570, "mismatch", related_command="flaky", related_command_index=1, related_command_type=MessageType.Run
    )
    # WHEN the failure is explained against the journal
    explained = explain_mismatch(_journal(recorded), sdk_error)
    # THEN its message names the recorded command (kind, name, target, index) and the new one
    assert f"the journal recorded {said}" in explained.message
    assert "the handler now sends Run 'flaky' at command index 1" in explained.message
    related = explained.related()
    assert {k: related[k] for k in ("related_command_index", "related_command_type", "related_command_name")} == {
        "related_command_index": 1,
        "related_command_type": "Run",
        "related_command_name": "flaky",
    }
    assert related["recorded_command"]["index"] == 1


def test_an_unknown_command_type_fills_the_related_command_type() -> None:
    failure = parse_answer(encode_frames([Frame(0x0415, b""), frame(pb.EndMessage())]))
    assert isinstance(failure, AttemptFailure)
    assert failure.code == 571
    assert failure.related()["related_command_type"] == type_name(0x0415)


def test_a_run_completion_without_its_run_names_the_offending_entry() -> None:
    proposal = pb.RunCompletionNotificationMessage(completion_id=5, value=VALUE)
    failure = check_answer(_journal(), [frame(proposal)], None)
    assert failure is not None
    assert failure.code == 571
    assert failure.related() == {"related_command_type": "RunCompletion"}
