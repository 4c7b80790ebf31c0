"""Between the Protobuf schema model and ``descriptor_pb2.FileDescriptorProto``: building
one from the model, with every type name resolved to its full ``.package.Name`` as protoc
writes it: the ``format=serialized`` form the registry serves (base64 of its bytes), and what the
protobuf library's ``DescriptorPool`` validates.

Standard options (``java_package``, ``packed``, ``deprecated``...) become descriptor option
fields; custom ``(extension)`` options stay in the text forms only. And the model of a
descriptor (``from_descriptor``), map entry messages turned back into ``map<K, V>`` fields.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from typing import cast

from google.protobuf import descriptor_pb2
from google.protobuf.message import Message as PbMessage

from eddy.formats.base import MAX_DEPTH, InvalidSchema
from eddy.formats.protobuf.model import (
    SCALARS,
    EnumDef,
    EnumIdent,
    EnumValueDef,
    ExtendDef,
    FieldDef,
    MessageDef,
    MessageLit,
    MethodDef,
    OneofDef,
    OptionDef,
    OptionValue,
    ProtoFile,
    ServiceDef,
)
from eddy.formats.protobuf.printer import Printer

#: (type name as written, innermost scope full name) -> (full name without dot, kind)
#: where kind is "message" or "enum"; None when it does not resolve
TypeResolver = Callable[[str, str], "tuple[str, str] | None"]

_FDP = descriptor_pb2.FieldDescriptorProto
_TYPE_OF_SCALAR = {
    "double": _FDP.TYPE_DOUBLE, "float": _FDP.TYPE_FLOAT, "int64": _FDP.TYPE_INT64,
    "uint64": _FDP.TYPE_UINT64, "int32": _FDP.TYPE_INT32, "fixed64": _FDP.TYPE_FIXED64,
    "fixed32": _FDP.TYPE_FIXED32, "bool": _FDP.TYPE_BOOL, "string": _FDP.TYPE_STRING,
    "bytes": _FDP.TYPE_BYTES, "uint32": _FDP.TYPE_UINT32, "sfixed32": _FDP.TYPE_SFIXED32,
    "sfixed64": _FDP.TYPE_SFIXED64, "sint32": _FDP.TYPE_SINT32, "sint64": _FDP.TYPE_SINT64,
}
_LABELS = {None: _FDP.LABEL_OPTIONAL, "optional": _FDP.LABEL_OPTIONAL,
           "required": _FDP.LABEL_REQUIRED, "repeated": _FDP.LABEL_REPEATED}


def map_entry_name(field_name: str) -> str:
    """protoc's name of a map field's entry message: ``my_map`` -> ``MyMapEntry``."""
    out: list[str] = []
    upper = True
    for c in field_name:
        if c == "_":
            upper = True
        else:
            out.append(c.upper() if upper else c)
            upper = False
    return "".join(out) + "Entry"


def _set_options(target: PbMessage, opts: Sequence[OptionDef], where: str) -> None:
    desc = target.DESCRIPTOR
    for o in opts:
        if o.name.startswith("("):
            continue  # a custom option: kept in the text forms
        fd = desc.fields_by_name.get(o.name)
        if fd is None:
            raise InvalidSchema(f"{where}: unknown option '{o.name}'")
        try:
            if fd.message_type is not None:
                continue  # message-valued standard options (features): not carried
            if fd.is_repeated:
                vals = o.value if isinstance(o.value, tuple) else (o.value,)
                getattr(target, o.name).extend(_plain(fd, v, where) for v in vals)
            else:
                setattr(target, o.name, _plain(fd, o.value, where))
        except (TypeError, ValueError) as e:
            raise InvalidSchema(f"{where}: option '{o.name}' has a bad value: {e}") from None


def _plain(fd: object, v: OptionValue, where: str) -> object:
    enum_type = getattr(fd, "enum_type", None)
    if enum_type is not None:
        if not isinstance(v, EnumIdent) or v.name not in enum_type.values_by_name:
            raise InvalidSchema(f"{where}: option {getattr(fd, 'name', '?')} wants one of "
                                f"{sorted(enum_type.values_by_name)}")
        return enum_type.values_by_name[v.name].number
    if isinstance(v, EnumIdent | tuple) or not isinstance(v, str | bool | int | float):
        raise InvalidSchema(f"{where}: option {getattr(fd, 'name', '?')} has a bad value")
    return v


class DescriptorBuilder:
    def __init__(self, model: ProtoFile, resolve: TypeResolver) -> None:
        self.model = model
        self.resolve = resolve
        self.proto3 = model.is_proto3
        self.printer = Printer(False)

    def _type(self, name: str, scope: str, where: str) -> tuple[int, str]:
        if name in SCALARS:
            return _TYPE_OF_SCALAR[name], ""
        found = self.resolve(name, scope)
        if found is None:
            raise InvalidSchema(f"{where}: unknown type '{name}'")
        full, kind = found
        return (_FDP.TYPE_MESSAGE if kind == "message" else _FDP.TYPE_ENUM), "." + full

    def _field(self, out: descriptor_pb2.FieldDescriptorProto, f: FieldDef, scope: str,
               where: str) -> None:
        where = f"{where}.{f.name}"
        out.name = f.name
        out.number = f.number
        out.label = _LABELS[f.label]
        if f.label == "optional" and self.proto3:
            out.proto3_optional = True
        ftype, type_name = self._type(f.type, scope, where)
        out.type = ftype
        if type_name:
            out.type_name = type_name
        rest: list[OptionDef] = []
        for o in f.options:
            if o.name == "default":
                out.default_value = (o.value if isinstance(o.value, str)
                                     else self.printer.value(o.value))
            elif o.name == "json_name":
                if not isinstance(o.value, str):
                    raise InvalidSchema(f"{where}: json_name must be a string")
                out.json_name = o.value
            else:
                rest.append(o)
        if rest:
            _set_options(out.options, rest, where)

    def _fields(self, msg: descriptor_pb2.DescriptorProto, m: MessageDef, scope: str) -> None:
        entries: list[tuple[int, descriptor_pb2.DescriptorProto]] = []
        groups = [(None, m.fields), *enumerate(o.fields for o in m.oneofs)]
        for oneof_index, group in groups:
            for f in group:
                fd = msg.field.add()
                self._field(fd, f, scope, scope)
                if oneof_index is not None:
                    fd.oneof_index = oneof_index
                if f.map_key is None:
                    continue
                entry = descriptor_pb2.DescriptorProto(name=map_entry_name(f.name))
                entry.options.map_entry = True
                key = FieldDef("key", 1, f.map_key, "optional" if not self.proto3 else None)
                value = FieldDef("value", 2, f.type, "optional" if not self.proto3 else None)
                self._field(entry.field.add(), key, scope, scope)
                self._field(entry.field.add(), value, scope, scope)
                fd.label = _FDP.LABEL_REPEATED
                fd.type = _FDP.TYPE_MESSAGE
                fd.type_name = f".{scope}.{entry.name}"
                entries.append((f.nested_before, entry))
        for o in m.oneofs:
            od = msg.oneof_decl.add(name=o.name)
            if o.options:
                _set_options(od.options, o.options, f"{scope}.{o.name}")
        for fd in msg.field:  # proto3 `optional`: a synthetic oneof each, after the real ones
            if fd.proto3_optional:
                fd.oneof_index = len(msg.oneof_decl)
                msg.oneof_decl.add(name=f"_{fd.name}")
        self._nested(msg, m, scope, entries)

    def _nested(self, msg: descriptor_pb2.DescriptorProto, m: MessageDef, scope: str,
                entries: list[tuple[int, descriptor_pb2.DescriptorProto]]) -> None:
        # protoc adds a map's entry message where the map field appears among the nested
        # messages: the serializers' message indexes count them
        entries.sort(key=lambda e: e[0])
        pending = list(entries)
        for i, nested in enumerate(m.messages):
            while pending and pending[0][0] <= i:
                msg.nested_type.add().CopyFrom(pending.pop(0)[1])
            self.message(msg.nested_type.add(), nested, scope)
        for _, entry in pending:
            msg.nested_type.add().CopyFrom(entry)

    def enum(self, out: descriptor_pb2.EnumDescriptorProto, e: EnumDef, scope: str) -> None:
        out.name = e.name
        where = f"{scope}.{e.name}" if scope else e.name
        for v in e.values:
            vd = out.value.add(name=v.name, number=v.number)
            if v.options:
                _set_options(vd.options, v.options, f"{where}.{v.name}")
        if e.options:
            _set_options(out.options, e.options, where)
        for lo, hi in e.reserved_ranges:
            out.reserved_range.add(start=lo, end=hi)
        out.reserved_name.extend(e.reserved_names)

    def _extends(self, target: object, extends: list[ExtendDef], scope: str) -> None:
        for x in extends:
            where = f"extend {x.extendee}"
            found = self.resolve(x.extendee, scope)
            if found is None or found[1] != "message":
                raise InvalidSchema(f"{where}: unknown message '{x.extendee}'")
            for f in x.fields:
                fd = target.add()  # type: ignore[attr-defined]
                self._field(fd, f, scope, where)
                fd.extendee = "." + found[0]

    def message(self, out: descriptor_pb2.DescriptorProto, m: MessageDef, scope: str) -> None:
        full = f"{scope}.{m.name}" if scope else m.name
        out.name = m.name
        self._fields(out, m, full)
        for e in m.enums:
            self.enum(out.enum_type.add(), e, full)
        if m.options:
            _set_options(out.options, m.options, full)
        for lo, hi in m.reserved_ranges:
            out.reserved_range.add(start=lo, end=hi + 1)
        out.reserved_name.extend(m.reserved_names)
        for lo, hi in m.extension_ranges:
            out.extension_range.add(start=lo, end=hi + 1)
        self._extends(out.extension, m.extends, full)

    def build(self, name: str) -> descriptor_pb2.FileDescriptorProto:
        m = self.model
        out = descriptor_pb2.FileDescriptorProto(name=name, package=m.package or None)
        if m.syntax == "proto3":
            out.syntax = "proto3"
        deps = m.imports + m.public_imports + m.weak_imports
        out.dependency.extend(deps)
        out.public_dependency.extend(range(len(m.imports),
                                           len(m.imports) + len(m.public_imports)))
        out.weak_dependency.extend(range(len(m.imports) + len(m.public_imports), len(deps)))
        for msg in m.messages:
            self.message(out.message_type.add(), msg, m.package)
        for e in m.enums:
            self.enum(out.enum_type.add(), e, m.package)
        for s in m.services:
            sd = out.service.add(name=s.name)
            where = f"service {s.name}"
            if s.options:
                _set_options(sd.options, s.options, where)
            for meth in s.methods:
                md = sd.method.add(name=meth.name)
                if meth.client_streaming:
                    md.client_streaming = True
                if meth.server_streaming:
                    md.server_streaming = True
                md.input_type = self._type(meth.input_type, m.package, where)[1]
                md.output_type = self._type(meth.output_type, m.package, where)[1]
                if meth.options:
                    _set_options(md.options, meth.options, f"{where}.{meth.name}")
        if m.options:
            _set_options(out.options, m.options, "file")
        self._extends(out.extension, m.extends, m.package)
        return out


# --- from a FileDescriptorProto ------------------------------------------------------------

_SCALAR_OF_TYPE = {
    _FDP.TYPE_DOUBLE: "double", _FDP.TYPE_FLOAT: "float", _FDP.TYPE_INT64: "int64",
    _FDP.TYPE_UINT64: "uint64", _FDP.TYPE_INT32: "int32", _FDP.TYPE_FIXED64: "fixed64",
    _FDP.TYPE_FIXED32: "fixed32", _FDP.TYPE_BOOL: "bool", _FDP.TYPE_STRING: "string",
    _FDP.TYPE_BYTES: "bytes", _FDP.TYPE_UINT32: "uint32", _FDP.TYPE_SFIXED32: "sfixed32",
    _FDP.TYPE_SFIXED64: "sfixed64", _FDP.TYPE_SINT32: "sint32", _FDP.TYPE_SINT64: "sint64",
}


def _pb_value(value: object, depth: int) -> OptionValue:
    if depth > MAX_DEPTH:
        raise InvalidSchema(f"option value nested deeper than {MAX_DEPTH}")
    if isinstance(value, bool | int | float | str):
        return value
    if isinstance(value, bytes):
        return value.decode("latin-1")
    if isinstance(value, PbMessage):
        return MessageLit(tuple(_pb_option(fd, v, depth + 1) for fd, v in value.ListFields()))
    raise InvalidSchema(f"unsupported option value {value!r:.60}")


def _pb_option(fd: object, value: object, depth: int) -> tuple[str, OptionValue]:
    name: str = getattr(fd, "name", "?")
    enum_type = getattr(fd, "enum_type", None)
    is_repeated = bool(getattr(fd, "is_repeated", False))

    def one(v: object) -> OptionValue:
        if enum_type is not None and isinstance(v, int):
            ev = enum_type.values_by_number.get(v)
            return EnumIdent(ev.name) if ev is not None else v
        return _pb_value(v, depth)

    if is_repeated:  # a repeated container (iterable by the sequence protocol)
        return name, tuple(one(v) for v in cast("Iterable[object]", value))
    return name, one(value)


def _pb_options(options: PbMessage) -> list[OptionDef]:
    out: list[OptionDef] = []
    for fd, v in options.ListFields():
        name, value = _pb_option(fd, v, 0)
        if isinstance(value, tuple):  # `.proto` syntax repeats a repeated option
            out += [OptionDef(name, x) for x in value]
        else:
            out.append(OptionDef(name, value))
    return out


def _camel(name: str) -> str:
    """protoc's default json_name: underscores dropped, the next letter upper-cased."""
    out: list[str] = []
    upper = False
    for c in name:
        if c == "_":
            upper = True
        else:
            out.append(c.upper() if upper else c)
            upper = False
    return "".join(out)


