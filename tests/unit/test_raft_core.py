"""Raft core scenarios in the spirit of etcd-io/raft's tests, on a lock-step cluster."""

from __future__ import annotations

import random

import pytest

from eddy.cluster.raft.core import RaftNode
from eddy.cluster.raft.memstore import MemoryLogStore
from eddy.cluster.raft.messages import (
    CONF_ADD_LEARNER,
    CONF_ADD_VOTER,
    CONF_REMOVE_NODE,
    AppendEntries,
    AppendResponse,
    ConfChange,
    InstallSnapshot,
    RequestVote,
    TimeoutNow,
    VoteResponse,
)
from eddy.cluster.raft.ready import NotLeader, ProposalDropped, RaftConfig, ReadState, Role
from eddy.cluster.raft.sim.lockstep import LockstepCluster
from eddy.cluster.raft.types import ConfState, Entry, HardState

ET = RaftConfig().election_timeout_ms


def datas(c: LockstepCluster, i: int) -> list[bytes]:
    return [e.data for e in c.members[i].applied]


def test_a_leader_is_elected_and_its_entries_reach_every_node() -> None:
    c = LockstepCluster(3)
    c.tick(2 * ET + 100)
    lead = c.leader()
    assert lead is not None and lead.term >= 1
    assert all(c.node(i).leader == lead.id for i in (1, 2, 3))
    for k in range(5):
        c.propose(lead.id, b"op%d" % k)
    c.tick(300)  # a heartbeat carries the last commit index to followers
    for i in (1, 2, 3):
        assert datas(c, i) == [b"op%d" % k for k in range(5)]


def test_pre_vote_keeps_a_rejoining_partitioned_node_from_disrupting_the_leader() -> None:
    c = LockstepCluster(3)
    lead = c.elect(1)
    term = lead.term
    c.isolate(3)
    c.tick(10 * ET)  # node 3 keeps timing out alone
    assert c.node(3).term == term, "pre-votes that fail do not raise the term"
    c.heal()
    c.tick(3 * ET)
    assert c.leader() is lead and lead.term == term
    assert c.node(3).leader == 1


def test_without_pre_vote_the_rejoining_node_does_disrupt() -> None:
    """The control for the test above: the same story, pre-vote and check-quorum off."""
    c = LockstepCluster(3, RaftConfig(pre_vote=False, check_quorum=False))
    lead = c.elect(1)
    term = lead.term
    c.isolate(3)
    c.tick(10 * ET)
    assert c.node(3).term > term + 3
    c.heal()
    c.tick(3 * ET)
    new = c.leader()
    assert new is not None and new.term > term + 3


def test_check_quorum_makes_a_cut_off_leader_step_down() -> None:
    c = LockstepCluster(3)
    lead = c.elect(1)
    c.isolate(1)
    c.tick(2 * ET + 20, only=[1])
    assert lead.role == Role.FOLLOWER and lead.leader == 0
    c.tick(3 * ET, only=[2, 3])
    new = c.leader()
    assert new is not None and new.id in (2, 3) and new.term > lead.term


def test_leader_lease_ignores_a_vote_request_while_the_leader_is_heard() -> None:
    c = LockstepCluster(3)
    c.elect(1)
    f = c.node(2)
    before = (f.term, f.vote)
    f.step(RequestVote(0, 3, 2, f.term + 5, 100, f.term + 4, False, False))
    assert (f.term, f.vote) == before
    assert f.ready() is None, "no answer at all"


def test_a_stale_leaders_proposals_never_commit_and_it_then_refuses_proposals() -> None:
    c = LockstepCluster(3, RaftConfig(check_quorum=False))
    old = c.elect(1)
    c.propose(1, b"before")
    c.isolate(1)
    stale_index = old.propose(b"stale")  # accepted locally: it still believes it leads
    c.settle()
    new = c.elect(2)
    c.propose(2, b"fresh")
    c.heal()
    c.tick(600)
    assert old.role == Role.FOLLOWER and old.leader == 2
    with pytest.raises(NotLeader) as err:
        old.propose(b"again")
    assert err.value.leader_hint == 2
    for i in (1, 2, 3):
        assert b"stale" not in datas(c, i) and datas(c, i)[-1] == b"fresh"
    entry = c.members[1].store.entries(stale_index, stale_index + 1)[0]
    assert entry.term == new.term, "the stale entry was overwritten by the new leader's"


