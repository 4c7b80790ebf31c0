"""Checking a replicated queue's history, in the style of Jepsen's queue checker, and
comparing the bytes of a partition's replicas.

`check(history)` is pure: it takes what the producer was told (acknowledged writes with their
partition and offset, and the writes it attempted without an acknowledgement), what
read_committed consumers read from the beginning once the faults healed, and the values
written in aborted transactions; it returns every anomaly:

- lost: an acknowledged write no consumer read;
- duplicated: a value read at more than one (partition, offset);
- inconsistent: an offset read with two values (by different consumers), or an
  acknowledged write whose offset holds another record, or whose value was read elsewhere;
- non_monotonic: a consumer whose offsets in a partition did not strictly increase;
- aborted_visible: a value of an aborted transaction that a read_committed consumer read;
- unexpected: a value read that nobody attempted.

Unacknowledged writes may or may not show up (an acks=all write whose acknowledgement was
lost can be in the log): reading one once is fine, and counted as `recovered`.

`compare_replicas(dirs, topic, partition, upto)` compares the `.log` segment bytes of every
replica of a partition (under each node's data dir: topics/<topic>/partition-<n>/) up to the
byte position of offset `upto` (the high watermark), or whole when `upto` is None.
"""

from __future__ import annotations

import struct
from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path


@dataclass(frozen=True, slots=True)
class Write:
    """A write the producer attempted; partition and offset come from its delivery report
    (-1 when it had none)."""

    value: bytes
    key: bytes | None = None
    partition: int = -1
    offset: int = -1


@dataclass(frozen=True, slots=True)
class Read:
    """One record a consumer returned."""

    partition: int
    offset: int
    key: bytes | None
    value: bytes


@dataclass(frozen=True, slots=True)
class History:
    acked: Sequence[Write]
    unacked: Sequence[Write] = ()
    #: what each consumer read, in the order it read it (one list per consumer)
    reads: Sequence[Sequence[Read]] = ()
    #: values written in transactions that were aborted
    aborted: Iterable[bytes] = ()


@dataclass
class Result:
    lost: list[Write] = field(default_factory=list)
    duplicated: dict[bytes, list[tuple[int, int]]] = field(default_factory=dict)
    inconsistent: list[str] = field(default_factory=list)
    non_monotonic: list[tuple[int, int, int, int]] = field(default_factory=list)
    aborted_visible: list[Read] = field(default_factory=list)
    unexpected: list[Read] = field(default_factory=list)
    acked: int = 0
    read: int = 0
    recovered: int = 0

    @property
    def ok(self) -> bool:
        return not (self.lost or self.duplicated or self.inconsistent or self.non_monotonic
                    or self.aborted_visible or self.unexpected)

    def summary(self, limit: int = 5) -> str:
        """One line of counts, then up to `limit` examples of each anomaly."""
        lines = [f"acked {self.acked}, distinct records read {self.read}, unacked but read "
                 f"{self.recovered}; lost {len(self.lost)}, duplicated "
                 f"{len(self.duplicated)}, inconsistent {len(self.inconsistent)}, "
                 f"non-monotonic {len(self.non_monotonic)}, aborted visible "
                 f"{len(self.aborted_visible)}, unexpected {len(self.unexpected)}"]
        if self.lost:
            lines.append("lost: " + ", ".join(
                f"{w.value!r}@{w.partition}:{w.offset}" for w in self.lost[:limit]))
        if self.duplicated:
            lines.append("duplicated: " + ", ".join(
                f"{v!r} at {at}" for v, at in list(self.duplicated.items())[:limit]))
        lines += [f"inconsistent: {s}" for s in self.inconsistent[:limit]]
        if self.non_monotonic:
            lines.append("non-monotonic (consumer, partition, previous, offset): " + ", ".join(
                str(t) for t in self.non_monotonic[:limit]))
        if self.aborted_visible:
            lines.append("aborted visible: " + ", ".join(
                f"{r.value!r}@{r.partition}:{r.offset}" for r in self.aborted_visible[:limit]))
        if self.unexpected:
            lines.append("unexpected: " + ", ".join(
                f"{r.value!r}@{r.partition}:{r.offset}" for r in self.unexpected[:limit]))
        return "\n".join(lines)


