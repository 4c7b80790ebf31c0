"""What a leader knows about each follower's log (etcd's Progress) and the flow control
of appends to it: probe (one append at a time until a match is found), replicate
(optimistic pipelining, bounded by in-flight messages and bytes), snapshot (waiting for an
InstallSnapshot to land)."""

from __future__ import annotations

from collections import deque
from enum import IntEnum


class ProgressState(IntEnum):
    PROBE = 0
    REPLICATE = 1
    SNAPSHOT = 2


class Inflights:
    """Appends sent and not yet acknowledged: (last index, bytes) in send order."""

    __slots__ = ("_bytes", "_items", "max_bytes", "max_count")

    def __init__(self, max_count: int, max_bytes: int) -> None:
        self.max_count, self.max_bytes = max_count, max_bytes
        self._items: deque[tuple[int, int]] = deque()
        self._bytes = 0

    def add(self, last_index: int, size: int) -> None:
        self._items.append((last_index, size))
        self._bytes += size

    def free_to(self, index: int) -> None:
        """Drop every append whose last index is <= ``index`` (acknowledged)."""
        while self._items and self._items[0][0] <= index:
            self._bytes -= self._items.popleft()[1]

    def free_first_one(self) -> None:
        """Give up on the oldest append (its answer may never come: lost on the way)."""
        if self._items:
            self._bytes -= self._items.popleft()[1]

    def full(self) -> bool:
        return len(self._items) >= self.max_count or self._bytes >= self.max_bytes

    def reset(self) -> None:
        self._items.clear()
        self._bytes = 0

    def __len__(self) -> int:
        return len(self._items)


class Progress:
    __slots__ = ("inflights", "match", "next", "pending_snapshot", "probe_sent",
                 "recent_active", "state")

    def __init__(self, next_index: int, max_inflight: int, max_inflight_bytes: int) -> None:
        self.match = 0
        self.next = next_index
        self.state = ProgressState.PROBE
        self.probe_sent = False
        self.pending_snapshot = 0
        self.recent_active = True
        self.inflights = Inflights(max_inflight, max_inflight_bytes)

    def become_probe(self) -> None:
        if self.state == ProgressState.SNAPSHOT:
            self.next = max(self.match + 1, self.pending_snapshot + 1)
        else:
            self.next = self.match + 1
        self.state = ProgressState.PROBE
        self.probe_sent = False
        self.pending_snapshot = 0
        self.inflights.reset()

    def become_replicate(self) -> None:
        self.state = ProgressState.REPLICATE
        self.next = self.match + 1
        self.pending_snapshot = 0
        self.inflights.reset()

    def become_snapshot(self, index: int) -> None:
        self.state = ProgressState.SNAPSHOT
        self.pending_snapshot = index
        self.inflights.reset()

    def maybe_update(self, index: int) -> bool:
        """A success response for ``index``: returns whether match moved forward."""
        updated = index > self.match
        if updated:
            self.match = index
            self.probe_sent = False
        self.next = max(self.next, index + 1)
        return updated

    def maybe_decrease(self, rejected: int, hint: int) -> bool:
        """A rejection of prev_index ``rejected``; ``hint`` is where the logs may match.
        Returns False for a stale rejection (of an append already superseded)."""
        if self.state == ProgressState.REPLICATE:
            if rejected <= self.match:
                return False
            self.next = self.match + 1
            return True
        if self.next - 1 != rejected:
            return False
        self.next = max(min(rejected, hint + 1), self.match + 1, 1)
        self.probe_sent = False
        return True

    def is_paused(self) -> bool:
        if self.state == ProgressState.PROBE:
            return self.probe_sent
        if self.state == ProgressState.REPLICATE:
            return self.inflights.full()
        return True

    def sent(self, last_index: int, size: int, count: int) -> None:
        """An append carrying ``count`` entries up to ``last_index`` went out."""
        if self.state == ProgressState.REPLICATE:
            if count:
                self.next = last_index + 1
                self.inflights.add(last_index, size)
        elif self.state == ProgressState.PROBE:
            self.probe_sent = True

    def __repr__(self) -> str:
        return (f"Progress({self.state.name} match={self.match} next={self.next} "
                f"inflight={len(self.inflights)})")
