"""The core's view of the log: what the store holds plus the unstable tail (entries or a
snapshot handed out in a Ready and not yet persisted), the commit and applied indexes."""

from __future__ import annotations

from collections.abc import Sequence

from eddy.cluster.raft.store import LogCompactedError, LogStore, LogUnavailableError
from eddy.cluster.raft.types import Entry, Snapshot

ENTRY_OVERHEAD = 12  # rough encoded size of an entry's header, for byte budgets


def entry_size(e: Entry) -> int:
    return len(e.data) + ENTRY_OVERHEAD


class RaftLog:
    def __init__(self, store: LogStore, committed: int, applied: int) -> None:
        self.store = store
        self._unstable: list[Entry] = []
        self._offset = store.last_index() + 1  # index of _unstable[0] / of the next stable
        self.pending_snapshot: Snapshot | None = None
        self.committed = committed
        self.applied = applied

    # -- reads -----------------------------------------------------------------------------
    def first_index(self) -> int:
        ps = self.pending_snapshot
        return ps.meta.index + 1 if ps is not None else self.store.first_index()

    def last_index(self) -> int:
        if self._unstable:
            return self._offset + len(self._unstable) - 1
        ps = self.pending_snapshot
        return ps.meta.index if ps is not None else self.store.last_index()

    def stable_last_index(self) -> int:
        """The last index known persisted (entries before the unstable tail)."""
        return min(self._offset - 1, self.last_index())

    def term(self, index: int) -> int | None:
        """The entry's term, or None when compacted or past the end."""
        if self._unstable and index >= self._offset:
            k = index - self._offset
            return self._unstable[k].term if k < len(self._unstable) else None
        ps = self.pending_snapshot
        if ps is not None:
            return ps.meta.term if index == ps.meta.index else None
        try:
            return self.store.term(index)
        except (LogCompactedError, LogUnavailableError):
            return None

    def last_term(self) -> int:
        return self.term(self.last_index()) or 0

    def match_term(self, index: int, term: int) -> bool:
        return self.term(index) == term

    def entries(self, lo: int, hi: int, max_bytes: int | None = None) -> list[Entry] | None:
        """Entries ``lo <= index < hi`` (cut at the end of the log and, keeping at least one,
        at ``max_bytes``); None when ``lo`` is compacted."""
        if lo < self.first_index():
            return None
        hi = min(hi, self.last_index() + 1)
        if lo >= hi:
            return []
        out: list[Entry] = []
        if lo < self._offset and self.pending_snapshot is None:
            try:
                out.extend(self.store.entries(lo, min(hi, self._offset)))
            except LogCompactedError:
                return None
        if hi > self._offset:
            out.extend(self._unstable[max(lo, self._offset) - self._offset:hi - self._offset])
        if max_bytes is not None:
            total = 0
            for k, e in enumerate(out):
                total += entry_size(e)
                if total > max_bytes and k > 0:
                    return out[:k]
        return out

    def is_up_to_date(self, last_index: int, last_term: int) -> bool:
        """Raft's voting rule: is a candidate's log at least as up to date as ours?"""
        mine = self.last_term()
        return last_term > mine or (last_term == mine and last_index >= self.last_index())

    def find_conflict_by_term(self, index: int, term: int) -> tuple[int, int]:
        """The largest index <= ``index`` whose term is <= ``term``, with that term (term 0
        when the search runs into the compacted prefix)."""
        while index > 0:
            t = self.term(index)
            if t is None:
                return index, 0
            if t <= term:
                return index, t
            index -= 1
        return 0, 0

    # -- unstable tail ---------------------------------------------------------------------
    def unstable_entries(self) -> list[Entry]:
        return list(self._unstable)

    def append(self, entries: Sequence[Entry]) -> None:
        if not entries:
            return
        first = entries[0].index
        if first == self._offset + len(self._unstable):
            self._unstable.extend(entries)
        elif first <= self._offset:
            self._offset = first
            self._unstable = list(entries)
        else:
            self._unstable = self._unstable[:first - self._offset] + list(entries)

    def maybe_append(self, prev_index: int, prev_term: int, commit: int,
                     entries: Sequence[Entry]) -> int | None:
        """A follower's append: None when (prev_index, prev_term) does not match, else the
        index of the last entry the message vouches for."""
        if not self.match_term(prev_index, prev_term):
            return None
        last_new = prev_index + len(entries)
        for k, e in enumerate(entries):
            if self.term(e.index) != e.term:
                if e.index <= self.committed:
                    raise ValueError(f"entry {e.index} conflicts with the committed log "
                                     f"(commit {self.committed})")
                self.append(entries[k:])
                break
        self.commit_to(min(commit, last_new))
        return last_new

    def commit_to(self, index: int) -> None:
        if index > self.committed:
            self.committed = min(index, self.last_index())

    def stable_to(self, index: int, term: int) -> None:
        """Entries up to (index, term) were persisted."""
        if index < self._offset or self.term(index) != term:
            return
        del self._unstable[:index + 1 - self._offset]
        self._offset = index + 1

    def restore(self, snap: Snapshot) -> None:
        """Replace the whole log with a snapshot received from the leader."""
        self.pending_snapshot = snap
        self._unstable = []
        self._offset = snap.meta.index + 1
        self.committed = snap.meta.index

    def snapshot_persisted(self, index: int) -> None:
        ps = self.pending_snapshot
        if ps is not None and ps.meta.index == index:
            self.pending_snapshot = None
            self.applied = max(self.applied, index)

    def next_committed(self, max_bytes: int) -> list[Entry]:
        if self.pending_snapshot is not None or self.committed <= self.applied:
            return []
        lo = max(self.applied + 1, self.first_index())
        return self.entries(lo, self.committed + 1, max_bytes) or []
