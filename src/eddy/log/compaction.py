"""Log compaction for `cleanup.policy` containing `compact`: Kafka's LogCleaner, per partition.

What a cleaning round does (Kafka's rules):

* The log from its first segment up to the *first uncleanable offset* is cleaned; the active
  segment never is. The *dirty* section starts at the cleaner checkpoint (file
  `cleaner-offset-checkpoint` in the partition directory, written atomically; reset to the log
  start offset when missing or out of range). The first uncleanable offset is the lowest of:
  the active segment's base, the last stable offset when the caller passes one, the base of
  the first dirty segment whose largest timestamp is within `min.compaction.lag.ms` of now
  (Kafka uses the segment's largest timestamp; eddy falls back to the segment's creation
  time when no record carries one); it is rounded down to a segment base. Pass 1 may end the
  round earlier, mid-segment: before the first batch of a transaction whose marker is not in
  the range yet, or where the offset map filled up.
* A log is worth cleaning when dirty bytes / (clean + dirty bytes) exceeds
  `min.cleanable.dirty.ratio`, or when a dirty segment's first batch is older than
  `max.compaction.lag.ms` (Kafka's "compaction now").
* Pass 1 maps each key of the dirty section to its latest offset (records of aborted
  transactions never enter the map; a committed transaction's keys enter at its marker). The
  map holds at most `max_map_entries` keys; when full, the round ends after the last batch
  that fit, and the checkpoint moves only that far.
* Pass 2 rewrites every segment below that end, the clean section included, in groups of
  adjacent segments whose original sizes add up to at most `segment.bytes` (so segments
  cleaned small earlier merge), each group into one segment with the group's first base
  offset. A record is kept when its offset is past the map's coverage, or it is the latest
  of its key and not an expired tombstone. Keyless records are dropped with a warning. Batch
  boundaries stay: a batch keeps its base offset, last offset delta, producer id/epoch/base
  sequence, partition leader epoch, timestamp type and codec (recompressed with the same
  codec; snappy keeps its xerial framing when it had it); records keep their offsets; the
  CRC32C is recomputed. A batch left with no record is dropped, except the last batch of
  a group and the batch holding an active producer's last offset (passed by the caller):
  those stay as empty batches, as Kafka's RETAIN_EMPTY, so the last offset and producer
  sequence survive. A batch from which nothing is removed is copied byte for byte.
* Tombstones follow KIP-534 (Kafka 3.1+; eddy stores only v2 batches, so Kafka's legacy
  rule based on segment modification times never applies): the first cleaning that keeps a
  batch holding a tombstone stamps it with a delete horizon, now + `delete.retention.ms`
  (attribute bit 0x40, the horizon stored as the batch's base timestamp with the records'
  timestamp deltas rebased, so every record keeps its timestamp); a later cleaning at or
  after the horizon drops the tombstone. A consumer that reaches the head of the log within
  `delete.retention.ms` of the first cleaning therefore sees every tombstone.
* Control batches (transaction markers) are all kept for now; Kafka removes a marker once
  its transaction's data is gone and its delete horizon passed. Data batches of aborted
  transactions are dropped (the marker stays).

Threading contract (the broker runs `clean` in a thread executor; the log stays readable and
writable throughout):

* `plan_cleaning(plog, now_ms, ...)` - on the thread that owns the log (the event loop).
  Cheap: in-memory segment metadata, the checkpoint file, and one 61-byte header read per
  dirty segment only when `max.compaction.lag.ms` is set. Snapshots the inactive segments.
* `clean(plan)` - any thread. Reads only the snapshotted inactive segments, through their
  own fds, and writes only `.cleaned` files. It never touches the PartitionLog, so appends,
  fetches, rolls, flushes and retention run meanwhile. Pure with respect to time: the plan
  carries now_ms.
* `commit_swap(plog, result)` - on the thread that owns the log. Short: file renames, three
  directory fsyncs, the in-memory segment list swap and the checkpoint write; no record is
  read or written. A group whose old segments changed meanwhile (deleted by retention or
  DeleteRecords, truncated) is dropped and its `.cleaned` files removed.
* `abort(result)` - any thread, for a result that will not be committed.
* One cleaning at a time per partition; finish or abort it before deleting the partition.
  Readers holding an old Segment (a fetch in flight) keep reading it after the swap: its fd
  stays open until the last reference goes (Segment._Fd).

Crash safety. Per group, with B the group's base offset:

1. `clean` writes `B.log.cleaned`, `B.idx.cleaned`, `B.timeidx.cleaned` and fsyncs them.
2. Commit renames them to `.swap` (the log last), then fsyncs the directory. The existence of
   `B.log.swap` is the commit point of the group.
3. Each old segment's log other than B's is renamed to `.deleted`, and every old index file
   is unlinked; fsync the directory.
4. The `.swap` files are renamed to their final names (the log last, replacing the old
   `B.log` atomically), the segment list is swapped; fsync the directory; the `.deleted`
   files are unlinked; the checkpoint is written.

On open (`recover_interrupted_cleaning`, called by PartitionLog before it lists segments),
as Kafka's log loader does: `.cleaned` files are deleted (rolled back: the old segments are
untouched until step 3, which follows a durable step 2); a `B.log.swap` is completed (old
logs with a base offset in (B, last offset of the swap] are deleted, the swap renamed to
`B.log`, its indexes deleted so the segment load rebuilds them from the log with CRC
checks); index `.swap` files without their log are deleted together with the index they
would have replaced (rebuilt); `.deleted` files are deleted. Because the last batch of a
group is always kept, the swap's last offset is the last offset of the segments it
replaces, so a crash at any point leaves each group wholly old or wholly new: no record is
lost or duplicated. Groups commit independently; the checkpoint moves only after all of
them, so an interrupted round is simply redone.
"""

