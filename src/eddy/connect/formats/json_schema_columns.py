"""JSON values in Confluent's JSON Schema framing decoded into one typed Arrow column.

The framing is Confluent's (magic byte 0 and the 4-byte schema id, or magic byte 1 and
the 16-byte GUID, in front of the value or in its schema-id record header), then the
JSON text.
The column's type comes from the reader JSON Schema: an object with `properties` ->
a struct of them (in order), `additionalProperties` only -> map<string, T>, `array`
with `items` -> array, `integer` -> BIGINT, `number` -> DOUBLE, `boolean`, `string` ->
STRING; a type list or `oneOf`/`anyOf` with `null` -> nullable; local `$ref`s
(`#/definitions/..`, `#/$defs/..`) followed; `allOf` of objects merges their
properties. Anything else (no type, mixed unions, recursion) is a STRING holding the
value's JSON text.

A value decodes when its id is a JSON schema in the registry, its text is JSON, and
every value present fits its column's type (an integer for BIGINT, an object for a
struct...); missing properties are null and unknown ones ignored. The schema's other
keywords (required, minimum, pattern...) are not checked: decoding, not validation.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from eddy.connect.formats.confluent_wire import (
    FrameError,
    HeaderId,
    SchemaKey,
    arrow_rows,
    decode_values,
    describe,
    remember,
    split_frame,
)
from eddy.connect.formats.registry_client import RegisteredSchema, RegistryClient, RegistryError

MAX_DEPTH = 32


class JsonSchemaError(ValueError):
    """A schema this reader cannot map, or a value not fitting it; names the part."""


Convert = Callable[[Any, str], Any]


@dataclass
class JCol:
    type: Any
    convert: Convert


def _where(path: str) -> str:
    return f"`{path}`" if path else "the value"


class SchemaMapper:
    def __init__(self, root: Any) -> None:
        import pyarrow as pa

        self.pa = pa
        self.root = root

    def _text(self) -> JCol:
        def convert(v: Any, path: str) -> Any:
            return v if isinstance(v, str) else json.dumps(v, separators=(",", ":"))

        return JCol(self.pa.string(), convert)

    def _ref(self, ref: str, seen: tuple[str, ...]) -> Any:
        if not ref.startswith("#/") or ref in seen:
            return None
        node = self.root
        for part in ref[2:].split("/"):
            part = part.replace("~1", "/").replace("~0", "~")
            if not isinstance(node, dict) or part not in node:
                raise JsonSchemaError(f"$ref {ref!r} does not resolve in the schema")
            node = node[part]
        return node

    def map(self, schema: Any, depth: int = 0, seen: tuple[str, ...] = ()) -> JCol:
        pa = self.pa
        if depth > MAX_DEPTH:
            raise JsonSchemaError(f"the schema nests deeper than {MAX_DEPTH} levels")
        if not isinstance(schema, dict):
            return self._text()  # true / false / nonsense: any JSON
        if "$ref" in schema and isinstance(schema["$ref"], str):
            target = self._ref(schema["$ref"], seen)
            if target is None:
                return self._text()  # external or recursive: the JSON text
            return self.map(target, depth + 1, (*seen, schema["$ref"]))
        for key in ("oneOf", "anyOf"):
            if isinstance(schema.get(key), list):
                members = [m for m in schema[key]
                           if not (isinstance(m, dict) and m.get("type") == "null")]
                cols = [self.map(m, depth + 1, seen) for m in members]
                if cols and all(c.type == cols[0].type for c in cols):
                    return cols[0]
                return self._text()
        if isinstance(schema.get("allOf"), list):
            merged: dict[str, Any] = {"type": "object", "properties": {}}
            for m in schema["allOf"]:
                if isinstance(m, dict) and isinstance(m.get("$ref"), str):
                    m = self._ref(m["$ref"], seen) or {}
                if not isinstance(m, dict) or not isinstance(m.get("properties", {}), dict):
                    return self._text()
                merged["properties"].update(m.get("properties", {}))
            return self.map(merged, depth + 1, seen)
        kind = schema.get("type")
        if kind is None:  # the keywords say what it is
            kind = ("object" if "properties" in schema or "additionalProperties" in schema
                    else "array" if "items" in schema else None)
        kinds = [str(k) for k in (kind if isinstance(kind, list) else [kind])
                 if k != "null" and k is not None]
        if sorted(kinds) == ["integer", "number"]:
            kinds = ["number"]
        if len(kinds) != 1:
            return self._text()
        kind = kinds[0]
        scalars: dict[str, tuple[Any, Callable[[Any], bool]]] = {
            "integer": (pa.int64(), lambda v: isinstance(v, int) and not isinstance(v, bool)
                        and -(1 << 63) <= v < 1 << 63),
            "number": (pa.float64(), lambda v: isinstance(v, int | float)
                       and not isinstance(v, bool)),
            "boolean": (pa.bool_(), lambda v: isinstance(v, bool)),
            "string": (pa.string(), lambda v: isinstance(v, str)),
        }
        if kind in scalars:
            arrow, ok = scalars[kind]

            def scalar(v: Any, path: str) -> Any:
                if not ok(v):
                    raise JsonSchemaError(f"{_where(path)}: expected {kind}, got "
                                          f"{type(v).__name__}")
                return v

            return JCol(arrow, scalar)
        if kind == "array":
            items = schema.get("items")
            item = self.map(items, depth + 1, seen) if isinstance(items, dict) else self._text()
            conv = item.convert

            def array(v: Any, path: str) -> Any:
                if not isinstance(v, list):
                    raise JsonSchemaError(f"{_where(path)}: expected array, got "
                                          f"{type(v).__name__}")
                return [None if x is None else conv(x, f"{path}[{i}]") for i, x in enumerate(v)]

            return JCol(pa.list_(item.type), array)
        if kind == "object":
            return self._object(schema, depth, seen)
        return self._text()

    def _object(self, schema: dict[str, Any], depth: int, seen: tuple[str, ...]) -> JCol:
        pa = self.pa
        props = schema.get("properties")
        if isinstance(props, dict) and props:
            fields = [(str(name), self.map(sub, depth + 1, seen)) for name, sub in props.items()]

            def struct(v: Any, path: str) -> Any:
                if not isinstance(v, dict):
                    raise JsonSchemaError(f"{_where(path)}: expected object, got "
                                          f"{type(v).__name__}")
                out = {}
                for name, col in fields:
                    x = v.get(name)
                    out[name] = None if x is None else col.convert(
                        x, f"{path}.{name}" if path else name)
                return out

            return JCol(pa.struct([pa.field(n, c.type) for n, c in fields]), struct)
        extra = schema.get("additionalProperties")
        if isinstance(extra, dict):
            val = self.map(extra, depth + 1, seen)

            def mapping(v: Any, path: str) -> Any:
                if not isinstance(v, dict):
                    raise JsonSchemaError(f"{_where(path)}: expected object, got "
                                          f"{type(v).__name__}")
                return [(k, None if x is None else val.convert(x, f"{path}.{k}"))
                        for k, x in v.items()]

            return JCol(pa.map_(pa.string(), val.type), mapping)
        return self._text()


class JsonSchemaDecoder:
    """Decodes Confluent-framed JSON values into the reader schema's Arrow type."""

    def __init__(self, client: RegistryClient, reader: RegisteredSchema) -> None:
        try:
            root = json.loads(reader.schema)
        except ValueError:
            raise JsonSchemaError("the reader schema is not JSON") from None
        self.client = client
        self.col = SchemaMapper(root).map(root)
        self.arrow_type = self.col.type
        self._ids: dict[SchemaKey, str | None] = {} if reader.id is None else {
            reader.id: None}

    def _check_id(self, schema_id: SchemaKey) -> None:
        if schema_id not in self._ids:
            try:
                found = self.client.schema(schema_id)
                remember(self._ids, schema_id, None if found.schema_type == "JSON" else
                         f"{describe(schema_id)} is {found.schema_type}, not JSON")
            except RegistryError as exc:
                if not exc.not_found:
                    raise
                remember(self._ids, schema_id, str(exc))
        problem = self._ids[schema_id]
        if problem is not None:
            raise JsonSchemaError(problem)

    def decode_one(self, value: bytes, at: HeaderId | None = None) -> Any:
        schema_id, start = split_frame(value) if at is None else (at[0], 0)
        self._check_id(schema_id)
        try:
            doc = json.loads(value[start:].decode("utf-8"))
        except (UnicodeDecodeError, ValueError, RecursionError) as exc:
            raise JsonSchemaError(f"{describe(schema_id)}: not JSON text "
                                  f"({type(exc).__name__})") from None
        if doc is None:
            return None
        return self.col.convert(doc, "")

    def decode(self, values: list[bytes | None], located: list[HeaderId | None] | None = None
               ) -> tuple[Any, list[str | None]]:
        records, errors = decode_values(values, self.decode_one,
                                        (FrameError, JsonSchemaError), (RegistryError,),
                                        located)
        return arrow_rows(records, self.arrow_type, errors), errors
