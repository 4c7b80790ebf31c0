"""Kafka-exact broker behaviours, seen through confluent-kafka and a raw wire client.

Each test asserts what Apache Kafka does for the same request: the error code
a client sees, what metadata shows afterwards, which offset ListOffsets
answers, when Fetch returns.
"""

from __future__ import annotations

import os
import socket
import struct
import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest
from confluent_kafka import (
    Consumer,
    KafkaError,
    KafkaException,
    Producer,
    TopicCollection,
    TopicPartition,
)
from confluent_kafka.admin import AdminClient, NewPartitions, NewTopic, OffsetSpec

# ---- fixtures and helpers ----------------------------------------------------------------


@pytest.fixture(scope="module")
def shared_broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    """One default broker for the tests that need no settings of their own and touch
    only their own topics; the others use `eddy` / `eddy_factory`."""
    from conftest import EddyProcess

    proc = EddyProcess(tmp_path_factory.mktemp("protocol") / "data")
    proc.start()
    yield proc
    proc.kill()


@pytest.fixture
def broker(shared_broker: Any) -> Any:
    if not shared_broker.alive():  # an earlier test took it down; that test has failed
        shared_broker.proc = None
        shared_broker.start()
    return shared_broker


def admin_for(eddy: Any) -> AdminClient:
    return AdminClient({"bootstrap.servers": eddy.bootstrap})


def error_code(future: Any, timeout: float = 10) -> int:
    """The Kafka error code an admin future fails with (0 when it succeeds)."""
    try:
        future.result(timeout)
    except KafkaException as exc:
        return int(exc.args[0].code())
    return 0


def lookup_topic(eddy: Any, topic: str) -> Any:
    """Metadata for one named topic, never auto-creating it (a consumer's request)."""
    c = Consumer({"bootstrap.servers": eddy.bootstrap, "group.id": "md",
                  "allow.auto.create.topics": False})
    try:
        return c.list_topics(topic, timeout=10).topics[topic]
    finally:
        c.close()


def topic_exists(eddy: Any, topic: str) -> bool:
    md = lookup_topic(eddy, topic)
    if md.error is not None:
        # Kafka answers INVALID_TOPIC_EXCEPTION for a name that could never exist
        assert md.error.code() in (KafkaError.UNKNOWN_TOPIC_OR_PART,
                                   KafkaError.TOPIC_EXCEPTION), md.error
        return False
    return True


def partition_count(eddy: Any, topic: str) -> int:
    md = lookup_topic(eddy, topic)
    assert md.error is None, f"{topic}: {md.error}"
    return len(md.partitions)


def create(eddy: Any, name: str, partitions: int = 1, config: dict[str, str] | None = None
           ) -> None:
    admin = admin_for(eddy)  # kept alive until the result is in
    admin.create_topics([NewTopic(name, partitions, 1, config=config or {})])[name].result(10)


def produce(eddy: Any, topic: str, items: list[dict[str, Any]], **conf: Any
            ) -> list[tuple[Any, Any]]:
    """Produce each item (kwargs for Producer.produce); returns (error, msg) per item."""
    p = Producer({"bootstrap.servers": eddy.bootstrap, "linger.ms": 0,
                  "enable.idempotence": False, "message.timeout.ms": 10000, **conf})
    reports: list[tuple[Any, Any] | None] = [None] * len(items)

    def cb(i: int) -> Any:
        def on_delivery(err: Any, msg: Any) -> None:
            reports[i] = (err, msg)
        return on_delivery

    for i, item in enumerate(items):
        p.produce(topic, on_delivery=cb(i), **item)
        p.flush(15)  # one batch per item: a rejected batch must not take others with it
    assert p.flush(15) == 0
    assert all(r is not None for r in reports)
    return reports  # type: ignore[return-value]


def consume(eddy: Any, topic: str, partition: int, count: int, offset: int = 0,
            timeout: float = 10, **conf: Any) -> list[Any]:
    c = Consumer({"bootstrap.servers": eddy.bootstrap, "group.id": "manual",
                  "enable.auto.commit": False, "auto.offset.reset": "error", **conf})
    out: list[Any] = []
    try:
        c.assign([TopicPartition(topic, partition, offset)])
        deadline = time.monotonic() + timeout
        while len(out) < count and time.monotonic() < deadline:
            m = c.poll(0.2)
            if m is None:
                continue
            assert m.error() is None, m.error()
            out.append(m)
    finally:
        c.close()
    return out


