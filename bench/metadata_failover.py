"""`python -m bench.metadata_failover [--rounds 20]`: controller failover of a real 3-node
cluster (three `eddy serve` processes, each a broker and a voter of the metadata quorum).

Each round creates a topic of 6 partitions with replication factor 3, kills the controller
with SIGKILL and polls a survivor (raw DescribeCluster and Metadata, every 10 ms) for:
- "controller back": DescribeCluster names another node (a new metadata leader elected and
  its controller active);
- "leaders moved": every partition the dead node led has a live leader, and the dead node is
  out of every ISR (it was fenced and its leaderships moved in the metadata log).
The killed node is restarted (same data dir) before the next round. Prints a table of
median, p90 and max; never asserts a timing.
"""

from __future__ import annotations

import argparse
import datetime
import statistics
import tempfile
import time
from typing import Any

from kio.schema.create_topics.v7.request import CreatableTopic, CreateTopicsRequest
from kio.schema.describe_cluster.v0.request import DescribeClusterRequest
from kio.schema.metadata.v12.request import MetadataRequest, MetadataRequestTopic

from bench.mesh_cluster import MeshNode, free_udp_port, start_all
from eddy.client.raw import RawClient

IDS = (1, 2, 3)
POLL_S = 0.01


def _ask(node: MeshNode, request: Any) -> Any:
    with RawClient("127.0.0.1", node.port, 5.0) as raw:
        return raw.call(request)


def describe(node: MeshNode) -> tuple[int, int]:
    """(controller, live brokers) as DescribeCluster answers ((-1, 0) when it does not)."""
    try:
        answer = _ask(node, DescribeClusterRequest(include_cluster_authorized_operations=False))
    except OSError:
        return -1, 0
    if answer.error_code != 0:
        return -1, 0
    return int(answer.controller_id), len(answer.brokers)


def controller(node: MeshNode) -> int:
    return describe(node)[0]


def leaders(node: MeshNode, topic: str) -> dict[int, tuple[int, tuple[int, ...]]]:
    """partition -> (leader, isr) as ``node`` answers Metadata."""
    answer = _ask(node, MetadataRequest(
        topics=(MetadataRequestTopic(topic_id=None, name=topic),),
        allow_auto_topic_creation=False, include_topic_authorized_operations=False))
    (t,) = answer.topics
    return {int(p.partition_index): (int(p.leader_id), tuple(p.isr_nodes))
            for p in t.partitions}


def _until(check: Any, timeout_s: float, what: str) -> float:
    started = time.perf_counter()
    while time.perf_counter() - started < timeout_s:
        try:
            if check():
                return time.perf_counter() - started
        except (OSError, ValueError):
            pass
        time.sleep(POLL_S)
    raise TimeoutError(f"not within {timeout_s} s: {what}")


def create_topic(node: MeshNode, name: str) -> None:
    answer = _ask(node, CreateTopicsRequest(
        topics=(CreatableTopic(name=name, num_partitions=6, replication_factor=3,
                               assignments=(), configs=()),),
        timeout=datetime.timedelta(seconds=10), validate_only=False))
    (result,) = answer.topics
    if result.error_code != 0:
        raise RuntimeError(f"CreateTopics {name}: {result.error_code} {result.error_message}")


def _created(node: MeshNode, name: str) -> bool:
    try:
        create_topic(node, name)
    except RuntimeError as exc:
        if "larger than available brokers" in str(exc):
            return False
        raise
    return True


def one_round(nodes: dict[int, MeshNode], k: int) -> tuple[float, float]:
    topic = f"failover-{k}"
    any_node = next(iter(nodes.values()))
    # the node restarted last round may be listed before the controller unfences it
    _until(lambda: _created(any_node, topic), 30, f"{topic} created")
    _until(lambda: all(len(isr) == 3 for _, isr in leaders(any_node, topic).values()), 30,
           "the new topic's ISRs full")
    dead = controller(any_node)
    survivor = next(n for i, n in nodes.items() if i != dead)
    nodes[dead].kill9()
    killed = time.perf_counter()
    _until(lambda: controller(survivor) not in (-1, dead), 30, "a new controller")
    back = time.perf_counter() - killed
    _until(lambda: all(leader not in (-1, dead) and dead not in isr
                       for leader, isr in leaders(survivor, topic).values()), 30,
           "leaders moved off the dead node")
    moved = time.perf_counter() - killed
    nodes[dead].start()
    _until(lambda: describe(survivor)[1] == 3, 30, "the restarted node unfenced")
    return back * 1000, moved * 1000


def cluster_nodes(root: str) -> dict[int, MeshNode]:
    """Three nodes, each a broker and a voter of the metadata quorum (not started)."""
    ports = {i: free_udp_port() for i in IDS}
    voters = ",".join(f"{i}@127.0.0.1:{p}" for i, p in ports.items())
    return {i: MeshNode(f"n{i}", i, ports[i], None, root, {
        "process.roles": "broker,controller", "controller.quorum.voters": voters})
        for i in IDS}


def start_cluster(nodes: dict[int, MeshNode]) -> None:
    start_all(list(nodes.values()))
    _until(lambda: all(describe(n)[0] in IDS and describe(n)[1] == 3
                       for n in nodes.values()), 60, "a controller and 3 brokers")


def _row(name: str, ms: list[float]) -> str:
    ordered = sorted(ms)
    p90 = ordered[min(len(ordered) - 1, int(0.9 * len(ordered)))]
    return (f"{name:<18} median {statistics.median(ms):7.0f} ms   p90 {p90:7.0f} ms   "
            f"max {max(ms):7.0f} ms   ({len(ms)} kills)")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m bench.metadata_failover",
                                 description=__doc__.split("\n\n")[0])
    ap.add_argument("--rounds", type=int, default=20)
    args = ap.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="eddy-failover-") as root:
        nodes = cluster_nodes(root)
        try:
            start_cluster(nodes)
            results = [one_round(nodes, k) for k in range(args.rounds)]
        finally:
            for n in nodes.values():
                n.kill9()
    print("controller failover, 3 nodes (broker + voter each), kill -9 of the controller")
    print(_row("controller back", [r[0] for r in results]))
    print(_row("leaders moved", [r[1] for r in results]))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
