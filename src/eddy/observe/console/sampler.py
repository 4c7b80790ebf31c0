"""What the console keeps over time, in bounded ring buffers: the broker's throughput and
request latency (of all requests but Fetch; from the hot-path counters of
``BrokerMetrics``), each topic's produce rate, and each consumer group's total lag,
sampled every ``INTERVAL_S`` on the broker's event loop.

Bounds: ``SAMPLES`` samples per series; at most ``MAX_GROUPS`` groups and
``MAX_LAG_PARTITIONS`` committed offsets looked at per sample (past them a sample leaves
the rest out); topic rates only for topics the counters know (those produced to).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections import deque
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from eddy.telemetry.counters import LATENCY_BUCKETS, HotCounters

if TYPE_CHECKING:
    from eddy.broker.broker import Broker

log = logging.getLogger("eddy.console")

INTERVAL_S = 1.0
#: samples kept per series: two minutes at one a second
SAMPLES = 120
MAX_GROUPS = 500
MAX_LAG_PARTITIONS = 20_000
#: the metric series the Metrics page draws
#: Fetch's API key: left out of the latency (its time includes its long-poll wait)
FETCH = 1
SERIES = ("bytes_in", "bytes_out", "records_in", "requests", "latency_avg_ms",
          "latency_p99_ms")


@dataclass(frozen=True, slots=True)
class PartitionLag:
    topic: str
    partition: int
    committed: int
    high_watermark: int

    @property
    def lag(self) -> int:
        return max(0, self.high_watermark - self.committed)


@dataclass
class Totals:
    """The counters' running totals at one instant."""

    at: float
    bytes_in: int = 0
    bytes_out: int = 0
    records_in: int = 0
    requests: int = 0
    timed: int = 0  # requests other than Fetch: those the latency is of
    seconds: float = 0.0
    buckets: list[int] = field(default_factory=list)
    per_topic: dict[str, tuple[int, int]] = field(default_factory=dict)


def read_totals(counts: HotCounters, at: float) -> Totals:
    totals = Totals(at, buckets=[0] * (len(LATENCY_BUCKETS) + 1))
    for topic, (records, nbytes) in list(counts.appended.items()):
        totals.records_in += records
        totals.bytes_in += nbytes
        totals.per_topic[topic] = (records, nbytes)
    totals.bytes_out = sum(list(counts.sent.values()))
    totals.requests = sum(counts.requests)
    for key, per_api in enumerate(counts.request_buckets):
        if key == FETCH or not counts.requests[key]:
            continue  # a Fetch's time is mostly its wait for records: not latency
        totals.timed += counts.requests[key]
        totals.seconds += counts.request_seconds[key]
        for i, n in enumerate(per_api):
            totals.buckets[i] += n
    return totals


def p99_ms(buckets: list[int]) -> float:
    """The upper bound (ms) of the bucket holding the 99th percentile of ``buckets`` (request
    counts per latency bucket, not cumulative); 0 when empty."""
    total = sum(buckets)
    if total <= 0:
        return 0.0
    rank, seen = 0.99 * total, 0
    for i, n in enumerate(buckets):
        seen += n
        if seen >= rank:
            bound = LATENCY_BUCKETS[i] if i < len(LATENCY_BUCKETS) else LATENCY_BUCKETS[-1]
            return bound * 1000.0
    return LATENCY_BUCKETS[-1] * 1000.0


def group_lags(broker: Broker, group_id: str, budget: int) -> list[PartitionLag]:
    """Lag of each partition ``group_id`` committed an offset for (against this node's log
    of it; partitions with no log here are left out), at most ``budget`` of them."""
    out: list[PartitionLag] = []
    committed = broker.groups.coordinator.committed_offsets(group_id)
    for (topic, partition), meta in sorted(committed.items()):
        if len(out) >= budget:
            break
        plog = broker.logs.partition(topic, partition)
        if plog is None:
            continue
        out.append(PartitionLag(topic, partition, meta.offset, plog.high_watermark))
    return out


