"""Gateway handlers answered (mostly) by the gateway itself: ApiVersions, Metadata (itself as
the only broker, leader of every partition), FindCoordinator (itself, seed 003), and the
topic and producer-id operations forwarded to one broker: CreateTopics, InitProducerId."""

from __future__ import annotations

import asyncio
import datetime
import uuid
from typing import Any

from eddy.gateway import ops
from eddy.gateway.node import GATEWAY_VERSIONS, Gateway, as_code, failure_code
from eddy.gateway.routes import TopicRoute, pick_node
from eddy.log.manager import validate_topic_name
from eddy.observe.tracing import span
from eddy.protocol.apis import ApiKey
from eddy.protocol.codec import Request, build, response_module
from eddy.protocol.errors import ErrorCode, KafkaError

_NO_TIME = datetime.timedelta(0)
NO_OPS = -2147483648
_ZERO_ID = uuid.UUID(int=0)
INTERNAL_TOPICS = frozenset({"__consumer_offsets", "__transaction_state"})
GROUP = 0
TRANSACTION = 1
#: a transactional id through a gateway: the error a Kafka broker gives a producer that may
#: not use transactional ids (fatal for the client, with a clear name)
NO_TRANSACTIONS = ErrorCode.transactional_id_authorization_failed


async def api_versions(gw: Gateway, req: Request) -> Any:
    mod = response_module(ApiKey.API_VERSIONS, req.api_version)
    return build(
        mod.ApiVersionsResponse, error_code=ErrorCode.none, throttle_time=_NO_TIME,
        api_keys=tuple(mod.ApiVersion(api_key=k, min_version=r.min, max_version=r.max)
                       for k, r in sorted(GATEWAY_VERSIONS.items())),
    )


# ---- topic creation (CreateTopics, and Metadata's auto-creation) --------------------------


async def _create_on(gw: Gateway, node: int, topics: list[ops.CreateTopic], timeout_ms: int,
                     validate_only: bool, version: int) -> list[ops.CreateTopicResult]:
    op = ops.CreateTopicsOp(tuple(topics), timeout_ms, validate_only, version)
    try:
        resp = await gw.call(node, ops.KAFKA_OP_CREATE_TOPICS, op,
                             timeout_ms + gw.request_timeout_ms)
    except (ops.OpUnavailable, ops.OpTimeout, ops.OpFailed) as exc:
        code = failure_code(exc, ErrorCode.not_controller)
        return [ops.CreateTopicResult(t.name, int(code), f"node {node}: {exc}", bytes(16),
                                      -1, -1, ()) for t in topics]
    results: list[ops.CreateTopicResult] = list(resp.topics)
    if len(results) != len(topics):
        return [ops.CreateTopicResult(t.name, int(ErrorCode.unknown_server_error),
                                      f"node {node} answered {len(results)} results for "
                                      f"{len(topics)} topics", bytes(16), -1, -1, ())
                for t in topics]
    if not validate_only:
        for r in results:
            if r.error_code == ErrorCode.none:
                gw.routes.note_topic(r.name, TopicRoute(node, r.num_partitions))
    return results


async def create_topics_forwarded(gw: Gateway, topics: list[ops.CreateTopic], timeout_ms: int,
                                  validate_only: bool, version: int
                                  ) -> list[ops.CreateTopicResult]:
    """Create on each topic's node (where it already is, else pick_node), one op per node in
    parallel; results in the order of `topics`."""
    nodes = gw.routes.broker_nodes()
    out: list[ops.CreateTopicResult | None] = [None] * len(topics)
    by_node: dict[int, list[int]] = {}
    for i, t in enumerate(topics):
        route = gw.routes.topic(t.name)
        node = route.node_id if route is not None else pick_node(t.name, nodes)
        if node is None:
            out[i] = ops.CreateTopicResult(
                t.name, int(ErrorCode.invalid_replication_factor),
                "Replication factor: 1 larger than available brokers: 0.", bytes(16), -1, -1,
                ())
            continue
        by_node.setdefault(node, []).append(i)
    answers = await asyncio.gather(*(
        _create_on(gw, node, [topics[i] for i in idx], timeout_ms, validate_only, version)
        for node, idx in by_node.items()))
    for idx, results in zip(by_node.values(), answers, strict=True):
        for i, r in zip(idx, results, strict=True):
            out[i] = r
    return [r for r in out if r is not None]


