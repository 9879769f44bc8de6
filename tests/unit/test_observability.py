"""Metrics text, request metering, list-price costs and trace context."""

from __future__ import annotations

import json
import logging
import threading

from adapters.cli.local import _configure_logging
import pytest
from prometheus_client.parser import text_string_to_metric_families

from control_plane.observability import (
    PrometheusMetrics,
    metered,
    record,
    time_store_calls,
    trace_id_from,
    traceparent,
)
from http_api.prices import cost_usd


def test_metrics_render_as_prometheus_text_with_help_histograms_and_labels_escaped() -> None:
    metrics = PrometheusMetrics()
    metrics.count("attempts", service="Greeter", handler="greet")
    metrics.count("attempts", service="Greeter", handler="greet")
    metrics.count("attempts", service='We"ird', handler="x")
    metrics.observe("attempt_duration", 12.5, service="Greeter", handler="greet")
    metrics.observe("attempt_duration", 7.5, service="Greeter", handler="greet")
    metrics.observe("made_up", 3)  # a name outside the catalogues is registered as first used
    text = metrics.render().decode()
    families = {family.name: family for family in text_string_to_metric_families(text)}
    assert families["torpor_attempts"].type == "counter"
    assert families["torpor_attempts"].documentation.startswith("Attempts sent to deployments")
    samples = {(s.name, tuple(sorted(s.labels.items()))): s.value for s in families["torpor_attempts"].samples}
    assert samples[("torpor_attempts_total", (("handler", "greet"), ("service", "Greeter")))] == 2
    assert samples[("torpor_attempts_total", (("handler", "x"), ("service", 'We"ird')))] == 1
    latency = families["torpor_attempt_duration_seconds"]
    assert latency.type == "histogram"
    by_name = {(s.name, s.labels.get("le")): s.value for s in latency.samples}
    assert by_name[("torpor_attempt_duration_seconds_count", None)] == 2
    assert by_name[("torpor_attempt_duration_seconds_sum", None)] == pytest.approx(0.020)
    assert by_name[("torpor_attempt_duration_seconds_bucket", "0.01")] == 1  # 7.5 ms, in seconds
    assert by_name[("torpor_attempt_duration_seconds_bucket", "+Inf")] == 2
    assert families["torpor_made_up_seconds"].type == "histogram"
    assert "torpor_attempts_created" not in text  # no `_created` series
    assert metrics.counter("attempts") == 3
    assert metrics.counter("attempts", service="Greeter", handler="greet") == 2
    assert metrics.counter("attempts", service="Nobody", handler="greet") == 0


def test_store_calls_are_timed_once_by_operation_even_when_they_raise() -> None:
    class Store:
        def get(self, key: str) -> str:
            return key

        def fail(self) -> None:
            raise KeyError("no")

    metrics = PrometheusMetrics()
    store = Store()
    time_store_calls(store, metrics, ("get", "fail", "missing"))
    time_store_calls(store, metrics, ("get",))  # asked again: not timed twice
    assert store.get("k") == "k"
    with pytest.raises(KeyError):
        store.fail()
    assert metrics.registry.get_sample_value("torpor_store_call_duration_seconds_count", {"operation": "get"}) == 1
    assert metrics.registry.get_sample_value("torpor_store_call_duration_seconds_count", {"operation": "fail"}) == 1


def test_requests_are_metered_per_context_and_not_outside() -> None:
    record("dynamodb PutItem")  # outside: nothing to count into, no error
    seen: list[int] = []
    with metered() as counts:
        record("dynamodb PutItem")
        record("dynamodb BatchWriteItem", 25)
        thread = threading.Thread(target=lambda: (record("sqs SendMessage"), seen.append(1)))
        thread.start()
        thread.join()
    assert counts == {"dynamodb PutItem": 1, "dynamodb BatchWriteItem": 25}
    assert seen == [1]


def test_costs_use_list_prices_and_count_record_writes_with_their_index() -> None:
    cost = cost_usd(
        {
            "dynamodb PutItem": 4,
            "dynamodb UpdateItem META": 2,  # 3 write units each
            "dynamodb Query": 8,
            "sqs SendMessage": 5,
            "scheduler CreateSchedule": 1,
            "lambda Invoke": 10,
            "lambda WakeInvoke": 3,  # TORPOR_WAKE=invoke: the worker woken by an asynchronous Invoke
        }
    )
    assert abs(cost["dynamodb"] - (10 * 0.625e-6 + 8 * 0.125e-6)) < 1e-15
    assert abs(cost["sqs"] - 5 * 0.4e-6) < 1e-15
    assert abs(cost["scheduler"] - 1e-6) < 1e-15
    assert abs(cost["lambda_handler_requests"] - 10 * 0.2e-6) < 1e-15
    assert abs(cost["lambda_wake_requests"] - 3 * 0.2e-6) < 1e-15


def test_a_valid_incoming_traceparent_keeps_its_trace_and_others_start_one() -> None:
    trace = "4bf92f3577b34da6a3ce929d0e0e4736"
    assert trace_id_from({"traceparent": f"00-{trace}-00f067aa0ba902b7-01"}) == trace
    for bad in ("", "garbage", f"00-{'0' * 32}-00f067aa0ba902b7-01", f"00-{trace}-{'0' * 16}-01"):
        fresh = trace_id_from({"traceparent": bad})
        assert len(fresh) == 32
        assert fresh != trace
    header = traceparent(trace, "inv_1abc")
    assert header.startswith(f"00-{trace}-")
    assert header.endswith("-01")
    assert header == traceparent(trace, "inv_1abc") != traceparent(trace, "inv_2abc")


def test_json_logs_carry_the_invocation_fields(capsys: object) -> None:
    root = logging.getLogger()
    saved = root.handlers[:]
    root.handlers = []
    try:
        _configure_logging("json")
        logging.getLogger("torpor.invocation").info(
            "attempt 1 of inv_1",
            extra={"invocation_id": "inv_1", "service": "Greeter", "handler": "greet", "attempt": 1},
        )
        line = capsys.readouterr().err.strip().splitlines()[-1]  # type: ignore[attr-defined]
    finally:
        root.handlers = saved
    logged = json.loads(line)
    assert logged["message"] == "attempt 1 of inv_1"
    assert (logged["invocation_id"], logged["service"], logged["handler"], logged["attempt"]) == (
        "inv_1",
        "Greeter",
        "greet",
        1,
    )
