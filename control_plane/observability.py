"""What the control plane tells about itself: metrics, the AWS requests each invocation causes, and
the W3C trace context handed to handlers.

- `Metrics` is the port the engine counts into (`count`, `observe`): `PrometheusMetrics` keeps them
  in a prometheus_client registry for `GET /metrics` in `torpor dev`; on Lambda they go out as
  CloudWatch EMF (`adapters.aws.emf`).
- `metered(invocation_id)` opens a meter for the current thread (a context variable) while the
  engine works on one invocation; adapters `record(kind)` each AWS request they make ("dynamodb
  PutItem", "sqs SendMessage", "scheduler CreateSchedule", "lambda Invoke") and the engine folds
  the counts into the invocation's record with its next write (`InvocationRecord.requests`).
- What such counts cost: `http_api.prices.cost_usd`.
- `traceparent(trace_id, invocation_id)`: the header each attempt carries, W3C Trace Context level 1,
  when no `Tracer` is on; `Tracer` is the port the engine's spans go to (`adapters.otel` exports
  them over OTLP with the OpenTelemetry SDK, the `otel` extra; docs/observability.md).
"""

from __future__ import annotations

import contextvars
import functools
import hashlib
import random
import re
import threading
import time
from collections import Counter as Tally
from collections.abc import Callable, Iterable, Iterator, Mapping
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any, Final, Protocol

if TYPE_CHECKING:
    from prometheus_client import Counter, Histogram

    from control_plane.ports import InvocationRecord

# --- metrics --------------------------------------------------------------------------------------


class Metrics(Protocol):
    """Where the engine counts: monotonic counters and observed durations (ms) with string labels."""

    def count(self, name: str, value: float = 1, **labels: str) -> None:
        """Add `value` to counter `name` (e.g. `invocations_completed`, labels `service`, `outcome`)."""

    def observe(self, name: str, value_ms: float, **labels: str) -> None:
        """Record one duration of `name` in milliseconds (e.g. `attempt_duration`)."""


class NoMetrics:
    """A `Metrics` that keeps nothing."""

    def count(self, name: str, value: float = 1, **labels: str) -> None:
        return None

    def observe(self, name: str, value_ms: float, **labels: str) -> None:
        return None


_TARGET = ("service", "handler")
COUNTERS: Final[Mapping[str, tuple[str, tuple[str, ...]]]] = {
    "invocations_created": ("Invocations created: ingress requests, calls, one-way sends, schedules' ticks.", _TARGET),
    "invocations_started": ("Invocations whose first attempt was sent to their deployment.", _TARGET),
    "attempts": ("Attempts sent to deployments (the first one and each retry or resumption).", _TARGET),
    "attempt_failures": ("Attempts that failed; the retry policy decides what follows.", _TARGET),
    "suspensions": ("Suspensions written: the invocation waits for a completion, holding no process.", _TARGET),
    "invocations_paused": ("Invocations paused by their retry policy (on_max_attempts = pause).", _TARGET),
    "invocations_completed": (
        "Invocations completed, by outcome: success, failure, cancelled, killed.",
        (*_TARGET, "outcome"),
    ),
}
"""The counters the engine counts into: name (exposed as `torpor_{name}_total`) → (help, label names)."""

_FAST_S = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0)
_LONG_S = (0.005, 0.025, 0.1, 0.5, 1.0, 5.0, 30.0, 60.0, 300.0, 1800.0, 3600.0, 21600.0, 86400.0)
_STORE_S = (0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 1.0)
HISTOGRAMS: Final[Mapping[str, tuple[str, tuple[str, ...], tuple[float, ...]]]] = {
    "attempt_duration": ("Time of one attempt at the deployment, request sent to answer read.", _TARGET, _FAST_S),
    "invocation_duration": (
        "Time from an invocation's creation to its completion, suspensions and retries included.",
        (*_TARGET, "outcome"),
        _LONG_S,
    ),
    "store_call_duration": (
        "Time of one call to the store (SQLite or DynamoDB), by operation.",
        ("operation",),
        _STORE_S,
    ),
    "timer_lateness": ("How late a timer's wake-up starts the invocation, past its due time.", (), _FAST_S),
}
"""The durations the engine observes: name (exposed as `torpor_{name}_seconds`, a histogram; observed
in ms, exposed in s) → (help, label names, bucket upper bounds in s)."""


