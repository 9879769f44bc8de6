"""The attempt seam: how one attempt reaches the pinned deployment, behind one interface.

`AttemptSeam.run(held, options, pending)` sends Start, the journal and the `pending` notifications
and returns the answer still to commit (`bidi.Streamed`: the answer, and what of `pending` is not
committed yet), an `Outcome` to end with, or None when another commit landed first (start over
from the journal). Two implementations, chosen per deployment (`Attempts.seam`: its registered
`protocol_mode`):

- `RequestResponse`: one request, one answer; a function with in-process checkpoints
  (adapters/aws/checkpoints.py) may have committed steps itself meanwhile (`_checkpoint_headers`
  fence them like the engine's commits; `_after_checkpoints` re-reads the journal after them);
- `Bidirectional`: one HTTP/2 request that lives as long as the handler runs (`control_plane.bidi`),
  whose run results are committed as they come (`_commit_streamed`).

Both commit through the executor's one commit path (`Executor.commit_new`), after `check`.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Mapping
from typing import Protocol
from urllib.parse import quote

from control_plane import ids
from control_plane.attempt import (
    DEADLINE_HEADER,
    DOORBELL_HEADER,
    EPOCH_HEADER,
    FENCED_HEADER,
    JOURNAL_LENGTH_HEADER,
    AttemptAnswer,
    AttemptFailure,
    answer_too_large,
    check_answer,
    parse_answer,
)
from control_plane.bidi import Streamed, stream_attempt
from control_plane.effects import Effects
from control_plane.errors import NotFound
from control_plane.executor import Executor
from control_plane.failures import clip
from control_plane.held import Held, Knocks, Outcome, log_fields
from control_plane.journal import AwaitPoint
from control_plane.keyed import Keys
from control_plane.observability import NO_TRACER, Metrics, Tracer, traceparent
from control_plane.ports import AnswerTooLarge, Clock, DeploymentRecord, InvokerError, StoreConflict
from control_plane.protocol import Frame, encode_frames, frame, invocation_content_type
from control_plane.protocol import protocol_pb2 as pb
from control_plane.registry import HandlerOptions, Registry
from control_plane.request_identity import refusal_hint
from control_plane.settings import Settings

log = logging.getLogger("torpor.invocation")


def check(
    held: Held,
    entries: list[Frame],
    awaiting: AwaitPoint | None = None,
    sent: int = 0,
    suspension: pb.SuspensionMessage | None = None,
    *,
    ended: bool = False,
) -> AttemptFailure | None:
    """`attempt.check_answer` of `entries` against `held`'s journal, for its target's service and
    handler type."""
    record = held.record
    return check_answer(
        held.journal,
        entries,
        awaiting,
        sent,
        suspension,
        ended=ended,
        service_type=record.service_type,
        handler_type=record.handler_type,
    )


def end_span(held: Held, result: object) -> None:
    """End the span of `held`'s attempt, if it is traced (`Tracer.attempt`): an error with the failure's
    message if `result` is an `AttemptFailure` or an `Outcome` other than an answer, else ok. The
    attempt's span id stays on `held` (`attempt_span`): the effects applied when its answer is
    committed, after this, make it the parent of the callees' spans."""
    span = held.span
    if span is None:
        return
    held.span = None
    if isinstance(result, AttemptFailure):
        span.end(f"[{result.code}] {result.message}")
    elif isinstance(result, Outcome):
        span.end(f"the attempt ended: {result.value}")
    else:
        span.end(None)


class AttemptSeam(Protocol):
    """One attempt of a held invocation at its pinned deployment (see the module doc)."""

    def run(self, held: Held, options: HandlerOptions, pending: list[Frame]) -> Streamed | Outcome | None:
        """Send Start + journal + `pending`; return the answer to commit with what of `pending` is not
        committed yet, an `Outcome` to end with, or None when another commit landed first."""
        ...


