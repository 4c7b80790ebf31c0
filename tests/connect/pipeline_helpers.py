"""Helpers for the pipeline integration tests: topics, producing and reading back records
with a real Kafka client (confluent-kafka), pipeline files, and running pipelines."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
import uuid
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from confluent_kafka import Consumer, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic


@dataclass(frozen=True)
class Rec:
    """A record as read back (or as delivered, for what a test produced)."""

    topic: str
    partition: int
    offset: int
    key: bytes | None
    value: bytes | None
    headers: dict[str, bytes] = field(default_factory=dict, compare=False, hash=False)

    @property
    def position(self) -> str:
        """`topic/partition@offset`, as the dead-letter header eddy.source writes it."""
        return f"{self.topic}/{self.partition}@{self.offset}"

    def json(self) -> Any:
        assert self.value is not None
        return json.loads(self.value)


def create_topic(bootstrap: str, name: str, partitions: int = 1) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap, "log_level": 3})
    admin.create_topics([NewTopic(name, partitions, 1)])[name].result(15)


def produce(bootstrap: str, topic: str, records: Iterable[tuple[bytes | None, bytes | None]],
            *, partitioner: str = "murmur2_random", partition: int | None = None,
            linger_ms: int = 5) -> list[Rec]:
    """Produce (key, value) pairs with acks=all, in order; returns the delivered records
    (with their partition and offset) in the order given."""
    p = Producer({"bootstrap.servers": bootstrap, "acks": "all", "linger.ms": linger_ms,
                  "partitioner": partitioner, "message.timeout.ms": 30_000,
                  "enable.idempotence": True, "log_level": 3})
    delivered: dict[int, Rec] = {}
    errors: list[str] = []

    def on_delivery(i: int) -> Any:
        def cb(err: Any, msg: Any) -> None:
            if err is not None:
                errors.append(str(err))
            else:
                delivered[i] = Rec(msg.topic(), msg.partition(), msg.offset(), msg.key(),
                                   msg.value())
        return cb

    n = 0
    for n, (key, value) in enumerate(records, 1):
        kw: dict[str, Any] = {} if partition is None else {"partition": partition}
        for _ in range(10_000):
            try:
                p.produce(topic, value=value, key=key, on_delivery=on_delivery(n - 1), **kw)
                break
            except BufferError:
                p.poll(0.05)
        else:
            raise AssertionError("the producer's queue stayed full")
        if n % 10_000 == 0:
            p.poll(0)
    assert p.flush(60) == 0, "the producer could not deliver everything in 60s"
    assert not errors, errors[:3]
    assert len(delivered) == n
    return [delivered[i] for i in range(n)]


def produce_fast(bootstrap: str, topic: str, values: Iterable[bytes],
                 keys: Iterable[bytes] | None = None) -> int:
    """Produce many records without tracking each one (for the large tests)."""
    p = Producer({"bootstrap.servers": bootstrap, "acks": "all", "linger.ms": 20,
                  "batch.size": 1 << 20, "enable.idempotence": True, "log_level": 3,
                  "partitioner": "murmur2_random", "message.timeout.ms": 60_000})
    errors: list[str] = []

    def cb(err: Any, _msg: Any) -> None:
        if err is not None and len(errors) < 5:
            errors.append(str(err))

    key_iter = iter(keys) if keys is not None else None
    n = 0
    for n, value in enumerate(values, 1):
        key = next(key_iter) if key_iter is not None else None
        for _ in range(10_000):
            try:
                p.produce(topic, value=value, key=key, on_delivery=cb)
                break
            except BufferError:
                p.poll(0.05)
        else:
            raise AssertionError("the producer's queue stayed full")
        if n % 10_000 == 0:
            p.poll(0)
    assert p.flush(120) == 0, "the producer could not deliver everything in 120s"
    assert not errors, errors
    return n


def partition_count(bootstrap: str, topic: str) -> int:
    admin = AdminClient({"bootstrap.servers": bootstrap, "log_level": 3})
    md = admin.list_topics(topic, timeout=15)
    meta = md.topics.get(topic)
    assert meta is not None and meta.error is None, f"no topic {topic}: {meta and meta.error}"
    return len(meta.partitions)


def topics(bootstrap: str) -> set[str]:
    admin = AdminClient({"bootstrap.servers": bootstrap, "log_level": 3})
    return {t for t in admin.list_topics(timeout=15).topics if not t.startswith("__")}


def read_topic(bootstrap: str, topic: str, timeout: float = 60.0) -> list[Rec]:
    """Every record of every partition of `topic`, from the log start to the high
    watermark as it is now, in (partition, offset) order."""
    parts = partition_count(bootstrap, topic)
    c = Consumer({
        "bootstrap.servers": bootstrap,
        "group.id": f"verify-{uuid.uuid4()}",
        "enable.auto.commit": False,
        "enable.partition.eof": False,
        "fetch.wait.max.ms": 50,
        "isolation.level": "read_uncommitted",
        "log_level": 3,
    })
    try:
        ends: dict[int, int] = {}
        starts: dict[int, int] = {}
        for p in range(parts):
            starts[p], ends[p] = c.get_watermark_offsets(TopicPartition(topic, p), timeout=15)
        out: list[Rec] = []
        pending = {p for p in range(parts) if ends[p] > starts[p]}
        if pending:
            c.assign([TopicPartition(topic, p, starts[p]) for p in pending])
        deadline = time.monotonic() + timeout
        while pending and time.monotonic() < deadline:
            batch = c.consume(10_000, 0.5)
            for m in batch:
                if m.error():
                    raise KafkaException(m.error())
                p = m.partition()
                if p not in pending or m.offset() >= ends[p]:
                    continue
                out.append(Rec(m.topic(), p, m.offset(), m.key(), m.value(),
                               {k: v for k, v in (m.headers() or [])}))
                if m.offset() >= ends[p] - 1:
                    pending.discard(p)
                    c.incremental_unassign([TopicPartition(topic, p)])
        assert not pending, f"timed out reading {topic} partitions {pending}: ends {ends}"
        out.sort(key=lambda r: (r.partition, r.offset))
        return out
    finally:
        c.close()


def murmur2_partitions(bootstrap: str, keys: Sequence[bytes], partitions: int) -> dict[bytes, int]:
    """The partition librdkafka's murmur2 partitioner (Java's default for keyed records)
    chooses for each key, found by producing the keys to a fresh topic with `partitions`
    partitions."""
    probe = f"murmur2-probe-{uuid.uuid4().hex[:8]}"
    create_topic(bootstrap, probe, partitions)
    delivered = produce(bootstrap, probe, [(k, b"probe") for k in keys],
                        partitioner="murmur2_random")
    return {r.key: r.partition for r in delivered if r.key is not None}


def write_pipeline(directory: Path, text: str, name: str = "pipeline.yaml") -> Path:
    path = directory / name
    path.write_text(text)
    return path


def run_text(spark: Any, text: str, max_seconds: float = 240.0) -> Any:
    """Load a pipeline from YAML text and run it in this process (runtime.run)."""
    from eddy.connect.runtime.runner import run
    from eddy.connect.runtime.spec import load_pipeline_text

    pipeline = load_pipeline_text(text, "test-pipeline.yaml")
    return run(spark, pipeline, poll_s=0.2, max_seconds=max_seconds)


def parquet_rows(spark: Any, path: Path | str, order_by: str = "id") -> list[dict[str, Any]]:
    df = spark.read.parquet(str(path))
    return [r.asDict(recursive=True) for r in df.orderBy(order_by).collect()]


def eddy_env() -> dict[str, str]:
    """The environment for `python -m eddy connect ...` subprocesses."""
    return {**os.environ, "SPARK_LOCAL_IP": "127.0.0.1", "PYSPARK_PYTHON": sys.executable,
            "PYSPARK_DRIVER_PYTHON": sys.executable, "PYTHONUNBUFFERED": "1"}


def eddy_cmd(*args: str) -> list[str]:
    return [sys.executable, "-m", "eddy", *args]


def run_eddy(*args: str, timeout: float = 120.0, cwd: Path | None = None
             ) -> subprocess.CompletedProcess[str]:
    """`python -m eddy ARGS` to completion, output captured (never a TTY)."""
    return subprocess.run(eddy_cmd(*args), capture_output=True, text=True, timeout=timeout,
                          env=eddy_env(), cwd=cwd, stdin=subprocess.DEVNULL)
