"""Durability: kill -9 under load, torn and corrupt log tails, clean restarts — with a real
broker process and librdkafka (confluent-kafka) clients."""

from __future__ import annotations

import os
import time
from collections import Counter
from pathlib import Path

from confluent_kafka import Producer
from kafka_helpers import batch_builder, consume_all, create_topic, produce

P = 3


def _partition_dir(eddy, topic: str, partition: int = 0) -> Path:  # type: ignore[no-untyped-def]
    return Path(eddy.data_dir) / "topics" / topic / f"partition-{partition}"


def _active_log(eddy, topic: str, partition: int = 0) -> Path:  # type: ignore[no-untyped-def]
    logs = sorted(_partition_dir(eddy, topic, partition).glob("*.log"))
    assert logs, "no segment files"
    # the active segment is the last one holding data
    with_data = [f for f in logs if f.stat().st_size > 0]
    return with_data[-1]


# ---- kill -9 while producing ---------------------------------------------------------------


def _produce_until_killed(eddy, topic: str, first_value: int,  # type: ignore[no-untyped-def]
                          acked: dict[bytes, tuple[int, int]], ack_target: int) -> int:
    """Produce numbered values round-robin over the partitions with acks=all and no
    retries; SIGKILL the broker once ack_target records are acknowledged, keep producing a
    little into the dead connection, then drain the producer. Returns the next value."""
    producer = Producer({
        "bootstrap.servers": eddy.bootstrap,
        "acks": "all",
        "linger.ms": 2,
        "enable.idempotence": False,
        "message.send.max.retries": 0,  # a duplicate can then only come from the broker
        "retries": 0,
        "message.timeout.ms": 4000,
        "socket.timeout.ms": 4000,
        "max.in.flight.requests.per.connection": 5,
    })
    failed: list[bytes] = []

    def on_delivery(err, msg):  # type: ignore[no-untyped-def]
        if err is None:
            assert msg.value() not in acked, f"acknowledged twice: {msg.value()!r}"
            acked[msg.value()] = (msg.partition(), msg.offset())
        else:
            failed.append(msg.value())

    start_acked = len(acked)
    n = first_value
    killed_at = None
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        if killed_at is None and len(acked) - start_acked >= ack_target:
            eddy.kill()
            killed_at = n
        if killed_at is not None and n - killed_at >= 300:
            break
        if n - first_value - (len(acked) - start_acked) - len(failed) > 3000:
            producer.poll(0.005)  # keep a bounded number of records in flight
            continue
        try:
            producer.produce(topic, value=f"{n:09d}".encode(), partition=n % P,
                             on_delivery=on_delivery)
        except BufferError:
            producer.poll(0.01)
            continue
        n += 1
        producer.poll(0)
    assert killed_at is not None, f"only {len(acked) - start_acked} acks before the deadline"
    assert producer.flush(30) == 0
    return n


def _check_log(eddy, topic: str, acked: dict[bytes, tuple[int, int]],  # type: ignore[no-untyped-def]
               produced: int) -> dict[int, list[tuple[int, bytes | None, bytes | None]]]:
    got = consume_all(eddy.bootstrap, topic, P)
    where: dict[bytes, tuple[int, int]] = {}
    for p, recs in got.items():
        offsets = [o for o, _k, _v in recs]
        # contiguous offsets from 0: nothing lost in the middle, nothing skipped
        assert offsets == list(range(len(offsets))), f"partition {p}: offsets not contiguous"
        values = [v for _o, _k, v in recs]
        assert all(v is not None and int(v) < produced and int(v) % P == p for v in values)
        ints = [int(v) for v in values]  # type: ignore[arg-type]
        assert ints == sorted(ints), f"partition {p}: records out of order"
        for o, _k, v in recs:
            assert v is not None
            where[v] = (p, o)
    all_values = [v for recs in got.values() for _o, _k, v in recs]
    dups = [v for v, c in Counter(all_values).items() if c > 1]
    assert not dups, f"the broker duplicated {len(dups)} records, e.g. {dups[:5]}"
    lost = [v for v in acked if v not in where]
    assert not lost, f"{len(lost)} acknowledged records lost, e.g. {sorted(lost)[:5]}"
    moved = {v: (acked[v], where[v]) for v in acked if acked[v] != where[v]}
    assert not moved, f"acknowledged records at other offsets: {list(moved.items())[:5]}"
    return got


