"""Segment and partition log: append/read, rolling, time lookup, retention, recovery."""

from __future__ import annotations

import os
import random
import struct
from pathlib import Path

import pytest
from batch_builder import Rec, build_batch, parse_batches, values_in

from eddy.log.config import TopicConfig
from eddy.log.partition import PartitionLog
from eddy.protocol.errors import ErrorCode, KafkaError
from eddy.protocol.record_batch import validate_batches

NOW = 1_700_000_000_000
BIG = 1 << 30


# ---- helpers -------------------------------------------------------------------------------


def open_log(d: Path, clean: bool = True, now: int = NOW, **configs: str) -> PartitionLog:
    cfg = TopicConfig({k.replace("_", "."): v for k, v in configs.items()})
    return PartitionLog.open(str(d), "t", 0, cfg, clean, now)


def append(plog: PartitionLog, values: list[bytes], ts: int = NOW, now: int | None = None,
           ) -> tuple[int, int]:
    data = bytearray(build_batch([Rec(v) for v in values], base_timestamp=ts))
    v = validate_batches(data, max_batch_bytes=plog.config.max_message_bytes)
    r = plog.append(data, v, ts if now is None else now)
    return r.base_offset, r.last_offset


def fill(plog: PartitionLog, n_batches: int, per_batch: int = 3, ts: int = NOW,
         size: int = 20) -> list[bytes]:
    """n_batches batches of per_batch numbered values; returns all values in offset order."""
    out: list[bytes] = []
    for _ in range(n_batches):
        vals = [f"{len(out) + i:08d}".encode().ljust(size, b".") for i in range(per_batch)]
        append(plog, vals, ts)
        out += vals
    return out


def read_all(plog: PartitionLog, start: int | None = None) -> list[tuple[int, bytes | None]]:
    """Every record from start (default: log start) to the end, segment by segment."""
    offset = plog.log_start_offset if start is None else start
    out: list[tuple[int, bytes | None]] = []
    for _ in range(10_000):
        if offset >= plog.log_end_offset:
            break
        sl = plog.read(offset, BIG, plog.log_end_offset, True)
        assert sl is not None, f"nothing read at {offset} below LEO {plog.log_end_offset}"
        recs = values_in(sl.read())
        assert recs, f"empty read at {offset}"
        out += [(o, v) for o, v in recs if o >= offset]
        offset = recs[-1][0] + 1
    return out


def log_files(d: Path, ext: str = ".log") -> list[Path]:
    return sorted(p for p in d.iterdir() if p.name.endswith(ext))


def batches_on_disk(d: Path) -> list[tuple[Path, int, int, int]]:
    """(file, position, size, base offset) of every batch in every .log file."""
    out = []
    for f in log_files(d):
        for b in parse_batches(f.read_bytes()):
            out.append((f, b.position, b.size, b.base_offset))
    return out


def expect(values: list[bytes], start: int = 0) -> list[tuple[int, bytes | None]]:
    return list(enumerate(values))[start:]


# ---- append and read -----------------------------------------------------------------------


def test_append_read_round_trip(tmp_path: Path) -> None:
    plog = open_log(tmp_path)
    sizes = [1, 3, 7, 2, 5]
    values: list[bytes] = []
    for i, n in enumerate(sizes):
        vals = [f"b{i}-r{j}".encode() for j in range(n)]
        base, last = append(plog, vals)
        assert (base, last) == (len(values), len(values) + n - 1)
        values += vals
    assert plog.log_end_offset == sum(sizes) == plog.high_watermark
    sl = plog.read(0, BIG, plog.log_end_offset, False)
    assert sl is not None
    raw = sl.read()
    batches = parse_batches(raw)
    assert [b.base_offset for b in batches] == [0, 1, 4, 11, 13]
    assert all(b.crc_ok for b in batches)  # base offset patching keeps the CRC valid
    assert values_in(raw) == expect(values)


def test_stored_bytes_are_the_produced_bytes(tmp_path: Path) -> None:
    plog = open_log(tmp_path)
    append(plog, [b"x"])
    produced = build_batch([Rec(b"a", b"k", (("h", b"v"),)), Rec(None, b"k2")],
                           base_timestamp=NOW)
    data = bytearray(produced)
    plog.append(data, validate_batches(data, max_batch_bytes=BIG), NOW)
    sl = plog.read(1, BIG, plog.log_end_offset, True)
    assert sl is not None
    stored = sl.read()
    # only baseOffset (bytes 0..7) and partitionLeaderEpoch (12..15) may differ
    assert stored[8:12] == produced[8:12] and stored[16:] == produced[16:]
    assert struct.unpack_from(">q", stored, 0)[0] == 1


