"""Kafka's ACL binding filters (DescribeAcls, DeleteAcls) and its checks of a creation."""

from __future__ import annotations

import asyncio

import pytest

from eddy.broker.handlers.acls import (
    MAX_CHANGES,
    MAX_EXAMINED,
    TOO_MANY_CREATED,
    TOO_MANY_DELETED,
    TOO_MUCH_WORK,
    plan_creations,
    plan_deletions,
)
from eddy.metadata import MetadataState
from eddy.metadata.records import AclBinding
from eddy.protocol.errors import ErrorCode
from eddy.security.acl import AclOperation, PatternType, Permission, ResourceType
from eddy.security.acl_filters import (
    AclFilter,
    AclIndex,
    creation_problem,
    filter_problem,
    group_by_resource,
    matches,
    select,
)

T, G, C = ResourceType.TOPIC, ResourceType.GROUP, ResourceType.CLUSTER
LIT, PRE = PatternType.LITERAL, PatternType.PREFIXED
ALLOW, DENY = Permission.ALLOW, Permission.DENY
R, W = AclOperation.READ, AclOperation.WRITE


def acl(name: str, pattern: PatternType = LIT, rtype: ResourceType = T,
        principal: str = "User:alice", host: str = "*", op: AclOperation = R,
        perm: Permission = ALLOW) -> AclBinding:
    return AclBinding(rtype, name, pattern, principal, host, op, perm)


def flt(name: str | None = None, pattern: PatternType = PatternType.ANY,
        rtype: ResourceType = ResourceType.ANY, principal: str | None = None,
        host: str | None = None, op: AclOperation = AclOperation.ANY,
        perm: Permission = Permission.ANY) -> AclFilter:
    return AclFilter(rtype, name, pattern, principal, host, op, perm)


ORDERS = acl("orders")
WILD = acl("*")
PREFIX = acl("ord", PRE)
OTHER_PREFIX = acl("pay", PRE)
GROUP = acl("orders", rtype=G)
BOB_WRITE = acl("orders", principal="User:bob", op=W, perm=DENY, host="10.0.0.1")
ALL = [ORDERS, WILD, PREFIX, OTHER_PREFIX, GROUP, BOB_WRITE]


def test_any_matches_every_binding() -> None:
    assert select(flt(), ALL) == sorted(ALL, key=lambda a: (a.resource_type, a.resource_name,
                                                            a.pattern_type, a.principal,
                                                            a.host, a.operation,
                                                            a.permission_type))


def test_literal_and_prefixed_filters_match_that_pattern_type_and_exact_name() -> None:
    assert set(select(flt("orders", LIT), ALL)) == {ORDERS, GROUP, BOB_WRITE}
    assert set(select(flt("orders", LIT, T), ALL)) == {ORDERS, BOB_WRITE}
    assert select(flt("ord", PRE), ALL) == [PREFIX]
    assert select(flt("orders", PRE), ALL) == []  # not a prefix match: names are equal
    assert set(select(flt(None, PRE), ALL)) == {PREFIX, OTHER_PREFIX}


def test_any_pattern_with_a_name_matches_names_exactly() -> None:
    assert set(select(flt("ord"), ALL)) == {PREFIX}
    assert set(select(flt("*"), ALL)) == {WILD}


def test_match_selects_literal_wildcard_and_prefixes_of_the_name() -> None:
    got = set(select(flt("orders", PatternType.MATCH, T), ALL))
    assert got == {ORDERS, WILD, PREFIX, BOB_WRITE}
    assert set(select(flt("payments", PatternType.MATCH, T), ALL)) == {WILD, OTHER_PREFIX}
    assert set(select(flt("x", PatternType.MATCH, T), ALL)) == {WILD}
    # MATCH without a name: every pattern type
    assert set(select(flt(None, PatternType.MATCH, T), ALL)) == set(ALL) - {GROUP}


def test_entry_filters() -> None:
    assert select(flt(principal="User:bob"), ALL) == [BOB_WRITE]
    assert select(flt(host="10.0.0.1"), ALL) == [BOB_WRITE]
    assert select(flt(op=W), ALL) == [BOB_WRITE]
    assert select(flt(perm=DENY), ALL) == [BOB_WRITE]
    assert not matches(flt(principal="User:*"), ORDERS)  # User:* matches only User:*
    assert matches(flt(principal="User:*"), acl("t", principal="User:*"))


def test_index_candidates_are_a_superset_of_the_matches() -> None:
    many = ALL + [acl(f"t{i}", PRE if i % 3 else LIT) for i in range(200)]
    index = AclIndex(many)
    for f in (flt(), flt("orders", PatternType.MATCH, T), flt("t17x", PatternType.MATCH),
              flt("t1", PRE), flt("orders"), flt(None, LIT, G), flt("*", PatternType.MATCH)):
        found, examined = index.select(f)
        assert found == select(f, many)
        assert examined <= len(many)
    # a named filter examines only what could match, not every binding
    assert index.select(flt("orders", PatternType.MATCH, T))[1] < 10


