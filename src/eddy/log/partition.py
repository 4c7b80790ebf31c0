"""A partition's log: its segments, offsets (log start, high watermark, end) and epoch."""

from __future__ import annotations

import logging
import os
from bisect import bisect_right
from collections.abc import Sequence
from dataclasses import dataclass

from eddy.log.cleaner_files import (
    CLEANED_SUFFIX,
    DELETED_SUFFIX,
    SWAP_SUFFIX,
    recover_interrupted_cleaning,
)
from eddy.log.config import TopicConfig
from eddy.log.epoch_cache import LeaderEpochCache
from eddy.log.file_cache import FILES, Pin
from eddy.log.segment import BatchPos, Segment
from eddy.log.state_files import read_int_file, write_int_file
from eddy.log.truncation import cut_segment, empty_segment, fsync_dir
from eddy.protocol.errors import ErrorCode, KafkaError
from eddy.protocol.record_batch import (
    BatchHeader,
    ValidatedBatches,
    patch_base_offset,
    set_log_append_time,
)

log = logging.getLogger(__name__)

LOG_START_FILE = "log-start-offset"
RECOVERY_POINT_FILE = "recovery-point"
LEADER_EPOCH_FILE = "leader-epoch"
#: a replicated partition's high watermark, written now and then (Kafka's
#: replication-offset-checkpoint): after a restart the HWM starts there, never above what
#: the ISR had, and moves up as the replicas report
HIGH_WATERMARK_FILE = "high-watermark"
#: names a log cleaner swap cut short by a crash leaves behind (see compaction)
_CLEANER_LEFTOVERS = (CLEANED_SUFFIX, SWAP_SUFFIX, DELETED_SUFFIX)


@dataclass(frozen=True, slots=True)
class FetchSlice:
    """A byte range of one segment file: whole batches, except possibly a cut last one.
    Holds the file's fd open (a Pin) until the slice is dropped, i.e. until the connection
    has sent it, even if the segment is deleted or its file evicted from the cache meanwhile."""

    segment: Segment
    position: int
    length: int
    file: Pin

    def read(self) -> bytes:
        return os.pread(self.file.fd, self.length, self.position)

    def __len__(self) -> int:
        return self.length

    @property
    def fd(self) -> int:
        return self.file.fd


def storage_error(plog: PartitionLog, what: str, exc: OSError) -> KafkaError:
    """An OSError (a full disk, no fd left) as KAFKA_STORAGE_ERROR for this partition: the
    request fails, the broker and the other partitions carry on."""
    return KafkaError(
        ErrorCode.kafka_storage_error,
        f"{what} {plog.topic}-{plog.partition} failed: {FILES.failure_message(exc)}",
    )


@dataclass(frozen=True, slots=True)
class AppendResult:
    base_offset: int
    last_offset: int
    log_append_time: int  # -1 for CreateTime topics
    log_start_offset: int


