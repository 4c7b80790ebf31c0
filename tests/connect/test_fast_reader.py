"""The fast reader of format("eddy"): record batches decoded into Arrow columns.

The decoder (RangeDecoder over the compiled RecordColumns) is fed batches built by
tests/unit/batch_builder.py, which is written from Kafka's format spec independently
of eddy's code; the whole reader is then compared, table against table, with
librdkafka reading the same ranges of a real broker.
"""

from __future__ import annotations

import struct
import sys
import uuid
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from confluent_kafka import Producer, TopicPartition
from confluent_kafka.admin import AdminClient

from eddy.connect.options import OptionError
from eddy.connect.reader import fetcher, kafka_source
from eddy.connect.reader.fetcher import RangeDecoder, Unsupported
from eddy.connect.reader.kafka_options import Cluster, KafkaOptions
from eddy.connect.reader.record_columns import CorruptBatch

from .pipeline_helpers import create_topic

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "unit"))
import batch_builder as bb

TS = 1_700_000_000_000
CONTROL = 0x20
TRANSACTIONAL = 0x10
LOG_APPEND_TIME = 0x08


@pytest.fixture(scope="module")
def eddy(module_eddy: Any) -> Any:
    """The module's one broker: every test here works on topics of its own."""
    return module_eddy


def at(base_offset: int, batch: bytes) -> bytes:
    """The batch with its base offset set (the builder writes 0)."""
    return struct.pack(">q", base_offset) + batch[8:]


def marker(base_offset: int, producer_id: int, commit: bool) -> bytes:
    """A transaction marker: a control batch whose key is (version 0, type)."""
    key = struct.pack(">hh", 0, 1 if commit else 0)
    value = struct.pack(">hi", 0, 0)
    return at(base_offset, bb.build_batch([bb.Rec(value, key)], producer_id=producer_id,
                                          producer_epoch=0,
                                          attributes_extra=CONTROL | TRANSACTIONAL))


def rows(tables: list[dict[str, Any]], topic: str = "t", headers: bool = True) -> list[Any]:
    """(offset, key, value, timestamp ms, timestampType, headers) of every decoded row."""
    schema = kafka_source._arrow_schema(headers)
    out: list[Any] = []
    for cols in tables:
        batch = kafka_source._arrow_from_columns(cols, topic, 0, schema, headers)
        batch.validate(full=True)
        d = batch.to_pydict()
        for i in range(batch.num_rows):
            hdrs = tuple((h["key"], h["value"]) for h in d["headers"][i]) if headers else ()
            ts = d["timestamp"][i]
            out.append((d["offset"][i], d["key"][i], d["value"][i],
                        int(ts.timestamp() * 1000), d["timestampType"][i], hdrs))
    return out


def decode(data: bytes, start: int = 0, end: int = 1 << 40, *, batch_rows: int = 1000,
           read_committed: bool = True, aborted: Any = (), headers: bool = True
           ) -> tuple[list[Any], RangeDecoder]:
    dec = RangeDecoder(start, end, headers, batch_rows, read_committed)
    tables = list(dec.feed(data, aborted))
    rest = dec.flush()
    if rest is not None:
        tables.append(rest)
    return rows(tables, headers=headers), dec


SAMPLE = [
    bb.Rec(b"v0", b"k0", (("h1", b"a"), ("h2", None)), 0),
    bb.Rec(None, b"k1", (), 5),
    bb.Rec(b"", None, (("", b""),), 9),
    bb.Rec(b"\x00\xff" * 300, b"k3", (), 2),
]


def expected(recs: list[bb.Rec], base_offset: int, base_ts: int = TS) -> list[Any]:
    return [(base_offset + i, r.key, r.value, base_ts + r.timestamp_delta, 0, r.headers)
            for i, r in enumerate(recs)]


@pytest.mark.parametrize("codec,xerial", [
    (bb.NONE, False), (bb.GZIP, False), (bb.SNAPPY, False), (bb.SNAPPY, True),
    (bb.LZ4, False), (bb.ZSTD, False),
])
def test_records_come_out_as_written(codec: int, xerial: bool) -> None:
    data = at(0, bb.build_batch(SAMPLE, compression=codec, xerial=xerial)) + at(
        4, bb.build_batch(SAMPLE[:2], compression=codec, xerial=xerial, base_timestamp=TS + 7))
    got, dec = decode(data)
    assert got == expected(SAMPLE, 0) + expected(SAMPLE[:2], 4, TS + 7)
    assert dec.next_offset == 6


