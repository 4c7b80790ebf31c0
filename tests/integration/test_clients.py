"""Real clients against a real broker: confluent-kafka, kafka-python, aiokafka and kcat.

Every library produces keyed, keyless, null-value and headered records to a
3-partition topic with every compression codec and reads them back, per
partition, in order, with offsets contiguous from 0. Records written by one
library are read by another, and kcat (Debian's, built on an older librdkafka)
lists, consumes and produces.

Consumer groups are not implemented yet, so every consumer assigns its
partitions by hand and never commits.
"""

from __future__ import annotations

import asyncio
import json
import subprocess
import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

PARTITIONS = 3
COMPRESSIONS = ["none", "gzip", "snappy", "lz4", "zstd"]
CLIENTS = ["confluent", "kafka-python", "aiokafka"]

# (partition, key, value, headers); headers are (str, bytes) pairs, order kept.
Record = tuple[int, bytes | None, bytes | None, list[tuple[str, bytes]]]
# what a consumer saw: (partition, offset, key, value, headers)
Seen = tuple[int, int, bytes | None, bytes | None, list[tuple[str, bytes]]]


@pytest.fixture(scope="module")
def shared_broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    """One broker for the whole module (every test uses its own topics): starting a
    broker per test would cost more than the tests themselves."""
    from conftest import EddyProcess

    proc = EddyProcess(tmp_path_factory.mktemp("clients") / "data")
    proc.start()
    yield proc
    proc.kill()


@pytest.fixture
def broker(shared_broker: Any) -> Any:
    if not shared_broker.alive():  # an earlier test took it down; that test has failed
        shared_broker.proc = None
        shared_broker.start()
    return shared_broker


def make_records(tag: str) -> list[Record]:
    """Four kinds of record per partition, plus a compressible one to make codecs work."""
    out: list[Record] = []
    for p in range(PARTITIONS):
        out += [
            (p, f"key-{tag}-{p}".encode(), f"keyed value {tag} {p}".encode(), []),
            (p, None, f"keyless value {tag} {p}".encode(), []),
            (p, f"tombstone-{tag}-{p}".encode(), None, []),
            (p, f"hkey-{tag}-{p}".encode(), f"headered {tag} {p}".encode(),
             [("trace", f"t-{p}".encode()), ("empty", b""), ("trace", b"repeated")]),
            (p, b"bulk", (f"compressible {tag} " * 200).encode(), [("n", b"1")]),
        ]
    return out


def create_topic(bootstrap: str, name: str, partitions: int = PARTITIONS) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(name, partitions, 1)])[name].result(10)


# ---- producers: each returns the (partition, offset) of every record, in send order --------


def produce_confluent(bootstrap: str, topic: str, records: list[Record], compression: str
                      ) -> list[tuple[int, int]]:
    p = Producer({"bootstrap.servers": bootstrap, "compression.type": compression,
                  "linger.ms": 20, "enable.idempotence": False, "acks": "all"})
    reports: dict[int, tuple[int, int]] = {}
    errors: list[Any] = []

    def on_delivery(i: int) -> Callable[[Any, Any], None]:
        def cb(err: Any, msg: Any) -> None:
            if err is not None:
                errors.append(err)
            else:
                reports[i] = (msg.partition(), msg.offset())
        return cb

    for i, (part, key, value, headers) in enumerate(records):
        p.produce(topic, key=key, value=value, partition=part, headers=headers or None,
                  on_delivery=on_delivery(i))
    assert p.flush(15) == 0, "confluent-kafka producer did not deliver everything"
    assert errors == []
    return [reports[i] for i in range(len(records))]


def need_kafka_python_codecs() -> None:
    """kafka-python compresses and decompresses with optional packages of its own."""
    import kafka.codec

    missing = [pkg for pkg, ok in (("python-snappy", kafka.codec.has_snappy()),
                                   ("lz4", kafka.codec.has_lz4()),
                                   ("zstandard", kafka.codec.has_zstd())) if not ok]
    assert not missing, f"kafka-python needs {', '.join(missing)} installed (test extra)"


