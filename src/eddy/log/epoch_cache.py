"""A partition's leader epoch history (KIP-101): the first offset each leader epoch wrote.

Kept in the partition directory as ``leader-epoch-checkpoint`` in Apache Kafka's text
format, so the two are interchangeable::

    0            <- format version
    2            <- number of entries
    0 0          <- epoch, start offset
    3 120

Both columns strictly increase. A returning replica asks the leader where its latest epoch
ended (OffsetForLeaderEpoch) and truncates there; the leader answers from this history.
"""

from __future__ import annotations

import logging
import os
from bisect import bisect_right
from collections.abc import Iterable

from eddy.log.state_files import atomic_write

log = logging.getLogger(__name__)

CHECKPOINT_FILE = "leader-epoch-checkpoint"
CHECKPOINT_VERSION = 0
UNDEFINED_EPOCH = -1
UNDEFINED_EPOCH_OFFSET = -1
#: a checkpoint larger than this is not a leader epoch history (Kafka's would be a few KB)
_MAX_FILE_BYTES = 64 * 1024 * 1024


class CheckpointError(ValueError):
    """A leader-epoch-checkpoint's text that is not a valid history."""


def parse_checkpoint(text: str) -> list[tuple[int, int]]:
    """The (epoch, start offset) entries of a checkpoint file's text. Raises CheckpointError
    for anything but version 0, the announced count of well-formed lines, and strictly
    increasing non-negative epochs and start offsets."""
    lines = text.splitlines()
    if len(lines) < 2:
        raise CheckpointError("shorter than its version and count lines")
    try:
        version = int(lines[0].strip())
        count = int(lines[1].strip())
    except ValueError:
        raise CheckpointError("version or count line is not a number") from None
    if version != CHECKPOINT_VERSION:
        raise CheckpointError(f"unknown version {version}")
    body = [line for line in lines[2:] if line.strip()]
    if count != len(body):
        raise CheckpointError(f"announces {count} entries, holds {len(body)}")
    entries: list[tuple[int, int]] = []
    for line in body:
        fields = line.split()
        if len(fields) != 2:
            raise CheckpointError(f"entry {line!r} is not 'epoch offset'")
        try:
            epoch, start = int(fields[0]), int(fields[1])
        except ValueError:
            raise CheckpointError(f"entry {line!r} is not two numbers") from None
        if epoch < 0 or start < 0:
            raise CheckpointError(f"entry {line!r} is negative")
        if entries and (epoch <= entries[-1][0] or start <= entries[-1][1]):
            raise CheckpointError(f"entry {line!r} does not follow {entries[-1]}")
        entries.append((epoch, start))
    return entries


def format_checkpoint(entries: Iterable[tuple[int, int]]) -> bytes:
    rows = [f"{epoch} {start}" for epoch, start in entries]
    return "\n".join([str(CHECKPOINT_VERSION), str(len(rows)), *rows, ""]).encode("ascii")


