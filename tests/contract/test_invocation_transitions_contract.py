"""The named durable transitions of `InvocationTransitions` (`control_plane/ports.py`), on both stores.

Each transition is one conditional write that sets exactly its fields (its constants included),
refuses a stale epoch (and, where it takes one, a stale doorbell) with `StoreConflict` and nothing
written, and refuses a field it does not own before any request. The forced ones (`force_complete`,
`force_pause`, `resume`) move the epoch whoever holds the lease and refuse a completed invocation.
The private conditional writes under them are tested in `test_invocation_store_contract.py`.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest

from adapters.aws.dynamodb_store import DynamoDBStore
from adapters.local.sqlite_store import SQLiteStore
from control_plane.ports import InvocationRecord, StoreConflict
from tests.helpers.records import RUNNABLE, invocation

Store = DynamoDBStore | SQLiteStore

FAILURE = {"code": 500, "message": "boom", "at_ms": 2_500, "attempt": 1}
RETRY = {"retry_count": 1, "retry_at_length": 2, "retry_since_ms": 2_500, "failures_in_a_row": 1}

# transition: (its arguments after the id and epoch, the fields it writes)
FENCED: dict[str, tuple[dict[str, Any], dict[str, Any]]] = {
    "renew_lease": (
        {"lease_until_ms": 90_000, "modified_at_ms": 3_000, "attempts": 2, "requests": {"ddb_write": 3}},
        {"lease_until_ms": 90_000, "modified_at_ms": 3_000, "attempts": 2, "requests": {"ddb_write": 3}},
    ),
    "record_progress": (
        {"modified_at_ms": 3_000, "attempts": 1, "inbox_seq": ""},
        {"modified_at_ms": 3_000, "attempts": 1, "inbox_seq": ""},
    ),
    "release_lease": (
        {"modified_at_ms": 3_000, "status": "scheduled", "effects_applied_upto": 0},
        {"modified_at_ms": 3_000, "status": "scheduled", "lease_until_ms": 0, "effects_applied_upto": 0},
    ),
    "wait_for_key": (
        {"modified_at_ms": 3_000, "inbox_seq": "0000000003000inv_1", "execution_time_ms": 0},
        {"modified_at_ms": 3_000, "status": "pending", "lease_until_ms": 0, "inbox_seq": "0000000003000inv_1"},
    ),
    "leave_queue": ({"modified_at_ms": 3_000}, {"modified_at_ms": 3_000, "status": "ready", "inbox_seq": ""}),
    "suspend": (
        {"doorbell": 0, "doorbell_read": 0, "waiting_on": {"completions": [2]}, "wake_up_at_ms": 9_000,
         "journal_length": 2, "effects_applied_upto": 2, "modified_at_ms": 3_000},
        {"doorbell_read": 0, "waiting_on": {"completions": [2]}, "wake_up_at_ms": 9_000, "journal_length": 2,
         "effects_applied_upto": 2, "modified_at_ms": 3_000, "status": "suspended", "lease_until_ms": 0,
         "next_retry_at_ms": 0, "failures_in_a_row": 0},
    ),
    "back_off": (
        {"next_retry_at_ms": 7_000, "wake_up_at_ms": 7_000, **RETRY, "last_failure": FAILURE, "journal_length": 2,
         "effects_applied_upto": 2, "modified_at_ms": 3_000},
        {"next_retry_at_ms": 7_000, "wake_up_at_ms": 7_000, **RETRY, "last_failure": FAILURE, "journal_length": 2,
         "effects_applied_upto": 2, "modified_at_ms": 3_000, "status": "backing-off", "lease_until_ms": 0},
    ),
    "pause": (
        {"doorbell": 0, **RETRY, "last_failure": FAILURE, "journal_length": 2, "effects_applied_upto": 2,
         "modified_at_ms": 3_000},
        {**RETRY, "last_failure": FAILURE, "journal_length": 2, "effects_applied_upto": 2, "modified_at_ms": 3_000,
         "status": "paused", "lease_until_ms": 0, "next_retry_at_ms": 0},
    ),
    "complete": (
        {"doorbell": 0, "completion": "succeeded", "completed_at_ms": 3_000, "modified_at_ms": 3_000,
         "output": b'"hi"', "last_failure": None, "expires_at_s": 86_403, "journal_expires_at_ms": 86_403_000,
         "journal_length": 2, "effects_applied_upto": 2},
        {"completion": "succeeded", "completed_at_ms": 3_000, "modified_at_ms": 3_000, "output": b'"hi"',
         "last_failure": None, "expires_at_s": 86_403, "journal_expires_at_ms": 86_403_000, "journal_length": 2,
         "effects_applied_upto": 2, "status": "completed", "lease_until_ms": 0, "next_retry_at_ms": 0,
         "waiting_on": None, "wake_up_at_ms": 0},
    ),
}  # fmt: skip
DOORBELLED = [name for name, (arguments, _) in FENCED.items() if "doorbell" in arguments]

FORCED: dict[str, tuple[dict[str, Any], dict[str, Any]]] = {
    "force_complete": (
        {"completion": "killed", "completed_at_ms": 3_000, "modified_at_ms": 3_000,
         "failure": {"code": 409, "message": "killed"}, "expires_at_s": 86_403},
        {"completion": "killed", "completed_at_ms": 3_000, "modified_at_ms": 3_000,
         "failure": {"code": 409, "message": "killed"}, "expires_at_s": 86_403, "status": "completed",
         "lease_until_ms": 0, "next_retry_at_ms": 0, "waiting_on": None, "wake_up_at_ms": 0},
    ),
    "force_pause": (
        {"modified_at_ms": 3_000},
        {"modified_at_ms": 3_000, "status": "paused", "lease_until_ms": 0, "next_retry_at_ms": 0},
    ),
    "resume": (
        {"modified_at_ms": 3_000, "status": "pending", "lease_until_ms": 0, "inbox_seq": "0000000003000inv_1",
         "deployment_id": "dp_2", "protocol_version": 6},
        {"modified_at_ms": 3_000, "status": "pending", "lease_until_ms": 0, "inbox_seq": "0000000003000inv_1",
         "deployment_id": "dp_2", "protocol_version": 6, "retry_count": 0, "failures_in_a_row": 0,
         "next_retry_at_ms": 0},
    ),
}  # fmt: skip

START = {"waiting_on": {"kind": "sleep"}, "retry_count": 4, "failures_in_a_row": 4, "next_retry_at_ms": 5_000}


def leased(store: Store) -> InvocationRecord:
    """inv_1 leased at epoch 1 (its doorbell 0), with fields the transitions reset."""
    store.create_invocation(invocation("inv_1", inbox_seq="0000000001000inv_1", **START))
    return store.acquire_lease("inv_1", now_ms=2_000, lease_until_ms=32_000, runnable=RUNNABLE)


@pytest.mark.parametrize("name", FENCED)
def test_a_fenced_transition_sets_exactly_its_fields_on_the_current_epoch(store: Store, name: str) -> None:
    held = leased(store)
    arguments, fields = FENCED[name]

    getattr(store, name)("inv_1", held.epoch, **arguments)

    assert store.get_invocation("inv_1") == dataclasses.replace(held, **fields)


@pytest.mark.parametrize("name", FENCED)
def test_a_fenced_transition_on_a_stale_epoch_conflicts_and_writes_nothing(store: Store, name: str) -> None:
    held = leased(store)
    store._update_unless_completed("inv_1")  # a kill or a pause moved the epoch (2)
    moved = store.get_invocation("inv_1")

    with pytest.raises(StoreConflict, match="epoch 1"):
        getattr(store, name)("inv_1", held.epoch, **FENCED[name][0])

    assert store.get_invocation("inv_1") == moved


@pytest.mark.parametrize("name", DOORBELLED)
def test_a_transition_on_a_stale_doorbell_conflicts_and_writes_nothing(store: Store, name: str) -> None:
    held = leased(store)
    store.ring("inv_1")  # a notification (or an attached caller) since the holder read doorbell 0

    with pytest.raises(StoreConflict, match="doorbell 0 no longer holds"):
        getattr(store, name)("inv_1", held.epoch, **FENCED[name][0])

    assert store.get_invocation("inv_1") == dataclasses.replace(held, doorbell=1)


@pytest.mark.parametrize("name", [*FENCED, *FORCED])
def test_a_transition_refuses_a_field_it_does_not_own_before_any_request(store: Store, name: str) -> None:
    held = leased(store)
    before = store.request_count
    arguments = {**(FENCED.get(name) or FORCED[name])[0], "handler": "other"}

    epoch = (held.epoch,) if name in FENCED else ()

    with pytest.raises(TypeError, match="handler"):
        getattr(store, name)("inv_1", *epoch, **arguments)

    assert store.request_count == before
    assert store.get_invocation("inv_1") == held


def test_complete_returning_reads_back_the_record_in_the_same_write(store: Store) -> None:
    held = leased(store)
    store.attach_caller("inv_1", "inv_caller/3")  # rings: doorbell 1
    arguments = {**FENCED["complete"][0], "doorbell": 1}

    done = store.complete("inv_1", held.epoch, returning=True, **arguments)

    fields = FENCED["complete"][1]
    assert done == dataclasses.replace(held, doorbell=1, callers=frozenset({"inv_caller/3"}), **fields)
    assert store.get_invocation("inv_1") == done
    assert store.complete("inv_1", held.epoch, **arguments) is None  # not returning: nothing read back


@pytest.mark.parametrize("name", FORCED)
def test_a_forced_transition_moves_the_epoch_so_the_holder_loses(store: Store, name: str) -> None:
    held = leased(store)
    arguments, fields = FORCED[name]

    forced = getattr(store, name)("inv_1", **arguments)

    expected = dataclasses.replace(held, epoch=held.epoch + 1, **fields)
    assert forced == expected
    assert store.get_invocation("inv_1") == expected
    with pytest.raises(StoreConflict, match="epoch 1 no longer holds"):
        store.record_progress("inv_1", held.epoch, modified_at_ms=4_000)
    assert store.get_invocation("inv_1") == expected


@pytest.mark.parametrize("name", FORCED)
def test_a_forced_transition_refuses_a_completed_invocation(store: Store, name: str) -> None:
    done = invocation("inv_1", status="completed", completion="succeeded", output=b"1", epoch=3)
    store.create_invocation(done)

    with pytest.raises(StoreConflict, match="invocation inv_1 has completed or does not exist"):
        getattr(store, name)("inv_1", **FORCED[name][0])

    assert store.get_invocation("inv_1") == done


@pytest.mark.parametrize("name", FORCED)
def test_a_forced_transition_of_an_unknown_invocation_conflicts_and_creates_nothing(store: Store, name: str) -> None:
    with pytest.raises(StoreConflict):
        getattr(store, name)("inv_ghost", **FORCED[name][0])

    assert store.get_invocation("inv_ghost") is None


def test_the_tables_name_every_transition() -> None:
    from control_plane.ports import InvocationTransitions
    from tests.simulator.sim import _FENCED_WRITES, _FORCED_WRITES

    methods = vars(InvocationTransitions)
    public = {name for name, value in methods.items() if callable(value) and not name.startswith("_")}
    assert public == set(FENCED) | set(FORCED)
    assert (set(FENCED), set(FORCED)) == (_FENCED_WRITES, _FORCED_WRITES)  # the simulator's crash points
