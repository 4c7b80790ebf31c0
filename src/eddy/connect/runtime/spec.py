"""The pipeline file: a pydantic model of the YAML, with errors naming file, line and field.

A pipeline is one source, a list of transforms and one or more sinks (seed 001's
"Source -> Transform -> Sink"); `eddy connect run FILE` turns it into a Spark
Structured Streaming query (eddy.connect.runtime.runner).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from pathlib import Path
from typing import Annotated, Any, Literal

import yaml
from pydantic import (
    BaseModel,
    ConfigDict,
    Discriminator,
    Field,
    Tag,
    ValidationError,
    field_validator,
    model_validator,
)
from pydantic_core import PydanticCustomError

NAME_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,199}$")
TOPIC_RE = re.compile(r"^[A-Za-z0-9._-]{1,249}$")
_DURATION_UNITS = {
    "ms": 1, "millisecond": 1, "milliseconds": 1,
    "s": 1000, "sec": 1000, "secs": 1000, "second": 1000, "seconds": 1000,
    "m": 60_000, "min": 60_000, "mins": 60_000, "minute": 60_000, "minutes": 60_000,
}
DURATION_RE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([a-z]+)\s*$")
DEFAULT_BOOTSTRAP = "127.0.0.1:9092"


class SpecError(ValueError):
    """A pipeline file problem, worded for a person: `file:line: field: what is wrong`."""

    def __init__(self, problems: list[str]) -> None:
        super().__init__("\n".join(problems))
        self.problems = problems


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid", populate_by_name=True, frozen=True)


def _check_topic(value: str) -> str:
    if not TOPIC_RE.match(value) or value in (".", ".."):
        raise ValueError(
            f"{value!r} is not a valid topic name (letters, digits, '.', '_', '-'; 1-249)"
        )
    return value


def _check_bootstrap(value: str) -> str:
    for part in value.split(","):
        host, sep, port = part.strip().rpartition(":")
        if not sep or not host or not port.isdigit() or not 0 < int(port) < 65536:
            raise ValueError(f"expected HOST:PORT[,HOST:PORT...], got {value!r}")
    return value


def parse_duration_ms(value: str | int | float) -> int:
    """`500ms`, `10s`, `10 seconds`, `1 minute` or a number of milliseconds."""
    if isinstance(value, bool):
        raise ValueError("expected a duration such as '10 seconds' or '500ms'")
    if isinstance(value, int | float):
        if value < 0:
            raise ValueError("a duration cannot be negative")
        return int(value)
    m = DURATION_RE.match(value.lower())
    if not m or m.group(2) not in _DURATION_UNITS:
        raise ValueError(f"expected a duration such as '10 seconds' or '500ms', got {value!r}")
    return int(float(m.group(1)) * _DURATION_UNITS[m.group(2)])


# ---- sources ------------------------------------------------------------------------------


class EddySource(_Model):
    """Read one or more topics through the Kafka protocol (any Kafka-compatible broker)."""

    type: Literal["eddy"]
    bootstrap: str = Field(DEFAULT_BOOTSTRAP, description="broker HOST:PORT list")
    topic: str | None = Field(None, description="one topic to read")
    topics: list[str] | None = Field(None, description="several topics to read")
    pattern: str | None = Field(None, description="a regex of topic names to read")
    starting_offsets: Literal["earliest", "latest"] | dict[str, dict[str, int]] = Field(
        "earliest",
        description="earliest, latest, or {topic: {partition: offset}} (-2 earliest, -1 latest)",
    )
    starting_timestamp: int | None = Field(
        None, description="start at the first record at or after this time (ms since epoch)"
    )
    max_records_per_batch: int | None = Field(
        None, ge=1, description="at most this many records per micro-batch (all partitions)"
    )
    include_headers: bool = Field(True, description="read record headers")
    options: dict[str, str] = Field(
        default_factory=dict, description="extra Kafka client properties (kafka.* or librdkafka)"
    )
    value_format: Literal["avro", "json", "protobuf", "bytes"] = Field(
        "bytes", alias="value.format",
        description="avro, json or protobuf: values in Confluent's wire format, decoded into "
                    "a struct "
                    "column `value` through the schema registry (bad ones: dead letters)")
    key_format: Literal["avro", "json", "protobuf", "bytes"] = Field(
        "bytes", alias="key.format", description="as value.format, for the key")
    schema_registry_url: str | None = Field(
        None, alias="schema.registry.url", description="the schema registry (http://HOST:PORT)")
    value_subject: str | None = Field(
        None, alias="value.subject", description="reader schema subject (default <topic>-value)")
    value_schema_version: int | None = Field(
        None, ge=1, alias="value.schema.version",
        description="pin the reader schema version (default: latest at start)")
    key_subject: str | None = Field(
        None, alias="key.subject", description="reader schema subject (default <topic>-key)")
    key_schema_version: int | None = Field(
        None, ge=1, alias="key.schema.version", description="pin the key's reader schema")

    _bootstrap = field_validator("bootstrap")(_check_bootstrap)

    @field_validator("schema_registry_url")
    @classmethod
    def _registry_url(cls, value: str | None) -> str | None:
        if value is not None and not re.match(r"^https?://[^/\s]+", value):
            raise ValueError(f"expected an http:// or https:// URL, got {value!r}")
        return value

    @model_validator(mode="after")
    def _registry_for_formats(self) -> EddySource:
        for name, fmt in (("value.format", self.value_format), ("key.format", self.key_format)):
            if fmt != "bytes" and self.schema_registry_url is None:
                raise ValueError(f"{name}: {fmt} needs schema.registry.url")
        for name, subject in (("value", self.value_subject), ("key", self.key_subject)):
            if subject is None and getattr(self, f"{name}_format") != "bytes" and (
                    self.topic is None and len(self.topics or ()) != 1):
                raise ValueError(f"{name}.format: set {name}.subject (the default subject "
                                 f"<topic>-{name} needs a single `topic`)")
        return self

    @field_validator("topic")
    @classmethod
    def _topic(cls, value: str | None) -> str | None:
        return None if value is None else _check_topic(value)

    @field_validator("topics")
    @classmethod
    def _topics(cls, value: list[str] | None) -> list[str] | None:
        if value is not None:
            if not value:
                raise ValueError("must list at least one topic")
            for topic in value:
                _check_topic(topic)
        return value

    @field_validator("pattern")
    @classmethod
    def _pattern(cls, value: str | None) -> str | None:
        if value is not None:
            try:
                re.compile(value)
            except re.error as exc:
                raise ValueError(f"not a valid regular expression: {exc}") from None
        return value

    @model_validator(mode="after")
    def _one_subscription(self) -> EddySource:
        chosen = [n for n in ("topic", "topics", "pattern") if getattr(self, n) is not None]
        if len(chosen) != 1:
            raise ValueError("set exactly one of topic, topics or pattern")
        return self


class DatagenSource(_Model):
    """Generated rows: a Spark DDL schema, a rate, a seed; the same seed gives the same rows."""

    type: Literal["datagen"]
    schema_: str = Field(
        "id LONG, name STRING, amount DOUBLE, ts TIMESTAMP", alias="schema",
        description="Spark DDL schema of the generated rows",
    )
    rate: int = Field(1000, ge=1, description="rows per second")
    count: int | None = Field(None, ge=0, description="stop after this many rows (default: none)")
    seed: int = Field(0, description="random seed: the same seed gives the same rows")
    partitions: int = Field(2, ge=1, le=1024, description="Spark input partitions per batch")
    max_rows_per_batch: int | None = Field(None, ge=1, description="at most this many rows "
                                           "per micro-batch")


class FilesSource(_Model):
    """A directory of json/csv/parquet files; new files are picked up as they appear."""

    type: Literal["files"]
    format: Literal["json", "csv", "parquet"]
    path: str = Field(description="the directory to watch")
    schema_: str | None = Field(
        None, alias="schema", description="Spark DDL schema (default: inferred from the files)"
    )
    max_files_per_batch: int | None = Field(None, ge=1)
    options: dict[str, str] = Field(default_factory=dict, description="Spark reader options")


Source = Annotated[EddySource | DatagenSource | FilesSource, Field(discriminator="type")]

# ---- transforms ---------------------------------------------------------------------------


class ParseJsonArgs(_Model):
    field: str = Field("value", description="column holding the JSON text")
    schema_: str | None = Field(
        None, alias="schema", description="Spark DDL schema (default: inferred from a sample)"
    )
    sample: int = Field(1000, ge=1, description="records sampled to infer the schema")
    keep: list[str] = Field(
        default_factory=list, description="source columns kept beside the parsed fields"
    )


class MaskArgs(_Model):
    field: str
    method: Literal["redact", "hash", "keep_last"] = "redact"
    salt: str = Field("", description="hash: prepended to the value before SHA-256")
    keep: int = Field(4, ge=0, description="keep_last: characters left visible")
    replacement: str = Field("***", description="redact: the text put in place")


class TimestampArgs(_Model):
    field: str
    format: str | None = Field(
        None, description="Spark datetime pattern of the input (default: ISO 8601)"
    )
    zone: str | None = Field(None, description="time zone the input is written in, e.g. UTC")
    to: str | None = Field(None, description="target column (default: replace `field`)")
    unit: Literal["ms", "s"] | None = Field(
        None, description="the input is a number of ms or s since the epoch"
    )


class RouteArgs(_Model):
    expr: str = Field(description="SQL expression giving the target topic")


class ParseJson(_Model):
    parse_json: ParseJsonArgs


class Mask(_Model):
    mask: MaskArgs


class Rename(_Model):
    rename: dict[str, str]


class Drop(_Model):
    drop: list[str]


class Select(_Model):
    select: list[str]


class Cast(_Model):
    cast: dict[str, str]


class Timestamp(_Model):
    timestamp: TimestampArgs


class Filter(_Model):
    filter: str


class Route(_Model):
    route: RouteArgs | str


class Sql(_Model):
    sql: str


TRANSFORMS: dict[str, type[_Model]] = {
    "parse_json": ParseJson,
    "mask": Mask,
    "rename": Rename,
    "drop": Drop,
    "select": Select,
    "cast": Cast,
    "timestamp": Timestamp,
    "filter": Filter,
    "route": Route,
    "sql": Sql,
}


def _transform_kind(value: Any) -> str | None:
    if isinstance(value, Mapping) and len(value) == 1:
        key = next(iter(value))
        return key if key in TRANSFORMS else None
    if isinstance(value, BaseModel):
        return next(iter(type(value).model_fields))
    return None


Transform = Annotated[
    Annotated[ParseJson, Tag("parse_json")]
    | Annotated[Mask, Tag("mask")]
    | Annotated[Rename, Tag("rename")]
    | Annotated[Drop, Tag("drop")]
    | Annotated[Select, Tag("select")]
    | Annotated[Cast, Tag("cast")]
    | Annotated[Timestamp, Tag("timestamp")]
    | Annotated[Filter, Tag("filter")]
    | Annotated[Route, Tag("route")]
    | Annotated[Sql, Tag("sql")],
    Discriminator(
        _transform_kind,
        custom_error_type="unknown_transform",
        custom_error_message=(
            "each transform is one key, one of: " + ", ".join(TRANSFORMS)
        ),
    ),
]

# ---- sinks --------------------------------------------------------------------------------


class EddySink(_Model):
    """Produce to a topic (murmur2 key partitioning), or to the topic a `route` chose."""

    type: Literal["eddy"]
    bootstrap: str | None = Field(None, description="default: the source's bootstrap")
    topic: str | None = Field(None, description="target topic (default: the routed topic)")
    options: dict[str, str] = Field(default_factory=dict, description="producer properties")
    value_format: Literal["avro", "json", "protobuf", "bytes"] = Field(
        "bytes", alias="value.format",
        description="avro, json or protobuf: the `value` column (or, without one, the "
                    "row) in Confluent's wire format, with a schema derived from its type "
                    "and registered; bytes: `value` as it is, else the row as JSON")
    key_format: Literal["avro", "json", "protobuf", "bytes"] = Field(
        "bytes", alias="key.format", description="as value.format, for the `key` column")
    schema_registry_url: str | None = Field(
        None, alias="schema.registry.url", description="the schema registry (http://HOST:PORT)")
    value_subject: str | None = Field(
        None, alias="value.subject", description="subject (default <topic>-value)")
    key_subject: str | None = Field(
        None, alias="key.subject", description="subject (default <topic>-key)")
    auto_register_schemas: bool = Field(
        True, alias="auto.register.schemas",
        description="register the derived schema (false: it must be registered already)")
    use_latest_version: bool = Field(
        False, alias="use.latest.version",
        description="write with the subject's latest schema instead of the derived one")

    _bootstrap = field_validator("bootstrap")(
        lambda v: None if v is None else _check_bootstrap(v)
    )

    @field_validator("schema_registry_url")
    @classmethod
    def _registry_url(cls, value: str | None) -> str | None:
        if value is not None and not re.match(r"^https?://[^/\s]+", value):
            raise ValueError(f"expected an http:// or https:// URL, got {value!r}")
        return value

    @model_validator(mode="after")
    def _registry_for_formats(self) -> EddySink:
        for name in ("value", "key"):
            fmt = getattr(self, f"{name}_format")
            if fmt == "bytes":
                continue
            if self.schema_registry_url is None:
                raise ValueError(f"{name}.format: {fmt} needs schema.registry.url")
            if self.topic is None and getattr(self, f"{name}_subject") is None:
                raise ValueError(f"{name}.format: set {name}.subject (the default subject "
                                 f"<topic>-{name} needs `topic`)")
        return self

    def write_options(self) -> dict[str, str]:
        """The schema-aware options of `format("eddy")` this sink sets."""
        opts: dict[str, str] = {}
        for name in ("value", "key"):
            fmt = getattr(self, f"{name}_format")
            if fmt != "bytes":
                opts[f"{name}.format"] = fmt
                subject = getattr(self, f"{name}_subject")
                if subject is not None:
                    opts[f"{name}.subject"] = subject
        if opts:
            assert self.schema_registry_url is not None
            opts["schema.registry.url"] = self.schema_registry_url
            opts["auto.register.schemas"] = str(self.auto_register_schemas).lower()
            opts["use.latest.version"] = str(self.use_latest_version).lower()
        return opts

    @field_validator("topic")
    @classmethod
    def _topic(cls, value: str | None) -> str | None:
        return None if value is None else _check_topic(value)


class StdoutSink(_Model):
    """Print each batch: one JSON object per line, or a table."""

    type: Literal["stdout"]
    format: Literal["json", "table"] = "json"
    limit: int | None = Field(None, ge=1, description="rows shown per batch (default: all)")


class FilesSink(_Model):
    """Exactly-once files: each micro-batch's files appear once, even across restarts."""

    type: Literal["files"]
    format: Literal["parquet", "json", "csv"] = "parquet"
    path: str
    partition_by: list[str] = Field(default_factory=list)
    options: dict[str, str] = Field(default_factory=dict, description="Spark writer options")


