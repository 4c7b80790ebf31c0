"""postcard (https://postcard.jamesmunns.com/wire-format), sans-IO, bounded.

Schema by type annotation on frozen dataclasses (fields encoded in declaration order):

- ``U8 U16 U32 U64 I8 I16 I32 I64``: ``Annotated[int, ...]`` markers below (u8/i8 raw
  bytes, wider ints varint, signed zigzag), ``bool`` (0/1), ``str`` (varint len + UTF-8),
  ``bytes`` (varint len + bytes), ``X | None`` (Option: 0, or 1 + X),
  ``tuple[X, ...]`` (Vec: varint count + items), ``tuple[A, B, C]`` (a tuple: items in
  order, no count), a nested dataclass (struct), ``Fixed32`` (32 raw bytes, no length).
- An enum is a union ``A | B | C`` of dataclasses; each variant class has
  ``VARIANT: ClassVar[int]``, its varint discriminant.

``list[X]`` is accepted as a Vec too (decoded as a list). Decoding is strict, so every
accepted input is the canonical encoding of the value it decodes to: varints at most
ceil(bits/7) bytes, in range and minimal (no trailing 0x00 byte), bool and Option tags 0/1,
UTF-8 checked. Every length and count is checked against the bytes left before anything
is allocated (a Vec count times the element's minimum encoded size), nesting is limited to
``MAX_DEPTH`` structs/enums, and every error is a ``PostcardError`` naming the field path
(``Hello.addresses[2]: string length 4000 exceeds the 12 bytes left``).

Each type is compiled once into a pair of closures (cached per annotation), so encoding or
decoding a message does no introspection.
"""

from __future__ import annotations

import dataclasses
import types
import typing
from collections.abc import Callable
from typing import TYPE_CHECKING, Annotated, Any


class _Int:
    __slots__ = ("bits", "signed")

    def __init__(self, bits: int, signed: bool) -> None:
        self.bits, self.signed = bits, signed


class _FixedBytes:
    __slots__ = ("size",)

    def __init__(self, size: int) -> None:
        self.size = size


U8 = Annotated[int, _Int(8, False)]
U16 = Annotated[int, _Int(16, False)]
U32 = Annotated[int, _Int(32, False)]
U64 = Annotated[int, _Int(64, False)]
I8 = Annotated[int, _Int(8, True)]
I16 = Annotated[int, _Int(16, True)]
I32 = Annotated[int, _Int(32, True)]
I64 = Annotated[int, _Int(64, True)]
Fixed32 = Annotated[bytes, _FixedBytes(32)]

#: the deepest nesting of structs and enums a value may have
MAX_DEPTH = 32

if TYPE_CHECKING:  # an enum union passed as ``cls`` is an arg-type error that decodes to Any
    from typing_extensions import TypeVar

    T = TypeVar("T", default=Any)
else:
    T = typing.TypeVar("T")
Buf = bytes | bytearray | memoryview
_Enc = Callable[[Any, bytearray, int], None]  # (value, out, depth)
_Dec = Callable[[Any, int, int], tuple[Any, int]]  # (data, pos, depth) -> (value, end)


