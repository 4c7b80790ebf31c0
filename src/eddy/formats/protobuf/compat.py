"""Confluent's Protobuf compatibility rules: the differences between a writer's schema (the
"original") and a reader's (the "update"), matched by message name and field number, and
which of them break a reader.

Difference types and paths are Confluent's (``#/Message/2``, ``#/Message/oneof/3``,
``#/Enum/1``). Compatible changes: PACKAGE_CHANGED, MESSAGE_ADDED, MESSAGE_MOVED,
ENUM_ADDED, ENUM_REMOVED, ENUM_CONST_ADDED/CHANGED/REMOVED, FIELD_ADDED, FIELD_REMOVED,
FIELD_NAME_CHANGED, FIELD_STRING_OR_BYTES_LABEL_CHANGED, ONEOF_ADDED, ONEOF_REMOVED,
ONEOF_FIELD_ADDED, ONEOF_FIELD_MOVED_TO_TOP_LEVEL. Everything else (MESSAGE_REMOVED,
FIELD_KIND_CHANGED, FIELD_SCALAR_KIND_CHANGED, FIELD_NAMED_TYPE_CHANGED,
FIELD_NUMERIC_LABEL_CHANGED, REQUIRED_FIELD_ADDED, REQUIRED_FIELD_REMOVED, ONEOF_FIELD_REMOVED,
MULTIPLE_FIELDS_MOVED_TO_ONEOF, FIELD_MOVED_TO_EXISTING_ONEOF) is an incompatibility.

Scalars are compared by wire-compatible group: int32/int64/uint32/uint64/bool and enums,
sint32/sint64, fixed32/sfixed32, fixed64/sfixed64, float, double, string/bytes.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from eddy.formats.base import MAX_DEPTH, Incompatibility
from eddy.formats.protobuf.model import SCALARS, EnumDef, FieldDef, MessageDef
from eddy.formats.protobuf.printer import Printer
from eddy.formats.protobuf.schema import ProtobufSchema, TypeInfo

COMPATIBLE_CHANGES = frozenset({
    "PACKAGE_CHANGED", "MESSAGE_ADDED", "MESSAGE_MOVED", "ENUM_ADDED", "ENUM_REMOVED",
    "ENUM_CONST_ADDED", "ENUM_CONST_CHANGED", "ENUM_CONST_REMOVED", "FIELD_ADDED",
    "FIELD_REMOVED", "FIELD_NAME_CHANGED", "FIELD_STRING_OR_BYTES_LABEL_CHANGED",
    "ONEOF_ADDED", "ONEOF_REMOVED", "ONEOF_FIELD_ADDED", "ONEOF_FIELD_MOVED_TO_TOP_LEVEL",
})

#: Confluent's descriptions (``protobuf.diff.Difference``); ``{p}`` is the path, ``{r}`` the
#: reader's label and ``{w}`` the writer's ("new"/"old" for BACKWARD, "old"/"new" for
#: FORWARD). REQUIRED_FIELD_ADDED's double space is Confluent's.
_DESCRIPTIONS = {
    "PACKAGE_CHANGED": "The package at '{p}' in the {r} schema does not match the package "
                       "in the {w} schema",
    "MESSAGE_REMOVED": "The {r} schema is missing a MESSAGE type at path '{p}' in the {w} "
                       "schema",
    "FIELD_KIND_CHANGED": "The type of a field at path '{p}' in the {r} schema does not "
                          "match the {w} schema",
    "FIELD_SCALAR_KIND_CHANGED": "The kind of a SCALAR field at path '{p}' in the {r} "
                                 "schema does not match its kind in the {w} schema",
    "FIELD_NAMED_TYPE_CHANGED": "The type of a MESSAGE field at path '{p}' in the {r} "
                                "schema does not match its type in the {w} schema",
    "FIELD_NUMERIC_LABEL_CHANGED": "The label for a NUMERIC field at path '{p}' in the {r} "
                                   "schema does not match its label in the {w} schema",
    "REQUIRED_FIELD_ADDED": "A required field  at path '{p}' in the {r} schema is missing "
                            "in the {w} schema",
    "REQUIRED_FIELD_REMOVED": "The {r} schema is missing a required field at path: '{p}' "
                              "in the {w} schema",
    "ONEOF_FIELD_REMOVED": "The {r} schema is missing a oneof field at path '{p}' in the "
                           "{w} schema",
    "MULTIPLE_FIELDS_MOVED_TO_ONEOF": "Multiple fields in the oneof at path '{p}' in the "
                                      "{r} schema are outside a oneof in the {w} schema",
    "FIELD_MOVED_TO_EXISTING_ONEOF": "A field in the oneof at path '{p}' in the {r} schema "
                                     "is outside an existing oneof in the {w} schema",
}


@dataclass(frozen=True, slots=True)
class ProtobufIncompatibility(Incompatibility):
    """An ``Incompatibility`` that also words itself as Confluent's verbose line."""

    def confluent_message(self, reader_label: str = "new", writer_label: str = "old") -> str:
        """Confluent's line: ``{errorType:"...", description:"..."}`` (double quotes, no
        additionalInfo: Protobuf's ``Difference.toString``)."""
        text = _DESCRIPTIONS.get(self.error_type, "")
        description = text.format(p=self.path, r=reader_label, w=writer_label)
        return f'{{errorType:"{self.error_type}", description:"{description}"}}'


