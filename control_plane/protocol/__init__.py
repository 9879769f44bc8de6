"""Restate service protocol, runtime side: messages, framing, version negotiation, endpoint manifest.

`protocol_pb2` holds the generated protobuf classes (from `protocol.proto`, via `scripts/gen_protocol.sh`);
import it as `from control_plane.protocol import protocol_pb2 as pb`.
"""

from control_plane.protocol import protocol_pb2
from control_plane.protocol.framing import (
    HEADER_SIZE,
    REQUESTED_ACK_MASK,
    Frame,
    decode_frames,
    encode_frames,
    frame,
)
from control_plane.protocol.manifest import (
    Handler,
    InputPayload,
    Manifest,
    OutputPayload,
    Service,
    manifest_entries,
    parse_manifest,
)
from control_plane.protocol.messages import (
    COMMAND_RANGE,
    COMPLETABLE,
    CONTROL_RANGE,
    CUSTOM_RANGE,
    MESSAGE_CLASSES,
    NOTIFICATION_RANGE,
    MessageType,
    is_command,
    is_control,
    is_custom,
    is_notification,
    message_type_of,
    type_name,
)
from control_plane.protocol.versions import (
    DISCOVERY_ACCEPT,
    MANIFEST_VERSIONS,
    MAX_VERSION,
    MIN_VERSION,
    SUPPORTED_VERSIONS,
    invocation_content_type,
    manifest_content_type,
    manifest_version_of,
    negotiate,
)

__all__ = [
    "COMMAND_RANGE",
    "COMPLETABLE",
    "CONTROL_RANGE",
    "CUSTOM_RANGE",
    "DISCOVERY_ACCEPT",
    "HEADER_SIZE",
    "MANIFEST_VERSIONS",
    "MAX_VERSION",
    "MESSAGE_CLASSES",
    "MIN_VERSION",
    "NOTIFICATION_RANGE",
    "REQUESTED_ACK_MASK",
    "SUPPORTED_VERSIONS",
    "Frame",
    "Handler",
    "InputPayload",
    "Manifest",
    "MessageType",
    "OutputPayload",
    "Service",
    "decode_frames",
    "encode_frames",
    "frame",
    "invocation_content_type",
    "is_command",
    "is_control",
    "is_custom",
    "is_notification",
    "manifest_content_type",
    "manifest_entries",
    "manifest_version_of",
    "message_type_of",
    "negotiate",
    "parse_manifest",
    "protocol_pb2",
    "type_name",
]