class WebhookSink(_Model):
    """Batched JSON POSTs; failures after the retries go to the dead-letter topic."""

    type: Literal["webhook"]
    url: str
    batch_size: int = Field(500, ge=1, le=100_000)
    max_retries: int = Field(3, ge=0, le=100)
    backoff_ms: int = Field(200, ge=0, description="first retry delay, doubled each time")
    timeout_ms: int = Field(10_000, ge=1)
    headers: dict[str, str] = Field(default_factory=dict)

    @field_validator("url")
    @classmethod
    def _url(cls, value: str) -> str:
        if not re.match(r"^https?://[^/\s]+", value):
            raise ValueError(f"expected an http:// or https:// URL, got {value!r}")
        return value


Sink = Annotated[
    EddySink | StdoutSink | FilesSink | WebhookSink, Field(discriminator="type")
]

# ---- the pipeline -------------------------------------------------------------------------


class DeadLetter(_Model):
    topic: str
    bootstrap: str | None = Field(None, description="default: the source's bootstrap")

    _topic = field_validator("topic")(_check_topic)
    _bootstrap = field_validator("bootstrap")(
        lambda v: None if v is None else _check_bootstrap(v)
    )


class Pipeline(_Model):
    name: str
    source: Source
    transforms: list[Transform] = Field(default_factory=list)
    sinks: list[Sink] = Field(min_length=1)
    checkpoint: str | None = Field(None, description="default: ./checkpoints/<name>")
    trigger: str = Field(
        "10 seconds",
        description="available-now (process what is there, then stop) or an interval",
    )
    dead_letter: DeadLetter | None = Field(
        None, description="where bad records go (default: topic <name>.dead-letter)"
    )
    spark: dict[str, str] = Field(default_factory=dict, description="extra Spark settings")

    @field_validator("name")
    @classmethod
    def _name(cls, value: str) -> str:
        if not NAME_RE.match(value):
            raise ValueError("letters, digits, '.', '_', '-' (starting with a letter or digit)")
        return value

    @field_validator("trigger")
    @classmethod
    def _trigger(cls, value: str) -> str:
        if value not in ("available-now", "once"):
            parse_duration_ms(value)
        return value

    @field_validator("dead_letter", mode="before")
    @classmethod
    def _dead_letter(cls, value: Any) -> Any:
        return {"topic": value} if isinstance(value, str) else value

    @model_validator(mode="after")
    def _sinks_know_their_topic(self) -> Pipeline:
        routed = any(isinstance(t, Route) for t in self.transforms)
        for i, sink in enumerate(self.sinks):
            if isinstance(sink, EddySink) and sink.topic is None and not routed:
                # a custom error type carries the sink's index to the line-number lookup
                raise PydanticCustomError(
                    "sink_needs_topic",
                    "an eddy sink needs `topic`, or a `route` transform choosing one",
                    {"loc": ("sinks", i)},
                )
        return self

    # ---- derived values ---------------------------------------------------------------

    @property
    def available_now(self) -> bool:
        return self.trigger in ("available-now", "once")

    @property
    def interval_ms(self) -> int:
        return 0 if self.available_now else parse_duration_ms(self.trigger)

    def checkpoint_dir(self) -> Path:
        return Path(self.checkpoint or f"./checkpoints/{self.name}")

    def kafka_bootstrap(self) -> str | None:
        """The first Kafka address the pipeline names: source, then sinks."""
        if isinstance(self.source, EddySource):
            return self.source.bootstrap
        for sink in self.sinks:
            if isinstance(sink, EddySink) and sink.bootstrap:
                return sink.bootstrap
        return None

    def dead_letter_target(self) -> tuple[str, str] | None:
        """(bootstrap, topic) of the dead-letter topic, or None when no broker is named."""
        bootstrap = (self.dead_letter.bootstrap if self.dead_letter else None) or (
            self.kafka_bootstrap()
        )
        if bootstrap is None:
            return None
        topic = self.dead_letter.topic if self.dead_letter else f"{self.name}.dead-letter"
        return bootstrap, topic

    def sink_bootstrap(self, sink: EddySink) -> str:
        return sink.bootstrap or self.kafka_bootstrap() or DEFAULT_BOOTSTRAP


