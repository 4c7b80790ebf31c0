"""`python -m bench.raft_calm [--minutes 1] [--phases idle,hog] [--failovers 10]`: is Raft
calm on a real 3-node cluster (three `eddy serve` processes, each a broker and a voter of
the metadata quorum), idle and under a CPU hog, and how fast does it fail over?

Each phase starts a fresh cluster and waits for a controller and 3 brokers; in phase "hog"
a busy loop per core (processes at the nodes' priority) then runs to the phase's end, in
phase "load" a producer sends 1 MB records (acks=all, replication factor 3) for the
window. For `--minutes` nothing else happens: every Raft leadership taken in that window
(the nodes' "raft group G: node N leader" log lines, metadata and offsets groups) is an
election no fault caused; the nodes' Raft stalls (a driver not run for over 200 ms: "did
not run for N ms", the longest reported) and fencings are counted too. Then
`--failovers` rounds of bench.metadata_failover's kill -9 of the
controller (the metadata leader): "controller back" is a new leader elected and its
controller active. `--set KEY=VALUE` passes settings to every node (say
`raft.election.timeout.ms=299` for seed 004's timings). Prints a table; never asserts.
"""

from __future__ import annotations

import argparse
import multiprocessing as mp
import os
import re
import statistics
import tempfile
import threading
import time
from dataclasses import dataclass, field

from bench.mesh_cluster import MeshNode, free_udp_port, start_all
from bench.metadata_failover import IDS, create_topic, one_round
from bench.metadata_failover import describe as describe_cluster

LEADS = re.compile(r"raft group (\S+): node (\d+) leader, leader \d+ \(term (\d+)\)")
#: what a node logs when its controller starts, or its group coordinator (both versions)
ROLES = {"controller": "is the controller (metadata leader",
         "coordinator": "group coordinator serving from the offsets group"}
STALL = re.compile(r"raft group \S+: node \d+ did not run for (\d+) ms")
FENCE = "fencing broker"


def _spin() -> None:
    while True:
        pass


@dataclass
class Phase:
    name: str
    minutes: float
    elections: dict[str, int] = field(default_factory=dict)  # group -> leaderships taken
    roles: dict[str, int] = field(default_factory=dict)  # controllers, coordinators started
    stalls: int = 0
    longest_stall_ms: int = 0
    fencings: int = 0
    produced_mib: float = 0.0
    back_ms: list[float] = field(default_factory=list)
    moved_ms: list[float] = field(default_factory=list)


def _count(nodes: dict[int, MeshNode]) -> tuple[dict[str, int], dict[int, list[int]], int]:
    """(leaderships per group and roles started, stalls (ms) per node, fencings) in every
    node's log so far."""
    leads: dict[str, int] = {}
    stalls: dict[int, list[int]] = {}
    fences = 0
    for i, n in nodes.items():
        text = n.log_path.read_text(errors="replace")
        for m in LEADS.finditer(text):
            leads[m.group(1)] = leads.get(m.group(1), 0) + 1
        for role, line in ROLES.items():
            leads[role] = leads.get(role, 0) + text.count(line)
        stalls[i] = [int(m.group(1)) for m in STALL.finditer(text)]
        fences += text.count(FENCE)
    return leads, stalls, fences


def _produce(bootstrap: str, stop: threading.Event, sent: list[int]) -> None:
    """1 MB records (a batch of one just under message.max.bytes), acks=all, until
    ``stop``; ``sent[0]``: bytes acknowledged."""
    from confluent_kafka import Producer

    value = os.urandom(1_000_000)
    p = Producer({"bootstrap.servers": bootstrap, "acks": "all", "linger.ms": 5,
                  "message.max.bytes": 1048588})  # the broker's (librdkafka's: 1,000,000)

    def done(err: object, _msg: object) -> None:
        if err is None:
            sent[0] += len(value)

    while not stop.is_set():
        try:
            p.produce("calm-load", value=value, on_delivery=done)
        except BufferError:
            p.poll(0.05)
        p.poll(0)
    p.flush(10)


def _nodes(root: str, sets: dict[str, str]) -> dict[int, MeshNode]:
    ports = {i: free_udp_port() for i in IDS}
    voters = ",".join(f"{i}@127.0.0.1:{p}" for i, p in ports.items())
    return {i: MeshNode(f"n{i}", i, ports[i], None, root, {
        "process.roles": "broker,controller", "controller.quorum.voters": voters, **sets})
        for i in IDS}


