"""Transaction markers between brokers (tag 0x07) and the transaction coordinator's records
in the offsets group: messages round-trip, hostile bytes and unknown senders get a named
refusal, and the coordinator's records split back into transactions and held offsets."""

from __future__ import annotations

import asyncio
import json
from types import SimpleNamespace
from typing import Any

import pytest

from eddy import postcard
from eddy.mesh.frames import TAG_TXN_MARKERS, Frame
from eddy.postcard import PostcardError
from eddy.protocol.errors import ErrorCode
from eddy.txn.coordinator import TxnMetadata
from eddy.txn.markers import MarkerService
from eddy.txn.raft_store import pending_key, split, txn_key
from eddy.txn.rpc import (
    MAX_MARKER_PARTITIONS,
    WriteMarkersReply,
    WriteMarkersRequest,
    code_of,
    decode_reply,
    decode_request,
)

REGISTERED = b"\x01" * 32


def test_requests_and_replies_round_trip_and_bad_bytes_are_named() -> None:
    request = WriteMarkersRequest(42, 3, True, (("orders", 0), ("orders", 5)))
    assert decode_request(postcard.encode(request)) == request
    reply = WriteMarkersReply(0, None, (0, int(ErrorCode.not_leader_or_follower)))
    assert decode_reply(postcard.encode(reply), 2) == reply
    with pytest.raises(ValueError, match="errors: 2 for 3"):
        decode_reply(postcard.encode(reply), 3)  # an answer that does not cover the ask
    with pytest.raises(PostcardError):
        decode_request(postcard.encode(request)[:-3])
    too_many = WriteMarkersRequest(1, 0, False, (("t", 0),) * (MAX_MARKER_PARTITIONS + 1))
    with pytest.raises(ValueError, match="partitions"):
        decode_request(postcard.encode(too_many))
    assert code_of(9999) == ErrorCode.unknown_server_error
    assert code_of(6) == ErrorCode.not_leader_or_follower


def _service() -> MarkerService:
    """A MarkerService over a stand-in broker whose cluster knows one registered key and
    which leads partition 0 of every topic."""
    state = SimpleNamespace(key_owner=lambda key: 2 if key == REGISTERED else None)

    def partition_error(topic: str, index: int) -> ErrorCode | None:
        return None if index == 0 else ErrorCode.not_leader_or_follower

    broker: Any = SimpleNamespace(cluster=SimpleNamespace(state=state),
                                  partition_error=partition_error,
                                  logs=SimpleNamespace(partition=lambda t, i: None))
    return MarkerService(broker, mesh=None)  # type: ignore[arg-type]


def _ask(service: MarkerService, peer: bytes, payload: bytes) -> WriteMarkersReply:
    data = asyncio.run(service.handle(peer, Frame(TAG_TXN_MARKERS, None, payload)))
    assert data is not None
    answer: WriteMarkersReply = postcard.decode(WriteMarkersReply, data)
    return answer


def test_only_registered_brokers_may_ask_and_bad_requests_are_refused() -> None:
    service = _service()
    request = postcard.encode(WriteMarkersRequest(7, 0, True, (("t", 0), ("t", 1))))
    refused = _ask(service, b"\x02" * 32, request)
    assert refused.error_code == ErrorCode.cluster_authorization_failed and not refused.errors
    bad = _ask(service, REGISTERED, b"\xff\xff\xff")
    assert bad.error_code == ErrorCode.invalid_request and "bad request" in (bad.message or "")
    answer = _ask(service, REGISTERED, request)
    # partition 0 is led here but has no local log (the stand-in), partition 1 is not led
    assert answer.errors == (ErrorCode.unknown_topic_or_partition,
                             ErrorCode.not_leader_or_follower)


def test_the_coordinators_records_split_into_transactions_and_held_offsets() -> None:
    meta = TxnMetadata("t1", 9, 2, 60000, "Ongoing", {("orders", 1)}, 5, 6)
    records: list[tuple[bytes, bytes | None]] = [
        (txn_key("t1"), json.dumps(meta.to_json()).encode()),
        (txn_key("broken"), b"{not json"),
        (pending_key(9, b"\x00\x01k1"), b"v1"),
        (pending_key(9, b"\x00\x01k2"), b"v2"),
        (pending_key(4, b"\x00\x01k3"), None),  # a deletion: nothing held
        (b"\x00\x01plain-offset-key", b"group record"),  # the group coordinator's
        (b"\x7f\xf1short", b"x"),  # a held-offset key too short for its producer id
    ]
    txns, held = split(records)
    assert list(txns) == ["t1"] and txns["t1"] == meta
    assert held == {9: [(b"\x00\x01k1", b"v1"), (b"\x00\x01k2", b"v2")]}


def test_a_partition_refuses_markers_of_an_older_coordinator_or_producer_epoch(
        tmp_path: Any) -> None:
    """Kafka's partition checks of a marker: one from a coordinator epoch older than a marker
    the partition already took is TRANSACTION_COORDINATOR_FENCED (a deposed coordinator),
    one for an older producer epoch INVALID_PRODUCER_EPOCH; neither is written. The
    coordinator epoch is kept in the producer snapshot and in the marker's value."""
    from eddy.broker.broker import Broker
    from eddy.clock import ManualClock
    from eddy.config import load_config
    from eddy.protocol.records import decode_batch_records
    from eddy.txn.markers import write_one
    from eddy.txn.producer_state import ProducerStateManager

    cfg = load_config(env={}, overrides={"data_dir": str(tmp_path), "process.roles": "broker"})
    clock = ManualClock()

    async def run() -> None:
        b = Broker(cfg, clock)
        b.load()
        b.logs.create_topic("t", 1, {}, clock.now_ms())
        plog = b.logs.partition("t", 0)
        assert plog is not None
        mark = [("t", 0)]

        def write(pid: int, epoch: int, coordinator_epoch: int) -> ErrorCode:
            request = WriteMarkersRequest(pid, epoch, True, tuple(mark), coordinator_epoch)
            return write_one(b, request, "t", 0)

        assert write(7, 2, 5) == ErrorCode.none  # coordinator epoch 5 marks producer 7
        assert plog.log_end_offset == 1
        assert write(7, 2, 4) == ErrorCode.transaction_coordinator_fenced  # a deposed one
        assert write(7, 1, 5) == ErrorCode.invalid_producer_epoch  # an ended epoch
        assert plog.log_end_offset == 1  # neither written
        assert write(7, 3, 6) == ErrorCode.none and plog.log_end_offset == 2
        assert write(8, 0, 1) == ErrorCode.none  # another producer: its own history
        # the marker's value carries the coordinator epoch (version 0, epoch int32)
        seg = plog.segments[-1]
        first = next(iter(seg.scan()))
        values = [r.value for r in decode_batch_records(seg.read_at(first.position,
                                                                    first.size))]
        assert values == [b"\x00\x00\x00\x00\x00\x05"]
        # and the producer snapshot keeps it
        mgr = b.producers.of(plog)
        again, _ = ProducerStateManager.from_snapshot(mgr.snapshot_bytes(2))
        assert again.check_marker(7, 3, 5) is not None and again.check_marker(7, 3, 6) is None
        b.logs.close()

    asyncio.run(run())
