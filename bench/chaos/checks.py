"""The harness's checks, pure functions of what the clients were told and what they read
(Jepsen's queue checker, as tests/system/replication_check does for issue 14), plus the
bytes of a partition's replicas and the unavailability each fault caused.

- lost: an acknowledged write no read_committed consumer read;
- duplicated: a value read at more than one (partition, offset);
- misplaced: an acknowledged write read at another place than its acknowledgement said,
  an acknowledgement without an offset, or an offset read with two values;
- out of order: a consumer whose offsets in a partition went backwards, a partition where
  the writer's records (each partition written by one idempotent producer) show in another
  order than they were sent, or acknowledged offsets that do not grow with the writes;
- transactions: a committed transaction not wholly visible exactly once, an aborted one
  of which anything shows, one of unknown outcome partly visible;
- fatal: every fatal error the producers reported (librdkafka's idempotent producer gives
  up on a partition it can no longer guarantee: a client-visible failure);
- replicas: the replicas of a partition whose bytes differ below the high watermark.

Unacknowledged writes may or may not show (an acks=all write whose acknowledgement was
lost can be in the log): that is no anomaly.
"""

from __future__ import annotations

import itertools
import struct
from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from bench.chaos.workload import Ack, Journal, Read, Txn


@dataclass
class Verdict:
    acked: int = 0
    read: int = 0
    lost: list[str] = field(default_factory=list)
    duplicated: list[str] = field(default_factory=list)
    misplaced: list[str] = field(default_factory=list)
    out_of_order: list[str] = field(default_factory=list)
    transactions: list[str] = field(default_factory=list)
    fatal: list[str] = field(default_factory=list)
    replicas: list[str] = field(default_factory=list)

    def anomalies(self) -> dict[str, list[str]]:
        return {k: v for k, v in (("lost", self.lost), ("duplicated", self.duplicated),
                                  ("misplaced", self.misplaced),
                                  ("out of order", self.out_of_order),
                                  ("transactions", self.transactions), ("fatal", self.fatal),
                                  ("replicas", self.replicas)) if v}

    @property
    def ok(self) -> bool:
        return self.acked > 0 and not self.anomalies()

    def summary(self, limit: int = 5) -> str:
        lines = [f"acked {self.acked}, distinct records read {self.read}; " + ", ".join(
            f"{k} {len(getattr(self, k.replace(' ', '_')))}" for k in (
                "lost", "duplicated", "misplaced", "out of order", "transactions", "fatal",
                "replicas"))]
        for kind, found in self.anomalies().items():
            lines.append(f"{kind}: " + "; ".join(found[:limit])
                         + (f" (and {len(found) - limit} more)" if len(found) > limit else ""))
        return "\n".join(lines)


def check(journal: Journal, reads: Sequence[Sequence[Read]], txns: Sequence[Txn] = (),
          fatal: Iterable[str] = ()) -> Verdict:
    """Every anomaly of the history: `journal` (the idempotent writer), `reads` (each
    read_committed consumer's records in poll order), `txns` (the transactional writer's)."""
    v = Verdict(acked=len(journal.acks), fatal=[*journal.fatal, *fatal])
    at: dict[tuple[int, int], bytes] = {}
    where: dict[bytes, set[tuple[int, int]]] = defaultdict(set)
    for consumer, records in enumerate(reads):
        last: dict[int, int] = {}
        for r in records:
            prev = last.get(r.partition)
            if prev is not None and r.offset <= prev:
                v.out_of_order.append(f"consumer {consumer} read {r.partition}:{r.offset} "
                                      f"after {r.partition}:{prev}")
            last[r.partition] = r.offset if prev is None else max(prev, r.offset)
            seen = at.setdefault((r.partition, r.offset), r.value)
            if seen != r.value:
                v.misplaced.append(f"{r.partition}:{r.offset} read as {seen!r} and {r.value!r}")
            where[r.value].add((r.partition, r.offset))
    v.read = len(at)
    v.duplicated = [f"{value!r} at {sorted(places)}" for value, places in where.items()
                    if len(places) > 1]
    for a in journal.acks:
        value = journal.value(a.seq)
        places = where.get(value)
        if not places:
            v.lost.append(f"{value!r} acknowledged at {a.partition}:{a.offset} (sent "
                          f"{journal.clock(a.sent)}, acknowledged {journal.clock(a.acked)})")
        elif a.offset < 0:
            v.misplaced.append(f"{value!r} acknowledged with no offset ({a.offset}; read "
                               f"at {sorted(places)}; sent {journal.clock(a.sent)}, "
                               f"acknowledged {journal.clock(a.acked)})")
        elif (a.partition, a.offset) not in places:
            v.misplaced.append(f"{value!r} acknowledged at {a.partition}:{a.offset}, read at "
                               f"{sorted(places)}")
    v.out_of_order += order(journal, at)
    v.transactions = transactions(txns, where)
    return v


