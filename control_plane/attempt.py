"""One attempt in request/response mode: what the runtime sends, and how the answer is read.

The runtime sends Start, then the stored journal, then ends its body; the SDK answers with new
commands and run proposals followed by exactly one of End, Suspension or Error (Restate service
protocol, "Stream lifecycle"). A proposal is stored as its RunCompletion notification.
"""

from __future__ import annotations

from dataclasses import dataclass

from control_plane.errors import ProtocolViolation
from control_plane.journal import AwaitPoint
from control_plane.protocol import (
    Frame,
    MessageType,
    decode_frames,
    frame,
    is_command,
    is_custom,
    is_notification,
)
from control_plane.protocol import protocol_pb2 as pb

_MAX_MESSAGE_CHARS = 4096  # failure texts are stored on the invocation item (400 KB in all)


@dataclass(frozen=True, slots=True)
class AttemptFailure:
    """A failed attempt: Restate-style `code` (HTTP status or 5xx protocol code), `message`, hints."""

    code: int
    message: str
    next_retry_delay_ms: int | None = None
    behavior: int = pb.RETRY  # ErrorBehavior (V7): RETRY, PAUSE or FAIL
    related_command: str | None = None
    stacktrace: str = ""


@dataclass(frozen=True, slots=True)
class AttemptAnswer:
    """A well-formed answer: the entries to commit and how the stream ended (End or Suspension)."""

    entries: list[Frame]
    ended: bool
    awaiting: AwaitPoint


def parse_answer(body: bytes) -> AttemptAnswer | AttemptFailure:
    """Read the SDK's answer to one attempt (request/response mode).

    The answer is new commands, run proposals, then exactly one of End, Suspension or Error; a run
    proposal becomes a RunCompletion notification stored right where it was proposed. An answer
    ending in none of the three is a failed attempt (Restate service protocol, "Stream lifecycle").

    Every known message is parsed here, so a malformed one fails the attempt (571) instead of being
    committed and poisoning every later replay.

    Returns an `AttemptAnswer`, or an `AttemptFailure` for an ErrorMessage or a malformed stream.
    """
    try:
        return _read(decode_frames(body))
    except ProtocolViolation as exc:
        return AttemptFailure(571, f"the deployment's answer breaks the service protocol: {exc.message}")


def _read(frames: list[Frame]) -> AttemptAnswer | AttemptFailure:
    entries: list[Frame] = []
    for f in frames:
        t = f.type
        message = f.decode()  # ProtocolViolation if the payload does not parse
        if is_command(t) or is_custom(t):
            entries.append(Frame(t, f.payload))  # the ack flag is a request, never stored
        elif t == MessageType.ProposeRunCompletion:
            proposal = message
            assert isinstance(proposal, pb.ProposeRunCompletionMessage)
            notification = pb.RunCompletionNotificationMessage(completion_id=proposal.result_completion_id)
            if proposal.WhichOneof("result") == "failure":
                notification.failure.CopyFrom(proposal.failure)
            else:
                notification.value.content = proposal.value
            entries.append(frame(notification))
        elif t == MessageType.End:
            return AttemptAnswer(entries, ended=True, awaiting=AwaitPoint())
        elif t == MessageType.Suspension:
            assert isinstance(message, pb.SuspensionMessage)
            return AttemptAnswer(entries, ended=False, awaiting=AwaitPoint.of(message))
        elif t == MessageType.Error:
            error = message
            assert isinstance(error, pb.ErrorMessage)
            related = error.related_command_name if error.HasField("related_command_name") else None
            return AttemptFailure(
                code=error.code or 500,
                message=error.message[:_MAX_MESSAGE_CHARS],
                next_retry_delay_ms=error.next_retry_delay if error.HasField("next_retry_delay") else None,
                behavior=error.behavior,
                related_command=related,
                stacktrace=error.stacktrace[:_MAX_MESSAGE_CHARS],
            )
        elif t in (MessageType.AwaitingOn, MessageType.CommandAck):
            continue  # hints for observability; nothing to store
        elif is_notification(t):
            return AttemptFailure(571, f"the deployment sent a notification (type {t:#06x}); only the runtime may")
        else:
            return AttemptFailure(571, f"unexpected message type {t:#06x} in the deployment's answer")
    return AttemptFailure(571, "the deployment's answer ended without End, Suspension or Error")
