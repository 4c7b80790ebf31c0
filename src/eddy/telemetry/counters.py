"""The broker's hot-path counters: plain ints, lists and dicts, no locks; and what else the
broker reports into (``BrokerReports``: the counters and its listeners).

The handlers count once per request (per partition of a request at most), never per record:
a produce request knows its record count and bytes from the batch headers it validated.
Everything here is touched only on the broker's event loop thread; the metrics collectors
read it at scrape time (on that thread too) and turn it into Prometheus samples.
"""

from __future__ import annotations

from bisect import bisect_left
from collections.abc import Iterable
from typing import Protocol

#: upper bounds (seconds) of the request latency histogram's buckets, 0.1 ms .. 10 s
#: (+Inf is implied: the last slot of every bucket list)
LATENCY_BUCKETS: tuple[float, ...] = (
    0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5,
    1.0, 2.5, 5.0, 10.0,
)

#: Kafka API keys are below this (the largest today is 74); slots are indexed by key
API_KEY_SLOTS = 128


class HotCounters:
    """What the broker counts as it serves, read by the scrape-time collector.

    ``appended[topic]`` is ``[records, bytes]`` appended by producers; ``received``/``sent``
    are record bytes per topic in Produce requests and Fetch responses; per API key,
    ``requests`` (count), ``request_seconds`` (sum) and ``request_buckets`` (a count per
    latency bucket, not cumulative; the last one is +Inf). ``isr_shrinks``/``isr_expands``
    count, per topic, the committed ISR changes of partitions led here that removed/added
    members (Kafka's IsrShrinksPerSec/IsrExpandsPerSec as counters).
    """

    __slots__ = ("appended", "cdc_events", "cdc_lag_ms", "isr_expands", "isr_shrinks",
                 "rebalances", "received", "request_buckets", "request_seconds", "requests",
                 "sent", "txn_aborts", "txn_commits")

    enabled = True

    def __init__(self) -> None:
        self.appended: dict[str, list[int]] = {}
        self.received: dict[str, int] = {}
        self.sent: dict[str, int] = {}
        self.requests: list[int] = [0] * API_KEY_SLOTS
        self.request_seconds: list[float] = [0.0] * API_KEY_SLOTS
        self.request_buckets: list[list[int]] = [
            [0] * (len(LATENCY_BUCKETS) + 1) for _ in range(API_KEY_SLOTS)
        ]
        self.rebalances = 0
        self.txn_commits = 0
        self.txn_aborts = 0
        self.cdc_events: dict[str, int] = {}
        self.cdc_lag_ms: dict[str, float] = {}
        self.isr_shrinks: dict[str, int] = {}
        self.isr_expands: dict[str, int] = {}

    # ---- the hot path --------------------------------------------------------------------

    def request(self, api_key: int, seconds: float) -> None:
        """One request of ``api_key`` handled in ``seconds``."""
        if 0 <= api_key < API_KEY_SLOTS:
            self.requests[api_key] += 1
            self.request_seconds[api_key] += seconds
            self.request_buckets[api_key][bisect_left(LATENCY_BUCKETS, seconds)] += 1

    def produce_received(self, topic: str, nbytes: int) -> None:
        """A Produce request carried ``nbytes`` of record batches for ``topic``."""
        received = self.received
        received[topic] = received.get(topic, 0) + nbytes

    def appended_records(self, topic: str, records: int, nbytes: int) -> None:
        """Producers' batches of ``records`` records, ``nbytes`` bytes, went into the log."""
        counts = self.appended.get(topic)
        if counts is None:
            counts = self.appended[topic] = [0, 0]
        counts[0] += records
        counts[1] += nbytes

    def fetch_sent(self, topic: str, nbytes: int) -> None:
        """A Fetch response carried ``nbytes`` of ``topic``'s log."""
        sent = self.sent
        sent[topic] = sent.get(topic, 0) + nbytes

    # ---- rarer events --------------------------------------------------------------------

    def group_events(self, events: Iterable[object]) -> None:
        """The group coordinator's events (``GroupEvent``): rebalances that completed."""
        for event in events:
            if getattr(event, "kind", None) == "rebalance-complete":
                self.rebalances += 1

    def transaction_ended(self, committed: bool) -> None:
        """The transaction coordinator completed a transaction (markers written)."""
        if committed:
            self.txn_commits += 1
        else:
            self.txn_aborts += 1

    def cdc_event(self, connector: str, events: int, lag_ms: float | None = None) -> None:
        """A CDC connector delivered ``events`` (its replication lag now: ``lag_ms``)."""
        self.cdc_events[connector] = self.cdc_events.get(connector, 0) + events
        if lag_ms is not None:
            self.cdc_lag_ms[connector] = lag_ms

    def isr_changed(self, topic: str, before: Iterable[int], after: Iterable[int]) -> None:
        """A partition of ``topic`` led here had its committed ISR go from ``before`` to
        ``after`` (the leader staying the same): a shrink if a member left, an expand if one
        joined (one change may be both); one count per change, as Kafka marks them."""
        old, new = set(before), set(after)
        if old - new:
            self.isr_shrinks[topic] = self.isr_shrinks.get(topic, 0) + 1
        if new - old:
            self.isr_expands[topic] = self.isr_expands.get(topic, 0) + 1


class NullCounters(HotCounters):
    """Counters that count nothing (``metrics.enable=false``): every call returns at once."""

    __slots__ = ()

    enabled = False

    def request(self, api_key: int, seconds: float) -> None:
        pass

    def produce_received(self, topic: str, nbytes: int) -> None:
        pass

    def appended_records(self, topic: str, records: int, nbytes: int) -> None:
        pass

    def fetch_sent(self, topic: str, nbytes: int) -> None:
        pass

    def group_events(self, events: Iterable[object]) -> None:
        pass

    def transaction_ended(self, committed: bool) -> None:
        pass

    def cdc_event(self, connector: str, events: int, lag_ms: float | None = None) -> None:
        pass

    def isr_changed(self, topic: str, before: Iterable[int], after: Iterable[int]) -> None:
        pass


class PoolView(Protocol):
    capacity: int
    used: int

    @property
    def waiting(self) -> int: ...


class ListenerView(Protocol):
    """What the metrics read of a listener (``KafkaServer``)."""

    pool: PoolView

    @property
    def open_connections(self) -> int: ...


class BrokerReports:
    """What a broker's parts report into: the hot-path ``counts`` (counting nothing when
    ``metrics.enable=false``) and the listeners whose connections and request memory are
    reported. The observe role's Prometheus metrics read both at scrape time."""

    def __init__(self, enabled: bool = True) -> None:
        self.counts: HotCounters = HotCounters() if enabled else NullCounters()
        self.listeners: dict[str, ListenerView] = {}

    @property
    def enabled(self) -> bool:
        return self.counts.enabled

    def watch_listener(self, name: str, listener: ListenerView) -> None:
        """Report ``listener``'s open connections and request memory as ``{listener=name}``."""
        self.listeners[name] = listener
