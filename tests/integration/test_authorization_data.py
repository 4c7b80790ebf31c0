"""ACLs on the data plane with real clients: a secured `eddy serve` (SASL/SCRAM,
StandardAuthorizer, super.users=User:admin) and a user `bob` the admin creates. With no ACLs
bob's produce, consume, group and transactional calls are refused with Kafka's codes and
Metadata hides the topics; granted the ACLs (AdminClient.create_acls) the same calls work.
Also: a PREFIXED allow, a DENY over an ALLOW, the User:* wildcard, and
allow.everyone.if.no.acl.found=true on a second node. The finer per-API rules (ListOffsets,
OffsetForLeaderEpoch, a replica's Fetch, auto-creation, authorized operations, the
coordinator and transaction APIs) are checked over a raw SCRAM socket."""

from __future__ import annotations

import datetime
import io
import struct
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Consumer, KafkaError, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import (
    AclBinding,
    AclOperation,
    AclPermissionType,
    AdminClient,
    AlterConfigOpType,
    ConfigEntry,
    ConfigResource,
    NewTopic,
    ResourcePatternType,
    ResourceType,
    ScramCredentialInfo,
    ScramMechanism,
    UserScramCredentialUpsertion,
)
from kio.schema.request_header.v2.header import RequestHeader as HeaderV2
from kio.serial import entity_writer
from raw_client import RawClient
from scramp import ScramClient
from security_nodes import ADMIN, SecureNode

from eddy.protocol.apis import ApiKey
from eddy.protocol.codec import build, request_module

pytestmark = pytest.mark.timeout(120)

BOB = ("bob", "bob-secret")
CAROL = ("carol", "carol-secret")
STANDARD = "org.apache.kafka.metadata.authorizer.StandardAuthorizer"
TOPIC_DENIED = KafkaError.TOPIC_AUTHORIZATION_FAILED
GROUP_DENIED = KafkaError.GROUP_AUTHORIZATION_FAILED
TXN_DENIED = KafkaError.TRANSACTIONAL_ID_AUTHORIZATION_FAILED
CLUSTER_DENIED = KafkaError.CLUSTER_AUTHORIZATION_FAILED
NOT_ATTEMPTED = 55  # OPERATION_NOT_ATTEMPTED
#: bit of each operation in an authorized-operations field (Kafka's AclOperation codes)
READ_BIT, WRITE_BIT, DESCRIBE_BIT = 1 << 3, 1 << 4, 1 << 8


def _settings(**more: str) -> dict[str, str]:
    return {
        "listeners": "SASL_PLAINTEXT://127.0.0.1:0",
        "sasl.enabled.mechanisms": "SCRAM-SHA-256",
        "sasl.bootstrap.user": f"{ADMIN[0]}:{ADMIN[1]}",
        "super.users": f"User:{ADMIN[0]}",
        "authorizer.class.name": STANDARD,
        "connection.failed.authentication.delay.ms": "0",
        "registry.listener": "", "admin.listener": "",
        **more,
    }


def conf(node: SecureNode, user: tuple[str, str]) -> dict[str, Any]:
    return {"bootstrap.servers": node.addr["SASL_PLAINTEXT"],
            "security.protocol": "SASL_PLAINTEXT", "sasl.mechanism": "SCRAM-SHA-256",
            "sasl.username": user[0], "sasl.password": user[1], "socket.timeout.ms": 5000,
            "log_level": 0}


def until(check: Callable[[], bool], timeout: float = 10.0) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if check():
            return True
        time.sleep(0.05)
    return check()


def _wait(futures: dict[Any, Any]) -> None:
    for f in futures.values():
        f.result(timeout=15)


def add_user(admin: AdminClient, user: tuple[str, str]) -> None:
    info = ScramCredentialInfo(ScramMechanism.SCRAM_SHA_256, 4096)
    _wait(admin.alter_user_scram_credentials(
        [UserScramCredentialUpsertion(user[0], info, user[1].encode())]))


