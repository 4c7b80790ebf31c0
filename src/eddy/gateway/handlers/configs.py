"""Gateway handlers for configs: DescribeConfigs, AlterConfigs, IncrementalAlterConfigs.
Topic resources go to the node owning each topic (forwarded in parallel, merged in request
order); the BROKER resource is the gateway's own (it is the only broker its clients see).
What a broker would refuse (ALTER_CONFIGS / DESCRIBE_CONFIGS on the topic, the cluster for
a broker, the group for a group) is refused here first, with the cluster's ACLs."""

from __future__ import annotations

import datetime
from collections.abc import Callable, Sequence
from typing import Any

from eddy.broker.handlers import configs
from eddy.broker.handlers.topic_results import GROUP_DENIED, cluster_denied, topic_denied
from eddy.gateway import ops_admin as oa
from eddy.gateway.authz import Gate
from eddy.gateway.handlers.manage import by_owner, owner_answers, topic_node, why_failed
from eddy.gateway.node import Gateway, as_code, failure_code
from eddy.protocol.apis import ApiKey
from eddy.protocol.codec import Request, build, response_module
from eddy.protocol.errors import ErrorCode, KafkaError
from eddy.security.acl import AclOperation, ResourceType

_NO_TIME = datetime.timedelta(0)


# ---- DescribeConfigs ---------------------------------------------------------------------


async def config_refusals(gate: Gate, resources: Sequence[tuple[int, str]],
                          op: AclOperation) -> dict[int, KafkaError]:
    """By index: the resources a broker refuses (eddy.broker.handlers.configs.refusal):
    a topic's ``op`` on the topic, a broker's, a broker logger's and client metrics' on the
    cluster, a group's on the group."""
    topics = await gate.names(op, ResourceType.TOPIC,
                              (n for t, n in resources if t == configs.TOPIC))
    groups = await gate.names(op, ResourceType.GROUP,
                              (n for t, n in resources if t == configs.GROUP))
    cluster_wide = (configs.BROKER, configs.BROKER_LOGGER, configs.CLIENT_METRICS)
    cluster_ok = (not any(t in cluster_wide for t, _ in resources)
                  or await gate.cluster(op))
    out: dict[int, KafkaError] = {}
    for i, (t, n) in enumerate(resources):
        if t == configs.TOPIC and n not in topics:
            out[i] = topic_denied()
        elif t in cluster_wide and not cluster_ok:
            out[i] = cluster_denied()
        elif t == configs.GROUP and n not in groups:
            out[i] = KafkaError(ErrorCode.group_authorization_failed, GROUP_DENIED)
    return out


def _local_described(gw: Gateway, r: oa.ConfigResource, synonyms: bool, docs: bool
                     ) -> oa.DescribedResource:
    """What a broker answers for a resource the gateway does not forward: itself (BROKER),
    an unknown topic, or a resource type it does not serve."""
    try:
        if r.resource_type == configs.TOPIC:
            raise KafkaError(ErrorCode.unknown_topic_or_partition,
                             f"Topic '{r.name}' does not exist.")
        if r.resource_type != configs.BROKER:
            raise KafkaError(ErrorCode.invalid_request,
                             f"unsupported resource type {r.resource_type}")
        entries = configs.broker_config_entries(gw.config, gw.node_id, r.name)
    except KafkaError as exc:
        return oa.DescribedResource(r.resource_type, r.name, int(exc.code), exc.message, ())
    return oa.DescribedResource(r.resource_type, r.name, int(ErrorCode.none), None, tuple(
        oa.DescribedConfig(
            e["name"], e["value"], e["read_only"], e["source"], e["sensitive"],
            tuple(oa.ConfigSynonym(n, v, s) for n, v, s in e["synonyms"]) if synonyms else (),
            configs.CONFIG_TYPES.get(e["kind"], 0), e["doc"] if docs else None)
        for e in entries if r.keys is None or e["name"] in r.keys))


async def describe_configs(gw: Gateway, req: Request) -> Any:
    b = req.body
    mod = response_module(ApiKey.DESCRIBE_CONFIGS, req.api_version)
    synonyms = bool(getattr(b, "include_synonyms", False))
    docs = bool(getattr(b, "include_documentation", False))
    wanted = [oa.ConfigResource(r.resource_type, r.resource_name,
                                None if r.configuration_keys is None
                                else tuple(r.configuration_keys))
              for r in b.resources]

    async def run(node: int, items: list[oa.ConfigResource]) -> list[oa.DescribedResource]:
        got = await owner_answers(gw, node, oa.KAFKA_OP_DESCRIBE_CONFIGS,
                                  oa.DescribeConfigsOp(tuple(items), synonyms, docs),
                                  gw.request_timeout_ms, "resources", len(items))
        if isinstance(got, Exception):
            code = int(failure_code(got, ErrorCode.leader_not_available))
            return [oa.DescribedResource(r.resource_type, r.name, code, why_failed(node, got), ())
                    for r in items]
        return list(got)

    refusals = await config_refusals(Gate(gw, req), [(r.resource_type, r.name)
                                                     for r in wanted],
                                     AclOperation.DESCRIBE_CONFIGS)
    # refused here, or forwarded / answered as before (an index per resource: names repeat)
    indexed = list(enumerate(wanted))

    def refused_or_local(item: tuple[int, oa.ConfigResource]) -> oa.DescribedResource:
        i, r = item
        if i in refusals:
            return oa.DescribedResource(r.resource_type, r.name, int(refusals[i].code),
                                        refusals[i].message, ())
        return _local_described(gw, r, synonyms, docs)

    async def run_indexed(node: int, items: list[tuple[int, oa.ConfigResource]]
                          ) -> list[oa.DescribedResource]:
        return await run(node, [r for _, r in items])

    results = await by_owner(indexed,
                             lambda ir: ir[1].name if ir[1].resource_type == configs.TOPIC
                             and ir[0] not in refusals else None,
                             topic_node(gw), run_indexed, refused_or_local)
    return build(mod.DescribeConfigsResponse, throttle_time=_NO_TIME, results=tuple(
        build(mod.DescribeConfigsResult, error_code=as_code(r.error_code),
              error_message=r.error_message, resource_type=r.resource_type,
              resource_name=r.name, configs=tuple(
                  build(mod.DescribeConfigsResourceResult, name=c.name, value=c.value,
                        read_only=c.read_only, config_source=c.config_source,
                        is_default=c.config_source == configs.DEFAULT_CONFIG,
                        is_sensitive=c.is_sensitive,
                        synonyms=tuple(build(mod.DescribeConfigsSynonym, name=s.name,
                                             value=s.value, source=s.source)
                                       for s in c.synonyms),
                        config_type=c.config_type, documentation=c.documentation)
                  for c in r.configs))
        for r in results))


