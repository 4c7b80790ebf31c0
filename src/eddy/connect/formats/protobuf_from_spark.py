"""A proto3 schema derived from a Spark struct type, for the eddy sink's value.format.

One file, no package, the message `TopLevelRecord` (first in the file: Confluent's
message index [0]); each field numbered in column order from 1:

- struct -> a nested message named after the field in CamelCase (`home_address` ->
  `HomeAddress`, a suffix added if that name is taken in the message)
- array -> `repeated`, map with string keys -> `map<string, V>`; arrays of arrays and
  maps or arrays as map values have no proto3 form and are refused
- string/char/varchar -> string, binary -> bytes, boolean -> bool, byte/short/integer
  -> int32, long -> int64, float, double, timestamp and timestamp_ntz ->
  google.protobuf.Timestamp (the well-known import, which Confluent's registry and
  eddy's resolve; a timestamp_ntz is taken as UTC), date -> int32 (days since
  1970-01-01), decimal -> string (exact; Protobuf has no decimal)
- a nullable scalar field is `optional` (proto3 explicit presence: null stays null);
  messages have presence anyway; repeated and map fields cannot be null (a null array
  is written empty) nor hold nulls (such a row cannot be encoded: a dead letter)

The schema comes as proto text (what is registered) and as the FileDescriptorProto of
that same text (what the encoder builds messages with), both from one model.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from eddy.connect.formats.schema_from_spark import (
    AVRO_NAME,
    MAX_DEPTH,
    SchemaDerivationError,
    is_string_type,
    join,
    kind_of,
    struct_fields,
)

TOP_MESSAGE = "TopLevelRecord"
TIMESTAMP = "google.protobuf.Timestamp"
TIMESTAMP_IMPORT = "google/protobuf/timestamp.proto"
FILE_NAME = "eddy_derived.proto"
_SCALARS = {"string": "string", "binary": "bytes", "boolean": "bool", "byte": "int32",
            "short": "int32", "integer": "int32", "long": "int64", "float": "float",
            "double": "double", "date": "int32", "decimal": "string",
            "timestamp": TIMESTAMP, "timestamp_ntz": TIMESTAMP}


@dataclass
class PField:
    name: str
    number: int
    label: str  # "", "optional" or "repeated"
    type: str  # a scalar, TIMESTAMP or a nested message's name
    map_value: str | None = None  # a map<string, map_value> field


@dataclass
class PMessage:
    name: str
    fields: list[PField] = field(default_factory=list)
    nested: list[PMessage] = field(default_factory=list)


def _camel(name: str) -> str:
    parts = [p for p in name.split("_") if p]
    out = "".join(p[0].upper() + p[1:] for p in parts) or "Field"
    return out if out[0].isalpha() else f"M{out}"


def message_model(spark_type: Any, name: str = TOP_MESSAGE) -> PMessage:
    if kind_of(spark_type) != "struct":
        raise SchemaDerivationError(f"value.format protobuf needs a struct (a message), not "
                                    f"{kind_of(spark_type)}")
    return _message(spark_type, name, "", 0)


def _message(spark_type: dict[str, Any], name: str, path: str, depth: int) -> PMessage:
    if depth > MAX_DEPTH:
        raise SchemaDerivationError(f"field `{path}`: nests deeper than {MAX_DEPTH} levels")
    msg = PMessage(name)
    fields = struct_fields(spark_type, path)
    taken = {f[0] for f in fields} | {f"{_camel(f[0])}Entry" for f in fields}

    def nested_name(fname: str) -> str:
        base = candidate = _camel(fname)
        n = 1
        while candidate in taken:
            n += 1
            candidate = f"{base}{n}"
        taken.add(candidate)
        return candidate

    def element(ftype: Any, fname: str, where: str) -> str:
        kind = kind_of(ftype)
        if kind == "struct":
            sub = _message(ftype, nested_name(fname), where, depth + 1)
            msg.nested.append(sub)
            return sub.name
        if kind in ("array", "map"):
            raise SchemaDerivationError(f"field `{where}`: Protobuf has no {kind} inside a "
                                        "repeated field or a map value")
        if kind not in _SCALARS:
            raise SchemaDerivationError(f"field `{where}`: Spark type {kind} has no "
                                        "Protobuf form")
        return _SCALARS[kind]

    for number, (fname, ftype, nullable) in enumerate(fields, 1):
        where = join(path, fname)
        if not AVRO_NAME.match(fname):  # the same rule as Protobuf identifiers
            raise SchemaDerivationError(f"field `{where}`: not a valid Protobuf field name")
        kind = kind_of(ftype)
        if kind == "array":
            msg.fields.append(PField(fname, number, "repeated",
                                     element(ftype["elementType"], fname, f"{where}[]")))
        elif kind == "map":
            if not is_string_type(ftype.get("keyType")):
                raise SchemaDerivationError(f"field `{where}`: maps need string keys, not "
                                            f"{ftype.get('keyType')}")
            value = element(ftype["valueType"], fname, f"{where}{{}}")
            msg.fields.append(PField(fname, number, "repeated", "", value))
        else:
            ptype = element(ftype, fname, where)
            scalar = kind != "struct" and ptype != TIMESTAMP
            msg.fields.append(PField(fname, number, "optional" if nullable and scalar
                                     else "", ptype))
    return msg


def _uses_timestamp(msg: PMessage) -> bool:
    return any(TIMESTAMP in (f.type, f.map_value) for f in msg.fields) or any(
        _uses_timestamp(m) for m in msg.nested)


# ---- proto text -------------------------------------------------------------------------


def proto_text(msg: PMessage) -> str:
    lines = ['syntax = "proto3";', ""]
    if _uses_timestamp(msg):
        lines += [f'import "{TIMESTAMP_IMPORT}";', ""]
    lines += _message_lines(msg, "")
    return "\n".join(lines) + "\n"


def _message_lines(msg: PMessage, indent: str) -> list[str]:
    out = [f"{indent}message {msg.name} {{"]
    inner = indent + "  "
    for f in msg.fields:
        if f.map_value is not None:
            out.append(f"{inner}map<string, {f.map_value}> {f.name} = {f.number};")
        else:
            label = f"{f.label} " if f.label else ""
            out.append(f"{inner}{label}{f.type} {f.name} = {f.number};")
    for sub in msg.nested:
        out += _message_lines(sub, inner)
    out.append(f"{indent}}}")
    return out


# ---- the descriptor ---------------------------------------------------------------------


def file_descriptor(msg: PMessage) -> Any:
    """The FileDescriptorProto of proto_text(msg)."""
    from google.protobuf import descriptor_pb2

    fdp = descriptor_pb2.FileDescriptorProto(name=FILE_NAME, syntax="proto3")
    if _uses_timestamp(msg):
        fdp.dependency.append(TIMESTAMP_IMPORT)
    _describe(fdp.message_type.add(), msg, "")
    return fdp


def _describe(proto: Any, msg: PMessage, scope: str) -> None:
    from google.protobuf import descriptor_pb2

    fd = descriptor_pb2.FieldDescriptorProto
    full = f"{scope}.{msg.name}"
    proto.name = msg.name
    kinds = {"string": fd.TYPE_STRING, "bytes": fd.TYPE_BYTES, "bool": fd.TYPE_BOOL,
             "int32": fd.TYPE_INT32, "int64": fd.TYPE_INT64, "float": fd.TYPE_FLOAT,
             "double": fd.TYPE_DOUBLE}
    nested = {m.name for m in msg.nested}

    def set_type(target: Any, ptype: str) -> None:
        if ptype in kinds:
            target.type = kinds[ptype]
        else:
            target.type = fd.TYPE_MESSAGE
            target.type_name = (f".{TIMESTAMP}" if ptype == TIMESTAMP
                                else f"{full}.{ptype}" if ptype in nested else ptype)

    for f in msg.fields:
        out = proto.field.add(name=f.name, number=f.number, json_name=_json_name(f.name))
        if f.map_value is not None:
            entry = proto.nested_type.add(name=f"{_camel(f.name)}Entry")
            entry.options.map_entry = True
            entry.field.add(name="key", number=1, type=fd.TYPE_STRING,
                            label=fd.LABEL_OPTIONAL, json_name="key")
            value = entry.field.add(name="value", number=2, label=fd.LABEL_OPTIONAL,
                                    json_name="value")
            set_type(value, f.map_value)
            out.label = fd.LABEL_REPEATED
            out.type = fd.TYPE_MESSAGE
            out.type_name = f"{full}.{entry.name}"
            continue
        out.label = fd.LABEL_REPEATED if f.label == "repeated" else fd.LABEL_OPTIONAL
        set_type(out, f.type)
        if f.label == "optional":
            out.proto3_optional = True
            out.oneof_index = len(proto.oneof_decl)
            proto.oneof_decl.add(name=f"_{f.name}")
    for sub in msg.nested:
        _describe(proto.nested_type.add(), sub, full)


def _json_name(name: str) -> str:
    parts = name.split("_")
    return parts[0] + "".join(p[:1].upper() + p[1:] for p in parts[1:])

