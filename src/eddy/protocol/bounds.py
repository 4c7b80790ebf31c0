"""A bounds-checking pass over Kafka message bodies, run before kio decodes them.

kio's native reader trusts the lengths and counts a peer sends: an array announced with
2^35 elements makes it reserve memory for that many before reading one (the process
aborts). This pass walks a body by the same schema kio decodes it with (kio's message
classes, generated from Apache Kafka's JSON message specs) and checks every length and
count against the bytes actually present before kio allocates anything:

- arrays and compact arrays: count x the smallest encoding of one element <= bytes left;
- strings, bytes and records: length <= bytes left; lengths below -1 are rejected;
- unsigned varints: at most 5 bytes (Kafka's limit for 32-bit varints);
- tagged fields: the count fits the bytes left, each field's size fits, and a known tag's
  value is checked inside its own size;
- nullable structs: the marker byte is -1 or 1;
- null (-1, or 0 in the compact forms) only where the field is nullable, as Kafka's
  generated readers insist: a null array, string or bytes elsewhere is rejected.

A body that passes is one kio can decode with allocations proportional to its size (it
may still reject it, e.g. for invalid UTF-8). The walkers are generated Python source, one
function per message struct, compiled once per (message class) and cached.
"""

from __future__ import annotations

import dataclasses
import struct
import types
import typing
from collections.abc import Callable
from functools import cache
from typing import Any

Walker = Callable[[bytes | bytearray | memoryview, int, int], int]

_I16 = struct.Struct(">h")
_I32 = struct.Struct(">i")

_FIXED_SIZES: dict[str, int] = {
    "bool": 1, "int8": 1, "uint8": 1,
    "int16": 2, "uint16": 2, "error_code": 2,
    "int32": 4, "uint32": 4, "timedelta_i32": 4,
    "int64": 8, "uint64": 8, "timedelta_i64": 8, "datetime_i64": 8, "float64": 8,
    "uuid": 16,
}
_VARIABLE = frozenset({"string", "bytes", "records"})


class BoundsError(ValueError):
    """A length or count in a message does not fit the bytes present (the field is named)."""


def is_panic(exc: BaseException) -> bool:
    """A Rust panic surfaced by kio's native decoder (pyo3's PanicException derives from
    BaseException, not Exception): callers treat it as undecodable input."""
    return type(exc).__name__ == "PanicException"


# ---- primitive checks (called from generated code) ------------------------------------


def _short(field: str, need: int, pos: int, end: int) -> BoundsError:
    return BoundsError(f"{field}: needs {need} bytes at offset {pos}, {max(end - pos, 0)} left")


def _uvarint(buf: bytes | bytearray | memoryview, pos: int, end: int, field: str
             ) -> tuple[int, int]:
    value = shift = 0
    for _ in range(5):
        if pos >= end:
            raise BoundsError(f"{field}: unsigned varint runs past the end at offset {pos}")
        b = buf[pos]
        pos += 1
        value |= (b & 0x7F) << shift
        if not b & 0x80:
            return value, pos
        shift += 7
    raise BoundsError(f"{field}: unsigned varint longer than 5 bytes at offset {pos - 5}")


def _fixed(buf: bytes | bytearray | memoryview, pos: int, end: int, size: int, field: str
           ) -> int:
    if pos + size > end:
        raise _short(field, size, pos, end)
    return pos + size


def _not_nullable(field: str) -> BoundsError:
    return BoundsError(f"{field}: null, but the field is not nullable")


_LENGTH_PREFIX = {"string": _I16, "bytes": _I32}  # legacy (non-flexible) length prefixes


def _legacy(buf: bytes | bytearray | memoryview, pos: int, end: int, field: str,
            nullable: bool, kind: str) -> int:
    """A legacy string (int16 length) or bytes (int32 length); -1 is null."""
    prefix = _LENGTH_PREFIX[kind]
    if pos + prefix.size > end:
        raise _short(f"{field} ({kind} length)", prefix.size, pos, end)
    (n,) = prefix.unpack_from(buf, pos)
    pos += prefix.size
    if n < 0:
        if n < -1:
            raise BoundsError(f"{field}: {kind} length {n} is negative")
        if not nullable:
            raise _not_nullable(field)
    if n > 0:
        if pos + n > end:
            raise _short(field, n, pos, end)
        pos += n
    return pos


