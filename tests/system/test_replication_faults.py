"""Replication under faults (issue 14), checked like Jepsen's queue checker.

Three nodes (each a broker and a metadata voter, on 127.0.B.2-4), a topic of 3 partitions
with replication factor 3 and min.insync.replicas=2. An idempotent acks=all producer writes
keyed records with unique values while the leader of a partition is hit, a bounded number of
times: SIGKILL then restart; SIGSTOP for a few seconds then SIGCONT; a network partition
isolating it from the other nodes (iptables; test clients still reach it); the link between
it and one follower cut (the follower leaves the ISR and rejoins). Then the faults heal,
two read_committed consumers (bootstrapped through different nodes) read every partition
from offset 0, and the checker (replication_check.check) finds no lost acknowledged write,
no duplicate, no offset with two values, no offset going backwards and nothing never
written. Finally every replica of every partition holds the same bytes up to the high
watermark.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path

from replication_check import History, check
from replication_cluster import (
    IDS,
    Cluster,
    NetFaults,
    back_to_three,
    converged,
    describe_all,
    net_faults,
    pause,
    wait_for,
)
from replication_workload import Writer, read_all, watermarks

TOPIC = "faults"
PARTITIONS = 3
RECORDS = 6000  # at most; the writer stops once the faults are over
RATE = 300.0  # records per second
LAG_MS = 3000  # replica.lag.time.max.ms of the test that cuts a follower off

Fault = Callable[[Cluster, int], None]


def kill_and_restart(cluster: Cluster, leader: int) -> None:
    node = cluster.nodes[leader]
    node.kill()
    others = [n for i, n in cluster.nodes.items() if i != leader]
    wait_for(lambda: all(cluster.leader(TOPIC, p, others[0]) not in (-1, leader)
                         for p in range(PARTITIONS)), 30, f"node {leader}'s partitions moved",
             detail=lambda: describe_all(cluster, TOPIC))
    time.sleep(1.0)  # writes go to the new leader meanwhile
    node.start(timeout=30)
    back_to_three(cluster, TOPIC)


def pause_and_resume(cluster: Cluster, leader: int) -> None:
    pause(cluster.nodes[leader], 5.0)
    back_to_three(cluster, TOPIC)


def isolate_with(faults: NetFaults) -> Fault:
    def isolate(cluster: Cluster, leader: int) -> None:
        faults.isolate(leader)
        try:
            time.sleep(6.0)
        finally:
            faults.heal()
        back_to_three(cluster, TOPIC)
    return isolate


def cut_follower_with(faults: NetFaults, shrunk: list[str]) -> Fault:
    """Cut the link between the leader and a follower that is not the controller (both
    still reach the controller and the third node); appends to `shrunk` what was seen each
    round: "shrunk" when the follower was out of an ISR of the leader's while cut off."""
    def cut(cluster: Cluster, leader: int) -> None:
        controller = cluster.controller()
        follower = next(i for i in IDS if i not in (leader, controller))
        faults.cut(leader, follower)
        try:
            deadline = time.monotonic() + LAG_MS / 1000 + 6.0
            # the leader's view: when the leader is the controller too, the cut-off follower
            # hears no metadata and keeps answering with the ISR it last knew
            view = cluster.describe(TOPIC, cluster.nodes[leader])
            while time.monotonic() < deadline:
                view = cluster.describe(TOPIC, cluster.nodes[leader])
                if any(lead == leader and follower not in isr for lead, isr in view.values()):
                    shrunk.append("shrunk")
                    time.sleep(2.0)  # writes go on with an ISR of two
                    break
                time.sleep(0.2)
            else:
                shrunk.append(f"node {follower} cut off from leader {leader} (controller "
                              f"{controller}, now {cluster.controller()}) still in the ISR: "
                              f"{view}")
        finally:
            faults.heal()
        back_to_three(cluster, TOPIC)
    return cut


def run_faults(cluster: Cluster, fault: Fault, rounds: int) -> list[str]:
    """Start the cluster, write while `fault` hits a partition leader `rounds` times, heal,
    read everything back and check it; returns the problems found."""
    cluster.start()
    cluster.create_topic(TOPIC, PARTITIONS, {"min.insync.replicas": "2"})
    writer = Writer(cluster.bootstrap, TOPIC, RECORDS, RATE).start()
    problems: list[str] = []
    try:
        time.sleep(1.0)
        for k in range(rounds):
            leader = cluster.leader(TOPIC, k % PARTITIONS)
            assert leader in IDS, describe_all(cluster, TOPIC)
            try:
                fault(cluster, leader)
            except AssertionError as exc:  # the cluster did not recover: check what we have
                problems.append(f"round {k} (node {leader}): {exc}")
                break
            time.sleep(1.0)
    finally:
        writer.stop()
        writer.join(90)
    try:
        wait_for(lambda: cluster.settled(TOPIC), 30, "one leader per partition, full ISRs")
    except AssertionError as exc:
        problems.append(f"{exc}: {describe_all(cluster, TOPIC)}")
    ends = watermarks(cluster.bootstrap, TOPIC, PARTITIONS)
    reads = [read_all(n.bootstrap, TOPIC, ends) for n in (cluster.nodes[1], cluster.nodes[3])]
    result = check(History(acked=writer.acked, unacked=writer.unacked, reads=reads))
    print(f"sent {writer.sent}, producer errors {writer.errors}, high watermarks {ends}")
    print(result.summary())
    if not result.acked:
        problems.append("no write was acknowledged")
    if not result.ok:
        problems.append(result.summary())
    problems += converged(cluster, TOPIC, ends)
    return problems


def test_leader_killed_and_restarted(tmp_path: Path) -> None:
    cluster = Cluster(tmp_path)
    try:
        problems = run_faults(cluster, kill_and_restart, rounds=3)
    finally:
        cluster.stop()
    assert not problems, "\n".join(problems)


def test_leader_paused_and_resumed(tmp_path: Path) -> None:
    cluster = Cluster(tmp_path)
    try:
        problems = run_faults(cluster, pause_and_resume, rounds=3)
    finally:
        cluster.stop()
    assert not problems, "\n".join(problems)


def test_leader_isolated_by_a_network_partition(tmp_path: Path) -> None:
    cluster = Cluster(tmp_path)
    with net_faults() as faults:
        try:
            problems = run_faults(cluster, isolate_with(faults), rounds=2)
        finally:
            cluster.stop()
    assert not problems, "\n".join(problems)


def test_follower_cut_off_from_the_leader_leaves_the_isr_and_rejoins(tmp_path: Path) -> None:
    """A partial partition: the leader and one follower cannot talk, both reach the rest.
    The follower leaves the ISR after replica.lag.time.max.ms (acks=all goes on with two
    in-sync replicas, min.insync.replicas=2) and rejoins once caught up after the heal."""
    cluster = Cluster(tmp_path, {"replica.lag.time.max.ms": str(LAG_MS)})
    shrunk: list[str] = []
    with net_faults() as faults:
        try:
            problems = run_faults(cluster, cut_follower_with(faults, shrunk), rounds=2)
        finally:
            cluster.stop()
    if shrunk.count("shrunk") < 2:
        problems.append(f"the cut-off follower left the ISR (within replica.lag.time.max.ms "
                        f"+ 6 s) in {shrunk.count('shrunk')} of 2 rounds: {shrunk}")
    assert not problems, "\n".join(problems)
