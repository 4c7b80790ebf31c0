"""Avro values in Confluent's wire format decoded into one typed Arrow column.

The column's type comes from the reader schema (a subject's latest or pinned version),
mapped as Spark's `from_avro` maps Avro: records -> structs, arrays, maps (string keys),
a union with null -> its other member (nullable), enums -> strings, bytes and fixed ->
binary, date -> DATE, timestamp-millis/micros -> TIMESTAMP, local-timestamp-* ->
TIMESTAMP_NTZ, decimal -> DECIMAL(p, s), time-millis/micros -> INT/BIGINT, uuid ->
STRING; a union of int and long -> BIGINT, of float and double -> DOUBLE; any other
union -> a struct with one field per non-null member (`member0`, `member1`, ...), the
one written set and the others null.

Each value's writer schema (by the id or GUID in its prefix or its schema-id record
header: eddy.connect.formats.confluent_wire) is resolved against the reader
schema by fastavro (added fields get their defaults, removed ones are skipped, int
widens to long...). A value that cannot be decoded (short, another magic byte, an
unknown id, a writer schema that does not resolve, a payload fastavro rejects or with
bytes left over) gets a null and an error naming why; nothing raises out of decode().
"""

from __future__ import annotations

import decimal
import io
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
from eddy.formats.avro.checks import PRIMITIVES, check_arrays, fullname
from eddy.formats.avro.checks import AvroSchemaError as AvroSchemaError  # re-exported

#: logical types decoded as their base type (and typed in Arrow): fastavro would make
#: Python objects of them only for Arrow to take them apart again
_STRIPPED = ("date", "time-millis", "time-micros", "timestamp-millis", "timestamp-micros",
             "timestamp-nanos", "local-timestamp-millis", "local-timestamp-micros",
             "local-timestamp-nanos", "uuid")


@dataclass
class Col:
    """One Avro type: the Arrow type fastavro's output is built as (`decode`), the type
    the column has (`final`, differing only in timestamp units), a converter of
    fastavro's value (None: use it as it is) and the kind a union matches members by."""

    decode: Any
    final: Any
    convert: Callable[[Any], Any] | None
    kind: str


def _has_general_union(schema: Any) -> bool:
    if isinstance(schema, list):
        if sum(1 for m in schema if m != "null") >= 2:
            return True
        return any(_has_general_union(m) for m in schema)
    if isinstance(schema, dict):
        kind = schema.get("type")
        if kind == "record" or kind == "error":
            return any(_has_general_union(f.get("type")) for f in schema.get("fields", [])
                       if isinstance(f, dict))
        if kind == "array":
            return _has_general_union(schema.get("items"))
        if kind == "map":
            return _has_general_union(schema.get("values"))
        return _has_general_union(kind) if isinstance(kind, dict | list) else False
    return False


def strip_logical(schema: Any) -> Any:
    """A copy of `schema` without the logical types this module types itself."""
    if isinstance(schema, list):
        return [strip_logical(m) for m in schema]
    if isinstance(schema, dict):
        out = {k: strip_logical(v) if k in ("type", "items", "values") else v
               for k, v in schema.items() if k != "fields"}
        if "fields" in schema and isinstance(schema["fields"], list):
            out["fields"] = [{**f, "type": strip_logical(f.get("type"))}
                             if isinstance(f, dict) else f for f in schema["fields"]]
        if out.get("logicalType") in _STRIPPED:
            del out["logicalType"]
        return out
    return schema