def test_without_headers_the_column_is_absent_and_rows_the_same() -> None:
    got, _ = decode(at(0, bb.build_batch(SAMPLE)), headers=False)
    assert [r[:5] for r in got] == [r[:5] for r in expected(SAMPLE, 0)]


@pytest.mark.parametrize("codec", [bb.NONE, bb.ZSTD])
def test_a_range_inside_batches(codec: int) -> None:
    recs = [bb.Rec(b"v%d" % i) for i in range(10)]
    data = at(100, bb.build_batch(recs, compression=codec)) + at(
        110, bb.build_batch(recs, compression=codec))
    got, dec = decode(data, 103, 114)
    assert [r[0] for r in got] == list(range(103, 114))
    assert [r[2] for r in got] == [b"v%d" % (i % 10) for i in range(103, 114)]
    assert dec.done


@pytest.mark.parametrize("codec", [bb.NONE, bb.LZ4])
def test_small_column_batches_lose_and_repeat_nothing(codec: int) -> None:
    data = b"".join(at(base, bb.build_batch([bb.Rec(b"%d" % (base + i)) for i in range(7)],
                                            compression=codec))
                    for base in range(0, 70, 7))
    dec = RangeDecoder(3, 66, False, 5, True)
    tables = list(dec.feed(data))
    # uncompressed batches are cut at exactly 5 rows; a decompressed batch goes in whole
    assert all(t["rows"] == 5 if codec == bb.NONE else t["rows"] >= 5 for t in tables)
    rest = dec.flush()
    got = rows([*tables, *([rest] if rest else [])], headers=False)
    assert [r[0] for r in got] == list(range(3, 66))
    assert [r[2] for r in got] == [b"%d" % i for i in range(3, 66)]


def test_log_append_time_gives_every_record_the_batch_time() -> None:
    batch = bb.build_batch(SAMPLE, attributes_extra=LOG_APPEND_TIME, max_timestamp=TS + 99)
    got, _ = decode(at(0, batch))
    assert {(r[3], r[4]) for r in got} == {(TS + 99, 1)}


def test_control_batches_are_never_records() -> None:
    data = at(0, bb.build_batch([bb.Rec(b"a")], producer_id=7, producer_epoch=0,
                                attributes_extra=TRANSACTIONAL)) + marker(1, 7, True) + at(
        2, bb.build_batch([bb.Rec(b"b")]))
    for read_committed in (True, False):
        got, dec = decode(data, read_committed=read_committed)
        assert [(r[0], r[2]) for r in got] == [(0, b"a"), (2, b"b")]
        assert dec.next_offset == 3


class _Txn:
    def __init__(self, producer_id: int, first_offset: int) -> None:
        self.producer_id = producer_id
        self.first_offset = first_offset


def test_read_committed_drops_aborted_transactions_only() -> None:
    def txn(base: int, pid: int, value: bytes) -> bytes:
        return at(base, bb.build_batch([bb.Rec(value)], producer_id=pid, producer_epoch=0,
                                       attributes_extra=TRANSACTIONAL))

    data = (txn(0, 1, b"aborted-1") + txn(1, 2, b"committed-2") + txn(2, 1, b"aborted-1b")
            + marker(3, 1, False) + marker(4, 2, True) + txn(5, 1, b"committed-1")
            + marker(6, 1, True) + at(7, bb.build_batch([bb.Rec(b"plain")])))
    aborted = [_Txn(1, 0)]
    got, dec = decode(data, aborted=aborted)
    assert [r[2] for r in got] == [b"committed-2", b"committed-1", b"plain"]
    assert dec.next_offset == 8
    got, _ = decode(data, read_committed=False, aborted=aborted)
    assert [r[2] for r in got] == [b"aborted-1", b"committed-2", b"aborted-1b", b"committed-1",
                                   b"plain"]


def test_a_partial_batch_at_the_end_waits_for_the_next_fetch() -> None:
    whole = at(0, bb.build_batch([bb.Rec(b"a"), bb.Rec(b"b")]))
    partial = at(2, bb.build_batch([bb.Rec(b"c")]))[:-3]
    got, dec = decode(whole + partial)
    assert [r[2] for r in got] == [b"a", b"b"]
    assert dec.next_offset == 2 and dec.used == len(whole)


def test_compaction_gaps_are_stepped_over() -> None:
    batch = bb.build_batch([bb.Rec(b"x")], last_offset_delta=4)  # offsets 1-4 compacted away
    got, dec = decode(at(0, batch) + at(10, bb.build_batch([bb.Rec(b"y")])))
    assert [(r[0], r[2]) for r in got] == [(0, b"x"), (10, b"y")]
    assert dec.next_offset == 11


