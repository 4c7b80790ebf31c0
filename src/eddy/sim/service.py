"""The controller service of the whole-cluster simulation: what ``ControllerService`` does
on a node, sans-IO, driven by the simulation's events.

- ``activate``: leadership seen (``on_soft_state``): wait for a read barrier (read-index,
  then apply up to its index), then ``Controller.start`` with the previous leader as the
  suspect, and propose the cluster id if there is none.
- ``tick``: the controller's tick loop: ``Controller.tick`` and its commands proposed in
  order; no new tick while the last one's proposals are unresolved (the service awaits
  them).
- ``handle``: a request from a broker or a client: registration (epoch = current + 1),
  heartbeats (their commands proposed, then the answer), topic creation, pass-through
  commands; NOT_CONTROLLER with the leader hint on a node that is not the controller.
  Reads (simulation only) are served by the Raft leader through read-index.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from eddy import postcard
from eddy.cluster.controller import ControllerError
from eddy.cluster.controller.rpc import (
    ControllerReply,
    CreateTopicRequest,
    HeartbeatRequest,
    ProposeRequest,
    RegisterRequest,
    decode_request,
    reply,
)
from eddy.cluster.controller.service import passthrough_command
from eddy.cluster.raft.ready import NotLeader, ProposalDropped, Role
from eddy.metadata import ApplyResult
from eddy.metadata.commands import ChangeIsr, RegisterBroker, SetClusterId
from eddy.postcard import PostcardError
from eddy.protocol.errors import ErrorCode
from eddy.sim.node import (
    KV_TOPIC,
    AlterIsrRequest,
    Outcome,
    ReadReply,
    ReadRequest,
    Rpc,
)

if TYPE_CHECKING:
    from eddy.sim.cluster import ClusterSim

CLUSTER_ID = "sim-cluster"


def _result(result: ApplyResult, node_id: int, topic_id: bytes | None = None
            ) -> ControllerReply:
    return reply(int(result.code), result.message or None, controller=node_id,
                 value=result.value or 0, topic_id=topic_id if result.ok else None)


class Responder:
    """Answers one request (once)."""

    def __init__(self, sim: ClusterSim, node_id: int, rpc: Rpc) -> None:
        self.sim = sim
        self.node_id = node_id
        self.rpc = rpc
        self.proposed = False

    def answer(self, answer: ControllerReply | ReadReply) -> None:
        body = answer if isinstance(answer, ReadReply) else postcard.encode(answer)
        rpc = self.rpc
        self.sim.send_rpc(Rpc(rpc.dst, rpc.src, rpc.req_id, body, reply=True,
                              proposed=self.proposed))

    def refused(self, code: ErrorCode, message: str) -> None:
        meta = self.sim.meta[self.node_id]
        raft = self.sim.nodes[self.node_id].raft
        leader = raft.leader if raft is not None else 0
        hint = self.node_id if meta.controller.active else (leader or -1)
        self.answer(reply(int(code), message, controller=hint))

    def outcome(self, result: ApplyResult | None, known: bool,
                topic_id: bytes | None = None) -> None:
        """A proposal's outcome as the service answers it (a dropped one is NOT_CONTROLLER,
        as ``ProposalDropped`` is)."""
        if result is None:
            if known:
                self.proposed = False  # its index went to another entry: it never applies
            self.refused(ErrorCode.not_controller,
                         "proposal dropped" if known else "outcome unknown")
        else:
            self.answer(_result(result, self.node_id, topic_id))


# -- leadership ----------------------------------------------------------------------------
def try_barrier(sim: ClusterSim, i: int) -> None:
    """After each Ready of an activating leader: ask for the read barrier once the leader
    can serve read-index (it committed an entry of its term)."""
    meta = sim.meta[i]
    raft = sim.nodes[i].raft
    if raft is None or not meta.activating or meta.barrier_ctx is not None:
        return
    if raft.role != Role.LEADER:
        return
    ctx = f"barrier:{i}:{meta.incarnation}:{raft.term}".encode()
    try:
        raft.read_index(ctx)
    except ProposalDropped:
        return  # its first entry is not committed yet: after the next Ready
    meta.barrier_ctx = ctx
    meta.reads[ctx] = (lambda: sim.activated(i), lambda: None)


# -- the tick loop -------------------------------------------------------------------------
def tick(sim: ClusterSim, i: int) -> None:
    meta = sim.meta[i]
    if not meta.controller.active or meta.busy or sim.quiet:
        return
    now = sim.node_now(i)
    try:
        commands = meta.controller.tick(now)
        # ControllerService's probes: a crashed node refuses connections; a cut link drops
        # them (no answer: nothing changes)
        for broker in meta.controller.to_probe(now):
            target = sim.nodes.get(broker.node_id)
            if sim.probes and target is not None and target.raft is None and not (
                    {(i, broker.node_id), (broker.node_id, i)} & sim.blocked):
                commands += meta.controller.on_unreachable(broker.node_id, broker.epoch, now)
    except ControllerError:
        return
    meta.controller.take_gc_orders()
    if not commands:
        return
    meta.busy = len(commands)
    sim.note(f"controller {i} proposes {', '.join(type(c).__name__ for c in commands)}")

    def done(_: list[Outcome]) -> None:
        meta.busy = 0

    sim.propose_all(i, commands, done)


# -- requests ------------------------------------------------------------------------------
def handle(sim: ClusterSim, i: int, rpc: Rpc) -> None:
    """A request arrived at node ``i`` (which is up)."""
    out = Responder(sim, i, rpc)
    body = rpc.body
    if isinstance(body, ReadRequest):
        _read(sim, i, rpc, body, out)
        return
    meta = sim.meta[i]
    if not meta.controller.active:
        out.refused(ErrorCode.not_controller, "this node is not the controller")
        return
    try:
        if isinstance(body, AlterIsrRequest):
            _check_sender(sim, i, rpc.peer, None)
            _propose(sim, i, ChangeIsr(body.topic, body.partition, body.isr,
                                       body.partition_epoch), out)
            return
        if not isinstance(body, bytes):
            raise ControllerError(ErrorCode.invalid_request, "unknown request")
        try:
            request = decode_request(body)
        except PostcardError as exc:
            raise ControllerError(ErrorCode.invalid_request, f"bad request: {exc}") from None
        _answer(sim, i, rpc, request, out)
    except ControllerError as exc:
        out.refused(exc.code, exc.message)


def _check_sender(sim: ClusterSim, i: int, peer: bytes, node_id: int | None) -> None:
    owner = sim.meta[i].state.key_owner(peer)
    if owner is None or (node_id is not None and owner != node_id):
        raise ControllerError(ErrorCode.cluster_authorization_failed,
                              "the request does not come from the node it names")


def _propose(sim: ClusterSim, i: int, command: object, out: Responder,
             topic_id: bytes | None = None) -> None:
    def cb(result: ApplyResult | None, known: bool) -> None:
        out.outcome(result, known, topic_id)

    if sim.propose_cmd(i, command, cb):  # type: ignore[arg-type]
        out.proposed = True
    else:
        out.refused(ErrorCode.not_controller, "not the leader")


def _answer(sim: ClusterSim, i: int, rpc: Rpc, request: object, out: Responder) -> None:
    meta = sim.meta[i]
    c = meta.controller
    now = sim.node_now(i)
    if isinstance(request, RegisterRequest):
        current = meta.state.broker(request.node_id)
        epoch = (current.epoch if current is not None else 0) + 1
        _propose(sim, i, RegisterBroker(request.node_id, rpc.peer, request.rack,
                                        request.kafka_addr, request.mesh_addr, epoch), out)
        return
    if isinstance(request, HeartbeatRequest):
        _check_sender(sim, i, rpc.peer, request.node_id)
        commands = c.on_heartbeat(request.node_id, request.epoch, now)
        c.report_hosted(request.node_id, request.hosted)

        def answered(_: list[Outcome]) -> None:
            broker = meta.state.broker(request.node_id)
            out.answer(reply(controller=i, value=request.epoch,
                             fenced=broker is None or broker.fenced))

        sim.propose_all(i, commands, answered)
        return
    _check_sender(sim, i, rpc.peer, None)
    if isinstance(request, CreateTopicRequest):
        configs = {e.name: e.value for e in request.configs}
        command = c.create_topic(request.name, request.partitions,
                                 request.replication_factor, configs, now)
        _propose(sim, i, command, out, topic_id=command.topic_id)
        return
    if isinstance(request, ProposeRequest):
        _propose(sim, i, passthrough_command(request.command), out)
        return
    raise ControllerError(ErrorCode.invalid_request, "unknown request")


def _read(sim: ClusterSim, i: int, rpc: Rpc, body: ReadRequest, out: Responder) -> None:
    raft = sim.nodes[i].raft
    assert raft is not None
    meta = sim.meta[i]
    if raft.role != Role.LEADER:
        out.answer(ReadReply(False, hint=raft.leader))
        return
    ctx = f"read:{rpc.src}:{rpc.req_id}".encode()
    try:
        raft.read_index(ctx)
    except NotLeader as exc:
        out.answer(ReadReply(False, hint=exc.leader_hint))
        return
    except ProposalDropped:
        out.answer(ReadReply(False, hint=i))
        return

    def serve() -> None:
        out.answer(ReadReply(True, value=sim.read_register(i, body.key)))

    meta.reads[ctx] = (serve, lambda: out.answer(ReadReply(False)))


def read_register(sim: ClusterSim, i: int, key: str) -> str | None:
    """The register ``key`` as node ``i``'s applied state holds it."""
    overrides = sim.meta[i].state.topic_overrides(KV_TOPIC)
    return None if overrides is None else overrides.get(key)


def propose_cluster_id(sim: ClusterSim, i: int) -> None:
    if not sim.meta[i].state.cluster_id:
        sim.propose_cmd(i, SetClusterId(CLUSTER_ID), lambda result, known: None)
