"""A registration's Kafka endpoints: one address, or the inter-broker one first and every
listener by name; clients get each broker's address on the listener they came in on."""

from __future__ import annotations

import pytest

from eddy.metadata import MetadataState
from eddy.metadata.commands import RegisterBroker
from eddy.metadata.endpoints import (
    check_endpoints,
    encode_endpoints,
    endpoint,
    inter_broker,
)
from eddy.protocol.errors import ErrorCode


def test_one_listener_registers_its_address_alone() -> None:
    text = encode_endpoints(("10.0.0.1", 9092), [("PLAINTEXT", "10.0.0.1", 9092)])
    assert text == "10.0.0.1:9092"
    assert endpoint(text, "PLAINTEXT") == ("10.0.0.1", 9092)
    assert endpoint(text, None) == ("10.0.0.1", 9092)
    assert inter_broker(text) == "10.0.0.1:9092"


def test_several_listeners_each_by_name() -> None:
    text = encode_endpoints(("10.0.0.1", 9092), [("INTERNAL", "10.0.0.1", 9092),
                                                  ("EXTERNAL", "broker1.example", 9094),
                                                  ("V6", "::1", 9095)])
    assert check_endpoints(text) is None
    assert inter_broker(text) == "10.0.0.1:9092"
    assert endpoint(text, "EXTERNAL") == ("broker1.example", 9094)
    assert endpoint(text, "V6") == ("::1", 9095)
    assert endpoint(text, "ELSEWHERE") == ("10.0.0.1", 9092)  # a listener it lacks


@pytest.mark.parametrize("text", ["nohost", "h:0", "h:99999", "h:1,EXTERNAL", "h:1,=h:2",
                                  "h:1,A=h:x", "h:1,A=h:2,A=h:3",
                                  "h:1," + ",".join(f"L{i}=h:{i + 1}" for i in range(17))])
def test_malformed_registrations_are_refused(text: str) -> None:
    assert check_endpoints(text) is not None
    result = MetadataState().apply(RegisterBroker(1, b"k" * 32, None, text, "h:2", 1))
    assert result.code == ErrorCode.invalid_request and "kafka_addr" in result.message
