"""Protobuf values in Confluent's wire format decoded into one typed Arrow column.

After the 5-byte header (magic byte 0 and the schema id; or the 17-byte one, magic byte
1 and the schema's GUID) come the message indexes (which message of the writer's schema
file), then the message; or the header, with the indexes, is the record's schema-id
header and the value is the bare message. The column's type is the reader schema's first
message (the subject's latest or pinned version), mapped as Spark's `from_protobuf` maps Protobuf:
messages -> structs, repeated -> arrays, maps -> maps, enums -> their value names,
int32/sint32/sfixed32 -> INT, uint32/fixed32 and the 64-bit signed ones -> BIGINT,
uint64/fixed64 -> DECIMAL(20, 0) (exact), bytes -> BINARY, google.protobuf.Timestamp ->
TIMESTAMP; recursive messages are refused. Fields take their values as the message
has them (proto3 defaults included; fields with presence that are unset are null).

Schemas come from the registry in `format=serialized` (FileDescriptorProtos), with
their references and the files Confluent resolves without one (google/protobuf's
well-known types, google/type/*, confluent/meta). A value is parsed with
the reader's message (Protobuf's own evolution: by field numbers); it must have been
written as the same message (full name, from the writer schema and the indexes).
"""

from __future__ import annotations

import base64
import datetime
import decimal
import urllib.parse
from collections.abc import Callable
from typing import Any

from eddy.connect.formats.confluent_wire import (
    FrameError,
    HeaderId,
    SchemaKey,
    arrow_rows,
    decode_values,
    describe,
    message_indexes,
    remember,
    split_frame,
)
from eddy.connect.formats.registry_client import RegisteredSchema, RegistryClient, RegistryError

MAX_DEPTH = 32
_EPOCH = datetime.datetime(1970, 1, 1, tzinfo=datetime.UTC)
#: google.protobuf.Timestamp's valid seconds (0001-01-01 and 9999-12-31T23:59:59, UTC)
_MIN_SECONDS, _MAX_SECONDS = -62_135_596_800, 253_402_300_799


class ProtobufSchemaError(ValueError):
    """A schema this reader cannot use, or a value not matching it; names the part."""


def _fdp(text: str, what: str) -> Any:
    from google.protobuf import descriptor_pb2

    try:
        return descriptor_pb2.FileDescriptorProto.FromString(base64.b64decode(text,
                                                                              validate=True))
    except Exception as exc:
        raise ProtobufSchemaError(f"{what}: not a serialized FileDescriptorProto "
                                  f"({type(exc).__name__})") from None


def message_name(fdp: Any, indexes: list[int]) -> str:
    """The full name of the message `indexes` picks in a file (Confluent's indexes, which
    count the messages declared in the schema text: not the map entry types a descriptor
    adds for `map<..>` fields)."""
    messages = list(fdp.message_type)
    name = fdp.package
    for depth, i in enumerate(indexes):
        if i >= len(messages):
            raise ProtobufSchemaError(f"message index {indexes} is not in the writer schema")
        name = f"{name}.{messages[i].name}" if name else messages[i].name
        if depth + 1 < len(indexes):
            messages = [m for m in messages[i].nested_type if not m.options.map_entry]
    return str(name)


def _serialized(client: RegistryClient, path: str) -> RegisteredSchema:
    body = client.get_json(path + ("&" if "?" in path else "?") + "format=serialized")
    if not isinstance(body, dict) or not isinstance(body.get("schema"), str):
        raise RegistryError(f"{path}: the answer has no `schema` text")
    refs = body.get("references") or []
    from eddy.connect.formats.registry_client import Reference

    return RegisteredSchema(body["schema"], str(body.get("schemaType", "AVRO")).upper(),
                            tuple(Reference(r["name"], r["subject"], r["version"])
                                  for r in refs if isinstance(r, dict)))


