"""What ``RaftDriver`` shows its callers: the state machine it drives, its errors, its
counters and the status ``eddy cluster status`` prints. Re-exported by ``driver``."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Protocol

from eddy.cluster.raft.ready import ProposalDropped

#: bounds on what waits for the loop (beyond them: dropped messages, refused proposals)
MAX_INBOX = 8192
MAX_PENDING_PROPOSALS = 65536
#: after a storage failure, the first wait before reopening the files, and the longest
#: how often the commit index alone is written to the state file (when it moved): the most
#: of the state machine a restarted node replays only once a leader tells it the commit
COMMIT_FLUSH_S = 0.2
RECOVER_FIRST_S = 0.5
RECOVER_MAX_S = 30.0


class StateMachine(Protocol):
    def apply(self, index: int, data: bytes) -> Any:
        """Apply a committed command; the result goes to its proposer (if on this node)."""
        ...

    def snapshot(self) -> bytes:
        """The whole state, encoded (taken at the applied index)."""
        ...

    def restore(self, data: bytes) -> None:
        """Replace the whole state with a snapshot's."""
        ...


class WriteTimeout(TimeoutError):
    """A proposal was not applied within the write timeout (no quorum, or a slow disk)."""


class DriverStopped(ProposalDropped):
    """The driver stopped before the proposal's outcome was known."""


@dataclass
class DriverStats:
    readies: int = 0
    fsyncs: int = 0
    entries_persisted: int = 0
    applied: int = 0
    snapshots: int = 0
    dropped_messages: int = 0
    slow_writes: int = 0
    conf_changes: int = 0  # membership changes applied here
    recoveries: int = 0  # storage reopened after a failure
    stalls: int = 0  # gaps between two ticks over the core's stall_ms (this node stalled)
    stalled_ms: int = 0  # the time they skipped (past stall_ms each)
    longest_stall_ms: int = 0
    heartbeats_while_writing: int = 0  # heartbeat rounds sent while a Ready's writes ran


@dataclass(frozen=True)
class RaftStatus:
    """What ``eddy cluster status`` shows for a group (lag: leader only)."""

    group: str
    node_id: int
    role: str
    leader: int
    term: int
    commit_index: int
    applied_index: int
    voters: tuple[int, ...]
    learners: tuple[int, ...]
    lag: dict[int, int] = field(default_factory=dict)
