"""Spark rows as JSON-ready values: what the webhook POSTs and the stdout sink prints.

Binary values become UTF-8 text when they decode, else base64; timestamps ISO 8601 in
UTC; NaN and infinities the strings "NaN", "Infinity", "-Infinity"; decimals integers
(scale 0), numbers (precision up to 15) or text.
"""

from __future__ import annotations

import base64
import datetime as dt
import decimal
import json
import math
from collections.abc import Callable, Sequence
from typing import Any


def binary_text(value: bytes | bytearray | memoryview) -> str:
    """UTF-8 text when the bytes decode, else base64."""
    raw = bytes(value)
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError:
        return base64.b64encode(raw).decode("ascii")


def iso_timestamp(value: dt.datetime) -> str:
    """ISO 8601 in UTC (`...Z`); a naive value is local time, as PySpark gives TIMESTAMP."""
    try:
        utc = value.astimezone(dt.UTC)
    except (OverflowError, OSError, ValueError):
        return value.isoformat()
    return utc.isoformat().replace("+00:00", "Z")


def _float(value: float) -> float | str:
    if math.isfinite(value):
        return value
    return "NaN" if math.isnan(value) else ("Infinity" if value > 0 else "-Infinity")


def plain_json(value: Any) -> Any:
    """A JSON-ready value for anything without a known Spark type."""
    if value is None or isinstance(value, bool | int | str):
        return value
    if isinstance(value, float):
        return _float(value)
    if isinstance(value, bytes | bytearray | memoryview):
        return binary_text(value)
    if isinstance(value, dt.datetime):
        return iso_timestamp(value) if value.tzinfo else value.isoformat()
    if isinstance(value, dt.date | dt.time):
        return value.isoformat()
    if isinstance(value, decimal.Decimal):
        return str(value)
    if isinstance(value, dict):
        return {str(plain_json(k)): plain_json(v) for k, v in value.items()}
    if hasattr(value, "asDict"):
        return {k: plain_json(v) for k, v in value.asDict().items()}
    if isinstance(value, list | tuple):
        return [plain_json(v) for v in value]
    if hasattr(value, "toJson"):  # VariantVal
        return json.loads(value.toJson())
    return str(value)


def _nullable(convert: Callable[[Any], Any]) -> Callable[[Any], Any]:
    return lambda v: None if v is None else convert(v)


def json_converter(data_type: Any) -> Callable[[Any], Any]:
    """A function turning a PySpark value of `data_type` into a JSON-ready value."""
    from pyspark.sql import types as T

    if isinstance(data_type, T.StringType | T.BooleanType | T.IntegralType):
        return lambda v: v
    if isinstance(data_type, T.BinaryType):
        return _nullable(binary_text)
    if isinstance(data_type, T.TimestampType):
        return _nullable(iso_timestamp)
    if isinstance(data_type, T.TimestampNTZType | T.DateType):
        return _nullable(lambda v: v.isoformat())
    if isinstance(data_type, T.FloatType | T.DoubleType):
        return _nullable(_float)
    if isinstance(data_type, T.DecimalType):
        if data_type.scale == 0:
            return _nullable(int)
        if data_type.precision <= 15:
            return _nullable(float)
        return _nullable(str)
    if isinstance(data_type, T.ArrayType):
        element = json_converter(data_type.elementType)
        return _nullable(lambda v: [element(x) for x in v])
    if isinstance(data_type, T.MapType):
        key = json_converter(data_type.keyType)
        val = json_converter(data_type.valueType)

        def convert_map(v: Any) -> Any:
            items = v.items() if isinstance(v, dict) else v
            return {k if isinstance(k, str) else json.dumps(key(k)): val(x) for k, x in items}

        return _nullable(convert_map)
    if isinstance(data_type, T.StructType):
        return _nullable(row_converter(data_type))
    return plain_json


def row_converter(schema: Any, exclude: Sequence[str] = ()) -> Callable[[Any], dict[str, Any]]:
    """A function turning a Row of `schema` into a JSON-ready dict, without `exclude`d fields."""
    picks = [
        (i, field.name, json_converter(field.dataType))
        for i, field in enumerate(schema.fields)
        if field.name not in exclude
    ]

    def convert(row: Any) -> dict[str, Any]:
        if isinstance(row, dict):
            return {name: conv(row.get(name)) for _, name, conv in picks}
        return {name: conv(row[i]) for i, name, conv in picks}

    return convert


def dumps(obj: Any) -> str:
    return json.dumps(obj, ensure_ascii=False, separators=(",", ":"), default=str)