def _compact(buf: bytes | bytearray | memoryview, pos: int, end: int, field: str,
             nullable: bool) -> int:
    """A compact string or bytes: unsigned varint length + 1 (0 is null), then the data."""
    n, pos = _uvarint(buf, pos, end, field)
    if n == 0 and not nullable:
        raise _not_nullable(field)
    if n > 1:
        n -= 1
        if pos + n > end:
            raise _short(field, n, pos, end)
        pos += n
    return pos


def _legacy_count(buf: bytes | bytearray | memoryview, pos: int, end: int, min_size: int,
                  field: str, nullable: bool) -> tuple[int, int]:
    """An int32 array length (-1 is null): the count and the position after it."""
    if pos + 4 > end:
        raise _short(field + " (array length)", 4, pos, end)
    (n,) = _I32.unpack_from(buf, pos)
    pos += 4
    if n < 0:
        if n < -1:
            raise BoundsError(f"{field}: array length {n} is negative")
        if not nullable:
            raise _not_nullable(field)
    if n > 0 and n * min_size > end - pos:
        raise BoundsError(
            f"{field}: array of {n} elements cannot fit in the {end - pos} bytes left"
        )
    return max(n, 0), pos


def _compact_count(buf: bytes | bytearray | memoryview, pos: int, end: int, min_size: int,
                   field: str, nullable: bool) -> tuple[int, int]:
    """A compact array length (unsigned varint, count + 1, 0 is null)."""
    n, pos = _uvarint(buf, pos, end, field + " (array length)")
    if n == 0 and not nullable:
        raise _not_nullable(field)
    if n > 1:
        n -= 1
        if n * min_size > end - pos:
            raise BoundsError(
                f"{field}: compact array of {n} elements cannot fit in the {end - pos} "
                "bytes left"
            )
        return n, pos
    return 0, pos


def _nullable_struct(buf: bytes | bytearray | memoryview, pos: int, end: int, field: str
                     ) -> tuple[bool, int]:
    """The int8 marker before a nullable struct: True when a struct follows."""
    if pos >= end:
        raise _short(field + " (null marker)", 1, pos, end)
    marker = buf[pos]
    if marker == 0xFF:
        return False, pos + 1
    if marker == 1:
        return True, pos + 1
    raise BoundsError(f"{field}: null marker is {marker}, not -1 or 1")


def _tagged(buf: bytes | bytearray | memoryview, pos: int, end: int,
            known: dict[int, Walker], field: str) -> int:
    """A tagged-fields section: count, then (tag, size, value) for each."""
    count, pos = _uvarint(buf, pos, end, field + " (tagged field count)")
    if count * 2 > end - pos:
        raise BoundsError(
            f"{field}: {count} tagged fields cannot fit in the {end - pos} bytes left"
        )
    for _ in range(count):
        tag, pos = _uvarint(buf, pos, end, field + " (tag)")
        size, pos = _uvarint(buf, pos, end, f"{field} (size of tag {tag})")
        stop = pos + size
        if stop > end:
            raise _short(f"{field} (tag {tag})", size, pos, end)
        walker = known.get(tag)
        if walker is not None and walker(buf, pos, stop) > stop:
            raise BoundsError(f"{field}: tag {tag} runs past its {size} bytes")
        pos = stop
    return pos


def skip_tagged_fields(buf: bytes | bytearray | memoryview, pos: int, what: str) -> int:
    """Check a tagged-fields section none of whose tags is known (a request header's:
    KIP-482) and return the position after it."""
    return _tagged(buf, pos, len(buf), {}, what)


_HELPERS: dict[str, Any] = {
    "_uvarint": _uvarint, "_fixed": _fixed, "_legacy": _legacy, "_compact": _compact,
    "_legacy_count": _legacy_count,
    "_compact_count": _compact_count, "_nullable_struct": _nullable_struct,
    "_tagged": _tagged, "_short": _short, "BoundsError": BoundsError,
}


