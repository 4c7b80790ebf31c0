"""Roles: their expansion into ACLs, their recognition among ACLs, and revocation."""

from __future__ import annotations

import pytest

from eddy.metadata.records import AclBinding
from eddy.security.acl import AclOperation, PatternType, Permission, ResourceType
from eddy.security.authorizer import Authorizer
from eddy.security.roles import (
    ROLES,
    Grant,
    Scope,
    bindings_of,
    expand,
    make_grant,
    principal_of,
    recognise,
    revocation,
)

Op = AclOperation
T, G, C, X = (ResourceType.TOPIC, ResourceType.GROUP, ResourceType.CLUSTER,
              ResourceType.TRANSACTIONAL_ID)
LIT, PRE = PatternType.LITERAL, PatternType.PREFIXED


def allow(rtype: ResourceType, name: str, pattern: PatternType, op: AclOperation,
          principal: str = "User:alice", host: str = "*") -> AclBinding:
    return AclBinding(rtype, name, pattern, principal, host, op, Permission.ALLOW)


def test_producer_expansion() -> None:
    got = expand("producer", "alice", "orders.")
    assert set(got) == {
        allow(T, "orders.", PRE, Op.WRITE), allow(T, "orders.", PRE, Op.DESCRIBE),
        allow(X, "orders.", PRE, Op.WRITE), allow(X, "orders.", PRE, Op.DESCRIBE),
        allow(C, "kafka-cluster", LIT, Op.IDEMPOTENT_WRITE)}
    assert len(got) == 5


def test_consumer_expansion_with_default_and_given_groups() -> None:
    assert set(expand("consumer", "User:alice", "orders", LIT)) == {
        allow(T, "orders", LIT, Op.READ), allow(T, "orders", LIT, Op.DESCRIBE),
        allow(G, "orders", LIT, Op.READ)}
    got = expand("consumer", "alice", "orders.", group="billing-", group_pattern=PRE)
    assert allow(G, "billing-", PRE, Op.READ) in got
    # a group named alone takes the topics' pattern type
    assert allow(G, "billing", PRE, Op.READ) in expand("consumer", "alice", "o.", group="billing")


def test_admin_and_observer_expansion() -> None:
    admin = set(expand("admin", "alice", "orders."))
    assert admin == {allow(T, "orders.", PRE, Op.ALL),
                     allow(T, "orders.", PRE, Op.DESCRIBE_CONFIGS),
                     allow(T, "orders.", PRE, Op.ALTER_CONFIGS),
                     allow(G, "orders.", PRE, Op.ALL), allow(X, "orders.", PRE, Op.ALL)}
    observer = set(expand("observer", "alice", "orders.", host="10.1.2.3"))
    assert {(b.resource_type, b.operation, b.host) for b in observer} == {
        (T, Op.DESCRIBE, "10.1.2.3"), (T, Op.DESCRIBE_CONFIGS, "10.1.2.3"),
        (G, Op.DESCRIBE, "10.1.2.3")}


def test_expansions_allow_what_clients_need() -> None:
    acls = expand("producer", "alice", "orders.") + expand("consumer", "bob", "orders.")
    auth = Authorizer(lambda: (acls, 1, acls))
    assert auth.authorize("User:alice", "1.2.3.4", Op.WRITE, T, "orders.eu")
    assert auth.authorize("User:alice", "1.2.3.4", Op.WRITE, X, "orders.tx-1")
    assert auth.authorize("User:alice", "1.2.3.4", Op.IDEMPOTENT_WRITE, C, "kafka-cluster")
    assert not auth.authorize("User:alice", "1.2.3.4", Op.READ, T, "orders.eu")
    assert auth.authorize("User:bob", "1.2.3.4", Op.READ, T, "orders.eu")
    assert auth.authorize("User:bob", "1.2.3.4", Op.DESCRIBE, G, "orders.app")
    assert not auth.authorize("User:bob", "1.2.3.4", Op.READ, T, "payments")


def test_bad_grants() -> None:
    with pytest.raises(ValueError, match="not one of producer"):
        make_grant("king", "alice", "x")
    with pytest.raises(ValueError, match="must not be empty"):
        make_grant("producer", "alice", "")
    with pytest.raises(ValueError, match="literal or prefixed"):
        make_grant("producer", "alice", "x", PatternType.MATCH)
    with pytest.raises(ValueError, match="TYPE:NAME"):
        principal_of(":x")
    assert principal_of("alice") == "User:alice"
    assert principal_of("Group:ops") == "Group:ops"
    # roles without groups or transactional ids carry no such scope
    assert make_grant("producer", "a", "x").groups is None
    assert make_grant("consumer", "a", "x").transactional_ids is None


def test_recognise_each_role_alone() -> None:
    for role in ROLES:
        g = make_grant(role, "alice", "orders.")
        assert recognise(bindings_of(g)) == [g]
        # one ACL missing: not a grant
        for i in range(len(bindings_of(g))):
            partial = bindings_of(g)[:i] + bindings_of(g)[i + 1:]
            assert g not in recognise(partial)


def test_recognise_pairs_groups_by_name_then_the_unclaimed_ones() -> None:
    a = make_grant("consumer", "alice", "orders.")
    b = make_grant("consumer", "alice", "payments.")
    got = recognise(bindings_of(a) + bindings_of(b))
    assert sorted(got, key=str) == sorted([a, b], key=str)  # no cross pairs
    c = make_grant("consumer", "bob", "orders.", group="billing-")
    assert recognise(bindings_of(c)) == [c]


def test_recognise_ignores_denies_and_other_principals() -> None:
    g = make_grant("consumer", "alice", "orders.")
    denied = [AclBinding(b.resource_type, b.resource_name, b.pattern_type, b.principal,
                         b.host, b.operation, Permission.DENY) for b in bindings_of(g)]
    assert recognise(denied) == []
    mixed = [*bindings_of(g)[:2], allow(G, "orders.", PRE, Op.READ, principal="User:bob")]
    assert recognise(mixed) == []


def test_producer_and_consumer_together() -> None:
    p = make_grant("producer", "alice", "orders.")
    c = make_grant("consumer", "alice", "orders.")
    acls = set(bindings_of(p) + bindings_of(c))
    assert set(recognise(acls)) == {p, c}
    # revoking the producer keeps the DESCRIBE the consumer needs
    doomed = revocation(p, acls)
    assert allow(T, "orders.", PRE, Op.DESCRIBE) not in doomed
    assert allow(T, "orders.", PRE, Op.WRITE) in doomed
    assert recognise(acls - set(doomed)) == [c]


def test_revocation_of_what_is_not_there() -> None:
    p = make_grant("producer", "alice", "orders.")
    assert revocation(p, []) == []
    # two producer grants share IDEMPOTENT_WRITE: revoking one keeps it
    q = make_grant("producer", "alice", "payments.")
    acls = bindings_of(p) + bindings_of(q)
    assert allow(C, "kafka-cluster", LIT, Op.IDEMPOTENT_WRITE) not in revocation(p, acls)
    assert allow(C, "kafka-cluster", LIT, Op.IDEMPOTENT_WRITE) in revocation(p, bindings_of(p))


def test_scope_text() -> None:
    assert str(Scope("orders.", PRE)) == "orders.*"
    assert str(Scope("orders", LIT)) == "orders"
    assert Grant("producer", "User:a", Scope("x", LIT)).host == "*"
