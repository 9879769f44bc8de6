"""Named signals on an open stream (`control_plane.bidi._Exchange._deliver`): they share one key per
name (they queue), so of a name, those beyond the ones sent and not committed yet go to the handler;
another notification goes once per stream."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

from control_plane.bidi import _Exchange
from control_plane.protocol import Frame, decode_frames, frame
from control_plane.protocol import protocol_pb2 as pb


class _Stream:
    def __init__(self) -> None:
        self.sent: list[Frame] = []

    def send(self, data: bytes, timeout_s: float) -> None:
        self.sent.extend(decode_frames(data))


def _signal(name: str, value: bytes) -> Frame:
    return frame(pb.SignalNotificationMessage(name=name, value=pb.Value(content=value)))


def _exchange(pending: list[Frame]) -> tuple[_Exchange, _Stream]:
    stream = _Stream()
    held: Any = SimpleNamespace(record=SimpleNamespace(protocol_version=6))
    unused: Any = None
    exchange = _Exchange(stream, held, unused, pending, unused, lambda: 1.0, unused, 1 << 20, lambda: 0)  # type: ignore[arg-type]
    return exchange, stream


def test_a_second_signal_of_a_name_goes_on_the_stream_the_first_went_on() -> None:
    first, second = _signal("approved", b"1"), _signal("approved", b"2")
    exchange, stream = _exchange([first])  # the first went with the request

    exchange._deliver([first, second])  # stored and not journaled: both (the first not committed yet)
    assert stream.sent == [second]
    exchange._deliver([first, second])  # nothing new
    assert stream.sent == [second]

    exchange.pending = []  # a commit journaled both: what is still to take is what arrives next
    third = _signal("approved", b"3")
    exchange._deliver([third])
    assert stream.sent == [second, third]


def test_another_notification_goes_once_per_stream() -> None:
    sleep = frame(pb.SleepCompletionNotificationMessage(completion_id=3, void=pb.Void()))
    exchange, stream = _exchange([])

    exchange._deliver([sleep])
    exchange.pending = []  # committed
    exchange._deliver([sleep])
    assert stream.sent == [sleep]
