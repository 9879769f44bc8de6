"""What the admin API says a suspended invocation waits for (`admin_debug.waiting_for`), from its
record's `waiting_on` and its journal, and who else awaits it."""

from __future__ import annotations

from google.protobuf.message import Message

from control_plane import ids
from control_plane.journal import Journal
from control_plane.protocol import frame
from control_plane.protocol import protocol_pb2 as pb
from http_api.admin_debug import WaitsCache, awaited_by, waiting_for
from tests.helpers.records import invocation

INPUT = frame(pb.InputCommandMessage())


def journal(*messages: Message) -> Journal:
    """A journal of the Input and `messages`, in order."""
    out = Journal()
    out.extend([INPUT, *(frame(m) for m in messages)])
    return out


def test_each_awaited_completion_is_named_by_its_command() -> None:
    record = invocation(
        ids.new_invocation_id(),
        status="suspended",
        waiting_on={"completions": [2, 3, 4, 5, 9], "signals": [1, 17], "named_signals": ["go"]},
    )
    entries = journal(
        pb.CallCommandMessage(
            service_name="Counter", handler_name="add", key="k", invocation_id_notification_idx=1,
            result_completion_id=2,
        ),
        pb.CallInvocationIdCompletionNotificationMessage(completion_id=1, invocation_id="inv_1callee"),
        pb.SleepCommandMessage(wake_up_time=1_700_000_000_000, result_completion_id=3),
        pb.GetPromiseCommandMessage(key="confirmation", result_completion_id=4),
        pb.RunCommandMessage(name="charge", result_completion_id=5),
    )

    assert waiting_for(record, entries) == [
        {"kind": "call", "index": 1, "target": "Counter/k/add", "invocation_id": "inv_1callee"},
        {"kind": "sleep", "index": 3, "until": "2023-11-14T22:13:20.000Z"},
        {"kind": "promise", "index": 4, "name": "confirmation"},
        {"kind": "run", "index": 5, "name": "charge"},
        {"kind": "completion", "completion_id": 9},
        # the cancel signal (1) is left out: the SDK awaits it beside everything
        {"kind": "awakeable", "id": ids.awakeable_id(record.invocation_id, 17), "signal_id": 17},
        {"kind": "signal", "name": "go"},
    ]


def test_an_invocation_that_is_not_suspended_waits_for_nothing() -> None:
    record = invocation(status="running", waiting_on={"completions": [1]})
    assert waiting_for(record, journal()) == []


def test_awaited_by_lists_the_attached_callers_but_not_the_creator() -> None:
    record = invocation(caller_id="inv_1a", callers=frozenset({"inv_1a/2", "inv_1b/4", "inv_1c/1"}))
    assert awaited_by(record) == ["inv_1b", "inv_1c"]


def test_the_cache_answers_for_one_version_of_a_record_only() -> None:
    cache = WaitsCache(size=1)
    first = invocation("inv_1", status="suspended", modified_at_ms=5)
    cache.put(first, [{"kind": "cancel"}])
    assert cache.get(first) == [{"kind": "cancel"}]
    assert cache.get(first.evolve(modified_at_ms=6)) is None  # suspended again since: read again
    cache.put(invocation("inv_2"), [])
    assert cache.get(first) is None  # the oldest went
