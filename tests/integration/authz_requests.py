"""The authorization coverage check's requests, shared by the test against a secured broker
(test_authorization_coverage.py) and the one through a gateway in front of it
(tests/system/test_gateway_authorization_coverage.py): one small valid request per API key
(``BUILDERS``), the admin's setup of what they name (``setup_as_admin``), the SCRAM login
over a raw socket, and ``coverage_failures``: every advertised key sent by a user without
rights, each answer checked against authz_expectations' tables."""

from __future__ import annotations

import dataclasses
import datetime
import hashlib
import io
import os
import struct
import time
import uuid
from collections.abc import Callable
from typing import Any

from integration.authz_expectations import OPEN, REFUSED
from integration.raw_client import RawClient
from integration.security_nodes import ADMIN
from kio.index import load_response_schema
from kio.schema.request_header.v2.header import RequestHeader as RequestHeaderV2
from kio.serial import entity_reader, entity_writer
from scramp import ScramClient

from eddy.protocol.apis import ApiKey
from eddy.protocol.codec import build, request_module
from eddy.protocol.records import build_batch

NOBODY = ("nobody", "nobody-secret")  # never granted anything
SOMEBODY = ("somebody", "somebody-secret")  # granted a little by test_admin_plane_details
SCRAM_SHA_256 = 1  # Kafka's ScramMechanism id
TOPIC, GROUP, TXN = "authz-topic", "authz-group", "authz-txn"
ANY, LITERAL, READ, ALLOW = 1, 3, 3, 3  # ACL wire values
NOT_ASKED = -2147483648
ZERO_ID = uuid.UUID(int=0)


def td(ms: int) -> datetime.timedelta:
    return datetime.timedelta(milliseconds=ms)


def login(port: int, user: tuple[str, str]) -> RawClient:
    """A connection authenticated with SCRAM-SHA-256 (SaslHandshake v1, SaslAuthenticate
    v2)."""
    client = RawClient(port)
    hs = request_module(ApiKey.SASL_HANDSHAKE, 1)
    au = request_module(ApiKey.SASL_AUTHENTICATE, 2)
    answer = client.call(hs.SaslHandshakeRequest(mechanism="SCRAM-SHA-256"))
    assert answer.error_code == 0, answer
    scram = ScramClient(["SCRAM-SHA-256"], user[0], user[1])
    first = client.call(au.SaslAuthenticateRequest(auth_bytes=scram.get_client_first().encode()))
    assert first.error_code == 0, first
    scram.set_server_first(first.auth_bytes.decode())
    final = client.call(au.SaslAuthenticateRequest(auth_bytes=scram.get_client_final().encode()))
    assert final.error_code == 0, final
    scram.set_server_final(final.auth_bytes.decode())
    return client


def advertised(client: RawClient) -> dict[int, int]:
    """api key -> highest version, from ApiVersions v3."""
    mod = request_module(ApiKey.API_VERSIONS, 3)
    answer = client.call(mod.ApiVersionsRequest(client_software_name="authz-test",
                                                client_software_version="1"))
    assert answer.error_code == 0
    return {int(k.api_key): int(k.max_version) for k in answer.api_keys}


@dataclasses.dataclass
class Ctx:
    versions: dict[int, int]
    topic_id: uuid.UUID = ZERO_ID
    producer_id: int = -1
    producer_epoch: int = -1
    include_ops: bool = False  # DescribeCluster

    def request(self, key: ApiKey) -> Any:
        return BUILDERS[key](request_module(key, self.versions[key]), self)


def _topic_partition0(mod: Any, topic_cls: str, part_cls: str, **part: Any) -> tuple[Any, ...]:
    return (build(getattr(mod, topic_cls), name=TOPIC, topic=TOPIC,
                  partitions=(build(getattr(mod, part_cls), **part),)),)


def _offset_fetch(m: Any, c: Ctx) -> Any:
    return build(m.OffsetFetchRequest, group_id=GROUP, topics=None, require_stable=False,
                 groups=(build(m.OffsetFetchRequestGroup, group_id=GROUP, member_id=None,
                               member_epoch=-1, topics=None),)
                 if hasattr(m, "OffsetFetchRequestGroup") else ())


