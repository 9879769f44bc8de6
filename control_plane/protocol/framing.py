"""Framing of service-protocol messages: an 8-byte header followed by a protobuf payload.

Header layout, one big-endian u64:

    bits 63..48  message type code (u16, see `messages.MessageType`)
    bit  47      REQUESTED_ACK flag (mask 0x8000_0000_0000; V7, only meaningful on ProposeRunCompletion)
    bits 46..32  reserved, written as zero and ignored on read
    bits 31..0   payload length in bytes (u32)

An HTTP request or response body in request/response mode is a plain concatenation of frames.
This module is on the hot path of every invocation attempt: it works on whole buffers with
`struct.unpack_from` and slices, never byte by byte.
"""

from __future__ import annotations

import struct
from collections.abc import Iterable
from dataclasses import dataclass

from google.protobuf.message import DecodeError, Message

from control_plane.errors import ProtocolViolation
from control_plane.protocol.messages import (
    MESSAGE_CLASSES,
    MessageType,
    message_type_of,
    type_name,
)

__all__ = [
    "HEADER_SIZE",
    "REQUESTED_ACK_MASK",
    "Frame",
    "decode_frames",
    "encode_frames",
    "frame",
]

HEADER_SIZE = 8
"""Bytes in a frame header."""
REQUESTED_ACK_MASK = 0x8000_0000_0000
"""Bit 47 of the header as a u64: the REQUESTED_ACK flag."""

# The header read as three big-endian fields: type (u16), flags (u16, bit 15 = REQUESTED_ACK), length (u32).
_HEADER = struct.Struct(">HHI")
_ACK_FLAG = 0x8000
_MAX_LENGTH = 0xFFFF_FFFF


@dataclass(frozen=True, slots=True)
class Frame:
    """One framed message, payload still encoded.

    Attributes:
        type: 16-bit type code (a `MessageType` value, or a custom entry code `0xFC00-0xFFFF`).
        payload: Protobuf-encoded message bytes (opaque for custom entries).
        requested_ack: The REQUESTED_ACK header flag (only meaningful on ProposeRunCompletion).
    """

    type: int
    payload: bytes
    requested_ack: bool = False

    def decode(self) -> Message | None:
        """Parse the payload with the protobuf class of `type`.

        Returns:
            The parsed message, or None when `type` is a custom entry or a code Torpor does not know
            (keep such frames as they are).

        Raises:
            ProtocolViolation: The payload is not a valid encoding of the message for `type`.
        """
        cls = MESSAGE_CLASSES.get(self.type)  # type: ignore[call-overload]  # plain int keys hash like the enum
        if cls is None:
            return None
        try:
            message: Message = cls.FromString(self.payload)
            return message
        except DecodeError as e:
            raise ProtocolViolation(
                f"cannot parse {type_name(self.type)} message (type 0x{self.type:04X}, {len(self.payload)} bytes): {e}"
            ) from e

    @property
    def name(self) -> str:
        """Display name of the type code, e.g. "Run" or "Custom(0xFC01)"."""
        return type_name(self.type)


def frame(msg: Message, requested_ack: bool = False) -> Frame:
    """Encode a protobuf message into a frame.

    Args:
        msg: An instance of a class in `messages.MESSAGE_CLASSES`.
        requested_ack: Set the REQUESTED_ACK flag; only allowed on ProposeRunCompletion.

    Returns:
        The frame, type code taken from the message class.

    Raises:
        TypeError: `msg` is not a framed protocol message.
        ValueError: `requested_ack` is set on a message other than ProposeRunCompletion.
    """
    t = message_type_of(msg)
    if requested_ack and t is not MessageType.ProposeRunCompletion:
        raise ValueError(f"REQUESTED_ACK is only allowed on ProposeRunCompletion, not on {t.name}")
    return Frame(int(t), msg.SerializeToString(), requested_ack)


def encode_frames(frames: Iterable[Frame]) -> bytes:
    """Serialize frames into one body: for each, the 8-byte header then the payload.

    Args:
        frames: Frames in wire order.

    Returns:
        The concatenated bytes (empty for no frames).

    Raises:
        ValueError: A type code outside 0..0xFFFF or a payload longer than 2**32 - 1 bytes.
    """
    pack = _HEADER.pack
    parts: list[bytes] = []
    append = parts.append
    for f in frames:
        n = len(f.payload)
        if n > _MAX_LENGTH or not 0 <= f.type <= 0xFFFF:
            raise ValueError(f"cannot frame type 0x{f.type:X} with a {n}-byte payload")
        append(pack(f.type, _ACK_FLAG if f.requested_ack else 0, n))
        append(f.payload)
    return b"".join(parts)


def decode_frames(data: bytes | bytearray | memoryview) -> list[Frame]:
    """Split a body into frames without parsing the payloads.

    Args:
        data: A concatenation of frames, e.g. a whole request or response body.

    Returns:
        The frames in order (empty for empty input). Reserved header bits are ignored.

    Raises:
        ProtocolViolation: The data ends inside a header or inside a payload.
    """
    buf = data if isinstance(data, bytes) else bytes(data)
    end = len(buf)
    unpack_from = _HEADER.unpack_from
    frames: list[Frame] = []
    append = frames.append
    offset = 0
    while offset < end:
        if end - offset < HEADER_SIZE:
            raise ProtocolViolation(
                f"truncated frame header at byte {offset}: {end - offset} of {HEADER_SIZE} bytes "
                f"(after {len(frames)} complete frames)"
            )
        t, flags, n = unpack_from(buf, offset)
        start = offset + HEADER_SIZE
        offset = start + n
        if offset > end:
            raise ProtocolViolation(
                f"truncated {type_name(t)} frame at byte {start - HEADER_SIZE}: header announces "
                f"{n} payload bytes, {end - start} present"
            )
        append(Frame(t, buf[start:offset], bool(flags & _ACK_FLAG)))
    return frames