def test_old_message_formats_are_left_to_librdkafka() -> None:
    with pytest.raises(Unsupported, match="message format v1"):
        decode(at(0, bb.build_batch([bb.Rec(b"x")], magic=1)))


@pytest.mark.parametrize("cut", [1, 5, 20])
def test_corrupt_records_raise(cut: int) -> None:
    batch = bytearray(bb.build_batch([bb.Rec(b"x" * 30, b"key")]))
    batch[61] = 0x7E  # record length far beyond the batch
    with pytest.raises(CorruptBatch):
        decode(bytes(batch))
    short = bb.build_batch([bb.Rec(b"x" * 30)], record_count=3)
    with pytest.raises(CorruptBatch, match="says 3 records"):
        decode(short)
    truncated = bytearray(bb.build_batch([bb.Rec(b"y" * 30, b"k")]))
    record_end = len(truncated)
    del truncated[record_end - cut:]
    struct.pack_into(">i", truncated, 8, len(truncated) - 12)
    with pytest.raises(CorruptBatch):
        decode(bytes(truncated))


# ---- against a real broker, next to librdkafka -----------------------------------------


def _options(bootstrap: str, topic: str, **extra: str) -> KafkaOptions:
    return KafkaOptions.parse({"kafka.bootstrap.servers": bootstrap, "subscribe": topic,
                               **extra})


def _both(options: KafkaOptions, topic: str, start: int, end: int) -> tuple[Any, Any]:
    rng = kafka_source.TopicRange(topic, 0, start, end)
    fast = pa.Table.from_batches(list(kafka_source.read_range(options, rng)),
                                 kafka_source._arrow_schema(options.include_headers))
    slow = pa.Table.from_batches(list(kafka_source.read_range_librdkafka(options, rng)),
                                 kafka_source._arrow_schema(options.include_headers))
    return fast, slow


def _end(options: KafkaOptions, topic: str) -> int:
    cluster = Cluster(options)
    return cluster.latest(cluster.partitions())[f"{topic}/0"]


@pytest.mark.parametrize("codec", ["none", "gzip", "snappy", "lz4", "zstd"])
def test_same_table_as_librdkafka(eddy: Any, codec: str) -> None:
    topic = f"fast-{codec}-{uuid.uuid4().hex[:6]}"
    create_topic(eddy.bootstrap, topic, 1)
    producer = Producer({"bootstrap.servers": eddy.bootstrap, "compression.type": codec,
                         "linger.ms": 5})
    for i in range(12_000):
        producer.produce(topic, value=None if i % 7 == 0 else b"value-%d" % i,
                         key=None if i % 5 == 0 else b"k%d" % i, partition=0,
                         headers=[("h", b"%d" % i), ("none", None)] if i % 3 == 0 else None,
                         timestamp=TS + i)
    assert producer.flush(30) == 0
    for headers in ("true", "false"):
        options = _options(eddy.bootstrap, topic, includeHeaders=headers)
        end = _end(options, topic)
        for start, stop in ((0, end), (4321, end - 17)):
            fast, slow = _both(options, topic, start, stop)
            assert fast.num_rows == stop - start
            assert fast.equals(slow)


def test_transactions_as_librdkafka_sees_them(eddy: Any) -> None:
    topic = f"fast-txn-{uuid.uuid4().hex[:6]}"
    create_topic(eddy.bootstrap, topic, 1)
    producer = Producer({"bootstrap.servers": eddy.bootstrap,
                         "transactional.id": f"tx-{uuid.uuid4().hex[:6]}"})
    producer.init_transactions(30)
    for round_ in range(6):
        producer.begin_transaction()
        for i in range(50):
            producer.produce(topic, b"r%d-%d" % (round_, i), partition=0)
        producer.flush(30)
        if round_ % 2:
            producer.abort_transaction(30)
        else:
            producer.commit_transaction(30)
    for isolation, rounds in (("read_committed", {0, 2, 4}),
                              ("read_uncommitted", set(range(6)))):
        options = _options(eddy.bootstrap, topic, **{"kafka.isolation.level": isolation})
        end = _end(options, topic)
        fast, slow = _both(options, topic, 0, end)
        assert fast.equals(slow)
        values = fast.column("value").to_pylist()
        assert sorted(values) == sorted(b"r%d-%d" % (r, i) for r in rounds for i in range(50))