# ---- loading with line numbers ------------------------------------------------------------


def _line_map(node: yaml.Node, path: tuple[Any, ...], out: dict[tuple[Any, ...], int]) -> None:
    out[path] = node.start_mark.line + 1
    if isinstance(node, yaml.MappingNode):
        for key_node, value_node in node.value:
            key = key_node.value
            out[(*path, key)] = key_node.start_mark.line + 1
            _line_map(value_node, (*path, key), out)
            out[(*path, key)] = key_node.start_mark.line + 1
    elif isinstance(node, yaml.SequenceNode):
        for i, item in enumerate(node.value):
            _line_map(item, (*path, i), out)


_SOURCE_TAGS = ("eddy", "datagen", "files")
_SINK_TAGS = ("eddy", "stdout", "files", "webhook")
_UNION_MEMBERS = ("str", "RouteArgs", "DeadLetter", "dict[str,dict[str,int]]")


def _clean_loc(loc: tuple[Any, ...]) -> tuple[Any, ...]:
    """Drop pydantic's union tags: `source.files.path` -> `source.path`,
    `transforms.1.mask.mask.field` -> `transforms.1.mask.field`."""
    out: list[Any] = []
    for i, part in enumerate(loc):
        before = loc[max(0, i - 2) : i]
        if before[-1:] == ("source",) and part in _SOURCE_TAGS:
            continue
        if len(before) == 2 and before[0] == "sinks" and part in _SINK_TAGS:
            continue
        if i and part == loc[i - 1] and part in TRANSFORMS:
            continue
        if part in _UNION_MEMBERS:
            continue
        out.append(part)
    return tuple(out)


