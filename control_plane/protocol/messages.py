"""Message type codes of the Restate service protocol (V5..V7) and their protobuf classes.

Every message on an invocation stream is framed with a 16-bit type code (see `framing.py`). The code
space is split into ranges: control messages `0x0000-0x03FF`, journal commands `0x0400-0x7FFF`,
notifications `0x8000-0xFBFF` and SDK-defined custom entries `0xFC00-0xFFFF`, which the runtime stores
and replays without looking inside. A completion notification's code is `0x8000` plus the code offset
of the command it completes (e.g. Sleep `0x040C` -> SleepCompletion `0x800C`); signals use `0xFBFF`.
"""

from __future__ import annotations

from enum import IntEnum

from google.protobuf.message import Message

from control_plane.protocol import protocol_pb2 as pb

__all__ = [
    "COMMAND_RANGE",
    "COMPLETABLE",
    "CONTROL_RANGE",
    "CUSTOM_RANGE",
    "MESSAGE_CLASSES",
    "NOTIFICATION_RANGE",
    "MessageType",
    "is_command",
    "is_control",
    "is_custom",
    "is_notification",
    "message_type_of",
    "type_name",
]

CONTROL_RANGE = range(0x0000, 0x0400)
"""Type codes of control messages (Start, Suspension, Error, End, ...)."""
COMMAND_RANGE = range(0x0400, 0x8000)
"""Type codes of journal commands."""
NOTIFICATION_RANGE = range(0x8000, 0xFC00)
"""Type codes of journal notifications (completions and signals)."""
CUSTOM_RANGE = range(0xFC00, 0x10000)
"""Type codes of SDK-defined custom entries; opaque to the runtime."""


class MessageType(IntEnum):
    """The 16-bit type code of every message Torpor understands.

    Member names are the display names used in logs (`type_name`). Custom entries (`0xFC00-0xFFFF`)
    have no member; they are carried as plain ints.
    """

    # Control messages.
    Start = 0x0000
    Suspension = 0x0001
    Error = 0x0002
    End = 0x0003
    CommandAck = 0x0004
    ProposeRunCompletion = 0x0005
    AwaitingOn = 0x0006
    ProposeRunCompletionAck = 0x0007

    # Commands.
    Input = 0x0400
    Output = 0x0401
    GetLazyState = 0x0402
    SetState = 0x0403
    ClearState = 0x0404
    ClearAllState = 0x0405
    GetLazyStateKeys = 0x0406
    GetEagerState = 0x0407
    GetEagerStateKeys = 0x0408
    GetPromise = 0x0409
    PeekPromise = 0x040A
    CompletePromise = 0x040B
    Sleep = 0x040C
    Call = 0x040D
    OneWayCall = 0x040E
    SendSignal = 0x0410
    Run = 0x0411
    AttachInvocation = 0x0412
    GetInvocationOutput = 0x0413
    CompleteAwakeable = 0x0414

    # Notifications.
    GetLazyStateCompletion = 0x8002
    GetLazyStateKeysCompletion = 0x8006
    GetPromiseCompletion = 0x8009
    PeekPromiseCompletion = 0x800A
    CompletePromiseCompletion = 0x800B
    SleepCompletion = 0x800C
    CallCompletion = 0x800D
    CallInvocationIdCompletion = 0x800E
    RunCompletion = 0x8011
    AttachInvocationCompletion = 0x8012
    GetInvocationOutputCompletion = 0x8013
    Signal = 0xFBFF


