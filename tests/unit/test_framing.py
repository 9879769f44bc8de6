"""Framing, the message-type table, and frames produced by the real Python SDK."""

from __future__ import annotations

import asyncio

import httpx
import pytest
import restate

from control_plane.errors import ProtocolViolation
from control_plane.protocol import (
    COMPLETABLE,
    MESSAGE_CLASSES,
    REQUESTED_ACK_MASK,
    Frame,
    MessageType,
    decode_frames,
    encode_frames,
    frame,
    invocation_content_type,
    is_command,
    is_control,
    is_custom,
    is_notification,
    message_type_of,
    type_name,
)
from control_plane.protocol import protocol_pb2 as pb

# ---------------------------------------------------------------------------------------------- framing


def test_round_trip_keeps_types_payloads_and_ack_flag() -> None:
    frames = [
        frame(pb.StartMessage(id=b"\x07" * 16, debug_id="inv_x", known_entries=2)),
        frame(pb.InputCommandMessage(value=pb.Value(content=b'"ann"'))),
        frame(pb.RunCommandMessage(result_completion_id=1, name="step")),
        frame(pb.ProposeRunCompletionMessage(result_completion_id=1, value=b"42"), requested_ack=True),
        frame(pb.EndMessage()),
    ]
    decoded = decode_frames(encode_frames(frames))
    assert decoded == frames
    assert [f.requested_ack for f in decoded] == [False, False, False, True, False]
    assert decoded[3].decode() == pb.ProposeRunCompletionMessage(result_completion_id=1, value=b"42")
    assert decoded[0].decode().debug_id == "inv_x"
    assert decoded[4].payload == b""


def test_header_bit_layout_matches_hand_computed_bytes() -> None:
    # ProposeRunCompletion (0x0005) with REQUESTED_ACK and a 3-byte payload:
    # type 0x0005 in bits 63..48, bit 47 set, length 3 in bits 31..0.
    assert encode_frames([Frame(0x0005, b"abc", requested_ack=True)]) == bytes.fromhex("0005800000000003") + b"abc"
    assert int.from_bytes(bytes.fromhex("0005800000000003"), "big") == (0x0005 << 48) | REQUESTED_ACK_MASK | 3
    # Output (0x0401), no flag, 0x0102-byte payload.
    payload = bytes(0x0102)
    assert encode_frames([Frame(0x0401, payload)])[:8] == bytes.fromhex("0401000000000102")
    # Signal (0xFBFF) with an empty payload.
    assert encode_frames([Frame(0xFBFF, b"")]) == bytes.fromhex("fbff000000000000")


def test_decode_reads_flag_and_ignores_reserved_bits() -> None:
    raw = bytes.fromhex("0005800000000000") + bytes.fromhex("0001" + "7fff" + "00000000")
    first, second = decode_frames(raw)
    assert (first.type, first.requested_ack, first.payload) == (0x0005, True, b"")
    assert (second.type, second.requested_ack) == (0x0001, False)


def test_decode_accepts_bytearray_and_memoryview() -> None:
    data = encode_frames([frame(pb.EndMessage()), Frame(0xFC01, b"xyz")])
    assert decode_frames(bytearray(data)) == decode_frames(memoryview(data)) == decode_frames(data)
    assert decode_frames(b"") == []


@pytest.mark.parametrize("cut", [1, 7])
def test_truncated_header_is_a_protocol_violation(cut: int) -> None:
    data = encode_frames([frame(pb.EndMessage()), frame(pb.EndMessage())])
    with pytest.raises(ProtocolViolation, match="truncated frame header") as e:
        decode_frames(data[: 8 + cut])
    assert e.value.status == 571


def test_truncated_payload_is_a_protocol_violation() -> None:
    data = encode_frames([frame(pb.InputCommandMessage(value=pb.Value(content=b"0123456789")))])
    with pytest.raises(ProtocolViolation, match=r"truncated Input frame .* announces \d+ payload bytes"):
        decode_frames(data[:-1])


def test_unparsable_payload_is_a_protocol_violation() -> None:
    with pytest.raises(ProtocolViolation, match="cannot parse Output"):
        Frame(MessageType.Output, b"\xff\xff\xff").decode()


def test_custom_and_unknown_types_stay_opaque() -> None:
    custom = Frame(0xFC01, b"\x00\x01not-protobuf\xff", requested_ack=False)
    unknown = Frame(0x0008, b"\x01\x02")
    data = encode_frames([custom, unknown])
    assert data[:8] == bytes.fromhex("fc0100000000000f")
    decoded = decode_frames(data)
    assert decoded == [custom, unknown]
    assert decoded[0].decode() is None
    assert decoded[1].decode() is None
    assert encode_frames(decoded) == data
    assert decoded[0].name == "Custom(0xFC01)"


def test_frame_refuses_ack_on_other_types_and_non_framed_messages() -> None:
    with pytest.raises(ValueError, match="REQUESTED_ACK"):
        frame(pb.EndMessage(), requested_ack=True)
    with pytest.raises(TypeError, match="Value"):
        frame(pb.Value(content=b"1"))


def test_encode_refuses_out_of_range_type() -> None:
    with pytest.raises(ValueError, match="0x10000"):
        encode_frames([Frame(0x10000, b"")])


# ---------------------------------------------------------------------------------------------- type table

