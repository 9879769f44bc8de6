"""How one attempt's answer is read: entries to commit, and how the stream ended."""

from __future__ import annotations

from control_plane.invocation import AttemptAnswer, AttemptFailure, parse_answer
from control_plane.journal import AwaitPoint, Journal
from control_plane.protocol import MessageType, encode_frames, frame
from control_plane.protocol import protocol_pb2 as pb


def _answer(*messages: object, ack: bool = False) -> bytes:
    return encode_frames(
        frame(m, requested_ack=ack and isinstance(m, pb.ProposeRunCompletionMessage))  # type: ignore[arg-type]
        for m in messages
    )


def test_run_proposal_becomes_a_stored_run_completion_right_after_its_command() -> None:
    body = _answer(
        pb.RunCommandMessage(result_completion_id=1, name="charge"),
        pb.ProposeRunCompletionMessage(result_completion_id=1, value=b'"ok"'),
        pb.SuspensionMessage(awaiting_on=pb.Future(waiting_completions=[1])),
        ack=True,
    )
    answer = parse_answer(body)
    assert isinstance(answer, AttemptAnswer)
    assert [f.type for f in answer.entries] == [MessageType.Run, MessageType.RunCompletion]
    assert not any(f.requested_ack for f in answer.entries)
    completion = pb.RunCompletionNotificationMessage.FromString(answer.entries[1].payload)
    assert completion.completion_id == 1
    assert completion.value.content == b'"ok"'
    assert answer.awaiting == AwaitPoint(completions=frozenset({1}))
    journal = Journal()
    journal.extend(answer.entries)
    assert journal.can_resume(answer.awaiting)


def test_v5_suspension_lists_and_v7_nested_futures_flatten_to_the_same_leaves() -> None:
    v5 = pb.SuspensionMessage(waiting_completions=[2, 3], waiting_signals=[17])
    v7 = pb.SuspensionMessage(
        awaiting_on=pb.Future(
            waiting_completions=[2],
            nested_futures=[pb.Future(waiting_completions=[3], waiting_signals=[17])],
        )
    )
    assert AwaitPoint.of(v5) == AwaitPoint.of(v7) == AwaitPoint(frozenset({2, 3}), frozenset({17}))


def test_failed_run_proposal_keeps_its_failure() -> None:
    body = _answer(
        pb.RunCommandMessage(result_completion_id=4),
        pb.ProposeRunCompletionMessage(result_completion_id=4, failure=pb.Failure(code=500, message="boom")),
        pb.SuspensionMessage(waiting_completions=[4]),
    )
    answer = parse_answer(body)
    assert isinstance(answer, AttemptAnswer)
    completion = pb.RunCompletionNotificationMessage.FromString(answer.entries[1].payload)
    assert completion.failure.message == "boom"


def test_output_then_end_is_a_finished_answer() -> None:
    answer = parse_answer(_answer(pb.OutputCommandMessage(value=pb.Value(content=b"1")), pb.EndMessage()))
    assert isinstance(answer, AttemptAnswer)
    assert answer.ended
    assert [f.type for f in answer.entries] == [MessageType.Output]


def test_error_message_is_a_failed_attempt_with_its_hints() -> None:
    answer = parse_answer(
        _answer(
            pb.SetStateCommandMessage(key=b"k", value=pb.Value(content=b"v")),
            pb.ErrorMessage(code=570, message="mismatch", next_retry_delay=250, related_command_name="step-2"),
        )
    )
    assert answer == AttemptFailure(
        code=570, message="mismatch", next_retry_delay_ms=250, behavior=pb.RETRY, related_command="step-2"
    )


def test_a_stream_without_terminator_or_with_bad_framing_is_a_protocol_violation() -> None:
    unterminated = parse_answer(_answer(pb.RunCommandMessage(result_completion_id=1)))
    assert isinstance(unterminated, AttemptFailure)
    assert unterminated.code == 571
    assert "without End, Suspension or Error" in unterminated.message
    truncated = parse_answer(_answer(pb.EndMessage())[:5])
    assert isinstance(truncated, AttemptFailure)
    assert truncated.code == 571


def test_a_notification_from_the_sdk_is_a_protocol_violation() -> None:
    answer = parse_answer(_answer(pb.SleepCompletionNotificationMessage(completion_id=1), pb.EndMessage()))
    assert isinstance(answer, AttemptFailure)
    assert answer.code == 571
