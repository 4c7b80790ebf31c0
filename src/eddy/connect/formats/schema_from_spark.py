"""Avro and JSON schemas derived from a Spark type, for the eddy sink's value.format.

The input is Spark's JSON form of a type (`StructType.jsonValue()`, `"long"`,
`{"type": "array", ...}`): no Spark needed, so the driver and the tests share it.

Avro, as Spark's `to_avro` maps Spark types, except that a nullable type is a union
with null *first* and its field has `"default": null` (so a reader schema may drop or
add the field): struct -> record (the top one `topLevelRecord`, nested ones named after
their field in the namespace of their parents' names, as Spark does), array -> array,
map with string keys -> map, string/char/varchar -> string, binary -> bytes, boolean,
byte/short/integer -> int, long, float, double, date -> int with logicalType date,
timestamp -> long timestamp-micros, timestamp_ntz -> long local-timestamp-micros,
decimal(p, s) -> bytes with logicalType decimal, void -> null.

JSON Schema (draft-07): struct -> object with `properties` in order, the non-nullable
ones `required`, `additionalProperties: false` (a closed content model: adding an
optional field stays backward compatible); nullable -> the type list gains "null";
integers -> integer, float/double/decimal -> number, string -> string, binary ->
base64 string, date -> string (format date), timestamp -> string (format date-time,
UTC), timestamp_ntz -> string (ISO 8601 without a zone), array -> array of items,
map with string keys -> object of additionalProperties.

Types a format cannot hold (intervals, maps with other keys, field names Avro refuses)
are a SchemaDerivationError naming the field.
"""

from __future__ import annotations

import re
from typing import Any

AVRO_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
DECIMAL = re.compile(r"^decimal\(\s*(\d+)\s*,\s*(-?\d+)\s*\)$")
TOP_RECORD = "topLevelRecord"
JSON_SCHEMA_DRAFT = "http://json-schema.org/draft-07/schema#"
MAX_DEPTH = 64


class SchemaDerivationError(ValueError):
    """A Spark type the target format cannot express; the message names the field."""


def _where(path: str) -> str:
    return f"field `{path}`" if path else "the value"


def decimal_of(spark_type: str) -> tuple[int, int] | None:
    """(precision, scale) of a `decimal(p,s)` type name, or None."""
    m = DECIMAL.match(spark_type)
    return (int(m.group(1)), int(m.group(2))) if m else None


def is_string_type(spark_type: Any) -> bool:
    return spark_type == "string" or (isinstance(spark_type, str)
                                      and spark_type.startswith(("char(", "varchar(")))


def kind_of(spark_type: Any) -> str:
    """struct, array, map, decimal, string or the simple type's own name."""
    if isinstance(spark_type, dict):
        return str(spark_type.get("type"))
    if not isinstance(spark_type, str):
        raise SchemaDerivationError(f"not a Spark type: {str(spark_type)[:80]}")
    if is_string_type(spark_type):
        return "string"
    if decimal_of(spark_type) is not None:
        return "decimal"
    return spark_type


def struct_fields(spark_type: dict[str, Any], path: str) -> list[tuple[str, Any, bool]]:
    """(name, type, nullable) of a struct's fields."""
    fields = spark_type.get("fields")
    if not isinstance(fields, list):
        raise SchemaDerivationError(f"{_where(path)}: a struct without `fields`")
    out: list[tuple[str, Any, bool]] = []
    for f in fields:
        if not isinstance(f, dict) or not isinstance(f.get("name"), str):
            raise SchemaDerivationError(f"{_where(path)}: a struct field without a name")
        out.append((f["name"], f.get("type"), bool(f.get("nullable", True))))
    return out


def join(path: str, name: str) -> str:
    return f"{path}.{name}" if path else name


# ---- Avro -------------------------------------------------------------------------------


def avro_schema(spark_type: Any, name: str = TOP_RECORD, namespace: str = "") -> Any:
    """The Avro schema (as JSON-ready data) of values of `spark_type` (not null: a null
    value is a null record, not an encoded one)."""
    return _avro(spark_type, name, namespace, "", 0)


def _avro_nullable(spark_type: Any, nullable: bool, name: str, namespace: str, path: str,
                   depth: int) -> Any:
    inner = _avro(spark_type, name, namespace, path, depth + 1)
    return ["null", inner] if nullable and inner != "null" else inner