def test_read_inside_a_batch_returns_that_whole_batch(tmp_path: Path) -> None:
    plog = open_log(tmp_path)
    values = fill(plog, 4, per_batch=5)  # batches at 0, 5, 10, 15
    for offset in range(20):
        sl = plog.read(offset, BIG, plog.log_end_offset, True)
        assert sl is not None
        batches = parse_batches(sl.read(), strict=False)
        assert batches[0].base_offset == offset - offset % 5, offset
        assert batches[0].record_count == 5
        got = values_in(b"".join(b.raw for b in batches))
        assert got == expect(values, offset - offset % 5)


def test_read_returns_one_whole_batch_when_max_bytes_is_smaller(tmp_path: Path) -> None:
    plog = open_log(tmp_path)
    fill(plog, 3, per_batch=10, size=100)
    first = parse_batches(plog.read(0, BIG, 30, True).read())  # type: ignore[union-attr]
    for offset in (0, 10, 15, 29):
        for max_bytes in (0, 1, 60, first[1].size - 1):
            sl = plog.read(offset, max_bytes, plog.log_end_offset, True)
            assert sl is not None, (offset, max_bytes)
            batches = parse_batches(sl.read())
            assert len(batches) == 1
            assert batches[0].base_offset == offset - offset % 10
            assert batches[0].crc_ok


def test_read_without_min_one_never_exceeds_max_bytes(tmp_path: Path) -> None:
    plog = open_log(tmp_path)
    fill(plog, 3, per_batch=10, size=100)
    for max_bytes in (1, 100, 2000):
        sl = plog.read(0, max_bytes, plog.log_end_offset, False)
        assert sl is None or len(sl.read()) <= max_bytes


def test_read_stops_at_max_offset(tmp_path: Path) -> None:
    plog = open_log(tmp_path)
    values = fill(plog, 4, per_batch=5)
    sl = plog.read(0, BIG, 10, True)  # e.g. the high watermark or last stable offset
    assert sl is not None
    assert values_in(sl.read()) == expect(values)[:10]
    assert plog.read(10, BIG, 10, True) is None
    assert plog.read(20, BIG, 20, True) is None  # at the log end: nothing, not an error


def test_offset_out_of_range(tmp_path: Path) -> None:
    plog = open_log(tmp_path, segment_bytes="300")
    fill(plog, 10)
    leo = plog.log_end_offset
    for bad in (leo + 1, leo + 1000, -1):
        with pytest.raises(KafkaError) as info:
            plog.read(bad, BIG, leo, True)
        assert info.value.code == ErrorCode.offset_out_of_range
    plog.set_log_start_offset(7)
    assert plog.log_start_offset == 7
    for bad in (0, 6):
        with pytest.raises(KafkaError) as info:
            plog.read(bad, BIG, leo, True)
        assert info.value.code == ErrorCode.offset_out_of_range
    sl = plog.read(7, BIG, leo, True)
    assert sl is not None
    # 7 is inside the batch [6, 8]: that whole batch comes back
    assert parse_batches(sl.read(), strict=False)[0].base_offset == 6


# ---- rolling -------------------------------------------------------------------------------


def test_roll_by_segment_bytes(tmp_path: Path) -> None:
    plog = open_log(tmp_path, segment_bytes="500")
    values = fill(plog, 20)
    assert len(plog.segments) > 3
    files = log_files(tmp_path)
    assert len(files) == len(plog.segments)
    for f in files:
        assert len(f.name) == len("00000000000000000000.log")
        assert 0 < f.stat().st_size <= 500
        first = parse_batches(f.read_bytes())[0]
        assert int(f.name[:20]) == first.base_offset  # named by its first offset
    # every batch is whole in exactly one segment, offsets contiguous across files
    bases = [b for _f, _p, _s, b in batches_on_disk(tmp_path)]
    assert bases == list(range(0, 60, 3))
    assert read_all(plog) == expect(values)
    # a read at a segment's first offset and one just before it
    second = int(files[1].name[:20])
    sl = plog.read(second - 1, BIG, plog.log_end_offset, True)
    assert sl is not None and parse_batches(sl.read())[0].base_offset == second - 3
    sl = plog.read(second, BIG, plog.log_end_offset, True)
    assert sl is not None and parse_batches(sl.read())[0].base_offset == second