def raw_fetch(bootstrap: str, topic: str, partition: int, offset: int, *,
              max_wait_ms: int = 0, min_bytes: int = 1, max_bytes: int = 1 << 20
              ) -> tuple[int, int, bytes | None, float]:
    """One Fetch v4 on a fresh socket: (error code, high watermark, records, seconds taken)."""
    host, port = bootstrap.rsplit(":", 1)
    t = topic.encode()
    body = struct.pack(">iiiib", -1, max_wait_ms, min_bytes, max_bytes, 0)
    body += struct.pack(">i", 1) + struct.pack(">h", len(t)) + t
    body += struct.pack(">i", 1) + struct.pack(">iqi", partition, offset, max_bytes)
    client = b"raw-test"
    header = struct.pack(">hhih", 1, 4, 42, len(client)) + client
    frame = header + body
    with socket.create_connection((host, int(port)), timeout=30) as s:
        start = time.monotonic()
        s.sendall(struct.pack(">i", len(frame)) + frame)
        size = struct.unpack(">i", _recv_exact(s, 4))[0]
        resp = _recv_exact(s, size)
        took = time.monotonic() - start
    corr, _throttle, ntopics = struct.unpack_from(">iii", resp, 0)
    assert corr == 42 and ntopics == 1
    pos = 12
    (tlen,) = struct.unpack_from(">h", resp, pos)
    pos += 2
    assert resp[pos:pos + tlen] == t
    pos += tlen
    (nparts,) = struct.unpack_from(">i", resp, pos)
    assert nparts == 1
    pos += 4
    part, err, hwm, _lso, naborted = struct.unpack_from(">ihqqi", resp, pos)
    assert part == partition
    pos += 26
    if naborted > 0:
        pos += 16 * naborted
    (rlen,) = struct.unpack_from(">i", resp, pos)
    pos += 4
    records = None if rlen < 0 else resp[pos:pos + rlen]
    return err, hwm, records, took


def _string(v: str) -> bytes:
    b = v.encode()
    return struct.pack(">h", len(b)) + b


def _frame(api_key: int, version: int, corr: int, body: bytes) -> bytes:
    msg = struct.pack(">hhi", api_key, version, corr) + _string("raw-test") + body
    return struct.pack(">i", len(msg)) + msg


def record_batch(values: list[bytes], timestamp_ms: int = 0) -> bytes:
    """One uncompressed v2 RecordBatch (kafka-python's builder: independent of Eddy)."""
    from kafka.record.default_records import DefaultRecordBatchBuilder

    b = DefaultRecordBatchBuilder(magic=2, compression_type=0, is_transactional=False,
                                  producer_id=-1, producer_epoch=-1, base_sequence=-1,
                                  batch_size=1 << 20)
    ts = timestamp_ms or int(time.time() * 1000)
    for i, v in enumerate(values):
        b.append(i, timestamp=ts, key=None, value=v, headers=[])
    return bytes(b.build())


def produce_request(topic: str, partition: int, batch: bytes, acks: int, corr: int) -> bytes:
    """Produce v3: transactional_id, acks, timeout, [topic [partition records]]."""
    body = struct.pack(">hhi", -1, acks, 10000)
    body += struct.pack(">i", 1) + _string(topic)
    body += struct.pack(">i", 1) + struct.pack(">ii", partition, len(batch)) + batch
    return _frame(0, 3, corr, body)


def _recv_exact(s: socket.socket, n: int) -> bytes:
    buf = b""
    while len(buf) < n:
        chunk = s.recv(n - len(buf))
        assert chunk, "connection closed"
        buf += chunk
    return buf


# ---- CreateTopics --------------------------------------------------------------------------


def test_create_existing_topic_is_topic_already_exists(broker) -> None:  # type: ignore[no-untyped-def]
    admin = admin_for(broker)
    create(broker, "dup", 2)
    fut = admin.create_topics([NewTopic("dup", 5, 1)])["dup"]
    assert error_code(fut) == KafkaError.TOPIC_ALREADY_EXISTS
    assert partition_count(broker, "dup") == 2  # untouched


@pytest.mark.parametrize("name", ["bad/name", "has space", "..", "x" * 250, "caf\u00e9"])
def test_create_bad_topic_name_is_invalid_topic(broker, name: str) -> None:  # type: ignore[no-untyped-def]
    admin = admin_for(broker)
    fut = admin.create_topics([NewTopic(name, 1, 1)])[name]
    assert error_code(fut) == KafkaError.TOPIC_EXCEPTION
    assert not topic_exists(broker, name)


