"""Raft log segment files: ``<first_index:020d>.log``, a run of records
``[len u32][crc32c u32][postcard Entry]`` (big-endian; the CRC covers the entry bytes).

A `RaftSegment` knows where each of its entries starts (an ``array`` of file offsets, 4
bytes an entry) and keeps its not-yet-written tail in a buffer; entries themselves are read
back with pread. `scan_segment` rebuilds that at open, validating every record: a bad or
partial record in the last segment is a torn write and is cut off (and logged); anywhere
else it is corruption and raises `CorruptStorageError` naming the file and offset."""

from __future__ import annotations

import logging
import os
import struct
from array import array
from dataclasses import dataclass

from crc32c import crc32c

from eddy.cluster.raft.storage.files import CorruptStorageError, remove_file
from eddy.cluster.raft.types import Entry
from eddy.log.file_cache import CachedFile, FileCache
from eddy.postcard import PostcardError, decode, encode

log = logging.getLogger(__name__)

RECORD_HEAD = struct.Struct(">II")  # length of the entry bytes, their crc32c
MAX_RECORD_BYTES = 64 * 1024 * 1024  # one entry's encoding; longer is corruption
MIN_ENTRY_BYTES = 4  # term, index, kind and the data length: a byte each at least
_READ_CHUNK = 1 << 20
_POS_TYPE = "I" if array("I").itemsize == 4 else "L"  # offsets < 2**32: see RaftStorage

LOG_SUFFIX = ".log"
ENTRY_OVERHEAD = 16  # an entry's size beyond its data, for byte budgets (roughly)


def segment_file_name(first_index: int) -> str:
    return f"{first_index:020d}{LOG_SUFFIX}"


def encode_record(entry: Entry) -> bytes:
    payload = encode(entry)
    if len(payload) > MAX_RECORD_BYTES:
        raise ValueError(f"entry {entry.index}: {len(payload)} bytes encoded, above the "
                         f"{MAX_RECORD_BYTES}-byte limit of a raft log record")
    return RECORD_HEAD.pack(len(payload), crc32c(payload)) + payload


def entry_size(entry: Entry) -> int:
    """What an entry counts for against a byte budget (reads, the cache)."""
    return len(entry.data) + ENTRY_OVERHEAD


class RaftSegment:
    """One segment file. Entries ``base .. base + len(positions) - 1``; bytes below
    `flushed` are in the file, the rest in `pending` until `flush`."""

    __slots__ = ("base", "file", "flushed", "pending", "positions")

    def __init__(self, file: CachedFile, base: int, flushed: int,
                 positions: array[int] | None = None) -> None:
        self.file = file
        self.base = base
        self.flushed = flushed
        self.pending = bytearray()
        self.positions: array[int] = positions if positions is not None else array(_POS_TYPE)

    @classmethod
    def create(cls, directory: str, base: int, files: FileCache) -> RaftSegment:
        """A new empty segment file (its directory entry is durable only after the caller
        fsyncs the directory)."""
        f = files.file(os.path.join(directory, segment_file_name(base)))
        f.handle()  # creates the file now
        if f.size():  # a stray file of that name (never one of ours still in use)
            f.truncate(0)
        return cls(f, base, 0)

    @property
    def path(self) -> str:
        return self.file.path

    @property
    def size(self) -> int:
        return self.flushed + len(self.pending)

    @property
    def count(self) -> int:
        return len(self.positions)

    @property
    def last_index(self) -> int:
        """base - 1 when empty."""
        return self.base + len(self.positions) - 1

    def add(self, record: bytes) -> None:
        self.positions.append(self.size)
        self.pending += record

    def flush(self) -> None:
        if self.pending:
            self.file.pwrite_all(self.pending, self.flushed)
            self.flushed += len(self.pending)
            self.pending.clear()

    def fsync(self) -> None:
        self.file.fsync()

    def truncate_from(self, index: int) -> None:
        """Drop the entries from index on; a cut inside the file is fsynced now, so stale
        records past the new end can never reappear behind newer ones."""
        k = index - self.base
        pos = self.positions[k]
        del self.positions[k:]
        if pos >= self.flushed:
            del self.pending[pos - self.flushed:]
            return
        self.pending.clear()
        self.file.truncate(pos)
        self.file.fsync()
        self.flushed = pos

    def read(self, lo: int, hi: int, budget: int | None = None, *,
             at_least_one: bool = True) -> list[Entry]:
        """Entries lo <= index < hi (all in this segment), each checked by CRC. With a
        budget, only as many as fit in it (by `entry_size`), but one at least when
        at_least_one."""
        n = len(self.positions)
        k, k_end = lo - self.base, hi - self.base
        end = self.positions[k_end] if k_end < n else self.size
        if end > self.flushed:
            self.flush()
        out: list[Entry] = []
        total = 0
        while k < k_end:
            # one pread for as many whole records as fit in a chunk (one record at least)
            start = self.positions[k]
            j = k + 1
            while j < k_end and self.positions[j] - start < _READ_CHUNK:
                j += 1
            stop = self.positions[j] if j < n else self.size
            buf = memoryview(self.file.pread(stop - start, start))
            if len(buf) != stop - start:
                raise CorruptStorageError(self.path, f"file ends before {stop}", start)
            for i in range(k, j):
                off = self.positions[i] - start
                nxt = (self.positions[i + 1] if i + 1 < n else self.size) - start
                entry = _decode_record(self.path, buf, off, nxt - off, self.base + i, start)
                if budget is not None:
                    total += entry_size(entry)
                    if total > budget and (out or not at_least_one):
                        return out
                out.append(entry)
            k = j
        return out

    def close(self) -> None:
        self.file.release()

    def delete(self) -> None:
        self.file.release()
        remove_file(self.path)


