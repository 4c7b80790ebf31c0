"""`RaftStorage`: one Raft group's durable log, hard state and snapshot, in one directory
(``data_dir/raft/<group>``). Implements the core's `LogStore` reads plus the driver's writes.

Layout and rules:

- the log is segment files ``<first_index:020d>.log`` of CRC'd records (storage_segments),
  rolled at `segment_bytes`; a rolled segment is flushed and fsynced before its successor is
  created, so only the last segment can end in a torn write;
- `append` buffers; `sync` (once per Ready: group commit) writes the buffer, fsyncs the log
  (and the directory after a new segment), then writes the hard state and membership;
- the hard state and membership live in ``state.bin``, replaced atomically (temp, fsync,
  rename, fsync dir) by `sync` when they changed. A separate file rather than records in the
  log: the log is truncated and compacted, the vote must survive both; a vote is rewritten
  far less often than entries are appended (only commit moves every Ready), and reading it
  at open costs one small file, not a scan. Log first, state second: a crash in between
  leaves the old state, never a commit index past the entries on disk;
- snapshots are ``snapshot-<index:020d>-<term>.bin`` (storage_files), written atomically
  before any entry they cover is dropped; the previous one is deleted once the switch is done;
- suffix truncation (Raft overwriting uncommitted entries) deletes later segments last first
  (fsyncing the directory after each) and cuts the containing segment with an fsynced
  ftruncate, so stale records never reappear behind new ones after a crash.

Memory is bounded: per entry 4 bytes of file offset in memory, terms as runs, and a cache of
the most recent entries up to `cache_bytes`; older entries are read back with pread.

After an I/O error the storage refuses further use (`RaftStorageError`): an fsync that
failed must not be retried as if the data were safe. Reopen it; recovery decides what
survived. Not thread-safe: one driver owns it."""

from __future__ import annotations

import bisect
import contextlib
import logging
import os
import re
from collections import deque
from collections.abc import Sequence

from eddy.cluster.raft.storage.files import (
    STATE_FILE,
    CorruptStorageError,
    PersistedState,
    RaftStorageError,
    fsync_dir,
    load_newest_snapshot,
    make_dirs,
    read_snapshot,
    read_state,
    remove_file,
    write_snapshot,
    write_state,
)
from eddy.cluster.raft.storage.segments import (
    MAX_RECORD_BYTES,
    RECORD_HEAD,
    RaftSegment,
    encode_record,
    entry_size,
    scan_segment,
)
from eddy.cluster.raft.store import LogCompactedError, LogUnavailableError
from eddy.cluster.raft.types import ConfState, Entry, HardState, Snapshot, SnapshotMeta
from eddy.log.file_cache import FILES, FileCache

__all__ = ["CorruptStorageError", "RaftStorage", "RaftStorageError"]

log = logging.getLogger(__name__)

_SEGMENT_RE = re.compile(r"^(\d{20})\.log$")


