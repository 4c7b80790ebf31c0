"""The small files of a Raft group's storage directory, each replaced atomically
(`eddy.log.state_files.atomic_write`: temp file, fsync, rename, fsync the directory):

- ``state.bin``: the hard state (term, vote, commit) and the membership, written by
  ``RaftStorage.sync()`` when either changed: ``[magic "ERST"][crc32c u32][postcard State]``;
- ``snapshot-<index:020d>-<term>.bin``: one snapshot, its meta readable without its data:
  ``[magic "ERSN"][meta_len u32][meta crc32c u32][data_len u64][data crc32c u32]
  [postcard SnapshotMeta][data]``.

Both are checked against the bytes present before anything is allocated; a bad file raises
`CorruptStorageError` naming it (and never reads as "no state": a node that forgot its vote
could vote twice in a term)."""

from __future__ import annotations

import contextlib
import logging
import os
import re
import struct
from dataclasses import dataclass

from crc32c import crc32c

from eddy.cluster.raft.types import ConfState, HardState, Snapshot, SnapshotMeta
from eddy.log.state_files import atomic_write
from eddy.postcard import PostcardError, decode, encode

log = logging.getLogger(__name__)

STATE_FILE = "state.bin"
_STATE_MAGIC = b"ERST"
_STATE_HEAD = struct.Struct(">4sI")
_MAX_STATE_BYTES = 1 << 20  # a membership of thousands of nodes fits in far less

_SNAP_MAGIC = b"ERSN"
_SNAP_HEAD = struct.Struct(">4sIIQI")  # magic, meta_len, meta_crc, data_len, data_crc
_MAX_META_BYTES = 1 << 20
_SNAP_RE = re.compile(r"^snapshot-(\d{20})-(\d+)\.bin$")
_CRC_CHUNK = 1 << 20


class RaftStorageError(Exception):
    """Raft storage cannot go on (a failed write or fsync, or a broken file)."""


class CorruptStorageError(RaftStorageError):
    """A file holds bytes that no correct write could have left: the message names the
    file and, for a log segment, the offset. Nothing is dropped silently."""

    def __init__(self, path: str, reason: str, offset: int | None = None) -> None:
        where = f"{path} at offset {offset}" if offset is not None else path
        super().__init__(f"corrupt raft storage: {where}: {reason}")
        self.path = path
        self.offset = offset
        self.reason = reason


@dataclass(frozen=True, slots=True)
class PersistedState:
    hard: HardState
    conf: ConfState


# ---- hard state + membership ---------------------------------------------------------------

def write_state(directory: str, state: PersistedState) -> None:
    payload = encode(state)
    atomic_write(os.path.join(directory, STATE_FILE),
                 _STATE_HEAD.pack(_STATE_MAGIC, crc32c(payload)) + payload)


def read_state(directory: str) -> PersistedState | None:
    """The persisted state, or None when the file was never written."""
    path = os.path.join(directory, STATE_FILE)
    try:
        with open(path, "rb") as f:
            size = os.fstat(f.fileno()).st_size
            if size > _MAX_STATE_BYTES:
                raise CorruptStorageError(path, f"{size} bytes, above the {_MAX_STATE_BYTES} "
                                          "a state file can hold")
            data = f.read(size)
    except FileNotFoundError:
        return None
    if len(data) < _STATE_HEAD.size:
        raise CorruptStorageError(path, f"{len(data)} bytes, shorter than its header")
    magic, crc = _STATE_HEAD.unpack_from(data)
    payload = data[_STATE_HEAD.size:]
    if magic != _STATE_MAGIC:
        raise CorruptStorageError(path, f"magic {magic!r}")
    if crc32c(payload) != crc:
        raise CorruptStorageError(path, "CRC32C mismatch")
    try:
        return decode(PersistedState, payload)
    except PostcardError as exc:
        raise CorruptStorageError(path, str(exc)) from None


# ---- snapshots -----------------------------------------------------------------------------

def snapshot_name(index: int, term: int) -> str:
    return f"snapshot-{index:020d}-{term}.bin"


def list_snapshots(directory: str) -> list[tuple[int, int, str]]:
    """(index, term, path) of every snapshot file, newest (highest index, then term) first."""
    out: list[tuple[int, int, str]] = []
    for name in os.listdir(directory):
        m = _SNAP_RE.match(name)
        if m:
            out.append((int(m.group(1)), int(m.group(2)), os.path.join(directory, name)))
    out.sort(reverse=True)
    return out


