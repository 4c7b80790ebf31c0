"""Kafka's ACL binding filters (DescribeAcls, DeleteAcls) and its checks of a new binding
(CreateAcls), as pure functions over ``AclBinding``.

A filter matches a binding when every part does:
- resource type: ANY, or the binding's;
- pattern type: ANY or MATCH, or the binding's; then the name (None: any name): with ANY
  or the binding's own pattern type the names are equal; with MATCH (the resources a
  request for that name would be authorized by) a LITERAL binding matches by the same name
  or the wildcard ``*`` and a PREFIXED binding by being a prefix of the name;
- principal and host: None, or equal (``User:*`` matches only the binding ``User:*``);
- operation and permission: ANY, or the binding's.
The messages are Kafka's (its AclControlManager and AclApis), with Kafka's enum names.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from enum import IntEnum
from typing import TypeVar

from eddy.metadata.records import AclBinding
from eddy.metadata.security import MAX_NAME
from eddy.security.acl import (
    CLUSTER_NAME,
    WILDCARD,
    AclOperation,
    PatternType,
    Permission,
    ResourceType,
)

__all__ = ["AclFilter", "AclIndex", "creation_problem", "filter_problem", "group_by_resource",
           "matches", "select", "to_enum"]

E = TypeVar("E", bound=IntEnum)


def to_enum(cls: type[E], code: int) -> E:
    """``cls``'s member of wire value ``code``; UNKNOWN for a value Kafka does not know
    (as its ``fromCode``)."""
    try:
        return cls(code)
    except ValueError:
        return cls(0)


@dataclass(frozen=True, slots=True)
class AclFilter:
    """One DescribeAcls / DeleteAcls filter (None: any name, principal or host)."""

    resource_type: ResourceType
    resource_name: str | None
    pattern_type: PatternType
    principal: str | None
    host: str | None
    operation: AclOperation
    permission_type: Permission

    @classmethod
    def of(cls, resource_type: int, resource_name: str | None, pattern_type: int,
           principal: str | None, host: str | None, operation: int,
           permission_type: int) -> AclFilter:
        """A filter from wire values (any unknown value becomes UNKNOWN)."""
        return cls(to_enum(ResourceType, resource_type), resource_name,
                   to_enum(PatternType, pattern_type), principal, host,
                   to_enum(AclOperation, operation), to_enum(Permission, permission_type))


def filter_problem(f: AclFilter) -> str | None:
    """Why Kafka refuses the filter (None: it does not): an UNKNOWN part."""
    if f.resource_type == ResourceType.UNKNOWN or f.pattern_type == PatternType.UNKNOWN:
        return "Unknown patternFilter."
    if f.operation == AclOperation.UNKNOWN or f.permission_type == Permission.UNKNOWN:
        return "Unknown entryFilter."
    return None


def _pattern_matches(f: AclFilter, acl: AclBinding) -> bool:
    if f.resource_type != ResourceType.ANY and f.resource_type != acl.resource_type:
        return False
    if (f.pattern_type not in (PatternType.ANY, PatternType.MATCH)
            and f.pattern_type != acl.pattern_type):
        return False
    name = f.resource_name
    if name is None:
        return True
    if f.pattern_type == PatternType.ANY or f.pattern_type == acl.pattern_type:
        return name == acl.resource_name
    # MATCH: the bindings a request for ``name`` is decided by
    if acl.pattern_type == PatternType.LITERAL:
        return name == acl.resource_name or acl.resource_name == WILDCARD
    if acl.pattern_type == PatternType.PREFIXED:
        return name.startswith(acl.resource_name)
    return False


def _entry_matches(f: AclFilter, acl: AclBinding) -> bool:
    if f.principal is not None and f.principal != acl.principal:
        return False
    if f.host is not None and f.host != acl.host:
        return False
    if f.operation != AclOperation.ANY and f.operation != acl.operation:
        return False
    return f.permission_type == Permission.ANY or f.permission_type == acl.permission_type


def matches(f: AclFilter, acl: AclBinding) -> bool:
    """Whether Kafka's filter ``f`` selects ``acl``."""
    return _pattern_matches(f, acl) and _entry_matches(f, acl)


def select(f: AclFilter, acls: Iterable[AclBinding]) -> list[AclBinding]:
    """The bindings ``f`` selects, in a stable order (resource, then entry)."""
    return sorted((a for a in acls if matches(f, a)), key=_order)


