"""OpenTelemetry traces and Prometheus metrics of a real `torpor dev` process, with real restate-sdk
handlers: spans exported over OTLP/HTTP to a receiver in this process (`tests.helpers.otlp`), in
restate-server 1.7.12's shape (docs/observability.md), and `/metrics` parsed by prometheus_client.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families

from tests.helpers.dev import torpor_dev_process, wait_for
from tests.helpers.otlp import OtlpReceiver, ReceivedSpan, otlp_receiver
from tests.helpers.services import serve_examples

CLIENT_TRACE = "4bf92f3577b34da6a3ce929d0e0e4736"
CLIENT_SPAN = "00f067aa0ba902b7"


@pytest.fixture(scope="module", params=["request-response", "bidirectional"])
def traced(
    request: pytest.FixtureRequest, examples_url: str, effects_file: Path
) -> Iterator[tuple[str, str, OtlpReceiver]]:
    """`torpor dev --in-memory` exporting to an OTLP receiver (batches every 100 ms), the examples
    registered, over HTTP/1.1 (request/response) or HTTP/2 (bidirectional mode):
    `(ingress URL, admin URL, receiver)`."""
    with contextlib.ExitStack() as stack:
        if request.param == "bidirectional":
            examples_url, _ = stack.enter_context(serve_examples(side_effects_file=effects_file, http2=True))
        yield stack.enter_context(_traced_dev(examples_url))


@contextlib.contextmanager
def _traced_dev(examples_url: str) -> Iterator[tuple[str, str, OtlpReceiver]]:
    with otlp_receiver() as receiver:
        env = {
            "OTEL_EXPORTER_OTLP_ENDPOINT": receiver.url,
            "OTEL_SERVICE_NAME": "torpor-under-test",
            "OTEL_BSP_SCHEDULE_DELAY": "100",
        }
        with torpor_dev_process("--in-memory", env=env) as (ingress, admin, _process):
            reply = httpx.post(f"{admin}/deployments", json={"uri": examples_url}, timeout=30)
            assert reply.status_code == 201, reply.text
            yield ingress, admin, receiver


def spans_of(receiver: OtlpReceiver, invocation_id: str) -> dict[str, list[ReceivedSpan]]:
    """The spans of one invocation by name's first word (`ingress`, `invocation-start`, ...)."""
    spans: dict[str, list[ReceivedSpan]] = {}
    for span in receiver.spans:
        if span.attributes.get("restate.invocation.id") == invocation_id:
            spans.setdefault(span.name.split(" ")[0], []).append(span)
    return spans


def ended(receiver: OtlpReceiver, invocation_id: str) -> dict[str, list[ReceivedSpan]]:
    """`spans_of` once its `invocation-end` span arrived."""
    wait_for(lambda: "invocation-end" in spans_of(receiver, invocation_id), 30, f"the end span of {invocation_id}")
    return spans_of(receiver, invocation_id)


def test_an_invocation_is_traced_as_restate_server_does_and_its_handler_gets_the_attempt_span(
    traced: tuple[str, str, OtlpReceiver],
) -> None:
    ingress, _admin, receiver = traced
    reply = httpx.post(
        f"{ingress}/Chain/trace", headers={"traceparent": f"00-{CLIENT_TRACE}-{CLIENT_SPAN}-01"}, timeout=30
    )
    assert reply.status_code == 200, reply.text
    invocation_id = reply.headers["x-restate-id"]
    spans = ended(receiver, invocation_id)

    (entry,) = spans["ingress"]
    (start,) = spans["invocation-start"]
    (attempt,) = spans["invocation-attempt"]
    (end,) = spans["invocation-end"]
    assert {s.trace_id for s in (entry, start, attempt, end)} == {CLIENT_TRACE}
    assert entry.name == "ingress Chain/trace"
    assert entry.parent == CLIENT_SPAN  # the client's span
    assert start.parent == entry.span_id
    assert attempt.parent == start.span_id and end.parent == start.span_id
    assert attempt.attributes["rpc.system"] == "restate"
    assert attempt.attributes["restate.invocation.target"] == "Chain/trace"
    assert attempt.attributes["restate.deployment.id"].startswith("dp_")
    assert attempt.status == 1 and end.status == 1  # ok
    assert end.attributes["restate.invocation.result"] == "success"
    assert end.start_ns <= attempt.start_ns and end.end_ns >= attempt.end_ns  # creation to completion
    assert entry.service_name == "torpor-under-test"
    # the handler's attempt carried the attempt's span, in the client's trace
    assert reply.json()["traceparent"] == f"00-{CLIENT_TRACE}-{attempt.span_id}-01"


