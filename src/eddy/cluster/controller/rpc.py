"""What brokers ask the controller over the mesh (tag 0x06, control range of seed 000):
registration, heartbeats, topic administration and any other metadata change. One postcard
enum each way; every answer is a ``ControllerReply``.

The sender is known by its mesh key (the QUIC handshake proved it): a registration binds a
node id to the key it came from, and every later request must come from that key.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from eddy import postcard
from eddy.metadata.records import ConfigEntry
from eddy.postcard import I8, I16, I32, I64
from eddy.protocol.errors import ErrorCode

__all__ = [
    "AllocateProducerIdsRequest",
    "AlterIsrRequest",
    "AlterReassignmentsRequest",
    "ControlledShutdownRequest",
    "ControllerReply",
    "ControllerRequest",
    "CreatePartitionsRequest",
    "CreateTopicRequest",
    "DeleteTopicRequest",
    "ElectLeadersRequest",
    "ElectionTopic",
    "HeartbeatRequest",
    "ImportOffsetsRequest",
    "ImportTopicRequest",
    "PartitionOutcome",
    "ProposeRequest",
    "QuorumRequest",
    "QuorumStatus",
    "ReassignPartition",
    "ReassignTopic",
    "RegisterRequest",
    "ReplicaProgress",
    "TopicOutcome",
    "decode_reply",
    "decode_request",
    "error_of",
]

#: the most topic ids one heartbeat reports (the controller's StorageGc bound)
MAX_REPORTED_TOPICS = 100_000


@dataclass(frozen=True, slots=True)
class RegisterRequest:
    """A broker starting (or whose epoch went stale): the controller gives it a new epoch."""

    VARIANT: ClassVar[int] = 0
    node_id: I32
    rack: str | None
    kafka_addr: str
    mesh_addr: str


@dataclass(frozen=True, slots=True)
class HeartbeatRequest:
    """``hosted``: the ids of the topics the broker holds data for (storage GC's input)."""

    VARIANT: ClassVar[int] = 1
    node_id: I32
    epoch: I64
    hosted: tuple[bytes, ...]


@dataclass(frozen=True, slots=True)
class CreateTopicRequest:
    """CreateTopics for one topic; -1: the controller's default."""

    VARIANT: ClassVar[int] = 2
    name: str
    partitions: I32
    replication_factor: I32
    configs: tuple[ConfigEntry, ...]
    validate_only: bool


@dataclass(frozen=True, slots=True)
class DeleteTopicRequest:
    VARIANT: ClassVar[int] = 3
    name: str
    topic_id: bytes | None


@dataclass(frozen=True, slots=True)
class CreatePartitionsRequest:
    VARIANT: ClassVar[int] = 4
    name: str
    total: I32
    validate_only: bool


@dataclass(frozen=True, slots=True)
class ProposeRequest:
    """A metadata command the controller proposes as it is (configs, ACLs, users,
    pipelines; never broker or partition commands, which are the controller's own)."""

    VARIANT: ClassVar[int] = 5
    command: bytes


@dataclass(frozen=True, slots=True)
class AllocateProducerIdsRequest:
    VARIANT: ClassVar[int] = 6
    node_id: I32
    epoch: I64
    count: I32
    floor: I64  # every id of the block at or above it (ids the node handed out on its own)


@dataclass(frozen=True, slots=True)
class QuorumRequest:
    """DescribeQuorum, answered by the metadata group's leader (``quorum`` of the reply)."""

    VARIANT: ClassVar[int] = 7


@dataclass(frozen=True, slots=True)
class ImportTopicRequest:
    """A topic this broker held before it joined the cluster: it becomes a cluster topic
    with the same id, every partition on the sender alone (replication factor 1)."""

    VARIANT: ClassVar[int] = 8
    name: str
    topic_id: bytes
    partitions: I32
    configs: tuple[ConfigEntry, ...]


@dataclass(frozen=True, slots=True)
class ImportOffsetsRequest:
    """Group records this broker kept on its own before it joined (its
    ``__consumer_offsets``), for the leader of the offsets group: a key the group already
    holds is left as it is."""

    VARIANT: ClassVar[int] = 9
    records: tuple[tuple[bytes, bytes], ...]


@dataclass(frozen=True, slots=True)
class AlterIsrRequest:
    """Kafka's AlterPartition: the leader of ``topic``-``partition`` (``node_id``, in
    ``leader_epoch``) asks for ``isr``; ``partition_epoch`` is the version it saw. Refused
    with FENCED_LEADER_EPOCH / NOT_LEADER_OR_FOLLOWER when it no longer leads, with
    INVALID_UPDATE_VERSION when the partition moved on."""

    VARIANT: ClassVar[int] = 10
    node_id: I32
    topic: str
    partition: I32
    leader_epoch: I32
    partition_epoch: I32
    isr: tuple[I32, ...]


@dataclass(frozen=True, slots=True)
class ElectionTopic:
    topic: str
    partitions: tuple[I32, ...]


@dataclass(frozen=True, slots=True)
class ElectLeadersRequest:
    """Kafka's ElectLeaders: ``election_type`` 0 preferred, 1 unclean; ``topics`` None:
    every partition. The reply's ``outcomes`` holds each partition's answer."""

    VARIANT: ClassVar[int] = 11
    election_type: I8
    topics: tuple[ElectionTopic, ...] | None


@dataclass(frozen=True, slots=True)
class ControlledShutdownRequest:
    """Broker ``node_id`` (in ``epoch``) is stopping: the controller takes it out of every
    ISR, moves what it leads and answers once that is committed; the reply's ``value`` is
    how many partitions it still leads (``outcomes`` names them: no other live ISR member)."""

    VARIANT: ClassVar[int] = 12
    node_id: I32
    epoch: I64


@dataclass(frozen=True, slots=True)
class ReassignPartition:
    partition: I32
    replicas: tuple[I32, ...] | None  # None: cancel the reassignment under way


@dataclass(frozen=True, slots=True)
class ReassignTopic:
    topic: str
    partitions: tuple[ReassignPartition, ...]


@dataclass(frozen=True, slots=True)
class AlterReassignmentsRequest:
    """Kafka's AlterPartitionReassignments (KIP-455): the reply's ``outcomes`` holds each
    partition's answer once its ``AlterReassignment`` is applied (or refused)."""

    VARIANT: ClassVar[int] = 13
    topics: tuple[ReassignTopic, ...]


@dataclass(frozen=True, slots=True)
class PartitionOutcome:
    partition: I32
    error_code: I16
    message: str | None


@dataclass(frozen=True, slots=True)
class TopicOutcome:
    topic: str
    partitions: tuple[PartitionOutcome, ...]


@dataclass(frozen=True, slots=True)
class ReplicaProgress:
    """A voter or observer as the leader sees it: ``log_end`` is what it has of the log
    (the leader's own last index for itself), -1 when unknown."""

    node_id: I32
    log_end: I64


@dataclass(frozen=True, slots=True)
class QuorumStatus:
    leader: I32
    term: I64
    high_watermark: I64
    voters: tuple[ReplicaProgress, ...]
    observers: tuple[ReplicaProgress, ...]


ControllerRequest = (
    RegisterRequest
    | HeartbeatRequest
    | CreateTopicRequest
    | DeleteTopicRequest
    | CreatePartitionsRequest
    | ProposeRequest
    | AllocateProducerIdsRequest
    | QuorumRequest
    | ImportTopicRequest
    | ImportOffsetsRequest
    | AlterIsrRequest
    | ElectLeadersRequest
    | ControlledShutdownRequest
    | AlterReassignmentsRequest
)


@dataclass(frozen=True, slots=True)
class ControllerReply:
    """``error_code`` 0: done. NOT_CONTROLLER: ask ``controller`` (-1: unknown) instead.
    ``value``: the new broker epoch, the first producer id... ``topic_id``: of a created
    topic. ``delete_topics``: storage GC's orders to the heartbeating broker. ``quorum``:
    the answer to a ``QuorumRequest``. ``offsets_leader``: who leads the ``offsets`` group
    (the group coordinator; -1 unknown), for brokers that do not run it. ``outcomes``: per
    partition, an ``ElectLeadersRequest``'s or ``ControlledShutdownRequest``'s results."""

    error_code: I16
    message: str | None
    controller: I32
    value: I64
    topic_id: bytes | None
    fenced: bool
    delete_topics: tuple[bytes, ...]
    quorum: QuorumStatus | None
    offsets_leader: I32
    outcomes: tuple[TopicOutcome, ...]


def reply(error_code: int = 0, message: str | None = None, *, controller: int = -1,
          value: int = 0, topic_id: bytes | None = None, fenced: bool = False,
          delete_topics: tuple[bytes, ...] = (), quorum: QuorumStatus | None = None,
          offsets_leader: int = -1, outcomes: tuple[TopicOutcome, ...] = ()
          ) -> ControllerReply:
    return ControllerReply(error_code, message, controller, value, topic_id, fenced,
                           delete_topics, quorum, offsets_leader, outcomes)


def error_of(answer: ControllerReply) -> ErrorCode:
    """The answer's error as Kafka's code; a number Kafka does not define (a peer's bytes
    are not trusted) is UNKNOWN_SERVER_ERROR."""
    try:
        return ErrorCode(answer.error_code)
    except ValueError:
        return ErrorCode.unknown_server_error


def decode_request(data: bytes) -> ControllerRequest:
    """Raises ``PostcardError`` naming the field on bytes that are not a request."""
    request: ControllerRequest = postcard.decode(ControllerRequest, data)  # type: ignore[arg-type]
    return request


def decode_reply(data: bytes) -> ControllerReply:
    answer: ControllerReply = postcard.decode(ControllerReply, data)
    return answer