def acl(rtype: ResourceType, name: str, op: AclOperation, who: str = f"User:{BOB[0]}",
        pattern: ResourcePatternType = ResourcePatternType.LITERAL,
        permission: AclPermissionType = AclPermissionType.ALLOW) -> AclBinding:
    return AclBinding(rtype, name, pattern, who, "*", op, permission)


def grant(admin: AdminClient, *bindings: AclBinding) -> None:
    _wait(admin.create_acls(list(bindings)))


def create_topics(admin: AdminClient, *names: str) -> None:
    _wait(admin.create_topics([NewTopic(n, 1, 1) for n in names]))


def port_of(node: SecureNode) -> int:
    return int(node.addr["SASL_PLAINTEXT"].rpartition(":")[2])


def login(node: SecureNode, user: tuple[str, str]) -> RawClient:
    """A raw connection authenticated with SCRAM-SHA-256."""
    client = RawClient(port_of(node))
    hs = request_module(ApiKey.SASL_HANDSHAKE, 1)
    au = request_module(ApiKey.SASL_AUTHENTICATE, 2)
    assert client.call(hs.SaslHandshakeRequest(mechanism="SCRAM-SHA-256")).error_code == 0
    scram = ScramClient(["SCRAM-SHA-256"], user[0], user[1])
    first = client.call(au.SaslAuthenticateRequest(auth_bytes=scram.get_client_first().encode()))
    scram.set_server_first(first.auth_bytes.decode())
    final = client.call(au.SaslAuthenticateRequest(auth_bytes=scram.get_client_final().encode()))
    assert final.error_code == 0, final
    scram.set_server_final(final.auth_bytes.decode())
    return client


def call_raw(client: RawClient, request: Any) -> bytes:
    """Send ``request`` (a flexible version); the response's bytes, header included."""
    cls = type(request)
    client.correlation += 1
    buf = io.BytesIO()
    entity_writer(HeaderV2)(buf, HeaderV2(
        request_api_key=cls.__api_key__, request_api_version=cls.__version__,
        correlation_id=client.correlation, client_id="raw-test"))
    entity_writer(cls)(buf, request)
    payload = buf.getvalue()
    client.sock.sendall(struct.pack(">i", len(payload)) + payload)
    (size,) = struct.unpack(">i", client._recv(4))
    return client._recv(size)


def produce_errors(node: SecureNode, user: tuple[str, str], topic: str, count: int = 1,
                   **more: Any) -> list[Any]:
    """Each message's delivery error (None: delivered)."""
    producer = Producer({**conf(node, user), "message.timeout.ms": 8000, **more})
    out: list[Any] = []
    for i in range(count):
        producer.produce(topic, f"v{i}".encode(), on_delivery=lambda e, m: out.append(e))
    producer.flush(15)
    return [None if e is None else e.code() for e in out]


def poll_error(consumer: Consumer, wanted: int, timeout: float = 10.0) -> set[int]:
    """The error codes a consumer's poll reports until ``wanted`` is one (or ``timeout``)."""
    seen: set[int] = set()
    deadline = time.monotonic() + timeout
    while wanted not in seen and time.monotonic() < deadline:
        msg = consumer.poll(0.2)
        if msg is not None and msg.error() is not None:
            seen.add(msg.error().code())
    return seen


def consume(node: SecureNode, user: tuple[str, str], topic: str, group: str, count: int,
            timeout: float = 15.0) -> list[bytes]:
    consumer = Consumer({**conf(node, user), "group.id": group, "auto.offset.reset": "earliest",
                         "enable.auto.commit": False})
    consumer.subscribe([topic])
    got: list[bytes] = []
    deadline = time.monotonic() + timeout
    while len(got) < count and time.monotonic() < deadline:
        msg = consumer.poll(0.2)
        if msg is not None and msg.error() is None:
            got.append(msg.value())
    if got:
        consumer.commit(asynchronous=False)
    consumer.close()
    return got


