"""A running pipeline reports its status to the Eddy it reads or writes: records keyed by its
name in the compacted topic ``_eddy_pipelines`` (``eddy.telemetry.pipeline_status`` has the
format and the broker's side: metrics and the console).

Reporting never stops a pipeline: a broker that cannot take the reports (down, the topic
not creatable) costs a warning, and the pipeline runs on without them."""

from __future__ import annotations

import logging
import os
import socket
import time
from collections.abc import Callable
from typing import Any

from confluent_kafka import KafkaError, KafkaException, Producer
from confluent_kafka.admin import AdminClient, NewTopic  # type: ignore[attr-defined]

from eddy.connect.runtime.progress import Snapshot
from eddy.telemetry.pipeline_status import STATUS_TOPIC, PipelineStatus

log = logging.getLogger(__name__)

#: reports at most this often while running (the last one always goes)
INTERVAL_S = 1.0
TIMEOUT_S = 10.0


def status_bootstrap(pipeline: Any) -> str | None:
    """The Eddy a pipeline reports to: its eddy source's, else its first eddy sink's."""
    source = getattr(pipeline, "source", None)
    if getattr(source, "type", None) == "eddy":
        return str(source.bootstrap)  # type: ignore[union-attr]
    for sink in getattr(pipeline, "sinks", ()):
        if getattr(sink, "type", None) == "eddy":
            return str(sink.bootstrap)
    return None


def _ensure_topic(bootstrap: str, timeout_s: float) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    futures = admin.create_topics(
        [NewTopic(STATUS_TOPIC, num_partitions=1, replication_factor=-1,
                  config={"cleanup.policy": "compact"})],
        request_timeout=timeout_s)
    try:
        futures[STATUS_TOPIC].result(timeout_s)
    except KafkaException as exc:
        if exc.args[0].code() != KafkaError.TOPIC_ALREADY_EXISTS:
            raise


class StatusReporter:
    """Reports one pipeline's progress (``report`` per completed micro-batch, throttled to
    one a second) and its end (``close``)."""

    def __init__(self, bootstrap: str, name: str, *, clock: Callable[[], float] = time.time,
                 timeout_s: float = TIMEOUT_S) -> None:
        self.name = name
        self._clock = clock
        self._timeout_s = timeout_s
        self._last = 0.0
        self._latest: Snapshot | None = None
        self._producer: Producer | None = None
        try:
            _ensure_topic(bootstrap, timeout_s)
            self._producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 50,
                                       "message.timeout.ms": int(timeout_s * 1000)})
        except (KafkaException, ValueError, TimeoutError) as exc:
            log.warning("pipeline %s: its status will not be reported to %s: %s", name,
                        bootstrap, exc)

    @classmethod
    def for_pipeline(cls, pipeline: Any) -> StatusReporter | None:
        bootstrap = status_bootstrap(pipeline)
        return None if bootstrap is None else cls(bootstrap, str(pipeline.name))

    @property
    def active(self) -> bool:
        return self._producer is not None

    def status(self, state: str, error: str = "") -> PipelineStatus:
        s = self._latest
        return PipelineStatus(
            name=self.name, state=state, batch_id=s.batch_id if s else -1,
            rows_total=s.total_rows if s else 0,
            rows_per_s=max(0.0, s.process_rate) if s and state == "running" else 0.0,
            lag_records=sum(s.lag.values()) if s else 0,
            dead_letters=s.dead_letters if s else 0,
            updated_ms=int(self._clock() * 1000), host=socket.gethostname()[:255],
            pid=os.getpid(), error=error[:1000])

    def report(self, snapshot: Snapshot) -> None:
        """A micro-batch completed: report it unless one went out less than a second ago."""
        self._latest = snapshot
        now = self._clock()
        if now - self._last >= INTERVAL_S:
            self._last = now
            self._send(self.status("running"))

    def close(self, state: str = "stopped", error: str = "") -> None:
        """The pipeline ended (``stopped``, or ``failed`` with why): the last report."""
        self._send(self.status(state, error))
        if self._producer is not None:
            left = self._producer.flush(self._timeout_s)
            if left:
                log.warning("pipeline %s: its last status report was not delivered", self.name)
            self._producer = None

    def _send(self, status: PipelineStatus) -> None:
        if self._producer is None:
            return
        key, value = status.encode()
        try:
            self._producer.produce(STATUS_TOPIC, key=key, value=value)
            self._producer.poll(0)
        except (BufferError, KafkaException) as exc:
            log.debug("pipeline %s: a status report dropped: %s", self.name, exc)
