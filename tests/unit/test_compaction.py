"""Log compaction: latest value per key, tombstones, lags, dirty ratio, codecs, transactions,
the swap's crash safety, and a property test against a model of the log."""

from __future__ import annotations

import logging
import os
import shutil
import struct
import tempfile
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from pathlib import Path
from typing import Any

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
    parse_batches,
)
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from eddy.log import compaction
from eddy.log.compaction import (
    CHECKPOINT_FILE,
    DELETE_HORIZON_BIT,
    clean,
    clean_log,
    cleanable_range,
    commit_swap,
    needs_cleaning,
    plan_cleaning,
    read_checkpoint,
    write_checkpoint,
)
from eddy.log.config import TopicConfig
from eddy.log.partition import PartitionLog
from eddy.protocol.record_batch import ValidatedBatches, iter_batches, parse_header

NOW = 1_700_000_000_000
BIG = 1 << 30
Row = tuple[int, bytes | None, bytes | None]  # offset, key, value

# ---- helpers -------------------------------------------------------------------------------


def open_log(d: Path | str, clean_shutdown: bool = True, now: int = NOW,
             **configs: str) -> PartitionLog:
    overrides = {"cleanup.policy": "compact", "segment.bytes": "1024"}
    overrides.update({k.replace("_", "."): v for k, v in configs.items()})
    return PartitionLog.open(str(d), "t", 0, TopicConfig(overrides), clean_shutdown, now)


def append_raw(plog: PartitionLog, data: bytes, now: int) -> tuple[int, int]:
    """Append whole batches without the produce checks (control batches included)."""
    buf = bytearray(data)
    headers, positions = [], []
    for pos, h in iter_batches(buf):
        headers.append(h)
        positions.append(pos)
    v = ValidatedBatches(headers, positions, sum(h.record_count for h in headers),
                         max(h.max_timestamp for h in headers), 0)
    r = plog.append(buf, v, now)
    return r.base_offset, r.last_offset


def put(plog: PartitionLog, pairs: list[tuple[bytes | None, bytes | None]], ts: int = NOW,
        now: int | None = None, **batch: Any) -> tuple[int, int]:
    recs = [Rec(v, k, timestamp_delta=i) for i, (k, v) in enumerate(pairs)]
    data = build_batch(recs, base_timestamp=ts, **batch)
    return append_raw(plog, data, ts if now is None else now)


def control(plog: PartitionLog, pid: int, commit: bool, ts: int = NOW) -> int:
    key = struct.pack(">hh", 0, 1 if commit else 0)
    data = build_batch([Rec(b"\x00\x00\x00\x00\x00\x00", key)], base_timestamp=ts,
                       attributes_extra=0x30, producer_id=pid, producer_epoch=0)
    return append_raw(plog, data, ts)[0]


def roll(plog: PartitionLog, now: int = NOW) -> None:
    plog._roll(plog.log_end_offset, now)


def read_batches(plog: PartitionLog) -> list[Any]:
    """Every batch a consumer reading from the log start gets, through PartitionLog.read."""
    offset = plog.log_start_offset
    out = []
    while offset < plog.log_end_offset:
        sl = plog.read(offset, BIG, plog.log_end_offset, True)
        if sl is None:
            break
        batches = parse_batches(sl.read())
        assert batches, f"empty read at {offset}"
        for b in batches:
            assert b.crc_ok
            if b.last_offset >= offset:
                out.append(b)
        offset = max(offset, batches[-1].last_offset + 1)
    return out


def read_rows(plog: PartitionLog, control_too: bool = False) -> list[Row]:
    rows: list[Row] = []
    for b in read_batches(plog):
        if b.attributes & 0x20 and not control_too:
            continue
        rows += [(r.offset, r.key, r.value) for r in decode_records(b)]
    offsets = [r[0] for r in rows]
    assert offsets == sorted(set(offsets)), "offsets must strictly increase"
    return rows


def model(history: list[Row], end: int) -> list[Row]:
    """The cleaned log: below `end` the latest record of each key; from `end` everything."""
    latest = {k: o for o, k, _ in history if o < end}
    return [(o, k, v) for o, k, v in history if o >= end or latest[k] == o]