@pytest.fixture(scope="module")
def node(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SecureNode]:
    n = SecureNode(tmp_path_factory.mktemp("authz-data") / "data", _settings()).start()
    try:
        admin = AdminClient(conf(n, ADMIN))
        add_user(admin, BOB)
        add_user(admin, CAROL)
        create_topics(admin, "orders", "secret", "team-a", "team-locked", "public", "probe")
        yield n
    finally:
        n.kill()


@pytest.fixture(scope="module")
def admin(node: SecureNode) -> AdminClient:
    return AdminClient(conf(node, ADMIN))


def test_bob_without_acls_is_refused(node: SecureNode) -> None:
    # Metadata: every topic hidden, a named one refused whether or not it exists
    bob_admin = AdminClient(conf(node, BOB))
    assert bob_admin.list_topics(timeout=10).topics == {}
    for name in ("secret", "no-such-topic"):
        md = bob_admin.list_topics(topic=name, timeout=10)
        assert md.topics[name].error.code() == TOPIC_DENIED
    assert produce_errors(node, BOB, "orders") == [TOPIC_DENIED]
    consumer = Consumer({**conf(node, BOB), "group.id": "bob-group"})
    consumer.subscribe(["orders"])
    assert poll_error(consumer, GROUP_DENIED) == {GROUP_DENIED}
    consumer.close()
    txn = Producer({**conf(node, BOB), "transactional.id": "bob-txn"})
    with pytest.raises(KafkaException) as caught:
        txn.init_transactions(10)
    assert caught.value.args[0].code() == TXN_DENIED


def test_granted_acls_let_bob_produce_consume_and_commit(node: SecureNode,
                                                         admin: AdminClient) -> None:
    grant(admin, acl(ResourceType.TOPIC, "orders", AclOperation.DESCRIBE))
    # DESCRIBE alone: the topic is seen, but the Produce and the Fetch are refused
    bob_admin = AdminClient(conf(node, BOB))
    assert until(lambda: "orders" in bob_admin.list_topics(timeout=10).topics)
    assert produce_errors(node, BOB, "orders") == [TOPIC_DENIED]
    # (librdkafka also looks the group up: GROUP_AUTHORIZATION_FAILED may come too)
    reader = Consumer({**conf(node, BOB), "group.id": "unused", "enable.auto.commit": False})
    reader.assign([TopicPartition("orders", 0, 0)])
    assert TOPIC_DENIED in poll_error(reader, TOPIC_DENIED)
    reader.close()
    grant(admin, acl(ResourceType.TOPIC, "orders", AclOperation.WRITE),
          acl(ResourceType.TOPIC, "orders", AclOperation.READ),
          acl(ResourceType.GROUP, "bob-group", AclOperation.READ))
    assert produce_errors(node, BOB, "orders", 3) == [None] * 3
    assert consume(node, BOB, "orders", "bob-group", 3) == [b"v0", b"v1", b"v2"]
    offsets = Consumer({**conf(node, BOB), "group.id": "bob-group"}).committed(
        [TopicPartition("orders", 0)], timeout=10)
    assert offsets[0].offset == 3 and offsets[0].error is None


def test_transactions_with_acls(node: SecureNode, admin: AdminClient) -> None:
    grant(admin, acl(ResourceType.TRANSACTIONAL_ID, "bob-tx", AclOperation.WRITE),
          acl(ResourceType.TOPIC, "team-a", AclOperation.WRITE))
    producer = Producer({**conf(node, BOB), "transactional.id": "bob-tx"})
    producer.init_transactions(15)
    producer.begin_transaction()
    producer.produce("team-a", b"in-txn")
    producer.commit_transaction(15)
    # AddPartitionsToTxn: a topic it may not WRITE fails the request, the rest not attempted
    bob = login(node, BOB)
    ip = request_module(ApiKey.INIT_PRODUCER_ID, 4)
    ids = bob.call(build(ip.InitProducerIdRequest, transactional_id="bob-tx",
                         transaction_timeout=datetime.timedelta(seconds=60), producer_id=-1,
                         producer_epoch=-1))
    assert ids.error_code == 0
    ap = request_module(ApiKey.ADD_PARTITIONS_TO_TXN, 3)
    answer = bob.call(build(
        ap.AddPartitionsToTxnRequest, v3_and_below_transactional_id="bob-tx",
        v3_and_below_producer_id=ids.producer_id, v3_and_below_producer_epoch=ids.producer_epoch,
        v3_and_below_topics=(build(ap.AddPartitionsToTxnTopic, name="team-a", partitions=(0,)),
                             build(ap.AddPartitionsToTxnTopic, name="secret", partitions=(0,)))))
    codes = {t.name: t.results_by_partition[0].partition_error_code
             for t in answer.results_by_topic_v3_and_below}
    assert codes == {"team-a": NOT_ATTEMPTED, "secret": TOPIC_DENIED}
    bob.close()


