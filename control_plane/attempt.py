"""One attempt in request/response mode: what the runtime sends, and how the answer is read.

The runtime sends Start, then the stored journal, then ends its body; the SDK answers with new
commands and run proposals followed by exactly one of End, Suspension or Error (Restate service
protocol, "Stream lifecycle"). A proposal is stored as its RunCompletion notification.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field, replace

from control_plane.errors import BadRequest, ProtocolViolation
from control_plane.failures import MAX_STORED_CHARS, clip, clip_stacktrace
from control_plane.ids import invocation_id_bytes
from control_plane.journal import AwaitPoint, Journal, completion_ids, notification_key
from control_plane.ports import AnswerTooLarge
from control_plane.protocol import (
    MESSAGE_CLASSES,
    Frame,
    MessageType,
    decode_frames,
    frame,
    is_command,
    is_custom,
    is_notification,
    type_name,
)
from control_plane.protocol import protocol_pb2 as pb

_MAX_MESSAGE_CHARS = MAX_STORED_CHARS  # failure texts are stored on the invocation item (400 KB in all)


# In-process checkpoints (`adapters/aws/checkpoints.py`): what the engine sends with every attempt,
# and what the function answers. Request headers:
EPOCH_HEADER = "x-torpor-epoch"
"""The attempt's epoch: the function's commits are fenced by it."""
JOURNAL_LENGTH_HEADER = "x-torpor-journal-length"
"""Request: the stored journal's length (entries after it in the body are notifications delivered
with this attempt). Answer: the journal's length after the function's own commits (absent: none)."""
DEADLINE_HEADER = "x-torpor-deadline-ms"
"""Epoch ms after which the function commits nothing more and lets the SDK suspend."""
DOORBELL_HEADER = "x-torpor-doorbell"
"""The invocation's doorbell as the engine read it: a notification stored since stops the commits."""
CHECKPOINT_HEADERS = (EPOCH_HEADER, JOURNAL_LENGTH_HEADER, DEADLINE_HEADER, DOORBELL_HEADER)
FENCED_HEADER = "x-torpor-fenced"
"""Answer: the function stopped committing because the epoch or the doorbell moved (a kill, a
successor, a notification); the engine re-reads the invocation."""


@dataclass(frozen=True, slots=True)
class AttemptFailure:
    """A failed attempt: Restate-style `code` (HTTP status or 5xx protocol code), `message`, hints."""

    code: int
    message: str
    next_retry_delay_ms: int | None = None
    behavior: int = pb.RETRY  # ErrorBehavior (V7): RETRY, PAUSE or FAIL
    related_command: str | None = None
    stacktrace: str = ""  # the SDK's, bounded by `clip_stacktrace` (4 KiB, its middle cut)
    related_command_index: int | None = None  # command index (Input is 0) the failure is about
    related_command_type: int | None = None  # its message type code
    entries: tuple[Frame, ...] = field(default=(), compare=False)  # sent before its ErrorMessage
    recorded_command: dict[str, object] | None = field(default=None, compare=False)  # a mismatch's journaled side

    def related(self) -> dict[str, object]:
        """`related_command_{index,type,name}` for `last_failure` (those known; the type as a kind name)."""
        out: dict[str, object] = {}
        if self.related_command_index is not None:
            out["related_command_index"] = self.related_command_index
        if self.related_command_type is not None:
            out["related_command_type"] = type_name(self.related_command_type)
        if self.related_command is not None:
            out["related_command_name"] = self.related_command
        if self.recorded_command is not None:
            out["recorded_command"] = self.recorded_command
        return out


