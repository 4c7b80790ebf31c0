"""The BROKER config resource: DescribeConfigs of a broker (static settings, with the
dynamic ones layered over them) and of the cluster-wide ``<default>`` (the empty name), and
AlterConfigs / IncrementalAlterConfigs of their dynamic configs (``eddy.broker.dynamic_configs``).
Where a topic's value comes from (its synonyms) is worked out here too."""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from pydantic import SecretStr

from eddy.broker.dynamic_configs import checked, resource_node
from eddy.broker.settings import TOPIC_DEFAULT_FIELDS, BrokerSettings, kafka_name
from eddy.log.config import TOPIC_CONFIGS, ConfigDef
from eddy.metadata.configs import DYNAMIC_BROKER_CONFIGS
from eddy.protocol.errors import ErrorCode, KafkaError

if TYPE_CHECKING:
    from eddy.broker.broker import Broker

# ConfigSource
TOPIC_CONFIG = 1
DYNAMIC_BROKER_CONFIG = 2
DYNAMIC_DEFAULT_BROKER_CONFIG = 3
STATIC_BROKER_CONFIG = 4
DEFAULT_CONFIG = 5

#: topic config name -> the dynamic broker config that is its broker-wide default
BROKER_NAME_OF = {topic: name for name, topic in DYNAMIC_BROKER_CONFIGS.items()}

Synonym = tuple[str, str | None, int]


def definition(name: str) -> ConfigDef:
    """The topic config a dynamic broker config is checked as."""
    return TOPIC_CONFIGS[DYNAMIC_BROKER_CONFIGS[name]]


def _dynamic_synonyms(broker: Broker, name: str) -> list[Synonym]:
    """The dynamic values of broker config ``name``: this broker's, then the cluster's."""
    out: list[Synonym] = []
    dynamic = broker.dynamic_configs
    own = dynamic.layer(broker.node_id).get(name)
    if own is not None:
        out.append((name, own, DYNAMIC_BROKER_CONFIG))
    default = dynamic.layer(None).get(name)
    if default is not None:
        out.append((name, default, DYNAMIC_DEFAULT_BROKER_CONFIG))
    return out


def topic_synonyms(broker: Broker, key: str, overrides: Mapping[str, str]) -> list[Synonym]:
    """Where topic config ``key`` gets its value, the first one winning: the topic's
    override, this broker's dynamic config, the cluster's, the static config, the default."""
    out: list[Synonym] = []
    if key in overrides:
        out.append((key, overrides[key], TOPIC_CONFIG))
    broker_name = BROKER_NAME_OF.get(key)
    if broker_name is not None:
        out += _dynamic_synonyms(broker, broker_name)
    cfg: BrokerSettings = broker.config
    field = TOPIC_DEFAULT_FIELDS.get(key)
    if field is not None and field in cfg.model_fields_set:
        out.append((kafka_name(field), str(getattr(cfg, field)), STATIC_BROKER_CONFIG))
    out.append((kafka_name(field) if field else broker_name or key,
                TOPIC_CONFIGS[key].default, DEFAULT_CONFIG))
    return out


def static_entries(cfg: BrokerSettings, node_id: int, name: str) -> list[dict[str, Any]]:
    """The BROKER resource `name` ("" or `node_id`) described from `cfg` alone: a broker's
    own static settings, or a gateway's (which answers for itself)."""
    if name not in ("", str(node_id)):
        raise KafkaError(ErrorCode.invalid_request, f"broker {name} is not this node")
    entries = []
    for field, info in sorted(BrokerSettings.model_fields.items()):
        value = getattr(cfg, field)
        source = STATIC_BROKER_CONFIG if field in cfg.model_fields_set else DEFAULT_CONFIG
        kind = {bool: "boolean", int: "long", str: "string"}.get(type(value), "string")
        raw = str(value).lower() if isinstance(value, bool) else (
            None if value is None or isinstance(value, SecretStr) else str(value))
        entries.append(dict(name=kafka_name(field), value=raw, read_only=True, source=source,
                            sensitive=isinstance(value, SecretStr),
                            synonyms=[(kafka_name(field), raw, source)],
                            kind=kind, doc=info.description or ""))
    return entries


def broker_entries(broker: Broker, name: str) -> list[dict[str, Any]]:
    """DescribeConfigs of a BROKER resource: "" is the cluster-wide ``<default>`` (its
    dynamic configs only, as Kafka answers), this node's id its every setting, the dynamic
    ones writable and resolved through their synonyms."""
    node = resource_node(name, broker.node_id)
    if node is None:
        return [dict(name=k, value=v, read_only=False, source=DYNAMIC_DEFAULT_BROKER_CONFIG,
                     sensitive=False, synonyms=[(k, v, DYNAMIC_DEFAULT_BROKER_CONFIG)],
                     kind=definition(k).kind, doc=definition(k).doc)
                for k, v in sorted(broker.dynamic_configs.layer(None).items())]
    entries = {e["name"]: e for e in static_entries(broker.config, broker.node_id, name)}
    for dyn in DYNAMIC_BROKER_CONFIGS:
        d = definition(dyn)
        entry = entries.get(dyn)
        if entry is None:  # a dynamic config with no static setting: Kafka's default
            entry = entries[dyn] = dict(name=dyn, value=d.default, source=DEFAULT_CONFIG,
                                        sensitive=False, kind=d.kind, doc=d.doc,
                                        synonyms=[(dyn, d.default, DEFAULT_CONFIG)])
        synonyms = _dynamic_synonyms(broker, dyn) + list(entry["synonyms"])
        entry.update(read_only=False, value=synonyms[0][1], source=synonyms[0][2],
                     synonyms=synonyms, kind=d.kind)
    return [entries[k] for k in sorted(entries)]


def not_dynamic(names: list[str]) -> KafkaError | None:
    """Kafka's answer to a change of settings that cannot change at run time."""
    fixed = sorted(n for n in names if n not in DYNAMIC_BROKER_CONFIGS)
    if not fixed:
        return None
    return KafkaError(ErrorCode.invalid_request,
                      f"Cannot update these configs dynamically: {', '.join(fixed)} (set them "
                      f"in the config file, EDDY_* environment or `eddy serve --set` and "
                      f"restart)")


async def alter(broker: Broker, name: str, new: dict[str, str], validate_only: bool) -> None:
    """Make ``new`` the dynamic configs of the BROKER resource ``name``."""
    node = resource_node(name, broker.node_id)
    refused = not_dynamic(list(new))
    if refused is not None:
        raise refused
    if validate_only:
        checked(new)
        return
    await broker.dynamic_configs.replace(node, new)


def current(broker: Broker, name: str) -> dict[str, str]:
    return broker.dynamic_configs.layer(resource_node(name, broker.node_id))