_SCALAR_GROUP = {
    "int32": "GENERAL_NUMBER", "int64": "GENERAL_NUMBER", "uint32": "GENERAL_NUMBER",
    "uint64": "GENERAL_NUMBER", "bool": "GENERAL_NUMBER", "sint32": "SIGNED_NUMBER",
    "sint64": "SIGNED_NUMBER", "string": "STRING_OR_BYTES", "bytes": "STRING_OR_BYTES",
    "fixed32": "FIXED32", "sfixed32": "FIXED32", "fixed64": "FIXED64", "sfixed64": "FIXED64",
    "float": "FLOAT", "double": "DOUBLE",
}


def _difference(kind: str, path: str) -> Incompatibility:
    text = _DESCRIPTIONS.get(kind, kind.replace("_", " ").lower() + " at '{p}'")
    return ProtobufIncompatibility(kind, path, text.format(p=path, r="reader", w="writer"))


@dataclass(frozen=True, slots=True)
class _Type:
    """A field's type resolved: kind SCALAR (scalars and enums), MESSAGE or MAP."""

    kind: str
    #: the scalar group, the written name of an unresolved message, or ""
    name: str = ""
    info: TypeInfo | None = None
    key: _Type | None = None
    value: _Type | None = None


@dataclass(slots=True)
class _Ctx:
    orig: ProtobufSchema
    upd: ProtobufSchema
    path: list[str] = field(default_factory=list)
    diffs: list[Incompatibility] = field(default_factory=list)
    visiting: set[str] = field(default_factory=set)
    depth: int = 0

    def add(self, kind: str, *extra: str) -> None:
        self.diffs.append(_difference(kind, "#/" + "/".join([*self.path, *extra])))


def _resolve(schema: ProtobufSchema, name: str, scope: str) -> _Type:
    if name in SCALARS:
        return _Type("SCALAR", _SCALAR_GROUP[name])
    info = schema.resolve(name, scope)
    if info is None:
        return _Type("MESSAGE", name.lstrip("."))
    if info.kind == "enum":
        return _Type("SCALAR", "GENERAL_NUMBER", info)
    return _Type("MESSAGE", info.full_name, info)


def _field_type(schema: ProtobufSchema, f: FieldDef, scope: str) -> _Type:
    value = _resolve(schema, f.type, scope)
    if f.map_key is None:
        return value
    return _Type("MAP", key=_resolve(schema, f.map_key, scope), value=value)


def _local(info: TypeInfo) -> str:
    prefix = info.package + "." if info.package else ""
    return info.full_name[len(prefix):] if info.full_name.startswith(prefix) else info.full_name