def _pb_field(f: descriptor_pb2.FieldDescriptorProto, proto3: bool,
              entries: dict[str, descriptor_pb2.DescriptorProto]) -> FieldDef:
    if f.type == _FDP.TYPE_GROUP:
        raise InvalidSchema(f"field {f.name}: groups are not supported")
    ftype = _SCALAR_OF_TYPE.get(f.type, f.type_name)
    label: str | None = {_FDP.LABEL_REQUIRED: "required", _FDP.LABEL_REPEATED: "repeated"}.get(
        f.label, None if proto3 and not f.proto3_optional else "optional")
    out = FieldDef(f.name, f.number, ftype, label)
    entry = entries.get(f.type_name.rsplit(".", 1)[-1]) if f.type_name else None
    if entry is not None and f.label == _FDP.LABEL_REPEATED:
        kv = {x.name: x for x in entry.field}
        if "key" not in kv or "value" not in kv:
            raise InvalidSchema(f"map entry {entry.name} needs a key and a value field")
        out.map_key = _SCALAR_OF_TYPE.get(kv["key"].type, kv["key"].type_name)
        out.type = _SCALAR_OF_TYPE.get(kv["value"].type, kv["value"].type_name)
        out.label = None
    if f.HasField("default_value"):
        dv: OptionValue = f.default_value
        if f.type == _FDP.TYPE_BOOL:
            dv = f.default_value == "true"
        elif f.type == _FDP.TYPE_ENUM:
            dv = EnumIdent(f.default_value)
        elif f.type in _SCALAR_OF_TYPE and f.type not in (_FDP.TYPE_STRING, _FDP.TYPE_BYTES):
            dv = EnumIdent(f.default_value)  # a number or inf/nan, printed as written
        out.options.append(OptionDef("default", dv))
    if f.HasField("json_name") and f.json_name != _camel(f.name):
        out.options.append(OptionDef("json_name", f.json_name))
    if f.HasField("options"):
        out.options += _pb_options(f.options)
    return out