def _txn(**more: Any) -> Callable[[Any, Ctx], dict[str, Any]]:
    def fields(m: Any, c: Ctx) -> dict[str, Any]:
        return dict(transactional_id=TXN, producer_id=c.producer_id,
                    producer_epoch=c.producer_epoch, **more)
    return fields


def create_request(m: Any, name: str) -> Any:
    return build(m.CreateTopicsRequest, timeout=td(10000), validate_only=False,
                 topics=(build(m.CreatableTopic, name=name, num_partitions=1,
                               replication_factor=1, assignments=(), configs=()),))


def _configs(m: Any, incremental: bool) -> Any:
    entry = build(m.AlterableConfig, name="retention.ms", value="100000", config_operation=0)
    resource = build(m.AlterConfigsResource, resource_type=2, resource_name=TOPIC,
                     configs=(entry,))
    name = "IncrementalAlterConfigsRequest" if incremental else "AlterConfigsRequest"
    return build(getattr(m, name), resources=(resource,), validate_only=False)


ACL_GRANT = dict(resource_type=2, resource_name=TOPIC, resource_pattern_type=LITERAL,
            principal=f"User:{NOBODY[0]}", host="*", operation=READ, permission_type=ALLOW)
ACL_FILTER = dict(resource_type_filter=ANY, resource_name_filter=None,
                   pattern_type_filter=ANY, principal_filter=None, host_filter=None,
                   operation=ANY, permission_type=ANY)

