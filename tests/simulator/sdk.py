"""An in-process deployment for the simulator: handlers written as small Python functions over a
`Ctx`, played against the service protocol as an SDK does in request/response mode (and, `BidiDeployment`,
in bidirectional mode).

Each attempt decodes Start + journal, runs the handler from the top: commands already journaled
are replayed (they must match in type and name, in order), notifications present resolve awaits;
new commands are emitted up to the first await that is not complete, then a Suspension awaiting
it, or Output + End when the handler returns. `ctx.run` executes its closure only when its result
is not in the journal, and reports every execution to `SimDeployment.on_run` (the checker's
side-effect log). `ctx.fail_point` and `ctx.flaky_run` make the first attempts that reach them fail
(`FAILURE_MODES`), counted by the deployment, which outlives the control plane's crashes.
`BidiDeployment` plays the same handlers in bidirectional mode (`SimStream`).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from typing import Any

from control_plane import ids
from control_plane.ports import HttpReply, InvokerError, StreamIdle
from control_plane.protocol import (
    Frame,
    MessageType,
    decode_frames,
    encode_frames,
    frame,
    invocation_content_type,
    is_command,
    is_notification,
)
from control_plane.protocol import protocol_pb2 as pb

DEPLOYMENT_URL = "http://sim.invalid"
"""The endpoint the simulated deployment is registered at (never reached over a network)."""


class _Suspend(Exception):
    """Raised inside a handler at the first await whose completion (or signal) is not there yet."""

    def __init__(self, completion_id: int = 0, signal: int = 0, named: str = "") -> None:
        self.completion_id = completion_id
        self.signal = signal
        self.named = named

    def message(self) -> pb.SuspensionMessage:
        """The Suspension awaiting it."""
        if self.named:
            return pb.SuspensionMessage(waiting_named_signals=[self.named])
        if self.signal:
            return pb.SuspensionMessage(waiting_signals=[self.signal])
        return pb.SuspensionMessage(waiting_completions=[self.completion_id])


class _Cancelled(Exception):
    """Raised at the first await not completed before the cancel signal (signal 1) arrived."""


class _Mismatch(Exception):
    """The handler's command differs from the journaled one at the same index (non-determinism)."""


FAILURE_MODES = ("error", "error-delay", "error-pause", "terminal", "http-500", "transport", "no-output", "truncated")
"""How `Ctx.fail_point` makes an attempt fail: an ErrorMessage (retryable; with `next_retry_delay`;
with the PAUSE behaviour), a terminal failure (Output with a failure, then End), an HTTP 500, a
transport error (`InvokerError`), an End without Output, an answer cut inside a frame."""

FAIL_MESSAGE = "flaky "
"""What the message of every failure `Ctx.fail_point` makes starts with (then the mode)."""


class _Fail(Exception):
    """Raised at a fail point: the attempt answers as `mode` says (see `FAILURE_MODES`)."""

    def __init__(self, mode: str, delay_ms: int = 0) -> None:
        self.mode = mode
        self.delay_ms = delay_ms


class _RunFailed(Exception):
    """A `ctx.run` closure failed: the SDK answers an ErrorMessage about that Run command."""

    def __init__(self, command_index: int, name: str) -> None:
        self.command_index = command_index
        self.name = name


