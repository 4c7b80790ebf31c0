"""postcard codec (eddy.postcard): spec vectors, round trips, hostile input."""

from __future__ import annotations

import re
import tracemalloc
from dataclasses import dataclass
from typing import Any, ClassVar

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from eddy import postcard
from eddy.postcard import (
    I8,
    I16,
    I32,
    I64,
    MAX_DEPTH,
    U8,
    U16,
    U32,
    U64,
    Fixed32,
    PostcardError,
)


# -- schemas -----------------------------------------------------------------------------------
@dataclass(frozen=True)
class Leaf:
    VARIANT: ClassVar[int] = 0
    a: U8
    b: I16


@dataclass(frozen=True)
class Branch:
    VARIANT: ClassVar[int] = 1
    name: str
    kids: tuple[I64, ...]
    flag: bool


@dataclass(frozen=True)
class Tagged:
    VARIANT: ClassVar[int] = 2
    value: U8


@dataclass(frozen=True)
class Far:
    VARIANT: ClassVar[int] = 300  # a two-byte discriminant
    note: str | None


Shape = Leaf | Branch | Tagged | Far


@dataclass(frozen=True)
class Inner:
    x: U32
    y: I8
    blob: bytes


@dataclass(frozen=True)
class Outer:
    ident: Fixed32
    u16: U16
    u64: U64
    i32: I32
    i64: I64
    maybe: Inner | None
    items: tuple[Inner, ...]
    nested: tuple[tuple[str | None, ...], ...]
    pair: tuple[U8, str]
    shape: Shape
    shapes: tuple[Shape | None, ...]
    numbers: list[U16]


@dataclass(frozen=True)
class Mixed:
    """A struct with several fields, for a hand-worked vector."""

    flag: bool
    small: U8
    count: U32
    delta: I32
    name: str
    tail: U16 | None


@dataclass(frozen=True)
class Node:
    child: Node | None


@dataclass(frozen=True)
class Bytes32s:
    ids: tuple[Fixed32, ...]


@dataclass(frozen=True)
class Strs:
    items: tuple[str, ...]


@dataclass(frozen=True)
class Checked:
    n: U8

    def __post_init__(self) -> None:
        if self.n > 9:
            raise ValueError("n must be a digit")


# -- hand-worked vectors (https://postcard.jamesmunns.com/wire-format) ------------------------
@pytest.mark.parametrize(("tp", "value", "wire"), [
    # u16 300 = 0b10_0101100: low 7 bits 0x2C with the continuation bit -> 0xAC, then 0b10 -> 02
    (U16, 300, b"\xac\x02"),
    # zigzag(i32 -1) = 1 -> varint 01
    (I32, -1, b"\x01"),
    # zigzag(i32 1) = 2 -> 02
    (I32, 1, b"\x02"),
    # zigzag(i64 -64) = 127 -> 7F (fits one byte)
    (I64, -64, b"\x7f"),
    # zigzag(i64 64) = 128 -> 80 01
    (I64, 64, b"\x80\x01"),
    # u64 max: nine 7-bit groups of ones (63 bits), then the 64th bit alone -> 01
    (U64, 2**64 - 1, b"\xff" * 9 + b"\x01"),
    # u32 max: four groups of 7 ones, then the last 4 bits -> 0F
    (U32, 2**32 - 1, b"\xff\xff\xff\xff\x0f"),
    # u8 and i8 are one raw byte (i8 -2 = 0xFE two's complement)
    (U8, 200, b"\xc8"),
    (I8, -2, b"\xfe"),
    # zigzag(i16 min -32768) = 65535 -> FF FF 03
    (I16, -32768, b"\xff\xff\x03"),
    (bool, True, b"\x01"),
    (bool, False, b"\x00"),
    # str: varint length 2, then UTF-8 'h' 'i'
    (str, "hi", b"\x02hi"),
    # str "é": 2 UTF-8 bytes C3 A9
    (str, "\u00e9", b"\x02\xc3\xa9"),
    (bytes, b"\x00\xff", b"\x02\x00\xff"),
    # Option<u8>: None -> 00, Some(7) -> 01 07
    (U8 | None, None, b"\x00"),
    (U8 | None, 7, b"\x01\x07"),
    # Vec<u16> [1, 300]: count 2, then 01, then AC 02
    (tuple[U16, ...], (1, 300), b"\x02\x01\xac\x02"),
    (list[U16], [1, 300], b"\x02\x01\xac\x02"),
    # (u8, str) tuple: no count, fields in order
    (tuple[U8, str], (5, "a"), b"\x05\x01a"),
    # enum variant 2 (Tagged) with a u8 field 9: discriminant varint 02, then 09
    (Shape, Tagged(9), b"\x02\x09"),
    # enum variant 300 (Far) with Option<str> None: discriminant AC 02, then 00
    (Shape, Far(None), b"\xac\x02\x00"),
    # Fixed32: 32 raw bytes, no length
    (Fixed32, bytes(range(32)), bytes(range(32))),
])
def test_spec_vectors(tp: Any, value: Any, wire: bytes) -> None:
    assert postcard.encode_value(tp, value) == wire
    assert postcard.decode_value(tp, wire) == (value, len(wire))


