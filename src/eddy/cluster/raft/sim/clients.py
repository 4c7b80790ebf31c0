"""The simulation's clients: each runs one key-value operation at a time through whichever
node it believes leads, follows leader hints, retries refused proposals, and gives up on an
operation after a timeout (its outcome is then unknown to the linearizability check)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from eddy.cluster.raft.sim.kv import HistOp, KvOp

if TYPE_CHECKING:
    from eddy.cluster.raft.sim.network import Sim, SimConfig


@dataclass(slots=True)
class _Client:
    id: int
    target: int
    next_op: int = 0
    issued: int = 0
    current: HistOp | None = None
    last_seen: str | None = None


class ClientPool:
    def __init__(self, sim: Sim, cfg: SimConfig) -> None:
        self.sim = sim
        self.cfg = cfg
        self.history: list[HistOp] = []
        self.ok = 0
        self._clients = [_Client(c, sim.rng.randrange(1, cfg.nodes + 1))
                         for c in range(1, cfg.clients + 1)]
        self._stop_ms = cfg.duration_ms + cfg.settle_ms - 1_200

    def start(self) -> None:
        for c in self._clients:
            self.sim.schedule(self.sim.rng.randrange(300), "client_next", c.id)

    def _delay(self) -> int:
        return 1 + self.sim.rng.randrange(self.cfg.max_delay_ms)

    def event(self, kind: str, payload: Any) -> None:
        if kind == "client_next":
            self._issue(self._clients[payload - 1])
        elif kind == "client_arrive":
            cid, op_id, node, data = payload
            hint = self.sim.propose(node, cid, op_id, data)
            if hint is not None:
                self.sim.schedule(self._delay(), "client_redirect", (cid, op_id, hint))
        elif kind == "client_redirect":
            cid, op_id, hint = payload
            self._redirect(self._clients[cid - 1], op_id, hint)
        elif kind == "client_reply":
            cid, op_id, ok, result = payload
            self._reply(self._clients[cid - 1], op_id, ok, result)
        elif kind == "client_timeout":
            cid, op_id = payload
            self._timeout(self._clients[cid - 1], op_id)
        else:
            raise ValueError(f"unknown event {kind}")

    def reply(self, cid: int, op_id: int, ok: bool, result: object) -> None:
        """From a node that applied (ok) or lost (not ok) the client's entry."""
        self.sim.schedule(self._delay(), "client_reply", (cid, op_id, ok, result))

    def _issue(self, c: _Client) -> None:
        sim = self.sim
        if sim.now >= self._stop_ms or c.issued >= self.cfg.max_ops_per_client:
            return
        r = sim.rng
        c.next_op += 1
        c.issued += 1
        key = f"k{r.randrange(self.cfg.keys)}"
        roll = r.random()
        value = f"{c.id}.{c.next_op}"
        if roll < 0.4:
            op = KvOp(c.id, c.next_op, "put", key, value)
        elif roll < 0.8:
            op = KvOp(c.id, c.next_op, "get", key)
        else:
            op = KvOp(c.id, c.next_op, "cas", key, value, c.last_seen)
        c.current = HistOp(op, call=sim.events)
        sim.note(f"client {c.id} -> node {c.target}: {op.kind} {key}")
        sim.schedule(self._delay(), "client_arrive", (c.id, op.op_id, c.target, op.encode()))
        sim.schedule(self.cfg.client_timeout_ms, "client_timeout", (c.id, op.op_id))

    def _redirect(self, c: _Client, op_id: int, hint: int) -> None:
        if c.current is None or c.current.op.op_id != op_id:
            return
        c.current = None  # refused: it never entered the log
        r = self.sim.rng
        c.target = hint if hint else r.randrange(1, self.cfg.nodes + 1)
        self.sim.schedule(r.randrange(5, 40) if hint else r.randrange(50, 150), "client_next",
                          c.id)

    def _reply(self, c: _Client, op_id: int, ok: bool, result: object) -> None:
        h = c.current
        if h is None or h.op.op_id != op_id:
            return
        c.current = None
        if ok:
            h.ret, h.result = self.sim.events, result
            self.history.append(h)
            self.ok += 1
            if h.op.kind == "get":
                c.last_seen = result if isinstance(result, str) else None
            elif h.op.kind == "put" or result is True:
                c.last_seen = h.op.value
        # not ok: another entry took its index, so it never applies: just go on
        self.sim.schedule(self.sim.rng.randrange(1, 30), "client_next", c.id)

    def _timeout(self, c: _Client, op_id: int) -> None:
        h = c.current
        if h is None or h.op.op_id != op_id:
            return
        c.current = None
        self.history.append(h)  # outcome unknown: ret stays None
        c.target = self.sim.rng.randrange(1, self.cfg.nodes + 1)
        self.sim.schedule(1, "client_next", c.id)
