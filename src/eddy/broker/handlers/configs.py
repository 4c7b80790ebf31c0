"""DescribeConfigs, AlterConfigs and IncrementalAlterConfigs for topics and the broker."""

from __future__ import annotations

import datetime
from collections.abc import Callable
from typing import Any

from eddy.broker.broker import Broker
from eddy.broker.handlers import broker_configs, cluster_admin
from eddy.broker.handlers.broker_configs import DEFAULT_CONFIG as DEFAULT_CONFIG
from eddy.broker.handlers.broker_configs import STATIC_BROKER_CONFIG as STATIC_BROKER_CONFIG
from eddy.broker.handlers.broker_configs import TOPIC_CONFIG as TOPIC_CONFIG
from eddy.broker.handlers.broker_configs import static_entries, topic_synonyms
from eddy.broker.handlers.cluster_metadata import APPLY_WAIT_S
from eddy.broker.handlers.topic_results import GROUP_DENIED, cluster_denied, topic_denied
from eddy.broker.settings import BrokerSettings
from eddy.cluster.controller.rpc import ProposeRequest
from eddy.log.config import TOPIC_CONFIGS, ConfigDef, InvalidConfig, TopicConfig, validate_overrides
from eddy.metadata import encode_command
from eddy.metadata.commands import AlterTopicConfigs
from eddy.metadata.configs import DYNAMIC_BROKER_CONFIGS
from eddy.metadata.records import ConfigEntry
from eddy.protocol.apis import ApiKey
from eddy.protocol.codec import Request, build, response_module
from eddy.protocol.errors import ErrorCode, KafkaError
from eddy.security.acl import AclOperation, ResourceType
from eddy.security.checks import allowed, cluster_allowed

_NO_TIME = datetime.timedelta(0)
TOPIC = 2
BROKER = 4
BROKER_LOGGER = 8
CLIENT_METRICS = 16
GROUP = 32
# ConfigType
CONFIG_TYPES = {"boolean": 1, "string": 2, "int": 3, "long": 5, "double": 6, "list": 7}
# IncrementalAlterConfigs operations
SET, DELETE, APPEND, SUBTRACT = 0, 1, 2, 3


def topic_overrides(broker: Broker, name: str) -> dict[str, str]:
    """A topic's config overrides: the cluster's (any node describes any topic) or, on a
    node of its own, the local topic's."""
    if broker.cluster is not None:
        overrides = broker.cluster.state.topic_overrides(name)
    else:
        topic = broker.logs.get(name)
        overrides = None if topic is None else dict(topic.configs)
    if overrides is None:
        raise KafkaError(ErrorCode.unknown_topic_or_partition,
                         f"Topic '{name}' does not exist.")
    return overrides


def _topic_entries(broker: Broker, name: str) -> list[dict[str, Any]]:
    overrides = topic_overrides(broker, name)
    resolved = TopicConfig(overrides, broker.logs.defaults)
    entries = []
    for key, d in sorted(TOPIC_CONFIGS.items()):
        synonyms = topic_synonyms(broker, key, overrides)
        entries.append(dict(name=key, value=resolved.raw(key), read_only=False,
                            source=synonyms[0][2], sensitive=False, synonyms=synonyms,
                            kind=d.kind, doc=d.doc))
    return entries


def refusal(node: Any, req: Request, resource_type: int, name: str, op: AclOperation
            ) -> KafkaError | None:
    """Kafka's authorization of a config resource (``op`` DESCRIBE_CONFIGS or
    ALTER_CONFIGS): a topic's on the topic, a broker's, a broker logger's and client
    metrics' on the cluster, a group's on the group. Other types are left to the caller."""
    if resource_type == TOPIC:
        ok = allowed(node, req, op, ResourceType.TOPIC, name)
        return None if ok else topic_denied()
    if resource_type in (BROKER, BROKER_LOGGER, CLIENT_METRICS):
        return None if cluster_allowed(node, req, op) else cluster_denied()
    if resource_type == GROUP and not allowed(node, req, op, ResourceType.GROUP, name):
        return KafkaError(ErrorCode.group_authorization_failed, GROUP_DENIED)
    return None