def test_struct_vector() -> None:
    m = Mixed(flag=True, small=0xFF, count=128, delta=-2, name="ok", tail=300)
    wire = bytes([
        0x01,              # flag true
        0xFF,              # u8 255, raw
        0x80, 0x01,        # u32 128 = 0b1_0000000 -> 80 01
        0x03,              # zigzag(-2) = 3
        0x02, 0x6F, 0x6B,  # "ok"
        0x01, 0xAC, 0x02,  # Some(300)
    ])
    assert postcard.encode(m) == wire
    assert postcard.decode(Mixed, wire) == m


def test_variant_alone_carries_its_discriminant() -> None:
    # a variant class on its own is written like the enum would write it
    assert postcard.encode(Tagged(9)) == b"\x02\x09"
    assert postcard.decode(Tagged, b"\x02\x09") == Tagged(9)
    assert postcard.decode(Shape, postcard.encode(Tagged(9))) == Tagged(9)  # type: ignore[arg-type]
    with pytest.raises(PostcardError, match="unknown discriminant 1 for enum Tagged"):
        postcard.decode(Tagged, b"\x01\x09")


# -- round trips -------------------------------------------------------------------------------
def _uint(bits: int) -> st.SearchStrategy[int]:
    return st.integers(0, 2**bits - 1)


def _sint(bits: int) -> st.SearchStrategy[int]:
    return st.integers(-(2 ** (bits - 1)), 2 ** (bits - 1) - 1)


inners = st.builds(Inner, x=_uint(32), y=_sint(8), blob=st.binary(max_size=40))
shapes: st.SearchStrategy[Any] = st.one_of(
    st.builds(Leaf, a=_uint(8), b=_sint(16)),
    st.builds(Branch, name=st.text(max_size=20), kids=st.lists(_sint(64), max_size=5).map(tuple),
              flag=st.booleans()),
    st.builds(Tagged, value=_uint(8)),
    st.builds(Far, note=st.none() | st.text(max_size=10)),
)
outers = st.builds(
    Outer,
    ident=st.binary(min_size=32, max_size=32), u16=_uint(16), u64=_uint(64), i32=_sint(32),
    i64=_sint(64), maybe=st.none() | inners, items=st.lists(inners, max_size=4).map(tuple),
    nested=st.lists(st.lists(st.none() | st.text(max_size=8), max_size=4).map(tuple),
                    max_size=4).map(tuple),
    pair=st.tuples(_uint(8), st.text(max_size=8)), shape=shapes,
    shapes=st.lists(st.none() | shapes, max_size=4).map(tuple),
    numbers=st.lists(_uint(16), max_size=6),
)


@given(outers)
def test_round_trip(value: Outer) -> None:
    wire = postcard.encode(value)
    assert postcard.decode(Outer, wire) == value
    assert postcard.decode(Outer, memoryview(wire)) == value
    # decode_prefix at an offset, with bytes after it
    assert postcard.decode_prefix(Outer, b"xy" + wire + b"z", 2) == (value, 2 + len(wire))


