"""The owner's side of a KafkaOp: decode the op, run it through the broker's own Kafka
handler (the code path a direct client takes: validation, long polls, group rebalances),
answer with the op's response struct. Records are never decoded."""

from __future__ import annotations

import datetime
from collections.abc import Awaitable, Callable, Iterable, Sized
from functools import cache
from typing import Any, cast

from kio.index import load_response_schema
from kio.serial import entity_reader

from eddy import postcard
from eddy.broker.broker import Broker
from eddy.broker.handlers import admin, fetch, groups, list_offsets, produce, producer_id
from eddy.broker.sender import FileRange
from eddy.gateway import ops
from eddy.gateway.executor_admin import ADMIN_RUNNERS
from eddy.groups.state import OffsetCommitEntry
from eddy.protocol.apis import SUPPORTED, ApiKey
from eddy.protocol.codec import Encoded, Request, build, request_module
from eddy.protocol.errors import ErrorCode, KafkaError
from eddy.security.acl import AclOperation
from eddy.security.session import Session
from eddy.telemetry.tracing import span

_EPOCH = datetime.datetime(1970, 1, 1, tzinfo=datetime.UTC)
_MS = datetime.timedelta(milliseconds=1)
#: Fetch runs at the newest version that names topics (v13+ names them by id)
FETCH_VERSION = 12


def _td(ms: int) -> datetime.timedelta:
    return datetime.timedelta(milliseconds=ms)


def _ms(value: Any) -> int:
    if isinstance(value, datetime.timedelta):
        return value // _MS
    return int(value)


def _version(key: ApiKey, wanted: int) -> int:
    """The client's version when this broker serves it, else the nearest it does."""
    r = SUPPORTED[key]
    return min(max(wanted, r.min), r.max)


def _newest(key: ApiKey) -> int:
    return SUPPORTED[key].max


def _by_topic(items: Iterable[tuple[str, Any]]) -> dict[str, list[Any]]:
    """Group (topic, item) pairs by topic, keeping first-seen order."""
    out: dict[str, list[Any]] = {}
    for name, item in items:
        out.setdefault(name, []).append(item)
    return out


def _request(key: ApiKey, version: int, body: Any, client_id: str = "",
             client_host: str = "", session: Session | None = None) -> Request:
    """The Kafka request a direct client would have sent; ``session`` is the gateway's
    client when the op came for one (the handlers' authorization checks read it)."""
    return Request(key, version, 0, client_id or None, body, client_host, session)


# ---- data ops ----------------------------------------------------------------------------


async def _produce(broker: Broker, op: ops.ProduceOp,
                   session: Session | None = None) -> ops.ProduceOpResp:
    v = _version(ApiKey.PRODUCE, op.api_version)
    mod = request_module(ApiKey.PRODUCE, v)
    body = build(
        mod.ProduceRequest,
        transactional_id=op.transactional_id,
        # acks=0 still needs the per-partition outcome here: the gateway drops the answer
        acks=1 if op.acks == 0 else op.acks,
        timeout=_td(op.timeout_ms),
        topic_data=tuple(
            build(mod.TopicProduceData, name=t.name, partition_data=tuple(
                build(mod.PartitionProduceData, index=p.index, records=p.records)
                for p in t.partitions))
            for t in op.topics
        ),
    )
    resp = await produce.handle(broker, _request(ApiKey.PRODUCE, v, body, session=session))
    return ops.ProduceOpResp(tuple(
        ops.ProduceTopicResp(t.name, tuple(
            ops.ProducePartitionResp(
                index=p.index,
                error_code=int(p.error_code),
                base_offset=p.base_offset,
                log_append_time_ms=((p.log_append_time - _EPOCH) // _MS
                                    if getattr(p, "log_append_time", None) is not None
                                    else -1),
                log_start_offset=getattr(p, "log_start_offset", -1),
                error_message=getattr(p, "error_message", None),
                record_errors=tuple((e.batch_index, e.batch_index_error_message)
                                    for e in getattr(p, "record_errors", ())),
            )
            for p in t.partition_responses))
        for t in resp.responses
    ))


@cache
def _fetch_reader() -> Any:
    return entity_reader(load_response_schema(ApiKey.FETCH, FETCH_VERSION))


def _joined(chunks: list[Sized]) -> bytes:
    parts: list[bytes] = []
    for c in chunks:
        if isinstance(c, bytes | bytearray | memoryview):
            parts.append(bytes(c))
        else:
            parts.append(cast(FileRange, c).read())
    return b"".join(parts)


