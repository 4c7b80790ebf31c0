"""Where a returning follower cuts its log (KIP-101/279), against epoch histories."""

from __future__ import annotations

from eddy.cluster.replication.divergence import UNDEFINED, truncation_offset


def history(entries: list[tuple[int, int]], leo: int):  # type: ignore[no-untyped-def]
    """A follower's (epoch, start) history answering Kafka's endOffsetFor."""
    def end_for(epoch: int) -> tuple[int, int]:
        if not entries or epoch < entries[0][0]:
            return (epoch, entries[0][1]) if entries else (UNDEFINED, UNDEFINED)
        if epoch == entries[-1][0]:
            return epoch, leo
        floor = max(e for e, _ in entries if e <= epoch)
        higher = min(s for e, s in entries if e > epoch) if any(
            e > epoch for e, _ in entries) else UNDEFINED
        if higher == UNDEFINED:
            return UNDEFINED, UNDEFINED
        return floor, higher
    return end_for


def test_same_epoch_cuts_at_the_leader_end() -> None:
    # follower wrote 100..120 in epoch 3 as a leader that then lost them
    own = history([(1, 0), (3, 50)], 120)
    assert truncation_offset(0, 120, 90, 3, own, 3, 100) == 100


def test_same_epoch_leader_ahead_keeps_everything() -> None:
    own = history([(1, 0), (3, 50)], 120)
    assert truncation_offset(0, 120, 90, 3, own, 3, 200) == 120


def test_older_epoch_cuts_where_it_ends_in_both() -> None:
    # the follower led epoch 4 from 80 (never replicated); the leader went 3 -> 5 at 95
    own = history([(1, 0), (3, 50), (4, 80)], 110)
    assert truncation_offset(0, 110, 70, 4, own, 3, 95) == 80
    own = history([(1, 0), (3, 50), (4, 100)], 110)
    assert truncation_offset(0, 110, 70, 4, own, 3, 95) == 95


def test_epoch_neither_knows_falls_back_to_the_high_watermark() -> None:
    own = history([(1, 0), (4, 80)], 110)
    # the leader's latest at or below 4 is 3, which this log never had
    assert truncation_offset(0, 110, 70, 4, own, 3, 95) == 70


def test_leader_without_the_epoch_cuts_to_the_high_watermark() -> None:
    own = history([(2, 0)], 50)
    assert truncation_offset(0, 50, 30, 2, own, UNDEFINED, UNDEFINED) == 30


def test_log_without_epoch_history_is_kept() -> None:
    own = history([], 50)
    assert truncation_offset(0, 50, 30, UNDEFINED, own, UNDEFINED, UNDEFINED) == 50


def test_bounds_are_the_log_start_and_end() -> None:
    own = history([(1, 0), (3, 50)], 120)
    assert truncation_offset(60, 120, 90, 3, own, 3, 10) == 60
    assert truncation_offset(0, 120, 90, 3, own, 3, 500) == 120
