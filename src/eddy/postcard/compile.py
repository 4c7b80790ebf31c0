"""postcard schema compiler: turns a type annotation into a codec (a pair of closures, cached
per annotation): Option, Vec, tuples, structs (dataclasses) and enums (unions of variant
dataclasses), with the nesting limit ``MAX_DEPTH``.

Part of ``eddy.postcard`` (which documents the wire format and re-exports the public
names); the scalar codecs and varints are in ``eddy.postcard.primitives``.
"""

from __future__ import annotations

import dataclasses
import types
import typing
from typing import Annotated, Any

from eddy.postcard.primitives import (
    _U32_MAX,
    PostcardError,
    _Codec,
    _Dec,
    _dec_bool,
    _dec_bytes,
    _dec_str,
    _Enc,
    _enc_bool,
    _enc_bytes,
    _enc_str,
    _fixed_codec,
    _FixedBytes,
    _Int,
    _int_codec,
    _is_int,
    _read_len,
    _read_varint,
    _write_varint,
)

#: the deepest nesting of structs and enums a value may have
MAX_DEPTH = 32

_CACHE: dict[Any, _Codec] = {}


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