# ---- schema introspection -------------------------------------------------------------


@dataclasses.dataclass(frozen=True, slots=True)
class _Field:
    name: str
    kafka_type: str | None  # None for a struct
    struct: Any  # None, or the nested message class, for a struct or array of structs
    array: bool
    nullable_struct: bool  # a struct field that may be null (int8 marker)
    tag: int | None
    nullable: bool = False  # the field (an array, string or bytes) may be null
    element_nullable: bool = False  # an array's string or bytes elements may be null


def _strip_optional(tp: Any) -> tuple[Any, bool]:
    if typing.get_origin(tp) in (types.UnionType, typing.Union):
        args = [a for a in typing.get_args(tp) if a is not type(None)]
        if len(args) != 1:
            raise TypeError(f"unsupported union {tp}")
        return args[0], True
    return tp, False


def _fields(cls: type[Any]) -> list[_Field]:
    out = []
    for f in dataclasses.fields(cls):
        tp, optional = _strip_optional(f.type)
        array = typing.get_origin(tp) is tuple
        element_optional = False
        if array:
            tp, element_optional = _strip_optional(typing.get_args(tp)[0])
        struct_cls = tp if dataclasses.is_dataclass(tp) else None
        kafka_type = f.metadata.get("kafka_type")
        if struct_cls is None and kafka_type is None:
            raise TypeError(f"{cls.__name__}.{f.name}: no kafka_type")
        out.append(_Field(
            name=f.name,
            kafka_type=None if struct_cls is not None else str(kafka_type),
            struct=struct_cls if isinstance(struct_cls, type) else None,
            array=array,
            nullable_struct=struct_cls is not None and optional and not array,
            tag=f.metadata.get("tag"),
            nullable=optional,
            element_nullable=element_optional,
        ))
    return out


@cache
def _min_size(cls: Any) -> int:
    """The fewest bytes one instance of a message struct can take on the wire."""
    flexible = bool(cls.__flexible__)
    total = 1 if flexible else 0  # the tagged-field count
    for f in _fields(cls):
        if f.tag is not None:
            continue
        total += _field_min_size(f, flexible)
    return total


def _field_min_size(f: _Field, flexible: bool) -> int:
    if f.array:
        return 1 if flexible else 4
    if f.struct is not None:
        return 1 if f.nullable_struct else _min_size(f.struct)
    assert f.kafka_type is not None
    return _element_min_size(f.kafka_type, flexible)


def _element_min_size(kafka_type: str, flexible: bool) -> int:
    if kafka_type in _FIXED_SIZES:
        return _FIXED_SIZES[kafka_type]
    if flexible:
        return 1
    return 2 if kafka_type == "string" else 4


# ---- code generation ------------------------------------------------------------------


