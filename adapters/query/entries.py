"""Journal entries as restate-server 1.7 writes them in `sys_journal.entry_json` and `entry_lite_json`.

restate-server serializes its journal v2 `Entry` with serde: an externally tagged enum
(`{"Command": {"SetState": {...}}}`, `{"Notification": {"Completion": {"Run": {...}}}}`,
`{"Notification": {"Signal": {...}}}`), bytes as arrays of numbers, durations as `{"secs", "nanos"}`,
times as ms since the epoch. Restate's CLI (`restate invocations describe`) parses `entry_json` back
into that type to print what an entry touches (`SetState key email`, `Call Tally/w1/add inv_1…`), so
the shape must be exact; `entry_lite_json` is the same without values (Restate's `EntryLite`).

What Torpor does not keep is written as restate-server writes it for an invocation without it: a
call's `span_context` is the empty one (no tracing), its `completion_retention_duration` and
`journal_retention_duration` are 0 s (the callee's retention is its service's, not the call's).
The names come from `control_plane.entry_names` (the same naming every view uses).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from typing import Any

from control_plane import ids
from control_plane.entry_names import EntryNaming
from control_plane.errors import ProtocolViolation
from control_plane.protocol import Frame, MessageType, is_command, is_notification, type_name
from control_plane.protocol import protocol_pb2 as pb

ServiceKinds = Mapping[str, tuple[str, Mapping[str, str]]]
"""`{service name: (SERVICE | VIRTUAL_OBJECT | WORKFLOW, {handler: EXCLUSIVE | SHARED | WORKFLOW})}`:
what a call target's `InvocationTarget` needs (its service type and handler type)."""

_EMPTY_SPAN = {
    "span_context": {
        "trace_id": [0] * 16,
        "span_id": [0] * 8,
        "trace_flags": 0,
        "is_remote": False,
        "trace_state": "",
    },
    "cause": None,
}
_ZERO = {"secs": 0, "nanos": 0}


def entry_json(entry: Frame, naming: EntryNaming, kinds: ServiceKinds, full: bool = True) -> dict[str, Any] | None:
    """restate-server's serde JSON of one entry (`full`) or of its `EntryLite` (not `full`); None for
    a custom entry or one whose payload does not parse (restate-server has neither)."""
    try:
        message = entry.decode()
    except ProtocolViolation:  # a view must not fail on an entry it cannot read
        return None
    if message is None:
        return None
    name = type_name(entry.type)
    if is_command(entry.type):
        body = _command(entry.type, message, naming, kinds, full)
        return None if body is None else {"Command": {name: body}}
    if is_notification(entry.type):
        return {"Notification": _notification(entry.type, message, full)}
    return None


def _bytes(data: bytes) -> list[int]:
    return list(data)


def _failure(failure: pb.Failure) -> dict[str, Any]:
    out: dict[str, Any] = {"code": failure.code, "message": failure.message}
    if failure.metadata:
        out["metadata"] = [{"key": m.key, "value": m.value} for m in failure.metadata]
    return out


def _result(message: Any, oneof: str, full: bool) -> Any:
    """A oneof result as Restate's `*Result` enum: `"Void"`, `{"Success": [...]}`, `{"Failure": {...}}`
    (lite: the variant's name alone); None when unset."""
    which = message.WhichOneof(oneof)
    if which is None:
        return None
    if which == "void":
        return "Void"
    field = getattr(message, which)
    if isinstance(field, pb.Failure):
        return {"Failure": _failure(field)} if full else "Failure"
    content = field.content if isinstance(field, pb.Value) else field
    return {"Success": _bytes(content)} if full else "Success"


def invocation_target(naming: EntryNaming, kinds: ServiceKinds) -> dict[str, Any] | None:
    """A call's callee as Restate's `InvocationTarget`: `{"Service": {name, handler, scope}}`, or
    `{"VirtualObject" | "Workflow": {name, key, handler, handler_ty, scope}}`."""
    target = naming.target
    if target is None:
        return None
    if target.key is None:
        return {"Service": {"name": target.service, "handler": target.handler, "scope": None}}
    ty, handlers = kinds.get(target.service, ("VIRTUAL_OBJECT", {}))
    handler_ty = handlers.get(target.handler, "")
    if ty == "WORKFLOW":
        kind, words = "Workflow", "Workflow" if handler_ty == "WORKFLOW" else "Shared"
    else:
        kind, words = "VirtualObject", "Shared" if handler_ty == "SHARED" else "Exclusive"
    body = {"name": target.service, "key": target.key, "handler": target.handler, "handler_ty": words, "scope": None}
    return {kind: body}


