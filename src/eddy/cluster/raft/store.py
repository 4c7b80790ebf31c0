"""What the Raft core reads from its log storage: the ``LogStore`` protocol.

The core only reads; the driver writes (it persists each ``Ready`` and then calls
``advance``). After a ``Ready`` is persisted, the store must show exactly what the core
handed out: entries truncated from ``Ready.truncate_from`` then appended, a ``Ready.snapshot``
replacing the whole log, and ``RaftNode.compact``'s snapshot dropping the entries it covers.

Index rules (etcd's): entries live in ``[first_index(), last_index()]``; ``term`` also answers
for ``first_index() - 1`` (the last index the snapshot covers; 0 with term 0 for an empty
store). An empty log has ``last_index() == first_index() - 1``.
"""

from __future__ import annotations

from typing import Protocol

from eddy.cluster.raft.types import ConfState, Entry, HardState, SnapshotMeta


class LogCompactedError(LookupError):
    """The index asked for is covered by the snapshot: its entry is gone."""

    def __init__(self, index: int) -> None:
        super().__init__(f"raft log index {index} is compacted")
        self.index = index


class LogUnavailableError(LookupError):
    """The index asked for is past the last entry."""

    def __init__(self, index: int) -> None:
        super().__init__(f"raft log index {index} is not in the log yet")
        self.index = index


class LogStore(Protocol):
    def initial_state(self) -> tuple[HardState, ConfState]:
        """The hard state and membership persisted last (read once, when a node starts)."""
        ...

    def entries(self, lo: int, hi: int) -> list[Entry]:
        """Entries ``lo <= index < hi``. ``LogCompactedError`` when ``lo < first_index()``,
        ``LogUnavailableError`` when ``hi > last_index() + 1``."""
        ...

    def term(self, index: int) -> int:
        """The term of the entry at ``index``, for ``first_index() - 1 <= index <=
        last_index()``; the same errors as ``entries`` outside that range."""
        ...

    def first_index(self) -> int: ...

    def last_index(self) -> int: ...

    def snapshot_meta(self) -> SnapshotMeta:
        """The newest snapshot's index, term and membership (index 0, term 0: none)."""
        ...
