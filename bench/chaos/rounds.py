"""One round of the harness: a topic (replication factor 3, min.insync.replicas=2) written
by the idempotent acks=all writer (and the transactional one, when a fault kind asks),
faults applied one after another, then everything read back (read_committed, through two
different nodes) and checked (bench.chaos.checks); the unavailability each fault caused
is the longest gap between acknowledgements of a partition within its window.

Tests and the bench share it: tests assert the verdict and that every fault recovered;
timings are only reported.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from bench.chaos.checks import Verdict, check, failover_time, replica_diffs, unavailability
from bench.chaos.cluster import Cluster, wait_for
from bench.chaos.faults import KINDS, Target, Window
from bench.chaos.net import NetFaults
from bench.chaos.workload import Journal, TxnWriter, Writer, read_all, watermarks

PARTITIONS = 3
RATE = 300.0  # records per second, over every partition
GAP_S = 1.0  # between two faults (and before the first, once every partition took writes)
CONFIGS = {"min.insync.replicas": "2"}


@dataclass
class FaultReport:
    """What one fault did: the partitions' longest gaps within its window, for kill -9
    kinds the failover (kill -> first ack of a record sent after it, on each partition the
    victim led), and its notes (seconds to exit, to move, to full ISRs...)."""

    kind: str
    nodes: tuple[int, ...]
    controller: bool
    began: str  # wall-clock time of day, as the nodes' logs name it
    unavailable_s: dict[int, float]
    failover_s: float | None
    notes: dict[str, float]

    @property
    def worst_s(self) -> float:
        return max(self.unavailable_s.values(), default=0.0)


@dataclass
class RoundReport:
    topic: str
    kinds: list[str]
    faults: list[FaultReport] = field(default_factory=list)
    verdict: Verdict = field(default_factory=Verdict)
    #: what kept the round from completing: a fault that did not recover, a stuck client
    problems: list[str] = field(default_factory=list)
    sent: int = 0
    errors: dict[str, int] = field(default_factory=dict)
    producers: int = 0
    txns: dict[str, int] = field(default_factory=dict)
    logs: dict[int, dict[str, int]] = field(default_factory=dict)
    seconds: float = 0.0
    #: partition -> the longest gap between acknowledgements outside every fault's window
    #: (while nothing was done to the cluster: churn of its own, leaders moving back)
    between_s: dict[int, float] = field(default_factory=dict)

    @property
    def ok(self) -> bool:
        return self.verdict.ok and not self.problems

    def summary(self) -> str:
        lines = [f"{self.topic}: {' '.join(self.kinds)}; {self.seconds:.0f} s, sent "
                 f"{self.sent}, producers {self.producers}, producer errors {self.errors}, "
                 f"transactions {self.txns}",
                 self.verdict.summary()]
        for f in self.faults:
            gaps = ", ".join(f"{p}: {s:.2f}" for p, s in sorted(f.unavailable_s.items()))
            fo = "" if f.failover_s is None else f", failover {f.failover_s:.2f} s"
            notes = ", ".join(f"{k} {v:.1f}" for k, v in f.notes.items())
            lines.append(f"  {f.kind} {f.nodes}{' (controller)' if f.controller else ''} at "
                         f"{f.began}: "
                         f"longest gap per partition (s) {{{gaps}}}{fo}; {notes}")
        gaps = ", ".join(f"{p}: {s:.2f}" for p, s in sorted(self.between_s.items()))
        lines.append(f"  between faults, longest gap per partition (s) {{{gaps}}}")
        lines += [f"  problem: {p}" for p in self.problems]
        lines.append(f"  node logs: {self.logs}")
        return "\n".join(lines)

    def as_json(self) -> dict[str, Any]:
        return {"topic": self.topic, "kinds": self.kinds, "ok": self.ok,
                "seconds": round(self.seconds, 1), "sent": self.sent, "errors": self.errors,
                "producers": self.producers, "txns": self.txns, "logs": self.logs,
                "problems": self.problems, "anomalies": self.verdict.anomalies(),
                "acked": self.verdict.acked, "read": self.verdict.read,
                "between_s": self.between_s,
                "faults": [{"kind": f.kind, "nodes": f.nodes, "controller": f.controller,
                            "began": f.began,
                            "unavailable_s": f.unavailable_s, "failover_s": f.failover_s,
                            "notes": f.notes} for f in self.faults]}


def fault_report(journal: Journal, w: Window) -> FaultReport:
    failover = None
    if w.kind in ("kill", "txn", "controller") and w.led:
        times = [failover_time(journal, p, w.start) for p in w.led]
        failover = max((t for t in times if t is not None), default=None)
    return FaultReport(w.kind, w.nodes, w.controller, journal.clock(w.start),
                       unavailability(journal, w.start, w.end),
                       failover, {k: round(v, 3) for k, v in w.notes.items()})


def between(journal: Journal, windows: Sequence[Window], start: float, end: float
            ) -> dict[int, float]:
    """partition -> the longest gap between acknowledgements within [start, end] outside
    every window."""
    edges = [start, *(t for w in sorted(windows, key=lambda w: w.start)
                      for t in (w.start, w.end)), end]
    out = {p: 0.0 for p in range(journal.partitions)}
    for a, b in zip(edges[::2], edges[1::2], strict=True):
        if b > a:
            for p, gap in unavailability(journal, a, b).items():
                out[p] = max(out[p], gap)
    return out


def run_round(cluster: Cluster, topic: str, kinds: Sequence[str], net: NetFaults | None = None,
              partitions: int = PARTITIONS, rate: float = RATE) -> RoundReport:
    """Create `topic`, write while each fault of `kinds` hits it in turn, check."""
    began = time.monotonic()
    report = RoundReport(topic, list(kinds))
    cluster.create_topic(topic, partitions, CONFIGS)
    writer = Writer(cluster.bootstrap, topic, partitions, rate).start()
    txn = (TxnWriter(cluster.bootstrap, topic, partitions).start()
           if any(KINDS[k].transactional for k in kinds) else None)
    target = Target(cluster, topic, partitions, net)
    measured = stopped = began
    try:
        wait_for(lambda: len(writer.acked_per_partition()) == partitions, 60,
                 "every partition acknowledged a write")
        measured = time.monotonic()
        time.sleep(GAP_S)
        for k, kind in enumerate(kinds):
            try:
                KINDS[kind].run(target, k)
            except AssertionError as exc:  # did not recover: check what we have
                report.problems.append(f"fault {k} ({kind}) did not recover: {exc}")
                break
            time.sleep(GAP_S)
    finally:
        stopped = time.monotonic()
        for client in (writer, txn):
            if client is not None:
                try:
                    client.stop()
                except AssertionError as exc:
                    report.problems.append(str(exc))
        if writer.crashed:
            report.problems.append(writer.crashed)
    try:
        cluster.wait_settled(topic, 60)
    except AssertionError as exc:
        report.problems.append(str(exc))
    try:
        verify(cluster, report, writer, txn, partitions)
    except Exception as exc:  # e.g. a cluster that never came back: no reads
        report.problems.append(f"not verified: {type(exc).__name__}: {exc}")
    for w in target.windows:
        w.end = w.end or stopped  # a fault that did not recover: until the writer stopped
    report.faults = [fault_report(writer.journal, w) for w in target.windows]
    report.between_s = between(writer.journal, target.windows, measured, stopped)
    report.logs = cluster.log_counts()
    report.seconds = time.monotonic() - began
    return report


def verify(cluster: Cluster, report: RoundReport, writer: Writer, txn: TxnWriter | None,
           partitions: int) -> None:
    """Read the topic back through two nodes, check the history and the replicas' bytes."""
    topic = report.topic
    live = cluster.live()
    ends = watermarks(",".join(n.bootstrap for n in live), topic, partitions)
    reads = [read_all(n.bootstrap, topic, ends) for n in (live[0], live[-1])]
    j = writer.journal
    report.verdict = check(j, reads, txn.txns if txn else (), txn.fatal if txn else ())
    report.sent, report.errors, report.producers = len(j.sent), j.errors(), j.producers
    if txn is not None:
        report.txns = {o: sum(t.outcome == o for t in txn.txns)
                       for o in ("committed", "aborted", "unknown")}
        report.txns["producers"] = txn.producers
    dirs = {i: n.data_dir for i, n in cluster.nodes.items()}
    deadline = time.monotonic() + 30
    while True:  # followers may still be catching up to the high watermark
        diffs = replica_diffs(dirs, topic, ends)
        if not diffs or time.monotonic() > deadline:
            break
        time.sleep(0.5)
    report.verdict.replicas = diffs
