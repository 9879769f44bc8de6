"""Which answers are refused before anything is committed (`attempt.check_answer`), and which pass."""

from __future__ import annotations

from control_plane.attempt import check_answer, without_handled_cancel
from control_plane.journal import AwaitPoint, Journal
from control_plane.protocol import Frame, encode_frames, frame
from control_plane.protocol import protocol_pb2 as pb


def _journal(*messages: object) -> Journal:
    """A journal of the Input command and `messages`, as committed by earlier attempts."""
    journal = Journal.load(encode_frames([frame(pb.InputCommandMessage())]), [])
    journal.extend([frame(m) for m in messages])  # type: ignore[arg-type]
    return journal


def _run_completion(cid: int) -> Frame:
    return frame(pb.RunCompletionNotificationMessage(completion_id=cid, value=pb.Value(content=b"1")))


def test_a_step_proposed_and_awaited_in_the_same_answer_passes() -> None:
    entries = [frame(pb.RunCommandMessage(result_completion_id=1, name="s")), _run_completion(1)]
    assert check_answer(_journal(), entries, AwaitPoint(completions=frozenset({1}))) is None


def test_a_step_of_an_earlier_attempt_may_be_completed_now() -> None:
    journal = _journal(pb.RunCommandMessage(result_completion_id=1, name="s"))
    assert check_answer(journal, [_run_completion(1)], AwaitPoint(completions=frozenset({1}))) is None


def test_awaiting_a_call_s_invocation_id_or_an_awakeable_signal_passes() -> None:
    call = pb.CallCommandMessage(
        service_name="S", handler_name="h", invocation_id_notification_idx=1, result_completion_id=2
    )
    await_point = AwaitPoint(completions=frozenset({1}), signals=frozenset({17}))
    assert check_answer(_journal(), [frame(call)], await_point) is None


def test_a_second_completion_of_one_step_is_refused() -> None:
    journal = _journal(pb.RunCommandMessage(result_completion_id=1, name="s"))
    journal.extend([_run_completion(1)])
    failure = check_answer(journal, [_run_completion(1)], None)
    assert failure is not None
    assert "a second run completion for completion id 1" in failure.message


def test_an_output_after_a_stored_output_is_refused_with_its_command_index() -> None:
    journal = _journal(pb.OutputCommandMessage(value=pb.Value(content=b"1")))
    failure = check_answer(journal, [frame(pb.OutputCommandMessage(value=pb.Value(content=b"2")))], None)
    assert failure is not None
    assert failure.code == 571
    assert failure.related()["related_command_index"] == 2
    assert failure.related()["related_command_type"] == "Output"


def test_a_suspension_on_a_completion_the_journal_sent_already_holds_is_refused() -> None:
    journal = _journal(
        pb.RunCommandMessage(result_completion_id=1, name="s"), pb.SleepCommandMessage(result_completion_id=2)
    )
    journal.extend([_run_completion(1)])
    failure = check_answer(journal, [], AwaitPoint(completions=frozenset({1, 2})))
    assert failure is not None
    assert failure.code == 571
    assert "a Suspension awaiting completion id 1, already sent to it in this attempt" in failure.message


def test_a_suspension_on_a_notification_delivered_with_the_attempt_is_refused() -> None:
    journal = _journal(pb.SleepCommandMessage(result_completion_id=1))
    delivered = [frame(pb.SleepCompletionNotificationMessage(completion_id=1, void=pb.Void()))]
    delivered.append(frame(pb.SignalNotificationMessage(idx=17, void=pb.Void())))
    failure = check_answer(journal, delivered, AwaitPoint(completions=frozenset({1}), signals=frozenset({17})), sent=2)
    assert failure is not None
    assert "awaiting completion id 1 and signal 17, already sent" in failure.message


