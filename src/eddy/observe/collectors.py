"""Prometheus collectors: the hot-path counters and the broker's state, read at scrape time.

Nothing here is kept current while the broker serves: the counters are plain numbers the
handlers bump (see ``counters.py``), and the gauges that cost to keep current (log sizes,
consumer lag, Raft state, under-replicated partitions) are computed when Prometheus asks,
from a :class:`StateSource` (the broker's, in ``broker_state.py``; a stand-in in tests).
Collectors run on the broker's event loop thread, like everything that changes that state.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from typing import Protocol

from prometheus_client.metrics_core import (
    CounterMetricFamily,
    GaugeMetricFamily,
    HistogramMetricFamily,
    Metric,
)

from eddy.cluster.raft.driver_types import RaftStatus
from eddy.telemetry.counters import LATENCY_BUCKETS, HotCounters, ListenerView

#: at most this many log lookups (one batch header each) for consumer lag in seconds per
#: scrape; past it the seconds of the remaining partitions are left out (their lag in
#: records is still reported)
MAX_TIMESTAMP_LOOKUPS = 20_000


@dataclass(frozen=True, slots=True)
class PartitionStats:
    topic: str
    partition: int
    size_bytes: int
    segments: int


class StateSource(Protocol):
    """What the scrape-time collectors read of the broker."""

    def now_ms(self) -> int: ...

    def partitions(self) -> Iterable[PartitionStats]:
        """Every partition whose log this node holds."""

    def committed_offsets(self) -> Iterable[tuple[str, str, int, int]]:
        """(group, topic, partition, offset) of every offset committed here."""

    def high_watermark(self, topic: str, partition: int) -> int | None:
        """The partition's high watermark (None: no log of it here)."""

    def timestamp_at(self, topic: str, partition: int, offset: int) -> int | None:
        """The timestamp (ms) of the record at ``offset``, or of the earliest one kept
        after it (None: nothing there to read)."""

    def raft_groups(self) -> Iterable[RaftStatus]:
        """The Raft groups this node runs (none outside a cluster)."""

    def replication(self) -> tuple[int, int]:
        """(under-replicated partitions this node leads, offline partitions of the cluster
        as its controller sees them: 0 on any other node, as Kafka reports them)."""


def api_name(api_key: int) -> str:
    from eddy.protocol.apis import ApiKey

    try:
        return ApiKey(api_key).name.lower()
    except ValueError:
        return str(api_key)


class CountersCollector:
    """The hot-path counters as Prometheus counters and a histogram."""

    def __init__(self, counts: HotCounters) -> None:
        self.counts = counts

    def collect(self) -> Iterator[Metric]:
        c = self.counts
        appended = list(c.appended.items())
        messages = CounterMetricFamily("eddy_messages_total", "Records appended by producers",
                                       labels=["topic"])
        nbytes = CounterMetricFamily("eddy_bytes_total",
                                     "Record batch bytes appended by producers", labels=["topic"])
        for topic, (records, size) in appended:
            messages.add_metric([topic], records)
            nbytes.add_metric([topic], size)
        yield messages
        yield nbytes
        yield _per_topic("eddy_produce_bytes_total",
                         "Record batch bytes received in Produce requests", c.received)
        yield _per_topic("eddy_fetch_bytes_total",
                         "Record batch bytes sent in Fetch responses", c.sent)
        requests = CounterMetricFamily("eddy_requests_total", "Requests handled, by API",
                                       labels=["api"])
        latency = HistogramMetricFamily(
            "eddy_request_duration_seconds",
            "Time from a request's arrival to its answer, by API (Fetch: with its wait)",
            labels=["api"])
        bounds = [_bound(b) for b in LATENCY_BUCKETS] + ["+Inf"]
        for key, count in enumerate(list(c.requests)):
            if not count:
                continue
            name = api_name(key)
            requests.add_metric([name], count)
            cumulative = 0
            buckets: list[tuple[str, float]] = []
            for bound, n in zip(bounds, list(c.request_buckets[key]), strict=True):
                cumulative += n
                buckets.append((bound, cumulative))
            latency.add_metric([name], buckets, c.request_seconds[key])
        yield requests
        yield latency
        yield CounterMetricFamily("eddy_group_rebalances_total",
                                  "Consumer group rebalances completed by this coordinator",
                                  value=c.rebalances)
        txns = CounterMetricFamily("eddy_transactions_total",
                                   "Transactions completed by this coordinator, by result",
                                   labels=["result"])
        txns.add_metric(["commit"], c.txn_commits)
        txns.add_metric(["abort"], c.txn_aborts)
        yield txns
        yield _per_topic("eddy_isr_shrinks_total",
                         "ISR changes committed for partitions led here that removed a "
                         "replica", c.isr_shrinks)
        yield _per_topic("eddy_isr_expands_total",
                         "ISR changes committed for partitions led here that added a replica",
                         c.isr_expands)
        yield _per_label("eddy_cdc_events_total", CounterMetricFamily,
                         "Change events delivered by CDC connectors", "connector", c.cdc_events)
        yield _per_label("eddy_cdc_lag_milliseconds", GaugeMetricFamily,
                         "Replication lag of CDC connectors", "connector", c.cdc_lag_ms)


