"""Record-level decoders against hostile input (issue 11): every length and count a peer
sends is checked against the bytes present, bad input raises the documented error naming
the field, and no input makes a decoder allocate much more than its own size (or, for a
compressed batch, than the decompression limit).

The documented errors: validate_batches raises KafkaError; decode_batch_records and the
rest of eddy.protocol.records raise CorruptRecordError (a ValueError); the offsets-topic and
consumer-protocol decoders raise RecordFormatError (parse_subscription_topics: None).
"""

from __future__ import annotations

import struct
import tracemalloc
import zlib
from collections.abc import Callable, Iterator
from contextlib import contextmanager, suppress
from pathlib import Path
from typing import Any

import cramjam
import lz4.frame
import pytest
import zstandard
from batch_builder import (
    GZIP,
    LZ4,
    NONE,
    SNAPPY,
    ZSTD,
    Rec,
    build_batch,
    recrc,
    zigzag,
)
from crc32c import crc32c
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from eddy.groups.records import (
    RecordFormatError,
    decode_group_metadata_value,
    decode_key,
    decode_offset_commit_value,
    parse_subscription_topics,
)
from eddy.log.compaction import CompactionError, clean, plan_cleaning
from eddy.log.config import TopicConfig
from eddy.log.partition import PartitionLog
from eddy.protocol import records as records_module
from eddy.protocol.errors import ErrorCode, KafkaError
from eddy.protocol.record_batch import (
    MIN_DECOMPRESSED_LIMIT,
    ValidatedBatches,
    decompressed_limit,
    iter_batches,
    validate_batches,
)
from eddy.protocol.records import (
    CorruptRecordError,
    control_type,
    decode_batch_records,
    decompress,
)
from eddy.protocol.records import build_batch as eddy_build_batch

MAX = 1_048_588  # Kafka's default max.message.bytes
TS = 1_700_000_000_000
CONTROL = 0x20
TRANSACTIONAL = 0x10


@contextmanager
def peak_allocation() -> Iterator[list[int]]:
    """The peak bytes Python allocated inside the block (in out[0] afterwards)."""
    out = [0]
    tracemalloc.start()
    try:
        yield out
    finally:
        out[0] = tracemalloc.get_traced_memory()[1]
        tracemalloc.stop()


def raw_batch(payload: bytes, count: int, *, codec: int = NONE, attributes: int = 0,
              last_offset_delta: int | None = None, base_offset: int = 0) -> bytes:
    """A v2 batch around a records section given as bytes (hostile or not), CRC correct."""
    lod = count - 1 if last_offset_delta is None else last_offset_delta
    tail = struct.pack(">hiqqqhii", codec | attributes, lod, TS, TS, -1, -1, -1, count)
    tail += payload
    return struct.pack(">qiibI", base_offset, len(tail) + 9, -1, 2, crc32c(tail)) + tail


def record(body: bytes, length: bytes | None = None) -> bytes:
    """A record: its length varint (the body's unless given) and its body."""
    return (zigzag(len(body)) if length is None else length) + body


def body(key: bytes = zigzag(1) + b"k", value: bytes = zigzag(1) + b"v",
         headers: bytes = zigzag(0)) -> bytes:
    """A record's fields after its length: attributes, timestamp and offset deltas 0."""
    return b"\x00" + zigzag(0) + zigzag(0) + key + value + headers


def decode_all(batch: bytes) -> list[Any]:
    return [(r.offset, r.key, r.value, r.headers) for r in decode_batch_records(batch)]


def corrupt(batch: bytes, match: str) -> None:
    with pytest.raises(CorruptRecordError, match=match):
        decode_all(batch)


def produce_code(data: bytes) -> ErrorCode:
    with pytest.raises(KafkaError) as info:
        validate_batches(bytearray(data), max_batch_bytes=MAX)
    return info.value.code


# ---- (1) what the builders encode decodes back -------------------------------------------

