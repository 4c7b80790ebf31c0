"""``Fetcher``: one follower task per leader node (Kafka's replica fetcher thread).

It fetches every partition this node follows from that leader in one Fetch (v12, this
node's replica id, the follower's log end offset as the fetch offset, its known leader
epoch as the current one), over the leader's Kafka listener. For each partition it:

1. first truncates (after every new leader epoch, and after a restart): asks the leader
   OffsetForLeaderEpoch for the end of the follower's latest epoch and cuts its log there
   (KIP-101/279: never by the high watermark alone, which may be behind what the follower
   legitimately has, nor keeping records past where the leader's history diverged);
2. checks the fetched batches (``check_replica_batches``) and appends them as they came,
   moving the producer state with them (idempotent sequences, transaction markers);
3. takes the leader's high watermark (up to its own log end) and log start offset;
4. with write caching off, fsyncs what it appended (group commit) before the next fetch:
   the offset it reports next is durable here, which is what acks=all counts.

Errors cost a round: a leader that moved (NOT_LEADER_OR_FOLLOWER, FENCED_LEADER_EPOCH,
UNKNOWN_LEADER_EPOCH) is waited out until the metadata names the new one; a fetch offset
below the leader's log start restarts the log there; a broken connection or response is
retried with a backoff. Nothing a leader sends can take the process down.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from dataclasses import dataclass
from datetime import timedelta
from typing import TYPE_CHECKING, Any

from kio.schema.fetch.v12 import request as fetch_req
from kio.schema.offset_for_leader_epoch.v4 import request as ofle_req
from kio.schema.types import BrokerId, TopicName
from kio.static.primitive import i32, i64

from eddy.cluster.replication.divergence import truncation_offset
from eddy.cluster.replication.link import LeaderLink, MalformedResponse
from eddy.log.partition import PartitionLog
from eddy.metadata.endpoints import inter_broker
from eddy.protocol.errors import ErrorCode, KafkaError
from eddy.protocol.replica_batches import check_replica_batches
from eddy.security.inter_broker import InterBrokerSecurity

if TYPE_CHECKING:
    from eddy.cluster.replication.manager import ReplicaManager

log = logging.getLogger(__name__)

CONNECT_TIMEOUT_S = 3.0
BACKOFF_MIN_S = 0.05
BACKOFF_MAX_S = 1.0
#: a round whose every partition was refused waits this long before the next
REFUSED_WAIT_S = 0.1


@dataclass(slots=True)
class Follow:
    topic: str
    partition: int
    plog: PartitionLog
    leader: int
    leader_epoch: int
    truncated: bool = False  # OffsetForLeaderEpoch done for this epoch
    stopped: bool = False


def _code(raw: Any) -> ErrorCode:
    try:
        return ErrorCode(int(raw))
    except ValueError:
        return ErrorCode.unknown_server_error


class Fetcher:
    def __init__(self, manager: ReplicaManager, leader: int) -> None:
        self.manager = manager
        self.leader = leader
        self.follows: dict[tuple[str, int], Follow] = {}
        self._link: LeaderLink | None = None
        self._added = asyncio.Event()
        self._task: asyncio.Task[None] | None = None

    @property
    def idle(self) -> bool:
        return not self.follows

    def add(self, follow: Follow) -> None:
        self.follows[(follow.topic, follow.partition)] = follow
        self._added.set()
        if self._task is None:
            self._task = asyncio.get_running_loop().create_task(
                self._run(), name=f"replica-fetcher-{self.leader}")

    def remove(self, follow: Follow) -> None:
        key = (follow.topic, follow.partition)
        if self.follows.get(key) is follow:
            del self.follows[key]

    async def stop(self) -> None:
        """End the fetch loop and close the link. A loop that had died of an error is
        logged here (its exception retrieved), never raised to whoever stops it."""
        task, self._task = self._task, None
        if task is not None:
            task.cancel()
            await asyncio.wait({task})
            if not task.cancelled() and task.exception() is not None:
                log.warning("replicating from node %d had stopped: %r", self.leader,
                            task.exception())
        await self._close()

    async def _close(self) -> None:
        if self._link is not None:
            link, self._link = self._link, None
            await link.close()

    # ---- the loop ------------------------------------------------------------------------

    async def _run(self) -> None:
        backoff = BACKOFF_MIN_S
        while not self.manager.stopped:
            if not self.follows:
                self._added.clear()
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(self._added.wait(), 1.0)
                continue
            try:
                link = await self._connected()
                if link is None:
                    await asyncio.sleep(backoff)
                    backoff = min(backoff * 2, BACKOFF_MAX_S)
                    continue
                await self._truncate(link)
                if not await self._fetch(link):
                    await asyncio.sleep(REFUSED_WAIT_S)
                backoff = BACKOFF_MIN_S
            except (OSError, EOFError, ConnectionError, MalformedResponse, TimeoutError,
                    asyncio.IncompleteReadError) as exc:
                log.info("replicating from node %d: %s: %s (again in %.2f s)", self.leader,
                         type(exc).__name__, exc, backoff)
                await self._close()
                await asyncio.sleep(backoff)
                backoff = min(backoff * 2, BACKOFF_MAX_S)
            except KafkaError as exc:  # a storage error here, or a batch that failed checks
                log.warning("replicating from node %d: %s (again in %.2f s)", self.leader,
                            exc.message, backoff)
                await self._close()
                await asyncio.sleep(backoff)
                backoff = min(backoff * 2, BACKOFF_MAX_S)
            except Exception:  # a bug: this leader's partitions must not stop replicating
                log.exception("replicating from node %d failed (again in %.2f s)",
                              self.leader, BACKOFF_MAX_S)
                await self._close()
                await asyncio.sleep(BACKOFF_MAX_S)

    async def _connected(self) -> LeaderLink | None:
        if self._link is not None:
            return self._link
        record = self.manager.cluster.state.broker(self.leader)
        if record is None or not record.kafka_addr:
            return None
        config = self.manager.broker.config
        self._link = await LeaderLink.connect(
            inter_broker(record.kafka_addr), f"eddy-replica-{self.manager.me}",
            config.replica_fetch_response_max_bytes + (1 << 20), CONNECT_TIMEOUT_S,
            InterBrokerSecurity.from_config(config))
        return self._link

    def _timeout_s(self) -> float:
        return self.manager.broker.config.replica_fetch_wait_max_ms / 1000 + 10.0

    # ---- truncation ----------------------------------------------------------------------

    async def _truncate(self, link: LeaderLink) -> None:
        pending = []
        for f in self.follows.values():
            if not f.truncated:
                if f.plog.log_end_offset <= f.plog.log_start_offset:
                    f.truncated = True  # an empty log: nothing to cut
                else:
                    pending.append(f)
        if not pending:
            return
        topics: dict[str, list[Any]] = {}
        for f in pending:
            topics.setdefault(f.topic, []).append(ofle_req.OffsetForLeaderPartition(
                partition=i32(f.partition), current_leader_epoch=i32(f.leader_epoch),
                leader_epoch=i32(f.plog.epochs.latest_epoch())))
        request = ofle_req.OffsetForLeaderEpochRequest(
            replica_id=BrokerId(self.manager.me),
            topics=tuple(ofle_req.OffsetForLeaderTopic(topic=TopicName(t), partitions=tuple(ps))
                         for t, ps in topics.items()))
        response = await link.call(request, self._timeout_s())
        asked = {(f.topic, f.partition): f for f in pending}
        for topic in response.topics:
            for part in topic.partitions:
                follow = self._current(asked, str(topic.topic), int(part.partition))
                if follow is None or follow.truncated:
                    continue
                code = _code(part.error_code)
                if code != ErrorCode.none:
                    log.debug("%s-%d: OffsetForLeaderEpoch: %s", follow.topic,
                              follow.partition, code.name)
                    continue
                self._truncate_one(follow, int(part.leader_epoch), int(part.end_offset))

    def _current(self, asked: dict[tuple[str, int], Follow], topic: str, partition: int
                 ) -> Follow | None:
        """The follow a response's partition answers, if it is still followed as it was
        when asked: an answer for a leader epoch this node no longer follows (it leads the
        partition now, or follows it in a newer epoch) is never applied (KIP-101: a fetch
        or epoch answer of an old epoch must not touch the log)."""
        follow = asked.get((topic, partition))
        if follow is None or follow.stopped or self.follows.get((topic, partition)) is not follow:
            return None
        return follow

    def _truncate_one(self, follow: Follow, epoch: int, end_offset: int) -> None:
        """KIP-279: cut the log where the leader's history and this one's part."""
        plog = follow.plog
        leo = plog.log_end_offset
        target = truncation_offset(
            plog.log_start_offset, leo, plog.high_watermark, plog.epochs.latest_epoch(),
            lambda e: plog.epochs.end_offset_for(e, leo), epoch, end_offset)
        if target < leo:
            log.info("%s-%d: truncating from %d to %d (leader %d: epoch %d ends at %d)",
                     follow.topic, follow.partition, leo, target, self.leader, epoch,
                     end_offset)
            plog.truncate_to(target)
            self.manager.broker.producers.forget(plog)  # rebuilt from the log as it is now
        follow.truncated = True

    # ---- fetching ------------------------------------------------------------------------

    async def _fetch(self, link: LeaderLink) -> bool:
        """One fetch round; False when no partition could be fetched (all refused)."""
        ready = await self._durable([f for f in self.follows.values() if f.truncated])
        # the metadata may have moved on during the flush: a partition no longer followed
        # in that epoch is not fetched (its fetch offset would count at the old leader)
        ready = [f for f in ready if not f.stopped and self.follows.get(
            (f.topic, f.partition)) is f]
        if not ready:
            return False
        config = self.manager.broker.config
        topics: dict[str, list[Any]] = {}
        for f in ready:
            topics.setdefault(f.topic, []).append(fetch_req.FetchPartition(
                partition=i32(f.partition), current_leader_epoch=i32(f.leader_epoch),
                fetch_offset=i64(f.plog.log_end_offset),
                log_start_offset=i64(f.plog.log_start_offset),
                partition_max_bytes=i32(config.replica_fetch_max_bytes)))
        request = fetch_req.FetchRequest(
            replica_id=BrokerId(self.manager.me),
            max_wait=timedelta(milliseconds=config.replica_fetch_wait_max_ms),
            min_bytes=i32(1), max_bytes=i32(config.replica_fetch_response_max_bytes),
            topics=tuple(fetch_req.FetchTopic(topic=TopicName(t), partitions=tuple(ps))
                         for t, ps in topics.items()),
            forgotten_topics_data=())
        response = await link.call(request, self._timeout_s())
        code = _code(response.error_code)
        if code != ErrorCode.none:
            log.info("replica fetch from node %d refused: %s", self.leader, code.name)
            return False
        fetched = False
        asked = {(f.topic, f.partition): f for f in ready}
        for topic in response.responses:
            for part in topic.partitions:
                follow = self._current(asked, str(topic.topic), int(part.partition_index))
                if follow is None or not follow.truncated:
                    continue
                if self._take(follow, part):
                    fetched = True
        return fetched

    async def _durable(self, follows: list[Follow]) -> list[Follow]:
        """The partitions that may fetch now: with write caching off, what was appended is
        fsynced first (group commit), since the next fetch offset tells the leader this
        replica has it. One whose fsync fails (a full disk) sits this round out: its offset
        is not reported until its bytes are on disk."""
        unflushed = [f for f in follows if not f.plog.config.write_caching
                     and f.plog.flushed_offset < f.plog.log_end_offset]
        if not unflushed:
            return follows
        flusher = self.manager.broker.flusher
        outcomes = await asyncio.gather(*(flusher.flush(f.plog) for f in unflushed),
                                        return_exceptions=True)
        failed: set[int] = set()
        for f, outcome in zip(unflushed, outcomes, strict=True):
            if isinstance(outcome, KafkaError):
                log.debug("%s-%d: %s (not fetching until it works)", f.topic, f.partition,
                            outcome.message)
                failed.add(id(f))
            elif isinstance(outcome, BaseException):
                raise outcome
        return [f for f in follows if id(f) not in failed]

    def _take(self, follow: Follow, part: Any) -> bool:
        """Apply one partition's answer; False when it was refused."""
        plog = follow.plog
        code = _code(part.error_code)
        if code == ErrorCode.offset_out_of_range:
            leader_start = int(part.log_start_offset)
            if leader_start > plog.log_end_offset:
                log.info("%s-%d: behind the leader's log start %d: restarting there",
                         follow.topic, follow.partition, leader_start)
                plog.truncate_fully_and_start_at(leader_start)
                self.manager.broker.producers.forget(plog)
            else:
                follow.truncated = False  # ahead of the leader: find where we part
            return False
        if code != ErrorCode.none:
            log.debug("%s-%d: replica fetch: %s", follow.topic, follow.partition, code.name)
            return False
        records = part.records
        leo = plog.log_end_offset
        if records:
            # any batch size the leader holds is taken: the response's size bounds it
            checked = check_replica_batches(records, leo, len(records))
            if checked.headers:
                now = self.manager.broker.clock.now_ms()
                plog.append_replica(records, checked.headers, checked.positions, now)
                for h in checked.headers:
                    if h.partition_leader_epoch > plog.epochs.latest_epoch():
                        plog.epochs.assign(h.partition_leader_epoch, h.base_offset)
                self.manager.broker.producers.replicated(plog, records, checked.headers,
                                                         checked.positions)
        hwm = min(int(part.high_watermark), plog.log_end_offset)
        if hwm > plog.high_watermark:
            plog.high_watermark = hwm
        start = int(part.log_start_offset)
        if start > plog.log_start_offset:
            plog.set_log_start_offset(min(start, plog.high_watermark))
        return True