def produce_kafka_python(bootstrap: str, topic: str, records: list[Record], compression: str
                         ) -> list[tuple[int, int]]:
    from kafka import KafkaProducer

    need_kafka_python_codecs()

    p = KafkaProducer(bootstrap_servers=bootstrap,
                      compression_type=None if compression == "none" else compression,
                      enable_idempotence=False, acks="all", linger_ms=20,
                      request_timeout_ms=10000)
    try:
        futures = [p.send(topic, key=key, value=value, partition=part, headers=headers)
                   for part, key, value, headers in records]
        p.flush(15)
        metas = [f.get(timeout=15) for f in futures]
    finally:
        p.close(5)
    return [(m.partition, m.offset) for m in metas]


def produce_aiokafka(bootstrap: str, topic: str, records: list[Record], compression: str
                     ) -> list[tuple[int, int]]:
    from aiokafka import AIOKafkaProducer

    async def run() -> list[tuple[int, int]]:
        p = AIOKafkaProducer(bootstrap_servers=bootstrap,
                             compression_type=None if compression == "none" else compression,
                             enable_idempotence=False, acks="all", linger_ms=20,
                             request_timeout_ms=10000)
        await p.start()
        try:
            futures = [await p.send(topic, key=key, value=value, partition=part,
                                    headers=headers)
                       for part, key, value, headers in records]
            metas = await asyncio.wait_for(asyncio.gather(*futures), 15)
        finally:
            await p.stop()
        return [(m.partition, m.offset) for m in metas]

    return asyncio.run(run())


# ---- consumers: read `count` records from partitions 0..n-1 from offset 0 ------------------


def consume_confluent(bootstrap: str, topic: str, count: int, partitions: int = PARTITIONS,
                      timeout: float = 15.0) -> list[Seen]:
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": "unused-manual-assign",
                  "enable.auto.commit": False, "auto.offset.reset": "error"})
    seen: list[Seen] = []
    try:
        c.assign([TopicPartition(topic, i, 0) for i in range(partitions)])
        deadline = time.monotonic() + timeout
        while len(seen) < count and time.monotonic() < deadline:
            m = c.poll(0.2)
            if m is None:
                continue
            assert m.error() is None, f"consumer error: {m.error()}"
            seen.append((m.partition(), m.offset(), m.key(), m.value(),
                         list(m.headers() or [])))
    finally:
        c.close()
    return seen


def consume_kafka_python(bootstrap: str, topic: str, count: int, partitions: int = PARTITIONS,
                         timeout: float = 15.0) -> list[Seen]:
    from kafka import KafkaConsumer
    from kafka import TopicPartition as KTP

    need_kafka_python_codecs()

    c = KafkaConsumer(bootstrap_servers=bootstrap, group_id=None, enable_auto_commit=False,
                      auto_offset_reset="earliest", request_timeout_ms=10000)
    seen: list[Seen] = []
    try:
        tps = [KTP(topic, i) for i in range(partitions)]
        c.assign(tps)
        c.seek_to_beginning(*tps)
        deadline = time.monotonic() + timeout
        while len(seen) < count and time.monotonic() < deadline:
            for recs in c.poll(timeout_ms=200).values():
                for r in recs:
                    seen.append((r.partition, r.offset, r.key, r.value,
                                 [(k, bytes(v)) for k, v in (r.headers or [])]))
    finally:
        c.close()
    return seen


def consume_aiokafka(bootstrap: str, topic: str, count: int, partitions: int = PARTITIONS,
                     timeout: float = 15.0) -> list[Seen]:
    from aiokafka import AIOKafkaConsumer
    from aiokafka import TopicPartition as ATP

    async def run() -> list[Seen]:
        c = AIOKafkaConsumer(bootstrap_servers=bootstrap, group_id=None,
                             enable_auto_commit=False, auto_offset_reset="earliest",
                             request_timeout_ms=10000)
        await c.start()
        seen: list[Seen] = []
        try:
            tps = [ATP(topic, i) for i in range(partitions)]
            c.assign(tps)
            await c.seek_to_beginning(*tps)
            deadline = time.monotonic() + timeout
            while len(seen) < count and time.monotonic() < deadline:
                batches = await c.getmany(timeout_ms=200)
                for recs in batches.values():
                    for r in recs:
                        seen.append((r.partition, r.offset, r.key, r.value,
                                     [(k, bytes(v)) for k, v in (r.headers or ())]))
        finally:
            await c.stop()
        return seen

    return asyncio.run(run())


