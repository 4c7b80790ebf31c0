"""``ControllerService``: the asyncio adapter that runs the sans-IO ``Controller`` on the
``metadata`` group's leader and answers brokers' controller RPCs (tag 0x06).

When this node becomes the leader it first waits for a read barrier (everything committed
before its term is applied here), then starts the controller with the previous leader as a
suspect (seed 004: a short grace for it, a full session for everyone else). A tick task runs
the controller at least every heartbeat interval and proposes what it returns, in order.
Followers answer every request with NOT_CONTROLLER and the leader they know.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable, Sequence

from eddy import postcard
from eddy.clock import Clock
from eddy.cluster.controller import Controller, ControllerConfig, ControllerError
from eddy.cluster.controller.batch_rpcs import ElectionRpcs, ReassignRpcs
from eddy.cluster.controller.rpc import (
    AllocateProducerIdsRequest,
    AlterIsrRequest,
    AlterReassignmentsRequest,
    ControlledShutdownRequest,
    ControllerReply,
    ControllerRequest,
    CreatePartitionsRequest,
    CreateTopicRequest,
    DeleteTopicRequest,
    ElectLeadersRequest,
    HeartbeatRequest,
    ImportOffsetsRequest,
    ImportTopicRequest,
    ProposeRequest,
    QuorumRequest,
    QuorumStatus,
    RegisterRequest,
    ReplicaProgress,
    decode_request,
    reply,
)
from eddy.cluster.liveness_probe import refuses
from eddy.cluster.machine import MetadataMachine
from eddy.cluster.placement import HashRing
from eddy.cluster.raft.driver import CONF_ADD_LEARNER, DriverStopped, RaftDriver, WriteTimeout
from eddy.cluster.raft.ready import (
    ConfChangeError,
    NotLeader,
    ProposalDropped,
    Role,
    SoftState,
)
from eddy.mesh.frames import Frame
from eddy.metadata import (
    ApplyResult,
    MetadataCommand,
    MetadataState,
    decode_command,
    encode_command,
)
from eddy.metadata.brokers import MAX_PRODUCER_ID_BLOCK
from eddy.metadata.commands import (
    AlterBrokerConfigs,
    AlterTopicConfigs,
    ChangeIsr,
    ChangePartitionLeader,
    CreateAcl,
    CreateTopic,
    DeleteAcl,
    DeletePipeline,
    DeleteScramUser,
    FenceBroker,
    RegisterBroker,
    RegisterPipeline,
    SetClusterId,
    UnfenceBroker,
    UpsertScramUser,
)
from eddy.metadata.endpoints import inter_broker
from eddy.metadata.topics import MAX_PARTITIONS
from eddy.postcard import PostcardError
from eddy.protocol.errors import ErrorCode

log = logging.getLogger(__name__)

#: how long a probe of a silent broker's Kafka listener may take to connect
PROBE_TIMEOUT_S = 0.25
#: the most producer-id blocks skipped for one floor (64 M ids)
MAX_SKIP_BLOCKS = 64
#: the commands a broker may ask the controller to propose as they are
PASSTHROUGH = (AlterTopicConfigs, AlterBrokerConfigs, CreateAcl, DeleteAcl, UpsertScramUser,
               DeleteScramUser, RegisterPipeline, DeletePipeline)


def passthrough_command(data: bytes) -> MetadataCommand:
    """A ProposeRequest's command: decoded, and one a broker may ask for (else
    ``ControllerError`` INVALID_REQUEST naming why)."""
    try:
        asked = decode_command(data)
    except PostcardError as exc:
        raise ControllerError(ErrorCode.invalid_request, f"command: {exc}") from None
    if not isinstance(asked, PASSTHROUGH):
        raise ControllerError(ErrorCode.invalid_request,
                              f"command: {type(asked).__name__} is the controller's own")
    return asked


def alter_isr_command(state: MetadataState, request: AlterIsrRequest) -> ChangeIsr:
    """The ``ChangeIsr`` a partition leader's AlterIsrRequest asks for, once the sender is
    checked to lead the partition in that epoch (the partition epoch is checked when the
    command applies)."""
    where = f"{request.topic}-{request.partition}"
    part = state.partition(request.topic, request.partition)
    if part is None:
        raise ControllerError(ErrorCode.unknown_topic_or_partition, f"{where} is unknown")
    if request.leader_epoch < part.leader_epoch:
        raise ControllerError(ErrorCode.fenced_leader_epoch,
                              f"{where}: leader epoch {request.leader_epoch} is older than "
                              f"{part.leader_epoch}")
    if part.leader != request.node_id or request.leader_epoch != part.leader_epoch:
        raise ControllerError(ErrorCode.not_leader_or_follower,
                              f"{where}: node {request.node_id} does not lead it in epoch "
                              f"{request.leader_epoch}")
    return ChangeIsr(request.topic, request.partition, request.isr, request.partition_epoch)


class ControllerService:
    def __init__(self, node_id: int, driver: RaftDriver, machine: MetadataMachine,
                 config: ControllerConfig, clock: Clock, cluster_id: str) -> None:
        self.node_id = node_id
        self.cluster_id = cluster_id  # proposed if the cluster has none yet
        self.driver = driver
        self.machine = machine
        self.clock = clock
        self.controller = Controller(machine.state, config, HashRing())
        self.activations = 0  # how many times this node became the controller
        self._gc_orders: dict[int, tuple[bytes, ...]] = {}
        self._last_leader = 0
        self._activating: asyncio.Task[None] | None = None
        self._ticker: asyncio.Task[None] | None = None
        self._wake = asyncio.Event()
        self._adding: asyncio.Future[None] | None = None
        self._probing: dict[int, asyncio.Task[None]] = {}
        self._stalls_logged = 0
        #: who leads the offsets group (heartbeat replies tell brokers outside it)
        self.offsets_leader: Callable[[], int] = lambda: -1
        #: where ImportOffsetsRequest goes (the node's offsets group, when it runs one)
        self.import_offsets: Callable[[ImportOffsetsRequest],
                                      Awaitable[ControllerReply]] | None = None
        self._shutdown = ElectionRpcs(self.controller, self.propose_all, node_id)
        self._reassign = ReassignRpcs(self.controller, self.propose_all, node_id)
        self._previous_hook = driver.on_soft_state
        driver.on_soft_state = self._on_soft_state

    @property
    def active(self) -> bool:
        return self.controller.active

    def start(self) -> None:
        self._ticker = asyncio.get_running_loop().create_task(self._tick_loop(),
                                                              name="controller-tick")
        if self.driver.is_leader:
            self._activate(self.driver.leader)

    async def stop(self) -> None:
        self.controller.stop()
        for task in (self._activating, self._ticker, *self._probing.values()):
            if task is not None:
                task.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await task

    # -- leadership --------------------------------------------------------------------------
    def _on_soft_state(self, soft: SoftState) -> None:
        if self._previous_hook is not None:
            self._previous_hook(soft)
        previous, self._last_leader = self._last_leader, soft.leader or self._last_leader
        if soft.role == Role.LEADER:
            if not self.controller.active:
                self._activate(previous)
        elif self.controller.active or self._activating is not None:
            log.info("node %d is no longer the controller (leader now %s)", self.node_id,
                     soft.leader or "unknown")
            self.controller.stop()
            if self._activating is not None:
                self._activating.cancel()
                self._activating = None

    def _activate(self, previous_leader: int) -> None:
        if self._activating is not None:
            return
        self._activating = asyncio.get_running_loop().create_task(
            self._become_active(previous_leader), name="controller-activate")

    async def _become_active(self, previous_leader: int) -> None:
        try:
            if not await self.driver.caught_up_as_leader():
                return
            suspects = [previous_leader] if previous_leader not in (0, self.node_id) else []
            self.controller.start(self.clock.now_ms(), suspects)
            self.activations += 1
            log.info("node %d is the controller (metadata leader, term %d)", self.node_id,
                     self.driver.status().term)
            self._wake.set()
            if not self.machine.state.cluster_id:
                await self.propose_all([SetClusterId(self.cluster_id)])
        finally:
            self._activating = None

    # -- the tick loop -----------------------------------------------------------------------
    async def _tick_loop(self) -> None:
        interval_ms = self.controller.config.heartbeat_interval_ms
        while True:
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(self._sleep_s(interval_ms)):
                    await self._wake.wait()
            self._wake.clear()
            if not self.controller.active:
                continue
            try:
                now = self.clock.now_ms()
                commands = self.controller.tick(now)
                if self.controller.stalls != self._stalls_logged:
                    self._stalls_logged = self.controller.stalls
                    log.info("the controller did not run for %d ms (this process stalled): "
                             "broker sessions get that time back",
                             self.controller.last_stall_ms)
                self._start_probes(now)
                for node_id, ids in self.controller.take_gc_orders().items():
                    self._gc_orders[node_id] = tuple(ids)
                if commands:
                    await self.propose_all(commands)
            except ControllerError:
                continue  # stopped being the controller meanwhile
            except Exception:
                log.exception("controller tick failed; carrying on")

    def _start_probes(self, now_ms: int) -> None:
        for broker in self.controller.to_probe(now_ms):
            if broker.node_id in self._probing:
                continue
            task = asyncio.get_running_loop().create_task(
                self._probe(broker.node_id, broker.epoch, inter_broker(broker.kafka_addr)),
                name=f"probe-broker-{broker.node_id}")
            self._probing[broker.node_id] = task
            task.add_done_callback(self._probe_done)

    def _probe_done(self, task: asyncio.Task[None]) -> None:
        for node_id, running in list(self._probing.items()):
            if running is task:
                del self._probing[node_id]

    async def _probe(self, node_id: int, epoch: int, addr: str) -> None:
        """A silent broker's Kafka listener: refused means the process is gone (move its
        leaderships now)."""
        if not await refuses(addr, PROBE_TIMEOUT_S) or not self.controller.active:
            return
        commands = self.controller.on_unreachable(node_id, epoch, self.clock.now_ms())
        if commands:
            log.info("broker %d (epoch %d) stopped heartbeating and nothing listens at %s "
                     "any more: its leaderships move now (fenced when its session ends)",
                     node_id, epoch, addr)
            await self.propose_all(commands)

    def _sleep_s(self, interval_ms: int) -> float:
        now = self.clock.now_ms()
        wake = self.controller.next_wakeup(now) if self.controller.active else None
        ms = interval_ms if wake is None else max(1, min(interval_ms, wake - now))
        return ms / 1000

    async def propose(self, command: MetadataCommand) -> ApplyResult:
        result: ApplyResult = await self.driver.propose(encode_command(command))
        if not result.ok:
            log.debug("controller command %s rejected: %s", type(command).__name__,
                      result.message)
        return result

    async def propose_all(self, commands: Sequence[MetadataCommand]) -> list[ApplyResult]:
        """Propose in order (the driver queues them in the order the tasks start) and wait
        for all of them; failures to propose are logged and left to the next reconcile."""
        for command in commands:
            if isinstance(command, FenceBroker | UnfenceBroker):
                log.info("%s broker %d (epoch %d)", "fencing" if isinstance(
                    command, FenceBroker) else "unfencing", command.node_id, command.epoch)
        moves = sum(isinstance(c, ChangePartitionLeader) for c in commands)
        if moves:
            log.info("changing the leader or ISR of %d partitions", moves)
        tasks = [asyncio.ensure_future(self.propose(c)) for c in commands]
        out: list[ApplyResult] = []
        for command, outcome in zip(commands, await asyncio.gather(*tasks,
                                                                   return_exceptions=True),
                                    strict=True):
            if isinstance(outcome, BaseException):
                log.info("controller command %s not applied: %s", type(command).__name__,
                         outcome)
                out.append(ApplyResult(ErrorCode.not_controller,
                                       str(outcome) or type(outcome).__name__))
            else:
                out.append(outcome)
        return out

    # -- RPCs ----------------------------------------------------------------------------------
    async def handle(self, peer: bytes, frame: Frame) -> bytes | None:
        """The mesh handler of tag 0x06."""
        try:
            request = decode_request(frame.payload)
        except PostcardError as exc:
            return postcard.encode(reply(ErrorCode.invalid_request, f"bad request: {exc}"))
        return postcard.encode(await self.answer(peer, request))

    async def answer(self, peer: bytes, request: ControllerRequest) -> ControllerReply:
        """``request`` from the node whose mesh key is ``peer``; every failure is a reply."""
        try:
            answer = await self._answer(peer, request)
        except ControllerError as exc:
            answer = self._refused(exc.code, exc.message)
        except NotLeader as exc:
            answer = reply(ErrorCode.not_controller, str(exc), controller=exc.leader_hint or -1)
        except (WriteTimeout, DriverStopped) as exc:
            # the outcome is unknown (the entry may still commit): not NOT_CONTROLLER, which
            # the client retries, so a retried CreateTopic cannot meet its own topic
            answer = reply(ErrorCode.request_timed_out, str(exc), controller=self.node_id)
        except ProposalDropped as exc:  # replaced by another leader's entry: never applied
            answer = self._refused(ErrorCode.not_controller, str(exc))
        return answer

    def _refused(self, code: ErrorCode, message: str) -> ControllerReply:
        hint = self.node_id if self.controller.active else (self.driver.leader or -1)
        return reply(code, message, controller=hint)

    def _check_sender(self, peer: bytes, node_id: int | None) -> None:
        owner = self.machine.state.key_owner(peer)
        if owner is None or (node_id is not None and owner != node_id):
            raise ControllerError(ErrorCode.cluster_authorization_failed,
                                  "the request does not come from the node it names "
                                  "(mesh key not registered for it)")

    async def _answer(self, peer: bytes, request: object) -> ControllerReply:
        if isinstance(request, ImportOffsetsRequest):  # for the offsets group's leader
            self._check_sender(peer, None)
            if self.import_offsets is None:
                raise ControllerError(ErrorCode.not_controller, "no offsets group here")
            return await self.import_offsets(request)
        if not self.controller.active:
            raise ControllerError(ErrorCode.not_controller, "this node is not the controller")
        now = self.clock.now_ms()
        c = self.controller
        if isinstance(request, RegisterRequest):
            return await self._register(peer, request)
        if isinstance(request, QuorumRequest):
            return reply(controller=self.node_id, quorum=self.quorum_status())
        if isinstance(request, HeartbeatRequest):
            self._check_sender(peer, request.node_id)
            commands = c.on_heartbeat(request.node_id, request.epoch, now)
            c.report_hosted(request.node_id, request.hosted)
            self._ensure_member(request.node_id)
            if commands:
                await self.propose_all(commands)
            broker = self.machine.state.broker(request.node_id)
            return reply(controller=self.node_id, value=request.epoch,
                         fenced=broker is None or broker.fenced,
                         delete_topics=self._gc_orders.pop(request.node_id, ()),
                         offsets_leader=self.offsets_leader())
        if isinstance(request, ControlledShutdownRequest):
            self._check_sender(peer, request.node_id)
            return await self._shutdown.controlled_shutdown(request, now)
        self._check_sender(peer, None)
        if isinstance(request, ElectLeadersRequest):
            return await self._shutdown.elect_leaders(request, now)
        if isinstance(request, AlterReassignmentsRequest):
            return await self._reassign.alter(request)
        if isinstance(request, CreateTopicRequest):
            partitions = None if request.partitions == -1 else request.partitions
            rf = None if request.replication_factor == -1 else request.replication_factor
            configs = {e.name: e.value for e in request.configs}
            command = c.create_topic(request.name, partitions, rf, configs, now)
            if request.validate_only:
                return reply(controller=self.node_id, topic_id=command.topic_id,
                             value=len(command.partitions))
            result = await self.propose(command)
            return self._result(result, topic_id=command.topic_id)
        if isinstance(request, DeleteTopicRequest):
            return self._result(await self.propose(c.delete_topic(request.name,
                                                                  request.topic_id)))
        if isinstance(request, CreatePartitionsRequest):
            cp = c.create_partitions(request.name, request.total, now)
            if request.validate_only:
                return reply(controller=self.node_id)
            return self._result(await self.propose(cp))
        if isinstance(request, AllocateProducerIdsRequest):
            self._check_sender(peer, request.node_id)
            await self._skip_producer_ids(request.node_id, request.floor)
            count = None if request.count <= 0 else request.count
            return self._result(await self.propose(c.allocate_producer_ids(request.node_id,
                                                                           count)))
        if isinstance(request, ImportTopicRequest):
            return self._result(await self.propose(self._import(peer, request)),
                                topic_id=request.topic_id)
        if isinstance(request, ProposeRequest):
            return self._result(await self.propose(passthrough_command(request.command)))
        if isinstance(request, AlterIsrRequest):
            self._check_sender(peer, request.node_id)
            c.check_isr_joiners(request.topic, request.partition, request.isr)
            result = await self.propose(alter_isr_command(self.machine.state, request))
            if self.machine.state.reassignments:
                self._wake.set()  # a reassignment may complete now: tick at once
            return self._result(result)
        raise ControllerError(ErrorCode.invalid_request, "unknown request")

    async def _skip_producer_ids(self, node_id: int, floor: int) -> None:
        """Move the cluster's next producer id up to ``floor`` (a node that handed out ids
        on its own before it joined) with blocks nobody uses."""
        state = self.machine.state
        for _ in range(MAX_SKIP_BLOCKS):
            gap = floor - state.next_producer_id
            if gap <= 0:
                return
            result = await self.propose(self.controller.allocate_producer_ids(
                node_id, min(gap, MAX_PRODUCER_ID_BLOCK)))
            if not result.ok:
                raise ControllerError(result.code, result.message)
        raise ControllerError(ErrorCode.invalid_request,
                              f"floor: {floor} is more than {MAX_SKIP_BLOCKS} blocks ahead")

    def _import(self, peer: bytes, request: ImportTopicRequest) -> CreateTopic:
        owner = self.machine.state.key_owner(peer)
        assert owner is not None  # _check_sender passed
        if not 1 <= request.partitions <= MAX_PARTITIONS:
            raise ControllerError(ErrorCode.invalid_partitions,
                                  f"partitions: {request.partitions} is not between 1 and "
                                  f"{MAX_PARTITIONS}")
        # the state checks the rest when it applies (name and id free, id of 16 bytes)
        return CreateTopic(request.name, request.topic_id,
                           tuple((owner,) for _ in range(request.partitions)),
                           tuple(sorted(request.configs, key=lambda e: e.name)))

    def _ensure_member(self, node_id: int) -> None:
        """A registered broker outside the quorum becomes a learner of the metadata group
        (its replica of the state); one change at a time, retried on its next heartbeat."""
        node = self.driver.node
        if node is None or node_id in node.voters or node_id in node.learners \
                or self._adding is not None:
            return
        self._adding = asyncio.ensure_future(self._add_learner(node_id))

    async def _add_learner(self, node_id: int) -> None:
        try:
            await self.driver.change_membership(CONF_ADD_LEARNER, node_id)
            log.info("broker %d added to the metadata group as a learner", node_id)
        except (ConfChangeError, ProposalDropped, WriteTimeout) as exc:
            log.info("adding broker %d as a learner: %s (retried)", node_id, exc)
        finally:
            self._adding = None

    def quorum_status(self) -> QuorumStatus:
        """The metadata group as its leader sees it (DescribeQuorum)."""
        node = self.driver.node
        if node is None:
            raise ControllerError(ErrorCode.not_controller, "the metadata group is not running")
        last = node.log.last_index()

        def progress(peer: int) -> ReplicaProgress:
            if peer == self.node_id:
                return ReplicaProgress(peer, last)
            pr = node.progress(peer)
            return ReplicaProgress(peer, -1 if pr is None else pr.match)

        return QuorumStatus(node.leader, node.term, node.commit,
                            tuple(progress(v) for v in sorted(node.voters)),
                            tuple(progress(v) for v in sorted(node.learners)))

    async def _register(self, peer: bytes, request: RegisterRequest) -> ControllerReply:
        state = self.machine.state
        current = state.broker(request.node_id)
        epoch = (current.epoch if current is not None else 0) + 1
        result = await self.propose(RegisterBroker(
            request.node_id, peer, request.rack, request.kafka_addr, request.mesh_addr, epoch))
        if result.ok:
            log.info("broker %d registered (epoch %d) at %s", request.node_id, epoch,
                     request.kafka_addr)
        return self._result(result)

    def _result(self, result: ApplyResult, topic_id: bytes | None = None) -> ControllerReply:
        return reply(int(result.code), result.message or None, controller=self.node_id,
                     value=result.value or 0, topic_id=topic_id if result.ok else None)