def _pb_enum(e: descriptor_pb2.EnumDescriptorProto) -> EnumDef:
    out = EnumDef(e.name)
    out.values = [EnumValueDef(v.name, v.number,
                               _pb_options(v.options) if v.HasField("options") else [])
                  for v in e.value]
    if e.HasField("options"):
        out.options = _pb_options(e.options)
    out.reserved_ranges = [(r.start, r.end) for r in e.reserved_range]
    out.reserved_names = list(e.reserved_name)
    return out


def _pb_message(m: descriptor_pb2.DescriptorProto, proto3: bool, depth: int) -> MessageDef:
    if depth > MAX_DEPTH:
        raise InvalidSchema(f"message {m.name} is nested deeper than {MAX_DEPTH}")
    entries = {n.name: n for n in m.nested_type if n.options.map_entry}
    out = MessageDef(m.name)
    oneofs = [OneofDef(o.name, options=_pb_options(o.options) if o.HasField("options") else [])
              for o in m.oneof_decl]
    for f in m.field:
        fd = _pb_field(f, proto3, entries)
        if f.HasField("oneof_index") and not f.proto3_optional:
            if not 0 <= f.oneof_index < len(oneofs):
                raise InvalidSchema(f"field {f.name}: oneof_index {f.oneof_index} out of range")
            oneofs[f.oneof_index].fields.append(fd)
        else:
            out.fields.append(fd)
    out.oneofs = [o for o in oneofs if o.fields]
    out.messages = [_pb_message(n, proto3, depth + 1)
                    for n in m.nested_type if not n.options.map_entry]
    out.enums = [_pb_enum(e) for e in m.enum_type]
    if m.HasField("options"):
        out.options = _pb_options(m.options)
    out.reserved_ranges = [(r.start, r.end - 1) for r in m.reserved_range]
    out.reserved_names = list(m.reserved_name)
    out.extension_ranges = [(r.start, r.end - 1) for r in m.extension_range]
    out.extends = _pb_extends(m.extension, proto3)
    return out


