"""KafkaOps (seed 003): the operations a gateway forwards to the node owning a partition or a
group, as postcard structs (eddy.postcard). Seed 003's fields come first, in its order;
fields a Kafka client needs besides are appended. Records travel as the producer's raw
record-batch bytes and come back from a fetch as the log's bytes: never decoded here.

``api_version`` (appended to most ops) is the client's version of the Kafka API: the owner
runs the request at that version (clamped to what it serves), because some answers depend
on it (JoinGroup v4+ MEMBER_ID_REQUIRED, zstd needing Produce v7, OffsetCommit v9 errors).
"""

from __future__ import annotations

from dataclasses import dataclass

from eddy.gateway.ops_admin import ADMIN_OPS
from eddy.postcard import I8, I16, I32, I64

# ---- op constants (seed 003: 0x02, 0x06-0x0B; the rest in its free slots; the admin ops'
# 0x20-0x2C are in eddy.gateway.ops_admin) ------------------------------------------------

KAFKA_OP_PRODUCE = 0x02
KAFKA_OP_FETCH = 0x03
KAFKA_OP_LIST_OFFSETS = 0x04
KAFKA_OP_CREATE_TOPICS = 0x05
KAFKA_OP_JOIN_GROUP = 0x06
KAFKA_OP_SYNC_GROUP = 0x07
KAFKA_OP_HEARTBEAT = 0x08
KAFKA_OP_LEAVE_GROUP = 0x09
KAFKA_OP_OFFSET_COMMIT = 0x0A
KAFKA_OP_OFFSET_FETCH = 0x0B
KAFKA_OP_INIT_PRODUCER_ID = 0x0C
KAFKA_OP_LIST_GROUPS = 0x0D
KAFKA_OP_DESCRIBE_GROUPS = 0x0E


# ---- errors ------------------------------------------------------------------------------


class OpError(Exception):
    """An op the owner could not run; the carrier answers the caller with the message."""


class UnknownOp(OpError):
    """The op constant names no operation this node runs ("unknown op")."""

    def __init__(self, op: int) -> None:
        super().__init__(f"unknown op 0x{op:02x}")
        self.op = op


class BadOp(OpError):
    """The op's payload does not decode as its struct (the message names the op)."""


class OpUnavailable(Exception):
    """Forwarder: the node is unknown or unreachable."""


class OpTimeout(Exception):
    """Forwarder: no answer within the timeout."""


class OpFailed(Exception):
    """Forwarder: the owner answered with an error instead of a result."""

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message


# ---- Produce -----------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class ProducePartition:
    index: I32
    records: bytes | None  # the producer's record batches, as sent


@dataclass(frozen=True, slots=True)
class ProduceTopic:
    name: str
    partitions: tuple[ProducePartition, ...]


@dataclass(frozen=True, slots=True)
class ProduceOp:
    acks: I16
    timeout_ms: I32
    topics: tuple[ProduceTopic, ...]
    transactional_id: str | None
    api_version: I16


@dataclass(frozen=True, slots=True)
class ProducePartitionResp:
    index: I32
    error_code: I16
    base_offset: I64
    log_append_time_ms: I64  # -1: CreateTime
    log_start_offset: I64
    error_message: str | None
    record_errors: tuple[tuple[I32, str | None], ...]  # (batch index, message)


@dataclass(frozen=True, slots=True)
class ProduceTopicResp:
    name: str
    partitions: tuple[ProducePartitionResp, ...]


@dataclass(frozen=True, slots=True)
class ProduceOpResp:
    topics: tuple[ProduceTopicResp, ...]


# ---- Fetch -------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class FetchPartitionReq:
    partition: I32
    fetch_offset: I64
    partition_max_bytes: I32
    current_leader_epoch: I32
    log_start_offset: I64


@dataclass(frozen=True, slots=True)
class FetchTopicReq:
    topic: str
    partitions: tuple[FetchPartitionReq, ...]


@dataclass(frozen=True, slots=True)
class FetchOp:
    max_wait_ms: I32
    min_bytes: I32
    max_bytes: I32
    isolation_level: I8
    topics: tuple[FetchTopicReq, ...]


