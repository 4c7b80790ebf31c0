"""The bounded cache of open segment and index files: how many fds stay open, pins that keep
an fd alive for a response in flight, and what happens when the process runs out of fds."""

from __future__ import annotations

import contextlib
import os
import resource
from collections.abc import Iterator
from pathlib import Path

import pytest

from eddy.log.file_cache import CachedFile, FileCache, FileLimitError


def open_paths_under(directory: Path) -> list[str]:
    """Files under directory this process holds open (from /proc/self/fd)."""
    out = []
    for name in os.listdir("/proc/self/fd"):
        with contextlib.suppress(OSError):
            target = os.readlink(f"/proc/self/fd/{name}")
            if target.startswith(str(directory)):
                out.append(target)
    return out


def files(cache: FileCache, directory: Path, n: int) -> list[CachedFile]:
    out = []
    for i in range(n):
        f = cache.file(str(directory / f"f{i}"))
        f.pwrite_all(b"file %d" % i, 0)
        out.append(f)
    return out


def test_at_most_capacity_files_stay_open_and_every_one_still_reads(tmp_path: Path) -> None:
    cache = FileCache(capacity=8)
    fs = files(cache, tmp_path, 50)
    for _ in range(3):
        for i, f in enumerate(fs):
            assert f.pread(100, 0) == b"file %d" % i
            assert len(open_paths_under(tmp_path)) <= 8


def test_a_pinned_fd_outlives_eviction_and_deletion(tmp_path: Path) -> None:
    cache = FileCache(capacity=8)
    a = cache.file(str(tmp_path / "a"))
    a.pwrite_all(b"kept bytes", 0)
    pin = a.pin()
    assert pin is not None
    files(cache, tmp_path, 30)  # enough to evict everything that is not pinned
    a.detach()
    os.unlink(tmp_path / "a")
    assert os.pread(pin.fd, 100, 0) == b"kept bytes"
    assert any(p.endswith("/a (deleted)") for p in open_paths_under(tmp_path))
    del pin, a  # the last holders: the response and the deleted segment's file
    assert not any(p.endswith("/a (deleted)") for p in open_paths_under(tmp_path))


def test_pins_are_bounded_so_responses_cannot_hold_every_fd(tmp_path: Path) -> None:
    cache = FileCache(capacity=8)
    fs = files(cache, tmp_path, 10)
    pins = [fs[i].pin() for i in range(cache.max_pins)]
    assert all(p is not None for p in pins)
    assert fs[-1].pin() is None
    pins.pop()
    assert fs[-1].pin() is not None


def test_a_file_deleted_behind_the_cache_is_not_created_again(tmp_path: Path) -> None:
    cache = FileCache(capacity=8)
    a = cache.file(str(tmp_path / "a"))
    a.pwrite_all(b"x", 0)
    files(cache, tmp_path, 20)  # a is evicted
    os.unlink(tmp_path / "a")
    with pytest.raises(FileNotFoundError):
        a.pread(1, 0)
    assert not (tmp_path / "a").exists()


def test_a_released_file_cannot_be_used(tmp_path: Path) -> None:
    cache = FileCache(capacity=8)
    a = cache.file(str(tmp_path / "a"))
    a.pwrite_all(b"x", 0)
    a.release()
    with pytest.raises(OSError, match="closed"):
        a.pread(1, 0)
    assert open_paths_under(tmp_path) == []


@contextlib.contextmanager
def fd_table_nearly_full(spare: int) -> Iterator[list[int]]:
    """Lower this process's soft fd limit to what it has open plus `spare`, then restore."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    in_use = max(int(n) for n in os.listdir("/proc/self/fd")) + 1
    held: list[int] = []
    resource.setrlimit(resource.RLIMIT_NOFILE, (in_use + spare, hard))
    try:
        yield held
    finally:
        for fd in held:
            os.close(fd)
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))


def use_up_fds(held: list[int]) -> None:
    for _ in range(10_000):
        try:
            held.append(os.open("/dev/null", os.O_RDONLY))
        except OSError:
            return


def test_out_of_fds_the_cache_gives_fds_back_and_carries_on(tmp_path: Path) -> None:
    cache = FileCache(capacity=1000)
    with fd_table_nearly_full(spare=60) as held:
        fs = files(cache, tmp_path, 40)
        use_up_fds(held)  # sockets took everything else
        extra = cache.file(str(tmp_path / "extra"))
        extra.pwrite_all(b"fits", 0)  # half of the cached files were closed to make room
        assert extra.pread(4, 0) == b"fits"
        assert cache.capacity < 40
        for i, f in enumerate(fs):  # and the cache keeps working within its new size
            assert f.pread(100, 0) == b"file %d" % i


def test_out_of_fds_with_nothing_to_give_back_names_the_limit(tmp_path: Path) -> None:
    cache = FileCache(capacity=1000)
    with fd_table_nearly_full(spare=20) as held:
        use_up_fds(held)
        f = cache.file(str(tmp_path / "a"))
        with pytest.raises(FileLimitError, match="RLIMIT_NOFILE") as err:
            f.pwrite_all(b"x", 0)
        assert "storage.max.open.files" in str(err.value)
        os.close(held.pop())  # one fd comes back: the file can be used again
        f.pwrite_all(b"x", 0)
        assert f.pread(1, 0) == b"x"


def test_reads_past_the_pin_budget_return_the_bytes_instead(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A fetch response pins the fds of its file ranges; beyond the budget the partition log
    reads the bytes at once, so responses in flight cannot hold every fd."""
    from test_log import append, open_log

    from eddy.log.file_cache import FILES
    from eddy.log.partition import FetchSlice

    monkeypatch.setattr(FILES, "capacity", 8)
    logs = [open_log(tmp_path / f"p{i}") for i in range(FILES.max_pins + 1)]
    for i, plog in enumerate(logs):
        append(plog, [b"value %d" % i])
    reads = [plog.read(0, 1 << 20, 1, True) for plog in logs]
    assert all(isinstance(r, FetchSlice) for r in reads[:-1])
    assert isinstance(reads[-1], bytes)
    for plog, r in zip(logs, reads, strict=True):  # the same bytes either way
        stored = plog.active.read_at(0, plog.active.size)
        assert (r.read() if isinstance(r, FetchSlice) else r) == stored
    del reads, r
    assert isinstance(logs[0].read(0, 1 << 20, 1, True), FetchSlice)  # pins went back
    for plog in logs:
        plog.close()