class ProtobufDecoder:
    """Decodes Confluent-framed Protobuf values into the reader message's Arrow type."""

    def __init__(self, client: RegistryClient, reader: RegisteredSchema) -> None:
        from google.protobuf import descriptor_pool, message_factory

        self.client = client
        if reader.subject is None or reader.version is None:
            raise ProtobufSchemaError("the reader schema needs its subject and version")
        path = (f"/subjects/{urllib.parse.quote(reader.subject, safe='')}/versions/"
                f"{reader.version}")
        try:
            serialized = _serialized(client, path)
            pool = descriptor_pool.DescriptorPool()
            self._add(pool, serialized, f"{reader.subject}.proto", set(), 0)
        except RegistryError as exc:
            raise ProtobufSchemaError(str(exc)) from None
        fdp = _fdp(serialized.schema, "the reader schema")
        if not fdp.message_type:
            raise ProtobufSchemaError("the reader schema has no message")
        self.name = message_name(fdp, [0])
        try:
            self.descriptor = pool.FindMessageTypeByName(self.name)
            self.message = message_factory.GetMessageClass(self.descriptor)
        except Exception as exc:
            raise ProtobufSchemaError(f"the reader schema does not load: {exc}") from None
        self.arrow_type, self.convert = self._map(self.descriptor, (), 0)
        self._writers: dict[SchemaKey, Any] = {}
        if reader.id is not None:
            self._writers[reader.id] = fdp

    def _add(self, pool: Any, schema: RegisteredSchema, file_name: str, done: set[str],
             depth: int) -> None:
        """Add a schema and what it imports to `pool`, each under the name it is imported
        by (registries name serialized files as they like, e.g. all `default`)."""
        if depth > MAX_DEPTH:
            raise ProtobufSchemaError("schema references nest too deep")
        fdp = _fdp(schema.schema, "a schema")
        fdp.name = file_name
        by_name = {r.name: r for r in schema.references}
        for dep in fdp.dependency:
            if dep in done:
                continue
            done.add(dep)
            if dep in by_name:
                ref = by_name[dep]
                path = (f"/subjects/{urllib.parse.quote(ref.subject, safe='')}/versions/"
                        f"{ref.version}")
                self._add(pool, _serialized(self.client, path), dep, done, depth + 1)
                continue
            from eddy.formats.protobuf.schema import known_files

            known = known_files(dep)
            if known is None:
                raise ProtobufSchemaError(f"import {dep!r} is neither a reference nor a "
                                          "well-known type")
            for file in known:
                if file.name == dep or file.name not in done:
                    done.add(file.name)
                    pool.Add(file)
        try:
            pool.Add(fdp)
        except Exception as exc:
            raise ProtobufSchemaError(f"{fdp.name}: does not load ({exc})") from None

    def _map(self, desc: Any, seen: tuple[str, ...], depth: int
             ) -> tuple[Any, Callable[[Any], Any]]:
        import pyarrow as pa

        if desc.full_name in seen or depth > MAX_DEPTH:
            raise ProtobufSchemaError(f"message {desc.full_name} is recursive: Spark types "
                                      "cannot be")
        if desc.full_name == "google.protobuf.Timestamp":
            def stamp(m: Any) -> Any:
                # Timestamp's documented range: 0001-01-01T00:00:00Z .. 9999-12-31T23:59:59Z
                if not (_MIN_SECONDS <= m.seconds <= _MAX_SECONDS
                        and 0 <= m.nanos < 1_000_000_000):
                    raise ProtobufSchemaError(f"a Timestamp ({m.seconds} s, {m.nanos} ns) "
                                              "outside 0001-01-01..9999-12-31")
                return _EPOCH + datetime.timedelta(seconds=m.seconds,
                                                   microseconds=m.nanos // 1000)
            return pa.timestamp("us", tz="UTC"), stamp
        fields: list[tuple[str, Any, Callable[[Any], Any], bool, bool]] = []
        for f in desc.fields:
            arrow, conv = self._field(f, (*seen, desc.full_name), depth)
            fields.append((f.name, arrow, conv, f.is_repeated, f.has_presence))

        def message(m: Any) -> dict[str, Any]:
            out: dict[str, Any] = {}
            for name, _, conv, repeated, presence in fields:
                if presence and not repeated and not m.HasField(name):
                    out[name] = None
                else:
                    out[name] = conv(getattr(m, name))
            return out

        return pa.struct([pa.field(n, t) for n, t, _, _, _ in fields]), message

    def _field(self, f: Any, seen: tuple[str, ...], depth: int
               ) -> tuple[Any, Callable[[Any], Any]]:
        import pyarrow as pa
        from google.protobuf.descriptor import FieldDescriptor as FD

        if f.type == FD.TYPE_MESSAGE and f.message_type.GetOptions().map_entry:
            key_f, val_f = f.message_type.fields_by_name["key"], \
                f.message_type.fields_by_name["value"]
            kt, kc = self._scalar(key_f, seen, depth)
            vt, vc = self._scalar(val_f, seen, depth)
            return pa.map_(kt, vt), lambda m: [(kc(k), vc(v)) for k, v in m.items()]
        arrow, conv = self._scalar(f, seen, depth)
        if f.is_repeated:
            return pa.list_(arrow), lambda vs: [conv(v) for v in vs]
        return arrow, conv

    def _scalar(self, f: Any, seen: tuple[str, ...], depth: int
                ) -> tuple[Any, Callable[[Any], Any]]:
        import pyarrow as pa
        from google.protobuf.descriptor import FieldDescriptor as FD

        def same(v: Any) -> Any:
            return v

        if f.type == FD.TYPE_MESSAGE or f.type == FD.TYPE_GROUP:
            return self._map(f.message_type, seen, depth + 1)
        if f.type == FD.TYPE_ENUM:
            names = {v.number: v.name for v in f.enum_type.values}
            return pa.string(), lambda v: names.get(v, str(v))
        if f.type in (FD.TYPE_UINT64, FD.TYPE_FIXED64):
            return pa.decimal128(20, 0), decimal.Decimal
        simple = {
            FD.TYPE_DOUBLE: pa.float64(), FD.TYPE_FLOAT: pa.float32(),
            FD.TYPE_INT64: pa.int64(), FD.TYPE_SINT64: pa.int64(), FD.TYPE_SFIXED64: pa.int64(),
            FD.TYPE_UINT32: pa.int64(), FD.TYPE_FIXED32: pa.int64(),
            FD.TYPE_INT32: pa.int32(), FD.TYPE_SINT32: pa.int32(), FD.TYPE_SFIXED32: pa.int32(),
            FD.TYPE_BOOL: pa.bool_(), FD.TYPE_STRING: pa.string(), FD.TYPE_BYTES: pa.binary(),
        }
        return simple[f.type], same

    def _writer(self, schema_id: SchemaKey) -> Any:
        known = self._writers.get(schema_id)
        if isinstance(known, str):
            raise ProtobufSchemaError(known)
        if known is not None:
            return known
        what = describe(schema_id)
        path = (f"/schemas/ids/{schema_id}" if isinstance(schema_id, int) else
                f"/schemas/guids/{urllib.parse.quote(schema_id, safe='')}")
        try:
            found = _serialized(self.client, path)
            if found.schema_type != "PROTOBUF":
                raise ProtobufSchemaError(f"{what} is {found.schema_type}, not PROTOBUF")
            fdp = _fdp(found.schema, what)
        except RegistryError as exc:
            if not exc.not_found:
                raise
            problem = f"unknown {what} (the registry has no such schema)"
            remember(self._writers, schema_id, problem)
            raise ProtobufSchemaError(problem) from None
        except ProtobufSchemaError as exc:
            remember(self._writers, schema_id, str(exc))
            raise
        remember(self._writers, schema_id, fdp)
        return fdp

    def decode_one(self, value: bytes, at: HeaderId | None = None) -> Any:
        from google.protobuf.message import DecodeError

        if at is None:
            schema_id, pos = split_frame(value)
            indexes, pos = message_indexes(value, pos)
        else:
            schema_id, pos = at[0], 0
            indexes = at[1] or [0]
        written = message_name(self._writer(schema_id), indexes)
        if written != self.name:
            raise ProtobufSchemaError(f"{describe(schema_id)}: written as message {written}, "
                                      f"the reader schema's is {self.name}")
        msg = self.message()
        try:
            msg.ParseFromString(value[pos:] if pos else value)
        except (DecodeError, RuntimeError, ValueError) as exc:
            raise ProtobufSchemaError(f"{describe(schema_id)}: the payload does not decode "
                                      f"({type(exc).__name__}: {str(exc)[:200]})") from None
        return self.convert(msg)

    def decode(self, values: list[bytes | None], located: list[HeaderId | None] | None = None
               ) -> tuple[Any, list[str | None]]:
        records, errors = decode_values(values, self.decode_one,
                                        (FrameError, ProtobufSchemaError), (RegistryError,),
                                        located)
        return arrow_rows(records, self.arrow_type, errors), errors
