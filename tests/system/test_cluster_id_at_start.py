"""While a 3-node cluster starts, no node answers Metadata or DescribeCluster with a cluster
id other than the cluster's (the one in its metadata log): before a node has caught up it
answers none (Metadata: null, which clients take as unknown; DescribeCluster: a retriable
error). A confluent-kafka client bootstrapped with the three nodes from the first moment
logs no "reports different ClusterId" warning."""

from __future__ import annotations

import contextlib
import logging
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Producer
from kio.schema.describe_cluster.v0.request import DescribeClusterRequest
from kio.schema.metadata.v12.request import MetadataRequest
from replication_cluster import Cluster, wait_for

from eddy.client.raw import RawClient

pytestmark = pytest.mark.timeout(150)


def listen_addr(args: list[str]) -> tuple[str, int]:
    host, _, port = args[args.index("--listen") + 1].rpartition(":")
    return host, int(port)


class Records(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.lines: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.lines.append(record.getMessage())


class Prober:
    """Asks every node, over and over, for Metadata and DescribeCluster; records the
    cluster ids answered."""

    def __init__(self, addrs: list[tuple[str, int]]) -> None:
        self.addrs = addrs
        self.seen: set[tuple[str, str, str]] = set()  # (node, api, cluster id)
        self.answers = 0
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)

    def _ask(self, host: str, port: int) -> None:
        with RawClient(host, port, 5.0) as raw:
            md: Any = raw.call(MetadataRequest(
                topics=None, allow_auto_topic_creation=False,
                include_topic_authorized_operations=False))
            if md.cluster_id:
                self.seen.add((host, "metadata", md.cluster_id))
            dc: Any = raw.call(DescribeClusterRequest(include_cluster_authorized_operations=False))
            if dc.error_code == 0 or dc.cluster_id:
                self.seen.add((host, "describe_cluster", dc.cluster_id))
            self.answers += 1

    def _run(self) -> None:
        while not self.stop.is_set():
            for host, port in self.addrs:
                with contextlib.suppress(OSError):  # not listening yet
                    self._ask(host, port)
            self.stop.wait(0.05)


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[Cluster]:
    c = Cluster(tmp_path)
    yield c
    c.stop()


def test_no_node_answers_another_cluster_id_while_the_cluster_starts(cluster: Cluster
                                                                       ) -> None:
    addrs = [listen_addr(n.extra_args) for n in cluster.nodes.values()]
    prober = Prober(addrs)
    records = Records()
    log = logging.getLogger(f"rdkafka-{id(records)}")
    log.addHandler(records)
    log.setLevel(logging.DEBUG)
    log.propagate = False
    producer = Producer({"bootstrap.servers": ",".join(f"{h}:{p}" for h, p in addrs),
                         "logger": log, "topic.metadata.refresh.interval.ms": 200,
                         "reconnect.backoff.ms": 50, "reconnect.backoff.max.ms": 200,
                         "error_cb": lambda e: records.lines.append(f"error_cb: {e.str()}")})
    prober.thread.start()
    try:
        cluster.start()
        # every node has answered (Metadata and DescribeCluster) after the start too
        first = prober.answers
        wait_for(lambda: prober.answers >= first + 2 * len(addrs), 20, "more answers")
        deadline = time.monotonic() + 2  # the client's refreshes, a few times over
        while time.monotonic() < deadline:
            producer.poll(0.1)
    finally:
        prober.stop.set()
        prober.thread.join(10)
    ids = {cid for _, _, cid in prober.seen}
    assert len(ids) == 1, sorted(prober.seen)
    assert {(host, api) for host, api, _ in prober.seen} == {
        (h, api) for h, _ in addrs for api in ("metadata", "describe_cluster")}
    assert not [line for line in records.lines if "different ClusterId" in line], records.lines