def test_roll_by_segment_ms_uses_injected_time(tmp_path: Path) -> None:
    plog = open_log(tmp_path, segment_ms="1000")
    append(plog, [b"a"], ts=NOW)
    append(plog, [b"b"], ts=NOW + 999)
    assert len(plog.segments) == 1
    append(plog, [b"c"], ts=NOW + 1000)
    assert len(plog.segments) == 2
    assert plog.active.base_offset == 2
    append(plog, [b"d"], ts=NOW + 1500)
    assert len(plog.segments) == 2
    append(plog, [b"e"], ts=NOW + 2100)
    assert [s.base_offset for s in plog.segments] == [0, 2, 4]
    assert [int(f.name[:20]) for f in log_files(tmp_path)] == [0, 2, 4]
    assert read_all(plog) == expect([b"a", b"b", b"c", b"d", b"e"])


def test_no_time_roll_while_time_stands_still(tmp_path: Path) -> None:
    plog = open_log(tmp_path, segment_ms="1000")
    for _ in range(50):
        append(plog, [b"x"], ts=NOW + 10)
    assert len(plog.segments) == 1


# ---- offset for timestamp ------------------------------------------------------------------


def test_offset_for_timestamp_across_segments(tmp_path: Path) -> None:
    plog = open_log(tmp_path, segment_bytes="250", index_interval_bytes="1")
    # batch i (2 records) at offsets 2i, 2i+1 with timestamp NOW + 10*i
    for i in range(30):
        append(plog, [b"x" * 10, b"y" * 10], ts=NOW + 10 * i)
    assert len(plog.segments) > 3
    for i in range(30):
        bp = plog.offset_for_timestamp(NOW + 10 * i)
        assert bp is not None and bp.base_offset == 2 * i, i
        bp = plog.offset_for_timestamp(NOW + 10 * i - 5)
        assert bp is not None and bp.base_offset == 2 * i, i
    bp = plog.offset_for_timestamp(0)
    assert bp is not None and bp.base_offset == 0
    assert plog.offset_for_timestamp(NOW + 291) is None


def test_offset_for_timestamp_with_out_of_order_timestamps(tmp_path: Path) -> None:
    plog = open_log(tmp_path, segment_bytes="200", index_interval_bytes="1")
    stamps = [100, 300, 200, 400, 250, 500]
    for ts in stamps:
        append(plog, [b"v" * 20], ts=NOW + ts, now=NOW + 1000)
    # the earliest offset whose timestamp is at least the target
    for target, offset in [(50, 0), (100, 0), (150, 1), (300, 1), (301, 3), (260, 1),
                           (450, 5), (500, 5)]:
        bp = plog.offset_for_timestamp(NOW + target)
        assert bp is not None and bp.base_offset == offset, target
    assert plog.offset_for_timestamp(NOW + 501) is None


def test_offset_for_timestamp_respects_log_start(tmp_path: Path) -> None:
    plog = open_log(tmp_path, segment_bytes="200")
    for i in range(10):
        append(plog, [b"v" * 20], ts=NOW + i)
    plog.set_log_start_offset(4)
    bp = plog.offset_for_timestamp(0)
    assert bp is not None and bp.last_offset >= 4


# ---- retention -----------------------------------------------------------------------------


def test_retention_by_time_deletes_whole_old_segments(tmp_path: Path) -> None:
    plog = open_log(tmp_path, segment_bytes="300", retention_ms="10000")
    old = fill(plog, 9, ts=NOW - 60_000)
    boundary = plog.log_end_offset
    new = fill(plog, 9, ts=NOW)
    files_before = log_files(tmp_path)
    assert plog.apply_retention(NOW) > 0
    # every segment holding only old batches is gone; segments with recent data stay
    assert all(s.max_timestamp >= NOW - 10_000 for s in plog.segments)
    assert plog.log_start_offset == plog.segments[0].base_offset <= boundary
    assert plog.log_start_offset > 0
    files_after = log_files(tmp_path)
    assert files_after == files_before[len(files_before) - len(files_after):]
    assert {p.name[:20] for p in tmp_path.iterdir() if p.suffix in (".idx", ".timeidx")} <= {
        f.name[:20] for f in files_after}
    everything = old + new
    assert read_all(plog) == expect(everything, plog.log_start_offset)
    with pytest.raises(KafkaError) as info:
        plog.read(plog.log_start_offset - 1, BIG, plog.log_end_offset, True)
    assert info.value.code == ErrorCode.offset_out_of_range
    # nothing more to delete
    assert plog.apply_retention(NOW) == 0