PRODUCERS = {"confluent": produce_confluent, "kafka-python": produce_kafka_python,
             "aiokafka": produce_aiokafka}
CONSUMERS = {"confluent": consume_confluent, "kafka-python": consume_kafka_python,
             "aiokafka": consume_aiokafka}


def check_round_trip(records: list[Record], acks: list[tuple[int, int]], seen: list[Seen]
                     ) -> None:
    """Per partition: the records in send order at offsets 0, 1, 2, ... exactly once."""
    for p in range(PARTITIONS):
        sent = [(key, value, headers) for part, key, value, headers in records if part == p]
        acked = [off for (part, off) in acks if part == p]
        got = [s for s in seen if s[0] == p]
        assert acked == list(range(len(sent))), f"partition {p}: producer acked offsets {acked}"
        assert [s[1] for s in got] == list(range(len(sent))), (
            f"partition {p}: consumed offsets {[s[1] for s in got]}"
        )
        assert [(s[2], s[3], s[4]) for s in got] == sent, f"partition {p}: records differ"
    assert len(seen) == len(records)


@pytest.mark.parametrize("compression", COMPRESSIONS)
@pytest.mark.parametrize("client", CLIENTS)
def test_same_client_round_trip(broker, client: str, compression: str) -> None:  # type: ignore[no-untyped-def]
    topic = f"rt-{client}-{compression}"
    create_topic(broker.bootstrap, topic)
    records = make_records(f"{client}/{compression}")
    acks = PRODUCERS[client](broker.bootstrap, topic, records, compression)
    seen = CONSUMERS[client](broker.bootstrap, topic, len(records))
    check_round_trip(records, acks, seen)


CROSS = [
    ("confluent", "kafka-python", "zstd"),
    ("confluent", "aiokafka", "snappy"),
    ("kafka-python", "confluent", "lz4"),
    ("kafka-python", "aiokafka", "gzip"),
    ("aiokafka", "confluent", "gzip"),
    ("aiokafka", "kafka-python", "lz4"),
]


@pytest.mark.parametrize(("producer", "consumer", "compression"), CROSS)
def test_cross_client(broker, producer: str, consumer: str, compression: str) -> None:  # type: ignore[no-untyped-def]
    topic = f"x-{producer}-{consumer}"
    create_topic(broker.bootstrap, topic)
    records = make_records(f"{producer}->{consumer}")
    acks = PRODUCERS[producer](broker.bootstrap, topic, records, compression)
    seen = CONSUMERS[consumer](broker.bootstrap, topic, len(records))
    check_round_trip(records, acks, seen)


def test_two_producers_interleave_contiguously(broker) -> None:  # type: ignore[no-untyped-def]
    """Batches from different libraries append to one partition with contiguous offsets."""
    topic = "interleave"
    create_topic(broker.bootstrap, topic, 1)
    total = 0
    expected: list[bytes | None] = []
    for i, client in enumerate(["confluent", "kafka-python", "aiokafka", "confluent"]):
        recs: list[Record] = [(0, None, f"{client}-{i}-{j}".encode(), []) for j in range(3)]
        acks = PRODUCERS[client](broker.bootstrap, topic, recs, COMPRESSIONS[i % 5])
        assert [off for _, off in acks] == list(range(total, total + 3)), client
        total += 3
        expected += [r[2] for r in recs]
    for client in CLIENTS:
        seen = CONSUMERS[client](broker.bootstrap, topic, total, partitions=1)
        assert [s[1] for s in seen] == list(range(total)), client
        assert [s[3] for s in seen] == expected, client