def answer_too_large(exc: AnswerTooLarge) -> AttemptFailure:
    """The failed attempt for an answer over `TORPOR_MAX_ANSWER_BYTES`, the same in both modes
    (request/response over HTTP/1.1, a stream over HTTP/2): code 500, the message naming the limit
    and the setting, retried by the handler's retry policy and paused once it is exhausted.

    Retried, not terminal, as restate-server does with a message over its
    `worker.invoker.message_size_limit` (RT0003: an invoker error, all of which it treats as
    transient, reported as an internal error, 500): the answer's size may depend on data that
    changes, and once the retries are spent the invocation waits, paused, for the operator to raise
    the limit (or fix the handler) and resume it, with its journal intact.
    """
    return AttemptFailure(500, exc.message)


@dataclass(frozen=True, slots=True)
class AttemptAnswer:
    """A well-formed answer: the entries to commit and how the stream ended (End or Suspension)."""

    entries: list[Frame]
    ended: bool
    awaiting: AwaitPoint
    suspension: pb.SuspensionMessage | None = field(default=None, compare=False)  # as sent, its await tree


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


def read_answer(frames: list[Frame]) -> AttemptAnswer | AttemptFailure:
    """`parse_answer` for frames already split (bidirectional mode reads them as they arrive).

    Frames that end in none of End, Suspension or Error are a 571 failure.
    """
    try:
        return _read(frames)
    except ProtocolViolation as exc:
        return AttemptFailure(571, f"the deployment's answer breaks the service protocol: {exc.message}")


def read_entries(frames: list[Frame]) -> list[Frame] | AttemptFailure:
    """The entries to commit from what the SDK sent so far on an open stream (bidirectional mode):
    commands and custom entries as sent, run proposals as RunCompletion notifications. `frames`
    hold no End, Suspension or Error. Returns a failure for a malformed or forbidden message."""
    read = read_answer([*frames, Frame(MessageType.End, b"")])
    return read.entries if isinstance(read, AttemptAnswer) else read


def _read(frames: list[Frame]) -> AttemptAnswer | AttemptFailure:
    entries: list[Frame] = []
    for f in frames:
        t = f.type
        message = f.decode()  # ProtocolViolation if the payload does not parse
        if is_command(t) and (t not in MESSAGE_CLASSES or t == MessageType.Input):
            return AttemptFailure(571, f"the deployment sent an unknown command type {t:#06x}", related_command_type=t)
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
            return AttemptAnswer(entries, ended=False, awaiting=AwaitPoint.of(message), suspension=message)
        elif t == MessageType.Error:
            error = message
            assert isinstance(error, pb.ErrorMessage)
            related = clip(error.related_command_name, 256) if error.HasField("related_command_name") else None
            return AttemptFailure(
                code=error.code or 500,
                message=clip(error.message, _MAX_MESSAGE_CHARS),
                next_retry_delay_ms=error.next_retry_delay if error.HasField("next_retry_delay") else None,
                behavior=error.behavior,
                related_command=related,
                stacktrace=clip_stacktrace(error.stacktrace),
                related_command_index=error.related_command_index if error.HasField("related_command_index") else None,
                related_command_type=error.related_command_type if error.HasField("related_command_type") else None,
                entries=tuple(entries),
            )
        elif t in (MessageType.AwaitingOn, MessageType.CommandAck):
            continue  # hints for observability; nothing to store
        elif is_notification(t):
            return AttemptFailure(571, f"the deployment sent a notification (type {t:#06x}); only the runtime may")
        else:
            return AttemptFailure(571, f"unexpected message type {t:#06x} in the deployment's answer")
    return AttemptFailure(571, "the deployment's answer ended without End, Suspension or Error")


