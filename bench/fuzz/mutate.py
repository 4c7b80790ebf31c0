"""Deterministic mutations of recorded request frames.

Each frame is a corpus frame with 1-3 mutations stacked on its body (the bytes after the
4-byte size prefix; the API key and version are left alone most of the time so the
decoder of that API is what gets exercised): bit flips, byte overwrites, int16/int32/int64
fields overwritten with extremes, huge varints (5-10 bytes) written or inserted, small
deltas on integers (lengths and counts inconsistent with the body), truncation,
duplication of a region, splicing a region of another frame, deletion. The size prefix is
then set to the body's length, except for a few frames (``bad_size``) where it is not.

Batch number n of seed s always gets the same frames: ``random.Random(f"{s}:{n}")``.
"""

from __future__ import annotations

import random
import struct
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from bench.fuzz.corpus_files import CorpusFrame

HEADER_FIXED = 8  # api key, api version, correlation id: kept by most mutations

INT16_EXTREMES = [0, -1, 1, 0x7FFF, -0x8000, 0x7FFE, 0xFF]
INT32_EXTREMES = [0, -1, 1, 0x7FFFFFFF, -0x80000000, 0x7FFFFFFE, 0xFFFF, 0x10000, 0x1000000]
INT64_EXTREMES = [0, -1, 0x7FFFFFFFFFFFFFFF, -0x8000000000000000, 0xFFFFFFFF]
HUGE_VARINTS = [
    b"\xff\xff\xff\xff\x0f", b"\xff\xff\xff\xff\x2d", b"\x80\x80\x80\x80\x08",
    b"\xff\xff\xff\xff\xff\x01", b"\xff\xff\xff\xff\xff\xff\xff\xff\xff\x01",
    b"\x80\x80\x80\x80\x80\x80\x80\x80\x80\x80\x01", b"\xfe\xff\xff\xff\x07", b"\x00",
    b"\x01", b"\x80\x01",
]
INTERESTING_BYTES = [0x00, 0x01, 0x7F, 0x80, 0xFF, 0xFE]


@dataclass(frozen=True, slots=True)
class Mutated:
    frame: bytes  # size prefix included
    source: CorpusFrame
    ops: tuple[str, ...]
    bad_size: bool  # the size prefix does not match the body


def _pos(rng: random.Random, body: bytearray, lo: int = HEADER_FIXED) -> int:
    if len(body) <= lo:
        return rng.randrange(max(1, len(body)))
    return rng.randrange(lo, len(body))


def bit_flip(rng: random.Random, body: bytearray, _: Sequence[CorpusFrame]) -> None:
    for _i in range(rng.randint(1, 4)):
        if body:
            body[_pos(rng, body)] ^= 1 << rng.randrange(8)


def byte_overwrite(rng: random.Random, body: bytearray, _: Sequence[CorpusFrame]) -> None:
    for _i in range(rng.randint(1, 4)):
        if body:
            body[_pos(rng, body)] = rng.choice([*INTERESTING_BYTES, rng.randrange(256)])


def _int_overwrite(fmt: str, values: list[int]) -> Callable[..., None]:
    st = struct.Struct(fmt)

    def op(rng: random.Random, body: bytearray, _: Sequence[CorpusFrame]) -> None:
        if len(body) < HEADER_FIXED + st.size:
            return
        pos = rng.randrange(HEADER_FIXED, len(body) - st.size + 1)
        value = rng.choice(values)
        lim = 1 << (8 * st.size - 1)
        if value >= lim:
            value -= 2 * lim
        st.pack_into(body, pos, value)

    return op


def _int_delta(fmt: str) -> Callable[..., None]:
    """Nudge an integer by a small amount: a length or count one off, or a few off."""
    st = struct.Struct(fmt)

    def op(rng: random.Random, body: bytearray, _: Sequence[CorpusFrame]) -> None:
        if len(body) < HEADER_FIXED + st.size:
            return
        pos = rng.randrange(HEADER_FIXED, len(body) - st.size + 1)
        (v,) = st.unpack_from(body, pos)
        lim = 1 << (8 * st.size - 1)
        v = (v + rng.choice([-2, -1, 1, 2, 8, -8, 100]) + lim) % (2 * lim) - lim
        st.pack_into(body, pos, v)

    return op


def varint(rng: random.Random, body: bytearray, _: Sequence[CorpusFrame]) -> None:
    v = rng.choice(HUGE_VARINTS)
    pos = _pos(rng, body)
    if rng.random() < 0.5:
        body[pos : pos + 1] = v  # replace one byte (a one-byte varint) by a long one
    else:
        body[pos : pos + len(v)] = v