def test_create_with_replication_factor_above_brokers(broker) -> None:  # type: ignore[no-untyped-def]
    admin = admin_for(broker)
    fut = admin.create_topics([NewTopic("rf3", 1, 3)])["rf3"]
    assert error_code(fut) == KafkaError.INVALID_REPLICATION_FACTOR
    assert not topic_exists(broker, "rf3")


@pytest.mark.parametrize("config", [
    {"no.such.config": "1"},
    {"retention.ms": "abc"},
    {"cleanup.policy": "shred"},
    {"segment.bytes": "1"},
])
def test_create_with_bad_config_is_invalid_config(broker, config: dict[str, str]) -> None:  # type: ignore[no-untyped-def]
    admin = admin_for(broker)
    name = "cfg-" + "-".join(config).replace(".", "-")
    fut = admin.create_topics([NewTopic(name, 1, 1, config=config)])[name]
    assert error_code(fut) == KafkaError.INVALID_CONFIG
    assert not topic_exists(broker, name)


def test_create_validate_only_creates_nothing(broker) -> None:  # type: ignore[no-untyped-def]
    admin = admin_for(broker)
    futs = admin.create_topics([NewTopic("dry", 4, 1, config={"retention.ms": "1000"})],
                               validate_only=True)
    assert error_code(futs["dry"]) == 0
    assert not topic_exists(broker, "dry")
    # validation still runs: a bad config is reported, an existing name too
    futs = admin.create_topics([NewTopic("dry", 1, 1, config={"retention.ms": "x"})],
                               validate_only=True)
    assert error_code(futs["dry"]) == KafkaError.INVALID_CONFIG
    create(broker, "real", 1)
    futs = admin.create_topics([NewTopic("real", 1, 1)], validate_only=True)
    assert error_code(futs["real"]) == KafkaError.TOPIC_ALREADY_EXISTS
    # and the real create afterwards gets exactly what was asked
    create(broker, "dry", 4)
    assert partition_count(broker, "dry") == 4


def test_create_several_topics_answers_each(broker) -> None:  # type: ignore[no-untyped-def]
    admin = admin_for(broker)
    create(broker, "exists", 1)
    futs = admin.create_topics([NewTopic("fresh", 2, 1), NewTopic("exists", 1, 1),
                                NewTopic("bad/one", 1, 1)])
    assert error_code(futs["fresh"]) == 0
    assert error_code(futs["exists"]) == KafkaError.TOPIC_ALREADY_EXISTS
    assert error_code(futs["bad/one"]) == KafkaError.TOPIC_EXCEPTION
    assert partition_count(broker, "fresh") == 2


# ---- DeleteTopics --------------------------------------------------------------------------


def test_delete_topic_then_recreate_empty(broker) -> None:  # type: ignore[no-untyped-def]
    admin = admin_for(broker)
    create(broker, "doomed", 2)
    reports = produce(broker, "doomed", [{"value": b"old-%d" % i, "partition": i % 2}
                                         for i in range(6)])
    assert all(err is None for err, _ in reports)
    old_id = admin.describe_topics(TopicCollection(["doomed"]))["doomed"].result(10).topic_id

    assert error_code(admin.delete_topics(["doomed"])["doomed"]) == 0
    assert not topic_exists(broker, "doomed")

    create(broker, "doomed", 3)
    assert partition_count(broker, "doomed") == 3
    new_id = admin.describe_topics(TopicCollection(["doomed"]))["doomed"].result(10).topic_id
    assert str(new_id) != str(old_id)
    c = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": "wm"})
    try:
        for p in range(3):
            assert c.get_watermark_offsets(TopicPartition("doomed", p), timeout=10) == (0, 0)
    finally:
        c.close()
    # and it takes new records from offset 0
    (err, msg), = produce(broker, "doomed", [{"value": b"new", "partition": 1}])
    assert err is None and msg.offset() == 0
    assert [m.value() for m in consume(broker, "doomed", 1, 1)] == [b"new"]


def test_delete_unknown_topic_is_unknown_topic(broker) -> None:  # type: ignore[no-untyped-def]
    admin = admin_for(broker)
    fut = admin.delete_topics(["never-was"])["never-was"]
    assert error_code(fut) == KafkaError.UNKNOWN_TOPIC_OR_PART


