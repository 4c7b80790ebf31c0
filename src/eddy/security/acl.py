"""Kafka's ACL vocabulary: resource types, pattern types, operations, permissions (the
numbers are Kafka's wire values), their names, and which operations each resource type
has (what ``authorized_operations`` may report)."""

from __future__ import annotations

from enum import IntEnum
from typing import TypeVar

__all__ = [
    "CLUSTER_NAME",
    "IMPLIED_BY",
    "OPERATIONS_OF",
    "WILDCARD",
    "WILDCARD_PRINCIPAL",
    "AclOperation",
    "PatternType",
    "Permission",
    "ResourceType",
    "parse_enum",
]

CLUSTER_NAME = "kafka-cluster"
WILDCARD = "*"
WILDCARD_PRINCIPAL = "User:*"


class ResourceType(IntEnum):
    UNKNOWN = 0
    ANY = 1
    TOPIC = 2
    GROUP = 3
    CLUSTER = 4
    TRANSACTIONAL_ID = 5
    DELEGATION_TOKEN = 6
    USER = 7


class PatternType(IntEnum):
    UNKNOWN = 0
    ANY = 1
    MATCH = 2
    LITERAL = 3
    PREFIXED = 4


class AclOperation(IntEnum):
    UNKNOWN = 0
    ANY = 1
    ALL = 2
    READ = 3
    WRITE = 4
    CREATE = 5
    DELETE = 6
    ALTER = 7
    DESCRIBE = 8
    CLUSTER_ACTION = 9
    DESCRIBE_CONFIGS = 10
    ALTER_CONFIGS = 11
    IDEMPOTENT_WRITE = 12
    CREATE_TOKENS = 13
    DESCRIBE_TOKENS = 14


class Permission(IntEnum):
    UNKNOWN = 0
    ANY = 1
    DENY = 2
    ALLOW = 3


#: an ALLOW of any of these operations also allows the key (Kafka's documented
#: implications: READ, WRITE, DELETE and ALTER imply DESCRIBE; ALTER_CONFIGS implies
#: DESCRIBE_CONFIGS). DENY rules imply nothing but themselves (and ALL).
IMPLIED_BY: dict[AclOperation, tuple[AclOperation, ...]] = {
    AclOperation.DESCRIBE: (AclOperation.READ, AclOperation.WRITE, AclOperation.DELETE,
                            AclOperation.ALTER),
    AclOperation.DESCRIBE_CONFIGS: (AclOperation.ALTER_CONFIGS,),
}

_O = AclOperation
#: the operations of each resource type, as Kafka's AclEntry.supportedOperations lists them
OPERATIONS_OF: dict[ResourceType, tuple[AclOperation, ...]] = {
    ResourceType.TOPIC: (_O.READ, _O.WRITE, _O.CREATE, _O.DESCRIBE, _O.DELETE, _O.ALTER,
                         _O.DESCRIBE_CONFIGS, _O.ALTER_CONFIGS),
    ResourceType.GROUP: (_O.READ, _O.DESCRIBE, _O.DELETE),
    ResourceType.CLUSTER: (_O.CREATE, _O.CLUSTER_ACTION, _O.DESCRIBE_CONFIGS,
                           _O.ALTER_CONFIGS, _O.IDEMPOTENT_WRITE, _O.ALTER, _O.DESCRIBE),
    ResourceType.TRANSACTIONAL_ID: (_O.DESCRIBE, _O.WRITE),
    ResourceType.DELEGATION_TOKEN: (_O.DESCRIBE,),
    ResourceType.USER: (_O.CREATE_TOKENS, _O.DESCRIBE_TOKENS),
}


E = TypeVar("E", bound=IntEnum)


def parse_enum(cls: type[E], text: str, what: str) -> E:
    """``cls`` member named ``text`` (case-insensitive, '-' for '_'), or a ValueError
    naming ``what`` and the choices."""
    key = text.strip().upper().replace("-", "_")
    try:
        return cls[key]
    except KeyError:
        choices = ", ".join(m.name.lower() for m in cls if m.name not in ("UNKNOWN", "ANY"))
        raise ValueError(f"{what}: {text!r} is not one of {choices}") from None