@given(shapes)
def test_enum_round_trip(value: Any) -> None:
    wire = postcard.encode_value(Shape, value)
    assert postcard.decode(Shape, wire) == value  # type: ignore[arg-type]
    assert postcard.encode(value) == wire


SCHEMAS: list[Any] = [Outer, Shape, Mixed, Inner, tuple[Shape | None, ...], Strs, Node]


@settings(max_examples=400)
@given(st.sampled_from(SCHEMAS), st.binary(max_size=80))
def test_random_bytes_decode_canonically_or_fail(tp: Any, data: bytes) -> None:
    try:
        value, end = postcard.decode_value(tp, data)
    except PostcardError:
        return
    assert postcard.encode_value(tp, value) == data[:end]


@settings(max_examples=300)
@given(outers, st.lists(st.tuples(st.integers(0, 10_000), st.integers(0, 255)), min_size=1,
                        max_size=4))
def test_mutated_encodings_decode_canonically_or_fail(
        value: Outer, edits: list[tuple[int, int]]) -> None:
    wire = bytearray(postcard.encode(value))
    for pos, byte in edits:
        wire[pos % len(wire)] = byte
    try:
        decoded, end = postcard.decode_prefix(Outer, bytes(wire))
    except PostcardError:
        return
    assert postcard.encode(decoded) == bytes(wire[:end])


@settings(max_examples=50)
@given(outers)
def test_every_strict_prefix_fails(value: Outer) -> None:
    wire = postcard.encode(value)
    for n in range(len(wire)):
        with pytest.raises(PostcardError):
            postcard.decode(Outer, wire[:n])


# -- hostile input -----------------------------------------------------------------------------
@pytest.mark.parametrize(("tp", "data"), [
    (tuple[U8, ...], b"\x80\x80\x80\x80\x08"),             # Vec count 2^31, nothing after it
    (tuple[tuple[U8, ...], ...], b"\xff\xff\xff\xff\x07" + bytes(64)),
    (tuple[Fixed32, ...], b"\x03" + bytes(95)),           # 3 x 32 bytes need 96
    (str, b"\xff\xff\xff\xff\xff\xff\xff\xff\xff\x01"),   # length 2^64-1
    (bytes, b"\x80\x80\x80\x80\x08abc"),
    (list[Inner], b"\xff\xff\xff\xff\x0f" + bytes(100)),
])
def test_oversized_counts_fail_without_allocating(tp: Any, data: bytes) -> None:
    tracemalloc.start()
    try:
        with pytest.raises(PostcardError, match=r"exceeds|needs at least"):
            postcard.decode_value(tp, data)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < 64 * 1024


def test_vec_count_checked_against_element_minimum() -> None:
    # each Fixed32 needs 32 bytes: a count of 2 with 63 bytes left is refused up front
    with pytest.raises(PostcardError, match=r"Bytes32s.ids: sequence count 2 needs at least 64"):
        postcard.decode(Bytes32s, b"\x02" + bytes(63))
    assert postcard.decode(Bytes32s, b"\x02" + bytes(64)) == Bytes32s((bytes(32), bytes(32)))


def test_error_names_the_field_path() -> None:
    from eddy.mesh.frames import Hello

    wire = (b"\x02" + bytes(32)   # discriminant 2 (Hello), node_id
            + b"\x00\x00"         # kafka_node_id 0, roles: empty
            + b"\x03\x01a\x01b"   # addresses: count 3, "a", "b"
            + b"\xa0\x1f"         # third address: length 4000
            + bytes(12))
    with pytest.raises(PostcardError) as info:
        postcard.decode(Hello, wire)
    assert str(info.value) == "Hello.addresses[2]: string length 4000 exceeds the 12 bytes left"
    assert info.value.path == "Hello.addresses[2]"


def test_nested_paths() -> None:
    value = Outer(ident=bytes(32), u16=0, u64=0, i32=0, i64=0, maybe=None,
                  items=(Inner(1, 2, b""), Inner(2**32, 0, b"")), nested=(), pair=(1, ""),
                  shape=Leaf(1, 1), shapes=(), numbers=[])
    with pytest.raises(PostcardError, match=r"^Outer.items\[1\].x: 4294967296 out of range"):
        postcard.encode(value)
    bad = Outer(**{**value.__dict__, "items": (), "shapes": (None, Branch("b", (2**63,), True))})
    with pytest.raises(PostcardError, match=r"^Outer.shapes\[1\]::Branch.kids\[0\]: .*i64"):
        postcard.encode(bad)


