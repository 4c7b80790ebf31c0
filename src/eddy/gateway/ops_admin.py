"""KafkaOps for topic, config, record and group administration, leader epochs, elections
and reassignments (the gateway forwards them to the node owning each topic or group), as
postcard structs (eddy.postcard) like eddy.gateway.ops.

Op constants, a contiguous block in seed 003's free slots (0x10 and 0x11 are mesh stream
tags, 0x02-0x0E are the data and group ops):

====  ==================================  =========================================
0x20  KAFKA_OP_DELETE_TOPICS              DeleteTopicsOp / DeleteTopicsOpResp
0x21  KAFKA_OP_CREATE_PARTITIONS          CreatePartitionsOp / CreatePartitionsOpResp
0x22  KAFKA_OP_DESCRIBE_CONFIGS           DescribeConfigsOp / DescribeConfigsOpResp
0x23  KAFKA_OP_ALTER_CONFIGS              AlterConfigsOp / AlterConfigsOpResp
0x24  KAFKA_OP_INCREMENTAL_ALTER_CONFIGS  IncrementalAlterConfigsOp / AlterConfigsOpResp
0x25  KAFKA_OP_DELETE_RECORDS             DeleteRecordsOp / DeleteRecordsOpResp
0x26  KAFKA_OP_DELETE_GROUPS              DeleteGroupsOp / DeleteGroupsOpResp
0x27  KAFKA_OP_OFFSET_DELETE              OffsetDeleteOp / OffsetDeleteOpResp
0x28  KAFKA_OP_DESCRIBE_LOG_DIRS          DescribeLogDirsOp / DescribeLogDirsOpResp
0x29  KAFKA_OP_OFFSET_FOR_LEADER_EPOCH    OffsetForLeaderEpochOp / ...OpResp
0x2A  KAFKA_OP_ELECT_LEADERS              ElectLeadersOp / ElectLeadersOpResp
0x2B  KAFKA_OP_ALTER_REASSIGNMENTS        AlterReassignmentsOp / AlterReassignmentsOpResp
0x2C  KAFKA_OP_LIST_REASSIGNMENTS         ListReassignmentsOp / ListReassignmentsOpResp
====  ==================================  =========================================

The answers of these APIs do not depend on the client's version (newer versions only add
fields), so the owner runs each at the newest version it serves and the ops carry every
field; the gateway re-encodes for the client's version.
"""

from __future__ import annotations

from dataclasses import dataclass

from eddy.postcard import I8, I16, I32, I64

KAFKA_OP_DELETE_TOPICS = 0x20
KAFKA_OP_CREATE_PARTITIONS = 0x21
KAFKA_OP_DESCRIBE_CONFIGS = 0x22
KAFKA_OP_ALTER_CONFIGS = 0x23
KAFKA_OP_INCREMENTAL_ALTER_CONFIGS = 0x24
KAFKA_OP_DELETE_RECORDS = 0x25
KAFKA_OP_DELETE_GROUPS = 0x26
KAFKA_OP_OFFSET_DELETE = 0x27
KAFKA_OP_DESCRIBE_LOG_DIRS = 0x28
KAFKA_OP_OFFSET_FOR_LEADER_EPOCH = 0x29
KAFKA_OP_ELECT_LEADERS = 0x2A
KAFKA_OP_ALTER_REASSIGNMENTS = 0x2B
KAFKA_OP_LIST_REASSIGNMENTS = 0x2C


# ---- DeleteTopics ------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class DeleteTopicsOp:
    names: tuple[str, ...]
    timeout_ms: I32


@dataclass(frozen=True, slots=True)
class DeletedTopic:
    name: str
    error_code: I16
    error_message: str | None
    topic_id: bytes  # 16 bytes (a UUID), zeros when unknown


@dataclass(frozen=True, slots=True)
class DeleteTopicsOpResp:
    topics: tuple[DeletedTopic, ...]


# ---- CreatePartitions --------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class NewPartitions:
    name: str
    count: I32  # the new total
    #: -1: no assignments given; else how many (the gateway checked each names only itself,
    #: the owner builds them naming itself)
    assignments: I32


@dataclass(frozen=True, slots=True)
class CreatePartitionsOp:
    topics: tuple[NewPartitions, ...]
    timeout_ms: I32
    validate_only: bool


@dataclass(frozen=True, slots=True)
class TopicError:
    name: str
    error_code: I16
    error_message: str | None


@dataclass(frozen=True, slots=True)
class CreatePartitionsOpResp:
    topics: tuple[TopicError, ...]


# ---- DescribeConfigs ---------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class ConfigResource:
    resource_type: I8  # 2: topic (only topics are forwarded)
    name: str
    keys: tuple[str, ...] | None  # None: every config


