"""PartitionLog.truncate_to and truncate_fully_and_start_at on real files: what a follower
does to match its leader's log (KIP-101/279). After a truncation the log reads, appends,
looks up offsets and timestamps, and reopens (cleanly or after a crash) as if the removed
batches had never been written."""

from __future__ import annotations

import errno
import os
from pathlib import Path

import pytest
from batch_builder import Rec, build_batch, parse_batches, values_in

from eddy.log import partition as partition_module
from eddy.log.epoch_cache import CHECKPOINT_FILE, LeaderEpochCache
from eddy.log.partition import RECOVERY_POINT_FILE, PartitionLog
from eddy.protocol.errors import ErrorCode, KafkaError
from eddy.protocol.record_batch import validate_batches

NOW = 1_700_000_000_000
BIG = 1 << 30
PER_BATCH = 3


def open_log(d: Path, clean: bool = True, **configs: str) -> PartitionLog:
    from eddy.log.config import TopicConfig

    cfg = TopicConfig({k.replace("_", "."): v for k, v in configs.items()})
    return PartitionLog.open(str(d), "t", 0, cfg, clean, NOW)


def append(plog: PartitionLog, values: list[bytes], ts: int = NOW) -> tuple[int, int]:
    data = bytearray(build_batch([Rec(v) for v in values], base_timestamp=ts))
    r = plog.append(data, validate_batches(data, max_batch_bytes=BIG), ts)
    return r.base_offset, r.last_offset


def fill(plog: PartitionLog, n_batches: int, timestamps: list[int] | None = None,
         ) -> list[bytes]:
    """n_batches batches of PER_BATCH numbered values, batch i stamped timestamps[i]
    (default NOW + 1000 * i); returns the values in offset order."""
    out: list[bytes] = []
    for i in range(n_batches):
        ts = NOW + 1000 * i if timestamps is None else timestamps[i]
        vals = [f"{len(out) + j:08d}".encode().ljust(20, b".") for j in range(PER_BATCH)]
        append(plog, vals, ts)
        out += vals
    return out


def read_all(plog: PartitionLog, start: int | None = None) -> list[tuple[int, bytes | None]]:
    offset = plog.log_start_offset if start is None else start
    out: list[tuple[int, bytes | None]] = []
    while offset < plog.log_end_offset:
        sl = plog.read(offset, BIG, plog.log_end_offset, True)
        assert sl is not None, f"nothing read at {offset} below LEO {plog.log_end_offset}"
        recs = [(o, v) for o, v in values_in(sl.read()) if o >= offset]
        assert recs, f"empty read at {offset}"
        out += recs
        offset = recs[-1][0] + 1
    return out


def expect(values: list[bytes], start: int = 0) -> list[tuple[int, bytes | None]]:
    return list(enumerate(values))[start:]


def log_files(d: Path, ext: str = ".log") -> list[str]:
    return sorted(p.name for p in d.iterdir() if p.name.endswith(ext))


def sizes(d: Path) -> dict[str, int]:
    return {p.name: p.stat().st_size for p in d.iterdir()
            if p.name.endswith((".log", ".idx", ".timeidx"))}


MULTI = {"segment_bytes": "400", "index_interval_bytes": "1"}  # ~2 batches a segment


# ---- where the log ends ----------------------------------------------------------------------


@pytest.mark.parametrize("clean", [True, False])
def test_truncate_at_a_batch_boundary_across_segments(tmp_path: Path, clean: bool) -> None:
    plog = open_log(tmp_path, **MULTI)
    values = fill(plog, 20)
    assert len(plog.segments) > 5
    plog.truncate_to(30)
    assert plog.log_end_offset == plog.high_watermark == 30
    assert read_all(plog) == expect(values[:30])
    assert all(int(name[:-4]) <= 30 for name in log_files(tmp_path))
    assert [s.base_offset for s in plog.segments] == [int(n[:-4]) for n in log_files(tmp_path)]
    on_disk = sizes(tmp_path)
    plog.close()
    plog = open_log(tmp_path, clean=clean, **MULTI)
    assert sizes(tmp_path) == on_disk  # a crash recovery finds nothing more to cut
    assert plog.log_end_offset == 30
    assert read_all(plog) == expect(values[:30])
    assert append(plog, [b"after"]) == (30, 30)
    assert read_all(plog) == expect([*values[:30], b"after"])


