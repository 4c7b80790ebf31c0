"""Gossip (HyParView + Plumtree) in the simulated network: convergence and message costs.

    python -m bench.gossip_sim --nodes 100 --seed 1 --seeds 3 --broadcasts 20 --loss 0.05

Prints one row per (scenario, seed): hops (max Plumtree round) and virtual ms until every live
node delivered, messages per broadcast (payload pushes, IHAVE, GRAFT, PRUNE), duplicate payloads
per node per broadcast, and for churn the ms until crashed nodes left every active view.
Everything is virtual time: no wall clock is measured, nothing is asserted.
"""

from __future__ import annotations

import argparse
import random
import statistics
from collections.abc import Sequence
from dataclasses import dataclass

from eddy.mesh.gossip.sim import GossipSim, SimConfig

_TREE = ("Gossip", "IHave", "Graft", "Prune")


@dataclass
class Row:
    scenario: str
    nodes: int
    seed: int
    hops: int
    conv_ms_mean: float
    conv_ms_max: int
    per_bcast: dict[str, float]
    dups_per_node: float
    missed: int
    extra: str


def _broadcasts(sim: GossipSim, count: int, rng: random.Random, gap_ms: int,
                origins: Sequence[int] | None = None) -> tuple[list[bytes], dict[str, int], int]:
    before = {k: sim.sent[k] for k in _TREE}
    dups_before = sum(n.tree.stats.duplicates for n in sim.nodes if n is not None)
    ids = []
    for k in range(count):
        origin = rng.choice(list(origins) if origins else sim.alive())
        ids.append(sim.broadcast(origin, f"bench {k}".encode() * 8))
        sim.run_for(gap_ms)
    sim.run_for(3_000)
    sent = {k: sim.sent[k] - before[k] for k in _TREE}
    dups = sum(n.tree.stats.duplicates for n in sim.nodes if n is not None) - dups_before
    return ids, sent, dups


def _row(name: str, sim: GossipSim, seed: int, ids: list[bytes], sent: dict[str, int],
         dups: int, extra: str = "") -> Row:
    conv: list[int] = []
    hops = 0
    missed = 0
    for msg_id in ids:
        rec = sim.broadcasts[msg_id]
        missed += len(sim.missing(msg_id))
        if rec.deliveries:
            conv.append(max(d.at_ms for d in rec.deliveries) - rec.sent_ms)
            hops = max(hops, max(d.round for d in rec.deliveries) + 1)
    n = len(ids) or 1
    live = len(sim.alive()) or 1
    return Row(name, sim.n, seed, hops, statistics.fmean(conv) if conv else 0.0,
               max(conv, default=0), {k: v / n for k, v in sent.items()}, dups / n / live,
               missed, extra)


def run_seed(nodes: int, seed: int, broadcasts: int, loss: float, gap_ms: int) -> list[Row]:
    rows = []
    rng = random.Random(seed)
    sim = GossipSim(nodes, seed, SimConfig(loss=loss))
    sim.start_all(stagger_ms=20)
    sim.run_for(8_000)
    extra = f"connected={sim.connected()}"
    ids, sent, dups = _broadcasts(sim, broadcasts, rng, gap_ms)
    rows.append(_row(f"steady loss={loss:g}", sim, seed, ids, sent, dups, extra))

    crashed = rng.sample(range(1, nodes), max(1, nodes // 10))
    for i in crashed:
        sim.crash(i)
    took = sim.run_while(lambda: any(sim.in_any_active_view(i) for i in crashed), 60_000, 10)
    sim.run_for(1_000)
    ids, sent, dups = _broadcasts(sim, broadcasts, rng, gap_ms)
    rows.append(_row(f"crash {len(crashed)}", sim, seed, ids, sent, dups,
                     f"dead_out_of_views_ms={took} connected={sim.connected()}"))

    for i in crashed:
        sim.restart(i)
    sim.run_for(5_000)
    left, right = list(range(nodes // 2)), list(range(nodes // 2, nodes))
    sim.partition([left, right])
    sim.run_for(15_000)
    sim.heal()
    healed = sim.run_while(lambda: not sim.connected(), 120_000)
    sim.run_for(1_000)
    ids, sent, dups = _broadcasts(sim, broadcasts, rng, gap_ms)
    rows.append(_row("restart+partition healed", sim, seed, ids, sent, dups,
                     f"reconnect_ms={healed}"))
    return rows


def print_table(rows: list[Row]) -> None:
    head = (f"{'scenario':26} {'nodes':>5} {'seed':>4} {'hops':>4} {'conv_ms':>8} "
            f"{'max_ms':>6} {'eager':>6} {'ihave':>6} {'graft':>5} {'prune':>5} {'dup/n':>5} "
            f"{'miss':>4}  notes")
    print(head)
    print("-" * len(head))
    for r in rows:
        p = r.per_bcast
        print(f"{r.scenario:26} {r.nodes:5d} {r.seed:4d} {r.hops:4d} {r.conv_ms_mean:8.0f} "
              f"{r.conv_ms_max:6d} {p['Gossip']:6.1f} {p['IHave']:6.1f} {p['Graft']:5.1f} "
              f"{p['Prune']:5.1f} {r.dups_per_node:5.2f} {r.missed:4d}  {r.extra}")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m bench.gossip_sim", description=__doc__)
    ap.add_argument("--nodes", type=int, nargs="+", default=[100])
    ap.add_argument("--seed", type=int, default=1, help="first seed")
    ap.add_argument("--seeds", type=int, default=3, help="how many seeds from --seed on")
    ap.add_argument("--broadcasts", type=int, default=20)
    ap.add_argument("--loss", type=float, default=0.0)
    ap.add_argument("--gap-ms", type=int, default=300, help="virtual ms between broadcasts")
    args = ap.parse_args(argv)
    rows: list[Row] = []
    for nodes in args.nodes:
        for seed in range(args.seed, args.seed + args.seeds):
            rows += run_seed(nodes, seed, args.broadcasts, args.loss, args.gap_ms)
    print_table(rows)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
