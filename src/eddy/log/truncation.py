"""Cutting a segment's tail (a follower truncating to the leader's log, KIP-101/279) while
keeping what the Segment object derives from its files right: the offset and time indexes,
the next offset, the largest timestamp and its offset."""

from __future__ import annotations

import os
from bisect import bisect_left

from eddy.log.segment import BatchPos, Segment


def cut_segment(seg: Segment, offset: int) -> int:
    """Remove seg's batches at or above offset; a batch holding offset goes whole. Returns
    seg's new next offset: where its last kept batch ends (what reopening the files would
    find), or its base offset when nothing is kept."""
    first_gone = seg.find_batch(offset)  # the batch holding offset, or the first after it
    if first_gone is None:
        return seg.next_offset
    cut = first_gone.position
    last_kept = _last_batch_before(seg, cut)
    seg.truncate_to_position(cut)  # the log file and the offset index
    next_offset = last_kept.last_offset + 1 if last_kept is not None else seg.base_offset
    seg.time_index.truncate_to_offset(next_offset)
    seg.next_offset = next_offset
    _reload_max_timestamp(seg)
    if seg.is_empty:
        seg.created_ms = -1  # segment.ms counts from the next append, as for a new segment
    return next_offset


def empty_segment(seg: Segment, offset: int) -> None:
    """Remove every batch of seg; it holds nothing and its next offset is `offset`."""
    seg.truncate_to_position(0)
    seg.time_index.reset()
    seg.next_offset = offset
    seg.max_timestamp = -1
    seg.offset_of_max_timestamp = -1
    seg.created_ms = -1


def _last_batch_before(seg: Segment, position: int) -> BatchPos | None:
    """The batch ending at `position` (a batch boundary), scanning from the last index
    entry before it."""
    k = bisect_left(seg.index.positions, position)
    start = seg.index.positions[k - 1] if k else 0
    batches = seg.scan(start, position)
    return batches[-1] if batches else None


def _reload_max_timestamp(seg: Segment) -> None:
    """The largest timestamp of the batches left, as Kafka's LogSegment finds it after a
    truncation: the time index's last entry, then the batches from the one it names on."""
    ti = seg.time_index
    if ti.timestamps:
        ts, off = ti.timestamps[-1], ti.base_offset + ti.rel_offsets[-1]
        start = seg.index.lookup(off)
    else:
        ts, off, start = -1, -1, 0
    for bp in seg.scan(start):
        if bp.max_timestamp > ts:
            ts, off = bp.max_timestamp, bp.last_offset
    seg.max_timestamp, seg.offset_of_max_timestamp = ts, off


def fsync_dir(directory: str) -> None:
    """Make file creations, renames and unlinks in directory durable."""
    fd = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