def _field_name(loc: tuple[Any, ...]) -> str:
    text = ""
    for part in loc:
        if isinstance(part, int):
            text += f"[{part}]"
        else:
            text += ("." if text else "") + str(part)
    return text or "(top level)"


def load_pipeline_text(text: str, filename: str = "<pipeline>") -> Pipeline:
    try:
        node = yaml.compose(text, Loader=yaml.SafeLoader)
        data = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f"{filename}:{mark.line + 1}" if mark is not None else filename
        problem = getattr(exc, "problem", None) or str(exc)
        raise SpecError([f"{where}: not valid YAML: {problem}"]) from None
    if not isinstance(data, dict):
        raise SpecError([f"{filename}:1: expected a mapping with name, source and sinks"])
    lines: dict[tuple[Any, ...], int] = {}
    if node is not None:
        _line_map(node, (), lines)
    try:
        return Pipeline.model_validate(data)
    except ValidationError as exc:
        problems: list[str] = []
        for error in exc.errors():
            loc = _clean_loc(tuple(error["loc"]))
            if not loc and "loc" in error.get("ctx", {}):
                loc = tuple(error["ctx"]["loc"])
            line = 1
            for cut in range(len(loc), -1, -1):
                if loc[:cut] in lines:
                    line = lines[loc[:cut]]
                    break
            message = error["msg"].removeprefix("Value error, ")
            problems.append(f"{filename}:{line}: {_field_name(loc)}: {message}")
        raise SpecError(sorted(set(problems), key=problems.index)) from None


def load_pipeline(path: str | Path) -> Pipeline:
    p = Path(path)
    try:
        text = p.read_text()
    except OSError as exc:
        raise SpecError([f"{p}: cannot read the pipeline file: {exc.strerror}"]) from None
    return load_pipeline_text(text, str(p))
