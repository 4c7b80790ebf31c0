"""Gateway handlers answered (mostly) by the gateway itself: ApiVersions, Metadata (itself as
the only broker, leader of every partition), FindCoordinator (itself, seed 003), and the
topic and producer-id operations forwarded to one broker: CreateTopics, InitProducerId."""

from __future__ import annotations

import asyncio
import dataclasses
import datetime
import uuid
from typing import Any

from eddy.gateway import ops
from eddy.gateway.authz import Gate
from eddy.gateway.node import GATEWAY_VERSIONS, Gateway, as_code, failure_code
from eddy.gateway.routes import TopicRoute, pick_node
from eddy.log.manager import validate_topic_name
from eddy.protocol.apis import ApiKey
from eddy.protocol.codec import Request, build, response_module
from eddy.protocol.errors import ErrorCode, KafkaError
from eddy.security.acl import AclOperation, ResourceType
from eddy.telemetry.tracing import span

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


async def _creatable(gate: Gate, names: list[str]) -> set[str]:
    """The names a principal may create (CreateTopics, Metadata's auto-creation): CREATE on
    the cluster, else on each topic."""
    if not names or await gate.cluster(AclOperation.CREATE):
        return set(names)
    return await gate.names(AclOperation.CREATE, ResourceType.TOPIC, names)


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
    # the broker's first check (CREATE on the cluster or the topic), before the gateway's own
    # refusals and before a topic with no broker to go to
    gate = Gate(gw, req)
    creatable = await _creatable(gate, [t.name for t in wanted])
    for i, t in enumerate(wanted):
        if t.name not in creatable:
            local[i] = (ErrorCode.topic_authorization_failed, "Authorization failed.")
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
    """The broker's rules (eddy.broker.handlers.metadata): every topic means those the
    principal may DESCRIBE; a named one it may not is TOPIC_AUTHORIZATION_FAILED whether or
    not it exists; auto-creation needs CREATE on the cluster or the topic."""
    body = req.body
    mod = response_module(ApiKey.METADATA, req.api_version)
    gate = Gate(gw, req)
    requested = body.topics
    if req.api_version == 0 and requested == ():
        requested = None  # v0: an empty list means every topic
    known = gw.routes.topics()
    topics: list[Any] = []
    if requested is None:
        shown = await gate.names(AclOperation.DESCRIBE, ResourceType.TOPIC, known)
        topics = [_topic_entry(gw, mod, n, r) for n, r in sorted(known.items()) if n in shown]
    else:
        allow = (getattr(body, "allow_auto_topic_creation", True)
                 and gw.config.auto_create_topics_enable)
        described = await gate.names(AclOperation.DESCRIBE, ResourceType.TOPIC,
                                     (i.name for i in requested if i.name is not None))
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
            if name not in described:  # before the lookup: its existence is not revealed
                entries.append(_error_entry(mod, name, None,
                                            ErrorCode.topic_authorization_failed))
                continue
            route = known.get(name) or gw.routes.topic(name)
            if route is not None:
                entries.append(_topic_entry(gw, mod, name, route))
                continue
            entries.append(name)
        missing = list(dict.fromkeys(e for e in entries if isinstance(e, str)))
        creatable = await _creatable(gate, missing) if allow else set()
        for i, e in enumerate(entries):
            if not isinstance(e, str):
                continue
            if allow and e not in creatable:
                entries[i] = _error_entry(mod, e, None, ErrorCode.topic_authorization_failed)
                continue
            try:
                validate_topic_name(e)
            except KafkaError as exc:
                entries[i] = _error_entry(mod, e, None, exc.code)
                continue
            if not allow:
                entries[i] = _error_entry(mod, e, None, ErrorCode.unknown_topic_or_partition)
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
            elif r is not None and r.error_code == ErrorCode.topic_authorization_failed:
                topics.append(_error_entry(mod, e, None, ErrorCode.topic_authorization_failed))
            else:  # another client's create raced ours, or the owner is unreachable: retry
                topics.append(_error_entry(mod, e, None, ErrorCode.leader_not_available))
    if getattr(body, "include_topic_authorized_operations", False):
        named = [t.name for t in topics if t.error_code == ErrorCode.none]
        allowed_ops = await gate.operations(ResourceType.TOPIC, named)
        topics = [dataclasses.replace(t, topic_authorized_operations=allowed_ops[t.name])
                  if t.error_code == ErrorCode.none else t for t in topics]
    cluster_ops = NO_OPS
    if getattr(body, "include_cluster_authorized_operations", False):
        cluster_ops = (await gate.cluster_operations()
                       if await gate.cluster(AclOperation.DESCRIBE) else 0)
    return build(
        mod.MetadataResponse, throttle_time=_NO_TIME,
        brokers=(build(mod.MetadataResponseBroker, node_id=gw.node_id, host=gw.host,
                       port=gw.port, rack=None),),
        cluster_id=gw.cluster_id, controller_id=gw.node_id, topics=tuple(topics),
        cluster_authorized_operations=cluster_ops,
    )


# ---- FindCoordinator (seed 003: answered by the gateway, no broker call) -----------------


async def _coordinator(gate: Gate, key: str, key_type: int) -> tuple[ErrorCode, str | None]:
    """The broker's order (eddy.broker.handlers.coordinator): the key type, DESCRIBE on the
    group or transactional id, then the key itself."""
    if key_type not in (GROUP, TRANSACTION):
        return ErrorCode.invalid_request, f"unsupported coordinator key type {key_type}"
    if key_type == GROUP and not await gate.allowed(AclOperation.DESCRIBE,
                                                    ResourceType.GROUP, key):
        return ErrorCode.group_authorization_failed, f"not authorized to DESCRIBE group {key}"
    if key_type == TRANSACTION:
        if not await gate.allowed(AclOperation.DESCRIBE, ResourceType.TRANSACTIONAL_ID, key):
            return NO_TRANSACTIONS, f"not authorized to DESCRIBE transactional id {key}"
        return NO_TRANSACTIONS, "transactions are not served through a gateway"
    if not key:
        return ErrorCode.invalid_request, "group id is empty"
    return ErrorCode.none, None


async def find_coordinator(gw: Gateway, req: Request) -> Any:
    body = req.body
    mod = response_module(ApiKey.FIND_COORDINATOR, req.api_version)
    key_type = getattr(body, "key_type", GROUP)
    gate = Gate(gw, req)
    with span("eddy.gateway.kafka.find-coordinator", key_type=key_type):
        if req.api_version >= 4:
            if key_type == GROUP:  # the keys' decisions in one batch
                await gate.names(AclOperation.DESCRIBE, ResourceType.GROUP,
                                 body.coordinator_keys)
            answers = []
            for key in body.coordinator_keys:
                code, message = await _coordinator(gate, key, key_type)
                ok = code == ErrorCode.none
                answers.append(build(
                    mod.Coordinator, key=key, node_id=gw.node_id if ok else -1,
                    host=gw.host if ok else "", port=gw.port if ok else -1, error_code=code,
                    error_message=message))
            return build(mod.FindCoordinatorResponse, throttle_time=_NO_TIME,
                         coordinators=tuple(answers))
        code, message = await _coordinator(gate, body.key, key_type)
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