# ---- kcat ----------------------------------------------------------------------------------


def kcat(*args: str, stdin: str | None = None, timeout: float = 20) -> str:
    res = subprocess.run(["kcat", *args], input=stdin, capture_output=True, text=True,
                         timeout=timeout, check=False)
    assert res.returncode == 0, f"kcat {' '.join(args)} exited {res.returncode}: {res.stderr}"
    return res.stdout


def test_kcat_lists_topic_and_partitions(broker) -> None:  # type: ignore[no-untyped-def]
    create_topic(broker.bootstrap, "kcat-list")
    text = kcat("-b", broker.bootstrap, "-L")
    assert 'topic "kcat-list" with 3 partitions:' in text
    assert f"127.0.0.1:{broker.port}" in text
    for p in range(PARTITIONS):
        assert f"partition {p}, leader " in text

    meta = json.loads(kcat("-b", broker.bootstrap, "-L", "-J"))
    assert [b["name"] for b in meta["brokers"]] == [f"127.0.0.1:{broker.port}"]
    broker_id = meta["brokers"][0]["id"]
    (topic,) = [t for t in meta["topics"] if t["topic"] == "kcat-list"]
    assert "error" not in topic or not topic["error"]
    assert sorted(p["partition"] for p in topic["partitions"]) == [0, 1, 2]
    for p in topic["partitions"]:
        assert p["leader"] == broker_id
        assert [r["id"] for r in p["replicas"]] == [broker_id]
        assert [r["id"] for r in p["isrs"]] == [broker_id]


def test_kcat_consumes_what_confluent_wrote(broker) -> None:  # type: ignore[no-untyped-def]
    topic = "kcat-consume"
    create_topic(broker.bootstrap, topic)
    records: list[Record] = []
    for p in range(PARTITIONS):
        records += [
            (p, f"k{p}a".encode(), f"v{p}a".encode(), []),
            (p, None, f"v{p}-nokey".encode(), []),
            (p, f"k{p}c".encode(), None, []),
            (p, f"k{p}d".encode(), f"v{p}d".encode(), [("h", f"x{p}".encode())]),
        ]
    produce_confluent(broker.bootstrap, topic, records, "lz4")
    out = kcat("-b", broker.bootstrap, "-C", "-e", "-q", "-Z", "-t", topic,
               "-f", "%p|%o|%k|%s|%h\n")
    lines = [line.split("|") for line in out.splitlines() if line]
    assert len(lines) == len(records), out
    for p in range(PARTITIONS):
        got = [(int(o), k, s, h) for part, o, k, s, h in lines if int(part) == p]
        want = []
        for off, (_, key, value, headers) in enumerate(r for r in records if r[0] == p):
            want.append((off,
                         "NULL" if key is None else key.decode(),
                         "NULL" if value is None else value.decode(),
                         ",".join(f"{hk}={hv.decode()}" for hk, hv in headers)))
        assert got == want, f"partition {p}: {got}"


def test_kcat_produces_what_confluent_reads(broker) -> None:  # type: ignore[no-untyped-def]
    topic = "kcat-produce"
    create_topic(broker.bootstrap, topic)
    lines = [f"key{i}:value {i}" for i in range(5)]
    kcat("-b", broker.bootstrap, "-P", "-t", topic, "-p", "1", "-K", ":", "-z", "snappy",
         "-H", "origin=kcat", stdin="\n".join(lines) + "\n")
    kcat("-b", broker.bootstrap, "-P", "-t", topic, "-p", "2", stdin="plain line\n")
    seen = consume_confluent(broker.bootstrap, topic, 6)
    by_part: dict[int, list[Seen]] = {}
    for s in seen:
        by_part.setdefault(s[0], []).append(s)
    assert 0 not in by_part
    assert [(s[1], s[2], s[3], s[4]) for s in by_part[1]] == [
        (i, f"key{i}".encode(), f"value {i}".encode(), [("origin", b"kcat")]) for i in range(5)
    ]
    assert [(s[1], s[2], s[3]) for s in by_part[2]] == [(0, None, b"plain line")]
