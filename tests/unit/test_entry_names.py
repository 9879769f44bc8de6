"""What a journal entry touches (`control_plane.entry_names`), its restate-server JSON
(`adapters.query.entries`), and a failing attempt's stack trace kept bounded (`failures.clip_stacktrace`).

The expected JSON strings are restate-server 1.7.12's `sys_journal` values for the same entries
(read from its `POST /query`), so Restate's CLI, which parses `entry_json`, reads Torpor's as its own.
"""

from __future__ import annotations

import json
import re

import pytest

from adapters.query.entries import entry_json, invocation_target
from adapters.query.rows import last_failure_text
from control_plane.attempt import AttemptFailure, parse_answer
from control_plane.decisions import decide_failure
from control_plane.entry_names import CallTarget, EntryNaming, name_entry, name_journal
from control_plane.failures import MAX_STACKTRACE_BYTES, clip_stacktrace
from control_plane.ids import awakeable_id
from control_plane.protocol import encode_frames, frame
from control_plane.protocol import protocol_pb2 as pb
from control_plane.retry import RetryPolicy
from tests.helpers.records import invocation

CALLER = "inv_12kpUQONmeFb0g8fLJt5OCbRVqWD4lbuX2"
CALLEE = "inv_12kpUQONmeFb6W8e08VJa03HcELFgZiVgZ"
KINDS = {"Tally": ("VIRTUAL_OBJECT", {"add": "EXCLUSIVE"}), "Signup": ("WORKFLOW", {"run": "WORKFLOW"})}


def compact(value: object) -> str:
    return json.dumps(value, separators=(",", ":"))


def test_state_commands_name_their_key() -> None:
    for message, entry_type in (
        (pb.SetStateCommandMessage(key=b"email", value=pb.Value(content=b'"bob"')), "Command: SetState"),
        (pb.GetEagerStateCommandMessage(key=b"email", value=pb.Value(content=b'"bob"')), "Command: GetEagerState"),
        (pb.GetLazyStateCommandMessage(key=b"email", result_completion_id=1), "Command: GetLazyState"),
        (pb.ClearStateCommandMessage(key=b"email"), "Command: ClearState"),
    ):
        naming = name_entry(frame(message))
        assert (naming.entry_type, naming.state_key, naming.name) == (entry_type, "email", "")
        assert naming.details() == "key email"


def test_promise_commands_name_their_promise() -> None:
    naming = name_entry(frame(pb.GetPromiseCommandMessage(key="approval", result_completion_id=9)))
    assert (naming.promise_name, naming.details()) == ("approval", "promise approval")


def test_a_call_names_its_target_and_the_callee_the_journal_stored_beside_it() -> None:
    call = pb.CallCommandMessage(
        service_name="Tally", handler_name="add", key="w1", parameter=b"1", invocation_id_notification_idx=3,
        result_completion_id=4,
    )  # fmt: skip
    callee = pb.CallInvocationIdCompletionNotificationMessage(completion_id=3, invocation_id=CALLEE)
    [named_call, named_id] = name_journal(CALLER, [frame(call), frame(callee)])
    assert named_call.target == CallTarget("Tally", "add", "w1")
    assert named_call.invoked_id == CALLEE
    assert named_call.details() == f"Tally/w1/add {CALLEE}"
    assert named_id == EntryNaming("Notification: CallInvocationId", completion_id=3)
    send = pb.OneWayCallCommandMessage(service_name="Greeter", handler_name="greet", invoke_time=1_796_648_355_186)
    assert name_entry(frame(send)).details() == "Greeter/greet at 2026-12-07T12:59:15.186Z"  # to a plain service


def test_a_run_a_sleep_an_awakeable_and_a_signal_are_named() -> None:
    assert name_entry(frame(pb.RunCommandMessage(name="charge card", result_completion_id=2))).name == "charge card"
    sleep = name_entry(frame(pb.SleepCommandMessage(wake_up_time=1_796_648_355_186, result_completion_id=6)))
    assert (sleep.wake_up_at_ms, sleep.details()) == (1_796_648_355_186, "until 2026-12-07T12:59:15.186Z")
    signal = name_entry(frame(pb.SignalNotificationMessage(idx=17, value=pb.Value(content=b'"yes"'))), CALLER)
    assert signal.awakeable_id == awakeable_id(CALLER, 17)
    assert signal.details() == f"awakeable {awakeable_id(CALLER, 17)}"
    assert signal.name is None  # a notification has no name
    cancel = name_entry(frame(pb.SignalNotificationMessage(idx=1, void=pb.Void())), CALLER)
    assert (cancel.signal, cancel.awakeable_id) == ("Cancel", None)
    complete = name_entry(frame(pb.CompleteAwakeableCommandMessage(awakeable_id="sign_1abc", value=pb.Value())))
    assert complete.details() == "id sign_1abc"
    sent = name_entry(frame(pb.SendSignalCommandMessage(target_invocation_id=CALLEE, idx=17, void=pb.Void())))
    assert sent.details() == f"signal index 17 to {CALLEE}"