from __future__ import annotations

import hashlib
import logging
import os
import struct
from bisect import bisect_right
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import cramjam
from crc32c import crc32c

from eddy.log.cleaner_files import (
    CLEANED_SUFFIX,
    DELETED_SUFFIX,
    SEGMENT_EXTS,
    SWAP_SUFFIX,
    fsync_dir,
    recover_interrupted_cleaning,
    unlink_quietly,
)
from eddy.log.segment import Segment, segment_name
from eddy.log.state_files import atomic_write
from eddy.protocol.record_batch import (
    COMPRESSION_MASK,
    HEADER_SIZE,
    LOG_OVERHEAD,
    TIMESTAMP_TYPE_BIT,
    BatchHeader,
    batch_crc,
    parse_header,
)
from eddy.protocol.records import (
    CorruptRecordError,
    batch_payload,
    compress,
    control_type,
    iter_records,
    write_varint,
)

if TYPE_CHECKING:
    from eddy.log.partition import PartitionLog

log = logging.getLogger(__name__)

CHECKPOINT_FILE = "cleaner-offset-checkpoint"
DEFAULT_MAX_MAP_ENTRIES = 1 << 20

DELETE_HORIZON_BIT = 0x40  # KIP-534: the batch's base timestamp is its delete horizon
CONTROL_ABORT = 0
CONTROL_COMMIT = 1

_LONG_MAX = (1 << 63) - 1
_INT_MAX = (1 << 31) - 1
_READ_CHUNK = 1 << 20
_WRITE_CHUNK = 1 << 20
_MAX_RAW_KEY = 32  # longer keys are mapped by a 33-byte digest: never equal to a raw key
_XERIAL_MAGIC = b"\x82SNAPPY\x00"
_XERIAL_HEADER = _XERIAL_MAGIC + struct.pack(">ii", 1, 1)
_XERIAL_BLOCK = 32 * 1024
_BATCH_HEAD = struct.Struct(">qiibI")  # baseOffset .. crc
_BATCH_TAIL = struct.Struct(">hiqqqhii")  # attributes .. recordCount
_MAX_TS = struct.Struct(">q")

#: Test hook: called with a step name at each point where a crash is interesting.
_FAULT_HOOK: Callable[[str], None] | None = None


def _fault(step: str) -> None:
    hook = _FAULT_HOOK
    if hook is not None:
        hook(step)


class CompactionError(Exception):
    """The log could not be cleaned (a corrupt batch, an undecodable record set)."""


# ---- checkpoint ------------------------------------------------------------------------------


def read_checkpoint(directory: str) -> int | None:
    """The first dirty offset recorded by the last cleaning, or None."""
    try:
        with open(os.path.join(directory, CHECKPOINT_FILE), encoding="ascii") as f:
            return int(f.read().strip())
    except (FileNotFoundError, ValueError):
        return None