def fill(plog: PartitionLog, n: int, keys: int = 7, per_batch: int = 4, ts: int = NOW,
         tag: str = "v", **batch: Any) -> list[Row]:
    """n keyed records in batches; returns them as rows."""
    rows: list[Row] = []
    i = 0
    while i < n:
        pairs = [(f"k{(i + j) % keys}".encode(), f"{tag}{i + j}".encode())
                 for j in range(min(per_batch, n - i))]
        base, _ = put(plog, pairs, ts, **batch)
        rows += [(base + j, k, v) for j, (k, v) in enumerate(pairs)]
        i += len(pairs)
    return rows


def dir_names(d: Path | str) -> list[str]:
    return sorted(os.listdir(d))


@pytest.fixture
def no_fsync(monkeypatch: pytest.MonkeyPatch) -> None:
    """For the tests that clean hundreds of times: a test cannot cut the power, so fsync
    only costs time there (ordering, which the tests check, does not depend on it)."""
    monkeypatch.setattr(os, "fsync", lambda fd: None)


# ---- the basics ----------------------------------------------------------------------------


def test_latest_value_per_key_with_original_offsets(tmp_path: Path) -> None:
    plog = open_log(tmp_path)
    history = fill(plog, 300)
    assert len(plog.segments) > 5
    active_first = plog.active.base_offset
    result = clean_log(plog, NOW)
    assert result is not None
    assert result.end_offset == active_first
    assert read_checkpoint(str(tmp_path)) == active_first
    expected = model(history, active_first)
    assert read_rows(plog) == expected
    # every key's latest value is there, at its original offset; the active segment is whole
    latest = {k: (o, v) for o, k, v in history}
    got = {k: (o, v) for o, k, v in read_rows(plog)}
    assert got == latest
    assert [r for r in read_rows(plog) if r[0] >= active_first] == [
        r for r in history if r[0] >= active_first
    ]
    assert result.stats.superseded > 0 and result.stats.records_kept < len(history)
    # the installed segments and their indexes survive a restart, with or without validation
    plog.close()
    for clean_shutdown in (True, False):
        plog = open_log(tmp_path, clean_shutdown=clean_shutdown)
        assert read_rows(plog) == expected
        for o, _k, _v in expected:
            sl = plog.read(o, 1, plog.log_end_offset, True)
            assert sl is not None
            assert any(r.offset == o for b in parse_batches(sl.read())
                       for r in decode_records(b))
        plog.close()


def test_nothing_to_do_leaves_files_alone(tmp_path: Path) -> None:
    plog = open_log(tmp_path)
    fill(plog, 12, keys=100)  # no key repeats, one segment
    roll(plog)
    before = {n: (tmp_path / n).read_bytes() for n in dir_names(tmp_path) if n.endswith(".log")}
    result = clean_log(plog, NOW)
    assert result is not None and result.stats.groups_rewritten == 0
    assert {n: (tmp_path / n).read_bytes()
            for n in dir_names(tmp_path) if n.endswith(".log")} == before


def test_active_segment_untouched(tmp_path: Path) -> None:
    plog = open_log(tmp_path)
    fill(plog, 200)
    put(plog, [(b"k1", b"in-active"), (b"k1", b"in-active-2")])
    active = plog.active
    path = Path(active.log_path)
    raw = path.read_bytes()
    idx = {p: Path(p).read_bytes() for p in active.paths[1:]}
    assert clean_log(plog, NOW) is not None
    assert plog.active is active
    assert path.read_bytes() == raw
    assert {p: Path(p).read_bytes() for p in active.paths[1:]} == idx
    rows = read_rows(plog)
    assert rows[-2:] == [(plog.log_end_offset - 2, b"k1", b"in-active"),
                         (plog.log_end_offset - 1, b"k1", b"in-active-2")]


def test_not_compacted_topics_are_never_cleaned(tmp_path: Path) -> None:
    plog = open_log(tmp_path, cleanup_policy="delete")
    fill(plog, 200)
    assert plan_cleaning(plog, NOW, force=True) is None
    assert not needs_cleaning(plog, NOW)


