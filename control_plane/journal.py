"""The journal of one invocation: its committed entries (commands and notifications), in order.

Entry 0 is the Input command (kept on the invocation record), the rest comes from the committed
batches. An entry index counts commands and notifications alike; `len(journal)` is what
`StartMessage.known_entries` carries (Restate service protocol, StartMessage).
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

from control_plane.errors import ProtocolViolation
from control_plane.ports import JournalBatch
from control_plane.protocol import (
    COMPLETABLE,
    MESSAGE_CLASSES,
    Frame,
    MessageType,
    decode_frames,
    encode_frames,
    frame,
    is_command,
    is_custom,
    is_notification,
)
from control_plane.protocol import protocol_pb2 as pb


@dataclass(slots=True)
class Journal:
    """Committed entries plus an index of which notifications are present.

    `completions` holds the completion ids and `signals` the signal indexes of every notification
    in the journal, so a suspension can be checked in O(leaves); `named_signals` counts the
    notifications of each signal name (named signals queue: each one sent is journaled).
    """

    frames: list[Frame] = field(default_factory=list)
    completions: set[int] = field(default_factory=set)
    signals: set[int] = field(default_factory=set)
    named_signals: dict[str, int] = field(default_factory=dict)
    sleeps: dict[int, int] = field(default_factory=dict)  # completion id -> wake_up_time (ms) of each Sleep
    derived: dict[int, Frame] = field(default_factory=dict)  # completion id -> command the runtime completes
    calls: dict[int, int] = field(default_factory=dict)  # result completion id -> journal index of the Call
    issued: set[int] = field(default_factory=set)  # completion ids some command was given
    runs: set[int] = field(default_factory=set)  # result completion ids of the Run commands
    commands: list[int] = field(default_factory=list)  # journal index of each command (command index -> entry)
    outputs: int = 0  # Output commands in the journal (at most one is valid)

    @classmethod
    def load(cls, input_entry: bytes, batches: Iterable[JournalBatch]) -> Journal:
        """Rebuild a journal from the framed Input command and the committed batches.

        Raises `ProtocolViolation` if the batches leave a gap or overlap (a corrupt journal).
        """
        journal = cls()
        journal.extend(decode_frames(input_entry))
        for batch in batches:
            if batch.start_index != len(journal):
                raise ProtocolViolation(
                    f"journal batch at index {batch.start_index} does not follow the {len(journal)} entries before it"
                )
            journal.extend(decode_frames(batch.entries))
        return journal

    def __len__(self) -> int:
        return len(self.frames)

    def __iter__(self) -> Iterator[Frame]:
        return iter(self.frames)

    def extend(self, frames: Sequence[Frame]) -> None:
        """Append committed entries and index their notification ids, sleeps and calls."""
        first = len(self.frames)
        self.frames.extend(frames)
        for offset, f in enumerate(frames):
            if is_command(f.type) or is_custom(f.type):
                self._index_command(first + offset, f)
            if f.type == MessageType.Call:
                self.calls[pb.CallCommandMessage.FromString(f.payload).result_completion_id] = first + offset
                continue
            if f.type == MessageType.Sleep:
                sleep = pb.SleepCommandMessage.FromString(f.payload)
                self.sleeps[sleep.result_completion_id] = sleep.wake_up_time
                continue
            if f.type in RUNTIME_COMPLETED:
                self.derived[RUNTIME_COMPLETED[f.type].FromString(f.payload).result_completion_id] = f
                continue
            if not is_notification(f.type):
                continue
            key = notification_key(f)
            if key[0] == "s":
                self.signals.add(int(key[1:]))
            elif key[0] == "n":
                self.named_signals[key[1:]] = self.named_signals.get(key[1:], 0) + 1
            else:
                self.completions.add(int(key[1:]))

    def _index_command(self, index: int, f: Frame) -> None:
        """Record a command's position and the completion ids it was given (Run's apart)."""
        self.commands.append(index)
        if f.type == MessageType.Output:
            self.outputs += 1
            return
        given = completion_ids(f)
        self.issued.update(given)
        if f.type == MessageType.Run:
            self.runs.update(given)

    def has(self, key: str) -> bool:
        """True if the notification with this key (see `notification_key`, or a stored named
        signal's `named_signal_key`) is in the journal: the `seq`-th signal of a name is once the
        journal holds more than `seq` of that name."""
        kind, rest = key[0], key[1:]
        if kind == "c":
            return int(rest) in self.completions
        if kind == "s":
            return int(rest) in self.signals
        if kind == "q":
            seq, name = parse_named_signal_key(key)
            return self.named_signals.get(name, 0) > seq
        return rest in self.named_signals

    def open_sleeps(self) -> dict[int, int]:
        """`{completion_id: wake_up_time_ms}` of the sleeps not completed yet."""
        return {cid: at for cid, at in self.sleeps.items() if cid not in self.completions}

    def open_calls(self) -> list[tuple[int, int]]:
        """`(result completion id, journal index)` of the calls whose result is not in yet."""
        return [(cid, index) for cid, index in self.calls.items() if cid not in self.completions]

    def open_commands(self) -> list[tuple[int, Frame]]:
        """`(completion_id, command)` of state and promise commands still waiting for the runtime."""
        return [(cid, f) for cid, f in self.derived.items() if cid not in self.completions]

    def output(self) -> pb.OutputCommandMessage | None:
        """The Output command, if the handler wrote one (it is the last command it writes)."""
        for f in reversed(self.frames):
            if f.type == MessageType.Output:
                return pb.OutputCommandMessage.FromString(f.payload)
        return None

    def can_resume(self, awaiting: AwaitPoint) -> bool:
        """True if a notification the suspended handler awaits is present.

        The runtime resumes as soon as a new notification could unblock the await point (Restate
        service protocol, "Suspension and await tracking"): any leaf of the future tree will do. A
        named signal in the journal does not count: the handler may have taken it at an earlier
        await of that name (each await takes the next one), so only one not yet journaled wakes it.
        """
        return not self.completions.isdisjoint(awaiting.completions) or not self.signals.isdisjoint(awaiting.signals)


def completion_ids(f: Frame) -> list[int]:
    """The completion ids a command is given, in field order: its `result_completion_id`, and for a
    Call or OneWayCall its `invocation_id_notification_idx` (a Call has both). Empty for a command
    that nothing completes (SetState, Output, ...). Raises `DecodeError` for a malformed payload."""
    if f.type not in COMPLETABLE:
        return []
    message = MESSAGE_CLASSES[MessageType(f.type)].FromString(f.payload)
    out = []
    if f.type != MessageType.OneWayCall:
        out.append(message.result_completion_id)  # type: ignore[attr-defined]
    if f.type in (MessageType.Call, MessageType.OneWayCall):
        out.append(message.invocation_id_notification_idx)  # type: ignore[attr-defined]
    return out


RUNTIME_COMPLETED: dict[int, Any] = {  # Frame.type is a plain int; MessageType values hash alike
    MessageType.GetLazyState: pb.GetLazyStateCommandMessage,
    MessageType.GetLazyStateKeys: pb.GetLazyStateKeysCommandMessage,
    MessageType.GetPromise: pb.GetPromiseCommandMessage,
    MessageType.PeekPromise: pb.PeekPromiseCommandMessage,
    MessageType.CompletePromise: pb.CompletePromiseCommandMessage,
}
"""Commands whose completion the lease holder derives from stored state or promises, when it can."""


def sleep_completion(completion_id: int) -> Frame:
    """The SleepCompletionNotification (void) of the sleep whose result is `completion_id`."""
    return frame(pb.SleepCompletionNotificationMessage(completion_id=completion_id, void=pb.Void()))


def notification_key(entry: Frame) -> str:
    """`c{completion_id}`, `s{signal_index}` or `n{signal_name}`: what a notification completes.

    Every notification shares the field numbers of `NotificationTemplate` (Restate service protocol,
    "Notification shape"), so one decode serves them all.
    """
    template = pb.NotificationTemplate.FromString(entry.payload)
    which = template.WhichOneof("id")
    if which == "signal_id":
        return f"s{template.signal_id}"
    if which == "signal_name":
        return f"n{template.signal_name}"
    return f"c{template.completion_id}"


def awaited(awaiting: AwaitPoint, keys: Iterable[str]) -> bool:
    """True if any notification key in `keys` (`notification_key`, `named_signal_key`) is a leaf of `awaiting`."""
    for key in keys:
        kind, rest = key[0], key[1:]
        if (
            (kind == "c" and int(rest) in awaiting.completions)
            or (kind == "s" and int(rest) in awaiting.signals)
            or (kind == "n" and rest in awaiting.named_signals)
            or (kind == "q" and parse_named_signal_key(key)[1] in awaiting.named_signals)
        ):
            return True
    return False


SIGNAL_SENDER = 0xFFFF
"""The type code of the frame that follows a stored named signal's notification in its stored
entry, its payload the sender (`named_signal_entry`). It never reaches a journal or a deployment."""

_SEQ_DIGITS = 8


def named_signal_key(seq: int, name: str) -> str:
    """The stored key of the `seq`-th (0, 1, ...) signal named `name` sent to an invocation:
    `q{seq:08d}{name}`. Named signals queue: the handler's k-th await of a name takes the k-th
    signal of that name (restate-server 1.7.12 journals each one sent; restate-sdk 1.3 hands them
    out in order), so each one sent is kept under its own key, in the order they were stored."""
    return f"q{seq:0{_SEQ_DIGITS}d}{name}"


def parse_named_signal_key(key: str) -> tuple[int, str]:
    """`(seq, name)` of a `named_signal_key`."""
    return int(key[1 : 1 + _SEQ_DIGITS]), key[1 + _SEQ_DIGITS :]


def named_signal_entry(signal: Frame, sender: str) -> bytes:
    """The stored entry of a named signal: its notification, then the sender (`SIGNAL_SENDER`), so
    whoever stores it again (a SendSignal's effect applied again) finds it is there already."""
    return encode_frames([signal, Frame(SIGNAL_SENDER, sender.encode())])


def stored_frames(entry: bytes) -> list[Frame]:
    """The notifications of a stored entry, without the sender of a named signal."""
    return [f for f in decode_frames(entry) if f.type != SIGNAL_SENDER]


def stored_sender(entry: bytes) -> str:
    """The sender recorded in a stored named signal's entry ("" if none)."""
    return next((bytes(f.payload).decode() for f in decode_frames(entry) if f.type == SIGNAL_SENDER), "")


@dataclass(frozen=True, slots=True)
class AwaitPoint:
    """The leaves of what a suspended handler awaits (V5/V6 lists, or the V7 future tree flattened)."""

    completions: frozenset[int] = frozenset()
    signals: frozenset[int] = frozenset()
    named_signals: frozenset[str] = frozenset()

    @classmethod
    def of(cls, suspension: pb.SuspensionMessage) -> AwaitPoint:
        """Flatten a SuspensionMessage: V5/V6 `waiting_*` fields and the V7 `awaiting_on` tree."""
        completions = set(suspension.waiting_completions)
        signals = set(suspension.waiting_signals)
        named = set(suspension.waiting_named_signals)
        stack = [suspension.awaiting_on] if suspension.HasField("awaiting_on") else []
        while stack:
            future = stack.pop()
            completions.update(future.waiting_completions)
            signals.update(future.waiting_signals)
            named.update(future.waiting_named_signals)
            stack.extend(future.nested_futures)
        return cls(frozenset(completions), frozenset(signals), frozenset(named))

    def to_json(self) -> dict[str, list[int] | list[str]]:
        """`{"completions": [...], "signals": [...], "named_signals": [...]}` for the store and the API."""
        return {
            "completions": sorted(self.completions),
            "signals": sorted(self.signals),
            "named_signals": sorted(self.named_signals),
        }

    @classmethod
    def from_json(cls, data: object) -> AwaitPoint:
        """Inverse of `to_json`; an absent value means nothing awaited."""
        if not isinstance(data, dict):
            return cls()
        return cls(
            frozenset(int(x) for x in data.get("completions", ())),
            frozenset(int(x) for x in data.get("signals", ())),
            frozenset(str(x) for x in data.get("named_signals", ())),
        )