def truncate(rng: random.Random, body: bytearray, _: Sequence[CorpusFrame]) -> None:
    if len(body) > HEADER_FIXED:
        del body[rng.randrange(HEADER_FIXED, len(body)) :]


def duplicate(rng: random.Random, body: bytearray, _: Sequence[CorpusFrame]) -> None:
    if len(body) <= HEADER_FIXED + 1:
        return
    a = rng.randrange(HEADER_FIXED, len(body))
    b = min(len(body), a + rng.randint(1, 64))
    chunk = bytes(body[a:b]) * rng.choice([1, 1, 2, 16])
    at = _pos(rng, body)
    body[at:at] = chunk


def splice(rng: random.Random, body: bytearray, corpus: Sequence[CorpusFrame]) -> None:
    other = rng.choice(corpus).body
    if len(other) <= HEADER_FIXED:
        return
    a = rng.randrange(HEADER_FIXED, len(other))
    chunk = other[a : a + rng.randint(1, 128)]
    at = _pos(rng, body)
    if rng.random() < 0.5:
        body[at : at + len(chunk)] = chunk
    else:
        body[at:at] = chunk


def delete(rng: random.Random, body: bytearray, _: Sequence[CorpusFrame]) -> None:
    if len(body) > HEADER_FIXED + 1:
        a = rng.randrange(HEADER_FIXED, len(body))
        del body[a : a + rng.randint(1, 16)]


def header_overwrite(rng: random.Random, body: bytearray, _: Sequence[CorpusFrame]) -> None:
    """Now and then, the API key, version or client id length too."""
    if len(body) >= 10:
        pos = rng.choice([0, 2, 8])
        struct.pack_into(">h", body, pos, rng.choice([*INT16_EXTREMES, rng.randrange(70)]))


OPS: list[tuple[str, Callable[..., None], int]] = [
    ("bit_flip", bit_flip, 14),
    ("byte_overwrite", byte_overwrite, 10),
    ("int16", _int_overwrite(">h", INT16_EXTREMES), 10),
    ("int32", _int_overwrite(">i", INT32_EXTREMES), 12),
    ("int64", _int_overwrite(">q", INT64_EXTREMES), 4),
    ("int16_delta", _int_delta(">h"), 6),
    ("int32_delta", _int_delta(">i"), 6),
    ("varint", varint, 12),
    ("truncate", truncate, 6),
    ("duplicate", duplicate, 5),
    ("splice", splice, 6),
    ("delete", delete, 5),
    ("header", header_overwrite, 2),
]
_NAMES = [o[0] for o in OPS]
_FUNCS = [o[1] for o in OPS]
_WEIGHTS = [o[2] for o in OPS]


class Mutator:
    def __init__(self, corpus: Sequence[CorpusFrame], bad_size_rate: float = 0.03) -> None:
        if not corpus:
            raise ValueError("empty corpus: run python -m bench.fuzz.record")
        self.corpus = list(corpus)
        self.bad_size_rate = bad_size_rate

    def mutate(self, rng: random.Random, correlation_id: int) -> Mutated:
        src = rng.choice(self.corpus)
        body = bytearray(src.body)
        if len(body) >= HEADER_FIXED:
            struct.pack_into(">i", body, 4, correlation_id)
        idx = rng.choices(range(len(OPS)), _WEIGHTS, k=rng.choice([1, 1, 1, 2, 2, 3]))
        for i in idx:
            _FUNCS[i](rng, body, self.corpus)
        bad = rng.random() < self.bad_size_rate
        size = len(body)
        if bad:
            size = rng.choice([size + rng.randint(1, 64), max(0, size - rng.randint(1, 8)),
                               0x7FFFFFFF, -1, 0])
        return Mutated(struct.pack(">i", size) + bytes(body), src,
                       tuple(_NAMES[i] for i in idx), bad)

    def batch(self, seed: int, number: int, size: int, first_correlation: int
              ) -> list[Mutated]:
        """Batch `number` of `seed`: `size` frames; one with a bad size prefix comes last
        (the broker reads past it, or closes: nothing after it would be a frame)."""
        rng = random.Random(f"{seed}:{number}")
        frames = [self.mutate(rng, first_correlation + i) for i in range(size)]
        bad = [f for f in frames if f.bad_size]
        if bad:
            frames = [f for f in frames if not f.bad_size] + bad[:1]
        return frames