def test_calls_and_suspensions_keep_one_trace_with_parent_links(
    traced: tuple[str, str, OtlpReceiver], request: pytest.FixtureRequest
) -> None:
    ingress, _admin, receiver = traced
    reply = httpx.post(f"{ingress}/Chain/a", json=200, timeout=60)  # a → b → c, c sleeps 200 ms
    assert reply.status_code == 200, reply.text
    a = ended(receiver, reply.headers["x-restate-id"])
    trace = a["ingress"][0].trace_id
    assert a["ingress"][0].parent == ""  # no client trace: a new one, the ingress span its root
    by_target: dict[str, dict[str, list[ReceivedSpan]]] = {}
    for span in receiver.spans:
        if span.trace_id == trace:
            by_target.setdefault(span.attributes["restate.invocation.target"], {}).setdefault(
                span.name.split(" ")[0], []
            ).append(span)
    wait_for(lambda: "invocation-end" in spans_of(receiver, _id_of(receiver, trace, "Chain/c")), 30, "c's end")
    for caller, callee in (("Chain/a", "Chain/b"), ("Chain/b", "Chain/c")):
        spans = {name: [s for s in receiver.spans if s.trace_id == trace and s.name == f"{name} {callee}"]
                 for name in ("invocation-start", "ingress")}  # fmt: skip
        assert spans["ingress"] == []  # a call has no ingress span
        (start,) = spans["invocation-start"]
        caller_attempts = {s.span_id for s in receiver.spans if s.name == f"invocation-attempt {caller}"}
        assert start.parent in caller_attempts, f"{callee}'s span is not a child of an attempt of {caller}"
    c = spans_of(receiver, _id_of(receiver, trace, "Chain/c"))
    if request.node.callspec.params["traced"] == "request-response":
        assert len(c["invocation-attempt"]) >= 2  # it suspended in its sleep and was resumed
    assert {s.parent for s in c["invocation-attempt"]} == {c["invocation-start"][0].span_id}
    assert c["invocation-end"][0].end_ns - c["invocation-end"][0].start_ns >= 200_000_000


def _id_of(receiver: OtlpReceiver, trace: str, target: str) -> str:
    for span in receiver.spans:
        if span.trace_id == trace and span.attributes.get("restate.invocation.target") == target:
            return str(span.attributes["restate.invocation.id"])
    raise AssertionError(f"no span of {target} in trace {trace}")


def test_a_trace_the_client_does_not_sample_sends_no_traceparent_and_no_span(
    traced: tuple[str, str, OtlpReceiver],
) -> None:
    ingress, _admin, receiver = traced
    reply = httpx.post(f"{ingress}/Chain/trace", headers={"traceparent": f"00-{'5' * 32}-{CLIENT_SPAN}-00"}, timeout=30)
    assert reply.status_code == 200, reply.text
    assert reply.json()["traceparent"] is None  # as restate-server 1.7.12 answers it
    sampled = httpx.post(f"{ingress}/Chain/trace", timeout=30)  # spans sent after it: it had its chance
    ended(receiver, sampled.headers["x-restate-id"])
    assert spans_of(receiver, reply.headers["x-restate-id"]) == {}


