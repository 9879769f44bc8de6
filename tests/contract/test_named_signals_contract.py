"""Named signals over every store (DynamoDB on moto, SQLite): `Store.get_notification`, and the
queue `Effects.notify_named` keeps with it and conditional `put_notification`s. Each signal sent by
name is stored once (an effect applied again stores nothing more), under the next free key of its
name, and the journal takes them in that order, each once.
"""

from __future__ import annotations

from types import SimpleNamespace

from control_plane.effects import Effects
from control_plane.held import Held
from control_plane.journal import Journal, named_signal_key, notification_key, stored_sender
from control_plane.ports import FixedFacts, Store, StoredNotification
from control_plane.protocol import Frame, encode_frames, frame
from control_plane.protocol import protocol_pb2 as pb
from tests.helpers.records import invocation


def _effects(store: Store) -> Effects:
    engine = SimpleNamespace(
        store=store,
        facts=FixedFacts(),
        clock=SimpleNamespace(now_ms=lambda: 1_000),
        scheduler=SimpleNamespace(wake_now=lambda invocation_id: None),
        registry=None,
        keys=None,
        settings=None,
        knock=lambda invocation_id: None,
    )
    return Effects(engine)  # type: ignore[arg-type]


def _signal(name: str, value: bytes) -> Frame:
    return frame(pb.SignalNotificationMessage(name=name, value=pb.Value(content=value)))


def _values(frames: list[Frame]) -> list[tuple[str, bytes]]:
    out = []
    for f in frames:
        signal = pb.SignalNotificationMessage.FromString(f.payload)
        out.append((signal.name, signal.value.content))
    return out


def test_get_notification_reads_one_by_key(store: Store) -> None:
    store.create_invocation(invocation("inv_1"))
    store.create_invocation(invocation("inv_10"))
    stored = StoredNotification("c2", b"\x00completion", created_at_ms=3_000)
    assert store.put_notification("inv_1", stored) is True

    assert store.get_notification("inv_1", "c2") == stored
    assert store.get_notification("inv_1", "c3") is None
    assert store.get_notification("inv_10", "c2") is None


def test_named_signals_are_stored_once_each_in_the_order_sent(store: Store) -> None:
    store.create_invocation(invocation("inv_1", status="suspended"))
    effects = _effects(store)

    assert effects.notify_named("inv_1", "approved", _signal("approved", b"1"), "inv_a/3") is True
    assert effects.notify_named("inv_1", "approved", _signal("approved", b"2"), "inv_b/1") is True
    assert effects.notify_named("inv_1", "other", _signal("other", b"x"), "inv_b/2") is True
    # the first sender's effect applied again (after a crash): it meets its own key, stores nothing
    assert effects.notify_named("inv_1", "approved", _signal("approved", b"1"), "inv_a/3") is False
    assert effects.notify_named("inv_1", "approved", _signal("approved", b"2"), "inv_b/1") is False

    loaded = store.load_invocation("inv_1")
    assert loaded is not None
    keys = {n.key: stored_sender(n.entry) for n in loaded.notifications}
    assert keys == {
        named_signal_key(0, "approved"): "inv_a/3",
        named_signal_key(1, "approved"): "inv_b/1",
        named_signal_key(0, "other"): "inv_b/2",
    }
    record = loaded.record
    assert record.doorbell >= 3  # each stored one rang the doorbell

    held = Held(record, Journal.load(encode_frames([frame(pb.InputCommandMessage())]), []), loaded.notifications)
    first = effects.pending(held)
    assert sorted(_values(first)) == [("approved", b"1"), ("approved", b"2"), ("other", b"x")]
    assert [notification_key(f) for f in first if notification_key(f) == "napproved"] == ["napproved"] * 2

    held.journal.extend(first[:1])  # one of them folded into the journal: the others are still pending
    assert sorted(_values(effects.pending(held))) == sorted(_values(first[1:]))
    held.journal.extend(first[1:])
    assert effects.pending(held) == []


def test_a_named_signal_for_a_completed_invocation_is_dropped(store: Store) -> None:
    store.create_invocation(invocation("inv_1", status="completed"))

    assert _effects(store).notify_named("inv_1", "approved", _signal("approved", b"1"), "inv_a/3") is False

    assert store.get_notification("inv_1", named_signal_key(0, "approved")) is None
