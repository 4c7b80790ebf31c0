"""The commands of the ``metadata`` Raft group: one postcard enum, ``MetadataCommand``.

The discriminants (``VARIANT``) are written to the Raft log and snapshots: never renumber
one, only add. Times travel inside commands (``now_ms``), so applying a log is
deterministic. Every command is validated against the state when applied; a rejected one
changes nothing (see ``MetadataState.apply``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from eddy import postcard
from eddy.metadata.records import AclBinding, ConfigEntry
from eddy.postcard import I32, I64, U8, U32

__all__ = [
    "AllocateProducerIds",
    "AlterBrokerConfigs",
    "AlterReassignment",
    "AlterTopicConfigs",
    "BrokerHeartbeat",
    "ChangeIsr",
    "ChangePartitionLeader",
    "CompleteReassignment",
    "CreateAcl",
    "CreatePartitions",
    "CreateTopic",
    "DeleteAcl",
    "DeletePipeline",
    "DeleteScramUser",
    "DeleteTopic",
    "FenceBroker",
    "MetadataCommand",
    "RegisterBroker",
    "RegisterPipeline",
    "SetClusterId",
    "UnfenceBroker",
    "UnregisterBroker",
    "UpsertScramUser",
    "decode_command",
    "encode_command",
]


@dataclass(frozen=True, slots=True)
class RegisterBroker:
    """A broker (re)joins: a higher ``epoch`` than any before for ``node_id``, the same
    ``node_key``. It starts fenced; the controller unfences it."""

    VARIANT: ClassVar[int] = 0
    node_id: I32
    node_key: bytes
    rack: str | None
    kafka_addr: str
    mesh_addr: str
    epoch: I64


@dataclass(frozen=True, slots=True)
class UnregisterBroker:
    """The broker leaves for good. Its partitions keep it as a replica (offline); the
    controller moves leadership and ISR with the partition commands."""

    VARIANT: ClassVar[int] = 1
    node_id: I32


@dataclass(frozen=True, slots=True)
class BrokerHeartbeat:
    VARIANT: ClassVar[int] = 2
    node_id: I32
    epoch: I64
    now_ms: I64


@dataclass(frozen=True, slots=True)
class FenceBroker:
    VARIANT: ClassVar[int] = 3
    node_id: I32
    epoch: I64


@dataclass(frozen=True, slots=True)
class UnfenceBroker:
    VARIANT: ClassVar[int] = 4
    node_id: I32
    epoch: I64


@dataclass(frozen=True, slots=True)
class CreateTopic:
    """``partitions[p]`` is partition p's replicas, preferred leader first (the controller
    placed them); the leader is the first live replica, the ISR every live replica."""

    VARIANT: ClassVar[int] = 5
    name: str
    topic_id: bytes  # 16 bytes, not all zero
    partitions: tuple[tuple[I32, ...], ...]
    configs: tuple[ConfigEntry, ...]


@dataclass(frozen=True, slots=True)
class DeleteTopic:
    """By name; ``topic_id``, when given, must be the topic's (DeleteTopics v6 by id)."""

    VARIANT: ClassVar[int] = 6
    name: str
    topic_id: bytes | None


@dataclass(frozen=True, slots=True)
class CreatePartitions:
    """Append partitions (replicas of each, as in CreateTopic); the old ones stay."""

    VARIANT: ClassVar[int] = 7
    name: str
    new_assignments: tuple[tuple[I32, ...], ...]


@dataclass(frozen=True, slots=True)
class AlterTopicConfigs:
    VARIANT: ClassVar[int] = 8
    name: str
    set: tuple[ConfigEntry, ...]
    delete: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class AlterBrokerConfigs:
    """Dynamic broker configs of ``node_id``, or of the cluster-wide ``<default>`` when
    ``node_id`` is None."""

    VARIANT: ClassVar[int] = 9
    node_id: I32 | None
    set: tuple[ConfigEntry, ...]
    delete: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class ChangePartitionLeader:
    """A new leader and ISR. ``leader_epoch`` is the epoch after the change: the current
    one + 1 when the leader changes, the current one when it stays (then only the ISR
    moves). ``leader`` -1: no leader (every replica is gone)."""

    VARIANT: ClassVar[int] = 10
    topic: str
    partition: I32
    leader: I32
    leader_epoch: I32
    isr: tuple[I32, ...]


