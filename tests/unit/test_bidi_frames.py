"""Bidirectional mode reads the SDK's frames as HTTP/2 DATA brings them: a frame split anywhere across
chunks comes out whole, once, with its REQUESTED_ACK flag; a message past the answer limit is refused
as soon as its header announces it."""

from __future__ import annotations

import pytest

from control_plane.bidi import _Frames
from control_plane.ports import AnswerTooLarge
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
        reader = _Frames(1 << 20)
        got = reader.feed(wire[:cut], 0) + reader.feed(wire[cut:], 0)
        assert got == frames, cut
    assert [f.type for f in frames] == [MessageType.Run, MessageType.ProposeRunCompletion, MessageType.End]
    assert frames[1].requested_ack


def test_bytes_one_at_a_time() -> None:
    frames = [frame(pb.SleepCommandMessage(wake_up_time=5, result_completion_id=2, name="nap")), frame(pb.EndMessage())]
    reader = _Frames(1 << 20)
    got = [f for byte in encode_frames(frames) for f in reader.feed(bytes([byte]), 0)]
    assert got == frames


def test_a_message_announced_past_the_limit_is_refused_on_its_header() -> None:
    # GIVEN a reader holding at most 1000 bytes, and a 2000-byte message's first 8 bytes (its header)
    reader = _Frames(1000)
    big = encode_frames([frame(pb.OutputCommandMessage(value=pb.Value(content=b"x" * 2000)))])
    # THEN the header alone is enough to refuse it, naming the limit and its setting
    with pytest.raises(AnswerTooLarge, match=r"exceeded 1000 bytes \(TORPOR_MAX_ANSWER_BYTES\)"):
        reader.feed(big[:8], 0)


def test_what_is_not_committed_yet_counts_against_the_limit() -> None:
    small = encode_frames([frame(pb.RunCommandMessage(result_completion_id=1, name="step"))])
    assert _Frames(1000).feed(small, 1000 - len(small)) != []
    with pytest.raises(AnswerTooLarge):
        _Frames(1000).feed(small, 1001 - len(small))
