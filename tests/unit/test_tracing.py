"""The spans of `adapters.otel.OtelTracer` (the OpenTelemetry SDK's in-memory exporter): names,
ids and parent links as restate-server 1.7.12 emits them, and when `tracer_from_env` makes one."""

from __future__ import annotations

import subprocess
import sys
import time

import pytest
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import StatusCode

import adapters.otel
from adapters.otel import OtelTracer, TracingUnavailable, tracer_from_env
from control_plane.observability import NO_TRACER, invocation_span_id, trace_context_from, traceparent
from tests.helpers.records import invocation

TRACE = "4bf92f3577b34da6a3ce929d0e0e4736"
CLIENT_SPAN = "00f067aa0ba902b7"


def _hex(value: int, digits: int) -> str:
    return f"{value:0{digits}x}"


def test_an_invocations_spans_link_client_ingress_invocation_attempts_and_end() -> None:
    exporter = InMemorySpanExporter()
    tracer = OtelTracer(SimpleSpanProcessor(exporter), service_name="svc")
    started_ns = time.time_ns()
    ingress = tracer.ingress(TRACE, CLIENT_SPAN, "Greeter", "greet", "inv_1")
    record = invocation("inv_1", trace_id=TRACE, trace_parent=ingress, created_at_ms=started_ns // 1_000_000)
    tracer.invocation_started(record, started_ns)
    first = tracer.attempt(record, "dp_1")
    first.end("[500] boom")
    second = tracer.attempt(record.evolve(attempts=1), "dp_1")
    second.end()
    tracer.invocation_ended(record.evolve(completion="succeeded", completed_at_ms=record.created_at_ms + 5))

    spans = {span.name.split(" ")[0] + (f"#{span.attributes.get('restate.invocation.attempt', '')}"): span
             for span in exporter.get_finished_spans()}  # fmt: skip
    assert set(spans) == {
        "ingress#",
        "invocation-start#",
        "invocation-attempt#1",
        "invocation-attempt#2",
        "invocation-end#",
    }
    assert {_hex(s.context.trace_id, 32) for s in spans.values()} == {TRACE}
    assert _hex(spans["ingress#"].parent.span_id, 16) == CLIENT_SPAN
    assert _hex(spans["ingress#"].context.span_id, 16) == ingress
    invocation_span = spans["invocation-start#"]
    assert _hex(invocation_span.context.span_id, 16) == invocation_span_id("inv_1")  # derived: any process names it
    assert _hex(invocation_span.parent.span_id, 16) == ingress
    assert invocation_span.start_time == started_ns
    for name in ("invocation-attempt#1", "invocation-attempt#2", "invocation-end#"):
        assert spans[name].parent.span_id == invocation_span.context.span_id, name
    assert spans["invocation-attempt#1"].status.status_code == StatusCode.ERROR
    assert spans["invocation-attempt#1"].status.description == "[500] boom"
    assert spans["invocation-attempt#2"].status.status_code == StatusCode.OK
    assert first.traceparent == f"00-{TRACE}-{first.span_id}-01" != second.traceparent
    assert spans["invocation-end#"].attributes["restate.invocation.result"] == "success"
    assert spans["invocation-end#"].start_time == record.created_at_ms * 1_000_000
    assert spans["invocation-attempt#1"].attributes["restate.invocation.target"] == "Greeter/greet"
    assert spans["ingress#"].resource.attributes["service.name"] == "svc"


def test_a_request_without_a_client_trace_is_rooted_at_its_ingress_span_and_a_failure_is_an_error() -> None:
    exporter = InMemorySpanExporter()
    tracer = OtelTracer(SimpleSpanProcessor(exporter))
    trace_id, parent = trace_context_from({})
    assert parent == ""
    ingress = tracer.ingress(trace_id, parent, "Greeter", "greet", "inv_2")
    record = invocation("inv_2", trace_id=trace_id, trace_parent=ingress)
    tracer.invocation_ended(
        record.evolve(completion="failed", failure={"code": 418, "message": "teapot"}, completed_at_ms=2_000)
    )
    root, end = sorted(exporter.get_finished_spans(), key=lambda span: span.name)
    assert root.parent is None and _hex(root.context.trace_id, 32) == trace_id
    assert end.status.status_code == StatusCode.ERROR and end.status.description == "[418] teapot"
    assert end.attributes["restate.invocation.result"] == "failure"


def test_trace_context_of_requests_and_the_traceparent_without_a_tracer() -> None:
    assert trace_context_from({"traceparent": f"00-{TRACE}-{CLIENT_SPAN}-01"}) == (TRACE, CLIENT_SPAN)
    assert trace_context_from({"traceparent": f"00-{TRACE}-{CLIENT_SPAN}-00"}) == ("", "")  # not sampled
    assert trace_context_from({"traceparent": f"00-{TRACE}-{CLIENT_SPAN}-03"}) == (TRACE, CLIENT_SPAN)
    assert NO_TRACER.enabled is False
    assert traceparent(TRACE, "inv_1") == f"00-{TRACE}-{invocation_span_id('inv_1')}-01"


def test_tracing_is_on_only_with_an_otlp_endpoint_and_names_the_extra_when_the_sdk_is_missing(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delenv("OTEL_RESOURCE_ATTRIBUTES", raising=False)
    monkeypatch.delenv("OTEL_SERVICE_NAME", raising=False)
    assert tracer_from_env({}) is None
    assert tracer_from_env({"OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:9", "OTEL_SDK_DISABLED": "true"}) is None
    endpoint = {"OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:9"}
    assert tracer_from_env({**endpoint, "OTEL_TRACES_EXPORTER": "none"}) is None
    tracer = tracer_from_env({"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": "http://127.0.0.1:9/v1/traces"})
    assert isinstance(tracer, OtelTracer)
    assert tracer.provider.resource.attributes["service.name"] == "torpor"  # without OTEL_SERVICE_NAME
    tracer.provider.shutdown()
    monkeypatch.setattr(adapters.otel, "trace", None)  # as without the `otel` extra
    with pytest.raises(TracingUnavailable, match=r"pip install 'torpor\[otel\]'"):
        tracer_from_env({"OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:9"})


def test_without_the_sdk_the_adapter_imports_and_only_an_endpoint_asks_for_it() -> None:
    script = (
        "import sys; sys.modules['opentelemetry'] = None\n"
        "from adapters.otel import TracingUnavailable, tracer_from_env\n"
        "assert tracer_from_env({}) is None\n"
        "try:\n"
        "    tracer_from_env({'OTEL_EXPORTER_OTLP_ENDPOINT': 'http://127.0.0.1:9'})\n"
        "except TracingUnavailable as exc:\n"
        "    print(exc.message)\n"
    )
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=60, check=True)
    assert "pip install 'torpor[otel]'" in done.stdout


def test_the_lambda_functions_trace_when_configured_and_export_before_they_return(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from adapters.aws import lambda_app

    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "testing")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "testing")
    env = {"TORPOR_TABLE": "t", "TORPOR_WAKE_QUEUE_URL": "http://127.0.0.1:9/q", "AWS_REGION": "us-east-1"}
    lambda_app.reset()
    try:
        assert lambda_app.build_control_plane(env).engine.tracer.enabled is False  # no endpoint, no tracer
        lambda_app.reset()
        built = lambda_app.build_control_plane({**env, "OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:9"})
        assert isinstance(built.engine.tracer, OtelTracer)
        flushed: list[int] = []
        monkeypatch.setattr(built.engine.tracer, "flush", lambda timeout_ms=5_000: flushed.append(timeout_ms))

        def handler(event: object, context: object) -> str:
            assert flushed == []  # not before the handler is done
            return "answer"

        assert lambda_app.flushes_spans(handler)({}, None) == "answer"
        assert flushed == [5_000]
    finally:
        lambda_app.reset()
