"""postcard primitives: the error type, the integer and fixed-bytes markers, varints and the
scalar codecs (ints, bool, str, bytes, fixed bytes).

Part of ``eddy.postcard`` (which documents the wire format and re-exports the public
names); ``eddy.postcard.compile`` builds container, struct and enum codecs on these.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Annotated, Any


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