def test_conflicting_follower_log_is_truncated_to_the_leaders() -> None:
    """Node 1 leads term 1 alone with uncommitted entries; 2 and 3 move on; 1 rejoins."""
    c = LockstepCluster(3, RaftConfig(check_quorum=False))
    c.elect(1)
    c.propose(1, b"a")
    c.isolate(1)
    for k in range(5):
        c.node(1).propose(b"lost%d" % k)
    c.settle()
    c.elect(2)
    for k in range(3):
        c.propose(2, b"won%d" % k)
    c.heal()
    c.tick(600)
    logs = {i: [(e.term, e.data) for e in c.members[i].store.entries(
        1, c.members[i].store.last_index() + 1)] for i in (1, 2, 3)}
    assert logs[1] == logs[2] == logs[3]
    assert all(not d.startswith(b"lost") for _, d in logs[1])


def test_a_follower_rejects_an_append_that_skips_ahead_and_gives_a_hint() -> None:
    store = MemoryLogStore(ConfState(voters=(1, 2)), HardState(term=2))
    store.append([Entry(1, 1, 0, b""), Entry(1, 2, 0, b""), Entry(2, 3, 0, b"")])
    f = RaftNode(2, RaftConfig(), random.Random(1), store)
    f.step(AppendEntries(0, 1, 2, 3, 9, 3, (), 0))
    rd = f.ready()
    assert rd is not None
    (resp,) = rd.persisted_messages
    assert isinstance(resp, AppendResponse) and resp.reject
    assert (resp.index, resp.hint_index, resp.hint_term) == (9, 3, 2)


def test_only_entries_of_the_current_term_commit_by_counting_replicas() -> None:
    """Raft's Figure 8: a new leader holding an old-term entry on a majority must not
    commit it until an entry of its own term is on a majority too."""
    store = MemoryLogStore(ConfState(voters=(1, 2, 3, 4, 5)), HardState(term=3))
    store.append([Entry(1, 1, 0, b"a"), Entry(2, 2, 0, b"b")])
    lead = RaftNode(1, RaftConfig(), random.Random(1), store)
    lead._campaign(False)
    assert lead.term == 4
    for v in (2, 3):
        lead.step(VoteResponse(0, v, 1, 4, False, False))
    assert lead.role == Role.LEADER
    rd = lead.ready()
    assert rd is not None and rd.entries[-1] == Entry(4, 3, 2, b"")  # the no-op
    store.append(rd.entries)
    lead.advance(rd)
    for v in (2, 3):  # a majority (1, 2, 3) now holds index 2, of term 2
        lead.step(AppendResponse(0, v, 1, 4, 2, False, 0, 0))
    assert lead.commit == 0
    for v in (2, 3):
        lead.step(AppendResponse(0, v, 1, 4, 3, False, 0, 0))
    assert lead.commit == 3, "its own no-op on a majority commits everything before it"


def test_snapshot_catches_up_a_follower_that_needs_compacted_entries() -> None:
    c = LockstepCluster(3, compact_every=10)
    c.elect(1)
    c.crash(3)
    for k in range(40):
        c.propose(1, b"e%d" % k)
    assert c.members[1].store.first_index() > 20, "the leader compacted its log"
    c.restart(3)
    c.tick(600)
    assert any(isinstance(m, InstallSnapshot) and m.dst == 3 for m in c.sent)
    assert c.members[3].snapshots_installed >= 1
    assert c.members[3].state == c.members[1].state
    assert c.node(3).commit == c.node(1).commit
    c.propose(1, b"after")
    c.tick(300)
    assert datas(c, 3)[-1] == b"after"


def test_leadership_transfer_hands_over_with_timeout_now() -> None:
    c = LockstepCluster(3)
    old = c.elect(1)
    term = old.term
    c.propose(1, b"x")
    c.node(1).transfer_leadership(2)
    c.settle()
    assert any(isinstance(m, TimeoutNow) and m.dst == 2 for m in c.sent)
    new = c.leader()
    assert new is not None and new.id == 2 and new.term == term + 1
    assert old.role == Role.FOLLOWER


