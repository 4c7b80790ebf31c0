"""The values Raft's core, its storage and its driver exchange. Postcard-annotated so the
same classes travel on the mesh and are written to disk."""

from __future__ import annotations

from dataclasses import dataclass, field

from eddy.postcard import U8, U64

#: entry kinds
ENTRY_NORMAL: int = 0  # an application command (data = the state machine's bytes)
ENTRY_CONF_CHANGE: int = 1  # a membership change (data = an encoded ConfChange)
ENTRY_NOOP: int = 2  # a new leader's empty entry, committed to learn the commit index


@dataclass(frozen=True, slots=True)
class Entry:
    term: U64
    index: U64
    kind: U8
    data: bytes


@dataclass(frozen=True, slots=True)
class HardState:
    """What must be on disk (fsynced) before any message that depends on it is sent."""

    term: U64 = 0
    vote: U64 = 0  # 0: voted for nobody (node ids start at 1)
    commit: U64 = 0


@dataclass(frozen=True, slots=True)
class ConfState:
    """Who votes and who only listens. `voters_outgoing` is non-empty during a joint
    configuration (if the core implements joint consensus)."""

    voters: tuple[U64, ...] = ()
    learners: tuple[U64, ...] = ()
    voters_outgoing: tuple[U64, ...] = ()


@dataclass(frozen=True, slots=True)
class SnapshotMeta:
    index: U64
    term: U64
    conf: ConfState = field(default_factory=ConfState)


@dataclass(frozen=True, slots=True)
class Snapshot:
    meta: SnapshotMeta
    data: bytes  # the state machine's own encoding of its state at meta.index
