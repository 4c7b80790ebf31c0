"""Controlled shutdown and ElectLeaders on three `eddy serve` processes (every one a broker
and a voter of the metadata quorum) with a replication-factor-3 topic.

SIGTERM to a broker that leads partitions: before it exits, the controller has moved each of
its leaderships to another in-sync replica (leader epoch + 1) and taken it out of every ISR.
The broker session timeout is set to 10 s, so nothing but the controlled shutdown can have
done that by the time the process is gone (a crashed broker is fenced only when its session
ends). While it is down, ElectLeaders PREFERRED for the partitions it prefers to lead answers
PREFERRED_LEADER_NOT_AVAILABLE; once it is back in their ISRs, ElectLeaders moves them back.
The last node stopping, alone in every ISR, asks no controller: it has nothing to move.
"""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
from pathlib import Path

from confluent_kafka import ElectionType, KafkaError, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic
from conftest import EddyProcess
from kio.schema.describe_cluster.v0.request import DescribeClusterRequest
from kio.schema.metadata.v12.request import MetadataRequest, MetadataRequestTopic
from mesh_cluster import free_udp_port, wait_for

from eddy.client.raw import RawClient

IDS = (1, 2, 3)
TOPIC = "handover"
#: (leader, leader epoch, replicas in assignment order, ISR sorted) per partition
View = dict[int, tuple[int, int, tuple[int, ...], tuple[int, ...]]]


def nodes(tmp: Path) -> dict[int, EddyProcess]:
    ports = {i: free_udp_port() for i in IDS}
    voters = ",".join(f"{i}@127.0.0.1:{p}" for i, p in ports.items())
    return {i: EddyProcess(tmp / f"n{i}", [
        "--node-id", str(i), "--set", "process.roles=broker,controller",
        "--set", f"controller.quorum.voters={voters}",
        "--set", "broker.session.timeout.ms=10000",
        # ElectLeaders is what moves leaders back here, not the automatic rebalance
        "--set", "auto.leader.rebalance.enable=false",
        "--set", "mesh.ping.interval.ms=200"]) for i in IDS}


def view(node: EddyProcess) -> View:
    try:
        with RawClient("127.0.0.1", node.port, 5.0) as raw:
            answer = raw.call(MetadataRequest(
                topics=(MetadataRequestTopic(topic_id=None, name=TOPIC),),
                allow_auto_topic_creation=False, include_topic_authorized_operations=False))
    except OSError:
        return {}
    (t,) = answer.topics
    if t.error_code != 0:
        return {}
    return {int(p.partition_index): (int(p.leader_id), int(p.leader_epoch),
                                     tuple(int(r) for r in p.replica_nodes),
                                     tuple(sorted(int(i) for i in p.isr_nodes)))
            for p in t.partitions}


def controller_of(node: EddyProcess) -> int:
    try:
        with RawClient("127.0.0.1", node.port) as raw:
            answer = raw.call(DescribeClusterRequest(
                include_cluster_authorized_operations=False))
    except OSError:
        return -1
    return int(answer.controller_id) if answer.error_code == 0 else -1


def elect(admin: AdminClient, election: ElectionType,
          partitions: list[int] | None) -> dict[int, int]:
    asked = None if partitions is None else [TopicPartition(TOPIC, p) for p in partitions]
    result = admin.elect_leaders(election, asked).result(30)
    return {tp.partition: 0 if err is None else err.code() for tp, err in result.items()
            if tp.topic == TOPIC}


