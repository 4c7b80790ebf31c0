"""The W3C trace context a producer put in a record's headers: the `traceparent` of the
first record of a produce request, for the broker's produce span to continue.

Only used while tracing is on (the produce path never decodes records otherwise), and only
the first record of the first batch is read: its length, fields and header lengths are
checked against the bytes present (a hostile batch yields None, never an exception), at
most MAX_HEADERS headers are looked at, and a compressed batch is decompressed only when it
is small enough (its output bounded by DECOMPRESS_LIMIT).
"""

from __future__ import annotations

import struct

from opentelemetry import trace
from opentelemetry.context import Context

from eddy.protocol.record_batch import HEADER_SIZE, LOG_OVERHEAD, parse_header
from eddy.protocol.records import CorruptRecordError, decompress, read_varint, read_varlong

TRACEPARENT = b"traceparent"
#: headers of the first record looked at for the traceparent
MAX_HEADERS = 64
#: a compressed first batch larger than this is not looked into (the span is then a root)
MAX_COMPRESSED_BATCH = 1 << 20
#: the most a compressed batch may decompress to for the traceparent to be read
DECOMPRESS_LIMIT = 2 << 20
#: version 00's length: 2 + 1 + 32 + 1 + 16 + 1 + 2; later versions may append "-..."
_TRACEPARENT_SIZE = 55
_MAX_TRACEPARENT = 512
_HEX = frozenset(b"0123456789abcdef")


def _records_section(records: bytes | bytearray | memoryview) -> memoryview | bytes | None:
    """The (decompressed) records of the first batch, None when it is not a v2 batch with
    records or its lengths do not fit the bytes present."""
    view = memoryview(records)
    if len(view) < HEADER_SIZE:
        return None
    h = parse_header(view)
    if h.magic != 2 or h.record_count <= 0 or h.batch_length < HEADER_SIZE - LOG_OVERHEAD:
        return None
    if h.size > len(view):
        return None
    section = view[HEADER_SIZE : h.size]
    if h.compression == 0:
        return section
    if len(section) > MAX_COMPRESSED_BATCH:
        return None
    return decompress(h.compression, section, DECOMPRESS_LIMIT)


def _skip_field(buf: memoryview | bytes, pos: int, end: int, what: str) -> int:
    n, pos = read_varint(buf, pos, end, what)
    if n < -1 or n > end - pos:
        raise CorruptRecordError(f"{what}: length {n}")
    return pos + max(n, 0)


def _first_record_header(section: memoryview | bytes, key: bytes) -> bytes | None:
    total = len(section)
    length, pos = read_varint(section, 0, total, "length")
    if length < 6 or length > total - pos:
        return None
    end = pos + length
    p = pos + 1  # attributes
    _, p = read_varlong(section, p, end, "timestamp delta")
    _, p = read_varint(section, p, end, "offset delta")
    p = _skip_field(section, p, end, "key")
    p = _skip_field(section, p, end, "value")
    count, p = read_varint(section, p, end, "header count")
    for _ in range(min(max(count, 0), MAX_HEADERS)):
        klen, p = read_varint(section, p, end, "header key")
        if klen < 0 or klen > end - p:
            return None
        hkey = section[p : p + klen]
        p += klen
        vlen, p = read_varint(section, p, end, "header value")
        if vlen < -1 or vlen > end - p:
            return None
        if hkey == key:
            return bytes(section[p : p + vlen]) if vlen >= 0 else None
        p += max(vlen, 0)
    return None


def first_record_header(records: bytes | bytearray | memoryview | None,
                        key: bytes) -> bytes | None:
    """The value of header `key` of the first record of `records` (a produce request's
    batches), None when it has none or the bytes are not a readable batch."""
    if not records:
        return None
    try:
        section = _records_section(records)
        return None if section is None else _first_record_header(section, key)
    except (CorruptRecordError, struct.error, IndexError, ValueError):
        return None


def parse_traceparent(value: bytes) -> trace.SpanContext | None:
    """A W3C `traceparent` (version-traceid-spanid-flags, lowercase hex) as a remote
    SpanContext; None when it is malformed, of version ff, or has an all-zero id."""
    n = len(value)
    if n < _TRACEPARENT_SIZE or n > _MAX_TRACEPARENT:
        return None
    version = value[0:2]
    if not _HEX.issuperset(version) or version == b"ff":
        return None
    if version == b"00" and n != _TRACEPARENT_SIZE:
        return None
    if n > _TRACEPARENT_SIZE and value[_TRACEPARENT_SIZE] != ord("-"):
        return None
    if value[2] != ord("-") or value[35] != ord("-") or value[52] != ord("-"):
        return None
    trace_hex, span_hex, flags_hex = value[3:35], value[36:52], value[53:55]
    if not (_HEX.issuperset(trace_hex) and _HEX.issuperset(span_hex)
            and _HEX.issuperset(flags_hex)):
        return None
    trace_id, span_id = int(trace_hex, 16), int(span_hex, 16)
    if not trace_id or not span_id:
        return None
    return trace.SpanContext(trace_id=trace_id, span_id=span_id, is_remote=True,
                             trace_flags=trace.TraceFlags(int(flags_hex, 16)))


def remote_parent(records: bytes | bytearray | memoryview | None) -> Context | None:
    """A context whose current span is the producer's (from the first record's
    traceparent), for the produce span to be its child; None when there is none."""
    value = first_record_header(records, TRACEPARENT)
    sc = None if value is None else parse_traceparent(value)
    if sc is None:
        return None
    return trace.set_span_in_context(trace.NonRecordingSpan(sc), Context())
