"""Replica placement on the hash ring: `python -m bench.placement [--partitions N] [--smoke]`.

Both the default ring (bounded loads, slack 0) and the bare ring are measured.

1. balance: one topic of N partitions (default 1000), rf 1 and 3, over 3, 5 and 9 nodes
   (no racks, and 3 racks): replicas and leaders per node, min / max and max/min;
2. stability: the same topic over N nodes, then over N+1: the fraction of replicas (as sets
   per partition) and of preferred leaders that moved, next to the ideal 1/(N+1);
3. several topics: 100 topics of 10 partitions (rf 3) over 9 nodes, the balance of all
   replicas together (what a cluster with many small topics sees).

Pure computation; nothing is asserted, a table goes to stdout.
"""

from __future__ import annotations

import argparse
import time
from collections import Counter

from eddy.cluster.placement import HashRing


def _nodes(count: int, racks: int) -> dict[int, str | None]:
    return {n: (f"r{n % racks}" if racks else None) for n in range(1, count + 1)}


def _ratio(counts: Counter[int], nodes: dict[int, str | None]) -> tuple[int, int, float]:
    values = [counts.get(n, 0) for n in nodes]
    lo, hi = min(values), max(values)
    return lo, hi, (hi / lo if lo else float("inf"))


MODES: tuple[tuple[str, float | None], ...] = (("bounded", 0.0), ("bare", None))


def balance(partitions: int, mode: str, slack: float | None) -> None:
    print(f"\nbalance ({mode} ring): one topic, {partitions} partitions")
    print(f"{'nodes':>5} {'racks':>5} {'rf':>3} | {'replicas min/max':>16} {'max/min':>7} | "
          f"{'leaders min/max':>15} {'max/min':>7}")
    ring = HashRing(load_slack=slack)
    for count in (3, 5, 9):
        for racks in (0, 3):
            for rf in (1, 3):
                nodes = _nodes(count, racks)
                plan = ring.place("orders", partitions, rf, nodes)
                replicas: Counter[int] = Counter(r for p in plan for r in p)
                leaders: Counter[int] = Counter(p[0] for p in plan)
                rlo, rhi, rr = _ratio(replicas, nodes)
                llo, lhi, lr = _ratio(leaders, nodes)
                print(f"{count:>5} {racks:>5} {rf:>3} | {rlo:>7}/{rhi:<8} {rr:>7.3f} | "
                      f"{llo:>7}/{lhi:<7} {lr:>7.3f}")


def movement(partitions: int, mode: str, slack: float | None) -> None:
    print(f"\nstability ({mode} ring): add one node ({partitions} partitions)")
    print(f"{'nodes':>9} {'rf':>3} | {'replicas moved':>14} {'leaders moved':>13} "
          f"{'ideal 1/(N+1)':>13}")
    ring = HashRing(load_slack=slack)
    for count in (3, 5, 9):
        for rf in (1, 3):
            before = ring.place("orders", partitions, rf, _nodes(count, 0))
            after = ring.place("orders", partitions, rf, _nodes(count + 1, 0))
            moved = sum(len(set(a) - set(b)) for a, b in zip(after, before, strict=True))
            leaders = sum(a[0] != b[0] for a, b in zip(after, before, strict=True))
            total = partitions * rf
            print(f"{count:>3} -> {count + 1:<3} {rf:>3} | {moved / total:>14.3f} "
                  f"{leaders / partitions:>13.3f} {1 / (count + 1):>13.3f}")


def many_topics(mode: str, slack: float | None) -> None:
    ring = HashRing(load_slack=slack)
    nodes = _nodes(9, 3)
    replicas: Counter[int] = Counter()
    leaders: Counter[int] = Counter()
    for t in range(100):
        for p in ring.place(f"topic-{t}", 10, 3, nodes):
            replicas.update(p)
            leaders[p[0]] += 1
    rlo, rhi, rr = _ratio(replicas, nodes)
    llo, lhi, lr = _ratio(leaders, nodes)
    print(f"\n({mode} ring) 100 topics x 10 partitions, rf 3, 9 nodes in 3 racks: "
          f"replicas {rlo}/{rhi} (max/min {rr:.3f}), leaders {llo}/{lhi} (max/min {lr:.3f})")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--partitions", type=int, default=1000)
    parser.add_argument("--smoke", action="store_true", help="100 partitions")
    args = parser.parse_args()
    partitions = 100 if args.smoke else args.partitions
    start = time.perf_counter()
    for mode, slack in MODES:
        balance(partitions, mode, slack)
        movement(partitions, mode, slack)
        many_topics(mode, slack)
    elapsed = time.perf_counter() - start
    print(f"\n(placed in {elapsed:.2f} s)")


if __name__ == "__main__":
    main()
