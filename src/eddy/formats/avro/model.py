"""Avro schemas as Java Avro (1.11) models them, and the two texts Confluent derives from one.

The registry must answer with the exact strings Confluent Schema Registry stores, so this
module writes them the way Confluent does:

- ``canonical``: Avro's ``Schema.toString(referencedSchemas, false)`` as Jackson writes it
  (``AvroSchema.canonicalString()``): attributes in Avro's own order (record: type, name,
  namespace, doc, fields, custom properties, aliases; field: name, type, doc, default, order,
  aliases, properties), a primitive with no properties as a bare string, a named type already
  written (or one of the references' top-level types) as its (qualified) name.
- ``normalized_text``: Confluent's ``AvroSchemaUtils.toNormalizedString`` (full names,
  attributes in a fixed order, properties and aliases sorted, defaults converted by their
  type); the registry stores the canonical form of that text re-parsed.
"""

from __future__ import annotations

import math
import re
import struct
from dataclasses import dataclass, field
from decimal import Decimal
from typing import ClassVar, TypeAlias

#: a JSON value as parsed (dict keeps the text's key order)
Json: TypeAlias = bool | int | float | str | list["Json"] | dict[str, "Json"] | None

PRIMITIVES = frozenset({"null", "boolean", "int", "long", "float", "double", "bytes", "string"})


@dataclass(frozen=True, slots=True)
class Name:
    """A named type's name: ``name`` without dots, ``space`` None for the null namespace."""

    name: str
    space: str | None

    @property
    def full(self) -> str:
        return self.name if self.space is None else f"{self.space}.{self.name}"

    def qualified(self, default_space: str | None) -> str:
        """The name as written where ``default_space`` is the enclosing namespace."""
        return self.name if self.space is None or self.space == default_space else self.full


def make_name(text: str, space: str | None) -> Name:
    """Java's ``new Name(text, space)``: a dotted text carries its own namespace; "" is none."""
    dot = text.rfind(".")
    if dot >= 0:
        space, text = text[:dot], text[dot + 1:]
    return Name(text, space or None)


@dataclass(eq=False, slots=True)
class Primitive:
    kind: str
    props: dict[str, Json] = field(default_factory=dict)
    logical: str | None = None


@dataclass(eq=False, slots=True)
class Field:
    name: str
    type: Schema
    doc: str | None
    has_default: bool
    default: Json
    order: str  # ascending | descending | ignore
    aliases: list[str]
    props: dict[str, Json]
    pos: int


@dataclass(eq=False, slots=True)
class Record:
    kind: ClassVar[str] = "record"
    name: Name
    doc: str | None
    is_error: bool
    fields: list[Field] = field(default_factory=list)
    by_name: dict[str, Field] = field(default_factory=dict)
    props: dict[str, Json] = field(default_factory=dict)
    aliases: list[Name] = field(default_factory=list)


@dataclass(eq=False, slots=True)
class Enum:
    kind: ClassVar[str] = "enum"
    name: Name
    doc: str | None
    symbols: list[str]
    default: str | None
    props: dict[str, Json] = field(default_factory=dict)
    aliases: list[Name] = field(default_factory=list)


@dataclass(eq=False, slots=True)
class Fixed:
    kind: ClassVar[str] = "fixed"
    name: Name
    doc: str | None
    size: int
    props: dict[str, Json] = field(default_factory=dict)
    aliases: list[Name] = field(default_factory=list)
    logical: str | None = None


@dataclass(eq=False, slots=True)
class Array:
    kind: ClassVar[str] = "array"
    items: Schema
    props: dict[str, Json] = field(default_factory=dict)


@dataclass(eq=False, slots=True)
class Map:
    kind: ClassVar[str] = "map"
    values: Schema
    props: dict[str, Json] = field(default_factory=dict)


@dataclass(eq=False, slots=True)
class UnionSchema:
    kind: ClassVar[str] = "union"
    branches: list[Schema]


Named: TypeAlias = Record | Enum | Fixed
Schema: TypeAlias = Primitive | Record | Enum | Fixed | Array | Map | UnionSchema


def type_name(node: Schema) -> str:
    """Java's ``Schema.Type`` name (``INT``, ``RECORD``...), used in Avro's messages."""
    return node.kind.upper()


def union_key(node: Schema) -> str:
    """Java's ``getFullName()``: what makes two branches of a union duplicates."""
    if isinstance(node, Record | Enum | Fixed):
        return node.name.full
    return node.kind


# --- Jackson's JSON text ---------------------------------------------------------------------