# ---- CreatePartitions ----------------------------------------------------------------------


def test_create_partitions_grows_topic_and_new_partition_works(broker) -> None:  # type: ignore[no-untyped-def]
    admin = admin_for(broker)
    create(broker, "grow", 1)
    produce(broker, "grow", [{"value": b"p0-before", "partition": 0}])
    assert error_code(admin.create_partitions([NewPartitions("grow", 3)])["grow"]) == 0
    assert partition_count(broker, "grow") == 3
    reports = produce(broker, "grow", [{"value": b"p2-first", "partition": 2},
                                       {"value": b"p0-after", "partition": 0}])
    assert [(err, m.partition(), m.offset()) for err, m in reports] == [(None, 2, 0),
                                                                         (None, 0, 1)]
    assert [m.value() for m in consume(broker, "grow", 2, 1)] == [b"p2-first"]
    assert [m.value() for m in consume(broker, "grow", 0, 2)] == [b"p0-before", b"p0-after"]


def test_create_partitions_validate_only_changes_nothing(broker) -> None:  # type: ignore[no-untyped-def]
    admin = admin_for(broker)
    create(broker, "maybe", 1)
    fut = admin.create_partitions([NewPartitions("maybe", 4)], validate_only=True)["maybe"]
    assert error_code(fut) == 0
    assert partition_count(broker, "maybe") == 1


@pytest.mark.parametrize("new_total", [1, 2])
def test_create_partitions_cannot_shrink_or_stay(broker, new_total: int) -> None:  # type: ignore[no-untyped-def]
    admin = admin_for(broker)
    name = f"fixed-{new_total}"
    create(broker, name, 2)
    fut = admin.create_partitions([NewPartitions(name, new_total)])[name]
    assert error_code(fut) == KafkaError.INVALID_PARTITIONS
    assert partition_count(broker, name) == 2


def test_create_partitions_unknown_topic(broker) -> None:  # type: ignore[no-untyped-def]
    admin = admin_for(broker)
    futs = admin.create_partitions([NewPartitions("ghost", 3), NewPartitions("ghost2", 2)])
    assert error_code(futs["ghost"]) == KafkaError.UNKNOWN_TOPIC_OR_PART
    assert error_code(futs["ghost2"]) == KafkaError.UNKNOWN_TOPIC_OR_PART
    assert not topic_exists(broker, "ghost")


# ---- DescribeCluster -----------------------------------------------------------------------


def test_describe_cluster_returns_node_and_cluster_id(broker) -> None:  # type: ignore[no-untyped-def]
    admin = admin_for(broker)
    res = admin.describe_cluster(request_timeout=10).result(10)
    create(broker, "any", 1)
    c = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": "dc"})
    try:
        md = c.list_topics("any", timeout=10)
    finally:
        c.close()
    assert res.cluster_id and res.cluster_id == md.cluster_id
    assert len(res.nodes) == 1
    node = res.nodes[0]
    assert (node.host, node.port) == ("127.0.0.1", broker.port)
    assert list(md.brokers) == [node.id] and md.controller_id == node.id
    assert res.controller is not None and res.controller.id == node.id


def test_metadata_for_all_topics_lists_every_topic(broker) -> None:  # type: ignore[no-untyped-def]
    """librdkafka's "all topics" Metadata (v9+) carries 3 stray bytes after the body
    (librdkafka issue #5049: a 4-byte array-count placeholder where a 1-byte varint
    belongs). Apache Kafka never checks for bytes left after a request body, so the
    request works there; it must work here too."""
    create(broker, "listed-a", 1)
    create(broker, "listed-b", 3)
    md = admin_for(broker).list_topics(timeout=10)
    assert {"listed-a", "listed-b"} <= set(md.topics)
    assert len(md.topics["listed-a"].partitions) == 1
    assert len(md.topics["listed-b"].partitions) == 3
    assert [b.port for b in md.brokers.values()] == [broker.port]
    assert md.cluster_id


# ---- auto-creation -------------------------------------------------------------------------