def order(journal: Journal, at: Mapping[tuple[int, int], bytes]) -> list[str]:
    """Per partition: the writer's records in the log (read) and its acknowledged offsets
    both follow the order they were sent in."""
    problems: list[str] = []
    by_partition: dict[int, list[tuple[int, int]]] = defaultdict(list)
    for (partition, offset), value in sorted(at.items()):
        seq = journal.seq_of(value)
        if seq is not None:
            by_partition[partition].append((offset, seq))
    for partition, rows in sorted(by_partition.items()):
        for (o1, s1), (o2, s2) in itertools.pairwise(rows):
            if s2 <= s1:
                problems.append(f"partition {partition}: seq {s2} at offset {o2} after seq "
                                f"{s1} at offset {o1}")
    acked: dict[int, list[Ack]] = defaultdict(list)
    for a in journal.acks:
        if a.offset >= 0:
            acked[a.partition].append(a)
    for partition, acks in sorted(acked.items()):
        acks.sort(key=lambda a: a.seq)
        for a, b in itertools.pairwise(acks):
            if b.offset <= a.offset:
                problems.append(f"partition {partition}: seq {b.seq} acknowledged at offset "
                                f"{b.offset}, seq {a.seq} (sent before) at {a.offset}")
    return problems


def transactions(txns: Sequence[Txn], where: Mapping[bytes, set[tuple[int, int]]]
                 ) -> list[str]:
    problems: list[str] = []
    for t in txns:
        seen = [len(where.get(value, ())) for value in t.values]
        name = t.values[0].decode(errors="replace") if t.values else "?"
        if any(n > 1 for n in seen):
            problems.append(f"{t.outcome} transaction {name}: a record read twice")
        elif t.outcome == "committed" and not all(seen):
            problems.append(f"committed transaction {name}: {seen.count(0)} of {len(seen)} "
                            f"records missing")
        elif t.outcome == "aborted" and any(seen):
            problems.append(f"aborted transaction {name}: {sum(seen)} records visible")
        elif t.outcome == "unknown" and any(seen) and not all(seen):
            problems.append(f"transaction {name} of unknown outcome: {sum(seen)} of "
                            f"{len(seen)} records visible")
    return problems


# ----------------------------------------------------------------------- unavailability


def longest_gap(acks: Iterable[float], start: float, end: float) -> float:
    """The longest time within [start, end] without an acknowledgement (of `acks`' times)."""
    points = [start, *sorted(t for t in acks if start < t < end), end]
    return max(b - a for a, b in itertools.pairwise(points))


def unavailability(journal: Journal, start: float, end: float) -> dict[int, float]:
    """partition -> the longest gap between acknowledgements within [start, end]."""
    times: dict[int, list[float]] = {p: [] for p in range(journal.partitions)}
    for a in journal.acks:
        if start < a.acked < end:
            times[a.partition].append(a.acked)
    return {p: longest_gap(t, start, end) for p, t in times.items()}


def failover_time(journal: Journal, partition: int, at: float) -> float | None:
    """From `at` to the first acknowledgement of a record of `partition` sent after `at`
    (which only a leader elected after a kill at `at` can give); None: there was none."""
    acked = [a.acked for a in journal.acks if a.partition == partition and a.sent > at]
    return min(acked) - at if acked else None


# ----------------------------------------------------------------------- replica bytes

_HEAD = struct.Struct(">qi")  # baseOffset, batchLength


def partition_dir(data_dir: Path, topic: str, partition: int) -> Path:
    """Where a node keeps a partition's segments (eddy.log.manager's layout)."""
    return data_dir / "topics" / topic / f"partition-{partition}"


def log_bytes(pdir: Path, upto: int) -> bytes:
    """The partition's segments concatenated, cut before the first batch whose base offset
    is at or past `upto`."""
    data = b"".join(p.read_bytes() for p in sorted(pdir.glob("*.log"),
                                                    key=lambda p: int(p.stem)))
    pos = 0
    while pos + _HEAD.size <= len(data):
        base, length = _HEAD.unpack_from(data, pos)
        if base >= upto or length <= 0:
            break
        pos += _HEAD.size + length
    return data[:min(pos, len(data))]


def replica_diffs(dirs: Mapping[int, Path], topic: str, ends: Mapping[int, int]) -> list[str]:
    """Every partition whose replicas (node id -> data dir) hold different bytes below its
    high watermark in `ends`; empty when they are byte-identical."""
    problems: list[str] = []
    for partition, end in sorted(ends.items()):
        blobs = {node: log_bytes(partition_dir(d, topic, partition), end)
                 for node, d in sorted(dirs.items())}
        (first, ref), *rest = blobs.items()
        if end and not any(blobs.values()):
            problems.append(f"{topic}-{partition}: no replica holds offsets below {end}")
        for node, blob in rest:
            if blob != ref:
                n = min(len(blob), len(ref))
                diff = next((i for i in range(n) if blob[i] != ref[i]), n)
                problems.append(f"{topic}-{partition}: node {node} ({len(blob)} bytes) differs "
                                f"from node {first} ({len(ref)} bytes) from byte {diff}")
    return problems
