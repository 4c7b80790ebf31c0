"""``Controller``: seed 004's BrokerController, run on the ``metadata`` group's leader.

Sans-IO and pure: no clock (every call takes ``now_ms``), no I/O, no randomness of its own
(topic ids come from an injected source). It never changes the state: it returns commands,
which the driver proposes through Raft, and their application changes the state it reads.

Driving it: ``start(now_ms)`` when this node becomes the metadata leader (``on_soft_state``),
``stop()`` when it stops being it; ``tick(now_ms)`` at least every heartbeat interval (or at
``next_wakeup()``); broker heartbeats into ``on_heartbeat``; admin requests into
``create_topic``/``create_partitions``/``delete_topic``/``allocate_producer_ids``. Propose
the commands in the order given (a fence goes before the elections that depend on it).

A command is not produced again while the same one is in flight (``command_retry_ms``),
unless the state moved on; a command dropped by Raft is produced again by the periodic
partition reconcile.

Stall-aware: every call that takes ``now_ms`` notes that the controller runs then. A gap
since the previous one above ``stall_limit_ms`` was a stall of this process (starved of
CPU, stopped, its clock jumped), not the brokers' silence: their sessions get the gap back
(``BrokerSessions.pause``) before anything else looks at them, so a heartbeat that waited
meanwhile is heard before any broker is fenced.
"""

from __future__ import annotations

import os
from collections import deque
from collections.abc import Callable, Iterable, Mapping, Sequence

from eddy.cluster.controller import elections, leaders, reassign
from eddy.cluster.controller.config import ControllerConfig, ControllerError
from eddy.cluster.controller.registry import BrokerSessions
from eddy.cluster.controller.tasks import StorageGc, TaskSchedule
from eddy.cluster.controller.topics import (
    plan_create_partitions,
    plan_create_topic,
    plan_delete_topic,
)
from eddy.cluster.placement import HashRing
from eddy.metadata.brokers import MAX_PRODUCER_ID_BLOCK
from eddy.metadata.commands import (
    AllocateProducerIds,
    ChangePartitionLeader,
    CreatePartitions,
    CreateTopic,
    DeleteTopic,
    FenceBroker,
    MetadataCommand,
    UnfenceBroker,
)
from eddy.metadata.records import BrokerRecord
from eddy.metadata.state import MetadataState
from eddy.protocol.errors import ErrorCode

__all__ = ["Controller", "TaskHook"]

#: a task's hook: given ``now_ms``, the commands to propose (often none)
TaskHook = Callable[[int], Sequence[MetadataCommand]]

PARTITION_RECONCILE = "partition-reconcile"
LEADER_REBALANCE = "leader-rebalance"
STORAGE_GC = "storage-gc"
OFFSET_EXPIRY = "offset-expiry"
PIPELINE_SCHEDULE = "pipeline-schedule"
#: the most hook failures remembered
MAX_FAILURES = 64
UNCLEAN = "unclean.leader.election.enable"


def _random_topic_id() -> bytes:
    return os.urandom(16)


