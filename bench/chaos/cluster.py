"""A 3-node cluster of `eddy serve` processes for the fault harness: every node a broker and
a metadata voter, each on its own loopback address (127.0.B.2, .3, .4) with fixed ports
(kept over restarts) and in its own Unix group, so iptables (bench.chaos.net) can cut the
links between nodes while clients (on 127.0.0.1) still reach every node.

B, the block, is the xdist worker's number under pytest (as tests/system/replication_cluster
takes it: a worker's clusters and iptables rules are its own), else $EDDY_CHAOS_BLOCK, else
250 (the bench: never a block a test run uses).
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import threading
import time
from collections import Counter
from collections.abc import Callable
from contextlib import suppress
from pathlib import Path

from kio.schema.describe_cluster.v0.request import DescribeClusterRequest
from kio.schema.metadata.v12.request import MetadataRequest, MetadataRequestTopic

from eddy.client.raw import RawClient

IDS = (1, 2, 3)
READY = "EDDY_READY kafka="
#: log lines counted per node when a round is reported (what churn looks like)
WATCHED = ("is the controller", "fencing broker", "not registered yet", "slow write",
           "Traceback", "Task exception was never retrieved")

#: partition -> (leader, sorted ISR)
View = dict[int, tuple[int, list[int]]]


def default_block() -> int:
    worker = os.environ.get("PYTEST_XDIST_WORKER", "")[2:]
    if worker.isdigit():
        return int(worker) % 250
    return int(os.environ.get("EDDY_CHAOS_BLOCK", "250"))


def address(block: int, node_id: int) -> str:
    return f"127.0.{block}.{node_id + 1}"


def gid_of(block: int, node_id: int) -> int:
    """The Unix group a node runs in (iptables matches its connections by it)."""
    return 47000 + 10 * block + node_id


def mark_of(block: int, node_id: int) -> int:
    """The connection mark of the connections a node opens."""
    return 10 * block + node_id


def _port(host: str, kind: socket.SocketKind, taken: set[int]) -> int:
    """A port below the ephemeral range that nobody holds on `host` (the node's own
    address: only wildcard listeners could take it meanwhile)."""
    for port in range(7100, 7900):
        if port in taken:
            continue
        with socket.socket(socket.AF_INET, kind) as s:
            try:
                s.bind((host, port))
            except OSError:
                continue
        taken.add(port)
        return port
    raise RuntimeError(f"no free port on {host}")


class Node:
    """One `eddy serve`; restartable on the same address, ports and data dir."""

    def __init__(self, node_id: int, root: Path, host: str, port: int, gid: int,
                 sets: dict[str, str]) -> None:
        self.node_id, self.host, self.port, self.gid = node_id, host, port, gid
        self.data_dir = root / f"n{node_id}"
        self.log_path = root / f"n{node_id}.log"
        self.sets = sets
        self.proc: subprocess.Popen[str] | None = None
        self.started_at = 0.0  # monotonic time of the last ready line

    @property
    def bootstrap(self) -> str:
        return f"{self.host}:{self.port}"

    @property
    def pid(self) -> int:
        assert self.proc is not None
        return self.proc.pid

    def start(self, timeout: float = 60.0) -> None:
        assert not self.alive(), f"node {self.node_id} is running"
        cmd = [sys.executable, "-m", "eddy", "serve", "--node-id", str(self.node_id),
               "--listen", self.bootstrap, "--data-dir", str(self.data_dir)]
        for k, v in self.sets.items():
            cmd += ["--set", f"{k}={v}"]
        env = {**os.environ, "EDDY_REGISTRY_LISTENER": "", "EDDY_ADMIN_LISTENER": ""}
        gid = self.gid
        # its own group, for iptables to tell its connections apart (root only)
        setgid = (lambda: os.setgid(gid)) if os.geteuid() == 0 else None
        with open(self.log_path, "a") as log:
            self.proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=log, text=True,
                                         stdin=subprocess.DEVNULL, env=env,
                                         preexec_fn=setgid)
        ready = threading.Event()
        threading.Thread(target=self._drain, args=(self.proc, ready), daemon=True).start()
        deadline = time.monotonic() + timeout
        while not ready.wait(0.1):
            if self.proc.poll() is not None:
                raise RuntimeError(f"node {self.node_id} exited with {self.proc.returncode}:"
                                   f"\n{self.log_tail()}")
            if time.monotonic() > deadline:
                self.kill()
                raise RuntimeError(f"node {self.node_id} not ready in {timeout} s:\n"
                                   f"{self.log_tail()}")
        self.started_at = time.monotonic()

    @staticmethod
    def _drain(proc: subprocess.Popen[str], ready: threading.Event) -> None:
        assert proc.stdout is not None
        for line in proc.stdout:  # read to the end: the node never blocks on a full pipe
            if line.startswith(READY):
                ready.set()

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def signal(self, sig: signal.Signals) -> None:
        assert self.proc is not None
        with suppress(ProcessLookupError):
            self.proc.send_signal(sig)

    def kill(self) -> None:
        """SIGKILL (SIGCONT first: a paused node dies as well)."""
        if self.proc is not None:
            with suppress(ProcessLookupError):
                self.proc.send_signal(signal.SIGCONT)
                self.proc.kill()
            self.proc.wait()
            self.proc = None

    def term(self, timeout: float = 30.0) -> float:
        """SIGTERM and wait for the exit (SIGKILL after `timeout`); the seconds it took."""
        assert self.proc is not None
        started = time.monotonic()
        self.proc.send_signal(signal.SIGTERM)
        try:
            self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        self.proc = None
        return time.monotonic() - started

    def log_text(self) -> str:
        try:
            return self.log_path.read_text(errors="replace")
        except FileNotFoundError:
            return ""

    def log_tail(self, lines: int = 30) -> str:
        return "\n".join(self.log_text().splitlines()[-lines:])


class Cluster:
    def __init__(self, root: Path, sets: dict[str, str] | None = None,
                 block: int | None = None) -> None:
        self.block = default_block() if block is None else block
        taken: set[int] = set()
        hosts = {i: address(self.block, i) for i in IDS}
        mesh = {i: _port(hosts[i], socket.SOCK_DGRAM, taken) for i in IDS}
        voters = ",".join(f"{i}@{hosts[i]}:{p}" for i, p in mesh.items())
        common = {"process.roles": "broker,controller", "controller.quorum.voters": voters,
                  "mesh.ping.interval.ms": "200", **(sets or {})}
        self.nodes = {i: Node(i, root, hosts[i], _port(hosts[i], socket.SOCK_STREAM, taken),
                              gid_of(self.block, i), common) for i in IDS}

    @property
    def bootstrap(self) -> str:
        return ",".join(n.bootstrap for n in self.nodes.values())

    def start(self, timeout: float = 60.0) -> None:
        errors: list[BaseException] = []

        def run(node: Node) -> None:
            try:
                node.start(timeout)
            except BaseException as exc:  # re-raised below
                errors.append(exc)

        threads = [threading.Thread(target=run, args=(n,)) for n in self.nodes.values()]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        if errors:
            raise errors[0]
        wait_for(lambda: all(self.brokers(n) == 3 for n in self.nodes.values()), timeout,
                 "every node lists 3 brokers")

    def stop(self) -> None:
        for n in self.nodes.values():
            n.kill()

    def live(self) -> list[Node]:
        return [n for n in self.nodes.values() if n.alive()]

    def _cluster(self, node: Node) -> tuple[int, int]:
        """(controller, brokers) as DescribeCluster answers through `node` ((-1, 0): no
        answer)."""
        try:
            with RawClient(node.host, node.port, 5.0) as raw:
                answer = raw.call(DescribeClusterRequest(
                    include_cluster_authorized_operations=False))
        except OSError:
            return -1, 0
        if answer.error_code != 0:
            return -1, 0
        return int(answer.controller_id), len(answer.brokers)

    def brokers(self, node: Node) -> int:
        return self._cluster(node)[1]

    def controller(self) -> int:
        """The controller (the metadata leader) most live nodes name in DescribeCluster
        (-1: none named)."""
        named = Counter(c for n in self.live() if (c := self._cluster(n)[0]) != -1)
        return named.most_common(1)[0][0] if named else -1

    def describe(self, topic: str, via: Node | None = None) -> View:
        """partition -> (leader, sorted ISR) as `via` (default: the first live node that
        answers) answers Metadata; {} when none does."""
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

    def views(self, topic: str) -> dict[int, View]:
        """Every live node's view of `topic` (for failure messages)."""
        return {n.node_id: self.describe(topic, n) for n in self.live()}

    def leader(self, topic: str, partition: int, via: Node | None = None) -> int:
        return self.describe(topic, via).get(partition, (-1, []))[0]

    def settled(self, topic: str, partitions: int | None = None) -> bool:
        """Every node is up and names the same live leader and a full ISR for every
        partition (of `partitions`, when given)."""
        if len(self.live()) < len(IDS):
            return False
        views = [self.describe(topic, n) for n in self.live()]
        return (bool(views[0]) and all(v == views[0] for v in views)
                and (partitions is None or len(views[0]) == partitions)
                and all(lead in IDS and len(isr) == len(IDS) for lead, isr in views[0].values()))

    def wait_settled(self, topic: str, timeout: float = 60.0) -> float:
        return wait_for(lambda: self.settled(topic), timeout,
                        f"{topic}: every node up, one leader per partition, full ISRs",
                        detail=lambda: self.views(topic))

    def create_topic(self, topic: str, partitions: int, configs: dict[str, str],
                     timeout: float = 60.0) -> None:
        from confluent_kafka.admin import AdminClient, NewTopic  # type: ignore[attr-defined]

        admin = AdminClient({"bootstrap.servers": self.bootstrap})
        futures = admin.create_topics([NewTopic(topic, partitions, len(IDS), config=configs)],
                                      request_timeout=30)
        futures[topic].result(timeout)
        self.wait_settled(topic, timeout)

    def log_counts(self) -> dict[int, dict[str, int]]:
        """node -> how often each WATCHED line shows in its log."""
        return {i: {w: c for w in WATCHED if (c := n.log_text().count(w))}
                for i, n in self.nodes.items()}

    def log_lines(self, needle: str, limit: int = 5) -> list[str]:
        """The first `limit` log lines (of every node) holding `needle`."""
        found = [f"n{i}: {line}" for i, n in self.nodes.items()
                 for line in n.log_text().splitlines() if needle in line]
        return found[:limit]


def wait_for(check: Callable[[], bool], timeout: float, what: str, interval: float = 0.1,
             detail: Callable[[], object] | None = None) -> float:
    """Poll `check` until it holds; the seconds it took. The AssertionError raised after
    `timeout` carries `detail()` (the state that did not converge)."""
    started = time.monotonic()
    while time.monotonic() - started < timeout:
        if check():
            return time.monotonic() - started
        time.sleep(interval)
    raise AssertionError(f"not within {timeout} s: {what}"
                         + (f" ({detail()})" if detail is not None else ""))