def _order(acl: AclBinding) -> tuple[int, str, int, str, str, int, int]:
    return (acl.resource_type, acl.resource_name, acl.pattern_type, acl.principal, acl.host,
            acl.operation, acl.permission_type)


class AclIndex:
    """Bindings by resource name, so that a filter naming a resource examines only the
    bindings that could match it (a request of many filters over many ACLs stays cheap)."""

    def __init__(self, acls: Iterable[AclBinding]) -> None:
        self.all: list[AclBinding] = list(acls)
        self.by_name: dict[str, list[AclBinding]] = {}
        self.by_type: dict[int, list[AclBinding]] = {}
        lengths: set[int] = set()
        for acl in self.all:
            self.by_name.setdefault(acl.resource_name, []).append(acl)
            self.by_type.setdefault(acl.resource_type, []).append(acl)
            if acl.pattern_type == PatternType.PREFIXED:
                lengths.add(len(acl.resource_name))
        self.prefix_lengths = sorted(lengths)

    def candidates(self, f: AclFilter) -> list[AclBinding]:
        """A superset of the bindings ``f`` selects."""
        name = f.resource_name
        if name is None:
            if f.resource_type == ResourceType.ANY:
                return self.all
            return self.by_type.get(f.resource_type, [])
        if f.pattern_type != PatternType.MATCH:
            return self.by_name.get(name, [])
        keys = {name, WILDCARD}
        for length in self.prefix_lengths:
            if length >= len(name):
                break
            keys.add(name[:length])
        out: list[AclBinding] = []
        for key in keys:
            out.extend(self.by_name.get(key, ()))
        return out

    def select(self, f: AclFilter) -> tuple[list[AclBinding], int]:
        """The bindings ``f`` selects (in order) and how many bindings were examined."""
        pool = self.candidates(f)
        return select(f, pool), len(pool)


def group_by_resource(acls: Iterable[AclBinding]
                      ) -> list[tuple[tuple[int, str, int], list[AclBinding]]]:
    """The bindings by resource pattern (type, name, pattern type), as DescribeAcls answers
    them: resources in order, each one's bindings in order."""
    groups: dict[tuple[int, str, int], list[AclBinding]] = {}
    for acl in sorted(acls, key=_order):
        groups.setdefault((acl.resource_type, acl.resource_name, acl.pattern_type),
                          []).append(acl)
    return list(groups.items())


def creation_problem(acl: AclBinding) -> str | None:
    """Why Kafka refuses to create ``acl`` (None: it does not), with its message; all are
    INVALID_REQUEST. Beyond Kafka's checks, names, principals and hosts must fit the
    metadata's bounds (1 to 1024 characters)."""
    rtype = to_enum(ResourceType, acl.resource_type)
    # the broker's checks first (Kafka's AclApis), then the controller's (AclControlManager)
    if rtype == ResourceType.CLUSTER and acl.resource_name != CLUSTER_NAME:
        return f"The only valid name for the CLUSTER resource is {CLUSTER_NAME}"
    if not acl.resource_name:
        return "Invalid empty resource name"
    if rtype in (ResourceType.UNKNOWN, ResourceType.ANY):
        return f"Invalid resourceType {rtype.name}"
    ptype = to_enum(PatternType, acl.pattern_type)
    if ptype not in (PatternType.LITERAL, PatternType.PREFIXED):
        return f"Invalid patternType {ptype.name}"
    op = to_enum(AclOperation, acl.operation)
    if op in (AclOperation.UNKNOWN, AclOperation.ANY):
        return f"Invalid operation {op.name}"
    perm = to_enum(Permission, acl.permission_type)
    if perm not in (Permission.ALLOW, Permission.DENY):
        return f"Invalid permissionType {perm.name}"
    if ":" not in acl.principal:
        return (f"Could not parse principal from `{acl.principal[:MAX_NAME]}` (no colon is "
                "present separating the principal type from the principal name)")
    kind, _, who = acl.principal.partition(":")
    if not kind or not who:
        return ("expected a string in format principalType:principalName but got "
                f"{acl.principal[:MAX_NAME]}")
    for what, value in (("resource name", acl.resource_name), ("principal", acl.principal)):
        if len(value) > MAX_NAME:
            return f"The {what} is longer than {MAX_NAME} characters"
    if not 1 <= len(acl.host) <= MAX_NAME:
        return f"The host must be 1 to {MAX_NAME} characters (* for any host)"
    return None