def check_answer(
    journal: Journal,
    entries: list[Frame],
    awaiting: AwaitPoint | None,
    sent: int = 0,
    suspension: pb.SuspensionMessage | None = None,
    *,
    ended: bool = False,
    service_type: str = "",
    handler_type: str = "",
) -> AttemptFailure | None:
    """Refuse an answer that no SDK following the protocol sends, before anything of it is stored.

    `entries` are the answer's new entries in order (see `parse_answer`), `awaiting` its Suspension's
    await point (None for End, or for entries committed on an open stream), `ended` True if the answer
    ended with End; `service_type` and `handler_type` the invocation's target's (as in the manifest:
    `SERVICE`, `VIRTUAL_OBJECT`, `WORKFLOW`; `EXCLUSIVE`, `SHARED`, `WORKFLOW`; "" if not known, then
    what a command may do there is not checked). `journal` is the journal the attempt was sent, and the
    first `sent` of `entries` the notifications sent with it beyond the journal (delivered in this
    attempt); `suspension` the Suspension itself, for its V7 await tree (without it `awaiting` is
    any-of). Refused (571, the deployment's side is untrusted input): a run completion for a completion id
    that no Run command of the journal or the answer was given, or one already completed; a second
    Output command; a command given a completion id the journal or the answer already gave another (its
    notification would complete both); a command the target may not send, as restate-server 1.7.12
    refuses it (its invoker's command preconditions): a state command (read or write) in a plain
    service, a state write in a shared handler, a durable promise command outside a workflow; a
    Suspension awaiting a reserved signal index (0, or 2 to 16: index 1 is cancel, awakeables count from
    17, and nothing sends the others); a SendSignal command whose target is not an invocation id, or
    that names no signal (restate-server 1.7.12 cannot decode it: RT0012, retried); a Suspension that
    awaits nothing, or a completion id no command
    was given (it could never be woken); a Suspension the notifications the attempt was sent already
    satisfy (the SDK could have resumed: the runtime would re-invoke it at once, again and again); an
    End with no Output command in the journal or the answer (the handler neither returned nor suspended:
    the service protocol ends a stream with End only after Output). Each goes through the retry policy
    like any failed attempt (backoff, then pause or kill). Returns the failure, or None if the answer is
    fine.
    """
    runs, issued, outputs = set(journal.runs), set(journal.issued), journal.outputs
    completed = set(journal.completions)
    scratch = Journal()
    for index, f in enumerate(entries):
        if f.type == MessageType.RunCompletion:
            cid = pb.RunCompletionNotificationMessage.FromString(f.payload).completion_id
            if cid not in runs:
                return _violation(f"a run completion for completion id {cid}, which no Run command was given", index, f)
            if cid in completed:
                return _violation(f"a second run completion for completion id {cid}", index, f)
            completed.add(cid)
            continue
        if not is_command(f.type):
            continue
        command_index = len(journal.commands) + len(scratch.commands)
        forbidden = _forbidden(f.type, service_type, handler_type) or _undeliverable(f)
        if forbidden:
            return _violation(forbidden, index, f, command_index)
        given = completion_ids(f)
        reused = sorted({c for c in given if c in issued or given.count(c) > 1})
        if reused:
            return _violation(
                f"a command given completion id {reused[0]}, which another command was given already",
                index,
                f,
                command_index,
            )
        scratch.extend([f])
        runs |= scratch.runs
        issued |= scratch.issued
        if scratch.outputs + outputs > 1:
            command_index = len(journal.commands) + len(scratch.commands) - 1
            return _violation("a second Output command: an invocation has exactly one result", index, f, command_index)
    if ended and not outputs + scratch.outputs:
        return _violation("an End without an Output command: the handler neither returned a result nor suspended", None)
    if awaiting is None:
        return None
    return _check_suspension(journal, entries[:sent], awaiting, suspension, issued)


