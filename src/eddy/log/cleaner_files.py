"""The files a log cleaning leaves beside a partition's segments (`.cleaned`, `.swap`,
`.deleted`) and the recovery that resolves them after a crash, as Kafka's log loader does
(the protocol is in eddy.log.compaction's docstring). PartitionLog calls
`recover_interrupted_cleaning` before it lists its segments; this module needs nothing
of the cleaner itself, so the log does not import the cleaner."""

from __future__ import annotations

import contextlib
import logging
import os

from eddy.log.segment import segment_name
from eddy.protocol.record_batch import HEADER_SIZE, LOG_OVERHEAD, parse_header

log = logging.getLogger(__name__)

CLEANED_SUFFIX = ".cleaned"
SWAP_SUFFIX = ".swap"
DELETED_SUFFIX = ".deleted"
SEGMENT_EXTS = (".log", ".idx", ".timeidx")


def unlink_quietly(path: str) -> None:
    with contextlib.suppress(FileNotFoundError):
        os.unlink(path)


def fsync_dir(directory: str) -> None:
    fd = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _last_offset_of(path: str) -> int:
    """Last offset of the whole batches at the start of a log file, -1 if none."""
    last = -1
    fd = os.open(path, os.O_RDONLY)
    try:
        size = os.fstat(fd).st_size
        pos = 0
        while size - pos >= HEADER_SIZE:
            h = parse_header(os.pread(fd, HEADER_SIZE, pos))
            if h.batch_length < HEADER_SIZE - LOG_OVERHEAD or pos + h.size > size:
                break
            last = h.last_offset
            pos += h.size
    finally:
        os.close(fd)
    return last


def _base_of(name: str, ext: str) -> int | None:
    stem = name[: -len(ext)] if name.endswith(ext) else ""
    return int(stem) if stem.isdigit() else None


def recover_interrupted_cleaning(directory: str) -> None:
    """Resolve what a crash during a cleaner swap left behind (see the module docstring)."""
    try:
        names = os.listdir(directory)
    except FileNotFoundError:
        return
    changed = False
    for name in names:
        if name.endswith(CLEANED_SUFFIX):
            log.info("%s: deleting %s of an interrupted cleaning", directory, name)
            unlink_quietly(os.path.join(directory, name))
            changed = True
    logs = {b for n in names if (b := _base_of(n, ".log")) is not None}
    swaps = sorted(b for n in names if (b := _base_of(n, ".log" + SWAP_SUFFIX)) is not None)
    for base in swaps:
        stem = os.path.join(directory, segment_name(base))
        last = _last_offset_of(stem + ".log" + SWAP_SUFFIX)
        replaced = [b for b in logs if base < b <= last]
        log.warning(
            "%s: completing an interrupted cleaner swap of segment %d (replacing %s)",
            directory, base, [base, *sorted(replaced)],
        )
        for b in replaced:
            for ext in SEGMENT_EXTS:
                unlink_quietly(os.path.join(directory, segment_name(b)) + ext)
            logs.discard(b)
        for ext in (".idx", ".timeidx"):  # rebuilt from the log, with CRC checks, on load
            unlink_quietly(stem + ext)
            unlink_quietly(stem + ext + SWAP_SUFFIX)
        fsync_dir(directory)
        os.rename(stem + ".log" + SWAP_SUFFIX, stem + ".log")
        logs.add(base)
        changed = True
    swapped = set(swaps)
    for name in names:
        for ext in (".idx", ".timeidx"):
            orphan = _base_of(name, ext + SWAP_SUFFIX)
            if orphan is not None and orphan not in swapped:
                # step 1 or 3 was cut between an index rename and the log rename: rebuild
                stem = os.path.join(directory, segment_name(orphan))
                unlink_quietly(stem + ext + SWAP_SUFFIX)
                unlink_quietly(stem + ext)
                changed = True
    for name in names:
        if name.endswith(DELETED_SUFFIX):
            unlink_quietly(os.path.join(directory, name))
            changed = True
    if changed:
        fsync_dir(directory)