def _types(ctx: _Ctx, ol: str | None, ul: str | None, ot: _Type, ut: _Type) -> None:
    if ot.kind != ut.kind:
        ctx.add("FIELD_KIND_CHANGED")
    elif ot.kind == "SCALAR":
        if ot.name != ut.name:
            ctx.add("FIELD_SCALAR_KIND_CHANGED")
        elif ol is not None and ul is not None and ol != ul:
            ctx.add("FIELD_STRING_OR_BYTES_LABEL_CHANGED" if ot.name == "STRING_OR_BYTES"
                    else "FIELD_NUMERIC_LABEL_CHANGED")
    elif ot.kind == "MAP":
        assert ot.key and ut.key and ot.value and ut.value
        _types(ctx, None, None, ot.key, ut.key)
        _types(ctx, None, None, ot.value, ut.value)
    else:
        _message_types(ctx, ot, ut)


def _message_types(ctx: _Ctx, ot: _Type, ut: _Type) -> None:
    if ot.info is None or ut.info is None:
        if ot.name != ut.name:
            ctx.add("FIELD_NAMED_TYPE_CHANGED")
        return
    local = _local(ot.info)
    if local != _local(ut.info):
        ctx.add("FIELD_NAMED_TYPE_CHANGED")
        return
    if (ot.info.file, ot.info.origin) == (ut.info.file, ut.info.origin):
        return  # the same file on both sides (the schema's own types are compared in place)
    om, um = ot.info.message, ut.info.message
    assert om is not None and um is not None
    if ot.info.full_name in ctx.visiting:
        return
    if ctx.depth >= MAX_DEPTH:  # too deep to walk: equal text or incompatible
        printer = Printer(False)
        if printer.message(om, ["x"]) != printer.message(um, ["x"]):
            ctx.add("FIELD_NAMED_TYPE_CHANGED")
        return
    sub = _Ctx(ctx.orig, ctx.upd, local.split("."), [], ctx.visiting, ctx.depth + 1)
    _message(sub, om, um, ot.info.full_name, ut.info.full_name)
    ctx.diffs += sub.diffs
    if any(d.error_type not in COMPATIBLE_CHANGES for d in sub.diffs):
        ctx.add("FIELD_NAMED_TYPE_CHANGED")


def _field(ctx: _Ctx, of: FieldDef, uf: FieldDef, oscope: str, uscope: str) -> None:
    if of.name != uf.name:
        ctx.add("FIELD_NAME_CHANGED")
    _types(ctx, of.label, uf.label, _field_type(ctx.orig, of, oscope),
           _field_type(ctx.upd, uf, uscope))


def _collect(m: MessageDef) -> tuple[dict[int, FieldDef], dict[int, str], dict[str, list[int]]]:
    by_tag = {f.number: f for f in m.fields}
    tag_oneof: dict[int, str] = {}
    oneofs: dict[str, list[int]] = {}
    for o in m.oneofs:
        oneofs[o.name] = [f.number for f in o.fields]
        for f in o.fields:
            by_tag[f.number] = f
            tag_oneof[f.number] = o.name
    return by_tag, tag_oneof, oneofs


def _message(ctx: _Ctx, o: MessageDef, u: MessageDef, ofull: str, ufull: str) -> None:
    if ofull in ctx.visiting:
        return
    ctx.visiting.add(ofull)
    try:
        _message_fields(ctx, o, u, ofull, ufull)
    finally:
        ctx.visiting.discard(ofull)
    _types_in(ctx, o.messages, o.enums, u.messages, u.enums, ofull, ufull)