class PostcardError(ValueError):
    """Bad input or a value that does not fit its schema. ``path`` names the field
    (``Hello.addresses[2]``), ``reason`` says what is wrong."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason
        self._segments: list[str] = []  # innermost first

    def prepend(self, segment: str) -> None:
        self._segments.append(segment)

    @property
    def path(self) -> str:
        return "".join(reversed(self._segments)).removeprefix("::")

    def __str__(self) -> str:
        path = self.path
        return f"{path}: {self.reason}" if path else self.reason


@dataclasses.dataclass(slots=True)
class _Codec:
    enc: _Enc
    dec: _Dec
    min_size: int  # the fewest bytes any value of the type encodes to


_CACHE: dict[Any, _Codec] = {}


# -- varints -----------------------------------------------------------------------------------
def _read_varint(data: Any, pos: int, max_bytes: int, max_value: int) -> tuple[int, int]:
    n = len(data)
    result = shift = 0
    for i in range(max_bytes):
        if pos >= n:
            raise PostcardError("truncated varint")
        b = data[pos]
        pos += 1
        result |= (b & 0x7F) << shift
        if b < 0x80:
            if b == 0 and i:
                raise PostcardError("non-canonical varint (trailing zero byte)")
            if result > max_value:
                raise PostcardError(f"varint {result} out of range (max {max_value})")
            return result, pos
        shift += 7
    raise PostcardError(f"varint longer than {max_bytes} bytes")


def _write_varint(out: bytearray, value: int) -> None:
    while value >= 0x80:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    out.append(value)


_U32_MAX = (1 << 32) - 1
_U64_MAX = (1 << 64) - 1


def _read_len(data: Any, pos: int, what: str) -> tuple[int, int]:
    """A length or count (usize: at most 64 bits), checked against nothing yet."""
    try:
        return _read_varint(data, pos, 10, _U64_MAX)
    except PostcardError as exc:
        raise PostcardError(f"{what}: {exc.reason}") from None


def _is_int(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


# -- scalars -----------------------------------------------------------------------------------
def _int_codec(spec: _Int) -> _Codec:
    bits, signed = spec.bits, spec.signed
    lo, hi = (-(1 << (bits - 1)), (1 << (bits - 1)) - 1) if signed else (0, (1 << bits) - 1)
    name = f"{'i' if signed else 'u'}{bits}"
    max_bytes, max_raw = -(-bits // 7), (1 << bits) - 1

    def check(value: Any) -> None:
        if not _is_int(value):
            raise PostcardError(f"expected int ({name}), got {type(value).__name__}")
        if not lo <= value <= hi:
            raise PostcardError(f"{value} out of range for {name}")

    if bits == 8:
        def enc8(value: Any, out: bytearray, depth: int) -> None:
            check(value)
            out.append(value & 0xFF)

        def dec8(data: Any, pos: int, depth: int) -> tuple[Any, int]:
            if pos >= len(data):
                raise PostcardError(f"truncated {name}")
            b: int = data[pos]
            return (b - 256 if signed and b > 127 else b), pos + 1

        return _Codec(enc8, dec8, 1)

    if signed:
        shift = bits - 1

        def enc_zz(value: Any, out: bytearray, depth: int) -> None:
            check(value)
            _write_varint(out, (value << 1) ^ (value >> shift))

        def dec_zz(data: Any, pos: int, depth: int) -> tuple[Any, int]:
            raw, pos = _read_varint(data, pos, max_bytes, max_raw)
            return (raw >> 1) ^ -(raw & 1), pos

        return _Codec(enc_zz, dec_zz, 1)

    def enc_u(value: Any, out: bytearray, depth: int) -> None:
        check(value)
        _write_varint(out, value)

    def dec_u(data: Any, pos: int, depth: int) -> tuple[Any, int]:
        return _read_varint(data, pos, max_bytes, max_raw)

    return _Codec(enc_u, dec_u, 1)


def _enc_bool(value: Any, out: bytearray, depth: int) -> None:
    if not isinstance(value, bool):
        raise PostcardError(f"expected bool, got {type(value).__name__}")
    out.append(1 if value else 0)


def _dec_bool(data: Any, pos: int, depth: int) -> tuple[Any, int]:
    if pos >= len(data):
        raise PostcardError("truncated bool")
    b = data[pos]
    if b > 1:
        raise PostcardError(f"bool byte {b:#04x} is neither 0 nor 1")
    return b == 1, pos + 1


def _enc_str(value: Any, out: bytearray, depth: int) -> None:
    if not isinstance(value, str):
        raise PostcardError(f"expected str, got {type(value).__name__}")
    try:
        raw = value.encode()
    except UnicodeEncodeError as exc:
        raise PostcardError(f"string is not valid UTF-8: {exc.reason}") from None
    _write_varint(out, len(raw))
    out += raw


def _dec_str(data: Any, pos: int, depth: int) -> tuple[Any, int]:
    length, pos = _read_len(data, pos, "string length")
    left = len(data) - pos
    if length > left:
        raise PostcardError(f"string length {length} exceeds the {left} bytes left")
    end = pos + length
    try:
        return str(data[pos:end], "utf-8"), end
    except UnicodeDecodeError as exc:
        raise PostcardError(f"invalid UTF-8 at byte {exc.start}: {exc.reason}") from None


def _enc_bytes(value: Any, out: bytearray, depth: int) -> None:
    if not isinstance(value, bytes | bytearray | memoryview):
        raise PostcardError(f"expected bytes, got {type(value).__name__}")
    _write_varint(out, len(value))
    out += value


def _dec_bytes(data: Any, pos: int, depth: int) -> tuple[Any, int]:
    length, pos = _read_len(data, pos, "bytes length")
    left = len(data) - pos
    if length > left:
        raise PostcardError(f"bytes length {length} exceeds the {left} bytes left")
    end = pos + length
    return bytes(data[pos:end]), end


def _fixed_codec(size: int) -> _Codec:
    def enc(value: Any, out: bytearray, depth: int) -> None:
        if not isinstance(value, bytes | bytearray | memoryview):
            raise PostcardError(f"expected bytes, got {type(value).__name__}")
        if len(value) != size:
            raise PostcardError(f"expected exactly {size} bytes, got {len(value)}")
        out += value

    def dec(data: Any, pos: int, depth: int) -> tuple[Any, int]:
        end = pos + size
        if end > len(data):
            raise PostcardError(f"{size} fixed bytes, only {len(data) - pos} left")
        return bytes(data[pos:end]), end

    return _Codec(enc, dec, size)


# -- containers --------------------------------------------------------------------------------
def _option_codec(inner: _Codec) -> _Codec:
    ienc, idec = inner.enc, inner.dec

    def enc(value: Any, out: bytearray, depth: int) -> None:
        if value is None:
            out.append(0)
        else:
            out.append(1)
            ienc(value, out, depth)

    def dec(data: Any, pos: int, depth: int) -> tuple[Any, int]:
        if pos >= len(data):
            raise PostcardError("truncated Option tag")
        tag = data[pos]
        if tag == 0:
            return None, pos + 1
        if tag != 1:
            raise PostcardError(f"Option tag {tag:#04x} is neither 0 nor 1")
        return idec(data, pos + 1, depth)

    return _Codec(enc, dec, 1)


def _vec_codec(inner: _Codec, as_list: bool) -> _Codec:
    ienc, idec = inner.enc, inner.dec
    unit = max(1, inner.min_size)

    def enc(value: Any, out: bytearray, depth: int) -> None:
        if not isinstance(value, tuple | list):
            raise PostcardError(f"expected a tuple or list, got {type(value).__name__}")
        _write_varint(out, len(value))
        i = 0
        try:
            for i, item in enumerate(value):  # noqa: B007 (i names the item on error)
                ienc(item, out, depth)
        except PostcardError as exc:
            exc.prepend(f"[{i}]")
            raise

    def dec(data: Any, pos: int, depth: int) -> tuple[Any, int]:
        count, pos = _read_len(data, pos, "sequence count")
        left = len(data) - pos
        if count * unit > left:
            raise PostcardError(f"sequence count {count} needs at least {count * unit} bytes, "
                                f"{left} left")
        items = []
        try:
            for _ in range(count):
                item, pos = idec(data, pos, depth)
                items.append(item)
        except PostcardError as exc:
            exc.prepend(f"[{len(items)}]")
            raise
        return (items if as_list else tuple(items)), pos

    return _Codec(enc, dec, 1)


def _tuple_codec(items: list[_Codec]) -> _Codec:
    encs = [c.enc for c in items]
    decs = [c.dec for c in items]
    n = len(items)

    def enc(value: Any, out: bytearray, depth: int) -> None:
        if not isinstance(value, tuple | list) or len(value) != n:
            raise PostcardError(f"expected a tuple of {n} items, got {type(value).__name__}")
        i = 0
        try:
            for i, e in enumerate(encs):
                e(value[i], out, depth)
        except PostcardError as exc:
            exc.prepend(f".{i}")
            raise

    def dec(data: Any, pos: int, depth: int) -> tuple[Any, int]:
        values = []
        try:
            for d in decs:
                v, pos = d(data, pos, depth)
                values.append(v)
        except PostcardError as exc:
            exc.prepend(f".{len(values)}")
            raise
        return tuple(values), pos

    return _Codec(enc, dec, sum(c.min_size for c in items))


def _struct_codec(cls: type, hints: dict[str, Any]) -> _Codec:
    """The fields of a dataclass in order (no name, no discriminant)."""
    fields = [f for f in dataclasses.fields(cls) if f.init]
    if len(fields) != len(dataclasses.fields(cls)):
        raise TypeError(f"{cls.__name__}: postcard structs cannot have init=False fields")
    codecs = [_compile(hints[f.name]) for f in fields]
    names = [f.name for f in fields]
    encs = [(f.name, c.enc) for f, c in zip(fields, codecs, strict=True)]
    decs = [c.dec for c in codecs]
    cname = cls.__name__

    def enc(value: Any, out: bytearray, depth: int) -> None:
        if not isinstance(value, cls):
            raise PostcardError(f"expected {cname}, got {type(value).__name__}")
        if depth >= MAX_DEPTH:
            raise PostcardError(f"nesting deeper than {MAX_DEPTH}")
        depth += 1
        name = ""
        try:
            for name, e in encs:
                e(getattr(value, name), out, depth)
        except PostcardError as exc:
            exc.prepend(f".{name}")
            raise

    def dec(data: Any, pos: int, depth: int) -> tuple[Any, int]:
        if depth >= MAX_DEPTH:
            raise PostcardError(f"nesting deeper than {MAX_DEPTH}")
        depth += 1
        args = []
        try:
            for d in decs:
                v, pos = d(data, pos, depth)
                args.append(v)
        except PostcardError as exc:
            exc.prepend(f".{names[len(args)]}")
            raise
        try:
            return cls(*args), pos
        except (ValueError, TypeError) as exc:  # the class's own __post_init__ checks
            raise PostcardError(f"invalid {cname}: {exc}") from None

    return _Codec(enc, dec, sum(c.min_size for c in codecs))


def _variant_of(cls: Any) -> int:
    disc = getattr(cls, "VARIANT", None)
    if not (isinstance(cls, type) and dataclasses.is_dataclass(cls)) or not _is_int(disc):
        raise TypeError(f"enum variant {cls!r} must be a dataclass with VARIANT: ClassVar[int]")
    assert isinstance(disc, int)
    if not 0 <= disc <= _U32_MAX:
        raise TypeError(f"{cls.__name__}.VARIANT must be a u32")
    return disc


def _enum_codec(variants: tuple[type, ...]) -> _Codec:
    """Varint discriminant (``VARIANT``) then the variant's fields."""
    by_disc: dict[int, tuple[str, _Dec]] = {}
    by_cls: dict[type, tuple[bytes, str, _Enc]] = {}
    mins = []
    for cls in variants:
        disc = _variant_of(cls)
        if disc in by_disc:
            raise TypeError(f"{cls.__name__} and {by_disc[disc][0]} share VARIANT {disc}")
        body = _struct_body(cls)
        head = bytearray()
        _write_varint(head, disc)
        by_disc[disc] = (cls.__name__, body.dec)
        by_cls[cls] = (bytes(head), cls.__name__, body.enc)
        mins.append(len(head) + body.min_size)
    ename = " | ".join(cls.__name__ for cls in variants)

    def enc(value: Any, out: bytearray, depth: int) -> None:
        entry = by_cls.get(type(value))
        if entry is None:
            raise PostcardError(f"{type(value).__name__} is not a variant of enum {ename}")
        head, name, e = entry
        out += head
        try:
            e(value, out, depth)
        except PostcardError as exc:
            exc.prepend(f"::{name}")
            raise

    def dec(data: Any, pos: int, depth: int) -> tuple[Any, int]:
        try:
            disc, pos = _read_varint(data, pos, 5, _U32_MAX)
        except PostcardError as exc:
            raise PostcardError(f"enum {ename} discriminant: {exc.reason}") from None
        entry = by_disc.get(disc)
        if entry is None:
            raise PostcardError(f"unknown discriminant {disc} for enum {ename}")
        name, d = entry
        try:
            return d(data, pos, depth)
        except PostcardError as exc:
            exc.prepend(f"::{name}")
            raise

    return _Codec(enc, dec, min(mins))