_ESCAPES = {'"': '\\"', "\\": "\\\\", "\b": "\\b", "\f": "\\f", "\n": "\\n", "\r": "\\r",
            "\t": "\\t"}
_NEEDS_ESCAPE = re.compile('["\\\\\x00-\x1f\ud800-\udfff]')


def _escape_char(match: re.Match[str]) -> str:
    char = match.group()
    return _ESCAPES.get(char) or f"\\u{ord(char):04X}"


def json_string(text: str) -> str:
    """A JSON string as Jackson writes it (non-ASCII raw, control characters escaped with
    upper-case hex; a lone surrogate, which Java would write raw, escaped)."""
    return '"' + _NEEDS_ESCAPE.sub(_escape_char, text) + '"'


def _java_digits(digits: str, exponent: int) -> str:
    """Java's ``Double.toString`` layout for ``0.<digits> * 10^(exponent + 1)``."""
    digits = digits.rstrip("0") or "0"
    if -3 <= exponent < 7:
        if exponent >= 0:
            whole = digits[:exponent + 1].ljust(exponent + 1, "0")
            return f"{whole}.{digits[exponent + 1:] or '0'}"
        return "0." + "0" * (-exponent - 1) + digits
    return f"{digits[0]}.{digits[1:] or '0'}E{exponent}"


def java_double(value: float) -> str:
    """A double as Jackson writes it: Java's ``Double.toString`` (shortest digits), and NaN or
    infinities as quoted strings (Jackson's default ``QUOTE_NON_NUMERIC_NUMBERS``)."""
    if math.isnan(value):
        return '"NaN"'
    if math.isinf(value):
        return '"Infinity"' if value > 0 else '"-Infinity"'
    sign = "-" if math.copysign(1.0, value) < 0 else ""
    if value == 0:
        return sign + "0.0"
    tup = Decimal(repr(abs(value))).as_tuple()
    digits = "".join(map(str, tup.digits))
    assert isinstance(tup.exponent, int)
    return sign + _java_digits(digits, len(digits) + tup.exponent - 1)


def java_float(value: float) -> str:
    """A 32-bit float as Jackson writes a Java ``Float`` (``Float.toString``)."""
    try:
        as_f32: float = struct.unpack("<f", struct.pack("<f", value))[0]
    except OverflowError:  # beyond float's range: Java's cast gives an infinity
        as_f32 = math.copysign(math.inf, value)
    if math.isnan(as_f32) or math.isinf(as_f32) or as_f32 == 0:
        return java_double(as_f32)
    sign = "-" if as_f32 < 0 else ""
    for places in range(9):
        text = f"{abs(as_f32):.{places}e}"
        if struct.unpack("<f", struct.pack("<f", float(text)))[0] == abs(as_f32):
            break
    mantissa, exp = text.split("e")
    return sign + _java_digits(mantissa.replace(".", ""), int(exp))


@dataclass(frozen=True, slots=True)
class F32:
    """A value Java holds as a ``Float`` (a default converted for a ``float`` field)."""

    value: float


def json_text(value: Json | F32, out: list[str], sort_keys: bool = False) -> None:
    """Appends ``value`` as compact JSON; ``sort_keys`` sorts objects as Java's TreeMap
    (UTF-16 code unit order)."""
    if value is None:
        out.append("null")
    elif value is True:
        out.append("true")
    elif value is False:
        out.append("false")
    elif isinstance(value, int):
        out.append(str(value))
    elif isinstance(value, float):
        out.append(java_double(value))
    elif isinstance(value, F32):
        out.append(java_float(value.value))
    elif isinstance(value, str):
        out.append(json_string(value))
    elif isinstance(value, list):
        out.append("[")
        for i, item in enumerate(value):
            if i:
                out.append(",")
            json_text(item, out, sort_keys)
        out.append("]")
    else:
        keys = sorted(value, key=java_order) if sort_keys else list(value)
        out.append("{")
        for i, key in enumerate(keys):
            if i:
                out.append(",")
            out.append(json_string(key))
            out.append(":")
            json_text(value[key], out, sort_keys)
        out.append("}")


def java_order(text: str) -> bytes:
    """Sort key of Java's ``String.compareTo`` (UTF-16 code units)."""
    return text.encode("utf-16-be", "surrogatepass")


def compact(value: Json) -> str:
    out: list[str] = []
    json_text(value, out)
    return "".join(out)


# --- canonical form: Avro's Schema.toJson --------------------------------------------------