def _settled(nodes: dict[int, MeshNode], timeout_s: float = 60.0) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        views = [describe_cluster(n) for n in nodes.values()]
        if all(c in IDS and b == 3 for c, b in views):
            return
        time.sleep(0.2)
    raise TimeoutError("no controller with 3 brokers")


def run_phase(name: str, minutes: float, failovers: int, sets: dict[str, str]) -> Phase:
    phase = Phase(name, minutes)
    hogs: list[mp.Process] = []
    with tempfile.TemporaryDirectory(prefix=f"eddy-calm-{name}-") as root:
        nodes = _nodes(root, sets)
        try:
            start_all(list(nodes.values()))
            _settled(nodes)
            time.sleep(2.0)  # the offsets group's first election, the learners...
            if name == "hog":
                hogs = [mp.Process(target=_spin, daemon=True)
                        for _ in range(os.cpu_count() or 1)]
                for h in hogs:
                    h.start()
            stop, sent = threading.Event(), [0]
            producer = None
            if name == "load":
                create_topic(nodes[1], "calm-load")
                bootstrap = ",".join(f"127.0.0.1:{n.port}" for n in nodes.values())
                producer = threading.Thread(target=_produce, args=(bootstrap, stop, sent))
                producer.start()
            before = _count(nodes)
            time.sleep(minutes * 60)
            after = _count(nodes)
            stop.set()
            if producer is not None:
                producer.join()
            phase.produced_mib = sent[0] / (1 << 20)
            moved = {g: after[0].get(g, 0) - before[0].get(g, 0) for g in sorted(after[0])}
            phase.roles = {g: n for g, n in moved.items() if g in ROLES}
            phase.elections = {g: n for g, n in moved.items() if g not in ROLES}
            stalls = [ms for i, seen in after[1].items() for ms in seen[len(before[1][i]):]]
            phase.stalls, phase.longest_stall_ms = len(stalls), max(stalls, default=0)
            phase.fencings = after[2] - before[2]
            for k in range(failovers):
                back, moved = one_round(nodes, k)
                phase.back_ms.append(back)
                phase.moved_ms.append(moved)
        finally:
            for h in hogs:
                h.kill()
            for n in nodes.values():
                n.kill9()
    return phase


def _ms(values: list[float]) -> str:
    if not values:
        return "-"
    return f"median {statistics.median(values):5.0f} max {max(values):5.0f}"


def report(phases: list[Phase], sets: dict[str, str]) -> str:
    lines = [f"raft calm, 3 nodes (broker + voter each), settings {sets or 'defaults'}",
             f"{'phase':<6} {'minutes':>7} {'elections/min':<28} {'stalls (longest ms)':<20}"
             f" {'fenced':>6}  {'controller back (ms)':<24} leaders moved (ms)"]
    for p in phases:
        per_min = ", ".join(f"{g} {n / p.minutes:.1f}" for g, n in p.elections.items()) \
            or "none"
        stalls = f"{p.stalls} ({p.longest_stall_ms})"
        lines.append(f"{p.name:<6} {p.minutes:>7.1f} {per_min:<28} {stalls:<20} "
                     f"{p.fencings:>6}  {_ms(p.back_ms):<24} {_ms(p.moved_ms)}")
        lines.append(f"       started meanwhile: {p.roles}")
        if p.produced_mib:
            lines.append(f"       produced {p.produced_mib / (p.minutes * 60):.1f} MiB/s "
                         "of 1 MB records meanwhile")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m bench.raft_calm",
                                 description=__doc__.split("\n\n")[0])
    ap.add_argument("--minutes", type=float, default=1.0, help="idle window per phase")
    ap.add_argument("--phases", default="idle,hog", help="of idle, hog, load")
    ap.add_argument("--failovers", type=int, default=10, help="kill -9 rounds per phase")
    ap.add_argument("--set", action="append", default=[], metavar="KEY=VALUE")
    args = ap.parse_args(argv)
    sets = dict(s.split("=", 1) for s in args.set)
    phases = [run_phase(name, args.minutes, args.failovers, sets)
              for name in args.phases.split(",")]
    print(report(phases, sets))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