def write_checkpoint(directory: str, offset: int) -> None:
    atomic_write(os.path.join(directory, CHECKPOINT_FILE), f"{offset}\n".encode())


# ---- what to clean ---------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class CleanableRange:
    first_dirty: int
    first_uncleanable: int  # a segment base; nothing at or past it is cleaned this round
    clean_bytes: int
    dirty_bytes: int
    need_compaction_now: bool  # a dirty segment is older than max.compaction.lag.ms

    @property
    def ratio(self) -> float:
        total = self.clean_bytes + self.dirty_bytes
        return self.dirty_bytes / total if total else 0.0


def cleanable_range(
    plog: PartitionLog, now_ms: int, last_stable_offset: int | None = None
) -> CleanableRange:
    """Kafka's LogCleanerManager.cleanableOffsets and LogToClean for one log."""
    segs = plog.segments
    ends = [s.base_offset for s in segs[1:]] + [plog.log_end_offset]
    cfg = plog.config
    start = plog.log_start_offset
    checkpoint = read_checkpoint(plog.directory)
    if checkpoint is None or checkpoint < start:
        first_dirty = start
    elif checkpoint > plog.log_end_offset:
        log.warning(
            "%s-%d: cleaner checkpoint %d is past the log end offset %d: cleaning from %d",
            plog.topic, plog.partition, checkpoint, plog.log_end_offset, start,
        )
        first_dirty = start
    else:
        first_dirty = checkpoint
    bound = segs[-1].base_offset
    if last_stable_offset is not None:
        bound = min(bound, last_stable_offset)
    lag: int = cfg.value("min.compaction.lag.ms")
    if lag > 0:
        for seg, end in zip(segs[:-1], ends, strict=False):
            if end <= first_dirty:
                continue
            largest = seg.max_timestamp if seg.max_timestamp >= 0 else seg.created_ms
            if largest > now_ms - lag:
                bound = min(bound, seg.base_offset)
                break
    uncleanable = max(first_dirty, bound)
    i = bisect_right([s.base_offset for s in segs], uncleanable) - 1
    first_uncleanable = segs[max(i, 0)].base_offset
    clean_bytes = sum(s.size for s in segs if s.base_offset < first_dirty)
    dirty = [
        (s, end)
        for s, end in zip(segs[:-1], ends, strict=False)
        if end > first_dirty and s.base_offset < first_uncleanable
    ]
    dirty_bytes = sum(s.size for s, _ in dirty)
    need_now = False
    max_lag: int = cfg.value("max.compaction.lag.ms")
    if max_lag < _LONG_MAX:
        earliest = _LONG_MAX
        for seg, end in zip(segs[:-1], ends, strict=False):
            if end > first_dirty and seg.size >= HEADER_SIZE:
                (ts,) = _MAX_TS.unpack_from(seg.read_at(35, 8))
                if ts > 0:
                    earliest = min(earliest, ts)
        need_now = earliest < now_ms - max_lag
    return CleanableRange(first_dirty, first_uncleanable, clean_bytes, dirty_bytes, need_now)


def needs_cleaning(plog: PartitionLog, now_ms: int, last_stable_offset: int | None = None) -> bool:
    """Whether Kafka's cleaner would pick this log now (dirty ratio or max compaction lag)."""
    if not plog.config.compact or len(plog.segments) < 2:
        return False
    rng = cleanable_range(plog, now_ms, last_stable_offset)
    if rng.dirty_bytes <= 0:
        return False
    min_ratio: float = plog.config.value("min.cleanable.dirty.ratio")
    return rng.need_compaction_now or rng.ratio > min_ratio


@dataclass(frozen=True, slots=True)
class CleanPlan:
    """Everything `clean` needs, snapshotted on the log's thread."""

    directory: str
    topic: str
    partition: int
    segments: tuple[Segment, ...]  # inactive, from the first, in offset order
    sizes: tuple[int, ...]
    ends: tuple[int, ...]  # base offset of the segment after each
    first_dirty: int
    first_uncleanable: int
    now_ms: int
    delete_retention_ms: int
    segment_bytes: int
    index_interval_bytes: int
    max_map_entries: int
    producer_last_offsets: Mapping[int, int]