_bytes = st.one_of(st.none(), st.binary(max_size=40))
_records = st.lists(
    st.builds(Rec, value=_bytes, key=_bytes,
              headers=st.lists(st.tuples(st.text(max_size=6), _bytes), max_size=3).map(tuple),
              timestamp_delta=st.integers(-(2**40), 2**40)),
    min_size=1, max_size=12)


@settings(max_examples=120, deadline=None)
@given(records=_records, codec=st.sampled_from([NONE, GZIP, SNAPPY, LZ4, ZSTD]),
       xerial=st.booleans(), base_offset=st.integers(0, 2**50))
def test_built_batches_decode_to_what_was_encoded(records: list[Rec], codec: int,
                                                  xerial: bool, base_offset: int) -> None:
    batch = build_batch(records, compression=codec, xerial=xerial and codec == SNAPPY,
                        base_offset=base_offset, base_timestamp=TS)
    validate_batches(bytearray(batch), max_batch_bytes=len(batch))
    assert decode_all(batch) == [(base_offset + i, r.key, r.value, r.headers)
                                 for i, r in enumerate(records)]
    assert [r.timestamp for r in decode_batch_records(batch)] == [
        TS + r.timestamp_delta for r in records]


@settings(max_examples=60, deadline=None)
@given(pairs=st.lists(st.tuples(_bytes, _bytes), min_size=1, max_size=12))
def test_the_brokers_own_batches_decode_to_what_was_encoded(
        pairs: list[tuple[bytes | None, bytes | None]]) -> None:
    batch = bytes(eddy_build_batch(pairs, TS, producer_id=7, producer_epoch=1))
    validate_batches(bytearray(batch), max_batch_bytes=len(batch))
    assert [(r.key, r.value, r.headers) for r in decode_batch_records(batch)] == [
        (k, v, ()) for k, v in pairs]


@pytest.mark.parametrize("codec", [GZIP, LZ4, ZSTD])
def test_payloads_of_several_frames_or_members_decompress_whole(codec: int) -> None:
    # the decompression buffer starts at what the first frame announces and grows
    raw = b"".join(b"record %d;" % i for i in range(40_000))
    mod = {GZIP: cramjam.gzip, LZ4: cramjam.lz4, ZSTD: cramjam.zstd}[codec]
    data = bytes(mod.compress(raw[:1000])) + bytes(mod.compress(raw[1000:]))
    assert decompress(codec, data, 1 << 20) == raw


@pytest.mark.parametrize("data", [
    lz4.frame.compress(b"x" * 300_000, store_size=False),
    lz4.frame.compress(b"x" * 300_000, store_size=True),
    lz4.frame.compress(bytes(range(256)) * 2000, block_size=lz4.frame.BLOCKSIZE_MAX4MB),
], ids=["no-size", "size", "4mb-blocks"])
def test_lz4_frames_with_or_without_a_content_size_decompress(data: bytes) -> None:
    assert decompress(LZ4, data, 1 << 20) == lz4.frame.decompress(data)


def test_zstd_frames_without_a_content_size_decompress() -> None:
    raw = b"".join(b'{"id": %d}' % i for i in range(100_000))
    streamed = zstandard.ZstdCompressor().compressobj()  # as Java's zstd-jni: no size
    data = streamed.compress(raw) + streamed.flush()
    assert decompress(ZSTD, data, 4 << 20) == raw


# ---- (2) mutations of valid batches: decode or the documented error, bounded memory -------

