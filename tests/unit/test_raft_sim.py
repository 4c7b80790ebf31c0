"""The deterministic simulation: a few hundred short seeds of 3- and 5-node groups under
message loss, duplication, reordering, partitions, crashes (losing unsynced writes), clock
jumps, pauses (a node, the leader or every node stops running a while) and whole-cluster
restarts; every Raft safety property is checked after each step
and the key-value history must be linearizable."""

from __future__ import annotations

import pytest

from eddy.cluster.raft.sim.kv import HistOp, KvOp, check_history
from eddy.cluster.raft.sim.network import Sim, SimConfig


def _run(nodes: int, seeds: range) -> None:
    failures = []
    for seed in seeds:
        r = Sim(seed, SimConfig(nodes=nodes)).run()
        if r.failure:
            failures.append(f"seed {seed} (event {r.failed_at_event}): {r.failure}\n  "
                            f"python -m bench.raft_sim --nodes {nodes} --seed {seed} --trace")
        assert r.ops_ok > 0, f"seed {seed}: no client operation completed"
    assert not failures, "\n".join(failures)


@pytest.mark.parametrize("block", range(4))
def test_three_node_seeds(block: int) -> None:
    _run(3, range(block * 50, block * 50 + 50))


@pytest.mark.parametrize("block", range(2))
def test_five_node_seeds(block: int) -> None:
    _run(5, range(1000 + block * 50, 1000 + block * 50 + 50))


def test_every_node_crashing_at_once_mid_write_loses_nothing_committed() -> None:
    for seed in range(20):
        sim = Sim(seed, SimConfig(nodes=3, crash_all_at_ms=(1_000, 2_200)))
        r = sim.run()
        assert r.failure is None, f"seed {seed}: {r.failure}"
        assert sim.crash_all_count >= 1, f"seed {seed}: no power cut happened"
        assert sim.commits_before_crash_all and all(
            sim.checker.committed.get(i) == rec
            for i, rec in sim.commits_before_crash_all.items())


def test_a_seed_replays_exactly() -> None:
    a = Sim(7, SimConfig(nodes=5)).run()
    b = Sim(7, SimConfig(nodes=5)).run()
    assert (a.events, a.commits, a.elections, a.ops_ok) == (b.events, b.commits, b.elections,
                                                             b.ops_ok)


def _h(kind: str, value: str, call: int, ret: int | None, result: object,
       expect: str | None = None) -> HistOp:
    return HistOp(KvOp(1, call, kind, "k", value, expect), call, ret, result)


def test_the_linearizability_checker_accepts_a_valid_and_rejects_a_stale_read() -> None:
    ok = [_h("put", "a", 1, 4, True), _h("get", "", 2, 3, "a"), _h("get", "", 5, 6, "a")]
    assert check_history(ok) == []
    stale = [_h("put", "a", 1, 2, True), _h("put", "b", 3, 4, True),
             _h("get", "", 5, 6, "a")]
    assert check_history(stale) and "not linearizable" in check_history(stale)[0]


def test_an_unknown_outcome_write_may_or_may_not_have_happened() -> None:
    maybe = [_h("put", "a", 1, 2, True), _h("put", "x", 3, None, None),
             _h("get", "", 4, 5, "x"), _h("get", "", 6, 7, "x")]
    assert check_history(maybe) == []
    never = [_h("put", "a", 1, 2, True), _h("put", "x", 3, None, None),
             _h("get", "", 4, 5, "a")]
    assert check_history(never) == []
    flip = [_h("put", "a", 1, 2, True), _h("put", "x", 3, None, None),
            _h("get", "", 4, 5, "x"), _h("get", "", 6, 7, "a")]
    assert check_history(flip), "once seen, the write cannot be undone"


def test_cas_results_are_checked() -> None:
    good = [_h("put", "a", 1, 2, True), _h("cas", "b", 3, 4, True, expect="a"),
            _h("cas", "c", 5, 6, False, expect="a")]
    assert check_history(good) == []
    bad = [_h("put", "a", 1, 2, True), _h("cas", "b", 3, 4, False, expect="a")]
    assert check_history(bad)