async def _fetch(broker: Broker, op: ops.FetchOp,
                 session: Session | None = None) -> ops.FetchOpResp:
    v = FETCH_VERSION
    mod = request_module(ApiKey.FETCH, v)
    body = build(
        mod.FetchRequest,
        cluster_id=None, replica_id=-1, max_wait=_td(op.max_wait_ms), min_bytes=op.min_bytes,
        max_bytes=op.max_bytes, isolation_level=op.isolation_level, session_id=0,
        session_epoch=-1, forgotten_topics_data=(), rack_id="",
        topics=tuple(
            build(mod.FetchTopic, topic=t.topic, partitions=tuple(
                build(mod.FetchPartition, partition=p.partition,
                      current_leader_epoch=p.current_leader_epoch, fetch_offset=p.fetch_offset,
                      last_fetched_epoch=-1, log_start_offset=p.log_start_offset,
                      partition_max_bytes=p.partition_max_bytes)
                for p in t.partitions))
            for t in op.topics
        ),
    )
    encoded = await fetch.handle(broker, _request(ApiKey.FETCH, v, body, session=session))
    assert isinstance(encoded, Encoded)
    data = _joined(encoded.chunks)
    del encoded  # let go of the segment file pins
    # header v1: correlation id, then an empty tagged-field section
    resp, _ = _fetch_reader()(memoryview(data), 5)
    return ops.FetchOpResp(int(resp.error_code), tuple(
        ops.FetchTopicResp(t.topic, tuple(
            ops.FetchPartitionResp(
                partition=p.partition_index, error_code=int(p.error_code),
                high_watermark=p.high_watermark, last_stable_offset=p.last_stable_offset,
                log_start_offset=p.log_start_offset,
                aborted=(None if p.aborted_transactions is None else tuple(
                    (a.producer_id, a.first_offset) for a in p.aborted_transactions)),
                records=None if p.records is None else bytes(p.records),
            )
            for p in t.partitions))
        for t in resp.responses
    ))


async def _list_offsets(broker: Broker, op: ops.ListOffsetsOp,
                        session: Session | None = None) -> ops.ListOffsetsOpResp:
    v = _version(ApiKey.LIST_OFFSETS, op.api_version)
    mod = request_module(ApiKey.LIST_OFFSETS, v)
    body = build(
        mod.ListOffsetsRequest, replica_id=-1, isolation_level=op.isolation_level,
        topics=tuple(
            build(mod.ListOffsetsTopic, name=t.name, partitions=tuple(
                build(mod.ListOffsetsPartition, partition_index=p.partition,
                      current_leader_epoch=p.current_leader_epoch, timestamp=p.timestamp)
                for p in t.partitions))
            for t in op.topics
        ),
    )
    request = _request(ApiKey.LIST_OFFSETS, v, body, session=session)
    resp = await list_offsets.handle(broker, request)
    return ops.ListOffsetsOpResp(tuple(
        ops.ListOffsetsTopicResp(t.name, tuple(
            ops.ListOffsetsPartitionResp(p.partition_index, int(p.error_code),
                                         getattr(p, "timestamp", -1), p.offset,
                                         getattr(p, "leader_epoch", -1))
            for p in t.partitions))
        for t in resp.topics
    ))


async def _create_topics(broker: Broker, op: ops.CreateTopicsOp,
                         session: Session | None = None) -> ops.CreateTopicsOpResp:
    v = _newest(ApiKey.CREATE_TOPICS)
    mod = request_module(ApiKey.CREATE_TOPICS, v)
    body = build(
        mod.CreateTopicsRequest, timeout=_td(op.timeout_ms), validate_only=op.validate_only,
        topics=tuple(
            build(mod.CreatableTopic, name=t.name, num_partitions=t.num_partitions,
                  replication_factor=t.replication_factor, assignments=(),
                  configs=tuple(build(mod.CreatableTopicConfig, name=k, value=val)
                                for k, val in t.configs))
            for t in op.topics
        ),
    )
    request = _request(ApiKey.CREATE_TOPICS, v, body, session=session)
    resp = await admin.create_topics(broker, request)
    return ops.CreateTopicsOpResp(tuple(
        ops.CreateTopicResult(
            name=t.name, error_code=int(t.error_code), error_message=t.error_message,
            topic_id=t.topic_id.bytes if t.topic_id is not None else bytes(16),
            num_partitions=t.num_partitions, replication_factor=t.replication_factor,
            configs=tuple(ops.TopicConfigResp(c.name, c.value, c.read_only, c.config_source,
                                              c.is_sensitive) for c in t.configs or ()),
        )
        for t in resp.topics
    ))


