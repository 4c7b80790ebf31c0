"""Who talks to the controllers in the whole-cluster simulation.

- ``BrokerAgent`` (one per node incarnation, ``BrokerAgent`` of controller_client sans-IO):
  registers (epoch 0: not registered), then heartbeats every heartbeat interval to the node
  its Raft group names as leader, else the last controller hint, else each node in turn;
  follows NOT_CONTROLLER hints at once; registers again when its epoch went stale. As a
  partition leader (in its applied state) it asks the controller to add live replicas back
  to the ISR (AlterPartition; the simulation assumes they caught up).
- ``Workload``: an admin client creating topics (the key-value topic first, then others
  with replication factors up to the cluster size) and key-value clients writing config
  keys of the key-value topic (AlterTopicConfigs through the controller) and reading them
  (read-index at the leader): the history the Wing-Gong check gets.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from eddy import postcard
from eddy.cluster.controller.rpc import (
    ControllerReply,
    CreateTopicRequest,
    HeartbeatRequest,
    ProposeRequest,
    RegisterRequest,
    decode_reply,
)
from eddy.cluster.raft.sim.kv import HistOp, KvOp
from eddy.metadata import encode_command
from eddy.metadata.commands import AlterTopicConfigs
from eddy.metadata.records import ConfigEntry
from eddy.protocol.errors import ErrorCode
from eddy.sim.node import (
    CLIENT_BASE,
    KV_TOPIC,
    AlterIsrRequest,
    ReadReply,
    ReadRequest,
    Rpc,
    node_key,
)

if TYPE_CHECKING:
    from eddy.sim.cluster import ClusterSim

RETRY_MS = 50  # controller_client.RETRY_PAUSE_S
NONE = int(ErrorCode.none)
NOT_CONTROLLER = int(ErrorCode.not_controller)


def _decode(rpc: Rpc) -> ControllerReply | None:
    return decode_reply(rpc.body) if isinstance(rpc.body, bytes) else None


@dataclass(eq=False)
class BrokerAgent:
    node_id: int
    incarnation: int
    epoch: int = 0
    hint: int = 0
    turn: int = 0
    inflight: int | None = None  # the request id waited for
    target: int = 0

    def _target(self, sim: ClusterSim) -> int:
        raft = sim.nodes[self.node_id].raft
        if raft is not None and raft.leader > 0:
            return raft.leader
        if self.hint > 0:
            return self.hint
        self.turn += 1
        return sorted(sim.nodes)[self.turn % len(sim.nodes)]

    def beat(self, sim: ClusterSim) -> None:
        """Register or heartbeat, unless a request is in flight."""
        if self.inflight is not None:
            return
        i = self.node_id
        body: RegisterRequest | HeartbeatRequest
        if self.epoch == 0:
            body = RegisterRequest(i, None, f"n{i}:9092", f"n{i}:7000")
        else:
            body = HeartbeatRequest(i, self.epoch, ())
        self.target = self._target(sim)
        self.inflight = sim.next_req_id()
        sim.send_rpc(Rpc(i, self.target, self.inflight, postcard.encode(body),
                         peer=node_key(i)))
        sim.schedule(sim.ccfg.rpc_timeout_ms, "agent_timeout",
                     (i, self.incarnation, self.inflight))

    def on_timeout(self, sim: ClusterSim, req_id: int) -> None:
        if req_id != self.inflight:
            return
        self.inflight = None
        self.hint = 0
        sim.schedule(RETRY_MS, "agent_beat", (self.node_id, self.incarnation, False))

    def on_reply(self, sim: ClusterSim, rpc: Rpc) -> None:
        answer = _decode(rpc)
        if rpc.req_id != self.inflight or answer is None:
            return
        self.inflight = None
        code = answer.error_code
        again = (self.node_id, self.incarnation, False)
        if code == NOT_CONTROLLER:
            self.hint = answer.controller if answer.controller not in (self.target, -1) else 0
            sim.schedule(RETRY_MS, "agent_beat", again)
            return
        self.hint = self.target
        if self.epoch == 0:
            if code == NONE:
                self.epoch = answer.value
                sim.note(f"broker {self.node_id} registered, epoch {self.epoch}")
                sim.schedule(0, "agent_beat", again)  # the first heartbeat at once
            else:
                sim.schedule(4 * RETRY_MS, "agent_beat", again)
            return
        if code in (int(ErrorCode.stale_broker_epoch), int(ErrorCode.broker_id_not_registered)):
            sim.note(f"broker {self.node_id}: epoch {self.epoch} stale; registering again")
            self.epoch = 0
            sim.schedule(4 * RETRY_MS, "agent_beat", again)
            return
        if code == NONE and sim.ccfg.alter_isr:
            self._alter_isr(sim)

    def _alter_isr(self, sim: ClusterSim) -> None:
        """One AlterPartition for a partition this broker leads whose ISR lacks a live
        replica (as its applied state shows)."""
        meta = sim.meta.get(self.node_id)
        if meta is None or sim.quiet or sim.rng.random() > 0.3:
            return
        state = meta.state
        for name, index, part in state.partitions_of(self.node_id):
            if part.leader != self.node_id:
                continue
            joining = [n for n in part.replicas if n not in part.isr and state.is_live(n)]
            if joining:
                body = AlterIsrRequest(name, index, (*part.isr, joining[0]),
                                       part.partition_epoch)
                sim.send_rpc(Rpc(self.node_id, self._target(sim), sim.next_req_id(), body,
                                 peer=node_key(self.node_id)))
                return


@dataclass(eq=False)
class RegisterClient:
    """A client of registers (key-value or offsets): one operation in flight at a time,
    sent to the node it believes serves it."""

    id: int
    target: int
    next_op: int = 0
    current: HistOp | None = None
    req_id: int = 0


@dataclass(eq=False)
class Workload:
    """The admin client (topics) and the key-value clients."""

    sim: ClusterSim
    history: list[HistOp] = field(default_factory=list)
    ok: int = 0
    acked_topics: dict[str, bytes] = field(default_factory=dict)
    _topics: list[tuple[str, int, int]] = field(default_factory=list)
    _admin_req: int = 0
    _clients: list[RegisterClient] = field(default_factory=list)

    def start(self) -> None:
        sim, cfg, r = self.sim, self.sim.ccfg, self.sim.rng
        n = cfg.nodes
        self._topics = [(KV_TOPIC, 1, r.randrange(1, n + 1))]
        self._topics += [(f"t{k}", r.randrange(1, 4), r.randrange(1, n + 1))
                         for k in range(cfg.topics)]
        self._clients = [RegisterClient(CLIENT_BASE + c, r.randrange(1, n + 1))
                         for c in range(1, cfg.kv_clients + 1)]
        sim.schedule(r.randrange(100, 400), "admin_next", None)
        for c in self._clients:
            sim.schedule(r.randrange(200, 600), "kv_next", c.id)

    def _stop_ms(self) -> int:
        cfg = self.sim.ccfg
        return cfg.duration_ms + cfg.settle_ms // 2

    def _forwarder(self, cid: int) -> bytes:
        """Clients reach the controller through a broker (its key rides the request)."""
        return node_key(cid % self.sim.ccfg.nodes + 1)

    # -- topics ----------------------------------------------------------------------------
    def admin_next(self) -> None:
        sim = self.sim
        pending = [t for t in self._topics if t[0] not in self.acked_topics]
        if not pending or sim.now >= self._stop_ms():
            return
        name, partitions, rf = pending[0]
        self._admin_req = sim.next_req_id()
        target = sim.rng.randrange(1, sim.ccfg.nodes + 1)
        leader = sim.leader()
        if leader is not None and sim.rng.random() < 0.7:
            target = leader.id  # an admin client usually knows the controller
        body = CreateTopicRequest(name, partitions, rf, (), False)
        sim.note(f"admin -> node {target}: create {name} x{partitions} rf {rf}")
        sim.send_rpc(Rpc(CLIENT_BASE, target, self._admin_req, postcard.encode(body),
                         peer=self._forwarder(CLIENT_BASE)))
        sim.schedule(sim.ccfg.client_timeout_ms, "admin_timeout", self._admin_req)

    def admin_timeout(self, req_id: int) -> None:
        if req_id == self._admin_req:
            self._admin_req = 0
            self.sim.schedule(1, "admin_next", None)

    def _admin_reply(self, rpc: Rpc) -> None:
        answer = _decode(rpc)
        if rpc.req_id != self._admin_req or answer is None:
            return
        self._admin_req = 0
        sim = self.sim
        pending = [t for t in self._topics if t[0] not in self.acked_topics]
        if answer.error_code == NONE and answer.topic_id is not None and pending:
            self.acked_topics[pending[0][0]] = answer.topic_id
            sim.schedule(sim.rng.randrange(100, 600), "admin_next", None)
        elif answer.error_code == int(ErrorCode.topic_already_exists) and pending:
            # an earlier attempt whose answer was lost made it: go on with the next one
            self._topics.remove(pending[0])
            sim.schedule(1, "admin_next", None)
        else:
            sim.schedule(sim.rng.randrange(50, 300), "admin_next", None)

    # -- key-value clients -----------------------------------------------------------------
    def kv_next(self, cid: int) -> None:
        sim, cfg = self.sim, self.sim.ccfg
        c = self._clients[cid - CLIENT_BASE - 1]
        if sim.now >= self._stop_ms() or c.next_op >= cfg.max_ops_per_client:
            return
        r = sim.rng
        c.next_op += 1
        key = cfg.kv_keys[r.randrange(len(cfg.kv_keys))]
        c.req_id = sim.next_req_id()
        body: bytes | ReadRequest
        if r.random() < 0.5:
            value = str(1000 * cid + c.next_op)
            op = KvOp(cid, c.next_op, "put", key, value)
            command = AlterTopicConfigs(KV_TOPIC, (ConfigEntry(key, value),), ())
            body = postcard.encode(ProposeRequest(encode_command(command)))
        else:
            op = KvOp(cid, c.next_op, "get", key)
            body = ReadRequest(key)
        c.current = HistOp(op, call=sim.events)
        sim.note(f"client {cid} -> node {c.target}: {op.kind} {key} {op.value}")
        sim.send_rpc(Rpc(cid, c.target, c.req_id, body, peer=self._forwarder(cid)))
        sim.schedule(cfg.client_timeout_ms, "kv_timeout", (cid, c.req_id))

    def kv_timeout(self, cid: int, req_id: int) -> None:
        c = self._clients[cid - CLIENT_BASE - 1]
        if c.current is None or req_id != c.req_id:
            return
        if c.current.op.kind == "put":
            self.history.append(c.current)  # outcome unknown: ret stays None
        c.current = None
        c.target = self.sim.rng.randrange(1, self.sim.ccfg.nodes + 1)
        self.sim.schedule(1, "kv_next", cid)

    def _kv_reply(self, rpc: Rpc) -> None:
        c = self._clients[rpc.dst - CLIENT_BASE - 1]
        h = c.current
        if h is None or rpc.req_id != c.req_id:
            return
        c.current = None
        sim = self.sim
        hint = 0
        if isinstance(rpc.body, ReadReply):
            if rpc.body.ok:
                h.ret, h.result = sim.events, rpc.body.value
                self.history.append(h)
                self.ok += 1
            hint = rpc.body.hint if not rpc.body.ok else c.target
        else:
            answer = _decode(rpc)
            assert answer is not None
            if answer.error_code == NONE:
                h.ret, h.result = sim.events, True
                self.history.append(h)
                self.ok += 1
                hint = c.target
            else:
                if rpc.proposed and answer.error_code == NOT_CONTROLLER:
                    # in the log, then lost track of: it may still apply
                    self.history.append(h)
                hint = answer.controller if answer.controller > 0 else 0
        c.target = hint if hint > 0 else sim.rng.randrange(1, sim.ccfg.nodes + 1)
        sim.schedule(sim.rng.randrange(1, 30) if hint else sim.rng.randrange(30, 120),
                     "kv_next", c.id)

    def on_reply(self, rpc: Rpc) -> None:
        if rpc.dst == CLIENT_BASE:
            self._admin_reply(rpc)
        else:
            self._kv_reply(rpc)