_EXTREME_INT32 = [b"\x7f\xff\xff\xff", b"\x80\x00\x00\x00", b"\xff\xff\xff\xff", b"\x00" * 4]
_EXTREME_VARINTS = [
    b"\xff" * 9 + b"\x01",  # a 10-byte varint
    b"\x80" * 11 + b"\x00",  # overlong
    b"\xff\xff\xff\xff\x0f",  # 5 bytes, past int32
    zigzag(2**31 - 1), zigzag(-(2**31)), zigzag(-2), zigzag(-1), zigzag(0),
]
_mutation = st.one_of(
    st.tuples(st.just("flip"), st.floats(0, 1), st.integers(0, 7)),
    st.tuples(st.just("byte"), st.floats(0, 1), st.integers(0, 255)),
    st.tuples(st.just("int32"), st.floats(0, 1), st.sampled_from(_EXTREME_INT32)),
    st.tuples(st.just("varint"), st.floats(0, 1), st.sampled_from(_EXTREME_VARINTS)),
    st.tuples(st.just("insert"), st.floats(0, 1), st.sampled_from(_EXTREME_VARINTS)),
    st.tuples(st.just("cut"), st.floats(0, 1), st.just(0)),
)


def mutate(data: bytes, mutations: list[tuple[str, float, Any]]) -> bytes:
    out = bytearray(data)
    for kind, where, arg in mutations:
        pos = min(int(where * len(out)), max(len(out) - 1, 0))
        if not out:
            break
        if kind == "flip":
            out[pos] ^= 1 << arg
        elif kind == "byte":
            out[pos] = arg
        elif kind in ("int32", "varint"):
            out[pos : pos + len(arg)] = arg
        elif kind == "insert":
            out[pos:pos] = arg
        else:
            del out[pos:]
    return bytes(out)


def fix_crcs(data: bytes) -> bytes:
    """Recompute the CRC of every batch whose length fits, as any attacker can."""
    out = bytearray(data)
    pos = 0
    while len(out) - pos >= 61:
        (length,) = struct.unpack_from(">i", out, pos + 8)
        if length < 49 or pos + 12 + length > len(out):
            break
        out[pos : pos + 12 + length] = recrc(out[pos : pos + 12 + length])
        pos += 12 + length
    return bytes(out)


def _small_limit(size: int) -> int:
    return 1 << 20


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(records=_records, codec=st.sampled_from([NONE, NONE, GZIP, SNAPPY, LZ4, ZSTD]),
       xerial=st.booleans(), mutations=st.lists(_mutation, min_size=1, max_size=4),
       with_crc=st.booleans())
def test_mutated_batches_decode_or_raise_the_documented_error(
        records: list[Rec], codec: int, xerial: bool, mutations: list[Any],
        with_crc: bool) -> None:
    valid = build_batch(records, compression=codec, xerial=xerial and codec == SNAPPY)
    data = mutate(valid + valid, mutations)
    if with_crc:
        data = fix_crcs(data)
    # the decompression limit made small, so that the bound below says something
    saved: Callable[[int], int] = records_module.decompressed_limit
    records_module.decompressed_limit = _small_limit
    try:
        with peak_allocation() as peak:
            with suppress(KafkaError):
                validate_batches(bytearray(data), max_batch_bytes=MAX)
            pos = 0
            while pos < len(data):  # every batch, also those validation refused
                with suppress(CorruptRecordError):
                    for r in decode_batch_records(data[pos:]):
                        assert isinstance(r.headers, tuple)
                length = struct.unpack_from(">i", data, pos + 8)[0] if len(data) - pos >= 12 else 0
                pos += max(61, length + 12)
    finally:
        records_module.decompressed_limit = saved
    assert peak[0] <= 3 * _small_limit(0) + 64 * len(data) + (256 << 10)


# ---- (3) one regression test per bounds class ----------------------------------------------
# validate_batches, on the produce path


def test_a_batch_length_past_the_data_is_corrupt_message() -> None:
    data = bytearray(build_batch([Rec(b"v")]))
    struct.pack_into(">i", data, 8, 0x7FFFFFFF)
    assert produce_code(bytes(data)) == ErrorCode.corrupt_message


def test_a_record_count_the_batch_cannot_hold_is_corrupt_message() -> None:
    # consistent with lastOffsetDelta, CRC right: 2^31 - 1 records in 61 + 10 bytes
    batch = build_batch([Rec(b"v")], record_count=2**31 - 1, last_offset_delta=2**31 - 2)
    with pytest.raises(KafkaError, match="record count 2147483647") as info:
        validate_batches(bytearray(batch), max_batch_bytes=MAX)
    assert info.value.code == ErrorCode.corrupt_message