async def _init_producer_id(broker: Broker, op: ops.InitProducerIdOp,
                            session: Session | None = None) -> ops.InitProducerIdOpResp:
    v = _newest(ApiKey.INIT_PRODUCER_ID)
    mod = request_module(ApiKey.INIT_PRODUCER_ID, v)
    body = build(mod.InitProducerIdRequest, transactional_id=op.transactional_id,
                 transaction_timeout=_td(op.transaction_timeout_ms),
                 producer_id=op.producer_id, producer_epoch=op.producer_epoch)
    request = _request(ApiKey.INIT_PRODUCER_ID, v, body, session=session)
    resp = await producer_id.init_producer_id(broker, request)
    return ops.InitProducerIdOpResp(int(resp.error_code), resp.producer_id, resp.producer_epoch)


# ---- group ops (the handlers emit seed 003's eddy.broker.group.* spans) ------------------


async def _join_group(broker: Broker, op: ops.JoinGroupOp,
                      session: Session | None = None) -> ops.JoinGroupOpResp:
    v = _version(ApiKey.JOIN_GROUP, op.api_version)
    mod = request_module(ApiKey.JOIN_GROUP, v)
    rebalance = op.rebalance_timeout_ms if op.rebalance_timeout_ms >= 0 else op.session_timeout_ms
    body = build(
        mod.JoinGroupRequest, group_id=op.group_id, session_timeout=_td(op.session_timeout_ms),
        rebalance_timeout=_td(rebalance), member_id=op.member_id,
        group_instance_id=op.group_instance_id, protocol_type=op.protocol_type,
        protocols=tuple(build(mod.JoinGroupRequestProtocol, name=n, metadata=m)
                        for n, m in op.protocols),
        reason=op.reason,
    )
    r = await groups.join_group(broker, _request(ApiKey.JOIN_GROUP, v, body, op.client_id,
                                                 op.client_host, session=session))
    name = r.protocol_name
    return ops.JoinGroupOpResp(
        error_code=int(r.error_code), generation_id=r.generation_id,
        protocol_name=name or "", leader_id=r.leader, member_id=r.member_id,
        members=tuple((m.member_id, m.metadata) for m in r.members),
        has_protocol_name=name is not None,
        protocol_type=getattr(r, "protocol_type", None),
        skip_assignment=getattr(r, "skip_assignment", False),
        member_instance_ids=tuple(getattr(m, "group_instance_id", None) for m in r.members),
    )


async def _sync_group(broker: Broker, op: ops.SyncGroupOp,
                      session: Session | None = None) -> ops.SyncGroupOpResp:
    v = _version(ApiKey.SYNC_GROUP, op.api_version)
    mod = request_module(ApiKey.SYNC_GROUP, v)
    body = build(
        mod.SyncGroupRequest, group_id=op.group_id, generation_id=op.generation_id,
        member_id=op.member_id, group_instance_id=op.group_instance_id,
        protocol_type=op.protocol_type, protocol_name=op.protocol_name,
        assignments=tuple(build(mod.SyncGroupRequestAssignment, member_id=m, assignment=a)
                          for m, a in op.assignments),
    )
    r = await groups.sync_group(broker, _request(ApiKey.SYNC_GROUP, v, body, session=session))
    return ops.SyncGroupOpResp(int(r.error_code), r.assignment,
                               getattr(r, "protocol_type", None),
                               getattr(r, "protocol_name", None))


async def _heartbeat(broker: Broker, op: ops.HeartbeatOp,
                     session: Session | None = None) -> ops.HeartbeatOpResp:
    v = _version(ApiKey.HEARTBEAT, op.api_version)
    mod = request_module(ApiKey.HEARTBEAT, v)
    body = build(mod.HeartbeatRequest, group_id=op.group_id, generation_id=op.generation_id,
                 member_id=op.member_id, group_instance_id=op.group_instance_id)
    r = await groups.heartbeat(broker, _request(ApiKey.HEARTBEAT, v, body, session=session))
    return ops.HeartbeatOpResp(int(r.error_code))


