"""The asyncio adapter around the sans-IO group coordinator: it routes the coordinator's
answers to waiting requests, appends its records to __consumer_offsets before they are
acknowledged, fires its timers, and rebuilds its state from the log at start."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

from eddy.groups.host import LogHost
from eddy.groups.records import RecordFormatError, partition_for
from eddy.groups.state import GroupConfig, GroupCoordinator, Step, Write
from eddy.log.manager import Topic
from eddy.log.partition import PartitionLog
from eddy.protocol.errors import ErrorCode, KafkaError
from eddy.protocol.markers import COMMIT, control_type
from eddy.protocol.record_batch import parse_header, validate_batches
from eddy.protocol.records import build_batch, decode_batch_records

if TYPE_CHECKING:
    from eddy.groups.raft_store import RaftGroupStore

log = logging.getLogger(__name__)

OFFSETS_TOPIC = "__consumer_offsets"


class GroupService:
    def __init__(self, broker: LogHost) -> None:
        cfg = broker.config
        self._broker = broker
        self._config = GroupConfig(
            min_session_timeout_ms=cfg.group_min_session_timeout_ms,
            max_session_timeout_ms=cfg.group_max_session_timeout_ms,
            initial_rebalance_delay_ms=cfg.group_initial_rebalance_delay_ms,
            offsets_retention_ms=cfg.offsets_retention_minutes * 60_000,
            offset_metadata_max_bytes=cfg.offset_metadata_max_bytes,
        )
        self.coordinator = GroupCoordinator(self._config)
        #: in a cluster: the offsets Raft group holds the records (see groups_raft)
        self.store: RaftGroupStore | None = None
        self._waiting: dict[int, asyncio.Future[Any]] = {}
        self._timer: asyncio.TimerHandle | None = None
        self._timer_at: int | None = None
        self.open_txn_offsets: dict[int, list[tuple[bytes, bytes | None]]] = {}

    # ---- start-up ------------------------------------------------------------------------

    def load(self) -> None:
        """Replay the offsets topic into the coordinator (created on first use, not here,
        so that an empty broker starts fast)."""
        topic = self._broker.logs.get(OFFSETS_TOPIC)
        if topic is None:
            return
        replayed = sum(self._replay(plog) for plog in topic.partitions)
        if replayed:
            log.info("group coordinator loaded %d records from %s", replayed, OFFSETS_TOPIC)

    @property
    def serving(self) -> bool:
        """Whether this broker coordinates groups now (always, on a node of its own)."""
        return self.store is None or self.store.serving

    def reload(self, records: Sequence[tuple[bytes, bytes | None]]) -> None:
        """Start over from ``records`` (a cluster's offsets group, on becoming its leader):
        a fresh coordinator; requests still waiting on the old one are cancelled."""
        if self._timer is not None:
            self._timer.cancel()
            self._timer, self._timer_at = None, None
        for fut in self._waiting.values():
            fut.cancel()
        self._waiting.clear()
        self.coordinator = GroupCoordinator(self._config)
        self.replay_records(records)

    def replay_records(self, records: Sequence[tuple[bytes, bytes | None]]) -> None:
        """Records that reached the cluster's offsets group without this coordinator
        (imported from a joining node's own groups)."""
        for key, value in records:
            try:
                self.coordinator.replay(key, value)
            except RecordFormatError as exc:
                log.warning("offsets group: skipping a malformed record: %s", exc)
        self._arm_timer()

    def offsets_topic(self) -> Topic:
        topic = self._broker.logs.get(OFFSETS_TOPIC)
        if topic is None:
            cfg = self._broker.config
            topic = self._broker.logs.create_topic(
                OFFSETS_TOPIC,
                cfg.offsets_topic_num_partitions,
                {"cleanup.policy": "compact",
                 "segment.bytes": str(cfg.offsets_topic_segment_bytes)},
                self._broker.clock.now_ms(),
            )
        return topic

    def _replay(self, plog: PartitionLog) -> int:
        """Apply the log in order; transactional offset commits wait for their marker."""
        return self._scan(plog, lambda records: self._apply_records(plog, records))

    def local_records(self) -> list[tuple[bytes, bytes]]:
        """The live records of this node's own ``__consumer_offsets`` (the latest value of
        each key, committed transactions' included): what a node that held groups on its
        own brings into a cluster's offsets group."""
        topic = self._broker.logs.get(OFFSETS_TOPIC)
        latest: dict[bytes, bytes | None] = {}

        def keep(records: list[tuple[bytes, bytes | None]]) -> int:
            latest.update(records)
            return len(records)

        for plog in topic.partitions if topic is not None else ():
            self._scan(plog, keep, track_open=False)
        return sorted((k, v) for k, v in latest.items() if v is not None)

    def _scan(self, plog: PartitionLog,
              sink: Callable[[list[tuple[bytes, bytes | None]]], int],
              track_open: bool = True) -> int:
        """Feed ``sink`` the log's records in order, a transaction's once committed;
        ``track_open``: keep those of transactions still open at the end."""
        count = 0
        open_txns: dict[int, list[tuple[bytes, bytes | None]]] = {}
        for seg in plog.segments:
            for bp in seg.scan():
                if bp.last_offset < plog.log_start_offset:
                    continue
                batch = seg.read_at(bp.position, bp.size)
                h = parse_header(batch)
                if h.is_control:
                    records = open_txns.pop(h.producer_id, [])
                    if control_type(batch) == COMMIT:
                        count += sink(records)
                    continue
                records = [(r.key, r.value) for r in decode_batch_records(batch)
                           if r.key is not None]
                if h.is_transactional:
                    open_txns.setdefault(h.producer_id, []).extend(records)
                else:
                    count += sink(records)
        if not track_open:
            return count
        for pid, records in open_txns.items():
            # a transaction still open at the end of the log: the transaction coordinator
            # decides its outcome when it loads (commit of a prepared one applies these)
            self.open_txn_offsets.setdefault(pid, []).extend(records)
        return count

    def _apply_records(self, plog: PartitionLog, records: list[tuple[bytes, bytes | None]]
                       ) -> int:
        for key, value in records:
            try:
                self.coordinator.replay(key, value)
            except RecordFormatError as exc:
                log.warning("%s-%d: skipping malformed record: %s", plog.topic, plog.partition,
                            exc)
        return len(records)

    # ---- calls ---------------------------------------------------------------------------

    async def call(self, step: Step) -> Any:
        """Apply a step that submitted one request and wait for that request's answer."""
        rid = step.request_id
        assert rid is not None
        fut: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        self._waiting[rid] = fut
        self.apply(step)
        try:
            return await fut
        finally:
            self._waiting.pop(rid, None)

    def apply(self, step: Step) -> None:
        """Deliver answers, persist writes (feeding their completion back), re-arm the timer."""
        pending = [step]
        rounds = 0
        while pending:
            rounds += 1
            if rounds > 100_000:
                raise RuntimeError("group coordinator steps did not settle")
            current = pending.pop()
            if current.events:
                self._broker.metrics.counts.group_events(current.events)
            for rid, response in current.responses:
                fut = self._waiting.get(rid)
                if fut is not None and not fut.done():
                    fut.set_result(response)
            for write in current.writes:
                if self.store is not None:  # completes later, through apply() again
                    self.store.persist(write)
                    continue
                error = self._persist(write)
                pending.append(
                    self.coordinator.write_completed(self.now(), write.write_id, error)
                )
        self._arm_timer()

    def now(self) -> int:
        return self._broker.clock.now_ms()

    def _persist(self, write: Write) -> ErrorCode:
        topic = self.offsets_topic()
        plog = topic.partitions[partition_for(write.group_id, len(topic.partitions))]
        batch = build_batch([(r.key, r.value) for r in write.records], self.now())
        try:
            validated = validate_batches(batch, max_batch_bytes=1 << 30)
            plog.append(batch, validated, self.now())
        except (KafkaError, OSError) as exc:
            log.error("could not write group %s records: %s", write.group_id, exc)
            return ErrorCode.unknown_server_error
        return ErrorCode.none

    def _arm_timer(self) -> None:
        deadline = self.coordinator.next_deadline()
        if deadline is None:
            if self._timer is not None:
                self._timer.cancel()
                self._timer, self._timer_at = None, None
            return
        if self._timer is not None and self._timer_at == deadline:
            return
        if self._timer is not None:
            self._timer.cancel()
        loop = asyncio.get_running_loop()
        delay = max(deadline - self.now(), 0) / 1000
        self._timer_at = deadline
        self._timer = loop.call_later(delay, self._on_timer)

    def _on_timer(self) -> None:
        self._timer, self._timer_at = None, None
        try:
            self.apply(self.coordinator.poll(self.now()))
        except Exception:
            log.exception("group coordinator timer failed")

    def stop(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
