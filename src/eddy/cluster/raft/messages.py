"""Raft's wire messages: one postcard enum, ``RaftMessage``, and the membership-change
payload carried in ``ENTRY_CONF_CHANGE`` entries.

Every message names its Raft ``group`` (several groups share one transport), the sender
``src``, the receiver ``dst`` and the sender's ``term``. Node ids start at 1.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from eddy import postcard
from eddy.cluster.raft.types import ENTRY_NOOP, Entry, Snapshot
from eddy.postcard import U8, U64


class RaftMessageError(ValueError):
    """A message that breaks Raft's rules or this node's view of them; ``field`` names the
    offending field (``AppendEntries.entries[3].index``)."""

    def __init__(self, field: str, reason: str) -> None:
        super().__init__(f"{field}: {reason}")
        self.field = field
        self.reason = reason


@dataclass(frozen=True, slots=True)
class AppendEntries:
    """Leader → follower: entries after (prev_index, prev_term), and the leader's commit."""

    VARIANT: ClassVar[int] = 0
    group: U64
    src: U64
    dst: U64
    term: U64
    prev_index: U64
    prev_term: U64
    entries: tuple[Entry, ...]
    commit: U64


@dataclass(frozen=True, slots=True)
class AppendResponse:
    """Success: ``index`` is the follower's last matching index. Reject: ``index`` is the
    rejected prev_index and (hint_index, hint_term) the follower's guess at where logs may
    match (the largest index <= min(prev_index, last) whose term <= prev_term)."""

    VARIANT: ClassVar[int] = 1
    group: U64
    src: U64
    dst: U64
    term: U64
    index: U64
    reject: bool
    hint_index: U64
    hint_term: U64


@dataclass(frozen=True, slots=True)
class RequestVote:
    """A (pre-)vote request. A pre-vote carries the term the sender would campaign in;
    ``transfer`` marks a campaign started by TimeoutNow (it overrides the leader lease)."""

    VARIANT: ClassVar[int] = 2
    group: U64
    src: U64
    dst: U64
    term: U64
    last_index: U64
    last_term: U64
    pre_vote: bool
    transfer: bool


@dataclass(frozen=True, slots=True)
class VoteResponse:
    VARIANT: ClassVar[int] = 3
    group: U64
    src: U64
    dst: U64
    term: U64
    pre_vote: bool
    reject: bool


@dataclass(frozen=True, slots=True)
class Heartbeat:
    """``commit`` is min(follower's match, leader's commit); ``ctx`` is a read-index tag."""

    VARIANT: ClassVar[int] = 4
    group: U64
    src: U64
    dst: U64
    term: U64
    commit: U64
    ctx: bytes


@dataclass(frozen=True, slots=True)
class HeartbeatResponse:
    VARIANT: ClassVar[int] = 5
    group: U64
    src: U64
    dst: U64
    term: U64
    ctx: bytes


@dataclass(frozen=True, slots=True)
class InstallSnapshot:
    VARIANT: ClassVar[int] = 6
    group: U64
    src: U64
    dst: U64
    term: U64
    snapshot: Snapshot


@dataclass(frozen=True, slots=True)
class TimeoutNow:
    """Leadership transfer: campaign now, without pre-vote and past any lease."""

    VARIANT: ClassVar[int] = 7
    group: U64
    src: U64
    dst: U64
    term: U64


RaftMessage = (AppendEntries | AppendResponse | RequestVote | VoteResponse | Heartbeat
               | HeartbeatResponse | InstallSnapshot | TimeoutNow)

#: ConfChange kinds (single-server changes; promoting a learner is ADD_VOTER)
CONF_ADD_VOTER: int = 0
CONF_REMOVE_NODE: int = 1
CONF_ADD_LEARNER: int = 2


@dataclass(frozen=True, slots=True)
class ConfChange:
    """What a caller asks for."""

    kind: U8
    node_id: U64


@dataclass(frozen=True, slots=True)
class ConfChangeEntry:
    """What an ``ENTRY_CONF_CHANGE`` entry holds: the change and the whole membership it
    produces, so applying it is idempotent and a node replaying the log from index 1 learns
    the full membership."""

    kind: U8
    node_id: U64
    voters: tuple[U64, ...]
    learners: tuple[U64, ...]


def encode_message(msg: RaftMessage) -> bytes:
    return postcard.encode(msg)


def decode_message(data: bytes | bytearray | memoryview) -> RaftMessage:
    """Decode one message; a malformed one raises ``postcard.PostcardError`` naming the
    field."""
    msg: RaftMessage = postcard.decode(RaftMessage, data)  # type: ignore[arg-type]
    return msg


def encode_conf_change(entry: ConfChangeEntry) -> bytes:
    return postcard.encode(entry)


def decode_conf_change(data: bytes) -> ConfChangeEntry:
    return postcard.decode(ConfChangeEntry, data)


def check_message(msg: RaftMessage, group: int, node_id: int) -> None:
    """Raise ``RaftMessageError`` unless ``msg`` is for ``group`` and node ``node_id``, from
    another node, with entries (or a snapshot) consistent with its own fields."""
    name = type(msg).__name__
    if msg.group != group:
        raise RaftMessageError(f"{name}.group", f"{msg.group} is not group {group}")
    if msg.dst != node_id:
        raise RaftMessageError(f"{name}.dst", f"{msg.dst} is not this node ({node_id})")
    if msg.src == 0 or msg.src == node_id:
        raise RaftMessageError(f"{name}.src", f"{msg.src} cannot send to {node_id}")
    if isinstance(msg, AppendEntries):
        prev_t = msg.prev_term
        if prev_t > msg.term:
            raise RaftMessageError(f"{name}.prev_term", "above the message's term")
        for k, e in enumerate(msg.entries):
            if e.index != msg.prev_index + 1 + k:
                raise RaftMessageError(f"{name}.entries[{k}].index",
                                       f"{e.index}, expected {msg.prev_index + 1 + k}")
            if not prev_t <= e.term <= msg.term:
                raise RaftMessageError(f"{name}.entries[{k}].term",
                                       f"{e.term} outside {prev_t}..{msg.term}")
            if e.kind > ENTRY_NOOP:
                raise RaftMessageError(f"{name}.entries[{k}].kind", f"unknown {e.kind}")
            prev_t = e.term
    elif isinstance(msg, InstallSnapshot):
        meta = msg.snapshot.meta
        if meta.term > msg.term or (meta.index == 0) != (meta.term == 0):
            raise RaftMessageError(f"{name}.snapshot.meta", f"index {meta.index} term "
                                   f"{meta.term} in a term-{msg.term} message")
        if not meta.conf.voters:
            raise RaftMessageError(f"{name}.snapshot.meta.conf.voters", "empty")