class Ctx:
    """What a simulated handler sees: replaying context over one attempt's journal."""

    def __init__(
        self, invocation_id: str, start: pb.StartMessage, entries: list[Frame], deployment: SimDeployment, epoch: int
    ) -> None:
        self.invocation_id = invocation_id
        self.epoch = epoch
        self.key = start.key
        self.state = {e.key: e.value for e in start.state_map}
        self.journaled = [f for f in entries if is_command(f.type)][1:]  # without Input
        self.input = pb.InputCommandMessage.FromString(entries[0].payload).value.content
        self.notes: dict[int, Any] = {}
        self.arrived: dict[int, int] = {}  # completion id -> position among the entries
        self.cancelled_at: int | None = None  # position of the cancel signal, if it arrived
        self.signals: dict[int, tuple[pb.SignalNotificationMessage, int]] = {}  # awakeables: idx -> (it, position)
        self.next_signal = 17  # awakeables' signal indexes start above the reserved ones
        self.named: dict[str, list[tuple[pb.SignalNotificationMessage, int]]] = {}  # name -> each one, in order
        self.named_taken: dict[str, int] = {}  # name -> how many awaits took one
        for position, f in enumerate(entries):
            if f.type == MessageType.Signal:
                signal = pb.SignalNotificationMessage.FromString(f.payload)
                if signal.WhichOneof("signal_id") == "name":  # named signals queue: each await takes the next
                    self.named.setdefault(signal.name, []).append((signal, position))
                elif signal.idx == 1 and self.cancelled_at is None:
                    self.cancelled_at = position
                elif signal.idx > 16:
                    self.signals.setdefault(signal.idx, (signal, position))
            elif is_notification(f.type):
                message = f.decode()
                self.notes[message.completion_id] = message  # type: ignore[attr-defined]
                self.arrived[message.completion_id] = position  # type: ignore[attr-defined]
        self.index = 0  # commands seen so far (journaled or new)
        self.next_id = 1
        self.new: list[Frame] = []
        self.deployment = deployment
        self.proposed: set[int] = set()  # bidirectional mode: runs proposed on the stream, result not back yet

    def _command(self, message: Any, name: str) -> Any:
        """Replay or emit one command; returns the journaled message when it was journaled."""
        mine = frame(message)
        if self.index < len(self.journaled):
            recorded = self.journaled[self.index]
            self.index += 1
            decoded = recorded.decode()
            if recorded.type != mine.type or getattr(decoded, "name", "") != name:
                raise _Mismatch(f"command {self.index}: journaled {recorded.type:#06x}, handler sent {mine.type:#06x}")
            return decoded
        self.index += 1
        self.new.append(mine)
        return message

    def _ids(self, n: int) -> list[int]:
        out = list(range(self.next_id, self.next_id + n))
        self.next_id += n
        return out

    def _cancelled_before(self, completion_id: int) -> bool:
        """True if the cancel signal came before `completion_id`'s completion (or without it)."""
        if self.cancelled_at is None:
            return False
        return completion_id not in self.arrived or self.arrived[completion_id] > self.cancelled_at

    def _await(self, completion_id: int) -> Any:
        if self._cancelled_before(completion_id):
            raise _Cancelled
        if completion_id in self.notes:
            return self.notes[completion_id]
        raise _Suspend(completion_id)

    def run(self, name: str, action: Callable[[], bytes]) -> bytes:
        """A durable side effect: executed only if its result is not journaled."""
        (cid,) = self._ids(1)
        self._command(pb.RunCommandMessage(result_completion_id=cid, name=name), name)
        if self._cancelled_before(cid):
            raise _Cancelled
        if cid in self.proposed and cid not in self.notes:
            raise _Suspend(cid)  # bidirectional mode: proposed on this stream, its result on its way
        if cid not in self.notes:
            value = action()
            self.deployment.on_run(self.invocation_id, cid, name, self.epoch)
            self.new.append(frame(pb.ProposeRunCompletionMessage(result_completion_id=cid, value=value)))
            raise _Suspend(cid)  # request/response mode: wait for the committed completion
        note = self.notes[cid]
        return bytes(note.value.content)

    def fail_point(self, mode: str, times: int, delay_ms: int = 0) -> None:
        """Fail the first `times` attempts of this invocation that get here (counted by the
        deployment, which outlives control-plane crashes), as `mode` says (`FAILURE_MODES`)."""
        if self.deployment.count_failure(self.invocation_id, "fail", times):
            raise _Fail(mode, delay_ms)

    def flaky_run(self, name: str, times: int, value: bytes) -> bytes:
        """A `run` whose closure fails the first `times` times it executes (the SDK then answers an
        ErrorMessage naming the Run command; the runtime keeps the command, and the retries count)."""
        cid = self.next_id
        index = self.index + 1  # the Run command's index among the commands, Input being 0

        def action() -> bytes:
            if self.deployment.count_failure(self.invocation_id, f"run{cid}", times):
                raise _RunFailed(index, name)
            return value

        return self.run(name, action)

    def sleep(self, name: str, ms: int) -> None:
        """A durable timer of `ms` from the first time it runs."""
        (cid,) = self._ids(1)
        wake = self.deployment.clock.now_ms() + ms
        self._command(pb.SleepCommandMessage(wake_up_time=wake, result_completion_id=cid, name=name), name)
        self._await(cid)

    def call(self, service: str, handler: str, payload: bytes, key: str = "", name: str = "") -> bytes:
        """A request-response call; returns the callee's output."""
        id_cid, cid = self._ids(2)
        message = pb.CallCommandMessage(
            service_name=service,
            handler_name=handler,
            parameter=payload,
            key=key,
            invocation_id_notification_idx=id_cid,
            result_completion_id=cid,
            name=name,
        )
        self._command(message, name)
        note = self._await(cid)
        if note.WhichOneof("result") == "failure":
            raise RuntimeError(f"call failed: {note.failure.message}")
        return bytes(note.value.content)

    def send(
        self, service: str, handler: str, payload: bytes, key: str = "", delay_ms: int = 0, name: str = ""
    ) -> None:
        """A one-way call, delayed by `delay_ms` if positive."""
        (id_cid,) = self._ids(1)
        at = self.deployment.clock.now_ms() + delay_ms if delay_ms else 0
        message = pb.OneWayCallCommandMessage(
            service_name=service,
            handler_name=handler,
            parameter=payload,
            key=key,
            invoke_time=at,
            invocation_id_notification_idx=id_cid,
            name=name,
        )
        self._command(message, name)

    def awakeable(self) -> tuple[str, int]:
        """A new awakeable: `(its id, its signal index)`."""
        index = self.next_signal
        self.next_signal += 1
        return ids.awakeable_id(self.invocation_id, index), index

    def await_signal(self, index: int) -> bytes:
        """Wait for awakeable `index` to be resolved; returns its value."""
        if self.cancelled_at is not None and (index not in self.signals or self.signals[index][1] > self.cancelled_at):
            raise _Cancelled
        if index not in self.signals:
            raise _Suspend(signal=index)
        return bytes(self.signals[index][0].value.content)

    def await_named(self, name: str) -> bytes:
        """Wait for the next signal named `name` sent to this invocation (restate-sdk 1.3's
        `ctx.signal`: the k-th await of a name takes the k-th signal of that name); its value."""
        taken = self.named_taken.get(name, 0)
        arrived = self.named.get(name, [])
        if self.cancelled_at is not None and (taken >= len(arrived) or arrived[taken][1] > self.cancelled_at):
            raise _Cancelled
        if taken >= len(arrived):
            raise _Suspend(named=name)
        self.named_taken[name] = taken + 1
        return bytes(arrived[taken][0].value.content)

    def send_signal(self, invocation_id: str, name: str, value: bytes) -> None:
        """Resolve the signal `name` of another invocation with `value` (`ctx.resolve_signal`)."""
        message = pb.SendSignalCommandMessage(target_invocation_id=invocation_id, name=name, value=pb.Value(content=value))
        self._command(message, name)  # (its `name` field is the signal's: the replay check compares it)

    def complete_awakeable(self, awakeable_id: str, value: bytes) -> None:
        """Resolve an awakeable (another invocation's) with `value`."""
        message = pb.CompleteAwakeableCommandMessage(awakeable_id=awakeable_id, value=pb.Value(content=value))
        self._command(message, "")

    def promise(self, name: str) -> bytes:
        """Wait for the workflow's durable promise `name`; returns its value."""
        (cid,) = self._ids(1)
        self._command(pb.GetPromiseCommandMessage(key=name, result_completion_id=cid), "")
        note = self._await(cid)
        if note.WhichOneof("result") == "failure":
            raise RuntimeError(f"promise {name} failed: {note.failure.message}")
        return bytes(note.value.content)

    def resolve_promise(self, name: str, value: bytes) -> bool:
        """Complete the workflow's durable promise `name`; False if it was completed already."""
        (cid,) = self._ids(1)
        message = pb.CompletePromiseCommandMessage(
            key=name, completion_value=pb.Value(content=value), result_completion_id=cid
        )
        self._command(message, "")
        return self._await(cid).WhichOneof("result") != "failure"

    def get(self, name: bytes) -> bytes | None:
        """An eager state read of a virtual object's key."""
        message = pb.GetEagerStateCommandMessage(key=name, name="")
        if name in self.state:
            message.value.content = self.state[name]
        else:
            message.void.SetInParent()
        got = self._command(message, "")
        return bytes(got.value.content) if got.WhichOneof("result") == "value" else None

    def set(self, name: bytes, value: bytes) -> None:
        """Write a state entry of the virtual object's key."""
        self._command(pb.SetStateCommandMessage(key=name, value=pb.Value(content=value)), "")
        self.state[name] = value