async def _leave_group(broker: Broker, op: ops.LeaveGroupOp,
                       session: Session | None = None) -> ops.LeaveGroupOpResp:
    members = op.members or ((op.member_id, None),)
    # v3+ carries every member; run it at the newest so batched leaves keep their ids
    v = _newest(ApiKey.LEAVE_GROUP)
    mod = request_module(ApiKey.LEAVE_GROUP, v)
    body = build(mod.LeaveGroupRequest, group_id=op.group_id, members=tuple(
        build(mod.MemberIdentity, member_id=m, group_instance_id=i, reason=None)
        for m, i in members))
    r = await groups.leave_group(broker, _request(ApiKey.LEAVE_GROUP, v, body, session=session))
    return ops.LeaveGroupOpResp(int(r.error_code), tuple(
        (m.member_id, m.group_instance_id, int(m.error_code)) for m in r.members))


async def _offset_commit(broker: Broker, op: ops.OffsetCommitOp,
                         session: Session | None = None) -> ops.OffsetCommitOpResp:
    """The one group op that does not go through the Kafka handler: that handler refuses
    offsets of topics this node does not hold, but a group's owner need not hold its
    topics (the gateway checks them against its routes). Same coordinator call and span,
    and the handler's authorization: READ on the group, then READ on each topic."""
    v = _version(ApiKey.OFFSET_COMMIT, op.api_version)
    svc = broker.groups
    asked = _request(ApiKey.OFFSET_COMMIT, v, None, session=session)
    if not groups.group_allowed(broker, asked, AclOperation.READ, op.group_id):
        denied = int(ErrorCode.group_authorization_failed)
        return ops.OffsetCommitOpResp(tuple((t, p, denied) for t, p, _, _ in op.offsets))
    hidden = {t for t, _, _, _ in op.offsets
              if not groups.topic_allowed(broker, asked, AclOperation.READ, t)}
    epochs = list(op.leader_epochs) + [-1] * (len(op.offsets) - len(op.leader_epochs))
    entries = [OffsetCommitEntry(topic=t, partition=p, offset=o, leader_epoch=e, metadata=m)
               for (t, p, o, m), e in zip(op.offsets, epochs, strict=False) if t not in hidden]
    codes = {(t, p): int(ErrorCode.topic_authorization_failed)
             for t, p, _, _ in op.offsets if t in hidden}
    if entries or not hidden:  # Kafka: no topic allowed, no coordinator call
        with span("eddy.broker.group.offset-commit", group_id=op.group_id):
            r = await svc.call(svc.coordinator.commit_offsets(
                svc.now(), group_id=op.group_id, offsets=entries,
                generation_id=op.generation_id, member_id=op.member_id,
                group_instance_id=op.group_instance_id,
                retention_time_ms=op.retention_time_ms if v <= 4 else -1, api_version=v))
        codes.update({(pr.topic, pr.partition): int(pr.error_code) for pr in r.partitions})
    return ops.OffsetCommitOpResp(tuple(
        (t, p, codes.get((t, p), 0)) for t, p, _, _ in op.offsets))


async def _offset_fetch(broker: Broker, op: ops.OffsetFetchOp,
                        session: Session | None = None) -> ops.OffsetFetchOpResp:
    v = _version(ApiKey.OFFSET_FETCH, op.api_version)
    mod = request_module(ApiKey.OFFSET_FETCH, v)
    wanted = _by_topic(op.partitions)
    if v >= 8:
        topics = None if not op.partitions else tuple(
            build(mod.OffsetFetchRequestTopics, name=n, partition_indexes=tuple(ps))
            for n, ps in wanted.items())
        body = build(mod.OffsetFetchRequest, require_stable=op.require_stable, groups=(
            build(mod.OffsetFetchRequestGroup, group_id=op.group_id, member_id=None,
                  member_epoch=-1, topics=topics),))
    else:
        topics = None if not op.partitions else tuple(
            build(mod.OffsetFetchRequestTopic, name=n, partition_indexes=tuple(ps))
            for n, ps in wanted.items())
        body = build(mod.OffsetFetchRequest, group_id=op.group_id, topics=topics,
                     require_stable=op.require_stable)
    r = await groups.offset_fetch(broker, _request(ApiKey.OFFSET_FETCH, v, body, session=session))
    g = r.groups[0] if v >= 8 else r
    parts = [(t.name, p) for t in g.topics for p in t.partitions]
    return ops.OffsetFetchOpResp(
        offsets=tuple((n, p.partition_index, p.committed_offset, p.metadata,
                       int(p.error_code)) for n, p in parts),
        error_code=int(getattr(g, "error_code", 0)),
        leader_epochs=tuple(getattr(p, "committed_leader_epoch", -1) for _, p in parts),
    )


