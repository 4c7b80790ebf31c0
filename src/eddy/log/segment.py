"""One log segment: a file of RecordBatches exactly as on the wire, plus its indexes."""

from __future__ import annotations

import contextlib
import logging
import os
import struct
from collections.abc import Iterator
from dataclasses import dataclass

from eddy.log.file_cache import FILES, FileCache, FileLimitError, Pin
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
#: a test hook (opt-in): append "<log path> <length>" to this file after each fsync
_FSYNC_LOG = os.environ.get("EDDYTEST_FSYNC_LOG", "")  # not EDDY_*: that is config


def segment_name(base_offset: int) -> str:
    return f"{base_offset:020d}"


@dataclass(frozen=True, slots=True)
class BatchPos:
    base_offset: int
    last_offset: int
    position: int
    size: int
    max_timestamp: int


class Segment:
    """The log file and both indexes are opened through a FileCache when used (a cold
    segment holds no fd); `pin_log()` keeps the log's fd open for a response in flight."""

    def __init__(
        self, directory: str, base_offset: int, index_interval_bytes: int, *, suffix: str = "",
        files: FileCache = FILES,
    ) -> None:
        """`suffix` (e.g. ".cleaned") names files beside the live ones: the log cleaner
        writes a replacement segment under it, then renames it in (see change_suffix).
        Creates the log file if it does not exist."""
        self.directory = directory
        self.base_offset = base_offset
        self.suffix = suffix
        name = os.path.join(directory, segment_name(base_offset))
        self._log = files.file(name + ".log" + suffix)
        self.size = self._log.size()
        self.index = OffsetIndex(name + ".idx" + suffix, base_offset, files)
        self.time_index = TimeIndex(name + ".timeidx" + suffix, base_offset, files)
        self.index_interval_bytes = index_interval_bytes
        self.next_offset = base_offset
        self.max_timestamp = -1
        self.offset_of_max_timestamp = -1
        self.created_ms = -1  # clock time of the first append, for segment.ms
        self._bytes_since_index = 0
        self.deleted = False
        self.needs_repair = False  # a failed append could not be cut back on disk yet

    @property
    def log_path(self) -> str:
        return self._log.path

    @log_path.setter
    def log_path(self, value: str) -> None:
        self._log.path = value

    def pin_log(self) -> Pin | None:
        """The log's fd, kept open (and in the cache) until the pin is dropped; None when
        too many fds are pinned already."""
        return self._log.pin()

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
        max timestamp) of each batch inside data, in order. All or nothing: when a write
        fails (a full disk, no fd), the log, both indexes and this object are left as they
        were before the call, and the OSError is raised."""
        if self.needs_repair:
            self.repair()
        start = self.size
        n_index, n_time = len(self.index.positions), len(self.time_index.timestamps)
        saved = (self.max_timestamp, self.offset_of_max_timestamp, self._bytes_since_index)
        written = False
        try:
            self._log.pwrite_all(data, start)
            written = True
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
        except BaseException as exc:
            self.max_timestamp, self.offset_of_max_timestamp, self._bytes_since_index = saved
            self.index.forget_after(n_index)
            self.time_index.forget_after(n_time)
            if not written and isinstance(exc, FileLimitError):
                raise  # no fd for the log: nothing was written
            self.needs_repair = True
            try:
                self.repair()
            except OSError as exc:
                log.error("%s: cannot cut a failed append back yet (%s): retrying before the "
                          "next append", self.log_path, exc)
            raise
        if self.created_ms < 0:
            self.created_ms = now_ms
        self.size = start + len(data)
        self.next_offset = batches[-1][3] + 1

    def repair(self) -> None:
        """Cut the files back to what this object holds: the log to `size`, each index to
        its entries in memory (after a failed append)."""
        self._log.truncate(self.size)
        self.index.sync_file()
        self.time_index.sync_file()
        self.needs_repair = False

    def fsync(self, indexes: bool = True) -> None:
        """fsync the files written since their last fsync; with ``indexes`` False only the
        log (what acknowledgements need: indexes are derived data, and a start after an
        unclean shutdown checks them against the log, rebuilding what does not fit)."""
        size = self.size  # read first: what is on disk once the fsync returns
        self._log.fsync()
        if indexes:
            self.index.fsync()
            self.time_index.fsync()
        if _FSYNC_LOG:  # tests (power cut): "path length" of every log fsynced
            with open(_FSYNC_LOG, "a") as f:
                f.write(f"{self.log_path} {size}\n")

    def truncate_to_position(self, position: int) -> None:
        self._log.truncate(position)
        self.size = position
        self.index.truncate_to_position(position)

    # ---- reading -------------------------------------------------------------------------

    def read_at(self, position: int, length: int) -> bytes:
        return self._log.pread(length, position)

    def scan(self, start_position: int = 0, end_position: int | None = None) -> list[BatchPos]:
        """Batch headers from start_position up to end_position (no CRC checks)."""
        out: list[BatchPos] = []
        for bp in self._iter(start_position, end_position):
            out.append(bp)
        return out

    def _iter(self, pos: int, end: int | None = None) -> Iterator[BatchPos]:
        limit = self.size if end is None else min(end, self.size)
        while limit - pos >= HEADER_SIZE:
            chunk = self._log.pread(min(_SCAN_CHUNK, limit - pos), pos)
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
        # indexes are rebuilt in memory and written only where they differ from the files
        old_index, old_time_index = self.index.read_file(), self.time_index.read_file()
        self.index.forget_after(0)
        self.time_index.forget_after(0)
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
                head = self._log.pread(HEADER_SIZE, pos)
                h = parse_header(head)
                if h.magic != 2:
                    reason = f"magic {h.magic}"
                elif h.batch_length < HEADER_SIZE - LOG_OVERHEAD or pos + h.size > total:
                    reason = f"batch length {h.batch_length} runs past the end of the file"
                elif h.base_offset < next_offset:
                    reason = f"offset {h.base_offset} goes backwards (expected {next_offset})"
                else:
                    body = self._log.pread(h.size, pos)
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
                self.index.append(h.base_offset, pos, persist=False)
                self.time_index.maybe_append(self.max_timestamp, self.offset_of_max_timestamp,
                                             persist=False)
                since = 0
            since += h.size
            next_offset = h.last_offset + 1
            pos += h.size
        self.index.write_rebuilt(old_index)
        self.time_index.write_rebuilt(old_time_index)
        self.next_offset = next_offset if self.size else max(expected_start, self.base_offset)
        self._bytes_since_index = since
        return healthy

    # ---- lifecycle -----------------------------------------------------------------------

    def close(self) -> None:
        """Give the files back to the cache for good (their fds close once unused)."""
        self._log.release()
        self.index.close()
        self.time_index.close()

    def _let_go(self) -> None:
        """Deleted or replaced: close the indexes; the log's fd (if open) stays with this
        object for readers that still hold it."""
        self.deleted = True
        self._log.detach()
        self.index.close()
        self.time_index.close()

    def delete_files(self) -> None:
        """Unlink the files; readers still holding this segment finish their reads through
        the log's fd if it was open (it closes when the segment is dropped)."""
        self._let_go()
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
        stray delete_files() cannot touch them. Readers holding it keep reading the log's fd
        if it was open."""
        self._let_go()
        gone = os.path.join(self.directory, segment_name(self.base_offset)) + ".replaced"
        self.log_path = gone
        self.index._file.path = gone
        self.time_index._file.path = gone

    def change_suffix(self, suffix: str) -> None:
        """Rename the three files to carry `suffix` instead of the current one (the log last,
        each rename atomic); open fds follow the files. Used by the log cleaner's swap."""
        name = os.path.join(self.directory, segment_name(self.base_offset))
        self.index._file.cached.rename(name + ".idx" + suffix)
        self.time_index._file.cached.rename(name + ".timeidx" + suffix)
        self._log.rename(name + ".log" + suffix)
        self.suffix = suffix