def _check_suspension(
    journal: Journal,
    sent: list[Frame],
    awaiting: AwaitPoint,
    suspension: pb.SuspensionMessage | None,
    issued: set[int],
) -> AttemptFailure | None:
    """The Suspension rules of `check_answer`: `awaiting` must await something, no reserved signal
    index, only completion ids in `issued` (given by the journal or the answer), and nothing that
    the notifications `sent` with the attempt already satisfy. Returns the failure, or None."""
    if not (awaiting.completions or awaiting.signals or awaiting.named_signals):
        return _violation("a Suspension that awaits nothing: it could never be resumed", None)
    reserved = sorted(s for s in awaiting.signals if s == 0 or 1 < s <= _LAST_RESERVED_SIGNAL)
    if reserved:
        return _violation(
            f"a Suspension awaiting signal {reserved[0]}, a reserved signal index nothing sends "
            f"(1 is cancel, awakeables are above {_LAST_RESERVED_SIGNAL}): it could never be resumed",
            None,
        )
    never = sorted(awaiting.completions - issued)
    if never:
        return _violation(
            f"a Suspension awaiting completion id {never[0]}, which no command was given: it could never be resumed",
            None,
        )
    resumable = _already_satisfied(journal, sent, awaiting, suspension)
    if resumable:
        return _violation(
            f"a Suspension awaiting {resumable}, already sent to it in this attempt: the handler "
            "could have resumed instead of suspending",
            None,
        )
    return None


_LAST_RESERVED_SIGNAL = 16
"""Signal indexes 1 to 16 are reserved for built-in signals, of which only 1 (cancel) exists; an
awakeable's index is above 16 (Restate service protocol, "Signals"). Index 0 is no signal."""
_STATE_READS = frozenset(
    {MessageType.GetLazyState, MessageType.GetLazyStateKeys, MessageType.GetEagerState, MessageType.GetEagerStateKeys}
)
_STATE_WRITES = frozenset({MessageType.SetState, MessageType.ClearState, MessageType.ClearAllState})
_PROMISE_COMMANDS = frozenset({MessageType.GetPromise, MessageType.PeekPromise, MessageType.CompletePromise})


def _forbidden(command_type: int, service_type: str, handler_type: str) -> str:
    """Why a handler of `service_type`/`handler_type` may not send a command of `command_type`, in
    words ("" if it may, or if the target is not known). The rules of restate-server 1.7.12's
    invoker (command preconditions): state only in virtual objects and workflows, written only by
    exclusive handlers and a workflow's `run`; durable promises only in workflows."""
    name = type_name(command_type)
    if not service_type:
        return ""
    if command_type in _STATE_READS | _STATE_WRITES and service_type == "SERVICE":
        return f"a {name} command from a plain service, which has no state (only virtual objects and workflows do)"
    if command_type in _STATE_WRITES and handler_type == "SHARED":
        return f"a {name} command from a shared handler, which may read state but not write it"
    if command_type in _PROMISE_COMMANDS and service_type != "WORKFLOW":
        return f"a {name} command outside a workflow (durable promises belong to workflows)"
    return ""


def _undeliverable(f: Frame) -> str:
    """Why a SendSignal command `f` could reach no invocation, in words ("" if it can, or if `f` is
    another command): its target is not an invocation id (`inv_1…`), or it names no signal (neither
    an index nor a name). restate-server 1.7.12 fails such an attempt ("cannot decode entry", RT0012)
    and retries it, journaling nothing."""
    if f.type != MessageType.SendSignal:
        return ""
    send = pb.SendSignalCommandMessage.FromString(f.payload)
    if send.WhichOneof("signal_id") is None:
        return "a SendSignal command that names no signal (neither an index nor a name)"
    try:
        invocation_id_bytes(send.target_invocation_id)
    except BadRequest as exc:
        return f"a SendSignal command to no invocation: {exc.message}"
    return ""


def without_handled_cancel(journal: Journal, delivered: list[Frame], awaiting: AwaitPoint) -> AwaitPoint:
    """`awaiting` less the cancel signal (index 1) when the attempt was sent it and more is awaited.

    An SDK that handled a cancellation goes on naming the cancel signal in every later await point,
    beside what it really waits for (restate-sdk 1.3). That signal is already in the journal (or
    `delivered` with the attempt), so it must not wake the handler: resuming on it would re-invoke
    the handler at once, again and again, until what it really awaits arrives.
    """
    if 1 not in awaiting.signals or awaiting == AwaitPoint(signals=frozenset({1})):
        return awaiting
    if not journal.has("s1") and all(notification_key(f) != "s1" for f in delivered if is_notification(f.type)):
        return awaiting
    return replace(awaiting, signals=awaiting.signals - {1})


