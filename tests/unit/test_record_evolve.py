"""`InvocationRecord.evolve`: the engine's fast `dataclasses.replace`."""

from __future__ import annotations

import dataclasses

import pytest

from control_plane.ports import InvocationRecord

RECORD = InvocationRecord(
    invocation_id="inv_1", service="Greeter", handler="greet", key="", deployment_id="dp_1",
    protocol_version=5, status="running", created_at_ms=1, modified_at_ms=2, input_entry=b"in",
    callers=frozenset({"inv_2/3"}), failure={"code": 500, "message": "boom"},
)  # fmt: skip


@pytest.mark.parametrize(
    "changes",
    [{}, {"epoch": 3}, {"status": "completed", "output": b"out", "failure": None}, {"callers": frozenset()}],
)
def test_evolve_makes_what_replace_makes(changes: dict[str, object]) -> None:
    evolved = RECORD.evolve(**changes)
    assert evolved == dataclasses.replace(RECORD, **changes)  # type: ignore[arg-type]
    assert evolved is not RECORD
    assert RECORD.epoch == 0  # the original is untouched


def test_evolve_refuses_a_name_that_is_not_a_field() -> None:
    with pytest.raises(TypeError, match="no field"):
        RECORD.evolve(epoch=1, colour="red")