def test_retention_by_time_never_deletes_the_active_segment(tmp_path: Path) -> None:
    plog = open_log(tmp_path, segment_bytes="300", retention_ms="10000")
    values = fill(plog, 10, ts=NOW - 60_000)
    leo = plog.log_end_offset
    active_base = plog.active.base_offset
    plog.apply_retention(NOW)
    assert plog.segments[-1].base_offset == active_base
    assert plog.log_end_offset == leo
    assert plog.log_start_offset == active_base
    assert read_all(plog) == expect(values, active_base)
    # appends continue at the end
    assert append(plog, [b"next"])[0] == leo


def test_retention_by_size(tmp_path: Path) -> None:
    plog = open_log(tmp_path, segment_bytes="300", retention_bytes="1000")
    values = fill(plog, 30)
    total = plog.size_bytes
    assert total > 2000
    plog.apply_retention(NOW)
    remaining = plog.size_bytes
    assert remaining >= 1000 or len(plog.segments) == 1
    # no further segment could be deleted without going under retention.bytes
    assert remaining - plog.segments[0].size < 1000
    assert plog.log_start_offset == plog.segments[0].base_offset > 0
    assert sum(f.stat().st_size for f in log_files(tmp_path)) == remaining
    assert read_all(plog) == expect(values, plog.log_start_offset)


def test_retention_by_size_never_deletes_the_active_segment(tmp_path: Path) -> None:
    plog = open_log(tmp_path, segment_bytes="300", retention_bytes="0")
    values = fill(plog, 10)
    active_base = plog.active.base_offset
    plog.apply_retention(NOW)
    assert len(plog.segments) == 1 and plog.active.base_offset == active_base
    assert read_all(plog) == expect(values, active_base)


def test_retention_off_keeps_everything(tmp_path: Path) -> None:
    plog = open_log(tmp_path, segment_bytes="300", retention_ms="-1", retention_bytes="-1")
    values = fill(plog, 10, ts=NOW - 10**10)
    assert plog.apply_retention(NOW) == 0
    assert read_all(plog) == expect(values)


def test_log_start_offset_survives_reopen(tmp_path: Path) -> None:
    plog = open_log(tmp_path, segment_bytes="300", retention_bytes="1000")
    values = fill(plog, 30)
    plog.apply_retention(NOW)
    start, leo = plog.log_start_offset, plog.log_end_offset
    plog.close()
    for clean in (True, False):
        plog = open_log(tmp_path, clean=clean, segment_bytes="300", retention_bytes="1000")
        assert (plog.log_start_offset, plog.log_end_offset) == (start, leo)
        assert read_all(plog) == expect(values, start)
        plog.close()


# ---- reopen and recovery -------------------------------------------------------------------


@pytest.mark.parametrize("clean", [True, False])
def test_reopen_restores_log_end_offset(tmp_path: Path, clean: bool) -> None:
    plog = open_log(tmp_path, segment_bytes="400")
    values = fill(plog, 15)
    leo = plog.log_end_offset
    plog.close()
    sizes = {f.name: f.stat().st_size for f in log_files(tmp_path)}
    plog = open_log(tmp_path, clean=clean, segment_bytes="400")
    assert plog.log_end_offset == leo == plog.high_watermark
    assert {f.name: f.stat().st_size for f in log_files(tmp_path)} == sizes  # nothing cut
    assert read_all(plog) == expect(values)
    assert append(plog, [b"after"])[0] == leo
    plog.close()
    plog = open_log(tmp_path, clean=True, segment_bytes="400")
    assert read_all(plog) == expect([*values, b"after"])


def test_reopen_empty_log(tmp_path: Path) -> None:
    open_log(tmp_path).close()
    plog = open_log(tmp_path, clean=False)
    assert plog.log_end_offset == 0
    assert append(plog, [b"a"])[0] == 0