# The published table (sdk-shared-core src/service_protocol/header.rs) plus CommandAck (0x0004, in the proto).
EXPECTED_CODES = {
    "Start": 0x0000, "Suspension": 0x0001, "Error": 0x0002, "End": 0x0003, "CommandAck": 0x0004,
    "ProposeRunCompletion": 0x0005, "AwaitingOn": 0x0006, "ProposeRunCompletionAck": 0x0007,
    "Input": 0x0400, "Output": 0x0401, "GetLazyState": 0x0402, "SetState": 0x0403, "ClearState": 0x0404,
    "ClearAllState": 0x0405, "GetLazyStateKeys": 0x0406, "GetEagerState": 0x0407, "GetEagerStateKeys": 0x0408,
    "GetPromise": 0x0409, "PeekPromise": 0x040A, "CompletePromise": 0x040B, "Sleep": 0x040C, "Call": 0x040D,
    "OneWayCall": 0x040E, "SendSignal": 0x0410, "Run": 0x0411, "AttachInvocation": 0x0412,
    "GetInvocationOutput": 0x0413, "CompleteAwakeable": 0x0414,
    "GetLazyStateCompletion": 0x8002, "GetLazyStateKeysCompletion": 0x8006, "GetPromiseCompletion": 0x8009,
    "PeekPromiseCompletion": 0x800A, "CompletePromiseCompletion": 0x800B, "SleepCompletion": 0x800C,
    "CallCompletion": 0x800D, "CallInvocationIdCompletion": 0x800E, "RunCompletion": 0x8011,
    "AttachInvocationCompletion": 0x8012, "GetInvocationOutputCompletion": 0x8013, "Signal": 0xFBFF,
}  # fmt: skip


def test_type_codes_match_the_published_table() -> None:
    assert {t.name: t.value for t in MessageType} == EXPECTED_CODES


def test_every_type_has_a_class_and_back() -> None:
    assert set(MESSAGE_CLASSES) == set(MessageType)
    assert len(set(MESSAGE_CLASSES.values())) == len(MESSAGE_CLASSES)
    for t, cls in MESSAGE_CLASSES.items():
        assert message_type_of(cls()) is t


def test_ranges() -> None:
    for t in MessageType:
        kinds = [is_control(t), is_command(t), is_notification(t), is_custom(t)]
        assert kinds.count(True) == 1, t
    assert is_control(0x03FF)
    assert not is_control(0x0400)
    assert is_command(0x0400)
    assert is_command(0x7FFF)
    assert not is_command(0x8000)
    assert is_notification(0x8000)
    assert is_notification(0xFBFF)
    assert not is_notification(0xFC00)
    assert is_custom(0xFC00)
    assert is_custom(0xFFFF)
    assert not is_custom(0xFBFF)


def test_completable_table() -> None:
    for cmd, notes in COMPLETABLE.items():
        assert is_command(cmd)
        assert notes
        assert all(is_notification(n) for n in notes)
        # A completion is 0x8000 + the command's offset, except the shared invocation-id notification.
        for n in notes:
            if n is not MessageType.CallInvocationIdCompletion:
                assert n - 0x8000 == cmd - 0x0400
    assert COMPLETABLE[MessageType.Call] == (MessageType.CallInvocationIdCompletion, MessageType.CallCompletion)
    assert COMPLETABLE[MessageType.OneWayCall] == (MessageType.CallInvocationIdCompletion,)
    completions = {n for notes in COMPLETABLE.values() for n in notes}
    assert completions == {t for t in MessageType if is_notification(t)} - {MessageType.Signal}


def test_type_name() -> None:
    assert type_name(0x0411) == "Run"
    assert type_name(MessageType.RunCompletion) == "RunCompletion"
    assert type_name(0xFC01) == "Custom(0xFC01)"
    assert type_name(0x0008) == "Unknown(0x0008)"


# ---------------------------------------------------------------------------------------------- real SDK

greeter = restate.Service("Greeter")


@greeter.handler()
async def greet(ctx: restate.Context, name: str) -> str:
    return f"Hello {name}!"


async def _invoke(version: int, path: str, body: bytes) -> httpx.Response:
    app = restate.app([greeter], protocol="request_response")
    transport = httpx.ASGITransport(app=app)
    async with httpx.AsyncClient(transport=transport, base_url="http://deployment") as client:
        ct = invocation_content_type(version)
        return await client.post(path, content=body, headers={"content-type": ct, "accept": ct})


@pytest.mark.parametrize("version", [5, 6, 7])
def test_decodes_what_the_python_sdk_answers(version: int) -> None:
    body = encode_frames(
        [
            frame(pb.StartMessage(known_entries=1, id=bytes(range(16)), debug_id="inv_test")),
            frame(pb.InputCommandMessage(value=pb.Value(content=b'"ann"'))),
        ]
    )
    resp = asyncio.run(_invoke(version, "/invoke/Greeter/greet", body))
    assert resp.status_code == 200
    assert resp.headers["content-type"] == invocation_content_type(version)
    frames = decode_frames(resp.content)
    assert [f.type for f in frames] == [MessageType.Output, MessageType.End]
    output = frames[0].decode()
    assert isinstance(output, pb.OutputCommandMessage)
    assert output.WhichOneof("result") == "value"
    assert output.value.content == b'"Hello ann!"'
    assert frames[1].decode() == pb.EndMessage()
