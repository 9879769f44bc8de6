"""OpenTelemetry traces of invocations: `control_plane.observability.Tracer` over the OpenTelemetry SDK
(the `otel` extra), exported over OTLP.

`tracer_from_env()` builds one when `OTEL_EXPORTER_OTLP_ENDPOINT` (or
`OTEL_EXPORTER_OTLP_TRACES_ENDPOINT`) is set, from the SDK's standard variables: the exporter's
endpoint, headers and timeout (`OTEL_EXPORTER_OTLP_*`), `OTEL_SERVICE_NAME` (default `torpor`),
`OTEL_RESOURCE_ATTRIBUTES`, the sampler (`OTEL_TRACES_SAMPLER`), the batch processor's delays
(`OTEL_BSP_*`). The protocol is OTLP/HTTP with protobuf (port 4318), or OTLP/gRPC (4317) with
`OTEL_EXPORTER_OTLP_PROTOCOL=grpc` where `opentelemetry-exporter-otlp-proto-grpc` is installed.
Spans leave in batches from a thread of the SDK (`BatchSpanProcessor`), so a call waits for none.

The spans, their names and attributes follow restate-server 1.7.12 (see `Tracer`); the ids that tie
them together across processes are derived from the invocation id (`invocation_span_id`) or stored
on its record (`trace_id`, `trace_parent`), so the SDK is told which ids to use (`_PresetIds`).
docs/observability.md shows them in Jaeger.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Mapping
from typing import Any

from control_plane.errors import TorporError
from control_plane.observability import invocation_span_id
from control_plane.ports import InvocationRecord

try:
    from opentelemetry import trace
    from opentelemetry.sdk.resources import Resource
    from opentelemetry.sdk.trace import SpanProcessor, TracerProvider
    from opentelemetry.sdk.trace.export import BatchSpanProcessor
    from opentelemetry.sdk.trace.id_generator import RandomIdGenerator
    from opentelemetry.trace import NonRecordingSpan, SpanContext, SpanKind, Status, StatusCode, TraceFlags
except ImportError:  # the `otel` extra is not installed: `tracer_from_env` says so when asked for one
    trace = None  # type: ignore[assignment]
    RandomIdGenerator = object  # type: ignore[assignment,misc]  # so that `_PresetIds` is defined

_SAMPLED = 0x01


class TracingUnavailable(TorporError):
    """Traces are asked for (`OTEL_EXPORTER_OTLP_ENDPOINT`) but the SDK or the exporter is missing."""

    code = "tracing_unavailable"


def tracer_from_env(environ: Mapping[str, str] | None = None) -> OtelTracer | None:
    """An `OtelTracer` exporting over OTLP if `OTEL_EXPORTER_OTLP_ENDPOINT` or
    `OTEL_EXPORTER_OTLP_TRACES_ENDPOINT` is set in `environ` (the process's by default), else None.
    None too with `OTEL_SDK_DISABLED=true` or `OTEL_TRACES_EXPORTER=none`.

    Raises:
        TracingUnavailable: An endpoint is set but the OpenTelemetry SDK (or, for `grpc`, its gRPC
            exporter) is not installed; the message names what to install.
    """
    env = os.environ if environ is None else environ
    endpoint = env.get("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT") or env.get("OTEL_EXPORTER_OTLP_ENDPOINT")
    if not endpoint or env.get("OTEL_SDK_DISABLED", "").lower() == "true":
        return None
    if env.get("OTEL_TRACES_EXPORTER", "otlp").lower() == "none":
        return None
    if trace is None:
        raise TracingUnavailable(
            "OTEL_EXPORTER_OTLP_ENDPOINT is set but the OpenTelemetry SDK is not installed: "
            "pip install 'torpor[otel]', or unset the variable"
        )
    protocol = env.get("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL") or env.get("OTEL_EXPORTER_OTLP_PROTOCOL") or ""
    exporter: Any
    if protocol.lower() == "grpc":
        try:
            from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import (  # type: ignore[import-not-found]
                OTLPSpanExporter as GrpcExporter,
            )
        except ImportError as exc:
            raise TracingUnavailable(
                "OTEL_EXPORTER_OTLP_PROTOCOL=grpc needs pip install opentelemetry-exporter-otlp-proto-grpc; "
                "or use http/protobuf (the default, port 4318)"
            ) from exc
        exporter = GrpcExporter()
    else:
        from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter

        exporter = OTLPSpanExporter()  # endpoint, headers, timeout: from the OTEL_EXPORTER_OTLP_* variables
    return OtelTracer(BatchSpanProcessor(exporter), service_name=env.get("OTEL_SERVICE_NAME") or None)


class _PresetIds(RandomIdGenerator):
    """The SDK's random ids, except the ones `preset` sets for the next span made on this thread:
    the SDK lets a span choose its parent but not its own ids, which must be derived here."""

    def __init__(self) -> None:
        super().__init__()
        self._next = threading.local()

    def preset(self, trace_id: int | None, span_id: int | None) -> None:
        self._next.trace_id, self._next.span_id = trace_id, span_id

    def generate_trace_id(self) -> int:
        chosen: int | None = getattr(self._next, "trace_id", None)
        self._next.trace_id = None
        return chosen if chosen is not None else int(super().generate_trace_id())

    def generate_span_id(self) -> int:
        chosen: int | None = getattr(self._next, "span_id", None)
        self._next.span_id = None
        return chosen if chosen is not None else int(super().generate_span_id())


class _Attempt:
    """An attempt's open span (`observability.AttemptSpan`)."""

    __slots__ = ("span", "span_id", "traceparent")

    def __init__(self, span: Any) -> None:
        context = span.get_span_context()
        self.span = span
        self.span_id = f"{context.span_id:016x}"
        self.traceparent = f"00-{context.trace_id:032x}-{self.span_id}-{int(context.trace_flags):02x}"

    def end(self, failure: str | None = None) -> None:
        if failure is not None:
            self.span.set_status(Status(StatusCode.ERROR, failure))
        else:
            self.span.set_status(Status(StatusCode.OK))
        self.span.end()


class OtelTracer:
    """`control_plane.observability.Tracer` over an OpenTelemetry SDK `TracerProvider` of its own (not
    the global one: a handler's or a test's tracing in the same process is left alone).

    Args:
        processor: Where ended spans go: a `BatchSpanProcessor` over an OTLP exporter
            (`tracer_from_env`), or a `SimpleSpanProcessor` over an `InMemorySpanExporter` in tests.
        service_name: The resource's `service.name` (`OTEL_SERVICE_NAME`); None: the one in
            `OTEL_RESOURCE_ATTRIBUTES`, else `torpor`. `OTEL_RESOURCE_ATTRIBUTES` adds the rest.
    """

    enabled = True

    def __init__(self, processor: SpanProcessor, service_name: str | None = "torpor") -> None:
        self._ids = _PresetIds()
        resource = Resource.create({"service.name": service_name} if service_name else {})
        if str(resource.attributes.get("service.name", "")).startswith("unknown_service"):
            resource = resource.merge(Resource({"service.name": "torpor"}))
        self.provider = TracerProvider(resource=resource, id_generator=self._ids)
        self.provider.add_span_processor(processor)
        self._tracer = self.provider.get_tracer("torpor")

    def _span(
        self,
        name: str,
        parent: tuple[int, int] | None,
        attributes: Mapping[str, Any],
        *,
        trace_id: int | None = None,
        span_id: int | None = None,
        start_ns: int | None = None,
    ) -> Any:
        """Start a span named `name` whose parent is `(trace id, span id)` (None: a root of trace
        `trace_id`), with `span_id` as its own id if given."""
        context = None
        if parent is not None:
            remote = SpanContext(parent[0], parent[1], is_remote=True, trace_flags=TraceFlags(_SAMPLED))
            context = trace.set_span_in_context(NonRecordingSpan(remote))
        self._ids.preset(trace_id if parent is None else None, span_id)
        try:
            return self._tracer.start_span(
                name, context=context, kind=SpanKind.INTERNAL, attributes=attributes, start_time=start_ns
            )
        finally:
            self._ids.preset(None, None)

    def ingress(self, trace_id: str, parent_span_id: str, service: str, handler: str, invocation_id: str) -> str:
        """Emit `ingress {service}/{handler}` (a child of the client's span, if it sent one); its span id."""
        parent = (int(trace_id, 16), int(parent_span_id, 16)) if parent_span_id else None
        span = self._span(
            f"ingress {service}/{handler}",
            parent,
            {**_target(service, handler, invocation_id)},
            trace_id=int(trace_id, 16),
        )
        span.end()
        return f"{span.get_span_context().span_id:016x}"

    def invocation_started(self, record: InvocationRecord, started_ns: int) -> None:
        """Emit `invocation-start {service}/{handler}`: the invocation's span (id derived from its id),
        a child of `record.trace_parent`, from `started_ns` to now."""
        trace_id = int(record.trace_id, 16)
        parent = (trace_id, int(record.trace_parent, 16)) if record.trace_parent else None
        span = self._span(
            f"invocation-start {record.service}/{record.handler}",
            parent,
            _target(record.service, record.handler, record.invocation_id),
            trace_id=trace_id,
            span_id=int(invocation_span_id(record.invocation_id), 16),
            start_ns=started_ns,
        )
        span.end()

    def attempt(self, record: InvocationRecord, deployment_id: str) -> _Attempt:
        """Start `invocation-attempt {service}/{handler}`, a child of the invocation's span."""
        attributes = {
            "rpc.system": "restate",
            **_target(record.service, record.handler, record.invocation_id),
            "restate.deployment.id": deployment_id,
            "restate.deployment.service_protocol_version": record.protocol_version,
            "restate.invocation.attempt": record.attempts + 1,
        }
        return _Attempt(
            self._span(
                f"invocation-attempt {record.service}/{record.handler}", _invocation_span(record), attributes
            )
        )

    def invocation_ended(self, record: InvocationRecord) -> None:
        """Emit `invocation-end {service}/{handler}`, a child of the invocation's span, from its
        creation to its completion (restate-server's lasts no time), with its result."""
        result = {"succeeded": "success", "failed": "failure"}.get(record.completion, record.completion)
        result = result or ("success" if record.failure is None else "failure")
        span = self._span(
            f"invocation-end {record.service}/{record.handler}",
            _invocation_span(record),
            {**_target(record.service, record.handler, record.invocation_id), "restate.invocation.result": result},
            start_ns=record.created_at_ms * 1_000_000,
        )
        if record.failure is not None:
            failure = dict(record.failure)
            span.set_status(Status(StatusCode.ERROR, f"[{failure.get('code', 500)}] {failure.get('message', '')}"))
        else:
            span.set_status(Status(StatusCode.OK))
        span.end()  # now: right after the completing write

    def flush(self, timeout_ms: int = 5_000) -> None:
        """Export the spans buffered so far, waiting up to `timeout_ms` (a Lambda function does it
        before it returns: its environment is frozen after)."""
        self.provider.force_flush(timeout_ms)

    def shutdown(self) -> None:
        """Export what is buffered and stop (the SDK also does it when the process exits)."""
        self.provider.shutdown()


def _invocation_span(record: InvocationRecord) -> tuple[int, int]:
    return int(record.trace_id, 16), int(invocation_span_id(record.invocation_id), 16)


def _target(service: str, handler: str, invocation_id: str) -> dict[str, str]:
    return {
        "rpc.service": service,
        "rpc.method": handler,
        "restate.invocation.id": invocation_id,
        "restate.invocation.target": f"{service}/{handler}",
    }
