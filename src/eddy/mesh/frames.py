"""Mesh stream frames (seed 000), sans-IO: the per-stream grammar, the tag table, the W3C
trace context carried in the frame header, and the substrate's postcard messages.

A stream carries exactly one frame, then EOF::

    frame = tag(u8) trace(32 bytes) length(LEB128 u32) payload(postcard, `length` bytes)

trace = version u8 (0), trace_id 16 bytes, span_id 8 bytes, flags u8 (bit 0 = sampled),
6 reserved zero bytes; all zero = no trace context.

``FrameReader`` checks the header as it arrives: a reserved tag, a bad trace context, a bad
or oversized length fail as soon as those bytes are in, before the payload is buffered, and
a byte past the payload fails when fed. It never holds more than header + length bytes.
Unknown tags parse: the dispatcher drops them (``unsupported_tag`` span).
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from typing import ClassVar

from opentelemetry import context as otel_context
from opentelemetry import trace

from eddy.postcard import I16, I32, U8, U32, U64, Fixed32

# -- tag table (seed 000) ----------------------------------------------------------------------
TAG_RESERVED = 0x00
TAG_POINTER_PULL = 0x01  # control: pointer-gossip pulls
TAG_GOSSIP = 0x03  # control: gossip messages (uni streams / datagrams)
TAG_CONTROL_RPC = 0x04  # control: request/response
TAG_RAFT = 0x05  # control: Raft messages (RaftMessage, uni streams)
TAG_CONTROLLER = 0x06  # control: brokers' requests to the controller (request/response)
TAG_TXN_MARKERS = 0x07  # control: transaction markers for a partition's leader (req/resp)
TAG_REGISTRY = 0x08  # control: schema registry writes for the _schemas leader (req/resp)
TAG_CREDENTIALS = 0x09  # control: a gateway's SCRAM credential lookups at a broker (req/resp)
TAG_AUTHORIZE = 0x0A  # control: a gateway's ACL decisions asked of a broker (req/resp)
TAG_PING = 0x10  # data: Ping / Pong / Hello (PingFrame)
TAG_KAFKA_OP = 0x11  # data: KafkaOp carrier
TAG_KAFKA_OP_AS = 0x12  # data: KafkaOp carrier on behalf of a gateway's client (KafkaOpAs)
TAG_EXTENSION_FIRST = 0x80


def tag_class(tag: int) -> str:
    """"reserved", "control" (0x01-0x0F), "data" (0x10-0x7F) or "extension" (0x80-0xFF)."""
    if not 0 <= tag <= 0xFF:
        raise ValueError(f"tag {tag} is not a byte")
    if tag == TAG_RESERVED:
        return "reserved"
    if tag < 0x10:
        return "control"
    return "data" if tag < TAG_EXTENSION_FIRST else "extension"


# -- errors ------------------------------------------------------------------------------------
FRAME_ERROR_REASONS = ("truncated", "oversized", "reserved_tag", "trailing_bytes", "bad_trace",
                       "bad_length")


class FrameError(ValueError):
    """A malformed frame; ``reason`` is one of FRAME_ERROR_REASONS (or a caller's own, such
    as "bad_tag" for an answer under the wrong tag)."""

    def __init__(self, message: str, reason: str) -> None:
        super().__init__(message)
        self.reason = reason


# -- W3C trace context -------------------------------------------------------------------------
TRACE_SIZE = 32
_NO_TRACE = bytes(TRACE_SIZE)


@dataclass(frozen=True, slots=True)
class TraceContext:
    """A W3C trace context: 16-byte trace id, 8-byte span id, flags (bit 0 = sampled)."""

    trace_id: bytes
    span_id: bytes
    flags: int

    def __post_init__(self) -> None:
        if len(self.trace_id) != 16 or not any(self.trace_id):
            raise ValueError("trace_id must be 16 bytes, not all zero")
        if len(self.span_id) != 8 or not any(self.span_id):
            raise ValueError("span_id must be 8 bytes, not all zero")
        if not 0 <= self.flags <= 0xFF:
            raise ValueError(f"flags {self.flags} is not a byte")

    @property
    def sampled(self) -> bool:
        return bool(self.flags & 1)

    def pack(self) -> bytes:
        return b"\x00" + self.trace_id + self.span_id + bytes((self.flags,)) + bytes(6)

    @staticmethod
    def unpack(b32: bytes | bytearray | memoryview) -> TraceContext | None:
        """The trace context in a frame header, None when all zero. Raises FrameError
        ("bad_trace") for a wrong size, version, reserved bytes or a zero id."""
        raw = bytes(b32)
        if len(raw) != TRACE_SIZE:
            raise FrameError(f"trace context is {len(raw)} bytes, not {TRACE_SIZE}", "bad_trace")
        if raw == _NO_TRACE:
            return None
        if raw[0] != 0:
            raise FrameError(f"trace context version {raw[0]} (only 0 is known)", "bad_trace")
        if any(raw[26:]):
            raise FrameError("trace context reserved bytes are not zero", "bad_trace")
        trace_id, span_id = raw[1:17], raw[17:25]
        if not any(trace_id) or not any(span_id):
            raise FrameError("trace context with an all-zero trace_id or span_id", "bad_trace")
        return TraceContext(trace_id, span_id, raw[25])


def pack_trace(tc: TraceContext | None) -> bytes:
    return _NO_TRACE if tc is None else tc.pack()


def from_span_context(sc: trace.SpanContext) -> TraceContext | None:
    """An OpenTelemetry SpanContext as a TraceContext (None when it is not valid)."""
    if not sc.is_valid:
        return None
    return TraceContext(sc.trace_id.to_bytes(16, "big"), sc.span_id.to_bytes(8, "big"),
                        int(sc.trace_flags) & 0xFF)


def to_span_context(tc: TraceContext) -> trace.SpanContext:
    """The remote SpanContext a receiver continues the sender's trace from."""
    return trace.SpanContext(trace_id=int.from_bytes(tc.trace_id, "big"),
                             span_id=int.from_bytes(tc.span_id, "big"), is_remote=True,
                             trace_flags=trace.TraceFlags(tc.flags))


