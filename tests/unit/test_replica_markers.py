"""Transaction markers a follower copies from its leader carry the coordinator epoch in
their value (Kafka's EndTransactionMarker: version int16, coordinator epoch int32): the
follower's producer state keeps it, so that once leader it refuses a deposed coordinator's
marker (TRANSACTION_COORDINATOR_FENCED) as the old leader would have; so does the state
rebuilt from the log. Markers whose value cannot be read still end their transaction."""

from __future__ import annotations

import asyncio
import struct
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

from eddy.broker.broker import Broker
from eddy.clock import ManualClock
from eddy.config import load_config
from eddy.log.partition import PartitionLog
from eddy.protocol.errors import ErrorCode
from eddy.protocol.markers import ABORT, COMMIT, NO_COORDINATOR_EPOCH, marker_of
from eddy.protocol.record_batch import CONTROL_BIT, TRANSACTIONAL_BIT
from eddy.protocol.records import build_batch
from eddy.protocol.replica_batches import check_replica_batches
from eddy.txn.markers import marker_batch, write_one
from eddy.txn.rpc import WriteMarkersRequest

PID = 7


def _at(batch: bytearray, base_offset: int) -> bytearray:
    """``batch`` moved to ``base_offset`` (the base offset is outside the CRC)."""
    struct.pack_into(">q", batch, 0, base_offset)
    return batch


def _replicate(b: Broker, plog: PartitionLog, batch: bytearray) -> None:
    """What the follower's fetcher does with a batch from its leader."""
    checked = check_replica_batches(batch, plog.log_end_offset, len(batch))
    assert len(checked.headers) == 1
    plog.append_replica(batch, checked.headers, checked.positions, 0)
    b.producers.replicated(plog, batch, checked.headers, checked.positions)


@contextmanager
def _broker(tmp_path: Path) -> Iterator[tuple[Broker, PartitionLog]]:
    cfg = load_config(env={}, overrides={"data_dir": str(tmp_path), "process.roles": "broker"})
    clock = ManualClock()
    b = Broker(cfg, clock)
    b.load()
    b.logs.create_topic("t", 1, {}, clock.now_ms())
    plog = b.logs.partition("t", 0)
    assert plog is not None
    try:
        yield b, plog
    finally:
        b.logs.close()


def _writer(b: Broker) -> Callable[[int, int], ErrorCode]:
    def write(epoch: int, coordinator_epoch: int) -> ErrorCode:
        request = WriteMarkersRequest(PID, epoch, True, (("t", 0),), coordinator_epoch)
        return write_one(b, request, "t", 0)
    return write


def test_a_follower_keeps_the_coordinator_epoch_of_replicated_markers(tmp_path: Path
                                                                      ) -> None:
    async def run() -> None:
        with _broker(tmp_path) as (b, plog):
            # as follower: the leader's transactional batch, then its commit marker from
            # coordinator epoch 5
            data = build_batch([(None, b"v")], 1000, producer_id=PID, producer_epoch=2,
                               base_sequence=0, attributes=TRANSACTIONAL_BIT)
            _replicate(b, plog, _at(data, 0))
            assert b.producers.of(plog).first_ongoing_offset() == 0
            _replicate(b, plog, _at(marker_batch(PID, 2, True, 1001, 5), 1))
            assert b.producers.of(plog).first_ongoing_offset() is None
            assert b.producers.of(plog).producers[PID].coordinator_epoch == 5
            # now leader: a deposed coordinator (epoch 4) is fenced, the current one is not
            write = _writer(b)
            assert write(2, 4) == ErrorCode.transaction_coordinator_fenced
            assert plog.log_end_offset == 2  # not written
            assert write(2, 5) == ErrorCode.none and plog.log_end_offset == 3
            # the state rebuilt from the log (no snapshot) remembers it too
            b.producers.forget(plog)
            assert b.producers.of(plog).producers[PID].coordinator_epoch == 5
            assert write(2, 4) == ErrorCode.transaction_coordinator_fenced
            assert write(3, 6) == ErrorCode.none

    asyncio.run(run())


def _control(value: bytes | None, key: bytes | None = b"\x00\x00\x00\x01") -> bytearray:
    return build_batch([(key, value)], 1000, producer_id=PID, producer_epoch=2,
                       attributes=TRANSACTIONAL_BIT | CONTROL_BIT)


def test_unreadable_marker_values_end_the_transaction_without_an_epoch(tmp_path: Path
                                                                       ) -> None:
    assert marker_of(marker_batch(PID, 2, True, 1000, 9)) == (COMMIT, 9)
    assert marker_of(marker_batch(PID, 2, False, 1000, 0)) == (ABORT, 0)
    # a later value version with more fields: the epoch is still where version 0 has it
    assert marker_of(_control(struct.pack(">hiq", 1, 3, 0))) == (COMMIT, 3)
    unknown = NO_COORDINATOR_EPOCH
    assert marker_of(_control(None)) == (COMMIT, unknown)
    assert marker_of(_control(b"\x00\x00\x00")) == (COMMIT, unknown)  # short
    assert marker_of(_control(struct.pack(">hi", -1, 3))) == (COMMIT, unknown)
    assert marker_of(_control(struct.pack(">hi", 0, -5))) == (COMMIT, unknown)
    # an unreadable key or batch: ABORT, as control_type takes it
    assert marker_of(_control(struct.pack(">hi", 0, 3), key=b"\x00")) == (ABORT, unknown)
    assert marker_of(_control(struct.pack(">hi", 0, 3), key=b"\xff\xff\x00\x01")) == (
        ABORT, unknown)
    assert marker_of(_control(struct.pack(">hi", 0, 3))[:-4]) == (ABORT, unknown)
    empty = build_batch([], 1000, producer_id=PID, producer_epoch=2,
                        attributes=TRANSACTIONAL_BIT | CONTROL_BIT)
    assert marker_of(empty) == (ABORT, unknown)

    async def run() -> None:
        with _broker(tmp_path) as (b, plog):
            data = build_batch([(None, b"v")], 1000, producer_id=PID, producer_epoch=2,
                               base_sequence=0, attributes=TRANSACTIONAL_BIT)
            _replicate(b, plog, _at(data, 0))
            _replicate(b, plog, _at(_control(b"\x00"), 1))
            mgr = b.producers.of(plog)
            assert mgr.first_ongoing_offset() is None  # the transaction ended
            assert mgr.producers[PID].coordinator_epoch == unknown
            assert _writer(b)(2, 0) == ErrorCode.none  # and no coordinator is fenced

    asyncio.run(run())
