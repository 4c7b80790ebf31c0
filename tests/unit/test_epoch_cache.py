"""The leader epoch history: Kafka's checkpoint format, assign/truncate rules, and
OffsetForLeaderEpoch's end offsets (LeaderEpochFileCache.endOffsetFor)."""

from __future__ import annotations

import logging
import os
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from eddy.log.epoch_cache import (
    CHECKPOINT_FILE,
    CheckpointError,
    LeaderEpochCache,
    format_checkpoint,
    parse_checkpoint,
)

UNDEFINED = (-1, -1)


def cache_with(d: Path, *entries: tuple[int, int]) -> LeaderEpochCache:
    c = LeaderEpochCache.load(str(d))
    for epoch, start in entries:
        c.assign(epoch, start)
    return c


# ---- the checkpoint file ---------------------------------------------------------------------


def test_checkpoint_is_kafkas_text_format(tmp_path: Path) -> None:
    cache_with(tmp_path, (0, 0), (2, 57), (5, 300))
    assert (tmp_path / CHECKPOINT_FILE).read_text() == "0\n3\n0 0\n2 57\n5 300\n"


def test_reads_a_checkpoint_kafka_wrote(tmp_path: Path) -> None:
    (tmp_path / CHECKPOINT_FILE).write_text("0\n2\n4 0\n7 1200\n")
    c = LeaderEpochCache.load(str(tmp_path))
    assert c.entries() == [(4, 0), (7, 1200)]
    assert c.latest_epoch() == 7


def test_missing_file_is_an_empty_history(tmp_path: Path) -> None:
    c = LeaderEpochCache.load(str(tmp_path))
    assert c.entries() == [] and c.latest_epoch() == -1
    assert not (tmp_path / CHECKPOINT_FILE).exists()  # loading writes nothing


def test_history_survives_reload(tmp_path: Path) -> None:
    cache_with(tmp_path, (1, 0), (3, 10), (4, 25))
    assert LeaderEpochCache.load(str(tmp_path)).entries() == [(1, 0), (3, 10), (4, 25)]


@pytest.mark.parametrize("text", [
    "",
    "0\n",
    "1\n1\n0 0\n",            # unknown version
    "0\n2\n0 0\n",            # fewer entries than announced
    "0\n1\n0 0\n1 5\n",       # more entries than announced
    "0\n1\n0\n",              # one column
    "0\n1\nzero 0\n",
    "0\n2\n3 0\n2 10\n",      # epochs go backwards
    "0\n2\n2 10\n3 10\n",     # start offsets do not increase
    "0\n1\n-1 0\n",
    "x\n0\n",
])
def test_garbled_file_starts_empty_with_a_warning(tmp_path: Path, text: str,
                                                 caplog: pytest.LogCaptureFixture) -> None:
    (tmp_path / CHECKPOINT_FILE).write_text(text)
    with caplog.at_level(logging.WARNING):
        c = LeaderEpochCache.load(str(tmp_path))
    assert c.entries() == []
    assert "leader epoch" in caplog.text
    c.assign(3, 7)  # and it works from there, replacing the bad file
    assert LeaderEpochCache.load(str(tmp_path)).entries() == [(3, 7)]


def test_binary_garbage_starts_empty(tmp_path: Path) -> None:
    (tmp_path / CHECKPOINT_FILE).write_bytes(b"\xff\xfe\x00garbage\x80")
    assert LeaderEpochCache.load(str(tmp_path)).entries() == []


def test_unreadable_file_starts_empty(tmp_path: Path) -> None:
    (tmp_path / CHECKPOINT_FILE).mkdir()  # open() fails with IsADirectoryError
    assert LeaderEpochCache.load(str(tmp_path)).entries() == []


def test_parse_rejects_what_format_would_not_write() -> None:
    assert parse_checkpoint(format_checkpoint([(0, 0), (9, 4)]).decode()) == [(0, 0), (9, 4)]
    with pytest.raises(CheckpointError):
        parse_checkpoint("0\n1\n1 2 3\n")


# ---- assign ----------------------------------------------------------------------------------


def test_assign_appends_newer_epochs_only(tmp_path: Path) -> None:
    c = cache_with(tmp_path, (0, 0), (2, 10))
    c.assign(2, 15)  # same epoch: ignored
    c.assign(1, 20)  # older epoch: ignored
    assert c.entries() == [(0, 0), (2, 10)]
    c.assign(3, 20)
    assert c.entries() == [(0, 0), (2, 10), (3, 20)]


def test_assign_of_the_current_epoch_writes_nothing(tmp_path: Path) -> None:
    c = cache_with(tmp_path, (0, 0), (2, 10))
    path = tmp_path / CHECKPOINT_FILE
    os.utime(path, (1, 1))
    for offset in range(11, 200):
        c.assign(2, offset)
    assert path.stat().st_mtime == 1


def test_assign_drops_entries_starting_at_or_after_the_new_start(tmp_path: Path) -> None:
    c = cache_with(tmp_path, (0, 0), (2, 10), (3, 20))
    c.assign(5, 10)
    assert c.entries() == [(0, 0), (5, 10)]
    assert LeaderEpochCache.load(str(tmp_path)).entries() == [(0, 0), (5, 10)]


def test_assign_refuses_a_negative_start_offset(tmp_path: Path) -> None:
    c = cache_with(tmp_path, (0, 0))
    with pytest.raises(ValueError):
        c.assign(1, -1)
    assert c.entries() == [(0, 0)]


def test_a_failed_write_changes_nothing(tmp_path: Path) -> None:
    d = tmp_path / "gone"
    d.mkdir()
    c = cache_with(d, (0, 0))
    d.joinpath(CHECKPOINT_FILE).unlink()
    d.rmdir()  # the directory is gone: the write fails
    with pytest.raises(OSError):
        c.assign(1, 5)
    assert c.entries() == [(0, 0)] and c.latest_epoch() == 0