def test_transfer_to_a_lagging_node_catches_it_up_first_and_blocks_proposals() -> None:
    c = LockstepCluster(3)
    c.elect(1)
    c.crash(3)
    c.propose(1, b"x")
    c.restart(3)
    c.filter = lambda m: not (isinstance(m, AppendEntries) and m.dst == 3)
    c.node(1).transfer_leadership(3)
    c.settle()
    with pytest.raises(ProposalDropped):
        c.node(1).propose(b"during")
    c.filter = None
    c.tick(300)
    lead = c.leader()
    assert lead is not None and lead.id == 3


def test_membership_add_learner_promote_and_remove_a_voter() -> None:
    c = LockstepCluster(3)
    lead = c.elect(1)
    c.propose(1, b"x")
    c.add_member(4, MemoryLogStore())  # a fresh node knows nothing
    lead.propose_conf_change(ConfChange(CONF_ADD_LEARNER, 4))
    with pytest.raises(ProposalDropped):  # one change at a time
        lead.propose_conf_change(ConfChange(CONF_ADD_VOTER, 4))
    c.settle()
    c.tick(300)
    assert lead.learners == {4} and c.node(4).learners == {4}
    assert datas(c, 4) == [b"x"], "the learner replicated the log"
    c.tick(5 * ET, only=[4])
    assert c.node(4).term == lead.term, "a learner never campaigns"
    lead.propose_conf_change(ConfChange(CONF_ADD_VOTER, 4))
    c.settle()
    c.tick(300)
    assert all(c.node(i).voters == {1, 2, 3, 4} for i in (1, 2, 3, 4))
    lead.propose_conf_change(ConfChange(CONF_REMOVE_NODE, 3))
    c.settle()
    c.tick(300)
    assert lead.voters == {1, 2, 4}
    c.crash(3)
    c.crash(2)  # 1 and 4 are a majority of {1, 2, 4}
    c.propose(1, b"y")
    c.tick(300, only=[1, 4])
    assert datas(c, 4)[-1] == b"y"


def test_a_learner_does_not_count_toward_commit() -> None:
    c = LockstepCluster(3)
    lead = c.elect(1)
    c.add_member(4, MemoryLogStore())
    lead.propose_conf_change(ConfChange(CONF_ADD_LEARNER, 4))
    c.settle()
    c.tick(300)
    c.crash(2)
    c.crash(3)
    index = c.propose(1, b"needs a voter")
    c.tick(300, only=[1, 4])
    assert c.node(4).log.last_index() >= index, "the learner has it"
    assert lead.commit < index, "but the leader and a learner are no quorum of 3 voters"


def test_a_removed_leader_steps_down_and_the_rest_elect_a_new_one() -> None:
    c = LockstepCluster(3)
    lead = c.elect(1)
    lead.propose_conf_change(ConfChange(CONF_REMOVE_NODE, 1))
    c.settle()
    c.tick(300)
    assert lead.role == Role.FOLLOWER and 1 not in lead.voters
    c.tick(4 * ET)
    new = c.leader()
    assert new is not None and new.id in (2, 3) and new.voters == {2, 3}


def test_restarting_every_node_at_once_loses_nothing_committed() -> None:
    c = LockstepCluster(3, compact_every=7)
    c.tick(2 * ET)
    lead = c.leader()
    assert lead is not None
    for k in range(20):
        c.propose(lead.id, b"v%d" % k)
    c.tick(300)
    committed = c.members[lead.id].state
    for i in (1, 2, 3):
        c.crash(i)
    for i in (1, 2, 3):
        c.restart(i)
    c.tick(3 * ET)
    lead = c.leader()
    assert lead is not None
    c.propose(lead.id, b"after")
    c.tick(300)
    for i in (1, 2, 3):
        assert c.members[i].state == committed + b"after;"


def test_term_and_vote_survive_a_restart_so_no_second_vote_in_a_term() -> None:
    c = LockstepCluster(3)
    f = c.node(3)
    f.step(RequestVote(0, 1, 3, 5, 0, 0, False, False))
    c.settle()
    assert c.members[3].store.hard_state == HardState(term=5, vote=1, commit=0)
    c.restart(3)
    again = c.node(3)
    again.step(RequestVote(0, 2, 3, 5, 0, 0, False, False))
    rd = again.ready()
    assert rd is not None
    (resp,) = rd.persisted_messages
    assert isinstance(resp, VoteResponse) and resp.reject and again.vote == 1


