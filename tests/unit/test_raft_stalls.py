"""Stall-aware Raft (issue 28): a node's own stall (GC, CPU starvation, a long step on its
loop, SIGSTOP) is not blamed on the others. In the simulation a paused node does not run;
what is sent to it waits, and when it resumes its timers come first (the worst order).
Directed runs pause a follower, the leader or every node at seed 004's 250/299 ms timings
and at the defaults, and check who led, in which term, and that no node lost its leader;
a leader that was really gone (paused past the timeouts, or cut off) is still replaced,
and once back it neither commits nor serves a read of its old term. The core's own rules
(a stall counts as ``stall_ms``, no election for a heartbeat interval after it, a node
that only runs in stalls still times out) are checked on a ``RaftNode`` alone."""

from __future__ import annotations

import random
from typing import Any

from eddy.cluster.raft.core import RaftNode
from eddy.cluster.raft.memstore import MemoryLogStore
from eddy.cluster.raft.ready import RaftConfig, Ready, Role, SoftState
from eddy.cluster.raft.sim.lockstep import LockstepCluster
from eddy.cluster.raft.sim.network import Sim, SimConfig, SimNode
from eddy.cluster.raft.types import ConfState
from eddy.cluster.settings import ClusterSettings

#: seed 004's timings (a node's defaults before issue 28, still the core's)
SEED_004 = RaftConfig(heartbeat_ms=250, election_timeout_ms=299)
#: a node's defaults
DEFAULTS = RaftConfig(heartbeat_ms=ClusterSettings().raft_heartbeat_interval_ms,
                      election_timeout_ms=ClusterSettings().raft_election_timeout_ms)


class _Watched(Sim):
    """Records every node's soft state changes (when, which node, what)."""

    def __init__(self, seed: int, config: SimConfig) -> None:
        self.softs: list[tuple[int, int, SoftState]] = []
        super().__init__(seed, config)

    def _observe(self, raft: RaftNode, rd: Ready) -> None:
        super()._observe(raft, rd)
        if rd.soft_state is not None:
            self.softs.append((self.now, raft.id, rd.soft_state))

    def changes_after(self, ms: int) -> list[tuple[int, int, SoftState]]:
        return [s for s in self.softs if s[0] >= ms]


def _quiet(raft: RaftConfig, duration_ms: int = 7_000) -> SimConfig:
    """No random faults, no loss: only the pauses a test schedules (clients write on)."""
    return SimConfig(nodes=3, duration_ms=duration_ms, settle_ms=1_500, faults=False,
                     drop=0.0, duplicate=0.0, raft=raft)


def _paused_run(seed: int, raft: RaftConfig, who: Any, ms: int,
                at: tuple[int, ...] = (2_000, 3_500, 5_000)) -> _Watched:
    sim = _Watched(seed, _quiet(raft))
    for t in at:
        sim.schedule(t, "pause", (who, ms))
    result = sim.run()
    assert result.failure is None, (seed, result.failure)
    assert sim.pauses == len(at) and result.ops_ok > 0
    return sim


def test_a_stalled_follower_reads_what_waited_before_its_election_timer_fires() -> None:
    """At 250/299 ms a follower paused 600 ms finds its election deadline long past when
    it resumes; it reads the heartbeats that waited instead of campaigning."""
    for seed in range(10):
        sim = _paused_run(seed, SEED_004, "follower", 600)
        assert sim.changes_after(2_000) == [], (seed, sim.changes_after(2_000))
        assert sim.elections == 1, seed


def test_a_stalled_machine_elects_no_one() -> None:
    """Every node paused at once (a stalled machine or VM): when they resume each one's
    timeouts are past, yet nobody was heard from because nobody ran; no election."""
    for seed in range(10):
        sim = _paused_run(seed, SEED_004, [1, 2, 3], 600)
        assert sim.changes_after(2_000) == [], (seed, sim.changes_after(2_000))
        assert sim.elections == 1, seed


def test_seed_004_timings_replace_a_leader_paused_600_ms_the_defaults_do_not() -> None:
    """The leader's pause is no stall of its followers: to them it is silent, and at
    250/299 ms 600 ms of silence is past their timeouts, so they elect another (a leader
    must run to lead). The defaults (``RaftConfig``) ride such pauses out: their
    election timeout leaves a leader a longer silence before it is replaced."""
    churned = 0
    for seed in range(6):
        old = _paused_run(seed, SEED_004, "leader", 600)
        churned += old.elections > 1
        calm = _paused_run(seed, DEFAULTS, "leader", 600)
        assert calm.changes_after(2_000) == [], (seed, calm.changes_after(2_000))
        assert calm.elections == 1, seed
    assert churned >= 4


class _ResumedLeader(_Watched):
    """The leader is paused past every timeout at 2 s; when it resumes (its tick first,
    still believing it leads) it is asked for a write and a linearizable read."""

    def __init__(self, seed: int, raft: RaftConfig, pause_ms: int) -> None:
        super().__init__(seed, _quiet(raft))
        self.schedule(2_000, "pause", ("leader", pause_ms))
        self.old = 0
        self.old_term = 0
        self.resumed_at = 0
        self.proposed: int | None = None
        self.reads: list[bytes] = []  # read contexts the old leader confirmed

    def pause(self, ids: list[int], ms: int) -> None:
        super().pause(ids, ms)
        self.old = ids[0]
        raft = self.nodes[self.old].raft
        assert raft is not None and raft.role == Role.LEADER
        self.old_term = raft.term

    def _tick(self, i: int, incarnation: int) -> None:
        super()._tick(i, incarnation)
        raft = self.nodes[i].raft
        if i != self.old or raft is None or self.resumed_at or raft.stall_clock.stalls == 0:
            return
        self.resumed_at = self.now
        assert raft.role == Role.LEADER and raft.term == self.old_term  # nothing read yet
        self.proposed = raft.propose(b"from a leader that was away")
        raft.read_index(b"read after resuming")
        self.process(i)

    def _apply(self, node: SimNode, rd: Ready) -> None:
        super()._apply(node, rd)
        if node.id == self.old:
            self.reads += [rs.ctx for rs in rd.read_states]