def _call(message: Any, naming: EntryNaming, kinds: ServiceKinds, full: bool) -> dict[str, Any] | None:
    target = invocation_target(naming, kinds)
    if naming.invoked_id is None or target is None:
        return None  # restate-server always knows the callee; an entry without it cannot be parsed
    if not full:
        return {"invocation_id": naming.invoked_id, "invocation_target": target}
    request = {
        "invocation_id": naming.invoked_id,
        "invocation_target": target,
        "span_context": _EMPTY_SPAN,
        "parameter": _bytes(message.parameter),
        "headers": [{"name": h.key, "value": h.value} for h in message.headers],
        "idempotency_key": message.idempotency_key if message.HasField("idempotency_key") else None,
        "completion_retention_duration": _ZERO,
        "journal_retention_duration": _ZERO,
    }
    if message.HasField("limit_key"):
        request["limit_key"] = message.limit_key
    return {"request": request}


def _attach_target(message: Any) -> dict[str, Any] | None:
    which = message.WhichOneof("target")
    if which == "invocation_id":
        return {"InvocationId": message.invocation_id}
    if which == "workflow_target":
        w = message.workflow_target
        return {
            "Workflow": {
                "service_name": w.workflow_name,
                "key": w.workflow_key,
                "partition_key": ids.partition_key_number(ids.workflow_run_id(w.workflow_name, w.workflow_key)),
                "scope": w.scope if w.HasField("scope") else None,
            }
        }
    if which == "idempotent_request_target":
        r = message.idempotent_request_target
        key = r.service_key if r.HasField("service_key") else None
        run_id = ids.idempotent_invocation_id(r.service_name, r.handler_name, key or "", r.idempotency_key)
        return {
            "IdempotentRequest": {
                "service_name": r.service_name,
                "service_key": key,
                "service_handler": r.handler_name,
                "idempotency_key": r.idempotency_key,
                "scope": r.scope if r.HasField("scope") else None,
                "partition_key": ids.partition_key_number(run_id),
            }
        }
    return None


def _command(t: int, m: Any, naming: EntryNaming, kinds: ServiceKinds, full: bool) -> dict[str, Any] | None:
    """The body of `{"Command": {Type: body}}` (lite: without values), or None if it cannot be written."""
    out: dict[str, Any]
    if t == MessageType.Input:
        out = {"headers": [{"name": h.key, "value": h.value} for h in m.headers], "payload": _bytes(m.value.content)}
        out = out if full else {}
    elif t == MessageType.Output:
        out = {"result": _result(m, "result", full)}
    elif t in (MessageType.GetLazyState, MessageType.GetPromise, MessageType.PeekPromise):
        out = {"key": naming.state_key if t == MessageType.GetLazyState else naming.promise_name}
        out["completion_id"] = m.result_completion_id
    elif t == MessageType.SetState:
        out = {"key": naming.state_key, **({"value": _bytes(m.value.content)} if full else {})}
    elif t == MessageType.ClearState:
        out = {"key": naming.state_key}
    elif t == MessageType.ClearAllState:
        out = {}
    elif t == MessageType.GetEagerStateKeys:
        out = {"state_keys": [k.decode("utf-8", "replace") for k in m.value.keys]} if full else {}
    elif t == MessageType.GetLazyStateKeys:
        out = {"completion_id": m.result_completion_id}
    elif t == MessageType.GetEagerState:
        out = {"key": naming.state_key, "result": _result(m, "result", full)}
    elif t == MessageType.CompletePromise:
        out = {"key": naming.promise_name, **({"value": _result(m, "completion", True)} if full else {})}
        out["completion_id"] = m.result_completion_id
    elif t == MessageType.Sleep:
        out = {"wake_up_time": m.wake_up_time, "completion_id": m.result_completion_id}
    elif t == MessageType.Call:
        call = _call(m, naming, kinds, full)
        if call is None:
            return None
        ids_ = {"invocation_id_completion_id": m.invocation_id_notification_idx}
        out = {**call, **ids_, "result_completion_id": m.result_completion_id}
    elif t == MessageType.OneWayCall:
        call = _call(m, naming, kinds, full)
        if call is None:
            return None
        out = {**call, "invoke_time": m.invoke_time, "invocation_id_completion_id": m.invocation_id_notification_idx}
    elif t == MessageType.SendSignal:
        which = m.WhichOneof("signal_id")
        signal_id = {"Index": m.idx} if which == "idx" else {"Name": m.name}
        out = {
            "target_invocation_id": m.target_invocation_id,
            "signal_id": signal_id,
            "result": _result(m, "result", full),
        }
        return {**out, "name": m.entry_name} if full else out
    elif t == MessageType.Run:
        out = {"completion_id": m.result_completion_id}
    elif t in (MessageType.AttachInvocation, MessageType.GetInvocationOutput):
        target = _attach_target(m)
        if target is None:
            return None
        out = {"target": target, "completion_id": m.result_completion_id}
    elif t == MessageType.CompleteAwakeable:
        out = {"id": m.awakeable_id, "result": _result(m, "result", full)}
    else:
        return None
    if full:
        out["name"] = m.name
    elif m.name and t in (MessageType.Sleep, MessageType.Call, MessageType.OneWayCall, MessageType.Run):
        out["name"] = m.name  # EntryLite keeps these four's names, when not empty
    return out


