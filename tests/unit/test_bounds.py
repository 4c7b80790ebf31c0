"""The bounds-checking pass (eddy.protocol.bounds) that runs before kio decodes a message:
every length and count is checked against the bytes present, for every API version the
broker advertises (requests) and every response our own clients read."""

from __future__ import annotations

import datetime
import io
import struct
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from kio.index import load_request_schema, load_response_schema
from kio.schema.consumer_group_heartbeat.v0.response import ConsumerGroupHeartbeatResponse
from kio.schema.errors import ErrorCode
from kio.serial import entity_reader, entity_writer
from kio.static.primitive import Records

from eddy.protocol.apis import SUPPORTED, ApiKey
from eddy.protocol.bounds import BoundsError, check, is_panic
from eddy.protocol.codec import MalformedRequest, decode_request

# kio's Records phantom type has no strategy of its own
st.register_type_strategy(Records, st.binary(max_size=48))

#: the frame from issue 11: ListOffsets v7 whose topics compact-array length is the
#: varint ff ff ff ff 2d; kio alone tried to allocate ~98 GB for it and aborted the process
ISSUE_FRAME = bytes.fromhex(
    "0000003b0002000700000004000772646b61666b6100ffffffff01ffffffff2d6d61696e2d63356332"
    "3237020000000100000000fffffffffffffffe000000"
)

CLASSES = [
    pytest.param(load(key, version), id=f"{key.name}-v{version}-{kind}")
    for key, versions in SUPPORTED.items()
    for version in range(versions.min, versions.max + 1)
    for kind, load in (("request", load_request_schema), ("response", load_response_schema))
]

PROPERTY = settings(
    max_examples=3, deadline=None, database=None, derandomize=True,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)


def encode(cls: type[Any], message: Any) -> bytes:
    buf = io.BytesIO()
    entity_writer(cls)(buf, message)
    return buf.getvalue()


def header(api_key: int, version: int, flexible: bool) -> bytes:
    h = struct.pack(">hhih", api_key, version, 7, 4) + b"test"
    return h + (b"\x00" if flexible else b"")


def rejected(cls: type[Any], data: bytes) -> str:
    with pytest.raises(BoundsError) as info:
        check(cls, data, 0)
    return str(info.value)


# ---- the regression and one test per class of bounds check --------------------------


def test_issue_frame_is_rejected_naming_the_field() -> None:
    with pytest.raises(MalformedRequest) as info:
        decode_request(ISSUE_FRAME[4:], ApiKey.LIST_OFFSETS, 7)
    message = str(info.value)
    assert "ListOffsetsRequest.topics" in message
    assert "12348030974 elements" in message


def test_legacy_array_count_beyond_the_bytes() -> None:
    cls = load_request_schema(ApiKey.METADATA, 4)
    body = struct.pack(">i", 2**31 - 1) + b"\x00" * 8 + b"\x01"  # topics: 2^31-1 names
    assert "MetadataRequest.topics: array of 2147483647 elements" in rejected(cls, body)
    # a count that fits the bytes but whose elements do not is caught element by element
    body = struct.pack(">i", 3) + struct.pack(">h", 1) + b"a" + struct.pack(">h", 50)
    assert "MetadataRequestTopic.name" in rejected(cls, body + b"\x00" * 4)


def test_negative_array_count_other_than_null() -> None:
    cls = load_request_schema(ApiKey.METADATA, 4)
    assert "array length -2 is negative" in rejected(cls, struct.pack(">i", -2) + b"\x01")
    check(cls, struct.pack(">i", -1) + b"\x01", 0)  # -1 is a null array: all topics


def test_legacy_string_length() -> None:
    cls = load_request_schema(ApiKey.FIND_COORDINATOR, 1)
    body = struct.pack(">h", 32767) + b"group" + b"\x00"
    assert "FindCoordinatorRequest.key: needs 32767 bytes" in rejected(cls, body)
    assert "string length -5 is negative" in rejected(cls, struct.pack(">h", -5) + b"\x00")