@pytest.mark.parametrize(("offset", "leo"), [(31, 30), (32, 30), (29, 27), (1, 0), (0, 0)])
def test_an_offset_inside_a_batch_removes_the_whole_batch(tmp_path: Path, offset: int,
                                                          leo: int) -> None:
    plog = open_log(tmp_path, **MULTI)
    values = fill(plog, 20)
    plog.truncate_to(offset)
    assert plog.log_end_offset == leo
    assert read_all(plog) == expect(values[:leo])
    assert append(plog, [b"a", b"b"]) == (leo, leo + 1)
    plog.close()
    plog = open_log(tmp_path, clean=False, **MULTI)
    assert plog.log_end_offset == leo + 2
    assert read_all(plog) == expect([*values[:leo], b"a", b"b"])


def test_truncate_inside_the_active_segment(tmp_path: Path) -> None:
    plog = open_log(tmp_path, index_interval_bytes="1")
    values = fill(plog, 10)
    assert len(plog.segments) == 1
    plog.truncate_to(12)
    assert plog.log_end_offset == 12
    # the file holds exactly the four kept batches
    kept = parse_batches((tmp_path / log_files(tmp_path)[0]).read_bytes())
    assert [b.base_offset for b in kept] == [0, 3, 6, 9]
    assert read_all(plog) == expect(values[:12])


def test_at_or_past_the_log_end_nothing_changes(tmp_path: Path) -> None:
    plog = open_log(tmp_path, **MULTI)
    values = fill(plog, 6)
    before = sizes(tmp_path)
    plog.truncate_to(18)
    plog.truncate_to(1000)
    assert plog.log_end_offset == 18 and sizes(tmp_path) == before
    assert read_all(plog) == expect(values)


def test_truncate_to_an_empty_segment_base_keeps_that_segment_empty(tmp_path: Path) -> None:
    plog = open_log(tmp_path, **MULTI)
    values = fill(plog, 20)
    base = plog.segments[3].base_offset
    plog.truncate_to(base)
    assert plog.log_end_offset == base
    assert plog.active.base_offset == base and plog.active.is_empty
    assert read_all(plog) == expect(values[:base])
    append(plog, [b"x"])
    plog.close()
    plog = open_log(tmp_path, clean=False, **MULTI)
    assert read_all(plog) == expect([*values[:base], b"x"])


# ---- indexes and timestamps ------------------------------------------------------------------


@pytest.mark.parametrize("clean", [True, False])
def test_offset_index_is_right_after_truncation(tmp_path: Path, clean: bool) -> None:
    plog = open_log(tmp_path, index_interval_bytes="1")
    values = fill(plog, 12)
    plog.truncate_to(20)  # inside batch [18, 20]
    assert plog.log_end_offset == 18
    # one index entry per kept batch, none pointing at removed bytes
    assert os.path.getsize(tmp_path / log_files(tmp_path, ".idx")[0]) == 8 * 6
    plog.close()
    plog = open_log(tmp_path, clean=clean, index_interval_bytes="1")
    for offset in range(18):
        sl = plog.read(offset, BIG, plog.log_end_offset, True)
        assert sl is not None
        first = values_in(sl.read())[0][0]
        assert first == offset - offset % PER_BATCH  # the batch holding offset
    assert plog.read(18, BIG, BIG, True) is None
    append(plog, [b"n1", b"n2", b"n3"])
    append(plog, [b"m1"])
    assert read_all(plog, 17) == expect([*values[:18], b"n1", b"n2", b"n3", b"m1"], 17)