def test_a_range_below_the_log_start_starts_at_the_log_start(eddy: Any) -> None:
    topic = f"fast-deleted-{uuid.uuid4().hex[:6]}"
    create_topic(eddy.bootstrap, topic, 1)
    producer = Producer({"bootstrap.servers": eddy.bootstrap})
    for i in range(100):
        producer.produce(topic, b"%d" % i, partition=0)
    producer.flush(30)
    admin = AdminClient({"bootstrap.servers": eddy.bootstrap})
    admin.delete_records([TopicPartition(topic, 0, 40)])[TopicPartition(topic, 0, 40)].result(15)
    fast, slow = _both(_options(eddy.bootstrap, topic), topic, 0, 100)
    assert fast.column("offset").to_pylist() == list(range(40, 100))
    assert fast.equals(slow)


def test_errors_name_the_partition(eddy: Any, monkeypatch: Any) -> None:
    monkeypatch.setattr(kafka_source, "STALL_TIMEOUT_S", 2.0)  # how long a missing topic waits
    options = _options(eddy.bootstrap, "no-such-topic")
    rng = kafka_source.TopicRange("no-such-topic", 0, 0, 10)
    with pytest.raises(RuntimeError, match=r"no-such-topic.*UNKNOWN_TOPIC_OR_PARTITION"):
        list(kafka_source.read_range(options, rng))
    with pytest.raises(OptionError, match="option reader"):
        _options(eddy.bootstrap, "t", reader="fastest")
    tls = _options(eddy.bootstrap, "t", reader="native",
                   **{"kafka.security.protocol": "SSL"})
    with pytest.raises(OptionError, match=r"reader=native: security\.protocol=ssl"):
        list(kafka_source.read_range(tls, rng))


def test_librdkafka_takes_over_where_the_fast_reader_stops(eddy: Any,
                                                           monkeypatch: Any) -> None:
    """A range the fast reader gives up on halfway (Unsupported) is finished by librdkafka
    from the last offset handed out: every record exactly once."""
    topic = f"fast-fallback-{uuid.uuid4().hex[:6]}"
    create_topic(eddy.bootstrap, topic, 1)
    producer = Producer({"bootstrap.servers": eddy.bootstrap, "linger.ms": 5})
    for i in range(3000):
        producer.produce(topic, b"%d" % i, partition=0)
    producer.flush(30)
    real = fetcher.read_partition

    def one_batch_then_unsupported(*args: Any, **kwargs: Any) -> Any:
        gen = real(*args, **kwargs)
        yield next(gen)
        raise Unsupported("pretend")

    monkeypatch.setattr(fetcher, "read_partition", one_batch_then_unsupported)
    monkeypatch.setattr(kafka_source, "ARROW_BATCH", 1000)
    rng = kafka_source.TopicRange(topic, 0, 10, 3000)
    table = pa.Table.from_batches(list(kafka_source.read_range(
        _options(eddy.bootstrap, topic, includeHeaders="false"), rng)))
    assert table.column("offset").to_pylist() == list(range(10, 3000))


def test_a_fetch_asks_for_about_what_is_left_of_the_range() -> None:
    cap = 16 << 20
    assert fetcher.fetch_size(10, 100.0, cap) == fetcher.MIN_FETCH_BYTES + 1100
    assert fetcher.fetch_size(0, 100.0, cap) == fetcher.MIN_FETCH_BYTES
    assert fetcher.fetch_size(10_000_000, 100.0, cap) == cap
    assert fetcher.fetch_size(50_000, 120.0, cap) == int(50_000 * 120 * 1.1) + (64 << 10)


def test_client_options_it_cannot_take_name_the_option() -> None:
    with pytest.raises(OptionError, match=r"kafka\.isolation\.level"):
        fetcher.FetchConfig.from_client("127.0.0.1:9092", {"isolation.level": "dirty"})
    with pytest.raises(OptionError, match=r"kafka\.max\.partition\.fetch\.bytes"):
        fetcher.FetchConfig.from_client("127.0.0.1:9092", {"max.partition.fetch.bytes": "x"})
    with pytest.raises(OptionError, match=r"kafka\.bootstrap\.servers"):
        fetcher.FetchConfig.from_client("localhost", {})
    conf = fetcher.FetchConfig.from_client("127.0.0.1:9092,[::1]:9093", {
        "isolation.level": "read_uncommitted", "max.partition.fetch.bytes": "1048576"})
    assert conf.bootstrap == [("127.0.0.1", 9092), ("::1", 9093)]
    assert not conf.read_committed and conf.partition_max_bytes == 1 << 20
    with pytest.raises(Unsupported, match="sasl_ssl"):
        fetcher.FetchConfig.from_client("127.0.0.1:9092", {"security.protocol": "SASL_SSL"})
