"""The Protobuf schema model the registry works on: a `.proto` file as messages, fields,
oneofs, enums and options, built here from `.proto` text (via proto-schema-parser's AST)
and in :mod:`eddy.formats.protobuf.descriptor` from a ``FileDescriptorProto`` (the
``format=serialized`` form). Type names stay as
written; resolving them is the job of :mod:`eddy.formats.protobuf.schema`.

Every builder here is bounded: nesting deeper than ``MAX_DEPTH`` raises ``InvalidSchema``
before it is descended into.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Union

from proto_schema_parser import ast

from eddy.formats.base import MAX_DEPTH, InvalidSchema

SCALARS = frozenset({
    "double", "float", "int32", "int64", "uint32", "uint64", "sint32", "sint64",
    "fixed32", "fixed64", "sfixed32", "sfixed64", "bool", "string", "bytes",
})
#: the largest field number (2^29 - 1); "max" in a message's reserved or extension range
MAX_FIELD_NUMBER = (1 << 29) - 1
#: the largest enum value; "max" in an enum's reserved range
MAX_ENUM_NUMBER = (1 << 31) - 1


@dataclass(frozen=True, slots=True)
class EnumIdent:
    """An identifier used as an option value (an enum constant such as ``SPEED``)."""

    name: str


@dataclass(frozen=True, slots=True)
class MessageLit:
    """A text-format message literal as an option value: ``{ a: 1, b: "x" }``."""

    entries: tuple[tuple[str, OptionValue], ...]


OptionValue = Union[str, bool, int, float, EnumIdent, MessageLit, tuple["OptionValue", ...]]  # noqa: UP007


@dataclass(slots=True)
class OptionDef:
    """``option name = value;`` (``name`` keeps its parentheses for custom options)."""

    name: str
    value: OptionValue


@dataclass(slots=True)
class FieldDef:
    name: str
    number: int
    #: as written (``int32``, ``Foo.Bar``, ``.pkg.Foo``); for a map the value type
    type: str
    #: ``optional`` / ``required`` / ``repeated`` as written, None for none (and maps)
    label: str | None = None
    #: the key type of a ``map<K, V>`` field, None otherwise
    map_key: str | None = None
    options: list[OptionDef] = field(default_factory=list)
    #: how many nested messages were declared before this field (protoc's map entry order)
    nested_before: int = 0


@dataclass(slots=True)
class OneofDef:
    name: str
    fields: list[FieldDef] = field(default_factory=list)
    options: list[OptionDef] = field(default_factory=list)


@dataclass(slots=True)
class EnumValueDef:
    name: str
    number: int
    options: list[OptionDef] = field(default_factory=list)


@dataclass(slots=True)
class EnumDef:
    name: str
    values: list[EnumValueDef] = field(default_factory=list)
    options: list[OptionDef] = field(default_factory=list)
    #: inclusive ranges
    reserved_ranges: list[tuple[int, int]] = field(default_factory=list)
    reserved_names: list[str] = field(default_factory=list)


@dataclass(slots=True)
class ExtendDef:
    """``extend Type { fields }``."""

    extendee: str
    fields: list[FieldDef] = field(default_factory=list)


@dataclass(slots=True)
class MessageDef:
    name: str
    #: the fields outside any oneof, in declaration order
    fields: list[FieldDef] = field(default_factory=list)
    oneofs: list[OneofDef] = field(default_factory=list)
    messages: list[MessageDef] = field(default_factory=list)
    enums: list[EnumDef] = field(default_factory=list)
    options: list[OptionDef] = field(default_factory=list)
    reserved_ranges: list[tuple[int, int]] = field(default_factory=list)
    reserved_names: list[str] = field(default_factory=list)
    extension_ranges: list[tuple[int, int]] = field(default_factory=list)
    extends: list[ExtendDef] = field(default_factory=list)

    def all_fields(self) -> list[FieldDef]:
        """Every field, the oneofs' members included."""
        return self.fields + [f for o in self.oneofs for f in o.fields]


@dataclass(slots=True)
class MethodDef:
    name: str
    input_type: str
    output_type: str
    client_streaming: bool = False
    server_streaming: bool = False
    options: list[OptionDef] = field(default_factory=list)


@dataclass(slots=True)
class ServiceDef:
    name: str
    methods: list[MethodDef] = field(default_factory=list)
    options: list[OptionDef] = field(default_factory=list)


