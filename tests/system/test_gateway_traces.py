"""Traces across the gateway and the mesh (issue 17): a gateway node and a broker node,
two `eddy serve` processes joined by the QUIC mesh on loopback, both exporting OTLP/HTTP
spans to one test receiver (tests/otlp_receiver.py); OTEL_SERVICE_NAME tells them apart.

A confluent-kafka consumer in a group, given the gateway's bootstrap only, finds its
coordinator, joins, syncs, fetches its offsets, commits, heartbeats and leaves: the gateway
exports seed 003's `eddy.gateway.*` spans, and the broker's spans for each forwarded op
(`eddy.mesh.kafka-op.serve`, `eddy.broker.group.*`) are in the same trace and descend from
the gateway's span: the mesh's 32-byte trace header continued the trace. A record produced
through the gateway with a W3C `traceparent` header makes the broker's produce span a child
of the producer's span.
"""

from __future__ import annotations

import secrets
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Consumer, Producer
from confluent_kafka.admin import AdminClient, NewTopic
from conftest import EddyProcess
from mesh_cluster import free_udp_port, node_states, wait_for
from opentelemetry.proto.trace.v1.trace_pb2 import Span
from otlp_receiver import OTEL_VARS, Receiver, attrs

pytestmark = pytest.mark.timeout(120)

GATEWAY_ID, BROKER_ID = 100, 1
GATEWAY_SERVICE, BROKER_SERVICE = "eddy-gateway", "eddy-broker"
TOPIC = "gw-traced"
#: gateway span -> the broker's span for the op it forwarded
FORWARDED = {
    "eddy.gateway.group.join": "eddy.broker.group.join",
    "eddy.gateway.group.sync": "eddy.broker.group.sync",
    "eddy.gateway.group.heartbeat": "eddy.broker.group.heartbeat",
    "eddy.gateway.group.offset-commit": "eddy.broker.group.offset-commit",
    "eddy.gateway.group.offset-fetch": "eddy.broker.group.offset-fetch",
    "eddy.gateway.group.leave": "eddy.broker.group.leave",
}

Received = tuple[dict[str, Any], Span]


@dataclass
class Cluster:
    gateway: EddyProcess
    broker: EddyProcess
    receiver: Receiver


def _start(proc: EddyProcess, service: str, endpoint: str) -> None:
    """Start ``proc`` exporting its spans as ``service`` (EddyProcess passes os.environ)."""
    with pytest.MonkeyPatch.context() as mp:
        for name in OTEL_VARS:
            mp.delenv(name, raising=False)
        mp.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", endpoint)
        mp.setenv("OTEL_BSP_SCHEDULE_DELAY", "100")
        mp.setenv("OTEL_SERVICE_NAME", service)
        proc.start()


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    root: Path = tmp_path_factory.mktemp("gwtraces")
    receiver = Receiver()
    p1, p0 = free_udp_port(), free_udp_port()
    broker = EddyProcess(root / "broker", [
        "--node-id", str(BROKER_ID), "--set", f"mesh.listener=127.0.0.1:{p1}",
        "--set", "num.partitions=1"])
    gateway = EddyProcess(root / "gateway", [
        "--node-id", str(GATEWAY_ID), "--set", "process.roles=gateway",
        "--set", f"mesh.listener=127.0.0.1:{p0}", "--set", f"mesh.seeds=127.0.0.1:{p1}"])
    try:
        _start(broker, BROKER_SERVICE, receiver.endpoint)
        _start(gateway, GATEWAY_SERVICE, receiver.endpoint)
        wait_for(lambda: node_states(gateway).get(BROKER_ID) == "alive", 30,
                 "the gateway sees the broker alive")
        yield Cluster(gateway, broker, receiver)
    finally:
        gateway.kill()
        broker.kill()
        receiver.close()


# ---- span helpers --------------------------------------------------------------------------


def _service(received: Received) -> str:
    return str(received[0].get("service.name"))


def _named(spans: list[Received], name: str, service: str) -> list[Span]:
    return [s for r, s in spans if s.name == name and r.get("service.name") == service]


def _descends(span: Span, ancestor: Span, by_id: dict[bytes, Span]) -> bool:
    """``span`` is ``ancestor`` or below it, following parent ids through spans received
    (from any process) in the same trace."""
    seen: set[bytes] = set()
    current: Span | None = span
    while current is not None and current.span_id not in seen:
        if current.trace_id != ancestor.trace_id:
            return False
        if current.span_id == ancestor.span_id:
            return True
        seen.add(current.span_id)
        current = by_id.get(current.parent_span_id)
    return False


def _chain(span: Span, by_id: dict[bytes, Span], services: dict[bytes, str]) -> list[str]:
    """``span``'s ancestry as "service:name" (for failure messages)."""
    out: list[str] = []
    current: Span | None = span
    while current is not None and len(out) < 16:
        out.append(f"{services.get(current.span_id, '?')}:{current.name}")
        current = by_id.get(current.parent_span_id)
    return out


# ---- clients -------------------------------------------------------------------------------


def _create_topic(bootstrap: str) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    futures = admin.create_topics([NewTopic(TOPIC, num_partitions=1, replication_factor=1)],
                                  operation_timeout=10, request_timeout=15)
    futures[TOPIC].result(timeout=20)