def plan_cleaning(
    plog: PartitionLog,
    now_ms: int,
    *,
    force: bool = False,
    last_stable_offset: int | None = None,
    producer_last_offsets: Mapping[int, int] | None = None,
    max_map_entries: int = DEFAULT_MAX_MAP_ENTRIES,
) -> CleanPlan | None:
    """A cleaning round for this log, or None when it is not due. `force` skips the dirty
    ratio test (and cleans the clean section alone when nothing is dirty, which drops
    expired tombstones). `producer_last_offsets`: producer id -> last data offset of each
    active producer; those batches are kept even when emptied."""
    cfg = plog.config
    if not cfg.compact or len(plog.segments) < 2:
        return None
    rng = cleanable_range(plog, now_ms, last_stable_offset)
    if not force:
        min_ratio: float = cfg.value("min.cleanable.dirty.ratio")
        if rng.dirty_bytes <= 0 or not (rng.need_compaction_now or rng.ratio > min_ratio):
            return None
    limit = max(rng.first_dirty, rng.first_uncleanable)
    inactive = plog.segments[:-1]
    chosen = [i for i, s in enumerate(inactive) if s.base_offset < limit]
    if not chosen:
        return None
    segs = tuple(inactive[i] for i in chosen)
    return CleanPlan(
        directory=plog.directory,
        topic=plog.topic,
        partition=plog.partition,
        segments=segs,
        sizes=tuple(s.size for s in segs),
        ends=tuple(plog.segments[i + 1].base_offset for i in chosen),
        first_dirty=rng.first_dirty,
        first_uncleanable=rng.first_uncleanable,
        now_ms=now_ms,
        delete_retention_ms=cfg.value("delete.retention.ms"),
        segment_bytes=cfg.segment_bytes,
        index_interval_bytes=cfg.index_interval_bytes,
        max_map_entries=max(1, max_map_entries),
        producer_last_offsets=dict(producer_last_offsets or {}),
    )


# ---- records ---------------------------------------------------------------------------------


@dataclass(slots=True)
class _Rec:
    attributes: int
    timestamp_delta: int
    offset_delta: int
    key: bytes | None
    tombstone: bool
    tail: bytes  # key, value and headers exactly as stored


def _records(h: BatchHeader, data: bytes) -> list[_Rec]:
    """The records of the batch `data`, checked (eddy.protocol.records)."""
    try:
        _, payload = batch_payload(data)
        return [
            _Rec(r.attributes, r.timestamp_delta, r.offset_delta, r.key, r.value_size < 0,
                 payload[r.key_pos : r.end])
            for r in iter_records(payload, h.record_count)
        ]
    except CorruptRecordError as exc:
        raise CompactionError(f"batch at offset {h.base_offset}: {exc}") from None


def _map_key(key: bytes) -> bytes:
    if len(key) <= _MAX_RAW_KEY:
        return key
    return hashlib.blake2b(key, digest_size=_MAX_RAW_KEY + 1).digest()


def _control_type(h: BatchHeader, data: bytes) -> int:
    try:
        return control_type(data)
    except CorruptRecordError as exc:
        raise CompactionError(f"control batch at offset {h.base_offset}: {exc}") from None


def _batches(seg: Segment, size: int, pos: int = 0) -> Iterator[tuple[BatchHeader, bytes]]:
    """Whole, CRC-checked batches of an inactive segment from pos up to size."""
    while size - pos >= HEADER_SIZE:
        chunk = seg.read_at(pos, min(_READ_CHUNK, size - pos))
        off = 0
        while len(chunk) - off >= HEADER_SIZE:
            h = parse_header(chunk, off)
            if (
                h.magic != 2
                or h.batch_length < HEADER_SIZE - LOG_OVERHEAD
                or pos + off + h.size > size
            ):
                raise CompactionError(f"{seg.log_path}: invalid batch at position {pos + off}")
            if off + h.size > len(chunk):
                if off:
                    break
                chunk = seg.read_at(pos, h.size)  # one batch larger than the read chunk
                if len(chunk) != h.size:
                    raise CompactionError(f"{seg.log_path}: short read at position {pos}")
                continue
            data = chunk[off : off + h.size]
            if batch_crc(data, 0, h.size) != h.crc:
                raise CompactionError(
                    f"{seg.log_path}: CRC32C mismatch in the batch at position {pos + off}"
                )
            yield h, data
            off += h.size
        pos += off
    if pos != size:
        raise CompactionError(f"{seg.log_path}: {size - pos} trailing bytes at position {pos}")