def test_prefixed_allow_and_deny_over_allow(node: SecureNode, admin: AdminClient) -> None:
    grant(admin, acl(ResourceType.TOPIC, "team-", AclOperation.WRITE,
                     pattern=ResourcePatternType.PREFIXED),
          acl(ResourceType.TOPIC, "team-locked", AclOperation.WRITE,
              permission=AclPermissionType.DENY))
    assert produce_errors(node, BOB, "team-a") == [None]
    assert produce_errors(node, BOB, "team-locked") == [TOPIC_DENIED]


def test_wildcard_principal(node: SecureNode, admin: AdminClient) -> None:
    carol_admin = AdminClient(conf(node, CAROL))
    assert "public" not in carol_admin.list_topics(timeout=10).topics
    grant(admin, acl(ResourceType.TOPIC, "public", AclOperation.READ, who="User:*"))
    for user in (BOB, CAROL):
        md = AdminClient(conf(node, user)).list_topics(timeout=10)
        assert "public" in md.topics and "secret" not in md.topics


def _metadata(client: RawClient, *names: str, auto: bool = False, version: int = 12) -> Any:
    m = request_module(ApiKey.METADATA, version)
    topics = tuple(build(m.MetadataRequestTopic, name=n, topic_id=uuid.UUID(int=0))
                   for n in names) or None
    return client.call(build(m.MetadataRequest, topics=topics, allow_auto_topic_creation=auto,
                             include_topic_authorized_operations=True,
                             include_cluster_authorized_operations=True))


def test_metadata_auto_creation_and_authorized_operations(node: SecureNode,
                                                          admin: AdminClient) -> None:
    bob = login(node, BOB)
    # auto-creation needs DESCRIBE, then CREATE (on the cluster or the topic): refused
    # with one of them, and nothing is created
    grant(admin, acl(ResourceType.TOPIC, "bob-auto", AclOperation.DESCRIBE))
    answer = _metadata(bob, "bob-auto", auto=True)
    assert answer.topics[0].error_code == TOPIC_DENIED
    assert "bob-auto" not in admin.list_topics(timeout=10).topics
    grant(admin, acl(ResourceType.TOPIC, "bob-auto", AclOperation.CREATE))
    assert _metadata(bob, "bob-auto", auto=True).topics[0].error_code == 0
    grant(admin, acl(ResourceType.TOPIC, "probe", AclOperation.READ))
    ops = _metadata(bob, "probe").topics[0].topic_authorized_operations
    assert ops & READ_BIT and ops & DESCRIBE_BIT and not ops & WRITE_BIT
    # v10: the cluster's operations only for a principal that may DESCRIBE the cluster
    assert _metadata(bob, "probe", version=10).cluster_authorized_operations == 0
    root = login(node, ADMIN)
    assert _metadata(root, "probe", version=10).cluster_authorized_operations > 0
    bob.close()
    root.close()