def test_auto_create_uses_num_partitions(eddy_factory) -> None:  # type: ignore[no-untyped-def]
    eddy = eddy_factory("--set", "num.partitions=3")
    (err, _msg), = produce(eddy, "born-on-produce", [{"value": b"hello"}])
    assert err is None
    assert partition_count(eddy, "born-on-produce") == 3
    # CreateTopics without a partition count or replication factor takes the defaults
    admin = admin_for(eddy)
    admin.create_topics([NewTopic("defaulted", -1, -1)])["defaulted"].result(10)
    assert partition_count(eddy, "defaulted") == 3
    # a Metadata request that allows auto-creation makes one the same way
    p = Producer({"bootstrap.servers": eddy.bootstrap, "allow.auto.create.topics": True})
    md = p.list_topics("born-on-metadata", timeout=10)
    first = md.topics["born-on-metadata"].error
    # Kafka may answer the creating request with LEADER_NOT_AVAILABLE; later ones see it
    assert first is None or first.code() == KafkaError.LEADER_NOT_AVAILABLE, first
    assert partition_count(eddy, "born-on-metadata") == 3


def test_auto_create_disabled_creates_nothing(eddy_factory) -> None:  # type: ignore[no-untyped-def]
    eddy = eddy_factory("--set", "auto.create.topics.enable=false")
    p = Producer({"bootstrap.servers": eddy.bootstrap, "allow.auto.create.topics": True})
    md = p.list_topics("not-made", timeout=10)
    err = md.topics["not-made"].error
    assert err is not None and err.code() == KafkaError.UNKNOWN_TOPIC_OR_PART
    reports = produce(eddy, "not-made", [{"value": b"x"}],
                      **{"topic.metadata.propagation.max.ms": 500, "message.timeout.ms": 3000})
    (err, _), = reports
    assert err is not None
    assert err.code() in (KafkaError._UNKNOWN_TOPIC, KafkaError.UNKNOWN_TOPIC_OR_PART,
                          KafkaError._MSG_TIMED_OUT)
    assert not topic_exists(eddy, "not-made")


# ---- ListOffsets ---------------------------------------------------------------------------


def test_watermarks_and_offsets_for_times(broker) -> None:  # type: ignore[no-untyped-def]
    create(broker, "times", 2)
    base = int(time.time() * 1000) - 3_600_000  # an hour ago: inside the allowed range
    # one batch per record; timestamps not monotonic in offset order
    deltas = [0, 100, 50, 200, 200, 300]
    reports = produce(broker, "times", [{"value": b"r%d" % i, "partition": 0,
                                         "timestamp": base + d}
                                        for i, d in enumerate(deltas)])
    assert [m.offset() for _, m in reports] == list(range(6))
    c = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": "lo"})
    try:
        assert c.get_watermark_offsets(TopicPartition("times", 0), timeout=10) == (0, 6)
        assert c.get_watermark_offsets(TopicPartition("times", 1), timeout=10) == (0, 0)

        def lookup(partition: int, ts: int) -> int:
            (tp,) = c.offsets_for_times([TopicPartition("times", partition, ts)], timeout=10)
            assert tp.error is None
            return int(tp.offset)

        # the earliest offset whose timestamp is at or after the target
        assert lookup(0, base - 1000) == 0
        assert lookup(0, base) == 0
        assert lookup(0, base + 1) == 1       # 100 is the first >= 1 (offset 2's 50 is later)
        assert lookup(0, base + 50) == 1
        assert lookup(0, base + 101) == 3
        assert lookup(0, base + 200) == 3
        assert lookup(0, base + 250) == 5
        assert lookup(0, base + 300) == 5
        # none at or after: -1 (librdkafka's OFFSET_END)
        assert lookup(0, base + 301) == -1
        assert lookup(1, base) == -1
    finally:
        c.close()


def test_list_offsets_earliest_latest_max_timestamp(broker) -> None:  # type: ignore[no-untyped-def]
    create(broker, "specs", 1)
    base = int(time.time() * 1000) - 60_000
    deltas = [10, 40, 20, 30]
    produce(broker, "specs", [{"value": b"v", "partition": 0, "timestamp": base + d}
                              for d in deltas])
    admin = admin_for(broker)
    tp = TopicPartition("specs", 0)

    def one(spec: Any) -> Any:
        return admin.list_offsets({tp: spec}, request_timeout=10)[tp].result(10)

    assert one(OffsetSpec.earliest()).offset == 0
    assert one(OffsetSpec.latest()).offset == 4
    mx = one(OffsetSpec.max_timestamp())
    assert (mx.offset, mx.timestamp) == (1, base + 40)
    at = one(OffsetSpec.for_timestamp(base + 25))
    assert (at.offset, at.timestamp) == (1, base + 40)
    assert one(OffsetSpec.for_timestamp(base + 41)).offset == -1


