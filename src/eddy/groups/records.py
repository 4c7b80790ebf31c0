"""The binary formats the group coordinator reads and writes.

1. Apache Kafka's ``__consumer_offsets`` record formats, so that the log Eddy writes is the log
   Kafka writes (and tools that decode Kafka's offsets topic decode ours):

   ======================  =============  ==========================================
   record                  key version    value version written (read)
   ======================  =============  ==========================================
   OffsetCommitKey         1 (0 and 1)    OffsetCommitValue 3; 1 when the commit carries an
                                          explicit expire timestamp (OffsetCommit v2-v4
                                          retention time). Reads 0-4.
   GroupMetadataKey        2              GroupMetadataValue 3. Reads 0-4.
   ======================  =============  ==========================================

   A key is ``int16 version`` followed by the key fields; a value is ``int16 version``
   followed by the value fields. Versions up to 3 use Kafka's classic (non-flexible)
   encoding: big-endian ints, ``int16``-length strings (``-1`` = null), ``int32``-length
   bytes and ``int32``-count arrays. Version 4 values (flexible: compact lengths and tagged
   fields) are decoded too, so a log written by a newer Kafka replays; their tagged fields
   are skipped. A ``None`` value is a tombstone: the key's offset or group is deleted.

   Field lists (Kafka's group-coordinator JSON schemas):

   - OffsetCommitKey: group string, topic string, partition int32.
   - OffsetCommitValue: offset int64, leaderEpoch int32 (v3+, -1 = none), metadata string,
     commitTimestamp int64, expireTimestamp int64 (v1 only).
   - GroupMetadataKey: group string.
   - GroupMetadataValue: protocolType string, generation int32, protocol nullable string,
     leader nullable string, currentStateTimestamp int64 (v2+), members array of
     {memberId string, groupInstanceId nullable string (v3+), clientId string,
     clientHost string, rebalanceTimeout int32 (v1+), sessionTimeout int32,
     subscription bytes, assignment bytes}.

2. The consumer protocol's subscription (``ConsumerProtocolSubscription``): only the topics,
   read with the version-0 prefix every version shares, as Kafka's coordinator does.

3. :func:`partition_for`: Kafka's choice of ``__consumer_offsets`` partition for a group.

Unknown key versions decode to :class:`UnknownKey` (newer Kafka record types): replay skips them.

Every decoder here reads bytes a peer may have written (a client's subscription, a log
replicated from elsewhere), so each length and count is checked against the bytes left
before it is used: bad input raises :class:`RecordFormatError`, and a count can never make
the decoder allocate more than a few objects per byte of input.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass

__all__ = [
    "GROUP_METADATA_KEY_VERSION",
    "OFFSET_COMMIT_KEY_VERSION",
    "GroupMetadataKey",
    "GroupMetadataValue",
    "MemberMetadataValue",
    "OffsetAndMetadata",
    "OffsetCommitKey",
    "Record",
    "RecordFormatError",
    "UnknownKey",
    "decode_group_metadata_value",
    "decode_key",
    "decode_offset_commit_value",
    "encode_group_metadata_key",
    "encode_group_metadata_value",
    "encode_offset_commit_key",
    "encode_offset_commit_value",
    "parse_subscription_topics",
    "partition_for",
]

OFFSET_COMMIT_KEY_VERSION = 1
GROUP_METADATA_KEY_VERSION = 2
OFFSET_COMMIT_VALUE_VERSION = 3
OFFSET_COMMIT_VALUE_VERSION_WITH_EXPIRY = 1
GROUP_METADATA_VALUE_VERSION = 3

_I16 = struct.Struct(">h")
_I32 = struct.Struct(">i")
_I64 = struct.Struct(">q")


class RecordFormatError(ValueError):
    """Bytes that are not a valid record of the format being decoded."""


@dataclass(frozen=True, slots=True)
class Record:
    """One record to append to ``__consumer_offsets``; ``value=None`` is a tombstone."""

    key: bytes
    value: bytes | None


@dataclass(frozen=True, slots=True)
class OffsetCommitKey:
    group: str
    topic: str
    partition: int


@dataclass(frozen=True, slots=True)
class GroupMetadataKey:
    group: str


@dataclass(frozen=True, slots=True)
class UnknownKey:
    """A key of a record type this coordinator does not know (skipped on replay)."""

    version: int


@dataclass(frozen=True, slots=True)
class OffsetAndMetadata:
    """A committed offset: the OffsetCommitValue record and the in-memory entry."""

    offset: int
    leader_epoch: int = -1
    metadata: str = ""
    commit_timestamp: int = -1
    expire_timestamp: int | None = None


@dataclass(frozen=True, slots=True)
class MemberMetadataValue:
    member_id: str
    group_instance_id: str | None
    client_id: str
    client_host: str
    rebalance_timeout_ms: int
    session_timeout_ms: int
    subscription: bytes
    assignment: bytes


@dataclass(frozen=True, slots=True)
class GroupMetadataValue:
    protocol_type: str
    generation: int
    protocol: str | None
    leader: str | None
    current_state_timestamp: int
    members: tuple[MemberMetadataValue, ...]


# ---------------------------------------------------------------------------------------------
# writer


class _Writer:
    __slots__ = ("_parts",)

    def __init__(self) -> None:
        self._parts: list[bytes] = []

    def i16(self, v: int) -> None:
        self._parts.append(_I16.pack(v))

    def i32(self, v: int) -> None:
        self._parts.append(_I32.pack(v))

    def i64(self, v: int) -> None:
        self._parts.append(_I64.pack(v))

    def string(self, v: str | None) -> None:
        if v is None:
            self.i16(-1)
            return
        raw = v.encode()
        if len(raw) > 0x7FFF:
            raise RecordFormatError(f"string of {len(raw)} bytes does not fit an int16 length")
        self.i16(len(raw))
        self._parts.append(raw)

    def bytes_(self, v: bytes) -> None:
        self.i32(len(v))
        self._parts.append(v)

    def getvalue(self) -> bytes:
        return b"".join(self._parts)


# ---------------------------------------------------------------------------------------------
# reader (classic and flexible)


class _Reader:
    __slots__ = ("_buf", "_pos")

    def __init__(self, buf: bytes) -> None:
        self._buf = memoryview(buf)
        self._pos = 0

    @property
    def remaining(self) -> int:
        return len(self._buf) - self._pos

    def count(self, n: int, min_size: int, what: str) -> int:
        """`n` elements of at least `min_size` bytes each, checked against the bytes left."""
        if n > self.remaining // min_size:
            raise RecordFormatError(f"{what} count {n} does not fit the {self.remaining} "
                                    "bytes left")
        return n

    def _take(self, n: int) -> memoryview:
        if n < 0 or self._pos + n > len(self._buf):
            raise RecordFormatError("record is truncated")
        out = self._buf[self._pos : self._pos + n]
        self._pos += n
        return out

    def i16(self) -> int:
        v: int = _I16.unpack(self._take(2))[0]
        return v

    def i32(self) -> int:
        v: int = _I32.unpack(self._take(4))[0]
        return v

    def i64(self) -> int:
        v: int = _I64.unpack(self._take(8))[0]
        return v

    def uvarint(self) -> int:
        shift = 0
        value = 0
        while True:
            b = self._take(1)[0]
            value |= (b & 0x7F) << shift
            if not b & 0x80:
                return value
            shift += 7
            if shift > 28:
                raise RecordFormatError("varint is too long")

    def _decode(self, raw: memoryview) -> str:
        try:
            return bytes(raw).decode()
        except UnicodeDecodeError as exc:
            raise RecordFormatError("string is not UTF-8") from exc

    def nullable_string(self, flexible: bool) -> str | None:
        n = self.uvarint() - 1 if flexible else self.i16()
        if n < 0:
            return None
        return self._decode(self._take(n))

    def string(self, flexible: bool) -> str:
        v = self.nullable_string(flexible)
        if v is None:
            raise RecordFormatError("null where a string is required")
        return v

    def bytes_(self, flexible: bool) -> bytes:
        n = self.uvarint() - 1 if flexible else self.i32()
        if n < 0:
            raise RecordFormatError("null where bytes are required")
        return bytes(self._take(n))

    def array_len(self, flexible: bool) -> int:
        n = self.uvarint() - 1 if flexible else self.i32()
        if n < 0:
            raise RecordFormatError("null where an array is required")
        return self.count(n, 1, "array")

    def skip_tagged_fields(self) -> None:
        for _ in range(self.count(self.uvarint(), 2, "tagged field")):  # tag, size
            self.uvarint()
            self._take(self.uvarint())

    def end(self) -> None:
        if self._pos != len(self._buf):
            raise RecordFormatError(f"{len(self._buf) - self._pos} trailing bytes")


# ---------------------------------------------------------------------------------------------
# keys


def encode_offset_commit_key(group: str, topic: str, partition: int) -> bytes:
    w = _Writer()
    w.i16(OFFSET_COMMIT_KEY_VERSION)
    w.string(group)
    w.string(topic)
    w.i32(partition)
    return w.getvalue()


def encode_group_metadata_key(group: str) -> bytes:
    w = _Writer()
    w.i16(GROUP_METADATA_KEY_VERSION)
    w.string(group)
    return w.getvalue()


def decode_key(data: bytes) -> OffsetCommitKey | GroupMetadataKey | UnknownKey:
    r = _Reader(data)
    version = r.i16()
    if version in (0, 1):
        key: OffsetCommitKey | GroupMetadataKey = OffsetCommitKey(
            r.string(False), r.string(False), r.i32()
        )
    elif version == 2:
        key = GroupMetadataKey(r.string(False))
    else:
        return UnknownKey(version)
    r.end()
    return key


# ---------------------------------------------------------------------------------------------
# offset commit values


def encode_offset_commit_value(value: OffsetAndMetadata) -> bytes:
    w = _Writer()
    if value.expire_timestamp is not None:
        w.i16(OFFSET_COMMIT_VALUE_VERSION_WITH_EXPIRY)
        w.i64(value.offset)
        w.string(value.metadata)
        w.i64(value.commit_timestamp)
        w.i64(value.expire_timestamp)
    else:
        w.i16(OFFSET_COMMIT_VALUE_VERSION)
        w.i64(value.offset)
        w.i32(value.leader_epoch)
        w.string(value.metadata)
        w.i64(value.commit_timestamp)
    return w.getvalue()


def decode_offset_commit_value(data: bytes) -> OffsetAndMetadata:
    r = _Reader(data)
    version = r.i16()
    if not 0 <= version <= 4:
        raise RecordFormatError(f"unknown OffsetCommitValue version {version}")
    flexible = version >= 4
    offset = r.i64()
    leader_epoch = r.i32() if version >= 3 else -1
    metadata = r.string(flexible)
    commit_timestamp = r.i64()
    expire_timestamp = r.i64() if version == 1 else None
    if expire_timestamp == -1:
        expire_timestamp = None
    if flexible:
        r.skip_tagged_fields()
    r.end()
    return OffsetAndMetadata(offset, leader_epoch, metadata, commit_timestamp, expire_timestamp)


# ---------------------------------------------------------------------------------------------
# group metadata values


def encode_group_metadata_value(value: GroupMetadataValue) -> bytes:
    w = _Writer()
    w.i16(GROUP_METADATA_VALUE_VERSION)
    w.string(value.protocol_type)
    w.i32(value.generation)
    w.string(value.protocol)
    w.string(value.leader)
    w.i64(value.current_state_timestamp)
    w.i32(len(value.members))
    for m in value.members:
        w.string(m.member_id)
        w.string(m.group_instance_id)
        w.string(m.client_id)
        w.string(m.client_host)
        w.i32(m.rebalance_timeout_ms)
        w.i32(m.session_timeout_ms)
        w.bytes_(m.subscription)
        w.bytes_(m.assignment)
    return w.getvalue()


def decode_group_metadata_value(data: bytes) -> GroupMetadataValue:
    r = _Reader(data)
    version = r.i16()
    if not 0 <= version <= 4:
        raise RecordFormatError(f"unknown GroupMetadataValue version {version}")
    flex = version >= 4
    protocol_type = r.string(flex)
    generation = r.i32()
    protocol = r.nullable_string(flex)
    leader = r.nullable_string(flex)
    current_state_timestamp = r.i64() if version >= 2 else -1
    members = []
    for _ in range(r.array_len(flex)):
        member_id = r.string(flex)
        instance_id = r.nullable_string(flex) if version >= 3 else None
        client_id = r.string(flex)
        client_host = r.string(flex)
        rebalance_timeout = r.i32() if version >= 1 else -1
        session_timeout = r.i32()
        if version == 0:
            rebalance_timeout = session_timeout
        subscription = r.bytes_(flex)
        assignment = r.bytes_(flex)
        if flex:
            r.skip_tagged_fields()
        members.append(
            MemberMetadataValue(
                member_id, instance_id, client_id, client_host, rebalance_timeout,
                session_timeout, subscription, assignment,
            )
        )
    if flex:
        r.skip_tagged_fields()
    r.end()
    return GroupMetadataValue(
        protocol_type, generation, protocol, leader, current_state_timestamp, tuple(members)
    )


# ---------------------------------------------------------------------------------------------
# consumer protocol


def parse_subscription_topics(metadata: bytes) -> frozenset[str] | None:
    """Topics of a ConsumerProtocolSubscription (any version), or None if it does not parse."""
    try:
        r = _Reader(metadata)
        if r.i16() < 0:
            return None
        n = r.i32()
        if n < 0:
            return None
        return frozenset(r.string(False) for _ in range(r.count(n, 2, "topic")))
    except RecordFormatError:
        return None


# ---------------------------------------------------------------------------------------------
# partitioning


def _java_string_hash(s: str) -> int:
    h = 0
    raw = s.encode("utf-16-be")
    for i in range(0, len(raw), 2):
        h = (31 * h + ((raw[i] << 8) | raw[i + 1])) & 0xFFFFFFFF
    return h - (1 << 32) if h & 0x80000000 else h


def partition_for(group_id: str, num_partitions: int) -> int:
    """The ``__consumer_offsets`` partition Kafka uses for ``group_id``."""
    h = _java_string_hash(group_id)
    return (0 if h == -(1 << 31) else abs(h)) % num_partitions