Handler = Callable[[Ctx], bytes]


class SimDeployment:
    """The `Invoker` of the simulator: discovery of `services` and attempts played in-process.

    Args:
        services: `{service name: (service type, {handler name: handler function})}`; a handler
            function's `handler_type` attribute, if any, is its `ty` in the manifest (`SHARED`...).
        clock: the virtual clock (sleep and delayed-send times).
        on_run: called as `(invocation_id, completion_id, name, epoch)` each time a run's closure
            executes, `epoch` being the attempt's (its `x-torpor-epoch` header).
        before_answer: called with the invocation id before each attempt's answer is returned (a
            fault hook: a concurrent executor may act there).
    """

    def __init__(
        self,
        services: Mapping[str, tuple[str, Mapping[str, Handler]]],
        clock: Any,
        on_run: Callable[[str, int, str, int], None],
        before_answer: Callable[[str], None] | None = None,
    ) -> None:
        self.services = services
        self.clock = clock
        self.on_run = on_run
        self.before_answer = before_answer
        self.on_attempt: Callable[[str, Mapping[str, str]], None] | None = None
        self.failures: dict[tuple[str, str], int] = {}  # (invocation id, fail point) -> failures made there
        self.options: dict[str, dict[str, dict[str, Any]]] = {}  # service -> handler -> manifest options

    def count_failure(self, invocation_id: str, point: str, times: int) -> bool:
        """True (and counted) while fail point `point` of `invocation_id` has failed fewer than `times` times."""
        made = self.failures.get((invocation_id, point), 0)
        if made >= times:
            return False
        self.failures[(invocation_id, point)] = made + 1
        return True

    def manifest(self) -> dict[str, Any]:
        """The endpoint manifest (v3) of the simulated services."""
        return {
            "protocolMode": "REQUEST_RESPONSE",
            "minProtocolVersion": 5,
            "maxProtocolVersion": 7,
            "services": [
                {
                    "name": name,
                    "ty": ty,
                    "handlers": [
                        {"name": h, "input": {}, "output": {}}
                        | ({"ty": f.handler_type} if hasattr(f, "handler_type") else {})  # type: ignore[attr-defined]
                        | self.options.get(name, {}).get(h, {})
                        for h, f in handlers.items()
                    ],
                }
                for name, (ty, handlers) in self.services.items()
            ],
        }

    def request(
        self,
        endpoint: str,
        method: str,
        path: str,
        headers: Mapping[str, str],
        body: bytes,
        timeout_s: float,
        auth: Mapping[str, object] | None = None,
    ) -> HttpReply:
        """Answer discovery or one attempt (see the module doc)."""
        if method == "GET" and path.endswith("/discover"):
            content = json.dumps(self.manifest()).encode()
            return HttpReply(200, {"content-type": "application/vnd.restate.endpointmanifest.v3+json"}, content)
        _, _, service, handler = path.split("/")
        frames = decode_frames(body)
        start = frames[0].decode()
        assert isinstance(start, pb.StartMessage)
        ctx = Ctx(start.debug_id, start, frames[1:], self, int(headers.get("x-torpor-epoch", "0")))
        if self.on_attempt is not None:
            self.on_attempt(start.debug_id, headers)
        content_type = headers.get("content-type") or invocation_content_type(7)
        answer, how = self.play(ctx, service, handler)
        if how == "http-500":
            return HttpReply(500, {"content-type": "text/plain"}, (FAIL_MESSAGE + how).encode())
        if how == "transport":
            raise InvokerError(FAIL_MESSAGE + how)
        if self.before_answer is not None:
            self.before_answer(start.debug_id)
        body = encode_frames(answer)
        return HttpReply(200, {"content-type": content_type}, body[:-5] if how == "truncated" else body)

    def play(self, ctx: Ctx, service: str, handler: str) -> tuple[list[Frame], str]:
        """Run the handler over `ctx`: `(the frames to answer, how)`, `how` being "ended" (End or
        Error), "suspended" (the last frame is a Suspension), or the fail point's mode for the
        answers that are not frames ("http-500", "transport") or are cut ("truncated")."""
        try:
            output = self.services[service][1][handler](ctx)
            return [*ctx.new, frame(pb.OutputCommandMessage(value=pb.Value(content=output))), frame(pb.EndMessage())], (
                "ended"
            )
        except _Cancelled:
            failure = pb.Failure(code=409, message="cancelled")
            return [*ctx.new, frame(pb.OutputCommandMessage(failure=failure)), frame(pb.EndMessage())], "ended"
        except _Suspend as suspend:
            return [*ctx.new, frame(suspend.message())], "suspended"
        except _Mismatch as exc:
            return [frame(pb.ErrorMessage(code=570, message=str(exc)))], "ended"
        except _RunFailed as exc:  # the Run command is sent, then the error about it
            error = pb.ErrorMessage(
                code=500,
                message=f"{FAIL_MESSAGE}run {exc.name}",
                related_command_index=exc.command_index,
                related_command_name=exc.name,
                related_command_type=MessageType.Run,
            )
            return [*ctx.new, frame(error)], "ended"
        except _Fail as fail:
            message = FAIL_MESSAGE + fail.mode
            if fail.mode in ("http-500", "transport"):
                return [], fail.mode
            if fail.mode == "terminal":
                failure = pb.Failure(code=422, message=message)
                return [*ctx.new, frame(pb.OutputCommandMessage(failure=failure)), frame(pb.EndMessage())], "ended"
            if fail.mode == "no-output":
                return [*ctx.new, frame(pb.EndMessage())], "ended"
            if fail.mode == "truncated":
                output = frame(pb.OutputCommandMessage(value=pb.Value(content=b"never read")))
                return [*ctx.new, output, frame(pb.EndMessage())], "truncated"
            error = pb.ErrorMessage(code=500, message=message)
            if fail.mode == "error-delay":
                error.next_retry_delay = fail.delay_ms
            elif fail.mode == "error-pause":
                error.behavior = pb.PAUSE
            return [*ctx.new, frame(error)], "ended"