def _decode_record(path: str, buf: memoryview, off: int, size: int, index: int,
                   base_pos: int) -> Entry:
    """A record read back through the index: anything unexpected is corruption."""
    where = base_pos + off
    if size < RECORD_HEAD.size:
        raise CorruptStorageError(path, f"record of {size} bytes", where)
    length, crc = RECORD_HEAD.unpack_from(buf, off)
    if length != size - RECORD_HEAD.size:
        raise CorruptStorageError(path, f"record length {length}, expected "
                                  f"{size - RECORD_HEAD.size}", where)
    payload = buf[off + RECORD_HEAD.size:off + size]
    if crc32c(payload) != crc:
        raise CorruptStorageError(path, f"CRC32C mismatch in entry {index}", where)
    try:
        entry = decode(Entry, payload)
    except PostcardError as exc:
        raise CorruptStorageError(path, str(exc), where) from None
    if entry.index != index:
        raise CorruptStorageError(path, f"entry index {entry.index}, expected {index}", where)
    return entry


def _peek(payload: memoryview) -> tuple[int, int] | None:
    """(term, index): an Entry's first two fields, postcard u64 varints, read without
    decoding the rest (recovery reads every record; each is fully decoded, strictly, when
    read back). None when they are not two well-formed varints."""
    out = []
    pos, n = 0, len(payload)
    for _ in range(2):
        value = shift = 0
        while True:
            if pos >= n or shift > 63:
                return None
            b = payload[pos]
            pos += 1
            value |= (b & 0x7F) << shift
            shift += 7
            if b < 0x80:
                break
        if value >= 1 << 64:
            return None
        out.append(value)
    return out[0], out[1]


@dataclass(slots=True)
class ScanResult:
    segment: RaftSegment
    runs: list[tuple[int, int]]  # (first index, term) of each run of one term
    cut_bytes: int  # torn tail removed (last segment only)


def scan_segment(file: CachedFile, base: int, *, last: bool, prev_term: int) -> ScanResult:
    """Validate every record of a segment and index it. Entries must start at `base`, be
    contiguous, and have terms >= prev_term and non-decreasing. A record whose length or
    CRC is bad is a torn write when `last` (cut off, logged) and corruption otherwise; a
    record with a good CRC that breaks the index or term order is always corruption."""
    path = file.path
    size = file.size()
    positions: array[int] = array(_POS_TYPE)
    runs: list[tuple[int, int]] = []
    term = prev_term
    expect = base
    pos = 0
    buf = memoryview(b"")
    buf_pos = 0
    while pos < size:
        reason = None
        entry: tuple[int, int] | None = None  # (term, index)
        if size - pos < RECORD_HEAD.size:
            reason = f"{size - pos} trailing bytes, shorter than a record header"
        else:
            if pos + RECORD_HEAD.size > buf_pos + len(buf):
                buf, buf_pos = memoryview(file.pread(min(_READ_CHUNK, size - pos), pos)), pos
            length, crc = RECORD_HEAD.unpack_from(buf, pos - buf_pos)
            end = pos + RECORD_HEAD.size + length
            if length > MAX_RECORD_BYTES:
                reason = f"record length {length} above the {MAX_RECORD_BYTES}-byte limit"
            elif length < MIN_ENTRY_BYTES:
                reason = f"record length {length} below {MIN_ENTRY_BYTES}"
            elif end > size:
                reason = f"record length {length} runs past the end of the file ({size})"
            else:
                if end > buf_pos + len(buf):  # checked against the file size above
                    buf = memoryview(file.pread(max(_READ_CHUNK, end - pos), pos))
                    buf_pos = pos
                payload = buf[pos + RECORD_HEAD.size - buf_pos:end - buf_pos]
                if len(payload) != length:
                    reason = "file shrank while being read"
                elif crc32c(payload) != crc:
                    reason = "CRC32C mismatch"
                else:
                    entry = _peek(payload)
                    if entry is None:
                        raise CorruptStorageError(path, "good CRC, but no term and index "
                                                  "varints at the start of the entry", pos)
        if entry is None:
            if not last:
                raise CorruptStorageError(path, f"{reason} (not the last segment: entries "
                                          "after it may be committed)", pos)
            log.warning("%s: torn write at offset %d (%s): cutting %d bytes (entries from "
                        "%d on were never synced)", path, pos, reason, size - pos, expect)
            file.truncate(pos)
            file.fsync()
            return ScanResult(RaftSegment(file, base, pos, positions), runs, size - pos)
        e_term, e_index = entry
        if e_index != expect:
            raise CorruptStorageError(path, f"entry index {e_index}, expected {expect}", pos)
        if e_term < term:
            raise CorruptStorageError(
                path, f"entry {e_index} has term {e_term} after term {term}", pos)
        if not runs or e_term != term:
            runs.append((e_index, e_term))
        term = e_term
        positions.append(pos)
        expect += 1
        pos = end
    return ScanResult(RaftSegment(file, base, size, positions), runs, 0)
