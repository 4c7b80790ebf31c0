"""Printing a Protobuf schema model in Confluent's fixed style: the canonical form
(``ProtobufSchema.canonicalString()``: the schema re-printed, two-space indents, messages
before enums, declaration order kept) and the normalized form (``normalize=true``: proto2's
syntax line dropped, imports sorted and de-duplicated, options sorted by name, fields by
number, oneofs by their first field, reserved ranges split and sorted, enum constants by
number, and type names resolved to their full ``.package.Name``); and the form without
extensions (``format=ignore_extensions``: the canonical form less ``extend`` blocks,
``extensions`` ranges and custom options, Confluent's own ``confluent.*`` options kept).

Message order is never changed: the serializers' message indexes refer to it.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from eddy.formats.protobuf.model import (
    MAX_ENUM_NUMBER,
    MAX_FIELD_NUMBER,
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

#: (type name as written, scope of full names from innermost) -> ".full.Name" or None
Resolver = Callable[[str, Sequence[str]], "str | None"]

_ESCAPE = {"\a": "\\a", "\b": "\\b", "\f": "\\f", "\n": "\\n", "\r": "\\r", "\t": "\\t",
           "\v": "\\v", "\\": "\\\\", "'": "\\'", '"': '\\"'}


def _escaped(c: str) -> str:
    known = _ESCAPE.get(c)
    if known is not None:
        return known
    if c < " " or c == "\x7f":
        return f"\\{ord(c):03o}"  # an octal escape, as protoc prints them
    return c


def escape(s: str) -> str:
    return "".join(_escaped(c) for c in s)


def _indent(text: str) -> str:
    return "".join(f"  {line}\n" for line in text.splitlines())


#: custom options ``format=ignore_extensions`` keeps (Confluent's ``CONFLUENT_PREFIX``)
CONFLUENT_OPTION_PREFIX = "confluent."


def _is_extension_option(o: OptionDef) -> bool:
    """A custom option (``(name)`` or ``(name).sub``) other than Confluent's own."""
    return o.name.startswith("(") and not o.name[1:].startswith(CONFLUENT_OPTION_PREFIX)