def write_snapshot(directory: str, snap: Snapshot) -> str:
    meta = encode(snap.meta)
    head = _SNAP_HEAD.pack(_SNAP_MAGIC, len(meta), crc32c(meta), len(snap.data),
                           crc32c(snap.data))
    path = os.path.join(directory, snapshot_name(snap.meta.index, snap.meta.term))
    atomic_write(path, head + meta + snap.data)
    return path


def _read_snapshot_head(path: str, fd: int) -> tuple[SnapshotMeta, int, int, int]:
    """(meta, data offset, data length, data crc), the lengths checked against the file."""
    size = os.fstat(fd).st_size
    head = os.pread(fd, _SNAP_HEAD.size, 0)
    if len(head) < _SNAP_HEAD.size:
        raise CorruptStorageError(path, f"{size} bytes, shorter than a snapshot header")
    magic, meta_len, meta_crc, data_len, data_crc = _SNAP_HEAD.unpack(head)
    if magic != _SNAP_MAGIC:
        raise CorruptStorageError(path, f"magic {magic!r}")
    if meta_len > _MAX_META_BYTES:
        raise CorruptStorageError(path, f"meta_len {meta_len} above {_MAX_META_BYTES}")
    start = _SNAP_HEAD.size + meta_len
    if start + data_len != size:
        raise CorruptStorageError(
            path, f"meta_len {meta_len} + data_len {data_len} do not match the {size}-byte file")
    meta_bytes = os.pread(fd, meta_len, _SNAP_HEAD.size)
    if len(meta_bytes) != meta_len or crc32c(meta_bytes) != meta_crc:
        raise CorruptStorageError(path, "meta CRC32C mismatch")
    try:
        meta = decode(SnapshotMeta, meta_bytes)
    except PostcardError as exc:
        raise CorruptStorageError(path, str(exc)) from None
    return meta, start, data_len, data_crc


def verify_snapshot(path: str) -> SnapshotMeta:
    """Check the whole file (data CRC too, read in chunks) and return its meta."""
    fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    try:
        meta, start, data_len, data_crc = _read_snapshot_head(path, fd)
        crc = 0
        pos, end = start, start + data_len
        while pos < end:
            chunk = os.pread(fd, min(_CRC_CHUNK, end - pos), pos)
            if not chunk:
                raise CorruptStorageError(path, "file shrank while being read", pos)
            crc = crc32c(chunk, crc)
            pos += len(chunk)
        if crc != data_crc:
            raise CorruptStorageError(path, "data CRC32C mismatch")
        return meta
    finally:
        os.close(fd)


def read_snapshot(path: str) -> Snapshot:
    fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    try:
        meta, start, data_len, data_crc = _read_snapshot_head(path, fd)
        data = os.pread(fd, data_len, start)
    finally:
        os.close(fd)
    if len(data) != data_len or crc32c(data) != data_crc:
        raise CorruptStorageError(path, "data CRC32C mismatch")
    return Snapshot(meta=meta, data=data)


def load_newest_snapshot(directory: str) -> tuple[SnapshotMeta, str] | None:
    """The newest snapshot that verifies. A newer one that does not is renamed to
    ``<name>.corrupt`` (and logged); older ones are deleted: only the one in use stays."""
    chosen: tuple[SnapshotMeta, str] | None = None
    for index, term, path in list_snapshots(directory):
        if chosen is not None:
            remove_file(path)
            continue
        try:
            meta = verify_snapshot(path)
            if (meta.index, meta.term) != (index, term):
                raise CorruptStorageError(
                    path, f"holds index {meta.index} term {meta.term}, not what its name says")
        except CorruptStorageError as exc:
            log.error("%s: falling back to an older snapshot; the bad file is kept as "
                      "%s.corrupt", exc, path)
            os.replace(path, path + ".corrupt")
            continue
        chosen = (meta, path)
    return chosen


def remove_file(path: str) -> None:
    with contextlib.suppress(FileNotFoundError):
        os.unlink(path)


def fsync_dir(directory: str) -> None:
    fd = os.open(directory, os.O_RDONLY | os.O_CLOEXEC)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def make_dirs(directory: str) -> None:
    """Create directory (and missing parents), each new entry made durable in its parent."""
    path = os.path.abspath(directory)
    missing: list[str] = []
    while not os.path.isdir(path):
        missing.append(path)
        path = os.path.dirname(path)
    for p in reversed(missing):
        os.makedirs(p, exist_ok=True)
        fsync_dir(os.path.dirname(p))