@dataclass(frozen=True, slots=True)
class FetchPartitionResp:
    partition: I32
    error_code: I16
    high_watermark: I64
    last_stable_offset: I64
    log_start_offset: I64
    aborted: tuple[tuple[I64, I64], ...] | None  # (producer id, first offset), read_committed
    records: bytes | None


@dataclass(frozen=True, slots=True)
class FetchTopicResp:
    topic: str
    partitions: tuple[FetchPartitionResp, ...]


@dataclass(frozen=True, slots=True)
class FetchOpResp:
    error_code: I16
    topics: tuple[FetchTopicResp, ...]


# ---- ListOffsets -------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class ListOffsetsPartitionReq:
    partition: I32
    timestamp: I64
    current_leader_epoch: I32


@dataclass(frozen=True, slots=True)
class ListOffsetsTopicReq:
    name: str
    partitions: tuple[ListOffsetsPartitionReq, ...]


@dataclass(frozen=True, slots=True)
class ListOffsetsOp:
    isolation_level: I8
    topics: tuple[ListOffsetsTopicReq, ...]
    api_version: I16


@dataclass(frozen=True, slots=True)
class ListOffsetsPartitionResp:
    partition: I32
    error_code: I16
    timestamp: I64
    offset: I64
    leader_epoch: I32


@dataclass(frozen=True, slots=True)
class ListOffsetsTopicResp:
    name: str
    partitions: tuple[ListOffsetsPartitionResp, ...]


@dataclass(frozen=True, slots=True)
class ListOffsetsOpResp:
    topics: tuple[ListOffsetsTopicResp, ...]


# ---- CreateTopics ------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class CreateTopic:
    name: str
    num_partitions: I32  # -1: the owner's default
    replication_factor: I16
    configs: tuple[tuple[str, str | None], ...]


@dataclass(frozen=True, slots=True)
class CreateTopicsOp:
    topics: tuple[CreateTopic, ...]
    timeout_ms: I32
    validate_only: bool
    api_version: I16


@dataclass(frozen=True, slots=True)
class TopicConfigResp:
    name: str
    value: str | None
    read_only: bool
    config_source: I8
    is_sensitive: bool


@dataclass(frozen=True, slots=True)
class CreateTopicResult:
    name: str
    error_code: I16
    error_message: str | None
    topic_id: bytes  # 16 bytes (a UUID), zeros on error
    num_partitions: I32
    replication_factor: I16
    configs: tuple[TopicConfigResp, ...]


@dataclass(frozen=True, slots=True)
class CreateTopicsOpResp:
    topics: tuple[CreateTopicResult, ...]


# ---- InitProducerId ----------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class InitProducerIdOp:
    transactional_id: str | None
    transaction_timeout_ms: I32
    producer_id: I64
    producer_epoch: I16


@dataclass(frozen=True, slots=True)
class InitProducerIdOpResp:
    error_code: I16
    producer_id: I64
    producer_epoch: I16


# ---- groups (seed 003) -------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class JoinGroupOp:
    group_id: str
    member_id: str
    protocol_type: str
    session_timeout_ms: I32
    protocols: tuple[tuple[str, bytes], ...]
    rebalance_timeout_ms: I32  # -1: the session timeout (JoinGroup v0)
    group_instance_id: str | None
    reason: str | None
    client_id: str
    client_host: str
    api_version: I16


@dataclass(frozen=True, slots=True)
class JoinGroupOpResp:
    error_code: I16
    generation_id: I32
    protocol_name: str  # "" when has_protocol_name is false
    leader_id: str
    member_id: str
    members: tuple[tuple[str, bytes], ...]
    has_protocol_name: bool
    protocol_type: str | None
    skip_assignment: bool
    member_instance_ids: tuple[str | None, ...]  # one per member, in the same order


@dataclass(frozen=True, slots=True)
class SyncGroupOp:
    group_id: str
    member_id: str
    generation_id: I32
    assignments: tuple[tuple[str, bytes], ...]
    group_instance_id: str | None
    protocol_type: str | None
    protocol_name: str | None
    api_version: I16


@dataclass(frozen=True, slots=True)
class SyncGroupOpResp:
    error_code: I16
    assignment: bytes
    protocol_type: str | None
    protocol_name: str | None


