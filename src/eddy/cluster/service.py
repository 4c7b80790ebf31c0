"""``ClusterService``: a node's part in the metadata service (seed 004).

Every node runs the ``metadata`` Raft group (multi-Raft, over the mesh) with the metadata
state as its state machine: the voters of ``controller.quorum.voters`` as voters (and the
controller runs on whichever leads it), every other broker as a learner the controller
adds when it registers, so each node holds a replica of the state. On a broker it also runs
the agent that registers and heartbeats, and offers the Kafka handlers what they need: the
replicated state, the controller's id, and requests to the controller.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Coroutine, Iterable
from typing import Any

from eddy.clock import Clock
from eddy.cluster.controller import ControllerConfig
from eddy.cluster.controller.client import (
    BrokerAgent,
    ControllerClient,
    ControllerUnavailable,
)
from eddy.cluster.controller.elections import still_led
from eddy.cluster.controller.rpc import (
    AllocateProducerIdsRequest,
    ControllerReply,
    ControllerRequest,
    ImportOffsetsRequest,
    error_of,
    reply,
)
from eddy.cluster.controller.service import ControllerService
from eddy.cluster.leader_watch import RaftLeaderWatch
from eddy.cluster.machine import MetadataMachine
from eddy.cluster.multiraft import MultiRaft
from eddy.cluster.offsets import OFFSETS_GROUP, OffsetsMachine, encode_entry
from eddy.cluster.raft.admin import ClusterRaftAdmin
from eddy.cluster.raft.driver import RaftDriver, RaftStatus, WriteTimeout
from eddy.cluster.raft.handover import hand_over_raft
from eddy.cluster.raft.ready import ProposalDropped, RaftConfig, SoftState
from eddy.cluster.raft.transport import MeshRaftTransport
from eddy.cluster.settings import ClusterNode
from eddy.cluster.shutdown import to_move
from eddy.mesh.frames import TAG_CONTROLLER
from eddy.mesh.service import MeshService
from eddy.metadata import MetadataState
from eddy.metadata.endpoints import inter_broker
from eddy.protocol.errors import ErrorCode, KafkaError

log = logging.getLogger(__name__)

METADATA_GROUP = "metadata"
#: how long a request needing this broker's registration (producer ids) waits for it
REGISTRATION_WAIT_S = 10.0
#: how long a controlled shutdown waits for its moves to reach this node's replica
SHUTDOWN_APPLY_WAIT_S = 1.0
#: how long a stopping node waits for the Raft groups it leads to move to another voter
RAFT_HANDOVER_S = 1.0


def raft_config(config: ClusterNode) -> RaftConfig:
    return RaftConfig(heartbeat_ms=config.raft_heartbeat_interval_ms,
                      election_timeout_ms=config.raft_election_timeout_ms)


def controller_config(config: ClusterNode) -> ControllerConfig:
    """The controller's settings from the node's: a gap of two heartbeat intervals between
    its runs is a stall of this process (the controller runs every interval), and this
    node's own broker, when it is one, is never fenced by the controller running beside it
    (see ``ControllerConfig``)."""
    return ControllerConfig(
        heartbeat_interval_ms=config.broker_heartbeat_interval_ms,
        session_timeout_ms=config.broker_session_timeout_ms,
        stall_after_ms=2 * config.broker_heartbeat_interval_ms,
        local_broker=config.node_id if "broker" in config.roles else -1,
        probe_after_ms=config.broker_liveness_probe_ms,
        auto_leader_rebalance=config.auto_leader_rebalance_enable,
        leader_imbalance_check_interval_ms=config.leader_imbalance_check_interval_seconds
        * 1000,
        leader_imbalance_per_broker_percentage=config.leader_imbalance_per_broker_percentage,
        default_partitions=config.num_partitions,
        default_replication_factor=config.default_replication_factor,
    )


def named_controller(state: MetadataState, leader: int) -> int:
    """The controller Metadata and DescribeCluster name to clients: a live broker, the same
    from every node (Kafka's admin clients send controller requests there; every broker
    here takes them). The metadata group's ``leader`` when it is a live broker (it runs the
    controller: no forwarding), else the lowest live broker; -1 when none is live."""
    if leader > 0 and state.is_live(leader):
        return leader
    return min((b.node_id for b in state.live_brokers()), default=-1)


class ClusterService:
    def __init__(self, config: ClusterNode, mesh: MeshService, clock: Clock,
                 cluster_id: str) -> None:
        self.config = config
        self.local_cluster_id = cluster_id
        self.node_id = config.node_id
        self.mesh = mesh
        self.clock = clock
        self.voters = config.quorum_voters
        self.machine = MetadataMachine()
        self.transport = MeshRaftTransport(mesh, self.node_id)
        for node_id, addr in self.voters.items():
            if node_id != self.node_id:
                self.transport.set_voter_address(node_id, addr)
        # Raft's own clock is monotonic: a step of the wall clock neither starts an
        # election nor holds one back
        self.multi = MultiRaft(self.node_id, config.data_dir, self.transport,
                               config=raft_config(config))
        self.metadata: RaftDriver | None = None
        #: the offsets group (voters only): consumer groups and committed offsets
        self.offsets: RaftDriver | None = None
        self.offsets_machine = OffsetsMachine()
        #: told of records imported into the offsets group here (its leader), so the group
        #: coordinator serving here has them too
        self.on_offsets_imported: Callable[[list[tuple[bytes, bytes | None]]], None] | None \
            = None
        self.controller: ControllerService | None = None
        self.client = ControllerClient(self.node_id, mesh, self.voters,
                                       leader_hint=self._raft_leader)
        self.agent: BrokerAgent | None = None
        #: set once this broker is registered (its agent's event, made early: requests
        #: from clients may come before the agent starts)
        self.registered = asyncio.Event()
        #: called when this broker's registration is accepted (see ``caught_up``)
        self.on_registered: list[Callable[[], None]] = []
        self._changed = asyncio.Event()
        self._tasks: set[asyncio.Task[None]] = set()
        self.machine.on_change(lambda _index: self._changed.set())

    @property
    def state(self) -> MetadataState:
        return self.machine.state

    @property
    def cluster_id(self) -> str:
        """The cluster's id once the first controller set it, this node's until then."""
        return self.state.cluster_id or self.local_cluster_id

    def _raft_leader(self) -> int:
        return self.metadata.leader if self.metadata is not None else 0

    def offsets_leader(self) -> int:
        """The node that leads the offsets group, the groups' coordinator (-1: unknown)."""
        if self.offsets is not None:
            if set(self.voters) == {self.node_id}:
                return self.node_id  # a lone voter: nobody else can lead (even while its
                # disk is failing and the group is down, its coordinator serves reads)
            return self.offsets.leader or -1
        return self.agent.offsets_leader if self.agent is not None else -1

    @property
    def controller_id(self) -> int:
        """The controller as this node knows it (-1: none known)."""
        return self._raft_leader() or self.client.hint or -1

    def named_controller(self) -> int:
        """The controller clients are told of (see ``named_controller``)."""
        return named_controller(self.state, self._raft_leader())

    async def start(self, kafka_addr: str, hosted: Callable[[], Iterable[bytes]] | None = None,
                    on_delete: Callable[[list[bytes]], None] | None = None) -> None:
        """Start the metadata group (voters) and, with ``hosted``/``on_delete`` given (a
        broker), the agent that registers this node."""
        # a voter starts the group with the quorum as its first membership; any other node
        # starts empty and waits for the controller to add it as a learner
        initial = sorted(self.voters) if self.node_id in self.voters else []
        self.metadata = await self.multi.add_group(METADATA_GROUP, initial, self.machine)
        # before the controller service chains its own hook after this one
        self.metadata.on_soft_state = self._metadata_soft_state
        if self.node_id in self.voters:
            self.offsets = await self.multi.add_group(OFFSETS_GROUP, initial,
                                                      self.offsets_machine)
        self.mesh.raft_admin = ClusterRaftAdmin(self.multi)
        watch = RaftLeaderWatch(self.node_id, self._drivers, self._kafka_addr,
                                self.config.broker_liveness_probe_ms, self.clock.now_ms)
        self.spawn(watch.run(), "raft-leader-watch")
        self.controller = ControllerService(self.node_id, self.metadata, self.machine,
                                            controller_config(self.config), self.clock,
                                            self.local_cluster_id)
        self.controller.offsets_leader = self.offsets_leader
        if self.offsets is not None:
            self.controller.import_offsets = self._import_offsets
        self.client.local = self.controller
        self.mesh.rpc.handle(TAG_CONTROLLER, self.controller.handle)
        self.controller.start()
        if hosted is not None and on_delete is not None:
            self.agent = BrokerAgent(self.client, self.node_id, self.config.broker_rack,
                                     kafka_addr, self.mesh.mesh_addr,
                                     self.config.broker_heartbeat_interval_ms, hosted,
                                     on_delete)
            self.agent.registered = self.registered
            self.agent.on_registered = self._registered_now
            self.agent.start()

    def _metadata_soft_state(self, soft: SoftState) -> None:
        if self.agent is not None:
            self.agent.leader_changed(soft.leader)  # a new controller: heartbeat it now

    def _registered_now(self) -> None:
        for listener in self.on_registered:
            listener()

    def caught_up(self) -> bool:
        """A broker may lead and follow partitions: it registered in this process's
        lifetime and its replica of the metadata has applied that registration, so it is
        no older than what the controller had committed then (``BrokerAgent.caught_up``).
        Until then what the replica says of partitions may be a stale replay of the local
        log: a restarted broker that acted on it could lead a partition in an epoch the
        controller has since ended, and acknowledge writes that its new leader never gets."""
        return self.agent is not None and self.agent.caught_up(self.state)

    def _drivers(self) -> list[RaftDriver]:
        return [d for d in (self.metadata, self.offsets) if d is not None]

    def _kafka_addr(self, node_id: int) -> str | None:
        broker = self.state.broker(node_id)
        return None if broker is None else inter_broker(broker.kafka_addr)

    def spawn(self, coro: Coroutine[Any, Any, None], name: str) -> asyncio.Task[None]:
        """A task of this node's cluster work, cancelled by ``stop``."""
        task = asyncio.get_running_loop().create_task(coro, name=name)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
        return task

    async def stop(self) -> None:
        for task in list(self._tasks):
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        if self.agent is not None:
            await self.agent.stop()
        if self.controller is not None:
            await self.controller.stop()
        await self.multi.stop()
        await self.transport.close()

    async def controlled_shutdown(self, timeout_s: float) -> None:
        """A broker stopping: the controller moves its leaderships to other in-sync
        replicas and takes it out of every ISR first (KIP-631's controlled shutdown). Gives
        up after ``timeout_s`` (no controller: the broker is fenced when its session ends)."""
        agent = self.agent
        if agent is None:
            return
        others = [b for b in self.state.live_brokers() if b.node_id != self.node_id]
        if not others or agent.epoch == 0:
            await agent.stop()  # nobody to hand anything to
            return
        loop = asyncio.get_running_loop()
        started = loop.time()
        kept = await hand_over_raft(self.multi, self.node_id, self.reachable,
                                    RAFT_HANDOVER_S)
        if kept:
            log.info("controlled shutdown: still leading raft groups %s", kept)
        if not to_move(self.state, self.node_id, self.reachable):
            # no other replica can lead what this node leads, it is in no live leader's
            # ISR: the controller has nothing to do (and may be gone with the others)
            log.info("controlled shutdown: no partition to move")
            await agent.stop()
            return
        try:
            left = await agent.controlled_shutdown(max(timeout_s - (loop.time() - started),
                                                       RAFT_HANDOVER_S))
        except ControllerUnavailable as exc:
            log.warning("controlled shutdown: %s; stopping anyway", exc)
            return
        if left is not None:
            # this node's replica shows the moves before the listener closes: a client's
            # request meanwhile gets NOT_LEADER_OR_FOLLOWER naming the new leader
            await self.wait_applied(lambda st: len(still_led(st, self.node_id)) <= left,
                                    SHUTDOWN_APPLY_WAIT_S)
            log.info("controlled shutdown done in %.0f ms: %d partitions still led here",
                     (loop.time() - started) * 1000, left)

    def reachable(self, node_id: int) -> bool:
        """A live broker this node has a mesh connection to: a node that stopped has
        closed its connections (its fencing comes only when its session ends)."""
        broker = self.state.broker(node_id)
        if broker is None or broker.fenced:
            return False
        transport = self.mesh.transport
        return transport is None or broker.node_key in transport.peers()

    async def ask(self, request: ControllerRequest, timeout_s: float) -> ControllerReply:
        """The controller's answer (see ``ControllerClient.call``), once this broker is
        registered: the controller takes requests only from registered brokers' keys (so a
        client's request in the first moments of a start waits instead of being refused)."""
        if "broker" in self.config.roles and not self.registered.is_set():
            try:
                async with asyncio.timeout(timeout_s):
                    await self.registered.wait()
            except TimeoutError:
                raise ControllerUnavailable("this broker is not registered yet") from None
        return await self.client.call(request, timeout_s)

    async def ask_checked(self, request: ControllerRequest, timeout_s: float
                          ) -> ControllerReply:
        """The controller's answer; no controller (REQUEST_TIMED_OUT) or its refusal (its
        code and message) raised as a ``KafkaError``."""
        try:
            answer = await self.ask(request, timeout_s)
        except ControllerUnavailable as exc:
            raise KafkaError(ErrorCode.request_timed_out, str(exc)) from None
        if answer.error_code != ErrorCode.none:
            raise KafkaError(error_of(answer), answer.message or "")
        return answer

    async def _import_offsets(self, request: ImportOffsetsRequest) -> ControllerReply:
        """A joining broker's own group records, into the offsets group (this node leads
        it; else NOT_CONTROLLER names who does). Keys the group holds are kept as they are."""
        driver = self.offsets
        if driver is None or not driver.is_leader:
            return reply(ErrorCode.not_controller, "not the offsets group's leader",
                         controller=self.offsets_leader())
        fresh: list[tuple[bytes, bytes | None]] = [
            (k, v) for k, v in request.records if k not in self.offsets_machine.records]
        if fresh:
            try:
                await driver.propose(encode_entry(fresh))
            except (ProposalDropped, WriteTimeout) as exc:
                return reply(ErrorCode.not_controller, str(exc),
                             controller=self.offsets_leader())
            if self.on_offsets_imported is not None:  # the coordinator serving here
                self.on_offsets_imported(fresh)
        return reply(controller=self.node_id, value=len(fresh))

    async def allocate_producer_ids(self, count: int, floor: int = 0) -> int:
        """The first id of a new block of ``count`` producer ids for this broker, all at or
        above ``floor``. Raises ``KafkaError`` (COORDINATOR_NOT_AVAILABLE, or the
        controller's refusal)."""
        agent = self.agent
        if agent is None:
            raise KafkaError(ErrorCode.coordinator_not_available, "this node is no broker")
        try:
            async with asyncio.timeout(REGISTRATION_WAIT_S):
                await agent.registered.wait()
            answer = await self.ask(AllocateProducerIdsRequest(self.node_id, agent.epoch,
                                                               count, floor),
                                    REGISTRATION_WAIT_S)
        except (TimeoutError, ControllerUnavailable) as exc:
            raise KafkaError(ErrorCode.coordinator_not_available,
                             f"no producer id block from the controller: {exc}") from None
        if answer.error_code != ErrorCode.none:
            raise KafkaError(ErrorCode.coordinator_not_available,
                             f"producer id block refused: {answer.message}")
        return answer.value

    async def wait_applied(self, check: Callable[[MetadataState], bool],
                           timeout_s: float) -> bool:
        """Wait until ``check`` holds for this node's replica of the state (a change the
        controller applied reaches the followers a heartbeat later)."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout_s
        while not check(self.state):
            remaining = deadline - loop.time()
            if remaining <= 0:
                return False
            self._changed.clear()
            try:
                async with asyncio.timeout(min(remaining, 0.05)):
                    await self._changed.wait()
            except TimeoutError:
                pass
        return True

    def raft_status(self) -> list[RaftStatus]:
        return self.multi.status()