@dataclass(frozen=True, slots=True)
class DescribeConfigsOp:
    resources: tuple[ConfigResource, ...]
    include_synonyms: bool
    include_documentation: bool


@dataclass(frozen=True, slots=True)
class ConfigSynonym:
    name: str
    value: str | None
    source: I8


@dataclass(frozen=True, slots=True)
class DescribedConfig:
    name: str
    value: str | None
    read_only: bool
    config_source: I8  # 5: a default (DescribeConfigs v0's is_default)
    is_sensitive: bool
    synonyms: tuple[ConfigSynonym, ...]
    config_type: I8
    documentation: str | None


@dataclass(frozen=True, slots=True)
class DescribedResource:
    resource_type: I8
    name: str
    error_code: I16
    error_message: str | None
    configs: tuple[DescribedConfig, ...]


@dataclass(frozen=True, slots=True)
class DescribeConfigsOpResp:
    resources: tuple[DescribedResource, ...]


# ---- AlterConfigs / IncrementalAlterConfigs ----------------------------------------------


@dataclass(frozen=True, slots=True)
class AlterResource:
    resource_type: I8
    name: str
    configs: tuple[tuple[str, str | None], ...]  # (name, value): replaces every override


@dataclass(frozen=True, slots=True)
class AlterConfigsOp:
    resources: tuple[AlterResource, ...]
    validate_only: bool


@dataclass(frozen=True, slots=True)
class IncrementalConfig:
    name: str
    operation: I8  # 0 set, 1 delete, 2 append, 3 subtract
    value: str | None


@dataclass(frozen=True, slots=True)
class IncrementalResource:
    resource_type: I8
    name: str
    configs: tuple[IncrementalConfig, ...]


@dataclass(frozen=True, slots=True)
class IncrementalAlterConfigsOp:
    resources: tuple[IncrementalResource, ...]
    validate_only: bool


@dataclass(frozen=True, slots=True)
class AlteredResource:
    resource_type: I8
    name: str
    error_code: I16
    error_message: str | None


@dataclass(frozen=True, slots=True)
class AlterConfigsOpResp:
    """The answer to both AlterConfigsOp and IncrementalAlterConfigsOp."""

    resources: tuple[AlteredResource, ...]


# ---- DeleteRecords -----------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class DeleteRecordsTopic:
    name: str
    partitions: tuple[tuple[I32, I64], ...]  # (partition, offset; -1: the high watermark)


@dataclass(frozen=True, slots=True)
class DeleteRecordsOp:
    topics: tuple[DeleteRecordsTopic, ...]
    timeout_ms: I32


@dataclass(frozen=True, slots=True)
class DeleteRecordsTopicResp:
    name: str
    partitions: tuple[tuple[I32, I64, I16], ...]  # (partition, low watermark, error code)


@dataclass(frozen=True, slots=True)
class DeleteRecordsOpResp:
    topics: tuple[DeleteRecordsTopicResp, ...]


# ---- DeleteGroups / OffsetDelete ---------------------------------------------------------


@dataclass(frozen=True, slots=True)
class DeleteGroupsOp:
    groups: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class DeleteGroupsOpResp:
    groups: tuple[tuple[str, I16], ...]  # (group id, error code)


@dataclass(frozen=True, slots=True)
class OffsetDeleteOp:
    group_id: str
    partitions: tuple[tuple[str, I32], ...]  # (topic, partition)


@dataclass(frozen=True, slots=True)
class OffsetDeleteOpResp:
    error_code: I16
    partitions: tuple[tuple[str, I32, I16], ...]  # (topic, partition, error code)


# ---- DescribeLogDirs ---------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class LogDirTopicReq:
    name: str
    partitions: tuple[I32, ...]


@dataclass(frozen=True, slots=True)
class DescribeLogDirsOp:
    topics: tuple[LogDirTopicReq, ...] | None  # None: every topic


@dataclass(frozen=True, slots=True)
class LogDirPartition:
    partition: I32
    size: I64
    offset_lag: I64
    is_future: bool


@dataclass(frozen=True, slots=True)
class LogDirTopic:
    name: str
    partitions: tuple[LogDirPartition, ...]


@dataclass(frozen=True, slots=True)
class LogDir:
    error_code: I16
    path: str
    topics: tuple[LogDirTopic, ...]
    total_bytes: I64  # -1: unknown
    usable_bytes: I64


@dataclass(frozen=True, slots=True)
class DescribeLogDirsOpResp:
    error_code: I16
    dirs: tuple[LogDir, ...]


# ---- OffsetForLeaderEpoch ----------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class EpochPartitionReq:
    partition: I32
    current_leader_epoch: I32  # -1: unchecked (a gateway's client knows the gateway's epoch)
    leader_epoch: I32


@dataclass(frozen=True, slots=True)
class EpochTopicReq:
    name: str
    partitions: tuple[EpochPartitionReq, ...]


