"""The leader's half of ``RaftNode``: progress per follower, appends and snapshots, the
commit rule, heartbeats, check-quorum, leadership transfer and read-index. A mixin: the
state it reads (``log``, ``term``, ``voters``...) lives on ``RaftNode``."""

from __future__ import annotations

import random
from abc import abstractmethod

from eddy.cluster.raft.log import RaftLog, entry_size
from eddy.cluster.raft.messages import (
    AppendEntries,
    AppendResponse,
    Heartbeat,
    HeartbeatResponse,
    InstallSnapshot,
    RaftMessage,
    RaftMessageError,
    TimeoutNow,
)
from eddy.cluster.raft.progress import Progress, ProgressState
from eddy.cluster.raft.ready import NotLeader, ProposalDropped, RaftConfig, ReadState, Role
from eddy.cluster.raft.types import ENTRY_NOOP, Entry, Snapshot


class Replication:
    # -- RaftNode's state, used here -------------------------------------------------------
    id: int
    config: RaftConfig
    rng: random.Random
    log: RaftLog
    term: int
    role: Role
    leader: int
    voters: frozenset[int]
    learners: frozenset[int]
    _now: int
    _snapshot: Snapshot | None
    _request_snapshot: bool
    _leader_heard_ms: int | None

    @abstractmethod
    def _send(self, msg: RaftMessage) -> None: ...

    @abstractmethod
    def _become_follower(self, term: int, leader: int) -> None: ...

    @abstractmethod
    def _quorum(self) -> int: ...

    # -- state -----------------------------------------------------------------------------
    def _init_replication(self) -> None:
        self._prs: dict[int, Progress] = {}
        self._pending_conf_index = 0
        self._transferee = 0
        self._transfer_deadline = 0
        self._hb_deadline = 0
        self._cq_deadline = 0
        self._read_states: list[ReadState] = []
        self._pending_reads: dict[bytes, tuple[int, set[int]]] = {}  # in arrival order

    def progress(self, peer: int) -> Progress | None:
        """The leader's view of ``peer`` (None on a non-leader)."""
        return self._prs.get(peer)

    def _new_progress(self) -> Progress:
        c = self.config
        return Progress(self.log.last_index() + 1, c.max_inflight, c.max_inflight_bytes)

    def _start_leading(self) -> None:
        self._prs = {p: self._new_progress() for p in self.voters | self.learners}
        self._prs[self.id].match = self.log.stable_last_index()
        self._hb_deadline = self._now + self.config.heartbeat_ms
        self._cq_deadline = self._now + self.config.election_timeout_ms
        self._transferee = 0
        self._pending_reads = {}
        # the no-op commits the entries of earlier terms; conf changes wait for it
        self._pending_conf_index = self._append_own(ENTRY_NOOP, b"")

    def _stop_leading(self) -> None:
        self._prs = {}
        self._transferee = 0
        self._pending_reads = {}

    def _append_own(self, kind: int, data: bytes) -> int:
        index = self.log.last_index() + 1
        self.log.append([Entry(self.term, index, kind, data)])
        self._bcast_append()
        return index

    # -- time ------------------------------------------------------------------------------
    def _leader_tick(self, timers: bool = True, now_ms: int | None = None) -> None:
        """Heartbeats (due at ``now_ms``, default: now); with ``timers``, check-quorum and
        the transfer's deadline too."""
        c = self.config
        now = self._now if now_ms is None else now_ms
        if now >= self._hb_deadline:
            self._hb_deadline = now + c.heartbeat_ms
            self._bcast_heartbeat(next(reversed(self._pending_reads), b""))  # etcd's rule
        if not timers:
            return
        if self._now >= self._cq_deadline:
            self._cq_deadline = self._now + c.election_timeout_ms
            if c.check_quorum:
                active = sum(1 for v in self.voters if v == self.id
                             or (v in self._prs and self._prs[v].recent_active))
                for pr in self._prs.values():
                    pr.recent_active = False
                if active < self._quorum():
                    self._become_follower(self.term, 0)  # cut off from a quorum: step down
                    return
                self._leader_heard_ms = self._now
        if self._transferee and self._now >= self._transfer_deadline:
            self._transferee = 0  # the transfer did not happen in time: take proposals again

    def _pause_leader_timers(self, ms: int) -> None:
        self._cq_deadline += ms
        self._transfer_deadline += ms

    # -- sending ---------------------------------------------------------------------------
    def _send_append(self, to: int, send_if_empty: bool = True) -> bool:
        pr = self._prs[to]
        if pr.is_paused():
            return False
        c = self.config
        prev = pr.next - 1
        prev_term = self.log.term(prev)
        ents = None
        if prev_term is not None:
            ents = self.log.entries(pr.next, pr.next + c.max_msg_entries, c.max_msg_bytes)
        if prev_term is None or ents is None:
            return self._send_snapshot(to, pr)
        if not ents and not send_if_empty:
            return False
        self._send(AppendEntries(c.group, self.id, to, self.term, prev, prev_term, tuple(ents),
                                 self.log.committed))
        pr.sent(prev + len(ents), sum(entry_size(e) for e in ents), len(ents))
        return True

    def _send_snapshot(self, to: int, pr: Progress) -> bool:
        if not pr.recent_active:
            return False
        snap = self._snapshot
        if snap is None or snap.meta.index < self.log.first_index() - 1:
            self._request_snapshot = True  # the driver makes one: compact(applied, data)
            return False
        self._send(InstallSnapshot(self.config.group, self.id, to, self.term, snap))
        pr.become_snapshot(snap.meta.index)
        return True

    def _bcast_append(self) -> None:
        for peer in self._prs:
            if peer != self.id:
                self._send_append(peer)

    def _bcast_heartbeat(self, ctx: bytes) -> None:
        for peer, pr in self._prs.items():
            if peer != self.id:
                commit = min(pr.match, self.log.committed)
                self._send(Heartbeat(self.config.group, self.id, peer, self.term, commit, ctx))

    # -- commit ----------------------------------------------------------------------------
    def _maybe_commit(self) -> bool:
        """Commit the highest index a quorum of voters holds, if it is of this term
        (Raft §5.4.2: entries of earlier terms commit only under one of ours)."""
        q = self._quorum()
        matches = sorted((self._prs[v].match for v in self.voters if v in self._prs),
                         reverse=True)
        if len(matches) < q:
            return False
        mci = matches[q - 1]
        if mci > self.log.committed and self.log.term(mci) == self.term:
            self.log.committed = mci
            return True
        return False

    def _self_persisted(self) -> None:
        pr = self._prs.get(self.id)
        if pr is not None:
            pr.maybe_update(self.log.stable_last_index())
        if self._maybe_commit():
            self._bcast_append()

    def _conf_changed(self) -> None:
        members = self.voters | self.learners
        for peer in [p for p in self._prs if p not in members]:
            del self._prs[peer]
        if self.id not in self.voters:
            self._become_follower(self.term, 0)  # removed (or demoted): stop leading
            return
        for peer in members - self._prs.keys():
            self._prs[peer] = self._new_progress()
            self._send_append(peer)
        if self._transferee not in self.voters:
            self._transferee = 0
        if self._maybe_commit():
            self._bcast_append()

    # -- responses -------------------------------------------------------------------------
    def _leader_step(self, m: RaftMessage) -> None:
        pr = self._prs.get(m.src)
        if pr is None:
            return
        if isinstance(m, AppendResponse):
            pr.recent_active = True
            self._on_append_response(m, pr)
        elif isinstance(m, HeartbeatResponse):
            pr.recent_active = True
            pr.probe_sent = False
            if pr.state == ProgressState.REPLICATE and pr.inflights.full():
                # as etcd: a full window whose appends were all lost would otherwise stay
                # full for ever (no answer frees it); one slot lets an append through, and
                # its rejection sends the follower back to probing
                pr.inflights.free_first_one()
            if pr.match < self.log.last_index():
                self._send_append(m.src)
            if m.ctx:
                self._ack_read(m.ctx, m.src)

    def _on_append_response(self, m: AppendResponse, pr: Progress) -> None:
        if m.reject:
            hint = m.hint_index
            if m.hint_term > 0:
                hint, _ = self.log.find_conflict_by_term(m.hint_index, m.hint_term)
            if pr.maybe_decrease(m.index, hint):
                if pr.state == ProgressState.REPLICATE:
                    pr.become_probe()
                self._send_append(m.src)
            return
        if m.index > self.log.last_index():
            raise RaftMessageError("AppendResponse.index", f"{m.index} is past the leader's "
                                   f"last index {self.log.last_index()}")
        was_paused = pr.is_paused()
        if not pr.maybe_update(m.index):
            return
        if pr.state == ProgressState.PROBE:
            pr.become_replicate()
        elif pr.state == ProgressState.SNAPSHOT and pr.match >= pr.pending_snapshot:
            pr.become_probe()
            pr.become_replicate()
        elif pr.state == ProgressState.REPLICATE:
            pr.inflights.free_to(m.index)
        if self._maybe_commit():
            self._bcast_append()
        elif was_paused:
            self._send_append(m.src)
        while self._send_append(m.src, send_if_empty=False):
            pass
        if m.src == self._transferee and pr.match == self.log.last_index():
            self._send(TimeoutNow(self.config.group, self.id, m.src, self.term))

    # -- driver inputs (leader side) -------------------------------------------------------
    def transfer_leadership(self, to: int) -> None:
        """Hand leadership to voter ``to``: catch it up, then TimeoutNow. Proposals are
        refused until it happens or an election timeout passes."""
        if self.role != Role.LEADER:
            raise NotLeader(self.leader)
        if to == self.id or to == self._transferee:
            return
        if to not in self.voters:
            raise ValueError(f"node {to} is not a voter")
        self._transferee = to
        self._transfer_deadline = self._now + self.config.election_timeout_ms
        if self._prs[to].match == self.log.last_index():
            self._send(TimeoutNow(self.config.group, self.id, to, self.term))
        else:
            self._send_append(to)

    def read_index(self, ctx: bytes) -> None:
        """Linearizable read: once a quorum confirms this node still leads, a
        ``ReadState(index, ctx)`` comes out in a Ready; serve the read once ``index`` is
        applied. ``ctx`` must be non-empty and unique among pending reads."""
        if self.role != Role.LEADER:
            raise NotLeader(self.leader)
        if not ctx:
            raise ValueError("empty read ctx")
        if self.log.term(self.log.committed) != self.term:
            raise ProposalDropped("the leader has not committed an entry of its term yet")
        if len(self.voters) == 1:
            self._read_states.append(ReadState(self.log.committed, ctx))
            return
        if ctx in self._pending_reads or len(self._pending_reads) >= \
                self.config.max_pending_reads:
            raise ProposalDropped("read ctx pending already, or too many reads pending")
        self._pending_reads[ctx] = (self.log.committed, {self.id})
        self._bcast_heartbeat(ctx)

    def _ack_read(self, ctx: bytes, peer: int) -> None:
        pending = self._pending_reads.get(ctx)
        if pending is None or peer not in self.voters:
            return
        pending[1].add(peer)
        if len(pending[1] & self.voters) < self._quorum():
            return
        while self._pending_reads:  # this one and every earlier one are confirmed
            key = next(iter(self._pending_reads))
            index, _ = self._pending_reads.pop(key)
            self._read_states.append(ReadState(index, key))
            if key == ctx:
                break

    def report_unreachable(self, peer: int) -> None:
        """The transport failed to deliver to ``peer``: stop pipelining to it."""
        pr = self._prs.get(peer)
        if pr is not None and pr.state == ProgressState.REPLICATE:
            pr.become_probe()

    def report_snapshot(self, peer: int, ok: bool) -> None:
        """The transport's verdict on an InstallSnapshot sent to ``peer``."""
        pr = self._prs.get(peer)
        if pr is None or pr.state != ProgressState.SNAPSHOT:
            return
        if not ok:
            pr.pending_snapshot = 0
        pr.become_probe()
        pr.probe_sent = True  # wait for the next heartbeat response before probing
