"""Raft's safety properties, checked by the simulation after every step of every node:
election safety, log matching, leader completeness, state-machine safety."""

from __future__ import annotations

import hashlib

from eddy.cluster.raft.core import RaftNode
from eddy.cluster.raft.ready import Ready, Role
from eddy.cluster.raft.types import Entry


class SafetyViolation(AssertionError):
    pass


def _digest(e: Entry) -> bytes:
    return hashlib.blake2b(e.data, digest_size=8).digest() + bytes([e.kind])


class SafetyChecker:
    def __init__(self) -> None:
        self.leaders: dict[int, int] = {}  # term -> the one leader of that term
        # (index, term) -> (digest, previous entry's term): one writer per term, so an
        # (index, term) pair names one entry and, inductively, one whole log prefix
        self.entries: dict[tuple[int, int], tuple[bytes, int | None]] = {}
        self.committed: dict[int, tuple[int, bytes]] = {}  # index -> (term, digest)
        self.applied: dict[int, tuple[int, bytes]] = {}
        self._commit_seen: dict[int, int] = {}  # node -> highest commit index checked

    def forget_node(self, node_id: int) -> None:
        self._commit_seen.pop(node_id, None)

    def check_role(self, node: RaftNode) -> None:
        """Election safety: at most one leader per term."""
        if node.role != Role.LEADER:
            return
        other = self.leaders.setdefault(node.term, node.id)
        if other != node.id:
            raise SafetyViolation(f"election safety: nodes {other} and {node.id} both lead "
                                  f"term {node.term}")

    def check_ready(self, node: RaftNode, rd: Ready) -> None:
        """Called with each Ready before the driver carries it out."""
        self.check_role(node)
        for e in rd.entries:
            prev = node.log.term(e.index - 1)
            rec = (_digest(e), prev)
            old = self.entries.setdefault((e.index, e.term), rec)
            if old[0] != rec[0] or (None not in (old[1], prev) and old[1] != prev):
                raise SafetyViolation(f"log matching: node {node.id} holds a different entry "
                                      f"(or predecessor) at index {e.index} term {e.term}")
        for e in rd.committed_entries:
            rec2 = (e.term, _digest(e))
            if self.applied.setdefault(e.index, rec2) != rec2:
                raise SafetyViolation(f"state-machine safety: node {node.id} applies "
                                      f"{e.index}@{e.term}, another node applied "
                                      f"{self.applied[e.index][0]}")
        self._check_commit(node)
        if rd.soft_state is not None and rd.soft_state.role == Role.LEADER:
            self._check_leader_completeness(node)

    def _check_commit(self, node: RaftNode) -> None:
        lo = self._commit_seen.get(node.id, 0)
        hi = node.commit
        if hi <= lo:
            return
        first = node.log.first_index()
        for i in range(max(lo + 1, first), hi + 1):
            ents = node.log.entries(i, i + 1)
            if not ents:
                raise SafetyViolation(f"node {node.id} commits {hi} past its last index")
            rec = (ents[0].term, _digest(ents[0]))
            if self.committed.setdefault(i, rec) != rec:
                raise SafetyViolation(f"committed entry changed: index {i} was "
                                      f"term {self.committed[i][0]}, node {node.id} "
                                      f"commits term {rec[0]}")
        self._commit_seen[node.id] = hi

    def _check_leader_completeness(self, node: RaftNode) -> None:
        snap_index = node.log.first_index() - 1
        for i, (term, _) in self.committed.items():
            if i <= snap_index or term >= node.term:
                continue
            if node.log.term(i) != term:
                raise SafetyViolation(f"leader completeness: leader {node.id} of term "
                                      f"{node.term} lacks committed entry {i}@{term}")
