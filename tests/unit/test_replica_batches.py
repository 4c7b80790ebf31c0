"""A follower's checks of the batches its leader sends (no offset assignment, so every
batch is checked to continue the log)."""

from __future__ import annotations

import struct

import pytest
from batch_builder import build_batch
from hypothesis import given
from hypothesis import strategies as st

from eddy.protocol.errors import ErrorCode, KafkaError
from eddy.protocol.replica_batches import check_replica_batches


def batches(start: int, sizes: list[int], epoch: int = 3) -> bytes:
    out = b""
    offset = start
    for n in sizes:
        out += build_batch([b"v%d" % i for i in range(n)], base_offset=offset,
                           partition_leader_epoch=epoch)
        offset += n
    return out


def test_whole_batches_continuing_the_log_are_taken() -> None:
    data = batches(10, [2, 3, 1])
    checked = check_replica_batches(data, 10, 1 << 20)
    assert [h.base_offset for h in checked.headers] == [10, 12, 15]
    assert checked.length == len(data)
    assert checked.record_count == 6
    assert checked.next_offset == 16


def test_a_cut_last_batch_is_left_for_the_next_fetch() -> None:
    data = batches(0, [2, 2])
    first = len(batches(0, [2]))
    for cut in (first + 1, first + 30, len(data) - 1):
        checked = check_replica_batches(data[:cut], 0, 1 << 20)
        assert checked.length == first
        assert checked.next_offset == 2


def test_empty_and_tiny_inputs_take_nothing() -> None:
    for data in (b"", b"\0" * 10):
        assert check_replica_batches(data, 0, 1 << 20).headers == []


@pytest.mark.parametrize("fetch_offset", [0, 5, 11])
def test_a_gap_or_overlap_is_refused(fetch_offset: int) -> None:
    data = batches(10, [2])
    with pytest.raises(KafkaError) as info:
        check_replica_batches(data, fetch_offset, 1 << 20)
    assert info.value.code == ErrorCode.corrupt_message
    assert "base offset 10" in info.value.message


def test_a_gap_between_batches_is_refused() -> None:
    data = batches(0, [2]) + batches(5, [1])
    with pytest.raises(KafkaError, match="expected 2"):
        check_replica_batches(data, 0, 1 << 20)


def test_bad_crc_magic_and_counts_are_refused() -> None:
    good = bytearray(batches(0, [3]))
    bad_crc = bytearray(good)
    bad_crc[-1] ^= 0xFF
    with pytest.raises(KafkaError, match="CRC32C"):
        check_replica_batches(bad_crc, 0, 1 << 20)
    bad_magic = bytearray(good)
    bad_magic[16] = 1
    with pytest.raises(KafkaError, match="magic"):
        check_replica_batches(bad_magic, 0, 1 << 20)
    mismatch = build_batch([b"a", b"b"], record_count=2, last_offset_delta=5)
    with pytest.raises(KafkaError, match="disagree"):
        check_replica_batches(mismatch, 0, 1 << 20)
    short = bytearray(good)
    struct.pack_into(">i", short, 8, 5)
    with pytest.raises(KafkaError, match="too small"):
        check_replica_batches(short, 0, 1 << 20)


def test_a_batch_over_the_cap_is_refused() -> None:
    data = batches(0, [50])
    with pytest.raises(KafkaError, match="over the"):
        check_replica_batches(data, 0, 100)


@given(st.binary(max_size=400), st.integers(min_value=0, max_value=50))
def test_garbage_raises_kafka_errors_only(data: bytes, offset: int) -> None:
    try:
        checked = check_replica_batches(data, offset, 1 << 20)
    except KafkaError as exc:
        assert exc.code == ErrorCode.corrupt_message
    else:
        assert checked.length <= len(data)


@given(st.lists(st.integers(min_value=1, max_value=5), max_size=6),
       st.integers(min_value=0, max_value=1000), st.data())
def test_any_prefix_of_a_good_log_yields_whole_batches(sizes: list[int], start: int,
                                                        data: st.DataObject) -> None:
    log = batches(start, sizes)
    cut = data.draw(st.integers(min_value=0, max_value=len(log)))
    checked = check_replica_batches(log[:cut], start, 1 << 20)
    assert checked.length <= cut
    assert check_replica_batches(log[: checked.length], start, 1 << 20).length == \
        checked.length