class RaftStorage:
    def __init__(
        self,
        directory: str,
        *,
        segment_bytes: int = 64 * 1024 * 1024,
        cache_bytes: int = 4 * 1024 * 1024,
        flush_bytes: int = 1024 * 1024,
        files: FileCache = FILES,
    ) -> None:
        if not 0 < segment_bytes <= 2**32 - 1 - MAX_RECORD_BYTES - RECORD_HEAD.size:
            raise ValueError(f"segment_bytes {segment_bytes} out of range")
        self.directory = directory
        self.segment_bytes = segment_bytes
        self.cache_bytes = cache_bytes
        self.flush_bytes = flush_bytes
        self._files = files
        self._segments: list[RaftSegment] = []
        self._bases: list[int] = []
        self._run_starts: list[int] = []  # terms as runs: from _run_starts[k], _run_terms[k]
        self._run_terms: list[int] = []
        self._cache: deque[Entry] = deque()  # entries _cache_lo .. last_index()
        self._cache_lo = 1
        self._cache_size = 0
        self._dir_dirty = False
        self._failed: BaseException | None = None
        self._closed = False
        self._snap_meta = SnapshotMeta(index=0, term=0)
        self._snap_path: str | None = None
        self._hard = HardState()
        self._conf = ConfState()
        self._synced_state: PersistedState | None = None
        make_dirs(directory)
        self._recover()

    def reopened(self) -> RaftStorage:
        """This storage closed (what failed is given up) and opened again from its files:
        recovery decides what survived. Raises ``RaftStorageError`` / ``OSError`` if the
        directory cannot be read yet."""
        with contextlib.suppress(RaftStorageError, OSError):
            self.close()
        return RaftStorage(self.directory, segment_bytes=self.segment_bytes,
                           cache_bytes=self.cache_bytes, flush_bytes=self.flush_bytes,
                           files=self._files)

    # ---- LogStore ------------------------------------------------------------------------

    def initial_state(self) -> tuple[HardState, ConfState]:
        return self._hard, self._conf

    def first_index(self) -> int:
        return self._snap_meta.index + 1

    def last_index(self) -> int:
        return self._segments[-1].last_index if self._segments else self._snap_meta.index

    def snapshot_meta(self) -> SnapshotMeta:
        return self._snap_meta

    def term(self, index: int) -> int:
        snap = self._snap_meta
        if index == snap.index:
            return snap.term
        if index < snap.index:
            raise LogCompactedError(index)
        if index > self.last_index():
            raise LogUnavailableError(index)
        return self._run_terms[bisect.bisect_right(self._run_starts, index) - 1]

    def entries(self, lo: int, hi: int, max_bytes: int | None = None) -> list[Entry]:
        """Entries lo <= index < hi; with max_bytes, stop once that many bytes of entries
        are collected (one entry at least)."""
        self._check()
        if lo < self.first_index():
            raise LogCompactedError(lo)
        if hi > self.last_index() + 1:
            raise LogUnavailableError(hi - 1)
        if lo >= hi:
            if lo > hi:
                raise ValueError(f"entries({lo}, {hi}): lo above hi")
            return []
        out: list[Entry] = []
        total = 0
        if lo < self._cache_lo:
            upto = min(hi, self._cache_lo)
            try:
                out = self._read_files(lo, upto, max_bytes)
            except OSError as exc:
                raise self._fail(exc) from exc
            if len(out) < upto - lo:
                return out  # the budget ran out
            if max_bytes is not None:
                total = sum(entry_size(e) for e in out)
        cache, base = self._cache, self._cache_lo
        for k in range(max(lo, base) - base, hi - base):
            entry = cache[k]
            if max_bytes is not None:
                total += entry_size(entry)
                if total > max_bytes and out:
                    break
            out.append(entry)
        return out

    # ---- the driver's writes -------------------------------------------------------------

    def append(self, entries: Sequence[Entry]) -> None:
        """Write entries (buffered until `sync`). They may start at or below last_index+1:
        the stored entries from that index on are dropped first. Entries must be contiguous,
        their terms non-decreasing and not below the term before them, and they may not
        change or drop an entry at or below the commit index."""
        self._check()
        if not entries:
            return
        first = entries[0].index
        last = self.last_index()
        if first < self.first_index():
            raise ValueError(f"append at {first}: at or below the snapshot index "
                             f"{self._snap_meta.index}")
        if first > last + 1:
            raise ValueError(f"append at {first} leaves a gap after the last index {last}")
        self._check_batch(entries)
        records = [encode_record(e) for e in entries]  # all size checks before any write
        try:
            if first <= last:
                self._truncate_from(first)
            for entry, record in zip(entries, records, strict=True):
                self._add(entry, record)
            active = self._segments[-1]
            if len(active.pending) >= self.flush_bytes:
                active.flush()
        except OSError as exc:
            raise self._fail(exc) from exc

    def set_hard_state(self, hs: HardState) -> None:
        """Persisted by the next `sync`."""
        self._check()
        self._hard = hs

    def set_conf_state(self, cs: ConfState) -> None:
        """Persisted by the next `sync`."""
        self._check()
        self._conf = cs

    def sync(self, with_commit: bool = False) -> None:
        """Make everything written so far durable: log buffer written and fsynced (and the
        directory after a new segment), then the hard state and membership if changed.

        The commit index alone is not worth a state file write on every sync (three more
        syncs, the biggest part of a small write's cost): Raft needs only term, vote and
        membership durable, and a commit index found behind after a restart is learnt
        again from the leader (or by a lone voter's first entry of its new term). It is
        written with them, and when asked (``with_commit``: the driver's periodic
        ``flush_commit``, and ``close``), so a restarted node replays its state machine
        up to where it was but for the last moments."""
        self._check()
        last = self.last_index()
        if self._hard.commit > last:
            raise ValueError(f"hard state commit {self._hard.commit} is past the last index "
                             f"{last}")
        try:
            if self._segments:
                self._segments[-1].flush()
            for seg in self._segments:
                seg.fsync()
            if self._dir_dirty:
                fsync_dir(self.directory)
                self._dir_dirty = False
            state = PersistedState(hard=self._hard, conf=self._conf)
            synced = self._synced_state
            if state != synced and (with_commit or synced is None or synced.conf != state.conf
                                    or (synced.hard.term, synced.hard.vote)
                                    != (state.hard.term, state.hard.vote)):
                write_state(self.directory, state)
                self._synced_state = state
        except OSError as exc:
            raise self._fail(exc) from exc

    @property
    def commit_unsynced(self) -> bool:
        """The commit index moved since the state file was last written."""
        synced = self._synced_state
        return synced is None or synced.hard.commit != self._hard.commit

    def apply_snapshot(self, snapshot: Snapshot) -> None:
        """A snapshot from the leader: saved (durably) before anything it covers is dropped.
        Log entries after it are kept when the log holds its index with its term; otherwise
        the whole log goes. Its membership becomes the stored one, and everything pending
        is synced."""
        self._check()
        meta = snapshot.meta
        if meta.index <= self._snap_meta.index:
            raise ValueError(f"snapshot at {meta.index} is not newer than the one held "
                             f"({self._snap_meta.index})")
        keep = meta.index <= self.last_index() and self.term(meta.index) == meta.term
        self._install(snapshot, keep)
        self._conf = meta.conf
        self.sync()

    def install_snapshot(self, snapshot: Snapshot) -> None:
        """Like `apply_snapshot`, but the whole log goes even where it matches (what
        `MemoryLogStore.install_snapshot` does: a Ready's snapshot replaces the log)."""
        self._check()
        meta = snapshot.meta
        if meta.index <= self._snap_meta.index:
            raise ValueError(f"snapshot at {meta.index} is not newer than the one held "
                             f"({self._snap_meta.index})")
        self._install(snapshot, keep=False)
        self._conf = meta.conf
        self.sync()

    def compact(self, index: int, snapshot: Snapshot) -> None:
        """The state machine's snapshot at `index` (committed, in the log): saved, then the
        segments wholly at or below index are deleted. A snapshot not newer than the held
        one is ignored."""
        self._check()
        meta = snapshot.meta
        if meta.index != index:
            raise ValueError(f"compact({index}) with a snapshot at {meta.index}")
        if index <= self._snap_meta.index:
            return
        if index > self._hard.commit:
            raise ValueError(f"compact({index}): above the commit index {self._hard.commit}")
        if self.term(index) != meta.term:
            raise ValueError(f"compact({index}): snapshot term {meta.term}, log term "
                             f"{self.term(index)}")
        self._install(snapshot, keep=True)

    def snapshot(self) -> Snapshot | None:
        """The snapshot held (read from its file, CRC checked), or None."""
        self._check()
        return read_snapshot(self._snap_path) if self._snap_path is not None else None

    def close(self) -> None:
        """Sync what is pending and let go of the files."""
        if self._closed:
            return
        try:
            if self._failed is None:
                self.sync(with_commit=True)
        finally:
            self._closed = True
            for seg in self._segments:
                seg.close()

    # ---- internals -----------------------------------------------------------------------

    def _check(self) -> None:
        if self._closed:
            raise RaftStorageError(f"{self.directory}: raft storage is closed")
        if self._failed is not None:
            raise RaftStorageError(f"{self.directory}: raft storage failed earlier "
                                   f"({self._failed}); reopen it")

    def _fail(self, exc: BaseException) -> RaftStorageError:
        self._failed = exc
        return RaftStorageError(f"{self.directory}: {exc}")

    def _check_batch(self, entries: Sequence[Entry]) -> None:
        first = entries[0].index
        prev_term = self.term(first - 1)
        for k, e in enumerate(entries):
            if e.index != first + k:
                raise ValueError(f"entry {k} of the batch has index {e.index}, expected "
                                 f"{first + k}")
            if e.term < prev_term:
                raise ValueError(f"entry {e.index} has term {e.term} after term {prev_term}")
            prev_term = e.term
        commit, last = self._hard.commit, self.last_index()
        if first <= commit:
            if entries[-1].index < min(commit, last):
                raise ValueError(f"append at {first} would drop committed entries up to "
                                 f"{commit}")
            for e in entries:
                if e.index > min(commit, last):
                    break
                if self.term(e.index) != e.term:
                    raise ValueError(f"entry {e.index} (term {e.term}) conflicts with the "
                                     f"committed entry of term {self.term(e.index)}")

    def _add(self, entry: Entry, record: bytes) -> None:
        segs = self._segments
        if not segs or segs[-1].size >= self.segment_bytes:
            if segs:
                segs[-1].flush()
                segs[-1].fsync()  # only the last segment may end torn
            seg = RaftSegment.create(self.directory, entry.index, self._files)
            segs.append(seg)
            self._bases.append(entry.index)
            self._dir_dirty = True
        segs[-1].add(record)
        if not self._run_terms or self._run_terms[-1] != entry.term:
            self._run_starts.append(entry.index)
            self._run_terms.append(entry.term)
        self._cache.append(entry)
        self._cache_size += entry_size(entry)
        while self._cache_size > self.cache_bytes and len(self._cache) > 1:
            old = self._cache.popleft()
            self._cache_size -= entry_size(old)
            self._cache_lo += 1

    def _truncate_from(self, index: int) -> None:
        """Drop entries index.. : later segments deleted last first (directory fsynced after
        each, so a crash leaves a prefix), the containing one cut (fsynced)."""
        segs = self._segments
        while segs and segs[-1].base >= index:
            segs.pop().delete()
            self._bases.pop()
            fsync_dir(self.directory)
        if segs and segs[-1].last_index >= index:
            segs[-1].truncate_from(index)
        while self._run_starts and self._run_starts[-1] >= index:
            self._run_starts.pop()
            self._run_terms.pop()
        if index <= self._cache_lo:
            self._cache.clear()
            self._cache_size = 0
            self._cache_lo = index
        else:
            while len(self._cache) > index - self._cache_lo:
                self._cache_size -= entry_size(self._cache.pop())

    def _install(self, snapshot: Snapshot, keep: bool) -> None:
        index = snapshot.meta.index
        old_path = self._snap_path
        try:
            path = write_snapshot(self.directory, snapshot)
            if not keep and self._segments:
                self._truncate_from(self._segments[0].base)
            deleted = False
            while self._segments and self._segments[0].last_index <= index:
                self._segments.pop(0).delete()
                self._bases.pop(0)
                deleted = True
            if old_path is not None and old_path != path:
                remove_file(old_path)
                deleted = True
            if deleted:
                fsync_dir(self.directory)
        except OSError as exc:
            raise self._fail(exc) from exc
        self._snap_meta = snapshot.meta
        self._snap_path = path
        self._trim_below(index + 1)

    def _trim_below(self, first: int) -> None:
        """Forget term runs and cached entries below `first` (the new first index)."""
        starts, terms = self._run_starts, self._run_terms
        k = bisect.bisect_right(starts, first) - 1
        if k > 0:
            del starts[:k]
            del terms[:k]
        if not self._segments:
            starts.clear()
            terms.clear()
        while self._cache and self._cache_lo < first:
            self._cache_size -= entry_size(self._cache.popleft())
            self._cache_lo += 1
        if not self._cache:
            self._cache_lo = max(self._cache_lo, first)

    def _read_files(self, lo: int, hi: int, max_bytes: int | None) -> list[Entry]:
        out: list[Entry] = []
        k = bisect.bisect_right(self._bases, lo) - 1
        budget = max_bytes
        while lo < hi:
            seg = self._segments[k]
            stop = min(hi, seg.last_index + 1)
            got = seg.read(lo, stop, budget, at_least_one=not out)
            out.extend(got)
            if len(got) < stop - lo:
                break
            if budget is not None:
                budget -= sum(entry_size(e) for e in got)
            lo = stop
            k += 1
        return out

    # ---- recovery ------------------------------------------------------------------------

    def _recover(self) -> None:
        d = self.directory
        for name in os.listdir(d):
            if name.endswith(".tmp"):  # an atomic_write that never got renamed in
                remove_file(os.path.join(d, name))
        found = load_newest_snapshot(d)
        if found is not None:
            self._snap_meta, self._snap_path = found
        snap = self._snap_meta
        state = read_state(d)
        if state is not None:
            self._hard, self._conf = state.hard, state.conf
            self._synced_state = state
        else:
            self._conf = snap.conf
        bases = sorted(int(m.group(1)) for m in map(_SEGMENT_RE.match, os.listdir(d)) if m)
        # segments wholly covered by the snapshot (their successor starts by snap.index+1)
        # are dropped unread: a compaction that crashed halfway left them
        drop = 0
        while drop + 1 < len(bases) and bases[drop + 1] <= snap.index + 1:
            remove_file(os.path.join(d, f"{bases[drop]:020d}.log"))
            drop += 1
        if drop:
            fsync_dir(d)
        self._scan(bases[drop:])
        self._reconcile()
        self._cache_lo = self.last_index() + 1
        if self._hard.commit > self.last_index():
            raise CorruptStorageError(
                os.path.join(d, STATE_FILE), f"commit index {self._hard.commit} is past the "
                f"last index {self.last_index()} on disk: synced entries are missing")

    def _scan(self, bases: list[int]) -> None:
        prev_last: int | None = None
        term = 0
        for k, base in enumerate(bases):
            f = self._files.file(os.path.join(self.directory, f"{base:020d}.log"))
            f.created = True  # never re-create a file that vanished
            if prev_last is not None and base != prev_last + 1:
                raise CorruptStorageError(f.path, f"segment starts at index {base}, the one "
                                          f"before ends at {prev_last}")
            res = scan_segment(f, base, last=k == len(bases) - 1, prev_term=term)
            seg = res.segment
            if seg.count == 0 and k == len(bases) - 1:
                seg.delete()  # nothing survived in the last segment
                fsync_dir(self.directory)
                break
            self._segments.append(seg)
            self._bases.append(base)
            for start, t in res.runs:
                if not self._run_terms or self._run_terms[-1] != t:
                    self._run_starts.append(start)
                    self._run_terms.append(t)
            if self._run_terms:
                term = self._run_terms[-1]
            prev_last = seg.last_index

    def _reconcile(self) -> None:
        """Make the log agree with the snapshot, as apply_snapshot would have."""
        snap = self._snap_meta
        if not self._segments:
            return
        lo, last = self._segments[0].base, self._segments[-1].last_index
        if lo > snap.index + 1:
            raise CorruptStorageError(
                self._segments[0].path, f"log starts at index {lo}, after the snapshot at "
                f"{snap.index}: entries {snap.index + 1}..{lo - 1} are missing")
        stale = last < snap.index
        if lo <= snap.index <= last:  # term() would answer from the snapshot itself
            run_term = self._run_terms[bisect.bisect_right(self._run_starts, snap.index) - 1]
            stale = run_term != snap.term
        if stale:
            log.warning("%s: log %d..%d does not continue the snapshot at %d (term %d): "
                        "dropping it (a snapshot install was cut short)", self.directory,
                        lo, last, snap.index, snap.term)
            self._truncate_from(lo)
            return
        while self._segments and self._segments[0].last_index <= snap.index:
            self._segments.pop(0).delete()
            self._bases.pop(0)
        self._trim_below(snap.index + 1)
        for start, t in zip(self._run_starts, self._run_terms, strict=True):
            if start > snap.index and t < snap.term:
                raise CorruptStorageError(
                    self._segments[0].path, f"entry {start} has term {t}, below the "
                    f"snapshot's term {snap.term}")

