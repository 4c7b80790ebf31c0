"""Pipelines' status as the broker sees it: the compacted topic ``_eddy_pipelines``.

An ``eddy connect run`` process reports its pipeline's progress there (Kafka Connect keeps
its workers' status in a topic the same way): one record per report, keyed by the pipeline's
name, the value a small JSON object (:class:`PipelineStatus`). Any node holding the topic's
partition reads it from its own log (:class:`PipelineStatusView`) for the metrics
(``eddy_pipeline_*{pipeline}``) and the console; nothing else is needed between a pipeline
and the cluster.

Anyone who may produce can write to the topic, so every value is checked (a JSON object of
bounded size, each field of its type and range) and a bad one is skipped, counted and logged
once in a while: it never stops the others from being read.
"""

from __future__ import annotations

import json
import logging
import math
from collections.abc import Iterator, Mapping
from dataclasses import asdict, dataclass
from typing import TYPE_CHECKING, Any, Protocol

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
from prometheus_client.registry import Collector

from eddy.protocol.errors import KafkaError
from eddy.protocol.record_batch import iter_batches
from eddy.protocol.records import CorruptRecordError, decode_batch_records

if TYPE_CHECKING:
    from prometheus_client.metrics_core import Metric

    from eddy.broker.broker import Broker

log = logging.getLogger(__name__)

STATUS_TOPIC = "_eddy_pipelines"
STATES = ("running", "stopped", "failed")
#: a pipeline whose last report is older than this is not counted as up
STALE_MS = 60_000
MAX_VALUE_BYTES = 16 * 1024
MAX_NAME = 249
MAX_TEXT = 1024
MAX_PIPELINES = 10_000
#: bytes read from the log per refresh (a scrape or a console poll)
READ_BYTES = 1 << 20


@dataclass(frozen=True, slots=True)
class PipelineStatus:
    """One report of a pipeline: its state, progress and where it runs."""

    name: str
    state: str
    batch_id: int
    rows_total: int
    rows_per_s: float
    lag_records: int
    dead_letters: int
    updated_ms: int
    host: str = ""
    pid: int = 0
    error: str = ""

    def encode(self) -> tuple[bytes, bytes]:
        """(key, value) of the record reporting it."""
        return self.name.encode(), json.dumps(asdict(self), separators=(",", ":")).encode()

    def up(self, now_ms: int) -> bool:
        return self.state == "running" and now_ms - self.updated_ms <= STALE_MS


def _int(doc: dict[str, Any], field: str, default: int | None = None) -> int:
    value = doc.get(field, default)
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value < 1 << 63:
        if field == "batch_id" and isinstance(value, int) and value == -1:
            return -1
        raise ValueError(f"{field}: expected a non-negative integer, got {value!r}"[:200])
    return value


def _text(doc: dict[str, Any], field: str, limit: int, default: str | None = None) -> str:
    value = doc.get(field, default)
    if not isinstance(value, str) or len(value) > limit:
        raise ValueError(f"{field}: expected a string of at most {limit} characters")
    return value


def decode(key: bytes | None, value: bytes) -> PipelineStatus:
    """The status a record reports; ValueError naming the field when it is not one."""
    if len(value) > MAX_VALUE_BYTES:
        raise ValueError(f"value: {len(value)} bytes, more than {MAX_VALUE_BYTES}")
    try:
        doc = json.loads(value)
    except (ValueError, RecursionError) as exc:
        raise ValueError(f"value: not JSON ({str(exc)[:80]})") from None
    if not isinstance(doc, dict):
        raise ValueError("value: expected a JSON object")
    name = _text(doc, "name", MAX_NAME)
    if not name or (key is not None and key != name.encode()):
        raise ValueError("name: empty, or not the record's key")
    state = _text(doc, "state", 16)
    if state not in STATES:
        raise ValueError(f"state: expected one of {', '.join(STATES)}")
    rate = doc.get("rows_per_s", 0.0)
    if isinstance(rate, bool) or not isinstance(rate, int | float) or not math.isfinite(rate) \
            or rate < 0:
        raise ValueError("rows_per_s: expected a finite non-negative number")
    return PipelineStatus(
        name=name, state=state, batch_id=_int(doc, "batch_id", -1),
        rows_total=_int(doc, "rows_total", 0), rows_per_s=float(rate),
        lag_records=_int(doc, "lag_records", 0), dead_letters=_int(doc, "dead_letters", 0),
        updated_ms=_int(doc, "updated_ms"), host=_text(doc, "host", MAX_TEXT, ""),
        pid=_int(doc, "pid", 0), error=_text(doc, "error", MAX_TEXT, ""))


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