def _avro(spark_type: Any, name: str, namespace: str, path: str, depth: int) -> Any:
    if depth > MAX_DEPTH:
        raise SchemaDerivationError(f"{_where(path)}: nests deeper than {MAX_DEPTH} levels")
    kind = kind_of(spark_type)
    simple = {"string": "string", "binary": "bytes", "boolean": "boolean", "byte": "int",
              "short": "int", "integer": "int", "long": "long", "float": "float",
              "double": "double", "void": "null"}
    if kind in simple:
        return simple[kind]
    if kind == "date":
        return {"type": "int", "logicalType": "date"}
    if kind == "timestamp":
        return {"type": "long", "logicalType": "timestamp-micros"}
    if kind == "timestamp_ntz":
        return {"type": "long", "logicalType": "local-timestamp-micros"}
    if kind == "decimal":
        precision, scale = decimal_of(str(spark_type)) or (0, 0)
        return {"type": "bytes", "logicalType": "decimal", "precision": precision,
                "scale": scale}
    assert isinstance(spark_type, dict) or kind not in ("array", "map", "struct")
    if kind == "array":
        return {"type": "array", "items": _avro_nullable(
            spark_type["elementType"], bool(spark_type.get("containsNull", True)), name,
            namespace, f"{path}[]", depth)}
    if kind == "map":
        if not is_string_type(spark_type.get("keyType")):
            raise SchemaDerivationError(f"{_where(path)}: Avro maps have string keys, not "
                                        f"{spark_type.get('keyType')}")
        return {"type": "map", "values": _avro_nullable(
            spark_type["valueType"], bool(spark_type.get("valueContainsNull", True)), name,
            namespace, f"{path}{{}}", depth)}
    if kind == "struct":
        inner_ns = f"{namespace}.{name}" if namespace else name
        fields: list[dict[str, Any]] = []
        for fname, ftype, nullable in struct_fields(spark_type, path):
            if not AVRO_NAME.match(fname):
                raise SchemaDerivationError(
                    f"{_where(join(path, fname))}: not a valid Avro name (letters, digits "
                    "and _, not starting with a digit)")
            field: dict[str, Any] = {"name": fname, "type": _avro_nullable(
                ftype, nullable, fname, inner_ns, join(path, fname), depth)}
            if isinstance(field["type"], list):
                field["default"] = None
            fields.append(field)
        record: dict[str, Any] = {"type": "record", "name": name}
        if namespace:
            record["namespace"] = namespace
        record["fields"] = fields
        return record
    raise SchemaDerivationError(f"{_where(path)}: Spark type {kind} has no Avro form")


# ---- JSON Schema ------------------------------------------------------------------------


def json_schema(spark_type: Any, title: str = TOP_RECORD) -> dict[str, Any]:
    """A draft-07 JSON Schema of values of `spark_type`."""
    out = {"$schema": JSON_SCHEMA_DRAFT, "title": title}
    out.update(_json(spark_type, False, "", 0))
    return out


def _with_null(schema: dict[str, Any], nullable: bool) -> dict[str, Any]:
    if not nullable or schema.get("type") == "null":
        return schema
    return {**schema, "type": [schema["type"], "null"]}


def _json(spark_type: Any, nullable: bool, path: str, depth: int) -> dict[str, Any]:
    if depth > MAX_DEPTH:
        raise SchemaDerivationError(f"{_where(path)}: nests deeper than {MAX_DEPTH} levels")
    kind = kind_of(spark_type)
    simple: dict[str, dict[str, Any]] = {
        "string": {"type": "string"}, "boolean": {"type": "boolean"},
        "byte": {"type": "integer"}, "short": {"type": "integer"},
        "integer": {"type": "integer"}, "long": {"type": "integer"},
        "float": {"type": "number"}, "double": {"type": "number"},
        "decimal": {"type": "number"}, "void": {"type": "null"},
        "binary": {"type": "string", "contentEncoding": "base64"},
        "date": {"type": "string", "format": "date"},
        "timestamp": {"type": "string", "format": "date-time"},
        "timestamp_ntz": {"type": "string"},
    }
    if kind in simple:
        return _with_null(dict(simple[kind]), nullable)
    if kind == "array":
        items = _json(spark_type["elementType"], bool(spark_type.get("containsNull", True)),
                      f"{path}[]", depth + 1)
        return _with_null({"type": "array", "items": items}, nullable)
    if kind == "map":
        if not is_string_type(spark_type.get("keyType")):
            raise SchemaDerivationError(f"{_where(path)}: JSON objects have string keys, "
                                        f"not {spark_type.get('keyType')}")
        values = _json(spark_type["valueType"],
                       bool(spark_type.get("valueContainsNull", True)), f"{path}{{}}",
                       depth + 1)
        return _with_null({"type": "object", "additionalProperties": values}, nullable)
    if kind == "struct":
        props: dict[str, Any] = {}
        required: list[str] = []
        for fname, ftype, fnull in struct_fields(spark_type, path):
            props[fname] = _json(ftype, fnull, join(path, fname), depth + 1)
            if not fnull:
                required.append(fname)
        out: dict[str, Any] = {"type": "object", "properties": props}
        if required:
            out["required"] = required
        out["additionalProperties"] = False
        return _with_null(out, nullable)
    raise SchemaDerivationError(f"{_where(path)}: Spark type {kind} has no JSON Schema form")