class Controller:
    def __init__(self, state: MetadataState, config: ControllerConfig, ring: HashRing,
                 id_source: Callable[[], bytes] = _random_topic_id) -> None:
        self.state = state
        self.config = config
        self.ring = ring
        self.sessions = BrokerSessions(config.session_timeout_ms, config.probe_after_ms,
                                       local=config.local_broker)
        self.schedule = TaskSchedule()
        self.gc = StorageGc(config.storage_gc_grace_ms)
        self.failures: deque[tuple[str, str]] = deque(maxlen=MAX_FAILURES)
        self._id_source = id_source
        self._hooks: dict[str, list[TaskHook]] = {}
        self._gc_orders: dict[int, list[bytes]] = {}
        self._pending: dict[tuple[object, ...], int] = {}
        self._last_live: frozenset[int] | None = None
        self._last_stopping: frozenset[int] = frozenset()
        #: brokers in controlled shutdown: node id -> the epoch that asked
        self._stopping: dict[int, int] = {}
        #: those of them a probe found gone (not asked): a heartbeat brings them back
        self._gone: dict[int, int] = {}
        #: the last time this controller ran (a call with ``now_ms``)
        self._ran = 0
        #: stalls seen (gaps above the limit) and the last one's length, in ms (for logs)
        self.stalls = 0
        self.last_stall_ms = 0
        self.active = False
        builtin = [
            (PARTITION_RECONCILE, config.partition_reconcile_interval_ms),
            (STORAGE_GC, config.storage_gc_interval_ms),
            (OFFSET_EXPIRY, config.offsets_retention_check_interval_ms),
            (PIPELINE_SCHEDULE, config.pipeline_schedule_interval_ms),
        ]
        if config.auto_leader_rebalance:
            builtin.append((LEADER_REBALANCE, config.leader_imbalance_check_interval_ms))
        for name, interval in builtin:
            self.schedule.add(name, interval, 0)

    # -- leadership of the metadata group ----------------------------------------------------
    def start(self, now_ms: int, suspects: Iterable[int] = ()) -> None:
        """This node became the metadata leader. Every broker gets a fresh session (a grace
        of one session timeout), ``suspects`` (the previous leader) a short one."""
        self.sessions.start(self.state, now_ms, suspects, self.config.suspect_grace_ms)
        self.schedule.restart(now_ms)
        self.schedule.due_by(LEADER_REBALANCE, now_ms + self.config.leader_rebalance_soon_ms)
        self._ran = now_ms
        self._pending.clear()
        self._gc_orders.clear()
        self._last_live = None
        self._stopping.clear()
        self._gone.clear()
        self.active = True

    def stop(self) -> None:
        """This node is no longer the metadata leader."""
        self.active = False
        self._pending.clear()
        self._gc_orders.clear()

    def _require_active(self, now_ms: int | None = None) -> None:
        """Refuse unless active; with ``now_ms``, note that the controller runs then."""
        if not self.active:
            raise ControllerError(ErrorCode.not_controller, "this node is not the controller")
        if now_ms is not None:
            self._runs(now_ms)

    def _runs(self, now_ms: int) -> None:
        gap = now_ms - self._ran
        if gap > self.config.stall_limit_ms:
            self.sessions.pause(self._ran, gap)
            self.stalls += 1
            self.last_stall_ms = gap
        self._ran = max(self._ran, now_ms)

    # -- broker sessions ---------------------------------------------------------------------
    def _heard_from(self, node_id: int, epoch: int, now_ms: int) -> BrokerRecord:
        """``node_id`` in ``epoch`` spoke (a heartbeat): its session is renewed; a broker
        not registered, or in another epoch, is refused."""
        self._require_active(now_ms)
        broker = self.state.broker(node_id)
        if broker is None:
            raise ControllerError(ErrorCode.broker_id_not_registered,
                                  f"node_id: broker {node_id} is not registered")
        if epoch != broker.epoch:
            raise ControllerError(
                ErrorCode.stale_broker_epoch,
                f"epoch: broker {node_id} epoch {epoch} is not its current {broker.epoch}",
            )
        self.sessions.heartbeat(node_id, epoch, now_ms)
        return broker

    def on_heartbeat(self, node_id: int, epoch: int, now_ms: int) -> list[MetadataCommand]:
        """A broker's heartbeat: renews its session; a fenced broker is unfenced and the
        partitions it can lead again (offline ones it is an ISR member of) get it."""
        broker = self._heard_from(node_id, epoch, now_ms)
        if self._gone.get(node_id) == epoch:
            # a probe found nothing listening, yet it speaks (its listener is back, or a
            # firewall refused the probe): it may lead and join ISRs again
            del self._gone[node_id]
            self._stopping.pop(node_id, None)
            return self._converge(now_ms, rescan=True)
        if not broker.fenced:
            return []
        return self._converge(now_ms, rescan=False)

    def to_probe(self, now_ms: int) -> list[BrokerRecord]:
        """Brokers silent long enough that the driver should try their Kafka listener (see
        ``BrokerSessions``); a refused connection goes to ``on_unreachable``."""
        self._require_active(now_ms)
        stopping = self.stopping()
        return [b for b in self.sessions.to_probe(self.state, now_ms)
                if b.node_id not in stopping]

    def on_unreachable(self, node_id: int, epoch: int, now_ms: int) -> list[MetadataCommand]:
        """Nothing listens where ``node_id`` (in ``epoch``) took Kafka connections: it is
        handled as a broker in controlled shutdown, at once: the returned changes move what
        it leads to other live ISR members and take it out of every ISR. It is fenced when
        its session ends, and not sooner than a session timeout from now. Moving leaders
        first and fencing well after matters to clients: librdkafka, told in one Metadata
        answer that a partition moved and that its old broker is gone, drops the move along
        with the broker's handle and finds the new leader only at its next query, a second
        later; its leader queries come at most a second apart."""
        self._require_active(now_ms)
        broker = self.state.broker(node_id)
        if broker is None or broker.epoch != epoch or broker.fenced \
                or self._stopping.get(node_id) == epoch:
            return []
        self._stopping[node_id] = self._gone[node_id] = epoch
        self.sessions.hold(node_id, epoch, now_ms + self.config.session_timeout_ms)
        return self._converge(now_ms, rescan=False)

    def live_brokers(self, now_ms: int) -> frozenset[int]:
        """The brokers this controller keeps unfenced at ``now_ms``."""
        return self.sessions.live_set(self.state, now_ms)

    def tick(self, now_ms: int) -> list[MetadataCommand]:
        """Expire sessions (fence, then elect for what the fenced brokers led), then run the
        tasks that are due."""
        self._require_active(now_ms)
        for key in [k for k, t in self._pending.items()
                    if now_ms - t >= self.config.command_retry_ms]:
            del self._pending[key]
        due = self.schedule.due(now_ms)
        out = self._converge(now_ms, rescan=PARTITION_RECONCILE in due)
        for done in reassign.completions(self.state):
            part = self.state.partition(done.topic, done.partition)
            epoch = -1 if part is None else part.partition_epoch
            self._emit(out, ("reassigned", done.topic, done.partition, epoch, done.target),
                       done, now_ms)
        for name in due:
            if name == LEADER_REBALANCE:
                # partitions this tick already changes are left for the next check
                touched = {(c.topic, c.partition) for c in out
                           if isinstance(c, ChangePartitionLeader)}
                out.extend(c for c in self.rebalance_preferred_leaders(now_ms)
                           if isinstance(c, ChangePartitionLeader)
                           and (c.topic, c.partition) not in touched)
            elif name == STORAGE_GC:
                self._gc_orders = self.gc.plan(self.state, now_ms)
            for hook in self._hooks.get(name, ()):
                try:
                    out.extend(hook(now_ms))
                except Exception as exc:  # a faulty hook must not stop fencing
                    self.failures.append((name, repr(exc)))
        return out

    def _converge(self, now_ms: int, rescan: bool) -> list[MetadataCommand]:
        live = self.sessions.live_set(self.state, now_ms)
        stopping = self.stopping()
        out: list[MetadataCommand] = []
        for broker in self.state.all_brokers():
            fence_key = ("fence", broker.node_id, broker.epoch)
            unfence_key = ("unfence", broker.node_id, broker.epoch)
            self._pending.pop(fence_key if broker.fenced else unfence_key, None)
            if broker.fenced and broker.node_id in live and broker.node_id not in stopping:
                self._emit(out, unfence_key, UnfenceBroker(broker.node_id, broker.epoch),
                           now_ms)
            elif not broker.fenced and broker.node_id not in live:
                self._emit(out, fence_key, FenceBroker(broker.node_id, broker.epoch), now_ms)
        if self._last_live is not None and live - self._last_live:
            # a broker is back: the leaders it prefers may return once it is in their ISRs
            self.schedule.due_by(LEADER_REBALANCE, now_ms + self.config.leader_rebalance_soon_ms)
        if rescan or live != self._last_live or stopping != self._last_stopping:
            for change in leaders.reconcile(self.state, live, self._unclean, stopping):
                self._emit_partition(out, change, now_ms)
        self._last_live, self._last_stopping = live, stopping
        return out

    # -- controlled shutdown and ElectLeaders (see elections.py) ------------------------------
    def stopping(self) -> frozenset[int]:
        """The brokers in controlled shutdown (a broker that registered again since, or is
        gone, is forgotten)."""
        for node_id, epoch in list(self._stopping.items()):
            broker = self.state.broker(node_id)
            if broker is None or broker.epoch != epoch:
                del self._stopping[node_id]
                self._gone.pop(node_id, None)
        return frozenset(self._stopping)

    def in_controlled_shutdown(self, node_id: int) -> bool:
        """Whether ``node_id`` is shutting down: it may not join an ISR or be elected."""
        return node_id in self.stopping()

    def check_isr_joiners(self, topic: str, partition: int, isr: Iterable[int]) -> None:
        """An ISR change (the leader's AlterPartition) may not add a broker in controlled
        shutdown: INELIGIBLE_REPLICA, as Kafka's controller answers (KIP-841)."""
        part = self.state.partition(topic, partition)
        current = () if part is None else part.isr
        stopping = self.stopping()
        refused = sorted(n for n in isr if n not in current and n in stopping)
        if refused:
            raise ControllerError(
                ErrorCode.ineligible_replica,
                f"{topic}-{partition}: the new ISR names brokers in controlled shutdown "
                f"{refused}")

    def controlled_shutdown(self, node_id: int, epoch: int,
                            now_ms: int) -> list[ChangePartitionLeader]:
        """Broker ``node_id`` (in ``epoch``) is stopping: from now on it is never elected,
        unfenced or placed, and the returned changes take it out of every ISR and move what
        it leads to other live ISR members (a partition it is the only live ISR member of
        stays with it). It counts as a heartbeat. Asking again gives what is left to do."""
        self._heard_from(node_id, epoch, now_ms)
        self._stopping[node_id] = epoch
        self._gone.pop(node_id, None)  # asked: a stop, not a probe's guess
        live = frozenset(n for n in self.sessions.live_set(self.state, now_ms)
                         if self.state.is_live(n))
        return elections.plan_shutdown(self.state, node_id, live, self.stopping(),
                                       self._unclean)

    def elect_leaders(self, election_type: int,
                      targets: Sequence[tuple[str, Sequence[int]]] | None, now_ms: int
                      ) -> list[tuple[str, list[elections.ElectionOutcome]]]:
        """ElectLeaders: each partition's outcome (with the command to propose for it).
        Raises ``ControllerError`` INVALID_REQUEST for an unknown election type."""
        self._require_active(now_ms)
        if election_type not in (elections.PREFERRED, elections.UNCLEAN):
            raise ControllerError(ErrorCode.invalid_request,
                                  f"Unknown election type {election_type}")
        stopping = self.stopping()
        live = frozenset(n for n in self.sessions.live_set(self.state, now_ms)
                         if self.state.is_live(n) and n not in stopping)
        return elections.plan_elections(self.state, live, election_type, targets)

    def alter_reassignments(self, asked: reassign.Asked
                            ) -> list[tuple[str, list[reassign.ReassignOutcome]]]:
        """AlterPartitionReassignments: each partition's outcome (with the command to
        propose for it); completing them is the tick's work."""
        self._require_active()
        return reassign.plan_reassignments(self.state, asked)

    def _emit(self, out: list[MetadataCommand], key: tuple[object, ...],
              command: MetadataCommand, now_ms: int) -> None:
        if key in self._pending:
            return
        self._pending[key] = now_ms
        out.append(command)

    def _emit_partition(self, out: list[MetadataCommand], change: ChangePartitionLeader,
                        now_ms: int) -> None:
        part = self.state.partition(change.topic, change.partition)
        epoch = -1 if part is None else part.partition_epoch
        key = ("partition", change.topic, change.partition, epoch, change.leader, change.isr)
        self._emit(out, key, change, now_ms)

    def _unclean(self, topic: str) -> bool:
        static = {UNCLEAN: "true" if self.config.unclean_leader_election else "false"}
        resolved = self.state.topic_config(topic, None, static)
        if resolved is None:
            return False
        return bool(resolved.value(UNCLEAN))

    def rebalance_preferred_leaders(self, now_ms: int) -> list[MetadataCommand]:
        """Move leadership back to preferred leaders (live and in the ISR) of brokers whose
        imbalance is above ``leader_imbalance_per_broker_percentage`` (Kafka's
        auto.leader.rebalance; also run on its schedule when that is enabled)."""
        self._require_active(now_ms)
        live = self.sessions.live_set(self.state, now_ms)
        stopping = self.stopping()
        live = frozenset(n for n in live if self.state.is_live(n) and n not in stopping)
        out: list[MetadataCommand] = []
        for change in leaders.preferred_leader_moves(
            self.state, live, self.config.leader_imbalance_per_broker_percentage
        ):
            self._emit_partition(out, change, now_ms)
        return out

    # -- topics ------------------------------------------------------------------------------
    def placement_nodes(self, now_ms: int) -> dict[int, str | None]:
        """Unfenced brokers whose session is alive (and not shutting down), and their
        racks."""
        live = self.sessions.live_set(self.state, now_ms) - self.stopping()
        return {n: rack for n, rack in self.state.placement_nodes().items() if n in live}

    def create_topic(self, name: str, partitions: int | None, replication_factor: int | None,
                     configs: Mapping[str, str] | None, now_ms: int) -> CreateTopic:
        """CreateTopics for one topic (``None`` or -1: the configured default). Raises
        ``ControllerError`` with Kafka's code (INVALID_REPLICATION_FACTOR when it is above
        the live brokers, TOPIC_ALREADY_EXISTS, INVALID_PARTITIONS, INVALID_CONFIG...)."""
        self._require_active(now_ms)
        return plan_create_topic(
            self.state, self.ring, self.placement_nodes(now_ms), name, partitions,
            replication_factor, configs or {},
            (self.config.default_partitions, self.config.default_replication_factor),
            self._id_source,
        )

    def create_partitions(self, name: str, total: int, now_ms: int) -> CreatePartitions:
        self._require_active(now_ms)
        return plan_create_partitions(self.state, self.ring, self.placement_nodes(now_ms),
                                      name, total)

    def delete_topic(self, name: str, topic_id: bytes | None = None) -> DeleteTopic:
        self._require_active()
        return plan_delete_topic(self.state, name, topic_id)

    # -- producer ids ------------------------------------------------------------------------
    def allocate_producer_ids(self, node_id: int, count: int | None = None
                              ) -> AllocateProducerIds:
        """A block of producer ids for ``node_id`` (default ``producer_id_block_size``); the
        applied command's result is the block's first id."""
        self._require_active()
        if node_id not in self.state.brokers:
            raise ControllerError(ErrorCode.broker_id_not_registered,
                                  f"node_id: broker {node_id} is not registered")
        size = self.config.producer_id_block_size if count is None else count
        if not 1 <= size <= MAX_PRODUCER_ID_BLOCK:
            raise ControllerError(ErrorCode.invalid_request,
                                  f"count: {size} is not between 1 and {MAX_PRODUCER_ID_BLOCK}")
        return AllocateProducerIds(node_id, size)

    # -- background tasks --------------------------------------------------------------------
    def add_task(self, name: str, interval_ms: int, now_ms: int) -> None:
        """A new named task (its hooks are added with ``add_hook``)."""
        self.schedule.add(name, interval_ms, now_ms)

    def add_hook(self, task: str, hook: TaskHook) -> None:
        """Run ``hook`` whenever ``task`` is due: ``offset-expiry`` (the offsets group's
        expiry), ``pipeline-schedule`` (the connect work's pipeline scheduler), or a task
        added with ``add_task``. What it returns is proposed; if it raises, the failure is
        kept in ``failures`` and the other work goes on."""
        if task not in self.schedule.names():
            raise ValueError(f"no task named {task!r}")
        self._hooks.setdefault(task, []).append(hook)

    def report_hosted(self, node_id: int, topic_ids: Iterable[bytes]) -> None:
        """A node's report of the topic ids it holds data for (storage GC's input)."""
        self.gc.report(self.state, node_id, topic_ids)

    def take_gc_orders(self) -> dict[int, list[bytes]]:
        """Per node, the topic ids whose data it must delete (from the last ``storage-gc``
        run); the orders are handed out once."""
        orders, self._gc_orders = self._gc_orders, {}
        return orders

    def next_wakeup(self, now_ms: int) -> int | None:
        """The earliest time after ``now_ms`` something is due: a session expiry, a probe
        or a task."""
        times = [t for t in (self.sessions.next_expiry(now_ms), self.schedule.next_due(),
                             self.sessions.next_probe(self.state, now_ms)) if t is not None]
        return min(times, default=None)
