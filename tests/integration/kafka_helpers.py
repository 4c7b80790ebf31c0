"""Helpers shared by the durability and bad-input integration tests: real clients
(confluent-kafka) for topics/produce/consume, and raw sockets for hand-made frames."""

from __future__ import annotations

import socket
import struct
import sys
import time
import uuid
from pathlib import Path

from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

# the RecordBatch builder/parser lives next to the unit tests
sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "unit"))

import batch_builder

__all__ = ["batch_builder"]

Record = tuple[int, bytes | None, bytes | None]  # offset, key, value


def create_topic(bootstrap: str, name: str, partitions: int = 1,
                 config: dict[str, str] | None = None) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    fut = admin.create_topics([NewTopic(name, partitions, 1, config=config or {})])[name]
    fut.result(15)


def produce(bootstrap: str, topic: str, values: list[bytes], partition: int | None = None,
            keys: list[bytes] | None = None, flush_each: bool = False,
            ) -> list[tuple[int, int, bytes]]:
    """Produce with acks=all; returns (partition, offset, value) of each delivered record."""
    p = Producer({"bootstrap.servers": bootstrap, "acks": "all", "linger.ms": 5,
                  "message.timeout.ms": 15000})
    delivered: list[tuple[int, int, bytes]] = []
    errors: list[str] = []

    def cb(err, msg):  # type: ignore[no-untyped-def]
        if err is not None:
            errors.append(str(err))
        else:
            delivered.append((msg.partition(), msg.offset(), msg.value()))

    for i, v in enumerate(values):
        kw = {} if partition is None else {"partition": partition}
        p.produce(topic, value=v, key=keys[i] if keys else None, on_delivery=cb, **kw)
        if flush_each:
            p.flush(15)
    assert p.flush(20) == 0, "producer could not deliver everything"
    assert not errors, errors
    return delivered


def consume_all(bootstrap: str, topic: str, partitions: int, timeout: float = 30.0,
                ) -> dict[int, list[Record]]:
    """Every record of every partition, from the log start to the high watermark."""
    c = Consumer({
        "bootstrap.servers": bootstrap,
        "group.id": f"verify-{uuid.uuid4()}",
        "enable.auto.commit": False,
        "auto.offset.reset": "earliest",
        "enable.partition.eof": False,
        "fetch.wait.max.ms": 50,
    })
    try:
        ends = {}
        starts = {}
        for p in range(partitions):
            lo, hi = c.get_watermark_offsets(TopicPartition(topic, p), timeout=10)
            starts[p], ends[p] = lo, hi
        out: dict[int, list[Record]] = {p: [] for p in range(partitions)}
        pending = {p for p in range(partitions) if ends[p] > starts[p]}
        if pending:
            c.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in pending])
        deadline = time.monotonic() + timeout
        while pending and time.monotonic() < deadline:
            m = c.poll(0.5)
            if m is None:
                continue
            if m.error():
                raise KafkaException(m.error())
            p = m.partition()
            out[p].append((m.offset(), m.key(), m.value()))
            if m.offset() >= ends[p] - 1:
                pending.discard(p)
        assert not pending, f"timed out reading partitions {pending}: ends {ends}"
        return out
    finally:
        c.close()


def watermarks(bootstrap: str, topic: str, partition: int = 0) -> tuple[int, int]:
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": f"wm-{uuid.uuid4()}"})
    try:
        lo, hi = c.get_watermark_offsets(TopicPartition(topic, partition), timeout=10)
        return lo, hi
    finally:
        c.close()


# ---- raw sockets ---------------------------------------------------------------------------


def connect(port: int, timeout: float = 10.0) -> socket.socket:
    s = socket.create_connection(("127.0.0.1", port), timeout=timeout)
    s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    return s


def recv_exact(s: socket.socket, n: int) -> bytes | None:
    """n bytes, or None when the peer closes first (a reset counts as a close: a peer
    closing with our unread request in its buffer sends RST)."""
    buf = bytearray()
    while len(buf) < n:
        try:
            chunk = s.recv(n - len(buf))
        except ConnectionResetError:
            return None
        if not chunk:
            return None
        buf += chunk
    return bytes(buf)


def read_response(s: socket.socket) -> tuple[int, bytes] | None:
    """(correlation id, rest of the response) or None when the broker closed."""
    head = recv_exact(s, 4)
    if head is None:
        return None
    (size,) = struct.unpack(">i", head)
    assert 4 <= size < 1 << 28, f"response size {size}"
    payload = recv_exact(s, size)
    assert payload is not None, "connection closed mid-response"
    return struct.unpack_from(">i", payload)[0], payload[4:]


def send_then_eof(port: int, data: bytes, timeout: float = 15.0) -> tuple[bytes, bool]:
    """Send data, half-close, read until the broker closes.
    Returns (everything received, whether the broker closed within the timeout)."""
    s = connect(port, timeout)
    received = bytearray()
    closed = False
    try:
        try:
            s.sendall(data)
            s.shutdown(socket.SHUT_WR)
        except (BrokenPipeError, ConnectionResetError):
            pass
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            try:
                chunk = s.recv(65536)
            except ConnectionResetError:
                closed = True
                break
            except TimeoutError:
                break
            if not chunk:
                closed = True
                break
            received += chunk
    finally:
        s.close()
    return bytes(received), closed


def wait_closed_by_broker(s: socket.socket, timeout: float = 15.0) -> tuple[bytes, bool]:
    """Without half-closing: read until the broker closes the connection."""
    s.settimeout(timeout)
    received = bytearray()
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            chunk = s.recv(65536)
        except ConnectionResetError:
            return bytes(received), True
        except TimeoutError:
            return bytes(received), False
        if not chunk:
            return bytes(received), True
        received += chunk
    return bytes(received), False


def parse_api_versions_v0(body: bytes) -> tuple[int, dict[int, tuple[int, int]]]:
    """ApiVersions v0 response body: error_code, [api_key min max] (no trailing bytes)."""
    code, n = struct.unpack_from(">hi", body, 0)
    pos = 6
    keys = {}
    assert 0 <= n < 1000, n
    for _ in range(n):
        k, lo, hi = struct.unpack_from(">hhh", body, pos)
        keys[k] = (lo, hi)
        pos += 6
    assert pos == len(body), f"{len(body) - pos} trailing bytes in ApiVersions v0 response"
    return code, keys


def api_versions_ok(port: int) -> bool:
    """A fresh connection gets a well-formed, error-free ApiVersions v0 answer."""
    s = connect(port)
    try:
        s.sendall(batch_builder.api_versions_request(4242))
        resp = read_response(s)
    finally:
        s.close()
    if resp is None or resp[0] != 4242:
        return False
    code, keys = parse_api_versions_v0(resp[1])
    return code == 0 and 18 in keys
