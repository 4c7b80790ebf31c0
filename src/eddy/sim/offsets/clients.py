"""The offsets workload of the whole-cluster simulation: clients committing offsets
(OffsetCommit, generation -1: "simple" groups) and fetching them (OffsetFetch) through the
node they believe is the group coordinator. Each (group, topic, partition) is a register:
a commit writes it, a fetch reads it (-1, no offset committed, reads as None); the history
goes to the Wing-Gong check (``check_history``).

A client has one request in flight. NOT_COORDINATOR sends it to the hinted node (the
offsets group's leader as the answering node knows it, what FindCoordinator would say),
else to a random one; now and then (``offsets_wander``) a request goes to a random node,
as from a client whose FindCoordinator answer came from another node than its peers':
clients then disagree on the coordinator while it moves. A commit whose answer is an
error after its records went into the log, or that got no answer, has an unknown outcome:
it may take effect at any point after it was sent, or never. Requests cross the network
like the others (lost, delayed, reordered; never duplicated).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from eddy.cluster.raft.sim.kv import HistOp, KvOp
from eddy.sim.clients import RegisterClient
from eddy.sim.node import (
    CLIENT_BASE,
    CommitRequest,
    FetchRequest,
    OffsetsReply,
    Rpc,
)

if TYPE_CHECKING:
    from eddy.sim.cluster import ClusterSim

#: offsets clients' ids start here (the key-value clients' are just above CLIENT_BASE)
OFFSETS_CLIENT_BASE = CLIENT_BASE + 100
TOPIC = "orders"


def register(group: str, partition: int) -> str:
    return f"{group}/{TOPIC}-{partition}"


@dataclass(eq=False)
class OffsetsWorkload:
    sim: ClusterSim
    history: list[HistOp] = field(default_factory=list)
    ok: int = 0
    commits_ok: int = 0
    fetched: int = 0  # fetches that found an offset
    not_coordinator: int = 0
    _clients: list[RegisterClient] = field(default_factory=list)

    def start(self) -> None:
        sim, cfg, r = self.sim, self.sim.ccfg, self.sim.rng
        self._clients = [RegisterClient(OFFSETS_CLIENT_BASE + c, r.randrange(1, cfg.nodes + 1))
                         for c in range(1, cfg.offsets_clients + 1)]
        for c in self._clients:
            sim.schedule(r.randrange(200, 600), "oc_next", c.id)

    def _client(self, cid: int) -> RegisterClient:
        return self._clients[cid - OFFSETS_CLIENT_BASE - 1]

    def _stop_ms(self) -> int:
        cfg = self.sim.ccfg
        return cfg.duration_ms + cfg.settle_ms // 2

    def next(self, cid: int) -> None:
        sim, cfg = self.sim, self.sim.ccfg
        c = self._client(cid)
        if sim.now >= self._stop_ms() or c.next_op >= cfg.max_ops_per_client:
            return
        r = sim.rng
        c.next_op += 1
        group = cfg.offsets_groups[r.randrange(len(cfg.offsets_groups))]
        partition = r.randrange(cfg.offsets_partitions)
        key = register(group, partition)
        c.req_id = sim.next_req_id()
        if r.random() < cfg.offsets_wander:
            c.target = r.randrange(1, cfg.nodes + 1)
        body: CommitRequest | FetchRequest
        if r.random() < 0.5:
            offset = 1000 * (cid - OFFSETS_CLIENT_BASE) + c.next_op
            op = KvOp(cid, c.next_op, "put", key, str(offset))
            body = CommitRequest(group, TOPIC, partition, offset)
        else:
            op = KvOp(cid, c.next_op, "get", key)
            body = FetchRequest(group, TOPIC, partition)
        c.current = HistOp(op, call=sim.events)
        sim.note(f"client {cid} -> node {c.target}: {'commit' if op.kind == 'put' else 'fetch'}"
                 f" {key} {op.value}")
        sim.send_rpc(Rpc(cid, c.target, c.req_id, body))
        sim.schedule(cfg.client_timeout_ms, "oc_timeout", (cid, c.req_id))

    def timeout(self, cid: int, req_id: int) -> None:
        c = self._client(cid)
        if c.current is None or req_id != c.req_id:
            return
        if c.current.op.kind == "put":
            self.history.append(c.current)  # outcome unknown: ret stays None
        c.current = None
        c.target = self.sim.rng.randrange(1, self.sim.ccfg.nodes + 1)
        self.sim.schedule(1, "oc_next", cid)

    def on_reply(self, rpc: Rpc) -> None:
        c = self._client(rpc.dst)
        h = c.current
        body = rpc.body
        if h is None or rpc.req_id != c.req_id or not isinstance(body, OffsetsReply):
            return
        c.current = None
        sim = self.sim
        if body.error == 0:
            h.ret = sim.events
            if h.op.kind == "put":
                h.result = True
                self.commits_ok += 1
            else:
                h.result = str(body.offset) if body.offset >= 0 else None
                self.fetched += body.offset >= 0
            self.history.append(h)
            self.ok += 1
            hint = c.target
        else:
            self.not_coordinator += 1
            if h.op.kind == "put" and rpc.proposed:
                self.history.append(h)  # in the log, then failed: it may still apply
            hint = body.hint
        c.target = hint if hint > 0 else sim.rng.randrange(1, sim.ccfg.nodes + 1)
        sim.schedule(sim.rng.randrange(1, 30) if hint else sim.rng.randrange(30, 120),
                     "oc_next", c.id)
