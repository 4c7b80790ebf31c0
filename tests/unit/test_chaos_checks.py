"""The fault harness's checks (bench/chaos/checks.py) on small hand-made histories: a clean
one passes, each anomaly is found and named, a fatal client error fails the check, and
unavailability is the longest gap between acknowledgements of a partition."""

from __future__ import annotations

import struct
import sys
from pathlib import Path

import pytest
from confluent_kafka import KafkaError

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # the bench package

from bench.chaos.checks import (
    check,
    failover_time,
    longest_gap,
    partition_dir,
    replica_diffs,
    unavailability,
)
from bench.chaos.workload import Ack, Journal, Read, Txn, Writer


def journal(*acks: tuple[int, int, int], partitions: int = 2) -> Journal:
    """Acks given as (seq, partition, offset), acknowledged at time seq."""
    j = Journal("w", partitions)
    j.sent = [float(i) for i in range(1 + max((a[0] for a in acks), default=0))]
    j.acks = [Ack(seq, p, o, float(seq), float(seq) + 0.5) for seq, p, o in acks]
    return j


def read(j: Journal, seq: int, partition: int, offset: int) -> Read:
    return Read(partition, offset, j.value(seq))


def clean() -> tuple[Journal, list[Read]]:
    j = journal((0, 0, 0), (1, 1, 0), (2, 0, 1), (3, 1, 1))
    return j, [read(j, 0, 0, 0), read(j, 2, 0, 1), read(j, 1, 1, 0), read(j, 3, 1, 1)]


def test_a_clean_history_passes() -> None:
    j, reads = clean()
    verdict = check(j, [reads, reads[:2]])
    assert verdict.ok, verdict.summary()
    assert (verdict.acked, verdict.read) == (4, 4)


def test_nothing_acknowledged_is_no_pass() -> None:
    assert not check(Journal("w", 1), [[]]).ok


def test_an_acknowledged_write_nobody_read_is_lost() -> None:
    j, reads = clean()
    verdict = check(j, [reads[:3]])
    assert [s.split()[0] for s in verdict.lost] == ["b'w-3'"]
    assert not verdict.ok


def test_a_value_at_two_offsets_is_a_duplicate() -> None:
    j, reads = clean()
    verdict = check(j, [[*reads, read(j, 2, 0, 2)]])
    assert len(verdict.duplicated) == 1 and "w-2" in verdict.duplicated[0]


def test_records_in_another_order_than_sent_are_out_of_order() -> None:
    j = journal((0, 0, 1), (2, 0, 0))
    verdict = check(j, [[read(j, 2, 0, 0), read(j, 0, 0, 1)]])
    assert any("seq 0 at offset 1 after seq 2" in s for s in verdict.out_of_order)
    assert any("acknowledged at offset 0" in s for s in verdict.out_of_order)


def test_a_consumer_going_backwards_is_out_of_order() -> None:
    j, reads = clean()
    verdict = check(j, [[reads[1], reads[0], *reads[2:]]])
    assert any("consumer 0 read 0:0 after 0:1" in s for s in verdict.out_of_order)


def test_an_acknowledgement_without_an_offset_or_elsewhere_is_misplaced() -> None:
    j = journal((0, 0, -1), (1, 0, 5))
    verdict = check(j, [[read(j, 0, 0, 0), read(j, 1, 0, 1)]])
    assert len(verdict.misplaced) == 2, verdict.misplaced
    assert "no offset" in verdict.misplaced[0] and "acknowledged at 0:5" in verdict.misplaced[1]


def test_a_fatal_client_error_fails_the_check() -> None:
    """librdkafka's idempotent producer reports a fatal error through error_cb: the writer
    journals it and the verdict fails, whatever was read."""
    j, reads = clean()
    writer = Writer("127.0.0.1:1", "t", 2, 1.0)
    writer.journal = j
    writer.on_error(KafkaError(KafkaError._TRANSPORT, "not fatal"))
    assert check(j, [reads]).ok
    writer.on_error(KafkaError(KafkaError._INCONSISTENT, "Unable to reconstruct MessageSet",
                               fatal=True))
    verdict = check(j, [reads])
    assert not verdict.ok
    (fatal,) = verdict.fatal
    assert fatal.startswith("_INCONSISTENT: Unable to reconstruct MessageSet (at ")
    # error_cb's form: the code _FATAL, no flag
    writer.on_error(KafkaError(KafkaError._FATAL, "Fatal error: ..."))
    assert len(check(j, [reads]).fatal) == 2


