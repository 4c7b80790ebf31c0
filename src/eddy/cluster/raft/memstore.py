"""``MemoryLogStore``: the ``LogStore`` protocol in memory, with the write operations a
driver needs (tests and the simulation use it; the disk store implements the same reads)."""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

from eddy.cluster.raft.store import LogCompactedError, LogUnavailableError
from eddy.cluster.raft.types import ConfState, Entry, HardState, Snapshot, SnapshotMeta


class MemoryLogStore:
    def __init__(self, conf: ConfState | None = None, hard_state: HardState | None = None,
                 snapshot: Snapshot | None = None) -> None:
        self.hard_state = hard_state or HardState()
        self.snapshot: Snapshot | None = snapshot
        self.conf_state = conf or (snapshot.meta.conf if snapshot else ConfState())
        self._snap_index = snapshot.meta.index if snapshot else 0
        self._snap_term = snapshot.meta.term if snapshot else 0
        self._ents: list[Entry] = []  # _ents[k].index == _snap_index + 1 + k

    # -- LogStore --------------------------------------------------------------------------
    def initial_state(self) -> tuple[HardState, ConfState]:
        return self.hard_state, self.conf_state

    def first_index(self) -> int:
        return self._snap_index + 1

    def last_index(self) -> int:
        return self._snap_index + len(self._ents)

    def term(self, index: int) -> int:
        if index < self._snap_index:
            raise LogCompactedError(index)
        if index == self._snap_index:
            return self._snap_term
        if index > self.last_index():
            raise LogUnavailableError(index)
        return self._ents[index - self._snap_index - 1].term

    def entries(self, lo: int, hi: int) -> list[Entry]:
        if lo <= self._snap_index:
            raise LogCompactedError(lo)
        if hi > self.last_index() + 1:
            raise LogUnavailableError(hi - 1)
        base = self._snap_index + 1
        return self._ents[lo - base:hi - base]

    def snapshot_meta(self) -> SnapshotMeta:
        if self.snapshot is not None:
            return self.snapshot.meta
        return SnapshotMeta(index=self._snap_index, term=self._snap_term)

    # -- writes (the driver's) -------------------------------------------------------------
    def set_hard_state(self, hs: HardState) -> None:
        self.hard_state = hs

    def set_conf_state(self, cs: ConfState) -> None:
        self.conf_state = cs

    def append(self, entries: Sequence[Entry]) -> None:
        """Write ``entries``, first dropping any stored entry at or after the first one's
        index (a Ready's ``truncate_from``)."""
        if not entries:
            return
        first = entries[0].index
        if first <= self._snap_index or first > self.last_index() + 1:
            raise ValueError(f"append at {first} leaves a gap or rewrites the snapshot "
                             f"(log {self.first_index()}..{self.last_index()})")
        del self._ents[first - self._snap_index - 1:]
        self._ents.extend(entries)

    def install_snapshot(self, snap: Snapshot) -> None:
        """A snapshot received from the leader replaces the whole log."""
        self.snapshot = snap
        self._snap_index, self._snap_term = snap.meta.index, snap.meta.term
        self._ents = []
        self.conf_state = snap.meta.conf

    def compact(self, snap: Snapshot) -> None:
        """Keep ``snap`` (made by ``RaftNode.compact``) and drop the entries it covers."""
        index = snap.meta.index
        if index <= self._snap_index:
            return
        if index > self.last_index():
            raise LogUnavailableError(index)
        del self._ents[:index - self._snap_index]
        self.snapshot = snap
        self._snap_index, self._snap_term = index, snap.meta.term

    def clone(self) -> MemoryLogStore:
        other = MemoryLogStore(self.conf_state, self.hard_state, self.snapshot)
        other._snap_index, other._snap_term = self._snap_index, self._snap_term
        other._ents = list(self._ents)
        return other

    def __repr__(self) -> str:
        hs = dataclasses.astuple(self.hard_state)
        return f"MemoryLogStore(hs={hs}, log={self.first_index()}..{self.last_index()})"