@dataclass(slots=True)
class ProtoFile:
    #: ``proto2`` / ``proto3``; None when the text has no syntax line (proto2 semantics)
    syntax: str | None = None
    package: str = ""
    imports: list[str] = field(default_factory=list)
    public_imports: list[str] = field(default_factory=list)
    weak_imports: list[str] = field(default_factory=list)
    options: list[OptionDef] = field(default_factory=list)
    messages: list[MessageDef] = field(default_factory=list)
    enums: list[EnumDef] = field(default_factory=list)
    services: list[ServiceDef] = field(default_factory=list)
    extends: list[ExtendDef] = field(default_factory=list)

    @property
    def is_proto3(self) -> bool:
        return self.syntax == "proto3"

    def all_imports(self) -> list[str]:
        return self.imports + self.public_imports + self.weak_imports


# --- numbers and strings as protobuf writes them -------------------------------------------

def parse_int(text: str, what: str) -> int:
    """A protobuf integer literal: decimal, ``0x`` hex or leading-zero octal, maybe signed."""
    s = text.strip()
    sign = 1
    if s[:1] in "+-" and s:
        sign = -1 if s[0] == "-" else 1
        s = s[1:]
    try:
        if s.lower().startswith("0x"):
            return sign * int(s[2:], 16)
        if len(s) > 1 and s.startswith("0"):
            return sign * int(s[1:], 8)
        return sign * int(s, 10)
    except ValueError:
        raise InvalidSchema(f"{what}: '{text}' is not an integer") from None


_ESCAPES = {"a": "\a", "b": "\b", "f": "\f", "n": "\n", "r": "\r", "t": "\t", "v": "\v",
            "\\": "\\", "'": "'", '"': '"', "?": "?"}


def unescape(raw: str) -> str:
    """A string literal's body (C-style escapes) as its value."""
    if "\\" not in raw:
        return raw
    out: list[str] = []
    i, n = 0, len(raw)
    while i < n:
        c = raw[i]
        if c != "\\" or i + 1 >= n:
            out.append(c)
            i += 1
            continue
        e = raw[i + 1]
        if e in _ESCAPES:
            out.append(_ESCAPES[e])
            i += 2
        elif e in "xX":
            j = i + 2
            while j < n and j < i + 4 and raw[j] in "0123456789abcdefABCDEF":
                j += 1
            out.append(chr(int(raw[i + 2:j], 16)) if j > i + 2 else e)
            i = j
        elif e in "01234567":
            j = i + 1
            while j < n and j < i + 4 and raw[j] in "01234567":
                j += 1
            out.append(chr(int(raw[i + 1:j], 8)))
            i = j
        elif e in "uU":
            width = 4 if e == "u" else 8
            digits = raw[i + 2:i + 2 + width]
            try:
                out.append(chr(int(digits, 16)))
            except ValueError:
                raise InvalidSchema(f"bad unicode escape in string '{raw[:40]}'") from None
            i += 2 + width
        else:
            out.append(e)
            i += 2
    return "".join(out)


def _parse_ranges(items: list[str], top: int, what: str) -> list[tuple[int, int]]:
    ranges: list[tuple[int, int]] = []
    for item in items:
        lo, sep, hi = item.partition(" to ")
        if not sep:
            lo, sep, hi = item.partition("to")
        start = parse_int(lo, what)
        end = start if not sep else (top if hi.strip() == "max" else parse_int(hi, what))
        if end < start:
            raise InvalidSchema(f"{what}: range {item} ends before it starts")
        ranges.append((start, end))
    return ranges


# --- from proto-schema-parser's AST --------------------------------------------------------

def _label(card: ast.FieldCardinality | None) -> str | None:
    return None if card is None else card.value.lower()


def _option_value(value: object, depth: int) -> OptionValue:
    if depth > MAX_DEPTH:
        raise InvalidSchema(f"option value nested deeper than {MAX_DEPTH}")
    if isinstance(value, bool | int | float):
        return value
    if isinstance(value, str):
        return unescape(value)
    if isinstance(value, ast.Identifier):
        return EnumIdent(value.name)
    if isinstance(value, ast.MessageLiteral):
        return MessageLit(tuple(
            (e.name, _option_value(e.value, depth + 1))
            for e in value.elements if isinstance(e, ast.MessageLiteralField)))
    if isinstance(value, list):
        return tuple(_option_value(v, depth + 1) for v in value)
    raise InvalidSchema(f"unsupported option value {value!r:.60}")


def _options(elements: Sequence[object]) -> list[OptionDef]:
    return [OptionDef(o.name, _option_value(o.value, 0))
            for o in elements if isinstance(o, ast.Option)]


def _field(f: ast.Field, nested_before: int) -> FieldDef:
    return FieldDef(f.name, f.number, f.type, _label(f.cardinality),
                    options=_options(f.options), nested_before=nested_before)