class Printer:
    def __init__(self, normalize: bool, resolve: Resolver | None = None, *,
                 ignore_extensions: bool = False) -> None:
        self.normalize = normalize
        self.resolve = resolve
        self.ignore_extensions = ignore_extensions

    # -- values and options --------------------------------------------------------------
    def value(self, v: OptionValue) -> str:
        if isinstance(v, bool):
            return "true" if v else "false"
        if isinstance(v, str):
            return f'"{escape(v)}"'
        if isinstance(v, EnumIdent):
            return v.name
        if isinstance(v, int | float):
            return repr(v)
        if isinstance(v, MessageLit):
            entries = list(v.entries)
            if self.normalize:
                entries.sort(key=lambda e: e[0])
            lines = [f"{k}: {self.value(x)}{',' if i < len(entries) - 1 else ''}"
                     for i, (k, x) in enumerate(entries)]
            return "{\n" + "".join(_indent(line) for line in lines) + "}"
        items = [self.value(x) for x in v]
        if self.normalize and len(items) == 1:
            return items[0]
        return "[\n" + "".join(_indent(f"{x}{',' if i < len(items) - 1 else ''}")
                               for i, x in enumerate(items)) + "]"

    def options(self, opts: list[OptionDef]) -> list[OptionDef]:
        if self.ignore_extensions:
            opts = [o for o in opts if not _is_extension_option(o)]
        if self.normalize:
            return sorted(opts, key=lambda o: o.name.strip("()"))
        return opts

    def option(self, o: OptionDef) -> str:
        return f"{o.name} = {self.value(o.value)}"

    def option_lines(self, opts: list[OptionDef]) -> str:
        return "".join(f"option {self.option(o)};\n" for o in self.options(opts))

    def compact(self, opts: list[OptionDef]) -> str:
        opts = self.options(opts)
        if not opts:
            return ""
        if len(opts) == 1:
            return f" [{self.option(opts[0])}]"
        body = "".join(_indent(f"{self.option(o)}{',' if i < len(opts) - 1 else ''}")
                       for i, o in enumerate(opts))
        return f" [\n{body}]"

    # -- types -----------------------------------------------------------------------------
    def type_name(self, name: str, scope: Sequence[str]) -> str:
        if not self.normalize or name in SCALARS or self.resolve is None:
            return name
        return self.resolve(name, scope) or name

    def field(self, f: FieldDef, scope: Sequence[str]) -> str:
        if f.map_key is not None:
            ftype = f"map<{f.map_key}, {self.type_name(f.type, scope)}>"
            label = None
        else:
            ftype, label = self.type_name(f.type, scope), f.label
        head = f"{label} " if label else ""
        return f"{head}{ftype} {f.name} = {f.number}{self.compact(f.options)};\n"

    def ranges(self, ranges: list[tuple[int, int]], names: list[str], top: int,
               word: str) -> str:
        def one(r: tuple[int, int]) -> str:
            if r[0] == r[1]:
                return str(r[0])
            return f"{r[0]} to {'max' if r[1] >= top else r[1]}"

        if self.normalize:
            rs = sorted(ranges)
            return ("".join(f"{word} {one(r)};\n" for r in rs)
                    + "".join(f'{word} "{escape(n)}";\n' for n in sorted(names)))
        out = ""
        if ranges:
            out += f"{word} {', '.join(one(r) for r in ranges)};\n"
        if names:
            out += f"{word} {', '.join(chr(34) + escape(n) + chr(34) for n in names)};\n"
        return out

    def oneof(self, o: OneofDef, scope: Sequence[str]) -> str:
        out = f"oneof {o.name} {{"
        if self.options(o.options):
            out += "\n" + _indent(self.option_lines(o.options))
        fields = sorted(o.fields, key=lambda f: f.number) if self.normalize else o.fields
        if fields:
            out += "\n" + "".join(_indent(self.field(f, scope)) for f in fields)
        return out + "}\n"

    def enum(self, e: EnumDef) -> str:
        out = f"enum {e.name} {{"
        reserved = self.ranges(e.reserved_ranges, e.reserved_names, MAX_ENUM_NUMBER,
                               "reserved")
        if reserved:
            out += "\n" + _indent(reserved)
        elif e.options or e.values:
            out += "\n"
        out += _indent(self.option_lines(e.options))
        values: list[EnumValueDef] = e.values
        if self.normalize:
            values = sorted(values, key=lambda v: (v.number, v.name))
        out += "".join(_indent(f"{v.name} = {v.number}{self.compact(v.options)};\n")
                       for v in values)
        return out + "}\n"

    def extend(self, x: ExtendDef, scope: Sequence[str]) -> str:
        fields = sorted(x.fields, key=lambda f: f.number) if self.normalize else x.fields
        out = f"extend {self.type_name(x.extendee, scope)} {{"
        if fields:
            out += "\n" + "".join(_indent(self.field(f, scope)) for f in fields)
        return out + "}\n"

    def message(self, m: MessageDef, scope: Sequence[str]) -> str:
        inner = [f"{scope[0]}.{m.name}" if scope and scope[0] else m.name, *scope]
        out = f"message {m.name} {{"
        reserved = self.ranges(m.reserved_ranges, m.reserved_names, MAX_FIELD_NUMBER,
                               "reserved")
        if reserved:
            out += "\n" + _indent(reserved)
        if self.options(m.options):
            out += "\n" + _indent(self.option_lines(m.options))
        fields = sorted(m.fields, key=lambda f: f.number) if self.normalize else m.fields
        if fields:
            out += "\n" + "".join(_indent(self.field(f, inner)) for f in fields)
        oneofs = m.oneofs
        if self.normalize:
            oneofs = sorted((o for o in oneofs if o.fields),
                            key=lambda o: min(f.number for f in o.fields))
        if oneofs:
            out += "\n" + "".join(_indent(self.oneof(o, inner)) for o in oneofs)
        if m.extension_ranges and not self.ignore_extensions:
            out += "\n" + _indent(self.ranges(m.extension_ranges, [], MAX_FIELD_NUMBER,
                                              "extensions"))
        if m.extends and not self.ignore_extensions:
            out += "\n" + "".join(_indent(self.extend(x, inner)) for x in m.extends)
        if m.messages or m.enums:
            out += "\n" + "".join(_indent(self.message(n, inner)) for n in m.messages)
            out += "".join(_indent(self.enum(e)) for e in m.enums)
        return out + "}\n"

    def method(self, m: MethodDef, scope: Sequence[str]) -> str:
        req = ("stream " if m.client_streaming else "") + self.type_name(m.input_type, scope)
        resp = ("stream " if m.server_streaming else "") + self.type_name(m.output_type, scope)
        out = f"rpc {m.name} ({req}) returns ({resp})"
        if self.options(m.options):
            out += " {\n" + _indent(self.option_lines(m.options)) + "}"
        return out + ";\n"

    def service(self, s: ServiceDef, scope: Sequence[str]) -> str:
        out = f"service {s.name} {{"
        if self.options(s.options):
            out += "\n" + _indent(self.option_lines(s.options))
        if s.methods:
            out += "\n" + "".join(_indent(self.method(m, scope)) for m in s.methods)
        return out + "}\n"

    def file(self, f: ProtoFile) -> str:
        scope = [f.package]
        out = ""
        if f.syntax is not None and (not self.normalize or f.syntax == "proto3"):
            out += f'syntax = "{f.syntax}";\n'
        if f.package:
            out += f"package {f.package};\n"
        imports, public = f.imports + f.weak_imports, f.public_imports
        if self.normalize:
            imports, public = sorted(set(imports)), sorted(set(public))
        if imports or public:
            out += "\n" + "".join(f'import "{i}";\n' for i in imports)
            out += "".join(f'import public "{i}";\n' for i in public)
        if self.options(f.options):
            out += "\n" + self.option_lines(f.options)
        if f.messages or f.enums:
            out += "\n" + "".join(self.message(m, scope) for m in f.messages)
            out += "".join(self.enum(e) for e in f.enums)
        if f.extends and not self.ignore_extensions:
            out += "\n" + "".join(self.extend(x, scope) for x in f.extends)
        if f.services:
            out += "\n" + "".join(self.service(s, scope) for s in f.services)
        return out


def canonical(f: ProtoFile) -> str:
    """Confluent's canonical string of the file."""
    return Printer(False).file(f)


def normalized(f: ProtoFile, resolve: Resolver) -> str:
    """Confluent's normalized string of the file; ``resolve`` gives full type names."""
    return Printer(True, resolve).file(f)


def without_extensions(f: ProtoFile) -> str:
    """Confluent's ``format=ignore_extensions`` string of the file: the canonical form without
    ``extend`` blocks, ``extensions`` ranges and custom options (``confluent.*`` ones kept)."""
    return Printer(False, ignore_extensions=True).file(f)
