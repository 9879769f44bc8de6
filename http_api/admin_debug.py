"""What the admin API adds for debugging: what a suspended invocation waits for, and who invoked it.

Both are derived at display time from what the store already keeps (the invocation record's
`waiting_on`, `caller_id` and `callers`, and its journal): no write per invocation pays for them.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Mapping
from typing import Any

from control_plane.durations import rfc3339
from control_plane.ids import FIRST_AWAKEABLE_SIGNAL, awakeable_id
from control_plane.journal import AwaitPoint, Journal
from control_plane.ports import InvocationRecord
from control_plane.protocol import MessageType, type_name

CANCEL_SIGNAL = 1
"""The built-in signal id of a cancel (Restate service protocol)."""

_PROMISE_TYPES = (MessageType.GetPromise, MessageType.PeekPromise, MessageType.CompletePromise)


def waiting_for(record: InvocationRecord, journal: Journal) -> list[dict[str, Any]]:
    """What a suspended invocation waits for, one item per awaited completion or signal, in words a
    person reads: `[]` unless `record.status` is `suspended`.

    Each item has `kind` and what names it:
    - `sleep`: `index` (journal index of the Sleep), `until` (RFC 3339 wake-up time);
    - `call`: `index`, `target` (`service/handler` or `service/key/handler`) and, once known,
      `invocation_id` (the callee's, from the journal's CallInvocationId notification);
    - `promise`: `index`, `name` (a workflow's durable promise);
    - `run`: `index`, `name` (a `ctx.run` whose result is not stored yet);
    - `command`: `index`, `type` (any other command awaited by its completion);
    - `completion`: `completion_id` (no command in the journal names it);
    - `awakeable`: `id` (`sign_1…`), `signal_id`;
    - `signal`: `signal_id` or `name` (a named signal).
    The cancel signal is left out: the SDK awaits it beside whatever the handler awaits.
    """
    if record.status != "suspended" or not record.waiting_on:
        return []
    point = AwaitPoint.from_json(dict(record.waiting_on))
    by_completion: dict[int, int] = {}
    callee_of: dict[int, str] = {}  # notification completion id -> callee invocation id
    for position, entry in enumerate(journal.frames):
        message: Any = entry.decode()
        if message is None:
            continue
        if entry.type == MessageType.CallInvocationIdCompletion:
            callee_of[message.completion_id] = message.invocation_id
        result_id = getattr(message, "result_completion_id", 0)
        if result_id:
            by_completion.setdefault(result_id, position)
    out: list[dict[str, Any]] = []
    for completion_id in sorted(point.completions):
        index = by_completion.get(completion_id)
        if index is None:
            out.append({"kind": "completion", "completion_id": completion_id})
            continue
        out.append(_awaited_command(journal, index, callee_of))
    for signal in sorted(point.signals):
        if signal == CANCEL_SIGNAL:
            continue  # the SDK awaits the cancel signal beside anything else: it says nothing
        if signal >= FIRST_AWAKEABLE_SIGNAL:
            out.append({"kind": "awakeable", "id": awakeable_id(record.invocation_id, signal), "signal_id": signal})
        else:
            out.append({"kind": "signal", "signal_id": signal})
    out.extend({"kind": "signal", "name": name} for name in sorted(point.named_signals))
    return out


def _awaited_command(journal: Journal, index: int, callee_of: Mapping[int, str]) -> dict[str, Any]:
    entry = journal.frames[index]
    message: Any = entry.decode()
    if entry.type == MessageType.Sleep:
        return {"kind": "sleep", "index": index, "until": rfc3339(message.wake_up_time)}
    if entry.type == MessageType.Call:
        target = (
            f"{message.service_name}/{message.key}/{message.handler_name}"
            if message.key
            else f"{message.service_name}/{message.handler_name}"
        )
        out: dict[str, Any] = {"kind": "call", "index": index, "target": target}
        callee = callee_of.get(message.invocation_id_notification_idx)
        if callee:
            out["invocation_id"] = callee
        return out
    if entry.type in _PROMISE_TYPES:
        return {"kind": "promise", "index": index, "name": message.key}
    if entry.type == MessageType.Run:
        return {"kind": "run", "index": index, "name": message.name}
    return {"kind": "command", "index": index, "type": type_name(entry.type)}


def awaited_by(record: InvocationRecord) -> list[str]:
    """The invocations waiting for this one's result beside the caller that created it (attached
    by a Call to the same workflow run or idempotency key): their ids, from `record.callers`
    (`"{caller_id}/{completion_id}"` each)."""
    return sorted({caller.rsplit("/", 1)[0] for caller in record.callers} - {record.caller_id})


class WaitsCache:
    """`waiting_for` of suspended invocations, kept per `(invocation id, epoch, modified_at_ms)`:
    a suspended invocation's journal does not change until its record does, so a list refreshed
    every 2 s reads each suspended journal once. Holds at most `size` entries (least recently used
    dropped); safe to share between the admin API's request threads."""

    def __init__(self, size: int = 2000) -> None:
        self.size = size
        self._items: OrderedDict[tuple[str, int, int], list[dict[str, Any]]] = OrderedDict()
        self._lock = threading.Lock()

    def get(self, record: InvocationRecord) -> list[dict[str, Any]] | None:
        """The cached answer for this version of `record`, or None."""
        key = self._key(record)
        with self._lock:
            found = self._items.get(key)
            if found is not None:
                self._items.move_to_end(key)
            return found

    def put(self, record: InvocationRecord, value: list[dict[str, Any]]) -> None:
        """Remember `value` for this version of `record`."""
        key = self._key(record)
        with self._lock:
            self._items[key] = value
            self._items.move_to_end(key)
            while len(self._items) > self.size:
                self._items.popitem(last=False)

    @staticmethod
    def _key(record: InvocationRecord) -> tuple[str, int, int]:
        return (record.invocation_id, record.epoch, record.modified_at_ms)
