"""The fast reader of format("eddy") against a hostile or broken broker (issue 11).

Whatever record bytes a Fetch response carries, the compiled decoder (RecordColumns) and
the Python around it (RangeDecoder: decompression, transaction markers, aborted
transactions) raise CorruptBatch saying what is wrong, or Unsupported for an old message
format: no crash, no other exception, no allocation of what a length merely claims. The
whole reader (fetcher.read_partition), fed by a fake broker on 127.0.0.1 that answers
with corrupt batches, fails with FetchFailed naming the partition.
"""

from __future__ import annotations

import datetime
import socket
import struct
import sys
import threading
import tracemalloc
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from crc32c import crc32c
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from kio.schema.errors import ErrorCode

from eddy.connect.reader import fetcher
from eddy.connect.reader.fetcher import FetchConfig, FetchFailed, RangeDecoder, Unsupported
from eddy.connect.reader.record_columns import CorruptBatch, RecordColumns
from eddy.protocol.apis import ApiKey
from eddy.protocol.codec import build, encode_response, response_module

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "unit"))
import batch_builder as bb

TS = 1_700_000_000_000
CONTROL, TRANSACTIONAL = 0x20, 0x10


def at(base_offset: int, batch: bytes) -> bytes:
    return struct.pack(">q", base_offset) + batch[8:]


def raw_batch(payload: bytes, count: int, *, codec: int = 0, attributes: int = 0,
              last_offset_delta: int | None = None, base_offset: int = 2,
              producer_id: int = -1) -> bytes:
    """A v2 batch around a records section given as bytes, CRC correct (by default at
    offset 2, after GOOD)."""
    lod = count - 1 if last_offset_delta is None else last_offset_delta
    tail = struct.pack(">hiqqqhii", codec | attributes, lod, TS, TS, producer_id, 0, -1,
                       count) + payload
    return struct.pack(">qiibI", base_offset, len(tail) + 9, -1, 2, crc32c(tail)) + tail


def record(fields: bytes, length: bytes | None = None) -> bytes:
    return (bb.zigzag(len(fields)) if length is None else length) + fields


def fields(key: bytes = bb.zigzag(1) + b"k", value: bytes = bb.zigzag(1) + b"v",
           headers: bytes = bb.zigzag(0)) -> bytes:
    return b"\x00" + bb.zigzag(0) + bb.zigzag(0) + key + value + headers


class _Txn:
    def __init__(self, producer_id: int, first_offset: int) -> None:
        self.producer_id = producer_id
        self.first_offset = first_offset


def feed(data: bytes, *, headers: bool = True, read_committed: bool = True,
         aborted: Any = ()) -> int:
    """Rows the decoder gets out of one fetch response's records."""
    dec = RangeDecoder(0, 1 << 40, headers, 1000, read_committed)
    rows = sum(t["rows"] for t in dec.feed(data, aborted))
    rest = dec.flush()
    return rows + (rest["rows"] if rest else 0)


def _zstd_rle_bomb(blocks: int) -> bytes:
    frame = bytearray(struct.pack("<I", 0xFD2FB528)) + bytes([0x00, 0x38])
    block = ((131072 << 3) | (1 << 1)).to_bytes(3, "little") + b"\x00"
    frame += block * (blocks - 1)
    frame += ((131072 << 3) | (1 << 1) | 1).to_bytes(3, "little") + b"\x00"
    return bytes(frame)


GOOD = at(0, bb.build_batch([bb.Rec(b"a", b"k"), bb.Rec(b"b", b"k", (("h", b"1"),))]))


def _short_batch() -> bytes:
    data = bytearray(raw_batch(record(fields()), 1))
    struct.pack_into(">i", data, 8, 20)  # 32 bytes in all: room for a v0 message, not v2
    return bytes(data[:32])


def _with_length(batch: bytes, length: int) -> bytes:
    data = bytearray(batch)
    struct.pack_into(">i", data, 8, length)
    return bytes(data)