class _Msg:
    def __init__(self, value: bytes | None) -> None:
        self._value = value

    def value(self) -> bytes | None:
        return self._value


def test_a_delivery_report_of_no_record_of_ours_is_counted_not_fatal_to_the_writer() -> None:
    writer = Writer("127.0.0.1:1", "t", 2, 1.0)
    writer.on_delivery(KafkaError(KafkaError._FATAL, "purged"), _Msg(None))
    writer.on_delivery(None, _Msg(b"other-1"))
    assert writer.unknown == 2 and not writer.journal.acks


def test_transactions_are_all_or_nothing_and_aborted_ones_invisible() -> None:
    j, reads = clean()
    txns = [Txn((b"x1-0", b"x1-1"), "committed"), Txn((b"x2-0", b"x2-1"), "aborted"),
            Txn((b"x3-0", b"x3-1"), "unknown"), Txn((b"x4-0", b"x4-1"), "unknown"),
            Txn((b"x5-0", b"x5-1"), "committed")]
    seen = [Read(0, 10 + i, v) for i, v in enumerate(
        [b"x1-0", b"x1-1", b"x2-1", b"x3-0", b"x4-0", b"x4-1", b"x5-0"])]
    verdict = check(j, [[*reads, *seen]], txns)
    assert verdict.transactions == [
        "aborted transaction x2-0: 1 records visible",
        "transaction x3-0 of unknown outcome: 1 of 2 records visible",
        "committed transaction x5-0: 1 of 2 records missing"]


def test_unavailability_is_the_longest_gap_between_acks_of_a_partition() -> None:
    assert longest_gap([], 10.0, 12.0) == 2.0
    assert longest_gap([9.0, 10.5, 11.0, 14.0], 10.0, 12.0) == 1.0
    j = journal((0, 0, 0), (1, 1, 0), (2, 0, 1), (6, 0, 2), (7, 1, 1))
    # acknowledged at 0.5 (p0), 1.5 (p1), 2.5 (p0), 6.5 (p0), 7.5 (p1)
    gaps = unavailability(j, 1.0, 7.0)
    assert gaps == pytest.approx({0: 4.0, 1: 5.5})


def test_failover_counts_only_records_sent_after_the_kill() -> None:
    j = journal((0, 0, 0), (3, 0, 1), (5, 0, 2), (4, 1, 0))
    assert failover_time(j, 0, 2.5) == pytest.approx(1.0)  # seq 3: sent 3.0, acked 3.5
    assert failover_time(j, 1, 4.5) is None


def _batch(base: int, payload: bytes) -> bytes:
    return struct.pack(">qi", base, len(payload)) + payload


def test_replicas_must_hold_the_same_bytes_below_the_high_watermark(tmp_path: Path) -> None:
    dirs = {i: tmp_path / f"n{i}" for i in (1, 2, 3)}
    same = _batch(0, b"a" * 20) + _batch(1, b"b" * 20)
    for i, d in dirs.items():
        pdir = partition_dir(d, "t", 0)
        pdir.mkdir(parents=True)
        # node 3 is ahead (an offset beyond the high watermark) and that is fine
        (pdir / "0.log").write_bytes(same + (_batch(2, b"c" * 5) if i == 3 else b""))
    assert replica_diffs(dirs, "t", {0: 2}) == []
    (partition_dir(dirs[2], "t", 0) / "0.log").write_bytes(_batch(0, b"a" * 20)
                                                           + _batch(1, b"B" * 20))
    (diff,) = replica_diffs(dirs, "t", {0: 2})
    assert diff.startswith("t-0: node 2 (64 bytes) differs from node 1 (64 bytes) from byte")
    assert replica_diffs({1: tmp_path / "none"}, "t", {0: 1}) == [
        "t-0: no replica holds offsets below 1"]
