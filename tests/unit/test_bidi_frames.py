"""Bidirectional mode reads the SDK's frames as HTTP/2 DATA brings them: a frame split anywhere across
chunks comes out whole, once, with its REQUESTED_ACK flag."""

from __future__ import annotations

from control_plane.bidi import _Frames
from control_plane.protocol import MessageType, encode_frames, frame
from control_plane.protocol import protocol_pb2 as pb


def test_frames_split_at_every_byte_come_out_whole_and_in_order() -> None:
    frames = [
        frame(pb.RunCommandMessage(result_completion_id=1, name="step-1")),
        frame(pb.ProposeRunCompletionMessage(result_completion_id=1, value=b"42"), requested_ack=True),
        frame(pb.EndMessage()),
    ]
    wire = encode_frames(frames)
    for cut in range(len(wire) + 1):
        reader = _Frames()
        got = reader.feed(wire[:cut]) + reader.feed(wire[cut:])
        assert got == frames, cut
    assert [f.type for f in frames] == [MessageType.Run, MessageType.ProposeRunCompletion, MessageType.End]
    assert frames[1].requested_ack


def test_bytes_one_at_a_time() -> None:
    frames = [frame(pb.SleepCommandMessage(wake_up_time=5, result_completion_id=2, name="nap")), frame(pb.EndMessage())]
    reader = _Frames()
    got = [f for byte in encode_frames(frames) for f in reader.feed(bytes([byte]))]
    assert got == frames
