"""Prometheus metrics: both formats parse back with every family and its type, the hot-path
counters add up, the scrape-time collectors read a stand-in state right, and the broker's
state adapter reads real logs."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, cast

import pytest
from prometheus_client import REGISTRY
from prometheus_client.metrics_core import Metric
from prometheus_client.openmetrics.parser import (
    text_string_to_metric_families as parse_openmetrics,
)
from prometheus_client.parser import text_string_to_metric_families

from eddy.broker.broker import Broker
from eddy.clock import ManualClock
from eddy.cluster.raft.driver_types import RaftStatus
from eddy.cluster.replication.manager import ReplicaManager
from eddy.config import load_config
from eddy.groups.state import GroupEvent
from eddy.metadata.records import PartitionRecord
from eddy.observe.broker_state import BrokerState
from eddy.observe.collectors import PartitionStats, consumer_lag
from eddy.observe.metrics import (
    METRIC_TYPES,
    OPENMETRICS_CONTENT_TYPE,
    TEXT_CONTENT_TYPE,
    BrokerMetrics,
    wants_openmetrics,
)
from eddy.protocol.apis import ApiKey
from eddy.protocol.record_batch import validate_batches
from eddy.protocol.records import build_batch
from eddy.telemetry.counters import LATENCY_BUCKETS

NOW = 1_700_000_000_000


@dataclass
class StandIn:
    """A StateSource the tests fill by hand."""

    now: int = NOW
    logs: list[PartitionStats] = field(default_factory=list)
    offsets: list[tuple[str, str, int, int]] = field(default_factory=list)
    hwms: dict[tuple[str, int], int] = field(default_factory=dict)
    timestamps: dict[tuple[str, int, int], int] = field(default_factory=dict)
    raft: list[RaftStatus] = field(default_factory=list)
    replicas: tuple[int, int] = (0, 0)
    lookups: int = 0

    def now_ms(self) -> int:
        return self.now

    def partitions(self) -> list[PartitionStats]:
        return self.logs

    def committed_offsets(self) -> list[tuple[str, str, int, int]]:
        return self.offsets

    def high_watermark(self, topic: str, partition: int) -> int | None:
        return self.hwms.get((topic, partition))

    def timestamp_at(self, topic: str, partition: int, offset: int) -> int | None:
        self.lookups += 1
        return self.timestamps.get((topic, partition, offset))

    def raft_groups(self) -> list[RaftStatus]:
        return self.raft

    def replication(self) -> tuple[int, int]:
        return self.replicas


@dataclass
class Pool:
    capacity: int
    used: int
    waiting: int = 0


@dataclass
class Listener:
    pool: Pool
    open_connections: int


def filled() -> StandIn:
    return StandIn(
        logs=[PartitionStats("orders", 0, 4096, 2), PartitionStats("orders", 1, 100, 1)],
        offsets=[("app", "orders", 0, 5), ("app", "orders", 1, 7), ("audit", "orders", 0, 10),
                 ("app", "gone", 0, 3)],
        hwms={("orders", 0): 10, ("orders", 1): 7},
        timestamps={("orders", 0, 5): NOW - 2500},
        raft=[RaftStatus("metadata", 1, "leader", 1, 3, 42, 41, (1, 2), (), {2: 5}),
              RaftStatus("offsets", 1, "follower", 2, 4, 17, 17, (1, 2), ())],
        replicas=(2, 1),
    )


def scrape(metrics: BrokerMetrics, openmetrics: bool = False) -> dict[str, Metric]:
    body, _ = metrics.render(openmetrics)
    parse = parse_openmetrics if openmetrics else text_string_to_metric_families
    return {f.name: f for f in parse(body.decode())}


def family_name(name: str, kind: str) -> str:
    """The parsers name a counter family without its _total suffix."""
    return name.removesuffix("_total") if kind == "counter" else name


def value(families: dict[str, Metric], sample: str, **labels: str) -> float:
    for family in families.values():
        for s in family.samples:
            if s.name == sample and s.labels == labels:
                return float(s.value)
    raise AssertionError(f"no sample {sample}{labels}")


def has_sample(families: dict[str, Metric], sample: str, **labels: str) -> bool:
    try:
        value(families, sample, **labels)
    except AssertionError:
        return False
    return True


# ---- both formats, every family ------------------------------------------------------------


@pytest.mark.parametrize("openmetrics", [False, True])
def test_every_metric_parses_back_with_its_type(openmetrics: bool) -> None:
    metrics = BrokerMetrics(filled())
    metrics.watch_listener("kafka", Listener(Pool(1 << 20, 300), 3))
    metrics.counts.appended_records("orders", 10, 1000)
    body, content_type = metrics.render(openmetrics)
    assert content_type == (OPENMETRICS_CONTENT_TYPE if openmetrics else TEXT_CONTENT_TYPE)
    assert "version=1.0.0" in content_type if openmetrics else "version=0.0.4" in content_type
    assert body.endswith(b"# EOF\n") == openmetrics
    families = scrape(metrics, openmetrics)
    for name, kind in METRIC_TYPES.items():
        family = families.get(family_name(name, kind))
        assert family is not None, f"{name} missing"
        assert family.type == kind, name
    # seed 001's names in Eddy's namespace, exactly
    for name in ("eddy_messages_total", "eddy_bytes_total", "eddy_consumer_lag_seconds",
                 "eddy_cdc_events_total", "eddy_cdc_lag_milliseconds",
                 "eddy_connections_active"):
        assert name in METRIC_TYPES
    assert value(families, "eddy_messages_total", topic="orders") == 10
    # the process and platform collectors sit on the same registry
    assert "process_cpu_seconds" in families
    assert "process_resident_memory_bytes" in families
    assert "python_info" in families


def test_cdc_metrics_are_registered_without_samples_until_fed() -> None:
    metrics = BrokerMetrics(StandIn(), process=False)
    families = scrape(metrics)
    assert families["eddy_cdc_events"].samples == []
    assert families["eddy_cdc_lag_milliseconds"].samples == []
    metrics.counts.cdc_event("pg", 5, lag_ms=120.0)
    metrics.counts.cdc_event("pg", 2)
    families = scrape(metrics)
    assert value(families, "eddy_cdc_events_total", connector="pg") == 7
    assert value(families, "eddy_cdc_lag_milliseconds", connector="pg") == 120


# ---- hot-path counters ---------------------------------------------------------------------


def test_counters_add_up_per_topic() -> None:
    metrics = BrokerMetrics(StandIn(), process=False)
    c = metrics.counts
    c.produce_received("a", 500)
    c.produce_received("a", 300)
    c.produce_received("b", 40)
    c.appended_records("a", 5, 500)
    c.appended_records("a", 2, 300)
    c.fetch_sent("a", 800)
    c.fetch_sent("a", 200)
    families = scrape(metrics)
    assert value(families, "eddy_produce_bytes_total", topic="a") == 800
    assert value(families, "eddy_produce_bytes_total", topic="b") == 40
    assert value(families, "eddy_messages_total", topic="a") == 7
    assert value(families, "eddy_bytes_total", topic="a") == 800
    assert not has_sample(families, "eddy_messages_total", topic="b")
    assert value(families, "eddy_fetch_bytes_total", topic="a") == 1000


def test_request_latency_histogram_is_cumulative_per_api() -> None:
    metrics = BrokerMetrics(StandIn(), process=False)
    c = metrics.counts
    for seconds in (0.00005, 0.001, 0.003, 20.0):
        c.request(ApiKey.PRODUCE, seconds)
    c.request(ApiKey.FETCH, 0.5)
    families = scrape(metrics)
    assert value(families, "eddy_requests_total", api="produce") == 4
    assert value(families, "eddy_requests_total", api="fetch") == 1
    assert not has_sample(families, "eddy_requests_total", api="metadata")

    def bucket(le: str, api: str = "produce") -> float:
        return value(families, "eddy_request_duration_seconds_bucket", api=api, le=le)

    assert bucket("0.0001") == 1
    assert bucket("0.001") == 2  # a bucket's bound is inclusive (le)
    assert bucket("0.0025") == 2
    assert bucket("0.005") == 3
    assert bucket("10.0") == 3
    assert bucket("+Inf") == 4
    assert bucket("0.25", "fetch") == 0 and bucket("0.5", "fetch") == 1
    assert value(families, "eddy_request_duration_seconds_count", api="produce") == 4
    assert value(families, "eddy_request_duration_seconds_sum", api="produce") == \
        pytest.approx(20.00405)
    assert LATENCY_BUCKETS[0] == 0.0001 and LATENCY_BUCKETS[-1] == 10.0


def test_rebalances_and_transactions_are_counted() -> None:
    metrics = BrokerMetrics(StandIn(), process=False)
    c = metrics.counts
    c.group_events([GroupEvent("rebalance-complete", "g", 1, detail="m1"),
                    GroupEvent("member-removed", "g", 1, "m2", "leave"),
                    GroupEvent("rebalance-complete", "g", 2, detail="m1")])
    c.transaction_ended(True)
    c.transaction_ended(True)
    c.transaction_ended(False)
    families = scrape(metrics)
    assert value(families, "eddy_group_rebalances_total") == 2
    assert value(families, "eddy_transactions_total", result="commit") == 2
    assert value(families, "eddy_transactions_total", result="abort") == 1


def test_isr_shrinks_and_expands_are_counted_per_topic_once_per_change() -> None:
    metrics = BrokerMetrics(StandIn(), process=False)
    c = metrics.counts
    families = scrape(metrics)
    assert families["eddy_isr_shrinks"].samples == []
    assert families["eddy_isr_expands"].samples == []
    c.isr_changed("a", (1, 2, 3), (1, 2))  # one change removing a member: one shrink
    c.isr_changed("a", (1, 2), (1,))
    c.isr_changed("a", (1,), (1, 2, 3))  # two members back in one change: one expand
    c.isr_changed("b", (1, 2), (1, 3))  # one out, another in: both
    c.isr_changed("b", (1, 2), (2, 1))  # the same members: neither
    families = scrape(metrics)
    assert value(families, "eddy_isr_shrinks_total", topic="a") == 2
    assert value(families, "eddy_isr_expands_total", topic="a") == 1
    assert value(families, "eddy_isr_shrinks_total", topic="b") == 1
    assert value(families, "eddy_isr_expands_total", topic="b") == 1
    assert families["eddy_isr_shrinks"].type == "counter"


def test_disabled_metrics_count_nothing_but_still_answer() -> None:
    metrics = BrokerMetrics(filled(), enabled=False, process=False)
    assert not metrics.enabled
    c = metrics.counts
    c.request(ApiKey.PRODUCE, 0.01)
    c.produce_received("a", 10)
    c.appended_records("a", 1, 10)
    c.fetch_sent("a", 10)
    c.group_events([GroupEvent("rebalance-complete", "g", 1)])
    c.transaction_ended(True)
    c.cdc_event("pg", 1, 5.0)
    c.isr_changed("t", (1, 2), (1,))
    families = scrape(metrics)
    assert families["eddy_messages"].samples == []
    assert families["eddy_isr_shrinks"].samples == []
    assert families["eddy_requests"].samples == []
    assert value(families, "eddy_group_rebalances_total") == 0
    assert value(families, "eddy_transactions_total", result="commit") == 0
    # the gauges read at scrape time do not depend on the counters
    assert value(families, "eddy_log_size_bytes", topic="orders", partition="0") == 4096


def test_each_broker_has_its_own_registry() -> None:
    one = BrokerMetrics(StandIn())
    two = BrokerMetrics(StandIn())  # process collectors again: no duplicate error
    one.counts.appended_records("t", 3, 30)
    assert value(scrape(one), "eddy_messages_total", topic="t") == 3
    assert not has_sample(scrape(two), "eddy_messages_total", topic="t")
    assert REGISTRY.get_sample_value("eddy_messages_total", {"topic": "t"}) is None


# ---- scrape-time collectors ----------------------------------------------------------------


def test_log_size_and_segments_per_partition() -> None:
    families = scrape(BrokerMetrics(filled(), process=False))
    assert value(families, "eddy_log_size_bytes", topic="orders", partition="0") == 4096
    assert value(families, "eddy_log_segments", topic="orders", partition="0") == 2
    assert value(families, "eddy_log_size_bytes", topic="orders", partition="1") == 100


def test_consumer_lag_in_records_and_seconds() -> None:
    state = filled()
    families = scrape(BrokerMetrics(state, process=False))
    lag = "eddy_consumer_lag_records"
    assert value(families, lag, group="app", topic="orders", partition="0") == 5
    assert value(families, lag, group="app", topic="orders", partition="1") == 0
    assert value(families, lag, group="audit", topic="orders", partition="0") == 0
    # a partition with no log here is left to the node that has it
    assert not has_sample(families, lag, group="app", topic="gone", partition="0")
    seconds = "eddy_consumer_lag_seconds"
    # the oldest unconsumed record of app's orders is 2.5 s old (partition 1 is caught up)
    assert value(families, seconds, group="app", topic="orders") == 2.5
    assert value(families, seconds, group="audit", topic="orders") == 0
    assert state.lookups == 1  # only where the group lags: one header read


def test_consumer_lag_is_never_negative_and_lookups_are_bounded() -> None:
    state = StandIn(
        offsets=[("g", "t", 0, 12), ("g", "t", 1, 0), ("g", "t", 2, 0), ("g", "t", 3, 0)],
        hwms={("t", 0): 10, ("t", 1): 4, ("t", 2): 4, ("t", 3): 4},
        timestamps={("t", 1, 0): NOW - 1000, ("t", 2, 0): NOW - 9000, ("t", 3, 0): NOW + 50},
    )
    lag = consumer_lag(state)
    assert ("g", "t", 0, 0) in lag.records  # committed past the HWM (truncated): no lag
    assert lag.seconds[("g", "t")] == 9.0  # the oldest over the partitions
    state.lookups = 0
    capped = consumer_lag(state, max_lookups=1)
    assert state.lookups == 1
    assert capped.seconds[("g", "t")] == 1.0
    assert len(capped.records) == 4  # records lag still reported for every partition


def test_raft_gauges_per_group() -> None:
    families = scrape(BrokerMetrics(filled(), process=False))
    assert value(families, "eddy_raft_leader", group="metadata") == 1
    assert value(families, "eddy_raft_term", group="metadata") == 3
    assert value(families, "eddy_raft_commit_index", group="metadata") == 42
    assert value(families, "eddy_raft_applied_index", group="metadata") == 41
    assert value(families, "eddy_raft_is_leader", group="metadata") == 1
    assert value(families, "eddy_raft_is_leader", group="offsets") == 0
    assert value(families, "eddy_raft_leader", group="offsets") == 2
    assert value(families, "eddy_raft_follower_lag_entries", group="metadata",
                 follower="2") == 5
    assert value(families, "eddy_under_replicated_partitions") == 2
    assert value(families, "eddy_offline_partitions") == 1


def test_listener_connections_and_request_pool() -> None:
    metrics = BrokerMetrics(StandIn(), process=False)
    metrics.watch_listener("kafka", Listener(Pool(256 << 20, 4096, 2), 7))
    metrics.watch_listener("other", Listener(Pool(2**63 - 1, 0), 0))  # unbounded pool
    families = scrape(metrics)
    assert value(families, "eddy_connections_active", listener="kafka") == 7
    assert value(families, "eddy_request_pool_bytes_used", listener="kafka") == 4096
    assert value(families, "eddy_request_pool_bytes_limit", listener="kafka") == 256 << 20
    assert value(families, "eddy_request_pool_waiting", listener="kafka") == 2
    assert value(families, "eddy_connections_active", listener="other") == 0
    assert not has_sample(families, "eddy_request_pool_bytes_limit", listener="other")


def test_accept_header_choice() -> None:
    prometheus = ("application/openmetrics-text;version=1.0.0,application/openmetrics-text;"
                  "version=0.0.1;q=0.75,text/plain;version=0.0.4;q=0.5,*/*;q=0.1")
    assert wants_openmetrics(prometheus)
    assert wants_openmetrics("application/openmetrics-text")
    assert not wants_openmetrics("application/openmetrics-text; version=2.0.0")
    assert not wants_openmetrics("text/plain;version=0.0.4")
    assert not wants_openmetrics(None)


# ---- the broker's state adapter on real logs -----------------------------------------------


@pytest.fixture
def broker(tmp_path: Path) -> Iterator[Broker]:
    config = load_config(env={}, overrides={"data_dir": str(tmp_path), "node_id": 1})
    b = Broker(config, ManualClock(NOW))
    b.load()
    yield b
    b.logs.close(clean=True)


def append(broker: Broker, topic: str, n: int, ts: int) -> None:
    plog = broker.logs.partition(topic, 0)
    assert plog is not None
    data = build_batch([(None, b"v" * 10)] * n, ts)
    plog.append(data, validate_batches(data, max_batch_bytes=1 << 20), NOW)


def test_broker_state_reads_timestamps_sizes_and_watermarks(broker: Broker) -> None:
    broker.logs.create_topic("t", 1, {}, NOW)
    append(broker, "t", 3, NOW - 5000)  # offsets 0..2
    append(broker, "t", 2, NOW - 1000)  # offsets 3..4
    state = BrokerState(broker)
    assert state.high_watermark("t", 0) == 5
    assert state.high_watermark("t", 1) is None
    assert state.timestamp_at("t", 0, 0) == NOW - 5000
    assert state.timestamp_at("t", 0, 3) == NOW - 1000
    assert state.timestamp_at("t", 0, 4) == NOW - 1000  # the batch's first timestamp
    assert state.timestamp_at("t", 0, 5) is None  # nothing there yet
    assert state.timestamp_at("x", 0, 0) is None
    stats = {(p.topic, p.partition): p for p in state.partitions()}
    plog = broker.logs.partition("t", 0)
    assert plog is not None
    assert stats[("t", 0)].size_bytes == plog.size_bytes > 0
    assert stats[("t", 0)].segments == 1
    assert list(state.raft_groups()) == [] and state.replication() == (0, 0)


def test_broker_state_uses_the_append_time_on_log_append_time_topics(broker: Broker) -> None:
    broker.logs.create_topic("la", 1, {"message.timestamp.type": "LogAppendTime"}, NOW)
    append(broker, "la", 2, NOW - 60_000)  # appended at NOW
    assert BrokerState(broker).timestamp_at("la", 0, 1) == NOW


def test_broker_owns_its_metrics_and_the_setting_turns_counting_off(tmp_path: Path) -> None:
    on = Broker(load_config(env={}, overrides={"data_dir": str(tmp_path / "a")}), ManualClock())
    off = Broker(load_config(env={}, overrides={"data_dir": str(tmp_path / "b"),
                                                "metrics.enable": "false"}), ManualClock())
    assert on.metrics.enabled and not off.metrics.enabled
    assert on.metrics.counts is not off.metrics.counts
    # each broker's Prometheus metrics (the admin listener's) are its own and read its counts
    on_metrics, off_metrics = BrokerMetrics.for_broker(on), BrokerMetrics.for_broker(off)
    assert on_metrics.registry is not off_metrics.registry
    assert on_metrics.counts is on.metrics.counts and not off_metrics.enabled


@dataclass
class NoBrokers:
    """The metadata a ReplicaManager reads of a cluster: no broker registrations."""

    def broker(self, _node: int) -> None:
        return None

    def is_live(self, _node: int) -> bool:
        return True


@dataclass
class StubCluster:
    state: NoBrokers = field(default_factory=NoBrokers)


def test_the_leader_counts_committed_isr_changes(broker: Broker) -> None:
    """What the metadata commits for a partition led here (the leader's AlterIsr or the
    controller fencing a follower) counts as a shrink/expand; a leader change, the same ISR
    again, or a partition only followed here do not."""
    broker.logs.create_topic("t", 2, {}, NOW)
    led, followed = broker.logs.partition("t", 0), broker.logs.partition("t", 1)
    assert led is not None and followed is not None

    metrics = BrokerMetrics.for_broker(broker)

    def isr_counts() -> tuple[float, float]:
        families = scrape(metrics)
        return (value(families, "eddy_isr_shrinks_total", topic="t")
                if has_sample(families, "eddy_isr_shrinks_total", topic="t") else 0,
                value(families, "eddy_isr_expands_total", topic="t")
                if has_sample(families, "eddy_isr_expands_total", topic="t") else 0)

    async def run() -> list[tuple[float, float]]:
        manager = ReplicaManager(broker, cast(Any, StubCluster()))
        seen = []
        steps = [  # (leader, leader epoch, ISR, partition epoch) of partition 0
            (1, 0, (1, 2, 3), 0),  # starts leading: nothing counted
            (1, 0, (1, 2), 1),  # follower 3 out: a shrink
            (1, 0, (1, 2), 1),  # the same state again: nothing
            (1, 0, (1, 2, 3), 2),  # back in: an expand
            (1, 1, (1, 3), 3),  # a new leader epoch: a new leader state, nothing counted
        ]
        try:
            for leader, epoch, isr, partition_epoch in steps:
                # partition 1 is led by node 2: its ISR changes are node 2's to count
                other = PartitionRecord((2, 1, 3), 2, 0, isr, partition_epoch)
                manager.apply({("t", 0): (led, PartitionRecord((1, 2, 3), leader, epoch, isr,
                                                               partition_epoch)),
                               ("t", 1): (followed, other)})
                seen.append(isr_counts())
        finally:
            await manager.stop()
        return seen

    assert asyncio.run(run()) == [(0, 0), (1, 0), (1, 0), (1, 1), (1, 1)]
