"""The table of Kafka APIs Eddy implements, with exactly the version ranges it serves."""

from __future__ import annotations

from dataclasses import dataclass
from enum import IntEnum


class ApiKey(IntEnum):
    PRODUCE = 0
    FETCH = 1
    LIST_OFFSETS = 2
    METADATA = 3
    OFFSET_COMMIT = 8
    OFFSET_FETCH = 9
    FIND_COORDINATOR = 10
    JOIN_GROUP = 11
    HEARTBEAT = 12
    LEAVE_GROUP = 13
    SYNC_GROUP = 14
    DESCRIBE_GROUPS = 15
    LIST_GROUPS = 16
    SASL_HANDSHAKE = 17
    API_VERSIONS = 18
    CREATE_TOPICS = 19
    DELETE_TOPICS = 20
    DELETE_RECORDS = 21
    INIT_PRODUCER_ID = 22
    OFFSET_FOR_LEADER_EPOCH = 23
    ADD_PARTITIONS_TO_TXN = 24
    ADD_OFFSETS_TO_TXN = 25
    END_TXN = 26
    TXN_OFFSET_COMMIT = 28
    SASL_AUTHENTICATE = 36
    DESCRIBE_ACLS = 29
    CREATE_ACLS = 30
    DELETE_ACLS = 31
    DESCRIBE_CONFIGS = 32
    ALTER_CONFIGS = 33
    DESCRIBE_LOG_DIRS = 35
    CREATE_PARTITIONS = 37
    INCREMENTAL_ALTER_CONFIGS = 44
    DELETE_GROUPS = 42
    ELECT_LEADERS = 43
    ALTER_PARTITION_REASSIGNMENTS = 45
    LIST_PARTITION_REASSIGNMENTS = 46
    OFFSET_DELETE = 47
    DESCRIBE_USER_SCRAM_CREDENTIALS = 50
    ALTER_USER_SCRAM_CREDENTIALS = 51
    DESCRIBE_QUORUM = 55
    DESCRIBE_CLUSTER = 60
    DESCRIBE_PRODUCERS = 61
    DESCRIBE_TRANSACTIONS = 65
    LIST_TRANSACTIONS = 66


@dataclass(frozen=True, slots=True)
class VersionRange:
    min: int
    max: int

    def __contains__(self, version: object) -> bool:
        return isinstance(version, int) and self.min <= version <= self.max


#: What the broker advertises in ApiVersions: every version in a range is implemented.
SUPPORTED: dict[ApiKey, VersionRange] = {
    ApiKey.PRODUCE: VersionRange(3, 11),
    ApiKey.FETCH: VersionRange(4, 16),
    ApiKey.LIST_OFFSETS: VersionRange(1, 7),
    ApiKey.METADATA: VersionRange(0, 12),
    ApiKey.OFFSET_COMMIT: VersionRange(2, 9),
    ApiKey.OFFSET_FETCH: VersionRange(1, 9),
    ApiKey.FIND_COORDINATOR: VersionRange(0, 5),
    ApiKey.JOIN_GROUP: VersionRange(0, 9),
    ApiKey.HEARTBEAT: VersionRange(0, 4),
    ApiKey.LEAVE_GROUP: VersionRange(0, 5),
    ApiKey.SYNC_GROUP: VersionRange(0, 5),
    ApiKey.DESCRIBE_GROUPS: VersionRange(0, 5),
    ApiKey.LIST_GROUPS: VersionRange(0, 5),
    ApiKey.DELETE_GROUPS: VersionRange(0, 2),
    ApiKey.OFFSET_DELETE: VersionRange(0, 0),
    ApiKey.API_VERSIONS: VersionRange(0, 3),
    ApiKey.CREATE_TOPICS: VersionRange(2, 7),
    ApiKey.DELETE_TOPICS: VersionRange(1, 6),
    ApiKey.CREATE_PARTITIONS: VersionRange(0, 3),
    ApiKey.DELETE_RECORDS: VersionRange(0, 2),
    ApiKey.INIT_PRODUCER_ID: VersionRange(0, 5),
    ApiKey.OFFSET_FOR_LEADER_EPOCH: VersionRange(2, 4),  # kio has v2+
    ApiKey.ADD_PARTITIONS_TO_TXN: VersionRange(0, 3),
    ApiKey.ADD_OFFSETS_TO_TXN: VersionRange(0, 3),
    ApiKey.END_TXN: VersionRange(0, 3),
    ApiKey.TXN_OFFSET_COMMIT: VersionRange(0, 3),
    ApiKey.DESCRIBE_CONFIGS: VersionRange(1, 4),
    ApiKey.ALTER_CONFIGS: VersionRange(0, 2),
    ApiKey.DESCRIBE_LOG_DIRS: VersionRange(1, 4),
    ApiKey.INCREMENTAL_ALTER_CONFIGS: VersionRange(0, 1),
    ApiKey.DESCRIBE_QUORUM: VersionRange(0, 2),
    ApiKey.ELECT_LEADERS: VersionRange(0, 2),
    ApiKey.ALTER_PARTITION_REASSIGNMENTS: VersionRange(0, 0),
    ApiKey.LIST_PARTITION_REASSIGNMENTS: VersionRange(0, 0),
    ApiKey.DESCRIBE_CLUSTER: VersionRange(0, 1),
    ApiKey.DESCRIBE_PRODUCERS: VersionRange(0, 0),
    ApiKey.DESCRIBE_TRANSACTIONS: VersionRange(0, 0),
    ApiKey.LIST_TRANSACTIONS: VersionRange(0, 1),
    # v0 of the ACL APIs is gone from Kafka 4 (KIP-896) and from kio
    ApiKey.DESCRIBE_ACLS: VersionRange(1, 3),
    ApiKey.CREATE_ACLS: VersionRange(1, 3),
    ApiKey.DELETE_ACLS: VersionRange(1, 3),
    ApiKey.DESCRIBE_USER_SCRAM_CREDENTIALS: VersionRange(0, 0),
    ApiKey.ALTER_USER_SCRAM_CREDENTIALS: VersionRange(0, 0),
    ApiKey.SASL_HANDSHAKE: VersionRange(0, 1),
    ApiKey.SASL_AUTHENTICATE: VersionRange(0, 2),
}