#: one small valid request per API key: (request module, context) -> request
BUILDERS: dict[ApiKey, Callable[[Any, Ctx], Any]] = {
    ApiKey.PRODUCE: lambda m, c: build(
        m.ProduceRequest, transactional_id=None, acks=1, timeout=td(5000),
        topic_data=(build(m.TopicProduceData, name=TOPIC, partition_data=(
            build(m.PartitionProduceData, index=0, records=bytes(
                build_batch([(None, b"x")], int(time.time() * 1000)))),)),)),
    ApiKey.FETCH: lambda m, c: build(
        m.FetchRequest, replica_id=-1, max_wait=td(0), min_bytes=0, max_bytes=1 << 20,
        isolation_level=0, session_id=0, session_epoch=-1, forgotten_topics_data=(),
        rack_id="", topics=(build(m.FetchTopic, topic=TOPIC, topic_id=c.topic_id,
                                  partitions=(build(m.FetchPartition, partition=0,
                                                    fetch_offset=0,
                                                    partition_max_bytes=1 << 16),)),)),
    ApiKey.LIST_OFFSETS: lambda m, c: build(
        m.ListOffsetsRequest, replica_id=-1, isolation_level=0,
        topics=_topic_partition0(m, "ListOffsetsTopic", "ListOffsetsPartition",
                                 partition_index=0, timestamp=-1)),
    ApiKey.METADATA: lambda m, c: build(
        m.MetadataRequest, allow_auto_topic_creation=False,
        include_topic_authorized_operations=False,
        topics=(build(m.MetadataRequestTopic, name=TOPIC, topic_id=ZERO_ID),)),
    ApiKey.OFFSET_COMMIT: lambda m, c: build(
        m.OffsetCommitRequest, group_id=GROUP, generation_id_or_member_epoch=-1,
        generation_id=-1, member_id="", group_instance_id=None,
        topics=_topic_partition0(m, "OffsetCommitRequestTopic", "OffsetCommitRequestPartition",
                                 partition_index=0, committed_offset=0,
                                 committed_leader_epoch=-1, committed_metadata=None)),
    ApiKey.OFFSET_FETCH: _offset_fetch,
    ApiKey.FIND_COORDINATOR: lambda m, c: build(
        m.FindCoordinatorRequest, key=GROUP, key_type=0, coordinator_keys=(GROUP,)),
    ApiKey.JOIN_GROUP: lambda m, c: build(
        m.JoinGroupRequest, group_id=GROUP, session_timeout=td(10000),
        rebalance_timeout=td(10000), member_id="", group_instance_id=None,
        protocol_type="consumer", reason=None,
        protocols=(build(m.JoinGroupRequestProtocol, name="range", metadata=b""),)),
    ApiKey.HEARTBEAT: lambda m, c: build(
        m.HeartbeatRequest, group_id=GROUP, generation_id=1, member_id="m",
        group_instance_id=None),
    ApiKey.LEAVE_GROUP: lambda m, c: build(
        m.LeaveGroupRequest, group_id=GROUP, member_id="m",
        members=(build(m.MemberIdentity, member_id="m", group_instance_id=None,
                       reason=None),) if hasattr(m, "MemberIdentity") else ()),
    ApiKey.SYNC_GROUP: lambda m, c: build(
        m.SyncGroupRequest, group_id=GROUP, generation_id=1, member_id="m",
        group_instance_id=None, protocol_type="consumer", protocol_name="range",
        assignments=()),
    ApiKey.DESCRIBE_GROUPS: lambda m, c: build(
        m.DescribeGroupsRequest, groups=(GROUP,), include_authorized_operations=False),
    ApiKey.LIST_GROUPS: lambda m, c: build(m.ListGroupsRequest, states_filter=(),
                                           types_filter=()),
    ApiKey.CREATE_TOPICS: lambda m, c: create_request(m, "authz-new"),
    ApiKey.DELETE_TOPICS: lambda m, c: build(
        m.DeleteTopicsRequest, timeout=td(5000), topic_names=(TOPIC,),
        topics=(build(m.DeleteTopicState, name=TOPIC, topic_id=ZERO_ID),)),
    ApiKey.DELETE_RECORDS: lambda m, c: build(
        m.DeleteRecordsRequest, timeout=td(5000),
        topics=_topic_partition0(m, "DeleteRecordsTopic", "DeleteRecordsPartition",
                                 partition_index=0, offset=0)),
    ApiKey.INIT_PRODUCER_ID: lambda m, c: build(
        m.InitProducerIdRequest, transactional_id=TXN, transaction_timeout=td(60000),
        producer_id=-1, producer_epoch=-1),
    ApiKey.OFFSET_FOR_LEADER_EPOCH: lambda m, c: build(
        m.OffsetForLeaderEpochRequest, replica_id=-1,
        topics=_topic_partition0(m, "OffsetForLeaderTopic", "OffsetForLeaderPartition",
                                 partition=0, leader_epoch=0, current_leader_epoch=-1)),
    ApiKey.ADD_PARTITIONS_TO_TXN: lambda m, c: build(
        m.AddPartitionsToTxnRequest, v3_and_below_transactional_id=TXN,
        v3_and_below_producer_id=c.producer_id, v3_and_below_producer_epoch=c.producer_epoch,
        v3_and_below_topics=(build(m.AddPartitionsToTxnTopic, name=TOPIC, partitions=(0,)),)),
    ApiKey.ADD_OFFSETS_TO_TXN: lambda m, c: build(
        m.AddOffsetsToTxnRequest, group_id=GROUP, **_txn()(m, c)),
    ApiKey.END_TXN: lambda m, c: build(m.EndTxnRequest, committed=False, **_txn()(m, c)),
    ApiKey.TXN_OFFSET_COMMIT: lambda m, c: build(
        m.TxnOffsetCommitRequest, group_id=GROUP, generation_id=-1, member_id="",
        group_instance_id=None, **_txn()(m, c),
        topics=_topic_partition0(m, "TxnOffsetCommitRequestTopic",
                                 "TxnOffsetCommitRequestPartition", partition_index=0,
                                 committed_offset=0, committed_leader_epoch=-1,
                                 committed_metadata=None)),
    ApiKey.DESCRIBE_ACLS: lambda m, c: build(m.DescribeAclsRequest, **ACL_FILTER),
    ApiKey.CREATE_ACLS: lambda m, c: build(
        m.CreateAclsRequest, creations=(build(m.AclCreation, **ACL_GRANT),)),
    ApiKey.DELETE_ACLS: lambda m, c: build(
        m.DeleteAclsRequest, filters=(build(m.DeleteAclsFilter, **ACL_FILTER),)),
    ApiKey.DESCRIBE_CONFIGS: lambda m, c: build(
        m.DescribeConfigsRequest, include_synonyms=False, include_documentation=False,
        resources=(build(m.DescribeConfigsResource, resource_type=2, resource_name=TOPIC,
                         configuration_keys=None),)),
    ApiKey.ALTER_CONFIGS: lambda m, c: _configs(m, incremental=False),
    ApiKey.INCREMENTAL_ALTER_CONFIGS: lambda m, c: _configs(m, incremental=True),
    ApiKey.DESCRIBE_LOG_DIRS: lambda m, c: build(m.DescribeLogDirsRequest, topics=None),
    ApiKey.CREATE_PARTITIONS: lambda m, c: build(
        m.CreatePartitionsRequest, timeout=td(5000), validate_only=False,
        topics=(build(m.CreatePartitionsTopic, name=TOPIC, count=3, assignments=None),)),
    ApiKey.DELETE_GROUPS: lambda m, c: build(m.DeleteGroupsRequest, groups_names=(GROUP,)),
    ApiKey.ELECT_LEADERS: lambda m, c: build(
        m.ElectLeadersRequest, election_type=0, timeout=td(5000),
        topic_partitions=(build(m.TopicPartitions, topic=TOPIC, partitions=(0,)),)),
    ApiKey.ALTER_PARTITION_REASSIGNMENTS: lambda m, c: build(
        m.AlterPartitionReassignmentsRequest, timeout=td(5000),
        topics=_topic_partition0(m, "ReassignableTopic", "ReassignablePartition",
                                 partition_index=0, replicas=(1,))),
    ApiKey.LIST_PARTITION_REASSIGNMENTS: lambda m, c: build(
        m.ListPartitionReassignmentsRequest, timeout=td(5000), topics=None),
    ApiKey.OFFSET_DELETE: lambda m, c: build(
        m.OffsetDeleteRequest, group_id=GROUP,
        topics=_topic_partition0(m, "OffsetDeleteRequestTopic", "OffsetDeleteRequestPartition",
                                 partition_index=0)),
    ApiKey.DESCRIBE_USER_SCRAM_CREDENTIALS: lambda m, c: build(
        m.DescribeUserScramCredentialsRequest, users=(build(m.UserName, name=ADMIN[0]),)),
    ApiKey.ALTER_USER_SCRAM_CREDENTIALS: lambda m, c: build(
        m.AlterUserScramCredentialsRequest, upsertions=(),
        deletions=(build(m.ScramCredentialDeletion, name=ADMIN[0], mechanism=SCRAM_SHA_256),)),
    ApiKey.DESCRIBE_QUORUM: lambda m, c: build(
        m.DescribeQuorumRequest, topics=(build(m.TopicData, topic_name="__cluster_metadata",
                                               partitions=(build(m.PartitionData,
                                                                 partition_index=0),)),)),
    ApiKey.DESCRIBE_CLUSTER: lambda m, c: build(
        m.DescribeClusterRequest, include_cluster_authorized_operations=c.include_ops,
        endpoint_type=1),
    ApiKey.DESCRIBE_PRODUCERS: lambda m, c: build(
        m.DescribeProducersRequest, topics=(build(m.TopicRequest, name=TOPIC,
                                                  partition_indexes=(0,)),)),
    ApiKey.DESCRIBE_TRANSACTIONS: lambda m, c: build(m.DescribeTransactionsRequest,
                                                     transactional_ids=(TXN,)),
    ApiKey.LIST_TRANSACTIONS: lambda m, c: build(
        m.ListTransactionsRequest, state_filters=(), producer_id_filters=(),
        duration_filter=-1),
    ApiKey.API_VERSIONS: lambda m, c: build(m.ApiVersionsRequest,
                                            client_software_name="authz-test",
                                            client_software_version="1"),
}