class VirtualMonotonic:
    """Stands in for the `time` module of `control_plane.bidi` (`monotonic` only): seconds that
    pass only while a `SimStream` is idle (the driver's quiet and abort waits, in no real time)."""

    def __init__(self) -> None:
        self.now_s = 0.0

    def monotonic(self) -> float:
        """The virtual seconds."""
        return self.now_s


class SimStream:
    """A `DuplexStream` to the simulated deployment (bidirectional mode), answered in-process: each
    time the runtime sends (or ends its body) the handler is played again from the top over the
    journal, what the SDK sent on this stream and what it received, and what is new is answered. A
    run proposed waits for its result on the stream instead of suspending; a handler awaiting
    anything else waits while the body is open and suspends once it has ended, as an SDK does."""

    def __init__(self, deployment: BidiDeployment, path: str, headers: Mapping[str, str]) -> None:
        self.deployment = deployment
        self.path = path
        self.headers = dict(headers)
        self.received: list[Frame] = []  # Start, the journal, then what the runtime sent since
        self.sent: list[Frame] = []  # what the SDK sent (commands and proposals)
        self.proposed: set[int] = set()
        self.out = bytearray()
        self.finished = False  # the answer has ended
        self.input_ended = False
        self.status = 200
        self.broken = False
        if path.endswith("/discover"):
            self.out += json.dumps(deployment.manifest()).encode()
            self.finished = True

    def send(self, data: bytes, timeout_s: float) -> None:
        """The runtime writes: play the handler again with what it sent."""
        first = not self.received
        self.received += decode_frames(data)
        if first and self.deployment.on_attempt is not None:
            start = self.received[0].decode()
            self.deployment.on_attempt(start.debug_id, self.headers)  # type: ignore[attr-defined]
        self._play()

    def end(self) -> None:
        """The runtime ended its body: a handler still waiting suspends."""
        self.input_ended = True
        self._play()

    def head(self, timeout_s: float) -> tuple[int, dict[str, str]]:
        """The answer's status and headers."""
        if self.path.endswith("/discover"):
            return 200, {"content-type": "application/vnd.restate.endpointmanifest.v3+json"}
        if self.status != 200:
            return self.status, {"content-type": "text/plain"}
        return 200, {"content-type": self.headers.get("content-type") or invocation_content_type(7)}

    def receive(self, timeout_s: float) -> bytes:
        """What the SDK sent since the last read; b"" once ended; `StreamIdle` after `timeout_s`
        of virtual time if nothing."""
        if self.broken:
            raise InvokerError(FAIL_MESSAGE + "transport")
        if self.out:
            data = bytes(self.out)
            self.out.clear()
            return data
        if self.finished:
            return b""
        self.deployment.monotonic.now_s += timeout_s
        raise StreamIdle(f"nothing within {timeout_s} s")

    def close(self) -> None:
        """Nothing to release."""

    def _play(self) -> None:
        if self.finished or not self.received:
            return
        _, _, service, handler = self.path.split("/")
        start = self.received[0].decode()
        assert isinstance(start, pb.StartMessage)
        entries = [*self.received[1:], *(f for f in self.sent if is_command(f.type))]
        ctx = Ctx(start.debug_id, start, entries, self.deployment, int(self.headers.get("x-torpor-epoch", "0")))
        ctx.proposed = self.proposed
        answer, how = self.deployment.play(ctx, service, handler)
        if how == "http-500":
            self.status, self.finished = 500, True
            self.out += (FAIL_MESSAGE + how).encode()
            return
        if how == "transport":
            self.broken = True
            return
        if how == "suspended" and not self.input_ended:
            answer = answer[:-1]  # it waits for what the runtime sends
        else:
            self.finished = True
            if self.deployment.before_answer is not None:
                self.deployment.before_answer(start.debug_id)
        for f in answer:
            if f.type == MessageType.ProposeRunCompletion:
                self.proposed.add(pb.ProposeRunCompletionMessage.FromString(f.payload).result_completion_id)
        self.sent += answer
        body = encode_frames(answer)
        self.out += body[:-5] if how == "truncated" else body


class BidiDeployment(SimDeployment):
    """`SimDeployment` that also opens streams (`StreamingInvoker`): registered so, it is invoked in
    bidirectional mode (`control_plane.bidi`) over `SimStream`s, whose idle waits pass on
    `monotonic` (install it as `control_plane.bidi.time`)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.monotonic = VirtualMonotonic()

    def manifest(self) -> dict[str, Any]:
        """The manifest, in bidirectional mode."""
        return {**super().manifest(), "protocolMode": "BIDI_STREAM"}

    def open_stream(
        self, endpoint: str, method: str, path: str, headers: Mapping[str, str], timeout_s: float
    ) -> SimStream:
        """Open a stream to the simulated deployment (discovery or an attempt)."""
        return SimStream(self, path, headers)


__all__ = [
    "DEPLOYMENT_URL",
    "FAILURE_MODES",
    "FAIL_MESSAGE",
    "BidiDeployment",
    "Ctx",
    "Handler",
    "InvokerError",
    "SimDeployment",
    "SimStream",
    "VirtualMonotonic",
]