def test_keyless_records_are_dropped_with_a_warning(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    plog = open_log(tmp_path)
    put(plog, [(b"a", b"1"), (None, b"keyless"), (b"a", b"2")])
    fill(plog, 100)
    with caplog.at_level(logging.WARNING, logger="eddy.log.compaction"):
        result = clean_log(plog, NOW)
    assert result is not None and result.stats.keyless_dropped == 1
    assert "keyless" in caplog.text
    assert all(k is not None for _o, k, _v in read_rows(plog))


# ---- batches: boundaries, producer fields, codecs ----------------------------------------------


def test_batches_keep_offsets_producer_fields_and_leader_epoch(tmp_path: Path) -> None:
    plog = open_log(tmp_path)
    plog.leader_epoch = 5
    before: dict[int, Any] = {}
    for i in range(40):
        pairs = [(b"hot", f"h{i}".encode()), (f"c{i}".encode(), b"cold")]
        data = build_batch([Rec(v, k) for k, v in pairs], base_timestamp=NOW,
                           producer_id=42, producer_epoch=3, base_sequence=2 * i)
        base, _ = append_raw(plog, data, NOW)
        before[base] = parse_header(data)
    roll(plog)
    assert clean_log(plog, NOW) is not None
    seen = 0
    for b in read_batches(plog):
        h = parse_header(b.raw)
        orig = before[b.base_offset]  # every batch still starts at a produced base offset
        assert (h.producer_id, h.producer_epoch, h.base_sequence) == (42, 3,
                                                                       orig.base_sequence)
        assert h.last_offset_delta == 1  # the batch still ends where it ended
        assert h.partition_leader_epoch == 5
        seen += h.record_count
    assert seen == 40 + 1  # 40 cold keys and the last "hot"


CODECS = [(NONE, False), (GZIP, False), (SNAPPY, False), (SNAPPY, True), (LZ4, False),
          (ZSTD, False)]


@pytest.mark.parametrize(("codec", "xerial"), CODECS,
                         ids=["none", "gzip", "snappy", "snappy-xerial", "lz4", "zstd"])
def test_compressed_batches_are_cleaned_and_still_decodable(
    tmp_path: Path, codec: int, xerial: bool
) -> None:
    plog = open_log(tmp_path, segment_bytes="4096")
    history = fill(plog, 400, keys=11, per_batch=10, compression=codec, xerial=xerial)
    roll(plog)
    result = clean_log(plog, NOW)
    assert result is not None and result.stats.groups_rewritten > 0
    assert read_rows(plog) == model(history, plog.active.base_offset)
    rebuilt = 0
    for b in read_batches(plog):
        if b.record_count == 0:  # an emptied last batch of a group: a bare header
            assert b.attributes & 0x07 == NONE and b.size == 61
            continue
        assert b.attributes & 0x07 == codec
        if b.record_count < 10:
            rebuilt += 1
            if xerial:
                assert b.raw[61:69] == b"\x82SNAPPY\x00"
    assert rebuilt > 0


def test_record_timestamps_and_headers_survive_a_rewrite(tmp_path: Path) -> None:
    plog = open_log(tmp_path)
    recs = [Rec(b"old", b"k", (("h", b"1"),), 0), Rec(b"x", b"other", (), 7),
            Rec(b"new", b"k", (("h", b"2"), ("n", None)), 9)]
    append_raw(plog, build_batch(recs, base_timestamp=NOW - 50), NOW)
    roll(plog)
    clean_log(plog, NOW)
    [b] = read_batches(plog)
    got = [(r.offset, r.timestamp, r.key, r.value, r.headers) for r in decode_records(b)]
    assert got == [(1, NOW - 43, b"other", b"x", ()),
                   (2, NOW - 41, b"k", b"new", (("h", b"2"), ("n", None)))]
    assert b.max_timestamp == NOW - 41
    assert plog.offset_for_timestamp(NOW - 41) is not None


def test_log_append_time_batches_keep_their_timestamp(tmp_path: Path) -> None:
    plog = open_log(tmp_path, message_timestamp_type="LogAppendTime")
    put(plog, [(b"k", b"1"), (b"j", b"2")], now=NOW + 5)
    put(plog, [(b"k", b"3")], now=NOW + 6)
    roll(plog, NOW + 6)
    clean_log(plog, NOW + 10)
    batches = read_batches(plog)
    assert [(r.key, r.timestamp) for b in batches for r in decode_records(b)] == [
        (b"j", NOW + 5), (b"k", NOW + 6)]


# ---- tombstones, lags, ratio -----------------------------------------------------------------


def test_tombstones_removed_only_after_delete_retention(tmp_path: Path) -> None:
    retention = 10_000
    plog = open_log(tmp_path, delete_retention_ms=str(retention))
    put(plog, [(b"gone", b"v1"), (b"kept", b"v1")])
    put(plog, [(b"gone", None)])  # the tombstone, at offset 2
    fill(plog, 60, keys=3)
    roll(plog)
    t0 = NOW + 1_000
    assert clean_log(plog, t0) is not None
    rows = read_rows(plog)
    assert (2, b"gone", None) in rows and (0, b"gone", b"v1") not in rows
    [tb] = [b for b in read_batches(plog) if b.base_offset == 2]
    assert tb.attributes & DELETE_HORIZON_BIT and tb.base_timestamp == t0 + retention
    assert decode_records(tb)[0].timestamp == NOW  # the record keeps its own timestamp
    # a forced round before the horizon keeps it; the first one at the horizon drops it
    assert clean_log(plog, t0 + retention - 1, force=True) is not None
    assert (2, b"gone", None) in read_rows(plog)
    assert clean_log(plog, t0 + retention, force=True) is not None
    rows = read_rows(plog)
    assert all(k != b"gone" for _o, k, _v in rows)
    assert (1, b"kept", b"v1") in rows


def test_tombstone_dropped_by_a_regular_round_after_the_horizon(tmp_path: Path) -> None:
    plog = open_log(tmp_path, delete_retention_ms="100")
    put(plog, [(b"a", b"1")])
    put(plog, [(b"a", None)])
    fill(plog, 40, keys=2)
    roll(plog)
    clean_log(plog, NOW)
    assert (1, b"a", None) in read_rows(plog)
    fill(plog, 200, keys=2, tag="w")  # enough dirty data to pass the dirty ratio
    roll(plog)
    assert clean_log(plog, NOW + 100) is not None
    assert all(k != b"a" for _o, k, _v in read_rows(plog))


def test_min_compaction_lag_keeps_recent_records(tmp_path: Path) -> None:
    lag = 60_000
    plog = open_log(tmp_path, min_compaction_lag_ms=str(lag))
    old = fill(plog, 100, ts=NOW - 2 * lag)
    roll(plog)
    boundary = plog.log_end_offset
    recent = fill(plog, 100, ts=NOW, tag="r")
    roll(plog)
    rng = cleanable_range(plog, NOW)
    assert rng.first_uncleanable == boundary
    result = clean_log(plog, NOW)
    assert result is not None and result.end_offset == boundary
    rows = read_rows(plog)
    assert rows == model(old + recent, boundary)
    assert [r for r in rows if r[0] >= boundary] == recent  # untouched: duplicates remain
    # once the lag has passed, they are cleaned too
    assert clean_log(plog, NOW + lag + 10, force=True) is not None
    assert read_rows(plog) == model(old + recent, plog.active.base_offset)


def test_dirty_ratio_threshold(tmp_path: Path) -> None:
    plog = open_log(tmp_path, min_cleanable_dirty_ratio="0.5")
    history = fill(plog, 300, keys=40)
    roll(plog)
    assert needs_cleaning(plog, NOW)
    clean_log(plog, NOW)
    clean_bytes = sum(s.size for s in plog.segments[:-1])
    assert cleanable_range(plog, NOW).dirty_bytes == 0
    assert not needs_cleaning(plog, NOW) and plan_cleaning(plog, NOW) is None
    # dirty bytes below the clean bytes: ratio < 0.5, not cleaned
    history += fill(plog, 8, keys=40, tag="x")
    roll(plog)
    rng = cleanable_range(plog, NOW)
    assert 0 < rng.ratio < 0.5 and rng.clean_bytes == clean_bytes
    assert plan_cleaning(plog, NOW) is None
    while cleanable_range(plog, NOW).ratio <= 0.5:
        history += fill(plog, 40, keys=40, tag="y")
        roll(plog)
    assert needs_cleaning(plog, NOW)
    assert clean_log(plog, NOW) is not None
    assert read_rows(plog) == model(history, plog.active.base_offset)


def test_max_compaction_lag_forces_a_round_below_the_ratio(tmp_path: Path) -> None:
    plog = open_log(tmp_path, max_compaction_lag_ms="1000", min_cleanable_dirty_ratio="0.99")
    fill(plog, 300, keys=40)
    roll(plog)
    clean_log(plog, NOW, force=True)
    put(plog, [(b"z", b"1")])  # first batch's max timestamp: NOW
    roll(plog)
    assert cleanable_range(plog, NOW).ratio < 0.99
    assert not needs_cleaning(plog, NOW + 1000)
    assert needs_cleaning(plog, NOW + 1001)


def test_checkpoint_is_persisted_and_reset_when_out_of_range(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    plog = open_log(tmp_path)
    fill(plog, 200)
    roll(plog)
    result = clean_log(plog, NOW)
    assert result is not None
    assert (tmp_path / CHECKPOINT_FILE).read_text().strip() == str(result.end_offset)
    plog.close()
    plog = open_log(tmp_path)
    assert cleanable_range(plog, NOW).first_dirty == result.end_offset
    write_checkpoint(str(tmp_path), plog.log_end_offset + 10)
    with caplog.at_level(logging.WARNING, logger="eddy.log.compaction"):
        assert cleanable_range(plog, NOW).first_dirty == plog.log_start_offset
    assert "past the log end offset" in caplog.text


def test_small_cleaned_segments_are_merged_up_to_segment_bytes(tmp_path: Path) -> None:
    plog = open_log(tmp_path)
    history = fill(plog, 600, keys=5)
    roll(plog)
    n_before = len(plog.segments)
    clean_log(plog, NOW)
    n_first = len(plog.segments)
    clean_log(plog, NOW, force=True)  # the segments are small now: groups merge them
    assert len(plog.segments) < n_first <= n_before
    assert all(s.size <= 1024 for s in plog.segments)
    assert read_rows(plog) == model(history, plog.active.base_offset)


def test_offset_map_capacity_bounds_a_round(tmp_path: Path) -> None:
    plog = open_log(tmp_path)
    history = fill(plog, 300, keys=30)
    roll(plog)
    result = clean_log(plog, NOW, max_map_entries=10)
    assert result is not None and result.end_offset < plog.active.base_offset
    assert read_rows(plog) == model(history, result.end_offset)
    for _ in range(100):
        result = clean_log(plog, NOW, force=True, max_map_entries=10)
        if result is None or result.end_offset == plog.active.base_offset:
            break
    assert read_rows(plog) == model(history, plog.active.base_offset)


# ---- transactions ----------------------------------------------------------------------------


def test_aborted_records_removed_committed_kept_markers_kept(tmp_path: Path) -> None:
    plog = open_log(tmp_path)
    put(plog, [(b"k", b"committed-before")])
    put(plog, [(b"k", b"aborted")], attributes_extra=0x10, producer_id=7, producer_epoch=0)
    put(plog, [(b"t", b"plain-old")])
    put(plog, [(b"t", b"txn-committed")], attributes_extra=0x10, producer_id=8,
        producer_epoch=0)
    abort_at = control(plog, 7, commit=False)
    commit_at = control(plog, 8, commit=True)
    fill(plog, 50, keys=3)
    roll(plog)
    result = clean_log(plog, NOW)
    assert result is not None and result.stats.aborted_dropped == 1
    rows = read_rows(plog)
    values = {v for _o, _k, v in rows}
    assert b"committed-before" in values and b"aborted" not in values
    assert b"txn-committed" in values and b"plain-old" not in values
    markers = [b.base_offset for b in read_batches(plog) if b.attributes & 0x20]
    assert markers == [abort_at, commit_at]


def test_an_open_transaction_ends_the_round_before_it(tmp_path: Path) -> None:
    plog = open_log(tmp_path)
    history = fill(plog, 100)
    base, _ = put(plog, [(b"k0", b"open")], attributes_extra=0x10, producer_id=9,
                  producer_epoch=0)
    history.append((base, b"k0", b"open"))
    history += fill(plog, 100, tag="after")
    roll(plog)
    result = clean_log(plog, NOW)
    assert result is not None and result.end_offset == base
    assert read_rows(plog) == model(history, base)
    assert clean_log(plog, NOW, last_stable_offset=base) is None  # nothing more to do


def test_active_producer_last_batch_is_kept_empty(tmp_path: Path) -> None:
    plog = open_log(tmp_path)
    base, last = put(plog, [(b"k", b"1"), (b"k", b"2")], producer_id=5, producer_epoch=1,
                     base_sequence=10)
    fill(plog, 100, keys=1)  # k0 only: "k" records are superseded below
    put(plog, [(b"k", b"3")])
    roll(plog)
    clean_log(plog, NOW, producer_last_offsets={5: last})
    kept = [b for b in read_batches(plog) if b.base_offset == base]
    assert len(kept) == 1 and kept[0].record_count == 0
    h = parse_header(kept[0].raw)
    assert (h.producer_id, h.producer_epoch, h.base_sequence, h.last_offset) == (5, 1, 10, last)


# ---- concurrency: readers and writers during a cleaning --------------------------------------


def test_log_is_readable_and_writable_while_cleaning_runs(tmp_path: Path) -> None:
    plog = open_log(tmp_path)
    history = fill(plog, 300)
    roll(plog)
    before = read_rows(plog)
    plan = plan_cleaning(plog, NOW)
    assert plan is not None
    old_slice = plog.read(0, BIG, plog.log_end_offset, True)  # a fetch in flight
    assert old_slice is not None
    with ThreadPoolExecutor(1) as pool:
        fut = pool.submit(clean, plan)
        while not fut.done():  # the loop thread keeps appending and reading
            history += fill(plog, 4, tag="live")
            read_rows(plog)
        result = fut.result()
    assert read_rows(plog) == before + history[len(before):]
    commit_swap(plog, result)
    assert read_rows(plog) == model(history, plan.first_uncleanable)
    # the old segment is gone from the directory but the reader still holds it
    assert not Path(plan.segments[0].log_path).exists() or plan.segments[0].deleted
    old = [(r.offset, r.value) for b in parse_batches(old_slice.read())
           for r in decode_records(b)]
    assert old == [(o, v) for o, _k, v in before if o < len(old)]


def test_retention_during_cleaning_drops_the_stale_groups(tmp_path: Path) -> None:
    plog = open_log(tmp_path, cleanup_policy="compact,delete", retention_ms="1000")
    old = fill(plog, 100, ts=NOW - 10_000)
    roll(plog, NOW)
    recent = fill(plog, 100, ts=NOW, tag="r")
    roll(plog, NOW)
    plan = plan_cleaning(plog, NOW)
    assert plan is not None
    result = clean(plan)
    assert plog.apply_retention(NOW) > 0  # the loop thread ran retention meanwhile
    start = plog.log_start_offset
    assert start == len(old)
    assert commit_swap(plog, result)  # the deleted groups are dropped, the others swapped
    assert not [n for n in dir_names(tmp_path) if n.endswith((".cleaned", ".swap", ".deleted"))]
    rows = read_rows(plog)
    assert rows == [r for r in model(old + recent, plan.first_uncleanable) if r[0] >= start]
    assert len(rows) < len(recent)
    plog.close()
    plog = open_log(tmp_path, cleanup_policy="compact,delete", retention_ms="1000",
                    clean_shutdown=False)
    assert read_rows(plog) == rows


def test_compact_delete_both_apply(tmp_path: Path) -> None:
    plog = open_log(tmp_path, cleanup_policy="compact,delete", retention_ms="5000")
    fill(plog, 100, ts=NOW - 10_000, tag="old")
    roll(plog, NOW)
    recent = fill(plog, 200, ts=NOW, tag="new")
    roll(plog, NOW)
    assert plog.apply_retention(NOW) > 0
    result = clean_log(plog, NOW)
    assert result is not None
    assert read_rows(plog) == model(recent, plog.active.base_offset)
    assert plog.apply_retention(NOW) == 0


# ---- crash safety ----------------------------------------------------------------------------


class Crash(BaseException):
    """A simulated power cut: no handler runs (BaseException passes `except Exception`)."""


def crashed_log(src: Path, work: Path) -> PartitionLog:
    if work.exists():
        shutil.rmtree(work)
    shutil.copytree(src, work)
    return open_log(work, clean_shutdown=False)


def groups_of(plog: PartitionLog) -> list[tuple[int, int]]:
    return [(s.base_offset, e) for s, e in
            zip(plog.segments[:-1], [s.base_offset for s in plog.segments[1:]], strict=True)]


@contextmanager
def fs_crash_after(n: int) -> Iterator[list[str]]:
    """Crash just before the n-th directory change (rename, unlink) the cleaner makes."""
    calls: list[str] = []
    real = {name: getattr(os, name) for name in ("rename", "replace", "unlink")}

    def wrap(name: str) -> Callable[..., Any]:
        def op(*args: Any, **kwargs: Any) -> Any:
            if len(calls) >= n:
                raise Crash(f"before {name}{args}")
            calls.append(name)
            return real[name](*args, **kwargs)
        return op

    for name in real:
        setattr(os, name, wrap(name))
    try:
        yield calls
    finally:
        for name, fn in real.items():
            setattr(os, name, fn)


def check_recovered(plog: PartitionLog, before: list[Row], after: list[Row],
                    ranges: list[tuple[int, int]]) -> str:
    rows = read_rows(plog)
    assert set(rows) <= set(before), "a record appeared from nowhere"
    assert set(after) <= set(rows), "a surviving record was lost"
    latest_before = {k: (o, v) for o, k, v in before}
    assert {k: (o, v) for o, k, v in rows} == latest_before
    states = set()
    for lo, hi in ranges:  # every original segment is wholly old or wholly cleaned
        got = [r for r in rows if lo <= r[0] < hi]
        old = [r for r in before if lo <= r[0] < hi]
        new = [r for r in after if lo <= r[0] < hi]
        assert got in (old, new), f"segment [{lo}, {hi}) is a mix"
        states.add("old" if got == old else "new")
    assert not [n for n in dir_names(plog.directory)
                if n.endswith((".cleaned", ".swap", ".deleted"))]
    return "/".join(sorted(states))


@pytest.mark.usefixtures("no_fsync")
def test_crash_at_every_step_of_the_swap(tmp_path: Path) -> None:
    src = tmp_path / "src"
    plog = open_log(src)
    history = fill(plog, 160, keys=6)
    roll(plog)
    before = read_rows(plog)
    ranges = groups_of(plog)
    assert len(ranges) >= 4
    plog.close()
    ref = crashed_log(src, tmp_path / "ref")
    assert clean_log(ref, NOW) is not None
    after = read_rows(ref)
    assert after == model(history, ref.active.base_offset)
    outcomes = []
    for n in range(1000):
        plog = crashed_log(src, tmp_path / "work")
        with fs_crash_after(n) as calls:
            try:
                clean_log(plog, NOW)
                finished = True
            except Crash:
                finished = False
        plog = open_log(tmp_path / "work", clean_shutdown=False)
        outcomes.append(check_recovered(plog, before, after, ranges))
        # the next round completes the work
        clean_log(plog, NOW, force=True)
        assert read_rows(plog) == after
        plog.close()
        if finished:
            break
    assert finished and n > 10, calls
    assert outcomes[0] == "old" and outcomes[-1] == "new"
    assert "new/old" in outcomes  # some crashes land between two groups' swaps


@pytest.mark.parametrize("step", ["clean-partial", "cleaned-written", "swap-renamed",
                                  "swap-synced", "old-retired", "old-retired-synced",
                                  "installed", "before-checkpoint"])
def test_crash_at_each_named_step(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                  step: str) -> None:
    src = tmp_path / "src"
    plog = open_log(src)
    history = fill(plog, 250, keys=6)
    roll(plog)
    before = read_rows(plog)
    ranges = groups_of(plog)
    plog.close()
    ref = crashed_log(src, tmp_path / "ref")
    seen: list[str] = []
    monkeypatch.setattr(compaction, "_FAULT_HOOK", seen.append)
    clean_log(ref, NOW)
    monkeypatch.setattr(compaction, "_FAULT_HOOK", None)
    after = read_rows(ref)
    assert after == model(history, ref.active.base_offset)
    assert seen.count(step) >= 1
    for nth in range(1, min(seen.count(step), 2) + 1):
        hits = 0

        def hook(name: str, nth: int = nth) -> None:
            nonlocal hits
            if name == step:
                hits += 1
                if hits == nth:
                    raise Crash(name)

        plog = crashed_log(src, tmp_path / "work")
        monkeypatch.setattr(compaction, "_FAULT_HOOK", hook)
        with pytest.raises(Crash):
            clean_log(plog, NOW)
        monkeypatch.setattr(compaction, "_FAULT_HOOK", None)
        plog = open_log(tmp_path / "work", clean_shutdown=False)
        state = check_recovered(plog, before, after, ranges)
        if step in ("clean-partial", "cleaned-written"):
            assert state == "old"
        if step in ("swap-renamed", "swap-synced", "old-retired"):
            assert "new" in state  # past the commit point of a group: it completes
        if step == "before-checkpoint":
            assert state == "new"
        plog.close()


def test_leftover_files_are_resolved_on_open(tmp_path: Path) -> None:
    plog = open_log(tmp_path)
    fill(plog, 100)
    roll(plog)
    rows = read_rows(plog)
    first = plog.segments[0]
    stem = os.path.splitext(first.log_path)[0]
    plog.close()
    Path(stem + ".log.cleaned").write_bytes(b"junk")
    Path(stem + ".idx.cleaned").write_bytes(b"junk")
    Path(stem + ".idx.swap").write_bytes(b"junk1234")  # orphan: its index is rebuilt
    Path(stem + ".timeidx").write_bytes(b"\x00" * 24)  # and so is a stale time index
    Path(tmp_path / ("9" * 20 + ".log.deleted")).write_bytes(b"junk")
    Path(stem + ".timeidx.swap").write_bytes(b"")
    plog = open_log(tmp_path)
    assert read_rows(plog) == rows
    assert not [n for n in dir_names(tmp_path) if n.endswith((".cleaned", ".swap", ".deleted"))]


def test_a_swap_file_replaces_the_segments_it_covers_on_open(tmp_path: Path) -> None:
    """A crash after the commit point: the old segments are still there, the swap wins."""
    plog = open_log(tmp_path)
    history = fill(plog, 200)
    roll(plog)
    plan = plan_cleaning(plog, NOW)
    assert plan is not None
    result = clean(plan)
    for g in result.groups:
        assert g.segment is not None
        g.segment.change_suffix(".swap")
    plog.close()
    plog = open_log(tmp_path, clean_shutdown=False)
    assert read_rows(plog) == model(history, plan.first_uncleanable)


def test_abort_removes_the_cleaned_files(tmp_path: Path) -> None:
    plog = open_log(tmp_path)
    fill(plog, 200)
    roll(plog)
    names = dir_names(tmp_path)
    plan = plan_cleaning(plog, NOW)
    assert plan is not None
    result = clean(plan)
    assert any(n.endswith(".cleaned") for n in dir_names(tmp_path))
    compaction.abort(result)
    assert dir_names(tmp_path) == names


# ---- property: cleaning is "latest value per key" --------------------------------------------

ops = st.lists(
    st.lists(st.tuples(st.sampled_from([b"a", b"b", b"c", b"d", b"e"]),
                       st.one_of(st.none(), st.binary(min_size=0, max_size=12))),
             min_size=1, max_size=6),
    min_size=1, max_size=40,
)


@pytest.mark.usefixtures("no_fsync")
@settings(max_examples=40, deadline=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
@given(batches=ops, codec=st.sampled_from([NONE, GZIP, LZ4]), rolls=st.sets(st.integers(0, 39)),
       second=st.lists(st.tuples(st.sampled_from([b"a", b"f"]), st.binary(max_size=4)),
                       max_size=8))
def test_property_latest_value_per_key(batches: list[list[tuple[bytes, bytes | None]]],
                                       codec: int, rolls: set[int],
                                       second: list[tuple[bytes, bytes]]) -> None:
    with tempfile.TemporaryDirectory() as d:
        plog = open_log(d, segment_bytes="300")
        history: list[Row] = []

        def write(pairs: list[tuple[bytes, bytes | None]]) -> None:
            base, _ = put(plog, list(pairs), compression=codec)
            history.extend((base + j, k, v) for j, (k, v) in enumerate(pairs))

        for i, pairs in enumerate(batches):
            write(pairs)
            if i in rolls:
                roll(plog)
        result = clean_log(plog, NOW, force=True)
        end = plog.active.base_offset
        if result is not None:
            assert result.end_offset == end
        expected = model(history, end)
        assert read_rows(plog) == expected
        # everything in the active segment, and {key: last value} below it
        below = {k: v for o, k, v in expected if o < end}
        assert below == {k: v for o, k, v in history if o < end}
        # more writes, a second round, a restart: still the model
        for k, v in second:
            write([(k, v)])
        roll(plog)
        clean_log(plog, NOW, force=True)
        assert read_rows(plog) == model(history, plog.active.base_offset)
        plog.close()
        plog = open_log(d, clean_shutdown=False)
        assert read_rows(plog) == model(history, plog.active.base_offset)
        plog.close()
