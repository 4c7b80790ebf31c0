"""Roles: named sets of ACLs for one principal over a family of topics (RBAC on Kafka ACLs).

A grant gives a principal a role on topics: the topics named by a prefix (PREFIXED, e.g.
``orders.`` covers ``orders.eu`` and ``orders.us``) or one topic (LITERAL). A role that uses
consumer groups or transactional ids covers those named with the same name and pattern
type by default (a consumer of the ``orders.`` topics may use the ``orders.`` groups), or
the scope given (``--group``, ``--transactional-id``). Every ACL a role makes is an ALLOW
for the grant's principal from its host (``*``: any host).

- ``producer``: WRITE and DESCRIBE on the topics, WRITE and DESCRIBE on the transactional
  ids, IDEMPOTENT_WRITE on the cluster (what idempotent and transactional producers need);
- ``consumer``: READ and DESCRIBE on the topics, READ on the groups (READ implies DESCRIBE:
  joins, commits, offset fetches);
- ``admin``: ALL on the topics, groups and transactional ids, and DESCRIBE_CONFIGS and
  ALTER_CONFIGS on the topics, spelled out for tools that look for them;
- ``observer``: DESCRIBE and DESCRIBE_CONFIGS on the topics, DESCRIBE on the groups (what a
  dashboard or a lag exporter reads; nothing it could change or consume).

``expand`` turns a grant into its bindings; ``recognise`` finds the grants whose bindings
are all present in a set of ACLs (``eddy role list``); ``revocation`` is what revoking a
grant deletes: its bindings less those another grant still present needs (a producer and a
consumer of the same topics share DESCRIBE on them).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from eddy.metadata.records import AclBinding
from eddy.security.acl import (
    CLUSTER_NAME,
    WILDCARD,
    AclOperation,
    PatternType,
    Permission,
    ResourceType,
)

__all__ = ["ROLES", "Grant", "Role", "Scope", "bindings_of", "expand", "make_grant", "principal_of",
           "recognise", "revocation"]

_O = AclOperation


@dataclass(frozen=True, slots=True)
class Scope:
    """Resources of one type named ``name`` (LITERAL) or starting with it (PREFIXED)."""

    name: str
    pattern: PatternType

    def __str__(self) -> str:
        return f"{self.name}*" if self.pattern == PatternType.PREFIXED else self.name


@dataclass(frozen=True, slots=True)
class Role:
    name: str
    description: str
    topic: tuple[AclOperation, ...]
    group: tuple[AclOperation, ...] = ()
    transactional_id: tuple[AclOperation, ...] = ()
    cluster: tuple[AclOperation, ...] = ()


ROLES: dict[str, Role] = {r.name: r for r in (
    Role("producer", "write to the topics, idempotently or in transactions",
         topic=(_O.WRITE, _O.DESCRIBE), transactional_id=(_O.WRITE, _O.DESCRIBE),
         cluster=(_O.IDEMPOTENT_WRITE,)),
    Role("consumer", "read the topics in consumer groups",
         topic=(_O.READ, _O.DESCRIBE), group=(_O.READ,)),
    Role("admin", "everything on the topics, their groups and transactional ids",
         topic=(_O.ALL, _O.DESCRIBE_CONFIGS, _O.ALTER_CONFIGS), group=(_O.ALL,),
         transactional_id=(_O.ALL,)),
    Role("observer", "see the topics, their configs and groups (monitoring)",
         topic=(_O.DESCRIBE, _O.DESCRIBE_CONFIGS), group=(_O.DESCRIBE,)),
)}


@dataclass(frozen=True, slots=True)
class Grant:
    """A role given to a principal (None scopes: the role does not use that resource)."""

    role: str
    principal: str
    topics: Scope
    groups: Scope | None = None
    transactional_ids: Scope | None = None
    host: str = WILDCARD


def principal_of(text: str) -> str:
    """``User:alice`` as it is, ``alice`` as ``User:alice``; a ValueError when empty."""
    text = text.strip()
    kind, sep, name = text.partition(":")
    if not sep:
        kind, name = "User", text
    if not kind or not name:
        raise ValueError(f"principal {text!r}: expected TYPE:NAME (e.g. User:alice) or a "
                         "user name")
    return f"{kind}:{name}"


def _scope(name: str, pattern: PatternType, what: str) -> Scope:
    if not name:
        raise ValueError(f"{what}: the name or prefix must not be empty")
    if pattern not in (PatternType.LITERAL, PatternType.PREFIXED):
        raise ValueError(f"{what}: the pattern type must be literal or prefixed")
    return Scope(name, pattern)


def make_grant(role: str, principal: str, topic: str,
               pattern: PatternType = PatternType.PREFIXED, *, group: str | None = None,
               group_pattern: PatternType | None = None,
               transactional_id: str | None = None,
               transactional_id_pattern: PatternType | None = None,
               host: str = WILDCARD) -> Grant:
    """The grant of ``role`` to ``principal`` on ``topic`` (a prefix, or one topic with
    LITERAL); groups and transactional ids default to the topics' name and pattern, a name
    given alone takes the topics' pattern. A ValueError says what is wrong."""
    spec = ROLES.get(role.strip().lower())
    if spec is None:
        raise ValueError(f"role {role!r} is not one of {', '.join(ROLES)}")
    if not host:
        raise ValueError("host: must not be empty (* for any host)")
    topics = _scope(topic, pattern, "topic")
    groups = txns = None
    if spec.group:
        groups = _scope(topic if group is None else group,
                        group_pattern or pattern, "group")
    if spec.transactional_id:
        txns = _scope(topic if transactional_id is None else transactional_id,
                      transactional_id_pattern or pattern, "transactional id")
    return Grant(spec.name, principal_of(principal), topics, groups, txns, host)