def _already_satisfied(
    journal: Journal, delivered: list[Frame], awaiting: AwaitPoint, suspension: pb.SuspensionMessage | None
) -> str:
    """The awaited notifications the attempt was sent, in words, if they satisfy the await point ("" if not).

    The SDK could have resumed from what it was sent (`journal`, then `delivered`): V5/V6 lists are
    any-of; in the V7 `awaiting_on` tree a first-completed (or unknown) node is done when one child
    is, every other node (all-completed, and, not knowing which results failed, first-succeeded and
    all-succeeded) when all its children are (Restate service protocol, Suspension and Future). The
    cancel signal (index 1) counts only when it is all the await point holds: an SDK that handled a
    cancellation goes on awaiting it beside what it really waits for. A named signal never counts:
    named signals queue, and the one sent may have been taken by an earlier await of that name.
    Notifications that arrive during the attempt are in neither `journal` nor `delivered`: they
    still wake the handler at once.
    """
    keys = {notification_key(f) for f in delivered if is_notification(f.type)}
    only_cancel = awaiting == AwaitPoint(signals=frozenset({1}))

    def sent(key: str) -> bool:  # a named signal sent may have been taken by an earlier await of its name
        return key[0] != "n" and (key != "s1" or only_cancel) and (journal.has(key) or key in keys)

    if suspension is None or not suspension.HasField("awaiting_on"):
        satisfied = any(map(sent, _leaves(awaiting)))
    else:
        lists = pb.Future(
            waiting_completions=suspension.waiting_completions,
            waiting_signals=suspension.waiting_signals,
            waiting_named_signals=suspension.waiting_named_signals,
        )  # V5/V6 fields: any-of
        satisfied = _done(lists, sent) or _done(suspension.awaiting_on, sent)
    if not satisfied:
        return ""
    done = [key for key in _leaves(awaiting) if sent(key)]
    parts = [
        _listed("completion id", sorted((k[1:] for k in done if k[0] == "c"), key=int)),
        _listed("signal", sorted((k[1:] for k in done if k[0] == "s"), key=int)),
        _listed("named signal", [clip(repr(k[1:]), 64) for k in sorted(done) if k[0] == "n"]),
    ]
    return " and ".join(p for p in parts if p)


def _leaves(awaiting: AwaitPoint) -> list[str]:
    """The notification keys (`c…`, `s…`, `n…`, see `notification_key`) an await point names."""
    return (
        [f"c{c}" for c in awaiting.completions]
        + [f"s{s}" for s in awaiting.signals]
        + [f"n{n}" for n in awaiting.named_signals]
    )


def _done(future: pb.Future, sent: Callable[[str], bool]) -> bool:
    """True if `future` (a V7 await tree node) is done when the notifications `sent` holds are."""
    children = [sent(f"c{c}") for c in future.waiting_completions]
    children += [sent(f"s{s}") for s in future.waiting_signals]
    children += [sent(f"n{n}") for n in future.waiting_named_signals]
    children += [_done(nested, sent) for nested in future.nested_futures]
    if not children:
        return False  # nothing to wait for here: not a reason to refuse
    if future.combinator_type in (pb.COMBINATOR_TYPE_UNKNOWN, pb.FIRST_COMPLETED):
        return any(children)
    return all(children)


def _listed(kind: str, items: list[str], shown: int = 10) -> str:
    """`completion ids 1, 2` (at most `shown` of them, then how many more); "" for none."""
    if not items:
        return ""
    more = f" and {len(items) - shown} more" if len(items) > shown else ""
    return f"{kind}{'s' if len(items) > 1 else ''} {', '.join(items[:shown])}{more}"