# ---- AlterConfigs / IncrementalAlterConfigs ----------------------------------------------


def _local_altered(gw: Gateway, resource_type: int, name: str) -> oa.AlteredResource:
    try:
        if resource_type == configs.TOPIC:
            raise KafkaError(ErrorCode.unknown_topic_or_partition,
                             f"Topic '{name}' does not exist.")
        if resource_type == configs.BROKER:
            configs.refuse_broker_alter(gw.node_id, name)  # always raises
        raise KafkaError(ErrorCode.invalid_request, f"unsupported resource type {resource_type}")
    except KafkaError as exc:
        return oa.AlteredResource(resource_type, name, int(exc.code), exc.message)


async def _alter(gw: Gateway, req: Request, resources: list[Any], op: int,
                 make: Callable[[list[Any]], Any]) -> list[oa.AlteredResource]:
    """Topic resources to their owners (make(resources) is the op), the rest answered here;
    those the principal may not ALTER_CONFIGS refused here, as a broker would."""

    async def run(node: int, items: list[Any]) -> list[oa.AlteredResource]:
        got = await owner_answers(gw, node, op, make(items), gw.request_timeout_ms, "resources",
                                  len(items))
        if isinstance(got, Exception):
            code = int(failure_code(got, ErrorCode.leader_not_available))
            return [oa.AlteredResource(r.resource_type, r.name, code, why_failed(node, got))
                    for r in items]
        return list(got)

    refusals = await config_refusals(Gate(gw, req), [(r.resource_type, r.name)
                                                     for r in resources],
                                     AclOperation.ALTER_CONFIGS)
    indexed = list(enumerate(resources))

    def refused_or_local(item: tuple[int, Any]) -> oa.AlteredResource:
        i, r = item
        if i in refusals:
            return oa.AlteredResource(r.resource_type, r.name, int(refusals[i].code),
                                      refusals[i].message)
        return _local_altered(gw, r.resource_type, r.name)

    async def run_indexed(node: int, items: list[tuple[int, Any]]
                          ) -> list[oa.AlteredResource]:
        return await run(node, [r for _, r in items])

    return await by_owner(indexed,
                          lambda ir: ir[1].name if ir[1].resource_type == configs.TOPIC
                          and ir[0] not in refusals else None,
                          topic_node(gw), run_indexed, refused_or_local)


def _altered_response(cls: Any, mod: Any, results: list[oa.AlteredResource]) -> Any:
    return build(cls, throttle_time=_NO_TIME, responses=tuple(
        build(mod.AlterConfigsResourceResponse, error_code=as_code(r.error_code),
              error_message=r.error_message, resource_type=r.resource_type,
              resource_name=r.name) for r in results))


async def alter_configs(gw: Gateway, req: Request) -> Any:
    b = req.body
    mod = response_module(ApiKey.ALTER_CONFIGS, req.api_version)
    wanted = [oa.AlterResource(r.resource_type, r.resource_name,
                               tuple((c.name, c.value) for c in r.configs))
              for r in b.resources]
    results = await _alter(gw, req, wanted, oa.KAFKA_OP_ALTER_CONFIGS,
                           lambda items: oa.AlterConfigsOp(tuple(items), b.validate_only))
    return _altered_response(mod.AlterConfigsResponse, mod, results)


async def incremental_alter_configs(gw: Gateway, req: Request) -> Any:
    b = req.body
    mod = response_module(ApiKey.INCREMENTAL_ALTER_CONFIGS, req.api_version)
    wanted = [oa.IncrementalResource(r.resource_type, r.resource_name, tuple(
        oa.IncrementalConfig(c.name, c.config_operation, c.value) for c in r.configs))
        for r in b.resources]
    results = await _alter(gw, req, wanted, oa.KAFKA_OP_INCREMENTAL_ALTER_CONFIGS,
                           lambda items: oa.IncrementalAlterConfigsOp(tuple(items),
                                                                      b.validate_only))
    return _altered_response(mod.IncrementalAlterConfigsResponse, mod, results)