class AttemptParts:
    """What both attempt modes share: the request (`_request`: Start, journal, headers, timeout),
    the reading of a refused answer (`refused_reply`), and whether a deployment streams.

    Args:
        registry, clock, settings, metrics, keys: the engine's ports and parts.
        executor: the one commit path (`Executor.commit_new`), reloads and lease writes.
        effects: pending notifications and the effects of steps a function committed itself.
        knocks: news for a lease holder in this process (`Engine.knock`).
    """

    def __init__(
        self,
        registry: Registry,
        clock: Clock,
        settings: Settings,
        metrics: Metrics,
        keys: Keys,
        executor: Executor,
        effects: Effects,
        knocks: Knocks,
    ) -> None:
        self.registry = registry
        self.clock = clock
        self.settings = settings
        self.metrics = metrics
        self.keys = keys
        self.executor = executor
        self.effects = effects
        self.knocks = knocks
        self.tracer: Tracer = NO_TRACER  # `Engine.use_tracer`

    def is_bidirectional(self, held: Held) -> bool:
        """True if the pinned deployment is invoked in bidirectional mode (registered so, see
        `Registry.discover_mode`) and the invoker can open HTTP/2 streams."""
        try:
            deployment = self.registry.deployment(held.record.deployment_id)
        except NotFound:
            return False  # the attempt's request says so
        return deployment.protocol_mode == "BIDI_STREAM" and hasattr(self.registry.invoker, "open_stream")

    def refused_reply(
        self, status: int, headers: Mapping[str, str], body: bytes, version: int
    ) -> AttemptFailure | None:
        """The failure an answer's HTTP status or content-type means (415, non-200, a content-type
        other than the negotiated protocol's: 571); None if the answer can be read."""
        content_type = invocation_content_type(version)
        if status == 415:
            return AttemptFailure(415, f"the deployment does not accept service protocol V{version} ({content_type})")
        if status != 200:
            text = body[:300].decode("utf-8", "replace").strip() or "(no body)"
            hint = refusal_hint(status, getattr(self.registry.invoker, "request_identity", None))
            return AttemptFailure(status, f"the deployment answered HTTP {status}: {text}{hint}")
        answered = headers.get("content-type", "")
        if answered.split(";")[0].strip().lower() != content_type:
            shown = clip(answered, 200) if answered else "no content-type"
            return AttemptFailure(
                571, f"the deployment answered with {shown}, not the negotiated service protocol's {content_type}"
            )
        return None

    def _request(
        self, held: Held, options: HandlerOptions, pending: list[Frame]
    ) -> tuple[DeploymentRecord, dict[str, str], bytes, int] | AttemptFailure:
        """An attempt's request: `(deployment, headers, body, timeout_ms)`, body = Start + journal +
        `pending`; counts the attempt (record, metrics). A 404 failure if the deployment is gone."""
        record = held.record
        try:
            deployment = self.registry.deployment(record.deployment_id)
        except NotFound as exc:
            move = "move it to a registered one with torpor invocations resume ID --deployment latest (or dp_…)"
            return AttemptFailure(404, f"{exc.message}: the invocation is pinned to it; {move}")
        version = record.protocol_version
        journal_length = len(held.journal)
        same_prefix = journal_length <= record.retry_at_length
        start = pb.StartMessage(
            id=ids.invocation_id_bytes(record.invocation_id),
            debug_id=record.invocation_id,
            known_entries=journal_length + len(pending),
            key=record.key,
            partial_state=False,
            retry_count_since_last_stored_entry=record.retry_count if same_prefix else 0,
        )
        if same_prefix and record.retry_count and record.retry_since_ms:
            start.duration_since_last_stored_entry = max(0, self.clock.now_ms() - record.retry_since_ms)
        if held.state is not None:
            entries, partial = self.keys.start_state(
                held.state, options.enable_lazy_state, self.settings.eager_state_max_bytes
            )
            start.state_map.extend(entries)  # type: ignore[arg-type]
            start.partial_state = partial
        if version >= 6:
            start.random_seed = record.random_seed
        if version >= 7 and record.idempotency_key:
            start.idempotency_key = record.idempotency_key
        content_type = invocation_content_type(version)
        headers = {
            **deployment.additional_headers,
            "content-type": content_type,
            "accept": content_type,
            "x-restate-invocation-id": record.invocation_id,
        }
        if record.trace_id:  # "": a trace the client does not sample, no `traceparent` (as restate-server)
            if self.tracer.enabled:
                span = self.tracer.attempt(record, deployment.deployment_id)
                held.span, held.attempt_span = span, span.span_id
                headers["traceparent"] = span.traceparent
            else:
                headers["traceparent"] = traceparent(record.trace_id, record.invocation_id)
        if record.key:  # URL-encoded: keys are any UTF-8 string, headers are not
            headers["x-restate-service-key"] = quote(record.key, safe="")
        body = encode_frames([frame(start), *held.journal.frames, *pending])
        held.record = record.evolve(attempts=record.attempts + 1)
        # never outlive the lease: a worker still inside its attempt must not meet its successor
        lease_left_ms = record.lease_until_ms - self.clock.now_ms() - self.settings.lease_margin_ms // 2
        timeout_ms = max(1_000, min(options.inactivity_timeout_ms, lease_left_ms))
        headers.update(self._checkpoint_headers(held, timeout_ms))
        self.metrics.count("attempts", service=record.service, handler=record.handler)
        if record.attempts == 0:
            self.metrics.count("invocations_started", service=record.service, handler=record.handler)
        log.debug("attempt %d of %s", record.attempts + 1, record.invocation_id, extra=log_fields(held.record))
        return deployment, headers, body, timeout_ms

    def _checkpoint_headers(self, held: Held, timeout_ms: int) -> dict[str, str]:
        """What a function with in-process checkpoints needs to commit run results itself, fenced
        like `Executor.commit` (sent with every attempt; the SDK ignores them): the attempt's epoch, the
        stored journal's length and the time (epoch ms) after which it commits nothing more and
        lets the SDK suspend, so its answer comes within `timeout_ms` (four fifths of it), and the
        doorbell as read (a notification stored since, such as a cancel, stops its commits)."""
        deadline_ms = self.clock.now_ms() + timeout_ms * 4 // 5
        return {
            EPOCH_HEADER: str(held.record.epoch),
            JOURNAL_LENGTH_HEADER: str(len(held.journal)),
            DEADLINE_HEADER: str(deadline_ms),
            DOORBELL_HEADER: str(held.record.doorbell),
        }


