"""Protobuf schemas for the registry: parsing `.proto` text (proto2 and proto3, with
proto-schema-parser) or a base64 ``FileDescriptorProto`` (what confluent-kafka's
``ProtobufSerializer`` registers), imports resolved through the registry's references (the
import path is the reference name), the well-known ``google/protobuf/*.proto`` files and the
other files Confluent ships (``google/type/*.proto``, ``confluent/meta.proto``,
``confluent/type/decimal.proto``: :data:`BUILTIN`), the whole validated by the protobuf
library's ``DescriptorPool``.

A parsed schema gives Confluent's canonical and normalized strings, its serialized form
(``format=serialized``: base64 of the FileDescriptorProto) and the message indexes of
Confluent's wire format. Compatibility is in :mod:`eddy.formats.protobuf.compat`.

Hostile input: the length is checked first, bracket nesting is counted by a flat scan
before the recursive parser ever sees the text, import chains are bounded and cycles named.
Parsing is CPU-bound (about 9 s for a 1 MiB schema): callers run it off the event loop.
"""

from __future__ import annotations

import base64
import binascii
import functools
import importlib
import importlib.resources
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from google.protobuf import descriptor_pb2, descriptor_pool, unknown_fields
from google.protobuf.message import DecodeError
from proto_schema_parser.parser import Parser

from eddy.formats.base import MAX_DEPTH, MAX_SCHEMA_CHARS, PROTOBUF, InvalidSchema, References
from eddy.formats.protobuf.descriptor import DescriptorBuilder, from_descriptor
from eddy.formats.protobuf.model import EnumDef, MessageDef, ProtoFile, from_ast
from eddy.formats.protobuf.printer import canonical, normalized

#: the name the main file gets in its FileDescriptorProto (confluent-kafka renames it anyway)
DEFAULT_FILE_NAME = "default"
#: the well-known files every schema may import without a reference
WELL_KNOWN = {
    f"google/protobuf/{stem}.proto": f"google.protobuf.{stem}_pb2"
    for stem in ("any", "api", "descriptor", "duration", "empty", "field_mask",
                 "source_context", "struct", "timestamp", "type", "wrappers")
}
#: the other files Confluent resolves without a reference (its ``KNOWN_DEPENDENCIES``): Eddy's
#: own `.proto` texts of these published APIs, data files under ``builtin/``
BUILTIN = frozenset({
    *(f"google/type/{stem}.proto" for stem in (
        "calendar_period", "color", "date", "datetime", "dayofweek", "decimal", "expr",
        "fraction", "interval", "latlng", "money", "month", "phone_number", "postal_address",
        "quaternion", "timeofday")),
    "confluent/meta.proto", "confluent/type/decimal.proto",
})

_TOKENS = re.compile(r'"(?:[^"\\\n]|\\.)*"|\'(?:[^\'\\\n]|\\.)*\'|//[^\n]*|/\*.*?\*/|[{}\[\]()<>]',
                     re.DOTALL)
_OPENERS = frozenset("{[(<")
_BASE64 = re.compile(r"[A-Za-z0-9+/=\s]+")


def check_nesting(text: str) -> None:
    """Refuse brackets nested deeper than MAX_DEPTH (strings and comments skipped), in one
    flat pass, so that the recursive-descent parser never meets them."""
    depth = 0
    for m in _TOKENS.finditer(text):
        tok = m.group()
        if len(tok) != 1:
            continue
        if tok in _OPENERS:
            depth += 1
            if depth > MAX_DEPTH:
                line = text.count("\n", 0, m.start()) + 1
                raise InvalidSchema(f"nesting deeper than {MAX_DEPTH} at line {line}")
        elif depth:
            depth -= 1


class _RaisingListener:
    """An ANTLR error listener that turns the first syntax error into InvalidSchema."""

    def syntaxError(self, recognizer: object, offending: object, line: int, column: int,
                    msg: str, e: object) -> None:
        raise InvalidSchema(f"syntax error at line {line}:{column}: {msg[:200]}")

    def reportAmbiguity(self, *args: object) -> None:
        pass

    def reportAttemptingFullContext(self, *args: object) -> None:
        pass

    def reportContextSensitivity(self, *args: object) -> None:
        pass


