"""Sparse offset and time indexes: in-memory arrays backed by append-only files.

Offset index entry: relative offset i32, file position i32 (8 bytes, Kafka's layout).
Time index entry:   timestamp i64, relative offset i32 (12 bytes).
A stale or damaged index is detected on load and rebuilt from the log by the caller.
"""

from __future__ import annotations

import os
import struct
from array import array
from bisect import bisect_right

from eddy.log.file_cache import FILES, CachedFile, FileCache

_OFF_ENTRY = struct.Struct(">ii")
_TIME_ENTRY = struct.Struct(">qi")


class _IndexFile:
    """An index's append-only file, opened through the file cache only to append, truncate,
    fsync or load: the entries themselves live in memory."""

    def __init__(self, path: str, files: FileCache) -> None:
        self._f = files.file(path, appending=True)

    @property
    def path(self) -> str:
        return self._f.path

    @path.setter
    def path(self, value: str) -> None:
        self._f.path = value

    @property
    def cached(self) -> CachedFile:
        return self._f

    def append(self, data: bytes) -> None:
        self._f.append(data)

    def truncate(self, size: int) -> None:
        self._f.truncate(size)

    def fsync(self) -> None:
        self._f.fsync()

    def close(self) -> None:
        self._f.release()

    def read_all(self) -> bytes:
        h = self._f.handle()
        size = os.fstat(h.fd).st_size
        return os.pread(h.fd, size, 0) if size else b""

    def replace_if_changed(self, previous: bytes, data: bytes) -> None:
        """Make the file hold data, writing only when it does not already (previous)."""
        if data != previous:
            self._f.truncate(0)
            if data:
                self._f.append(data)


class OffsetIndex:
    """Maps an offset to the file position of a batch at or before it."""

    def __init__(self, path: str, base_offset: int, files: FileCache = FILES) -> None:
        self.base_offset = base_offset
        self.rel_offsets = array("q")
        self.positions = array("q")
        self._file = _IndexFile(path, files)

    def load(self, log_size: int) -> bool:
        """Read entries from disk; False when the file is damaged or stale."""
        data = self._file.read_all()
        if len(data) % _OFF_ENTRY.size:
            return False
        last_rel, last_pos = -1, -1
        for rel, pos in _OFF_ENTRY.iter_unpack(data):
            if rel <= last_rel or pos <= last_pos or pos >= log_size:
                return False
            self.rel_offsets.append(rel)
            self.positions.append(pos)
            last_rel, last_pos = rel, pos
        return True

    def append(self, offset: int, position: int, persist: bool = True) -> None:
        """Add an entry, on disk first (unless not persist: see write_rebuilt): a failed
        write leaves the index as it was."""
        rel = offset - self.base_offset
        if self.rel_offsets and rel <= self.rel_offsets[-1]:
            return
        if persist:
            self._file.append(_OFF_ENTRY.pack(rel, position))
        self.rel_offsets.append(rel)
        self.positions.append(position)

    def read_file(self) -> bytes:
        return self._file.read_all()

    def write_rebuilt(self, previous: bytes) -> None:
        """After entries were rebuilt in memory: the file gets them unless it has them
        already (previous: its content before), so a recovery that finds the index intact
        writes nothing."""
        data = b"".join(map(_OFF_ENTRY.pack, self.rel_offsets, self.positions))
        self._file.replace_if_changed(previous, data)

    def __len__(self) -> int:
        return len(self.positions)

    def forget_after(self, count: int) -> None:
        """Drop in-memory entries past the first count (see sync_file for the file)."""
        del self.rel_offsets[count:]
        del self.positions[count:]

    def sync_file(self) -> None:
        """Cut the file to the entries in memory (after a failed append was undone)."""
        self._file.truncate(len(self.positions) * _OFF_ENTRY.size)

    def lookup(self, offset: int) -> int:
        """File position of the last indexed batch starting at or before offset."""
        i = bisect_right(self.rel_offsets, offset - self.base_offset)
        return self.positions[i - 1] if i else 0

    def truncate_to_position(self, position: int) -> None:
        """Drop entries pointing at or past a truncated log position."""
        keep = bisect_right(self.positions, position - 1)
        del self.rel_offsets[keep:]
        del self.positions[keep:]
        self._file.truncate(keep * _OFF_ENTRY.size)

    def reset(self) -> None:
        self.truncate_to_position(0)

    @property
    def last_position(self) -> int:
        return self.positions[-1] if self.positions else 0

    def fsync(self) -> None:
        self._file.fsync()

    def close(self) -> None:
        self._file.close()


class TimeIndex:
    """Maps a timestamp to an offset whose batch has a max timestamp at least that large."""

    def __init__(self, path: str, base_offset: int, files: FileCache = FILES) -> None:
        self.base_offset = base_offset
        self.timestamps = array("q")
        self.rel_offsets = array("q")
        self._file = _IndexFile(path, files)

    def load(self, last_offset: int) -> bool:
        data = self._file.read_all()
        if len(data) % _TIME_ENTRY.size:
            return False
        last_ts, last_rel = -(2**63), -1
        for ts, rel in _TIME_ENTRY.iter_unpack(data):
            if ts <= last_ts or rel < last_rel or self.base_offset + rel > last_offset:
                return False
            self.timestamps.append(ts)
            self.rel_offsets.append(rel)
            last_ts, last_rel = ts, rel
        return True

    def maybe_append(self, timestamp: int, offset: int, persist: bool = True) -> None:
        if self.timestamps and timestamp <= self.timestamps[-1]:
            return
        rel = offset - self.base_offset
        if persist:
            self._file.append(_TIME_ENTRY.pack(timestamp, rel))
        self.timestamps.append(timestamp)
        self.rel_offsets.append(rel)

    def read_file(self) -> bytes:
        return self._file.read_all()

    def write_rebuilt(self, previous: bytes) -> None:
        data = b"".join(map(_TIME_ENTRY.pack, self.timestamps, self.rel_offsets))
        self._file.replace_if_changed(previous, data)

    def __len__(self) -> int:
        return len(self.timestamps)

    def forget_after(self, count: int) -> None:
        del self.timestamps[count:]
        del self.rel_offsets[count:]

    def sync_file(self) -> None:
        self._file.truncate(len(self.timestamps) * _TIME_ENTRY.size)

    def lookup(self, timestamp: int) -> int:
        """An offset from which to scan for the first batch with max timestamp >= timestamp."""
        i = bisect_right(self.timestamps, timestamp - 1)
        # entries before i have ts < timestamp: the batch with a larger ts is after them
        return self.base_offset + self.rel_offsets[i - 1] if i else self.base_offset

    def truncate_to_offset(self, offset: int) -> None:
        keep = bisect_right(self.rel_offsets, offset - self.base_offset - 1)
        del self.timestamps[keep:]
        del self.rel_offsets[keep:]
        self._file.truncate(keep * _TIME_ENTRY.size)

    def reset(self) -> None:
        del self.timestamps[:]
        del self.rel_offsets[:]
        self._file.truncate(0)

    @property
    def max_timestamp(self) -> int:
        return self.timestamps[-1] if self.timestamps else -1

    def fsync(self) -> None:
        self._file.fsync()

    def close(self) -> None:
        self._file.close()
