"""Leadership returns to preferred replicas by itself (auto.leader.rebalance.enable, Kafka's
default) on three `eddy serve` processes: a broker stopped with SIGTERM hands its
leaderships to the others; restarted, it is back in the ISRs and leads its preferred
partitions again with nobody asking (leader.imbalance.check.interval.seconds=2 here, set as
Kafka's property on the command line)."""

from __future__ import annotations

import signal
from pathlib import Path

from confluent_kafka.admin import AdminClient, NewTopic  # type: ignore[attr-defined]
from conftest import EddyProcess
from mesh_cluster import free_udp_port, wait_for
from test_controlled_shutdown import TOPIC, controller_of, view

IDS = (1, 2, 3)


def nodes(tmp: Path) -> dict[int, EddyProcess]:
    ports = {i: free_udp_port() for i in IDS}
    voters = ",".join(f"{i}@127.0.0.1:{p}" for i, p in ports.items())
    return {i: EddyProcess(tmp / f"n{i}", [
        "--node-id", str(i), "--set", "process.roles=broker,controller",
        "--set", f"controller.quorum.voters={voters}",
        "--set", "leader.imbalance.check.interval.seconds=2",
        "--set", "mesh.ping.interval.ms=200"]) for i in IDS}


def preferred(node: EddyProcess) -> bool:
    parts = view(node)
    return len(parts) == 6 and all(leader == replicas[0] and isr == IDS
                                   for leader, _, replicas, isr in parts.values())


def test_leaders_return_to_a_restarted_broker_by_themselves(tmp_path: Path) -> None:
    cluster = nodes(tmp_path)
    try:
        for n in cluster.values():
            n.start()
        wait_for(lambda: all(controller_of(n) in IDS for n in cluster.values()), 30,
                 "a controller every node names")
        admin = AdminClient({"bootstrap.servers": cluster[1].bootstrap})
        wait_for(lambda: len(admin.list_topics(timeout=10).brokers) == 3, 30, "3 brokers")
        admin.create_topics([NewTopic(TOPIC, 6, 3)], request_timeout=15)[TOPIC].result(20)
        wait_for(lambda: all(preferred(n) for n in cluster.values()), 30,
                 "preferred leaders and full ISRs on every node")

        controller = controller_of(cluster[1])
        victim = next(i for i in IDS if i != controller)
        survivor = cluster[controller]
        proc = cluster[victim].proc
        assert proc is not None
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(30) == 0
        cluster[victim].proc = None
        moved = view(survivor)
        assert all(leader != victim for leader, _, _, _ in moved.values())

        cluster[victim].start()
        took = wait_for(lambda: preferred(survivor), 60,
                        "the restarted broker leads its preferred partitions again")
        print(f"leaders back on broker {victim} {took:.1f} s after its restart")
        assert all(view(n) == view(survivor) for n in cluster.values())
    finally:
        for n in cluster.values():
            n.kill()
