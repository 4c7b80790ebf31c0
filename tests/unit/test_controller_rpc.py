"""The controller RPC messages (tag 0x06): round trips, bytes that are not a request, and an
answer's error code from a peer that Kafka does not define."""

from __future__ import annotations

import pytest

from eddy import postcard
from eddy.cluster.controller.rpc import (
    CreateTopicRequest,
    HeartbeatRequest,
    ImportOffsetsRequest,
    decode_reply,
    decode_request,
    error_of,
    reply,
)
from eddy.metadata.records import ConfigEntry
from eddy.postcard import PostcardError
from eddy.protocol.errors import ErrorCode


def test_requests_and_replies_round_trip() -> None:
    for request in (HeartbeatRequest(2, 7, (bytes(16), bytes(range(16)))),
                    CreateTopicRequest("t", 3, -1, (ConfigEntry("retention.ms", "1"),), True),
                    ImportOffsetsRequest(((b"k", b"v"),))):
        assert decode_request(postcard.encode(request)) == request
    answer = reply(ErrorCode.not_controller, "go there", controller=3, offsets_leader=2)
    assert decode_reply(postcard.encode(answer)) == answer


def test_bad_bytes_are_refused_naming_the_field() -> None:
    good = postcard.encode(HeartbeatRequest(2, 7, (bytes(16),)))
    for bad in (b"", b"\x63", good[:-3], good + b"\x00"):
        with pytest.raises(PostcardError):
            decode_request(bad)


def test_an_error_code_kafka_does_not_define_is_an_unknown_server_error() -> None:
    assert error_of(reply(ErrorCode.topic_already_exists)) == ErrorCode.topic_already_exists
    assert error_of(reply(31_999)) == ErrorCode.unknown_server_error
    assert error_of(reply(-12_345)) == ErrorCode.unknown_server_error