class _Writer:
    """Java's ``Schema.toJson(Names, JsonGenerator)``."""

    def __init__(self, known: list[Named]) -> None:
        self.known: dict[str, Named] = {n.name.full: n for n in known}
        self.space: str | None = None
        self.out: list[str] = []

    def key(self, key: str) -> None:
        self.out.append("," + json_string(key) + ":")

    def props(self, props: dict[str, Json]) -> None:
        for key, value in props.items():
            self.key(key)
            json_text(value, self.out)

    def name_ref(self, node: Named) -> bool:
        full = node.name.full
        if self.known.get(full) is node:
            self.out.append(json_string(node.name.qualified(self.space)))
            return True
        self.known[full] = node
        return False

    def write_name(self, node: Named) -> None:
        self.key("name")
        self.out.append(json_string(node.name.name))
        space = node.name.space
        if space is not None:
            if space != self.space:
                self.key("namespace")
                self.out.append(json_string(space))
        elif self.space is not None:
            self.key("namespace")
            self.out.append('""')

    def aliases(self, node: Named) -> None:
        if node.aliases:
            self.key("aliases")
            self.out.append("[" + ",".join(
                json_string(a.qualified(node.name.space)) for a in node.aliases) + "]")

    def doc(self, doc: str | None) -> None:
        if doc is not None:
            self.key("doc")
            self.out.append(json_string(doc))

    def write(self, node: Schema) -> None:
        out = self.out
        if isinstance(node, Primitive):
            if node.props:
                out.append('{"type":' + json_string(node.kind))
                self.props(node.props)
                out.append("}")
            else:
                out.append(json_string(node.kind))
        elif isinstance(node, UnionSchema):
            out.append("[")
            for i, branch in enumerate(node.branches):
                if i:
                    out.append(",")
                self.write(branch)
            out.append("]")
        elif isinstance(node, Array | Map):
            out.append('{"type":"array","items":' if isinstance(node, Array)
                       else '{"type":"map","values":')
            self.write(node.items if isinstance(node, Array) else node.values)
            self.props(node.props)
            out.append("}")
        elif not self.name_ref(node):
            self.named(node)

    def named(self, node: Named) -> None:
        out = self.out
        kind = "error" if isinstance(node, Record) and node.is_error else node.kind
        out.append('{"type":' + json_string(kind))
        self.write_name(node)
        if isinstance(node, Record):
            saved, self.space = self.space, node.name.space
            self.doc(node.doc)
            self.key("fields")
            out.append("[")
            for i, fld in enumerate(node.fields):
                out.append(("," if i else "") + '{"name":' + json_string(fld.name) + ',"type":')
                self.write(fld.type)
                self.doc(fld.doc)
                if fld.has_default:
                    self.key("default")
                    json_text(fld.default, out)
                if fld.order != "ascending":
                    self.key("order")
                    out.append(json_string(fld.order))
                if fld.aliases:
                    self.key("aliases")
                    out.append("[" + ",".join(json_string(a) for a in fld.aliases) + "]")
                self.props(fld.props)
                out.append("}")
            out.append("]")
            self.props(node.props)
            self.aliases(node)
            self.space = saved
        elif isinstance(node, Enum):
            self.doc(node.doc)
            self.key("symbols")
            out.append("[" + ",".join(json_string(s) for s in node.symbols) + "]")
            if node.default is not None:
                self.key("default")
                out.append(json_string(node.default))
            self.props(node.props)
            self.aliases(node)
        else:
            self.doc(node.doc)
            self.key("size")
            out.append(str(node.size))
            self.props(node.props)
            self.aliases(node)
        out.append("}")


def to_json(node: Schema, known: list[Named]) -> str:
    """Avro's JSON for ``node``; the types in ``known`` are written by name, not inlined."""
    writer = _Writer(known)
    writer.write(node)
    return "".join(writer.out)


# --- normalized form: Confluent's AvroSchemaUtils.toNormalizedString -----------------------

_DROP = object()