class _Generator:
    """Writes one walker function per struct class into a shared namespace."""

    def __init__(self) -> None:
        self.namespace: dict[str, Any] = dict(_HELPERS)
        self.names: dict[type[Any], str] = {}
        self.sources: list[str] = []
        self.tail: list[str] = []  # tag tables, defined after the functions they name

    def walker_name(self, cls: type[Any]) -> str:
        name = self.names.get(cls)
        if name is None:
            name = f"_walk{len(self.names)}_{cls.__name__}"
            self.names[cls] = name
            self._emit(cls, name)
        return name

    def compile(self) -> None:
        code = compile("\n\n".join(self.sources + self.tail), "<eddy.protocol.bounds>", "exec")
        exec(code, self.namespace)

    def _emit(self, cls: type[Any], name: str) -> None:
        flexible = bool(cls.__flexible__)
        label = cls.__name__
        lines = [f"def {name}(b, p, e):"]
        pending = 0  # fixed-size bytes not yet added to p
        tags: dict[int, str] = {}
        for f in _fields(cls):
            path = f"{label}.{f.name}"
            if f.tag is not None:
                tags[f.tag] = self._tag_walker(f, flexible, path)
                continue
            if f.kafka_type in _FIXED_SIZES and not f.array:
                pending += _FIXED_SIZES[f.kafka_type]
                continue
            if pending:
                lines.append(f"    p += {pending}")
                pending = 0
            lines.extend("    " + s for s in self._field_lines(f, flexible, path))
        if pending:
            lines.append(f"    p += {pending}")
        if flexible:
            tag_map = "{" + ", ".join(f"{t}: {w}" for t, w in sorted(tags.items())) + "}"
            const = f"_tags_{name}"
            self.tail.append(f"{const} = {tag_map}")
            # the common case, no tagged fields, without a call
            lines.append("    if p < e and b[p] == 0:")
            lines.append("        p += 1")
            lines.append("    else:")
            lines.append(f"        p = _tagged(b, p, e, {const}, {label!r})")
        lines.append("    if p > e:")
        lines.append(f"        raise BoundsError('{label}: runs past the end of the message')")
        lines.append("    return p")
        self.sources.append("\n".join(lines))

    def _field_lines(self, f: _Field, flexible: bool, path: str) -> list[str]:
        if f.array:
            if f.struct is not None:
                min_size = max(1, _min_size(f.struct))
                inner = self.walker_name(f.struct)
                body = [f"for _ in range(n): p = {inner}(b, p, e)"]
            else:
                assert f.kafka_type is not None
                min_size = max(1, _element_min_size(f.kafka_type, flexible))
                if f.kafka_type in _FIXED_SIZES:
                    body = [f"p += n * {_FIXED_SIZES[f.kafka_type]}"]
                else:
                    call = self._value_call(f.kafka_type, flexible, path + "[]",
                                            f.element_nullable)
                    body = ["for _ in range(n):", *("    " + c for c in call.splitlines())]
            count = "_compact_count" if flexible else "_legacy_count"
            return [f"n, p = {count}(b, p, e, {min_size}, {path!r}, {f.nullable})", *body]
        if f.struct is not None:
            inner = self.walker_name(f.struct)
            if f.nullable_struct:
                return [f"present, p = _nullable_struct(b, p, e, {path!r})",
                        f"if present: p = {inner}(b, p, e)"]
            return [f"p = {inner}(b, p, e)"]
        assert f.kafka_type is not None
        return self._value_call(f.kafka_type, flexible, path, f.nullable).splitlines()

    @staticmethod
    def _value_call(kafka_type: str, flexible: bool, path: str, nullable: bool) -> str:
        if kafka_type in _FIXED_SIZES:
            return f"p = _fixed(b, p, e, {_FIXED_SIZES[kafka_type]}, {path!r})"
        if kafka_type not in _VARIABLE:
            raise TypeError(f"{path}: unknown kafka_type {kafka_type}")
        if flexible:  # a length below 127 (one varint byte) is checked inline
            low = "0" if nullable else "1"  # 0 is null
            return (f"if p < e and {low} <= b[p] < 128:\n    p += b[p] or 1\n    if p > e: "
                    f"raise BoundsError('{path}: runs past the end of the message')\n"
                    f"else:\n    p = _compact(b, p, e, {path!r}, {nullable})")
        kind = "string" if kafka_type == "string" else "bytes"  # records are bytes
        return f"p = _legacy(b, p, e, {path!r}, {nullable}, {kind!r})"

    def _tag_walker(self, f: _Field, flexible: bool, path: str) -> str:
        """A function that checks one tagged field's value (tagged fields only exist in
        flexible versions, so the value uses the compact encodings)."""
        name = f"_tag{len(self.sources)}_{f.name}"
        lines = [f"def {name}(b, p, e):"]
        lines.extend("    " + s for s in self._field_lines(f, flexible, path))
        lines.append("    return p")
        self.sources.append("\n".join(lines))
        return name


@cache
def walker(cls: Any) -> Walker:
    """The bounds walker for a kio message class (request or response body): called as
    walker(buf, pos, end), it returns the position after the message or raises
    BoundsError naming the field that does not fit."""
    gen = _Generator()
    name = gen.walker_name(cls)
    gen.compile()
    fn: Walker = gen.namespace[name]
    return fn


def check(cls: Any, buf: bytes | bytearray | memoryview, pos: int) -> int:
    """Check the body of message class `cls` starting at `pos`; returns where it ends."""
    return walker(cls)(buf, pos, len(buf))