# -- compiling annotations ---------------------------------------------------------------------
_BODIES: dict[type, _Codec] = {}
_BUILDING: set[type] = set()


def _struct_body(cls: type) -> _Codec:
    body = _BODIES.get(cls)
    if body is not None:
        return body
    if cls in _BUILDING:  # a recursive type: call through the codec once it is built
        def enc(value: Any, out: bytearray, depth: int) -> None:
            _BODIES[cls].enc(value, out, depth)

        def dec(data: Any, pos: int, depth: int) -> tuple[Any, int]:
            return _BODIES[cls].dec(data, pos, depth)

        return _Codec(enc, dec, 1)
    _BUILDING.add(cls)
    try:
        body = _struct_codec(cls, typing.get_type_hints(cls, include_extras=True))
    finally:
        _BUILDING.discard(cls)
    _BODIES[cls] = body
    return body


def _compile(tp: Any) -> _Codec:
    codec = _CACHE.get(tp)
    if codec is None:
        codec = _build(tp)
        _CACHE[tp] = codec
    return codec


def _build(tp: Any) -> _Codec:
    origin = typing.get_origin(tp)
    if origin is Annotated:
        base, *meta = typing.get_args(tp)
        for m in meta:
            if isinstance(m, _Int):
                return _int_codec(m)
            if isinstance(m, _FixedBytes):
                return _fixed_codec(m.size)
        return _compile(base)
    if tp is bool:
        return _Codec(_enc_bool, _dec_bool, 1)
    if tp is str:
        return _Codec(_enc_str, _dec_str, 1)
    if tp is bytes:
        return _Codec(_enc_bytes, _dec_bytes, 1)
    if origin is types.UnionType or origin is typing.Union:
        args = typing.get_args(tp)
        rest = tuple(a for a in args if a is not type(None))
        inner = _compile(rest[0]) if len(rest) == 1 else _enum_codec(rest)
        return _option_codec(inner) if len(rest) < len(args) else inner
    if origin is tuple:
        args = typing.get_args(tp)
        if len(args) == 2 and args[1] is Ellipsis:
            return _vec_codec(_compile(args[0]), as_list=False)
        return _tuple_codec([_compile(a) for a in args])
    if origin is list:
        (item,) = typing.get_args(tp)
        return _vec_codec(_compile(item), as_list=True)
    if isinstance(tp, type) and dataclasses.is_dataclass(tp):
        if hasattr(tp, "VARIANT"):  # a variant alone is an enum of one: tagged the same way
            return _enum_codec((tp,))
        return _struct_body(tp)
    if tp is int:
        raise TypeError("bare int has no postcard width: use U8..U64 or I8..I64")
    raise TypeError(f"no postcard encoding for {tp!r}")


