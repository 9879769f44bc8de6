"""An OTLP/HTTP trace receiver for tests: `POST /v1/traces` with an `ExportTraceServiceRequest`
(protobuf, as the OpenTelemetry SDK's `OTLPSpanExporter` sends it), kept as `ReceivedSpan`s."""

from __future__ import annotations

import gzip
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest,
    ExportTraceServiceResponse,
)


@dataclass(frozen=True)
class ReceivedSpan:
    """One span as it arrived: ids in hex (`parent` "" for a root), times in ns since the epoch."""

    name: str
    trace_id: str
    span_id: str
    parent: str
    start_ns: int
    end_ns: int
    status: int  # 0 unset, 1 ok, 2 error
    status_message: str
    attributes: dict[str, Any]
    service_name: str


class OtlpReceiver:
    """The spans received so far (`spans`), over every request; thread-safe."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._spans: list[ReceivedSpan] = []
        self.url = ""

    @property
    def spans(self) -> list[ReceivedSpan]:
        with self._lock:
            return list(self._spans)

    def receive(self, body: bytes) -> None:
        request = ExportTraceServiceRequest()
        request.ParseFromString(body)
        received: list[ReceivedSpan] = []
        for resource_spans in request.resource_spans:
            resource = {a.key: a.value.string_value for a in resource_spans.resource.attributes}
            for scope_spans in resource_spans.scope_spans:
                for span in scope_spans.spans:
                    attributes = {a.key: _value(a.value) for a in span.attributes}
                    received.append(
                        ReceivedSpan(
                            name=span.name,
                            trace_id=span.trace_id.hex(),
                            span_id=span.span_id.hex(),
                            parent=span.parent_span_id.hex(),
                            start_ns=span.start_time_unix_nano,
                            end_ns=span.end_time_unix_nano,
                            status=span.status.code,
                            status_message=span.status.message,
                            attributes=attributes,
                            service_name=resource.get("service.name", ""),
                        )
                    )
        with self._lock:
            self._spans.extend(received)


def _value(value: Any) -> Any:
    kind = value.WhichOneof("value")
    return getattr(value, kind) if kind else None


@contextmanager
def otlp_receiver() -> Iterator[OtlpReceiver]:
    """An `OtlpReceiver` listening on a free loopback port; `url` is its base (`http://127.0.0.1:PORT`),
    the value of `OTEL_EXPORTER_OTLP_ENDPOINT`."""
    receiver = OtlpReceiver()

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:  # noqa: N802 (http.server's name)
            body = self.rfile.read(int(self.headers.get("content-length", "0")))
            if self.headers.get("content-encoding") == "gzip":
                body = gzip.decompress(body)
            if self.path != "/v1/traces":
                self.send_response(404)
                self.end_headers()
                return
            receiver.receive(body)
            answer = ExportTraceServiceResponse().SerializeToString()
            self.send_response(200)
            self.send_header("content-type", "application/x-protobuf")
            self.send_header("content-length", str(len(answer)))
            self.end_headers()
            self.wfile.write(answer)

        def log_message(self, format: str, *args: Any) -> None:  # noqa: A002
            return None

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    receiver.url = f"http://127.0.0.1:{server.server_address[1]}"
    thread = threading.Thread(target=server.serve_forever, name="otlp-receiver", daemon=True)
    thread.start()
    try:
        yield receiver
    finally:
        server.shutdown()
        server.server_close()
