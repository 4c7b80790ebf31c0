"""The pieces under the Raft core: the log view, progress and flow control, the wire
messages, and what the core does with hostile or impossible input."""

from __future__ import annotations

import random

import pytest

from eddy.cluster.raft.core import RaftNode
from eddy.cluster.raft.log import RaftLog
from eddy.cluster.raft.memstore import MemoryLogStore
from eddy.cluster.raft.messages import (
    AppendEntries,
    AppendResponse,
    Heartbeat,
    InstallSnapshot,
    RaftMessageError,
    decode_message,
    encode_message,
)
from eddy.cluster.raft.progress import Progress, ProgressState
from eddy.cluster.raft.ready import RaftConfig
from eddy.cluster.raft.sim.lockstep import LockstepCluster
from eddy.cluster.raft.store import LogCompactedError, LogUnavailableError
from eddy.cluster.raft.types import ConfState, Entry, HardState, Snapshot, SnapshotMeta
from eddy.postcard import PostcardError


def ents(*terms: int, start: int = 1) -> list[Entry]:
    return [Entry(t, start + k, 0, b"%d" % (start + k)) for k, t in enumerate(terms)]


def test_memory_store_ranges_and_errors() -> None:
    s = MemoryLogStore()
    s.append(ents(1, 1, 2))
    assert (s.first_index(), s.last_index(), s.term(0), s.term(3)) == (1, 3, 0, 2)
    s.append(ents(3, start=2))  # overwrites 2 and 3
    assert [e.term for e in s.entries(1, 3)] == [1, 3] and s.last_index() == 2
    snap = Snapshot(SnapshotMeta(1, 1, ConfState((1,))), b"sm")
    s.compact(snap)
    assert (s.first_index(), s.term(1)) == (2, 1)
    with pytest.raises(LogCompactedError):
        s.entries(1, 2)
    with pytest.raises(LogUnavailableError):
        s.term(5)
    with pytest.raises(ValueError):
        s.append(ents(3, start=9))  # a gap


def test_log_view_reads_through_store_and_unstable_tail() -> None:
    s = MemoryLogStore()
    s.append(ents(1, 1, 1))
    log = RaftLog(s, committed=1, applied=0)
    log.append(ents(2, 2, start=3))  # replaces index 3 (unstable wins over the store)
    assert log.last_index() == 4 and log.term(3) == 2 and log.stable_last_index() == 2
    assert [e.term for e in log.entries(1, 10) or []] == [1, 1, 2, 2]
    assert log.entries(1, 10, max_bytes=1) == ents(1), "at least one entry, whatever size"
    s.append(log.unstable_entries())
    log.stable_to(4, 2)
    assert log.unstable_entries() == [] and log.stable_last_index() == 4


def test_maybe_append_truncates_conflicts_but_never_committed_entries() -> None:
    s = MemoryLogStore()
    s.append(ents(1, 1, 2, 2))
    log = RaftLog(s, committed=2, applied=0)
    assert log.maybe_append(2, 1, 9, ents(3, 3, start=3)) == 4
    assert [log.term(i) for i in (1, 2, 3, 4)] == [1, 1, 3, 3]
    assert log.committed == 4, "commit follows the leader, capped by what it vouched for"
    assert log.maybe_append(4, 9, 0, []) is None
    with pytest.raises(ValueError, match="committed"):
        log.maybe_append(1, 1, 0, ents(5, start=2))


def test_find_conflict_by_term_skips_a_whole_term() -> None:
    s = MemoryLogStore()
    s.append(ents(1, 1, 4, 4, 4, 4))
    log = RaftLog(s, 0, 0)
    assert log.find_conflict_by_term(6, 2) == (2, 1)
    assert log.find_conflict_by_term(6, 5) == (6, 4)


def test_progress_probe_replicate_and_inflight_limit() -> None:
    pr = Progress(next_index=5, max_inflight=2, max_inflight_bytes=1 << 20)
    assert pr.state == ProgressState.PROBE and not pr.is_paused()
    pr.sent(5, 10, 1)
    assert pr.is_paused(), "one probe at a time"
    assert pr.maybe_decrease(4, 2) and pr.next == 3 and not pr.is_paused()
    assert not pr.maybe_decrease(4, 1), "a stale rejection is ignored"
    assert pr.maybe_update(3)
    pr.become_replicate()
    pr.sent(5, 10, 2)
    pr.sent(7, 10, 2)
    assert pr.is_paused() and pr.next == 8
    pr.inflights.free_to(5)
    assert not pr.is_paused()


def _follower() -> RaftNode:
    s = MemoryLogStore(ConfState(voters=(1, 2, 3)), HardState(term=1))
    return RaftNode(2, RaftConfig(group=7), random.Random(1), s)


@pytest.mark.parametrize(("msg", "field"), [
    (Heartbeat(8, 1, 2, 1, 0, b""), "Heartbeat.group"),
    (Heartbeat(7, 1, 3, 1, 0, b""), "Heartbeat.dst"),
    (Heartbeat(7, 2, 2, 1, 0, b""), "Heartbeat.src"),
    (AppendEntries(7, 1, 2, 1, 0, 0, (Entry(1, 2, 0, b""),), 0), "AppendEntries.entries[0].index"),
    (AppendEntries(7, 1, 2, 1, 0, 0, (Entry(5, 1, 0, b""),), 0), "AppendEntries.entries[0].term"),
    (AppendEntries(7, 1, 2, 1, 0, 0, (Entry(1, 1, 9, b""),), 0), "AppendEntries.entries[0].kind"),
    (AppendEntries(7, 1, 2, 1, 0, 3, (), 0), "AppendEntries.prev_term"),
    (InstallSnapshot(7, 1, 2, 1, Snapshot(SnapshotMeta(5, 1, ConfState()), b"")),
     "InstallSnapshot.snapshot.meta.conf.voters"),
])
def test_impossible_messages_raise_a_named_error(msg: object, field: str) -> None:
    with pytest.raises(RaftMessageError) as err:
        _follower().step(msg)  # type: ignore[arg-type]
    assert err.value.field == field


def test_an_ack_past_the_leaders_log_is_refused() -> None:
    c = LockstepCluster(3)
    lead = c.elect(1)
    with pytest.raises(RaftMessageError, match=r"AppendResponse\.index"):
        lead.step(AppendResponse(0, 2, 1, lead.term, 999, False, 0, 0))


def test_messages_round_trip_and_garbage_is_a_postcard_error() -> None:
    m = AppendEntries(3, 1, 2, 9, 4, 8, tuple(ents(8, 9, start=5)), 4)
    assert decode_message(encode_message(m)) == m
    with pytest.raises(PostcardError):
        decode_message(b"\x00\x01\x02\x03\x04\x05\x06\xff\xff\xff\xff\x0f")  # 4G entries
    with pytest.raises(PostcardError):
        decode_message(b"\x63")  # no such variant


def test_a_store_whose_commit_points_past_its_entries_is_refused() -> None:
    s = MemoryLogStore(ConfState(voters=(1,)), HardState(term=1, commit=5))
    with pytest.raises(ValueError, match="past the last stored entry"):
        RaftNode(1, RaftConfig(), random.Random(1), s)


def test_a_single_voter_elects_itself_and_commits_after_persisting() -> None:
    c = LockstepCluster(1)
    c.tick(700)
    lead = c.node(1)
    assert lead.leader == 1
    index = lead.propose(b"solo")
    rd = lead.ready()
    assert rd is not None and rd.entries[-1].index == index and lead.commit < index
    c.members[1].store.append(rd.entries)
    lead.advance(rd)
    assert lead.commit == index, "committed once its own write is persisted"