def test_offsets_apis_and_replica_fetch(node: SecureNode, admin: AdminClient) -> None:
    bob = login(node, BOB)
    lo = request_module(ApiKey.LIST_OFFSETS, 7)
    answer = bob.call(build(lo.ListOffsetsRequest, replica_id=-1, isolation_level=0, topics=(
        build(lo.ListOffsetsTopic, name="secret", partitions=(
            build(lo.ListOffsetsPartition, partition_index=0, current_leader_epoch=-1,
                  timestamp=-1),)),)))
    assert answer.topics[0].partitions[0].error_code == TOPIC_DENIED
    ep = request_module(ApiKey.OFFSET_FOR_LEADER_EPOCH, 4)
    answer = bob.call(build(ep.OffsetForLeaderEpochRequest, replica_id=-1, topics=(
        build(ep.OffsetForLeaderTopic, topic="secret", partitions=(
            build(ep.OffsetForLeaderPartition, partition=0, current_leader_epoch=-1,
                  leader_epoch=0),)),)))
    assert answer.topics[0].partitions[0].error_code == TOPIC_DENIED
    # a replica's fetch needs CLUSTER_ACTION: READ on the topic is not enough
    fe = request_module(ApiKey.FETCH, 12)
    fetch = build(fe.FetchRequest, replica_id=1, max_wait=datetime.timedelta(0), min_bytes=0,
                  max_bytes=1 << 20, isolation_level=0, session_id=0, session_epoch=-1,
                  forgotten_topics_data=(), rack_id="", cluster_id=None, topics=(
                      build(fe.FetchTopic, topic="orders", partitions=(
                          build(fe.FetchPartition, partition=0, current_leader_epoch=-1,
                                fetch_offset=0, last_fetched_epoch=-1, log_start_offset=-1,
                                partition_max_bytes=1 << 20),)),))
    assert bob.call(fetch).responses[0].partitions[0].error_code == TOPIC_DENIED
    bob.close()


def test_producer_ids_and_coordinators(node: SecureNode, admin: AdminClient) -> None:
    carol = login(node, CAROL)
    ip = request_module(ApiKey.INIT_PRODUCER_ID, 4)
    idempotent = build(ip.InitProducerIdRequest, transactional_id=None,
                       transaction_timeout=datetime.timedelta(seconds=60), producer_id=-1,
                       producer_epoch=-1)
    assert carol.call(idempotent).error_code == CLUSTER_DENIED
    # WRITE on any topic is enough for an idempotent producer (authorizeByResourceType)
    grant(admin, acl(ResourceType.TOPIC, "carol-", AclOperation.WRITE, who="User:carol",
                     pattern=ResourcePatternType.PREFIXED))
    assert carol.call(idempotent).error_code == 0
    fc = request_module(ApiKey.FIND_COORDINATOR, 4)
    grant(admin, acl(ResourceType.GROUP, "carol-group", AclOperation.DESCRIBE, who="User:carol"))
    answer = carol.call(build(fc.FindCoordinatorRequest, key_type=0,
                              coordinator_keys=("carol-group", "other-group")))
    codes = {c.key: c.error_code for c in answer.coordinators}
    assert codes == {"carol-group": 0, "other-group": GROUP_DENIED}
    answer = carol.call(build(fc.FindCoordinatorRequest, key_type=1, coordinator_keys=("t",)))
    assert answer.coordinators[0].error_code == TXN_DENIED
    carol.close()


def commit(client: RawClient, *topics: str) -> dict[str, int]:
    """A simple (generation -1) OffsetCommit of offset 1 on partition 0 of each topic to
    bob-group: each topic's error code."""
    oc = request_module(ApiKey.OFFSET_COMMIT, 8)
    answer = client.call(build(
        oc.OffsetCommitRequest, group_id="bob-group", generation_id_or_member_epoch=-1,
        member_id="", group_instance_id=None, topics=tuple(
            build(oc.OffsetCommitRequestTopic, name=t, partitions=(
                build(oc.OffsetCommitRequestPartition, partition_index=0, committed_offset=1,
                      committed_leader_epoch=-1, committed_metadata=None),))
            for t in topics)))
    return {t.name: int(t.partitions[0].error_code) for t in answer.topics}