class PrometheusMetrics:
    """`Metrics` kept in a `prometheus_client` registry of its own (one per control plane), rendered by
    `render()` in the Prometheus text format for `GET /metrics` (`torpor dev`).

    Counters are `torpor_{name}_total` (`COUNTERS`), durations histograms `torpor_{name}_seconds`
    (`HISTOGRAMS`, observed in ms, exposed in seconds), each with its help text. A name outside
    both catalogues is registered at its first use with the label names it came with. Label values
    are the service, handler, outcome and store operation: bounded by what is registered.
    Thread-safe (prometheus_client's own locks; the label children are cached here).
    """

    def __init__(self) -> None:
        # imported here: a function with in-process checkpoints imports this module (`record`) without it
        from prometheus_client import CollectorRegistry, Counter, Histogram, disable_created_metrics

        # no `_created` series beside each counter and histogram: half the lines, of no use here
        disable_created_metrics()  # type: ignore[no-untyped-call]
        self.registry = CollectorRegistry(auto_describe=True)
        self._lock = threading.Lock()
        self._families: dict[str, Counter | Histogram] = {}
        self._children: dict[tuple[str, tuple[tuple[str, str], ...]], Any] = {}
        for name, (text, labels) in COUNTERS.items():
            self._families[name] = Counter(f"torpor_{name}", text, labels, registry=self.registry)
        for name, (text, labels, buckets) in HISTOGRAMS.items():
            self._families[name] = Histogram(
                f"torpor_{name}_seconds", text, labels, registry=self.registry, buckets=buckets
            )

    def _child(self, name: str, labels: Mapping[str, str], histogram: bool) -> Any:
        key = (name, tuple(sorted(labels.items())))
        child = self._children.get(key)
        if child is not None:
            return child
        with self._lock:
            family = self._families.get(name)
            if family is None:  # not in the catalogues: registered as first used
                from prometheus_client import Counter, Histogram

                names = tuple(sorted(labels))
                if histogram:
                    family = Histogram(f"torpor_{name}_seconds", f"torpor {name}", names, registry=self.registry)
                else:
                    family = Counter(f"torpor_{name}", f"torpor {name}", names, registry=self.registry)
                self._families[name] = family
            child = family.labels(**labels) if labels else family
            self._children[key] = child
            return child

    def count(self, name: str, value: float = 1, **labels: str) -> None:
        """Add `value` to `torpor_{name}_total` with `labels`."""
        self._child(name, labels, False).inc(value)

    def observe(self, name: str, value_ms: float, **labels: str) -> None:
        """Observe `value_ms` (ms) in the histogram `torpor_{name}_seconds` with `labels`."""
        self._child(name, labels, True).observe(value_ms / 1000)

    def counter(self, name: str, **labels: str) -> float:
        """The value of one counter (0 if never counted); with no labels, the sum over all labels."""
        value = self.registry.get_sample_value(f"torpor_{name}_total", labels) if labels else None
        if labels:
            return value or 0.0
        return sum(
            sample.value
            for metric in self.registry.collect()
            if metric.name == f"torpor_{name}"
            for sample in metric.samples
            if sample.name == f"torpor_{name}_total"
        )

    def render(self) -> bytes:
        """Everything in the Prometheus text format, version 0.0.4 (`text/plain; version=0.0.4`)."""
        from prometheus_client import generate_latest

        return generate_latest(self.registry)


InMemoryMetrics = PrometheusMetrics
"""The name `PrometheusMetrics` had before it used prometheus_client."""


def time_store_calls(store: object, metrics: Metrics, operations: Iterable[str]) -> None:
    """Observe each call of `store`'s methods named in `operations` as `store_call_duration` (ms,
    label `operation`: the method's name), by wrapping them on the instance (its class and its
    other users see the same object). A call that raises is observed too. Costs two clock reads
    and one observation per call; `torpor dev` does it (`adapters.local.dev`), the Lambda functions
    do not (their EMF log lines would carry one value per call).
    """
    for name in operations:
        method = getattr(store, name, None)
        if callable(method) and not hasattr(method, "torpor_timed"):  # timed once, whoever asks again
            setattr(store, name, _timed(method, metrics, name))


def _timed(method: Callable[..., Any], metrics: Metrics, name: str) -> Callable[..., Any]:
    clock = time.perf_counter

    @functools.wraps(method)
    def timed(*args: Any, **kwargs: Any) -> Any:
        started = clock()
        try:
            return method(*args, **kwargs)
        finally:
            metrics.observe("store_call_duration", (clock() - started) * 1000, operation=name)

    timed.torpor_timed = True  # type: ignore[attr-defined]
    return timed


# --- metering: the AWS requests each invocation causes ----------------------------------------------

_meter: contextvars.ContextVar[Tally[str] | None] = contextvars.ContextVar("torpor_meter", default=None)


@contextmanager
def metered() -> Iterator[Tally[str]]:
    """Count, in the returned Counter, every `record` made by this thread (context) inside the block."""
    counts: Tally[str] = Tally()
    token = _meter.set(counts)
    try:
        yield counts
    finally:
        _meter.reset(token)


def record(kind: str, n: int = 1) -> None:
    """Count `n` AWS requests of `kind` (e.g. "dynamodb UpdateItem") for the invocation being worked on.

    Adapters call it for each request they send; outside `metered` it does nothing.
    """
    counts = _meter.get()
    if counts is not None:
        counts[kind] += n