# ---- message size limits -------------------------------------------------------------------


def test_batch_larger_than_message_max_bytes_is_rejected(eddy_factory) -> None:  # type: ignore[no-untyped-def]
    eddy = eddy_factory("--set", "message.max.bytes=10000")
    create(eddy, "limits", 1)
    reports = produce(eddy, "limits", [
        {"value": os.urandom(500), "partition": 0},
        {"value": os.urandom(20000), "partition": 0},   # incompressible, one batch
        {"value": os.urandom(9000), "partition": 0},
    ], **{"compression.type": "none"})
    errs = [None if err is None else err.code() for err, _ in reports]
    assert errs == [None, KafkaError.MSG_SIZE_TOO_LARGE, None]
    assert [m.offset() for err, m in reports if err is None] == [0, 1]
    got = consume(eddy, "limits", 0, 2)
    assert [len(m.value()) for m in got] == [500, 9000]


def test_topic_max_message_bytes_overrides_broker(broker) -> None:  # type: ignore[no-untyped-def]
    create(broker, "small-topic", 1, config={"max.message.bytes": "4000"})
    reports = produce(broker, "small-topic", [
        {"value": os.urandom(8000), "partition": 0},
        {"value": os.urandom(1000), "partition": 0},
    ], **{"compression.type": "none"})
    errs = [None if err is None else err.code() for err, _ in reports]
    assert errs == [KafkaError.MSG_SIZE_TOO_LARGE, None]
    assert reports[1][1].offset() == 0


# ---- Fetch ---------------------------------------------------------------------------------


def test_long_poll_consumer_gets_later_record_quickly(broker) -> None:  # type: ignore[no-untyped-def]
    create(broker, "waiting", 1)
    c = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": "lp",
                  "enable.auto.commit": False, "fetch.wait.max.ms": 10000})
    got: list[tuple[bytes, float]] = []
    try:
        c.assign([TopicPartition("waiting", 0, 0)])
        # let the consumer settle into a waiting Fetch at the end of the empty partition
        settle = time.monotonic() + 1.5
        while time.monotonic() < settle:
            m = c.poll(0.1)
            assert m is None or m.error() is None
        p = Producer({"bootstrap.servers": broker.bootstrap, "linger.ms": 0})
        p.produce("waiting", value=b"late", partition=0)
        assert p.flush(10) == 0
        sent = time.monotonic()
        deadline = sent + 15
        while not got and time.monotonic() < deadline:
            m = c.poll(0.05)
            if m is not None and m.error() is None:
                got.append((m.value(), time.monotonic() - sent))
    finally:
        c.close()
    assert got, "the record never arrived"
    value, latency = got[0]
    assert value == b"late"
    # without a wake-up the Fetch would sit out its 10 s max wait
    assert latency < 3.0, f"record arrived {latency:.2f}s after it was produced"


def test_raw_fetch_waits_for_min_bytes_then_answers(broker) -> None:  # type: ignore[no-untyped-def]
    create(broker, "raw", 1)
    # empty partition: the broker holds the Fetch for max_wait, then answers empty
    err, hwm, records, took = raw_fetch(broker.bootstrap, "raw", 0, 0, max_wait_ms=800)
    assert (err, hwm) == (0, 0)
    assert not records
    assert 0.6 <= took < 5, took
    # a Fetch held open is answered as soon as a record lands
    result: list[Any] = []
    t = threading.Thread(target=lambda: result.append(
        raw_fetch(broker.bootstrap, "raw", 0, 0, max_wait_ms=10000)))
    t.start()
    time.sleep(0.5)  # give the Fetch time to be parked (not an assertion)
    produce(broker, "raw", [{"value": b"wake", "partition": 0}])
    t.join(15)
    assert not t.is_alive()
    err, hwm, records, took = result[0]
    assert (err, hwm) == (0, 1)
    assert records and b"wake" in records
    assert took < 5, took
    # data already there: no waiting at all
    err, hwm, records, took = raw_fetch(broker.bootstrap, "raw", 0, 0, max_wait_ms=10000)
    assert (err, hwm) == (0, 1) and records and took < 2