@dataclasses.dataclass(frozen=True)
class FirstState:
    """A DescribeTransactions answer kio cannot read (Kafka's start time -1 for a
    transaction not shown, which kio refuses to parse): its first state's error code."""

    error_code: int


def call(client: RawClient, request: Any) -> Any:
    """``client.call``, except that a DescribeTransactions answer kio refuses is read by
    hand (flexible v0: header, throttle, states count, then the first state's error)."""
    if type(request).__api_key__ != ApiKey.DESCRIBE_TRANSACTIONS:
        return client.call(request)
    sock_call = _RawCall(client)
    data = sock_call.send(request)
    try:
        return sock_call.decode(data)
    except Exception:  # kio: "Cannot parse negative timestamp"
        at = 4 + 1 + 4  # correlation id, no tagged fields, throttle time
        count = data[at] - 1
        assert 0 < count < 128, data
        return FirstState(int.from_bytes(data[at + 1:at + 3], "big", signed=True))


class _RawCall:
    """RawClient.call in two halves: the answer's bytes, then kio's reading of them."""

    def __init__(self, client: RawClient) -> None:
        self.client = client
        self.request: Any = None

    def send(self, request: Any) -> bytes:
        cls = type(request)
        client = self.client
        client.correlation += 1
        buf = io.BytesIO()
        entity_writer(RequestHeaderV2)(buf, RequestHeaderV2(
            request_api_key=cls.__api_key__, request_api_version=cls.__version__,
            correlation_id=client.correlation, client_id="authz-test"))
        entity_writer(cls)(buf, request)
        payload = buf.getvalue()
        client.sock.sendall(struct.pack(">i", len(payload)) + payload)
        (size,) = struct.unpack(">i", client._recv(4))
        self.request = request
        return client._recv(size)

    def decode(self, data: bytes) -> Any:
        cls = type(self.request)
        body, _ = entity_reader(load_response_schema(cls.__api_key__, cls.__version__))(
            data, 5)
        return body