def _violation(
    what: str, entry: int | None, f: Frame | None = None, command_index: int | None = None
) -> AttemptFailure:
    """A 571 failure naming the offending entry (its position among the answer's new entries, its type)."""
    where = f" (new entry {entry})" if entry is not None else ""
    return AttemptFailure(
        571,
        f"the deployment's answer breaks the service protocol: {what}{where}",
        related_command_type=f.type if f is not None else None,
        related_command_index=command_index,
    )


def command_summary(f: Frame, index: int) -> dict[str, object]:
    """A command in a few words for `last_failure`: `index` (command index), `type`, `name` and,
    for what reaches another invocation, its `target` (a call's `service/[key/]handler`, an attach's
    or signal's invocation id, an attach by idempotency key's `service/[key/]handler with idempotency
    key K`, an attach to a workflow's `workflow/id`, an awakeable's id, a state or promise key)."""
    out: dict[str, object] = {"index": index, "type": type_name(f.type)}
    try:
        message = f.decode()
    except ProtocolViolation:
        return out
    if message is None:
        return out
    fields = {d.name: v for d, v in message.ListFields()}
    name = fields.get("entry_name" if f.type == MessageType.SendSignal else "name")
    if name:
        out["name"] = clip(str(name), 256)
    if "service_name" in fields:
        key = fields.get("key")
        out["target"] = "/".join(str(p) for p in (fields["service_name"], key, fields.get("handler_name", "")) if p)
    elif "target_invocation_id" in fields:
        out["target"] = fields["target_invocation_id"]
    elif "invocation_id" in fields:
        out["target"] = fields["invocation_id"]
    elif "idempotent_request_target" in fields:
        request = fields["idempotent_request_target"]
        path = "/".join(p for p in (request.service_name, request.service_key, request.handler_name) if p)
        out["target"] = f"{path} with idempotency key {request.idempotency_key}"
    elif "workflow_target" in fields:
        workflow = fields["workflow_target"]
        out["target"] = f"{workflow.workflow_name}/{workflow.workflow_key}"
    elif "awakeable_id" in fields:
        out["target"] = fields["awakeable_id"]
    elif isinstance(fields.get("key"), bytes | str):
        key = fields["key"]
        out["target"] = key.decode("utf-8", "replace") if isinstance(key, bytes) else key
    if "target" in out:
        out["target"] = clip(str(out["target"]), 256)
    return out


def _said(command: dict[str, object]) -> str:
    name = f" '{command['name']}'" if command.get("name") else ""
    target = f" to {command['target']}" if command.get("target") else ""
    return f"{command['type']}{name}{target} at command index {command['index']}"


def explain_mismatch(journal: Journal, failure: AttemptFailure) -> AttemptFailure:
    """Name both sides of a journal mismatch (570): the command the journal recorded at the index the
    SDK reports, and the one the handler now sends (kind, name, index; a call's target).

    The SDK reports the new command in `related_command_*` of its ErrorMessage; the recorded one is
    read from the journal. Returns `failure` with the recorded command added to its message and
    `recorded_command` set; any other failure is returned as it is.
    """
    index = failure.related_command_index
    if failure.code != 570 or index is None or not 0 <= index < len(journal.commands):
        return failure
    recorded = command_summary(journal.frames[journal.commands[index]], index)
    new: dict[str, object] = {"index": index, "type": type_name(failure.related_command_type or 0)}
    if failure.related_command_type is None:
        new["type"] = "unknown"
    if failure.related_command:
        new["name"] = failure.related_command
    text = f"journal mismatch: the journal recorded {_said(recorded)}; the handler now sends {_said(new)}"
    return replace(failure, message=clip(f"{text}\n{failure.message}", _MAX_MESSAGE_CHARS), recorded_command=recorded)