def _default_object(value: Json, node: Schema | None) -> Json | F32 | object:
    """Avro's ``JacksonUtils.toObject(node, schema)``: a default as the Java value its type
    makes of it (``_DROP`` where Java makes none)."""
    if isinstance(node, UnionSchema):  # an empty union: as an untyped value
        node = node.branches[0] if node.branches else None
    kind = None if node is None else node.kind
    if value is None or isinstance(value, bool):
        return value
    if isinstance(value, int):
        if not -(1 << 63) <= value < (1 << 63):
            return _DROP
        if kind in (None, "int", "long"):
            return value
        if kind == "float":
            return F32(float(value))
        return float(value) if kind == "double" else _DROP
    if isinstance(value, float):
        if kind in (None, "double"):
            return value
        return F32(value) if kind == "float" else _DROP
    if isinstance(value, str):
        if kind in (None, "string", "enum"):
            return value
        if kind in ("bytes", "fixed"):
            return value.encode("latin-1", "replace").decode("latin-1")
        return _DROP
    if isinstance(value, list):
        items = node.items if isinstance(node, Array) else None
        return [_keep(_default_object(v, items)) for v in value]
    result: dict[str, Json | F32] = {}
    for key, item in value.items():
        sub: Schema | None = None
        if isinstance(node, Map):
            sub = node.values
        elif isinstance(node, Record) and key in node.by_name:
            sub = node.by_name[key].type
        result[key] = _keep(_default_object(item, sub))
    return result


def _keep(value: Json | F32 | object) -> Json | F32:
    return None if value is _DROP else value  # type: ignore[return-value]


def _sorted_props(props: dict[str, Json], out: list[str]) -> None:
    for key in sorted(props, key=java_order):
        out.append("," + json_string(key) + ":")
        json_text(props[key], out, sort_keys=True)


def _logical_props(logical: str, props: dict[str, Json], out: list[str]) -> None:
    out.append(',"logicalType":' + json_string(logical))
    if logical == "decimal":
        out.append(f',"precision":{props["precision"]}')
        scale = props.get("scale", 0)
        if scale:
            out.append(f',"scale":{scale}')


class _Normalizer:
    def __init__(self, known: list[Schema]) -> None:
        self.env: set[str] = {union_key(n) for n in known}
        self.out: list[str] = []

    def build(self, node: Schema) -> None:
        out = self.out
        if isinstance(node, UnionSchema):
            out.append("[")
            for i, branch in enumerate(node.branches):
                if i:
                    out.append(",")
                self.build(branch)
            out.append("]")
        elif isinstance(node, Array | Map):
            out.append('{"type":"array","items":' if isinstance(node, Array)
                       else '{"type":"map","values":')
            self.build(node.items if isinstance(node, Array) else node.values)
            _sorted_props(node.props, out)
            out.append("}")
        elif isinstance(node, Primitive):
            if node.logical is not None or node.props:
                out.append('{"type":' + json_string(node.kind))
                if node.logical is not None:
                    _logical_props(node.logical, node.props, out)
                _sorted_props(node.props, out)
                out.append("}")
            else:
                out.append(json_string(node.kind))
        else:
            self.named(node)

    def named(self, node: Named) -> None:
        out = self.out
        full = node.name.full
        if full in self.env:
            out.append(json_string(full))
            return
        self.env.add(full)
        out.append('{"name":' + json_string(full) + ',"type":' + json_string(node.kind))
        if isinstance(node, Enum):
            out.append(',"symbols":[' + ",".join(json_string(s) for s in node.symbols) + "]")
        elif isinstance(node, Fixed):
            out.append(f',"size":{node.size}')
            if node.logical is not None:
                _logical_props(node.logical, node.props, out)
        else:
            out.append(',"fields":[')
            for i, fld in enumerate(node.fields):
                out.append(("," if i else "") + '{"name":' + json_string(fld.name) + ',"type":')
                self.build(fld.type)
                out.append(',"order":' + json_string(fld.order.upper()))
                if fld.doc is not None:
                    out.append(',"doc":' + json_string(fld.doc))
                if fld.aliases:
                    out.append(',"aliases":[' + ",".join(
                        json_string(a) for a in sorted(set(fld.aliases), key=java_order)) + "]")
                if fld.has_default:
                    value = _default_object(fld.default, fld.type)
                    if value is not _DROP:
                        out.append(',"default":')
                        json_text(_keep(value), out, sort_keys=True)
                _sorted_props(fld.props, out)
                out.append("}")
            out.append("]")
        if node.doc:
            out.append(',"doc":' + json_string(node.doc))
        if node.aliases:
            fulls = sorted({a.full for a in node.aliases}, key=java_order)
            out.append(',"aliases":[' + ",".join(json_string(a) for a in fulls) + "]")
        if isinstance(node, Enum) and node.default is not None:
            out.append(',"default":' + json_string(node.default))
        _sorted_props(node.props, out)
        out.append("}")


def normalized_text(node: Schema, known: list[Schema]) -> str:
    """Confluent's normalized text of ``node``; ``known`` are the references' top-level
    types (written by full name)."""
    normalizer = _Normalizer(known)
    normalizer.build(node)
    return "".join(normalizer.out)