@pytest.mark.parametrize("clean", [True, False])
def test_timestamp_lookups_forget_removed_batches(tmp_path: Path, clean: bool) -> None:
    plog = open_log(tmp_path, **MULTI)
    fill(plog, 20)  # batch i stamped NOW + 1000 i
    plog.truncate_to(30)  # batches 0..9 stay
    for p in (plog, None):
        if p is None:
            plog.close()
            plog = open_log(tmp_path, clean=clean, **MULTI)
        assert plog.max_timestamp_batch() == (NOW + 9000, 29)
        bp = plog.offset_for_timestamp(NOW + 9000)
        assert bp is not None and bp.base_offset == 27
        bp = plog.offset_for_timestamp(NOW + 4500)
        assert bp is not None and bp.base_offset == 15
        assert plog.offset_for_timestamp(NOW + 9001) is None
    append(plog, [b"late"], NOW + 50_000)
    assert plog.max_timestamp_batch() == (NOW + 50_000, 30)
    bp = plog.offset_for_timestamp(NOW + 9001)
    assert bp is not None and bp.base_offset == 30


@pytest.mark.parametrize("interval", ["1", "4096"])
def test_max_timestamp_when_the_largest_was_removed(tmp_path: Path, interval: str) -> None:
    plog = open_log(tmp_path, index_interval_bytes=interval)
    stamps = [NOW + d for d in (5000, 1000, 7000, 2000, 3000, 9000, 4000)]
    fill(plog, len(stamps), stamps)
    plog.truncate_to(15)  # batches 0..4 stay: the largest kept is 7000, at offset 8
    assert plog.max_timestamp_batch() == (NOW + 7000, 8)
    assert plog.active.max_timestamp == NOW + 7000
    bp = plog.offset_for_timestamp(NOW + 6000)
    assert bp is not None and bp.base_offset == 6
    assert plog.offset_for_timestamp(NOW + 8000) is None
    plog.truncate_to(6)  # batches 0, 1 stay
    assert plog.max_timestamp_batch() == (NOW + 5000, 2)
    plog.truncate_to(0)
    assert plog.max_timestamp_batch() == (-1, -1)
    assert plog.offset_for_timestamp(NOW) is None
    assert plog.active.created_ms == -1  # segment.ms counts from the next append
    plog.close()
    plog = open_log(tmp_path, clean=False, index_interval_bytes=interval)
    assert plog.log_end_offset == 0 and plog.max_timestamp_batch() == (-1, -1)


# ---- offsets that follow the log end -----------------------------------------------------------


def _flush(plog: PartitionLog) -> None:
    segs, target = plog.segments_to_flush()
    for s in segs:
        s.fsync()
    plog.flush_completed(target, NOW)


def test_high_watermark_flushed_offset_and_recovery_point_follow(tmp_path: Path) -> None:
    plog = open_log(tmp_path, **MULTI)
    fill(plog, 20)
    _flush(plog)
    assert plog.recovery_point > 30 and plog.flushed_offset == 60
    plog.truncate_to(30)
    assert plog.high_watermark == plog.flushed_offset == 30
    assert plog.recovery_point <= 30
    assert int((tmp_path / RECOVERY_POINT_FILE).read_text()) == plog.recovery_point
    plog.high_watermark = 12  # a follower's: the leader's high watermark is lower
    plog.truncate_to(21)
    assert plog.log_end_offset == 21 and plog.high_watermark == 12


def test_never_below_the_log_start_offset(tmp_path: Path) -> None:
    plog = open_log(tmp_path, **MULTI)
    values = fill(plog, 20)
    plog.set_log_start_offset(12)
    plog.truncate_to(3)
    assert plog.log_start_offset == plog.log_end_offset == 12
    assert read_all(plog) == []
    assert append(plog, [b"x"]) == (12, 12)
    assert read_all(plog) == [(12, b"x")]
    del values


