"""A key's queue keeps the order one process created invocations in, also within one millisecond
(Restate's guarantee: calls and sends one handler makes to one object key run in the order made)."""

from __future__ import annotations

from control_plane.creation import inbox_seq as _inbox_seq


def test_invocations_created_in_the_same_millisecond_queue_in_creation_order() -> None:
    # GIVEN three invocations created on one key in the same millisecond, whose ids sort the other way
    ids = ["inv_1zzzz", "inv_1mmmm", "inv_1aaaa"]
    seqs = [_inbox_seq(1_700_000_000_000, invocation_id) for invocation_id in ids]
    # THEN their queue positions sort in creation order
    assert sorted(seqs) == seqs
    # AND a later millisecond still comes after
    assert _inbox_seq(1_700_000_000_001, "inv_10000") > seqs[-1]