def _bound(value: float) -> str:
    return repr(float(value))


def _per_topic(name: str, doc: str, values: dict[str, int]) -> Metric:
    return _per_label(name, CounterMetricFamily, doc, "topic", values)


def _per_label(name: str, kind: type[CounterMetricFamily] | type[GaugeMetricFamily], doc: str,
               label: str, values: dict[str, int] | dict[str, float]) -> Metric:
    family = kind(name, doc, labels=[label])
    for key, value in list(values.items()):
        family.add_metric([key], value)
    return family


class ListenersCollector:
    """Connections and request memory of each listener, read when scraped."""

    def __init__(self, listeners: dict[str, ListenerView] | None = None) -> None:
        #: the broker's (``BrokerReports.listeners``), read at every scrape
        self.listeners: dict[str, ListenerView] = {} if listeners is None else listeners

    def collect(self) -> Iterator[Metric]:
        active = GaugeMetricFamily("eddy_connections_active", "Open client connections",
                                   labels=["listener"])
        used = GaugeMetricFamily("eddy_request_pool_bytes_used",
                                 "Request bytes held in memory (queued.max.request.bytes pool)",
                                 labels=["listener"])
        limit = GaugeMetricFamily("eddy_request_pool_bytes_limit",
                                  "Size of the request memory pool (none when unbounded)",
                                  labels=["listener"])
        waiting = GaugeMetricFamily("eddy_request_pool_waiting",
                                    "Connections waiting for request memory",
                                    labels=["listener"])
        for name, listener in list(self.listeners.items()):
            pool = listener.pool
            active.add_metric([name], listener.open_connections)
            used.add_metric([name], pool.used)
            if pool.capacity < 2**62:  # (the unbounded pool's capacity is sys.maxsize)
                limit.add_metric([name], pool.capacity)
            waiting.add_metric([name], pool.waiting)
        yield from (active, used, limit, waiting)


@dataclass(frozen=True, slots=True)
class Lag:
    """Consumer lag: in records per (group, topic, partition), in seconds per (group,
    topic): the age of the oldest record not consumed yet (0 when caught up)."""

    records: list[tuple[str, str, int, int]]
    seconds: dict[tuple[str, str], float]