def broker_config_entries(cfg: BrokerSettings, node_id: int, name: str) -> list[dict[str, Any]]:
    """A gateway's BROKER resource: its own static settings."""
    return static_entries(cfg, node_id, name)


async def describe_configs(broker: Broker, req: Request) -> Any:
    b = req.body
    mod = response_module(ApiKey.DESCRIBE_CONFIGS, req.api_version)
    include_synonyms = getattr(b, "include_synonyms", False)
    include_docs = getattr(b, "include_documentation", False)
    results = []
    for r in b.resources:
        code, message, configs = ErrorCode.none, None, []
        try:
            refused = refusal(broker, req, r.resource_type, r.resource_name,
                              AclOperation.DESCRIBE_CONFIGS)
            if refused is not None:
                raise refused
            if r.resource_type == TOPIC:
                entries = _topic_entries(broker, r.resource_name)
            elif r.resource_type == BROKER:
                entries = broker_configs.broker_entries(broker, r.resource_name)
            else:
                raise KafkaError(ErrorCode.invalid_request,
                                 f"unsupported resource type {r.resource_type}")
            keys = r.configuration_keys
            for e in entries:
                if keys is not None and e["name"] not in keys:
                    continue
                configs.append(build(
                    mod.DescribeConfigsResourceResult,
                    name=e["name"], value=e["value"], read_only=e["read_only"],
                    config_source=e["source"], is_default=e["source"] == DEFAULT_CONFIG,
                    is_sensitive=e["sensitive"],
                    synonyms=tuple(
                        build(mod.DescribeConfigsSynonym, name=n, value=v, source=s)
                        for n, v, s in e["synonyms"]
                    ) if include_synonyms else (),
                    config_type=CONFIG_TYPES.get(e["kind"], 0),
                    documentation=e["doc"] if include_docs else None,
                ))
        except KafkaError as exc:
            code, message, configs = exc.code, exc.message, []
        results.append(build(mod.DescribeConfigsResult, error_code=code, error_message=message,
                             resource_type=r.resource_type, resource_name=r.resource_name,
                             configs=tuple(configs)))
    return build(mod.DescribeConfigsResponse, throttle_time=_NO_TIME, results=tuple(results))


async def _alter_topic(broker: Broker, name: str, new: dict[str, str], validate_only: bool
                       ) -> None:
    try:
        clean = validate_overrides(new)
        TopicConfig(clean, broker.logs.defaults)
    except InvalidConfig as exc:
        raise KafkaError(ErrorCode.invalid_config, str(exc)) from None
    if validate_only:
        return
    if broker.cluster is None:
        broker.logs.alter_topic_configs(name, clean)
        return
    # in a cluster: one command for the controller (the whole new set of overrides), then
    # wait for this node's replica so a DescribeConfigs here sees it
    current = topic_overrides(broker, name)
    command = AlterTopicConfigs(
        name, tuple(ConfigEntry(k, v) for k, v in sorted(clean.items())),
        tuple(sorted(set(current) - set(clean))))
    await cluster_admin.ask(broker.cluster, ProposeRequest(encode_command(command)))
    await broker.cluster.wait_applied(lambda s: s.topic_overrides(name) == clean,
                                      APPLY_WAIT_S)


def refuse_broker_alter(node_id: int, name: str) -> None:
    """Altering a gateway's BROKER resource `name`: always refused (its settings are static;
    a broker's dynamic configs are altered through a broker)."""
    if name not in ("", str(node_id)):
        raise KafkaError(ErrorCode.invalid_request, f"broker {name} is not this node")
    raise KafkaError(ErrorCode.invalid_request,
                     "a gateway's configs are static: set them in the config file, "
                     "EDDY_* environment or `eddy serve --set` and restart")