# ---- pass 1: the offset map ------------------------------------------------------------------


@dataclass(slots=True)
class OffsetMap:
    entries: dict[bytes, int]  # key (or its digest) -> latest offset in the dirty section
    latest: int  # last offset the map covers; records past it are kept as they are
    end: int  # first offset not covered: the next first dirty offset
    aborted: set[int]  # base offsets of aborted transactional batches
    full: bool


@dataclass(slots=True)
class _Txn:
    first_offset: int
    bases: list[int] = field(default_factory=list)
    keys: list[tuple[bytes, int]] = field(default_factory=list)


def _scan_dirty(plan: CleanPlan, start: int, upper: int) -> tuple[OffsetMap, int | None]:
    entries: dict[bytes, int] = {}
    pending: dict[int, _Txn] = {}
    pending_keys = 0
    aborted: set[int] = set()
    latest = -1
    full = False
    capacity = plan.max_map_entries
    for seg, size, seg_end in zip(plan.segments, plan.sizes, plan.ends, strict=True):
        if seg_end <= start:
            continue
        if seg.base_offset >= upper or full:
            break
        pos = seg.index.lookup(start) if seg.base_offset < start else 0
        for h, data in _batches(seg, size, pos):
            if h.last_offset < start:
                continue
            if h.base_offset >= upper:
                break
            if (
                not h.is_control
                and latest >= start
                and len(entries) + pending_keys + h.record_count > capacity
            ):
                full = True
                break
            if h.is_control:
                txn = pending.get(h.producer_id)
                if txn is not None:
                    kind = _control_type(h, data)
                    if kind in (CONTROL_COMMIT, CONTROL_ABORT):
                        del pending[h.producer_id]
                        pending_keys -= len(txn.keys)
                        if kind == CONTROL_ABORT:
                            aborted.update(txn.bases)
                        else:
                            for k, off in txn.keys:
                                if off > entries.get(k, -1):
                                    entries[k] = off
            else:
                recs = _records(h, data)
                if h.is_transactional:
                    txn = pending.get(h.producer_id)
                    if txn is None:
                        txn = pending[h.producer_id] = _Txn(h.base_offset)
                    txn.bases.append(h.base_offset)
                    for r in recs:
                        off = h.base_offset + r.offset_delta
                        if r.key is not None and off >= start:
                            txn.keys.append((_map_key(r.key), off))
                            pending_keys += 1
                else:
                    for r in recs:
                        off = h.base_offset + r.offset_delta
                        if r.key is not None and off >= start:
                            entries[_map_key(r.key)] = off
            latest = h.last_offset
    open_first = min((t.first_offset for t in pending.values()), default=None)
    end = latest + 1 if full else upper
    return OffsetMap(entries, max(latest, start - 1), end, aborted, full), open_first


def build_offset_map(plan: CleanPlan) -> OffsetMap:
    """Pass 1 over the dirty section. A transaction without its marker in range ends the
    round before its first batch (nothing at or past a last stable offset is cleaned)."""
    start = plan.first_dirty
    upper = plan.first_uncleanable
    while upper > start:
        omap, open_first = _scan_dirty(plan, start, upper)
        if open_first is None:
            return omap
        upper = open_first
    return OffsetMap({}, start - 1, start, set(), False)


# ---- pass 2: rewriting -----------------------------------------------------------------------


@dataclass(slots=True)
class CleanerStats:
    batches_read: int = 0
    records_read: int = 0
    records_kept: int = 0
    superseded: int = 0
    tombstones_dropped: int = 0
    keyless_dropped: int = 0
    aborted_dropped: int = 0
    bytes_read: int = 0
    bytes_written: int = 0
    map_entries: int = 0
    groups_rewritten: int = 0


@dataclass(slots=True)
class CleanedGroup:
    old: tuple[Segment, ...]
    old_sizes: tuple[int, ...]
    segment: Segment | None  # the .cleaned replacement; None when nothing would change

    @property
    def base_offset(self) -> int:
        return self.old[0].base_offset