def test_a_leader_paused_past_the_timeouts_is_replaced_and_steps_down_once_back() -> None:
    for raft in (SEED_004, DEFAULTS):
        for seed in range(6):
            sim = _ResumedLeader(seed, raft, pause_ms=4 * raft.election_timeout_ms)
            result = sim.run()
            assert result.failure is None, (seed, result.failure)
            assert sim.resumed_at and sim.proposed is not None, seed
            # the others elected a leader of a later term while it was away
            new_terms = [s for s in sim.softs if s[0] < sim.resumed_at
                         and s[2].role == Role.LEADER and s[1] != sim.old]
            assert new_terms, seed
            # back, it steps down at the first answers to its heartbeats
            down = [s for s in sim.changes_after(sim.resumed_at)
                    if s[1] == sim.old and s[2].role == Role.FOLLOWER]
            assert down and down[0][0] - sim.resumed_at <= 2 * sim.cfg.max_delay_ms, seed
            # what it took meanwhile: its write never commits in its old term, its read
            # is never confirmed
            committed = sim.checker.committed.get(sim.proposed)
            assert committed is None or committed[0] != sim.old_term, seed
            assert sim.reads == [], seed


def test_a_leader_cut_off_is_still_replaced() -> None:
    """Nobody stalls: a leader cut off both ways is replaced within the election timeouts,
    and its check-quorum makes it step down on its side."""
    raft = DEFAULTS
    for seed in range(6):
        sim = _Watched(seed, _quiet(raft))
        sim.schedule(2_000, "isolate", "leader")
        result = sim.run()
        assert result.failure is None, (seed, result.failure)
        (at, old), = sim.isolated
        led = [s for s in sim.changes_after(at) if s[2].role == Role.LEADER and s[1] != old]
        assert led and led[0][0] - at <= 2 * raft.election_timeout_ms + 200, seed
        down = [s for s in sim.changes_after(at) if s[1] == old and s[2].role != Role.LEADER]
        assert down and down[0][0] - at <= 2 * raft.election_timeout_ms + 100, seed


# -- the core alone --------------------------------------------------------------------------
def _follower(config: RaftConfig) -> RaftNode:
    store = MemoryLogStore(ConfState(voters=(1, 2, 3)))
    node = RaftNode(1, config, random.Random(1), store, now_ms=0)
    node.tick(0)
    return node


def test_after_a_stall_no_election_starts_for_a_heartbeat_interval() -> None:
    for config in (SEED_004, DEFAULTS):
        node = _follower(config)
        node.tick(60_000)  # a minute stopped: far past any election timeout
        clock = node.stall_clock
        assert (clock.stalls, clock.skipped_ms) == (1, 60_000 - config.stall_ms)
        now = 60_000
        while node.role == Role.FOLLOWER:  # nothing heard since: it times out, on time
            assert not node.has_ready()
            now += 10
            node.tick(now)
            assert now - 60_000 <= 2 * config.election_timeout_ms
        assert now - 60_000 >= config.heartbeat_ms  # what arrived was read first
        assert node.role == Role.PRE_CANDIDATE and node.stall_clock.stalls == 1


def test_a_node_that_only_runs_in_stalls_still_times_out() -> None:
    """Every tick comes after a stall: each counts ``stall_ms`` and holds the timers at
    most once per election timeout, so a leader's silence is still found out."""
    for config in (SEED_004, DEFAULTS):
        node = _follower(config)
        now, ticks = 0, 0
        while node.role == Role.FOLLOWER:
            now += 3 * config.stall_ms
            ticks += 1
            node.tick(now)
            assert ticks <= 2 * config.election_timeout_ms // config.stall_ms + 4
        assert node.stall_clock.stalls == ticks


def test_a_clock_stepping_back_counts_as_no_time_and_no_stall() -> None:
    node = _follower(DEFAULTS)
    node.tick(5_000)
    node.tick(1_000)
    node.tick(5_010)
    assert node.stall_clock.stalls == 1  # the first jump only


def test_after_leader_gone_a_turned_down_campaign_is_tried_again_soon() -> None:
    """Node 2 found the leader's process gone, node 3 not (busy, say): node 3 still holds
    its lease and ignores node 2's first campaign. Node 2 tries again every quarter to
    half an election timeout, not one to two, so it wins as soon as node 3's lease ends."""
    for seed in range(20):
        c = LockstepCluster(3, DEFAULTS, seed=seed)
        c.elect(1)
        c.tick(300)
        c.crash(1)
        c.node(2).leader_gone(1)
        c.settle()
        assert c.node(2).role == Role.PRE_CANDIDATE and c.leader() is None
        waited = 0
        while c.leader() is None:
            c.tick(10)
            waited += 10
        et = DEFAULTS.election_timeout_ms
        assert waited <= et + et // 2, (seed, waited)