def current_trace_context() -> TraceContext | None:
    """The current span's context, to put in an outgoing frame (None outside any span)."""
    return from_span_context(trace.get_current_span().get_span_context())


def remote_context(tc: TraceContext,
                   parent: otel_context.Context | None = None) -> otel_context.Context:
    """An OpenTelemetry context whose current span is the sender's (remote, not recording):
    spans started under it continue the sender's trace."""
    return trace.set_span_in_context(trace.NonRecordingSpan(to_span_context(tc)), parent)


# -- frames ------------------------------------------------------------------------------------
_U32_MAX = (1 << 32) - 1
_HEAD = 1 + TRACE_SIZE  # tag + trace, before the length varint
_MAX_HEADER = _HEAD + 5  # a u32 varint is at most 5 bytes


@dataclass(frozen=True, slots=True)
class Frame:
    tag: int
    trace: TraceContext | None
    payload: bytes


def encode_frame(tag: int, payload: bytes, trace: TraceContext | None = None) -> bytes:
    if not 0 < tag <= 0xFF:
        raise ValueError(f"tag {tag} is reserved or not a byte")
    n = len(payload)
    if n > _U32_MAX:
        raise ValueError(f"payload of {n} bytes exceeds a u32 length")
    out = bytearray((tag,))
    out += pack_trace(trace)
    while n >= 0x80:
        out.append((n & 0x7F) | 0x80)
        n >>= 7
    out.append(n)
    out += payload
    return bytes(out)


def _parse_header(head: bytes | bytearray, max_payload: int
                  ) -> tuple[int, TraceContext | None, int, int] | None:
    """(tag, trace, length, header size) once ``head`` holds a whole header, None while it
    may still become one; FrameError as soon as it cannot."""
    if not head:
        return None
    tag = head[0]
    if tag == TAG_RESERVED:
        raise FrameError("tag 0x00 is reserved", "reserved_tag")
    if len(head) < _HEAD:
        return None
    tc = TraceContext.unpack(head[1:_HEAD])
    if len(head) == _HEAD:
        return None
    length = shift = 0
    for i in range(_HEAD, min(len(head), _MAX_HEADER)):
        b = head[i]
        length |= (b & 0x7F) << shift
        shift += 7
        if b < 0x80:
            if b == 0 and i > _HEAD:
                raise FrameError("length varint is not minimal", "bad_length")
            if length > _U32_MAX:
                raise FrameError(f"length {length} exceeds a u32", "bad_length")
            if length > max_payload:
                raise FrameError(f"payload length {length} exceeds {max_payload}", "oversized")
            return tag, tc, length, i + 1
    if len(head) >= _MAX_HEADER:
        raise FrameError("length varint longer than 5 bytes", "bad_length")
    return None


