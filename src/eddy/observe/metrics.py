"""Prometheus metrics of one broker process (issue 17; seed 001's names in Eddy's namespace).

One :class:`BrokerMetrics` per ``Broker`` (made by the admin listener), on its own
``CollectorRegistry`` (never the global one: tests run several brokers in one process). The
hot paths only bump plain numbers (the broker's ``metrics.counts``, a
``eddy.telemetry.counters.BrokerReports``); everything else is read from the broker's state
when scraped (``collectors.py``). ``render()`` answers a scrape in the
Prometheus text format 0.0.4 or in OpenMetrics 1.0.0; it runs on the broker's event loop.

Metrics (labels in braces):

- counters: ``eddy_messages_total{topic}``, ``eddy_bytes_total{topic}`` (records and bytes
  appended by producers), ``eddy_produce_bytes_total{topic}``,
  ``eddy_fetch_bytes_total{topic}``, ``eddy_requests_total{api}``,
  ``eddy_group_rebalances_total``, ``eddy_transactions_total{result}``,
  ``eddy_cdc_events_total{connector}``, ``eddy_isr_shrinks_total{topic}`` and
  ``eddy_isr_expands_total{topic}`` (committed ISR changes of partitions led here: Kafka's
  IsrShrinksPerSec/IsrExpandsPerSec as counters);
- histogram: ``eddy_request_duration_seconds{api}`` (0.1 ms .. 10 s);
- gauges read at scrape time: ``eddy_consumer_lag_records{group,topic,partition}``,
  ``eddy_consumer_lag_seconds{group,topic}``, ``eddy_log_size_bytes{topic,partition}``,
  ``eddy_log_segments{topic,partition}``, ``eddy_under_replicated_partitions``,
  ``eddy_offline_partitions``, ``eddy_raft_leader|term|commit_index|applied_index|
  is_leader{group}``, ``eddy_raft_follower_lag_entries{group,follower}``,
  ``eddy_connections_active{listener}``, ``eddy_request_pool_bytes_used|limit{listener}``,
  ``eddy_request_pool_waiting{listener}``, ``eddy_cdc_lag_milliseconds{connector}``;
- pipelines' reports (topic ``_eddy_pipelines``, see ``pipeline_status.py``):
  ``eddy_pipeline_up|rows_per_second|lag_records{pipeline}`` gauges and
  ``eddy_pipeline_rows_total|dead_letters_total{pipeline}`` counters;
- prometheus_client's process (``process_*``) and platform (``python_info``) collectors.

With ``metrics.enable=false`` the hot-path counters count nothing (``NullCounters``); the
scrape-time gauges still answer.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from prometheus_client import exposition
from prometheus_client.openmetrics import exposition as om_exposition
from prometheus_client.platform_collector import PlatformCollector
from prometheus_client.process_collector import ProcessCollector
from prometheus_client.registry import CollectorRegistry

from eddy.observe.collectors import (
    CountersCollector,
    ListenersCollector,
    StateCollector,
    StateSource,
)
from eddy.observe.pipelines import PipelineCollector, PipelineSource, PipelineStatusView
from eddy.telemetry.counters import BrokerReports, HotCounters, ListenerView

if TYPE_CHECKING:
    from eddy.broker.broker import Broker

TEXT_CONTENT_TYPE = exposition.CONTENT_TYPE_PLAIN_0_0_4
OPENMETRICS_CONTENT_TYPE = om_exposition.CONTENT_TYPE_LATEST

#: every metric family Eddy defines (besides process_* and python_info), with its type
METRIC_TYPES: dict[str, str] = {
    "eddy_messages_total": "counter",
    "eddy_bytes_total": "counter",
    "eddy_produce_bytes_total": "counter",
    "eddy_fetch_bytes_total": "counter",
    "eddy_requests_total": "counter",
    "eddy_request_duration_seconds": "histogram",
    "eddy_group_rebalances_total": "counter",
    "eddy_transactions_total": "counter",
    "eddy_cdc_events_total": "counter",
    "eddy_isr_shrinks_total": "counter",
    "eddy_isr_expands_total": "counter",
    "eddy_cdc_lag_milliseconds": "gauge",
    "eddy_connections_active": "gauge",
    "eddy_request_pool_bytes_used": "gauge",
    "eddy_request_pool_bytes_limit": "gauge",
    "eddy_request_pool_waiting": "gauge",
    "eddy_consumer_lag_records": "gauge",
    "eddy_consumer_lag_seconds": "gauge",
    "eddy_log_size_bytes": "gauge",
    "eddy_log_segments": "gauge",
    "eddy_under_replicated_partitions": "gauge",
    "eddy_offline_partitions": "gauge",
    "eddy_raft_leader": "gauge",
    "eddy_raft_term": "gauge",
    "eddy_raft_commit_index": "gauge",
    "eddy_raft_applied_index": "gauge",
    "eddy_raft_is_leader": "gauge",
    "eddy_raft_follower_lag_entries": "gauge",
    "eddy_pipeline_up": "gauge",
    "eddy_pipeline_rows_per_second": "gauge",
    "eddy_pipeline_lag_records": "gauge",
    "eddy_pipeline_rows": "counter",
    "eddy_pipeline_dead_letters": "counter",
}


class BrokerMetrics:
    """The metrics of one broker: ``counts`` for the hot paths, ``render()`` for scrapes."""

    def __init__(self, source: StateSource, *, enabled: bool = True,
                 process: bool = True, pipelines: PipelineSource | None = None,
                 reports: BrokerReports | None = None) -> None:
        """``source``: the broker's state, read at scrape time; ``reports``: what the
        broker's parts report into (none: new ones, counting unless ``enabled`` is False);
        ``process``: add the process_* and platform collectors (they read /proc of this
        process); ``pipelines``: the pipelines' reports (none: the families are there,
        empty)."""
        self.registry = CollectorRegistry(auto_describe=False)
        self.reports = BrokerReports(enabled) if reports is None else reports
        self.counts: HotCounters = self.reports.counts
        self.listeners = ListenersCollector(self.reports.listeners)
        self.registry.register(CountersCollector(self.counts))
        self.registry.register(self.listeners)
        self.registry.register(StateCollector(source))
        #: pipelines' reports (topic _eddy_pipelines), for a broker's metrics and console
        self.pipelines = pipelines
        self.registry.register(PipelineCollector(pipelines))
        if process:
            ProcessCollector(registry=self.registry)
            PlatformCollector(registry=self.registry)

    @classmethod
    def for_broker(cls, broker: Broker) -> BrokerMetrics:
        from eddy.observe.broker_state import BrokerState

        return cls(BrokerState(broker), reports=broker.metrics,
                   pipelines=PipelineStatusView(broker))

    @property
    def enabled(self) -> bool:
        return self.counts.enabled

    def watch_listener(self, name: str, listener: ListenerView) -> None:
        """Report ``listener``'s open connections and request memory as ``{listener=name}``."""
        self.reports.watch_listener(name, listener)

    def render(self, openmetrics: bool = False) -> tuple[bytes, str]:
        """One scrape: (body, content type), text format 0.0.4 or OpenMetrics 1.0.0."""
        if openmetrics:
            body: bytes = om_exposition.generate_latest(  # type: ignore[no-untyped-call]
                self.registry, version="1.0.0")
            return body, OPENMETRICS_CONTENT_TYPE
        return exposition.generate_latest(self.registry), TEXT_CONTENT_TYPE


def wants_openmetrics(accept: str | None) -> bool:
    """Whether a scrape's Accept header asks for OpenMetrics (Prometheus asks for it first)."""
    if not accept:
        return False
    for part in accept.split(","):
        media, *params = (p.strip() for p in part.split(";"))
        if media != "application/openmetrics-text":
            continue
        version = next((p.split("=", 1)[1] for p in params if p.startswith("version=")),
                       "1.0.0")
        if version in ("1.0.0", "0.0.1"):
            return True
    return False
