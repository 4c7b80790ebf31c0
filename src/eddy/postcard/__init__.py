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
import typing
from typing import TYPE_CHECKING, Any

from eddy.postcard.compile import MAX_DEPTH, _compile
from eddy.postcard.primitives import (
    I8,
    I16,
    I32,
    I64,
    U8,
    U16,
    U32,
    U64,
    Fixed32,
    PostcardError,
)

__all__ = [
    "I8",
    "I16",
    "I32",
    "I64",
    "MAX_DEPTH",
    "U8",
    "U16",
    "U32",
    "U64",
    "Buf",
    "Fixed32",
    "PostcardError",
    "decode",
    "decode_prefix",
    "decode_value",
    "encode",
    "encode_value",
]

if TYPE_CHECKING:  # an enum union passed as ``cls`` is an arg-type error that decodes to Any
    from typing_extensions import TypeVar

    T = TypeVar("T", default=Any)
else:
    T = typing.TypeVar("T")
Buf = bytes | bytearray | memoryview


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