def test_a_log_start_inside_a_batch_restarts_the_log_there(tmp_path: Path) -> None:
    plog = open_log(tmp_path, **MULTI)
    fill(plog, 20)
    plog.set_log_start_offset(13)  # DeleteRecords inside batch [12, 14]
    plog.truncate_to(5)
    assert plog.log_start_offset == plog.log_end_offset == plog.high_watermark == 13
    assert append(plog, [b"x"]) == (13, 13)
    plog.close()
    plog = open_log(tmp_path, clean=False, **MULTI)
    assert (plog.log_start_offset, plog.log_end_offset) == (13, 14)
    assert read_all(plog) == [(13, b"x")]


def test_storage_failure_is_kafka_storage_error(tmp_path: Path,
                                                monkeypatch: pytest.MonkeyPatch) -> None:
    plog = open_log(tmp_path, **MULTI)
    fill(plog, 5)

    def full_disk(*_: object) -> int:
        raise OSError(errno.EIO, "I/O error")

    monkeypatch.setattr(partition_module, "cut_segment", full_disk)
    with pytest.raises(KafkaError) as err:
        plog.truncate_to(4)
    assert err.value.code == ErrorCode.kafka_storage_error


# ---- the epoch history -----------------------------------------------------------------------


def test_truncation_trims_the_epoch_history(tmp_path: Path) -> None:
    plog = open_log(tmp_path, **MULTI)
    plog.epochs.assign(0, 0)
    fill(plog, 10)
    plog.set_leader_epoch(3)
    plog.epochs.assign(3, 30)
    fill(plog, 10)
    plog.truncate_to(40)
    assert plog.epochs.entries() == [(0, 0), (3, 30)]
    plog.truncate_to(30)
    assert plog.epochs.entries() == [(0, 0)]
    plog.close()
    plog = open_log(tmp_path, clean=False, **MULTI)
    assert plog.epochs.entries() == [(0, 0)]
    assert plog.epochs.end_offset_for(0, plog.log_end_offset) == (0, 30)


def test_log_start_moves_the_first_epoch_start(tmp_path: Path) -> None:
    plog = open_log(tmp_path, **MULTI)
    plog.epochs.assign(0, 0)
    fill(plog, 10)
    plog.epochs.assign(2, 30)
    fill(plog, 4)
    plog.set_log_start_offset(9)
    assert plog.epochs.entries() == [(0, 9), (2, 30)]
    assert LeaderEpochCache.load(str(tmp_path)).entries() == [(0, 9), (2, 30)]


def test_reopen_forgets_epochs_past_the_log_end(tmp_path: Path) -> None:
    plog = open_log(tmp_path, **MULTI)
    plog.epochs.assign(0, 0)
    fill(plog, 4)
    plog.epochs.assign(1, 12)  # written, then a crash before its batches were
    plog.close()
    plog = open_log(tmp_path, clean=False, **MULTI)
    assert plog.epochs.entries() == [(0, 0)]
    assert (tmp_path / CHECKPOINT_FILE).read_text() == "0\n1\n0 0\n"


def test_a_garbled_checkpoint_does_not_stop_the_log_opening(tmp_path: Path) -> None:
    plog = open_log(tmp_path)
    values = fill(plog, 3)
    plog.close()
    (tmp_path / CHECKPOINT_FILE).write_bytes(b"\x00\x01garbage")
    plog = open_log(tmp_path, clean=False)
    assert plog.epochs.entries() == [] and read_all(plog) == expect(values)


# ---- starting over -----------------------------------------------------------------------------


