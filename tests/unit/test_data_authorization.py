"""The data-plane handlers' authorization decisions that need no server: which produce
requests carry transactional batches (read from batch headers only), InitProducerId's rule,
AddPartitionsToTxn's per-partition answer, FindCoordinator's per-key refusal, a Fetch's
per-topic and replica refusals, and that with no authorizer nothing is refused."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import pytest

from eddy.broker.handlers import coordinator, fetch, produce, producer_id, transactions
from eddy.metadata.records import AclBinding
from eddy.protocol.apis import ApiKey
from eddy.protocol.codec import Request, build, request_module
from eddy.protocol.errors import ErrorCode
from eddy.protocol.record_batch import TRANSACTIONAL_BIT
from eddy.protocol.records import build_batch
from eddy.security.acl import CLUSTER_NAME, AclOperation, PatternType, Permission, ResourceType
from eddy.security.authorizer import Authorizer
from eddy.security.session import Session

Op, T = AclOperation, ResourceType
BOB = "User:bob"


def acl(rtype: ResourceType, name: str, op: AclOperation, *, prefixed: bool = False,
        deny: bool = False) -> AclBinding:
    return AclBinding(rtype, name, PatternType.PREFIXED if prefixed else PatternType.LITERAL,
                      BOB, "*", op, Permission.DENY if deny else Permission.ALLOW)


@dataclass
class FakeBroker:
    """What the checked handler functions read of a broker."""

    acls: list[AclBinding] | None  # None: no authorizer
    counts: dict[str, int] = field(default_factory=dict)
    authorizer: Authorizer | None = None

    def __post_init__(self) -> None:
        if self.acls is not None:
            bindings = list(self.acls)
            self.authorizer = Authorizer(lambda: (self, 1, bindings),
                                         frozenset({"User:admin"}))

    def partition_count(self, topic: str) -> int | None:
        return self.counts.get(topic)


def request(key: ApiKey, version: int, body: Any, principal: str = BOB) -> Request:
    session = Session("SASL_PLAINTEXT", "127.0.0.1", None, principal)
    return Request(key, version, 1, "test", body, "127.0.0.1", session)


def _records(*attributes: int) -> bytes:
    return b"".join(bytes(build_batch([(None, b"v")], 0, attributes=a)) for a in attributes)


def _produce_body(txn_id: str | None, records: bytes) -> Any:
    m = request_module(ApiKey.PRODUCE, 9)
    return build(m.ProduceRequest, transactional_id=txn_id, acks=-1, timeout=1000, topic_data=(
        build(m.TopicProduceData, name="t", partition_data=(
            build(m.PartitionProduceData, index=0, records=records),)),))


def test_transactional_batches_are_found_from_their_headers() -> None:
    assert not produce.has_transactional_batches(None)
    assert not produce.has_transactional_batches(_records(0, 0))
    assert produce.has_transactional_batches(_records(0, TRANSACTIONAL_BIT))  # the 2nd batch
    # a header that does not fit or lies about its length ends the walk (validation refuses)
    assert not produce.has_transactional_batches(_records(TRANSACTIONAL_BIT)[:20])
    bad = bytearray(_records(0, TRANSACTIONAL_BIT))
    bad[8:12] = (-5).to_bytes(4, "big", signed=True)
    assert not produce.has_transactional_batches(bytes(bad))


def test_transactional_produce_needs_write_on_its_transactional_id() -> None:
    txn = _records(TRANSACTIONAL_BIT)
    broker = FakeBroker([acl(T.TRANSACTIONAL_ID, "tx", Op.WRITE)])
    req = request(ApiKey.PRODUCE, 9, _produce_body("tx", txn))
    assert produce.transactional_refusal(broker, req) is None
    other = request(ApiKey.PRODUCE, 9, _produce_body("other", txn))
    assert "other" in (produce.transactional_refusal(broker, other) or "")
    nameless = request(ApiKey.PRODUCE, 9, _produce_body(None, txn))
    assert produce.transactional_refusal(broker, nameless)
    # plain batches: the transactional id is not looked at
    plain = request(ApiKey.PRODUCE, 9, _produce_body("other", _records(0)))
    assert produce.transactional_refusal(broker, plain) is None


def _init_pid(txn_id: str | None) -> Any:
    m = request_module(ApiKey.INIT_PRODUCER_ID, 4)
    return build(m.InitProducerIdRequest, transactional_id=txn_id, transaction_timeout=60000,
                 producer_id=-1, producer_epoch=-1)


@pytest.mark.parametrize(("acls", "txn_id", "expected"), [
    ([], "tx", ErrorCode.transactional_id_authorization_failed),
    ([acl(T.TRANSACTIONAL_ID, "tx", Op.DESCRIBE)], "tx",
     ErrorCode.transactional_id_authorization_failed),
    ([acl(T.TRANSACTIONAL_ID, "tx", Op.WRITE)], "tx", None),
    ([], None, ErrorCode.cluster_authorization_failed),
    ([acl(T.TOPIC, "any-", Op.WRITE, prefixed=True)], None, None),  # WRITE on some topic
    ([acl(T.CLUSTER, CLUSTER_NAME, Op.IDEMPOTENT_WRITE)], None, None),
    ([acl(T.TOPIC, "t", Op.READ)], None, ErrorCode.cluster_authorization_failed),
])
def test_init_producer_id_rule(acls: list[AclBinding], txn_id: str | None,
                               expected: ErrorCode | None) -> None:
    broker = FakeBroker(acls)
    req = request(ApiKey.INIT_PRODUCER_ID, 4, _init_pid(txn_id))
    assert producer_id.refusal(broker, req) == expected


def test_add_partitions_refused_topic_fails_the_whole_request() -> None:
    broker = FakeBroker([acl(T.TOPIC, "ok", Op.WRITE), acl(T.TOPIC, "gone", Op.WRITE)],
                        counts={"ok": 2})
    req = request(ApiKey.ADD_PARTITIONS_TO_TXN, 3, None)
    parts = [("ok", 0), ("ok", 5), ("gone", 0), ("secret", 0)]
    assert transactions._partition_refusals(broker, req, parts) == {
        ("ok", 0): ErrorCode.operation_not_attempted,
        ("ok", 5): ErrorCode.unknown_topic_or_partition,
        ("gone", 0): ErrorCode.unknown_topic_or_partition,
        ("secret", 0): ErrorCode.topic_authorization_failed,
    }
    # every topic allowed: the coordinator decides (it checks the partitions exist)
    assert transactions._partition_refusals(
        broker, req, [("ok", 0), ("gone", 0)]) is None
    assert transactions._partition_refusals(
        FakeBroker(None), req, parts) is None


def test_find_coordinator_refuses_per_key() -> None:
    broker = FakeBroker([acl(T.GROUP, "g", Op.READ), acl(T.TRANSACTIONAL_ID, "tx", Op.WRITE)])
    req = request(ApiKey.FIND_COORDINATOR, 4, None)
    answer = coordinator._answer
    assert answer(broker, req, "g", 0) == (ErrorCode.none, None)
    assert answer(broker, req, "h", 0)[0] == ErrorCode.group_authorization_failed
    assert answer(broker, req, "tx", 1) == (ErrorCode.none, None)
    assert (answer(broker, req, "g", 1)[0]
            == ErrorCode.transactional_id_authorization_failed)
    assert answer(broker, req, "g", 7)[0] == ErrorCode.invalid_request
    # a super user, and no authorizer at all: allowed
    root = request(ApiKey.FIND_COORDINATOR, 4, None, principal="User:admin")
    assert answer(broker, root, "h", 0)[0] == ErrorCode.none
    assert answer(FakeBroker(None), req, "h", 0)[0] == ErrorCode.none


def _wanted(topic: str | None, error: ErrorCode = ErrorCode.none) -> Any:
    return fetch._Wanted(topic, None, 0, 0, 1024, -1, None, error)


def test_fetch_refuses_per_topic_and_replicas_without_cluster_action() -> None:
    broker = FakeBroker([acl(T.TOPIC, "mine", Op.READ)])
    req = request(ApiKey.FETCH, 12, None)
    rows = [[_wanted("mine"), _wanted("mine")], [_wanted("secret")],
            [_wanted(None, ErrorCode.unknown_topic_id)], []]
    fetch._authorize(broker, req, rows, -1)
    assert [[w.error for w in row] for row in rows] == [
        [ErrorCode.none, ErrorCode.none], [ErrorCode.topic_authorization_failed],
        [ErrorCode.unknown_topic_id], []]
    replica_rows = [[_wanted("mine")]]
    fetch._authorize(broker, req, replica_rows, 2)
    assert replica_rows[0][0].error == ErrorCode.topic_authorization_failed
    member = FakeBroker([acl(T.CLUSTER, CLUSTER_NAME, Op.CLUSTER_ACTION)])
    replica_rows = [[_wanted("secret")]]
    fetch._authorize(member, req, replica_rows, 2)
    assert replica_rows[0][0].error == ErrorCode.none


def test_one_decision_per_topic_not_per_partition() -> None:
    broker = FakeBroker([acl(T.TOPIC, "mine", Op.READ)])
    assert broker.authorizer is not None
    req = request(ApiKey.FETCH, 12, None)
    rows = [[_wanted("mine") for _ in range(50)], [_wanted("other") for _ in range(50)]]
    seen: list[str] = []
    original = broker.authorizer.authorize

    def counting(principal: str, host: str, op: AclOperation, rtype: ResourceType,
                 name: str) -> bool:
        seen.append(name)
        return original(principal, host, op, rtype, name)

    broker.authorizer.authorize = counting  # type: ignore[method-assign]
    fetch._authorize(broker, req, rows, -1)
    assert seen == ["mine", "other"]
