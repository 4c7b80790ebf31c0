"""Topic-level configs with Apache Kafka's names, types and defaults."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

LONG_MAX = 9223372036854775807
INT_MAX = 2147483647


class InvalidConfig(ValueError):
    """A config name or value Kafka would refuse (INVALID_CONFIG on the wire)."""


@dataclass(frozen=True, slots=True)
class ConfigDef:
    name: str
    kind: str  # long, int, string, list, double, boolean
    default: str
    doc: str
    check: Callable[[Any], bool] | None = None
    choices: tuple[str, ...] | None = None

    def parse(self, raw: str) -> Any:
        try:
            value: Any
            if self.kind in ("long", "int"):
                value = int(raw)
                if self.kind == "int" and not -(2**31) <= value < 2**31:
                    raise ValueError("out of int range")
            elif self.kind == "double":
                value = float(raw)
            elif self.kind == "boolean":
                if raw.lower() not in ("true", "false"):
                    raise ValueError("expected true or false")
                value = raw.lower() == "true"
            elif self.kind == "list":
                value = tuple(p.strip() for p in raw.split(",") if p.strip())
            else:
                value = raw
        except ValueError as exc:
            raise InvalidConfig(
                f"Invalid value {raw!r} for configuration {self.name}: {exc}"
            ) from None
        if self.choices is not None:
            items = value if isinstance(value, tuple) else (value,)
            for item in items:
                if item not in self.choices:
                    raise InvalidConfig(
                        f"Invalid value {raw!r} for configuration {self.name}: "
                        f"must be one of {', '.join(self.choices)}"
                    )
        if self.check is not None and not self.check(value):
            raise InvalidConfig(f"Invalid value {raw!r} for configuration {self.name}")
        return value


def _at_least(n: int) -> Callable[[Any], bool]:
    return lambda v: v >= n


TOPIC_CONFIGS: dict[str, ConfigDef] = {
    d.name: d
    for d in (
        ConfigDef("cleanup.policy", "list", "delete", "delete and/or compact",
                  choices=("delete", "compact")),
        ConfigDef("compression.type", "string", "producer", "final compression of the topic",
                  choices=("uncompressed", "zstd", "lz4", "snappy", "gzip", "producer")),
        ConfigDef("delete.retention.ms", "long", "86400000", "tombstone retention",
                  _at_least(0)),
        ConfigDef("file.delete.delay.ms", "long", "60000", "delay before deleting a file",
                  _at_least(0)),
        ConfigDef("flush.messages", "long", str(LONG_MAX), "fsync after this many messages",
                  _at_least(1)),
        ConfigDef("flush.ms", "long", str(LONG_MAX), "fsync after this long", _at_least(0)),
        ConfigDef("index.interval.bytes", "int", "4096", "bytes between index entries",
                  _at_least(0)),
        ConfigDef("max.message.bytes", "int", "1048588", "largest record batch", _at_least(0)),
        ConfigDef("message.timestamp.type", "string", "CreateTime", "timestamp type",
                  choices=("CreateTime", "LogAppendTime")),
        ConfigDef("message.timestamp.before.max.ms", "long", str(LONG_MAX),
                  "how far in the past a timestamp may be", _at_least(0)),
        ConfigDef("message.timestamp.after.max.ms", "long", "3600000",
                  "how far in the future a timestamp may be", _at_least(0)),
        ConfigDef("min.cleanable.dirty.ratio", "double", "0.5", "compaction trigger",
                  lambda v: 0.0 <= v <= 1.0),
        ConfigDef("min.compaction.lag.ms", "long", "0", "minimum age before compaction",
                  _at_least(0)),
        ConfigDef("max.compaction.lag.ms", "long", str(LONG_MAX), "maximum age uncompacted",
                  _at_least(1)),
        ConfigDef("min.insync.replicas", "int", "1", "replicas needed for acks=all",
                  _at_least(1)),
        ConfigDef("retention.bytes", "long", "-1", "size retention per partition"),
        ConfigDef("retention.ms", "long", "604800000", "time retention", _at_least(-1)),
        ConfigDef("segment.bytes", "int", "1073741824", "segment size", _at_least(14)),
        ConfigDef("segment.index.bytes", "int", "10485760", "offset index size",
                  _at_least(4)),
        ConfigDef("segment.jitter.ms", "long", "0", "random jitter on roll", _at_least(0)),
        ConfigDef("segment.ms", "long", "604800000", "segment age before roll", _at_least(1)),
        ConfigDef("unclean.leader.election.enable", "boolean", "false", "unclean election"),
        ConfigDef("write.caching", "boolean", "false",
                  "acks=all waits for the in-sync replicas' memory, not their fsync"),
    )
}


def validate_overrides(overrides: Mapping[str, str | None]) -> dict[str, str]:
    """Check topic config overrides; return them with None values dropped."""
    clean: dict[str, str] = {}
    for name, raw in overrides.items():
        definition = TOPIC_CONFIGS.get(name)
        if definition is None:
            raise InvalidConfig(f"Unknown topic config name: {name}")
        if raw is None:
            raise InvalidConfig(f"Null value not supported for topic configs: {name}")
        definition.parse(raw)
        clean[name] = raw
    return clean


class TopicConfig:
    """Resolved, typed view of a topic's configs: overrides over broker defaults."""

    def __init__(
        self, overrides: Mapping[str, str] | None = None, defaults: Mapping[str, str] | None = None
    ) -> None:
        self.overrides = dict(overrides or {})
        self.defaults = dict(defaults or {})
        values: dict[str, Any] = {}
        for name, definition in TOPIC_CONFIGS.items():
            raw = self.overrides.get(name, self.defaults.get(name, definition.default))
            values[name] = definition.parse(raw)
        self._values = values
        self.segment_bytes: int = values["segment.bytes"]
        self.segment_ms: int = values["segment.ms"]
        self.retention_ms: int = values["retention.ms"]
        self.retention_bytes: int = values["retention.bytes"]
        self.max_message_bytes: int = values["max.message.bytes"]
        self.index_interval_bytes: int = values["index.interval.bytes"]
        self.flush_messages: int = values["flush.messages"]
        self.flush_ms: int = values["flush.ms"]
        self.log_append_time: bool = values["message.timestamp.type"] == "LogAppendTime"
        self.timestamp_before_max_ms: int = values["message.timestamp.before.max.ms"]
        self.timestamp_after_max_ms: int = values["message.timestamp.after.max.ms"]
        self.cleanup_policy: tuple[str, ...] = values["cleanup.policy"]
        self.compact: bool = "compact" in self.cleanup_policy
        self.delete: bool = "delete" in self.cleanup_policy
        self.write_caching: bool = values["write.caching"]
        self.min_insync_replicas: int = values["min.insync.replicas"]

    def value(self, name: str) -> Any:
        return self._values[name]

    def raw(self, name: str) -> str:
        return self.overrides.get(
            name, self.defaults.get(name, TOPIC_CONFIGS[name].default)
        )
