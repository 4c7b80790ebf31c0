"""Small state files written atomically: temp file, fsync, rename, fsync the directory."""

from __future__ import annotations

import contextlib
import os


def atomic_write(path: str, data: bytes) -> None:
    directory = os.path.dirname(path) or "."
    tmp = f"{path}.tmp"
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    try:
        view = memoryview(data)
        while view:
            n = os.write(fd, view)
            view = view[n:]
        os.fsync(fd)
    except BaseException:
        os.close(fd)
        with contextlib.suppress(OSError):
            os.unlink(tmp)  # a full disk must not keep the half-written copy's space
        raise
    os.close(fd)
    os.replace(tmp, path)
    dfd = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(dfd)
    finally:
        os.close(dfd)


def write_int_file(path: str, value: int) -> None:
    atomic_write(path, f"{value}\n".encode())


def read_int_file(path: str, default: int) -> int:
    try:
        with open(path, encoding="ascii") as f:
            return int(f.read().strip())
    except (FileNotFoundError, ValueError):
        return default
