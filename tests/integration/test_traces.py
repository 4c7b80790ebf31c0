"""Traces (issue 17): `eddy serve` exports OTLP/HTTP spans when the OTEL_* environment asks
for them, and nothing when it does not.

A tiny OTLP/HTTP receiver (http.server on a free loopback port, POST /v1/traces) decodes
what it gets with opentelemetry-proto. A producer sends a record whose headers carry a W3C
`traceparent` (a known trace id and span id): the broker's produce span must be its child.
A consumer group joins, fetches its committed offsets, commits and leaves: the group spans
carry seed 003's names in Eddy's namespace and the rebalance-complete span its attributes.
"""

from __future__ import annotations

import gzip
import secrets
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest
from confluent_kafka import Consumer, Producer
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest,
    ExportTraceServiceResponse,
)
from opentelemetry.proto.trace.v1.trace_pb2 import Span

pytestmark = pytest.mark.timeout(90)

_OTEL_VARS = ("OTEL_SDK_DISABLED", "OTEL_TRACES_EXPORTER", "OTEL_SERVICE_NAME",
              "OTEL_RESOURCE_ATTRIBUTES", "OTEL_TRACES_SAMPLER", "OTEL_TRACES_SAMPLER_ARG",
              "OTEL_EXPORTER_OTLP_ENDPOINT", "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT",
              "OTEL_EXPORTER_OTLP_PROTOCOL", "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL",
              "OTEL_EXPORTER_OTLP_COMPRESSION", "OTEL_BSP_SCHEDULE_DELAY")


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
                    resource = {a.key: _value(a.value) for a in rs.resource.attributes}
                    for ss in rs.scope_spans:
                        out.extend((resource, s) for s in ss.spans)
        return out

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


def _value(v: Any) -> Any:
    kind = v.WhichOneof("value")
    return getattr(v, kind) if kind else None


def _attrs(s: Span) -> dict[str, Any]:
    return {a.key: _value(a.value) for a in s.attributes}


@pytest.fixture
def receiver() -> Iterator[Receiver]:
    r = Receiver()
    yield r
    r.close()


@pytest.fixture
def no_otel_env(monkeypatch: pytest.MonkeyPatch) -> pytest.MonkeyPatch:
    for name in _OTEL_VARS:
        monkeypatch.delenv(name, raising=False)
    return monkeypatch


def _consume_in_group(bootstrap: str, topic: str, group: str) -> str:
    """Join, consume one record, commit, leave: the member id it had."""
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": group,
                  "enable.auto.commit": False, "auto.offset.reset": "earliest",
                  "fetch.wait.max.ms": 50, "heartbeat.interval.ms": 200,
                  "session.timeout.ms": 6000})
    try:
        c.subscribe([topic])
        deadline = time.monotonic() + 30
        msg = None
        while msg is None or msg.error() is not None:
            assert time.monotonic() < deadline, "no record consumed"
            msg = c.poll(0.2)
        c.commit(message=msg, asynchronous=False)
        time.sleep(0.5)  # a heartbeat or two
        return str(c.memberid())
    finally:
        c.close()  # LeaveGroup


