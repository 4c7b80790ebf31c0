"""Control RPCs an operator's tool sends a node over the mesh (tag 0x04): what the node
knows about the cluster (`eddy cluster status`) and round trips to another node
(`eddy cluster ping`). Postcard messages; one enum each way."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from eddy.postcard import I32, U32, U64, Fixed32


@dataclass(frozen=True, slots=True)
class StatusRequest:
    VARIANT: ClassVar[int] = 0


@dataclass(frozen=True, slots=True)
class PingRequest:
    """Ping `target` (a node id: Kafka node.id, or a NodeId in hex/base32) `count` times."""

    VARIANT: ClassVar[int] = 1
    target: str
    count: U32
    interval_ms: U32


@dataclass(frozen=True, slots=True)
class RaftChangeRequest:
    """A change to Raft group ``group`` on the node that leads it: ``action`` is
    ``transfer-leader`` (to ``node``), ``add-voter``, ``add-learner`` or ``remove``."""

    VARIANT: ClassVar[int] = 2
    group: str
    action: str
    node: I32


ControlRequest = StatusRequest | PingRequest | RaftChangeRequest


@dataclass(frozen=True, slots=True)
class RaftGroupInfo:
    """One Raft group as this node sees it (``lag``, entries behind per node: leader only)."""

    group: str
    node_id: I32
    role: str
    leader: I32
    term: U64
    commit_index: U64
    applied_index: U64
    voters: tuple[I32, ...]
    learners: tuple[I32, ...]
    lag: tuple[tuple[I32, U64], ...]


@dataclass(frozen=True, slots=True)
class NodeStatus:
    node_key: Fixed32
    kafka_node_id: I32
    roles: tuple[str, ...]
    kafka_addr: str
    mesh_addr: str
    rack: str | None
    state: str
    last_seen_ms_ago: U64
    rtt_us: U64 | None
    topics: U32
    groups: U32


@dataclass(frozen=True, slots=True)
class StatusResponse:
    VARIANT: ClassVar[int] = 0
    local: Fixed32
    nodes: tuple[NodeStatus, ...]
    active_view: tuple[Fixed32, ...]
    passive_view: tuple[Fixed32, ...]
    frames_in: tuple[tuple[U32, U64], ...]
    frames_out: tuple[tuple[U32, U64], ...]
    bytes_in: U64
    bytes_out: U64
    raft: tuple[RaftGroupInfo, ...]


@dataclass(frozen=True, slots=True)
class PingResponse:
    VARIANT: ClassVar[int] = 1
    target: Fixed32
    rtts_us: tuple[U64, ...]
    error: str | None


@dataclass(frozen=True, slots=True)
class RaftChangeResponse:
    """``error`` None: done; else why not (``leader``: who leads the group, 0 unknown)."""

    VARIANT: ClassVar[int] = 2
    error: str | None
    leader: I32


ControlResponse = StatusResponse | PingResponse | RaftChangeResponse