def _pb_extends(fields: object, proto3: bool) -> list[ExtendDef]:
    extends: dict[str, ExtendDef] = {}
    for f in fields:  # type: ignore[attr-defined]
        ext = extends.setdefault(f.extendee, ExtendDef(f.extendee))
        ext.fields.append(_pb_field(f, proto3, {}))
    return list(extends.values())


def from_descriptor(fdp: descriptor_pb2.FileDescriptorProto) -> ProtoFile:
    """The model of a ``FileDescriptorProto``."""
    if fdp.syntax not in ("", "proto2", "proto3"):
        raise InvalidSchema(f"syntax '{fdp.syntax}' is not supported")
    proto3 = fdp.syntax == "proto3"
    out = ProtoFile(syntax=fdp.syntax or "proto2", package=fdp.package)
    public = set(fdp.public_dependency)
    weak = set(fdp.weak_dependency)
    for i, dep in enumerate(fdp.dependency):
        (out.public_imports if i in public else out.weak_imports if i in weak
         else out.imports).append(dep)
    if fdp.HasField("options"):
        out.options = _pb_options(fdp.options)
    out.messages = [_pb_message(m, proto3, 1) for m in fdp.message_type]
    out.enums = [_pb_enum(e) for e in fdp.enum_type]
    for s in fdp.service:
        svc = ServiceDef(s.name, options=_pb_options(s.options) if s.HasField("options") else [])
        svc.methods = [MethodDef(m.name, m.input_type, m.output_type, m.client_streaming,
                                 m.server_streaming,
                                 _pb_options(m.options) if m.HasField("options") else [])
                       for m in s.method]
        out.services.append(svc)
    out.extends = _pb_extends(fdp.extension, proto3)
    return out
