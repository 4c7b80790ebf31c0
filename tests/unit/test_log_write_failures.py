"""A write that fails half way (a full disk) leaves the partition log at its last
acknowledged batch: on disk, in memory, and after a restart, clean or not."""

from __future__ import annotations

import errno
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from test_log import NOW, append, open_log, read_all

from eddy.log import partition as partition_module
from eddy.log.file_cache import CachedFile
from eddy.log.partition import PartitionLog
from eddy.protocol.errors import ErrorCode, KafkaError

ENOSPC = OSError(errno.ENOSPC, "No space left on device")
LATER = 2_000_000_000_000  # a timestamp past every earlier one: the batch gets a time index entry


def disk_sizes(d: Path) -> dict[str, int]:
    return {p.name: p.stat().st_size for p in sorted(d.iterdir())
            if p.suffix in (".log", ".idx", ".timeidx")}


def fail_once(monkeypatch: pytest.MonkeyPatch, method: str,
              when: Callable[[CachedFile], bool], before: Callable[..., Any] | None = None
              ) -> list[str]:
    """Make CachedFile.<method> raise ENOSPC the first time `when(file)` holds (after
    running `before(file, *args)`, e.g. a partial write); returns the paths it failed."""
    real = getattr(CachedFile, method)
    failed: list[str] = []

    def patched(self: CachedFile, *args: Any) -> Any:
        if not failed and when(self):
            failed.append(self.path)
            if before is not None:
                before(self, *args)
            raise ENOSPC
        return real(self, *args)

    monkeypatch.setattr(CachedFile, method, patched)
    return failed


def half_written(f: CachedFile, data: bytes, position: int) -> None:
    os.pwrite(f.handle().fd, bytes(data)[: len(data) // 2], position)


def assert_storage_error(plog: PartitionLog, values: list[bytes], ts: int = NOW) -> None:
    with pytest.raises(KafkaError) as err:
        append(plog, values, ts)
    assert err.value.code == ErrorCode.kafka_storage_error
    assert "No space left on device" in err.value.message


def check_state_and_restarts(d: Path, plog: PartitionLog, acked: list[bytes]) -> None:
    """The log serves exactly the acknowledged values, accepts the next append, and both a
    clean and an unclean restart find the same."""
    expected = list(enumerate(acked))
    assert plog.log_end_offset == len(acked)
    assert read_all(plog) == expected
    append(plog, [b"after"])
    expected.append((len(acked), b"after"))
    assert read_all(plog) == expected
    plog.close()
    for clean in (True, False):
        again = open_log(d, clean=clean, index_interval_bytes="1")
        assert read_all(again) == expected
        again.close()


def test_a_torn_log_write_is_cut_back(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    plog = open_log(tmp_path, index_interval_bytes="1")
    append(plog, [b"a1", b"a2"])
    sizes = disk_sizes(tmp_path)
    failed = fail_once(monkeypatch, "pwrite_all", lambda f: True, half_written)
    assert_storage_error(plog, [b"lost"])
    assert failed
    assert disk_sizes(tmp_path) == sizes
    monkeypatch.undo()
    check_state_and_restarts(tmp_path, plog, [b"a1", b"a2"])


@pytest.mark.parametrize("index", [".idx", ".timeidx"])
def test_a_failed_index_write_takes_the_log_write_back_too(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, index: str) -> None:
    plog = open_log(tmp_path, index_interval_bytes="1")  # every batch gets index entries
    append(plog, [b"a1"])
    append(plog, [b"a2"], ts=LATER - 1)
    sizes = disk_sizes(tmp_path)
    failed = fail_once(monkeypatch, "append", lambda f: f.path.endswith(index))
    assert_storage_error(plog, [b"lost"], LATER)
    assert failed
    assert disk_sizes(tmp_path) == sizes
    monkeypatch.undo()
    check_state_and_restarts(tmp_path, plog, [b"a1", b"a2"])


def test_an_undo_that_fails_too_is_finished_before_the_next_append(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    plog = open_log(tmp_path, index_interval_bytes="1")
    append(plog, [b"a1"])
    sizes = disk_sizes(tmp_path)
    fail_once(monkeypatch, "append", lambda f: f.path.endswith(".idx"))
    fail_once(monkeypatch, "truncate", lambda f: f.path.endswith(".log"))
    assert_storage_error(plog, [b"lost"])
    assert plog.active.needs_repair  # the log still holds the failed batch's bytes
    assert disk_sizes(tmp_path) != sizes
    monkeypatch.undo()
    append(plog, [b"a2"])
    assert not plog.active.needs_repair
    check_state_and_restarts(tmp_path, plog, [b"a1", b"a2"])


def test_a_roll_that_cannot_create_the_next_segment_leaves_the_log_as_it_was(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    plog = open_log(tmp_path, segment_bytes="200")
    append(plog, [b"x" * 120])
    segments = list(plog.segments)

    def no_room(*args: Any, **kwargs: Any) -> Any:
        raise ENOSPC

    monkeypatch.setattr(partition_module, "Segment", no_room)
    assert_storage_error(plog, [b"y" * 120])  # would roll: the segment is over 200 bytes
    assert plog.segments == segments
    monkeypatch.undo()
    append(plog, [b"y" * 120])
    assert len(plog.segments) == 2
    assert [v for _, v in read_all(plog)] == [b"x" * 120, b"y" * 120]
    plog.close()