@dataclass(slots=True)
class CleanResult:
    plan: CleanPlan
    groups: list[CleanedGroup]
    end_offset: int  # the next first dirty offset (written as the checkpoint on commit)
    stats: CleanerStats


def _xerial(data: bytes) -> bytes:
    out = bytearray(_XERIAL_HEADER)
    for i in range(0, len(data), _XERIAL_BLOCK):
        block = bytes(cramjam.snappy.compress_raw(data[i : i + _XERIAL_BLOCK]))
        out += struct.pack(">i", len(block)) + block
    return bytes(out)


def _assemble(
    h: BatchHeader, attributes: int, base_ts: int, max_ts: int, count: int, payload: bytes
) -> bytes:
    tail = _BATCH_TAIL.pack(
        attributes, h.last_offset_delta, base_ts, max_ts, h.producer_id, h.producer_epoch,
        h.base_sequence, count,
    ) + payload
    head = _BATCH_HEAD.pack(h.base_offset, len(tail) + 9, h.partition_leader_epoch, 2,
                            crc32c(tail))
    return head + tail


def _empty_batch(h: BatchHeader) -> bytes:
    """Kafka's RETAIN_EMPTY: the header alone, keeping offsets and producer fields."""
    attrs = h.attributes & ~(COMPRESSION_MASK | DELETE_HORIZON_BIT)
    return _assemble(h, attrs, h.max_timestamp, h.max_timestamp, 0, b"")


def _rebuild(h: BatchHeader, data: bytes, kept: list[_Rec], horizon: int | None) -> bytes:
    abs_ts = [h.base_timestamp + r.timestamp_delta for r in kept]
    base_ts = horizon if horizon is not None else abs_ts[0]
    body = bytearray()
    for r, ts in zip(kept, abs_ts, strict=True):
        rec = bytes((r.attributes,)) + write_varint(ts - base_ts) + write_varint(r.offset_delta)
        body += write_varint(len(rec) + len(r.tail))
        body += rec
        body += r.tail
    codec = h.compression
    if codec == 2 and data[HEADER_SIZE : HEADER_SIZE + len(_XERIAL_MAGIC)] == _XERIAL_MAGIC:
        payload = _xerial(bytes(body))
    else:
        payload = compress(codec, bytes(body))
    attrs = h.attributes & ~DELETE_HORIZON_BIT
    if horizon is not None:
        attrs |= DELETE_HORIZON_BIT
    max_ts = h.max_timestamp if h.attributes & TIMESTAMP_TYPE_BIT else max(abs_ts)
    return _assemble(h, attrs, base_ts, max_ts, len(kept), payload)


def _filter_batch(
    h: BatchHeader, data: bytes, omap: OffsetMap, plan: CleanPlan, stats: CleanerStats
) -> bytes | None:
    """The batch to write in place of this one (the same object when unchanged), or None
    when no record of it survives."""
    if h.is_control:
        return data  # transaction markers are all kept for now
    if h.is_transactional and h.base_offset in omap.aborted:
        stats.aborted_dropped += h.record_count
        return None
    recs = _records(h, data)
    stats.records_read += len(recs)
    horizon = h.base_timestamp if h.attributes & DELETE_HORIZON_BIT else None
    now = plan.now_ms
    kept: list[_Rec] = []
    tombstones = False
    for r in recs:
        off = h.base_offset + r.offset_delta
        if off <= omap.latest:
            if r.key is None:
                stats.keyless_dropped += 1
                continue
            if off < omap.entries.get(_map_key(r.key), -1):
                stats.superseded += 1
                continue
            if r.tombstone and horizon is not None and now >= horizon:
                stats.tombstones_dropped += 1
                continue
        kept.append(r)
        tombstones = tombstones or r.tombstone
    stats.records_kept += len(kept)
    if not kept:
        return None
    stamp = tombstones and horizon is None
    if len(kept) == len(recs) and not stamp:
        return data
    if stamp:
        horizon = min(now + plan.delete_retention_ms, _LONG_MAX)
    return _rebuild(h, data, kept, horizon)