def test_group_by_resource() -> None:
    groups = group_by_resource([ORDERS, BOB_WRITE, PREFIX, GROUP])
    assert [key for key, _ in groups] == [(T, "ord", PRE), (T, "orders", LIT), (G, "orders", LIT)]
    assert groups[1][1] == [ORDERS, BOB_WRITE]


def test_filter_problems() -> None:
    assert filter_problem(flt()) is None
    assert filter_problem(AclFilter.of(0, None, 1, None, None, 1, 1)) == "Unknown patternFilter."
    assert filter_problem(AclFilter.of(1, None, 99, None, None, 1, 1)) == "Unknown patternFilter."
    assert filter_problem(AclFilter.of(1, None, 1, None, None, 0, 1)) == "Unknown entryFilter."
    assert filter_problem(AclFilter.of(1, None, 1, None, None, 1, -5)) == "Unknown entryFilter."


@pytest.mark.parametrize(("binding", "message"), [
    (acl("x", rtype=ResourceType.ANY), "Invalid resourceType ANY"),
    (AclBinding(0, "x", LIT, "User:a", "*", R, ALLOW), "Invalid resourceType UNKNOWN"),
    (acl("x", PatternType.ANY), "Invalid patternType ANY"),
    (acl("x", PatternType.MATCH), "Invalid patternType MATCH"),
    (AclBinding(T, "x", 42, "User:a", "*", R, ALLOW), "Invalid patternType UNKNOWN"),
    (acl("x", op=AclOperation.ANY), "Invalid operation ANY"),
    (acl("x", perm=Permission.ANY), "Invalid permissionType ANY"),
    (acl("", LIT), "Invalid empty resource name"),
    (acl("x", rtype=C), "The only valid name for the CLUSTER resource is kafka-cluster"),
    (acl("x", principal="alice"), "Could not parse principal from `alice` (no colon is "
     "present separating the principal type from the principal name)"),
    (acl("x", principal="User:"), "expected a string in format principalType:principalName "
     "but got User:"),
    (acl("x", host=""), "The host must be 1 to 1024 characters (* for any host)"),
    (acl("x" * 1025), "The resource name is longer than 1024 characters"),
])
def test_creation_problems(binding: AclBinding, message: str) -> None:
    assert creation_problem(binding) == message


def test_valid_creations() -> None:
    assert creation_problem(acl("kafka-cluster", rtype=C, op=AclOperation.ALTER)) is None
    assert creation_problem(acl("orders.", PRE, principal="User:*", op=AclOperation.ALL)) is None


# ---- the handler's reading of a request (bounds included) ---------------------------------


def test_plan_creations_dedups_refuses_and_bounds() -> None:
    good = acl("orders")
    bad = acl("x", PatternType.MATCH)
    outcomes, wanted = asyncio.run(plan_creations([good, bad, good]))
    assert outcomes[0] is None and outcomes[2] is None
    assert outcomes[1] == (ErrorCode.invalid_request, "Invalid patternType MATCH")
    assert wanted == {good: [0, 2]}
    many = [acl(f"t{i}") for i in range(MAX_CHANGES + 5)]
    outcomes, wanted = asyncio.run(plan_creations(many))
    assert len(wanted) == MAX_CHANGES
    assert outcomes[-1] == (ErrorCode.invalid_request, TOO_MANY_CREATED)


def test_plan_deletions_per_filter() -> None:
    state = MetadataState()
    state.acls = set(ALL)
    match = flt("orders", PatternType.MATCH, T)
    unknown = AclFilter.of(0, None, 1, None, None, 1, 1)
    per_filter, doomed = asyncio.run(plan_deletions(state, [match, unknown, match]))
    assert set(per_filter[0]) == {ORDERS, WILD, PREFIX, BOB_WRITE}  # type: ignore[arg-type]
    assert per_filter[1] == (ErrorCode.invalid_request, "Unknown patternFilter.")
    assert per_filter[2] == per_filter[0]  # listed by both, deleted once
    assert set(doomed) == {ORDERS, WILD, PREFIX, BOB_WRITE}


def test_plan_deletions_bounds() -> None:
    state = MetadataState()
    state.acls = {acl(f"t{i}") for i in range(MAX_CHANGES + 1)}
    per_filter, doomed = asyncio.run(plan_deletions(state, [flt()]))
    assert per_filter == [(ErrorCode.invalid_request, TOO_MANY_DELETED)] and not doomed
    # filters that each examine every binding stop at the budget
    state.acls = {acl(f"t{i}") for i in range(1000)}
    nothing = flt(principal="User:nobody")
    filters = [nothing] * (MAX_EXAMINED // 1000 + 2)
    per_filter, _ = asyncio.run(plan_deletions(state, filters))
    assert per_filter[0] == []
    assert per_filter[-1] == (ErrorCode.invalid_request, TOO_MUCH_WORK)