def test_compact_string_length() -> None:
    cls = load_request_schema(ApiKey.FIND_COORDINATOR, 3)
    body = b"\xff\xff\xff\x7f" + b"g" * 10 + b"\x00\x00"
    assert "FindCoordinatorRequest.key: needs 268435454 bytes" in rejected(cls, body)


def test_legacy_bytes_length() -> None:
    cls = load_request_schema(ApiKey.PRODUCE, 3)
    body = (struct.pack(">hhi", -1, 1, 1000) + struct.pack(">i", 1) + struct.pack(">h", 1)
            + b"t" + struct.pack(">i", 1) + struct.pack(">i", 0) + struct.pack(">i", 2**30)
            + b"records")
    assert "PartitionProduceData.records: needs 1073741824 bytes" in rejected(cls, body)
    bad = body[:-11] + struct.pack(">i", -7) + b"records"
    assert "bytes length -7 is negative" in rejected(cls, bad)


def test_compact_bytes_length() -> None:
    cls = load_request_schema(ApiKey.PRODUCE, 9)
    body = (b"\x00" + struct.pack(">hi", 1, 1000) + b"\x02" + b"\x02t" + b"\x02"
            + struct.pack(">i", 0) + b"\x80\x80\x80\x80\x04" + b"records")
    assert "PartitionProduceData.records: needs 1073741823 bytes" in rejected(cls, body)


def test_unsigned_varint_longer_than_five_bytes() -> None:
    cls = load_request_schema(ApiKey.FIND_COORDINATOR, 3)
    assert "longer than 5 bytes" in rejected(cls, b"\x80" * 9 + b"\x01" + b"\x00")
    assert "runs past the end" in rejected(cls, b"\x80\x80")


def test_tagged_field_count_and_size() -> None:
    cls = load_request_schema(ApiKey.HEARTBEAT, 4)
    fixed = b"\x02g" + struct.pack(">i", 1) + b"\x02m" + b"\x00"  # group, generation,
    # member, null instance id; then the tagged fields
    check(cls, fixed + b"\x00", 0)
    assert "tagged fields cannot fit" in rejected(cls, fixed + b"\xff\xff\xff\xff\x0f")
    assert "(tag 9)" in rejected(cls, fixed + b"\x01\x09\xff\xff\x03" + b"x" * 10)
    # unknown tags with honest sizes are skipped, as Kafka does
    check(cls, fixed + b"\x02\x09\x02ab\x0a\x00", 0)


def test_known_tag_checked_inside_its_own_size() -> None:
    cls = load_request_schema(ApiKey.FETCH, 12)
    good = encode(cls, cls(
        cluster_id="c", max_wait=datetime.timedelta(milliseconds=1),
        min_bytes=1, max_bytes=1, isolation_level=0, session_id=0, session_epoch=-1,
        topics=(), forgotten_topics_data=(), rack_id="",
    ))
    check(cls, good, 0)
    # the tagged cluster_id (tag 0) says its value is 2 bytes; make the string inside
    # claim 100 bytes: the bytes after the tag must not be read as part of it
    tags_at = good.index(b"\x01\x00\x02\x02c")
    bad = good[:tags_at] + b"\x01\x00\x02\x65c" + good[tags_at + 5:] + b"z" * 200
    assert "cluster_id" in rejected(cls, bad)


def test_nullable_struct_marker() -> None:
    cls = ConsumerGroupHeartbeatResponse
    body = encode(cls, cls(
        throttle_time=datetime.timedelta(0), error_code=ErrorCode.none,
        error_message=None, member_id="m", member_epoch=1,
        heartbeat_interval=datetime.timedelta(0), assignment=None,
    ))
    check(cls, body, 0)
    marker_at = len(body) - 2  # the assignment's null marker, then the tagged fields
    assert body[marker_at] == 0xFF
    bad = body[:marker_at] + b"\x05" + body[marker_at + 1:]
    assert "null marker is 5" in rejected(cls, bad)