def consumer_lag(source: StateSource, max_lookups: int = MAX_TIMESTAMP_LOOKUPS) -> Lag:
    """Lag of every committed offset against its partition's high watermark; a partition
    with no log here is left out (its leader reports it)."""
    now = source.now_ms()
    records: list[tuple[str, str, int, int]] = []
    seconds: dict[tuple[str, str], float] = {}
    lookups = 0
    for group, topic, partition, offset in source.committed_offsets():
        hwm = source.high_watermark(topic, partition)
        if hwm is None:
            continue
        behind = max(0, hwm - offset)
        records.append((group, topic, partition, behind))
        key = (group, topic)
        age = 0.0
        if behind:
            if lookups >= max_lookups:
                continue
            lookups += 1
            ts = source.timestamp_at(topic, partition, offset)
            if ts is None or ts < 0:
                continue
            age = max(0.0, (now - ts) / 1000)
        if age > seconds.get(key, -1.0):
            seconds[key] = age
    return Lag(records, seconds)


class StateCollector:
    """The gauges read from the broker's state when scraped: logs, lag, Raft, replicas."""

    def __init__(self, source: StateSource) -> None:
        self.source = source

    def collect(self) -> Iterator[Metric]:
        yield from self._logs()
        yield from self._lag()
        yield from self._raft()
        under, offline = self.source.replication()
        yield GaugeMetricFamily("eddy_under_replicated_partitions",
                                "Partitions led here whose ISR is smaller than their replicas",
                                value=under)
        yield GaugeMetricFamily("eddy_offline_partitions",
                                "Partitions without a leader (reported by the controller)",
                                value=offline)

    def _logs(self) -> Iterator[Metric]:
        size = GaugeMetricFamily("eddy_log_size_bytes", "Bytes of a partition's log segments",
                                 labels=["topic", "partition"])
        segments = GaugeMetricFamily("eddy_log_segments", "Segments of a partition's log",
                                     labels=["topic", "partition"])
        for p in self.source.partitions():
            labels = [p.topic, str(p.partition)]
            size.add_metric(labels, p.size_bytes)
            segments.add_metric(labels, p.segments)
        yield size
        yield segments

    def _lag(self) -> Iterator[Metric]:
        lag = consumer_lag(self.source)
        records = GaugeMetricFamily(
            "eddy_consumer_lag_records",
            "Records between a group's committed offset and the high watermark",
            labels=["group", "topic", "partition"])
        for group, topic, partition, behind in lag.records:
            records.add_metric([group, topic, str(partition)], behind)
        seconds = GaugeMetricFamily(
            "eddy_consumer_lag_seconds",
            "Age of the oldest record a group has not consumed (0: caught up)",
            labels=["group", "topic"])
        for (group, topic), age in sorted(lag.seconds.items()):
            seconds.add_metric([group, topic], age)
        yield records
        yield seconds

    def _raft(self) -> Iterator[Metric]:
        labels = ["group"]
        leader = GaugeMetricFamily("eddy_raft_leader", "Node id of the group's leader "
                                   "(0: none known)", labels=labels)
        term = GaugeMetricFamily("eddy_raft_term", "Current Raft term", labels=labels)
        commit = GaugeMetricFamily("eddy_raft_commit_index", "Raft commit index", labels=labels)
        applied = GaugeMetricFamily("eddy_raft_applied_index", "Raft index applied here",
                                    labels=labels)
        is_leader = GaugeMetricFamily("eddy_raft_is_leader", "1 if this node leads the group",
                                      labels=labels)
        follower_lag = GaugeMetricFamily(
            "eddy_raft_follower_lag_entries",
            "Entries a follower is behind the leader's log (reported by the leader)",
            labels=["group", "follower"])
        for s in self.source.raft_groups():
            g = [s.group]
            leader.add_metric(g, s.leader)
            term.add_metric(g, s.term)
            commit.add_metric(g, s.commit_index)
            applied.add_metric(g, s.applied_index)
            is_leader.add_metric(g, 1 if s.role == "leader" else 0)
            for peer, behind in sorted(s.lag.items()):
                follower_lag.add_metric([s.group, str(peer)], behind)
        yield from (leader, term, commit, applied, is_leader, follower_lag)