def test_kill_9_loses_no_acknowledged_record(eddy_factory) -> None:  # type: ignore[no-untyped-def]
    # small segments so that recovery deals with rolled and active segments
    eddy = eddy_factory("--set", "log.segment.bytes=60000")
    topic = "durable"
    create_topic(eddy.bootstrap, topic, P)
    acked: dict[bytes, tuple[int, int]] = {}
    n = 0
    for _round in range(3):
        n = _produce_until_killed(eddy, topic, n, acked, ack_target=4000)
        assert not eddy.alive()
        eddy.start()
        _check_log(eddy, topic, acked, n)
    assert len(acked) >= 12000
    assert len(list(_partition_dir(eddy, topic).glob("*.log"))) > 1
    # the recovered log takes new writes at its end
    ends = {p: len(r) for p, r in consume_all(eddy.bootstrap, topic, P).items()}
    for v in range(n, n + P):
        [(p, o, value)] = produce(eddy.bootstrap, topic, [f"{v:09d}".encode()], partition=v % P)
        assert o == ends[p]
        acked[value] = (p, o)
    eddy.stop()
    eddy.start()
    _check_log(eddy, topic, acked, n + P)


# ---- damaged log tails ---------------------------------------------------------------------


def _write_batches(eddy, topic: str, n_batches: int = 12, per_batch: int = 4,  # type: ignore[no-untyped-def]
                   ) -> list[bytes]:
    values = []
    p = Producer({"bootstrap.servers": eddy.bootstrap, "acks": "all", "linger.ms": 100,
                  "batch.num.messages": per_batch})
    for b in range(n_batches):
        for r in range(per_batch):
            v = f"b{b:03d}-r{r}".encode()
            p.produce(topic, value=v, partition=0)
            values.append(v)
        assert p.flush(15) == 0
    return values


def _logs_since(eddy, mark: int) -> str:  # type: ignore[no-untyped-def]
    return str(eddy.logs()[mark:])


def _restart_after_damage(eddy, topic: str, damage, crash: bool = True,  # type: ignore[no-untyped-def]
                          ) -> tuple[int, str]:
    """Stop the broker (SIGKILL, or SIGTERM when not crash), damage the active segment
    with damage(path, batches), start again. Returns (first damaged offset, new log text)."""
    if crash:
        eddy.kill()
    else:
        assert eddy.stop() == 0
    f = _active_log(eddy, topic)
    batches = batch_builder.parse_batches(f.read_bytes())
    assert len(batches) >= 2
    first_bad = damage(f, batches)
    mark = len(eddy.logs())
    eddy.start()
    return first_bad, _logs_since(eddy, mark)


def _check_served_and_appendable(eddy, topic: str, values: list[bytes],  # type: ignore[no-untyped-def]
                                 first_bad: int) -> None:
    got = consume_all(eddy.bootstrap, topic, 1)[0]
    assert [(o, v) for o, _k, v in got] == list(enumerate(values))[:first_bad]
    delivered = produce(eddy.bootstrap, topic, [b"after-1", b"after-2"], partition=0)
    assert [o for _p, o, _v in delivered] == [first_bad, first_bad + 1]
    got = consume_all(eddy.bootstrap, topic, 1)[0]
    assert [v for _o, _k, v in got] == [*values[:first_bad], b"after-1", b"after-2"]
    assert [o for o, _k, _v in got] == list(range(first_bad + 2))


