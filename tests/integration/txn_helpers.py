"""Helpers for the exactly-once tests (test_idempotence.py, test_transactions.py): a raw
Kafka connection for InitProducerId and Produce with hand-made idempotent batches, and
librdkafka (confluent-kafka) readers that read a topic to its end at either isolation level.

The batches come from tests/unit/batch_builder.py (RecordBatch v2, written from the Kafka
spec), which sets producer id, epoch and base sequence and the transactional bit
(attributes 0x10) as asked."""

from __future__ import annotations

import contextlib
import socket
import struct
import time
import uuid
from typing import NamedTuple

from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaError, KafkaException, TopicPartition
from kafka_helpers import batch_builder, connect, read_response

# Kafka error codes used by these tests
NONE = 0
OUT_OF_ORDER_SEQUENCE_NUMBER = 45
DUPLICATE_SEQUENCE_NUMBER = 46
INVALID_PRODUCER_EPOCH = 47
INVALID_TRANSACTION_TIMEOUT = 50
PRODUCER_FENCED = 90

TRANSACTIONAL_BIT = 0x10

Record = tuple[int, bytes | None, bytes | None]  # offset, key, value


# ---- raw protocol ----------------------------------------------------------------------------


class ProduceResult(NamedTuple):
    error: int
    base_offset: int


class RawClient:
    """One plain-socket connection; requests are answered in order."""

    def __init__(self, port: int) -> None:
        self.port = port
        self.sock: socket.socket = connect(port)
        self._cid = 0

    def close(self) -> None:
        with contextlib.suppress(OSError):
            self.sock.close()

    def call(self, frame_fn, *args, **kwargs) -> bytes:  # type: ignore[no-untyped-def]
        """Send frame_fn(correlation_id, *args) and return the response body."""
        self._cid += 1
        self.sock.sendall(frame_fn(self._cid, *args, **kwargs))
        resp = read_response(self.sock)
        assert resp is not None, "the broker closed the connection"
        cid, body = resp
        assert cid == self._cid, f"correlation id {cid}, expected {self._cid}"
        return body

    def init_producer_id(self, transactional_id: str | None = None,
                         timeout_ms: int = 60_000) -> tuple[int, int, int]:
        """InitProducerId v1 -> (error code, producer id, epoch)."""
        body = self.call(init_producer_id_request, transactional_id, timeout_ms)
        _throttle, err, pid, epoch = struct.unpack(">ihqh", body)
        return err, pid, epoch

    def produce(self, topic: str, partition: int, batch: bytes) -> ProduceResult:
        """Produce v3, acks=all, one partition -> its (error code, base offset)."""
        body = self.call(batch_builder.produce_request, topic, partition, batch)
        return parse_produce_v3(body)[(topic, partition)]


def init_producer_id_request(correlation_id: int, transactional_id: str | None,
                             timeout_ms: int) -> bytes:
    """InitProducerId v1: transactional_id (nullable string), transaction_timeout_ms i32."""
    if transactional_id is None:
        tid = struct.pack(">h", -1)
    else:
        raw = transactional_id.encode()
        tid = struct.pack(">h", len(raw)) + raw
    return batch_builder.request(22, 1, correlation_id, tid + struct.pack(">i", timeout_ms))


def parse_produce_v3(body: bytes) -> dict[tuple[str, int], ProduceResult]:
    """Produce v3 response: [topic [partition error_code base_offset log_append_time]]
    throttle_time_ms."""
    out = {}
    pos = 0
    (n_topics,) = struct.unpack_from(">i", body, pos)
    pos += 4
    for _ in range(n_topics):
        (name_len,) = struct.unpack_from(">h", body, pos)
        pos += 2
        name = body[pos : pos + name_len].decode()
        pos += name_len
        (n_parts,) = struct.unpack_from(">i", body, pos)
        pos += 4
        for _ in range(n_parts):
            partition, err, base, _append_time = struct.unpack_from(">ihqq", body, pos)
            pos += 22
            out[(name, partition)] = ProduceResult(err, base)
    assert pos + 4 == len(body), f"{len(body) - pos - 4} unexpected bytes in the response"
    return out


def idempotent_batch(producer_id: int, epoch: int, sequence: int, values: list[bytes],
                     transactional: bool = False) -> bytes:
    return batch_builder.build_batch(
        values,
        base_timestamp=int(time.time() * 1000),
        producer_id=producer_id,
        producer_epoch=epoch,
        base_sequence=sequence,
        attributes_extra=TRANSACTIONAL_BIT if transactional else 0,
    )


# ---- reading topics with librdkafka ----------------------------------------------------------


def read_to_end(bootstrap: str, topic: str, partitions: int, isolation: str,
                timeout: float = 60.0) -> tuple[dict[int, list[Record]], dict[int, int]]:
    """Every record a consumer with isolation.level=`isolation` sees in every partition,
    from the log start to the partition end for that level (librdkafka's PARTITION_EOF:
    the high watermark for read_uncommitted, the last stable offset for read_committed).
    Returns (records by partition, end offset by partition)."""
    c = Consumer({
        "bootstrap.servers": bootstrap,
        "group.id": f"txn-verify-{uuid.uuid4()}",
        "enable.auto.commit": False,
        "auto.offset.reset": "earliest",
        "enable.partition.eof": True,
        "isolation.level": isolation,
        "fetch.wait.max.ms": 50,
    })
    try:
        c.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in range(partitions)])
        out: dict[int, list[Record]] = {p: [] for p in range(partitions)}
        ends: dict[int, int] = {}
        deadline = time.monotonic() + timeout
        while len(ends) < partitions and time.monotonic() < deadline:
            m = c.poll(0.2)
            if m is None:
                continue
            if m.error():
                if m.error().code() == KafkaError._PARTITION_EOF:
                    ends[m.partition()] = m.offset()
                    continue
                raise KafkaException(m.error())
            assert m.partition() not in ends, "a record after the partition's end"
            out[m.partition()].append((m.offset(), m.key(), m.value()))
        assert len(ends) == partitions, (
            f"{topic}: no end of partitions {set(range(partitions)) - set(ends)} "
            f"in {timeout}s ({isolation})")
        return out, ends
    finally:
        c.close()


def end_offsets(bootstrap: str, topic: str, partitions: int, isolation: str
                ) -> dict[int, int]:
    """ListOffsets latest for each partition, with the given isolation level."""
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": f"txn-wm-{uuid.uuid4()}",
                  "isolation.level": isolation})
    try:
        return {p: c.get_watermark_offsets(TopicPartition(topic, p), timeout=10)[1]
                for p in range(partitions)}
    finally:
        c.close()


def values_of(records: dict[int, list[Record]]) -> list[bytes]:
    return [v for recs in records.values() for _, _, v in recs if v is not None]