class RequestResponse(AttemptParts):
    """Request/response mode, with in-process checkpoints (see the module doc)."""

    def run(self, held: Held, options: HandlerOptions, pending: list[Frame]) -> Streamed | Outcome | None:
        """One request; `pending` is committed already if the function committed steps itself."""
        sent_length = len(held.journal)
        result: AttemptAnswer | AttemptFailure = AttemptFailure(500, "the attempt raised")
        try:
            result = self._attempt(held, options, pending)
        finally:
            end_span(held, result)
        if len(held.journal) > sent_length:  # the function committed steps itself, `pending` first
            pending = []
        return Streamed(result, pending)

    def _attempt(self, held: Held, options: HandlerOptions, pending: list[Frame]) -> AttemptAnswer | AttemptFailure:
        """One request to the pinned deployment with Start + the whole journal + pending notifications."""
        sent_length = len(held.journal)
        request = self._request(held, options, pending)
        if isinstance(request, AttemptFailure):
            return request
        deployment, headers, body, timeout_ms = request
        record = held.record
        version = record.protocol_version
        labels = {"service": record.service, "handler": record.handler}
        started = time.perf_counter()
        try:
            reply = self.registry.invoker.request(
                deployment.endpoint,
                "POST",
                f"/invoke/{record.service}/{record.handler}",
                headers,
                body,
                timeout_ms / 1000,
                auth=deployment.auth or None,
            )
        except InvokerError as exc:
            self.metrics.observe("attempt_duration", (time.perf_counter() - started) * 1000, **labels)
            if isinstance(exc, AnswerTooLarge):  # the same failed attempt as on a stream (bidi)
                return answer_too_large(exc)
            return AttemptFailure(503, f"could not reach deployment {deployment.deployment_id}: {exc.message}")
        self.metrics.observe("attempt_duration", (time.perf_counter() - started) * 1000, **labels)
        if not self._after_checkpoints(held, reply.headers, sent_length):
            return AttemptFailure(409, "the attempt lost its lease while the function committed steps")
        refused = self.refused_reply(reply.status, reply.headers, reply.body, version)
        if refused is not None:
            return refused
        return parse_answer(reply.body)

    def _after_checkpoints(self, held: Held, headers: Mapping[str, str], sent_length: int) -> bool:
        """After an attempt whose function committed steps (answer header `x-torpor-journal-length`
        beyond the length sent): re-read the journal and carry out the committed entries' effects
        (idempotent), so the answer's entries follow them. After one that stopped committing because
        a notification arrived (answer header `x-torpor-fenced`), re-read it too, so the next attempt
        delivers the notification (a cancel from another process). False if our epoch is gone."""
        try:
            length = int(headers.get(JOURNAL_LENGTH_HEADER, "0"))
        except ValueError:
            length = 0
        if length <= sent_length:
            return FENCED_HEADER not in headers or self.executor.reload(held)
        if not self.executor.reload(held):
            return False
        try:
            self.effects.apply(held, sent_length)
        except StoreConflict:
            return False
        return True