class FrameReader:
    """Incremental parser for one stream: ``feed`` the bytes as they come, ``finish`` at EOF.
    After an error every call raises the same error."""

    def __init__(self, max_payload: int) -> None:
        if not 0 <= max_payload <= _U32_MAX:
            raise ValueError("max_payload must fit a u32")
        self.max_payload = max_payload
        self._head = bytearray()
        self._header: tuple[int, TraceContext | None, int] | None = None
        self._payload = bytearray()
        self._error: FrameError | None = None

    @property
    def buffered(self) -> int:
        return len(self._head) + len(self._payload)

    def feed(self, data: bytes | bytearray | memoryview) -> None:
        if self._error is not None:
            raise self._error
        try:
            self._feed(memoryview(data).cast("B"))
        except FrameError as exc:
            self._error = exc
            raise

    def _feed(self, view: memoryview) -> None:
        if self._header is None:
            room = _MAX_HEADER - len(self._head)
            self._head += view[:room]
            parsed = _parse_header(self._head, self.max_payload)
            if parsed is None:
                return
            tag, tc, length, size = parsed
            self._header = (tag, tc, length)
            rest = self._head[size:]
            del self._head[size:]
            self._take(rest, length)
            self._take(view[room:], length)
        else:
            self._take(view, self._header[2])

    def _take(self, data: bytes | bytearray | memoryview, length: int) -> None:
        if not data:
            return
        if len(self._payload) + len(data) > length:
            raise FrameError(f"bytes after the {length}-byte payload", "trailing_bytes")
        self._payload += data

    def finish(self) -> Frame:
        """The frame, once the stream has ended; FrameError("truncated") if it is short."""
        if self._error is not None:
            raise self._error
        if self._header is None:
            self._error = FrameError(f"stream ended inside the frame header "
                                     f"({len(self._head)} bytes)", "truncated")
            raise self._error
        tag, tc, length = self._header
        if len(self._payload) != length:
            self._error = FrameError(f"stream ended after {len(self._payload)} of {length} "
                                     "payload bytes", "truncated")
            raise self._error
        return Frame(tag, tc, bytes(self._payload))


def parse_frame(data: bytes | bytearray | memoryview, max_payload: int) -> Frame:
    """A whole stream (everything up to EOF) as one frame."""
    reader = FrameReader(max_payload)
    reader.feed(data)
    return reader.finish()


# -- Ping / Pong / Hello (TAG_PING) ------------------------------------------------------------
@dataclass(frozen=True, slots=True)
class PeerInfo:
    node_id: Fixed32
    kafka_node_id: I32
    mesh_addr: str
    kafka_addr: str
    roles: tuple[str, ...]
    rack: str | None


@dataclass(frozen=True, slots=True)
class Ping:
    VARIANT: ClassVar[int] = 0
    nonce: U64
    sent_ms: U64


@dataclass(frozen=True, slots=True)
class Pong:
    VARIANT: ClassVar[int] = 1
    nonce: U64
    sent_ms: U64
    peers: tuple[PeerInfo, ...]  # peer exchange (seed 002)


@dataclass(frozen=True, slots=True)
class Hello:
    VARIANT: ClassVar[int] = 2
    node_id: Fixed32
    kafka_node_id: I32
    roles: tuple[str, ...]
    addresses: tuple[str, ...]  # mesh "host:port" first, then "kafka=host:port"
    rack: str | None
    version: str


PingFrame = Ping | Pong | Hello