def _allow(grant: Grant, rtype: ResourceType, scope: Scope, op: AclOperation) -> AclBinding:
    return AclBinding(rtype, scope.name, scope.pattern, grant.principal, grant.host, op,
                      Permission.ALLOW)


def bindings_of(grant: Grant) -> list[AclBinding]:
    """The ACLs that make up ``grant``."""
    spec = ROLES[grant.role]
    out = [_allow(grant, ResourceType.TOPIC, grant.topics, op) for op in spec.topic]
    if grant.groups is not None:
        out += [_allow(grant, ResourceType.GROUP, grant.groups, op) for op in spec.group]
    if grant.transactional_ids is not None:
        out += [_allow(grant, ResourceType.TRANSACTIONAL_ID, grant.transactional_ids, op)
                for op in spec.transactional_id]
    cluster = Scope(CLUSTER_NAME, PatternType.LITERAL)
    out += [_allow(grant, ResourceType.CLUSTER, cluster, op) for op in spec.cluster]
    return out


def expand(role: str, principal: str, topic: str,
           pattern: PatternType = PatternType.PREFIXED, *, group: str | None = None,
           group_pattern: PatternType | None = None, transactional_id: str | None = None,
           transactional_id_pattern: PatternType | None = None,
           host: str = WILDCARD) -> list[AclBinding]:
    """The ACLs of ``role`` for ``principal`` on ``topic`` (arguments as ``make_grant``)."""
    return bindings_of(make_grant(role, principal, topic, pattern, group=group,
                                  group_pattern=group_pattern,
                                  transactional_id=transactional_id,
                                  transactional_id_pattern=transactional_id_pattern,
                                  host=host))


def _full_scopes(allowed: set[AclBinding], principal: str, host: str, rtype: ResourceType,
                 ops: Sequence[AclOperation], scopes: Iterable[Scope]) -> list[Scope]:
    """The scopes of ``rtype`` on which every operation of ``ops`` is allowed."""
    return [s for s in scopes
            if all(AclBinding(rtype, s.name, s.pattern, principal, host, op, Permission.ALLOW)
                   in allowed for op in ops)]


def _pairs(topic: Scope, full: list[Scope], claimed: set[Scope]) -> list[Scope]:
    """The group (or transactional id) scopes a grant on ``topic`` is read with: its own
    name and pattern when present (the default), else those no topic scope claims."""
    if topic in full:
        return [topic]
    return [s for s in full if s not in claimed]


def _grants_of(spec: Role, allowed: set[AclBinding], principal: str, host: str,
               per_type: dict[int, set[Scope]]) -> list[Grant]:
    def full(rtype: ResourceType, ops: Sequence[AclOperation]) -> list[Scope]:
        ordered = sorted(per_type.get(rtype, ()), key=lambda s: (s.name, s.pattern))
        return _full_scopes(allowed, principal, host, rtype, ops, ordered)

    topics = full(ResourceType.TOPIC, spec.topic)
    if not topics or (spec.cluster and not full(ResourceType.CLUSTER, spec.cluster)):
        return []
    claimed = set(topics)
    group_full = full(ResourceType.GROUP, spec.group) if spec.group else []
    txn_full = (full(ResourceType.TRANSACTIONAL_ID, spec.transactional_id)
                if spec.transactional_id else [])
    out: list[Grant] = []
    for t in topics:
        groups: list[Scope | None] = list(_pairs(t, group_full, claimed)) if spec.group else [None]
        txns: list[Scope | None] = (list(_pairs(t, txn_full, claimed))
                                    if spec.transactional_id else [None])
        out.extend(Grant(spec.name, principal, t, g, x, host) for g in groups for x in txns)
    return out


def recognise(bindings: Iterable[AclBinding]) -> list[Grant]:
    """The grants whose ACLs are all in ``bindings``. A grant's groups and transactional
    ids are paired with its topics by name (the default scope); a scope no topic of the
    principal shares its name with pairs with each of the principal's topic scopes."""
    allowed = {b for b in bindings if b.permission_type == Permission.ALLOW}
    scopes: dict[tuple[str, str], dict[int, set[Scope]]] = {}
    for b in allowed:
        if b.pattern_type in (PatternType.LITERAL, PatternType.PREFIXED):
            per_type = scopes.setdefault((b.principal, b.host), {})
            per_type.setdefault(b.resource_type, set()).add(
                Scope(b.resource_name, PatternType(b.pattern_type)))
    out: list[Grant] = []
    for (principal, host), per_type in sorted(scopes.items()):
        for spec in ROLES.values():
            out.extend(_grants_of(spec, allowed, principal, host, per_type))
    return out


def revocation(grant: Grant, bindings: Iterable[AclBinding]) -> list[AclBinding]:
    """The ACLs revoking ``grant`` deletes from ``bindings``: those of the grant that are
    present, less those another grant still present needs."""
    present = set(bindings)
    others = [g for g in recognise(present) if g != grant]
    needed = {b for g in others for b in bindings_of(g)}
    return [b for b in bindings_of(grant) if b in present and b not in needed]