def _quiet(recognizer: object) -> None:
    recognizer.removeErrorListeners()  # type: ignore[attr-defined]
    recognizer.addErrorListener(_RaisingListener())  # type: ignore[attr-defined]


def parse_text(text: str) -> ProtoFile:
    """The model of `.proto` text (no imports resolved)."""
    check_nesting(text)
    try:
        tree = Parser(setup_lexer=_quiet, setup_parser=_quiet).parse(text)
    except InvalidSchema:
        raise
    except RecursionError:
        raise InvalidSchema("schema nested too deeply") from None
    except Exception as e:  # the parser's own checks (bad numbers, unbalanced options...)
        raise InvalidSchema(f"{type(e).__name__}: {str(e)[:200]}") from None
    return from_ast(tree)


def decode_serialized(text: str) -> descriptor_pb2.FileDescriptorProto:
    """A base64 FileDescriptorProto (the ``format=serialized`` form)."""
    if not _BASE64.fullmatch(text):
        raise InvalidSchema("not base64")
    try:
        raw = base64.b64decode("".join(text.split()), validate=True)
        fdp = descriptor_pb2.FileDescriptorProto.FromString(raw)
    except (binascii.Error, ValueError, DecodeError) as e:
        raise InvalidSchema(f"not a serialized FileDescriptorProto: {e}") from None
    if len(unknown_fields.UnknownFieldSet(fdp)):
        raise InvalidSchema("not a serialized FileDescriptorProto: unknown fields")
    return fdp


@dataclass(frozen=True, slots=True)
class TypeInfo:
    """A message or enum visible to a schema."""

    full_name: str
    kind: str  # "message" or "enum"
    package: str
    #: the import path of the file defining it, "" for the schema's own file
    file: str
    #: identifies the defining file's content ("" for the schema's own file)
    origin: str
    message: MessageDef | None = None
    enum: EnumDef | None = None


def _collect(model: ProtoFile, file: str, origin: str, out: dict[str, TypeInfo]) -> None:
    def walk(prefix: str, messages: list[MessageDef], enums: list[EnumDef]) -> None:
        for m in messages:
            name = f"{prefix}.{m.name}" if prefix else m.name
            out[name] = TypeInfo(name, "message", model.package, file, origin, message=m)
            walk(name, m.messages, m.enums)
        for e in enums:
            name = f"{prefix}.{e.name}" if prefix else e.name
            out[name] = TypeInfo(name, "enum", model.package, file, origin, enum=e)

    walk(model.package, model.messages, model.enums)