@pytest.mark.parametrize(("tp", "data", "message"), [
    (U32, b"\xff\xff\xff\xff\x10", "out of range"),          # 5th byte has bit 4 set: > 2^32-1
    (U32, b"\x80\x80\x80\x80\x80\x01", "longer than 5"),     # a 6th byte
    (U16, b"\xff\xff\x04", "out of range"),                  # 2^16
    (U64, b"\xff" * 9 + b"\x02", "out of range"),            # 2^64
    (U16, b"\x80\x00", "non-canonical"),                     # 0 in two bytes
    (U16, b"\x80", "truncated"),
    (I32, b"\xff\xff\xff\xff\x1f", "out of range"),
    (bool, b"\x02", "neither 0 nor 1"),
    (U8 | None, b"\x02\x07", "Option tag"),
    (str, b"\x02\xc3\x28", "invalid UTF-8"),
    (str, b"\x03\xed\xa0\x80", "invalid UTF-8"),              # an encoded surrogate
    (Shape, b"\x07", "unknown discriminant 7 for enum Leaf | Branch | Tagged | Far"),
    (Shape, b"\xff\xff\xff\xff\x1f", "discriminant"),
    (Fixed32, bytes(31), "32 fixed bytes"),
    (U8, b"", "truncated"),
])
def test_bad_input(tp: Any, data: bytes, message: str) -> None:
    with pytest.raises(PostcardError, match=re.escape(message)):
        postcard.decode_value(tp, data)


def test_trailing_bytes() -> None:
    with pytest.raises(PostcardError, match=r"^Inner: 1 trailing bytes"):
        postcard.decode(Inner, postcard.encode(Inner(1, 1, b"")) + b"\x00")


def test_depth_limit() -> None:
    deep: Node | None = None
    for _ in range(MAX_DEPTH):
        deep = Node(deep)
    assert deep is not None
    wire = postcard.encode(deep)
    assert postcard.decode(Node, wire) == deep
    with pytest.raises(PostcardError, match="nesting deeper than"):
        postcard.encode(Node(deep))
    with pytest.raises(PostcardError, match="nesting deeper than"):
        postcard.decode(Node, b"\x01" * 1000 + b"\x00")


def test_post_init_rejection_is_a_postcard_error() -> None:
    with pytest.raises(PostcardError, match="invalid Checked: n must be a digit"):
        postcard.decode(Checked, b"\x0a")


@pytest.mark.parametrize(("tp", "value", "message"), [
    (U8, 256, "out of range for u8"),
    (U8, -1, "out of range for u8"),
    (I8, 128, "out of range for i8"),
    (U16, True, "expected int"),
    (U32, "1", "expected int"),
    (bool, 1, "expected bool"),
    (str, b"x", "expected str"),
    (str, "\ud800", "not valid UTF-8"),
    (bytes, "x", "expected bytes"),
    (Fixed32, bytes(31), "exactly 32 bytes"),
    (tuple[U8, ...], "ab", "expected a tuple or list"),
    (tuple[U8, str], (1,), "expected a tuple of 2"),
    (Shape, Inner(1, 1, b""), "Inner is not a variant of enum"),
    (Inner, Leaf(1, 1), "expected Inner"),
])
def test_encode_rejects_bad_values(tp: Any, value: Any, message: str) -> None:
    with pytest.raises(PostcardError, match=re.escape(message)):
        postcard.encode_value(tp, value)


def test_encode_rejects_non_dataclass() -> None:
    with pytest.raises(PostcardError, match="expected a dataclass"):
        postcard.encode(42)


def test_unsupported_annotations_are_type_errors() -> None:
    with pytest.raises(TypeError, match="bare int"):
        postcard.encode_value(int, 1)
    with pytest.raises(TypeError, match="no postcard encoding"):
        postcard.encode_value(float, 1.0)