# -- KafkaOp carrier (TAG_KAFKA_OP; seed 003) --------------------------------------------------
KAFKA_OP_PRODUCE = 0x02
KAFKA_OP_JOIN_GROUP = 0x06
KAFKA_OP_SYNC_GROUP = 0x07
KAFKA_OP_HEARTBEAT = 0x08
KAFKA_OP_LEAVE_GROUP = 0x09
KAFKA_OP_OFFSET_COMMIT = 0x0A
KAFKA_OP_OFFSET_FETCH = 0x0B

KAFKA_OP_STATUS_OK = 0  # body = the op's postcard response
KAFKA_OP_STATUS_UNKNOWN_OP = 1
KAFKA_OP_STATUS_TIMED_OUT = 2
KAFKA_OP_STATUS_FAILED = 3  # message says why
KAFKA_OP_STATUS_CANCELLED = 4


@dataclass(frozen=True, slots=True)
class KafkaOpRequest:
    correlation_id: U64
    op: U8
    org_id: U64
    timeout_ms: U32
    body: bytes


@dataclass(frozen=True, slots=True)
class KafkaOpResponse:
    correlation_id: U64
    op: U8
    status: U8
    body: bytes
    message: str


@dataclass(frozen=True, slots=True)
class KafkaOpAs:
    """TAG_KAFKA_OP_AS: a KafkaOp run as the gateway's client: its principal (e.g.
    "User:alice") and address; ``request`` is a KafkaOpRequest's postcard encoding (the
    answer is a KafkaOpResponse, as under TAG_KAFKA_OP)."""

    principal: str
    host: str
    request: bytes


# -- SCRAM credentials for a gateway (TAG_CREDENTIALS) -----------------------------------------
@dataclass(frozen=True, slots=True)
class CredentialRequest:
    user: str
    mechanism: U8  # Kafka's ScramMechanism: 1 SCRAM-SHA-256, 2 SCRAM-SHA-512


@dataclass(frozen=True, slots=True)
class CredentialAnswer:
    """``error_code`` 0 or a Kafka code (CLUSTER_AUTHORIZATION_FAILED: the asker is not a
    mesh member); ``found`` False: no such credential (the other fields empty)."""

    error_code: I16
    found: bool
    salt: bytes
    stored_key: bytes
    server_key: bytes
    iterations: U32


# -- ACL decisions for a gateway (TAG_AUTHORIZE) ----------------------------------------------
AUTHORIZE_RESOURCE = 0  # AuthorizeCheck.kind: may the principal do the operation on the name
AUTHORIZE_ANY = 1  # ... on some resource of the type (Kafka's authorizeByResourceType)


@dataclass(frozen=True, slots=True)
class AuthorizeCheck:
    """One decision: ``operation`` (AclOperation) on ``resource_type`` (ResourceType)
    ``name``; ``kind`` AUTHORIZE_ANY asks about any resource of the type (name empty)."""

    kind: U8
    operation: U8
    resource_type: U8
    name: str


@dataclass(frozen=True, slots=True)
class AuthorizeRequest:
    """The decisions a gateway needs for its client ``principal`` at ``host``."""

    principal: str
    host: str
    checks: tuple[AuthorizeCheck, ...]


@dataclass(frozen=True, slots=True)
class AuthorizeAnswer:
    """``error_code`` 0 or a Kafka code (CLUSTER_AUTHORIZATION_FAILED: the asker is not a
    gateway of the mesh; INVALID_REQUEST: the request broke the bounds). ``enabled`` False:
    the broker has no authorizer (everything is allowed, ``allowed`` empty); else one
    decision per check, in order."""

    error_code: I16
    enabled: bool
    allowed: tuple[bool, ...]


# -- pointer gossip (seed 000) -----------------------------------------------------------------
POINTER_THRESHOLD = 1200  # bytes: larger payloads travel by pointer


def pointer_hash(payload: bytes | bytearray | memoryview) -> bytes:
    """BLAKE2b-256 of the payload."""
    return hashlib.blake2b(payload, digest_size=32).digest()


@dataclass(frozen=True, slots=True)
class Pointer:
    hash: Fixed32
    size: U32
    source: Fixed32  # the node id to pull from


@dataclass(frozen=True, slots=True)
class PullRequest:
    hash: Fixed32


@dataclass(frozen=True, slots=True)
class PullResponse:
    hash: Fixed32
    payload: bytes | None  # None: not cached any more
