"""What the control plane tells about itself: metrics, the AWS requests each invocation causes, and
the W3C trace context handed to handlers.

- `Metrics` is the port the engine counts into (`count`, `observe`): `InMemoryMetrics` keeps them
  for `GET /metrics` (Prometheus text format) in `torpor dev`; on Lambda they go out as CloudWatch
  EMF (`adapters.aws.emf`).
- `metered(invocation_id)` opens a meter for the current thread (a context variable) while the
  engine works on one invocation; adapters `record(kind)` each AWS request they make ("dynamodb
  PutItem", "sqs SendMessage", "scheduler CreateSchedule", "lambda Invoke") and the engine folds
  the counts into the invocation's record with its next write (`InvocationRecord.requests`).
- What such counts cost: `http_api.prices.cost_usd`.
- `traceparent(trace_id, invocation_id)`: the header each attempt carries, W3C Trace Context level 1.
"""

from __future__ import annotations

import contextvars
import hashlib
import re
import secrets
import threading
from collections import Counter, defaultdict
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from typing import Protocol

# --- metrics --------------------------------------------------------------------------------------


class Metrics(Protocol):
    """Where the engine counts: monotonic counters and observed values (ms) with string labels."""

    def count(self, name: str, value: float = 1, **labels: str) -> None:
        """Add `value` to counter `name` (e.g. `invocations_completed`, labels `service`, `outcome`)."""

    def observe(self, name: str, value_ms: float, **labels: str) -> None:
        """Record one observation of `name` in milliseconds (e.g. `handler_latency_ms`)."""


class NoMetrics:
    """A `Metrics` that keeps nothing."""

    def count(self, name: str, value: float = 1, **labels: str) -> None:
        return None

    def observe(self, name: str, value_ms: float, **labels: str) -> None:
        return None


_LABEL_ESCAPE = str.maketrans({"\\": "\\\\", '"': '\\"', "\n": "\\n"})


class InMemoryMetrics:
    """Counters and summaries (count, sum, max) kept in memory; thread-safe.

    `render()` gives them in the Prometheus text exposition format (version 0.0.4), names prefixed
    `torpor_`: a counter as `torpor_{name}_total`, an observation as `torpor_{name}_count`,
    `_sum` and `_max`.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._counters: dict[tuple[str, tuple[tuple[str, str], ...]], float] = defaultdict(float)
        self._observed: dict[tuple[str, tuple[tuple[str, str], ...]], list[float]] = {}

    def count(self, name: str, value: float = 1, **labels: str) -> None:
        with self._lock:
            self._counters[(name, tuple(sorted(labels.items())))] += value

    def observe(self, name: str, value_ms: float, **labels: str) -> None:
        key = (name, tuple(sorted(labels.items())))
        with self._lock:
            stats = self._observed.setdefault(key, [0.0, 0.0, 0.0])
            stats[0] += 1
            stats[1] += value_ms
            stats[2] = max(stats[2], value_ms)

    def counter(self, name: str, **labels: str) -> float:
        """The value of one counter (0 if never counted); with no labels, the sum over all labels."""
        with self._lock:
            if labels:
                return self._counters.get((name, tuple(sorted(labels.items()))), 0)
            return sum(v for (n, _), v in self._counters.items() if n == name)

    def render(self) -> str:
        """Everything in the Prometheus text format."""
        lines: list[str] = []
        with self._lock:
            counters = sorted(self._counters.items())
            observed = sorted(self._observed.items())
        seen: set[str] = set()
        for (name, labels), value in counters:
            metric = f"torpor_{name}_total"
            if metric not in seen:
                seen.add(metric)
                lines.append(f"# TYPE {metric} counter")
            lines.append(f"{metric}{_labels(labels)} {_number(value)}")
        for (name, labels), (count, total, largest) in observed:
            metric = f"torpor_{name}"
            if metric not in seen:
                seen.add(metric)
                lines.append(f"# TYPE {metric} summary")
            lines.append(f"{metric}_count{_labels(labels)} {_number(count)}")
            lines.append(f"{metric}_sum{_labels(labels)} {_number(total)}")
            lines.append(f"{metric}_max{_labels(labels)} {_number(largest)}")
        return "\n".join(lines) + "\n"


def _labels(labels: tuple[tuple[str, str], ...]) -> str:
    if not labels:
        return ""
    return "{" + ",".join(f'{k}="{str(v).translate(_LABEL_ESCAPE)}"' for k, v in labels) + "}"


def _number(value: float) -> str:
    return str(int(value)) if float(value).is_integer() else f"{value:.3f}"


# --- metering: the AWS requests each invocation causes ----------------------------------------------

_meter: contextvars.ContextVar[Counter[str] | None] = contextvars.ContextVar("torpor_meter", default=None)


@contextmanager
def metered() -> Iterator[Counter[str]]:
    """Count, in the returned Counter, every `record` made by this thread (context) inside the block."""
    counts: Counter[str] = Counter()
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


# --- trace context --------------------------------------------------------------------------------

_TRACEPARENT = re.compile(r"^00-(?P<trace>[0-9a-f]{32})-(?P<span>[0-9a-f]{16})-(?P<flags>[0-9a-f]{2})$")


def trace_id_from(headers: Mapping[str, str]) -> str:
    """The trace id of an incoming `traceparent` header (W3C Trace Context), or a new random one.

    An all-zero or malformed header starts a new trace, as the specification says.
    """
    match = _TRACEPARENT.match(headers.get("traceparent", "").strip().lower())
    if match and match.group("trace") != "0" * 32 and match.group("span") != "0" * 16:
        return match.group("trace")
    return secrets.token_hex(16)


def traceparent(trace_id: str, invocation_id: str) -> str:
    """The `traceparent` an attempt of `invocation_id` carries: its trace, and a span id derived from
    the invocation id (one span per invocation, the parent of whatever the handler traces)."""
    span = hashlib.sha256(invocation_id.encode()).hexdigest()[:16]
    return f"00-{trace_id}-{span}-01"