def _cut_last_batch(f: Path, batches) -> int:  # type: ignore[no-untyped-def]
    last = batches[-1]
    os.truncate(f, last.position + last.size // 2)
    return int(last.base_offset)


def _flip_in_last_batch(f: Path, batches) -> int:  # type: ignore[no-untyped-def]
    last = batches[-1]
    data = bytearray(f.read_bytes())
    data[last.position + last.size - 2] ^= 0x5A  # inside the last record's value
    f.write_bytes(bytes(data))
    return int(last.base_offset)


def test_torn_tail_after_a_crash_is_truncated(eddy) -> None:  # type: ignore[no-untyped-def]
    topic = "torn"
    create_topic(eddy.bootstrap, topic, 1)
    values = _write_batches(eddy, topic)
    first_bad, logs = _restart_after_damage(eddy, topic, _cut_last_batch)
    assert 0 < first_bad < len(values)
    assert "truncat" in logs.lower(), logs
    _check_served_and_appendable(eddy, topic, values, first_bad)


def test_torn_tail_after_a_clean_stop_is_truncated(eddy) -> None:  # type: ignore[no-untyped-def]
    topic = "torn-clean"
    create_topic(eddy.bootstrap, topic, 1)
    values = _write_batches(eddy, topic)
    first_bad, logs = _restart_after_damage(eddy, topic, _cut_last_batch, crash=False)
    assert 0 < first_bad < len(values)
    assert "truncat" in logs.lower(), logs
    _check_served_and_appendable(eddy, topic, values, first_bad)


def test_flipped_byte_in_last_batch_is_truncated(eddy) -> None:  # type: ignore[no-untyped-def]
    topic = "flipped"
    create_topic(eddy.bootstrap, topic, 1)
    values = _write_batches(eddy, topic)
    first_bad, logs = _restart_after_damage(eddy, topic, _flip_in_last_batch)
    assert 0 < first_bad < len(values)
    assert "truncat" in logs.lower(), logs
    _check_served_and_appendable(eddy, topic, values, first_bad)
    # and the damage stays repaired across a further crash
    eddy.kill()
    eddy.start()
    got = consume_all(eddy.bootstrap, topic, 1)[0]
    assert [v for _o, _k, v in got] == [*values[:first_bad], b"after-1", b"after-2"]


def test_damage_in_one_partition_leaves_the_others_alone(eddy) -> None:  # type: ignore[no-untyped-def]
    topic = "partial"
    create_topic(eddy.bootstrap, topic, 2)
    values0 = _write_batches(eddy, topic, n_batches=6)
    values1 = [f"p1-{i}".encode() for i in range(40)]
    produce(eddy.bootstrap, topic, values1, partition=1)
    first_bad, logs = _restart_after_damage(eddy, topic, _cut_last_batch)
    assert "truncat" in logs.lower()
    got = consume_all(eddy.bootstrap, topic, 2)
    assert [v for _o, _k, v in got[0]] == values0[:first_bad]
    assert [v for _o, _k, v in got[1]] == values1


# ---- clean restart -------------------------------------------------------------------------


def test_clean_restart_keeps_everything(eddy) -> None:  # type: ignore[no-untyped-def]
    topic = "kept"
    create_topic(eddy.bootstrap, topic, P, {"segment.bytes": "20000"})
    values = [f"value-{i:05d}".encode() * 3 for i in range(3000)]
    keys = [f"k{i % 17}".encode() for i in range(3000)]
    # in ten rounds: one batch is never split across segments, so a single batch per
    # partition (librdkafka may send one) would leave one segment each
    for i in range(0, 3000, 300):
        produce(eddy.bootstrap, topic, values[i : i + 300], keys=keys[i : i + 300])
    before = consume_all(eddy.bootstrap, topic, P)
    assert sum(len(r) for r in before.values()) == 3000
    files_before = {
        str(f.relative_to(eddy.data_dir)): f.read_bytes()
        for f in Path(eddy.data_dir).glob("topics/kept/*/*.log")
    }
    assert len(files_before) > P  # several segments per partition
    assert eddy.stop() == 0
    assert (Path(eddy.data_dir) / ".clean-shutdown").exists()
    mark = len(eddy.logs())
    eddy.start()
    logs = _logs_since(eddy, mark)
    assert "truncat" not in logs.lower()
    after = consume_all(eddy.bootstrap, topic, P)
    assert after == before
    files_after = {
        str(f.relative_to(eddy.data_dir)): f.read_bytes()
        for f in Path(eddy.data_dir).glob("topics/kept/*/*.log")
    }
    assert files_after == files_before  # not a byte changed
    # new records continue each partition at its end
    delivered = produce(eddy.bootstrap, topic, [b"new"] * 6, keys=[b"a", b"b", b"c"] * 2)
    for p, o, _v in delivered:
        assert o >= len(before[p])
    final = consume_all(eddy.bootstrap, topic, P)
    for p in range(P):
        assert final[p][: len(before[p])] == before[p]
        assert [o for o, _k, _v in final[p]] == list(range(len(final[p])))
    # a second clean restart right away changes nothing either
    eddy.restart()
    assert consume_all(eddy.bootstrap, topic, P) == final