async def _alter_each(broker: Broker, req: Request, resources: Any, mod: Any,
                      new_overrides: Callable[[Any], dict[str, str]], validate_only: bool
                      ) -> tuple[Any, ...]:
    """Apply new configs to each resource the principal may ALTER_CONFIGS: a topic's
    overrides, a broker's (or the cluster's ``<default>``) dynamic configs; one result
    each."""
    out = []
    for r in resources:
        code, message = ErrorCode.none, None
        try:
            refused = refusal(broker, req, r.resource_type, r.resource_name,
                              AclOperation.ALTER_CONFIGS)
            if refused is not None:
                raise refused
            if r.resource_type == TOPIC:
                topic_overrides(broker, r.resource_name)  # UNKNOWN_TOPIC_OR_PARTITION
                await _alter_topic(broker, r.resource_name, new_overrides(r), validate_only)
            elif r.resource_type == BROKER:
                await broker_configs.alter(broker, r.resource_name, new_overrides(r),
                                           validate_only)
            else:
                raise KafkaError(ErrorCode.invalid_request,
                                 f"unsupported resource type {r.resource_type}")
        except KafkaError as exc:
            code, message = exc.code, exc.message
        out.append(build(mod.AlterConfigsResourceResponse, error_code=code,
                         error_message=message, resource_type=r.resource_type,
                         resource_name=r.resource_name))
    return tuple(out)


def _replacement(resource: Any) -> dict[str, str]:
    """AlterConfigs replaces every override of the topic with the ones given."""
    new: dict[str, str] = {}
    for c in resource.configs:
        if c.value is None:
            raise KafkaError(ErrorCode.invalid_request, f"null value for config {c.name}")
        new[c.name] = c.value
    return new


async def alter_configs(broker: Broker, req: Request) -> Any:
    b = req.body
    mod = response_module(ApiKey.ALTER_CONFIGS, req.api_version)
    return build(mod.AlterConfigsResponse, throttle_time=_NO_TIME,
                 responses=await _alter_each(broker, req, b.resources, mod, _replacement,
                                             b.validate_only))


def _topic_definition(name: str) -> ConfigDef:
    d = TOPIC_CONFIGS.get(name)
    if d is None:
        raise KafkaError(ErrorCode.invalid_config, f"Unknown topic config name: {name}")
    return d


def _broker_definition(name: str) -> ConfigDef:
    refused = broker_configs.not_dynamic([name])
    if refused is not None:
        raise refused
    return TOPIC_CONFIGS[DYNAMIC_BROKER_CONFIGS[name]]


def _incremental(current: dict[str, str], ops: Any,
                 definition: Callable[[str], ConfigDef] = _topic_definition) -> dict[str, str]:
    new = dict(current)
    seen: set[str] = set()
    for c in ops:
        if c.name in seen:
            raise KafkaError(ErrorCode.invalid_request, f"duplicate config key {c.name}")
        seen.add(c.name)
        d = definition(c.name)
        op = c.config_operation
        if op == SET:
            if c.value is None:
                raise KafkaError(ErrorCode.invalid_request, f"null value for config {c.name}")
            new[c.name] = c.value
        elif op == DELETE:
            new.pop(c.name, None)
        elif op in (APPEND, SUBTRACT):
            if d.kind != "list":
                raise KafkaError(ErrorCode.invalid_config,
                                 f"Config value append is not allowed for config key: {c.name}"
                                 if op == APPEND else
                                 f"Config value subtract is not allowed for config key: "
                                 f"{c.name}")
            items = [x.strip() for x in new.get(c.name, d.default).split(",") if x.strip()]
            given = [x.strip() for x in (c.value or "").split(",") if x.strip()]
            if op == APPEND:
                items += [x for x in given if x not in items]
            else:
                items = [x for x in items if x not in given]
            new[c.name] = ",".join(items)
        else:
            raise KafkaError(ErrorCode.invalid_request, f"unknown operation {op}")
    return new


async def incremental_alter_configs(broker: Broker, req: Request) -> Any:
    b = req.body
    mod = response_module(ApiKey.INCREMENTAL_ALTER_CONFIGS, req.api_version)

    def overrides(resource: Any) -> dict[str, str]:
        if resource.resource_type == BROKER:
            return _incremental(broker_configs.current(broker, resource.resource_name),
                                resource.configs, _broker_definition)
        return _incremental(topic_overrides(broker, resource.resource_name), resource.configs)

    return build(mod.IncrementalAlterConfigsResponse, throttle_time=_NO_TIME,
                 responses=await _alter_each(broker, req, b.resources, mod, overrides,
                                             b.validate_only))