def _group_segments(plan: CleanPlan, count: int) -> list[list[int]]:
    """Kafka's groupSegmentsBySize over the first `count` planned segments."""
    groups: list[list[int]] = []
    i = 0
    while i < count:
        group = [i]
        total = plan.sizes[i]
        first_base = plan.segments[i].base_offset
        i += 1
        while (
            i < count
            and total + plan.sizes[i] <= plan.segment_bytes
            and (plan.sizes[i] == 0 or plan.ends[i] - 1 - first_base <= _INT_MAX)
        ):
            group.append(i)
            total += plan.sizes[i]
            i += 1
        groups.append(group)
    return groups


def _clean_group(
    plan: CleanPlan, idxs: list[int], omap: OffsetMap, stats: CleanerStats
) -> CleanedGroup:
    old = tuple(plan.segments[i] for i in idxs)
    sizes = tuple(plan.sizes[i] for i in idxs)
    base = old[0].base_offset
    name = os.path.join(plan.directory, segment_name(base))
    for ext in SEGMENT_EXTS:  # a leftover of an abandoned round must not be appended to
        unlink_quietly(name + ext + CLEANED_SUFFIX)
    out = Segment(plan.directory, base, plan.index_interval_bytes, suffix=CLEANED_SUFFIX)
    try:
        changed = len(old) > 1
        buf = bytearray()
        meta: list[tuple[int, int, int, int, int]] = []

        def put(batch: bytes, h: BatchHeader) -> None:
            (max_ts,) = _MAX_TS.unpack_from(batch, 35)
            meta.append((len(buf), len(batch), h.base_offset, h.last_offset, max_ts))
            buf.extend(batch)

        def flush() -> None:
            if meta:
                out.append(buf, meta, plan.now_ms)
                stats.bytes_written += len(buf)
                buf.clear()
                meta.clear()

        held: BatchHeader | None = None  # an emptied batch, kept only if it ends the group
        for seg, size in zip(old, sizes, strict=True):
            for h, data in _batches(seg, size):
                stats.batches_read += 1
                stats.bytes_read += h.size
                held = None
                batch = _filter_batch(h, data, omap, plan, stats)
                if batch is None:
                    changed = True
                    last = plan.producer_last_offsets.get(h.producer_id)
                    if h.producer_id >= 0 and last == h.last_offset:
                        batch = _empty_batch(h)
                    else:
                        held = h
                        continue
                elif batch is not data:
                    changed = True
                put(batch, h)
                if len(buf) >= _WRITE_CHUNK:
                    flush()
                    _fault("clean-partial")
        if held is not None:
            put(_empty_batch(held), held)
        flush()
        _fault("clean-partial")
        if not changed:
            out.delete_files()
            return CleanedGroup(old, sizes, None)
        if out.size and out.max_timestamp >= 0:  # Kafka's final entry on becoming inactive
            out.time_index.maybe_append(out.max_timestamp, out.offset_of_max_timestamp)
        out.fsync()
        _fault("cleaned-written")
        stats.groups_rewritten += 1
        return CleanedGroup(old, sizes, out)
    except Exception:
        out.delete_files()
        raise


def clean(plan: CleanPlan) -> CleanResult:
    """Run both passes and write the cleaned segments as `.cleaned` files. Runs on any
    thread; does not touch the PartitionLog (see the module docstring)."""
    stats = CleanerStats()
    omap = build_offset_map(plan)
    stats.map_entries = len(omap.entries)
    count = sum(1 for s in plan.segments if s.base_offset < omap.end)
    groups: list[CleanedGroup] = []
    try:
        for idxs in _group_segments(plan, count):
            groups.append(_clean_group(plan, idxs, omap, stats))
    except Exception:
        for g in groups:
            if g.segment is not None:
                g.segment.delete_files()
        raise
    if stats.keyless_dropped:
        log.warning(
            "%s-%d: dropped %d keyless records from a compacted log",
            plan.topic, plan.partition, stats.keyless_dropped,
        )
    log.info(
        "%s-%d: cleaned offsets [%d, %d) (dirty from %d): %d of %d records kept, "
        "%d tombstones and %d aborted records removed, %d -> %d bytes in %d groups",
        plan.topic, plan.partition, plan.segments[0].base_offset, omap.end, plan.first_dirty,
        stats.records_kept, stats.records_read, stats.tombstones_dropped,
        stats.aborted_dropped, stats.bytes_read, stats.bytes_written, stats.groups_rewritten,
    )
    return CleanResult(plan, groups, omap.end, stats)


