"""`python -m bench.offsets_cluster [--seconds 5] [--committers 1,16]`: offset commits per
second through the ``offsets`` Raft group of a real 3-node cluster (three `eddy serve`
processes, each a broker and a voter; fsync on).

Each committer is a confluent-kafka consumer of its own group committing explicit offsets
synchronously in a loop (one OffsetCommit round trip, one Raft entry, committed on two of
three nodes and fsynced, per commit); reported: commits/s and the latency p50/p99 of one
commit. Never asserts a timing.
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import threading
import time

from confluent_kafka import Consumer, TopicPartition

from bench.mesh_cluster import MeshNode
from bench.metadata_failover import cluster_nodes, create_topic, start_cluster


def committer(node: MeshNode, group: str, seconds: float, out: list[float]) -> None:
    c = Consumer({"bootstrap.servers": f"127.0.0.1:{node.port}", "group.id": group,
                  "enable.auto.commit": False})
    try:
        c.commit(offsets=[TopicPartition("commits", 0, 0)], asynchronous=False)  # warm up
        deadline = time.perf_counter() + seconds
        k = 1
        while time.perf_counter() < deadline:
            started = time.perf_counter()
            c.commit(offsets=[TopicPartition("commits", k % 6, k)], asynchronous=False)
            out.append(time.perf_counter() - started)
            k += 1
    finally:
        c.close()


def phase(nodes: dict[int, MeshNode], committers: int, seconds: float) -> str:
    latencies: list[list[float]] = [[] for _ in range(committers)]
    node_list = list(nodes.values())
    threads = [threading.Thread(target=committer, args=(
        node_list[i % len(node_list)], f"bench-{committers}-{i}", seconds, latencies[i]))
        for i in range(committers)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    all_ms = sorted(x * 1000 for lat in latencies for x in lat)
    rate = len(all_ms) / seconds
    p99 = all_ms[min(len(all_ms) - 1, int(0.99 * len(all_ms)))]
    return (f"{committers:>3} committers  {rate:8.0f} commits/s   p50 "
            f"{statistics.median(all_ms):6.1f} ms   p99 {p99:6.1f} ms")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m bench.offsets_cluster",
                                 description=__doc__.split("\n\n")[0])
    ap.add_argument("--seconds", type=float, default=5.0)
    ap.add_argument("--committers", default="1,16")
    args = ap.parse_args(argv)
    rows = []
    with tempfile.TemporaryDirectory(prefix="eddy-offsets-") as root:
        nodes = cluster_nodes(root)
        try:
            start_cluster(nodes)
            create_topic(next(iter(nodes.values())), "commits")
            for n in (int(x) for x in args.committers.split(",")):
                rows.append(phase(nodes, n, args.seconds))
        finally:
            for node in nodes.values():
                node.kill9()
    print("offset commits through the offsets Raft group, 3 nodes, fsync on")
    for row in rows:
        print(row)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