_NOTIFICATION_RESULTS = {
    MessageType.CallInvocationIdCompletion: "InvocationId",
    MessageType.GetLazyStateKeysCompletion: "StateKeys",
    MessageType.SleepCompletion: "Void",
}


def _notification(t: int, m: Any, full: bool) -> dict[str, Any]:
    """The body of `{"Notification": ...}`: `{"Completion": {Type: {...}}}` or `{"Signal": {...}}`
    (lite: `{"ty", "id", "result"}`)."""
    if t == MessageType.Signal:
        which = m.WhichOneof("signal_id")
        result = _result(m, "result", full)
        if full:
            return {"Signal": {"id": {"Index": m.idx} if which == "idx" else {"Name": m.name}, "result": result}}
        signal_id = {"SignalIndex": m.idx} if which == "idx" else {"SignalName": m.name}
        return {"ty": "Signal", "id": signal_id, "result": result}
    name = type_name(t).removesuffix("Completion")
    if not full:
        result = _NOTIFICATION_RESULTS.get(MessageType(t)) or _result(m, "result", False) or "Void"
        return {"ty": {"Completion": name}, "id": {"CompletionId": m.completion_id}, "result": result}
    body: dict[str, Any] = {"completion_id": m.completion_id}
    if t == MessageType.CallInvocationIdCompletion:
        body["invocation_id"] = m.invocation_id
    elif t == MessageType.GetLazyStateKeysCompletion:
        body["state_keys"] = [k.decode("utf-8", "replace") for k in m.state_keys.keys]
    elif t != MessageType.SleepCompletion:
        body["result"] = _result(m, "result", True) or "Void"
    return {"Completion": {name: body}}


def service_kinds(services: Mapping[str, Any]) -> dict[str, tuple[str, dict[str, str]]]:
    """`ServiceKinds` from `{name: ServiceRecord}` (its type and its manifest's handler types; a
    virtual object's handler without one is exclusive, as the manifest's default)."""
    out: dict[str, tuple[str, dict[str, str]]] = {}
    for name, service in services.items():
        handlers: dict[str, str] = {}
        for handler in service.manifest.get("handlers") or []:
            if isinstance(handler, Mapping) and isinstance(handler.get("name"), str):
                handlers[handler["name"]] = str(handler.get("ty") or "")
        out[name] = (service.ty, handlers)
    return out


class LazyServiceKinds(Mapping[str, tuple[str, Mapping[str, str]]]):
    """`ServiceKinds` read on first use from `load()` (`{name: ServiceRecord}`), so a query whose
    journals call no virtual object or workflow reads no services."""

    def __init__(self, load: Callable[[], Mapping[str, Any]]) -> None:
        self._load = load
        self._kinds: dict[str, tuple[str, dict[str, str]]] | None = None

    def _read(self) -> dict[str, tuple[str, dict[str, str]]]:
        if self._kinds is None:
            self._kinds = service_kinds(self._load())
        return self._kinds

    def __getitem__(self, name: str) -> tuple[str, Mapping[str, str]]:
        return self._read()[name]

    def __iter__(self) -> Iterator[str]:
        return iter(self._read())

    def __len__(self) -> int:
        return len(self._read())
