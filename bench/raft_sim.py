"""The Raft simulation over many seeds: safety and linearizability failures, elections,
time to elect after a leader crash, commit throughput (all in virtual time).

    python -m bench.raft_sim --seeds 10000 --nodes 3,5
    python -m bench.raft_sim --nodes 3 --seed 42 --trace [--stop-at EVENT]

A failing seed prints itself and the command that replays it with every event traced.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time

from eddy.cluster.raft.sim.network import Sim, SimConfig, SimResult


def _replay_cmd(nodes: int, seed: int, event: int | None) -> str:
    stop = f" --stop-at {event}" if event is not None else ""
    return f"python -m bench.raft_sim --nodes {nodes} --seed {seed} --trace{stop}"


def run_many(nodes: int, seeds: range, quiet: bool) -> list[SimResult]:
    results = []
    for seed in seeds:
        r = Sim(seed, SimConfig(nodes=nodes)).run()
        results.append(r)
        if r.failure and not quiet:
            print(f"FAIL nodes={nodes} seed={seed} at event {r.failed_at_event}: "
                  f"{r.failure}\n  replay: {_replay_cmd(nodes, seed, r.failed_at_event)}",
                  file=sys.stderr)
    return results


def row(nodes: int, results: list[SimResult], wall_s: float) -> str:
    fails = sum(1 for r in results if r.failure)
    elections = statistics.mean(r.elections for r in results)
    crash = [ms for r in results for ms in r.elect_after_leader_crash_ms]
    med = f"{statistics.median(crash):.0f}" if crash else "-"
    virt_s = sum(r.virtual_ms for r in results) / 1000
    commits = sum(r.commits for r in results) / virt_s
    ops = sum(r.ops_ok for r in results) / virt_s
    return (f"{nodes:>5} {len(results):>6} {fails:>8} {elections:>13.2f} {med:>17} "
            f"{len(crash):>7} {commits:>14.1f} {ops:>10.1f} {wall_s:>7.1f}")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--seeds", type=int, default=200, help="how many seeds per size")
    ap.add_argument("--first", type=int, default=0, help="first seed")
    ap.add_argument("--nodes", default="3,5", help="group sizes, comma separated")
    ap.add_argument("--seed", type=int, help="run this one seed only")
    ap.add_argument("--trace", action="store_true", help="print every event (one seed)")
    ap.add_argument("--stop-at", type=int, help="stop after this event (with --seed)")
    args = ap.parse_args(argv)
    sizes = [int(n) for n in args.nodes.split(",")]
    if args.seed is not None:
        status = 0
        for n in sizes:
            r = Sim(args.seed, SimConfig(nodes=n), trace=args.trace,
                    stop_at=args.stop_at).run()
            verdict = f"FAIL at event {r.failed_at_event}: {r.failure}" if r.failure else "ok"
            print(f"nodes={n} seed={args.seed}: {verdict} ({r.events} events, "
                  f"{r.elections} elections, {r.ops_ok} client ops, {r.commits} commits)")
            if r.failure:
                print(f"  replay: {_replay_cmd(n, args.seed, r.failed_at_event)}")
                status = 1
        return status
    print(f"{'nodes':>5} {'seeds':>6} {'failures':>8} {'elections/seed':>13} "
          f"{'elect after crash':>17} {'crashes':>7} {'commits/s virt':>14} {'ops/s virt':>10} "
          f"{'wall s':>7}")
    failed = False
    for n in sizes:
        t0 = time.perf_counter()
        results = run_many(n, range(args.first, args.first + args.seeds), quiet=False)
        print(row(n, results, time.perf_counter() - t0), flush=True)
        failed |= any(r.failure for r in results)
    print("(elect after crash: median virtual ms from a leader's crash to the next leader)")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