def test_sigterm_moves_leadership_first_and_elect_leaders_moves_it_back(
        tmp_path: Path) -> None:
    cluster = nodes(tmp_path)
    admins: list[AdminClient] = []
    try:
        for n in cluster.values():
            n.start()
        wait_for(lambda: all(controller_of(n) in IDS for n in cluster.values()), 30,
                 "a controller every node names")
        first = cluster[1]
        admin = AdminClient({"bootstrap.servers": first.bootstrap})
        admins.append(admin)
        wait_for(lambda: len(admin.list_topics(timeout=10).brokers) == 3, 30, "3 brokers")
        admin.create_topics([NewTopic(TOPIC, 6, 3)], request_timeout=15)[TOPIC].result(20)
        wait_for(lambda: all(len(view(n)) == 6 and all(
            isr == IDS for _, _, _, isr in view(n).values()) for n in cluster.values()),
            20, "the topic with full ISRs on every node")
        before = view(first)
        assert all(leader == replicas[0] for leader, _, replicas, _ in before.values())

        # SIGTERM a broker that leads partitions and is not the controller
        controller = controller_of(first)
        victim = next(i for i in IDS if i != controller)
        led = {p for p, (leader, _, _, _) in before.items() if leader == victim}
        assert led
        survivor = cluster[controller]
        proc = cluster[victim].proc
        assert proc is not None
        signalled = time.monotonic()
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(15) == 0
        took = time.monotonic() - signalled
        cluster[victim].proc = None
        after = view(survivor)  # at once: a fence could come only 10 s later
        for p, (leader, epoch, _, isr) in before.items():
            new_leader, new_epoch, _, new_isr = after[p]
            assert victim not in new_isr, (p, after[p])
            assert new_isr == tuple(n for n in isr if n != victim)
            if p in led:
                assert new_leader in new_isr and new_epoch == epoch + 1, (p, after[p])
            else:
                assert (new_leader, new_epoch) == (leader, epoch), (p, after[p])
        assert took < 8, f"the stop took {took:.1f} s"
        log = cluster[victim].logs()
        assert "controlled shutdown done" in log, log[-3000:]

        # while it is down, its partitions' preferred leader is not available
        survivor_admin = AdminClient({"bootstrap.servers": survivor.bootstrap})
        admins.append(survivor_admin)
        preferred_victim = sorted(p for p, (_, _, r, _) in before.items() if r[0] == victim)
        assert elect(survivor_admin, ElectionType.PREFERRED, preferred_victim) == {
            p: KafkaError.PREFERRED_LEADER_NOT_AVAILABLE for p in preferred_victim}
        assert elect(survivor_admin, ElectionType.UNCLEAN, [0]) == {
            0: KafkaError.ELECTION_NOT_NEEDED}  # it has a leader

        # back: once it is in the ISRs again, ElectLeaders (every partition) moves them back
        cluster[victim].start()
        wait_for(lambda: all(isr == IDS for _, _, _, isr in view(survivor).values()), 60,
                 "the restarted broker back in every ISR")
        moved = view(survivor)
        assert elect(survivor_admin, ElectionType.PREFERRED, None) == {
            p: 0 for p in preferred_victim}
        back = view(survivor)
        for p, (leader, epoch, replicas, _) in back.items():
            assert leader == replicas[0] == before[p][0]
            assert epoch == moved[p][1] + (p in preferred_victim)
        assert elect(survivor_admin, ElectionType.PREFERRED, None) == {}
        assert elect(survivor_admin, ElectionType.PREFERRED, [0]) == {
            0: KafkaError.ELECTION_NOT_NEEDED}
        cli = subprocess.run([sys.executable, "-m", "eddy", "cluster", "elect-leaders",
                              "-b", cluster[victim].bootstrap, "--topic", TOPIC,
                              "--output", "json"], capture_output=True, text=True, timeout=60)
        assert cli.returncode == 0, cli.stderr
        assert {row["result"] for row in json.loads(cli.stdout)} == {"not needed"}

        # SIGTERM the controller: it hands the metadata group to another voter first, which
        # takes its controlled shutdown
        controller = controller_of(survivor)
        assert controller in IDS
        stopping = cluster[controller]
        others = [n for i, n in cluster.items() if i != controller]
        before = view(others[0])
        led = {p for p, (leader, _, _, _) in before.items() if leader == controller}
        assert led
        proc = stopping.proc
        assert proc is not None
        signalled = time.monotonic()
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(15) == 0
        stopping.proc = None
        assert time.monotonic() - signalled < 8
        log = stopping.logs()
        assert "raft group metadata: handing leadership" in log, log[-3000:]
        assert "controlled shutdown done" in log.split("raft group metadata: handing")[-1]
        wait_for(lambda: all(controller_of(n) in IDS and controller_of(n) != controller
                             for n in others), 5, "a new controller")
        after = view(others[0])
        for p, (_, epoch, _, _) in before.items():
            assert controller not in after[p][3], (p, after[p])
            if p in led:
                assert after[p][0] != controller and after[p][1] == epoch + 1

        # the last two go: the last one leads everything alone, in no other broker's ISR,
        # so its controlled shutdown has nothing to ask (the quorum left with the others)
        for last, stopping in enumerate(others, 1 - len(others)):
            proc = stopping.proc
            assert proc is not None
            proc.send_signal(signal.SIGTERM)
            assert proc.wait(15) == 0
            stopping.proc = None
            if last == 0:
                log = stopping.logs()
                assert "controlled shutdown: no partition to move" in log, log[-3000:]
                assert "controlled shutdown refused" not in log, log[-3000:]
    finally:
        for n in cluster.values():
            n.kill()
