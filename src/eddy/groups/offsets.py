"""Sans-IO store of committed offsets, applied only once their records are durable.

The store holds ``group -> (topic, partition) -> OffsetAndMetadata``. It does no validation
of who may commit: :class:`eddy.groups.state.GroupCoordinator` checks generation, member id,
instance id and metadata size and then stages the change here.

Durability design (apply on confirm, no rollback)
--------------------------------------------------
A change (commit or deletion) is *staged* under the id of the ``__consumer_offsets`` write
that carries its records (:meth:`OffsetStore.stage` returns those records). It becomes
visible to :meth:`get` / :meth:`offsets` only when the adapter reports the write durable
(:meth:`complete`); a failed write is dropped (:meth:`abort`) and leaves no trace. This is
Kafka's own scheme (``pendingOffsetCommits`` confirmed by the append callback), chosen over
"apply now, roll back on failure" because:

- a fetch never returns an offset the log does not hold, so a crash between the apply and
  the write cannot resurrect or lose anything: the in-memory offsets are always exactly what
  a :meth:`replay` of the durable records gives;
- there is nothing to undo, so two concurrent commits to one partition where the first
  fails cannot restore a stale value over the second.

Writes to one group's partition complete in order; should a confirmation still arrive out of
order, a change only applies if its write id is newer than the last change applied to that
partition, so an older commit never overwrites a newer commit or deletion.

Expiry (``offsets.retention.minutes``, Kafka's 7 days by default) is decided here by
:meth:`expired`; which partitions are candidates and from what base time is the coordinator's
choice (Kafka's rules: an Empty group expires every offset once the retention passed since it
became Empty; a Stable consumer group expires offsets of topics it no longer subscribes to; a
group with no protocol type (only commits offsets) expires each offset from its commit time).
Partitions with a pending write never expire.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Collection, Mapping
from dataclasses import dataclass

from eddy.groups.records import (
    OffsetAndMetadata,
    Record,
    encode_offset_commit_key,
    encode_offset_commit_value,
)

__all__ = ["OffsetAndMetadata", "OffsetStore", "TopicPartition"]

TopicPartition = tuple[str, int]


@dataclass(slots=True)
class _Staged:
    group_id: str
    changes: dict[TopicPartition, OffsetAndMetadata | None]


class OffsetStore:
    """Committed offsets per group, with staged (not yet durable) changes."""

    def __init__(self) -> None:
        self._offsets: dict[str, dict[TopicPartition, OffsetAndMetadata]] = {}
        self._staged: dict[int, _Staged] = {}
        self._pending: dict[str, Counter[TopicPartition]] = {}
        # write id of the last change applied per (group, partition); 0 = from replay.
        self._applied: dict[str, dict[TopicPartition, int]] = {}

    # -- reads ------------------------------------------------------------------------------

    def get(self, group_id: str, tp: TopicPartition) -> OffsetAndMetadata | None:
        return self._offsets.get(group_id, {}).get(tp)

    def offsets(self, group_id: str) -> dict[TopicPartition, OffsetAndMetadata]:
        """A copy of the durable offsets of ``group_id``."""
        return dict(self._offsets.get(group_id, {}))

    def group_ids(self) -> set[str]:
        """Groups with durable offsets."""
        return set(self._offsets)

    def has_offsets(self, group_id: str) -> bool:
        """Durable or pending offsets exist (Kafka's ``hasOffsets``)."""
        return bool(self._offsets.get(group_id)) or bool(self._pending.get(group_id))

    def has_pending(self, group_id: str, tp: TopicPartition | None = None) -> bool:
        pending = self._pending.get(group_id)
        if not pending:
            return False
        return tp is None or pending[tp] > 0

    def pending_partitions(self, group_id: str) -> set[TopicPartition]:
        return {tp for tp, n in self._pending.get(group_id, Counter()).items() if n > 0}

    # -- staged writes ----------------------------------------------------------------------

    def stage(
        self,
        write_id: int,
        group_id: str,
        changes: Mapping[TopicPartition, OffsetAndMetadata | None],
    ) -> list[Record]:
        """Stage commits (value) and deletions (None) under ``write_id``; return its records."""
        if write_id in self._staged:
            raise ValueError(f"write {write_id} is already staged")
        staged = _Staged(group_id, dict(changes))
        self._staged[write_id] = staged
        pending = self._pending.setdefault(group_id, Counter())
        records = []
        for (topic, partition), value in staged.changes.items():
            pending[(topic, partition)] += 1
            key = encode_offset_commit_key(group_id, topic, partition)
            encoded = None if value is None else encode_offset_commit_value(value)
            records.append(Record(key, encoded))
        return records

    def complete(self, write_id: int) -> None:
        """The write is durable: apply its changes."""
        staged = self._unstage(write_id)
        if staged is None:
            return
        for tp, value in staged.changes.items():
            self._apply(staged.group_id, tp, value, write_id)
        self._prune(staged.group_id)

    def abort(self, write_id: int) -> None:
        """The write failed: forget its changes."""
        staged = self._unstage(write_id)
        if staged is not None:
            self._prune(staged.group_id)

    def _unstage(self, write_id: int) -> _Staged | None:
        staged = self._staged.pop(write_id, None)
        if staged is None:
            return None
        pending = self._pending[staged.group_id]
        for tp in staged.changes:
            pending[tp] -= 1
            if pending[tp] <= 0:
                del pending[tp]
        return staged

    def _apply(
        self, group_id: str, tp: TopicPartition, value: OffsetAndMetadata | None, seq: int
    ) -> None:
        applied = self._applied.setdefault(group_id, {})
        if seq and applied.get(tp, 0) > seq:
            return
        applied[tp] = seq
        if value is None:
            group = self._offsets.get(group_id)
            if group is not None:
                group.pop(tp, None)
                if not group:
                    del self._offsets[group_id]
        else:
            self._offsets.setdefault(group_id, {})[tp] = value

    def _prune(self, group_id: str) -> None:
        """Drop ordering marks once nothing is pending for the group."""
        if not self._pending.get(group_id):
            self._pending.pop(group_id, None)
            self._applied.pop(group_id, None)

    # -- replay -----------------------------------------------------------------------------

    def replay(self, group_id: str, tp: TopicPartition, value: OffsetAndMetadata | None) -> None:
        """Apply one durable record read back from the log (records are replayed in order)."""
        self._apply(group_id, tp, value, 0)
        self._prune(group_id)

    # -- expiry -----------------------------------------------------------------------------

    def expired(
        self,
        group_id: str,
        now_ms: int,
        retention_ms: int,
        base_timestamp_ms: int | None = None,
        keep_topics: Collection[str] = (),
    ) -> list[TopicPartition]:
        """Partitions of ``group_id`` whose offsets have expired at ``now_ms``.

        An offset expires when ``retention_ms`` has passed since ``base_timestamp_ms`` (or
        since its own commit when that is None), or at its explicit expire timestamp (commits
        made with OffsetCommit v2-v4 retention time). Topics in ``keep_topics`` and
        partitions with a pending write are kept.
        """
        out = []
        pending = self._pending.get(group_id, Counter())
        for tp, value in self._offsets.get(group_id, {}).items():
            if tp[0] in keep_topics or pending[tp] > 0:
                continue
            if value.expire_timestamp is not None:
                if now_ms >= value.expire_timestamp:
                    out.append(tp)
                continue
            base = value.commit_timestamp if base_timestamp_ms is None else base_timestamp_ms
            if now_ms - base >= retention_ms:
                out.append(tp)
        return sorted(out)
