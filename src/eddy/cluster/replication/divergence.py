"""Where a follower's log parts from its leader's (KIP-101, KIP-279), as a pure function.

The follower asked the leader (OffsetForLeaderEpoch) for the end of its own latest epoch;
the answer is the leader's latest epoch at or below it and where that epoch ends in the
leader's log. The follower keeps what both logs agree on:

- the leader knows nothing of the epoch (-1/-1): a log with an epoch history is cut to its
  high watermark (what was surely committed; the rest is fetched again); one without any
  history (written before epochs were kept) is kept whole;
- the leader answers the same epoch: the log is cut at the end of that epoch on the leader
  (records past it were never the leader's);
- the leader answers an older epoch (it never had ours): the log is cut where that older
  epoch ends in *both* logs, whichever is first; if this log does not have that epoch
  either, at most at the high watermark (committed, so the same in both logs).

Never below the log start offset, never above the log end.
"""

from __future__ import annotations

from collections.abc import Callable

__all__ = ["UNDEFINED", "truncation_offset"]

UNDEFINED = -1


def truncation_offset(log_start: int, log_end: int, high_watermark: int, latest_epoch: int,
                      own_end_for: Callable[[int], tuple[int, int]],
                      leader_epoch: int, leader_end: int) -> int:
    """The offset to cut the follower's log at (``log_end``: nothing to cut).
    ``own_end_for(epoch)`` is the follower's own (epoch, end offset) answer for an epoch."""
    if leader_epoch == UNDEFINED or leader_end == UNDEFINED:
        target = high_watermark if latest_epoch != UNDEFINED else log_end
    elif leader_epoch == latest_epoch:
        target = leader_end
    else:
        own_epoch, own_end = own_end_for(leader_epoch)
        target = min(leader_end, own_end) if own_end != UNDEFINED else leader_end
        if own_epoch != leader_epoch:
            # this log has no such epoch either: where the two part is unknown (Kafka asks
            # again with an older epoch); the high watermark is committed, the same in both
            target = min(target, high_watermark)
    return max(min(target, log_end), log_start)