def _message_fields(ctx: _Ctx, o: MessageDef, u: MessageDef, ofull: str, ufull: str) -> None:
    o_tags, o_oneof, o_oneofs = _collect(o)
    u_tags, u_oneof, u_oneofs = _collect(u)
    gone = {name for name, tags in o_oneofs.items()
            if name not in u_oneofs and not any(t in u_tags for t in tags)}
    for uo in u.oneofs:  # fields that were independent and are now mutually exclusive
        origins: set[str] = set()
        moved_in = 0
        for f in uo.fields:
            if f.number in o_oneof:
                origins.add("oneof:" + o_oneof[f.number])
            elif f.number in o_tags:
                origins.add(f"field:{f.number}")
                moved_in += 1
        if len(origins) > 1:
            ctx.add("MULTIPLE_FIELDS_MOVED_TO_ONEOF" if moved_in > 1
                    else "FIELD_MOVED_TO_EXISTING_ONEOF", uo.name)
    for name in sorted(set(o_oneofs) | set(u_oneofs)):
        if name not in u_oneofs:
            ctx.add("ONEOF_REMOVED", name)
        elif name not in o_oneofs:
            ctx.add("ONEOF_ADDED", name)
    for tag in sorted(set(o_tags) | set(u_tags)):
        of, uf = o_tags.get(tag), u_tags.get(tag)
        if uf is None:
            assert of is not None
            if tag in o_oneof:
                if o_oneof[tag] not in gone:
                    ctx.add("ONEOF_FIELD_REMOVED", o_oneof[tag], str(tag))
            else:
                ctx.add("REQUIRED_FIELD_REMOVED" if of.label == "required"
                        else "FIELD_REMOVED", str(tag))
        elif of is None:
            if tag in u_oneof:
                ctx.add("ONEOF_FIELD_ADDED", u_oneof[tag], str(tag))
            else:
                ctx.add("REQUIRED_FIELD_ADDED" if uf.label == "required"
                        else "FIELD_ADDED", str(tag))
        else:
            if tag in o_oneof and tag not in u_oneof:
                ctx.add("ONEOF_FIELD_MOVED_TO_TOP_LEVEL", str(tag))
            extra = [u_oneof[tag], str(tag)] if tag in u_oneof else [str(tag)]
            ctx.path += extra
            try:
                _field(ctx, of, uf, ofull, ufull)
            finally:
                del ctx.path[-len(extra):]


def _enum(ctx: _Ctx, o: EnumDef, u: EnumDef) -> None:
    o_by = {v.number: v.name for v in o.values}
    u_by = {v.number: v.name for v in u.values}
    for tag in sorted(set(o_by) | set(u_by)):
        if tag not in u_by:
            ctx.add("ENUM_CONST_REMOVED", str(tag))
        elif tag not in o_by:
            ctx.add("ENUM_CONST_ADDED", str(tag))
        elif o_by[tag] != u_by[tag]:
            ctx.add("ENUM_CONST_CHANGED", str(tag))


def _types_in(ctx: _Ctx, om: list[MessageDef], oe: list[EnumDef], um: list[MessageDef],
              ue: list[EnumDef], oscope: str, uscope: str) -> None:
    o_msgs = {m.name: (i, m) for i, m in enumerate(om)}
    u_msgs = {m.name: (i, m) for i, m in enumerate(um)}
    for name in [*o_msgs, *(n for n in u_msgs if n not in o_msgs)]:
        ctx.path.append(name)
        try:
            if name not in u_msgs:
                ctx.add("MESSAGE_REMOVED")
            elif name not in o_msgs:
                ctx.add("MESSAGE_ADDED")
            else:
                (oi, o), (ui, u) = o_msgs[name], u_msgs[name]
                _message(ctx, o, u, _join(oscope, name), _join(uscope, name))
                if oi != ui:
                    ctx.add("MESSAGE_MOVED")
        finally:
            ctx.path.pop()
    o_enums = {e.name: e for e in oe}
    u_enums = {e.name: e for e in ue}
    for name in [*o_enums, *(n for n in u_enums if n not in o_enums)]:
        ctx.path.append(name)
        if name not in u_enums:
            ctx.add("ENUM_REMOVED")
        elif name not in o_enums:
            ctx.add("ENUM_ADDED")
        else:
            _enum(ctx, o_enums[name], u_enums[name])
        ctx.path.pop()


def _join(scope: str, name: str) -> str:
    return f"{scope}.{name}" if scope else name


def differences(writer: ProtobufSchema, reader: ProtobufSchema) -> list[Incompatibility]:
    """Every difference Confluent's diff reports (compatible ones included), from the
    writer's schema (the original) to the reader's (the update)."""
    ctx = _Ctx(writer, reader)
    if writer.package != reader.package:
        ctx.add("PACKAGE_CHANGED")
    _types_in(ctx, writer.model.messages, writer.model.enums, reader.model.messages,
              reader.model.enums, writer.package, reader.package)
    return ctx.diffs


def compatibility(reader: ProtobufSchema, writer: ProtobufSchema) -> list[Incompatibility]:
    """Empty when a consumer using ``reader`` can read data written with ``writer``;
    otherwise one entry per incompatible difference."""
    return [d for d in differences(writer, reader) if d.error_type not in COMPATIBLE_CHANGES]
