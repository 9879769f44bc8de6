"""What a journal entry touches, by name: the one place every view (admin API, `torpor invocations
describe`, the web UI, `sys_journal`) reads it from.

restate-server's `restate invocations describe` prints, after an entry's type and `[name]`, what the
entry touches: `key email` for a state or promise command, `Tally/w1/add inv_1…` for a call or send,
`until 2026-…` for a sleep, `id sign_1…` for a CompleteAwakeable, `signal … to inv_1…` for a
SendSignal. `name_entry` derives those from the entry's protocol message (Restate service protocol
V5+, journal v2) and, for what the message alone does not say (a callee's invocation id is in the
CallInvocationId notification stored beside its command; an awakeable's id is derived from the
invocation id and the signal index), from the rest of the journal.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from control_plane.durations import rfc3339
from control_plane.errors import ProtocolViolation
from control_plane.ids import FIRST_AWAKEABLE_SIGNAL, awakeable_id
from control_plane.protocol import Frame, MessageType, is_command, is_notification, type_name
from control_plane.protocol import protocol_pb2 as pb

BUILT_IN_SIGNALS = {1: "Cancel"}
"""Signal indexes below `FIRST_AWAKEABLE_SIGNAL` that have a meaning (Restate: `BuiltInSignal`)."""

_STATE_MESSAGES = (
    pb.GetLazyStateCommandMessage,
    pb.GetEagerStateCommandMessage,
    pb.SetStateCommandMessage,
    pb.ClearStateCommandMessage,
)
_PROMISE_MESSAGES = (pb.GetPromiseCommandMessage, pb.PeekPromiseCommandMessage, pb.CompletePromiseCommandMessage)
_CALLS = frozenset({MessageType.Call, MessageType.OneWayCall})
_ATTACH_COMMANDS = frozenset({MessageType.AttachInvocation, MessageType.GetInvocationOutput})


@dataclass(frozen=True, slots=True)
class CallTarget:
    """Whom a Call or OneWayCall invokes: `service`, `handler`, and `key` for a virtual object or
    workflow (None for a plain service)."""

    service: str
    handler: str
    key: str | None = None

    def __str__(self) -> str:
        """`Service/handler`, or `Service/key/handler` (Restate's invocation target)."""
        return f"{self.service}/{self.key}/{self.handler}" if self.key is not None else f"{self.service}/{self.handler}"


@dataclass(frozen=True, slots=True)
class EntryNaming:
    """What one journal entry touches. Only the fields its kind has are set; the rest are None.

    - `entry_type`: `Command: SetState`, `Notification: Sleep`, `Notification: Signal`, ... (Restate's
      `sys_journal.entry_type`); a custom entry is its type code in hex.
    - `name`: the command's own name (a run's name; `""` when the SDK gave none); None for a
      notification, which has none.
    - `state_key`: the state key of GetState (lazy or eager), SetState, ClearState.
    - `promise_name`: the durable promise of GetPromise, PeekPromise, CompletePromise.
    - `target`, `invoked_id`: a Call's or OneWayCall's callee and its invocation id (from the
      CallInvocationId notification; None if the journal has none yet); the invocation id an
      AttachInvocation or GetInvocationOutput reads (`target` None then), or the one a SendSignal
      signals.
    - `attach_to`: what an AttachInvocation or GetInvocationOutput reads when it names no invocation
      id: `workflow Signup/ann` or `Service/key/handler idempotency key K`.
    - `wake_up_at_ms`: a Sleep's due time; `invoke_at_ms` a delayed OneWayCall's (epoch ms).
    - `awakeable_id`: the awakeable a CompleteAwakeable completes, or that a Signal notification
      completes (signal index >= 17).
    - `signal`: a SendSignal's or Signal notification's signal: `Cancel`, `index N` or its name.
    - `completion_id`: which command a completion notification answers.
    """

    entry_type: str
    name: str | None = None
    state_key: str | None = None
    promise_name: str | None = None
    target: CallTarget | None = None
    invoked_id: str | None = None
    attach_to: str | None = None
    wake_up_at_ms: int | None = None
    invoke_at_ms: int | None = None
    awakeable_id: str | None = None
    signal: str | None = None
    completion_id: int | None = None

    def details(self) -> str:
        """What the entry touches in a few words, as Restate's CLI words it after the entry type:
        `key email`, `promise approval`, `Tally/w1/add inv_1…`, `until 2026-…Z`, `id sign_1…`,
        `signal index 17 to inv_1…`, `awakeable sign_1…`; `""` when it touches nothing named."""
        if self.state_key is not None:
            return f"key {self.state_key}"
        if self.promise_name is not None:
            return f"promise {self.promise_name}"
        if self.target is not None:
            words = f"{self.target} {self.invoked_id}" if self.invoked_id else str(self.target)
            return words + (f" at {rfc3339(self.invoke_at_ms)}" if self.invoke_at_ms else "")
        if self.wake_up_at_ms is not None:
            return f"until {rfc3339(self.wake_up_at_ms)}"
        if self.signal is not None and self.invoked_id is not None:
            return f"signal {self.signal} to {self.invoked_id}"
        if self.awakeable_id is not None:
            return (
                f"id {self.awakeable_id}" if self.entry_type.startswith("Command") else f"awakeable {self.awakeable_id}"
            )
        if self.invoked_id is not None:
            return self.invoked_id
        if self.attach_to is not None:
            return self.attach_to
        if self.signal is not None:
            return f"signal {self.signal}"
        return ""


def entry_type(message_type: int) -> str:
    """`Command: Sleep`, `Notification: Sleep`, `Notification: Signal`, ...: Restate's journal v2
    entry type words (`sys_journal.entry_type`); a custom entry is its type code (`0xfc01`)."""
    name = type_name(message_type)
    if is_command(message_type):
        return f"Command: {name}"
    if is_notification(message_type):
        return f"Notification: {name.removesuffix('Completion')}"
    return name


def signal_words(index: int | None, name: str | None) -> str:
    """A signal in words: `Cancel` (built-in), `index 17`, or its name."""
    if index is None:
        return name or ""
    return BUILT_IN_SIGNALS.get(index, f"index {index}")


def callee_ids(entries: Iterable[Frame]) -> dict[int, str]:
    """`{completion id: invocation id}` from a journal's CallInvocationId notifications: each Call's
    or OneWayCall's callee, keyed as the command names it (`invocation_id_notification_idx`)."""
    found: dict[int, str] = {}
    for entry in entries:
        if entry.type == MessageType.CallInvocationIdCompletion:
            try:
                message = entry.decode()
            except ProtocolViolation:  # named by its type alone, as `name_entry` does
                continue
            if isinstance(message, pb.CallInvocationIdCompletionNotificationMessage):
                found[message.completion_id] = message.invocation_id
    return found


def name_journal(invocation_id: str, entries: Iterable[Frame]) -> list[EntryNaming]:
    """`name_entry` of every entry of one invocation's journal, in order (callee ids read from it)."""
    journal = list(entries)
    callees = callee_ids(journal)
    return [name_entry(entry, invocation_id, callees) for entry in journal]


def name_entry(entry: Frame, invocation_id: str = "", callees: Mapping[int, str] | None = None) -> EntryNaming:
    """What `entry` touches (see `EntryNaming`). `invocation_id` is the journal's own invocation (for
    the id of an awakeable a Signal notification completes); `callees` maps a Call's
    `invocation_id_notification_idx` to its callee (`callee_ids`). An entry whose payload does not
    parse is named by its type alone."""
    kind = entry_type(entry.type)
    try:
        message = entry.decode()
    except ProtocolViolation:  # a stored entry is well-formed; a view must not fail on one that is not
        message = None
    if message is None:
        return EntryNaming(kind, name="" if is_command(entry.type) else None)
    t = entry.type
    if t == MessageType.SendSignal:
        assert isinstance(message, pb.SendSignalCommandMessage)
        index = message.idx if message.WhichOneof("signal_id") == "idx" else None
        return EntryNaming(
            kind,
            name=message.entry_name,
            invoked_id=message.target_invocation_id,
            signal=signal_words(index, message.name),
        )
    if t == MessageType.Signal:
        assert isinstance(message, pb.SignalNotificationMessage)
        index = message.idx if message.WhichOneof("signal_id") == "idx" else None
        awakeable = (
            awakeable_id(invocation_id, index)
            if index is not None and index >= FIRST_AWAKEABLE_SIGNAL and invocation_id
            else None
        )
        return EntryNaming(kind, signal=signal_words(index, message.name), awakeable_id=awakeable)
    if is_notification(t):
        return EntryNaming(kind, completion_id=getattr(message, "completion_id", None))
    if not is_command(t):
        return EntryNaming(kind)
    name = str(getattr(message, "name", ""))
    if isinstance(message, _STATE_MESSAGES):
        return EntryNaming(kind, name=name, state_key=message.key.decode("utf-8", "replace"))
    if isinstance(message, _PROMISE_MESSAGES):
        return EntryNaming(kind, name=name, promise_name=message.key)
    if t in _CALLS:
        assert isinstance(message, pb.CallCommandMessage | pb.OneWayCallCommandMessage)
        target = CallTarget(message.service_name, message.handler_name, message.key or None)
        invoke_at = message.invoke_time if isinstance(message, pb.OneWayCallCommandMessage) else 0
        return EntryNaming(
            kind,
            name=name,
            target=target,
            invoked_id=(callees or {}).get(message.invocation_id_notification_idx),
            invoke_at_ms=invoke_at or None,
        )
    if t == MessageType.Sleep:
        assert isinstance(message, pb.SleepCommandMessage)
        return EntryNaming(kind, name=name, wake_up_at_ms=message.wake_up_time)
    if t == MessageType.CompleteAwakeable:
        assert isinstance(message, pb.CompleteAwakeableCommandMessage)
        return EntryNaming(kind, name=name, awakeable_id=message.awakeable_id)
    if t in _ATTACH_COMMANDS:
        assert isinstance(message, pb.AttachInvocationCommandMessage | pb.GetInvocationOutputCommandMessage)
        which = message.WhichOneof("target")
        if which == "invocation_id":
            return EntryNaming(kind, name=name, invoked_id=message.invocation_id)
        if which == "workflow_target":
            workflow = message.workflow_target
            return EntryNaming(kind, name=name, attach_to=f"workflow {workflow.workflow_name}/{workflow.workflow_key}")
        if which == "idempotent_request_target":
            request = message.idempotent_request_target
            key = request.service_key if request.HasField("service_key") else None
            target = CallTarget(request.service_name, request.handler_name, key)
            return EntryNaming(kind, name=name, attach_to=f"{target} idempotency key {request.idempotency_key}")
    return EntryNaming(kind, name=name)