def test_null_only_where_the_field_is_nullable() -> None:
    """Kafka's readers reject a null array, string or bytes in a field that is not
    nullable; so do we, before a handler meets None where it expects a value."""
    groups = load_request_schema(ApiKey.DELETE_GROUPS, 1)  # legacy array, not nullable
    assert "groups_names: null" in rejected(groups, struct.pack(">i", -1))
    groups2 = load_request_schema(ApiKey.DELETE_GROUPS, 2)  # compact array
    assert "groups_names: null" in rejected(groups2, b"\x00\x00")
    find = load_request_schema(ApiKey.FIND_COORDINATOR, 3)  # compact string
    assert "key: null" in rejected(find, b"\x00\x00\x00")
    find1 = load_request_schema(ApiKey.FIND_COORDINATOR, 1)  # legacy string
    assert "key: null" in rejected(find1, struct.pack(">h", -1) + b"\x00")
    metadata = load_request_schema(ApiKey.METADATA, 4)  # topics is nullable here
    check(metadata, struct.pack(">i", -1) + b"\x01", 0)
    produce = load_request_schema(ApiKey.PRODUCE, 3)  # transactional_id is nullable
    check(produce, struct.pack(">hhii", -1, 1, 1000, 0), 0)


def test_arrays_of_empty_elements_are_still_bounded() -> None:
    """Each element takes at least one byte, whatever its fields, so a count never
    exceeds the bytes left (as in Kafka's generated readers)."""
    cls = load_request_schema(ApiKey.DELETE_GROUPS, 2)
    assert "compact array of 1000000" in rejected(cls, b"\xc1\x84\x3d" + b"\x00" * 10)


# ---- every advertised version, both directions ----------------------------------------


@pytest.mark.parametrize("cls", CLASSES)
@PROPERTY
@given(data=st.data())
def test_walker_agrees_with_kio_on_valid_messages(cls: type[Any], data: st.DataObject
                                                  ) -> None:
    """A message kio encodes is accepted and walked to its exact end; every truncation
    of it is rejected."""
    encoded = encode(cls, data.draw(st.from_type(cls)))
    assert check(cls, encoded, 0) == len(encoded)
    for cut in range(len(encoded)):
        with pytest.raises(BoundsError):
            check(cls, encoded[:cut], 0)


_EXTREMES = [b"\x00", b"\xff", b"\x7f\xff\xff\xff", b"\x80\x00\x00\x00",
             b"\xff\xff\xff\xff\x0f", b"\xff\xff\xff\xff\x2d", b"\x80\x80\x80\x80\x00"]


@pytest.mark.parametrize("cls", CLASSES)
@settings(max_examples=8, deadline=None, database=None, derandomize=True,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(data=st.data())
def test_mutated_messages_never_reach_kio_unchecked(cls: type[Any], data: st.DataObject
                                                    ) -> None:
    """Whatever a mutation does, either the walker rejects it or kio decodes it or
    raises an ordinary exception: no panic, no abort of this process, no huge
    allocation (an abort would end the test run)."""
    buf = bytearray(encode(cls, data.draw(st.from_type(cls))))
    for _ in range(data.draw(st.integers(1, 3))):
        if not buf:
            break
        at = data.draw(st.integers(0, len(buf) - 1))
        patch = data.draw(st.one_of(st.sampled_from(_EXTREMES), st.binary(min_size=1, max_size=4)))
        buf[at:at + len(patch)] = patch
    mutated = bytes(buf)
    try:
        check(cls, mutated, 0)
    except BoundsError:
        return
    try:
        entity_reader(cls)(mutated, 0)
    except BaseException as exc:  # what kio raises is the point
        assert isinstance(exc, Exception) and not is_panic(exc), repr(exc)
