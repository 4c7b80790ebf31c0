"""The whole-cluster simulation over many seeds (``eddy.sim.cluster``): 3- and
5-node clusters (metadata and offsets Raft groups, controllers, group coordinators,
brokers, clients) under message loss, duplication, reordering, partitions, crashes losing
unsynced writes, power cuts and clock jumps, all in virtual time. Prints failures (each
with its replay command) and a table: seeds, failures, elections, controller failovers, the
median virtual time from the controller's node crashing to a new active controller,
commands applied, offset commits/fetches answered and group coordinators activated.

    python -m bench.sim --seeds 10000 --nodes 3,5       # the long run
    python -m bench.sim --smoke                          # a tiny run
    python -m bench.sim --nodes 3 --seed 42 --trace      # replay one seed, every event
    python -m bench.sim --raft --seeds 1000              # also the Raft-only simulation
    python -m bench.sim --no-offsets                     # the metadata group only
    python -m bench.sim --no-fetch-barrier               # OffsetFetch without its barrier

``--jobs N`` spreads the seeds over N processes (each seed is still deterministic).
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from concurrent.futures import ProcessPoolExecutor

from eddy.sim.cluster import ClusterConfig, ClusterResult, ClusterSim

HEADER = (f"{'nodes':>5} {'seeds':>6} {'failures':>8} {'elections':>9} {'failovers':>9} "
          f"{'ctrl after crash ms':>19} {'crashes':>7} {'commands':>9} {'fences':>6} "
          f"{'moves':>6} {'isr+':>5} {'kv ops':>7} {'topics':>6} {'offs ops':>8} "
          f"{'coords':>6} {'wall s':>7}")


def _run_block(args: tuple[ClusterConfig, int, int]) -> list[ClusterResult]:
    config, first, count = args
    return [ClusterSim(s, config).run() for s in range(first, first + count)]


def run_many(config: ClusterConfig, first: int, count: int, jobs: int) -> list[ClusterResult]:
    if jobs <= 1:
        return _run_block((config, first, count))
    step = max(1, min(50, count // (jobs * 4) or 1))
    blocks = [(config, s, min(step, first + count - s))
              for s in range(first, first + count, step)]
    out: list[ClusterResult] = []
    with ProcessPoolExecutor(jobs) as pool:
        for part in pool.map(_run_block, blocks):
            out.extend(part)
    return out


def _kind(results: list[ClusterResult], kind: str) -> int:
    return sum(r.applied_kinds.get(kind, 0) for r in results)


def row(nodes: int, results: list[ClusterResult], wall_s: float) -> str:
    fails = sum(1 for r in results if r.failure)
    crash = [ms for r in results for ms in r.controller_after_crash_ms]
    med = f"{statistics.median(crash):.0f}" if crash else "-"
    return (f"{nodes:>5} {len(results):>6} {fails:>8} "
            f"{sum(r.elections for r in results):>9} {sum(r.failovers for r in results):>9} "
            f"{med:>19} {len(crash):>7} {sum(r.commands_applied for r in results):>9} "
            f"{_kind(results, 'FenceBroker'):>6} {_kind(results, 'ChangePartitionLeader'):>6} "
            f"{_kind(results, 'ChangeIsr'):>5} {sum(r.kv_ops_ok for r in results):>7} "
            f"{sum(r.topics_created for r in results):>6} "
            f"{sum(r.offsets_ops_ok for r in results):>8} "
            f"{sum(r.coordinator_activations for r in results):>6} {wall_s:>7.1f}")


def _raft_sim(seeds: int, first: int, sizes: str) -> int:
    from bench import raft_sim
    return raft_sim.main(["--seeds", str(seeds), "--first", str(first), "--nodes", sizes])


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--seeds", type=int, default=200, help="how many seeds per size")
    ap.add_argument("--first", type=int, default=0, help="first seed")
    ap.add_argument("--nodes", default="3,5", help="cluster sizes, comma separated")
    ap.add_argument("--seed", type=int, help="run this one seed only")
    ap.add_argument("--trace", action="store_true", help="print every event (one seed)")
    ap.add_argument("--stop-at", type=int, help="stop after this event (with --seed)")
    ap.add_argument("--jobs", type=int, default=1, help="processes")
    ap.add_argument("--duration-ms", type=int, default=ClusterConfig().duration_ms,
                    help="virtual ms of faults and clients")
    ap.add_argument("--settle-ms", type=int, default=ClusterConfig().settle_ms,
                    help="virtual ms the healed cluster has to settle")
    ap.add_argument("--crash-all-at", default="",
                    help="virtual ms (comma separated) at which every node loses power")
    ap.add_argument("--no-offsets", action="store_true",
                    help="without the offsets group and its group coordinator")
    ap.add_argument("--no-fetch-barrier", action="store_true",
                    help="OffsetFetch answered without a read barrier (the old, broken model)")
    ap.add_argument("--smoke", action="store_true", help="a tiny run (10 seeds a size)")
    ap.add_argument("--raft", action="store_true",
                    help="also run the Raft-only simulation (bench.raft_sim) on these seeds")
    args = ap.parse_args(argv)
    sizes = [int(n) for n in args.nodes.split(",")]
    cuts = tuple(int(t) for t in args.crash_all_at.split(",") if t)

    def config(n: int) -> ClusterConfig:
        return ClusterConfig(nodes=n, duration_ms=args.duration_ms, settle_ms=args.settle_ms,
                             crash_all_at_ms=cuts, offsets=not args.no_offsets,
                             offsets_fetch_barrier=not args.no_fetch_barrier)

    if args.seed is not None:
        status = 0
        for n in sizes:
            r = ClusterSim(args.seed, config(n), trace=args.trace,
                           stop_at=args.stop_at).run()
            print(r.report())
            print(f"  {r.events} events, {r.elections} elections, {r.activations} controller "
                  f"activations, {r.commands_applied} commands, {r.kv_ops_ok} kv ops, "
                  f"{r.offsets_ops_ok} offsets ops, {r.coordinator_activations} coordinator "
                  f"activations, digest {r.digest}")
            status |= r.failure is not None
        return status
    seeds = 10 if args.smoke else args.seeds
    print("whole-cluster simulation (eddy.sim.cluster)")
    print(HEADER)
    failed = False
    for n in sizes:
        t0 = time.perf_counter()
        results = run_many(config(n), args.first, seeds, args.jobs)
        for r in results:
            if r.failure:
                print(r.report(), file=sys.stderr)
        print(row(n, results, time.perf_counter() - t0), flush=True)
        failed |= any(r.failure for r in results)
    print("(totals over the seeds. ctrl after crash: median virtual ms from the controller's "
          "node crashing to a new active controller, over 'crashes' such crashes; commands: "
          "distinct log entries applied; fences, moves (ChangePartitionLeader), isr+ "
          "(ChangeIsr): of those; offs ops: offset commits and fetches answered without error; "
          "coords: group coordinators activated on an offsets leader)")
    if args.raft:
        print("\nRaft-only simulation (bench.raft_sim)")
        failed |= _raft_sim(seeds, args.first, args.nodes) != 0
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
