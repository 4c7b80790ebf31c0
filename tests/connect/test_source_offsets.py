"""How format("eddy") plans a micro-batch: the max-records budget split over partitions,
and one input partition per topic partition with something to read."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from eddy.connect.reader.kafka_source import limit_offsets, plan_ranges

lags = st.dictionaries(st.sampled_from([f"t/{i}" for i in range(6)]),
                       st.integers(min_value=0, max_value=10_000), min_size=1)


@given(lags, st.dictionaries(st.sampled_from([f"t/{i}" for i in range(6)]),
                             st.integers(min_value=0, max_value=1_000)),
       st.integers(min_value=1, max_value=20_000))
def test_the_budget_is_spent_exactly_and_never_past_the_end(
        lag: dict[str, int], base: dict[str, int], budget: int) -> None:
    start = {k: base.get(k, 0) for k in lag}
    latest = {k: start[k] + waiting for k, waiting in lag.items()}
    end = limit_offsets(start, latest, budget)
    assert set(end) == set(latest)
    taken = {k: end[k] - start[k] for k in end}
    assert all(0 <= taken[k] <= lag[k] for k in taken)
    total = sum(lag.values())
    with_data = sum(1 for w in lag.values() if w)
    if total <= budget:
        assert end == latest
    else:
        # exactly the budget, unless the at-least-one rule adds a few
        assert budget <= sum(taken.values()) <= budget + with_data
        assert all(taken[k] >= 1 for k in lag if lag[k])


def test_a_backlog_of_k_budgets_takes_k_batches() -> None:
    start = {"t/0": 0, "t/1": 0}
    latest = {"t/0": 2_999_999, "t/1": 3_000_001}
    batches = 0
    while start != latest:
        start = limit_offsets(start, latest, 1_000_000)
        batches += 1
    assert batches == 6


def test_shares_follow_the_lag() -> None:
    end = limit_offsets({}, {"a/0": 900, "a/1": 100, "a/2": 0}, 100)
    assert end == {"a/0": 90, "a/1": 10, "a/2": 0}


def test_one_range_per_partition_with_data() -> None:
    ranges = plan_ranges({"t/0": 5, "t/1": 7}, {"t/0": 9, "t/1": 7, "u/0": 3})
    assert [(r.topic, r.partition, r.start, r.end) for r in ranges] == [
        ("t", 0, 5, 9), ("u", 0, 0, 3)]