class Sampler:
    """Samples the broker every ``interval_s`` into bounded ring buffers."""

    def __init__(self, broker: Broker, interval_s: float = INTERVAL_S,
                 clock: Callable[[], float] = time.time) -> None:
        self._broker = broker
        self.interval_s = interval_s
        self._clock = clock
        self.times: deque[float] = deque(maxlen=SAMPLES)
        self.series: dict[str, deque[float]] = {name: deque(maxlen=SAMPLES) for name in SERIES}
        #: produce rate of each topic over the last interval: (records/s, bytes/s)
        self.topic_rates: dict[str, tuple[float, float]] = {}
        #: total lag of each group, one per sample: (time, lag)
        self.group_lag: dict[str, deque[tuple[float, int]]] = {}
        self._last: Totals | None = None
        self._task: asyncio.Task[None] | None = None

    def start(self) -> None:
        self.sample()
        self._task = asyncio.get_running_loop().create_task(self._run(), name="console-sampler")

    async def stop(self) -> None:
        task, self._task = self._task, None
        if task is not None:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task

    async def _run(self) -> None:
        while True:
            await asyncio.sleep(self.interval_s)
            try:
                self.sample()
            except Exception:  # a bad sample must not end the sampling
                log.exception("console: sampling failed")

    def sample(self) -> None:
        now = self._clock()
        totals = read_totals(self._broker.metrics.counts, now)
        last, self._last = self._last, totals
        if last is not None and now > last.at:
            self._add_rates(last, totals, now - last.at)
        self._sample_lag(now)

    def _add_rates(self, last: Totals, now: Totals, span: float) -> None:
        self.times.append(now.at)
        requests = now.requests - last.requests
        timed = now.timed - last.timed
        seconds = now.seconds - last.seconds
        values = {
            "bytes_in": (now.bytes_in - last.bytes_in) / span,
            "bytes_out": (now.bytes_out - last.bytes_out) / span,
            "records_in": (now.records_in - last.records_in) / span,
            "requests": requests / span,
            "latency_avg_ms": seconds * 1000.0 / timed if timed > 0 else 0.0,
            "latency_p99_ms": p99_ms([a - b for a, b in zip(now.buckets, last.buckets,
                                                            strict=True)]),
        }
        for name, value in values.items():
            self.series[name].append(round(max(0.0, value), 3))
        rates: dict[str, tuple[float, float]] = {}
        for topic, (records, nbytes) in now.per_topic.items():
            before = last.per_topic.get(topic, (0, 0))
            rates[topic] = (round((records - before[0]) / span, 2),
                            round((nbytes - before[1]) / span, 2))
        self.topic_rates = rates

    def _sample_lag(self, now: float) -> None:
        groups = self._broker.groups
        if not groups.serving:
            self.group_lag.clear()  # another node coordinates them: it has their lag
            return
        ids = groups.coordinator.group_ids()
        for gone in set(self.group_lag) - set(ids):
            del self.group_lag[gone]
        budget = MAX_LAG_PARTITIONS
        for group_id in ids:
            if budget <= 0:
                break
            ring = self.group_lag.get(group_id)
            if ring is None:
                if len(self.group_lag) >= MAX_GROUPS:
                    continue
                ring = self.group_lag[group_id] = deque(maxlen=SAMPLES)
            lags = group_lags(self._broker, group_id, budget)
            budget -= max(1, len(lags))
            ring.append((now, sum(p.lag for p in lags)))

    def lag_history(self, group_id: str) -> list[int]:
        return [lag for _, lag in self.group_lag.get(group_id, ())]

    def metric_series(self) -> dict[str, list[float]]:
        return {name: list(values) for name, values in self.series.items()}

    def sample_times(self) -> Iterator[float]:
        return iter(self.times)