def test_a_compressed_record_count_past_the_decompression_limit_is_corrupt_message() -> None:
    batch = build_batch([Rec(b"v")], compression=ZSTD)
    count = decompressed_limit(len(batch)) // 7 + 1
    assert produce_code(build_batch([Rec(b"v")], compression=ZSTD, record_count=count,
                                    last_offset_delta=count - 1)) == ErrorCode.corrupt_message


def test_a_trailing_partial_batch_is_corrupt_message() -> None:
    whole = build_batch([Rec(b"v")])
    assert produce_code(whole + whole[:40]) == ErrorCode.corrupt_message


# decode_batch_records: the keyless check, compaction, markers, the offsets topic


@pytest.mark.parametrize(("length", "match"), [
    (b"\xff" * 9 + b"\x01", "record 0 length: varint longer than 5 bytes"),
    (b"\x80" * 11 + b"\x00", "record 0 length: varint longer than 5 bytes"),
    (b"\xfe\xff\xff\xff\x1f", "record 0 length: varint .* overflows"),
    (zigzag(2**31 - 1), "record 0 length 2147483647 does not fit"),
    (zigzag(-1), "record 0 length -1 does not fit"),
    (zigzag(0), "record 0 length 0 does not fit"),
])
def test_a_record_length_that_is_no_length_is_named(length: bytes, match: str) -> None:
    corrupt(raw_batch(record(body(), length) + b"\x00" * 20, 1), match)


@pytest.mark.parametrize(("fields", "match"), [
    (body(key=zigzag(-2)), "record 0 key: length -2"),
    (body(key=zigzag(2**31 - 1)), "record 0 key: length 2147483647 runs past"),
    (body(value=zigzag(-7)), "record 0 value: length -7"),
    (body(value=zigzag(200) + b"v"), "record 0 value: length 200 runs past"),
    (body(value=b"\xff" * 9 + b"\x01"), "record 0 value length: varint longer"),
    (body(headers=zigzag(2**31 - 1)), "record 0 header count 2147483647 does not fit"),
    (body(headers=zigzag(-3)), "record 0 header count -3"),
    (body(headers=zigzag(1) + zigzag(-1) + zigzag(-1)), "record 0 header key: length -1"),
    (body(headers=zigzag(1) + zigzag(1) + b"h" + zigzag(-4)), "header value: length -4"),
    (body(headers=zigzag(1) + zigzag(90) + b"h" + zigzag(-1)), "header key: length 90 runs"),
    (body() + b"extra", r"record 0 length 13 does not match its fields \(8 bytes\)"),
])
def test_a_field_length_past_its_record_is_named(fields: bytes, match: str) -> None:
    corrupt(raw_batch(record(fields), 1), match)


def test_a_huge_header_count_allocates_nothing_of_its_size() -> None:
    batch = raw_batch(record(body(headers=zigzag(2**31 - 1) + b"\x00\x00" * 8)), 1)
    with peak_allocation() as peak, pytest.raises(CorruptRecordError, match="header count"):
        decode_all(batch)
    assert peak[0] < 64 << 10


def test_the_record_count_must_match_the_records_present() -> None:
    one = record(body(value=zigzag(100) + b"v" * 100))
    corrupt(raw_batch(one, 3), "record 1 length: the varint runs past")
    corrupt(raw_batch(one * 2, 1), r"\d+ bytes after the batch's 1 records")
    corrupt(raw_batch(one, 2**31 - 1), "record count 2147483647 does not fit")
    corrupt(raw_batch(one, -1), "record count -1")
    assert len(decode_all(raw_batch(one * 2, 2))) == 2


@pytest.mark.parametrize(("cut", "match"), [(60, "shorter than the 61-byte header"),
                                            (75, "batch length .* does not fit")])
def test_a_truncated_batch_is_named(cut: int, match: str) -> None:
    corrupt(build_batch([Rec(b"v" * 30)])[:cut], match)