async def _list_groups(broker: Broker, op: ops.ListGroupsOp,
                       session: Session | None = None) -> ops.ListGroupsOpResp:
    v = _newest(ApiKey.LIST_GROUPS)
    mod = request_module(ApiKey.LIST_GROUPS, v)
    body = build(mod.ListGroupsRequest, states_filter=op.states_filter,
                 types_filter=op.types_filter)
    r = await groups.list_groups(broker, _request(ApiKey.LIST_GROUPS, v, body, session=session))
    return ops.ListGroupsOpResp(int(r.error_code), tuple(
        ops.ListedGroup(g.group_id, g.protocol_type, g.group_state, g.group_type)
        for g in r.groups))


async def _describe_groups(broker: Broker, op: ops.DescribeGroupsOp,
                           session: Session | None = None) -> ops.DescribeGroupsOpResp:
    v = _newest(ApiKey.DESCRIBE_GROUPS)
    mod = request_module(ApiKey.DESCRIBE_GROUPS, v)
    body = build(mod.DescribeGroupsRequest, groups=op.groups,
                 include_authorized_operations=False)
    request = _request(ApiKey.DESCRIBE_GROUPS, v, body, session=session)
    r = await groups.describe_groups(broker, request)
    return ops.DescribeGroupsOpResp(tuple(
        ops.DescribedGroup(
            int(g.error_code), g.group_id, g.group_state, g.protocol_type, g.protocol_data,
            tuple(ops.DescribedMember(m.member_id, m.group_instance_id, m.client_id,
                                      m.client_host, m.member_metadata, m.member_assignment)
                  for m in g.members))
        for g in r.groups))


_Runner = Callable[[Broker, Any, Session | None], Awaitable[Any]]

RUNNERS: dict[int, _Runner] = {
    ops.KAFKA_OP_PRODUCE: _produce,
    ops.KAFKA_OP_FETCH: _fetch,
    ops.KAFKA_OP_LIST_OFFSETS: _list_offsets,
    ops.KAFKA_OP_CREATE_TOPICS: _create_topics,
    ops.KAFKA_OP_JOIN_GROUP: _join_group,
    ops.KAFKA_OP_SYNC_GROUP: _sync_group,
    ops.KAFKA_OP_HEARTBEAT: _heartbeat,
    ops.KAFKA_OP_LEAVE_GROUP: _leave_group,
    ops.KAFKA_OP_OFFSET_COMMIT: _offset_commit,
    ops.KAFKA_OP_OFFSET_FETCH: _offset_fetch,
    ops.KAFKA_OP_INIT_PRODUCER_ID: _init_producer_id,
    ops.KAFKA_OP_LIST_GROUPS: _list_groups,
    ops.KAFKA_OP_DESCRIBE_GROUPS: _describe_groups,
    **ADMIN_RUNNERS,  # topic, config, record and group administration (ops_admin)
}


class OpExecutor:
    """Runs KafkaOps against a local Broker."""

    def __init__(self, broker: Broker) -> None:
        self.broker = broker

    async def run(self, op: int, request: Any, session: Session | None = None) -> Any:
        """Run a decoded op; returns its response struct. ``session``: the gateway's client
        the op runs as (None: no client, as User:ANONYMOUS)."""
        runner = RUNNERS.get(op)
        if runner is None:
            raise ops.UnknownOp(op)
        try:
            return await runner(self.broker, request, session)
        except KafkaError as exc:  # e.g. storage failure where no per-item code fits
            raise ops.OpError(f"op 0x{op:02x}: {exc.code.name}: {exc.message}") from None
        except OSError as exc:
            raise ops.OpError(f"op 0x{op:02x}: storage error: {exc}") from None

    async def execute(self, op: int, body: bytes, session: Session | None = None) -> bytes:
        """The carrier's entry point: payload in, payload out. Raises UnknownOp, BadOp
        (payload does not decode) or OpError."""
        classes = ops.OPS.get(op)
        if classes is None:
            raise ops.UnknownOp(op)
        try:
            request = postcard.decode(classes[0], body)
        except postcard.PostcardError as exc:
            raise ops.BadOp(f"op 0x{op:02x} ({classes[0].__name__}): {exc}") from None
        answer: bytes = postcard.encode(await self.run(op, request, session))
        return answer