def error_codes(value: Any) -> list[int]:
    """Every error code in an answer (fields named error_code or ending in _error_code)."""
    out: list[int] = []
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        for f in dataclasses.fields(value):
            item = getattr(value, f.name)
            if f.name == "error_code" or f.name.endswith("_error_code"):
                out.append(int(item))
            else:
                out += error_codes(item)
    elif isinstance(value, tuple):
        for item in value:
            out += error_codes(item)
    return out



def call_until(client: RawClient, request: Any, done: Callable[[Any], bool],
                timeout: float = 15.0) -> Any:
    deadline = time.monotonic() + timeout
    while True:
        answer = client.call(request)
        if done(answer) or time.monotonic() > deadline:
            return answer
        time.sleep(0.1)


def setup_as_admin(admin: RawClient, ctx: Ctx) -> None:
    """The topic, group, transaction and user the refused requests name."""
    created = admin.call(create_request(request_module(ApiKey.CREATE_TOPICS, ctx.versions[19]),
                                        TOPIC))
    assert int(created.topics[0].error_code) == 0, created
    ctx.topic_id = created.topics[0].topic_id
    # the partition must have a leader before the group commits an offset for it
    call_until(admin, ctx.request(ApiKey.LIST_OFFSETS),
                lambda a: error_codes(a) == [0])
    committed = call_until(admin, ctx.request(ApiKey.OFFSET_COMMIT),
                            lambda a: set(error_codes(a)) == {0})
    assert set(error_codes(committed)) == {0}, committed
    init = call_until(admin, ctx.request(ApiKey.INIT_PRODUCER_ID),
                       lambda a: int(a.error_code) == 0)
    assert int(init.error_code) == 0, init
    ctx.producer_id, ctx.producer_epoch = int(init.producer_id), int(init.producer_epoch)
    users = request_module(ApiKey.ALTER_USER_SCRAM_CREDENTIALS, 0)
    upsertions = []
    for name, password in (NOBODY, SOMEBODY):
        salt = os.urandom(16)
        salted = hashlib.pbkdf2_hmac("sha256", password.encode(), salt, 4096)
        upsertions.append(users.ScramCredentialUpsertion(
            name=name, mechanism=SCRAM_SHA_256, iterations=4096, salt=salt,
            salted_password=salted))
    made = admin.call(users.AlterUserScramCredentialsRequest(deletions=(),
                                                             upsertions=tuple(upsertions)))
    assert [int(r.error_code) for r in made.results] == [0, 0], made