def test_raw_fetch_past_end_is_offset_out_of_range(broker) -> None:  # type: ignore[no-untyped-def]
    create(broker, "edge", 1)
    produce(broker, "edge", [{"value": b"v%d" % i, "partition": 0} for i in range(3)])
    # at the end: no error, nothing to return
    err, hwm, records, _ = raw_fetch(broker.bootstrap, "edge", 0, 3)
    assert (err, hwm) == (0, 3) and not records
    # past it: OFFSET_OUT_OF_RANGE, with empty (not null) records as Kafka writes them:
    # librdkafka treats a null record set as a malformed response
    err, _hwm, records, _ = raw_fetch(broker.bootstrap, "edge", 0, 4)
    assert err == KafkaError.OFFSET_OUT_OF_RANGE
    assert records == b""
    # and an unknown partition
    err, _hwm, records, _ = raw_fetch(broker.bootstrap, "edge", 7, 0)
    assert err == KafkaError.UNKNOWN_TOPIC_OR_PART
    assert records == b""


def test_fetch_error_is_answered_without_waiting(broker) -> None:  # type: ignore[no-untyped-def]
    """Kafka answers a Fetch at once when a partition has an error (errorReadingData in
    ReplicaManager.fetchMessages); it does not park it for max_wait."""
    create(broker, "edge-wait", 1)
    produce(broker, "edge-wait", [{"value": b"v", "partition": 0}])
    err, _hwm, _records, took = raw_fetch(broker.bootstrap, "edge-wait", 0, 1000,
                                          max_wait_ms=3000)
    assert err == KafkaError.OFFSET_OUT_OF_RANGE
    assert took < 1.5, f"an out-of-range Fetch was held {took:.2f}s"
    err, _hwm, _records, took = raw_fetch(broker.bootstrap, "edge-wait", 9, 0,
                                          max_wait_ms=3000)
    assert err == KafkaError.UNKNOWN_TOPIC_OR_PART
    assert took < 1.5, f"a Fetch for an unknown partition was held {took:.2f}s"


def test_fetch_inside_a_batch_returns_the_whole_batch(broker) -> None:  # type: ignore[no-untyped-def]
    create(broker, "inside", 1)
    p = Producer({"bootstrap.servers": broker.bootstrap, "linger.ms": 50})
    for i in range(10):
        p.produce("inside", value=b"r%d" % i, partition=0)
    assert p.flush(10) == 0
    err, hwm, records, _ = raw_fetch(broker.bootstrap, "inside", 0, 5)
    assert (err, hwm) == (0, 10)
    assert records
    (base_offset,) = struct.unpack_from(">q", records, 0)
    assert base_offset == 0, "the batch holding offset 5 starts at 0 and comes whole"
    got = consume(broker, "inside", 0, 5, offset=5)
    assert [(m.offset(), m.value()) for m in got] == [(i, b"r%d" % i) for i in range(5, 10)]


def test_fetch_returns_first_batch_even_above_max_bytes(broker) -> None:  # type: ignore[no-untyped-def]
    """KIP-74: the first batch comes back whole even when larger than max_bytes."""
    create(broker, "bigfirst", 1)
    produce(broker, "bigfirst", [{"value": os.urandom(5000), "partition": 0},
                                 {"value": os.urandom(5000), "partition": 0}],
            **{"compression.type": "none"})
    err, hwm, records, _ = raw_fetch(broker.bootstrap, "bigfirst", 0, 0, max_bytes=100)
    assert (err, hwm) == (0, 2)
    assert records is not None and len(records) >= 5000
    (base_offset, length) = struct.unpack_from(">qi", records, 0)
    assert base_offset == 0 and length + 12 <= len(records) < 2 * 5000


