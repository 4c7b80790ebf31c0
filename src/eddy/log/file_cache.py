"""A bounded cache of open files, so a node with many partitions stays under its fd limit.

Segment logs and indexes are `CachedFile`s: each is opened on demand and the least recently
used ones are closed when more than `capacity` are open. An fd is an `OpenFile` that closes
when its last holder lets go: the cache, a thread in the middle of a write or an fsync, a fetch
response not yet sent (its `Pin`). Evicting or deleting therefore never closes an fd that
someone is still using; pinned files are never evicted, and at most `max_pins` are pinned at
once (PartitionLog.read copies the bytes instead of pinning beyond that).

Shared by the event loop and executor threads (fsync, the log cleaner): one lock guards the
LRU order; an fd is closed by its last reference going away (OpenFile.__del__ takes no lock).
"""

from __future__ import annotations

import errno
import logging
import os
import threading
from collections import OrderedDict

log = logging.getLogger(__name__)

#: errnos meaning "no more fds": the process limit (EMFILE) or the system's (ENFILE)
FD_EXHAUSTED = (errno.EMFILE, errno.ENFILE)
FD_ADVICE = ("raise the open-files limit (RLIMIT_NOFILE: `ulimit -n`, systemd LimitNOFILE=) "
             "or lower storage.max.open.files")
_MIN_CAPACITY = 8


class FileLimitError(OSError):
    """Out of file descriptors: the message names the setting to raise."""


class OpenFile:
    """One open fd, closed when the last holder drops this object."""

    __slots__ = ("fd",)

    def __init__(self, fd: int) -> None:
        self.fd = fd

    def __del__(self) -> None:
        if self.fd >= 0:
            os.close(self.fd)
            self.fd = -1


class Pin:
    """Keeps a file's fd open and in the cache until this object is dropped: what a fetch
    response holds until the connection has written the bytes."""

    __slots__ = ("_cache", "_file", "_open")

    def __init__(self, cache: FileCache, file: CachedFile, opened: OpenFile) -> None:
        self._cache = cache
        self._file = file
        self._open = opened

    @property
    def fd(self) -> int:
        return self._open.fd

    def __del__(self) -> None:
        self._cache._unpin(self._file)


class CachedFile:
    """A file opened through the cache when used. Created by the first open (O_CREAT), never
    re-created by a later one: a file deleted behind our back is an error, not a new file."""

    __slots__ = ("_cache", "_kept", "_open", "_synced", "_written", "appending", "created",
                 "path", "pins", "released")

    def __init__(self, cache: FileCache, path: str, *, appending: bool = False) -> None:
        self._cache = cache
        self.path = path
        self.appending = appending
        self._open: OpenFile | None = None  # set while the cache holds it open
        self._kept: OpenFile | None = None  # a detached file's last fd (see detach)
        self._written = 0  # writes so far, and how many of them an fsync covered
        self._synced = 0
        self.pins = 0
        self.released = False
        self.created = False

    def handle(self) -> OpenFile:
        """The open fd (opened now if needed). Hold the returned object for as long as the
        fd is used: that, not the cache, keeps it open."""
        return self._cache.acquire(self)

    # ---- I/O, each holding the fd for the call ---------------------------------------------

    def pread(self, length: int, position: int) -> bytes:
        h = self.handle()
        return os.pread(h.fd, length, position)

    def size(self) -> int:
        h = self.handle()
        return os.fstat(h.fd).st_size

    def pwrite_all(self, data: bytes | bytearray | memoryview, position: int) -> None:
        """Write all of data at position or raise (ENOSPC for a write the disk cut short)."""
        h = self.handle()
        self._written += 1
        n = os.pwrite(h.fd, data, position)
        total = len(data)
        if n < total:
            view = memoryview(data)
            for _ in range(8):  # a regular file: the retry writes all or says why not
                if n >= total:
                    return
                m = os.pwrite(h.fd, view[n:], position + n)
                if m <= 0:
                    break
                n += m
            if n < total:
                raise OSError(errno.ENOSPC, f"short write: {n} of {total} bytes", self.path)

    def append(self, data: bytes) -> None:
        """Append (the file is opened O_APPEND) all of data or raise."""
        h = self.handle()
        self._written += 1
        n = os.write(h.fd, data)
        if n != len(data):
            raise OSError(errno.ENOSPC, f"short write: {n} of {len(data)} bytes", self.path)

    def truncate(self, size: int) -> None:
        h = self.handle()
        self._written += 1
        os.ftruncate(h.fd, size)

    def fsync(self) -> None:
        """fsync when something was written since the last fsync (an fsync through any fd
        of a file writes back all of its dirty pages)."""
        written = self._written
        if written == self._synced:
            return
        h = self.handle()
        os.fsync(h.fd)
        self._synced = max(self._synced, written)

    def rename(self, new_path: str) -> None:
        """Rename the file; an open fd follows it. A file never created yet just moves."""
        try:
            os.rename(self.path, new_path)
        except FileNotFoundError:
            if self.created:
                raise
        self.path = new_path

    # ---- lifecycle ---------------------------------------------------------------------------

    def pin(self) -> Pin | None:
        """Keep the fd open (and this file cached) while the returned Pin lives; None when
        the cache's budget of pins is used up."""
        return self._cache.pin(self)

    def detach(self) -> None:
        """Leave the cache but keep the current fd (if open) for readers that still hold
        this file's owner: a deleted segment stays readable until it is dropped."""
        self._cache.detach(self)

    def release(self) -> None:
        """Leave the cache for good: the fd closes once nobody uses it; later use fails."""
        self._cache.release(self)


