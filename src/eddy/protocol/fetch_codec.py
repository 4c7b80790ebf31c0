"""A specialised FetchResponse encoder: the records stay separate buffers (no copy into
one big response), everything else is written by hand. Byte-identical to kio's encoding
(property-tested in tests/unit/test_fetch_codec.py)."""

from __future__ import annotations

import struct
import uuid
from collections.abc import Sized
from dataclasses import dataclass

_I16 = struct.Struct(">h")
_I32 = struct.Struct(">i")
_PART_FIXED = struct.Struct(">ihqqq")  # index, error, hwm, lso, log start
_PART_FIXED_V4 = struct.Struct(">ihqq")  # v4: no log start offset
_ABORTED = struct.Struct(">qq")
_LEADER = struct.Struct(">ii")


def _uvarint(n: int) -> bytes:
    out = bytearray()
    while n & ~0x7F:
        out.append((n & 0x7F) | 0x80)
        n >>= 7
    out.append(n)
    return bytes(out)


@dataclass(slots=True)
class FetchPartition:
    index: int
    error_code: int
    high_watermark: int
    last_stable_offset: int
    log_start_offset: int
    aborted: list[tuple[int, int]] | None
    records: Sized | None  # bytes, or a file range the connection sends itself
    #: KIP-951 (v12+ tagged field 1): the leader and epoch a NOT_LEADER_OR_FOLLOWER names
    current_leader: tuple[int, int] | None = None


@dataclass(slots=True)
class NodeEndpoint:
    """KIP-951 (v16+ tagged field 0 of the response): where a named leader listens."""

    node_id: int
    host: str
    port: int
    rack: str | None


@dataclass(slots=True)
class FetchTopic:
    name: str | None
    topic_id: uuid.UUID | None
    partitions: list[FetchPartition]


def encode_fetch_response(
    version: int,
    correlation_id: int,
    topics: list[FetchTopic],
    *,
    error_code: int = 0,
    session_id: int = 0,
    throttle_ms: int = 0,
    node_endpoints: list[NodeEndpoint] | None = None,
) -> list[Sized]:
    """The response (header included, size prefix excluded) as a list of buffers."""
    flexible = version >= 12
    head = bytearray(_I32.pack(correlation_id))
    if flexible:
        head.append(0)  # response header v1: no tagged fields
    head += _I32.pack(throttle_ms)
    if version >= 7:
        head += _I16.pack(error_code)
        head += _I32.pack(session_id)
    head += _uvarint(len(topics) + 1) if flexible else _I32.pack(len(topics))
    chunks: list[Sized] = []
    buf = head
    for t in topics:
        if version >= 13:
            buf += (t.topic_id or uuid.UUID(int=0)).bytes
        else:
            name = (t.name or "").encode()
            buf += _uvarint(len(name) + 1) if flexible else _I16.pack(len(name))
            buf += name
        parts = t.partitions
        buf += _uvarint(len(parts) + 1) if flexible else _I32.pack(len(parts))
        for p in parts:
            if version >= 5:
                buf += _PART_FIXED.pack(p.index, p.error_code, p.high_watermark,
                                        p.last_stable_offset, p.log_start_offset)
            else:
                buf += _PART_FIXED_V4.pack(p.index, p.error_code, p.high_watermark,
                                           p.last_stable_offset)
            aborted = p.aborted
            if aborted is None:
                buf += b"\x00" if flexible else _I32.pack(-1)
            else:
                buf += _uvarint(len(aborted) + 1) if flexible else _I32.pack(len(aborted))
                for producer_id, first_offset in aborted:
                    buf += _ABORTED.pack(producer_id, first_offset)
                    if flexible:
                        buf.append(0)
            if version >= 11:
                buf += _I32.pack(-1)  # preferred read replica
            records = p.records
            if records is None:
                buf += b"\x00" if flexible else _I32.pack(-1)
            else:
                n = len(records)
                buf += _uvarint(n + 1) if flexible else _I32.pack(n)
                if n:
                    chunks.append(bytes(buf))
                    chunks.append(records)
                    buf = bytearray()
            if flexible:
                if p.current_leader is not None:  # one tagged field: tag 1, 9 bytes
                    buf += b"\x01\x01\x09" + _LEADER.pack(*p.current_leader) + b"\x00"
                else:
                    buf.append(0)  # partition tagged fields
        if flexible:
            buf.append(0)  # topic tagged fields
    if flexible:
        if version >= 16 and node_endpoints:
            field = _node_endpoints(node_endpoints)
            buf += b"\x01\x00" + _uvarint(len(field)) + field
        else:
            buf.append(0)  # response tagged fields
    chunks.append(bytes(buf))
    return chunks


def _compact_string(value: str | None) -> bytes:
    if value is None:
        return b"\x00"
    data = value.encode()
    return _uvarint(len(data) + 1) + data


def _node_endpoints(endpoints: list[NodeEndpoint]) -> bytes:
    out = bytearray(_uvarint(len(endpoints) + 1))
    for e in endpoints:
        out += _I32.pack(e.node_id) + _compact_string(e.host) + _I32.pack(e.port)
        out += _compact_string(e.rack) + b"\x00"
    return bytes(out)