class TypeMapper:
    """Avro schema JSON -> Col, with named types (records, enums, fixed) by full name."""

    def __init__(self, tagged: bool) -> None:
        import pyarrow as pa

        self.pa = pa
        self.tagged = tagged  # fastavro returns (name, value) for named types in unions
        self.named: dict[str, Col | None] = {}  # None: being defined (recursion)

    def map(self, schema: Any, namespace: str | None = None, depth: int = 0) -> Col:
        pa = self.pa
        if depth > 64:
            raise AvroSchemaError("the schema nests deeper than 64 levels")
        if isinstance(schema, list):
            return self._union(schema, namespace, depth)
        if isinstance(schema, str):
            simple = {"null": pa.null(), "boolean": pa.bool_(), "int": pa.int32(),
                      "long": pa.int64(), "float": pa.float32(), "double": pa.float64(),
                      "bytes": pa.binary(), "string": pa.string()}
            if schema in simple:
                return Col(simple[schema], simple[schema], None, schema)
            for name in (fullname(schema, namespace), schema):
                if name in self.named:
                    found = self.named[name]
                    if found is None:
                        raise AvroSchemaError(f"type {name} is recursive: Spark types cannot "
                                              "be")
                    return found
            raise AvroSchemaError(f"unknown type {schema!r}")
        if not isinstance(schema, dict) or "type" not in schema:
            raise AvroSchemaError(f"not an Avro schema: {str(schema)[:80]}")
        kind = schema["type"]
        logical = schema.get("logicalType")
        if kind in ("record", "error", "enum", "fixed"):
            return self._named(schema, namespace, depth)
        if kind == "array":
            item = self.map(schema.get("items"), namespace, depth + 1)
            conv = item.convert
            return Col(pa.list_(item.decode), pa.list_(item.final),
                       None if conv is None else (lambda v: [conv(x) for x in v]), "array")
        if kind == "map":
            val = self.map(schema.get("values"), namespace, depth + 1)
            vconv = val.convert
            return Col(pa.map_(pa.string(), val.decode), pa.map_(pa.string(), val.final),
                       None if vconv is None else (
                           lambda v: {k: vconv(x) for k, x in v.items()}), "map")
        if isinstance(kind, dict | list):
            return self.map(kind, namespace, depth + 1)
        base = self.map(kind, namespace, depth + 1)
        return self._logical(base, kind, logical, schema)

    def _logical(self, base: Col, kind: str, logical: Any, schema: dict[str, Any]) -> Col:
        pa = self.pa
        if logical == "date" and kind == "int":
            return Col(pa.date32(), pa.date32(), None, kind)
        units = {"timestamp-millis": "ms", "timestamp-micros": "us", "timestamp-nanos": "ns",
                 "local-timestamp-millis": "ms", "local-timestamp-micros": "us",
                 "local-timestamp-nanos": "ns"}
        if logical in units and kind == "long":
            tz = None if str(logical).startswith("local-") else "UTC"
            return Col(pa.timestamp(units[logical], tz=tz), pa.timestamp("us", tz=tz), None,
                       kind)
        if logical == "decimal" and kind == "bytes":
            dec = self._decimal(schema)
            return Col(dec, dec, None, "decimal")
        return base  # time-*, uuid and unknown logical types: the base type, as Spark

    def _decimal(self, schema: dict[str, Any]) -> Any:
        precision, scale = schema.get("precision"), schema.get("scale", 0)
        if not isinstance(precision, int) or not isinstance(scale, int) or not (
                0 < precision <= 38 and 0 <= scale <= precision):
            raise AvroSchemaError(f"decimal({precision}, {scale}): Spark takes precision "
                                  "1..38 and scale 0..precision")
        return self.pa.decimal128(precision, scale)

    def _named(self, schema: dict[str, Any], namespace: str | None, depth: int) -> Col:
        pa = self.pa
        name = schema.get("name")
        if not isinstance(name, str):
            raise AvroSchemaError(f"a {schema['type']} without a name")
        ns = schema.get("namespace", namespace)
        full = fullname(name, ns if isinstance(ns, str) and ns else None)
        inner_ns = full.rpartition(".")[0] or None
        kind = schema["type"]
        self.named[full] = None
        if kind == "enum":
            col = Col(pa.string(), pa.string(), None, f"enum:{full}")
        elif kind == "fixed":
            decimal_type = (self._decimal(schema) if schema.get("logicalType") == "decimal"
                            else None)
            col = Col(decimal_type or pa.binary(), decimal_type or pa.binary(), None,
                      f"fixed:{full}")
        else:
            fields = schema.get("fields")
            if not isinstance(fields, list):
                raise AvroSchemaError(f"record {full}: no `fields` list")
            cols: list[tuple[str, Col]] = []
            for f in fields:
                if not isinstance(f, dict) or not isinstance(f.get("name"), str):
                    raise AvroSchemaError(f"record {full}: a field without a name")
                try:
                    field_col = self.map(f.get("type"), inner_ns, depth + 1)
                except AvroSchemaError as exc:
                    raise AvroSchemaError(f"{full}.{f['name']}: {exc}") from None
                if isinstance(f.get("default"), str) and (
                        field_col.kind in ("bytes", "decimal")
                        or field_col.kind.startswith("fixed:")):
                    field_col = _with_bytes_default(field_col)
                cols.append((f["name"], field_col))
            converting = [(n, c.convert) for n, c in cols if c.convert is not None]

            def convert(v: dict[str, Any]) -> dict[str, Any]:
                out = dict(v)
                for n, conv in converting:
                    if out.get(n) is not None:
                        out[n] = conv(out[n])
                return out

            col = Col(pa.struct([pa.field(n, c.decode) for n, c in cols]),
                      pa.struct([pa.field(n, c.final) for n, c in cols]),
                      convert if converting else None, f"record:{full}")
        self.named[full] = col
        return col

    def _union(self, members: list[Any], namespace: str | None, depth: int) -> Col:
        pa = self.pa
        cols = [self.map(m, namespace, depth + 1) for m in members]
        others = [c for c in cols if c.kind != "null"]
        if not others:
            return Col(pa.null(), pa.null(), None, "null")
        kinds = sorted(c.kind for c in others)
        if len(others) == 1 or kinds in (["int", "long"], ["double", "float"]):
            chosen = others[0] if len(others) == 1 else (
                next(c for c in others if c.kind in ("long", "double")))
            if not self.tagged:
                return chosen
            conv = chosen.convert

            def unwrap(v: Any) -> Any:
                if isinstance(v, tuple):
                    v = v[1]
                return v if conv is None else conv(v)

            return Col(chosen.decode, chosen.final, unwrap, chosen.kind)
        names = [f"member{i}" for i in range(len(others))]

        def branch(v: Any) -> int:
            if isinstance(v, tuple):
                for i, c in enumerate(others):
                    if c.kind.partition(":")[2] in (v[0], v[0].rpartition(".")[2]):
                        return i
            wanted: tuple[str, ...] = {
                bool: ("boolean",), int: ("int", "long"), float: ("float", "double"),
                str: ("string",), bytes: ("bytes",), decimal.Decimal: ("decimal",),
                list: ("array",), dict: ("map",)}.get(type(v), ())
            for i, c in enumerate(others):
                if c.kind in wanted:
                    return i
            raise AvroSchemaError(f"a union value of type {type(v).__name__} matches no "
                                  "member")

        def to_struct(v: Any) -> dict[str, Any]:
            i = branch(v)
            value = v[1] if isinstance(v, tuple) else v
            conv = others[i].convert
            return {names[i]: value if conv is None else conv(value)}

        return Col(pa.struct([pa.field(n, c.decode) for n, c in zip(names, others, strict=True)]),
                   pa.struct([pa.field(n, c.final) for n, c in zip(names, others, strict=True)]),
                   to_struct, "union")