async def create_topics(gw: Gateway, req: Request) -> Any:
    body = req.body
    mod = response_module(ApiKey.CREATE_TOPICS, req.api_version)
    wanted: list[ops.CreateTopic] = []
    local: dict[int, tuple[ErrorCode, str]] = {}  # refused here, by index
    for i, t in enumerate(body.topics):
        num, rf = t.num_partitions, t.replication_factor
        if t.assignments:
            if num != -1 or rf != -1:
                local[i] = (ErrorCode.invalid_request, "Both numPartitions or "
                            "replicationFactor and replicasAssignments were set.")
            elif any(list(a.broker_ids) != [gw.node_id] for a in t.assignments):
                local[i] = (ErrorCode.invalid_replica_assignment,
                            f"replica assignments may name only node {gw.node_id}")
            num = len(t.assignments)
        wanted.append(ops.CreateTopic(t.name, num, rf,
                                      tuple((c.name, c.value) for c in t.configs)))
    timeout_ms = int(body.timeout.total_seconds() * 1000)
    forwarded = [i for i in range(len(wanted)) if i not in local]
    results = await create_topics_forwarded(gw, [wanted[i] for i in forwarded], timeout_ms,
                                            body.validate_only, req.api_version)
    by_index = dict(zip(forwarded, results, strict=True))
    entries = []
    for i, t in enumerate(body.topics):
        r = by_index.get(i)
        if r is None:
            code, message = local[i]
            r = ops.CreateTopicResult(t.name, int(code), message, bytes(16), -1, -1, ())
        entries.append(build(
            mod.CreatableTopicResult, name=r.name, topic_id=uuid.UUID(bytes=r.topic_id)
            if len(r.topic_id) == 16 else _ZERO_ID,
            error_code=as_code(r.error_code), error_message=r.error_message,
            topic_config_error_code=0, num_partitions=r.num_partitions,
            replication_factor=r.replication_factor,
            configs=tuple(build(mod.CreatableTopicConfigs, name=c.name, value=c.value,
                                read_only=c.read_only, config_source=c.config_source,
                                is_sensitive=c.is_sensitive) for c in r.configs)
            if hasattr(mod, "CreatableTopicConfigs") else (),
        ))
    return build(mod.CreateTopicsResponse, throttle_time=_NO_TIME, topics=tuple(entries))


# ---- Metadata ----------------------------------------------------------------------------


def _topic_entry(gw: Gateway, mod: Any, name: str, route: TopicRoute) -> Any:
    me = gw.node_id
    return build(
        mod.MetadataResponseTopic, error_code=ErrorCode.none, name=name, topic_id=_ZERO_ID,
        is_internal=name in INTERNAL_TOPICS, topic_authorized_operations=NO_OPS,
        partitions=tuple(
            build(mod.MetadataResponsePartition, error_code=ErrorCode.none, partition_index=p,
                  leader_id=me, leader_epoch=0, replica_nodes=(me,), isr_nodes=(me,),
                  offline_replicas=())
            if route.available else
            # the owning node is down: no leader until it is back (clients wait and retry)
            build(mod.MetadataResponsePartition, error_code=ErrorCode.leader_not_available,
                  partition_index=p, leader_id=-1, leader_epoch=0, replica_nodes=(me,),
                  isr_nodes=(), offline_replicas=(me,))
            for p in range(route.partitions)),
    )


def _error_entry(mod: Any, name: str | None, topic_id: uuid.UUID | None, code: ErrorCode
                 ) -> Any:
    return build(mod.MetadataResponseTopic, error_code=code, name=name,
                 topic_id=topic_id or _ZERO_ID, is_internal=False, partitions=(),
                 topic_authorized_operations=NO_OPS)


