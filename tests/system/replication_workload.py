"""The client side of the replication fault tests: an idempotent acks=all producer writing
keyed records with unique values in a thread (recording every delivery report), and
read_committed consumers reading every partition from offset 0 up to its high watermark."""

from __future__ import annotations

import threading
import time
from typing import Any

from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaError, Producer, TopicPartition
from replication_check import Read, Write


class Writer:
    """Writes `count` records (key k-<tag>-<i>, value v-<tag>-<i>) to `topic`, at most
    `rate` per second, in a thread; `acked` and `unacked` hold the outcome of each."""

    def __init__(self, bootstrap: str, topic: str, count: int, rate: float, tag: str = "w",
                 extra: dict[str, Any] | None = None) -> None:
        self.topic, self.count, self.rate, self.tag = topic, count, rate, tag
        self.conf: dict[str, Any] = {
            "bootstrap.servers": bootstrap, "acks": "all", "enable.idempotence": True,
            "linger.ms": 5, "message.timeout.ms": 30000, "request.timeout.ms": 5000,
            "metadata.max.age.ms": 2000, "topic.metadata.refresh.interval.ms": 1000,
            **(extra or {})}
        self.acked: list[Write] = []
        self.unacked: list[Write] = []
        self.errors: dict[str, int] = {}
        self.sent = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def start(self) -> Writer:
        self._thread.start()
        return self

    def stop(self) -> None:
        """Produce nothing more (what is in flight still gets its delivery report)."""
        self._stop.set()

    def join(self, timeout: float) -> None:
        self._thread.join(timeout)
        assert not self._thread.is_alive(), "the producer did not finish in time"

    def _report(self, err: KafkaError | None, msg: Any) -> None:
        value: bytes = msg.value()
        key: bytes = msg.key()
        if err is None:
            self.acked.append(Write(value, key, msg.partition(), msg.offset()))
        else:
            self.unacked.append(Write(value, key))
            self.errors[err.name()] = self.errors.get(err.name(), 0) + 1

    def _run(self) -> None:
        p = Producer(self.conf)
        started = time.monotonic()
        for i in range(self.count):
            if self._stop.is_set():
                break
            while True:
                try:
                    p.produce(self.topic, key=f"k-{self.tag}-{i}".encode(),
                              value=f"v-{self.tag}-{i}".encode(), on_delivery=self._report)
                    break
                except BufferError:
                    p.poll(0.05)
            self.sent += 1
            p.poll(0)
            ahead = (i + 1) / self.rate - (time.monotonic() - started)
            if ahead > 0:
                time.sleep(ahead)
        left = p.flush(60)
        if left:
            raise AssertionError(f"{left} records still in flight after 60 s")


def watermarks(bootstrap: str, topic: str, partitions: int) -> dict[int, int]:
    """partition -> high watermark."""
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": "wm", "enable.auto.commit": False})
    try:
        return {p: int(c.get_watermark_offsets(TopicPartition(topic, p), timeout=10)[1])
                for p in range(partitions)}
    finally:
        c.close()


def read_all(bootstrap: str, topic: str, ends: dict[int, int],
             timeout: float = 30.0) -> list[Read]:
    """Every record of `topic` a read_committed consumer returns from offset 0 until each
    partition reached its end offset in `ends` (or `timeout` passed), in poll order."""
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": "checker",
                  "enable.auto.commit": False, "isolation.level": "read_committed",
                  "enable.partition.eof": True, "fetch.wait.max.ms": 100})
    c.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in ends])
    reads: list[Read] = []
    done = {p for p, end in ends.items() if end == 0}
    deadline = time.monotonic() + timeout
    try:
        while len(done) < len(ends) and time.monotonic() < deadline:
            m: Any = c.poll(0.5)
            if m is None:
                continue
            if m.error() is not None:
                if m.error().code() == KafkaError._PARTITION_EOF and \
                        m.offset() >= ends[m.partition()]:
                    done.add(m.partition())
                continue
            reads.append(Read(m.partition(), m.offset(), m.key(), m.value()))
            if m.offset() + 1 >= ends[m.partition()]:
                done.add(m.partition())
    finally:
        c.close()
    return reads
