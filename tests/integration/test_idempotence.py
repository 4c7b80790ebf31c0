"""Idempotent produce (KIP-98): librdkafka's idempotent producer end to end, and the broker's
per-partition sequence checks driven by hand-made batches over a raw connection: duplicates
answered with their original offset and written once, gaps and stale epochs refused, and
the deduplication state surviving a clean restart and a kill -9."""

from __future__ import annotations

import threading
import time
from collections import Counter

import pytest
from confluent_kafka import Producer
from kafka_helpers import create_topic, watermarks
from txn_helpers import (
    INVALID_PRODUCER_EPOCH,
    NONE,
    OUT_OF_ORDER_SEQUENCE_NUMBER,
    RawClient,
    idempotent_batch,
    read_to_end,
)


def _values(n: int, tag: str) -> list[bytes]:
    return [f"{tag}-{i}".encode() for i in range(n)]


# ---- librdkafka ------------------------------------------------------------------------------


def test_idempotent_producer_delivers_each_record_once_in_order(eddy) -> None:  # type: ignore[no-untyped-def]
    topic, partitions, n = "idem-confluent", 3, 30_000
    create_topic(eddy.bootstrap, topic, partitions)
    p = Producer({
        "bootstrap.servers": eddy.bootstrap,
        "enable.idempotence": True,
        "acks": "all",
        "linger.ms": 1,
        "batch.num.messages": 200,  # many small batches, several in flight per partition
        "max.in.flight.requests.per.connection": 5,
        "message.timeout.ms": 30_000,
    })
    acked: dict[bytes, tuple[int, int]] = {}
    errors: list[str] = []

    def on_delivery(err, msg) -> None:  # type: ignore[no-untyped-def]
        if err is not None:
            errors.append(str(err))
            return
        assert msg.value() not in acked, f"{msg.value()!r} acknowledged twice"
        acked[msg.value()] = (msg.partition(), msg.offset())

    values = _values(n, "v")
    for i, v in enumerate(values):
        p.produce(topic, value=v, partition=i % partitions, on_delivery=on_delivery)
        if i % 1000 == 0:
            p.poll(0)
    assert p.flush(60) == 0
    assert not errors, errors[:5]
    assert len(acked) == n

    # in each partition the offsets follow the order the records were produced in
    for part in range(partitions):
        sent = [v for i, v in enumerate(values) if i % partitions == part]
        offsets = [acked[v] for v in sent]
        assert all(pp == part for pp, _ in offsets)
        assert [o for _, o in offsets] == list(range(len(sent)))

    records, ends = read_to_end(eddy.bootstrap, topic, partitions, "read_uncommitted")
    for part in range(partitions):
        sent = [v for i, v in enumerate(values) if i % partitions == part]
        assert [v for _, _, v in records[part]] == sent
        assert ends[part] == len(sent)


def test_idempotent_producer_no_duplicates_across_kill9(eddy) -> None:  # type: ignore[no-untyped-def]
    """SIGKILL the broker while an idempotent producer has requests in flight; after the
    restart librdkafka resends them with their original sequence numbers and the broker,
    its producer state rebuilt from the log, writes none of them twice."""
    topic, partitions, n = "idem-kill", 2, 20_000
    create_topic(eddy.bootstrap, topic, partitions)
    p = Producer({
        "bootstrap.servers": eddy.bootstrap,
        "enable.idempotence": True,
        "acks": "all",
        "linger.ms": 2,
        "batch.num.messages": 100,
        "message.timeout.ms": 120_000,
        "reconnect.backoff.ms": 50,
        "reconnect.backoff.max.ms": 500,
    })
    acked: Counter[bytes] = Counter()
    errors: list[str] = []
    lock = threading.Lock()

    def on_delivery(err, msg) -> None:  # type: ignore[no-untyped-def]
        with lock:
            if err is not None:
                errors.append(str(err))
            else:
                acked[msg.value()] += 1

    values = _values(n, "k")
    for i, v in enumerate(values):
        p.produce(topic, value=v, partition=i % partitions, on_delivery=on_delivery)
    deadline = time.monotonic() + 60
    while sum(acked.values()) < n // 5:
        p.poll(0.001)
        assert time.monotonic() < deadline, f"only {sum(acked.values())} acknowledged"
    eddy.kill()  # with requests in flight: most records are still queued or unanswered
    assert sum(acked.values()) < n
    eddy.start()
    assert p.flush(90) == 0
    assert not errors, errors[:5]
    assert all(c == 1 for c in acked.values())
    assert len(acked) == n

    records, _ = read_to_end(eddy.bootstrap, topic, partitions, "read_uncommitted")
    for part in range(partitions):
        got = [v for _, _, v in records[part]]
        dupes = [v for v, c in Counter(got).items() if c > 1]
        assert not dupes, f"partition {part}: {len(dupes)} duplicates, e.g. {dupes[:3]}"
        # idempotence keeps the produce order within a partition
        assert got == [v for i, v in enumerate(values) if i % partitions == part]


# ---- raw protocol ----------------------------------------------------------------------------


def _write_five(rc: RawClient, topic: str, pid: int, epoch: int = 0) -> list[int]:
    """Five batches of two records, sequences 0, 2, 4, 6, 8; returns their base offsets."""
    offsets = []
    for b in range(5):
        r = rc.produce(topic, 0, idempotent_batch(pid, epoch, 2 * b,
                                                  [f"b{b}r0".encode(), f"b{b}r1".encode()]))
        assert r.error == NONE, r
        offsets.append(r.base_offset)
    return offsets


