"""The connector inventory (Airbyte-style spec/check) behind `eddy connect list-connectors`,
`spec NAME` and `check FILE`: the registered sources and sinks (eddy.connect.connectors)
and the transforms (eddy.connect.transforms.spec)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from pydantic import BaseModel

from eddy.connect import connectors, probes
from eddy.connect.probes import Check
from eddy.connect.runtime.spec import Pipeline
from eddy.connect.transforms.spec import DESCRIPTIONS, TRANSFORMS


@dataclass(frozen=True)
class Connector:
    name: str
    kind: str  # source | sink | transform
    model: type[BaseModel]
    description: str


def all_connectors() -> list[Connector]:
    """Sources, then sinks (each in their registry's order), then transforms."""
    return [
        *(Connector(f.name, "source", f.spec, f.description) for f in connectors.sources()),
        *(Connector(f.name, "sink", f.spec, f.description) for f in connectors.sinks()),
        *(Connector(name, "transform", model, DESCRIPTIONS.get(name, ""))
          for name, model in TRANSFORMS.items()),
    ]


def find(name: str) -> list[Connector]:
    """`eddy`, `source/eddy`, `sink/files`, `transform/mask`..."""
    kind, _, bare = name.rpartition("/")
    return [c for c in all_connectors() if c.name == bare and (not kind or c.kind == kind)]


def json_schema(c: Connector) -> dict[str, Any]:
    return c.model.model_json_schema(by_alias=True)


def check(p: Pipeline) -> list[Check]:
    """Can the pipeline reach its source, sinks, dead-letter topic and checkpoint?"""
    checks = [connectors.source(p.source).check(p.source, p, f"source {p.source.type}")]
    for i, sink in enumerate(p.sinks):
        checks.append(connectors.sink(sink).check(sink, p, f"sinks[{i}] {sink.type}"))
    target = p.dead_letter_target()
    if target is not None:
        checks.append(probes.kafka(target[0], "dead letters", None))
    checks.append(probes.writable_dir(str(p.checkpoint_dir()), "checkpoint"))
    return checks
