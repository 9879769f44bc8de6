"""The journal of one invocation: its committed entries (commands and notifications), in order.

Entry 0 is the Input command (kept on the invocation record), the rest comes from the committed
batches. An entry index counts commands and notifications alike; `len(journal)` is what
`StartMessage.known_entries` carries (Restate service protocol, StartMessage).
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field

from control_plane.errors import ProtocolViolation
from control_plane.ports import JournalBatch
from control_plane.protocol import Frame, MessageType, decode_frames, is_notification
from control_plane.protocol import protocol_pb2 as pb


@dataclass(slots=True)
class Journal:
    """Committed entries plus an index of which notifications are present.

    `completions` holds the completion ids, `signals` the signal indexes and `named_signals` the
    signal names of every notification in the journal, so a suspension can be checked in O(leaves).
    """

    frames: list[Frame] = field(default_factory=list)
    completions: set[int] = field(default_factory=set)
    signals: set[int] = field(default_factory=set)
    named_signals: set[str] = field(default_factory=set)

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
        """Append committed entries and index their notification ids."""
        self.frames.extend(frames)
        for f in frames:
            if not is_notification(f.type):
                continue
            if f.type == MessageType.Signal:
                signal = pb.SignalNotificationMessage.FromString(f.payload)
                if signal.WhichOneof("signal_id") == "idx":
                    self.signals.add(signal.idx)
                else:
                    self.named_signals.add(signal.name)
            else:
                self.completions.add(pb.NotificationTemplate.FromString(f.payload).completion_id)

    def output(self) -> pb.OutputCommandMessage | None:
        """The Output command, if the handler wrote one (it is the last command it writes)."""
        for f in reversed(self.frames):
            if f.type == MessageType.Output:
                return pb.OutputCommandMessage.FromString(f.payload)
        return None

    def can_resume(self, awaiting: AwaitPoint) -> bool:
        """True if a notification the suspended handler awaits is present.

        The runtime resumes as soon as a new notification could unblock the await point (Restate
        service protocol, "Suspension and await tracking"): any leaf of the future tree will do.
        """
        return (
            not self.completions.isdisjoint(awaiting.completions)
            or not self.signals.isdisjoint(awaiting.signals)
            or not self.named_signals.isdisjoint(awaiting.named_signals)
        )


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