class Bidirectional(AttemptParts):
    """Bidirectional mode over HTTP/2 (`control_plane.bidi`, see the module doc)."""

    def run(self, held: Held, options: HandlerOptions, pending: list[Frame]) -> Streamed | Outcome | None:
        """One attempt in bidirectional mode (`control_plane.bidi`): run results are committed and
        acknowledged on the open request; a kill or a cancel knocked meanwhile (`Engine.knock`) reaches
        it while it waits for the SDK. Returns what `bidi.stream_attempt` does."""
        request = self._request(held, options, pending)
        if isinstance(request, AttemptFailure):
            return Streamed(request, pending)
        deployment, headers, body, _ = request
        record = held.record
        labels = {"service": record.service, "handler": record.handler}

        def timeout_s() -> float:  # never outlive the lease (extended at each commit)
            lease_left_ms = held.record.lease_until_ms - self.clock.now_ms() - self.settings.lease_margin_ms // 2
            return max(1_000, min(options.inactivity_timeout_ms, lease_left_ms)) / 1000

        def refused(status: int, answered: Mapping[str, str], answer: bytes) -> AttemptFailure | None:
            return self.refused_reply(status, answered, answer, record.protocol_version)

        def news() -> list[Frame] | Outcome | None:  # see `bidi.News`: one read per knock, none otherwise
            if not self.knocks.take(record.invocation_id):
                return None
            if not self.executor.reload(held):  # killed (or taken over): no more handler code, nothing committed
                return Outcome.LEASE_LOST
            return self.effects.pending(held)

        started = time.perf_counter()
        try:
            stream = self.registry.invoker.open_stream(  # type: ignore[attr-defined]  # see `is_bidirectional`
                deployment.endpoint, "POST", f"/invoke/{record.service}/{record.handler}", headers, timeout_s()
            )
        except InvokerError as exc:
            failure = AttemptFailure(503, f"could not reach deployment {deployment.deployment_id}: {exc.message}")
            end_span(held, failure)
            return Streamed(failure, pending)
        outcome: Streamed | Outcome | None = None
        try:
            outcome = stream_attempt(
                stream,
                body,
                held,
                options,
                pending,
                lambda entries: self._commit_streamed(held, options, entries),
                refused,
                timeout_s,
                news,
                self.settings.max_answer_bytes,
                self.clock.now_ms,
            )
            return outcome
        finally:
            self.metrics.observe("attempt_duration", (time.perf_counter() - started) * 1000, **labels)
            end_span(held, outcome.result if isinstance(outcome, Streamed) else outcome)

    def _commit_streamed(
        self, held: Held, options: HandlerOptions, entries: list[Frame]
    ) -> list[Frame] | Outcome | AttemptFailure | None:
        """Commit what the SDK sent so far on a stream (see `bidi.Commit`): checked like an answer,
        committed with its derived notifications and applied; the lease is extended if it runs low.
        Returns the derived notifications (to send on the stream), an `Outcome`, a failure, or None
        when another commit landed first."""
        refused = check(held, entries)
        if refused is not None:
            return refused
        derived = self.executor.commit_new(held, entries)
        if not isinstance(derived, list):
            return derived
        try:
            self.executor.renew_lease(held, options, self.clock.now_ms())
        except StoreConflict:
            return Outcome.LEASE_LOST
        return derived


class Attempts:
    """The attempt seam of each deployment (see the module doc): one `RequestResponse` and one
    `Bidirectional`, built over the same parts (`AttemptParts`' arguments)."""

    def __init__(
        self,
        registry: Registry,
        clock: Clock,
        settings: Settings,
        metrics: Metrics,
        keys: Keys,
        executor: Executor,
        effects: Effects,
        knocks: Knocks,
    ) -> None:
        parts = (registry, clock, settings, metrics, keys, executor, effects, knocks)
        self.request_response = RequestResponse(*parts)
        self.bidirectional = Bidirectional(*parts)

    def seam(self, held: Held) -> AttemptSeam:
        """The attempt mode of `held`'s pinned deployment: `Bidirectional` if it is registered so
        (`Registry.discover_mode`) and the invoker can open HTTP/2 streams, else `RequestResponse`
        (which answers a 404 failure if the deployment is gone). One registry lookup."""
        return self.bidirectional if self.request_response.is_bidirectional(held) else self.request_response