CASES = {
    "batch-length-0": (_with_length(at(2, GOOD), 0), "too short for any message format"),
    "batch-length-negative": (_with_length(at(2, GOOD), -100),
                              "too short for any message format"),
    "batch-shorter-than-v2-header": (_short_batch(), "shorter than the v2 batch header"),
    "record-count-huge": (raw_batch(record(fields()), 2**31 - 1),
                          "says 2147483647 records and holds 1"),
    "record-count-negative": (raw_batch(record(fields()), -1, last_offset_delta=0),
                              "offset 2: record count -1 is negative"),
    "last-offset-delta-negative": (raw_batch(record(fields()), 1, last_offset_delta=-3),
                                   "offset 2: last offset delta -3 is negative"),
    "base-offset-negative": (raw_batch(record(fields()), 1, base_offset=-5),
                             "offset -5: the base offset is out of range"),
    "base-offset-huge": (raw_batch(record(fields()), 1, base_offset=2**63 - 1),
                         "offset 9223372036854775807: the base offset is out"),
    "record-length-huge": (raw_batch(record(fields(), bb.zigzag(2**31 - 1)), 1),
                           "record length of 2147483647 runs past its batch"),
    "record-length-negative": (raw_batch(record(fields(), bb.zigzag(-1)) + b"\x00" * 8, 1),
                               "record length of -1 is too short"),
    "record-length-10-byte-varint": (
        raw_batch(record(fields(), b"\xff" * 9 + b"\x01") + b"\x00" * 8, 1),
        "varint longer than 5 bytes"),
    "key-length-minus-2": (raw_batch(record(fields(key=bb.zigzag(-2))), 1),
                           "record key length of -2"),
    "value-length-past-record": (raw_batch(record(fields(value=bb.zigzag(99) + b"v")), 1),
                                 "record value of 99 bytes runs past its record"),
    "header-count-huge": (raw_batch(record(fields(headers=bb.zigzag(2**31 - 1))), 1),
                          "header count of 2147483647 does not fit"),
    "header-key-null": (
        raw_batch(record(fields(headers=bb.zigzag(1) + bb.zigzag(-1) + bb.zigzag(-1))), 1),
        "header key length of -1"),
    "record-fields-short-of-length": (raw_batch(record(fields() + b"xx"), 1),
                                      "record length does not match its fields"),
    "bytes-after-the-records": (raw_batch(record(fields()) * 2, 1),
                                "bytes after the batch's 1 records"),
    "zstd-bomb": (raw_batch(_zstd_rle_bomb(200_000), 10, codec=4),
                  "zstd records decompress to more than"),
    "gzip-garbage": (raw_batch(b"\x1f\x8b" + b"\x00" * 40, 1, codec=1), "gzip records"),
    "unknown-codec": (raw_batch(record(fields()), 1, codec=6), "unknown compression codec 6"),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_a_corrupt_batch_is_a_clear_error(case: str) -> None:
    data, match = CASES[case]
    for headers in (True, False):
        if not headers and case in ("header-count-huge", "header-key-null",
                                    "record-fields-short-of-length"):
            continue  # without headers the decoder does not read that far
        with pytest.raises(CorruptBatch, match=match):
            feed(GOOD + data, headers=headers)


def test_a_malformed_transaction_marker_is_a_clear_error() -> None:
    txn = raw_batch(record(fields()), 1, attributes=TRANSACTIONAL, producer_id=9,
                    base_offset=0)
    for key, match in ((bb.zigzag(2) + b"\x00\x01", "control record key of 2 bytes"),
                       (bb.zigzag(4) + struct.pack(">hh", -1, 0), "key version -1")):
        marker = raw_batch(record(fields(key=key)), 1, attributes=CONTROL | TRANSACTIONAL,
                           producer_id=9, base_offset=1)
        with pytest.raises(CorruptBatch, match=match):
            feed(txn + marker, aborted=[_Txn(9, 0)])


def test_a_long_aborted_transaction_list_filters_as_kafka_does() -> None:
    # 200,000 aborted transactions (a few MB of Fetch response): the read_committed filter
    # takes them off a deque as the batches pass, once each
    aborted = [_Txn(1000 + i, i) for i in range(200_000)]
    data = b"".join(
        raw_batch(record(fields(value=bb.zigzag(1) + b"%d" % pid)), 1, base_offset=offset,
                  attributes=TRANSACTIONAL, producer_id=pid)
        for offset, pid in ((199_990, 1005), (199_991, 7), (199_992, 200_992)))
    dec = RangeDecoder(0, 1 << 40, False, 1000, True)
    tables = [*dec.feed(data, aborted), dec.flush()]
    assert sum(t["rows"] for t in tables if t) == 1  # producer 7 was never aborted
    assert bytes(tables[-1]["values"][2]) == b"7"


def test_the_decoder_refuses_positions_outside_its_data() -> None:
    cols = RecordColumns(True, 16)
    for pos in (-1, len(GOOD) + 1):
        with pytest.raises(ValueError, match="outside"):
            cols.append_batches(GOOD, pos, 0, 100, True)


# ---- mutations of valid fetch data ---------------------------------------------------------

_VALID = (
    at(0, bb.build_batch([bb.Rec(b"v%d" % i, b"k", (("h", b"x"),)) for i in range(5)]))
    + at(5, bb.build_batch([bb.Rec(b"zzzzzz" * 9, None)] * 4, compression=bb.ZSTD))
    + at(9, bb.build_batch([bb.Rec(b"t")], producer_id=3, producer_epoch=0,
                           attributes_extra=TRANSACTIONAL))
    + at(10, bb.build_batch([bb.Rec(struct.pack(">hi", 0, 0), struct.pack(">hh", 0, 0))],
                            producer_id=3, producer_epoch=0,
                            attributes_extra=CONTROL | TRANSACTIONAL))
    + at(11, bb.build_batch([bb.Rec(b"s" * 40, b"key")] * 3, compression=bb.SNAPPY,
                            xerial=True))
    + at(14, bb.build_batch([bb.Rec(b"g" * 40)] * 3, compression=bb.GZIP))
    + at(17, bb.build_batch([bb.Rec(b"l" * 40)] * 3, compression=bb.LZ4))
)
_EXTREMES = [b"\x7f\xff\xff\xff", b"\x80\x00\x00\x00", b"\xff\xff\xff\xff",
             b"\xff" * 9 + b"\x01", b"\x80" * 11 + b"\x00", bb.zigzag(2**31 - 1),
             bb.zigzag(-2), bb.zigzag(-1)]


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(edits=st.lists(st.tuples(st.integers(0, len(_VALID) - 1),
                                st.one_of(st.integers(0, 255), st.sampled_from(_EXTREMES))),
                      min_size=1, max_size=4),
       cut=st.integers(1, len(_VALID)), headers=st.booleans(),
       read_committed=st.booleans(), fix_crc=st.booleans())
def test_mutated_fetch_data_decodes_or_raises_corrupt_batch(
        edits: list[tuple[int, int | bytes]], cut: int, headers: bool, read_committed: bool,
        fix_crc: bool) -> None:
    data = bytearray(_VALID)
    for pos, new in edits:
        if isinstance(new, int):
            data[pos] = new
        else:
            data[pos : pos + len(new)] = new
    if fix_crc:
        pos = 0
        while len(data) - pos >= 61:
            (length,) = struct.unpack_from(">i", data, pos + 8)
            if length < 49 or pos + 12 + length > len(data):
                break
            data[pos : pos + 12 + length] = bb.recrc(data[pos : pos + 12 + length])
            pos += 12 + length
    dec = RangeDecoder(0, 1 << 40, headers, 64, read_committed)
    saved = fetcher.decompressed_limit
    fetcher.decompressed_limit = lambda size: 1 << 20
    tracemalloc.start()
    try:
        rows = sum(t["rows"] for t in dec.feed(bytes(data[:cut]), [_Txn(3, 9)]))
    except (CorruptBatch, Unsupported):
        rows = 0
    finally:
        peak = tracemalloc.get_traced_memory()[1]
        tracemalloc.stop()
        fetcher.decompressed_limit = saved
    assert rows <= len(data)
    assert peak <= 3 * (1 << 20) + 64 * len(data)


# ---- a fake broker that answers with corrupt batches ----------------------------------------


class HostileBroker:
    """ApiVersions, Metadata and Fetch on 127.0.0.1: every Fetch gets `records`."""

    def __init__(self, topic: str, records: bytes, aborted: Any = ()) -> None:
        self.topic = topic
        self.records = records
        self.aborted = aborted
        self.fetches = 0
        self._server = socket.create_server(("127.0.0.1", 0))
        self._server.settimeout(0.2)
        self.port = self._server.getsockname()[1]
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._serve, daemon=True)
        self._thread.start()

    def close(self) -> None:
        self._stop.set()
        self._thread.join(10)
        self._server.close()

    def _serve(self) -> None:
        while not self._stop.is_set():
            try:
                conn, _ = self._server.accept()
            except TimeoutError:
                continue
            threading.Thread(target=self._connection, args=(conn,), daemon=True).start()

    def _connection(self, conn: socket.socket) -> None:
        conn.settimeout(10)
        with conn:
            while not self._stop.is_set():
                head = self._recv(conn, 4)
                if head is None:
                    return
                frame = self._recv(conn, struct.unpack(">i", head)[0])
                if frame is None:
                    return
                api_key, version, correlation = struct.unpack_from(">hhi", frame)
                body = self._answer(ApiKey(api_key), version)
                payload = encode_response(ApiKey(api_key), version, correlation, body)
                conn.sendall(struct.pack(">i", len(payload)) + payload)

    @staticmethod
    def _recv(conn: socket.socket, n: int) -> bytes | None:
        buf = bytearray()
        while len(buf) < n:
            try:
                chunk = conn.recv(n - len(buf))
            except OSError:
                return None
            if not chunk:
                return None
            buf += chunk
        return bytes(buf)

    def _answer(self, api: ApiKey, version: int) -> Any:
        mod = response_module(api, version)
        if api == ApiKey.API_VERSIONS:
            keys = ((1, 0, 11), (2, 0, 2), (3, 0, 8), (18, 0, 0))
            return build(mod.ApiVersionsResponse, error_code=ErrorCode.none, api_keys=tuple(
                build(mod.ApiVersion, api_key=k, min_version=lo, max_version=hi)
                for k, lo, hi in keys))
        if api == ApiKey.METADATA:
            return build(
                mod.MetadataResponse, throttle_time=datetime.timedelta(0), cluster_id="x",
                controller_id=1, cluster_authorized_operations=0,
                brokers=(build(mod.MetadataResponseBroker, node_id=1, host="127.0.0.1",
                               port=self.port, rack=None),),
                topics=(build(mod.MetadataResponseTopic, error_code=ErrorCode.none,
                              name=self.topic, is_internal=False,
                              topic_authorized_operations=0,
                              partitions=(build(mod.MetadataResponsePartition,
                                                error_code=ErrorCode.none, partition_index=0,
                                                leader_id=1, leader_epoch=0,
                                                replica_nodes=(1,), isr_nodes=(1,),
                                                offline_replicas=()),)),))
        assert api == ApiKey.FETCH, api
        self.fetches += 1
        return build(
            mod.FetchResponse, throttle_time=datetime.timedelta(0),
            error_code=ErrorCode.none, session_id=0,
            responses=(build(mod.FetchableTopicResponse, topic=self.topic, partitions=(
                build(mod.PartitionData, partition_index=0, error_code=ErrorCode.none,
                      high_watermark=1000, last_stable_offset=1000, log_start_offset=0,
                      aborted_transactions=tuple(
                          build(mod.AbortedTransaction, producer_id=p, first_offset=o)
                          for p, o in self.aborted),
                      preferred_read_replica=-1, records=self.records),)),))