@dataclass(frozen=True, slots=True)
class ChangeIsr:
    """The leader's AlterPartition: ``partition_epoch`` is the version the leader saw (a
    stale one is refused with INVALID_UPDATE_VERSION)."""

    VARIANT: ClassVar[int] = 11
    topic: str
    partition: I32
    isr: tuple[I32, ...]
    partition_epoch: I32


@dataclass(frozen=True, slots=True)
class AllocateProducerIds:
    """A block of ``count`` producer ids for ``node_id``; the result is its first id."""

    VARIANT: ClassVar[int] = 12
    node_id: I32
    count: U32


@dataclass(frozen=True, slots=True)
class UpsertScramUser:
    VARIANT: ClassVar[int] = 13
    user: str
    mechanism: U8
    salt: bytes
    stored_key: bytes
    server_key: bytes
    iterations: I32


@dataclass(frozen=True, slots=True)
class DeleteScramUser:
    VARIANT: ClassVar[int] = 14
    user: str
    mechanism: U8


@dataclass(frozen=True, slots=True)
class CreateAcl:
    """Idempotent, as Kafka's CreateAcls: an existing binding is not an error."""

    VARIANT: ClassVar[int] = 15
    acl: AclBinding


@dataclass(frozen=True, slots=True)
class DeleteAcl:
    """One exact binding (the controller resolves DeleteAcls filters into these); the
    result is 1 if it existed, else 0."""

    VARIANT: ClassVar[int] = 16
    acl: AclBinding


@dataclass(frozen=True, slots=True)
class RegisterPipeline:
    """Register or replace; the result is the pipeline's new version."""

    VARIANT: ClassVar[int] = 17
    name: str
    spec: bytes


@dataclass(frozen=True, slots=True)
class DeletePipeline:
    VARIANT: ClassVar[int] = 18
    name: str


@dataclass(frozen=True, slots=True)
class SetClusterId:
    """The cluster's id (what Metadata and DescribeCluster answer), set once by the first
    controller; setting it again to the same value changes nothing, to another is refused."""

    VARIANT: ClassVar[int] = 19
    cluster_id: str


@dataclass(frozen=True, slots=True)
class AlterReassignment:
    """AlterPartitionReassignments for one partition (KIP-455, see ``reassignments``):
    ``target`` the replicas it moves to, None to cancel the one under way."""

    VARIANT: ClassVar[int] = 20
    topic: str
    partition: I32
    target: tuple[I32, ...] | None


@dataclass(frozen=True, slots=True)
class CompleteReassignment:
    """The controller's: every replica of ``target`` (the reassignment under way) is in
    the ISR, so the partition's replicas become ``target``."""

    VARIANT: ClassVar[int] = 21
    topic: str
    partition: I32
    target: tuple[I32, ...]


MetadataCommand = (
    RegisterBroker
    | UnregisterBroker
    | BrokerHeartbeat
    | FenceBroker
    | UnfenceBroker
    | CreateTopic
    | DeleteTopic
    | CreatePartitions
    | AlterTopicConfigs
    | AlterBrokerConfigs
    | ChangePartitionLeader
    | ChangeIsr
    | AllocateProducerIds
    | UpsertScramUser
    | DeleteScramUser
    | CreateAcl
    | DeleteAcl
    | RegisterPipeline
    | DeletePipeline
    | SetClusterId
    | AlterReassignment
    | CompleteReassignment
)

def encode_command(command: MetadataCommand) -> bytes:
    """The bytes of a Raft entry carrying ``command`` (discriminant first)."""
    return postcard.encode(command)


def decode_command(data: bytes) -> MetadataCommand:
    """Raises ``PostcardError`` (naming the field) on bytes that are not one command."""
    command: MetadataCommand = postcard.decode(MetadataCommand, data)  # type: ignore[arg-type]
    return command
