"""The leader's view of its followers (sans-IO): high watermark over the (maximal) ISR,
Kafka's caught-up rule, ISR shrink by lag time (and the optional message lag), ISR
expansion once a follower reaches the HWM and the epoch's start."""

from __future__ import annotations

from eddy.cluster.replication.leader import LeaderState

LAG_MS = 10_000


def leader(isr: tuple[int, ...] = (1, 2, 3), replicas: tuple[int, ...] = (1, 2, 3),
           epoch_start: int = 0) -> LeaderState:
    return LeaderState(1, replicas, isr, leader_epoch=4, partition_epoch=7,
                       epoch_start_offset=epoch_start, now_ms=1_000)


def test_hwm_is_the_lowest_leo_in_the_isr_and_never_moves_back() -> None:
    s = leader()
    assert s.high_watermark(100, 0) == 0  # followers not heard from hold it
    s.follower_fetched(2, 60, 100, 1_100)
    assert s.high_watermark(100, 0) == 0
    s.follower_fetched(3, 80, 100, 1_100)
    assert s.high_watermark(100, 0) == 60
    s.follower_fetched(2, 100, 100, 1_200)
    assert s.high_watermark(100, 60) == 80
    # a follower truncated below what it reported does not move the HWM back
    s.follower_fetched(3, 50, 100, 1_300)
    assert s.high_watermark(100, 80) == 80


def test_hwm_counts_only_the_isr_and_the_leader() -> None:
    s = leader(isr=(1, 2))
    s.follower_fetched(2, 90, 100, 1_100)
    s.follower_fetched(3, 10, 100, 1_100)  # out of the ISR: does not hold the HWM
    assert s.high_watermark(100, 0) == 90
    assert s.high_watermark(50, 0) == 50  # the leader's own log end bounds it


def test_a_lone_isr_follows_the_leader_log_end() -> None:
    s = leader(isr=(1,))
    assert s.high_watermark(42, 0) == 42


def test_unknown_node_is_not_recorded() -> None:
    s = leader()
    assert not s.follower_fetched(9, 10, 100, 1_100)
    assert s.follower_fetched(2, 10, 100, 1_100)


def test_follower_not_caught_up_for_the_lag_time_leaves_the_isr() -> None:
    s = leader()
    s.follower_fetched(2, 100, 100, 1_000)
    s.follower_fetched(3, 100, 100, 1_000)
    # node 3 keeps fetching but never reaches the log end again
    for t in range(2_000, 12_000, 1_000):
        s.follower_fetched(2, 100 + t, 100 + t, t)
        s.follower_fetched(3, 50, 100 + t, t)
    assert s.isr_change(11_000 - 1, 11_100, 50, LAG_MS, 0) is None
    proposal = s.isr_change(12_001, 12_100, 50, LAG_MS, 0)
    assert proposal == (1, 2)
    # one proposal in flight at a time
    assert s.isr_change(12_002, 12_100, 50, LAG_MS, 0) is None


def test_caught_up_at_the_previous_fetch_counts() -> None:
    """Kafka: a fetch at (or past) the leader's log end at the follower's previous fetch
    means the follower was caught up at that previous fetch's time."""
    s = leader()
    s.follower_fetched(2, 100, 100, 1_000)  # caught up at 1000
    s.follower_fetched(2, 100, 200, 9_000)  # behind now
    s.follower_fetched(2, 200, 300, 10_500)  # reached the LEO of its previous fetch
    progress = s.followers[2]
    assert progress.last_caught_up_ms == 9_000


def test_silent_follower_leaves_the_isr() -> None:
    s = leader()
    s.follower_fetched(2, 0, 0, 1_000)
    assert s.isr_change(1_000 + LAG_MS + 1, 0, 0, LAG_MS, 0) == (1,)


def test_message_lag_rule_is_off_by_default_and_works_when_set() -> None:
    s = leader(isr=(1, 2), replicas=(1, 2))
    s.follower_fetched(2, 10, 5_000, 1_000)
    assert s.isr_change(1_500, 5_000, 10, LAG_MS, 0) is None
    assert s.isr_change(1_500, 5_000, 10, LAG_MS, 1_000) == (1,)


def test_follower_rejoins_at_the_hwm_and_the_epoch_start() -> None:
    s = leader(isr=(1, 2), epoch_start=50)
    s.follower_fetched(3, 40, 100, 1_100)
    assert s.isr_change(1_200, 100, 40, LAG_MS, 0) is None  # below the epoch start
    s.follower_fetched(3, 60, 100, 1_300)
    assert s.isr_change(1_400, 100, 80, LAG_MS, 0) is None  # below the HWM
    s.follower_fetched(3, 80, 100, 1_500)
    proposal = s.isr_change(1_600, 100, 80, LAG_MS, 0)
    assert proposal == (1, 2, 3)


def test_a_broker_that_may_not_join_is_not_proposed() -> None:
    s = leader(isr=(1, 2))
    s.follower_fetched(3, 80, 80, 1_100)  # caught up, but fenced (or dead)
    assert s.isr_change(1_200, 80, 80, LAG_MS, 0, can_join=lambda n: n != 3) is None
    assert s.high_watermark(80, 0) == 0  # (2 has not fetched) and 3 holds nothing
    assert s.isr_change(1_300, 80, 80, LAG_MS, 0) == (1, 2, 3)


def test_pending_addition_holds_the_hwm_until_committed() -> None:
    s = leader(isr=(1,), replicas=(1, 2))
    s.follower_fetched(2, 30, 30, 1_100)
    assert s.isr_change(1_200, 30, 30, LAG_MS, 0) == (1, 2)
    # the leader appends; the joining follower has not fetched it yet
    assert s.high_watermark(60, 30) == 30
    s.update((1, 2), (1, 2), 8, 1_300)  # committed
    assert s.pending is None
    s.follower_fetched(2, 60, 60, 1_400)
    assert s.high_watermark(60, 30) == 60


def test_refused_proposal_is_dropped_and_a_metadata_change_clears_it() -> None:
    s = leader()
    s.follower_fetched(2, 0, 0, 1_000)
    s.follower_fetched(3, 0, 0, 1_000)
    assert s.isr_change(1_000 + LAG_MS + 1, 0, 0, LAG_MS, 0) == (1,)
    s.proposal_failed()
    assert s.pending is None
    assert s.isr_change(1_000 + LAG_MS + 2, 0, 0, LAG_MS, 0) == (1,)
    s.update((1, 2, 3), (1, 2), 8, 12_000)  # something else committed
    assert s.pending is None


def test_reassigned_replicas_are_tracked() -> None:
    s = leader(isr=(1, 2), replicas=(1, 2))
    s.update((1, 2, 4), (1, 2), 8, 2_000)
    assert set(s.followers) == {2, 4}
    s.update((1, 4), (1,), 9, 3_000)
    assert set(s.followers) == {4}


def test_a_restarted_follower_starts_over() -> None:
    """KIP-903: progress a follower's previous process reported says nothing of what the
    restarted one has: it is unknown again (and may not rejoin on it)."""
    s = LeaderState(1, (1, 2), (1,), 4, 7, 0, 1_000, {2: 10})
    s.follower_fetched(2, 100, 100, 1_100)
    assert s.followers[2].leo == 100
    s.update((1, 2), (1,), 7, 1_200, {2: 10})  # same incarnation: kept
    assert s.followers[2].leo == 100
    s.update((1, 2), (1,), 8, 1_300, {2: 11})  # it registered again
    assert s.followers[2].leo == -1
    assert s.isr_change(1_400, 100, 100, LAG_MS, 0) is None