def test_an_entry_that_does_not_parse_is_named_by_its_type_alone() -> None:
    from control_plane.protocol import Frame, MessageType

    assert name_entry(Frame(MessageType.SetState, b"\xff\xff")) == EntryNaming("Command: SetState", name="")


@pytest.mark.parametrize(
    ("message", "full", "lite"),
    [
        (
            pb.SetStateCommandMessage(key=b"email", value=pb.Value(content=b'"bob@example.com"')),
            '{"Command":{"SetState":{"key":"email","value":[34,98,111,98,64,101,120,97,109,112,108,101,46,99,111,'
            '109,34],"name":""}}}',
            '{"Command":{"SetState":{"key":"email"}}}',
        ),
        (
            pb.GetEagerStateCommandMessage(key=b"total", void=pb.Void()),
            '{"Command":{"GetEagerState":{"key":"total","result":"Void","name":""}}}',
            '{"Command":{"GetEagerState":{"key":"total","result":"Void"}}}',
        ),
        (
            pb.RunCommandMessage(name="charge card", result_completion_id=2),
            '{"Command":{"Run":{"completion_id":2,"name":"charge card"}}}',
            '{"Command":{"Run":{"completion_id":2,"name":"charge card"}}}',
        ),
        (
            pb.SleepCommandMessage(wake_up_time=1796648355186, result_completion_id=6),
            '{"Command":{"Sleep":{"wake_up_time":1796648355186,"completion_id":6,"name":""}}}',
            '{"Command":{"Sleep":{"wake_up_time":1796648355186,"completion_id":6}}}',
        ),
        (
            pb.CompletePromiseCommandMessage(
                key="note", completion_value=pb.Value(content=b'"noted"'), result_completion_id=7
            ),
            '{"Command":{"CompletePromise":{"key":"note","value":{"Success":[34,110,111,116,101,100,34]},'
            '"completion_id":7,"name":""}}}',
            '{"Command":{"CompletePromise":{"key":"note","completion_id":7}}}',
        ),
        (
            pb.RunCompletionNotificationMessage(completion_id=2, value=pb.Value(content=b'"charged"')),
            '{"Notification":{"Completion":{"Run":{"completion_id":2,"result":{"Success":[34,99,104,97,114,103,'
            "101,100,34]}}}}}",
            '{"Notification":{"ty":{"Completion":"Run"},"id":{"CompletionId":2},"result":"Success"}}',
        ),
        (
            pb.SleepCompletionNotificationMessage(completion_id=6, void=pb.Void()),
            '{"Notification":{"Completion":{"Sleep":{"completion_id":6}}}}',
            '{"Notification":{"ty":{"Completion":"Sleep"},"id":{"CompletionId":6},"result":"Void"}}',
        ),
        (
            pb.SignalNotificationMessage(idx=17, value=pb.Value(content=b'"yes"')),
            '{"Notification":{"Signal":{"id":{"Index":17},"result":{"Success":[34,121,101,115,34]}}}}',
            '{"Notification":{"ty":"Signal","id":{"SignalIndex":17},"result":"Success"}}',
        ),
        (
            pb.CallInvocationIdCompletionNotificationMessage(completion_id=3, invocation_id=CALLEE),
            '{"Notification":{"Completion":{"CallInvocationId":{"completion_id":3,"invocation_id":"' + CALLEE + '"}}}}',
            '{"Notification":{"ty":{"Completion":"CallInvocationId"},"id":{"CompletionId":3},"result":"InvocationId"}}',
        ),
    ],
)
def test_entries_are_written_as_restate_server_writes_them(message: object, full: str, lite: str) -> None:
    entry = frame(message)  # type: ignore[arg-type]
    naming = name_entry(entry, CALLER)
    assert compact(entry_json(entry, naming, KINDS)) == full
    assert compact(entry_json(entry, naming, KINDS, full=False)) == lite


