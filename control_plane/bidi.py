"""One attempt in bidirectional mode: a single HTTP/2 request that lives as long as the handler runs.

The runtime sends Start, the journal and the pending notifications, and keeps its request body open.
Each time the SDK proposes a run result (ProposeRunCompletion) the entries it sent so far are
committed with the same conditional journal write as in request/response mode, their effects are
carried out, and the runtime answers on the open request: the RunCompletion notification (V5/V6), or
ProposeRunCompletionAck when the proposal asked for one (V7, REQUESTED_ACK), followed by any
notification the commit derived (a call's invocation id). So `ctx.run` steps cost no new request.
A command that reaches other invocations (a call, a one-way call, an awakeable or promise completed,
a signal) is committed as soon as it arrives, so its effect does not wait for the next step, and
the call's invocation id goes back on the stream. A sleep that is due (`decisions.due_sleeps`) is
completed on the stream, as restate-server does, rather than after the quiet wait, a suspension and
a new request: one due when its Sleep command arrives (a zero-length sleep) is committed at once,
then completed; a committed one, as soon as it falls due while the body is open.

While it waits for the SDK, the driver looks for news of the invocation every `NEWS_POLL_S`
(`Engine.knock`: one store read per knock, none otherwise). A kill (the epoch moved) ends the
attempt at once: the stream is reset, so the SDK stops the handler (restate-sdk cancels the run in
flight) and nothing more is committed. A notification stored meanwhile (a cancel signal, an
awakeable's result) is sent on the open request, as restate-server does, and committed with the
next commit; the SDK raises the cancel's 409 at the handler's next await. Once the body has ended
it waits, stored, for the next attempt.

At most `max_answer_bytes` (`TORPOR_MAX_ANSWER_BYTES`) of the answer are held: one message and what
the SDK sent since the last commit. A message whose header announces more, or more bytes not yet
committed, stop the reading; the stream is reset and the attempt fails as an over-cap answer does in
request/response mode (`attempt.answer_too_large`: 500, retried). What was committed stays.

The runtime ends its body (the SDK then suspends at its next await that is not satisfied, Restate
service protocol, "Suspension") when the SDK awaits something else than a run result: an AwaitingOn
(V7) that names more than runs says so; otherwise silence does, while no run is in flight:
`QUIET_S` after a command other than Run (and after an ack while a sleep it issued is open),
`ACKED_QUIET_S` after another ack or at the start. The SDK
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
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from typing import Literal

from control_plane.attempt import AttemptAnswer, AttemptFailure, answer_too_large, read_answer, read_entries
from control_plane.decisions import due_sleeps
from control_plane.errors import ProtocolViolation
from control_plane.held import Held, Outcome
from control_plane.journal import notification_key, sleep_completion
from control_plane.ports import AnswerTooLarge, DuplexStream, InvokerError, StreamIdle
from control_plane.protocol import HEADER_SIZE, Frame, MessageType, decode_frames, encode_frames, frame
from control_plane.protocol import protocol_pb2 as pb
from control_plane.registry import HandlerOptions

QUIET_S = 0.05
"""How long the SDK may stay silent after a command other than Run (no run in flight) before the
runtime takes it as awaiting something that is not there yet and ends its body (s)."""

ACKED_QUIET_S = 0.5
"""The same after an ack or at the start, when the SDK goes on with its own code (s)."""

NEWS_POLL_S = 0.05
"""The longest the driver waits for the SDK before it looks for news of the invocation (a kill,
a cancel: `Engine.knock`), however long the wait it is in (s)."""

_REFUSAL_BYTES = 64 * 1024
"""How much of a refused answer (a status other than 200) is read: its start is all a failure shows."""

_ENDINGS = (MessageType.End, MessageType.Suspension, MessageType.Error)
_REACHING = frozenset(
    {
        MessageType.Call,
        MessageType.OneWayCall,
        MessageType.CompleteAwakeable,
        MessageType.SendSignal,
        MessageType.CompletePromise,
    }
)
"""Commands whose effects reach other invocations: committed (and carried out) as soon as they arrive."""

News = Callable[[], "list[Frame] | Outcome | None"]
"""Looks for news of the invocation since the stream began (cheap when there is none): None for
none, the notifications stored for it and not yet journaled (to send on the stream), or an
`Outcome` to end the attempt with at once (`LEASE_LOST`: killed, or taken over)."""

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
    """Splits the bytes of an answer into frames as they arrive, holding at most `limit_bytes`."""

    def __init__(self, limit_bytes: int) -> None:
        self._buffer = bytearray()
        self.limit_bytes = limit_bytes

    @property
    def buffered(self) -> int:
        """Bytes held of a message not complete yet."""
        return len(self._buffer)

    def feed(self, data: bytes, held_bytes: int) -> list[Frame]:
        """The frames `data` completes. Raises `AnswerTooLarge` as soon as a message's header
        announces more than fits in `limit_bytes` beside the `held_bytes` not yet committed."""
        self._buffer += data
        end, offset = len(self._buffer), 0
        while end - offset >= HEADER_SIZE:
            length = int.from_bytes(self._buffer[offset + 4 : offset + 8], "big")
            if held_bytes + offset + HEADER_SIZE + length > self.limit_bytes:
                raise AnswerTooLarge(self.limit_bytes)
            if end - offset - HEADER_SIZE < length:
                break
            offset += HEADER_SIZE + length
        if held_bytes + end > self.limit_bytes:
            raise AnswerTooLarge(self.limit_bytes)
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
    news: News,
    max_answer_bytes: int,
    now_ms: Callable[[], int] = lambda: time.time_ns() // 1_000_000,
) -> Streamed | Outcome | None:
    """Drive one streamed attempt on `stream` (see the module doc); closes it (a reset if open).

    `body` is Start + journal + `pending`; `commit` stores entries mid-stream (see `Commit`);
    `refused` judges the answer's status and headers like a request/response answer; `timeout_s()`
    is the longest wait allowed now (the inactivity timeout, bounded by the lease); `news` is
    looked at while waiting for the SDK (see `News`); `max_answer_bytes` bounds what is held of
    the answer (one message and what is not committed yet: `TORPOR_MAX_ANSWER_BYTES`); `now_ms()` is
    the wall clock (ms since the epoch) a sleep's due time is read against. Returns a
    `Streamed`, an `Outcome` to end with, or None to start over (another commit landed first).
    """
    exchange = _Exchange(stream, held, options, pending, commit, timeout_s, news, max_answer_bytes, now_ms)
    try:
        stream.send(body, timeout_s())
        status, headers = stream.head(timeout_s())
        if status != 200 or refused(status, headers, b"") is not None:
            answer = b""
            while len(answer) < _REFUSAL_BYTES and (chunk := stream.receive(timeout_s())):
                answer += chunk
            failure = refused(status, headers, answer)
            assert failure is not None
            return Streamed(failure, pending)
        return exchange.run()
    except AnswerTooLarge as exc:  # reading stopped at the limit; closing resets the stream
        return Streamed(answer_too_large(exc), exchange.pending)
    except InvokerError as exc:  # what was committed stays; the pending notifications too, once committed
        return Streamed(_broke(exc), exchange.pending)
    except ProtocolViolation as exc:
        failure = AttemptFailure(571, f"the deployment's answer breaks the service protocol: {exc.message}")
        return Streamed(failure, exchange.pending)
    finally:
        stream.close()


def _broke(exc: InvokerError) -> AttemptFailure:
    return AttemptFailure(503, f"the stream to the deployment broke: {exc.message}")


class _Exchange:
    """The frames of one stream after its response head: commits, acks, and when to end the body.

    `pending` holds the notifications not committed yet (emptied by the first mid-stream commit,
    grown by those that arrive while the stream is open). `run` raises `AnswerTooLarge` past
    `max_answer_bytes`, `InvokerError` when the stream breaks and `ProtocolViolation` for a
    malformed frame.
    """

    def __init__(
        self,
        stream: DuplexStream,
        held: Held,
        options: HandlerOptions,
        pending: list[Frame],
        commit: Commit,
        timeout_s: Callable[[], float],
        news: News,
        max_answer_bytes: int,
        now_ms: Callable[[], int],
    ) -> None:
        self.stream, self.held, self.options, self.pending = stream, held, options, pending
        self.commit, self.timeout_s, self.news, self.max_answer_bytes = commit, timeout_s, news, max_answer_bytes
        self.now_ms = now_ms
        self.version = held.record.protocol_version
        self.sent: list[Frame] = []  # what the SDK sent since the last commit
        self.sent_bytes = 0  # their size on the wire
        self.delivered = {notification_key(f) for f in pending}  # notifications sent on this stream
        self.open_runs: set[int] = set()  # Run commands whose result is not proposed yet
        self.runs: set[int] = set()  # every Run command of this stream: awaiting one needs no suspension
        self.input_open = True
        self.quiet = ACKED_QUIET_S  # silence for this long with no run in flight: the SDK awaits something else
        self.aborting_at = 0.0

    def run(self) -> Streamed | Outcome | None:
        """Read until the SDK ends its answer; see `stream_attempt` for what is returned."""
        frames = _Frames(self.max_answer_bytes)
        while True:
            if self.input_open:
                wait = self.timeout_s() if self.open_runs else min(self.quiet, self.timeout_s())
            else:
                wait = self.aborting_at - time.monotonic()
            try:
                chunk = self._receive(wait)
                if isinstance(chunk, Outcome):  # killed: stop now (closing resets the stream), commit nothing
                    return chunk
            except StreamIdle:
                if not self.input_open:
                    abort_s = self.options.abort_timeout_ms / 1000
                    message = f"the deployment did not end the stream within the abort timeout ({abort_s:g} s)"
                    return Streamed(AttemptFailure(503, message), self.pending)
                self._end_input()  # quiet, or inactive for the inactivity timeout: ask the SDK to suspend
                continue
            if not chunk:  # ended without End, Suspension or Error: 571
                return Streamed(read_answer(self.sent), self.pending)
            for f in frames.feed(chunk, self.sent_bytes):
                done = self._on_frame(f)
                if done is not False:
                    return done
            if self.sent_bytes + frames.buffered > self.max_answer_bytes:
                raise AnswerTooLarge(self.max_answer_bytes)
            if self.input_open and any(e.type in _REACHING for e in self.sent):
                done = self._commit_sent(None)  # effects beyond the invocation happen as they arrive
                if done is not False:
                    return done

    def _receive(self, wait_s: float) -> bytes | Outcome:
        """The next answer bytes, waiting at most `wait_s` (`StreamIdle` past it), looking for news
        every `NEWS_POLL_S` meanwhile: an `Outcome` to end with, or notifications sent on."""
        deadline = time.monotonic() + wait_s
        while True:
            found = self.news()
            if isinstance(found, Outcome):
                return found
            if found:
                self._deliver(found)
            soonest_s = self._deliver_due_sleeps()
            left = deadline - time.monotonic()
            try:
                return self.stream.receive(max(min(left, NEWS_POLL_S, soonest_s), 0.001))
            except StreamIdle:
                if time.monotonic() >= deadline:
                    raise

    def _deliver(self, notifications: list[Frame]) -> None:
        """Send the notifications not sent on this stream yet (a cancel signal, an awakeable's
        result...), as restate-server does on an open stream; committed with the next commit.
        With the request body ended they wait, stored, for the next attempt. Named signals share one
        key per name (they queue): of a name, those beyond the ones sent and not committed yet are
        new (`notifications` lists a name's in the order the journal takes them)."""
        uncommitted = Counter(k for k in map(notification_key, self.pending) if k[0] == "n")
        fresh = []
        for f in notifications:
            key = notification_key(f)
            if key[0] == "n" and uncommitted[key] > 0:
                uncommitted[key] -= 1
            elif key[0] == "n" or key not in self.delivered:
                fresh.append(f)
        if not fresh or not self.input_open:
            return
        self.delivered.update(notification_key(f) for f in fresh)
        self.pending = [*self.pending, *fresh]
        self.stream.send(encode_frames(fresh), self.timeout_s())

    def _deliver_due_sleeps(self) -> float:
        """Send on the open stream the completion of every journaled sleep that is due (`due_sleeps`),
        as restate-server does, instead of ending the body and waiting for a timer to resume the
        handler (a Sleep command is journaled before its completion: one not committed yet waits for
        its commit). Returns how long (s) until the next open sleep is due (`NEWS_POLL_S` if none)."""
        if not self.input_open:
            return NEWS_POLL_S
        sleeps = self.held.journal.open_sleeps()
        open_sleeps = {c: at for c, at in sleeps.items() if f"c{c}" not in self.delivered}
        now = self.now_ms()
        due = due_sleeps(open_sleeps, now)
        if due:
            self._deliver([sleep_completion(cid) for cid in due])
        later = [at for cid, at in open_sleeps.items() if cid not in due]
        return min((min(later) - now) / 1000, NEWS_POLL_S) if later else NEWS_POLL_S

    def _sleep_issued(self) -> bool:
        """True if the handler issued a sleep that is not completed (journaled or sent on this
        stream): silence after a run's ack is then taken as awaiting it, after `QUIET_S` rather than
        `ACKED_QUIET_S` (a sleep issued before a run and awaited after it, issue 24)."""
        return bool(self.held.journal.open_sleeps()) or any(e.type == MessageType.Sleep for e in self.sent)

    def _end_input(self) -> None:
        self.stream.end()
        self.input_open = False
        self.aborting_at = time.monotonic() + min(self.options.abort_timeout_ms / 1000, self.timeout_s())

    def _on_frame(self, f: Frame) -> Streamed | Outcome | Literal[False] | None:
        """Handle one frame; False to go on reading, else what `run` returns."""
        if f.type in _ENDINGS:
            if self.input_open:
                self.stream.end()
            return Streamed(read_answer([*self.sent, f]), self.pending)
        message = f.decode()  # ProtocolViolation if malformed
        if isinstance(message, pb.AwaitingOnMessage):
            if self.input_open and any(e.type in _REACHING for e in self.sent):
                done = self._commit_sent(None)  # a call's invocation id may be what it awaits
                if done is not False:
                    return done
            journal = self.held.journal
            awaited = _awaited_completions(message.awaiting_on)
            sent_back = {int(key[1:]) for key in self.delivered if key.startswith("c")}
            if self.input_open and (
                not awaited or awaited - self.runs - journal.runs - journal.completions - sent_back
            ):
                self._end_input()  # it awaits more than the stream brings (a sleep, a call...): let it suspend
            return False
        self.sent.append(f)
        self.sent_bytes += HEADER_SIZE + len(f.payload)
        stepping = f.type in (MessageType.Run, MessageType.ProposeRunCompletion) and not self._sleep_issued()
        self.quiet = ACKED_QUIET_S if stepping else QUIET_S
        if isinstance(message, pb.RunCommandMessage):
            self.open_runs.add(message.result_completion_id)
            self.runs.add(message.result_completion_id)
        due = isinstance(message, pb.SleepCommandMessage) and bool(
            due_sleeps({message.result_completion_id: message.wake_up_time}, self.now_ms())
        )
        if due and self.input_open:
            done = self._commit_sent(None)  # journaled before its completion, which goes back at once
            if done is not False:
                return done
            self._deliver_due_sleeps()
        if not isinstance(message, pb.ProposeRunCompletionMessage) or not self.input_open:
            return False
        self.open_runs.discard(message.result_completion_id)
        return self._commit_sent(message, ack=f.requested_ack and self.version >= 7)

    def _commit_sent(
        self, proposal: pb.ProposeRunCompletionMessage | None, ack: bool = False
    ) -> Streamed | Outcome | Literal[False] | None:
        """Commit what the SDK sent since the last commit (and the pending notifications), then send
        back, for a run `proposal`, its RunCompletion notification, or a ProposeRunCompletionAck if
        `ack` (V7, REQUESTED_ACK); then the derived notifications (a call's invocation id). False
        to go on reading, else what `run` returns."""
        entries = read_entries(self.sent)
        if isinstance(entries, AttemptFailure):
            return Streamed(entries, self.pending)
        committed = self.commit([*self.pending, *entries])
        if committed is None or isinstance(committed, Outcome):
            return committed
        if isinstance(committed, AttemptFailure):
            return Streamed(committed, self.pending)
        self.sent, self.sent_bytes, self.pending = [], 0, []
        answer: list[Frame] = []
        if proposal is not None and ack:
            answer.append(frame(pb.ProposeRunCompletionAckMessage(completion_id=proposal.result_completion_id)))
        elif proposal is not None:
            answer += [e for e in entries if e.type == MessageType.RunCompletion and _completes(e, proposal)]
        if answer or committed:
            self.stream.send(encode_frames([*answer, *committed]), self.timeout_s())
        return False


def _completes(entry: Frame, proposal: pb.ProposeRunCompletionMessage) -> bool:
    return pb.RunCompletionNotificationMessage.FromString(entry.payload).completion_id == proposal.result_completion_id