# -- public API --------------------------------------------------------------------------------
def _top_name(tp: Any) -> str:
    """The name an error path starts with: a plain struct's class name (an enum, or a
    variant class, names the variant itself)."""
    if isinstance(tp, type) and dataclasses.is_dataclass(tp) and not hasattr(tp, "VARIANT"):
        return tp.__name__
    return ""


def _as_buffer(data: Buf) -> Any:
    if isinstance(data, memoryview) and (data.format != "B" or data.ndim != 1):
        return data.cast("B")
    return data


def encode_value(tp: Any, value: Any) -> bytes:
    """Encode ``value`` as the annotation ``tp`` (``U32``, ``tuple[str, ...]``, a dataclass,
    an enum union...)."""
    codec = _compile(tp)
    out = bytearray()
    try:
        codec.enc(value, out, 0)
    except PostcardError as exc:
        exc.prepend(_top_name(tp))
        raise
    return bytes(out)


def decode_value(tp: Any, data: Buf, offset: int = 0) -> tuple[Any, int]:
    """Decode one value of annotation ``tp`` at ``offset``; returns it and where it ends."""
    codec = _compile(tp)
    buf = _as_buffer(data)
    if not 0 <= offset <= len(buf):
        raise PostcardError(f"offset {offset} outside the {len(buf)} bytes given")
    try:
        return codec.dec(buf, offset, 0)
    except PostcardError as exc:
        exc.prepend(_top_name(tp))
        raise


def encode(obj: object) -> bytes:
    """Encode a dataclass instance. A variant class (one with ``VARIANT``) is written with
    its discriminant first, so ``encode(Hello(...))`` is what ``decode(PingFrame, ...)``
    and ``decode(Hello, ...)`` both read."""
    cls = type(obj)
    if not dataclasses.is_dataclass(cls):
        raise PostcardError(f"expected a dataclass instance, got {cls.__name__}")
    return encode_value(cls, obj)


def decode_prefix(cls: type[T], data: Buf, offset: int = 0) -> tuple[T, int]:
    """Decode one ``cls`` (a dataclass or an enum union) at ``offset``; returns the value
    and the offset just past it. Bytes after it are left alone."""
    value, end = decode_value(cls, data, offset)
    return value, end


def decode(cls: type[T], data: Buf) -> T:
    """Decode one ``cls`` (a dataclass or an enum union) that must fill ``data``."""
    buf = _as_buffer(data)
    value, end = decode_value(cls, buf, 0)
    if end != len(buf):
        exc = PostcardError(f"{len(buf) - end} trailing bytes")
        exc.prepend(_top_name(cls))
        raise exc
    return value  # type: ignore[no-any-return]
