"""One process per data directory: an exclusive flock on `<data-dir>/.lock`, as Kafka takes.

The lock is taken before anything else in the directory is read or written and held until
the process has closed every file; the kernel drops it when the process dies, so a crash
never leaves a stale lock behind. The holder writes its pid into the file, so that a second
process can say who holds it.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
from types import TracebackType

LOCK_FILE = ".lock"


class DataDirLocked(OSError):
    """Another process holds the data directory."""


class DataDirLock:
    def __init__(self, data_dir: str) -> None:
        self.data_dir = data_dir
        self.path = os.path.join(data_dir, LOCK_FILE)
        self._fd = -1

    def acquire(self) -> None:
        os.makedirs(self.data_dir, exist_ok=True)
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = _read_pid(fd)
            os.close(fd)
            who = f"pid {holder}" if holder else "a process whose pid it has not written yet"
            raise DataDirLocked(
                f"data directory {self.data_dir} is in use by another eddy process ({who}); "
                "stop that one first, or give this one another --data-dir"
            ) from None
        except BaseException:
            os.close(fd)
            raise
        self._fd = fd
        with contextlib.suppress(OSError):  # a full disk: the pid is a courtesy, the lock is not
            os.ftruncate(fd, 0)
            os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)

    def release(self) -> None:
        """Let the next process in (the file stays: unlinking it would let two processes
        lock two different files of the same name)."""
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1

    def __enter__(self) -> DataDirLock:
        self.acquire()
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.release()


def _read_pid(fd: int) -> int | None:
    try:
        text = os.pread(fd, 32, 0).decode("ascii", "replace").strip()
    except OSError:
        return None
    return int(text) if text.isdigit() else None
