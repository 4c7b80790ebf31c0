"""What the core hands its driver (``Ready``), its configuration and its errors."""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import IntEnum

from eddy.cluster.raft.messages import RaftMessage
from eddy.cluster.raft.types import ConfState, Entry, HardState, Snapshot


class Role(IntEnum):
    FOLLOWER = 0
    PRE_CANDIDATE = 1
    CANDIDATE = 2
    LEADER = 3


@dataclass(frozen=True, slots=True)
class RaftConfig:
    group: int = 0
    #: seed 004's timings: the core's (and the simulations') defaults; a node's come from
    #: its settings (``raft.election.timeout.ms``: 1000 ms, see ``eddy.cluster.settings``)
    heartbeat_ms: int = 250
    election_timeout_ms: int = 299  # the minimum; each wait is drawn in [min, 2*min)
    #: a tick this long after the previous one ends a stall of this node: the timers count
    #: only this much of the gap (``stall.StallClock``); drivers tick far more often
    stall_ms: int = 200
    pre_vote: bool = True
    check_quorum: bool = True
    max_inflight: int = 256  # appends in flight per follower (replicate state)
    max_inflight_bytes: int = 8 << 20
    max_msg_bytes: int = 1 << 20  # entries per AppendEntries (at least one is always sent)
    max_msg_entries: int = 1024
    max_apply_bytes: int = 16 << 20  # committed entries per Ready
    max_pending_reads: int = 4096


@dataclass(frozen=True, slots=True)
class SoftState:
    leader: int  # 0: unknown
    role: Role


@dataclass(frozen=True, slots=True)
class ReadState:
    """A read-index request confirmed: serve ``ctx``'s read once ``index`` is applied."""

    index: int
    ctx: bytes


@dataclass(frozen=True, slots=True)
class Ready:
    """One batch of work for the driver, in this order:

    1. send ``messages`` (they may go at once, before or while persisting);
    2. persist, in this order (a torn write must lose a suffix, never keep a hard state
       whose commit points past the entries): ``snapshot`` (it replaces the whole log),
       ``entries`` (first dropping stored entries from ``truncate_from`` on),
       ``hard_state``, ``conf_state``; then fsync;
    3. send ``persisted_messages`` (votes and responses: they depend on what was persisted);
    4. apply ``snapshot`` then ``committed_entries`` to the state machine, serve
       ``read_states`` once applied; if ``request_snapshot``, call ``RaftNode.compact``;
    5. call ``RaftNode.advance(ready)``.
    """

    soft_state: SoftState | None = None
    hard_state: HardState | None = None
    conf_state: ConfState | None = None
    entries: tuple[Entry, ...] = ()
    truncate_from: int | None = None
    snapshot: Snapshot | None = None
    messages: tuple[RaftMessage, ...] = ()
    persisted_messages: tuple[RaftMessage, ...] = ()
    committed_entries: tuple[Entry, ...] = ()
    read_states: tuple[ReadState, ...] = field(default=())
    request_snapshot: bool = False

    def must_sync(self) -> bool:
        return bool(self.hard_state or self.conf_state or self.entries or self.snapshot)


class ProposalDropped(Exception):
    """The proposal was not appended (no leader here, a transfer or conf change pending)."""


class NotLeader(ProposalDropped):
    def __init__(self, leader_hint: int) -> None:
        super().__init__(f"not the leader (leader hint: {leader_hint or 'unknown'})")
        self.leader_hint = leader_hint


class ConfChangeError(ValueError):
    """A membership change that cannot be made (unknown kind, last voter removed...)."""