class PartitionLog:
    def __init__(self, directory: str, topic: str, partition: int, config: TopicConfig) -> None:
        self.directory = directory
        self.topic = topic
        self.partition = partition
        self.config = config
        self.segments: list[Segment] = []
        self._bases: list[int] = []
        self.log_start_offset = 0
        self.high_watermark = 0
        self.leader_epoch = 0
        self.epochs = LeaderEpochCache(directory)  # the history (see _load)
        self.recovery_point = 0
        self.unflushed_messages = 0
        self.unflushed_bytes = 0  # appended since the last fsync began (group commit)
        self.last_flush_ms = 0
        self.flushed_offset = 0  # everything below is fsynced
        self.append_failing = False  # the last append failed (logged once until one works)
        #: no other replica: the high watermark follows the log end (else replication
        #: moves it)
        self.sole_replica = True
        self._checkpointed_hwm = -1

    # ---- opening -------------------------------------------------------------------------

    @classmethod
    def open(
        cls,
        directory: str,
        topic: str,
        partition: int,
        config: TopicConfig,
        clean_shutdown: bool,
        now_ms: int,
    ) -> PartitionLog:
        os.makedirs(directory, exist_ok=True)
        plog = cls(directory, topic, partition, config)
        plog._load(clean_shutdown)
        plog.last_flush_ms = now_ms
        return plog

    def _load(self, clean_shutdown: bool) -> None:
        names = os.listdir(self.directory)
        if any(name.endswith(_CLEANER_LEFTOVERS) for name in names):
            # finish or roll back a log cleaner swap a crash interrupted, before listing
            recover_interrupted_cleaning(self.directory)
            names = os.listdir(self.directory)
        present = set(names)

        def state(name: str) -> int:
            path = os.path.join(self.directory, name)
            return read_int_file(path, 0) if name in present else 0

        self.log_start_offset = state(LOG_START_FILE)
        self.recovery_point = state(RECOVERY_POINT_FILE)
        self.leader_epoch = state(LEADER_EPOCH_FILE)
        self.epochs = LeaderEpochCache.load(self.directory)
        bases = sorted(
            int(name[:-4]) for name in names if name.endswith(".log") and name[:-4].isdigit()
        )
        expected = 0
        truncated = False
        for base in bases:
            seg = Segment(self.directory, base, self.config.index_interval_bytes)
            if truncated:
                log.warning("%s: deleting segment after a corrupt one", seg.log_path)
                seg.delete_files()
                continue
            validate = not clean_shutdown and seg.base_offset >= self._recovery_segment_base(
                bases
            )
            healthy = seg.load(validate=validate, expected_start=expected)
            self.segments.append(seg)
            expected = seg.next_offset
            if not healthy:
                truncated = True
        # an empty non-first segment is harmless, but an empty log still needs one segment
        if not self.segments:
            start = self.log_start_offset
            self.segments.append(Segment(self.directory, start, self.config.index_interval_bytes))
            self.segments[0].next_offset = start
        self._bases = [s.base_offset for s in self.segments]
        leo = self.segments[-1].next_offset
        if leo < self.log_start_offset:
            # every segment up to the log start offset was deleted: restart there
            self._roll(self.log_start_offset, 0)
            leo = self.log_start_offset
        self.log_start_offset = max(self.log_start_offset, self.segments[0].base_offset)
        # a replica's checkpointed HWM (below it everything was committed); a log of a
        # node on its own has none: all of it is committed
        hwm_path = os.path.join(self.directory, HIGH_WATERMARK_FILE)
        checkpoint = read_int_file(hwm_path, leo) if HIGH_WATERMARK_FILE in present else leo
        self.high_watermark = max(min(checkpoint, leo), self.log_start_offset)
        self._checkpointed_hwm = checkpoint
        self.flushed_offset = leo if clean_shutdown else min(self.recovery_point, leo)
        self._fit_epochs_to_log()

    def _recovery_segment_base(self, bases: list[int]) -> int:
        """Base of the segment holding the recovery point: validate it and all after."""
        i = bisect_right(bases, self.recovery_point)
        return bases[i - 1] if i else 0

    def _fit_epochs_to_log(self) -> None:
        """Epochs starting at or past the log end (a crash after the checkpoint was written
        and before the batches were) or wholly below the log start are forgotten."""
        try:
            self.epochs.truncate_from_end(self.log_end_offset)
            self.epochs.truncate_from_start(self.log_start_offset)
        except OSError as exc:
            log.warning("%s-%d: cannot rewrite the leader epoch checkpoint: %s", self.topic,
                        self.partition, exc)

    # ---- state ---------------------------------------------------------------------------

    @property
    def active(self) -> Segment:
        return self.segments[-1]

    @property
    def log_end_offset(self) -> int:
        return self.segments[-1].next_offset

    @property
    def size_bytes(self) -> int:
        return sum(s.size for s in self.segments)

    # ---- append --------------------------------------------------------------------------

    def append(self, data: bytearray, batches: ValidatedBatches, now_ms: int) -> AppendResult:
        """Assign offsets to validated batches and write them. The caller holds no lock:
        this runs to completion on the event loop, so appends never interleave."""
        cfg = self.config
        if not cfg.log_append_time and batches.headers:
            for h in batches.headers:
                ts = h.max_timestamp
                if ts < 0:
                    continue
                if ts < now_ms - cfg.timestamp_before_max_ms or (
                    ts > now_ms + cfg.timestamp_after_max_ms
                ):
                    raise KafkaError(
                        ErrorCode.invalid_timestamp,
                        f"timestamp {ts} is outside the allowed range of the broker clock "
                        f"{now_ms} (message.timestamp.before/after.max.ms)",
                    )
        try:
            result = self._append(data, batches, now_ms)
        except OSError as exc:
            error = storage_error(self, "append to", exc)
            if not self.append_failing:
                log.error("%s: answering KAFKA_STORAGE_ERROR until appends work again",
                          error.message)
            self.append_failing = True
            raise error from exc
        if self.append_failing:
            self.append_failing = False
            log.info("%s-%d: appends work again", self.topic, self.partition)
        return result

    def _append(self, data: bytearray, batches: ValidatedBatches, now_ms: int) -> AppendResult:
        cfg = self.config
        size = len(data)
        seg = self.active
        if seg.size and (
            seg.size + size > cfg.segment_bytes or now_ms - seg.created_ms >= cfg.segment_ms
        ):
            seg = self._roll(self.log_end_offset, now_ms)
        offset = self.log_end_offset
        base = offset
        epoch = self.leader_epoch
        if epoch > self.epochs.latest_epoch():
            self.epochs.assign(epoch, offset)  # the first batch this leader epoch writes
        meta: list[tuple[int, int, int, int, int]] = []
        append_time = now_ms if cfg.log_append_time else -1
        for h, pos in zip(batches.headers, batches.positions, strict=True):
            patch_base_offset(data, pos, offset, epoch)
            max_ts = h.max_timestamp
            if append_time >= 0:
                set_log_append_time(data, pos, h.size, append_time)
                max_ts = append_time
            meta.append((pos, h.size, offset, offset + h.last_offset_delta, max_ts))
            offset += h.record_count
        seg.append(data, meta, now_ms)
        self.unflushed_messages += batches.record_count
        self.unflushed_bytes += size
        if self.sole_replica:
            self.high_watermark = self.log_end_offset  # one replica: HWM = LEO
        return AppendResult(base, offset - 1, append_time, self.log_start_offset)

    def append_replica(self, data: bytes | bytearray | memoryview,
                       headers: Sequence[BatchHeader], positions: Sequence[int],
                       now_ms: int) -> None:
        """A follower's append: batches its leader wrote, checked by the caller to continue
        this log (``check_replica_batches``), written as they came. The high watermark is
        the replication's to move."""
        if not headers:
            return
        last = headers[-1]
        size = positions[-1] + last.size
        seg = self.active
        if seg.size and (
            seg.size + size > self.config.segment_bytes
            or now_ms - seg.created_ms >= self.config.segment_ms
        ):
            seg = self._roll(self.log_end_offset, now_ms)
        meta = [(pos, h.size, h.base_offset, h.last_offset, h.max_timestamp)
                for h, pos in zip(headers, positions, strict=True)]
        try:
            seg.append(memoryview(data)[:size], meta, now_ms)
        except OSError as exc:
            raise storage_error(self, "replicating into", exc) from exc
        self.unflushed_messages += sum(h.record_count for h in headers)
        self.unflushed_bytes += size

    def _roll(self, base_offset: int, now_ms: int) -> Segment:
        old = self.segments[-1] if self.segments else None
        replace = old is not None and old.is_empty and old.base_offset <= base_offset
        if replace and old is not None and old.base_offset == base_offset:
            old.delete_files()  # its files are about to be created again under the same name
            self.segments.pop()
            replace = False
        # the new segment first: when it cannot be created, the log is left as it was
        seg = Segment(self.directory, base_offset, self.config.index_interval_bytes)
        seg.next_offset = base_offset
        if replace and old is not None:
            # replace an empty segment rather than leave a hole of files behind
            self.segments.pop()
            old.delete_files()
        self.segments.append(seg)
        self._bases = [s.base_offset for s in self.segments]
        log.debug("%s-%d: rolled segment at offset %d", self.topic, self.partition, base_offset)
        return seg

    def roll_if_due(self, now_ms: int) -> bool:
        seg = self.active
        if seg.size and now_ms - seg.created_ms >= self.config.segment_ms:
            self._roll(self.log_end_offset, now_ms)
            return True
        return False

    # ---- flush ---------------------------------------------------------------------------

    def flush_due(self, now_ms: int) -> bool:
        if self.flushed_offset >= self.log_end_offset:
            return False
        return (
            self.unflushed_messages >= self.config.flush_messages
            or now_ms - self.last_flush_ms >= self.config.flush_ms
        )

    def segments_to_flush(self) -> tuple[list[Segment], int]:
        """Segments holding unflushed data and the offset a completed fsync covers."""
        target = self.log_end_offset
        segs = [s for s in self.segments if s.next_offset > self.flushed_offset and s.size]
        self.unflushed_messages = 0
        self.unflushed_bytes = 0
        return segs, target

    def flush_completed(self, offset: int, now_ms: int) -> None:
        self.last_flush_ms = now_ms
        if offset > self.flushed_offset:
            self.flushed_offset = offset
            point = self._segment_for(offset).base_offset
            if point != self.recovery_point:
                try:
                    write_int_file(os.path.join(self.directory, RECOVERY_POINT_FILE), point)
                except OSError as exc:
                    # the data is on disk; an old recovery point only means more to validate
                    # after a crash
                    log.warning("%s-%d: cannot write the recovery point: %s", self.topic,
                                self.partition, exc)
                else:
                    self.recovery_point = point

    def rolled_segments_to_flush(self) -> list[Segment]:
        """Inactive segments not yet fsynced (Kafka flushes a segment when it rolls)."""
        return [s for s in self.segments[:-1] if s.next_offset > self.flushed_offset]

    # ---- read ----------------------------------------------------------------------------

    def _segment_for(self, offset: int) -> Segment:
        i = bisect_right(self._bases, offset)
        return self.segments[max(i - 1, 0)]

    def check_offset(self, offset: int) -> None:
        if offset < self.log_start_offset or offset > self.log_end_offset:
            raise KafkaError(
                ErrorCode.offset_out_of_range,
                f"offset {offset} is outside [{self.log_start_offset}, {self.log_end_offset}]",
            )

    def read(
        self, offset: int, max_bytes: int, max_offset: int, min_one: bool
    ) -> FetchSlice | bytes | None:
        """Bytes from the batch holding offset, up to max_bytes (at least one whole batch
        when min_one), never past max_offset (exclusive: the HWM or LSO). A file range the
        connection sends itself, or the bytes read now when too many fds are pinned by
        responses in flight already."""
        self.check_offset(offset)
        if offset >= max_offset:
            return None
        try:
            return self._read(offset, max_bytes, max_offset, min_one)
        except OSError as exc:
            raise storage_error(self, "read from", exc) from exc

    def _read(
        self, offset: int, max_bytes: int, max_offset: int, min_one: bool
    ) -> FetchSlice | bytes | None:
        i = bisect_right(self._bases, offset) - 1
        i = max(i, 0)
        while i < len(self.segments):
            seg = self.segments[i]
            bp = seg.find_batch(offset)
            if bp is not None:
                break
            i += 1
        else:
            return None
        if bp.base_offset >= max_offset:
            return None
        end = seg.size if max_offset >= seg.next_offset else seg.position_of_offset(max_offset)
        available = end - bp.position
        length = min(available, max_bytes)
        if min_one and length < bp.size:
            length = min(bp.size, available)
        if length <= 0:
            return None
        pin = seg.pin_log()
        if pin is None:
            return seg.read_at(bp.position, length)
        return FetchSlice(seg, bp.position, length, pin)

    def offset_for_timestamp(self, timestamp: int) -> BatchPos | None:
        """The first batch (from the log start) with a max timestamp >= timestamp."""
        try:
            return self._offset_for_timestamp(timestamp)
        except OSError as exc:
            raise storage_error(self, "timestamp lookup in", exc) from exc

    def _offset_for_timestamp(self, timestamp: int) -> BatchPos | None:
        for seg in self.segments:
            if seg.max_timestamp < timestamp or seg.next_offset <= self.log_start_offset:
                continue
            bp = seg.find_timestamp(timestamp)
            if bp is not None and bp.last_offset >= self.log_start_offset:
                return bp
        return None

    def max_timestamp_batch(self) -> tuple[int, int]:
        """(max timestamp, its offset) over the log: ListOffsets MAX_TIMESTAMP (-3)."""
        best = (-1, -1)
        for seg in self.segments:
            if seg.max_timestamp > best[0]:
                best = (seg.max_timestamp, seg.offset_of_max_timestamp)
        return best

    # ---- retention and deletion -----------------------------------------------------------

    def checkpoint_high_watermark(self) -> None:
        """Write the HWM if it moved since the last write (a failed write is logged: an
        older checkpoint only means a lower HWM after a restart)."""
        value = self.high_watermark_to_checkpoint()
        if value is not None and self.write_high_watermark(value):
            self.high_watermark_checkpointed(value)

    def high_watermark_to_checkpoint(self) -> int | None:
        """The HWM if it moved since it was last written (None: nothing to write)."""
        return None if self.high_watermark == self._checkpointed_hwm else self.high_watermark

    def write_high_watermark(self, value: int) -> bool:
        """Write ``value`` to the HWM checkpoint file, durably (an fsync: callable from an
        executor thread, off the event loop); False when the write failed (logged)."""
        try:
            write_int_file(os.path.join(self.directory, HIGH_WATERMARK_FILE), value)
        except OSError as exc:
            log.warning("%s-%d: cannot checkpoint the high watermark: %s", self.topic,
                        self.partition, exc)
            return False
        return True

    def high_watermark_checkpointed(self, value: int) -> None:
        """``value`` is on disk (``write_high_watermark`` succeeded)."""
        self._checkpointed_hwm = value

    def set_leader_epoch(self, epoch: int) -> None:
        """The partition's leader epoch as the cluster's metadata says (kept on disk: the
        batches this node appends carry it, and clients are checked against it)."""
        if epoch != self.leader_epoch:
            try:
                write_int_file(os.path.join(self.directory, LEADER_EPOCH_FILE), epoch)
            except OSError as exc:
                raise storage_error(self, "recording the leader epoch of", exc) from exc
            self.leader_epoch = epoch

    def set_log_start_offset(self, offset: int) -> None:
        if offset > self.log_start_offset:
            try:
                write_int_file(os.path.join(self.directory, LOG_START_FILE), offset)
            except OSError as exc:
                raise storage_error(self, "moving the log start offset of", exc) from exc
            self.log_start_offset = offset
            self._delete_segments_below(offset)
            try:
                self.epochs.truncate_from_start(offset)
            except OSError as exc:  # the log start moved: an old first epoch start is harmless
                log.warning("%s-%d: cannot rewrite the leader epoch checkpoint: %s",
                            self.topic, self.partition, exc)

    def _delete_segments_below(self, offset: int) -> int:
        """Delete whole segments ending at or before offset; the active one stays."""
        removed = 0
        while len(self.segments) > 1 and self.segments[0].next_offset <= offset:
            seg = self.segments.pop(0)
            seg.delete_files()
            removed += 1
        self._bases = [s.base_offset for s in self.segments]
        return removed

    def apply_retention(self, now_ms: int) -> int:
        """Delete segments past retention.ms / retention.bytes; returns how many."""
        if not self.config.delete:
            return 0
        new_start = self.log_start_offset
        retention_ms = self.config.retention_ms
        retention_bytes = self.config.retention_bytes
        total = self.size_bytes
        for seg in self.segments[:-1]:
            by_time = retention_ms >= 0 and 0 <= seg.max_timestamp < now_ms - retention_ms
            by_size = retention_bytes >= 0 and total - seg.size >= retention_bytes
            if not (by_time or by_size):
                break
            total -= seg.size
            new_start = seg.next_offset
        if new_start > self.log_start_offset:
            count = len(self.segments)
            self.set_log_start_offset(new_start)
            log.info(
                "%s-%d: retention deleted %d segments, log start offset now %d",
                self.topic, self.partition, count - len(self.segments), new_start,
            )
            return count - len(self.segments)
        return 0

    def replace_segments(self, old: Sequence[Segment], new: Segment) -> None:
        """Put `new` in place of the contiguous inactive run `old` (identity-checked). Only
        the in-memory list changes: the log cleaner has already renamed the files."""
        n = len(old)
        i = next((k for k, s in enumerate(self.segments) if s is old[0]), -1) if n else -1
        if i < 0 or i + n >= len(self.segments) or any(
            a is not b for a, b in zip(self.segments[i : i + n], old, strict=True)
        ):
            raise ValueError("segments to replace are not a contiguous inactive run of this log")
        self.segments[i : i + n] = [new]
        self._bases = [s.base_offset for s in self.segments]

    # ---- truncation (a follower matching its leader's log) ----------------------------------

    def truncate_to(self, offset: int) -> None:
        """Remove every batch at or above offset (never below the log start offset); a batch
        holding offset goes whole. The log then ends where its last kept batch ends: offset,
        or the base offset of the batch that held it. Later segments are deleted; the high
        watermark, flushed offset, recovery point and epoch history follow the new end.
        Durable on return (the cut segment and the directory are fsynced)."""
        offset = max(offset, self.log_start_offset)
        if offset >= self.log_end_offset:
            return
        try:
            self._truncate_to(offset)
        except OSError as exc:
            raise storage_error(self, "truncating", exc) from exc
        log.info("%s-%d: truncated to offset %d", self.topic, self.partition,
                 self.log_end_offset)

    def _truncate_to(self, offset: int) -> None:
        if offset < self.segments[0].base_offset:
            self._truncate_fully(offset)
            return
        i = bisect_right(self._bases, offset) - 1
        later = self.segments[i + 1 :]
        for seg in reversed(later):  # the last first: a crash meanwhile leaves a prefix
            seg.delete_files()
        del self.segments[i + 1 :]
        self._bases = [s.base_offset for s in self.segments]
        seg = self.segments[i]
        leo = cut_segment(seg, offset)
        seg.fsync()
        if later:
            fsync_dir(self.directory)
        if leo < self.log_start_offset:  # the batch holding the log start went too
            self._truncate_fully(self.log_start_offset)
            return
        self.high_watermark = min(self.high_watermark, leo)
        self.flushed_offset = min(self.flushed_offset, leo)
        if self.recovery_point > leo:
            write_int_file(os.path.join(self.directory, RECOVERY_POINT_FILE), leo)
            self.recovery_point = leo
        self.epochs.truncate_from_end(leo)

    def truncate_fully_and_start_at(self, offset: int) -> None:
        """Drop every batch: the log restarts empty at offset (log start = end = high
        watermark = offset) with no epoch history. For a follower whose log ends below the
        leader's log start offset."""
        try:
            self._truncate_fully(offset)
        except OSError as exc:
            raise storage_error(self, "emptying", exc) from exc
        log.info("%s-%d: emptied, restarting at offset %d", self.topic, self.partition, offset)

    def _truncate_fully(self, offset: int) -> None:
        # the log start first: a crash before the segments are gone reopens at it
        if offset != self.log_start_offset:
            write_int_file(os.path.join(self.directory, LOG_START_FILE), offset)
        kept = next((s for s in self.segments if s.base_offset == offset), None)
        if kept is None:
            kept = Segment(self.directory, offset, self.config.index_interval_bytes)
            kept.next_offset = offset
        else:  # its files keep their name: empty them rather than create them again
            empty_segment(kept, offset)
        for seg in reversed(self.segments):
            if seg is not kept:
                seg.delete_files()
        self.segments = [kept]
        self._bases = [offset]
        self.log_start_offset = offset
        self.high_watermark = offset
        self.flushed_offset = offset
        self.unflushed_messages = 0
        kept.fsync()
        fsync_dir(self.directory)
        if self.recovery_point != offset:
            write_int_file(os.path.join(self.directory, RECOVERY_POINT_FILE), offset)
            self.recovery_point = offset
        self.epochs.clear()

    def close(self) -> None:
        for seg in self.segments:
            seg.close()

    def delete(self) -> None:
        for seg in self.segments:
            seg.delete_files()
        for name in os.listdir(self.directory):
            os.unlink(os.path.join(self.directory, name))
        os.rmdir(self.directory)