@pytest.mark.parametrize("codec", [5, 6, 7])
def test_an_unknown_compression_codec_is_named(codec: int) -> None:
    corrupt(raw_batch(record(body()), 1, codec=codec), f"unknown compression codec {codec}")


def _zstd_rle_bomb(blocks: int) -> bytes:
    """A zstd frame of RLE blocks: 4 bytes each, 128 KiB of output each."""
    frame = bytearray(struct.pack("<I", 0xFD2FB528)) + bytes([0x00, 0x38])
    block = ((131072 << 3) | (1 << 1)).to_bytes(3, "little") + b"\x00"
    frame += block * (blocks - 1)
    frame += ((131072 << 3) | (1 << 1) | 1).to_bytes(3, "little") + b"\x00"
    return bytes(frame)


def _gzip_of_zeros(n_mib: int) -> bytes:
    comp = zlib.compressobj(9, zlib.DEFLATED, 31)
    chunk = bytes(1 << 20)
    return b"".join(comp.compress(chunk) for _ in range(n_mib)) + comp.flush()


def _lz4_of_zeros(n_mib: int) -> bytes:
    comp = lz4.frame.LZ4FrameCompressor()
    chunk = bytes(1 << 20)
    return comp.begin() + b"".join(comp.compress(chunk) for _ in range(n_mib)) + comp.flush()


@pytest.mark.parametrize(("codec", "make", "expands_to"), [
    (ZSTD, lambda: _zstd_rle_bomb(250_000), 250_000 << 17),  # 1 MB -> 30 GiB
    (GZIP, lambda: _gzip_of_zeros(200), 200 << 20),
    (LZ4, lambda: _lz4_of_zeros(200), 200 << 20),
], ids=["zstd", "gzip", "lz4"])
def test_a_decompression_bomb_stops_at_the_limit(codec: int, make: Callable[[], bytes],
                                                 expands_to: int) -> None:
    payload = make()
    batch = raw_batch(payload, 1000, codec=codec)
    assert len(batch) <= MAX and expands_to > 2 * MIN_DECOMPRESSED_LIMIT
    validate_batches(bytearray(batch), max_batch_bytes=MAX)  # the header is fine
    with peak_allocation() as peak, pytest.raises(
            CorruptRecordError, match=f"decompress to more than {MIN_DECOMPRESSED_LIMIT}"):
        decode_all(batch)
    assert peak[0] < 2 * MIN_DECOMPRESSED_LIMIT


@pytest.mark.parametrize(("payload", "match"), [
    (b"\xff\xff\xff\xff\x0f" + b"\x00" * 40, "a block of 45 bytes announces 4294967295"),
    (b"\x82SNAPPY\x00" + struct.pack(">iii", 1, 1, 5000) + b"abc", "chunk length 5000 runs"),
    (b"\x82SNAPPY\x00" + struct.pack(">iii", 1, 1, -1), "chunk length -1 runs"),
    (b"\x82SNAPPY\x00" + struct.pack(">ii", 1, 1) + b"\x00\x01", "truncated xerial chunk"),
], ids=["lying-size", "chunk-past-end", "negative-chunk", "truncated-chunk"])
def test_snappy_sizes_are_checked_before_anything_is_allocated(payload: bytes,
                                                               match: str) -> None:
    with peak_allocation() as peak:
        corrupt(raw_batch(payload, 1, codec=SNAPPY), match)
    assert peak[0] < 64 << 10


def test_a_garbage_payload_of_each_codec_is_named() -> None:
    for codec, name in ((GZIP, "gzip"), (LZ4, "lz4"), (ZSTD, "zstd"), (SNAPPY, "snappy")):
        corrupt(raw_batch(b"\x00garbage" * 8, 1, codec=codec), f"{name} records")


# transaction markers (control batches)


def _marker(key: bytes | None, value: bytes = struct.pack(">hi", 0, 0)) -> bytes:
    return build_batch([Rec(value, key)], producer_id=5, producer_epoch=0,
                       attributes_extra=CONTROL | TRANSACTIONAL)