def _produce_traced(bootstrap: str, traceparent: bytes) -> None:
    p = Producer({"bootstrap.servers": bootstrap, "linger.ms": 0})
    p.produce(TOPIC, b"traced through the gateway",
              headers=[("traceparent", traceparent)])
    assert p.flush(20) == 0


def _consume_in_group(bootstrap: str, group: str, receiver: Receiver) -> None:
    """Find the coordinator, join, sync, fetch offsets, consume one record, commit, stay
    until a heartbeat went through the gateway, leave."""
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": group,
                  "enable.auto.commit": False, "auto.offset.reset": "earliest",
                  "fetch.wait.max.ms": 50, "heartbeat.interval.ms": 200,
                  "session.timeout.ms": 6000})
    try:
        c.subscribe([TOPIC])
        deadline = time.monotonic() + 40
        msg = None
        while msg is None or msg.error() is not None:
            assert time.monotonic() < deadline, "no record consumed through the gateway"
            msg = c.poll(0.2)
        c.commit(message=msg, asynchronous=False)
        receiver.wait_for(lambda r, s: s.name == "eddy.broker.group.heartbeat"
                          and r.get("service.name") == BROKER_SERVICE
                          and attrs(s).get("group_id") == group,
                          f"a heartbeat of {group} served by the broker",
                          between=lambda: c.poll(0.1))
    finally:
        c.close()  # LeaveGroup


# ---- the test ------------------------------------------------------------------------------


def test_group_and_produce_traces_cross_the_mesh(cluster: Cluster) -> None:
    receiver, bootstrap = cluster.receiver, cluster.gateway.bootstrap
    group = f"gw-traced-{uuid.uuid4().hex[:8]}"
    trace_id, span_id = secrets.token_bytes(16), secrets.token_bytes(8)

    _create_topic(bootstrap)
    _produce_traced(bootstrap, f"00-{trace_id.hex()}-{span_id.hex()}-01".encode())
    _consume_in_group(bootstrap, group, receiver)
    # the leave's spans, exported by both nodes within their batch delay
    receiver.wait_for(lambda r, s: s.name == "eddy.broker.group.leave"
                      and r.get("service.name") == BROKER_SERVICE
                      and attrs(s).get("group_id") == group,
                      f"the broker's leave span of {group}")
    receiver.wait_for(lambda r, s: s.name == "eddy.gateway.group.leave"
                      and r.get("service.name") == GATEWAY_SERVICE,
                      "the gateway's leave span")

    spans = receiver.spans()
    assert {_service(x) for x in spans} == {GATEWAY_SERVICE, BROKER_SERVICE}
    nodes = {_service(x): x[0].get("eddy.node_id") for x in spans}
    assert nodes == {GATEWAY_SERVICE: GATEWAY_ID, BROKER_SERVICE: BROKER_ID}
    by_id = {s.span_id: s for _, s in spans}
    services = {s.span_id: _service((r, s)) for r, s in spans}

    # FindCoordinator: answered by the gateway itself (it coordinates for its clients)
    found = _named(spans, "eddy.gateway.kafka.find-coordinator", GATEWAY_SERVICE)
    assert found, sorted({s.name for _, s in spans})
    assert {attrs(s)["key_type"] for s in found} == {0}

    # each group op: the gateway's span, and the broker's spans below it in the same trace
    for gw_name, broker_name in FORWARDED.items():
        mine = [s for s in _named(spans, gw_name, GATEWAY_SERVICE)
                if attrs(s).get("group_id") == group]
        assert mine, (gw_name, sorted({s.name for _, s in spans}))
        served = _named(spans, broker_name, BROKER_SERVICE)
        below = [(g, b) for g in mine for b in served if _descends(b, g, by_id)]
        assert below, (gw_name, [_chain(b, by_id, services) for b in served])
        gw_span, broker_span = below[0]
        chain = _chain(broker_span, by_id, services)
        # broker op <- the mesh's serve (broker) <- the mesh's call (gateway) <- gateway op
        assert f"{BROKER_SERVICE}:eddy.mesh.kafka-op.serve" in chain, chain
        assert f"{GATEWAY_SERVICE}:eddy.mesh.kafka-op.call" in chain, chain
        serve = by_id[broker_span.parent_span_id]
        assert serve.name == "eddy.mesh.kafka-op.serve", chain
        assert by_id[serve.parent_span_id].name == "eddy.mesh.kafka-op.call", chain
        assert broker_span.trace_id == gw_span.trace_id

    # the produce through the gateway: the broker's span continues the producer's trace
    produced = [s for s in _named(spans, "eddy.broker.produce", BROKER_SERVICE)
                if s.trace_id == trace_id]
    assert len(produced) == 1, [(s.trace_id.hex(), s.parent_span_id.hex())
                                for s in _named(spans, "eddy.broker.produce", BROKER_SERVICE)]
    child = produced[0]
    assert child.parent_span_id == span_id
    assert attrs(child)["topic"] == TOPIC
    # ... and links to the mesh op that carried it from the gateway
    linked = [by_id.get(link.span_id) for link in child.links]
    assert any(s is not None and s.name == "eddy.mesh.kafka-op.serve" for s in linked), \
        [(link.trace_id.hex(), link.span_id.hex()) for link in child.links]
