"""Pipelines' reports as this node sees them: the latest status of each, read from its replica
of ``_eddy_pipelines`` (the records' format is ``eddy.telemetry.pipeline_status``), for the
metrics (``eddy_pipeline_*{pipeline}``) and the console."""

from __future__ import annotations

import logging
from collections.abc import Iterator, Mapping
from typing import TYPE_CHECKING, Protocol

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
from prometheus_client.registry import Collector

from eddy.protocol.errors import KafkaError
from eddy.protocol.record_batch import iter_batches
from eddy.protocol.records import CorruptRecordError, decode_batch_records
from eddy.telemetry.pipeline_status import STATUS_TOPIC, PipelineStatus, decode

if TYPE_CHECKING:
    from prometheus_client.metrics_core import Metric

    from eddy.broker.broker import Broker

log = logging.getLogger(__name__)

MAX_PIPELINES = 10_000
#: bytes read from the log per refresh (a scrape or a console poll)
READ_BYTES = 1 << 20


class PipelineSource(Protocol):
    """Where the collector and the console get the latest reports."""

    def now_ms(self) -> int: ...

    def refresh(self) -> Mapping[str, PipelineStatus]: ...


class PipelineStatusView:
    """The latest status of every pipeline, read from this broker's replica of the topic
    (incrementally: each refresh reads on from where the last one stopped, a bounded
    number of bytes)."""

    def __init__(self, broker: Broker) -> None:
        self._broker = broker
        self._next = 0
        self.latest: dict[str, PipelineStatus] = {}
        self.rejected = 0

    def now_ms(self) -> int:
        return self._broker.clock.now_ms()

    def refresh(self) -> dict[str, PipelineStatus]:
        plog = self._broker.logs.partition(STATUS_TOPIC, 0)
        if plog is None:
            return self.latest
        if self._next < plog.log_start_offset or self._next > plog.high_watermark:
            self._next, self.latest = plog.log_start_offset, {}  # truncated or recreated
        try:
            got = plog.read(self._next, READ_BYTES, plog.high_watermark, min_one=True)
        except (KafkaError, OSError) as exc:
            log.debug("%s: not read this time: %s", STATUS_TOPIC, exc)
            return self.latest
        if got is None:
            return self.latest
        data = got if isinstance(got, bytes) else got.read()
        for pos, header in iter_batches(data):
            if not header.is_control:
                self._take_batch(data[pos:pos + header.size])
            self._next = max(self._next, header.last_offset + 1)
        return self.latest

    def _take_batch(self, batch: bytes) -> None:
        try:
            for record in decode_batch_records(batch):
                if record.offset < self._next:
                    continue
                if record.value is None:  # a tombstone: the pipeline was removed
                    self.latest.pop(bytes(record.key or b"").decode(errors="replace"), None)
                    continue
                self._take(record.key, bytes(record.value))
        except CorruptRecordError as exc:
            self._reject(f"a batch does not decode: {exc}")

    def _take(self, key: bytes | None, value: bytes) -> None:
        try:
            status = decode(key, value)
        except ValueError as exc:
            self._reject(str(exc))
            return
        if status.name in self.latest or len(self.latest) < MAX_PIPELINES:
            self.latest[status.name] = status

    def _reject(self, why: str) -> None:
        self.rejected += 1
        if self.rejected & (self.rejected - 1) == 0:  # the 1st, 2nd, 4th, 8th ...
            log.warning("%s: a record skipped (%d so far): %s", STATUS_TOPIC, self.rejected,
                        why)


class PipelineCollector(Collector):
    """``eddy_pipeline_*{pipeline}`` from the latest reports, read at scrape time."""

    def __init__(self, view: PipelineSource | None) -> None:
        self.view = view

    def collect(self) -> Iterator[Metric]:
        latest = self.view.refresh() if self.view is not None else {}
        now = self.view.now_ms() if self.view is not None else 0
        up = GaugeMetricFamily("eddy_pipeline_up", "1 while the pipeline reports running "
                               "(its last report under a minute old)", labels=["pipeline"])
        rate = GaugeMetricFamily("eddy_pipeline_rows_per_second",
                                 "rows/s of its last micro-batch", labels=["pipeline"])
        lag = GaugeMetricFamily("eddy_pipeline_lag_records",
                                "records its sources are behind", labels=["pipeline"])
        rows = CounterMetricFamily("eddy_pipeline_rows", "rows it has read",
                                   labels=["pipeline"])
        dead = CounterMetricFamily("eddy_pipeline_dead_letters",
                                   "records it sent to its dead letters", labels=["pipeline"])
        for name, s in sorted(latest.items()):
            up.add_metric([name], 1.0 if s.up(now) else 0.0)
            rate.add_metric([name], s.rows_per_s)
            lag.add_metric([name], float(s.lag_records))
            rows.add_metric([name], float(s.rows_total))
            dead.add_metric([name], float(s.dead_letters))
        yield from (up, rate, lag, rows, dead)