def test_a_marker_gives_its_type() -> None:
    assert control_type(_marker(struct.pack(">hh", 0, 1))) == 1
    assert control_type(_marker(struct.pack(">hh", 0, 0))) == 0


@pytest.mark.parametrize(("batch", "match"), [
    (_marker(None), "control record key of 0 bytes"),
    (_marker(b"\x00\x00"), "control record key of 2 bytes"),
    (_marker(struct.pack(">hh", -1, 0)), "control record key version -1"),
    (raw_batch(b"", 0, attributes=CONTROL | TRANSACTIONAL), "a control batch without"),
], ids=["null-key", "short-key", "negative-version", "no-record"])
def test_a_malformed_marker_is_named(batch: bytes, match: str) -> None:
    with pytest.raises(CorruptRecordError, match=match):
        control_type(batch)


# the offsets topic and the consumer protocol (groups/records.py)


def test_a_subscription_with_a_huge_topic_count_does_not_parse() -> None:
    metadata = struct.pack(">hi", 1, 2**31 - 1) + struct.pack(">h", 1) + b"a"
    with peak_allocation() as peak:
        assert parse_subscription_topics(metadata) is None
    assert peak[0] < 64 << 10


def test_group_metadata_with_a_huge_member_count_is_a_format_error() -> None:
    value = struct.pack(">h", 3) + struct.pack(">h", 8) + b"consumer" + struct.pack(">i", 1)
    value += struct.pack(">hhq", -1, -1, 0) + struct.pack(">i", 2**31 - 1) + b"\x00" * 30
    with pytest.raises(RecordFormatError, match="array count 2147483647"):
        decode_group_metadata_value(value)


def test_a_flexible_value_with_a_huge_tagged_field_count_is_a_format_error() -> None:
    value = struct.pack(">hqi", 4, 42, 3) + b"\x01" + struct.pack(">q", 7) + b"\xff\xff\xff\x7f"
    with pytest.raises(RecordFormatError, match="tagged field count"):
        decode_offset_commit_value(value)


@settings(max_examples=400, deadline=None)
@given(data=st.binary(max_size=200))
def test_offsets_topic_decoders_raise_only_their_format_error(data: bytes) -> None:
    for decoder in (decode_key, decode_offset_commit_value, decode_group_metadata_value):
        with suppress(RecordFormatError):
            decoder(data)
    result = parse_subscription_topics(data)
    assert result is None or all(isinstance(t, str) for t in result)


# compaction reads what clients wrote to a topic before it was made compacted


@pytest.mark.parametrize(("hostile", "match"), [
    (raw_batch(_zstd_rle_bomb(2_000), 10, codec=ZSTD), "decompress to more than"),
    (raw_batch(record(body(headers=zigzag(2**31 - 1))), 1), "header count 2147483647"),
    (raw_batch(record(body(key=zigzag(-5))), 1), "record 0 key: length -5"),
], ids=["zstd-bomb", "header-count", "key-length"])
def test_compaction_of_a_hostile_batch_fails_naming_it(tmp_path: Path, hostile: bytes,
                                                       match: str,
                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(records_module, "decompressed_limit", _small_limit)
    plog = PartitionLog.open(str(tmp_path), "t", 0, TopicConfig({"cleanup.policy": "compact"}),
                             True, TS)
    for batch in (build_batch([Rec(b"v", b"k")] * 3), hostile, build_batch([Rec(b"w", b"k")])):
        buf = bytearray(batch)
        headers = [h for _, h in iter_batches(buf)]
        plog.append(buf, ValidatedBatches(headers, [0], headers[0].record_count, TS, 0), TS)
    plog._roll(plog.log_end_offset, TS)
    plan = plan_cleaning(plog, TS, force=True)
    assert plan is not None
    with pytest.raises(CompactionError, match=f"batch at offset 3: .*{match}"):
        clean(plan)
    plog.close()