def _log_values(eddy, topic: str) -> list[bytes]:  # type: ignore[no-untyped-def]
    records, _ = read_to_end(eddy.bootstrap, topic, 1, "read_uncommitted")
    return [v for _, _, v in records[0] if v is not None]


def test_raw_duplicate_gap_and_stale_epoch(eddy) -> None:  # type: ignore[no-untyped-def]
    topic = "idem-raw"
    create_topic(eddy.bootstrap, topic, 1)
    rc = RawClient(eddy.port)
    try:
        err, pid, epoch = rc.init_producer_id()
        assert (err, epoch) == (NONE, 0) and pid >= 0
        # without a transactional id every InitProducerId hands out a new producer id
        err2, pid2, _ = rc.init_producer_id()
        assert err2 == NONE and pid2 != pid

        offsets = _write_five(rc, topic, pid)
        assert offsets == [0, 2, 4, 6, 8]

        # a resend of the last batch: the original offset, nothing written
        last = idempotent_batch(pid, 0, 8, [b"b4r0", b"b4r1"])
        assert rc.produce(topic, 0, last) == (NONE, 8)
        # a resend of an older batch still among the producer's last five
        assert rc.produce(topic, 0, idempotent_batch(pid, 0, 2, [b"b1r0", b"b1r1"])) == (
            NONE, 2)
        assert watermarks(eddy.bootstrap, topic) == (0, 10)

        # a gap: sequence 10 is next, 11 is out of order, and nothing is written
        gap = rc.produce(topic, 0, idempotent_batch(pid, 0, 11, [b"gap"]))
        assert gap.error == OUT_OF_ORDER_SEQUENCE_NUMBER, gap
        # the rejected batch did not move the expected sequence
        assert rc.produce(topic, 0, idempotent_batch(pid, 0, 10, [b"s10"])) == (NONE, 10)

        # the producer bumps its epoch (as the Java client does itself for an idempotent
        # producer): the new epoch starts at sequence 0 ...
        assert rc.produce(topic, 0, idempotent_batch(pid, 1, 0, [b"e1s0"])) == (NONE, 11)
        # ... and the old epoch is refused from then on
        stale = rc.produce(topic, 0, idempotent_batch(pid, 0, 11, [b"stale"]))
        assert stale.error == INVALID_PRODUCER_EPOCH, stale
        # a new epoch that does not start at sequence 0 is out of order
        bad = rc.produce(topic, 0, idempotent_batch(pid, 2, 5, [b"e2s5"]))
        assert bad.error == OUT_OF_ORDER_SEQUENCE_NUMBER, bad

        # another producer id has its own sequences on the same partition
        assert rc.produce(topic, 0, idempotent_batch(pid2, 0, 0, [b"p2"])) == (NONE, 12)
        assert rc.produce(topic, 0, idempotent_batch(pid2, 0, 0, [b"p2"])) == (NONE, 12)
    finally:
        rc.close()

    assert _log_values(eddy, topic) == [
        b"b0r0", b"b0r1", b"b1r0", b"b1r1", b"b2r0", b"b2r1", b"b3r0", b"b3r1",
        b"b4r0", b"b4r1", b"s10", b"e1s0", b"p2"]


@pytest.mark.parametrize("how", ["clean-restart", "kill-9"])
def test_raw_deduplication_survives_restart(eddy, how: str) -> None:  # type: ignore[no-untyped-def]
    topic = f"idem-restart-{how}"
    create_topic(eddy.bootstrap, topic, 1)
    rc = RawClient(eddy.port)
    try:
        _, pid, _ = rc.init_producer_id()
        offsets = _write_five(rc, topic, pid)
        # a second producer, also in an older epoch, to see every entry come back
        _, other, _ = rc.init_producer_id()
        assert rc.produce(topic, 0, idempotent_batch(other, 0, 0, [b"o0"])).error == NONE
        assert rc.produce(topic, 0, idempotent_batch(other, 1, 0, [b"o1"])) == (NONE, 11)
    finally:
        rc.close()

    if how == "kill-9":
        eddy.kill()  # no snapshot: the state must come back from the batches in the log
        eddy.start()
    else:
        eddy.restart()

    rc = RawClient(eddy.port)
    try:
        # the resent batches get their original offsets and are not written again
        assert rc.produce(topic, 0, idempotent_batch(pid, 0, 8, [b"b4r0", b"b4r1"])) == (
            NONE, offsets[4])
        assert rc.produce(topic, 0, idempotent_batch(pid, 0, 0, [b"b0r0", b"b0r1"])) == (
            NONE, offsets[0])
        assert rc.produce(topic, 0, idempotent_batch(other, 1, 0, [b"o1"])) == (NONE, 11)
        assert watermarks(eddy.bootstrap, topic) == (0, 12)
        # the sequence goes on where it was; a gap and a stale epoch are still refused
        assert rc.produce(topic, 0, idempotent_batch(pid, 0, 12, [b"gap"])).error == (
            OUT_OF_ORDER_SEQUENCE_NUMBER)
        assert rc.produce(topic, 0, idempotent_batch(other, 0, 1, [b"o0-1"])).error == (
            INVALID_PRODUCER_EPOCH)
        assert rc.produce(topic, 0, idempotent_batch(pid, 0, 10, [b"next"])) == (NONE, 12)
    finally:
        rc.close()

    assert _log_values(eddy, topic) == [
        b"b0r0", b"b0r1", b"b1r0", b"b1r1", b"b2r0", b"b2r1", b"b3r0", b"b3r1",
        b"b4r0", b"b4r1", b"o0", b"o1", b"next"]