@dataclass(frozen=True, slots=True)
class OffsetForLeaderEpochOp:
    topics: tuple[EpochTopicReq, ...]


@dataclass(frozen=True, slots=True)
class EpochEndOffset:
    partition: I32
    error_code: I16
    leader_epoch: I32  # -1: undefined
    end_offset: I64  # -1: undefined


@dataclass(frozen=True, slots=True)
class EpochTopicResp:
    name: str
    partitions: tuple[EpochEndOffset, ...]


@dataclass(frozen=True, slots=True)
class OffsetForLeaderEpochOpResp:
    topics: tuple[EpochTopicResp, ...]


# ---- ElectLeaders / AlterPartitionReassignments / ListPartitionReassignments -------------


@dataclass(frozen=True, slots=True)
class PartitionsOf:
    name: str
    partitions: tuple[I32, ...]


@dataclass(frozen=True, slots=True)
class PartitionOutcome:
    partition: I32
    error_code: I16
    error_message: str | None


@dataclass(frozen=True, slots=True)
class TopicOutcomes:
    name: str
    partitions: tuple[PartitionOutcome, ...]


@dataclass(frozen=True, slots=True)
class ElectLeadersOp:
    election_type: I8  # 0 preferred, 1 unclean (the broker refuses anything else)
    topics: tuple[PartitionsOf, ...] | None  # None: every partition
    timeout_ms: I32


@dataclass(frozen=True, slots=True)
class ElectLeadersOpResp:
    error_code: I16
    topics: tuple[TopicOutcomes, ...]


@dataclass(frozen=True, slots=True)
class ReassignPartition:
    partition: I32
    replicas: tuple[I32, ...] | None  # the target replicas; None: cancel a reassignment


@dataclass(frozen=True, slots=True)
class ReassignTopic:
    name: str
    partitions: tuple[ReassignPartition, ...]


@dataclass(frozen=True, slots=True)
class AlterReassignmentsOp:
    topics: tuple[ReassignTopic, ...]
    timeout_ms: I32


@dataclass(frozen=True, slots=True)
class AlterReassignmentsOpResp:
    error_code: I16
    error_message: str | None
    topics: tuple[TopicOutcomes, ...]


@dataclass(frozen=True, slots=True)
class ListReassignmentsOp:
    topics: tuple[PartitionsOf, ...] | None  # None: every reassignment under way
    timeout_ms: I32


@dataclass(frozen=True, slots=True)
class OngoingReassignment:
    partition: I32
    replicas: tuple[I32, ...]
    adding: tuple[I32, ...]
    removing: tuple[I32, ...]


@dataclass(frozen=True, slots=True)
class OngoingTopic:
    name: str
    partitions: tuple[OngoingReassignment, ...]


@dataclass(frozen=True, slots=True)
class ListReassignmentsOpResp:
    error_code: I16
    error_message: str | None
    topics: tuple[OngoingTopic, ...]


#: request and response struct of every admin op (merged into eddy.gateway.ops.OPS)
ADMIN_OPS: dict[int, tuple[type, type]] = {
    KAFKA_OP_DELETE_TOPICS: (DeleteTopicsOp, DeleteTopicsOpResp),
    KAFKA_OP_CREATE_PARTITIONS: (CreatePartitionsOp, CreatePartitionsOpResp),
    KAFKA_OP_DESCRIBE_CONFIGS: (DescribeConfigsOp, DescribeConfigsOpResp),
    KAFKA_OP_ALTER_CONFIGS: (AlterConfigsOp, AlterConfigsOpResp),
    KAFKA_OP_INCREMENTAL_ALTER_CONFIGS: (IncrementalAlterConfigsOp, AlterConfigsOpResp),
    KAFKA_OP_DELETE_RECORDS: (DeleteRecordsOp, DeleteRecordsOpResp),
    KAFKA_OP_DELETE_GROUPS: (DeleteGroupsOp, DeleteGroupsOpResp),
    KAFKA_OP_OFFSET_DELETE: (OffsetDeleteOp, OffsetDeleteOpResp),
    KAFKA_OP_DESCRIBE_LOG_DIRS: (DescribeLogDirsOp, DescribeLogDirsOpResp),
    KAFKA_OP_OFFSET_FOR_LEADER_EPOCH: (OffsetForLeaderEpochOp, OffsetForLeaderEpochOpResp),
    KAFKA_OP_ELECT_LEADERS: (ElectLeadersOp, ElectLeadersOpResp),
    KAFKA_OP_ALTER_REASSIGNMENTS: (AlterReassignmentsOp, AlterReassignmentsOpResp),
    KAFKA_OP_LIST_REASSIGNMENTS: (ListReassignmentsOp, ListReassignmentsOpResp),
}