@dataclass(frozen=True, eq=False)
class ProtobufSchema:
    """A parsed, validated Protobuf schema (implements ``formats.ParsedSchema``)."""

    model: ProtoFile
    descriptor: descriptor_pb2.FileDescriptorProto
    #: every file it imports, transitively: import path -> parsed file
    dependencies: Mapping[str, ProtobufSchema] = field(default_factory=dict)
    #: every visible message and enum by full name (no leading dot)
    types: Mapping[str, TypeInfo] = field(default_factory=dict)

    @property
    def schema_type(self) -> str:
        return PROTOBUF

    @property
    def package(self) -> str:
        return self.model.package

    @property
    def imports(self) -> list[str]:
        """The import paths: the names of the references it needs."""
        return self.model.all_imports()

    @property
    def name(self) -> str:
        """Confluent's ``name()``: the full name of the file's first message ("" if none)."""
        if not self.model.messages:
            return ""
        first = self.model.messages[0].name
        return f"{self.package}.{first}" if self.package else first

    def canonical(self) -> str:
        return canonical(self.model)

    def normalized(self) -> str:
        return normalized(self.model, self._resolve_dotted)

    def serialized(self) -> str:
        """``format=serialized``: base64 of the FileDescriptorProto."""
        return base64.b64encode(self.descriptor.SerializeToString(deterministic=True)).decode()

    def resolve(self, name: str, scope: str) -> TypeInfo | None:
        """The type a name written inside ``scope`` (a full name) refers to, by protobuf's
        scoping: innermost scope first, a leading dot meaning fully qualified."""
        if name.startswith("."):
            return self.types.get(name[1:])
        parts = scope.split(".") if scope else []
        for i in range(len(parts), -1, -1):
            candidate = ".".join([*parts[:i], name])
            found = self.types.get(candidate)
            if found is not None:
                return found
        return None

    def _resolve_dotted(self, name: str, scope: Sequence[str]) -> str | None:
        found = self.resolve(name, scope[0] if scope else "")
        return None if found is None else "." + found.full_name

    def _resolve_kind(self, name: str, scope: str) -> tuple[str, str] | None:
        found = self.resolve(name, scope)
        return None if found is None else (found.full_name, found.kind)

    def message_indexes(self, full_name: str) -> list[int]:
        """The message indexes of Confluent's wire format: the index of each enclosing
        message among its siblings (messages only, declaration order), outermost first."""
        local = full_name.lstrip(".")
        if self.package:
            if not local.startswith(self.package + "."):
                raise KeyError(full_name)
            local = local[len(self.package) + 1:]
        indexes: list[int] = []
        siblings = self.model.messages
        for part in local.split("."):
            for i, m in enumerate(siblings):
                if m.name == part:
                    indexes.append(i)
                    siblings = m.messages
                    break
            else:
                raise KeyError(full_name)
        return indexes

    def message_name(self, indexes: Sequence[int]) -> str:
        """The full name of the message at these indexes (the inverse of message_indexes)."""
        if not indexes:
            raise KeyError("no message indexes")
        names = [self.package] if self.package else []
        siblings = self.model.messages
        for i in indexes:
            if not 0 <= i < len(siblings):
                raise KeyError(f"message index {i} out of range")
            names.append(siblings[i].name)
            siblings = siblings[i].messages
        return ".".join(names)


@functools.cache
def _well_known(path: str) -> ProtobufSchema:
    """A file every schema may import without a reference, parsed once: a well-known type
    from the protobuf library's descriptors, or one of the ``builtin/`` data files."""
    loader = _Loader({})
    fdp: descriptor_pb2.FileDescriptorProto | None
    if path in WELL_KNOWN:
        module = importlib.import_module(WELL_KNOWN[path])
        fdp = descriptor_pb2.FileDescriptorProto.FromString(module.DESCRIPTOR.serialized_pb)
        model = from_descriptor(fdp)
    else:
        text = importlib.resources.files(__package__).joinpath("builtin", *path.split("/"))
        model, fdp = parse_text(text.read_text(encoding="utf-8")), None
    return loader.finish(model, fdp, path, loader.imports(model))


def known_files(path: str) -> list[descriptor_pb2.FileDescriptorProto] | None:
    """A file every schema may import without a reference (a well-known type or one of
    Confluent's built-ins) as FileDescriptorProtos, after the known files it imports, each
    once (the order a descriptor pool takes them in); None for any other path."""
    if path not in WELL_KNOWN and path not in BUILTIN:
        return None
    out: list[descriptor_pb2.FileDescriptorProto] = []
    seen: set[str] = set()

    def add(name: str) -> None:
        if name in seen:
            return
        seen.add(name)
        found = _well_known(name)
        for dep in found.descriptor.dependency:
            add(dep)
        out.append(found.descriptor)

    add(path)
    return out


