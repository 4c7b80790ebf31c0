"""Traces (issue 17): `eddy serve` exports OTLP/HTTP spans when the OTEL_* environment asks
for them, and nothing when it does not.

A tiny OTLP/HTTP receiver (tests/otlp_receiver.py) decodes what it gets with
opentelemetry-proto. A producer sends a record whose headers carry a W3C `traceparent` (a
known trace id and span id): the broker's produce span must be its child. A consumer group
finds its coordinator, joins, fetches its committed offsets, commits, heartbeats and leaves:
the spans carry seed 003's names in Eddy's namespace and the rebalance-complete span its
attributes."""

from __future__ import annotations

import secrets
import subprocess
import sys
import time
from collections.abc import Iterator
from typing import Any

import pytest
from confluent_kafka import Consumer, Producer
from opentelemetry.proto.trace.v1.trace_pb2 import Span
from otlp_receiver import OTEL_VARS, Receiver, attrs

pytestmark = pytest.mark.timeout(90)


@pytest.fixture
def receiver() -> Iterator[Receiver]:
    r = Receiver()
    yield r
    r.close()


@pytest.fixture
def no_otel_env(monkeypatch: pytest.MonkeyPatch) -> pytest.MonkeyPatch:
    for name in OTEL_VARS:
        monkeypatch.delenv(name, raising=False)
    return monkeypatch


def _consume_in_group(bootstrap: str, topic: str, group: str, receiver: Receiver) -> str:
    """Join, consume one record, commit, heartbeat, leave: the member id it had."""
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
        # the member stays in the group until the node exported one of its heartbeats
        receiver.wait_for(lambda _, s: s.name == "eddy.broker.group.heartbeat"
                          and attrs(s).get("group_id") == group,
                          f"a heartbeat span of {group}", between=lambda: c.poll(0.1))
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
    member = _consume_in_group(node.bootstrap, "traced", "traced-group", receiver)
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
    assert attrs(child)["topic"] == "traced"
    # the batch without a traceparent: a root span of its own trace
    roots = [s for s in produced if s.trace_id != trace_id]
    assert roots and all(s.parent_span_id == b"" for s in roots)

    for name in ("eddy.broker.group.join", "eddy.broker.group.sync",
                 "eddy.broker.group.offset-fetch", "eddy.broker.group.offset-commit",
                 "eddy.broker.group.heartbeat", "eddy.broker.group.leave"):
        assert name in by_name, (name, sorted(by_name))
        assert attrs(by_name[name][0])["group_id"] == "traced-group"
    # the client found its coordinator straight from the broker: key_type 0 (a group)
    found = by_name["eddy.broker.kafka.find-coordinator"]
    assert {attrs(s)["key_type"] for s in found} == {0}
    done = by_name["eddy.broker.coordinator.rebalance-complete"]
    completed = attrs(done[0])
    assert completed["generation_id"] >= 1
    assert completed["leader_id"] == member  # the only member leads
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
            "import eddy.node.parts, eddy.broker.server\n"
            "from eddy.telemetry import otel_setup, tracing\n"
            "assert otel_setup.start(1) is False and tracing.enabled is False\n"
            "bad = sorted(m for m in sys.modules if m.startswith('opentelemetry.sdk')"
            " or m.startswith('opentelemetry.exporter'))\n"
            "assert not bad, bad\n")
    subprocess.run([sys.executable, "-c", code], check=True, timeout=60)
