"""`python -m bench.idle [--minutes 10] [--nodes 1,3]`: what an idle Eddy costs, and whether
it stays idle (issue 28).

For each cluster size (1: one `eddy serve` alone, a cluster of one; 3: three nodes, each a
broker and a voter of the metadata quorum), the nodes start on loopback, clients do a little
work first (a replicated topic, an idempotent acks=all producer, committed and aborted
transactions, a consumer group committing offsets), every client is closed, and after
``--settle`` seconds the cluster is left alone for ``--minutes``. Reported per node over
that period:

- CPU, as % of one core (user + system time of the process, all its threads);
- RSS at the end (MiB);
- leadership changes: Raft elections (term increments of the ``metadata`` and ``offsets``
  groups) and partition leader elections (leader epoch increments), which must be zero;
- appends: bytes added to the node's partition segments and to its Raft logs (zero when
  nothing is written);
- log lines that mean churn (the controller or the group coordinator moving, fencing, ISR
  changes, transaction coordinator activations).

Then each node is stopped with SIGTERM, one at a time (the last alone): its time to exit.
Prints a table; `--json PATH` writes the results (`-` for stdout). Never asserts a timing;
exits 1 when a cluster could not be set up.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from bench.mesh_cluster import MeshNode, free_udp_port, start_all
from bench.procstat import cpu_seconds, rss_bytes

TOPIC = "idle-bench"
#: log lines that mean something moved (counted over the idle period)
CHURN = {
    "controller": re.compile(r"is the controller"),
    "coordinator": re.compile(r"group coordinator serving from the offsets group"),
    "txn coordinator": re.compile(r"transaction coordinator serving from the offsets group"),
    "fencing": re.compile(r"fencing broker"),
    "isr": re.compile(r": ISR \[.*\] -> \["),
    "elections": re.compile(r"election|campaign", re.IGNORECASE),
}


@dataclass
class Snapshot:
    cpu_s: float
    rss: int
    terms: dict[str, int]
    leaders: dict[str, int]
    epochs: dict[str, int]  # partition -> leader epoch, as this node answers Metadata
    segment_bytes: int
    raft_bytes: int
    at: float = field(default_factory=time.perf_counter)


def _bytes_under(root: Path, raft: bool) -> int:
    total = 0
    for path in root.rglob("*.log"):
        if ("raft" in path.relative_to(root).parts) != raft:
            continue
        with contextlib.suppress(OSError):  # a segment deleted meanwhile
            total += path.stat().st_size
    return total


async def _raft_of(node: MeshNode) -> tuple[dict[str, int], dict[str, int]]:
    from eddy.mesh.client import control_call
    from eddy.mesh.control import StatusRequest, StatusResponse

    answer = await control_call(node.mesh_addr, StatusRequest(), 5.0)
    if not isinstance(answer, StatusResponse):
        return {}, {}
    return ({g.group: int(g.term) for g in answer.raft},
            {g.group: int(g.leader) for g in answer.raft})


def _epochs_of(node: MeshNode) -> dict[str, int]:
    from kio.schema.metadata.v12.request import MetadataRequest

    from eddy.client.raw import RawClient

    with RawClient("127.0.0.1", node.port, 5.0) as raw:
        answer = raw.call(MetadataRequest(topics=None, allow_auto_topic_creation=False,
                                          include_topic_authorized_operations=False))
    return {f"{t.name}-{int(p.partition_index)}": int(p.leader_epoch)
            for t in answer.topics for p in t.partitions}


def snapshot(node: MeshNode) -> Snapshot:
    terms, leaders = asyncio.run(_raft_of(node))
    data = Path(node.data_dir)
    return Snapshot(cpu_seconds(node.pid) or 0.0, rss_bytes(node.pid) or 0, terms, leaders,
                    _epochs_of(node), _bytes_under(data, raft=False),
                    _bytes_under(data, raft=True))


def _log_lines(node: MeshNode) -> list[str]:
    try:
        return node.log_path.read_text(errors="replace").splitlines()
    except OSError:
        return []


def _until(check: Any, timeout_s: float, what: str) -> None:
    deadline = time.perf_counter() + timeout_s
    while time.perf_counter() < deadline:
        try:
            if check():
                return
        except Exception:
            pass
        time.sleep(0.1)
    raise TimeoutError(f"not within {timeout_s} s: {what}")


# ----------------------------------------------------------------------------- the cluster


def make_nodes(root: str, count: int) -> list[MeshNode]:
    ports = [free_udp_port() for _ in range(count)]
    voters = ",".join(f"{i + 1}@127.0.0.1:{p}" for i, p in enumerate(ports))
    return [MeshNode(f"n{i + 1}", i + 1, ports[i], None, root, {
        "process.roles": "broker,controller", "controller.quorum.voters": voters})
        for i in range(count)]


def _brokers_seen(node: MeshNode) -> int:
    from kio.schema.describe_cluster.v0.request import DescribeClusterRequest

    from eddy.client.raw import RawClient

    with RawClient("127.0.0.1", node.port, 5.0) as raw:
        answer = raw.call(DescribeClusterRequest(include_cluster_authorized_operations=False))
    return len(answer.brokers) if answer.error_code == 0 else 0


def workload(nodes: list[MeshNode]) -> dict[str, Any]:
    """A little of everything, then every client closed: what an idle cluster was doing
    before it went idle."""
    from confluent_kafka import Consumer, Producer, TopicPartition
    from confluent_kafka.admin import AdminClient, NewTopic

    bootstrap = ",".join(n.bootstrap for n in nodes)
    rf = min(3, len(nodes))
    admin = AdminClient({"bootstrap.servers": bootstrap})
    fs = admin.create_topics([NewTopic(TOPIC, num_partitions=3, replication_factor=rf,
                                       config={"min.insync.replicas": str(min(2, rf))})],
                             operation_timeout=30, request_timeout=30)
    fs[TOPIC].result(60)
    out: dict[str, Any] = {}
    producer = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True,
                         "acks": "all", "linger.ms": 5})
    for i in range(1000):
        producer.produce(TOPIC, f"r{i}".encode(), key=str(i % 7).encode())
    out["idempotent_left"] = producer.flush(60)
    txn = Producer({"bootstrap.servers": bootstrap, "transactional.id": "idle-bench-txn"})
    txn.init_transactions(60)
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "idle-bench",
                         "auto.offset.reset": "earliest", "enable.auto.commit": False,
                         "isolation.level": "read_committed"})
    consumer.subscribe([TOPIC])

    def consume(upto: int, seen: int) -> int:
        deadline = time.perf_counter() + 60
        while seen < upto and time.perf_counter() < deadline:
            msg = consumer.poll(0.5)
            if msg is not None and msg.error() is None:
                seen += 1
        return seen

    seen = consume(1000, 0)
    # a transaction with offsets (consume-transform-produce) ...
    txn.begin_transaction()
    txn.produce(TOPIC, b"with-offsets", partition=0)
    txn.send_offsets_to_transaction([TopicPartition(TOPIC, 0, 1)],
                                    consumer.consumer_group_metadata(), 60)
    txn.commit_transaction(60)
    # ... then three commits and an abort without offsets: the id's last transaction has
    # none (its completion alone says it is done)
    for k in range(4):
        txn.begin_transaction()
        for i in range(10):
            txn.produce(TOPIC, f"t{k}-{i}".encode(), partition=i % 3)
        if k == 1:
            txn.abort_transaction(60)
        else:
            txn.commit_transaction(60)
    out["consumed"] = consume(1031, seen)
    consumer.commit(asynchronous=False)
    consumer.close()
    txn.flush(10)
    del txn, producer, admin
    return out


def _profilers(nodes: list[MeshNode], profile_dir: Path | None, seconds: float
               ) -> list[subprocess.Popen[bytes]]:
    """py-spy on every node over the idle period (when asked and installed)."""
    if profile_dir is None:
        return []
    exe = shutil.which("py-spy") or str(Path(sys.executable).parent / "py-spy")
    if not Path(exe).exists():
        print("py-spy not found: no profile", file=sys.stderr)
        return []
    profile_dir.mkdir(parents=True, exist_ok=True)
    return [subprocess.Popen(
        [exe, "record", "--pid", str(n.pid), "-d", str(max(1, round(seconds))), "-f", "raw",
         "-r", "100", "-o", str(profile_dir / f"idle-{len(nodes)}-{n.name}.txt")],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL) for n in nodes]


async def _move_offsets_leader(nodes: list[MeshNode]) -> bool:
    """Hand the offsets group's leadership (the group and transaction coordinators) to
    another node, as a leader change under churn would move it."""
    from eddy.mesh.client import control_call
    from eddy.mesh.control import RaftChangeRequest, RaftChangeResponse

    _, leaders = await _raft_of(nodes[0])
    leader = leaders.get("offsets", 0)
    by_id = {n.node_id: n for n in nodes}
    if leader not in by_id:
        return False
    target = next(i for i in sorted(by_id) if i != leader)
    answer = await control_call(by_id[leader].mesh_addr,
                                RaftChangeRequest("offsets", "transfer-leader", target), 10.0)
    return isinstance(answer, RaftChangeResponse) and answer.error is None


def _idle(nodes: list[MeshNode], seconds: float, moves: int) -> int:
    """Sleep ``seconds``; with ``moves``, move the offsets group's leader that many times,
    evenly spread. Returns the moves made."""
    made = 0
    for _ in range(moves):
        time.sleep(seconds / (moves + 1))
        made += asyncio.run(_move_offsets_leader(nodes))
    time.sleep(seconds / (moves + 1) if moves else seconds)
    return made


def measure(nodes: list[MeshNode], minutes: float, settle_s: float, load: bool,
            profile_dir: Path | None = None, moves: int = 0) -> dict[str, Any]:
    res: dict[str, Any] = {"nodes": len(nodes)}
    start_all(nodes)
    _until(lambda: all(_brokers_seen(n) == len(nodes) for n in nodes), 60,
           f"{len(nodes)} brokers registered and seen by every node")
    if load:
        res["workload"] = workload(nodes)
    time.sleep(settle_s)
    before = {n.name: snapshot(n) for n in nodes}
    lines_before = {n.name: len(_log_lines(n)) for n in nodes}
    profilers = _profilers(nodes, profile_dir, minutes * 60)
    res["offsets_leader_moves"] = _idle(nodes, minutes * 60, moves if len(nodes) > 1 else 0)
    for spy in profilers:
        spy.wait(60)
    after = {n.name: snapshot(n) for n in nodes}
    per_node = []
    for n in nodes:
        b, a = before[n.name], after[n.name]
        wall = a.at - b.at
        churn_lines = _log_lines(n)[lines_before[n.name]:]
        per_node.append({
            "node": n.name,
            "cpu_pct": 100 * (a.cpu_s - b.cpu_s) / wall,
            "rss_mib": a.rss / (1 << 20),
            "raft_elections": sum(a.terms.get(g, 0) - t for g, t in b.terms.items()),
            "raft_leaders": {g: (b.leaders.get(g), a.leaders.get(g)) for g in a.leaders},
            "partition_elections": sum(a.epochs.get(p, e) - e for p, e in b.epochs.items()),
            "segment_bytes": a.segment_bytes - b.segment_bytes,
            "raft_bytes": a.raft_bytes - b.raft_bytes,
            "log_lines": len(churn_lines),
            "churn": {k: sum(1 for ln in churn_lines if rx.search(ln))
                      for k, rx in CHURN.items()},
        })
    res["idle_s"] = minutes * 60
    res["per_node"] = per_node
    res["raft_elections"] = max(
        (sum(after[n.name].terms.get(g, 0) - t for g, t in before[n.name].terms.items())
         for n in nodes), default=0)
    res["partition_elections"] = max((p["partition_elections"] for p in per_node), default=0)
    res["appended_bytes"] = sum(p["segment_bytes"] + p["raft_bytes"] for p in per_node)
    stops = []
    for n in sorted(nodes, key=lambda x: -x.node_id):
        code, took = n.stop(30.0)
        summary = next((ln.split("node stopped in ", 1)[1] for ln in reversed(_log_lines(n))
                        if "node stopped in " in ln), None)
        stops.append({"node": n.name, "exit_code": code, "exit_s": took, "stages": summary})
    res["sigterm"] = stops
    return res


def run(root: str, count: int, minutes: float, settle_s: float, load: bool,
        profile_dir: Path | None = None, logs_dir: Path | None = None, moves: int = 0
        ) -> dict[str, Any]:
    nodes = make_nodes(root, count)
    try:
        return measure(nodes, minutes, settle_s, load, profile_dir, moves)
    except Exception as exc:
        return {"nodes": count, "error": f"{type(exc).__name__}: {exc}",
                "logs": {n.name: n.log_tail(15) for n in nodes}}
    finally:
        for n in nodes:
            if logs_dir is not None:
                logs_dir.mkdir(parents=True, exist_ok=True)
                with contextlib.suppress(OSError):
                    shutil.copy(n.log_path, logs_dir / f"idle-{count}-{n.name}.log")
            n.cleanup()


# ----------------------------------------------------------------------------- report


def print_table(results: list[dict[str, Any]]) -> None:
    for r in results:
        if "error" in r:
            print(f"{r['nodes']} node(s): ERROR {r['error']}")
            for name, tail in r.get("logs", {}).items():
                print(f"--- {name}\n{tail}")
            continue
        moved = r.get("offsets_leader_moves", 0)
        print(f"{r['nodes']} node(s), idle for {r['idle_s']:.0f} s after a short workload"
              + (f" (offsets group leader moved {moved} times)" if moved else "")
              + f": raft elections {r['raft_elections']}, partition elections "
              f"{r['partition_elections']}, bytes appended {r['appended_bytes']}")
        head = (f"{'node':<5} {'cpu %core':>9} {'rss MiB':>8} {'elections':>9} "
                f"{'seg B':>7} {'raft B':>7} {'log lines':>9}  churn")
        print(head)
        print("-" * len(head))
        for p in r["per_node"]:
            churn = ", ".join(f"{k} {v}" for k, v in p["churn"].items() if v) or "-"
            print(f"{p['node']:<5} {p['cpu_pct']:>9.2f} {p['rss_mib']:>8.1f} "
                  f"{p['raft_elections'] + p['partition_elections']:>9} "
                  f"{p['segment_bytes']:>7} {p['raft_bytes']:>7} {p['log_lines']:>9}  {churn}")
        for s in r["sigterm"]:
            print(f"SIGTERM {s['node']}: exit {s['exit_code']} in {s['exit_s']:.2f} s"
                  + (f" (node stopped in {s['stages']})" if s["stages"] else ""))
        print()


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m bench.idle", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--minutes", type=float, default=10.0, help="idle period (10)")
    ap.add_argument("--nodes", default="1,3", help="cluster sizes to run (1,3)")
    ap.add_argument("--settle", type=float, default=15.0,
                    help="seconds between the workload's end and the idle period (15)")
    ap.add_argument("--no-load", action="store_true", help="no workload before idling")
    ap.add_argument("--json", metavar="PATH", help="also write the results (- : stdout)")
    ap.add_argument("--profile", metavar="DIR", type=Path,
                    help="py-spy every node over the idle period (raw profiles in DIR; "
                    "summarise with python -m bench.flame)")
    ap.add_argument("--logs", metavar="DIR", type=Path, help="keep the nodes' logs in DIR")
    ap.add_argument("--move-offsets-leader", type=int, default=0, metavar="K",
                    help="not idle: move the offsets group's leader K times meanwhile (what "
                    "churn does); nothing may be appended for it")
    args = ap.parse_args(argv)
    sizes = [int(x) for x in args.nodes.split(",") if x.strip()]
    root = tempfile.mkdtemp(prefix="eddy-idle-bench-")
    try:
        results = [run(root, n, args.minutes, args.settle, not args.no_load, args.profile,
                       args.logs, args.move_offsets_leader) for n in sizes]
    finally:
        shutil.rmtree(root, ignore_errors=True)
    print_table(results)
    if args.json:
        doc = json.dumps({"results": results, "minutes": args.minutes, "settle_s": args.settle,
                          "cpus": os.cpu_count()}, indent=2, default=str)
        if args.json == "-":
            print(doc)
        else:
            Path(args.json).write_text(doc)
    return 1 if any("error" in r for r in results) else 0


if __name__ == "__main__":
    sys.exit(main())
