"""An idempotent producer's retry that reaches a new leader (a follower promoted after the
old leader was killed) is answered as Kafka answers it: a batch among the producer's last
five is a duplicate, acknowledged with the offsets it was first written at (never -1,
which librdkafka would report as a record delivered with no offset), and nothing is
written again; an older one is out of order. The same after the follower restarts and
rebuilds its producer state from the log. (librdkafka's other source of offset-less
deliveries, the "implicit ack" of a batch whose own answer was an error after a later
batch succeeded, is the client's: Kafka answers those requests the same way.)"""

from __future__ import annotations

import struct
from pathlib import Path

import pytest

from eddy.broker.broker import Broker
from eddy.broker.handlers.produce import _append
from eddy.clock import ManualClock
from eddy.config import load_config
from eddy.protocol.errors import ErrorCode, KafkaError
from eddy.protocol.records import build_batch
from eddy.protocol.replica_batches import check_replica_batches

PID = 9


def _batch(seq: int, base_offset: int = 0) -> bytearray:
    batch = build_batch([(None, f"s{seq}-a".encode()), (None, f"s{seq}-b".encode())], 1000,
                        producer_id=PID, producer_epoch=0, base_sequence=seq)
    struct.pack_into(">q", batch, 0, base_offset)  # the base offset is outside the CRC
    return batch


def test_a_promoted_follower_answers_a_retry_with_the_original_offset(tmp_path: Path) -> None:
    cfg = load_config(env={}, overrides={"data_dir": str(tmp_path), "process.roles": "broker"})
    b = Broker(cfg, ManualClock())
    b.load()
    b.logs.create_topic("t", 1, {}, 0)
    plog = b.logs.partition("t", 0)
    assert plog is not None
    for k in range(7):  # as follower: the leader's batches, sequences 0..13 at 0..13
        data = _batch(2 * k, 2 * k)
        checked = check_replica_batches(data, plog.log_end_offset, len(data))
        plog.append_replica(data, checked.headers, checked.positions, 0)
        b.producers.replicated(plog, data, checked.headers, checked.positions)
    assert plog.log_end_offset == 14
    for rebuilt in (False, True):
        if rebuilt:
            b.producers.forget(plog)  # a restart: the state comes back from the log
        # now leader: the producer retries batches its old leader had acknowledged (or not)
        assert _append(b, plog, bytes(_batch(12)), 9) == (12, -1, 14)
        assert _append(b, plog, bytes(_batch(4)), 9) == (4, -1, 6)  # fifth newest
        with pytest.raises(KafkaError) as refused:  # sixth newest: out of the window
            _append(b, plog, bytes(_batch(2)), 9)
        assert refused.value.code == ErrorCode.out_of_order_sequence_number
        assert plog.log_end_offset == 14  # nothing written again
    assert _append(b, plog, bytes(_batch(14)), 9) == (14, -1, 16)  # the next one is new
    b.logs.close()