# --- trace context and spans ----------------------------------------------------------------------

_TRACEPARENT = re.compile(r"^00-(?P<trace>[0-9a-f]{32})-(?P<span>[0-9a-f]{16})-(?P<flags>[0-9a-f]{2})$")


def trace_context_from(headers: Mapping[str, str]) -> tuple[str, str]:
    """`(trace id, parent span id)` of an incoming `traceparent` header (W3C Trace Context level 1):
    its trace and span; a new random trace and no parent ("") when it is absent, malformed or all
    zero, as the specification says; `("", "")` when it says the caller does not sample the trace
    (flags without bit 0): then no attempt carries a `traceparent` and no span is exported, as
    restate-server 1.7.12 does.
    """
    match = _TRACEPARENT.match(headers.get("traceparent", "").strip().lower())
    if match and match.group("trace") != "0" * 32 and match.group("span") != "0" * 16:
        if not int(match.group("flags"), 16) & 1:
            return "", ""
        return match.group("trace"), match.group("span")
    # not `secrets`: `os.urandom` is a system call that releases the GIL; a trace id needs to be
    # unique, not secret (OpenTelemetry's SDK draws its ids from `random.getrandbits` too)
    return f"{random.getrandbits(128) or 1:032x}", ""


def trace_id_from(headers: Mapping[str, str]) -> str:
    """The trace id of an incoming `traceparent` header, or a new random one (`trace_context_from`'s
    first half; "" for a trace the caller does not sample)."""
    return trace_context_from(headers)[0]


def invocation_span_id(invocation_id: str) -> str:
    """The span id (16 hex digits) of an invocation's span, derived from its id: every process and
    every attempt names the same span without storing it (restate-server derives it from the id too)."""
    return hashlib.sha256(invocation_id.encode()).hexdigest()[:16]


def traceparent(trace_id: str, invocation_id: str) -> str:
    """The `traceparent` an attempt of `invocation_id` carries when no `Tracer` is on: its trace, and
    the invocation's span (`invocation_span_id`), the parent of whatever the handler traces."""
    return f"00-{trace_id}-{invocation_span_id(invocation_id)}-01"


class AttemptSpan(Protocol):
    """One attempt's span, open while the attempt runs (`Tracer.attempt`)."""

    span_id: str  # 16 hex digits: the parent of the callees its Call commands create
    traceparent: str  # the W3C header the attempt's request carries: this span

    def end(self, failure: str | None = None) -> None:
        """Close the span: ok, or an error with `failure` (the attempt's failure message)."""


class Tracer(Protocol):
    """Where the engine's spans go, in restate-server 1.7.12's shape (docs/observability.md):

    - `ingress {service}/{handler}`: the request that created an invocation (its parent: the
      client's `traceparent` span), emitted at once;
    - `invocation-start {service}/{handler}`: the invocation's span, whose id is derived from the
      invocation id (`invocation_span_id`), emitted when it is created; its parent is the ingress
      span or the caller's attempt span (stored on the record: `InvocationRecord.trace_parent`);
    - `invocation-attempt {service}/{handler}`: each attempt, a child of the invocation's span,
      open while the attempt runs; its id is the `traceparent` the handler gets;
    - `invocation-end {service}/{handler}`: emitted at completion, a child of the invocation's
      span, from the invocation's creation to its completion, with its result.

    A stateless control plane cannot hold a span open across suspensions (another process may
    complete the invocation): every span here is emitted by the process that ends it, and only ids
    derived from the invocation id or stored on its record tie them together. `enabled` False (the
    `NoTracer`): the engine makes none of these calls.
    """

    enabled: bool

    def ingress(self, trace_id: str, parent_span_id: str, service: str, handler: str, invocation_id: str) -> str:
        """Emit the ingress span of a new invocation; returns its span id (16 hex digits)."""
        ...

    def invocation_started(self, record: InvocationRecord, started_ns: int) -> None:
        """Emit `record`'s invocation span, from `started_ns` (ns since the epoch) to now."""

    def attempt(self, record: InvocationRecord, deployment_id: str) -> AttemptSpan:
        """Start the span of an attempt of `record` at deployment `deployment_id`."""
        ...

    def invocation_ended(self, record: InvocationRecord) -> None:
        """Emit the end span of completed `record`."""


class NoTracer:
    """The `Tracer` that traces nothing (`enabled` False): attempts carry `traceparent(...)`."""

    enabled = False

    def ingress(self, trace_id: str, parent_span_id: str, service: str, handler: str, invocation_id: str) -> str:
        return parent_span_id

    def invocation_started(self, record: InvocationRecord, started_ns: int) -> None:
        return None

    def attempt(self, record: InvocationRecord, deployment_id: str) -> AttemptSpan:
        raise NotImplementedError("NoTracer traces no attempt: check `enabled` first")

    def invocation_ended(self, record: InvocationRecord) -> None:
        return None


NO_TRACER: Final = NoTracer()