def _read(broker: HostileBroker, end: int = 1000) -> int:
    config = FetchConfig([("127.0.0.1", broker.port)], timeout_s=10.0)
    rows = 0
    for cols in fetcher.read_partition(config, broker.topic, 0, 0, end, True, 1000,
                                       lambda cols: cols, stall_timeout_s=10.0):
        rows += cols["rows"]
    return rows


@pytest.fixture
def hostile() -> Iterator[list[HostileBroker]]:
    brokers: list[HostileBroker] = []
    yield brokers
    for b in brokers:
        b.close()


def test_the_fake_broker_serves_good_batches(hostile: list[HostileBroker]) -> None:
    hostile.append(HostileBroker("good", GOOD))
    assert _read(hostile[0], end=2) == 2


@pytest.mark.parametrize("case", ["record-count-huge", "header-count-huge", "zstd-bomb",
                                  "batch-length-negative", "bytes-after-the-records"])
def test_a_hostile_broker_gets_a_clear_error_naming_the_partition(
        hostile: list[HostileBroker], case: str) -> None:
    data, match = CASES[case]
    hostile.append(HostileBroker("orders", GOOD + data))
    with pytest.raises(FetchFailed, match=f"reading orders/0: the broker sent a corrupt "
                                          f"record batch: the batch at offset 2: .*{match}"):
        _read(hostile[0])
    assert hostile[0].fetches == 1  # not retried: a corrupt batch is not a network error


def test_a_hostile_marker_under_read_committed_is_a_clear_error(
        hostile: list[HostileBroker]) -> None:
    txn = raw_batch(record(fields()), 1, attributes=TRANSACTIONAL, producer_id=9,
                    base_offset=0)
    marker = raw_batch(record(fields(key=bb.zigzag(1) + b"\x00")), 1,
                       attributes=CONTROL | TRANSACTIONAL, producer_id=9, base_offset=1)
    hostile.append(HostileBroker("txns", txn + marker, aborted=[(9, 0)]))
    with pytest.raises(FetchFailed, match="control record key of 1 bytes"):
        _read(hostile[0])