def test_a_suspension_on_what_the_attempt_was_not_sent_passes() -> None:
    journal = _journal(pb.SleepCommandMessage(result_completion_id=1), pb.SleepCommandMessage(result_completion_id=2))
    journal.extend([frame(pb.SleepCompletionNotificationMessage(completion_id=1, void=pb.Void()))])
    assert check_answer(journal, [], AwaitPoint(completions=frozenset({2}), signals=frozenset({17}))) is None
    # a step proposed in the answer itself is not something the attempt was sent
    entries = [frame(pb.RunCommandMessage(result_completion_id=3, name="s")), _run_completion(3)]
    assert check_answer(journal, entries, AwaitPoint(completions=frozenset({3})), sent=0) is None


def _tree(combinator: int, *completions: int) -> pb.SuspensionMessage:
    return pb.SuspensionMessage(
        awaiting_on=pb.Future(combinator_type=combinator, waiting_completions=completions)  # type: ignore[arg-type]
    )


def test_an_await_tree_is_refused_only_when_what_was_sent_completes_it() -> None:
    journal = _journal(pb.SleepCommandMessage(result_completion_id=1), pb.SleepCommandMessage(result_completion_id=2))
    journal.extend([frame(pb.SleepCompletionNotificationMessage(completion_id=1, void=pb.Void()))])
    both = AwaitPoint(completions=frozenset({1, 2}))
    race = check_answer(journal, [], both, suspension=_tree(pb.FIRST_COMPLETED, 1, 2))
    assert race is not None
    assert "awaiting completion id 1, already sent" in race.message
    for all_of in (pb.ALL_COMPLETED, pb.ALL_SUCCEEDED_OR_FIRST_FAILED, pb.FIRST_SUCCEEDED_OR_ALL_FAILED):
        assert check_answer(journal, [], both, suspension=_tree(all_of, 1, 2)) is None
    journal.extend([frame(pb.SleepCompletionNotificationMessage(completion_id=2, void=pb.Void()))])
    assert check_answer(journal, [], both, suspension=_tree(pb.ALL_COMPLETED, 1, 2)) is not None


def test_the_cancel_signal_an_sdk_handled_and_still_awaits_beside_a_step_passes() -> None:
    journal = _journal(pb.RunCommandMessage(result_completion_id=1, name="release"))
    delivered = [frame(pb.SignalNotificationMessage(idx=1, void=pb.Void()))]
    suspension = pb.SuspensionMessage(
        awaiting_on=pb.Future(combinator_type=pb.FIRST_COMPLETED, waiting_completions=[1], waiting_signals=[1])
    )
    await_point = AwaitPoint.of(suspension)
    assert check_answer(journal, [*delivered, _run_completion(1)], await_point, 1, suspension) is None
    only_cancel = pb.SuspensionMessage(waiting_signals=[1])
    failure = check_answer(journal, delivered, AwaitPoint.of(only_cancel), 1, only_cancel)
    assert failure is not None
    assert "awaiting signal 1, already sent" in failure.message


def test_a_handled_cancel_signal_no_longer_wakes_the_handler_but_a_new_one_does() -> None:
    cancel = frame(pb.SignalNotificationMessage(idx=1, void=pb.Void()))
    beside_a_sleep = AwaitPoint(completions=frozenset({2}), signals=frozenset({1}))
    journal = _journal(pb.SleepCommandMessage(result_completion_id=2))
    assert without_handled_cancel(journal, [cancel], beside_a_sleep) == AwaitPoint(completions=frozenset({2}))
    assert without_handled_cancel(journal, [], beside_a_sleep) == beside_a_sleep  # not delivered yet


def test_an_end_without_an_output_is_refused_but_an_end_after_one_passes() -> None:
    failure = check_answer(_journal(), [], None, ended=True)
    assert failure is not None
    assert failure.code == 571
    assert "an End without an Output command" in failure.message
    output = frame(pb.OutputCommandMessage(value=pb.Value(content=b"1")))
    assert check_answer(_journal(), [output], None, ended=True) is None
    # committed earlier (on an open stream, or by a function's own checkpoints)
    assert check_answer(_journal(pb.OutputCommandMessage(value=pb.Value(content=b"1"))), [], None, ended=True) is None