def test_produce_acks_zero_gets_no_response(broker) -> None:  # type: ignore[no-untyped-def]
    """Kafka sends nothing back for acks=0; the next response on the connection is the
    next request's. The records are appended all the same."""
    create(broker, "fire", 1)
    host, port = broker.bootstrap.rsplit(":", 1)
    with socket.create_connection((host, int(port)), timeout=10) as s:
        s.sendall(produce_request("fire", 0, record_batch([b"a0", b"a1"]), acks=0, corr=7))
        s.sendall(_frame(18, 0, 8, b""))  # ApiVersions v0
        size = struct.unpack(">i", _recv_exact(s, 4))[0]
        (corr,) = struct.unpack_from(">i", _recv_exact(s, size), 0)
        assert corr == 8, "got a response to the acks=0 Produce"
        # and an acks=1 Produce on the same connection is answered, after the first two
        s.sendall(produce_request("fire", 0, record_batch([b"b0"]), acks=1, corr=9))
        size = struct.unpack(">i", _recv_exact(s, 4))[0]
        resp = _recv_exact(s, size)
    corr, ntopics = struct.unpack_from(">ii", resp, 0)
    assert (corr, ntopics) == (9, 1)
    pos = 8 + 2 + len("fire") + 4
    part, err, base = struct.unpack_from(">ihq", resp, pos)
    assert (part, err, base) == (0, 0, 2)
    # a librdkafka producer with acks=0 too
    p = Producer({"bootstrap.servers": broker.bootstrap, "acks": 0, "linger.ms": 5})
    for i in range(5):
        p.produce("fire", value=b"c%d" % i, partition=0)
    assert p.flush(10) == 0
    got = consume(broker, "fire", 0, 8)
    assert [m.value() for m in got] == [b"a0", b"a1", b"b0"] + [b"c%d" % i for i in range(5)]
    assert [m.offset() for m in got] == list(range(8))


def test_consumer_past_end_with_reset_error_surfaces_error(broker) -> None:  # type: ignore[no-untyped-def]
    create(broker, "past", 1)
    produce(broker, "past", [{"value": b"v%d" % i, "partition": 0} for i in range(3)])
    c = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": "past",
                  "enable.auto.commit": False, "auto.offset.reset": "error"})
    errors: list[Any] = []
    try:
        c.assign([TopicPartition("past", 0, 50)])
        deadline = time.monotonic() + 6
        while not errors and time.monotonic() < deadline:
            m = c.poll(0.2)
            if m is not None:
                assert m.error() is not None, "got a record from past the end"
                errors.append(m.error())
    finally:
        c.close()
    assert errors, "no error surfaced"
    assert errors[0].code() == KafkaError._AUTO_OFFSET_RESET
    assert "out of range" in errors[0].str().lower()


def test_consumer_past_end_with_reset_earliest_rereads(broker) -> None:  # type: ignore[no-untyped-def]
    create(broker, "reset", 1)
    produce(broker, "reset", [{"value": b"v%d" % i, "partition": 0} for i in range(3)])
    got = consume(broker, "reset", 0, 3, offset=50, timeout=6,
                  **{"auto.offset.reset": "earliest"})
    assert [(m.offset(), m.value()) for m in got] == [(0, b"v0"), (1, b"v1"), (2, b"v2")]


# ---- restarts ------------------------------------------------------------------------------


def _snapshot(eddy: Any, topic: str, partitions: int, per_partition: int
              ) -> tuple[str, str, list[list[tuple[int, bytes | None, bytes | None]]]]:
    admin = admin_for(eddy)
    desc = admin.describe_topics(TopicCollection([topic]))[topic].result(10)
    assert len(desc.partitions) == partitions
    cluster = admin.describe_cluster(request_timeout=10).result(10).cluster_id
    records = [[(m.offset(), m.key(), m.value())
                for m in consume(eddy, topic, p, per_partition)] for p in range(partitions)]
    return str(desc.topic_id), cluster, records


def test_topics_survive_restart_with_same_id_and_records(eddy) -> None:  # type: ignore[no-untyped-def]
    create(eddy, "durable", 2, config={"retention.ms": "86400000"})
    items = [{"key": b"k%d" % i, "value": b"v%d" % i, "partition": i % 2} for i in range(8)]
    produce(eddy, "durable", items)
    before = _snapshot(eddy, "durable", 2, 4)
    assert all(len(r) == 4 for r in before[2])

    eddy.restart()
    after = _snapshot(eddy, "durable", 2, 4)
    assert after == before
    # the log goes on where it stopped
    (err, msg), = produce(eddy, "durable", [{"value": b"after", "partition": 1}])
    assert err is None and msg.offset() == 4


def test_acknowledged_records_survive_kill(eddy) -> None:  # type: ignore[no-untyped-def]
    create(eddy, "crashy", 1)
    reports = produce(eddy, "crashy", [{"value": b"c%d" % i, "partition": 0}
                                       for i in range(5)], acks="all")
    assert [m.offset() for _, m in reports] == list(range(5))
    before = _snapshot(eddy, "crashy", 1, 5)
    eddy.kill()
    eddy.start()
    after = _snapshot(eddy, "crashy", 1, 5)
    assert after == before