class LeaderEpochCache:
    """The epoch history of one partition directory. Every change is written to the
    checkpoint before it is made in memory: an OSError leaves both as they were."""

    def __init__(self, directory: str, entries: Iterable[tuple[int, int]] = ()) -> None:
        self.path = os.path.join(directory, CHECKPOINT_FILE)
        self._epochs: list[int] = []
        self._starts: list[int] = []
        for epoch, start in entries:
            self._epochs.append(epoch)
            self._starts.append(start)

    @classmethod
    def load(cls, directory: str) -> LeaderEpochCache:
        """The history on disk: empty when there is no checkpoint, and (with a warning)
        when it cannot be read or is not a valid history."""
        path = os.path.join(directory, CHECKPOINT_FILE)
        try:
            with open(path, "rb") as f:
                data = f.read(_MAX_FILE_BYTES + 1)
        except FileNotFoundError:
            return cls(directory)
        except OSError as exc:
            log.warning("%s: cannot be read (%s): starting with no leader epoch history",
                        path, exc)
            return cls(directory)
        try:
            if len(data) > _MAX_FILE_BYTES:
                raise CheckpointError(f"larger than {_MAX_FILE_BYTES} bytes")
            entries = parse_checkpoint(data.decode("ascii"))
        except (CheckpointError, UnicodeDecodeError) as exc:
            log.warning("%s: not a leader epoch checkpoint (%s): starting with no leader "
                        "epoch history", path, exc)
            return cls(directory)
        return cls(directory, entries)

    # ---- reading ---------------------------------------------------------------------------

    def latest_epoch(self) -> int:
        return self._epochs[-1] if self._epochs else UNDEFINED_EPOCH

    def entries(self) -> list[tuple[int, int]]:
        return list(zip(self._epochs, self._starts, strict=True))

    def __len__(self) -> int:
        return len(self._epochs)

    def end_offset_for(self, epoch: int, log_end_offset: int) -> tuple[int, int]:
        """(epoch, end offset) as Kafka's LeaderEpochFileCache.endOffsetFor answers it:
        the latest epoch ends at the log end offset; an older one where the next higher
        epoch starts, named by the highest known epoch at or below the one asked for; an
        epoch below the whole history ends where the history starts; -1 or an epoch above
        the latest is undefined (-1, -1)."""
        if epoch == UNDEFINED_EPOCH or not self._epochs:
            return UNDEFINED_EPOCH, UNDEFINED_EPOCH_OFFSET
        if epoch == self._epochs[-1]:
            return epoch, log_end_offset
        higher = bisect_right(self._epochs, epoch)
        if higher == len(self._epochs):
            return UNDEFINED_EPOCH, UNDEFINED_EPOCH_OFFSET
        if higher == 0:
            return epoch, self._starts[0]
        return self._epochs[higher - 1], self._starts[higher]

    # ---- changes ---------------------------------------------------------------------------

    def assign(self, epoch: int, start_offset: int) -> None:
        """Record that `epoch` starts at `start_offset`, when it is newer than the latest
        epoch (the same or an older epoch is ignored, at no cost: this runs on every
        append). Entries starting at or after start_offset are dropped first, as Kafka
        does, so start offsets keep increasing."""
        if epoch <= (self._epochs[-1] if self._epochs else UNDEFINED_EPOCH):
            return
        if start_offset < 0:
            raise ValueError(f"leader epoch {epoch} cannot start at offset {start_offset}")
        keep = len(self._starts)
        while keep and self._starts[keep - 1] >= start_offset:
            keep -= 1
        self._replace([*self._epochs[:keep], epoch], [*self._starts[:keep], start_offset])

    def truncate_from_end(self, end_offset: int) -> None:
        """Forget the epochs starting at or after end_offset (the log was cut there)."""
        if end_offset < 0 or not self._starts or self._starts[-1] < end_offset:
            return
        keep = len(self._starts)
        while keep and self._starts[keep - 1] >= end_offset:
            keep -= 1
        self._replace(self._epochs[:keep], self._starts[:keep])

    def truncate_from_start(self, start_offset: int) -> None:
        """The log now starts at start_offset: entries wholly below it go, and the epoch
        covering it starts there."""
        if start_offset < 0 or not self._starts or self._starts[0] >= start_offset:
            return
        first = bisect_right(self._starts, start_offset) - 1  # the entry covering it
        epochs = self._epochs[first:]
        starts = [start_offset, *self._starts[first + 1:]]
        self._replace(epochs, starts)

    def clear(self) -> None:
        """Forget the whole history (the log restarts empty)."""
        if self._epochs or os.path.exists(self.path):
            self._replace([], [])

    def _replace(self, epochs: list[int], starts: list[int]) -> None:
        atomic_write(self.path, format_checkpoint(zip(epochs, starts, strict=True)))
        self._epochs, self._starts = epochs, starts