def test_a_command_reusing_a_completion_id_is_refused_before_anything_is_stored() -> None:
    sleep = frame(pb.SleepCommandMessage(result_completion_id=1, wake_up_time=1))
    failure = check_answer(_journal(), [sleep, sleep], AwaitPoint(completions=frozenset({1})))
    assert failure is not None
    assert failure.code == 571
    assert "completion id 1, which another command was given already (new entry 1)" in failure.message
    assert failure.related()["related_command_index"] == 2
    # against the journal too, and a call's two ids against each other
    assert check_answer(_journal(pb.SleepCommandMessage(result_completion_id=1)), [sleep], None) is not None
    call = pb.CallCommandMessage(service_name="S", handler_name="h", invocation_id_notification_idx=2)
    call.result_completion_id = 2
    assert check_answer(_journal(), [frame(call)], None) is not None


def test_state_and_promise_commands_only_where_restate_allows_them() -> None:
    set_state = frame(pb.SetStateCommandMessage(key=b"k", value=pb.Value(content=b"1")))
    get_state = frame(pb.GetEagerStateCommandMessage(key=b"k", void=pb.Void()))
    promise = frame(pb.GetPromiseCommandMessage(key="p", result_completion_id=1))

    def refused(entry: Frame, service_type: str, handler_type: str) -> str:
        failure = check_answer(_journal(), [entry], None, service_type=service_type, handler_type=handler_type)
        return failure.message if failure is not None else ""

    assert "a SetState command from a plain service" in refused(set_state, "SERVICE", "")
    assert "a GetEagerState command from a plain service" in refused(get_state, "SERVICE", "")
    assert "a SetState command from a shared handler" in refused(set_state, "VIRTUAL_OBJECT", "SHARED")
    assert "a SetState command from a shared handler" in refused(set_state, "WORKFLOW", "SHARED")
    assert "a GetPromise command outside a workflow" in refused(promise, "VIRTUAL_OBJECT", "EXCLUSIVE")
    assert refused(get_state, "VIRTUAL_OBJECT", "SHARED") == ""
    assert refused(set_state, "VIRTUAL_OBJECT", "EXCLUSIVE") == ""
    assert refused(set_state, "WORKFLOW", "WORKFLOW") == ""
    assert refused(promise, "WORKFLOW", "SHARED") == ""
    assert refused(set_state, "", "") == ""  # target not known: not checked


def test_a_suspension_on_a_reserved_signal_index_is_refused() -> None:
    for index in (0, 2, 16):
        failure = check_answer(_journal(), [], AwaitPoint(signals=frozenset({index})))
        assert failure is not None
        assert f"a Suspension awaiting signal {index}, a reserved signal index" in failure.message
    assert check_answer(_journal(), [], AwaitPoint(signals=frozenset({1}))) is None  # cancel
    assert check_answer(_journal(), [], AwaitPoint(signals=frozenset({17}))) is None  # an awakeable


def test_a_send_signal_to_no_invocation_or_naming_no_signal_is_refused_as_restate_server_does() -> None:
    """restate-server 1.7.12 cannot decode such a SendSignal ("BadFieldError(target_invocation_id)",
    RT0012) and retries the attempt; a well-formed one passes."""
    good_id = "inv_1bq0p3ZQY2cJ4F2zieFV7PIoOUCcDVEybP"
    good = pb.SendSignalCommandMessage(target_invocation_id=good_id, name="approved", value=pb.Value(content=b"1"))
    assert check_answer(_journal(), [frame(good)], None) is None
    for target in ("inv_1bad", "", "hello"):
        bad = pb.SendSignalCommandMessage(target_invocation_id=target, name="approved", void=pb.Void())
        failure = check_answer(_journal(), [frame(bad)], None)
        assert failure is not None and failure.code == 571, target
        assert "a SendSignal command to no invocation: bad invocation id" in failure.message
        assert failure.related()["related_command_type"] == "SendSignal"
    nameless = pb.SendSignalCommandMessage(target_invocation_id=good_id, void=pb.Void())
    failure = check_answer(_journal(), [frame(nameless)], None)
    assert failure is not None and "names no signal" in failure.message
