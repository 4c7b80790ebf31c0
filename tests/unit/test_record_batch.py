"""validate_batches error codes and record decoding, against batches built from the spec."""

from __future__ import annotations

import struct

import pytest
from batch_builder import (
    GZIP,
    LZ4,
    NONE,
    SNAPPY,
    ZSTD,
    Rec,
    build_batch,
    decode_records,
    recrc,
)
from hypothesis import given, settings
from hypothesis import strategies as st

from eddy.protocol.errors import ErrorCode, KafkaError
from eddy.protocol.record_batch import validate_batches
from eddy.protocol.records import decode_batch_records

MAX = 1_048_588


def _code(data: bytes, max_batch_bytes: int = MAX) -> ErrorCode:
    with pytest.raises(KafkaError) as info:
        validate_batches(bytearray(data), max_batch_bytes=max_batch_bytes)
    return info.value.code


def _batch(n: int = 3, **kw) -> bytes:  # type: ignore[no-untyped-def]
    return build_batch([Rec(f"v{i}".encode(), f"k{i}".encode()) for i in range(n)], **kw)


# ---- valid input ---------------------------------------------------------------------------


def test_valid_batches_are_accepted_with_positions_and_counts() -> None:
    a = _batch(3, base_timestamp=1000)
    b = _batch(5, base_timestamp=2000)
    v = validate_batches(bytearray(a + b), max_batch_bytes=MAX)
    assert v.positions == [0, len(a)]
    assert [h.record_count for h in v.headers] == [3, 5]
    assert v.record_count == 8
    assert v.max_timestamp == 2000


def test_own_builder_agrees_with_the_spec_example() -> None:
    # the builder's CRC must be CRC32C over attributes..end, batchLength from the epoch on
    batch = _batch(2)
    (length,) = struct.unpack_from(">i", batch, 8)
    assert length + 12 == len(batch)
    assert recrc(batch) == batch


# ---- error codes ---------------------------------------------------------------------------


@pytest.mark.parametrize("where", [21, 40, 61, -1])
def test_bad_crc_is_corrupt_message(where: int) -> None:
    data = bytearray(_batch(4))
    data[where] ^= 0x01
    assert _code(bytes(data)) == ErrorCode.corrupt_message


def test_wrong_crc_field_is_corrupt_message() -> None:
    data = bytearray(_batch(4))
    data[17] ^= 0x80
    assert _code(bytes(data)) == ErrorCode.corrupt_message


def test_bad_crc_in_second_batch_rejects_the_request() -> None:
    second = bytearray(_batch(2))
    second[-1] ^= 0xFF
    assert _code(_batch(3) + bytes(second)) == ErrorCode.corrupt_message


@pytest.mark.parametrize("magic", [0, 1])
def test_old_magic_is_rejected(magic: int) -> None:
    # Kafka answers produce v3+ with magic < 2 with INVALID_RECORD
    # (ProduceRequest.validateRecords); UNSUPPORTED_FOR_MESSAGE_FORMAT is also a refusal.
    code = _code(_batch(2, magic=magic))
    assert code == ErrorCode.invalid_record


@pytest.mark.parametrize("magic", [3, 0x7F])
def test_future_magic_is_rejected(magic: int) -> None:
    assert _code(_batch(2, magic=magic)) != ErrorCode.none


@pytest.mark.parametrize("cut", [1, 11, 12, 16, 17, 30, 60, 61, 62])
def test_truncated_batch_is_corrupt_message(cut: int) -> None:
    data = _batch(3)
    assert _code(data[:cut]) == ErrorCode.corrupt_message


def test_truncated_last_byte_is_corrupt_message() -> None:
    data = _batch(3)
    assert _code(data[:-1]) == ErrorCode.corrupt_message


