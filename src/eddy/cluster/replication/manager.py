"""``ReplicaManager``: a clustered broker's side of ISR replication (asyncio adapter).

The metadata says, for every partition this node holds a replica of, who leads it in which
epoch. ``apply`` (called by ``ReplicaSync`` after each metadata change) makes this node:

- **leader**: a ``LeaderState`` tracks the followers' fetches; the high watermark moves as
  they report their log end offsets (and at once on an append when this node is the only
  ISR member); acks=all produces wait here (``wait_replicated``) until the HWM passes their
  last offset; the ISR is shrunk and grown through the controller (AlterIsrRequest) by a
  tick every ``ISR_CHECK_S`` and at once when a follower catches up; each committed ISR
  change that comes back (from this leader's AlterIsr or the controller's fencing) counts in
  the broker's metrics (``eddy_isr_shrinks_total``/``eddy_isr_expands_total``);
- **follower**: the partition is fetched by the ``Fetcher`` of its leader's node (one per
  leader node, Kafka's replica fetcher thread), which first truncates the log to what the
  leader has (OffsetForLeaderEpoch), then appends what it fetches;
- neither (no leader): nothing moves until the metadata names one.

Every acks=all waiter is woken by any change to its partition (HWM, ISR, leadership) and
checks again; a waiter whose partition this node stopped leading gets
NOT_LEADER_OR_FOLLOWER, one whose ISR shrank below ``min.insync.replicas`` meanwhile
NOT_ENOUGH_REPLICAS_AFTER_APPEND, one past its deadline REQUEST_TIMED_OUT.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from dataclasses import dataclass
from typing import TYPE_CHECKING

from eddy.cluster.controller.client import ControllerUnavailable
from eddy.cluster.controller.rpc import AlterIsrRequest, error_of
from eddy.cluster.replication.fetcher import Fetcher, Follow
from eddy.cluster.replication.leader import LeaderState
from eddy.log.partition import PartitionLog
from eddy.metadata.records import NO_LEADER, PartitionRecord
from eddy.protocol.errors import ErrorCode

if TYPE_CHECKING:
    from eddy.broker.broker import Broker
    from eddy.cluster.service import ClusterService

log = logging.getLogger(__name__)

Key = tuple[str, int]

#: how often leaders check their followers' lag (and retry a refused ISR change)
ISR_CHECK_S = 0.25
ALTER_ISR_TIMEOUT_S = 5.0
#: replica.high.watermark.checkpoint.interval.ms (Kafka's default)
HWM_CHECKPOINT_MS = 5000
#: an ISR change the controller refused is not asked again for this long
REFUSED_BACKOFF_S = 1.0


@dataclass(slots=True)
class Led:
    plog: PartitionLog
    state: LeaderState


class ReplicaManager:
    def __init__(self, broker: Broker, cluster: ClusterService) -> None:
        self.broker = broker
        self.cluster = cluster
        self.me = broker.node_id
        self.led: dict[Key, Led] = {}
        self.following: dict[Key, Follow] = {}
        self.fetchers: dict[int, Fetcher] = {}
        self._waiters: dict[Key, set[asyncio.Future[None]]] = {}
        self._proposing: set[Key] = set()
        self._refused: dict[Key, tuple[tuple[int, ...], ErrorCode]] = {}
        self._changes = [0, 0]  # in the last apply: partitions newly led, newly followed
        self._tasks: set[asyncio.Task[None]] = set()
        self._ticker: asyncio.Task[None] | None = None
        #: the HWM checkpoint being written (off the loop), if one is
        self._checkpointing: asyncio.Task[None] | None = None
        self.stopped = False

    # ---- roles from the metadata ---------------------------------------------------------

    def apply(self, hosted: dict[Key, tuple[PartitionLog, PartitionRecord]]) -> None:
        """Every partition this node is a replica of, with its local log and its record."""
        now = self.broker.clock.now_ms()
        self._changes = [0, 0]
        for key, (plog, part) in hosted.items():
            plog.sole_replica = part.replicas == (self.me,)
            if plog.sole_replica:
                plog.high_watermark = plog.log_end_offset  # no one else to wait for
            if part.leader == self.me:
                self._lead(key, plog, part, now)
            elif part.leader == NO_LEADER:
                self._drop_leading(key)
                self._stop_following(key)
            else:
                self._drop_leading(key)
                self._follow(key, plog, part)
        for key in [k for k in self.led if k not in hosted]:
            self._drop_leading(key)
        for key in [k for k in self.following if k not in hosted]:
            self._stop_following(key)
        if any(self._changes):
            log.info("now leading %d more partitions and following %d more (%d led, %d "
                     "followed)", self._changes[0], self._changes[1], len(self.led),
                     len(self.following))
        if self._ticker is None and not self.stopped:
            self._ticker = asyncio.get_running_loop().create_task(self._tick_loop())

    def _lead(self, key: Key, plog: PartitionLog, part: PartitionRecord, now: int) -> None:
        led = self.led.get(key)
        incarnations = self._incarnations(part.replicas)
        if led is not None and led.plog is plog and led.state.leader_epoch == part.leader_epoch:
            before = led.state.isr
            led.state.update(part.replicas, part.isr, part.partition_epoch, now, incarnations)
            if part.isr != before:  # committed: this leader's AlterIsr, or the controller's
                self.broker.metrics.counts.isr_changed(key[0], before, part.isr)
        else:
            self._stop_following(key)
            if plog.log_end_offset > plog.log_start_offset:
                # where this epoch starts (an empty log's first append records it: no
                # checkpoint write per partition when thousands are created at once)
                plog.epochs.assign(part.leader_epoch, plog.log_end_offset)
            led = Led(plog, LeaderState(self.me, part.replicas, part.isr, part.leader_epoch,
                                        part.partition_epoch, plog.log_end_offset, now,
                                        incarnations))
            self.led[key] = led
            self._changes[0] += 1
            log.debug("%s-%d: leading in epoch %d (ISR %s, HWM %d, LEO %d)", key[0], key[1],
                      part.leader_epoch, list(part.isr), plog.high_watermark,
                      plog.log_end_offset)
        self._advance(key, led)
        self._wake(key)

    def _incarnations(self, replicas: tuple[int, ...]) -> dict[int, int]:
        state = self.cluster.state
        out: dict[int, int] = {}
        for node in replicas:
            record = state.broker(node)
            if record is not None:
                out[node] = record.epoch
        return out

    def _drop_leading(self, key: Key) -> None:
        if self.led.pop(key, None) is not None:
            self._wake(key)

    def _follow(self, key: Key, plog: PartitionLog, part: PartitionRecord) -> None:
        current = self.following.get(key)
        if current is not None and current.plog is plog and current.leader == part.leader \
                and current.leader_epoch == part.leader_epoch:
            return
        self._stop_following(key)
        follow = Follow(key[0], key[1], plog, part.leader, part.leader_epoch)
        self.following[key] = follow
        fetcher = self.fetchers.get(part.leader)
        if fetcher is None:
            fetcher = self.fetchers[part.leader] = Fetcher(self, part.leader)
        fetcher.add(follow)
        self._changes[1] += 1
        log.debug("%s-%d: following node %d in epoch %d (LEO %d)", key[0], key[1],
                  part.leader, part.leader_epoch, plog.log_end_offset)

    def _stop_following(self, key: Key) -> None:
        follow = self.following.pop(key, None)
        if follow is None:
            return
        follow.stopped = True
        fetcher = self.fetchers.get(follow.leader)
        if fetcher is not None:
            fetcher.remove(follow)
            if fetcher.idle:
                del self.fetchers[follow.leader]
                self._spawn(fetcher.stop(), "stop-fetcher")

    # ---- leader side ---------------------------------------------------------------------

    def leads(self, plog: PartitionLog) -> LeaderState | None:
        led = self.led.get((plog.topic, plog.partition))
        return led.state if led is not None and led.plog is plog else None

    def isr_size(self, plog: PartitionLog) -> int:
        """The ISR an acks=all produce counts against ``min.insync.replicas`` (0: this node
        does not lead the partition)."""
        state = self.leads(plog)
        return 0 if state is None else len(state.isr)

    def leader_appended(self, plog: PartitionLog) -> None:
        if plog.sole_replica:
            return  # the append moved its HWM itself
        key = (plog.topic, plog.partition)
        led = self.led.get(key)
        if led is not None and led.plog is plog:
            self._advance(key, led)

    def follower_fetched(self, plog: PartitionLog, node: int, fetch_offset: int,
                         leader_epoch: int) -> ErrorCode:
        """A follower's Fetch at ``fetch_offset`` (its log end) in ``leader_epoch`` (the
        epoch it follows): NONE, or why it is refused (this node does not lead the
        partition, ``node`` is not one of its replicas, or the follower is in another
        epoch). Only a fetch in this leader's own epoch counts: an offset reported for
        another epoch says nothing of what the follower holds of this one."""
        key = (plog.topic, plog.partition)
        led = self.led.get(key)
        if led is None or led.plog is not plog:
            return ErrorCode.not_leader_or_follower
        if leader_epoch != led.state.leader_epoch:
            return (ErrorCode.fenced_leader_epoch if leader_epoch < led.state.leader_epoch
                    else ErrorCode.unknown_leader_epoch)
        if fetch_offset > plog.log_end_offset or fetch_offset < plog.log_start_offset:
            return ErrorCode.none  # the read answers OFFSET_OUT_OF_RANGE; nothing recorded
        now = self.broker.clock.now_ms()
        if not led.state.follower_fetched(node, fetch_offset, plog.log_end_offset, now):
            return ErrorCode.not_leader_or_follower
        self._advance(key, led)
        if node not in led.state.isr and fetch_offset >= plog.high_watermark:
            self._check_isr(key, led, now)  # caught up: back into the ISR without waiting
        return ErrorCode.none

    def _advance(self, key: Key, led: Led) -> None:
        plog = led.plog
        hwm = led.state.high_watermark(plog.log_end_offset, plog.high_watermark)
        if hwm != plog.high_watermark:
            plog.high_watermark = hwm
            self.broker.notifier.notify(key)  # consumers long-polling see it now
            self._wake(key)

    async def wait_replicated(self, plog: PartitionLog, end_offset: int, min_isr: int,
                              timeout_s: float) -> ErrorCode:
        """Wait until the HWM reaches ``end_offset`` (exclusive end of a produce)."""
        key = (plog.topic, plog.partition)
        loop = asyncio.get_running_loop()
        deadline = loop.time() + max(timeout_s, 0.0)
        for _ in range(100_000):  # bounded: every round waits for a change or the deadline
            state = self.leads(plog)
            if state is None:
                return ErrorCode.not_leader_or_follower
            if plog.high_watermark >= end_offset:
                if len(state.isr) < min_isr:
                    return ErrorCode.not_enough_replicas_after_append
                return ErrorCode.none
            remaining = deadline - loop.time()
            if remaining <= 0:
                return ErrorCode.request_timed_out
            fut: asyncio.Future[None] = loop.create_future()
            self._waiters.setdefault(key, set()).add(fut)
            try:
                await asyncio.wait_for(fut, remaining)
            except TimeoutError:
                pass
            finally:
                waiting = self._waiters.get(key)
                if waiting is not None:
                    waiting.discard(fut)
                    if not waiting:
                        del self._waiters[key]
        return ErrorCode.request_timed_out

    def _wake(self, key: Key) -> None:
        for fut in self._waiters.pop(key, ()):
            if not fut.done():
                fut.set_result(None)

    # ---- ISR changes ---------------------------------------------------------------------

    def _replicated_logs(self) -> list[PartitionLog]:
        """The partitions whose HWM is checkpointed (see ``HIGH_WATERMARK_FILE``): a
        partition with no other replica needs none (its HWM is its log end)."""
        return ([led.plog for led in self.led.values() if not led.plog.sole_replica]
                + [follow.plog for follow in self.following.values()])

    def checkpoint(self) -> None:
        """Every replicated partition's HWM to its file, now (on the way out)."""
        for plog in self._replicated_logs():
            plog.checkpoint_high_watermark()

    async def checkpoint_off_loop(self) -> int:
        """The HWMs that moved since their last checkpoint, written in an executor thread
        (each an fsync: hundreds of partitions would hold the event loop, and the Raft
        heartbeats with it, for a long step); none written when none moved. Returns how
        many were written."""
        due = [(plog, value) for plog in self._replicated_logs()
               if (value := plog.high_watermark_to_checkpoint()) is not None]
        if not due:
            return 0
        written = await asyncio.get_running_loop().run_in_executor(
            None, lambda: [plog.write_high_watermark(value) for plog, value in due])
        for (plog, value), ok in zip(due, written, strict=True):
            if ok:
                plog.high_watermark_checkpointed(value)
        return sum(written)

    async def _checkpoint(self) -> None:
        try:
            await self.checkpoint_off_loop()
        except Exception:  # the executor gone at shutdown, a bug: the next one retries
            log.exception("high watermark checkpoint failed")

    async def _tick_loop(self) -> None:
        last_checkpoint = self.broker.clock.now_ms()
        while not self.stopped:
            await asyncio.sleep(ISR_CHECK_S)
            now = self.broker.clock.now_ms()
            if now - last_checkpoint >= HWM_CHECKPOINT_MS and (
                    self._checkpointing is None or self._checkpointing.done()):
                last_checkpoint = now
                self._checkpointing = asyncio.get_running_loop().create_task(
                    self._checkpoint(), name="hwm-checkpoint")
            for key, led in list(self.led.items()):
                try:
                    self._check_isr(key, led, now)
                except Exception:  # one partition's trouble must not stop the others'
                    log.exception("%s-%d: ISR check failed", key[0], key[1])

    def _check_isr(self, key: Key, led: Led, now: int) -> None:
        if key in self._proposing:
            return
        config = self.broker.config
        proposal = led.state.isr_change(now, led.plog.log_end_offset, led.plog.high_watermark,
                                        config.replica_lag_time_max_ms,
                                        config.replica_lag_max_messages,
                                        self.cluster.state.is_live)
        if proposal is None:
            return
        self._proposing.add(key)
        self._spawn(self._alter_isr(key, led, proposal), "alter-isr")

    async def _alter_isr(self, key: Key, led: Led, isr: tuple[int, ...]) -> None:
        state = led.state
        request = AlterIsrRequest(self.me, key[0], key[1], state.leader_epoch,
                                  state.partition_epoch, isr)
        try:
            answer = await self.cluster.ask(request, ALTER_ISR_TIMEOUT_S)
            code = error_of(answer)
            if code != ErrorCode.none:
                repeated = self._refused.get(key) == (isr, code)
                log.log(logging.DEBUG if repeated else logging.INFO,
                        "%s-%d: ISR %s refused: %s %s", key[0], key[1], list(isr), code.name,
                        answer.message or "")
                self._refused[key] = (isr, code)
                # the refused members leave the maximal ISR now (they would hold the HWM,
                # and acks=all with it); no new proposal for this partition meanwhile
                state.proposal_failed()
                await asyncio.sleep(REFUSED_BACKOFF_S)  # the metadata may change meanwhile
            else:
                self._refused.pop(key, None)
                log.info("%s-%d: ISR %s -> %s", key[0], key[1], list(state.isr), list(isr))
        except ControllerUnavailable as exc:
            log.warning("%s-%d: ISR change to %s not made: %s", key[0], key[1], list(isr), exc)
            state.proposal_failed()
        finally:
            self._proposing.discard(key)

    # ---- lifecycle -----------------------------------------------------------------------

    def _spawn(self, coro: object, name: str) -> None:
        task: asyncio.Task[None] = asyncio.get_running_loop().create_task(
            coro, name=name)  # type: ignore[arg-type]
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def stop(self) -> None:
        self.stopped = True
        if self._checkpointing is not None:  # its thread writes the same files
            await asyncio.wait({self._checkpointing})
        self.checkpoint()
        if self._ticker is not None:
            self._ticker.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._ticker
        for fetcher in list(self.fetchers.values()):
            await fetcher.stop()
        self.fetchers.clear()
        for key in list(self.led):
            self._drop_leading(key)
        for task in list(self._tasks):
            task.cancel()
        if self._tasks:
            await asyncio.wait(list(self._tasks), timeout=2.0)
