"""Config changes: topic overrides (AlterTopicConfigs) and dynamic broker configs
(AlterBrokerConfigs, per node or the cluster-wide ``<default>``), checked with the topic
config definitions of ``eddy.log.config``."""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING

from eddy.log.config import TOPIC_CONFIGS, InvalidConfig, validate_overrides
from eddy.metadata.records import ConfigEntry
from eddy.metadata.result import Rejected
from eddy.protocol.errors import ErrorCode

if TYPE_CHECKING:
    from eddy.metadata.commands import AlterBrokerConfigs, AlterTopicConfigs
    from eddy.metadata.state import MetadataState

#: the dynamic broker configs, by Kafka's name: each is the broker-wide default of the topic
#: config it maps to (Kafka's synonyms), and is checked as that topic config
DYNAMIC_BROKER_CONFIGS: dict[str, str] = {
    "log.flush.interval.messages": "flush.messages",
    "log.flush.interval.ms": "flush.ms",
    "log.segment.bytes": "segment.bytes",
    "log.roll.ms": "segment.ms",
    "log.roll.jitter.ms": "segment.jitter.ms",
    "log.retention.ms": "retention.ms",
    "log.retention.bytes": "retention.bytes",
    "message.max.bytes": "max.message.bytes",
    "log.index.interval.bytes": "index.interval.bytes",
    "log.index.size.max.bytes": "segment.index.bytes",
    "log.message.timestamp.type": "message.timestamp.type",
    "log.message.timestamp.before.max.ms": "message.timestamp.before.max.ms",
    "log.message.timestamp.after.max.ms": "message.timestamp.after.max.ms",
    "log.cleanup.policy": "cleanup.policy",
    "log.cleaner.delete.retention.ms": "delete.retention.ms",
    "log.cleaner.min.cleanable.ratio": "min.cleanable.dirty.ratio",
    "log.cleaner.min.compaction.lag.ms": "min.compaction.lag.ms",
    "log.cleaner.max.compaction.lag.ms": "max.compaction.lag.ms",
    "log.segment.delete.delay.ms": "file.delete.delay.ms",
    "min.insync.replicas": "min.insync.replicas",
    "unclean.leader.election.enable": "unclean.leader.election.enable",
    "compression.type": "compression.type",
    "log.write.caching": "write.caching",
}
#: the most config entries one resource may hold (more than every known name)
MAX_ENTRIES = 256


def entries_to_dict(entries: tuple[ConfigEntry, ...]) -> dict[str, str]:
    """Config entries as a dict; a name given twice is refused."""
    out: dict[str, str] = {}
    for entry in entries:
        if entry.name in out:
            raise Rejected(ErrorCode.invalid_request, f"config {entry.name} is given twice")
        out[entry.name] = entry.value
    return out


def dict_to_entries(configs: Mapping[str, str]) -> tuple[ConfigEntry, ...]:
    return tuple(ConfigEntry(name, configs[name]) for name in sorted(configs))


def check_topic_overrides(entries: tuple[ConfigEntry, ...]) -> dict[str, str]:
    configs = entries_to_dict(entries)
    try:
        return validate_overrides(configs)
    except InvalidConfig as exc:
        raise Rejected(ErrorCode.invalid_config, str(exc)) from None


def changed(
    current: Mapping[str, str], set_: tuple[ConfigEntry, ...], delete: tuple[str, ...],
    known: Mapping[str, object], what: str,
) -> dict[str, str]:
    """The configs after setting ``set_`` and deleting ``delete`` (names checked)."""
    updates = entries_to_dict(set_)
    if len(set(delete)) != len(delete):
        raise Rejected(ErrorCode.invalid_request, "a config is deleted twice")
    for name in delete:
        if name in updates:
            raise Rejected(ErrorCode.invalid_request, f"config {name} is both set and deleted")
        if name not in known:
            raise Rejected(ErrorCode.invalid_config, f"Unknown {what} config name: {name}")
    new = {k: v for k, v in current.items() if k not in delete}
    new.update(updates)
    return new


def alter_topic_configs(state: MetadataState, cmd: AlterTopicConfigs) -> None:
    topic = state.require_topic(cmd.name)
    new = changed(topic.configs, cmd.set, cmd.delete, TOPIC_CONFIGS, "topic")
    try:
        validate_overrides(new)
    except InvalidConfig as exc:
        raise Rejected(ErrorCode.invalid_config, str(exc)) from None
    topic.configs = new


def check_broker_configs(configs: Mapping[str, str]) -> None:
    for name, raw in configs.items():
        topic_name = DYNAMIC_BROKER_CONFIGS.get(name)
        if topic_name is None:
            raise Rejected(
                ErrorCode.invalid_config, f"Unknown or read-only broker config name: {name}"
            )
        try:
            TOPIC_CONFIGS[topic_name].parse(raw)
        except InvalidConfig as exc:
            raise Rejected(ErrorCode.invalid_config, f"{name}: {exc}") from None


def alter_broker_configs(state: MetadataState, cmd: AlterBrokerConfigs) -> None:
    if cmd.node_id is not None and cmd.node_id < 0:
        raise Rejected(ErrorCode.invalid_request, f"broker id {cmd.node_id} is negative")
    current = state.broker_configs.get(cmd.node_id, {})
    new = changed(current, cmd.set, cmd.delete, DYNAMIC_BROKER_CONFIGS, "broker")
    check_broker_configs(new)
    if len(new) > MAX_ENTRIES:
        raise Rejected(ErrorCode.invalid_request, f"more than {MAX_ENTRIES} configs")
    if new:
        state.broker_configs[cmd.node_id] = new
    else:
        state.broker_configs.pop(cmd.node_id, None)


def topic_defaults(
    state: MetadataState, node_id: int | None, static: Mapping[str, str] | None
) -> dict[str, str]:
    """Topic config defaults (by topic config name): ``static`` (the broker's own config
    file, topic names), under the cluster ``<default>``, under ``node_id``'s own."""
    return layered_defaults(static, state.broker_configs.get(None, {}),
                            {} if node_id is None else state.broker_configs.get(node_id, {}))


def layered_defaults(static: Mapping[str, str] | None, cluster_default: Mapping[str, str],
                     own: Mapping[str, str]) -> dict[str, str]:
    """Topic config defaults: ``static`` (topic config names) overridden by the dynamic
    ``cluster_default`` and then by this broker's ``own`` dynamic configs (broker names)."""
    out = dict(static or {})
    for layer in (cluster_default, own):
        for name, raw in layer.items():
            out[DYNAMIC_BROKER_CONFIGS[name]] = raw
    return out