def test_truncated_second_batch_is_corrupt_message() -> None:
    b = _batch(3)
    assert _code(_batch(2) + b[: len(b) // 2]) == ErrorCode.corrupt_message


def test_batch_length_smaller_than_a_header_is_corrupt_message() -> None:
    data = bytearray(_batch(3))
    struct.pack_into(">i", data, 8, 20)
    assert _code(bytes(data)) == ErrorCode.corrupt_message


def test_negative_batch_length_is_corrupt_message() -> None:
    data = bytearray(_batch(3))
    struct.pack_into(">i", data, 8, -5)
    assert _code(bytes(data)) == ErrorCode.corrupt_message


def test_batch_bigger_than_max_is_message_too_large() -> None:
    data = build_batch([Rec(b"x" * 2000)])
    assert _code(data, max_batch_bytes=1000) == ErrorCode.message_too_large
    # exactly at the limit is fine
    validate_batches(bytearray(data), max_batch_bytes=len(data))
    assert _code(data, max_batch_bytes=len(data) - 1) == ErrorCode.message_too_large


@pytest.mark.parametrize(("count", "lod"), [(5, 2), (2, 2), (0, -1), (3, 3), (-1, 2)])
def test_record_count_mismatch_is_invalid_record(count: int, lod: int) -> None:
    data = _batch(3, record_count=count, last_offset_delta=lod)
    assert _code(data) == ErrorCode.invalid_record


def test_control_batch_from_a_client_is_invalid_record() -> None:
    assert _code(_batch(1, attributes_extra=0x20)) == ErrorCode.invalid_record


def test_unknown_compression_codec_is_rejected() -> None:
    data = bytearray(_batch(2))
    struct.pack_into(">h", data, 21, 5)
    code = _code(recrc(data))
    assert code in (ErrorCode.invalid_record, ErrorCode.corrupt_message,
                    ErrorCode.unsupported_compression_type)


def test_empty_payload_is_rejected() -> None:
    assert _code(b"") != ErrorCode.none


# ---- decoding ------------------------------------------------------------------------------

_bytes = st.one_of(st.none(), st.binary(max_size=64))
_header = st.tuples(st.text(max_size=8), _bytes)
_record = st.builds(
    Rec,
    value=_bytes,
    key=_bytes,
    headers=st.lists(_header, max_size=3).map(tuple),
    timestamp_delta=st.integers(0, 10**9),
)


@settings(max_examples=80, deadline=None)
@given(
    records=st.lists(_record, min_size=1, max_size=20),
    base_offset=st.integers(0, 2**40),
    base_ts=st.integers(0, 2**42),
    codec=st.sampled_from([NONE, GZIP, SNAPPY, LZ4, ZSTD]),
)
def test_built_batches_validate_and_decode(
    records: list[Rec], base_offset: int, base_ts: int, codec: int
) -> None:
    data = build_batch(records, base_offset=base_offset, base_timestamp=base_ts,
                       compression=codec)
    v = validate_batches(bytearray(data), max_batch_bytes=len(data))
    assert v.record_count == len(records)
    assert v.headers[0].compression == codec
    got = list(decode_batch_records(data))
    assert [r.offset for r in got] == [base_offset + i for i in range(len(records))]
    assert [r.timestamp for r in got] == [base_ts + r.timestamp_delta for r in records]
    assert [r.key for r in got] == [r.key for r in records]
    assert [r.value for r in got] == [r.value for r in records]
    assert [tuple(h) for r in got for h in r.headers] == [h for r in records for h in r.headers]
    # and the test's own decoder agrees
    assert [(r.offset, r.key, r.value) for r in decode_records(data)] == [
        (r.offset, r.key, r.value) for r in got
    ]


@pytest.mark.parametrize(
    ("codec", "xerial"),
    [(GZIP, False), (SNAPPY, False), (SNAPPY, True), (LZ4, False), (ZSTD, False)],
)
def test_compressed_batches_decode(codec: int, xerial: bool) -> None:
    records = [Rec(f"value-{i}".encode() * 50, f"key-{i}".encode(),
                   (("h", b"1"),), timestamp_delta=i) for i in range(200)]
    data = build_batch(records, compression=codec, xerial=xerial, base_offset=7)
    assert len(data) < sum(len(r.value or b"") for r in records)  # really compressed
    validate_batches(bytearray(data), max_batch_bytes=MAX)
    got = list(decode_batch_records(data))
    assert len(got) == 200
    assert got[0].offset == 7 and got[-1].offset == 206
    assert [r.value for r in got] == [r.value for r in records]
    assert [r.key for r in got] == [r.key for r in records]
    assert got[5].headers == (("h", b"1"),)


def test_log_append_time_batch_decodes_with_max_timestamp() -> None:
    data = build_batch([Rec(b"a", timestamp_delta=1), Rec(b"b", timestamp_delta=2)],
                       base_timestamp=100, max_timestamp=999, attributes_extra=0x08)
    assert [r.timestamp for r in decode_batch_records(data)] == [999, 999]
