"""The ACL decisions: Kafka's matching, DENY over ALLOW, implications, super users,
allow.everyone.if.no.acl.found, authorizeByResourceType and the cache's invalidation."""

from __future__ import annotations

import pytest

from eddy.metadata.records import AclBinding
from eddy.security.acl import (
    CLUSTER_NAME,
    AclOperation,
    PatternType,
    Permission,
    ResourceType,
    parse_enum,
)
from eddy.security.authorizer import Authorizer, parse_super_users

T, G, C = ResourceType.TOPIC, ResourceType.GROUP, ResourceType.CLUSTER
Op = AclOperation
ALICE, BOB = "User:alice", "User:bob"
HOST = "10.0.0.1"


def acl(name: str, op: AclOperation, principal: str = ALICE, *, rtype: ResourceType = T,
        prefixed: bool = False, deny: bool = False, host: str = "*") -> AclBinding:
    return AclBinding(rtype, name, PatternType.PREFIXED if prefixed else PatternType.LITERAL,
                      principal, host, op, Permission.DENY if deny else Permission.ALLOW)


class Acls:
    """A mutable ACL source, as the metadata state is."""

    def __init__(self, *bindings: AclBinding) -> None:
        self.acls = set(bindings)
        self.version = 0

    def set(self, *bindings: AclBinding) -> None:
        self.acls = set(bindings)
        self.version += 1

    def __call__(self) -> tuple[object, int, set[AclBinding]]:
        return self, self.version, self.acls


def make(*bindings: AclBinding, supers: str = "", everyone: bool = False
         ) -> tuple[Authorizer, Acls]:
    source = Acls(*bindings)
    return Authorizer(source, parse_super_users(supers), everyone), source


def test_literal_allow_only_for_its_operation_principal_and_name() -> None:
    authz, _ = make(acl("orders", Op.WRITE))
    assert authz.authorize(ALICE, HOST, Op.WRITE, T, "orders")
    assert not authz.authorize(ALICE, HOST, Op.READ, T, "orders")
    assert not authz.authorize(BOB, HOST, Op.WRITE, T, "orders")
    assert not authz.authorize(ALICE, HOST, Op.WRITE, T, "orders2")
    assert not authz.authorize(ALICE, HOST, Op.WRITE, G, "orders")


@pytest.mark.parametrize("granted", [Op.READ, Op.WRITE, Op.DELETE, Op.ALTER, Op.ALL])
def test_operations_that_imply_describe(granted: AclOperation) -> None:
    authz, _ = make(acl("t", granted))
    assert authz.authorize(ALICE, HOST, Op.DESCRIBE, T, "t")


def test_alter_configs_implies_describe_configs_but_not_the_reverse() -> None:
    authz, _ = make(acl("t", Op.ALTER_CONFIGS), acl("u", Op.DESCRIBE_CONFIGS))
    assert authz.authorize(ALICE, HOST, Op.DESCRIBE_CONFIGS, T, "t")
    assert not authz.authorize(ALICE, HOST, Op.ALTER_CONFIGS, T, "u")
    assert not authz.authorize(ALICE, HOST, Op.WRITE, T, "u")


def test_describe_implies_nothing_else() -> None:
    authz, _ = make(acl("t", Op.DESCRIBE))
    assert not authz.authorize(ALICE, HOST, Op.READ, T, "t")


def test_prefixed_wildcard_and_user_wildcard() -> None:
    authz, _ = make(acl("orders.", Op.READ, prefixed=True), acl("*", Op.DESCRIBE),
                    acl("public", Op.READ, "User:*"))
    assert authz.authorize(ALICE, HOST, Op.READ, T, "orders.eu")
    assert authz.authorize(ALICE, HOST, Op.READ, T, "orders.")
    assert not authz.authorize(ALICE, HOST, Op.READ, T, "orders")
    assert authz.authorize(ALICE, HOST, Op.DESCRIBE, T, "anything")
    assert authz.authorize(BOB, HOST, Op.READ, T, "public")
    assert not authz.authorize("Group:ops", HOST, Op.READ, T, "public")