def check(history: History) -> Result:
    result = Result(acked=len(history.acked))
    # the log as the consumers saw it: (partition, offset) -> (key, value), first seen
    at: dict[tuple[int, int], tuple[bytes | None, bytes]] = {}
    where: dict[bytes, set[tuple[int, int]]] = defaultdict(set)
    for consumer, reads in enumerate(history.reads):
        last: dict[int, int] = {}
        for r in reads:
            prev = last.get(r.partition)
            if prev is not None and r.offset <= prev:
                result.non_monotonic.append((consumer, r.partition, prev, r.offset))
            last[r.partition] = r.offset if prev is None else max(prev, r.offset)
            pos = (r.partition, r.offset)
            seen = at.setdefault(pos, (r.key, r.value))
            if seen != (r.key, r.value):
                result.inconsistent.append(
                    f"{r.partition}:{r.offset} read as {seen[1]!r} (key {seen[0]!r}) and as "
                    f"{r.value!r} (key {r.key!r})")
            where[r.value].add(pos)
    result.read = len(at)
    result.duplicated = {v: sorted(p) for v, p in where.items() if len(p) > 1}

    aborted = set(history.aborted)
    acked_values: set[bytes] = set()
    for w in history.acked:
        acked_values.add(w.value)
        places = where.get(w.value)
        if not places:
            result.lost.append(w)
            continue
        if w.offset < 0:
            continue
        pos = (w.partition, w.offset)
        if pos not in places:
            result.inconsistent.append(
                f"{w.value!r} acknowledged at {w.partition}:{w.offset} but read at "
                f"{sorted(places)}")
        held = at.get(pos)
        if held is not None and held != (w.key, w.value):
            result.inconsistent.append(
                f"{w.partition}:{w.offset} acknowledged {w.value!r} (key {w.key!r}) but "
                f"holds {held[1]!r} (key {held[0]!r})")
    attempted = {w.value for w in history.unacked}
    for pos, (key, value) in sorted(at.items()):
        if value in aborted:
            result.aborted_visible.append(Read(pos[0], pos[1], key, value))
        elif value in acked_values:
            continue
        elif value in attempted:
            result.recovered += 1
        else:
            result.unexpected.append(Read(pos[0], pos[1], key, value))
    return result


# ----------------------------------------------------------------------- replica bytes

_OFFSET_LEN = struct.Struct(">qi")
_LOG_OVERHEAD = 12  # baseOffset + batchLength


def partition_dir(data_dir: Path, topic: str, partition: int) -> Path:
    """Where a node keeps a partition's segments (eddy.log.manager's layout)."""
    return data_dir / "topics" / topic / f"partition-{partition}"


def segment_files(pdir: Path) -> list[Path]:
    """The live `.log` segments of a partition, by base offset."""
    return sorted(pdir.glob("*.log"), key=lambda p: int(p.stem))


def log_bytes(pdir: Path, upto: int | None = None) -> bytes:
    """The partition's segments concatenated, cut before the first batch whose base offset
    is at or past `upto` (None: everything). A torn batch at the end is kept as bytes."""
    data = b"".join(p.read_bytes() for p in segment_files(pdir))
    if upto is None:
        return data
    return data[:byte_position(data, upto)]


def byte_position(data: bytes, offset: int) -> int:
    """The position of the first batch in `data` whose base offset is at or past `offset`
    (len(data) when none is)."""
    pos = 0
    while pos + _LOG_OVERHEAD <= len(data):
        base, length = _OFFSET_LEN.unpack_from(data, pos)
        if base >= offset or length <= 0:
            return pos
        pos += _LOG_OVERHEAD + length
    return min(pos, len(data))


def batch_offsets(data: bytes) -> list[tuple[int, int]]:
    """(base offset, position) of every whole batch in `data`."""
    out: list[tuple[int, int]] = []
    pos = 0
    while pos + _LOG_OVERHEAD <= len(data):
        base, length = _OFFSET_LEN.unpack_from(data, pos)
        if length <= 0 or pos + _LOG_OVERHEAD + length > len(data):
            break
        out.append((base, pos))
        pos += _LOG_OVERHEAD + length
    return out


def compare_replicas(dirs: Mapping[int, Path], topic: str, partition: int,
                     upto: int | None) -> list[str]:
    """Differences between the replicas' bytes of `topic`-`partition` over offsets below
    `upto` (every byte when None), each replica given by node id -> data dir. Empty when
    they are identical (and at least one of them holds bytes when `upto` > 0)."""
    blobs = {node: log_bytes(partition_dir(d, topic, partition), upto)
             for node, d in sorted(dirs.items())}
    problems: list[str] = []
    if upto and not any(blobs.values()):
        problems.append(f"{topic}-{partition}: no replica holds offsets below {upto}")
    (first, ref), *rest = blobs.items()
    for node, blob in rest:
        if blob == ref:
            continue
        n = min(len(blob), len(ref))
        diff = next((i for i in range(n) if blob[i] != ref[i]), n)
        problems.append(
            f"{topic}-{partition}: node {node} ({len(blob)} bytes, batches "
            f"{_describe(blob)}) differs from node {first} ({len(ref)} bytes, batches "
            f"{_describe(ref)}) from byte {diff}")
    return problems


def _describe(blob: bytes) -> str:
    offsets = batch_offsets(blob)
    if not offsets:
        return "none"
    return f"{len(offsets)} from offset {offsets[0][0]} to {offsets[-1][0]}"
