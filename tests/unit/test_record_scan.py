"""The compiled keyless-record scan (eddy.protocol.record_scan) agrees with the Python
record decoder (records.iter_records) on every input: the same keyless records for a good
records section, an error for exactly the sections the decoder rejects."""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from eddy.protocol.record_scan import keyless_records
from eddy.protocol.records import CorruptRecordError, iter_records, write_varint

SETTINGS = settings(max_examples=300, deadline=None, database=None, derandomize=True,
                    suppress_health_check=[HealthCheck.too_slow])


def record(key: bytes | None, value: bytes | None,
           headers: tuple[tuple[bytes, bytes | None], ...] = ()) -> bytes:
    body = bytearray(b"\x00")  # attributes
    body += write_varint(3) + write_varint(1)  # timestamp delta, offset delta
    for field in (key, value):
        body += write_varint(-1) if field is None else write_varint(len(field)) + field
    body += write_varint(len(headers))
    for hk, hv in headers:
        body += write_varint(len(hk)) + hk
        body += write_varint(-1) if hv is None else write_varint(len(hv)) + hv
    return write_varint(len(body)) + bytes(body)


def python_keyless(payload: bytes, count: int) -> list[int] | str:
    try:
        return [i for i, r in enumerate(iter_records(payload, count)) if r.key is None]
    except CorruptRecordError:
        return "corrupt"


def compiled_keyless(payload: bytes, count: int) -> list[int] | str:
    try:
        total, listed = keyless_records(payload, count)
    except CorruptRecordError:
        return "corrupt"
    assert total == len(listed)
    return listed


RECORDS = st.lists(
    st.tuples(
        st.none() | st.binary(max_size=20),
        st.none() | st.binary(max_size=40),
        st.lists(st.tuples(st.binary(max_size=8), st.none() | st.binary(max_size=8)),
                 max_size=3).map(tuple),
    ),
    max_size=12,
)


@SETTINGS
@given(RECORDS)
def test_good_sections_give_the_same_keyless_records(recs: list) -> None:  # type: ignore[type-arg]
    payload = b"".join(record(k, v, h) for k, v, h in recs)
    expected = [i for i, (k, _v, _h) in enumerate(recs) if k is None]
    assert keyless_records(payload, len(recs)) == (len(expected), expected)
    assert keyless_records(payload, len(recs), 2) == (len(expected), expected[:2])
    assert python_keyless(payload, len(recs)) == expected


_EXTREMES = [b"\x00", b"\x01", b"\x7f", b"\xff\xff\xff\xff\x0f", b"\xff" * 10 + b"\x01",
             b"\x80\x80\x80\x80\x10", b"\xfe\xff\xff\xff\x0f"]


@SETTINGS
@given(RECORDS, st.data())
def test_mutated_sections_agree_with_the_python_decoder(recs: list, data: st.DataObject  # type: ignore[type-arg]
                                                        ) -> None:
    payload = bytearray(b"".join(record(k, v, h) for k, v, h in recs))
    count = len(recs) + data.draw(st.sampled_from([0, 0, 0, 1, -1, 1 << 31]))
    for _ in range(data.draw(st.integers(0, 3))):
        if not payload:
            break
        at = data.draw(st.integers(0, len(payload) - 1))
        patch = data.draw(st.sampled_from(_EXTREMES) | st.binary(min_size=1, max_size=3))
        payload[at:at + len(patch)] = patch
    if data.draw(st.booleans()) and payload:
        del payload[data.draw(st.integers(0, len(payload) - 1)):]
    assert compiled_keyless(bytes(payload), count) == python_keyless(bytes(payload), count)


def test_errors_name_the_record_and_field() -> None:
    good = record(b"k", b"v")
    bad = good[:4] + write_varint(-5) + good[5:]  # length, attributes, two deltas, key
    with pytest.raises(CorruptRecordError, match="record 1 key: length -5"):
        keyless_records(good + bad, 2)
    with pytest.raises(CorruptRecordError, match="record count 9"):
        keyless_records(good, 9)
    with pytest.raises(CorruptRecordError, match="bytes after"):
        keyless_records(good + good, 1)


def test_millions_of_empty_records() -> None:
    """What a 1.4 KB zstd batch can expand to: 2M empty records (the Python decoder needs
    ~9 s for them, on the event loop; bench/keyless.py times both)."""
    payload = record(None, None) * 1_000_000 + record(b"k", None) * 1_000_000
    assert keyless_records(payload, 2_000_000) == (1_000_000, list(range(1_000_000)))
    assert keyless_records(payload, 2_000_000, 5) == (1_000_000, list(range(5)))
