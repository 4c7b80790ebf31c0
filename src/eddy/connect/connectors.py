"""Connectors register themselves (seed 001's SourceFactory / SinkFactory registry).

A source or a sink is one module of eddy.connect.sources or eddy.connect.sinks. It
declares its spec model (a ConnectorSpec whose `type: Literal["NAME"]` names it in
pipeline files, with the keys and checks of its YAML) and its factory (what builds its
DataFrame or BatchSink, what `eddy connect check` probes for it, the Spark data sources it
uses), and calls `register(factory)` when it is imported. Reading the registry imports
every module of those two packages first (pkgutil), so adding a connector is adding one
module there: the pipeline model's `source` and `sinks` unions (eddy.connect.runtime.spec),
the runner, `eddy.connect.spark.register` and the inventory behind `eddy connect
list-connectors|spec|check` all read it.

A connector module imports no Spark at module level (`eddy connect validate` and `check`
work without the connect extra): what needs PySpark is imported where it runs.
"""

from __future__ import annotations

import functools
import importlib
import operator
import pkgutil
from abc import ABC, abstractmethod
from collections.abc import Collection, Mapping, Sequence
from typing import TYPE_CHECKING, Annotated, Any, Generic, TypeVar, get_args

from pydantic import Field

from eddy.connect.spec_model import SpecModel

if TYPE_CHECKING:
    from pyspark.sql import Column, DataFrame, SparkSession

    from eddy.connect.batch import BatchSink
    from eddy.connect.probes import Check
    from eddy.connect.runtime.spec import Pipeline

#: the packages whose every module is a connector
PACKAGES = ("eddy.connect.sources", "eddy.connect.sinks")


class ConnectorSpec(SpecModel):
    """A source or sink entry of a pipeline file; a subclass declares `type: Literal[NAME]`."""

    if TYPE_CHECKING:
        type: str

    def kafka_bootstrap(self) -> str | None:
        """The broker this connector names, if it talks to one (the pipeline's dead
        letters and bootstrap-less eddy sinks default to the first one named)."""
        return None

    def route_problem(self) -> str | None:
        """Why this sink cannot write its rows unless a `route` transform chooses each
        row's topic (None: it can)."""
        return None


S = TypeVar("S", bound=ConnectorSpec)


def spec_name(model: type[ConnectorSpec]) -> str:
    """The NAME of a spec model's `type: Literal[NAME]`."""
    names = get_args(model.model_fields["type"].annotation)
    if len(names) != 1 or not isinstance(names[0], str):
        raise TypeError(f"{model.__name__}.type must be Literal['NAME'], one name")
    return names[0]


class Factory(ABC, Generic[S]):
    """What every connector declares."""

    #: the connector's pipeline-file model
    spec: type[S]
    #: its place in listings and in the pipeline model's union (lowest first)
    rank: int = 100

    @property
    def name(self) -> str:
        return spec_name(self.spec)

    @property
    def description(self) -> str:
        """The first line of the spec model's docstring."""
        doc = (self.spec.__doc__ or "").strip().splitlines()
        return doc[0] if doc else ""

    def data_sources(self) -> Sequence[type[Any]]:
        """The PySpark data sources the connector reads or writes through (registered on a
        session by eddy.connect.spark.register)."""
        return ()


class SourceFactory(Factory[S]):
    """A source: its rows as a DataFrame, streaming or as a small batch sample."""

    @abstractmethod
    def stream(self, spark: SparkSession, spec: S, pipeline: Pipeline,
               json_schemas: Mapping[int, str]) -> DataFrame:
        """The streaming DataFrame of the source, as the source gives it. `json_schemas`
        are the pipeline's parse_json schemas (given or inferred), by transform index."""

    @abstractmethod
    def sample(self, spark: SparkSession, spec: S, rows: int) -> DataFrame:
        """Up to `rows` records of the source as a batch DataFrame."""

    def internal_columns(self, df: DataFrame, spec: S) -> dict[str, Column]:
        """The columns (eddy.connect.batch) saying where each row came from, added before
        the transforms."""
        return {}

    def position(self, columns: Collection[str]) -> Column | None:
        """A failed row's position, from the internal columns this source added (None:
        the position column itself)."""
        return None

    @abstractmethod
    def check(self, spec: S, pipeline: Pipeline, what: str) -> Check:
        """What `eddy connect check` finds when it tries the source."""


class SinkFactory(Factory[S]):
    """A sink: the BatchSink the runtime hands each micro-batch's good rows."""

    @abstractmethod
    def build(self, spec: S, name: str, pipeline: Pipeline) -> BatchSink:
        """The sink of `spec`; `name` (`sinks[i]:TYPE`) names it in dead letters."""

    @abstractmethod
    def check(self, spec: S, pipeline: Pipeline, what: str) -> Check:
        """What `eddy connect check` finds when it tries the sink."""


_SOURCES: dict[str, SourceFactory[Any]] = {}
_SINKS: dict[str, SinkFactory[Any]] = {}
_loaded = False


def register(factory: SourceFactory[Any] | SinkFactory[Any]) -> None:
    """Add a connector; a connector module calls this when it is imported."""
    table: dict[str, Any] = _SOURCES if isinstance(factory, SourceFactory) else _SINKS
    known = table.get(factory.name)
    if known is not None and type(known).__module__ != type(factory).__module__:
        raise ValueError(f"two connectors named {factory.name!r}: "
                         f"{type(known).__qualname__} and {type(factory).__qualname__}")
    table[factory.name] = factory


def _load() -> None:
    """Import every connector module (once)."""
    global _loaded
    if _loaded:
        return
    for package in PACKAGES:
        path = importlib.import_module(package).__path__
        for module in pkgutil.iter_modules(path, package + "."):
            importlib.import_module(module.name)
    _loaded = True


def sources() -> list[SourceFactory[Any]]:
    """Every source connector, by rank then name."""
    _load()
    return sorted(_SOURCES.values(), key=lambda f: (f.rank, f.name))


def sinks() -> list[SinkFactory[Any]]:
    """Every sink connector, by rank then name."""
    _load()
    return sorted(_SINKS.values(), key=lambda f: (f.rank, f.name))


def source(spec: ConnectorSpec) -> SourceFactory[Any]:
    """The factory of a loaded source spec."""
    _load()
    return _SOURCES[spec.type]


def sink(spec: ConnectorSpec) -> SinkFactory[Any]:
    """The factory of a loaded sink spec."""
    _load()
    return _SINKS[spec.type]


def spec_union(factories: Sequence[Factory[Any]]) -> Any:
    """The factories' spec models as one pydantic union, told apart by `type`."""
    members = functools.reduce(operator.or_, [f.spec for f in factories])
    return Annotated[members, Field(discriminator="type")]