def check_open(key: ApiKey, nobody: RawClient, admin: RawClient, ctx: Ctx) -> str | None:
    """Why the answer of an open API to ``nobody`` shows too much (None: it does not)."""
    if key in (ApiKey.API_VERSIONS, ApiKey.SASL_HANDSHAKE, ApiKey.SASL_AUTHENTICATE):
        return None  # the login and advertised() made these calls and checked them
    if key == ApiKey.METADATA:
        mod = request_module(key, ctx.versions[key])
        every = build(mod.MetadataRequest, topics=None, allow_auto_topic_creation=False,
                      include_topic_authorized_operations=False)
        seen = nobody.call(every)
        if TOPIC not in [t.name for t in admin.call(every).topics]:
            return "the admin does not see the topic"
        return None if seen.topics == () and seen.brokers else f"all topics: {seen}"
    if key == ApiKey.DESCRIBE_CLUSTER:
        plain = nobody.call(ctx.request(key))
        ctx.include_ops = True
        try:
            asked, mine = nobody.call(ctx.request(key)), admin.call(ctx.request(key))
        finally:
            ctx.include_ops = False
        if int(plain.error_code) != 0 or plain.cluster_authorized_operations != NOT_ASKED:
            return f"without operations: {plain}"
        if asked.cluster_authorized_operations != 0:
            return f"operations of nobody: {asked.cluster_authorized_operations}"
        return None if mine.cluster_authorized_operations > 0 else "admin: no operations"
    if key == ApiKey.LIST_GROUPS:
        seen, mine = nobody.call(ctx.request(key)), admin.call(ctx.request(key))
        if GROUP not in [g.group_id for g in mine.groups]:
            return f"the admin does not see the group: {mine}"
        return None if int(seen.error_code) == 0 and seen.groups == () else f"{seen}"
    if key == ApiKey.LIST_TRANSACTIONS:
        seen, mine = nobody.call(ctx.request(key)), admin.call(ctx.request(key))
        if TXN not in [t.transactional_id for t in mine.transaction_states]:
            return f"the admin does not see the transaction: {mine}"
        return (None if int(seen.error_code) == 0 and seen.transaction_states == ()
                else f"{seen}")
    return f"no check for open API {key.name}"


def coverage_failures(port: int, ctx: Ctx) -> list[str]:
    """Every key ``port`` advertises, sent by NOBODY at its highest version: what differs
    from the tables (nothing: an empty list). Then, as the admin, that the refused requests
    changed no topic."""
    admin = login(port, ADMIN)
    nobody = login(port, NOBODY)
    keys = advertised(nobody)
    failures: list[str] = []
    if keys != ctx.versions:
        failures.append(f"advertised {keys}, the context has {ctx.versions}")
    for raw_key in sorted(keys):
        key = ApiKey(raw_key)
        if key not in REFUSED and key not in OPEN:
            failures.append(f"{key.name}: in neither REFUSED nor OPEN")
            continue
        try:
            if key in REFUSED:
                expected = int(REFUSED[key].code)
                answer = call(nobody, ctx.request(key))
                codes = error_codes(answer)
                if expected not in codes or set(codes) - {0, expected}:
                    failures.append(f"{key.name} v{keys[raw_key]}: want {expected} "
                                    f"({REFUSED[key].check}), got codes {codes}: {answer}")
            if key in OPEN:
                why = check_open(key, nobody, admin, ctx)
                if why is not None:
                    failures.append(f"{key.name} (open): {why}")
        except Exception as exc:
            failures.append(f"{key.name}: {type(exc).__name__} {exc}")
            nobody.close()
            nobody = login(port, NOBODY)
    # nothing the refused requests asked for happened
    mod = request_module(ApiKey.METADATA, ctx.versions[3])
    shown = admin.call(build(mod.MetadataRequest, topics=None, allow_auto_topic_creation=False,
                             include_topic_authorized_operations=False))
    topics = {t.name: len(t.partitions) for t in shown.topics}
    if topics.get(TOPIC) != 1 or "authz-new" in topics:
        failures.append(f"the refused requests changed the topics: {topics}")
    nobody.close()
    admin.close()
    return failures
