"""The pure rule of restart as new (`control_plane.restart.decide_restart_as_new`): which journal
the new invocation starts from, and the refusals with restate-server 1.7.12's statuses."""

from __future__ import annotations

import pytest

from control_plane.errors import BadRequest, Conflict, TorporError
from control_plane.journal import Journal
from control_plane.protocol import decode_frames, encode_frames, frame
from control_plane.protocol import protocol_pb2 as pb
from control_plane.restart import decide_restart_as_new


def _journal(*messages: object) -> Journal:
    journal = Journal()
    journal.extend([frame(pb.InputCommandMessage(value=pb.Value(content=b'"x"')))])
    journal.extend([frame(m) for m in messages])  # type: ignore[arg-type]
    return journal


def _run(n: int) -> pb.RunCommandMessage:
    return pb.RunCommandMessage(result_completion_id=n, name=f"step {n}")


def _done(n: int) -> pb.RunCompletionNotificationMessage:
    return pb.RunCompletionNotificationMessage(completion_id=n, value=pb.Value(content=b"1"))


def _sleep(n: int) -> pb.SleepCommandMessage:
    return pb.SleepCommandMessage(result_completion_id=n, wake_up_time=1)


def _woke(n: int) -> pb.SleepCompletionNotificationMessage:
    return pb.SleepCompletionNotificationMessage(completion_id=n, void=pb.Void())


STEPS = _journal(_run(1), _done(1), _run(2), _done(2), pb.OutputCommandMessage(value=pb.Value(content=b"2")))


def _decide(journal: Journal | None = STEPS, copy_upto: int = 0, **kw: object) -> object:
    args: dict[str, object] = {"status": "completed", "service_type": "SERVICE", "protocol_version": 6}
    args.update(kw)
    return decide_restart_as_new("inv_1", args["status"], args["service_type"], args["protocol_version"],  # type: ignore[arg-type]
                                 journal, copy_upto, args.get("deployment"))  # type: ignore[arg-type]  # fmt: skip


def test_from_zero_keeps_only_the_input_on_the_latest_deployment() -> None:
    plan = _decide()
    assert (plan.entries, plan.count, plan.deployment, plan.keep_seed) == (b"", 0, "latest", False)  # type: ignore[attr-defined]
    assert _decide(deployment="keep").deployment == "keep"  # type: ignore[attr-defined]  # as restate-server 1.7.12


def test_a_prefix_is_copied_with_its_completions() -> None:
    plan = _decide(copy_upto=2, deployment="keep")
    copied = [f.type for f in decode_frames(plan.entries)]  # type: ignore[attr-defined]
    assert copied == [STEPS.frames[1].type, STEPS.frames[2].type]
    assert (plan.count, plan.deployment, plan.keep_seed) == (2, "keep", True)  # type: ignore[attr-defined]


def test_a_command_whose_completion_came_later_takes_it_along() -> None:
    journal = _journal(_sleep(1), _run(2), _done(2), _woke(1))
    plan = _decide(journal, copy_upto=1)
    assert plan.entries == encode_frames([journal.frames[1], journal.frames[4]])  # type: ignore[attr-defined]


@pytest.mark.parametrize(
    ("kw", "status"),
    [
        ({"status": "scheduled"}, 425),
        ({"status": "pending"}, 425),
        ({"status": "running"}, 409),
        ({"status": "suspended"}, 409),
        ({"journal": None}, 410),
        ({"service_type": "WORKFLOW"}, 422),
        ({"deployment": "junk"}, 400),
        ({"copy_upto": 2, "protocol_version": 5}, 422),
        ({"copy_upto": 6}, 400),
        ({"copy_upto": -1}, 400),
        ({"journal": _journal(_sleep(1), _sleep(2), _woke(2)), "copy_upto": 1}, 400),
    ],
)
def test_refusals_carry_restate_servers_statuses(kw: dict[str, object], status: int) -> None:
    with pytest.raises(TorporError) as caught:
        _decide(**kw)  # type: ignore[arg-type]
    assert caught.value.status == status


def test_an_uncompleted_command_after_the_prefix_does_not_matter() -> None:
    journal = _journal(_sleep(1), _woke(1), _sleep(2))
    assert _decide(journal, copy_upto=2).count == 2  # type: ignore[attr-defined]
    with pytest.raises(BadRequest):
        _decide(journal, copy_upto=3)
    with pytest.raises(Conflict):
        _decide(status="paused")