def test_deny_wins_over_allow_from_any_pattern() -> None:
    authz, _ = make(acl("orders.", Op.ALL, prefixed=True),
                    acl("orders.secret", Op.READ, deny=True),
                    acl("orders.hr", Op.ALL, deny=True, prefixed=True))
    assert authz.authorize(ALICE, HOST, Op.WRITE, T, "orders.secret")
    assert not authz.authorize(ALICE, HOST, Op.READ, T, "orders.secret")
    assert authz.authorize(ALICE, HOST, Op.DESCRIBE, T, "orders.secret")  # deny implies none
    assert not authz.authorize(ALICE, HOST, Op.DESCRIBE, T, "orders.hr.pay")


def test_hosts() -> None:
    authz, _ = make(acl("t", Op.READ, host=HOST))
    assert authz.authorize(ALICE, HOST, Op.READ, T, "t")
    assert not authz.authorize(ALICE, "10.0.0.2", Op.READ, T, "t")


def test_super_users_and_allow_everyone_if_no_acl_found() -> None:
    authz, _ = make(acl("t", Op.READ, deny=True), supers="User:root; User:CN=broker")
    assert authz.super_users == {"User:root", "User:CN=broker"}
    assert authz.authorize("User:root", HOST, Op.READ, T, "t")
    assert not authz.authorize(BOB, HOST, Op.READ, T, "other")  # default: closed
    open_authz, _ = make(acl("t", Op.READ), everyone=True)
    assert open_authz.authorize(BOB, HOST, Op.WRITE, T, "other")  # no ACL names it
    assert not open_authz.authorize(BOB, HOST, Op.READ, T, "t")  # an ACL names it


def test_changes_reach_cached_decisions() -> None:
    authz, source = make()
    assert not authz.authorize(ALICE, HOST, Op.READ, T, "t")
    source.set(acl("t", Op.READ))
    assert authz.authorize(ALICE, HOST, Op.READ, T, "t")
    source.set(acl("t", Op.READ), acl("t", Op.READ, deny=True))
    assert not authz.authorize(ALICE, HOST, Op.READ, T, "t")
    assert authz.denials == 2


def test_authorize_any_follows_kafka_authorize_by_resource_type() -> None:
    authz, _ = make(acl("a", Op.WRITE), acl("b.", Op.WRITE, prefixed=True),
                    acl("b.", Op.WRITE, deny=True, prefixed=True))
    assert authz.authorize_any(ALICE, HOST, Op.WRITE, T)  # "a" is not denied
    assert not authz.authorize_any(BOB, HOST, Op.WRITE, T)
    only_denied, _ = make(acl("b.x", Op.WRITE), acl("b", Op.WRITE, deny=True, prefixed=True))
    assert not only_denied.authorize_any(ALICE, HOST, Op.WRITE, T)
    wildcard_deny, _ = make(acl("a", Op.WRITE), acl("*", Op.WRITE, deny=True))
    assert not wildcard_deny.authorize_any(ALICE, HOST, Op.WRITE, T)
    supers, _ = make(acl("a", Op.READ, deny=True), supers="User:root")
    assert supers.authorize_any("User:root", HOST, Op.WRITE, T)


def test_authorized_operations_bits() -> None:
    authz, _ = make(acl("t", Op.WRITE), acl(CLUSTER_NAME, Op.ALTER, rtype=C))
    bits = authz.authorized_operations(ALICE, HOST, T, "t")
    assert bits == (1 << Op.WRITE) | (1 << Op.DESCRIBE)
    cluster = authz.authorized_operations(ALICE, HOST, C, CLUSTER_NAME)
    assert cluster == (1 << Op.ALTER) | (1 << Op.DESCRIBE)


@pytest.mark.parametrize("value", ["alice", "User:", ":x", "User:a;bob"])
def test_bad_super_users_name_the_setting(value: str) -> None:
    with pytest.raises(ValueError, match=r"super\.users"):
        parse_super_users(value)


def test_parse_enum_names_the_field() -> None:
    assert parse_enum(AclOperation, "describe-configs", "operation") is Op.DESCRIBE_CONFIGS
    with pytest.raises(ValueError, match="operation: 'fly'"):
        parse_enum(AclOperation, "fly", "operation")
