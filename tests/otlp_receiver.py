"""A tiny OTLP/HTTP trace receiver for the trace tests: http.server on a free loopback port
takes POST /v1/traces (protobuf, gzip or not) and decodes each export request with
opentelemetry-proto. Several `eddy serve` processes may export to one receiver; each span
comes back with its resource's attributes (service.name tells the processes apart).
"""

from __future__ import annotations

import gzip
import threading
import time
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest,
    ExportTraceServiceResponse,
)
from opentelemetry.proto.trace.v1.trace_pb2 import Span

#: the OTEL_* variables a trace test clears before it sets its own
OTEL_VARS = ("OTEL_SDK_DISABLED", "OTEL_TRACES_EXPORTER", "OTEL_SERVICE_NAME",
             "OTEL_RESOURCE_ATTRIBUTES", "OTEL_TRACES_SAMPLER", "OTEL_TRACES_SAMPLER_ARG",
             "OTEL_EXPORTER_OTLP_ENDPOINT", "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT",
             "OTEL_EXPORTER_OTLP_PROTOCOL", "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL",
             "OTEL_EXPORTER_OTLP_COMPRESSION", "OTEL_BSP_SCHEDULE_DELAY")

#: a body larger than this is refused (a test's export is a few KB)
MAX_BODY = 16 << 20


def value(v: Any) -> Any:
    """The Python value of an OTLP AnyValue."""
    kind = v.WhichOneof("value")
    return getattr(v, kind) if kind else None


def attrs(s: Span) -> dict[str, Any]:
    """A span's attributes as a dict."""
    return {a.key: value(a.value) for a in s.attributes}


class Receiver:
    """OTLP/HTTP trace receiver: every export request it got, decoded."""

    def __init__(self) -> None:
        self.requests: list[ExportTraceServiceRequest] = []
        self.paths: list[str] = []
        self.lock = threading.Lock()
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                n = int(self.headers.get("Content-Length", "0"))
                if n < 0 or n > MAX_BODY:
                    self.send_error(413, f"Content-Length {n} out of range")
                    return
                body = self.rfile.read(n)
                if self.headers.get("Content-Encoding") == "gzip":
                    body = gzip.decompress(body)
                req = ExportTraceServiceRequest()
                req.ParseFromString(body)
                with receiver.lock:
                    receiver.paths.append(self.path)
                    receiver.requests.append(req)
                out = ExportTraceServiceResponse().SerializeToString()
                self.send_response(200)
                self.send_header("Content-Type", "application/x-protobuf")
                self.send_header("Content-Length", str(len(out)))
                self.end_headers()
                self.wfile.write(out)

            def log_message(self, format: str, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    @property
    def endpoint(self) -> str:
        return f"http://127.0.0.1:{self.server.server_address[1]}"

    def spans(self) -> list[tuple[dict[str, Any], Span]]:
        """(resource attributes, span) of every span received."""
        out: list[tuple[dict[str, Any], Span]] = []
        with self.lock:
            for req in self.requests:
                for rs in req.resource_spans:
                    resource = {a.key: value(a.value) for a in rs.resource.attributes}
                    for ss in rs.scope_spans:
                        out.extend((resource, s) for s in ss.spans)
        return out

    def wait_for(self, match: Callable[[dict[str, Any], Span], bool], what: str,
                 timeout: float = 20.0, between: Callable[[], object] | None = None
                 ) -> list[tuple[dict[str, Any], Span]]:
        """Poll until some received span matches; returns the matching ones. ``between``
        runs between polls (a client's poll loop, say)."""
        deadline = time.monotonic() + timeout
        while True:
            found = [(r, s) for r, s in self.spans() if match(r, s)]
            if found:
                return found
            if time.monotonic() >= deadline:
                raise AssertionError(f"not within {timeout} s: {what} (spans: "
                                     f"{sorted({s.name for _, s in self.spans()})})")
            if between is not None:
                between()
            else:
                time.sleep(0.1)

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()