# ---- end offsets (OffsetForLeaderEpoch) ------------------------------------------------------


def test_end_offset_for(tmp_path: Path) -> None:
    c = cache_with(tmp_path, (2, 10), (4, 30), (7, 55))
    leo = 80
    assert c.end_offset_for(7, leo) == (7, 80)        # the latest epoch ends at the LEO
    assert c.end_offset_for(4, leo) == (4, 55)        # where the next epoch starts
    assert c.end_offset_for(2, leo) == (2, 30)
    assert c.end_offset_for(5, leo) == (4, 55)        # unknown: the epoch below it, named
    assert c.end_offset_for(6, leo) == (4, 55)
    assert c.end_offset_for(3, leo) == (2, 30)
    assert c.end_offset_for(1, leo) == (1, 10)        # below the history: its start
    assert c.end_offset_for(0, leo) == (0, 10)
    assert c.end_offset_for(8, leo) == UNDEFINED      # above the latest
    assert c.end_offset_for(-1, leo) == UNDEFINED


def test_end_offset_for_an_empty_history_is_undefined(tmp_path: Path) -> None:
    c = LeaderEpochCache.load(str(tmp_path))
    assert c.end_offset_for(0, 5) == UNDEFINED
    assert c.end_offset_for(-1, 5) == UNDEFINED


# ---- truncation ------------------------------------------------------------------------------


def test_truncate_from_end(tmp_path: Path) -> None:
    c = cache_with(tmp_path, (0, 0), (2, 10), (3, 20))
    c.truncate_from_end(21)
    assert c.entries() == [(0, 0), (2, 10), (3, 20)]
    c.truncate_from_end(20)
    assert c.entries() == [(0, 0), (2, 10)]
    c.truncate_from_end(5)
    assert c.entries() == [(0, 0)]
    c.truncate_from_end(0)
    assert c.entries() == []
    assert LeaderEpochCache.load(str(tmp_path)).entries() == []


def test_truncate_from_start(tmp_path: Path) -> None:
    c = cache_with(tmp_path, (0, 0), (2, 10), (3, 20))
    c.truncate_from_start(0)
    assert c.entries() == [(0, 0), (2, 10), (3, 20)]
    c.truncate_from_start(5)
    assert c.entries() == [(0, 5), (2, 10), (3, 20)]
    c.truncate_from_start(15)
    assert c.entries() == [(2, 15), (3, 20)]
    c.truncate_from_start(20)
    assert c.entries() == [(3, 20)]
    c.truncate_from_start(99)
    assert c.entries() == [(3, 99)]
    assert LeaderEpochCache.load(str(tmp_path)).entries() == [(3, 99)]


def test_clear(tmp_path: Path) -> None:
    c = cache_with(tmp_path, (0, 0), (2, 10))
    c.clear()
    assert c.entries() == [] and c.latest_epoch() == -1
    assert LeaderEpochCache.load(str(tmp_path)).entries() == []


# ---- against a model -------------------------------------------------------------------------


class Model:
    """The rules stated plainly, over a list."""

    def __init__(self) -> None:
        self.entries: list[tuple[int, int]] = []

    def assign(self, epoch: int, start: int) -> None:
        if self.entries and epoch <= self.entries[-1][0]:
            return
        self.entries = [e for e in self.entries if e[1] < start] + [(epoch, start)]

    def truncate_from_end(self, end: int) -> None:
        self.entries = [e for e in self.entries if e[1] < end]

    def truncate_from_start(self, start: int) -> None:
        below = [e for e in self.entries if e[1] <= start]
        if below:
            self.entries = [(below[-1][0], start)] + [e for e in self.entries if e[1] > start]

    def end_offset_for(self, epoch: int, leo: int) -> tuple[int, int]:
        if epoch == -1 or not self.entries:
            return UNDEFINED
        if epoch == self.entries[-1][0]:
            return epoch, leo
        higher = [e for e in self.entries if e[0] > epoch]
        if not higher:
            return UNDEFINED
        lower = [e for e in self.entries if e[0] <= epoch]
        return (lower[-1][0] if lower else epoch), higher[0][1]


_ops = st.lists(st.one_of(
    st.tuples(st.just("assign"), st.integers(0, 12), st.integers(0, 60)),
    st.tuples(st.just("end"), st.integers(0, 60), st.just(0)),
    st.tuples(st.just("start"), st.integers(0, 60), st.just(0)),
    st.tuples(st.just("reload"), st.just(0), st.just(0)),
), max_size=40)


@settings(max_examples=150, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(ops=_ops)
def test_matches_the_model(tmp_path_factory: pytest.TempPathFactory,
                           ops: list[tuple[str, int, int]]) -> None:
    d = str(tmp_path_factory.mktemp("epochs"))
    c, m = LeaderEpochCache.load(d), Model()
    for op, a, b in ops:
        if op == "assign":
            c.assign(a, b)
            m.assign(a, b)
        elif op == "end":
            c.truncate_from_end(a)
            m.truncate_from_end(a)
        elif op == "start":
            c.truncate_from_start(a)
            m.truncate_from_start(a)
        else:
            c = LeaderEpochCache.load(d)
        assert c.entries() == m.entries
        epochs = [e for e, _ in m.entries]
        starts = [s for _, s in m.entries]
        assert epochs == sorted(set(epochs)) and starts == sorted(set(starts))
        for epoch in range(-1, 14):
            assert c.end_offset_for(epoch, 100) == m.end_offset_for(epoch, 100)
