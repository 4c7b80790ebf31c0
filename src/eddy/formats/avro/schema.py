"""Avro schemas for the registry: parsing (with references), canonical and normalized forms.

``parse(text, references)`` follows Java Avro's ``Schema.Parser`` (what Confluent Schema
Registry runs), rule for rule: a type object needs a textual ``type``; names, field names,
enum symbols and aliases are ``[A-Za-z_][A-Za-z0-9_]*``; a record's fields, an enum's symbols
and a union's branches are unique; field defaults must match their type (a union's: its first
branch); unknown attributes are kept as properties; ``//`` and ``/* */`` comments are allowed.
The text is hostile (an HTTP body): its size is checked first, its nesting is measured without
recursion before the JSON parser sees it, and every failure is an ``InvalidSchema``.

References (Confluent's ``references``: other subjects' schemas whose named types this one
uses) are parsed first into the same name space; a reference needing another is parsed after
it whatever the mapping's order, and references that need each other are refused.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Mapping
from itertools import accumulate

from eddy.formats.avro.model import (
    PRIMITIVES,
    Array,
    Enum,
    Field,
    Fixed,
    Json,
    Map,
    Name,
    Named,
    Primitive,
    Record,
    Schema,
    UnionSchema,
    compact,
    make_name,
    normalized_text,
    to_json,
    union_key,
)
from eddy.formats.base import AVRO, MAX_DEPTH, MAX_SCHEMA_CHARS, InvalidSchema, References

#: JSON nesting allowed in a schema text: a schema level takes a few JSON levels (record
#: object, fields array, field object), defaults and properties add their own
MAX_JSON_DEPTH = 4 * MAX_DEPTH + 8
#: the longest error message (they quote pieces of the hostile text)
MAX_MESSAGE_CHARS = 1000

_SCHEMA_RESERVED = frozenset({"doc", "fields", "items", "name", "namespace", "size", "symbols",
                              "values", "type", "aliases"})
_ENUM_RESERVED = _SCHEMA_RESERVED | {"default"}
_FIELD_RESERVED = frozenset({"default", "doc", "name", "order", "type", "aliases"})
_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_STRING = re.compile(r'"[^"\\]*(?:\\.[^"\\]*)*"', re.S)
_STRING_OR_COMMENT = re.compile(r'("[^"\\]*(?:\\.[^"\\]*)*")|/\*.*?\*/|//[^\n\r]*', re.S)
_NOT_BRACKET = re.compile(r"[^\[\]{}]+")
_JAVA_DOUBLE = re.compile(r"[+-]?(?:NaN|Infinity|(?:\d+\.?\d*|\.\d+)(?:[eE][+-]?\d+)?[fFdD]?)")
_INT_RANGE = {"int": 1 << 31, "long": 1 << 63}
_LOGICAL_KINDS = {"date": "int", "time-millis": "int", "time-micros": "long",
                  "timestamp-millis": "long", "timestamp-micros": "long",
                  "timestamp-nanos": "long", "local-timestamp-millis": "long",
                  "local-timestamp-micros": "long", "local-timestamp-nanos": "long",
                  "uuid": "string", "big-decimal": "bytes"}


def _reject_constant(name: str) -> Json:
    raise ValueError(f"non-standard JSON number {name}")


def load_json(text: str, what: str = "schema", limit: int | None = MAX_SCHEMA_CHARS) -> Json:
    """The JSON value of ``text`` (comments allowed, as Avro's parser does), refused when
    longer than MAX_SCHEMA_CHARS or nested deeper than MAX_JSON_DEPTH, measured first."""
    if not isinstance(text, str):
        raise InvalidSchema(f"{what} is not a string")
    if limit is not None and len(text) > limit:
        raise InvalidSchema(f"{what} is {len(text)} characters, more than {limit}")
    if "/" in text:
        text = _STRING_OR_COMMENT.sub(lambda m: m.group(1) or " ", text)
    brackets = _NOT_BRACKET.sub("", _STRING.sub("", text))
    if brackets:
        deepest = max(accumulate(1 if c in "[{" else -1 for c in brackets))
        if deepest > MAX_JSON_DEPTH:
            raise InvalidSchema(f"{what} nests deeper than {MAX_JSON_DEPTH} JSON levels")
    try:
        value: Json = json.loads(text, parse_constant=_reject_constant)
    except (ValueError, RecursionError) as exc:
        raise InvalidSchema(f"{what} is not valid JSON: {exc}") from None
    return value


def _text(node: Json, key: str) -> str | None:
    """Java's ``getOptionalText``: the attribute when it is a JSON string, else None."""
    if isinstance(node, dict):
        value = node.get(key)
        if isinstance(value, str):
            return value
    return None


def _required(node: Json, key: str, error: str) -> str:
    value = _text(node, key)
    if value is None:
        raise InvalidSchema(f"{error}: {_short(node)}")
    return value


def _short(node: Json) -> str:
    text = compact(node)
    return text if len(text) <= 200 else text[:200] + "..."


def _check_name(name: str | None, what: str = "name") -> str:
    if name is None:
        raise InvalidSchema(f"Null {what}")
    if not name:
        raise InvalidSchema(f"Empty {what}")
    if not _NAME.fullmatch(name):
        raise InvalidSchema(f"Illegal character in {what}: {name!r}")
    return name


def _aliases(node: dict[str, Json]) -> list[str] | None:
    value = node.get("aliases")
    if value is None:
        return None
    if not isinstance(value, list):
        raise InvalidSchema(f"aliases not an array: {_short(node)}")
    result: list[str] = []
    for alias in value:
        if not isinstance(alias, str):
            raise InvalidSchema(f"alias not a string: {_short(alias)}")
        if alias not in result:
            result.append(alias)
    return result


def _logical(kind: str, props: dict[str, Json], size: int = 0) -> str | None:
    """The logical type Java Avro recognizes in ``props`` (an invalid one is ignored)."""
    name = props.get("logicalType")
    if not isinstance(name, str):
        return None
    if name == "decimal":
        precision, scale = props.get("precision"), props.get("scale", 0)
        if (kind not in ("bytes", "fixed") or type(precision) is not int
                or type(scale) is not int or not 0 < precision < (1 << 31)
                or not 0 <= scale <= precision):
            return None
        if kind == "fixed" and precision > math.floor(math.log10(2) * (8 * size - 1)):
            return None
        return name
    if name == "duration":
        return name if kind == "fixed" and size == 12 else None
    return name if _LOGICAL_KINDS.get(name) == kind else None


def valid_default(node: Schema, value: Json) -> bool:
    """Java Avro's ``isValidDefault`` (a union's default matches its first branch)."""
    if isinstance(node, UnionSchema):  # an empty union has no value to default to
        return bool(node.branches) and valid_default(node.branches[0], value)
    kind = node.kind
    if kind in ("string", "bytes", "enum", "fixed"):
        return isinstance(value, str)
    if kind in ("int", "long"):
        limit = _INT_RANGE[kind]
        return type(value) is int and -limit <= value < limit
    if kind in ("float", "double"):
        return type(value) in (int, float)
    if kind == "boolean":
        return isinstance(value, bool)
    if kind == "null":
        return value is None
    if isinstance(node, Array):
        return isinstance(value, list) and all(valid_default(node.items, v) for v in value)
    if isinstance(node, Map):
        return isinstance(value, dict) and all(valid_default(node.values, v)
                                               for v in value.values())
    if isinstance(node, Record):
        if not isinstance(value, dict):
            return False
        for fld in node.fields:
            if fld.name in value:
                if not valid_default(fld.type, value[fld.name]):
                    return False
            elif not fld.has_default or not valid_default(fld.type, fld.default):
                return False
        return True
    return False


class _Context:
    """What all documents of one parse share: the named types, who defined them, and the
    references still to parse."""

    def __init__(self, references: Mapping[str, Json], is_new: bool) -> None:
        self.is_new = is_new
        self.names: dict[str, Named] = {}
        self.owner: dict[str, str | None] = {}
        self.documents = references
        self.defined_by: dict[str, str] = {}
        for key, doc in references.items():
            for full in _declared_names(doc):
                self.defined_by.setdefault(full, key)
        self.roots: dict[str, Schema] = {}
        self.stack: list[str | None] = []

    def parse_document(self, key: str | None, doc: Json) -> Schema:
        self.stack.append(key)
        try:
            return _Parser(self, key).parse(doc)
        except InvalidSchema as exc:
            if key is None or str(exc).startswith("reference "):
                raise
            raise InvalidSchema(f"reference {key!r}: {exc}") from None
        finally:
            self.stack.pop()

    def parse_reference(self, key: str) -> None:
        if key not in self.roots and key not in self.stack:
            self.roots[key] = self.parse_document(key, self.documents[key])

    def lookup(self, full: str, current: str | None) -> Named | None:
        """The named type ``full`` as seen from document ``current``: parses the reference
        defining it first if need be; refuses a type of a document still being parsed."""
        node = self.names.get(full)
        if node is None:
            key = self.defined_by.get(full)
            if key is None or key == current:
                return None
            if key in self.stack:
                self._cycle(key, full)
            self.parse_reference(key)
            node = self.names.get(full)
            if node is None:
                return None
        owner = self.owner[full]
        if owner != current and owner in self.stack:
            self._cycle(owner, full)
        return node

    def _cycle(self, key: str | None, full: str) -> None:
        start = self.stack.index(key)
        path = " -> ".join(repr(k) if k is not None else "<schema>"
                           for k in [*self.stack[start:], key])
        raise InvalidSchema(f"cyclic references: {path} (through {full!r})")


def _declared_names(doc: Json, space: str | None = None, depth: int = 0) -> list[str]:
    """The full names of the named types a document declares (to find which reference
    defines a name before parsing it)."""
    found: list[str] = []
    if depth > MAX_JSON_DEPTH:
        return found
    if isinstance(doc, list):
        for item in doc:
            found += _declared_names(item, space, depth + 1)
    elif isinstance(doc, dict):
        kind, name = doc.get("type"), doc.get("name")
        if kind in ("record", "error", "enum", "fixed") and isinstance(name, str):
            declared = make_name(name, _text(doc, "namespace") or space)
            found.append(declared.full)
            space = declared.space
        if not isinstance(kind, str):
            found += _declared_names(kind, space, depth + 1)
        fields = doc.get("fields")
        for fld in fields if isinstance(fields, list) else []:
            if isinstance(fld, dict):
                found += _declared_names(fld.get("type"), space, depth + 1)
        for key in ("items", "values"):
            found += _declared_names(doc.get(key), space, depth + 1)
    return found


class _Parser:
    """Java's ``Schema.parse(JsonNode, Names)`` for one document."""

    def __init__(self, context: _Context, key: str | None) -> None:
        self.context = context
        self.key = key
        self.space: str | None = None
        self.depth = 0

    def get(self, ref: str) -> Schema | None:
        if ref in PRIMITIVES:
            return Primitive(ref)
        found = self.context.lookup(make_name(ref, self.space).full, self.key)
        if found is None:
            found = self.context.lookup(make_name(ref, None).full, self.key)
        return found

    def parse(self, node: Json) -> Schema:
        if isinstance(node, str):
            found = self.get(node)
            if found is None:
                raise InvalidSchema(f"Undefined name: {_short(node)}")
            return found
        if not isinstance(node, dict | list):
            raise InvalidSchema(f"Schema not yet supported: {_short(node)}")
        self.depth += 1
        if self.depth > MAX_DEPTH:
            raise InvalidSchema(f"schema nests deeper than {MAX_DEPTH} levels")
        try:
            return self.parse_object(node) if isinstance(node, dict) else self.parse_union(node)
        finally:
            self.depth -= 1

    def parse_union(self, node: list[Json]) -> Schema:
        branches = [self.parse(item) for item in node]
        seen: set[str] = set()
        for branch in branches:
            if isinstance(branch, UnionSchema):
                raise InvalidSchema(f"Nested union: {_short(node)}")
            key = union_key(branch)
            if key in seen:
                raise InvalidSchema(f"Duplicate in union: {key}")
            seen.add(key)
        return UnionSchema(branches)

    def declare(self, node: dict[str, Json]) -> tuple[Name, str | None]:
        space = _text(node, "namespace")
        name = make_name(_required(node, "name", "No name in schema"),
                         self.space if space is None else space)
        _check_name(name.name)
        if self.context.is_new and name.space is not None:
            for part in name.space.split("."):
                _check_name(part, "namespace")
        if name.full in PRIMITIVES:
            raise InvalidSchema(f"Schemas may not be named after primitives: {name.full}")
        return name, _text(node, "doc")

    def register(self, named: Named) -> None:
        full = named.name.full
        if full in self.context.names:
            raise InvalidSchema(f"Can't redefine: {full}")
        self.context.names[full] = named
        self.context.owner[full] = self.key

    def parse_object(self, node: dict[str, Json]) -> Schema:
        kind = _required(node, "type", "No type")
        saved = self.space
        result: Primitive | Record | Enum | Fixed | Array | Map
        if kind in PRIMITIVES:
            result = Primitive(kind)
        elif kind in ("record", "error", "enum", "fixed"):
            name, doc = self.declare(node)
            self.space = name.space
            if kind == "enum":
                result = self.parse_enum(node, name, doc)
            elif kind == "fixed":
                size = node.get("size")
                if type(size) is not int or not -(1 << 31) <= size < (1 << 31):
                    raise InvalidSchema(f"Invalid or no size: {_short(node)}")
                if size < 0:
                    raise InvalidSchema(f"Invalid fixed size: {size}")
                result = Fixed(name, doc, size)
                self.register(result)
            else:
                result = self.parse_record(node, name, doc, kind == "error")
        elif kind == "array":
            if "items" not in node:
                raise InvalidSchema(f"Array has no items type: {_short(node)}")
            result = Array(self.parse(node["items"]))
        elif kind == "map":
            if "values" not in node:
                raise InvalidSchema(f"Map has no values type: {_short(node)}")
            result = Map(self.parse(node["values"]))
        else:
            found = self.context.lookup(make_name(kind, self.space).full, self.key)
            if found is None:
                raise InvalidSchema(f"Type not supported: {kind}")
            return found
        self.space = saved
        reserved = _ENUM_RESERVED if kind == "enum" else _SCHEMA_RESERVED
        result.props = {k: v for k, v in node.items() if k not in reserved}
        if isinstance(result, Primitive):
            result.logical = _logical(result.kind, result.props)
        elif isinstance(result, Fixed):
            result.logical = _logical("fixed", result.props, result.size)
        if isinstance(result, Record | Enum | Fixed):
            space = result.name.space
            for alias in _aliases(node) or []:
                parsed = make_name(alias, space)
                _check_name(parsed.name, "alias")
                if parsed not in result.aliases:
                    result.aliases.append(parsed)
        return result

    def parse_enum(self, node: dict[str, Json], name: Name, doc: str | None) -> Enum:
        symbols = node.get("symbols")
        if not isinstance(symbols, list):
            raise InvalidSchema(f"Enum has no symbols: {_short(node)}")
        checked: list[str] = []
        for symbol in symbols:
            text = _check_name(symbol if isinstance(symbol, str) else None, "enum symbol")
            if text in checked:
                raise InvalidSchema(f"Duplicate enum symbol: {text}")
            checked.append(text)
        default = _text(node, "default")
        if default is not None and default not in checked:
            raise InvalidSchema(f"The Enum Default: {default} is not in the enum symbol set: "
                                f"[{', '.join(checked)}]")
        result = Enum(name, doc, checked, default)
        self.register(result)
        return result

    def parse_record(self, node: dict[str, Json], name: Name, doc: str | None,
                     is_error: bool) -> Record:
        result = Record(name, doc, is_error)
        self.register(result)
        fields = node.get("fields")
        if not isinstance(fields, list):
            raise InvalidSchema(f"Record has no fields: {_short(node)}")
        for pos, fld in enumerate(fields):
            parsed = self.parse_field(fld, pos)
            if parsed.name in result.by_name:
                raise InvalidSchema(f"Duplicate field {parsed.name} in record {name.full}")
            result.by_name[parsed.name] = parsed
            result.fields.append(parsed)
        return result

    def parse_field(self, node: Json, pos: int) -> Field:
        name = _required(node, "name", "No field name")
        assert isinstance(node, dict)
        type_node = node.get("type")
        if type_node is None:
            raise InvalidSchema(f"No field type: {_short(node)}")
        if isinstance(type_node, str) and self.get(type_node) is None:
            raise InvalidSchema(f'{_short(type_node)} is not a defined name. The type of the '
                                f'"{name}" field must be a defined name or a '
                                '{"type": ...} expression.')
        schema = self.parse(type_node)
        order = node.get("order", "ascending")
        if not isinstance(order, str) or order.lower() not in ("ascending", "descending",
                                                                "ignore"):
            raise InvalidSchema(f"Invalid order of field {name}: {_short(order)}")
        has_default = "default" in node
        default = node.get("default")
        if schema.kind in ("float", "double") and isinstance(default, str):
            if not _JAVA_DOUBLE.fullmatch(default.strip()):
                raise InvalidSchema(f"Invalid default for field {name}: {compact(default)}")
            default = float(default.strip().rstrip("fFdD"))
        if has_default and self.context.is_new and not valid_default(schema, default):
            raise InvalidSchema(f"Invalid default for field {name}: {_short(default)} "
                                f"not a {to_json(schema, [])[:200]}")
        props = {k: v for k, v in node.items() if k not in _FIELD_RESERVED}
        return Field(_check_name(name, "field name"), schema, _text(node, "doc"), has_default,
                     default, order.lower(), _aliases(node) or [], props, pos)


class AvroSchema:
    """A parsed Avro schema (implements ``formats.ParsedSchema``)."""

    schema_type = AVRO

    def __init__(self, root: Schema, text: str, references: References,
                 ref_roots: list[Schema], is_new: bool) -> None:
        self.root = root
        self.text = text
        self.references = references
        self.ref_roots = ref_roots
        self.is_new = is_new
        self._canonical: str | None = None

    @property
    def name(self) -> str | None:
        """Confluent's ``name()``: the full name of a top-level record, else None."""
        return self.root.name.full if isinstance(self.root, Record) else None

    def named_types(self) -> list[str]:
        """The full names of the named types this schema itself defines."""
        return _declared_names(load_json(self.text))

    def canonical(self) -> str:
        """Confluent's ``canonicalString()``: the references' top-level types by name."""
        if self._canonical is None:
            known = [r for r in self.ref_roots if isinstance(r, Record | Enum | Fixed)]
            self._canonical = to_json(self.root, known)
        return self._canonical

    def resolved(self) -> str:
        """Confluent's ``format=resolved``: every referenced type written inline."""
        return to_json(self.root, [])

    def normalized(self) -> str:
        """``normalize=true``: Confluent's normalized text, parsed again, canonical."""
        text = normalized_text(self.root, self.ref_roots)
        return _parse(text, self.references, self.is_new, None).canonical()

    def __repr__(self) -> str:
        return f"AvroSchema({self.canonical()[:80]!r})"


def parse(text: str, references: References | None = None, *,
          is_new: bool = True) -> AvroSchema:
    """Parses an Avro schema text; ``references`` maps each reference's name to its schema
    text. ``is_new`` (a registration, Confluent's ``isNew``) also checks field defaults and
    namespaces; schemas read back from ``_schemas`` are parsed with it off."""
    try:
        return _parse(text, references, is_new, MAX_SCHEMA_CHARS)
    except InvalidSchema as exc:
        message = str(exc)
        if len(message) <= MAX_MESSAGE_CHARS:
            raise
        raise InvalidSchema(message[:MAX_MESSAGE_CHARS] + "...") from None


def _parse(text: str, references: References | None, is_new: bool,
           limit: int | None) -> AvroSchema:
    refs = dict(references or {})
    if len(refs) > 10_000:
        raise InvalidSchema(f"{len(refs)} references, more than 10000")
    loaded = {key: load_json(value, f"reference {key!r}") for key, value in refs.items()}
    doc = load_json(text, limit=limit)
    context = _Context(loaded, is_new)
    for key in loaded:
        context.parse_reference(key)
    root = context.parse_document(None, doc)
    return AvroSchema(root, text, refs, [context.roots[k] for k in loaded], is_new)