@pytest.mark.parametrize("clean", [True, False])
def test_truncate_fully_and_start_at(tmp_path: Path, clean: bool) -> None:
    plog = open_log(tmp_path, **MULTI)
    plog.epochs.assign(0, 0)
    fill(plog, 20)
    plog.truncate_fully_and_start_at(100)
    assert (plog.log_start_offset, plog.log_end_offset, plog.high_watermark) == (100, 100, 100)
    assert plog.epochs.entries() == []
    assert log_files(tmp_path) == [f"{100:020d}.log"]
    assert len(plog.segments) == 1
    with pytest.raises(KafkaError) as err:
        plog.read(50, BIG, BIG, True)
    assert err.value.code == ErrorCode.offset_out_of_range
    assert append(plog, [b"a", b"b"]) == (100, 101)
    plog.close()
    plog = open_log(tmp_path, clean=clean, **MULTI)
    assert (plog.log_start_offset, plog.log_end_offset) == (100, 102)
    assert read_all(plog) == [(100, b"a"), (101, b"b")]
    assert plog.epochs.entries() == [(0, 100)]  # the append's epoch starts where it wrote


def test_truncate_fully_to_the_first_segments_base(tmp_path: Path) -> None:
    plog = open_log(tmp_path, **MULTI)
    fill(plog, 20)
    plog.truncate_fully_and_start_at(0)
    assert plog.log_end_offset == 0 and log_files(tmp_path) == [f"{0:020d}.log"]
    assert os.path.getsize(tmp_path / f"{0:020d}.log") == 0
    assert plog.max_timestamp_batch() == (-1, -1)
    assert append(plog, [b"z"]) == (0, 0)
    plog.close()
    plog = open_log(tmp_path, clean=False, **MULTI)
    assert read_all(plog) == [(0, b"z")]


def test_truncation_then_more_appends_then_a_crash(tmp_path: Path) -> None:
    plog = open_log(tmp_path, **MULTI)
    values = fill(plog, 20)
    plog.truncate_to(25)
    assert plog.log_end_offset == 24
    more = [f"new{i}".encode() for i in range(30)]
    for i in range(0, 30, 3):
        append(plog, more[i : i + 3], NOW + 100_000 + i)
    expected = expect([*values[:24], *more])
    assert read_all(plog) == expected
    leo = plog.log_end_offset
    del plog  # no close: a crash
    plog = open_log(tmp_path, clean=False, **MULTI)
    assert plog.log_end_offset == leo
    assert read_all(plog) == expected
    bp = plog.offset_for_timestamp(NOW + 100_001)
    assert bp is not None and bp.base_offset == 27


@pytest.mark.parametrize("cut", ["empty", "half", "torn"])
def test_indexes_lost_in_a_power_cut_are_rebuilt_from_the_log(tmp_path: Path, cut: str) -> None:
    """The flusher fsyncs only the log (acks need the records, not the derived indexes):
    after a power cut an index may lack its latest entries, or end in half an entry. A
    start after an unclean shutdown reads, looks up offsets and timestamps as before."""
    plog = open_log(tmp_path, index_interval_bytes="1")
    values = fill(plog, 12)
    plog.close()
    for ext in (".idx", ".timeidx"):
        path = tmp_path / log_files(tmp_path, ext)[0]
        size = path.stat().st_size
        keep = {"empty": 0, "half": size // 2 - (size // 2) % 8, "torn": size // 2 + 3}[cut]
        os.truncate(path, keep)
    plog = open_log(tmp_path, clean=False, index_interval_bytes="1")
    assert plog.log_end_offset == len(values)
    for offset in range(len(values)):
        sl = plog.read(offset, BIG, plog.log_end_offset, True)
        assert sl is not None
        assert values_in(sl.read())[0][0] == offset - offset % PER_BATCH
    bp = plog.offset_for_timestamp(NOW + 7500)  # batch i stamped NOW + 1000 i
    assert bp is not None and bp.base_offset == 8 * PER_BATCH
    assert plog.max_timestamp_batch() == (NOW + 11_000, len(values) - 1)
