"""Pausing an invocation that has not started is refused (`decisions.check_pausable`) with a 409 that
says what it waits for: its start time (a delay or a rate limit), a concurrency slot, or its object key."""

from __future__ import annotations

import pytest

from control_plane.decisions import check_pausable
from control_plane.errors import Conflict
from tests.helpers.records import invocation


@pytest.mark.parametrize(
    ("fields", "says"),
    [
        ({"status": "scheduled"}, "waits for its start time: a delay, or a rate limit's pacing"),
        ({"status": "pending", "slot": "~limit/Waits/sleep", "slot_limit": 2}, "concurrency limit Waits/sleep (2)"),
        ({"status": "pending"}, "waits for its object key"),
    ],
)
def test_pausing_one_not_started_names_what_it_waits_for(fields: dict[str, object], says: str) -> None:
    with pytest.raises(Conflict) as refused:
        check_pausable(invocation(**fields))
    assert "is not running yet" in str(refused.value) and says in str(refused.value)
