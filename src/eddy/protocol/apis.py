"""The table of Kafka APIs Eddy implements, with exactly the version ranges it serves."""

from __future__ import annotations

from dataclasses import dataclass
from enum import IntEnum


class ApiKey(IntEnum):
    PRODUCE = 0
    FETCH = 1
    LIST_OFFSETS = 2
    METADATA = 3
    API_VERSIONS = 18
    CREATE_TOPICS = 19
    DELETE_TOPICS = 20
    CREATE_PARTITIONS = 37
    DESCRIBE_CLUSTER = 60


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
    ApiKey.API_VERSIONS: VersionRange(0, 3),
    ApiKey.CREATE_TOPICS: VersionRange(2, 7),
    ApiKey.DELETE_TOPICS: VersionRange(1, 6),
    ApiKey.CREATE_PARTITIONS: VersionRange(0, 3),
    ApiKey.DESCRIBE_CLUSTER: VersionRange(0, 1),
}

#: First flexible (compact, tagged-field) version of each API, from Apache Kafka's specs.
FIRST_FLEXIBLE: dict[ApiKey, int] = {
    ApiKey.PRODUCE: 9,
    ApiKey.FETCH: 12,
    ApiKey.LIST_OFFSETS: 6,
    ApiKey.METADATA: 9,
    ApiKey.API_VERSIONS: 3,
    ApiKey.CREATE_TOPICS: 5,
    ApiKey.DELETE_TOPICS: 4,
    ApiKey.CREATE_PARTITIONS: 2,
    ApiKey.DESCRIBE_CLUSTER: 0,
}


def is_flexible(api_key: ApiKey, version: int) -> bool:
    return version >= FIRST_FLEXIBLE[api_key]


def response_header_version(api_key: ApiKey, version: int) -> int:
    """ApiVersions always answers with header v0, so any client can read it."""
    if api_key is ApiKey.API_VERSIONS:
        return 0
    return 1 if is_flexible(api_key, version) else 0