def test_group_admin_apis(node: SecureNode, admin: AdminClient) -> None:
    # bob-group holds bob's committed offsets (test_granted_acls...): carol sees none of it
    carol = login(node, CAROL)
    lg = request_module(ApiKey.LIST_GROUPS, 4)
    root = login(node, ADMIN)
    listed = root.call(build(lg.ListGroupsRequest, states_filter=()))
    assert listed.groups  # the admin (super user) sees the groups
    assert carol.call(build(lg.ListGroupsRequest, states_filter=())).groups == ()
    dg = request_module(ApiKey.DESCRIBE_GROUPS, 5)
    answer = carol.call(build(dg.DescribeGroupsRequest, groups=("bob-group",),
                              include_authorized_operations=True))
    assert answer.groups[0].error_code == GROUP_DENIED
    of = request_module(ApiKey.OFFSET_FETCH, 8)
    answer = carol.call(build(of.OffsetFetchRequest, require_stable=False, groups=(
        build(of.OffsetFetchRequestGroup, group_id="bob-group", topics=None),)))
    assert answer.groups[0].error_code == GROUP_DENIED
    # DESCRIBE on the group, not on the topic: a fetch-all leaves the topic out
    grant(admin, acl(ResourceType.GROUP, "bob-group", AclOperation.DESCRIBE, who="User:carol"))
    answer = carol.call(build(of.OffsetFetchRequest, require_stable=False, groups=(
        build(of.OffsetFetchRequestGroup, group_id="bob-group", topics=None),)))
    assert answer.groups[0].error_code == 0 and answer.groups[0].topics == ()
    named = carol.call(build(of.OffsetFetchRequest, require_stable=False, groups=(
        build(of.OffsetFetchRequestGroup, group_id="bob-group", topics=(
            build(of.OffsetFetchRequestTopics, name="orders", partition_indexes=(0,)),)),)))
    assert named.groups[0].topics[0].partitions[0].error_code == TOPIC_DENIED
    answer = carol.call(build(dg.DescribeGroupsRequest, groups=("bob-group",),
                              include_authorized_operations=True))
    assert answer.groups[0].error_code == 0
    assert answer.groups[0].authorized_operations == DESCRIBE_BIT
    # DESCRIBE is not READ: carol may not join, heartbeat or commit
    jg = request_module(ApiKey.JOIN_GROUP, 5)
    answer = carol.call(build(jg.JoinGroupRequest, group_id="bob-group",
                              session_timeout=datetime.timedelta(seconds=10),
                              rebalance_timeout=datetime.timedelta(seconds=10), member_id="",
                              group_instance_id=None, protocol_type="consumer", protocols=(
                                  build(jg.JoinGroupRequestProtocol, name="range",
                                        metadata=b""),)))
    assert answer.error_code == GROUP_DENIED
    hb = request_module(ApiKey.HEARTBEAT, 3)
    answer = carol.call(build(hb.HeartbeatRequest, group_id="bob-group", generation_id=1,
                              member_id="m", group_instance_id=None))
    assert answer.error_code == GROUP_DENIED
    assert commit(carol, "orders", "secret") == {"orders": GROUP_DENIED, "secret": GROUP_DENIED}
    bob = login(node, BOB)  # READ on the group and on orders, nothing on secret
    assert commit(bob, "orders", "secret") == {"orders": 0, "secret": TOPIC_DENIED}
    bob.close()
    de = request_module(ApiKey.DELETE_GROUPS, 2)
    answer = carol.call(build(de.DeleteGroupsRequest, groups_names=("bob-group",)))
    assert answer.results[0].error_code == GROUP_DENIED
    od = request_module(ApiKey.OFFSET_DELETE, 0)
    answer = carol.call(build(od.OffsetDeleteRequest, group_id="bob-group", topics=(
        build(od.OffsetDeleteRequestTopic, name="orders", partitions=(
            build(od.OffsetDeleteRequestPartition, partition_index=0),)),)))
    assert answer.error_code == GROUP_DENIED
    carol.close()
    root.close()