class FileCache:
    def __init__(self, capacity: int = 1024) -> None:
        self._lock = threading.RLock()
        self._lru: OrderedDict[CachedFile, None] = OrderedDict()
        self.capacity = max(capacity, _MIN_CAPACITY)
        self.pinned = 0

    @property
    def max_pins(self) -> int:
        return self.capacity // 2

    def set_capacity(self, capacity: int) -> None:
        with self._lock:
            self.capacity = max(capacity, _MIN_CAPACITY)
            self._evict_locked(len(self._lru) - self.capacity)

    def file(self, path: str, *, appending: bool = False) -> CachedFile:
        return CachedFile(self, path, appending=appending)

    # ---- used through CachedFile ---------------------------------------------------------------

    def acquire(self, f: CachedFile) -> OpenFile:
        with self._lock:
            h = f._open
            if h is not None:
                self._lru.move_to_end(f)
                return h
            if f.released:
                if f._kept is not None:
                    return f._kept
                raise OSError(errno.EBADF, "file is closed", f.path)
            self._evict_locked(len(self._lru) + 1 - self.capacity)
            h = self._open_locked(f)
            f._open = h
            self._lru[f] = None
        return h

    def _open_locked(self, f: CachedFile) -> OpenFile:
        flags = os.O_RDWR | os.O_CLOEXEC | (os.O_APPEND if f.appending else 0)
        if not f.created:
            flags |= os.O_CREAT
        for attempt in range(2):
            try:
                fd = os.open(f.path, flags, 0o644)
                break
            except OSError as exc:
                if exc.errno not in FD_EXHAUSTED:
                    raise
                # other fds (sockets) took our room: give half of ours back and retry once
                self._shrink_locked()
                if attempt == 0:
                    continue
                raise FileLimitError(
                    exc.errno, f"{os.strerror(exc.errno or 0)}: {FD_ADVICE}", f.path
                ) from None
        f.created = True
        return OpenFile(fd)

    def failure_message(self, exc: OSError) -> str:
        """exc worded for a client or the log; when fds ran out (outside the cache too:
        a listdir, a state file), the cache gives half of its fds back and the message
        names the limit to raise."""
        if exc.errno not in FD_EXHAUSTED or isinstance(exc, FileLimitError):
            return str(exc)
        with self._lock:
            self._shrink_locked()
        return f"{exc}: {FD_ADVICE}"

    def _shrink_locked(self) -> None:
        """Out of fds: close half of the cached files and keep at most that many open."""
        self._evict_locked(max(len(self._lru) // 2, 1))
        shrunk = max(len(self._lru), _MIN_CAPACITY)
        if shrunk < self.capacity:
            log.warning("out of file descriptors: keeping at most %d segment and index files "
                        "open from now on (was %d); %s", shrunk, self.capacity, FD_ADVICE)
            self.capacity = shrunk

    def _evict_locked(self, count: int) -> None:
        """Take up to count unpinned files out of the cache, least recently used first; each
        fd closes now unless a thread is using it this moment."""
        lru = self._lru
        evicted = 0
        for _ in range(len(lru)):
            if evicted >= count or not lru:
                break
            f, _none = lru.popitem(last=False)
            if f.pins:
                lru[f] = None  # in use by a response: skip it this time round
                continue
            f._open = None
            evicted += 1

    def pin(self, f: CachedFile) -> Pin | None:
        """Pin f's fd, or None when `max_pins` are pinned already."""
        with self._lock:
            if self.pinned >= self.max_pins:
                return None
            h = self.acquire(f)
            f.pins += 1
            self.pinned += 1
        return Pin(self, f, h)

    def _unpin(self, f: CachedFile) -> None:
        with self._lock:
            f.pins -= 1
            self.pinned -= 1

    def detach(self, f: CachedFile) -> None:
        with self._lock:
            if f._open is not None:
                f._kept = f._open
                f._open = None
            self._lru.pop(f, None)
            f.released = True

    def release(self, f: CachedFile) -> None:
        with self._lock:
            f._open = f._kept = None
            self._lru.pop(f, None)
            f.released = True

    def close_all(self) -> None:
        """Drop every cached fd (each closes unless a response or thread still holds it)."""
        with self._lock:
            for f in self._lru:
                f._open = None
            self._lru.clear()


#: The process's cache: fds are a per-process resource (runtime sizes it at start-up).
FILES = FileCache()