def test_spans_exported_with_producer_parent_and_group_names(
        eddy_factory: Any, receiver: Receiver, no_otel_env: pytest.MonkeyPatch) -> None:
    no_otel_env.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", receiver.endpoint)
    no_otel_env.setenv("OTEL_BSP_SCHEDULE_DELAY", "100")
    no_otel_env.setenv("OTEL_RESOURCE_ATTRIBUTES", "deployment.environment=trace-test")
    node = eddy_factory()
    trace_id, span_id = secrets.token_bytes(16), secrets.token_bytes(8)
    traceparent = f"00-{trace_id.hex()}-{span_id.hex()}-01".encode()

    p = Producer({"bootstrap.servers": node.bootstrap, "linger.ms": 0})
    p.produce("traced", b"untraced first batch")  # a root span (the default sampler)
    assert p.flush(15) == 0
    p.produce("traced", b"hello", headers=[("other", b"x"), ("traceparent", traceparent)])
    assert p.flush(15) == 0
    member = _consume_in_group(node.bootstrap, "traced", "traced-group")
    assert node.stop() == 0  # SIGTERM: the node flushes its spans before it exits

    spans = receiver.spans()
    assert spans, f"no spans received:\n{node.logs()}"
    assert set(receiver.paths) == {"/v1/traces"}
    resource = spans[0][0]
    assert resource["service.name"] == "eddy"
    assert resource["deployment.environment"] == "trace-test"
    by_name: dict[str, list[Span]] = {}
    for _, s in spans:
        by_name.setdefault(s.name, []).append(s)

    produced = by_name["eddy.broker.produce"]
    children = [s for s in produced if s.trace_id == trace_id]
    assert len(children) == 1, [(s.trace_id.hex(), s.parent_span_id.hex()) for s in produced]
    child = children[0]
    assert child.parent_span_id == span_id
    assert child.kind == Span.SpanKind.SPAN_KIND_SERVER
    assert _attrs(child)["topic"] == "traced"
    # the batch without a traceparent: a root span of its own trace
    roots = [s for s in produced if s.trace_id != trace_id]
    assert roots and all(s.parent_span_id == b"" for s in roots)

    for name in ("eddy.broker.group.join", "eddy.broker.group.sync",
                 "eddy.broker.group.offset-fetch", "eddy.broker.group.offset-commit",
                 "eddy.broker.group.leave"):
        assert name in by_name, (name, sorted(by_name))
        assert _attrs(by_name[name][0])["group_id"] == "traced-group"
    done = by_name["eddy.broker.coordinator.rebalance-complete"]
    attrs = _attrs(done[0])
    assert attrs["generation_id"] >= 1
    assert attrs["leader_id"] == member  # the only member leads
    joins = {s.span_id: s for s in by_name["eddy.broker.group.join"]}
    assert done[0].parent_span_id in joins  # nested in the join that completed it
    assert "eddy.broker.fetch" in by_name
    assert not [n for n in by_name if n.startswith("rafka.")]


@pytest.mark.parametrize("off", [{"OTEL_TRACES_EXPORTER": "none"},
                                 {"OTEL_SDK_DISABLED": "true"}], ids=["exporter-none", "disabled"])
def test_nothing_exported_when_turned_off(
        eddy_factory: Any, receiver: Receiver, no_otel_env: pytest.MonkeyPatch,
        off: dict[str, str]) -> None:
    # an endpoint alone would turn traces on: these variables turn them off again
    no_otel_env.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", receiver.endpoint)
    no_otel_env.setenv("OTEL_BSP_SCHEDULE_DELAY", "50")
    for k, v in off.items():
        no_otel_env.setenv(k, v)
    node = eddy_factory()
    p = Producer({"bootstrap.servers": node.bootstrap, "linger.ms": 0})
    tp = f"00-{secrets.token_hex(16)}-{secrets.token_hex(8)}-01".encode()
    p.produce("untraced", b"v", headers=[("traceparent", tp)])
    assert p.flush(15) == 0
    assert node.stop() == 0
    assert receiver.requests == []
    assert "traces on" not in node.logs()


def test_no_otel_env_imports_no_sdk() -> None:
    """Without OTEL_* variables a node sets nothing up and imports only the API (a fresh
    interpreter: this one may have the SDK loaded by other tests)."""
    code = ("import os, sys\n"
            "for k in [k for k in os.environ if k.startswith('OTEL_')]: del os.environ[k]\n"
            "import eddy.node, eddy.broker.server\n"
            "from eddy.observe import otel_setup, tracing\n"
            "assert otel_setup.start(1) is False and tracing.enabled is False\n"
            "bad = sorted(m for m in sys.modules if m.startswith('opentelemetry.sdk')"
            " or m.startswith('opentelemetry.exporter'))\n"
            "assert not bad, bad\n")
    subprocess.run([sys.executable, "-c", code], check=True, timeout=60)