def test_transaction_admin_apis(node: SecureNode, admin: AdminClient) -> None:
    carol = login(node, CAROL)
    dp = request_module(ApiKey.DESCRIBE_PRODUCERS, 0)
    answer = carol.call(build(dp.DescribeProducersRequest, topics=(
        build(dp.TopicRequest, name="team-a", partition_indexes=(0,)),)))
    assert answer.topics[0].partitions[0].error_code == TOPIC_DENIED
    dt = request_module(ApiKey.DESCRIBE_TRANSACTIONS, 0)
    answer = call_raw(carol, build(dt.DescribeTransactionsRequest, transactional_ids=("bob-tx",)))
    # (kio does not read the start time -1 Kafka sends with an error: the first state's
    # error code is read from the bytes: header, throttle time, array length, then it)
    assert int.from_bytes(answer[4 + 1 + 4 + 1:][:2], "big") == TXN_DENIED
    lt = request_module(ApiKey.LIST_TRANSACTIONS, 1)
    listing = build(lt.ListTransactionsRequest, state_filters=(), producer_id_filters=(),
                    duration_filter=-1)
    assert carol.call(listing).transaction_states == ()
    bob = login(node, BOB)  # WRITE on bob-tx implies DESCRIBE
    ids = {s.transactional_id for s in bob.call(listing).transaction_states}
    assert ids == {"bob-tx"}
    carol.close()
    bob.close()


@pytest.fixture(scope="module")
def open_node(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SecureNode]:
    data = Path(tmp_path_factory.mktemp("authz-open")) / "data"
    n = SecureNode(data, _settings(**{"allow.everyone.if.no.acl.found": "true"})).start()
    try:
        yield n
    finally:
        n.kill()


def test_allow_everyone_if_no_acl_found(open_node: SecureNode) -> None:
    root = AdminClient(conf(open_node, ADMIN))
    add_user(root, BOB)
    create_topics(root, "free", "guarded")
    # no ACL on "free": anyone may; one ACL on "guarded" (for someone else): bob may not
    grant(root, acl(ResourceType.TOPIC, "guarded", AclOperation.WRITE, who="User:carol"))
    assert produce_errors(open_node, BOB, "free") == [None]
    assert produce_errors(open_node, BOB, "guarded") == [TOPIC_DENIED]
    topics = AdminClient(conf(open_node, BOB)).list_topics(timeout=10).topics
    assert "free" in topics and "guarded" not in topics


def test_topic_creation_and_config_changes_need_their_acls(node: SecureNode,
                                                          admin: AdminClient) -> None:
    bob_admin = AdminClient(conf(node, BOB))
    created = bob_admin.create_topics([NewTopic("bob-new", 1, 1)])["bob-new"]
    with pytest.raises(KafkaException) as caught:
        created.result(10)
    assert caught.value.args[0].code() == TOPIC_DENIED
    resource = ConfigResource(ResourceType.TOPIC, "orders",
                              incremental_configs=[ConfigEntry(
                                  "retention.ms", "3600000",
                                  incremental_operation=AlterConfigOpType.SET)])
    with pytest.raises(KafkaException) as caught:
        bob_admin.incremental_alter_configs([resource])[resource].result(10)
    assert caught.value.args[0].code() == TOPIC_DENIED
    grant(admin, acl(ResourceType.TOPIC, "bob-", AclOperation.CREATE,
              pattern=ResourcePatternType.PREFIXED),
          acl(ResourceType.TOPIC, "orders", AclOperation.ALTER_CONFIGS))
    assert until(lambda: _succeeds(lambda: bob_admin.create_topics(
        [NewTopic("bob-new", 1, 1)])["bob-new"].result(10)))
    assert until(lambda: _succeeds(lambda: bob_admin.incremental_alter_configs(
        [resource])[resource].result(10)))
    described = admin.describe_configs([ConfigResource(ResourceType.TOPIC, "orders")])
    entries = next(iter(described.values())).result(10)
    assert entries["retention.ms"].value == "3600000"


def _succeeds(call: Callable[[], object]) -> bool:
    try:
        call()
    except KafkaException as exc:
        assert exc.args[0].code() == TOPIC_DENIED, exc
        return False
    return True
