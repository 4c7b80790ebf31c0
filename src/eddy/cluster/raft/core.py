"""``RaftNode``: the sans-IO Raft core (etcd-io/raft's shape: ``tick``/``step`` in,
``ready``/``advance`` out). No clock, no I/O: time comes in through ``tick(now_ms)``,
randomness from the injected ``random.Random``.

Features: elections with pre-vote and check-quorum (leader lease: a node that heard from
a leader within the minimum election timeout ignores vote requests), replication with flow
control (``progress``), commit by quorum of entries of the current term only, leadership
transfer (TimeoutNow), snapshots (``compact``; InstallSnapshot to a follower that needs
compacted entries), single-server membership changes and learners.

Membership changes follow etcd's **apply-time rule**: a ConfChange entry takes effect on a
node when that node applies it (``advance`` after the driver applied it). At most one is
pending: a leader accepts a new one only once the previous one is applied, and only after
it applied an entry of its own term (which closes the single-server change bug Ongaro
described in 2015). Each ConfChange entry carries the whole resulting membership, so
applying it is idempotent: a restarted node re-applying its log ends where it was.
"""

from __future__ import annotations

import random

from eddy.cluster.raft.log import RaftLog
from eddy.cluster.raft.messages import (
    CONF_ADD_LEARNER,
    CONF_ADD_VOTER,
    CONF_REMOVE_NODE,
    AppendEntries,
    AppendResponse,
    ConfChange,
    ConfChangeEntry,
    Heartbeat,
    HeartbeatResponse,
    InstallSnapshot,
    RaftMessage,
    RaftMessageError,
    RequestVote,
    TimeoutNow,
    VoteResponse,
    check_message,
    decode_conf_change,
    encode_conf_change,
)
from eddy.cluster.raft.ready import (
    ConfChangeError,
    NotLeader,
    ProposalDropped,
    RaftConfig,
    Ready,
    Role,
    SoftState,
)
from eddy.cluster.raft.replication import Replication
from eddy.cluster.raft.stall import StallClock
from eddy.cluster.raft.store import LogStore
from eddy.cluster.raft.types import (
    ENTRY_CONF_CHANGE,
    ENTRY_NORMAL,
    ConfState,
    Entry,
    HardState,
    Snapshot,
    SnapshotMeta,
)

_FROM_LEADER = (AppendEntries, Heartbeat, InstallSnapshot, TimeoutNow)