class _Loader:
    """Loads one schema and its imports, each import once, refusing cycles by name."""

    def __init__(self, references: References) -> None:
        self.references = references
        self.loaded: dict[str, ProtobufSchema] = {}
        self.stack: list[str] = []

    def model(self, text: str, what: str
              ) -> tuple[ProtoFile, descriptor_pb2.FileDescriptorProto | None]:
        if not isinstance(text, str):
            raise InvalidSchema(f"{what}: the schema must be a string")
        if len(text) > MAX_SCHEMA_CHARS:
            raise InvalidSchema(f"{what}: {len(text)} characters, more than the "
                                f"{MAX_SCHEMA_CHARS} allowed")
        try:
            return parse_text(text), None
        except InvalidSchema as text_error:
            stripped = text.strip()
            if not stripped or not _BASE64.fullmatch(stripped):
                raise InvalidSchema(f"{what}: {text_error}") from None
            try:
                fdp = decode_serialized(stripped)
            except InvalidSchema:
                raise InvalidSchema(f"{what}: {text_error}") from None
            return from_descriptor(fdp), fdp

    def load(self, path: str) -> ProtobufSchema:
        if path in self.loaded:
            return self.loaded[path]
        if path in self.stack:
            cycle = " -> ".join([*self.stack[self.stack.index(path):], path])
            raise InvalidSchema(f"cyclic reference: {cycle}")
        if path not in self.references:
            if path in WELL_KNOWN or path in BUILTIN:
                return _well_known(path)
            raise InvalidSchema(f"missing reference '{path}'")
        if len(self.stack) >= MAX_DEPTH:
            raise InvalidSchema(f"imports chained deeper than {MAX_DEPTH} at '{path}'")
        self.stack.append(path)
        model, fdp = self.model(self.references[path], f"reference '{path}'")
        schema = self.finish(model, fdp, path, self.imports(model))
        self.stack.pop()
        self.loaded[path] = schema
        return schema

    def imports(self, model: ProtoFile) -> dict[str, ProtobufSchema]:
        deps: dict[str, ProtobufSchema] = {}
        for path in model.all_imports():
            dep = self.load(path)
            deps.update(dep.dependencies)
            deps[path] = dep
        return deps

    def finish(self, model: ProtoFile, fdp: descriptor_pb2.FileDescriptorProto | None,
               name: str, deps: dict[str, ProtobufSchema]) -> ProtobufSchema:
        types: dict[str, TypeInfo] = {}
        for path, dep in deps.items():
            _collect(dep.model, path, dep.canonical(), types)
        _collect(model, "", "", types)
        probe = ProtobufSchema(model, descriptor_pb2.FileDescriptorProto(), deps, types)
        if fdp is None:
            fdp = DescriptorBuilder(model, probe._resolve_kind).build(name)
        else:
            fdp.name = name
        _validate(fdp, deps)
        return ProtobufSchema(model, fdp, deps, types)


def _validate(fdp: descriptor_pb2.FileDescriptorProto,
              deps: Mapping[str, ProtobufSchema]) -> None:
    """Let the protobuf library check it: names, numbers, types, imports."""
    pool = descriptor_pool.DescriptorPool()
    added: set[str] = set()

    def add(path: str, schema: ProtobufSchema, depth: int) -> None:
        if path in added or depth > MAX_DEPTH:
            return
        added.add(path)
        for sub in schema.model.all_imports():
            if sub in schema.dependencies:
                add(sub, schema.dependencies[sub], depth + 1)
            elif sub in deps:
                add(sub, deps[sub], depth + 1)
        pool.Add(schema.descriptor)

    try:
        for path, dep in deps.items():
            add(path, dep, 0)
        pool.Add(fdp)
        pool.FindFileByName(fdp.name)
    except (TypeError, ValueError, KeyError) as e:
        msg = str(e).removeprefix("Couldn't build proto file into descriptor pool: ")
        raise InvalidSchema(msg[:300]) from None


def parse(text: str, references: References = {}) -> ProtobufSchema:  # noqa: B006
    """Parse a Protobuf schema: `.proto` text or a base64 FileDescriptorProto, its imports
    resolved by ``references`` (import path -> schema text) and the well-known files.
    Raises InvalidSchema naming what is wrong."""
    loader = _Loader(references)
    try:
        model, fdp = loader.model(text, "schema")
        schema = loader.finish(model, fdp, DEFAULT_FILE_NAME, loader.imports(model))
        schema.canonical()  # a descriptor that cannot be printed is refused here, not later
    except InvalidSchema:
        raise
    except (ValueError, TypeError, UnicodeError, OverflowError, LookupError,
            AttributeError) as exc:
        # what the descriptor builders raise on values protobuf cannot hold (a field number
        # past int32, a string with a lone surrogate, a name that is not UTF-8)
        raise InvalidSchema(f"{type(exc).__name__}: {str(exc)[:200]}") from None
    return schema
