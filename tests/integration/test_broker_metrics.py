"""Prometheus metrics of a real broker driven by real clients (confluent-kafka).

A cluster of one (``process.roles=broker,controller``: Raft groups, the group coordinator on
the offsets group) runs in this process on its own event loop thread, so the test reads
the broker's ``BrokerMetrics.render()`` on that loop, as the admin listener's ``/metrics``
does. Records of known size and timestamp are produced, a group consumes and commits part of
them, a transactional producer commits one transaction and aborts another; the scrape then
shows the counts, the lag in records and seconds, requests per API, log sizes and Raft
state.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic
from inprocess_node import InProcessNode
from prometheus_client.metrics_core import Metric
from prometheus_client.openmetrics.parser import (
    text_string_to_metric_families as parse_openmetrics,
)
from prometheus_client.parser import text_string_to_metric_families

from eddy.observe.metrics import BrokerMetrics

TIMEOUT = 20
TOPIC = "metrics-orders"
GROUP = "metrics-app"
VALUE = b"x" * 100
#: records produced to partitions 0 and 1; the group commits COMMITTED of them
PRODUCED = {0: 60, 1: 40}
COMMITTED = {0: 30, 1: 40}
#: the records' timestamp: this long before the test produces them
AGE_MS = 60_000


class LocalNode(InProcessNode):
    """A cluster of one in this process whose metrics the test renders on its loop."""

    metrics: BrokerMetrics | None = None

    def scrape(self, openmetrics: bool = False) -> tuple[dict[str, Metric], str]:
        """One render on the broker's loop, parsed back (the broker's metrics made once,
        as the admin listener makes them)."""
        async def render() -> tuple[bytes, str]:
            assert self.node is not None and self.node.broker is not None
            if self.metrics is None:
                self.metrics = BrokerMetrics.for_broker(self.node.broker)
            return self.metrics.render(openmetrics)
        body, content_type = self.run(render())
        parse = parse_openmetrics if openmetrics else text_string_to_metric_families
        return {f.name: f for f in parse(body.decode())}, content_type


@pytest.fixture
def node(tmp_path: Path) -> Iterator[LocalNode]:
    n = LocalNode(tmp_path / "node").start()
    try:
        yield n
    finally:
        n.stop()


def value(families: dict[str, Metric], sample: str, **labels: str) -> float:
    for family in families.values():
        for s in family.samples:
            if s.name == sample and s.labels == labels:
                return float(s.value)
    raise AssertionError(f"no sample {sample}{labels}")


def samples(families: dict[str, Metric], sample: str, **labels: str) -> list[float]:
    """Values of every ``sample`` whose labels include ``labels``."""
    return [float(s.value) for f in families.values() for s in f.samples
            if s.name == sample and labels.items() <= s.labels.items()]


def produce_known_records(bootstrap: str) -> Producer:
    """PRODUCED records of VALUE, timestamped AGE_MS ago; the producer stays open."""
    p = Producer({"bootstrap.servers": bootstrap, "acks": "all", "linger.ms": 5,
                  "message.timeout.ms": 15000})
    errors: list[str] = []

    def cb(err: Any, _msg: Any) -> None:
        if err is not None:
            errors.append(str(err))

    stamp = int(time.time() * 1000) - AGE_MS
    for partition, n in PRODUCED.items():
        for _ in range(n):
            p.produce(TOPIC, value=VALUE, partition=partition, timestamp=stamp, on_delivery=cb)
    assert p.flush(TIMEOUT) == 0 and not errors, errors
    return p


def consume_and_commit(bootstrap: str) -> None:
    """A group member reads every record, then commits COMMITTED offsets."""
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": GROUP,
                  "enable.auto.commit": False, "auto.offset.reset": "earliest",
                  "fetch.wait.max.ms": 50})
    try:
        c.subscribe([TOPIC])
        seen = 0
        deadline = time.monotonic() + TIMEOUT
        while seen < sum(PRODUCED.values()) and time.monotonic() < deadline:
            m = c.poll(0.5)
            if m is not None and m.error() is None:
                seen += 1
        assert seen == sum(PRODUCED.values())
        c.commit(offsets=[TopicPartition(TOPIC, p, o) for p, o in COMMITTED.items()],
                 asynchronous=False)
    finally:
        c.close()


def one_commit_one_abort(bootstrap: str) -> None:
    p = Producer({"bootstrap.servers": bootstrap, "transactional.id": "metrics-txn"})
    p.init_transactions(TIMEOUT)
    for commit in (True, False):
        p.begin_transaction()
        p.produce("metrics-txn", value=b"t", partition=0)
        assert p.flush(TIMEOUT) == 0
        if commit:
            p.commit_transaction(TIMEOUT)
        else:
            p.abort_transaction(TIMEOUT)


def test_metrics_after_produce_consume_and_transactions(node: LocalNode) -> None:
    admin = AdminClient({"bootstrap.servers": node.bootstrap})
    futures = admin.create_topics([NewTopic(TOPIC, 2, 1), NewTopic("metrics-txn", 1, 1)])
    for f in futures.values():
        f.result(TIMEOUT)
    producer = produce_known_records(node.bootstrap)
    consume_and_commit(node.bootstrap)
    one_commit_one_abort(node.bootstrap)
    producer.poll(0)  # (still open: a client connection the scrape counts)

    m, content_type = node.scrape()
    assert content_type.startswith("text/plain; version=0.0.4")
    total = sum(PRODUCED.values())
    # records and bytes appended: per request, from the batch headers
    assert value(m, "eddy_messages_total", topic=TOPIC) == total
    appended = value(m, "eddy_bytes_total", topic=TOPIC)
    assert appended > total * len(VALUE)
    # nothing else wrote to the topic: its logs hold exactly the bytes appended
    log_bytes = samples(m, "eddy_log_size_bytes", topic=TOPIC)
    assert len(log_bytes) == 2 and sum(log_bytes) == appended
    assert samples(m, "eddy_log_segments", topic=TOPIC) == [1.0, 1.0]
    assert value(m, "eddy_produce_bytes_total", topic=TOPIC) >= appended  # (+ any retries)
    assert value(m, "eddy_fetch_bytes_total", topic=TOPIC) >= appended  # all read once
    # consumer lag: 30 records behind on partition 0, caught up on 1
    lag = "eddy_consumer_lag_records"
    assert value(m, lag, group=GROUP, topic=TOPIC, partition="0") == 30
    assert value(m, lag, group=GROUP, topic=TOPIC, partition="1") == 0
    # the oldest unconsumed record was stamped AGE_MS before it was produced
    age = value(m, "eddy_consumer_lag_seconds", group=GROUP, topic=TOPIC)
    assert AGE_MS / 1000 <= age < AGE_MS / 1000 + 60
    # requests per API (librdkafka's names as Kafka's API keys)
    for api in ("produce", "fetch", "metadata", "join_group", "sync_group", "offset_commit",
                "create_topics", "init_producer_id", "end_txn"):
        assert value(m, "eddy_requests_total", api=api) >= 1, api
        assert value(m, "eddy_request_duration_seconds_count", api=api) == \
            value(m, "eddy_requests_total", api=api)
    assert value(m, "eddy_group_rebalances_total") >= 1
    assert value(m, "eddy_transactions_total", result="commit") == 1
    assert value(m, "eddy_transactions_total", result="abort") == 1
    assert value(m, "eddy_connections_active", listener="kafka") >= 1
    assert value(m, "eddy_request_pool_bytes_limit", listener="kafka") == \
        node.config.queued_max_request_bytes
    # a cluster of one: this node leads both Raft groups
    for group in ("metadata", "offsets"):
        assert value(m, "eddy_raft_is_leader", group=group) == 1
        assert value(m, "eddy_raft_leader", group=group) == 1
        assert value(m, "eddy_raft_term", group=group) >= 1
        commit = value(m, "eddy_raft_commit_index", group=group)
        assert commit >= 1
        assert 1 <= value(m, "eddy_raft_applied_index", group=group) <= commit
    assert value(m, "eddy_under_replicated_partitions") == 0
    assert value(m, "eddy_offline_partitions") == 0
    assert value(m, "process_resident_memory_bytes") > 0
    producer.flush(TIMEOUT)

    om, content_type = node.scrape(openmetrics=True)
    assert content_type.startswith("application/openmetrics-text; version=1.0.0")
    assert om["eddy_messages"].type == "counter"
    assert value(om, "eddy_messages_total", topic=TOPIC) == total
    assert value(om, "eddy_consumer_lag_records", group=GROUP, topic=TOPIC,
                 partition="0") == 30


def test_counting_off_keeps_the_gauges(tmp_path: Path) -> None:
    n = LocalNode(tmp_path / "off")
    n.config = n.config.model_copy(update={"metrics_enable": False})
    n.start()
    try:
        admin = AdminClient({"bootstrap.servers": n.bootstrap})
        admin.create_topics([NewTopic(TOPIC, 2, 1)])[TOPIC].result(TIMEOUT)
        produce_known_records(n.bootstrap).flush(TIMEOUT)
        m, _ = n.scrape()
        assert samples(m, "eddy_messages_total") == []
        assert samples(m, "eddy_requests_total") == []
        assert sum(samples(m, "eddy_log_size_bytes", topic=TOPIC)) > 0
        assert value(m, "eddy_raft_is_leader", group="metadata") == 1
    finally:
        n.stop()