async def metadata(gw: Gateway, req: Request) -> Any:
    body = req.body
    mod = response_module(ApiKey.METADATA, req.api_version)
    requested = body.topics
    if req.api_version == 0 and requested == ():
        requested = None  # v0: an empty list means every topic
    known = gw.routes.topics()
    topics: list[Any] = []
    if requested is None:
        topics = [_topic_entry(gw, mod, n, r) for n, r in sorted(known.items())]
    else:
        allow = (getattr(body, "allow_auto_topic_creation", True)
                 and gw.config.auto_create_topics_enable)
        entries: list[Any] = []  # an entry, or the name of a topic to create
        for item in requested:
            name = item.name
            if name is None:
                # topic ids are not known to the gateway (no metadata service yet)
                tid = getattr(item, "topic_id", None)
                code = (ErrorCode.unknown_topic_id if tid is not None and tid.int != 0
                        else ErrorCode.invalid_request)
                entries.append(_error_entry(mod, None, tid, code))
                continue
            route = known.get(name) or gw.routes.topic(name)
            if route is not None:
                entries.append(_topic_entry(gw, mod, name, route))
                continue
            try:
                validate_topic_name(name)
            except KafkaError as exc:
                entries.append(_error_entry(mod, name, None, exc.code))
                continue
            entries.append(name if allow else _error_entry(
                mod, name, None, ErrorCode.unknown_topic_or_partition))
        creating = list(dict.fromkeys(e for e in entries if isinstance(e, str)))
        created: dict[str, ops.CreateTopicResult] = {}
        if creating:
            results = await create_topics_forwarded(
                gw, [ops.CreateTopic(n, -1, -1, ()) for n in creating],
                gw.request_timeout_ms, False, 7)
            created = {r.name: r for r in results}
        for e in entries:
            if not isinstance(e, str):
                topics.append(e)
                continue
            route = gw.routes.topic(e)
            r = created.get(e)
            if route is None and r is not None and r.error_code == ErrorCode.none:
                route = TopicRoute(-1, r.num_partitions)
            if route is not None:
                topics.append(_topic_entry(gw, mod, e, route))
            else:  # another client's create raced ours, or the owner is unreachable: retry
                topics.append(_error_entry(mod, e, None, ErrorCode.leader_not_available))
    return build(
        mod.MetadataResponse, throttle_time=_NO_TIME,
        brokers=(build(mod.MetadataResponseBroker, node_id=gw.node_id, host=gw.host,
                       port=gw.port, rack=None),),
        cluster_id=gw.cluster_id, controller_id=gw.node_id, topics=tuple(topics),
        cluster_authorized_operations=NO_OPS,
    )


# ---- FindCoordinator (seed 003: answered by the gateway, no broker call) -----------------


def _coordinator(key: str, key_type: int) -> tuple[ErrorCode, str | None]:
    if key_type == TRANSACTION:
        return NO_TRANSACTIONS, "transactions are not served through a gateway"
    if key_type != GROUP:
        return ErrorCode.invalid_request, f"unsupported coordinator key type {key_type}"
    if not key:
        return ErrorCode.invalid_request, "group id is empty"
    return ErrorCode.none, None


async def find_coordinator(gw: Gateway, req: Request) -> Any:
    body = req.body
    mod = response_module(ApiKey.FIND_COORDINATOR, req.api_version)
    key_type = getattr(body, "key_type", GROUP)
    with span("eddy.gateway.kafka.find-coordinator", key_type=key_type):
        if req.api_version >= 4:
            answers = []
            for key in body.coordinator_keys:
                code, message = _coordinator(key, key_type)
                ok = code == ErrorCode.none
                answers.append(build(
                    mod.Coordinator, key=key, node_id=gw.node_id if ok else -1,
                    host=gw.host if ok else "", port=gw.port if ok else -1, error_code=code,
                    error_message=message))
            return build(mod.FindCoordinatorResponse, throttle_time=_NO_TIME,
                         coordinators=tuple(answers))
        code, message = _coordinator(body.key, key_type)
        ok = code == ErrorCode.none
        return build(
            mod.FindCoordinatorResponse, throttle_time=_NO_TIME, error_code=code,
            error_message=message, node_id=gw.node_id if ok else -1,
            host=gw.host if ok else "", port=gw.port if ok else -1,
        )


# ---- InitProducerId ----------------------------------------------------------------------


async def init_producer_id(gw: Gateway, req: Request) -> Any:
    body = req.body
    mod = response_module(ApiKey.INIT_PRODUCER_ID, req.api_version)

    def answer(code: ErrorCode, pid: int = -1, epoch: int = -1) -> Any:
        return build(mod.InitProducerIdResponse, throttle_time=_NO_TIME, error_code=code,
                     producer_id=pid, producer_epoch=epoch)

    if body.transactional_id is not None:
        return answer(NO_TRANSACTIONS)
    nodes = gw.routes.broker_nodes()
    if not nodes:
        return answer(ErrorCode.coordinator_not_available)
    # one allocator for the whole cluster: the lowest broker node's
    op = ops.InitProducerIdOp(None, int(body.transaction_timeout.total_seconds() * 1000),
                              getattr(body, "producer_id", -1),
                              getattr(body, "producer_epoch", -1))
    try:
        r = await gw.call(min(nodes), ops.KAFKA_OP_INIT_PRODUCER_ID, op, gw.request_timeout_ms)
    except (ops.OpUnavailable, ops.OpTimeout, ops.OpFailed) as exc:
        return answer(failure_code(exc, ErrorCode.coordinator_not_available))
    return answer(as_code(r.error_code), r.producer_id, r.producer_epoch)
