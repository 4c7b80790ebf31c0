"""`eddy topic describe -o plain` lines in kafka-topics' layout: Adding Replicas and Removing
Replicas appear only for a partition being reassigned (a real move is checked in
tests/system/test_reassignment.py); the reassignments are looked up only where the raw
client can speak to the listener, and a broker that cannot tell leaves them out."""

from __future__ import annotations

import socket
import threading
from typing import Any

from eddy.cli.common import Conn
from eddy.cli.topic import _reassigning, partition_line


def _part(**extra: Any) -> dict[str, Any]:
    p: dict[str, Any] = {"partition": 0, "leader": 2, "replicas": [2, 3, 1], "isr": [2, 1],
                         "adding": [], "removing": [], "offline": [], "low_watermark": 0,
                         "high_watermark": 42}
    p.update(extra)
    return p


def test_a_partition_line_shows_a_move_only_while_under_way() -> None:
    assert partition_line("orders", _part()) == (
        "\tTopic: orders\tPartition: 0\tLeader: 2\tReplicas: 2,3,1\tIsr: 2,1\t"
        "LowWatermark: 0\tHighWatermark: 42")
    moving = _part(adding=[3], removing=[1])
    assert partition_line("orders", moving) == (
        "\tTopic: orders\tPartition: 0\tLeader: 2\tReplicas: 2,3,1\tIsr: 2,1\t"
        "Adding Replicas: 3\tRemoving Replicas: 1\t"
        "LowWatermark: 0\tHighWatermark: 42")
    # only adding (a grown replica set): an empty Removing Replicas, as kafka-topics prints
    assert "\tAdding Replicas: 3,4\tRemoving Replicas: \t" in partition_line(
        "orders", _part(adding=[3, 4]))
    offline = _part(leader=-1, isr=[1], adding=[2], removing=[1], offline=[1])
    assert partition_line("orders", offline).endswith(
        "Isr: 1\tAdding Replicas: 2\tRemoving Replicas: 1\tOffline: 1\t"
        "LowWatermark: 0\tHighWatermark: 42")


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def test_reassignments_are_left_out_where_the_broker_cannot_tell() -> None:
    port = _closed_port()
    # nothing listening: no move shown (describe itself has already reached the cluster)
    assert _reassigning(Conn.make(f"127.0.0.1:{port}", None), "t", [0, 1]) == {}
    # a listener that hangs up at once (not Kafka): nothing shown, no error
    with socket.socket() as server:
        server.bind(("127.0.0.1", 0))
        server.listen(1)
        addr = f"127.0.0.1:{server.getsockname()[1]}"

        def hang_up() -> None:
            peer, _ = server.accept()
            peer.close()

        t = threading.Thread(target=hang_up)
        t.start()
        assert _reassigning(Conn.make(addr, None), "t", [0]) == {}
        t.join(10)
