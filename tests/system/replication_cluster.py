"""A 3-node cluster for the replication fault tests: every node a broker and a voter, each on
its own loopback address (127.0.B.2, .3, .4) and in its own Unix group, so iptables can cut
the links between nodes while test clients (on 127.0.0.1, group root) still reach every node.

Network partitions (`NetFaults`): the node processes run with gid `GID_BASE + id`; an OUTPUT
rule sets the connection mark of every connection a node opens to `MARK_BASE + id`
(conntrack), so the INPUT rules can drop a link whatever source address the kernel picked
for an unbound socket (127.0.0.1 for every loopback destination). Packets are dropped in
INPUT, never OUTPUT: a DROP in OUTPUT fails the sender's syscall with EPERM at once, not
like a lost link. CI installs iptables with `apt-get install -y iptables`.

B, the block, is the xdist worker's number (0 outside xdist): the addresses, Unix groups and
marks of a worker's clusters are its own, so clusters of tests running side by side (and
their iptables rules) never touch each other.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager, suppress
from pathlib import Path
from typing import Any

from confluent_kafka import KafkaException
from confluent_kafka.admin import AdminClient, NewTopic  # type: ignore[attr-defined]
from conftest import EddyProcess, free_port
from kio.schema.describe_cluster.v0.request import DescribeClusterRequest
from kio.schema.metadata.v12.request import MetadataRequest, MetadataRequestTopic
from replication_check import compare_replicas

from eddy.client.raw import RawClient

IDS = (1, 2, 3)


def _block() -> int:
    worker = os.environ.get("PYTEST_XDIST_WORKER", "gw0")[2:]
    return int(worker) % 250 if worker.isdigit() else 0


BLOCK = _block()
GID_BASE = 47000 + 10 * BLOCK
MARK_BASE = 10 * BLOCK


def address(node_id: int) -> str:
    return f"127.0.{BLOCK}.{node_id + 1}"


def _free_port(host: str, kind: socket.SocketKind) -> int:
    return free_port(host, kind)


class Node(EddyProcess):
    """An `eddy serve` on its own loopback address with a fixed Kafka port (kept over
    restarts) and its own group id."""

    def __init__(self, node_id: int, data_dir: Path, voters: str, sets: dict[str, str]) -> None:
        self.node_id = node_id
        self.host = address(node_id)
        gid = GID_BASE + node_id
        args = ["--node-id", str(node_id), "--listen",
                f"{self.host}:{_free_port(self.host, socket.SOCK_STREAM)}"]
        for k, v in {"process.roles": "broker,controller", "controller.quorum.voters": voters,
                     "mesh.ping.interval.ms": "200", **sets}.items():
            args += ["--set", f"{k}={v}"]
        super().__init__(data_dir, args, preexec_fn=lambda: os.setgid(gid))

    @property
    def bootstrap(self) -> str:
        return f"{self.host}:{self.port}"

    def signal(self, sig: signal.Signals) -> None:
        assert self.proc is not None
        self.proc.send_signal(sig)


class Cluster:
    def __init__(self, root: Path, sets: dict[str, str] | None = None) -> None:
        mesh = {i: _free_port(address(i), socket.SOCK_DGRAM) for i in IDS}
        voters = ",".join(f"{i}@{address(i)}:{p}" for i, p in mesh.items())
        self.nodes = {i: Node(i, root / f"n{i}", voters, dict(sets or {})) for i in IDS}
        self._admins: dict[str, AdminClient] = {}

    @property
    def bootstrap(self) -> str:
        return ",".join(n.bootstrap for n in self.nodes.values() if n.port)

    def start(self) -> None:
        for n in self.nodes.values():
            n.start(timeout=30)
        wait_for(lambda: all(self.brokers(n) == 3 for n in self.nodes.values()), 40,
                 "every node lists 3 brokers")

    def stop(self) -> None:
        for n in self.nodes.values():
            if n.proc is not None:
                with suppress(ProcessLookupError):
                    n.proc.send_signal(signal.SIGCONT)
            n.kill()
        self._admins.clear()

    def live(self) -> list[Node]:
        return [n for n in self.nodes.values() if n.alive()]

    def admin(self, node: Node) -> AdminClient:
        if node.bootstrap not in self._admins:
            self._admins[node.bootstrap] = AdminClient({"bootstrap.servers": node.bootstrap})
        return self._admins[node.bootstrap]

    def brokers(self, node: Node) -> int:
        try:
            return len(self.admin(node).list_topics(timeout=5).brokers)
        except KafkaException:
            return 0

    def create_topic(self, topic: str, partitions: int, configs: dict[str, str]) -> None:
        node = self.nodes[1]
        futures = self.admin(node).create_topics(
            [NewTopic(topic, partitions, 3, config=configs)], request_timeout=20)
        futures[topic].result(30)
        wait_for(lambda: self.settled(topic, partitions), 30, f"{topic}: every ISR full",
                 detail=lambda: describe_all(self, topic))

    def describe(self, topic: str, via: Node | None = None
                 ) -> dict[int, tuple[int, list[int]]]:
        """partition -> (leader, sorted ISR), as ``via`` (default: the first live node that
        answers) answers a Metadata request of its own; {} when none does."""
        for node in [via] if via is not None else self.live():
            try:
                with RawClient(node.host, node.port, 5.0) as raw:
                    answer = raw.call(MetadataRequest(
                        topics=(MetadataRequestTopic(topic_id=None, name=topic),),
                        allow_auto_topic_creation=False,
                        include_topic_authorized_operations=False))
            except OSError:
                continue
            (t,) = answer.topics
            if t.error_code != 0:
                continue
            return {int(p.partition_index): (int(p.leader_id), sorted(int(i) for i in p.isr_nodes))
                    for p in t.partitions}
        return {}

    def controller(self) -> int:
        """The controller DescribeCluster names through the first live node (-1: none)."""
        for node in self.live():
            try:
                with RawClient(node.host, node.port, 5.0) as raw:
                    answer = raw.call(DescribeClusterRequest(
                        include_cluster_authorized_operations=False))
            except OSError:
                continue
            return int(answer.controller_id) if answer.error_code == 0 else -1
        return -1

    def leader(self, topic: str, partition: int, via: Node | None = None) -> int:
        return self.describe(topic, via).get(partition, (-1, []))[0]

    def settled(self, topic: str, partitions: int | None = None) -> bool:
        """Every live node names the same live leader for every partition (of `partitions`,
        when given) and full ISRs."""
        views = [self.describe(topic, n) for n in self.live()]
        return (bool(views) and bool(views[0]) and all(v == views[0] for v in views)
                and (partitions is None or len(views[0]) == partitions)
                and all(leader in IDS and len(isr) == 3 for leader, isr in views[0].values()))


def wait_for(check: Callable[[], bool], timeout: float, what: str,
             interval: float = 0.2, detail: Callable[[], object] | None = None) -> float:
    """Poll `check` until it holds; returns the seconds it took. The AssertionError raised
    after `timeout` carries `detail()` (the state that did not converge)."""
    started = time.monotonic()
    while time.monotonic() - started < timeout:
        if check():
            return time.monotonic() - started
        time.sleep(interval)
    raise AssertionError(f"not within {timeout} s: {what}"
                         + (f" ({detail()})" if detail is not None else ""))


# ------------------------------------------------------------------------ network faults


def _iptables(*args: str, check: bool = True) -> None:
    out = subprocess.run(["iptables", "-w", *args], capture_output=True, text=True,
                         timeout=20)
    if check and out.returncode != 0:
        raise RuntimeError(f"iptables {' '.join(args)}: {out.stderr.strip()}")


class NetFaults:
    """iptables chains of one test run: marks (OUTPUT) and drops (INPUT)."""

    def __init__(self) -> None:
        tag = os.getpid() % 100000
        self.mark, self.drop = f"EDDY_M{tag}", f"EDDY_D{tag}"

    def install(self) -> None:
        for chain, hook in ((self.mark, "OUTPUT"), (self.drop, "INPUT")):
            _iptables("-N", chain)
            _iptables("-I", hook, "-j", chain)
        for i in IDS:
            _iptables("-A", self.mark, "-m", "conntrack", "--ctstate", "NEW", "-m", "owner",
                      "--gid-owner", str(GID_BASE + i), "-j", "CONNMARK", "--set-mark",
                      str(MARK_BASE + i))

    def remove(self) -> None:
        for chain, hook in ((self.mark, "OUTPUT"), (self.drop, "INPUT")):
            _iptables("-D", hook, "-j", chain, check=False)
            _iptables("-F", chain, check=False)
            _iptables("-X", chain, check=False)

    def cut(self, a: int, b: int) -> None:
        """Drop every packet between nodes a and b (both ways), test clients unaffected."""
        for x, y in ((a, b), (b, a)):
            _iptables("-A", self.drop, "-s", address(x), "-d", address(y), "-j", "DROP")
            # connections x opened (from whatever source address) to y's listeners
            for direction in ("-d", "-s"):
                _iptables("-A", self.drop, "-m", "connmark", "--mark", str(MARK_BASE + x),
                          direction, address(y), "-j", "DROP")

    def isolate(self, node: int) -> None:
        for other in IDS:
            if other != node:
                self.cut(node, other)

    def heal(self) -> None:
        _iptables("-F", self.drop)


@contextmanager
def net_faults() -> Iterator[NetFaults]:
    faults = NetFaults()
    try:
        faults.install()
        yield faults
    finally:
        faults.remove()


def pause(node: Node, seconds: float) -> None:
    node.signal(signal.SIGSTOP)
    try:
        time.sleep(seconds)
    finally:
        node.signal(signal.SIGCONT)


def describe_all(cluster: Cluster, topic: str) -> dict[str, Any]:
    """Every live node's view of ``topic`` (for failure messages)."""
    return {n.bootstrap: cluster.describe(topic, n) for n in cluster.live()}


def back_to_three(cluster: Cluster, topic: str, partitions: int | None = None) -> None:
    """Every node is listed by every other again, and back in every ISR of `topic` (caught
    up): the next fault may then take any one node down without making a partition
    unavailable."""
    wait_for(lambda: all(cluster.brokers(n) == 3 for n in cluster.live()), 30,
             "every node lists 3 brokers again",
             detail=lambda: {n.node_id: cluster.brokers(n) for n in cluster.live()})
    wait_for(lambda: cluster.settled(topic, partitions), 30, "every ISR full again",
             detail=lambda: describe_all(cluster, topic))


def converged(cluster: Cluster, topic: str, ends: dict[int, int],
              timeout: float = 20.0) -> list[str]:
    """Every replica's bytes of `topic` equal up to the high watermark (polled: followers
    catch up); the differences left after `timeout`."""
    dirs = {i: n.data_dir for i, n in cluster.nodes.items()}
    deadline = time.monotonic() + timeout
    while True:
        diffs = [d for p, end in ends.items() for d in compare_replicas(dirs, topic, p, end)]
        if not diffs or time.monotonic() > deadline:
            return diffs
        time.sleep(0.5)