#: First flexible (compact, tagged-field) version of each API, from Apache Kafka's specs.
FIRST_FLEXIBLE: dict[ApiKey, int] = {
    ApiKey.PRODUCE: 9,
    ApiKey.FETCH: 12,
    ApiKey.LIST_OFFSETS: 6,
    ApiKey.METADATA: 9,
    ApiKey.OFFSET_COMMIT: 8,
    ApiKey.OFFSET_FETCH: 6,
    ApiKey.FIND_COORDINATOR: 3,
    ApiKey.JOIN_GROUP: 6,
    ApiKey.HEARTBEAT: 4,
    ApiKey.LEAVE_GROUP: 4,
    ApiKey.SYNC_GROUP: 4,
    ApiKey.DESCRIBE_GROUPS: 5,
    ApiKey.LIST_GROUPS: 3,
    ApiKey.DELETE_GROUPS: 2,
    ApiKey.OFFSET_DELETE: 99,
    ApiKey.API_VERSIONS: 3,
    ApiKey.CREATE_TOPICS: 5,
    ApiKey.DELETE_TOPICS: 4,
    ApiKey.CREATE_PARTITIONS: 2,
    ApiKey.DELETE_RECORDS: 2,
    ApiKey.INIT_PRODUCER_ID: 2,
    ApiKey.OFFSET_FOR_LEADER_EPOCH: 4,
    ApiKey.ADD_PARTITIONS_TO_TXN: 3,
    ApiKey.ADD_OFFSETS_TO_TXN: 3,
    ApiKey.END_TXN: 3,
    ApiKey.TXN_OFFSET_COMMIT: 3,
    ApiKey.DESCRIBE_CONFIGS: 4,
    ApiKey.ALTER_CONFIGS: 2,
    ApiKey.DESCRIBE_LOG_DIRS: 2,
    ApiKey.INCREMENTAL_ALTER_CONFIGS: 1,
    ApiKey.DESCRIBE_QUORUM: 0,
    ApiKey.ELECT_LEADERS: 2,
    ApiKey.ALTER_PARTITION_REASSIGNMENTS: 0,
    ApiKey.LIST_PARTITION_REASSIGNMENTS: 0,
    ApiKey.DESCRIBE_CLUSTER: 0,
    ApiKey.DESCRIBE_PRODUCERS: 0,
    ApiKey.DESCRIBE_TRANSACTIONS: 0,
    ApiKey.LIST_TRANSACTIONS: 0,
    ApiKey.DESCRIBE_ACLS: 2,
    ApiKey.CREATE_ACLS: 2,
    ApiKey.DELETE_ACLS: 2,
    ApiKey.DESCRIBE_USER_SCRAM_CREDENTIALS: 0,
    ApiKey.ALTER_USER_SCRAM_CREDENTIALS: 0,
    ApiKey.SASL_HANDSHAKE: 99,
    ApiKey.SASL_AUTHENTICATE: 2,
}


def is_flexible(api_key: ApiKey, version: int) -> bool:
    return version >= FIRST_FLEXIBLE[api_key]


def response_header_version(api_key: ApiKey, version: int) -> int:
    """ApiVersions always answers with header v0, so any client can read it."""
    if api_key is ApiKey.API_VERSIONS:
        return 0
    return 1 if is_flexible(api_key, version) else 0
