"""Kafka's ACL decisions (what its StandardAuthorizer decides), as a pure object.

A request from ``principal`` at ``host`` may do ``operation`` on a resource when:
- the principal is one of ``super.users``; or
- no ACL matches the resource (any principal) and ``allow.everyone.if.no.acl.found``; or
- no matching DENY rule names the operation (or ALL), and a matching ALLOW rule names the
  operation, ALL, or an operation that implies it (READ, WRITE, DELETE and ALTER imply
  DESCRIBE; ALTER_CONFIGS implies DESCRIBE_CONFIGS).
A rule matches a resource by literal name, by the literal wildcard ``*``, or as a prefix
(PREFIXED patterns); it matches the principal by name or ``User:*``, the host by address
or ``*``.

Decisions are cached per (principal, host, operation, resource) until the ACLs change:
the source returns the metadata state and its ACL version, and a new state object or
version drops the index and the cache. A produce of one topic costs one dict lookup.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Iterable
from dataclasses import dataclass, field

from eddy.metadata.records import AclBinding
from eddy.security.acl import (
    IMPLIED_BY,
    OPERATIONS_OF,
    WILDCARD,
    WILDCARD_PRINCIPAL,
    AclOperation,
    PatternType,
    Permission,
    ResourceType,
)

__all__ = ["AclSource", "Authorizer", "parse_super_users"]

#: returns (the object holding the ACLs, its ACL version, the ACLs)
AclSource = Callable[[], tuple[object, int, Collection[AclBinding]]]
#: decisions kept at most; past it the cache starts over (a scan of many names)
MAX_CACHED = 65536
#: the resource name Kafka's authorizeByResourceType first checks (see ``authorize_any``)
_PROBE_NAME = "hardcode"


def parse_super_users(value: str) -> frozenset[str]:
    """``super.users``: principals separated by ';' (Kafka's format, e.g.
    ``User:admin;User:CN=broker``)."""
    out = set()
    for raw in value.split(";"):
        p = raw.strip()
        if not p:
            continue
        kind, sep, name = p.partition(":")
        if not sep or not kind or not name:
            raise ValueError(f"super.users: {p!r} is not TYPE:NAME (e.g. User:admin)")
        out.add(p)
    return frozenset(out)


@dataclass(slots=True)
class _Index:
    """The ACLs by resource: literal names, and prefixes grouped by their length."""

    literal: dict[tuple[int, str], list[AclBinding]] = field(default_factory=dict)
    prefixed: dict[tuple[int, str], list[AclBinding]] = field(default_factory=dict)
    prefix_lengths: dict[int, list[int]] = field(default_factory=dict)
    by_type: dict[int, list[AclBinding]] = field(default_factory=dict)

    @classmethod
    def of(cls, acls: Iterable[AclBinding]) -> _Index:
        index = cls()
        lengths: dict[int, set[int]] = {}
        for acl in acls:
            index.by_type.setdefault(acl.resource_type, []).append(acl)
            key = (acl.resource_type, acl.resource_name)
            if acl.pattern_type == PatternType.PREFIXED:
                index.prefixed.setdefault(key, []).append(acl)
                lengths.setdefault(acl.resource_type, set()).add(len(acl.resource_name))
            else:
                index.literal.setdefault(key, []).append(acl)
        index.prefix_lengths = {t: sorted(ls) for t, ls in lengths.items()}
        return index

    def matching(self, rtype: int, name: str) -> list[AclBinding]:
        out = list(self.literal.get((rtype, name), ()))
        if name != WILDCARD:
            out.extend(self.literal.get((rtype, WILDCARD), ()))
        for length in self.prefix_lengths.get(rtype, ()):
            if length > len(name):
                break
            out.extend(self.prefixed.get((rtype, name[:length]), ()))
        return out


def _applies(acl: AclBinding, principal: str, host: str) -> bool:
    return ((acl.principal == principal
             or (acl.principal == WILDCARD_PRINCIPAL and principal.startswith("User:")))
            and (acl.host == WILDCARD or acl.host == host))


class Authorizer:
    """ACL decisions for one node (``authorizer.class.name`` set)."""

    def __init__(self, source: AclSource, super_users: frozenset[str] = frozenset(),
                 allow_everyone_if_no_acl_found: bool = False) -> None:
        self._source = source
        self.super_users = super_users
        self.allow_everyone_if_no_acl_found = allow_everyone_if_no_acl_found
        self._owner: object = None
        self._version = -1
        self._index = _Index()
        self._cache: dict[tuple[str, str, int, int, str], bool] = {}
        self.denials = 0  # decisions that said no (a metric)

    def _current(self) -> _Index:
        owner, version, acls = self._source()
        if owner is not self._owner or version != self._version:
            self._owner, self._version = owner, version
            self._index = _Index.of(acls)
            self._cache.clear()
        return self._index

    def authorize(self, principal: str, host: str, operation: AclOperation,
                  rtype: ResourceType, name: str) -> bool:
        index = self._current()
        key = (principal, host, operation, rtype, name)
        cached = self._cache.get(key)
        if cached is None:
            cached = self._decide(index, principal, host, operation, rtype, name)
            if len(self._cache) >= MAX_CACHED:
                self._cache.clear()
            self._cache[key] = cached
        if not cached:
            self.denials += 1
        return cached

    def _decide(self, index: _Index, principal: str, host: str, operation: AclOperation,
                rtype: ResourceType, name: str) -> bool:
        if principal in self.super_users:
            return True
        acls = index.matching(rtype, name)
        if not acls:
            return self.allow_everyone_if_no_acl_found
        allowing = (operation, AclOperation.ALL, *IMPLIED_BY.get(operation, ()))
        allowed = False
        for acl in acls:
            if not _applies(acl, principal, host):
                continue
            if acl.permission_type == Permission.DENY:
                if acl.operation in (operation, AclOperation.ALL):
                    return False
            elif acl.operation in allowing:
                allowed = True
        return allowed

    def authorize_any(self, principal: str, host: str, operation: AclOperation,
                      rtype: ResourceType) -> bool:
        """Whether some resource of ``rtype`` allows ``operation`` (Kafka's
        authorizeByResourceType, which e.g. lets a producer that may WRITE any topic be
        idempotent): an ALLOW rule for the principal, literal or prefixed, whose name no
        DENY rule covers. As Kafka, a probe of one made-up name first lets super users and
        ``allow.everyone.if.no.acl.found`` through."""
        if self.authorize(principal, host, operation, rtype, _PROBE_NAME):
            return True
        index = self._current()
        ops = (operation, AclOperation.ALL)
        rules = [a for a in index.by_type.get(rtype, ())
                 if a.operation in ops and _applies(a, principal, host)]
        deny_literal = {a.resource_name for a in rules if a.permission_type == Permission.DENY
                        and a.pattern_type != PatternType.PREFIXED}
        if WILDCARD in deny_literal:
            return False
        deny_prefixes = [a.resource_name for a in rules if a.permission_type == Permission.DENY
                         and a.pattern_type == PatternType.PREFIXED]
        for a in rules:
            if a.permission_type != Permission.ALLOW:
                continue
            if any(a.resource_name.startswith(p) for p in deny_prefixes):
                continue
            if a.pattern_type != PatternType.PREFIXED and a.resource_name in deny_literal:
                continue
            return True
        return False

    def authorized_operations(self, principal: str, host: str, rtype: ResourceType,
                              name: str) -> int:
        """The bit field Metadata / DescribeCluster / DescribeGroups / DescribeTopics return
        when asked: bit ``op`` set for each of the type's operations allowed."""
        bits = 0
        for op in OPERATIONS_OF.get(rtype, ()):
            if self._decide(self._current(), principal, host, op, rtype, name):
                bits |= 1 << op
        return bits