def test_metrics_of_the_process_parse_with_help_and_histograms(traced: tuple[str, str, OtlpReceiver]) -> None:
    ingress, admin, _receiver = traced
    assert httpx.post(f"{ingress}/Chain/trace", timeout=30).status_code == 200
    reply = httpx.get(f"{admin}/metrics", timeout=10)
    assert reply.status_code == 200
    assert reply.headers["content-type"].startswith("text/plain; version=0.0.4")
    families = {family.name: family for family in text_string_to_metric_families(reply.text)}
    for family in families.values():
        assert family.documentation, f"{family.name} has no help text"
    for name in ("attempt_duration", "invocation_duration", "store_call_duration"):
        family = families[f"torpor_{name}_seconds"]
        assert family.type == "histogram"
        buckets = [s for s in family.samples if s.name.endswith("_bucket")]
        assert buckets and any(s.labels["le"] == "+Inf" and s.value >= 1 for s in buckets)
    completed = [s for s in families["torpor_invocations_completed"].samples if s.labels["handler"] == "trace"]
    assert {s.labels["outcome"] for s in completed} == {"success"}
    operations = {s.labels["operation"] for s in families["torpor_store_call_duration_seconds"].samples}
    assert {"create_invocation", "complete"} <= operations


def _shape(spans: list[ReceivedSpan], client_span: str) -> set[tuple[str, str]]:
    """The edges `(span kind, its parent's kind)` of one invocation's spans, by the name's first word
    (`client` for the client's span)."""
    kinds = {span.span_id: span.name.split(" ")[0] for span in spans}
    kinds[client_span] = "client"
    return {(span.name.split(" ")[0], kinds.get(span.parent, "?")) for span in spans}


def test_the_spans_have_restate_servers_names_and_links(
    traced: tuple[str, str, OtlpReceiver], request: pytest.FixtureRequest, examples_url: str
) -> None:
    """Differential: the same call on restate-server 1.7.12 exporting to its own receiver."""
    if request.node.callspec.params["traced"] != "request-response":
        pytest.skip("compared once, over HTTP/1.1")
    from tests.conformance.harness import RestateRuntime

    def traced_call(ingress: str, receiver: OtlpReceiver) -> tuple[set[tuple[str, str]], str, str]:
        reply = httpx.post(
            f"{ingress}/Chain/trace", headers={"traceparent": f"00-{CLIENT_TRACE}-{CLIENT_SPAN}-01"}, timeout=60
        )
        assert reply.status_code == 200, reply.text
        invocation_id = reply.headers["x-restate-id"]
        spans = ended(receiver, invocation_id)
        attempts = spans["invocation-attempt"]
        names = {span.name for group in spans.values() for span in group}
        flat = [span for group in spans.values() for span in group]
        assert reply.json()["traceparent"] == f"00-{CLIENT_TRACE}-{attempts[0].span_id}-01"
        return _shape(flat, CLIENT_SPAN), " ".join(sorted(names)), attempts[0].attributes["rpc.system"]

    torpor_ingress, _admin, torpor_receiver = traced
    ours = traced_call(torpor_ingress, torpor_receiver)
    with otlp_receiver() as receiver:
        restate = RestateRuntime()
        restate.process.env["RESTATE_TRACING_ENDPOINT"] = f"otlp+{receiver.url}/v1/traces"
        try:
            restate.start()
            registered = httpx.post(
                f"{restate.admin_url}/deployments", json={"uri": examples_url, "use_http_11": True}, timeout=60
            )
            assert registered.status_code == 201, registered.text
            theirs = traced_call(restate.ingress_url, receiver)
        finally:
            restate.close()
    assert ours == theirs
    assert ours[0] == {
        ("ingress", "client"),
        ("invocation-start", "ingress"),
        ("invocation-attempt", "invocation-start"),
        ("invocation-end", "invocation-start"),
    }