MESSAGE_CLASSES: dict[MessageType, type[Message]] = {
    MessageType.Start: pb.StartMessage,
    MessageType.Suspension: pb.SuspensionMessage,
    MessageType.Error: pb.ErrorMessage,
    MessageType.End: pb.EndMessage,
    MessageType.CommandAck: pb.CommandAckMessage,
    MessageType.ProposeRunCompletion: pb.ProposeRunCompletionMessage,
    MessageType.AwaitingOn: pb.AwaitingOnMessage,
    MessageType.ProposeRunCompletionAck: pb.ProposeRunCompletionAckMessage,
    MessageType.Input: pb.InputCommandMessage,
    MessageType.Output: pb.OutputCommandMessage,
    MessageType.GetLazyState: pb.GetLazyStateCommandMessage,
    MessageType.SetState: pb.SetStateCommandMessage,
    MessageType.ClearState: pb.ClearStateCommandMessage,
    MessageType.ClearAllState: pb.ClearAllStateCommandMessage,
    MessageType.GetLazyStateKeys: pb.GetLazyStateKeysCommandMessage,
    MessageType.GetEagerState: pb.GetEagerStateCommandMessage,
    MessageType.GetEagerStateKeys: pb.GetEagerStateKeysCommandMessage,
    MessageType.GetPromise: pb.GetPromiseCommandMessage,
    MessageType.PeekPromise: pb.PeekPromiseCommandMessage,
    MessageType.CompletePromise: pb.CompletePromiseCommandMessage,
    MessageType.Sleep: pb.SleepCommandMessage,
    MessageType.Call: pb.CallCommandMessage,
    MessageType.OneWayCall: pb.OneWayCallCommandMessage,
    MessageType.SendSignal: pb.SendSignalCommandMessage,
    MessageType.Run: pb.RunCommandMessage,
    MessageType.AttachInvocation: pb.AttachInvocationCommandMessage,
    MessageType.GetInvocationOutput: pb.GetInvocationOutputCommandMessage,
    MessageType.CompleteAwakeable: pb.CompleteAwakeableCommandMessage,
    MessageType.GetLazyStateCompletion: pb.GetLazyStateCompletionNotificationMessage,
    MessageType.GetLazyStateKeysCompletion: pb.GetLazyStateKeysCompletionNotificationMessage,
    MessageType.GetPromiseCompletion: pb.GetPromiseCompletionNotificationMessage,
    MessageType.PeekPromiseCompletion: pb.PeekPromiseCompletionNotificationMessage,
    MessageType.CompletePromiseCompletion: pb.CompletePromiseCompletionNotificationMessage,
    MessageType.SleepCompletion: pb.SleepCompletionNotificationMessage,
    MessageType.CallCompletion: pb.CallCompletionNotificationMessage,
    MessageType.CallInvocationIdCompletion: pb.CallInvocationIdCompletionNotificationMessage,
    MessageType.RunCompletion: pb.RunCompletionNotificationMessage,
    MessageType.AttachInvocationCompletion: pb.AttachInvocationCompletionNotificationMessage,
    MessageType.GetInvocationOutputCompletion: pb.GetInvocationOutputCompletionNotificationMessage,
    MessageType.Signal: pb.SignalNotificationMessage,
}
"""The protobuf class of each message type (payload of a frame with that type code)."""

_TYPE_OF_CLASS: dict[type[Message], MessageType] = {cls: t for t, cls in MESSAGE_CLASSES.items()}

COMPLETABLE: dict[MessageType, tuple[MessageType, ...]] = {
    MessageType.GetLazyState: (MessageType.GetLazyStateCompletion,),
    MessageType.GetLazyStateKeys: (MessageType.GetLazyStateKeysCompletion,),
    MessageType.GetPromise: (MessageType.GetPromiseCompletion,),
    MessageType.PeekPromise: (MessageType.PeekPromiseCompletion,),
    MessageType.CompletePromise: (MessageType.CompletePromiseCompletion,),
    MessageType.Sleep: (MessageType.SleepCompletion,),
    # A call first learns the callee's invocation id, then its result.
    MessageType.Call: (MessageType.CallInvocationIdCompletion, MessageType.CallCompletion),
    MessageType.OneWayCall: (MessageType.CallInvocationIdCompletion,),
    MessageType.Run: (MessageType.RunCompletion,),
    MessageType.AttachInvocation: (MessageType.AttachInvocationCompletion,),
    MessageType.GetInvocationOutput: (MessageType.GetInvocationOutputCompletion,),
}
"""Completable command type -> the notification types that complete it, in delivery order.

Commands missing from this dict (Input, Output, SetState, SendSignal, ...) get no notification.
"""


def is_control(t: int) -> bool:
    """Tell whether a type code is a control message.

    Args:
        t: 16-bit message type code.

    Returns:
        True for `0x0000-0x03FF`.
    """
    return 0x0000 <= t < 0x0400


def is_command(t: int) -> bool:
    """Tell whether a type code is a journal command.

    Args:
        t: 16-bit message type code.

    Returns:
        True for `0x0400-0x7FFF`.
    """
    return 0x0400 <= t < 0x8000


def is_notification(t: int) -> bool:
    """Tell whether a type code is a journal notification (completion or signal).

    Args:
        t: 16-bit message type code.

    Returns:
        True for `0x8000-0xFBFF`.
    """
    return 0x8000 <= t < 0xFC00


def is_custom(t: int) -> bool:
    """Tell whether a type code is an SDK-defined custom entry, stored and replayed as opaque bytes.

    Args:
        t: 16-bit message type code.

    Returns:
        True for `0xFC00-0xFFFF`.
    """
    return 0xFC00 <= t <= 0xFFFF


def message_type_of(msg: Message) -> MessageType:
    """Return the type code to frame a protobuf message with.

    Args:
        msg: An instance of one of the classes in `MESSAGE_CLASSES`.

    Returns:
        Its `MessageType`.

    Raises:
        TypeError: `msg` is not a framed protocol message (e.g. a nested `Value`, or `NotificationTemplate`).
    """
    try:
        return _TYPE_OF_CLASS[type(msg)]
    except KeyError:
        raise TypeError(f"{type(msg).__name__} is not a framed service-protocol message") from None


def type_name(t: int) -> str:
    """Return a display name for a type code.

    Args:
        t: 16-bit message type code.

    Returns:
        The `MessageType` member name (e.g. "Run", "RunCompletion"), "Custom(0xFC01)" for a custom entry,
        or "Unknown(0x0008)" for a code Torpor does not know.
    """
    try:
        return MessageType(t).name
    except ValueError:
        return f"Custom(0x{t:04X})" if is_custom(t) else f"Unknown(0x{t:04X})"