def _with_bytes_default(col: Col) -> Col:
    """``col`` of a bytes, fixed or decimal field with a default: fastavro gives a record
    written without the field the default as the JSON string itself, whose code points
    0-255 are the bytes (Avro's rule); those become bytes (or the decimal they encode)."""
    import pyarrow as pa

    scale = col.decode.scale if pa.types.is_decimal(col.decode) else None
    inner = col.convert

    def convert(v: Any) -> Any:
        if isinstance(v, str):
            try:
                raw = v.encode("latin-1")
            except UnicodeEncodeError:
                raise AvroSchemaError("a bytes default holds a character past \\u00ff, "
                                      "which is no byte") from None
            if scale is None:
                return raw
            return decimal.Decimal(int.from_bytes(raw, "big", signed=True)).scaleb(-scale)
        return v if inner is None else inner(v)

    return Col(col.decode, col.final, convert, col.kind)


def _load_json(text: str, what: str) -> Any:
    import json

    try:
        return json.loads(text)
    except ValueError:
        if text.strip() in PRIMITIVES:
            return text.strip()
        raise AvroSchemaError(f"{what}: not valid Avro schema JSON") from None


class AvroDecoder:
    """Decodes Confluent-framed Avro values into the reader schema's Arrow type."""

    def __init__(self, client: RegistryClient, reader: RegisteredSchema,
                 references: list[tuple[str, RegisteredSchema]]) -> None:
        import fastavro

        self.client = client
        self.reader = reader
        self._refs = [_load_json(r.schema, f"reference {n}") for n, r in references]
        reader_json = _load_json(reader.schema, "the reader schema")
        # the reader reads records written with itself: its arrays are checked as a writer's
        check_arrays(reader_json, {n: raw for (n, _), raw in zip(references, self._refs,
                                                                   strict=True)})
        self.tagged = _has_general_union(reader_json)
        mapper = TypeMapper(self.tagged)
        for ref in self._refs:
            mapper.map(ref)
        self.col = mapper.map(reader_json)
        self.arrow_type = self.col.final
        try:
            self._reader = fastavro.parse_schema(strip_logical(reader_json),
                                                 named_schemas=self._named())
        except Exception as exc:  # fastavro's SchemaParseException and friends
            raise AvroSchemaError(f"the reader schema does not parse: {exc}") from None
        self._writers: dict[SchemaKey, tuple[Any, Any] | str] = {}

    def _named(self) -> dict[str, Any]:
        import fastavro

        named: dict[str, Any] = {}
        for ref in self._refs:
            fastavro.parse_schema(strip_logical(ref), named_schemas=named)
        return named

    def writer(self, schema_id: SchemaKey) -> tuple[Any, Any]:
        """(parsed writer schema, reader schema or None when they are the same) for an
        id or GUID; raises with the reason, cached either way."""
        known = self._writers.get(schema_id)
        if isinstance(known, str):
            raise AvroSchemaError(known)
        if known is not None:
            return known
        if self.reader.id is not None and self.reader.id == schema_id:
            pair: tuple[Any, Any] = (self._reader, None)
            remember(self._writers, schema_id, pair)
            return pair
        try:
            found = self.client.schema(schema_id)
        except RegistryError as exc:
            if not exc.not_found:
                raise  # the registry is down: fail the task, do not condemn the records
            remember(self._writers, schema_id, str(exc))
            raise AvroSchemaError(str(exc)) from None
        try:
            pair = self._parse_writer(schema_id, found)
        except AvroSchemaError as exc:
            problem = f"writer {describe(schema_id)}: {exc}"
            remember(self._writers, schema_id, problem)
            raise AvroSchemaError(problem) from None
        remember(self._writers, schema_id, pair)
        return pair

    def _parse_writer(self, schema_id: SchemaKey, found: RegisteredSchema
                      ) -> tuple[Any, Any]:
        import fastavro

        what = describe(schema_id)
        if found.schema_type != "AVRO":
            raise AvroSchemaError(f"{what} is {found.schema_type}, not AVRO")
        if found.schema == self.reader.schema and found.references == self.reader.references:
            return self._reader, None  # the reader schema itself (a GUID names no id)
        refs = self.client.resolve_references(found)
        raws = {name: _load_json(ref.schema, name) for name, ref in refs}
        named: dict[str, Any] = {}
        for raw_ref in raws.values():
            fastavro.parse_schema(strip_logical(raw_ref), named_schemas=named)
        raw = _load_json(found.schema, what)
        check_arrays(raw, raws)
        try:
            parsed = fastavro.parse_schema(strip_logical(raw), named_schemas=named)
        except Exception as exc:
            raise AvroSchemaError(f"{what} does not parse: {exc}") from None
        return parsed, self._reader

    def decode_one(self, value: bytes, at: HeaderId | None = None) -> Any:
        """One framed value (or, with the header's `at`, a bare payload) -> fastavro's
        record (converted); raises with the reason."""
        import fastavro

        if at is None:
            schema_id, start = split_frame(value)
        else:
            schema_id, start = at[0], 0
        writer, reader = self.writer(schema_id)
        stream = io.BytesIO(value)
        stream.seek(start)
        try:
            record = fastavro.schemaless_reader(stream, writer, reader,
                                                return_named_type=self.tagged)
        except Exception as exc:
            text = str(exc).splitlines()[0][:200] if str(exc) else type(exc).__name__
            raise AvroSchemaError(f"{describe(schema_id)}: the payload does not decode "
                                  f"({type(exc).__name__}: {text})") from None
        left = len(value) - stream.tell()
        if left:
            raise AvroSchemaError(f"{describe(schema_id)}: {left} byte(s) left after the "
                                  "record")
        return record if self.col.convert is None else self.col.convert(record)

    def decode(self, values: list[bytes | None], located: list[HeaderId | None] | None = None
               ) -> tuple[Any, list[str | None]]:
        """(Arrow array of `arrow_type`, error per value: None where it decoded or the
        value was null); `located`: the schema id each record's header gave, if any."""
        records, errors = decode_values(values, self.decode_one,
                                        (FrameError, AvroSchemaError), (RegistryError,),
                                        located)
        array = arrow_rows(records, self.col.decode, errors)
        if self.col.decode != self.col.final:
            array = array.cast(self.col.final, safe=False)  # type: ignore[attr-defined]
        return array, errors