def _last_batch(d: Path) -> tuple[Path, int, int, int]:
    return batches_on_disk(d)[-1]


@pytest.mark.parametrize("cut", ["header", "mid", "last-byte", "one-byte"])
def test_torn_tail_is_truncated_on_unclean_reopen(tmp_path: Path, cut: str) -> None:
    plog = open_log(tmp_path, segment_bytes="1000")
    values = fill(plog, 12)
    plog.close()
    f, pos, size, base = _last_batch(tmp_path)
    keep = {"header": pos + 30, "mid": pos + size // 2, "last-byte": pos + size - 1,
            "one-byte": pos + 1}[cut]
    os.truncate(f, keep)
    plog = open_log(tmp_path, clean=False, segment_bytes="1000")
    assert plog.log_end_offset == base
    assert f.stat().st_size == pos  # the torn bytes are gone from the file
    assert read_all(plog) == expect(values)[:base]
    assert append(plog, [b"new1", b"new2"]) == (base, base + 1)
    assert read_all(plog) == expect([*values[:base], b"new1", b"new2"])
    plog.close()
    plog = open_log(tmp_path, clean=False, segment_bytes="1000")
    assert read_all(plog) == expect([*values[:base], b"new1", b"new2"])


def test_torn_tail_is_truncated_even_after_a_clean_marker(tmp_path: Path) -> None:
    """A file whose size does not end on a batch boundary is never trusted."""
    plog = open_log(tmp_path)
    values = fill(plog, 5)
    plog.close()
    f, pos, size, base = _last_batch(tmp_path)
    os.truncate(f, pos + size // 2)
    plog = open_log(tmp_path, clean=True)
    assert plog.log_end_offset == base
    assert read_all(plog) == expect(values)[:base]
    assert append(plog, [b"n"])[0] == base


@pytest.mark.parametrize("where", [11, 16, 17, 21, 25, 40, 58, 61, -1])
def test_flipped_byte_in_last_batch_is_truncated(tmp_path: Path, where: int) -> None:
    plog = open_log(tmp_path, segment_bytes="1000")
    values = fill(plog, 12)
    plog.close()
    f, pos, size, base = _last_batch(tmp_path)
    data = bytearray(f.read_bytes())
    data[pos + where if where >= 0 else pos + size + where] ^= 0x10
    f.write_bytes(bytes(data))
    plog = open_log(tmp_path, clean=False, segment_bytes="1000")
    assert plog.log_end_offset == base
    assert read_all(plog) == expect(values)[:base]
    assert all(b.crc_ok for b in parse_batches(f.read_bytes()))
    assert append(plog, [b"new"])[0] == base
    assert read_all(plog) == expect([*values[:base], b"new"])


def test_corruption_in_the_middle_truncates_from_there(tmp_path: Path) -> None:
    plog = open_log(tmp_path)
    values = fill(plog, 6)
    plog.close()
    f, pos, size, base = batches_on_disk(tmp_path)[2]
    data = bytearray(f.read_bytes())
    data[pos + size - 3] ^= 0xFF
    f.write_bytes(bytes(data))
    plog = open_log(tmp_path, clean=False)
    assert plog.log_end_offset == base == 6
    assert read_all(plog) == expect(values)[:6]
    assert append(plog, [b"n"])[0] == 6


def test_corrupt_active_segment_of_a_multi_segment_log(tmp_path: Path) -> None:
    plog = open_log(tmp_path, segment_bytes="300")
    values = fill(plog, 20)
    plog.close()
    assert len(log_files(tmp_path)) > 2
    f, pos, _size, base = _last_batch(tmp_path)
    os.truncate(f, pos + 5)
    plog = open_log(tmp_path, clean=False, segment_bytes="300")
    assert plog.log_end_offset == base
    assert read_all(plog) == expect(values)[:base]
    assert append(plog, [b"n"])[0] == base


def test_trailing_zeros_after_the_last_batch_are_truncated(tmp_path: Path) -> None:
    """A crash after the file grew but before the data landed leaves zeros."""
    plog = open_log(tmp_path)
    values = fill(plog, 4)
    plog.close()
    f, pos, size, base = _last_batch(tmp_path)
    with open(f, "ab") as fh:
        fh.write(b"\x00" * 200)
    plog = open_log(tmp_path, clean=False)
    assert plog.log_end_offset == base + 3
    assert f.stat().st_size == pos + size
    assert read_all(plog) == expect(values)
    assert append(plog, [b"n"])[0] == base + 3


# ---- indexes -------------------------------------------------------------------------------

_INDEX_CASES = {
    "deleted": None,
    "empty": b"",
    "odd-length": bytes(random.Random(1).randrange(256) for _ in range(37)),
    "random": bytes(random.Random(2).randrange(256) for _ in range(96)),
    "past-end": struct.pack(">ii", 0, 0) + struct.pack(">ii", 5, 10_000_000),
    "zeros": b"\x00" * 64,
}


def _reopen_with_index(tmp_path: Path, ext: str, case: str, clean: bool) -> tuple[
        PartitionLog, list[bytes], list[Path]]:
    plog = open_log(tmp_path, segment_bytes="2000", index_interval_bytes="100")
    values = fill(plog, 40, ts=NOW)
    plog.close()
    targets = log_files(tmp_path, ext)
    assert targets and all(t.stat().st_size > 0 for t in targets)
    for t in targets:
        content = _INDEX_CASES[case]
        if content is None:
            t.unlink()
        else:
            t.write_bytes(content)
    plog = open_log(tmp_path, clean=clean, segment_bytes="2000", index_interval_bytes="100")
    return plog, values, targets


@pytest.mark.parametrize("clean", [True, False])
@pytest.mark.parametrize("case", list(_INDEX_CASES))
def test_damaged_offset_index_is_rebuilt(tmp_path: Path, case: str, clean: bool) -> None:
    plog, values, targets = _reopen_with_index(tmp_path, ".idx", case, clean)
    assert plog.log_end_offset == len(values)
    for offset in range(len(values)):
        sl = plog.read(offset, 1, plog.log_end_offset, True)
        assert sl is not None
        b = parse_batches(sl.read())[0]
        assert b.base_offset == offset - offset % 3, offset
    assert read_all(plog) == expect(values)
    # rebuilt: every index file is there again, whole entries pointing inside its log
    for t in targets:
        data = t.read_bytes()
        assert data and len(data) % 8 == 0, t.name
        log_size = t.with_suffix(".log").stat().st_size
        assert all(0 <= pos < log_size for _rel, pos in struct.iter_unpack(">ii", data))
    assert append(plog, [b"n"])[0] == len(values)


@pytest.mark.parametrize("clean", [True, False])
@pytest.mark.parametrize("case", list(_INDEX_CASES))
def test_damaged_time_index_is_rebuilt(tmp_path: Path, case: str, clean: bool) -> None:
    plog = open_log(tmp_path, segment_bytes="2000", index_interval_bytes="100")
    for i in range(40):
        append(plog, [b"a" * 20, b"b" * 20, b"c" * 20], ts=NOW + 10 * i)
    plog.close()
    targets = log_files(tmp_path, ".timeidx")
    assert len(targets) > 1
    content = _INDEX_CASES[case]
    for t in targets:
        if content is None:
            t.unlink()
        else:
            t.write_bytes(content)
    plog = open_log(tmp_path, clean=clean, segment_bytes="2000", index_interval_bytes="100")
    for i in range(40):
        bp = plog.offset_for_timestamp(NOW + 10 * i - 3)
        assert bp is not None and bp.base_offset == 3 * i, i
    assert plog.offset_for_timestamp(NOW + 10 * 39 + 1) is None
    max_ts, max_ts_offset = plog.max_timestamp_batch()
    assert max_ts == NOW + 390 and 117 <= max_ts_offset <= 119
    for t in targets:
        data = t.read_bytes()
        assert data and len(data) % 12 == 0, t.name


def test_time_retention_still_works_after_time_index_loss(tmp_path: Path) -> None:
    plog = open_log(tmp_path, segment_bytes="300", retention_ms="10000")
    fill(plog, 10, ts=NOW - 60_000)
    fill(plog, 3, ts=NOW)
    expected_start = next(s.base_offset for s in plog.segments
                          if s.max_timestamp >= NOW - 10_000)
    assert expected_start > 0
    plog.close()
    for t in log_files(tmp_path, ".timeidx"):
        t.unlink()
    plog = open_log(tmp_path, clean=True, segment_bytes="300", retention_ms="10000")
    assert plog.apply_retention(NOW) > 0
    assert plog.log_start_offset == expected_start
