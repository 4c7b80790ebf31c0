"""`python -m bench.chaos`: the fault harness's long runs on a real 3-node cluster.

    python -m bench.chaos --minutes 5 [--hog]              # mixed: every fault kind in turn
    python -m bench.chaos --scenario failover --rounds 20 [--hog]   # kill -9 of a leader
    python -m bench.chaos --scenario rolling --rounds 5 [--hog]     # SIGTERM rolling restarts

mixed: rounds of one fault each, every kind in turn (shuffled by --seed), each round on a
fresh topic of the same cluster, until --minutes are up; a round whose fault did not
recover gets the next round a fresh cluster. failover / rolling: --rounds faults of that
kind in one round. --hog busy-loops a process on every core for the whole run.

Reports per fault kind: count, unavailability (the longest gap in acknowledged acks=all
writes of a partition within the fault's window; max over partitions, then median and max
over the faults), failover after kill -9 (kill -> first ack of a record sent after it, on
the partitions the victim led), losses, duplicates, other anomalies, fatal client errors,
faults that did not recover. Writes bench/results/<stamp>-chaos-<scenario>[-hog].json.
Never asserts a timing; exits 1 when a check failed (lost, duplicated, out of order,
replicas differ, a fatal client error, a fault that did not recover).
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import random
import shutil
import statistics
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from pathlib import Path
from typing import Any

from bench.chaos.cluster import Cluster, default_block
from bench.chaos.faults import KINDS
from bench.chaos.net import Hog, NetFaults, net_faults
from bench.chaos.rounds import RATE, RoundReport, run_round

RESULTS_DIR = Path(__file__).resolve().parent.parent / "results"


def say(msg: str) -> None:
    print(f"[chaos] {msg}", file=sys.stderr, flush=True)


def have_iptables() -> bool:
    return os.geteuid() == 0 and shutil.which("iptables") is not None


@contextmanager
def maybe_net(block: int) -> Iterator[NetFaults | None]:
    if not have_iptables():
        yield None
        return
    with net_faults(block) as net:
        yield net


class Runner:
    """One cluster at a time under `root`; a new one after a round that did not recover."""

    def __init__(self, root: Path, block: int, net: NetFaults | None, rate: float) -> None:
        self.root, self.block, self.net, self.rate = root, block, net, rate
        self.clusters = 0
        self.cluster: Cluster | None = None

    def get(self) -> Cluster:
        if self.cluster is None:
            self.clusters += 1
            path = self.root / f"cluster-{self.clusters}"
            path.mkdir()
            self.cluster = Cluster(path, block=self.block)
            say(f"starting cluster {self.clusters} ({path})")
            self.cluster.start()
        return self.cluster

    def round(self, topic: str, kinds: list[str]) -> RoundReport:
        cluster = self.get()
        try:
            report = run_round(cluster, topic, kinds, self.net, rate=self.rate)
        except Exception as exc:  # the round could not even be checked
            report = RoundReport(topic, kinds, problems=[f"{type(exc).__name__}: {exc}"])
            report.logs = cluster.log_counts()
        say(report.summary())
        if report.problems:
            self.drop()
        return report

    def drop(self) -> None:
        if self.cluster is not None:
            self.cluster.stop()
            self.cluster = None


def _stats(xs: list[float]) -> dict[str, float]:
    return {"n": len(xs), "median": statistics.median(xs), "max": max(xs)} if xs else {"n": 0}


def per_kind(reports: list[RoundReport]) -> dict[str, dict[str, Any]]:
    """kind -> count, unavailability and failover stats, anomalies (of rounds of that kind
    alone), fatal errors and rounds that did not recover."""
    out: dict[str, dict[str, Any]] = {}
    for r in reports:
        for kind in dict.fromkeys(r.kinds):
            row = out.setdefault(kind, {"rounds": 0, "faults": 0, "unavailable": [],
                                        "failover": [], "failover_controller": [], "lost": 0,
                                        "duplicated": 0, "other": 0, "fatal": 0,
                                        "not_recovered": 0, "isr_full": []})
            row["rounds"] += 1
            mine = [f for f in r.faults if f.kind == kind]
            row["faults"] += len(mine)
            row["unavailable"] += [f.worst_s for f in mine]
            row["isr_full"] += [f.notes["isr_full_s"] for f in mine if "isr_full_s" in f.notes]
            for f in mine:
                if f.failover_s is not None:
                    row["failover"].append(f.failover_s)
                    if f.controller:
                        row["failover_controller"].append(f.failover_s)
            v = r.verdict
            row["lost"] += len(v.lost)
            row["duplicated"] += len(v.duplicated)
            row["other"] += len(v.misplaced) + len(v.out_of_order) + len(v.transactions) + len(
                v.replicas)
            row["fatal"] += len(v.fatal)
            row["not_recovered"] += bool(r.problems)
    for row in out.values():
        for key in ("unavailable", "failover", "failover_controller", "isr_full"):
            row[key] = _stats(row[key])
    return out


def _ms(s: dict[str, float]) -> str:
    if not s.get("n"):
        return "-"
    return f"{s['median'] * 1000:6.0f} / {s['max'] * 1000:6.0f}"


def render(table: dict[str, dict[str, Any]]) -> list[str]:
    lines = [f"{'kind':<11}{'faults':>7}  {'unavailable ms med/max':>23}  "
             f"{'failover ms med/max':>20}  {'(controller too)':>17}  "
             f"{'ISR full ms med/max':>20}  lost dup other fatal not-recovered"]
    for kind, r in table.items():
        lines.append(f"{kind:<11}{r['faults']:>7}  {_ms(r['unavailable']):>23}  "
                     f"{_ms(r['failover']):>20}  {_ms(r['failover_controller']):>17}  "
                     f"{_ms(r['isr_full']):>20}  {r['lost']:>4} {r['duplicated']:>3} "
                     f"{r['other']:>5} {r['fatal']:>5} {r['not_recovered']:>13}")
    return lines


def mixed(runner: Runner, minutes: float, kinds: list[str], seed: int) -> list[RoundReport]:
    rng = random.Random(seed)
    deadline = time.monotonic() + minutes * 60
    reports: list[RoundReport] = []
    queue: list[str] = []
    while time.monotonic() < deadline:
        if not queue:
            queue = rng.sample(kinds, len(kinds))
        kind = queue.pop()
        say(f"round {len(reports) + 1}: {kind}")
        reports.append(runner.round(f"chaos-{len(reports) + 1}", [kind]))
    return reports


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m bench.chaos",
                                 description=(__doc__ or "").split("\n\n")[0])
    ap.add_argument("--scenario", choices=("mixed", "failover", "rolling"), default="mixed")
    ap.add_argument("--minutes", type=float, default=5.0, help="mixed: how long (5)")
    ap.add_argument("--rounds", type=int, help="failover (20) / rolling (5): how many")
    ap.add_argument("--kinds", default=",".join(KINDS),
                    help=f"mixed: the fault kinds, comma-separated ({','.join(KINDS)})")
    ap.add_argument("--hog", action="store_true", help="busy-loop every core meanwhile")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--rate", type=float, default=RATE,
                    help=f"records per second over the 3 partitions ({RATE:g})")
    ap.add_argument("--block", type=int, default=None,
                    help="loopback block 127.0.B.x (default $EDDY_CHAOS_BLOCK or 250)")
    ap.add_argument("--keep", action="store_true", help="keep the nodes' data and logs")
    ap.add_argument("--results-dir", type=Path, default=RESULTS_DIR)
    a = ap.parse_args(argv)
    kinds = [k for k in a.kinds.split(",") if k]
    unknown = [k for k in kinds if k not in KINDS]
    if unknown:
        ap.error(f"unknown fault kinds: {unknown}")
    block = default_block() if a.block is None else a.block
    if not have_iptables() and "isolate" in kinds:
        say("no iptables (or not root): the isolate kind is left out")
        kinds.remove("isolate")
    started = time.time()
    root = Path(tempfile.mkdtemp(prefix="eddy-chaos-"))
    reports: list[RoundReport] = []
    with ExitStack() as stack:
        net = stack.enter_context(maybe_net(block))
        stack.enter_context(Hog(a.hog))
        runner = Runner(root, block, net, a.rate)
        stack.callback(runner.drop)
        if a.scenario == "mixed":
            reports = mixed(runner, a.minutes, kinds, a.seed)
        else:
            kind = "kill" if a.scenario == "failover" else "rolling"
            rounds = a.rounds or (20 if a.scenario == "failover" else 5)
            reports = [runner.round(a.scenario, [kind] * rounds)]
    table = per_kind(reports)
    lines = render(table)
    print(f"Chaos: {a.scenario}{' under a CPU hog' if a.hog else ''}, {len(reports)} rounds, "
          f"{time.time() - started:.0f} s")
    print("\n".join(lines))
    failed = [r for r in reports if not r.ok]
    for r in failed:
        print(f"FAILED {r.topic}: {r.verdict.summary()} {r.problems}")
    stamp = datetime.datetime.now().strftime("%Y%m%d-%H%M%S")
    path = a.results_dir / f"{stamp}-chaos-{a.scenario}{'-hog' if a.hog else ''}.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps({
        "started": datetime.datetime.fromtimestamp(started).isoformat(timespec="seconds"),
        "duration_s": round(time.time() - started, 1), "argv": sys.argv[1:],
        "per_kind": table, "table": lines, "rounds": [r.as_json() for r in reports],
    }, indent=1, default=str))
    print(f"results: {path}")
    if a.keep:
        print(f"data and logs: {root}")
    else:
        shutil.rmtree(root, ignore_errors=True)
    return 1 if failed else 0


if __name__ == "__main__":
    raise SystemExit(main())
