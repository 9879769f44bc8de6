"""One attempt in bidirectional mode: a single HTTP/2 request that lives as long as the handler runs.

The runtime sends Start, the journal and the pending notifications, and keeps its request body open.
Each time the SDK proposes a run result (ProposeRunCompletion) the entries it sent so far are
committed with the same conditional journal write as in request/response mode, their effects are
carried out, and the runtime answers on the open request: the RunCompletion notification (V5/V6), or
ProposeRunCompletionAck when the proposal asked for one (V7, REQUESTED_ACK), followed by any
notification the commit derived (a call's invocation id). So `ctx.run` steps cost no new request.

The runtime ends its body (the SDK then suspends at its next await that is not satisfied, Restate
service protocol, "Suspension") when the SDK awaits something else than a run result: an AwaitingOn
(V7) that names more than runs says so; otherwise silence does, while no run is in flight:
`QUIET_S` after a command other than Run, `ACKED_QUIET_S` after an ack or at the start. The SDK
does not always send AwaitingOn (restate-sdk 1.3 does after a run proposal, not after a call).
Ending the body early is always safe: the SDK suspends at its next await and the next attempt
replays. With a run in flight the runtime waits up to the inactivity timeout, then ends its body,
and aborts the attempt if the SDK sends nothing for the abort timeout after that. No wait outlives
the lease (`timeout_s`), which each commit extends when it runs low. What the SDK sends after the last
commit (new commands, then End, Suspension or Error) is returned as the attempt's answer, to be
checked and committed like a request/response answer. A stream that breaks keeps what was committed.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass

from control_plane.attempt import AttemptAnswer, AttemptFailure, read_answer, read_entries
from control_plane.errors import ProtocolViolation
from control_plane.held import Held, Outcome
from control_plane.ports import DuplexStream, InvokerError, StreamIdle
from control_plane.protocol import HEADER_SIZE, Frame, MessageType, decode_frames, encode_frames, frame
from control_plane.protocol import protocol_pb2 as pb
from control_plane.registry import HandlerOptions

QUIET_S = 0.05
"""How long the SDK may stay silent after a command other than Run (no run in flight) before the
runtime takes it as awaiting something that is not there yet and ends its body (s)."""

ACKED_QUIET_S = 0.5
"""The same after an ack or at the start, when the SDK goes on with its own code (s)."""

_ENDINGS = (MessageType.End, MessageType.Suspension, MessageType.Error)

Commit = Callable[[list[Frame]], "list[Frame] | Outcome | AttemptFailure | None"]
"""Commits entries mid-stream: the notifications to send back (derived ones), an `Outcome` to end
the attempt with, a failure to end it with, or None when another commit landed first (start over)."""


@dataclass(slots=True)
class Streamed:
    """A streamed attempt's end: the answer after the last mid-stream commit (or its failure), and
    the pending notifications still to commit with it (none once a mid-stream commit stored them)."""

    result: AttemptAnswer | AttemptFailure
    pending: list[Frame]


class _Frames:
    """Splits the bytes of an answer into frames as they arrive."""

    def __init__(self) -> None:
        self._buffer = bytearray()

    def feed(self, data: bytes) -> list[Frame]:
        self._buffer += data
        end, offset = len(self._buffer), 0
        while end - offset >= HEADER_SIZE:
            length = int.from_bytes(self._buffer[offset + 4 : offset + 8], "big")
            if end - offset - HEADER_SIZE < length:
                break
            offset += HEADER_SIZE + length
        frames = decode_frames(bytes(self._buffer[:offset]))
        del self._buffer[:offset]
        return frames


def _awaited_completions(future: pb.Future) -> set[int]:
    """Every completion id a V7 await tree names."""
    out = set(future.waiting_completions)
    for nested in future.nested_futures:
        out |= _awaited_completions(nested)
    return out


def stream_attempt(
    stream: DuplexStream,
    body: bytes,
    held: Held,
    options: HandlerOptions,
    pending: list[Frame],
    commit: Commit,
    refused: Callable[[int, dict[str, str], bytes], AttemptFailure | None],
    timeout_s: Callable[[], float],
) -> Streamed | Outcome | None:
    """Drive one streamed attempt on `stream` (see the module doc); closes it.

    `body` is Start + journal + `pending`; `commit` stores entries mid-stream (see `Commit`);
    `refused` judges the answer's status and headers like a request/response answer; `timeout_s()`
    is the longest wait allowed now (the inactivity timeout, bounded by the lease). Returns a
    `Streamed`, an `Outcome` to end with, or None to start over (another commit landed first).
    """
    version = held.record.protocol_version
    try:
        stream.send(body, timeout_s())
        status, headers = stream.head(timeout_s())
        if status != 200 or refused(status, headers, b"") is not None:
            answer = b""
            while chunk := stream.receive(timeout_s()):
                answer += chunk
            failure = refused(status, headers, answer)
            assert failure is not None
            return Streamed(failure, pending)
        return _exchange(stream, held, options, pending, commit, timeout_s, version)
    except InvokerError as exc:
        return Streamed(AttemptFailure(503, f"the stream to the deployment broke: {exc.message}"), pending)
    finally:
        stream.close()


def _exchange(
    stream: DuplexStream,
    held: Held,
    options: HandlerOptions,
    pending: list[Frame],
    commit: Commit,
    timeout_s: Callable[[], float],
    version: int,
) -> Streamed | Outcome | None:
    frames = _Frames()
    sent: list[Frame] = []  # what the SDK sent since the last commit
    open_runs: set[int] = set()  # Run commands whose result is not proposed yet
    runs: set[int] = set()  # every Run command of this stream: awaiting one needs no suspension
    input_open = True
    quiet = ACKED_QUIET_S  # silence for this long with no run in flight: the SDK awaits something else
    aborting_at: float | None = None
    while True:
        if input_open:
            wait = timeout_s() if open_runs else min(quiet, timeout_s())
        else:
            assert aborting_at is not None
            wait = aborting_at - time.monotonic()
        try:
            chunk = stream.receive(max(wait, 0.001))
        except StreamIdle:
            if not input_open:
                abort_s = options.abort_timeout_ms / 1000
                message = f"the deployment did not end the stream within the abort timeout ({abort_s:g} s)"
                return Streamed(AttemptFailure(503, message), pending)
            stream.end()  # quiet, or inactive for the inactivity timeout: ask the SDK to suspend
            input_open = False
            aborting_at = time.monotonic() + min(options.abort_timeout_ms / 1000, timeout_s())
            continue
        if not chunk:
            return Streamed(read_answer(sent), pending)  # ended without End, Suspension or Error: 571
        try:
            arrived = frames.feed(chunk)
        except ProtocolViolation as exc:
            return Streamed(
                AttemptFailure(571, f"the deployment's answer breaks the service protocol: {exc.message}"), pending
            )
        for f in arrived:
            if f.type in _ENDINGS:
                if input_open:
                    stream.end()
                return Streamed(read_answer([*sent, f]), pending)
            if f.type == MessageType.AwaitingOn:
                if input_open and _awaits_more_than_runs(f, runs | held.journal.runs):
                    stream.end()
                    input_open = False
                    aborting_at = time.monotonic() + min(options.abort_timeout_ms / 1000, timeout_s())
                continue
            sent.append(f)
            quiet = ACKED_QUIET_S if f.type in (MessageType.Run, MessageType.ProposeRunCompletion) else QUIET_S
            if f.type == MessageType.Run:
                open_runs.add(pb.RunCommandMessage.FromString(f.payload).result_completion_id)
                runs |= open_runs
            if f.type != MessageType.ProposeRunCompletion or not input_open:
                continue
            proposal = pb.ProposeRunCompletionMessage.FromString(f.payload)
            open_runs.discard(proposal.result_completion_id)
            entries = read_entries(sent)
            if isinstance(entries, AttemptFailure):
                return Streamed(entries, pending)
            committed = commit([*pending, *entries])
            if committed is None or isinstance(committed, Outcome):
                return committed
            if isinstance(committed, AttemptFailure):
                return Streamed(committed, pending)
            sent, pending = [], []
            if f.requested_ack and version >= 7:
                answer = frame(pb.ProposeRunCompletionAckMessage(completion_id=proposal.result_completion_id))
            else:
                answer = next(e for e in entries if e.type == MessageType.RunCompletion and _completes(e, proposal))
            stream.send(encode_frames([answer, *committed]), timeout_s())


def _completes(entry: Frame, proposal: pb.ProposeRunCompletionMessage) -> bool:
    return pb.RunCompletionNotificationMessage.FromString(entry.payload).completion_id == proposal.result_completion_id


def _awaits_more_than_runs(f: Frame, runs: set[int]) -> bool:
    """True if an AwaitingOn (V7) waits for more than run results (`runs`: their completion ids),
    e.g. a sleep, a call, an awakeable: what the stream does not bring."""
    message = pb.AwaitingOnMessage.FromString(f.payload)
    awaited = _awaited_completions(message.awaiting_on)
    return not awaited or bool(awaited - runs)