def test_votes_and_responses_wait_for_persistence_leader_appends_do_not() -> None:
    c = LockstepCluster(3)
    f = c.node(2)
    f.step(RequestVote(0, 1, 2, 1, 0, 0, False, False))
    rd = f.ready()
    assert rd is not None and rd.hard_state == HardState(1, 1, 0)
    assert not rd.messages and isinstance(rd.persisted_messages[0], VoteResponse)
    f.advance(rd)
    lead = c.elect(1)
    lead.propose(b"x")
    rd = lead.ready()
    assert rd is not None and rd.entries
    assert any(isinstance(m, AppendEntries) and m.entries for m in rd.messages)


def test_read_index_returns_the_commit_index_after_heartbeat_acks() -> None:
    c = LockstepCluster(3)
    lead = c.elect(1)
    c.propose(1, b"x")
    with pytest.raises(NotLeader):
        c.node(2).read_index(b"r0")
    states: list[ReadState] = []
    lead.read_index(b"ctx")
    rd = lead.ready()
    assert rd is not None and not rd.read_states, "not before a quorum answered"
    lead.advance(rd)
    for m in rd.messages:
        c._deliver(m)
    for _ in range(10):
        for i in (1, 2, 3):
            raft = c.node(i)
            rd = raft.ready()
            if rd is None:
                continue
            if i == 1:
                states.extend(rd.read_states)
            raft.advance(rd)
            for m in (*rd.messages, *rd.persisted_messages):
                c._deliver(m)
    assert [(s.index, s.ctx) for s in states] == [(lead.commit, b"ctx")]


def test_a_follower_whose_whole_window_of_appends_was_lost_still_catches_up() -> None:
    """Every append in a full in-flight window lost (a crashed link, a full inbox): no
    answer will free the window, so heartbeat answers must (etcd's rule), or the follower
    stays behind for ever."""
    c = LockstepCluster(3, RaftConfig(max_inflight=4))
    lead = c.elect(1)
    c.tick(300)
    c.filter = lambda m: not (isinstance(m, AppendEntries) and m.dst == 3)
    for k in range(12):
        c.propose(lead.id, b"w%d" % k)
    progress = lead.progress(3)
    assert progress is not None and progress.inflights.full()
    behind = progress.match
    c.filter = None
    c.tick(5 * ET)
    after = lead.progress(3)
    assert after is not None and after.match > behind
    assert datas(c, 3)[-12:] == [b"w%d" % k for k in range(12)]


def test_leader_gone_hint_elects_the_first_survivor_in_turn_at_once() -> None:
    c = LockstepCluster(3)
    c.elect(3)
    c.tick(100)
    c.crash(3)
    c.tick(50)  # less than an election timeout: every follower still holds the lease
    silence = c.node(1).leader_silence()
    assert silence is not None and silence[0] == 3 and 50 <= silence[1] < ET
    for i in (1, 2):  # the watch on each survivor found nothing listening
        c.node(i).leader_gone(3)
    c.settle()
    lead = c.leader()
    # node 1 is first in turn: it campaigned at once and node 2 granted (no lease left)
    assert lead is not None and lead.id == 1
    assert c.node(2).leader == 1
    assert c.node(1).leader_silence() is None  # leading


def test_leader_gone_is_ignored_for_another_node_or_a_leader_heard_again() -> None:
    c = LockstepCluster(3)
    lead = c.elect(1)
    term = lead.term
    c.tick(100)
    f = c.node(2)
    f.leader_gone(3)  # not its leader: nothing changes
    c.tick(100)
    assert c.leader() is lead and f.leader == 1
    # a false hint about a live leader: the follower campaigns in its turn (node 2 is
    # second of the survivors 2 and 3), but node 3 still holds the lease and ignores it,
    # and the leader's next heartbeat puts node 2 back in line
    f.leader_gone(1)
    assert f.leader_silence() is None
    c.tick(3 * ET)
    assert c.leader() is lead and lead.term == term and f.leader == 1
    assert f.leader_silence() is not None