def _enum(e: ast.Enum) -> EnumDef:
    out = EnumDef(e.name)
    for el in e.elements:
        if isinstance(el, ast.EnumValue):
            out.values.append(EnumValueDef(el.name, el.number, _options(el.options)))
        elif isinstance(el, ast.Option):
            out.options.append(OptionDef(el.name, _option_value(el.value, 0)))
        elif isinstance(el, ast.EnumReserved):
            out.reserved_ranges += _parse_ranges(el.ranges, MAX_ENUM_NUMBER,
                                                 f"enum {e.name} reserved")
            out.reserved_names += [unescape(n) for n in el.names]
    return out


def _extend(e: ast.Extension) -> ExtendDef:
    out = ExtendDef(e.typeName)
    for el in e.elements:
        if isinstance(el, ast.Group):
            raise InvalidSchema(f"group {el.name}: groups are not supported")
        if isinstance(el, ast.Field):
            out.fields.append(_field(el, 0))
    return out


def _message(m: ast.Message, depth: int) -> MessageDef:
    if depth > MAX_DEPTH:
        raise InvalidSchema(f"message {m.name} is nested deeper than {MAX_DEPTH}")
    out = MessageDef(m.name)
    for el in m.elements:
        if isinstance(el, ast.Field):
            out.fields.append(_field(el, len(out.messages)))
        elif isinstance(el, ast.MapField):
            out.fields.append(FieldDef(el.name, el.number, el.value_type, None, el.key_type,
                                       _options(el.options), len(out.messages)))
        elif isinstance(el, ast.OneOf):
            oneof = OneofDef(el.name)
            for member in el.elements:
                if isinstance(member, ast.Group):
                    raise InvalidSchema(f"group {member.name}: groups are not supported")
                if isinstance(member, ast.Field):
                    if member.cardinality is not None:
                        raise InvalidSchema(f"oneof {el.name}: field {member.name} has a label")
                    oneof.fields.append(_field(member, len(out.messages)))
                elif isinstance(member, ast.Option):
                    oneof.options.append(OptionDef(member.name, _option_value(member.value, 0)))
            out.oneofs.append(oneof)
        elif isinstance(el, ast.Message):
            out.messages.append(_message(el, depth + 1))
        elif isinstance(el, ast.Enum):
            out.enums.append(_enum(el))
        elif isinstance(el, ast.Option):
            out.options.append(OptionDef(el.name, _option_value(el.value, 0)))
        elif isinstance(el, ast.Reserved):
            out.reserved_ranges += _parse_ranges(el.ranges, MAX_FIELD_NUMBER,
                                                 f"message {m.name} reserved")
            out.reserved_names += [unescape(n) for n in el.names]
        elif isinstance(el, ast.ExtensionRange):
            out.extension_ranges += _parse_ranges(el.ranges, MAX_FIELD_NUMBER,
                                                  f"message {m.name} extensions")
        elif isinstance(el, ast.Extension):
            out.extends.append(_extend(el))
        elif isinstance(el, ast.Group):
            raise InvalidSchema(f"group {el.name}: groups are not supported")
    return out


def from_ast(tree: ast.File) -> ProtoFile:
    """The model of a parsed `.proto` file."""
    if tree.edition is not None:
        raise InvalidSchema(f"edition {tree.edition!r}: editions are not supported")
    if tree.syntax is not None and tree.syntax not in ("proto2", "proto3"):
        raise InvalidSchema(f"unknown syntax '{tree.syntax}'")
    out = ProtoFile(syntax=tree.syntax)
    packages = 0
    for el in tree.file_elements:
        if isinstance(el, ast.Package):
            packages += 1
            if packages > 1:
                raise InvalidSchema("more than one package statement")
            out.package = el.name
        elif isinstance(el, ast.Import):
            target = (out.public_imports if el.public
                      else out.weak_imports if el.weak else out.imports)
            target.append(el.name)
        elif isinstance(el, ast.Option):
            out.options.append(OptionDef(el.name, _option_value(el.value, 0)))
        elif isinstance(el, ast.Message):
            out.messages.append(_message(el, 1))
        elif isinstance(el, ast.Enum):
            out.enums.append(_enum(el))
        elif isinstance(el, ast.Service):
            svc = ServiceDef(el.name)
            for se in el.elements:
                if isinstance(se, ast.Method):
                    svc.methods.append(MethodDef(
                        se.name, se.input_type.type, se.output_type.type,
                        se.input_type.stream, se.output_type.stream, _options(se.elements)))
                elif isinstance(se, ast.Option):
                    svc.options.append(OptionDef(se.name, _option_value(se.value, 0)))
            out.services.append(svc)
        elif isinstance(el, ast.Extension):
            out.extends.append(_extend(el))
    return out