# ---- swapping in -----------------------------------------------------------------------------


def _still_installed(plog: PartitionLog, group: CleanedGroup) -> bool:
    segs = plog.segments
    first = group.old[0]
    i = next((k for k, s in enumerate(segs) if s is first), -1)
    n = len(group.old)
    if i < 0 or i + n >= len(segs):
        return False
    return all(
        a is b and not b.deleted and b.size == size
        for a, b, size in zip(segs[i : i + n], group.old, group.old_sizes, strict=True)
    )


def abort(result: CleanResult) -> None:
    """Delete the `.cleaned` files of a result that will not be committed."""
    for g in result.groups:
        if g.segment is not None and g.segment.suffix == CLEANED_SUFFIX:
            g.segment.delete_files()


def commit_swap(plog: PartitionLog, result: CleanResult) -> bool:
    """Install the cleaned segments (on the thread that owns the log). Returns False when a
    group was dropped because its old segments changed meanwhile; the checkpoint then stays
    unless those segments were deleted outright."""
    directory = plog.directory
    live: list[CleanedGroup] = []
    advance = True
    for g in result.groups:
        if g.segment is None:
            continue
        if _still_installed(plog, g):
            live.append(g)
            continue
        g.segment.delete_files()
        gone = all(s.deleted or all(s is not x for x in plog.segments) for s in g.old)
        advance = advance and gone
        log.info(
            "%s-%d: segments at %d changed while cleaning: cleaned copy dropped",
            plog.topic, plog.partition, g.base_offset,
        )
    # 1. commit point of each group: its log becomes B.log.swap
    for g in live:
        assert g.segment is not None
        g.segment.change_suffix(SWAP_SUFFIX)
        _fault("swap-renamed")
    if live:
        fsync_dir(directory)
        _fault("swap-synced")
    # 2. retire the old segments: logs to .deleted (B's is replaced by the rename in 3)
    for g in live:
        for s in g.old:
            if s.base_offset != g.base_offset:
                os.rename(s.log_path, s.log_path + DELETED_SUFFIX)
            for path in s.paths[1:]:
                unlink_quietly(path)
            _fault("old-retired")
    if live:
        fsync_dir(directory)
        _fault("old-retired-synced")
    # 3. final names and the in-memory swap
    deleted: list[str] = []
    for g in live:
        assert g.segment is not None
        g.segment.change_suffix("")
        plog.replace_segments(g.old, g.segment)
        for s in g.old:
            if s.base_offset != g.base_offset:
                deleted.append(s.log_path + DELETED_SUFFIX)
            s.retire()
        _fault("installed")
    if live:
        fsync_dir(directory)
    for path in deleted:
        unlink_quietly(path)
    if advance and result.end_offset != read_checkpoint(directory):
        _fault("before-checkpoint")
        write_checkpoint(directory, result.end_offset)
    return advance


def clean_log(
    plog: PartitionLog,
    now_ms: int,
    *,
    force: bool = False,
    last_stable_offset: int | None = None,
    producer_last_offsets: Mapping[int, int] | None = None,
    max_map_entries: int = DEFAULT_MAX_MAP_ENTRIES,
) -> CleanResult | None:
    """plan, clean and commit on the calling thread (tools, tests, a broker without an
    executor). None when the log is not due for cleaning."""
    plan = plan_cleaning(
        plog, now_ms, force=force, last_stable_offset=last_stable_offset,
        producer_last_offsets=producer_last_offsets, max_map_entries=max_map_entries,
    )
    if plan is None:
        return None
    result = clean(plan)
    commit_swap(plog, result)
    return result


# ---- recovery at open ------------------------------------------------------------------------


__all__ = [
    "CHECKPOINT_FILE",
    "CleanPlan",
    "CleanResult",
    "CleanableRange",
    "CleanedGroup",
    "CleanerStats",
    "CompactionError",
    "OffsetMap",
    "abort",
    "build_offset_map",
    "clean",
    "clean_log",
    "cleanable_range",
    "commit_swap",
    "needs_cleaning",
    "plan_cleaning",
    "read_checkpoint",
    "recover_interrupted_cleaning",
    "write_checkpoint",
]