class RaftNode(Replication):
    def __init__(self, node_id: int, config: RaftConfig, rng: random.Random, store: LogStore,
                 *, now_ms: int = 0, applied: int | None = None) -> None:
        """``store`` shows what was persisted. ``applied``: the index the state machine
        already reflects (default: the snapshot's, as when it is rebuilt from it)."""
        if node_id <= 0:
            raise ValueError("node ids start at 1")
        hs, cs = store.initial_state()
        snap = store.snapshot_meta()
        self.id = node_id
        self.config = config
        self.rng = rng
        first_applied = snap.index if applied is None else applied
        if hs.commit > store.last_index():
            raise ValueError(f"stored commit index {hs.commit} is past the last stored entry "
                             f"{store.last_index()}: entries were lost")
        self.log = RaftLog(store, max(hs.commit, snap.index), first_applied)
        self.term = hs.term
        self.vote = hs.vote
        self.voters: frozenset[int] = frozenset(cs.voters)
        self.learners: frozenset[int] = frozenset(cs.learners)
        self.role = Role.FOLLOWER
        self.leader = 0
        self._now = now_ms
        self._election_deadline = 0
        self._leader_heard_ms: int | None = None
        self._retry_soon = False  # leader_gone: campaigns are tried again sooner
        self.stall_clock = StallClock(now_ms, config.stall_ms, config.heartbeat_ms,
                                config.election_timeout_ms)
        self._last_leader = 0  # the last leader this node followed
        self._votes: dict[int, bool] = {}
        self._snapshot: Snapshot | None = None  # the newest one we can send (compact/install)
        self._msgs: list[RaftMessage] = []
        self._msgs_after: list[RaftMessage] = []
        self._prev_hs = hs
        self._prev_cs = ConfState(tuple(sorted(self.voters)), tuple(sorted(self.learners)))
        self._prev_ss = SoftState(0, Role.FOLLOWER)
        self._in_ready = False
        self._request_snapshot = False
        self._init_replication()
        self._become_follower(self.term, 0)
        # just started, it campaigns a little sooner (etcd's initial election tick advance
        # in spirit): drawn in [heartbeat, heartbeat + election timeout); a live leader's
        # heartbeat comes first, and a pre-vote disturbs no one
        et = config.election_timeout_ms
        self._election_deadline = self._now + min(config.heartbeat_ms, et) + rng.randrange(et)

    # -- small queries ---------------------------------------------------------------------
    @property
    def commit(self) -> int:
        return self.log.committed

    @property
    def applied(self) -> int:
        return self.log.applied

    def promotable(self) -> bool:
        return self.id in self.voters

    def conf_state(self) -> ConfState:
        return ConfState(tuple(sorted(self.voters)), tuple(sorted(self.learners)))

    def hard_state(self) -> HardState:
        return HardState(self.term, self.vote, self.log.committed)

    def _quorum(self) -> int:
        return len(self.voters) // 2 + 1

    def _in_lease(self) -> bool:
        heard = self._leader_heard_ms
        return (self.config.check_quorum and self.leader != 0 and heard is not None
                and self._now - heard < self.config.election_timeout_ms)

    def _send(self, msg: RaftMessage) -> None:
        """Leader traffic (appends, heartbeats, snapshots, TimeoutNow) and pre-vote
        requests depend on nothing unpersisted: out at once. Everything else waits for the
        Ready's persistence (votes, responses)."""
        if (self.role == Role.LEADER and isinstance(msg, _FROM_LEADER)) or (
                isinstance(msg, RequestVote) and msg.pre_vote):
            self._msgs.append(msg)
        else:
            self._msgs_after.append(msg)

    # -- time ------------------------------------------------------------------------------
    def tick(self, now_ms: int) -> None:
        """Time passed: ``now_ms`` is this node's clock (a step back counts as no time).
        This node's own stalls do not count against the others (``stall.StallClock``)."""
        skipped = self.stall_clock.advance(now_ms)
        self._now = self.stall_clock.now
        if skipped:
            self._pause_timers(skipped)
        if self.role == Role.LEADER:
            self._leader_tick(timers=not self.stall_clock.holding)
        elif self.stall_clock.holding:
            return
        elif self._now >= self._election_deadline:
            if self.promotable():
                self._hup(transfer=False)
            else:
                self._reset_election_timer()

    def heartbeat_now(self, now_ms: int) -> list[RaftMessage]:
        """For a driver waiting on a Ready's writes: a leader's heartbeats, if due, to send
        at once. Only the heartbeat timer moves; nothing a Ready holds is touched."""
        if self.role != Role.LEADER or now_ms < self._hb_deadline:
            return []
        self._leader_tick(timers=False, now_ms=now_ms)
        out, self._msgs = self._msgs, []
        return out

    def _pause_timers(self, ms: int) -> None:
        """Move every timeout ``ms`` later: time this node did not run (why that is safe:
        ``stall``'s docstring). Not the lease: that one says whether a leader was heard
        lately, and none was meanwhile (a node that stalled grants votes no later)."""
        self._election_deadline += ms
        self._pause_leader_timers(ms)

    def leader_silence(self) -> tuple[int, int] | None:
        """(the leader this node last followed, ms since it last heard from it) while no
        other leader is known here; None when leading or when that lease was dropped."""
        if self.role == Role.LEADER or self._last_leader in (0, self.id) \
                or self._leader_heard_ms is None or self.leader not in (0, self._last_leader):
            return None
        return self._last_leader, self._now - self._leader_heard_ms

    def leader_gone(self, leader: int) -> None:
        """The driver found ``leader``'s process gone (nothing listens where it served):
        drop its lease, so this node grants (pre-)votes at once, and campaign soon. The
        survivors take turns a quarter election timeout apart, in node id order, whatever
        their timers said (random waits would often start two campaigns at once and split
        the votes), and a campaign turned down (a voter still in its lease) is tried again
        within half an election timeout, not one to two, until a leader is known. Only a
        hint: elections stay as safe as ever, and a leader still alive is followed again on
        its next message."""
        if self.role == Role.LEADER or self._last_leader != leader \
                or self.leader not in (0, leader):
            return
        self._leader_heard_ms = None
        self._retry_soon = True
        turn = sorted(self.voters - {leader}).index(self.id) if self.id in self.voters else 0
        self._election_deadline = self._now + turn * max(1, self.config.election_timeout_ms // 4)
        self.tick(self._now)  # the first in turn campaigns now

    def _reset_election_timer(self) -> None:
        et = self.config.election_timeout_ms
        if self._retry_soon:  # the leader is gone (leader_gone): [et/4, et/2)
            et = max(1, et // 4)
        self._election_deadline = self._now + et + self.rng.randrange(et)

    # -- role changes ----------------------------------------------------------------------
    def _become_follower(self, term: int, leader: int) -> None:
        if term != self.term:
            self.term, self.vote = term, 0
        was_leader = self.role == Role.LEADER
        self.role = Role.FOLLOWER
        self.leader = leader
        if leader:
            self._retry_soon = False
            self._leader_heard_ms = self._now
            self._last_leader = leader
        self._reset_election_timer()
        if was_leader:
            self._stop_leading()

    def _hup(self, transfer: bool) -> None:
        if not self.promotable():
            return
        if self.config.pre_vote and not transfer:
            self.role = Role.PRE_CANDIDATE
            self.leader = 0
            self._reset_election_timer()
            self._votes = {self.id: True}
            if len(self.voters) == 1:
                self._campaign(False)
                return
            self._request_votes(self.term + 1, pre_vote=True, transfer=False)
        else:
            self._campaign(transfer)

    def _campaign(self, transfer: bool) -> None:
        self.role = Role.CANDIDATE
        self.term += 1
        self.vote = self.id
        self.leader = 0
        self._reset_election_timer()
        self._votes = {self.id: True}
        if len(self.voters) == 1:
            self._become_leader()
            return
        self._request_votes(self.term, pre_vote=False, transfer=transfer)

    def _request_votes(self, term: int, pre_vote: bool, transfer: bool) -> None:
        li, lt = self.log.last_index(), self.log.last_term()
        for v in sorted(self.voters - {self.id}):
            self._send(RequestVote(self.config.group, self.id, v, term, li, lt, pre_vote,
                                   transfer))

    def _become_leader(self) -> None:
        self.role = Role.LEADER
        self.leader = self.id
        self._retry_soon = False
        self._leader_heard_ms = self._now
        self._start_leading()

    # -- messages --------------------------------------------------------------------------
    def step(self, msg: RaftMessage) -> None:
        """Feed one message from a peer. A malformed one raises ``RaftMessageError``."""
        check_message(msg, self.config.group, self.id)
        if msg.term > self.term:
            if isinstance(msg, RequestVote) and not msg.transfer and self._in_lease():
                return  # leader lease: a live leader is known, do not disrupt it
            if isinstance(msg, RequestVote) and msg.pre_vote:
                pass  # a pre-vote never changes our term
            elif isinstance(msg, VoteResponse) and msg.pre_vote and not msg.reject:
                pass  # granted pre-votes carry the future term: counted below
            else:
                self._become_follower(msg.term, msg.src if isinstance(msg, _FROM_LEADER) else 0)
        elif msg.term < self.term:
            if isinstance(msg, AppendEntries | Heartbeat) and (
                    self.config.check_quorum or self.config.pre_vote):
                # a stale leader (maybe cut off and back): tell it our term so it steps down
                self._send(AppendResponse(self.config.group, self.id, msg.src, self.term,
                                          0, True, 0, 0))
            elif isinstance(msg, RequestVote) and msg.pre_vote:
                self._send(VoteResponse(self.config.group, self.id, msg.src, self.term,
                                        True, True))
            return
        if isinstance(msg, RequestVote):
            self._on_vote_request(msg)
        elif isinstance(msg, VoteResponse):
            self._on_vote_response(msg)
        elif self.role == Role.LEADER:
            self._leader_step(msg)
        elif isinstance(msg, _FROM_LEADER):
            if self.role != Role.FOLLOWER or self.leader != msg.src:
                self._become_follower(msg.term, msg.src)
            self._follower_step(msg)

    def _on_vote_request(self, m: RequestVote) -> None:
        can_vote = (self.vote == m.src or (self.vote == 0 and self.leader == 0)
                    or (m.pre_vote and m.term > self.term))
        if can_vote and self.log.is_up_to_date(m.last_index, m.last_term):
            self._send(VoteResponse(self.config.group, self.id, m.src, m.term, m.pre_vote,
                                    False))
            if not m.pre_vote:
                self.vote = m.src
                self._reset_election_timer()
        else:
            self._send(VoteResponse(self.config.group, self.id, m.src, self.term, m.pre_vote,
                                    True))

    def _on_vote_response(self, m: VoteResponse) -> None:
        want = Role.PRE_CANDIDATE if m.pre_vote else Role.CANDIDATE
        if self.role != want or m.src not in self.voters:
            return
        self._votes.setdefault(m.src, not m.reject)
        granted = sum(1 for v, ok in self._votes.items() if ok and v in self.voters)
        rejected = sum(1 for v, ok in self._votes.items() if not ok and v in self.voters)
        if granted >= self._quorum():
            if m.pre_vote:
                self._campaign(False)
            else:
                self._become_leader()
        elif rejected > len(self.voters) - self._quorum():
            self._become_follower(self.term, 0)

    def _follower_step(self, m: RaftMessage) -> None:
        self._leader_heard_ms = self._now
        self._reset_election_timer()
        g = self.config.group
        if isinstance(m, AppendEntries):
            self._on_append(m)
        elif isinstance(m, Heartbeat):
            self.log.commit_to(m.commit)
            self._send(HeartbeatResponse(g, self.id, m.src, self.term, m.ctx))
        elif isinstance(m, InstallSnapshot):
            self._on_snapshot(m)
        elif isinstance(m, TimeoutNow):
            self._hup(transfer=True)

    def _on_append(self, m: AppendEntries) -> None:
        g = self.config.group
        if m.prev_index < self.log.committed:
            self._send(AppendResponse(g, self.id, m.src, self.term, self.log.committed, False,
                                      0, 0))
            return
        try:
            last_new = self.log.maybe_append(m.prev_index, m.prev_term, m.commit, m.entries)
        except ValueError as exc:
            raise RaftMessageError("AppendEntries.entries", str(exc)) from exc
        if last_new is not None:
            self._send(AppendResponse(g, self.id, m.src, self.term, last_new, False, 0, 0))
            return
        hint = min(m.prev_index, self.log.last_index())
        hint_index, hint_term = self.log.find_conflict_by_term(hint, m.prev_term)
        self._send(AppendResponse(g, self.id, m.src, self.term, m.prev_index, True,
                                  hint_index, hint_term))

    def _on_snapshot(self, m: InstallSnapshot) -> None:
        meta = m.snapshot.meta
        g = self.config.group
        if meta.index <= self.log.committed:
            pass  # old news
        elif self.log.match_term(meta.index, meta.term):
            self.log.commit_to(meta.index)  # we have it all: just move the commit forward
        else:
            self.log.restore(m.snapshot)
            self._snapshot = m.snapshot
            self._set_conf(frozenset(meta.conf.voters), frozenset(meta.conf.learners))
        # answer with the commit index: our last index may hold stale entries past the
        # leader's log
        self._send(AppendResponse(g, self.id, m.src, self.term, self.log.committed, False,
                                  0, 0))

    # -- driver inputs ---------------------------------------------------------------------
    def propose(self, data: bytes) -> int:
        """Append an application command; returns its index. It is committed when it shows
        up in ``committed_entries`` with this index and the term it was proposed in."""
        self._check_can_propose()
        return self._append_own(ENTRY_NORMAL, data)

    def propose_conf_change(self, change: ConfChange) -> int:
        self._check_can_propose()
        if self._pending_conf_index > self.log.applied:
            raise ProposalDropped("a membership change is pending")
        voters, learners = set(self.voters), set(self.learners)
        nid = change.node_id
        if nid <= 0:
            raise ConfChangeError(f"node id {nid}")
        if change.kind == CONF_ADD_VOTER:
            voters.add(nid)
            learners.discard(nid)
        elif change.kind == CONF_ADD_LEARNER:
            if nid in voters:
                raise ConfChangeError(f"node {nid} is a voter: remove it first")
            learners.add(nid)
        elif change.kind == CONF_REMOVE_NODE:
            voters.discard(nid)
            learners.discard(nid)
        else:
            raise ConfChangeError(f"unknown kind {change.kind}")
        if not voters:
            raise ConfChangeError("cannot remove the last voter")
        entry = ConfChangeEntry(change.kind, nid, tuple(sorted(voters)), tuple(sorted(learners)))
        index = self._append_own(ENTRY_CONF_CHANGE, encode_conf_change(entry))
        self._pending_conf_index = index
        return index

    def _check_can_propose(self) -> None:
        if self.role != Role.LEADER:
            raise NotLeader(self.leader)
        if self._transferee:
            raise ProposalDropped(f"leadership moving to {self._transferee}")

    def compact(self, index: int, data: bytes) -> Snapshot:
        """The state machine's encoding at ``index`` (== ``applied``). Returns the snapshot
        for the driver to keep and to compact its store with (``MemoryLogStore.compact``);
        the core sends it to followers that need compacted entries."""
        if index != self.log.applied:
            raise ValueError(f"snapshot index {index} is not the applied index "
                             f"{self.log.applied}")
        term = self.log.term(index)
        if term is None:
            raise ValueError(f"index {index} is already compacted")
        snap = Snapshot(SnapshotMeta(index, term, self.conf_state()), data)
        self._snapshot = snap
        self._request_snapshot = False
        return snap

    # -- ready / advance -------------------------------------------------------------------
    def has_ready(self) -> bool:
        return bool(self._msgs or self._msgs_after or self.log.unstable_entries()
                    or self.log.pending_snapshot is not None or self._read_states
                    or self._request_snapshot or self.hard_state() != self._prev_hs
                    or self.conf_state() != self._prev_cs
                    or SoftState(self.leader, self.role) != self._prev_ss
                    or (self.log.committed > self.log.applied))

    def ready(self) -> Ready | None:
        """The next batch of work, or None. Call ``advance`` with it before the next one."""
        if self._in_ready:
            raise RuntimeError("ready() again before advance()")
        if not self.has_ready():
            return None
        ss = SoftState(self.leader, self.role)
        hs, cs = self.hard_state(), self.conf_state()
        ents = tuple(self.log.unstable_entries())
        snap = self.log.pending_snapshot
        trunc = None
        if ents and snap is None and ents[0].index <= self.log.store.last_index():
            trunc = ents[0].index
        rd = Ready(
            soft_state=ss if ss != self._prev_ss else None,
            hard_state=hs if hs != self._prev_hs else None,
            conf_state=cs if cs != self._prev_cs else None,
            entries=ents, truncate_from=trunc, snapshot=snap,
            messages=tuple(self._msgs), persisted_messages=tuple(self._msgs_after),
            committed_entries=tuple(self.log.next_committed(self.config.max_apply_bytes)),
            read_states=tuple(self._read_states),
            request_snapshot=self._request_snapshot)
        self._msgs, self._msgs_after, self._read_states = [], [], []
        self._request_snapshot = False
        self._in_ready = True
        return rd

    def advance(self, rd: Ready) -> None:
        """The driver persisted, sent and applied ``rd``."""
        self._in_ready = False
        if rd.soft_state is not None:
            self._prev_ss = rd.soft_state
        if rd.hard_state is not None:
            self._prev_hs = rd.hard_state
        if rd.conf_state is not None:
            self._prev_cs = rd.conf_state
        if rd.snapshot is not None:
            self.log.snapshot_persisted(rd.snapshot.meta.index)
        if rd.entries:
            last = rd.entries[-1]
            self.log.stable_to(last.index, last.term)
        if rd.committed_entries:
            for e in rd.committed_entries:
                if e.kind == ENTRY_CONF_CHANGE:
                    self._apply_conf_entry(e)
            self.log.applied = max(self.log.applied, rd.committed_entries[-1].index)
        if self.role == Role.LEADER:
            self._self_persisted()

    def _apply_conf_entry(self, e: Entry) -> None:
        try:
            cc = decode_conf_change(e.data)
        except ValueError:
            return  # not ours to judge now: a committed entry is applied as a no-op
        self._set_conf(frozenset(cc.voters), frozenset(cc.learners))

    def _set_conf(self, voters: frozenset[int], learners: frozenset[int]) -> None:
        self.voters, self.learners = voters, learners
        if self.role == Role.LEADER:
            self._conf_changed()
        elif self.role != Role.FOLLOWER and not self.promotable():
            self._become_follower(self.term, 0)
