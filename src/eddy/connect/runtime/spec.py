"""The pipeline file: a pydantic model of the YAML, with errors naming file, line and field.

A pipeline is one source, a list of transforms and one or more sinks (seed 001's
"Source -> Transform -> Sink"); `eddy connect run FILE` turns it into a Spark
Structured Streaming query (eddy.connect.runtime.runner). The source and sink entries
are the registered connectors' spec models (eddy.connect.connectors), told apart by
their `type`; the transforms are eddy.connect.transforms.spec's.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import TYPE_CHECKING, Any

import yaml
from pydantic import Field, ValidationError, field_validator, model_validator
from pydantic_core import PydanticCustomError

from eddy.connect import connectors
from eddy.connect.spec_model import DEFAULT_BOOTSTRAP, SpecModel, check_bootstrap, check_topic
from eddy.connect.transforms.spec import TRANSFORMS, Route, Transform

NAME_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,199}$")
_DURATION_UNITS = {
    "ms": 1, "millisecond": 1, "milliseconds": 1,
    "s": 1000, "sec": 1000, "secs": 1000, "second": 1000, "seconds": 1000,
    "m": 60_000, "min": 60_000, "mins": 60_000, "minute": 60_000, "minutes": 60_000,
}
DURATION_RE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([a-z]+)\s*$")


class SpecError(ValueError):
    """A pipeline file problem, worded for a person: `file:line: field: what is wrong`."""

    def __init__(self, problems: list[str]) -> None:
        super().__init__("\n".join(problems))
        self.problems = problems


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


if TYPE_CHECKING:
    Source = connectors.ConnectorSpec
    Sink = connectors.ConnectorSpec
else:
    Source = connectors.spec_union(connectors.sources())
    Sink = connectors.spec_union(connectors.sinks())


class DeadLetter(SpecModel):
    topic: str
    bootstrap: str | None = Field(None, description="default: the source's bootstrap")

    _topic = field_validator("topic")(check_topic)
    _bootstrap = field_validator("bootstrap")(
        lambda v: None if v is None else check_bootstrap(v)
    )


class Pipeline(SpecModel):
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
        if any(isinstance(t, Route) for t in self.transforms):
            return self
        for i, sink in enumerate(self.sinks):
            problem = sink.route_problem()  # e.g. an eddy sink without `topic`
            if problem is not None:
                # a custom error type carries the sink's index to the line-number lookup
                raise PydanticCustomError("sink_needs_topic", problem, {"loc": ("sinks", i)})
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
        source = self.source.kafka_bootstrap()
        if source is not None:
            return source
        for sink in self.sinks:
            bootstrap = sink.kafka_bootstrap()
            if bootstrap:
                return bootstrap
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

    def sink_bootstrap(self, sink: connectors.ConnectorSpec) -> str:
        """The broker a sink writes to: its own, else the pipeline's first."""
        return sink.kafka_bootstrap() or self.kafka_bootstrap() or DEFAULT_BOOTSTRAP


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


_SOURCE_TAGS = tuple(f.name for f in connectors.sources())
_SINK_TAGS = tuple(f.name for f in connectors.sinks())
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