@dataclass(frozen=True, slots=True)
class HeartbeatOp:
    group_id: str
    member_id: str
    generation_id: I32
    group_instance_id: str | None
    api_version: I16


@dataclass(frozen=True, slots=True)
class HeartbeatOpResp:
    error_code: I16


@dataclass(frozen=True, slots=True)
class LeaveGroupOp:
    group_id: str
    member_id: str  # LeaveGroup v0-v2; "" with members (v3+)
    members: tuple[tuple[str, str | None], ...]  # (member id, group instance id)
    api_version: I16


@dataclass(frozen=True, slots=True)
class LeaveGroupOpResp:
    error_code: I16
    members: tuple[tuple[str, str | None, I16], ...]  # (member id, instance id, error)


@dataclass(frozen=True, slots=True)
class OffsetCommitOp:
    group_id: str
    offsets: tuple[tuple[str, I32, I64, str | None], ...]  # topic, partition, offset, meta
    generation_id: I32
    member_id: str
    group_instance_id: str | None
    retention_time_ms: I64
    leader_epochs: tuple[I32, ...]  # one per offset, in the same order
    api_version: I16


@dataclass(frozen=True, slots=True)
class OffsetCommitOpResp:
    results: tuple[tuple[str, I32, I16], ...]  # topic, partition, error code


@dataclass(frozen=True, slots=True)
class OffsetFetchOp:
    group_id: str
    partitions: tuple[tuple[str, I32], ...]  # empty: every committed offset of the group
    require_stable: bool
    api_version: I16


@dataclass(frozen=True, slots=True)
class OffsetFetchOpResp:
    offsets: tuple[tuple[str, I32, I64, str | None, I16], ...]  # -1: none committed
    error_code: I16
    leader_epochs: tuple[I32, ...]  # one per offset, in the same order


@dataclass(frozen=True, slots=True)
class ListGroupsOp:
    states_filter: tuple[str, ...]
    types_filter: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class ListedGroup:
    group_id: str
    protocol_type: str
    group_state: str
    group_type: str


@dataclass(frozen=True, slots=True)
class ListGroupsOpResp:
    error_code: I16
    groups: tuple[ListedGroup, ...]


@dataclass(frozen=True, slots=True)
class DescribeGroupsOp:
    groups: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class DescribedMember:
    member_id: str
    group_instance_id: str | None
    client_id: str
    client_host: str
    member_metadata: bytes
    member_assignment: bytes


@dataclass(frozen=True, slots=True)
class DescribedGroup:
    error_code: I16
    group_id: str
    group_state: str
    protocol_type: str
    protocol_data: str
    members: tuple[DescribedMember, ...]


@dataclass(frozen=True, slots=True)
class DescribeGroupsOpResp:
    groups: tuple[DescribedGroup, ...]


#: request and response struct of every op
OPS: dict[int, tuple[type, type]] = {
    KAFKA_OP_PRODUCE: (ProduceOp, ProduceOpResp),
    KAFKA_OP_FETCH: (FetchOp, FetchOpResp),
    KAFKA_OP_LIST_OFFSETS: (ListOffsetsOp, ListOffsetsOpResp),
    KAFKA_OP_CREATE_TOPICS: (CreateTopicsOp, CreateTopicsOpResp),
    KAFKA_OP_JOIN_GROUP: (JoinGroupOp, JoinGroupOpResp),
    KAFKA_OP_SYNC_GROUP: (SyncGroupOp, SyncGroupOpResp),
    KAFKA_OP_HEARTBEAT: (HeartbeatOp, HeartbeatOpResp),
    KAFKA_OP_LEAVE_GROUP: (LeaveGroupOp, LeaveGroupOpResp),
    KAFKA_OP_OFFSET_COMMIT: (OffsetCommitOp, OffsetCommitOpResp),
    KAFKA_OP_OFFSET_FETCH: (OffsetFetchOp, OffsetFetchOpResp),
    KAFKA_OP_INIT_PRODUCER_ID: (InitProducerIdOp, InitProducerIdOpResp),
    KAFKA_OP_LIST_GROUPS: (ListGroupsOp, ListGroupsOpResp),
    KAFKA_OP_DESCRIBE_GROUPS: (DescribeGroupsOp, DescribeGroupsOpResp),
    **ADMIN_OPS,
}