def test_a_call_is_written_with_its_callee_and_target_as_restate_server_writes_it() -> None:
    call = pb.CallCommandMessage(
        service_name="Tally", handler_name="add", key="w1", parameter=b"1", invocation_id_notification_idx=3,
        result_completion_id=4,
    )  # fmt: skip
    callee = pb.CallInvocationIdCompletionNotificationMessage(completion_id=3, invocation_id=CALLEE)
    naming = name_journal(CALLER, [frame(call), frame(callee)])[0]
    target = '{"VirtualObject":{"name":"Tally","key":"w1","handler":"add","handler_ty":"Exclusive","scope":null}}'
    assert compact(entry_json(frame(call), naming, KINDS, full=False)) == (
        f'{{"Command":{{"Call":{{"invocation_id":"{CALLEE}","invocation_target":{target},'
        '"invocation_id_completion_id":3,"result_completion_id":4}}}'
    )
    full = entry_json(frame(call), naming, KINDS)
    assert full is not None
    request = full["Command"]["Call"]["request"]
    assert compact(request["invocation_target"]) == target
    assert request["parameter"] == [49]
    assert request["span_context"]["span_context"]["trace_id"] == [0] * 16
    # a call whose callee is not in the journal (never stored so) is left out rather than written wrong
    assert entry_json(frame(call), name_entry(frame(call)), KINDS) is None


def test_a_trace_that_fits_is_kept_whole() -> None:
    trace = 'Traceback (most recent call last):\n  File "x.py", line 1\nValueError: no\n'
    assert clip_stacktrace(trace) == trace


def test_a_long_trace_keeps_its_start_and_end_within_4_kib() -> None:
    lines = [f'  File "/app/handlers/ünïcode_{n}.py", line {n}, in step_{n}\n' for n in range(2_000)]
    trace = "Traceback (most recent call last):\n" + "".join(lines) + "ValueError: card declined\n"
    kept = clip_stacktrace(trace)
    assert MAX_STACKTRACE_BYTES == 4096
    assert len(kept.encode()) <= MAX_STACKTRACE_BYTES
    assert kept.startswith("Traceback (most recent call last):\n  File")
    assert kept.endswith("ValueError: card declined\n")
    said = re.search(r"\n… \[(\d+) bytes of the stack trace cut\] …\n", kept)
    assert said is not None
    assert int(said.group(1)) >= len(trace.encode()) - MAX_STACKTRACE_BYTES  # it says how much is gone


def test_an_error_messages_stack_trace_is_bounded_when_read_and_kept_as_the_last_failure() -> None:
    error = pb.ErrorMessage(code=500, message="ValueError('x')", stacktrace="frame\n" * 10_000)
    failure = parse_answer(encode_frames([frame(error)]))
    assert isinstance(failure, AttemptFailure)
    assert len(failure.stacktrace.encode()) <= MAX_STACKTRACE_BYTES
    policy = RetryPolicy(initial_interval_ms=100, max_attempts=5)
    decision = decide_failure(invocation(attempts=1), 1, failure, policy, 1_000, {})
    assert decision.changes["last_failure"]["stacktrace"] == failure.stacktrace
    plain = decide_failure(invocation(attempts=1), 1, AttemptFailure(500, "boom"), policy, 1_000, {})
    assert "stacktrace" not in plain.changes["last_failure"]  # none sent, none kept: no bytes spent


def test_sys_invocations_last_failure_reads_as_restate_servers() -> None:
    failure = {"code": 500, "message": "ValueError('x')", "stacktrace": "Traceback\nValueError: x\n"}
    assert last_failure_text(failure) == "[500 Internal] ValueError('x')\nTraceback\nValueError: x\n"
    assert last_failure_text({"code": 599, "message": "odd", "metadata": {"k": "v"}}) == "[599] odd\nmetadata:\n  k: v"
    assert last_failure_text(None) is None


@pytest.mark.parametrize(
    ("target", "expected"),
    [
        (CallTarget("Greeter", "greet"), {"Service": {"name": "Greeter", "handler": "greet", "scope": None}}),
        (
            CallTarget("Signup", "run", "ann"),
            {"Workflow": {"name": "Signup", "key": "ann", "handler": "run", "handler_ty": "Workflow", "scope": None}},
        ),
        (
            CallTarget("Signup", "confirm", "ann"),
            {"Workflow": {"name": "Signup", "key": "ann", "handler": "confirm", "handler_ty": "Shared", "scope": None}},
        ),
        (
            CallTarget("Unknown", "add", "k"),  # a service no longer registered: an object's exclusive handler
            {
                "VirtualObject": {
                    "name": "Unknown",
                    "key": "k",
                    "handler": "add",
                    "handler_ty": "Exclusive",
                    "scope": None,
                }
            },
        ),
    ],
)
def test_a_call_target_is_a_service_object_or_workflow_with_its_handler_type(
    target: CallTarget, expected: dict[str, object]
) -> None:
    kinds = {**KINDS, "Signup": ("WORKFLOW", {"run": "WORKFLOW", "confirm": "SHARED"})}
    assert invocation_target(EntryNaming("Command: Call", target=target), kinds) == expected
