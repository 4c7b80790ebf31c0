"""One log segment: a file of RecordBatches exactly as on the wire, plus its indexes."""

from __future__ import annotations

import contextlib
import logging
import os
import struct
from collections.abc import Iterator
from dataclasses import dataclass

from eddy.log.index import OffsetIndex, TimeIndex
from eddy.protocol.record_batch import (
    HEADER_SIZE,
    LOG_OVERHEAD,
    batch_crc,
    parse_header,
)

log = logging.getLogger(__name__)

_SCAN_CHUNK = 64 * 1024
_HEAD = struct.Struct(">qiibIhi")  # through lastOffsetDelta: 27 bytes
_HEAD_MAXTS = struct.Struct(">q")


def segment_name(base_offset: int) -> str:
    return f"{base_offset:020d}"


@dataclass(frozen=True, slots=True)
class BatchPos:
    base_offset: int
    last_offset: int
    position: int
    size: int
    max_timestamp: int


class _Fd:
    """An fd that outlives its segment's deletion until the last reader lets go."""

    __slots__ = ("fd",)

    def __init__(self, fd: int) -> None:
        self.fd = fd

    def __del__(self) -> None:
        if self.fd >= 0:
            os.close(self.fd)
            self.fd = -1


class Segment:
    def __init__(
        self, directory: str, base_offset: int, index_interval_bytes: int, *, suffix: str = ""
    ) -> None:
        """`suffix` (e.g. ".cleaned") names files beside the live ones: the log cleaner
        writes a replacement segment under it, then renames it in (see change_suffix)."""
        self.directory = directory
        self.base_offset = base_offset
        self.suffix = suffix
        name = os.path.join(directory, segment_name(base_offset))
        self.log_path = name + ".log" + suffix
        self._fd = _Fd(os.open(self.log_path, os.O_RDWR | os.O_CREAT, 0o644))
        self.size = os.fstat(self._fd.fd).st_size
        self.index = OffsetIndex(name + ".idx" + suffix, base_offset)
        self.time_index = TimeIndex(name + ".timeidx" + suffix, base_offset)
        self.index_interval_bytes = index_interval_bytes
        self.next_offset = base_offset
        self.max_timestamp = -1
        self.offset_of_max_timestamp = -1
        self.created_ms = -1  # clock time of the first append, for segment.ms
        self._bytes_since_index = 0
        self.deleted = False

    @property
    def fd(self) -> int:
        return self._fd.fd

    @property
    def file(self) -> _Fd:
        return self._fd

    @property
    def is_empty(self) -> bool:
        return self.size == 0

    # ---- writing -------------------------------------------------------------------------

    def append(
        self,
        data: bytes | bytearray | memoryview,
        batches: list[tuple[int, int, int, int, int]],
        now_ms: int,
    ) -> None:
        """Write whole batches. `batches`: (relative position, size, base offset, last offset,
        max timestamp) of each batch inside data, in order."""
        start = self.size
        written = os.pwrite(self.fd, data, start)
        if written != len(data):
            # a short write leaves a partial tail: cut it so the segment stays valid
            os.ftruncate(self.fd, start)
            raise OSError(f"short write to {self.log_path}: {written} of {len(data)} bytes")
        if self.created_ms < 0:
            self.created_ms = now_ms
        self.size = start + len(data)
        interval = self.index_interval_bytes
        for rel_pos, size, base, last, max_ts in batches:
            if max_ts > self.max_timestamp:
                self.max_timestamp = max_ts
                self.offset_of_max_timestamp = last
            if self._bytes_since_index >= interval or not self.index.positions:
                self.index.append(base, start + rel_pos)
                self.time_index.maybe_append(self.max_timestamp, self.offset_of_max_timestamp)
                self._bytes_since_index = 0
            self._bytes_since_index += size
        self.next_offset = batches[-1][3] + 1

    def fsync(self) -> None:
        os.fsync(self.fd)
        self.index.fsync()
        self.time_index.fsync()

    def truncate_to_position(self, position: int) -> None:
        os.ftruncate(self.fd, position)
        self.size = position
        self.index.truncate_to_position(position)

    # ---- reading -------------------------------------------------------------------------

    def read_at(self, position: int, length: int) -> bytes:
        return os.pread(self.fd, length, position)

    def scan(self, start_position: int = 0, end_position: int | None = None) -> list[BatchPos]:
        """Batch headers from start_position up to end_position (no CRC checks)."""
        out: list[BatchPos] = []
        for bp in self._iter(start_position, end_position):
            out.append(bp)
        return out

    def _iter(self, pos: int, end: int | None = None) -> Iterator[BatchPos]:
        limit = self.size if end is None else min(end, self.size)
        while limit - pos >= HEADER_SIZE:
            chunk = os.pread(self.fd, min(_SCAN_CHUNK, limit - pos), pos)
            off = 0
            n = len(chunk)
            while n - off >= 43:
                base, length, _ple, _magic, _crc, _attrs, lod = _HEAD.unpack_from(chunk, off)
                size = length + LOG_OVERHEAD
                if length < HEADER_SIZE - LOG_OVERHEAD or pos + off + size > limit:
                    return
                (max_ts,) = _HEAD_MAXTS.unpack_from(chunk, off + 35)
                yield BatchPos(base, base + lod, pos + off, size, max_ts)
                off += size
            if off == 0:
                return
            pos += off

    def find_batch(self, offset: int) -> BatchPos | None:
        """The batch holding offset (or the first batch after it), via the sparse index."""
        for bp in self._iter(self.index.lookup(offset)):
            if bp.last_offset >= offset:
                return bp
        return None

    def find_timestamp(self, timestamp: int) -> BatchPos | None:
        """The first batch whose max timestamp is at least timestamp."""
        start_offset = self.time_index.lookup(timestamp)
        start_pos = self.index.lookup(start_offset)
        for bp in self._iter(start_pos):
            if bp.max_timestamp >= timestamp:
                return bp
        return None

    def position_of_offset(self, offset: int) -> int:
        """File position where the batch containing offset starts, or the segment end."""
        bp = self.find_batch(offset)
        return bp.position if bp is not None else self.size

    # ---- recovery ------------------------------------------------------------------------

    def load(self, validate: bool, expected_start: int) -> bool:
        """Load indexes and segment state. With validate, check every batch by CRC and
        truncate at the first bad one. Returns False when a truncation happened."""
        healthy = True
        if not validate:
            # an index with no entries for a segment with data was lost: rebuild it
            ok = self.index.load(self.size) and (self.size == 0 or bool(self.index.positions))
            last_batch = self._last_batch_from(self.index.last_position if ok else 0)
            if not ok or (self.size and last_batch is None):
                log.info("rebuilding index of %s", self.log_path)
                validate = True
            else:
                if last_batch is not None:
                    self.next_offset = last_batch.last_offset + 1
                if not self.time_index.load(self.next_offset - 1) or (
                    self.size and not self.time_index.timestamps
                ):
                    self.time_index.reset()
                    self._rebuild_time_index()
                else:
                    self.max_timestamp = self.time_index.max_timestamp
                    if self.time_index.rel_offsets:
                        self.offset_of_max_timestamp = (
                            self.base_offset + self.time_index.rel_offsets[-1]
                        )
                self.created_ms = int(os.stat(self.log_path).st_mtime * 1000) if self.size else -1
                return True
        if validate:
            healthy = self._recover(expected_start)
        self.created_ms = int(os.stat(self.log_path).st_mtime * 1000) if self.size else -1
        return healthy

    def _last_batch_from(self, pos: int) -> BatchPos | None:
        last = None
        end_pos = pos
        for bp in self._iter(pos):
            last = bp
            end_pos = bp.position + bp.size
        if end_pos != self.size:
            return None
        return last

    def _rebuild_time_index(self) -> None:
        running = -1
        running_off = -1
        since = self.index_interval_bytes
        for bp in self._iter(0):
            if bp.max_timestamp > running:
                running, running_off = bp.max_timestamp, bp.last_offset
            if since >= self.index_interval_bytes:
                self.time_index.maybe_append(running, running_off)
                since = 0
            since += bp.size
        self.max_timestamp, self.offset_of_max_timestamp = running, running_off

    def _recover(self, expected_start: int) -> bool:
        self.index.reset()
        self.time_index.reset()
        self.max_timestamp = -1
        self.offset_of_max_timestamp = -1
        self._bytes_since_index = 0
        pos = 0
        next_offset = max(expected_start, self.base_offset)
        total = self.size
        healthy = True
        since = self.index_interval_bytes
        while pos < total:
            reason = None
            if total - pos < HEADER_SIZE:
                reason = f"{total - pos} trailing bytes, shorter than a batch header"
            else:
                head = os.pread(self.fd, HEADER_SIZE, pos)
                h = parse_header(head)
                if h.magic != 2:
                    reason = f"magic {h.magic}"
                elif h.batch_length < HEADER_SIZE - LOG_OVERHEAD or pos + h.size > total:
                    reason = f"batch length {h.batch_length} runs past the end of the file"
                elif h.base_offset < next_offset:
                    reason = f"offset {h.base_offset} goes backwards (expected {next_offset})"
                else:
                    body = os.pread(self.fd, h.size, pos)
                    if batch_crc(body, 0, h.size) != h.crc:
                        reason = "CRC32C mismatch"
            if reason is not None:
                log.warning(
                    "%s: invalid batch at position %d (%s): truncating %d bytes",
                    self.log_path, pos, reason, total - pos,
                )
                self.truncate_to_position(pos)
                healthy = False
                break
            if h.max_timestamp > self.max_timestamp:
                self.max_timestamp = h.max_timestamp
                self.offset_of_max_timestamp = h.last_offset
            if since >= self.index_interval_bytes:
                self.index.append(h.base_offset, pos)
                self.time_index.maybe_append(self.max_timestamp, self.offset_of_max_timestamp)
                since = 0
            since += h.size
            next_offset = h.last_offset + 1
            pos += h.size
        self.next_offset = next_offset if self.size else max(expected_start, self.base_offset)
        self._bytes_since_index = since
        return healthy

    # ---- lifecycle -----------------------------------------------------------------------

    def close(self) -> None:
        self.index.close()
        self.time_index.close()

    def delete_files(self) -> None:
        """Unlink the files; readers still holding the fd finish their reads."""
        self.deleted = True
        self.close()
        for path in self.paths:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(path)

    @property
    def paths(self) -> tuple[str, str, str]:
        """The log, offset index and time index file paths."""
        return self.log_path, self.index._file.path, self.time_index._file.path

    def retire(self) -> None:
        """This segment was replaced by a cleaned one and its files renamed away or unlinked:
        close the indexes and forget the paths (a successor may now own those names), so a
        stray delete_files() cannot touch them. Readers holding the fd keep reading."""
        self.deleted = True
        self.close()
        gone = os.path.join(self.directory, segment_name(self.base_offset)) + ".replaced"
        self.log_path = gone
        self.index._file.path = gone
        self.time_index._file.path = gone

    def change_suffix(self, suffix: str) -> None:
        """Rename the three files to carry `suffix` instead of the current one (the log last,
        each rename atomic); open fds follow the files. Used by the log cleaner's swap."""
        name = os.path.join(self.directory, segment_name(self.base_offset))
        for f, ext in ((self.index._file, ".idx"), (self.time_index._file, ".timeidx")):
            os.rename(f.path, name + ext + suffix)
            f.path = name + ext + suffix
        os.rename(self.log_path, name + ".log" + suffix)
        self.log_path = name + ".log" + suffix
        self.suffix = suffix
