"""The replication fault tests' checker (tests/system/replication_check.py) on small hand-made
histories: a clean one passes, each anomaly is found and named."""

from __future__ import annotations

import struct
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "system"))

from replication_check import (
    History,
    Read,
    Write,
    byte_position,
    check,
    compare_replicas,
    partition_dir,
)


def w(value: str, partition: int = 0, offset: int = -1) -> Write:
    return Write(value.encode(), b"k-" + value.encode(), partition, offset)


def r(value: str, partition: int, offset: int) -> Read:
    return Read(partition, offset, b"k-" + value.encode(), value.encode())


ACKED = [w("a", 0, 0), w("b", 0, 1), w("c", 1, 0)]
CLEAN = [r("a", 0, 0), r("b", 0, 1), r("c", 1, 0)]


def test_a_clean_history_passes() -> None:
    result = check(History(acked=ACKED, reads=[CLEAN, CLEAN[:2]]))
    assert result.ok, result.summary()
    assert (result.acked, result.read, result.recovered) == (3, 3, 0)


def test_an_unacknowledged_write_read_once_is_fine_and_one_never_read_too() -> None:
    reads = [*CLEAN, r("d", 1, 1)]
    result = check(History(acked=ACKED, unacked=[w("d"), w("e")], reads=[reads]))
    assert result.ok, result.summary()
    assert result.recovered == 1


def test_a_lost_acknowledged_write() -> None:
    result = check(History(acked=ACKED, reads=[CLEAN[:2]]))
    assert not result.ok
    assert [x.value for x in result.lost] == [b"c"]
    assert "lost 1" in result.summary()


def test_a_value_read_at_two_offsets_is_a_duplicate() -> None:
    reads = [*CLEAN, r("b", 0, 2)]
    result = check(History(acked=ACKED, reads=[reads]))
    assert result.duplicated == {b"b": [(0, 1), (0, 2)]}
    assert not result.ok


def test_the_same_record_read_by_two_consumers_is_no_duplicate() -> None:
    assert check(History(acked=ACKED, reads=[CLEAN, CLEAN])).ok


def test_an_offset_holding_another_value_than_acknowledged() -> None:
    reads = [r("a", 0, 0), r("x", 0, 1), r("b", 0, 2), r("c", 1, 0)]
    result = check(History(acked=ACKED, unacked=[w("x")], reads=[reads]))
    assert not result.ok
    assert any("0:1 acknowledged b'b'" in s for s in result.inconsistent), result.inconsistent
    assert any("b'b' acknowledged at 0:1 but read at [(0, 2)]" in s
               for s in result.inconsistent), result.inconsistent


def test_a_key_other_than_acknowledged_is_inconsistent() -> None:
    reads = [r("a", 0, 0), Read(0, 1, b"other", b"b"), r("c", 1, 0)]
    result = check(History(acked=ACKED, reads=[reads]))
    assert len(result.inconsistent) == 1 and "key b'other'" in result.inconsistent[0]


def test_two_consumers_reading_different_values_at_one_offset() -> None:
    other = [r("a", 0, 0), r("z", 0, 1)]
    result = check(History(acked=ACKED, unacked=[w("z")], reads=[CLEAN, other]))
    assert any(s.startswith("0:1 read as b'b'") for s in result.inconsistent)


def test_offsets_going_backwards_in_a_partition_are_non_monotonic() -> None:
    reads = [r("a", 0, 0), r("c", 1, 0), r("b", 0, 1), r("a", 0, 0)]
    result = check(History(acked=ACKED, reads=[CLEAN, reads]))
    assert result.non_monotonic == [(1, 0, 1, 0)]
    assert not result.ok
    # another partition's offsets interleaved is fine
    assert check(History(acked=ACKED, reads=[reads[:3]])).ok


def test_an_aborted_record_visible_to_read_committed() -> None:
    reads = [*CLEAN, r("t", 1, 1)]
    result = check(History(acked=ACKED, unacked=[w("t")], reads=[reads], aborted=[b"t"]))
    assert [x.value for x in result.aborted_visible] == [b"t"]
    assert not result.ok


def test_a_value_never_attempted_is_unexpected() -> None:
    reads = [*CLEAN, r("ghost", 1, 1)]
    result = check(History(acked=ACKED, reads=[reads]))
    assert [x.value for x in result.unexpected] == [b"ghost"]
    assert "unexpected 1" in result.summary()


# ----------------------------------------------------------------------- replica bytes


def batch(base: int, body: bytes) -> bytes:
    """Enough of a batch for the comparison: baseOffset, batchLength, then the body."""
    return struct.pack(">qi", base, len(body)) + body


def write_replica(root: Path, node: int, segments: dict[int, bytes]) -> Path:
    data = root / f"n{node}"
    pdir = partition_dir(data, "t", 0)
    pdir.mkdir(parents=True)
    for base, blob in segments.items():
        (pdir / f"{base:020d}.log").write_bytes(blob)
    return data


def test_replicas_identical_up_to_the_high_watermark(tmp_path: Path) -> None:
    b0, b1, b2 = batch(0, b"x" * 30), batch(3, b"y" * 20), batch(5, b"z" * 10)
    dirs = {
        1: write_replica(tmp_path, 1, {0: b0 + b1, 5: b2}),   # two segments
        2: write_replica(tmp_path, 2, {0: b0 + b1 + b2}),     # one, same bytes
        3: write_replica(tmp_path, 3, {0: b0 + b1 + batch(5, b"w" * 10)}),  # past the HWM
    }
    assert compare_replicas(dirs, "t", 0, 5) == []
    assert compare_replicas({1: dirs[1], 2: dirs[2]}, "t", 0, None) == []
    (problem,) = compare_replicas(dirs, "t", 0, None)
    assert problem.startswith("t-0: node 3") and f"from byte {len(b0 + b1) + 12}" in problem
    assert byte_position(b0 + b1 + b2, 4) == len(b0 + b1)


def test_a_replica_missing_committed_bytes_differs(tmp_path: Path) -> None:
    b0, b1 = batch(0, b"x" * 30), batch(3, b"y" * 20)
    dirs = {1: write_replica(tmp_path, 1, {0: b0 + b1}), 2: write_replica(tmp_path, 2, {0: b0})}
    (problem,) = compare_replicas(dirs, "t", 0, 5)
    assert "node 2" in problem and "1 from offset 0 to 0" in problem
    empty = {1: tmp_path / "none1", 2: tmp_path / "none2"}
    assert compare_replicas(empty, "t", 0, 3) == ["t-0: no replica holds offsets below 3"]
