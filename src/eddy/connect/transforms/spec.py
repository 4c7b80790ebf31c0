"""The transforms of a pipeline file: one model per transform, each one YAML key.

TRANSFORMS is the one list of them: the pipeline model's `transforms` union, the
inventory (`eddy connect list-connectors`, `spec`) and the compiler
(eddy.connect.transforms.compiler) read it.
"""

from __future__ import annotations

import functools
import operator
from collections.abc import Mapping
from typing import TYPE_CHECKING, Annotated, Any, Literal

from pydantic import BaseModel, Discriminator, Field, Tag

from eddy.connect.spec_model import SpecModel


class ParseJsonArgs(SpecModel):
    field: str = Field("value", description="column holding the JSON text")
    schema_: str | None = Field(
        None, alias="schema", description="Spark DDL schema (default: inferred from a sample)"
    )
    sample: int = Field(1000, ge=1, description="records sampled to infer the schema")
    keep: list[str] = Field(
        default_factory=list, description="source columns kept beside the parsed fields"
    )


class MaskArgs(SpecModel):
    field: str
    method: Literal["redact", "hash", "keep_last"] = "redact"
    salt: str = Field("", description="hash: prepended to the value before SHA-256")
    keep: int = Field(4, ge=0, description="keep_last: characters left visible")
    replacement: str = Field("***", description="redact: the text put in place")


class TimestampArgs(SpecModel):
    field: str
    format: str | None = Field(
        None, description="Spark datetime pattern of the input (default: ISO 8601)"
    )
    zone: str | None = Field(None, description="time zone the input is written in, e.g. UTC")
    to: str | None = Field(None, description="target column (default: replace `field`)")
    unit: Literal["ms", "s"] | None = Field(
        None, description="the input is a number of ms or s since the epoch"
    )


class RouteArgs(SpecModel):
    expr: str = Field(description="SQL expression giving the target topic")


class ParseJson(SpecModel):
    parse_json: ParseJsonArgs


class Mask(SpecModel):
    mask: MaskArgs


class Rename(SpecModel):
    rename: dict[str, str]


class Drop(SpecModel):
    drop: list[str]


class Select(SpecModel):
    select: list[str]


class Cast(SpecModel):
    cast: dict[str, str]


class Timestamp(SpecModel):
    timestamp: TimestampArgs


class Filter(SpecModel):
    filter: str


class Route(SpecModel):
    route: RouteArgs | str


class Sql(SpecModel):
    sql: str


TRANSFORMS: dict[str, type[SpecModel]] = {
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

#: what each transform does, in one line (`eddy connect list-connectors`)
DESCRIPTIONS = {
    "parse_json": "JSON value to columns (schema given or inferred from a sample)",
    "mask": "redact, hash with a salt, or keep the last N characters of a field",
    "rename": "rename columns {old: new}",
    "drop": "drop columns",
    "select": "keep these columns or SQL expressions",
    "cast": "cast columns {column: TYPE}; values that do not convert are dead letters",
    "timestamp": "text or epoch numbers to timestamps (format, zone)",
    "filter": "keep rows where a SQL predicate holds",
    "route": "a SQL expression chooses each row's target topic",
    "sql": "any Spark SQL over the view `input`",
}


def _transform_kind(value: Any) -> str | None:
    if isinstance(value, Mapping) and len(value) == 1:
        key = next(iter(value))
        return key if key in TRANSFORMS else None
    if isinstance(value, BaseModel):
        return next(iter(type(value).model_fields))
    return None


if TYPE_CHECKING:
    Transform = SpecModel
else:
    Transform = Annotated[
        functools.reduce(operator.or_, [Annotated[model, Tag(name)]
                                        for name, model in TRANSFORMS.items()]),
        Discriminator(
            _transform_kind,
            custom_error_type="unknown_transform",
            custom_error_message=(
                "each transform is one key, one of: " + ", ".join(TRANSFORMS)
            ),
        ),
    ]
