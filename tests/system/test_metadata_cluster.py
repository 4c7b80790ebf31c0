"""Three `eddy serve` processes on loopback, every one a broker and a voter of the metadata
quorum (controller.quorum.voters). Kafka clients see one cluster through any node: a topic of
replication factor 3 created through one node is placed on all three and every node answers
Metadata alike; records produced through one node are consumed through another. The
controller is killed with SIGKILL: a new one takes over, fences it and moves its
leaderships; then every node is killed at once and restarted, and nothing committed is
lost."""

from __future__ import annotations

import concurrent.futures
import datetime
import json
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from broker_configs_raw import alter_broker_config, describe_broker_default
from confluent_kafka import (
    Consumer,
    ConsumerGroupTopicPartitions,
    KafkaError,
    KafkaException,
    Producer,
    TopicCollection,
    TopicPartition,
)
from confluent_kafka.admin import (
    AdminClient,
    AlterConfigOpType,
    ConfigEntry,
    ConfigResource,
    ConfigSource,
    NewTopic,
    ResourceType,
)
from conftest import EddyProcess
from kio.schema.describe_cluster.v0.request import DescribeClusterRequest
from kio.schema.describe_quorum.v2.request import (
    DescribeQuorumRequest,
    PartitionData,
    TopicData,
)
from kio.schema.errors import ErrorCode
from kio.schema.find_coordinator.v4.request import FindCoordinatorRequest
from kio.schema.heartbeat.v4.request import HeartbeatRequest
from kio.schema.init_producer_id.v4.request import InitProducerIdRequest
from kio.schema.metadata.v12.request import MetadataRequest
from mesh_cluster import free_udp_port, wait_for

from eddy.client.raw import RawClient

IDS = (1, 2, 3)
DYNAMIC_DEFAULT = ConfigSource.DYNAMIC_DEFAULT_BROKER_CONFIG.value


def nodes(tmp: Path) -> dict[int, EddyProcess]:
    ports = {i: free_udp_port() for i in IDS}
    voters = ",".join(f"{i}@127.0.0.1:{p}" for i, p in ports.items())
    return {i: EddyProcess(tmp / f"n{i}", [
        "--node-id", str(i), "--set", "process.roles=broker,controller",
        "--set", f"controller.quorum.voters={voters}",
        "--set", "mesh.ping.interval.ms=200"]) for i in IDS}


_ADMINS: dict[str, AdminClient] = {}


def admin(node: EddyProcess) -> AdminClient:
    """One client per node, kept: a future outlives a client that is garbage-collected."""
    if node.bootstrap not in _ADMINS:
        _ADMINS[node.bootstrap] = AdminClient({"bootstrap.servers": node.bootstrap})
    return _ADMINS[node.bootstrap]


def polled(node: EddyProcess, ask: Callable[[AdminClient], Any]) -> Any:
    """``ask`` of ``node``'s admin client while nodes die: None when librdkafka times out
    (it may have queued its request on the connection of the node just killed, retrying
    there until the timeout); the next poll then starts with a new client, whose first
    request goes to ``node``."""
    try:
        return ask(admin(node))
    except KafkaException:
        _ADMINS.pop(node.bootstrap, None)
        return None


def describe(node: EddyProcess, topic: str) -> dict[int, tuple[int, list[int], list[int]]]:
    md = admin(node).list_topics(topic, timeout=10)
    t = md.topics[topic]
    if t.error is not None:
        raise KafkaException(t.error)
    return {p.id: (p.leader, sorted(p.replicas), sorted(p.isrs))
            for p in t.partitions.values()}


def topic_ids(node: EddyProcess, names: list[str]) -> dict[str, str]:
    futures = admin(node).describe_topics(TopicCollection(names), request_timeout=10)
    return {name: str(f.result(15).topic_id) for name, f in futures.items()}


def controller_of(node: EddyProcess) -> int:
    """The controller DescribeCluster names (-1: none yet). Asked with a raw request:
    librdkafka's describe_cluster reports the controller of its Metadata instead."""
    try:
        with RawClient("127.0.0.1", node.port) as raw:
            answer = raw.call(DescribeClusterRequest(
                include_cluster_authorized_operations=False))
    except OSError:
        return -1
    return int(answer.controller_id) if answer.error_code == 0 else -1


def metadata_controller(node: EddyProcess) -> int:
    """The controller ``node``'s own Metadata answer names (asked of it alone: librdkafka's
    list_topics may ask another broker)."""
    with RawClient("127.0.0.1", node.port) as raw:
        answer = raw.call(MetadataRequest(topics=(), allow_auto_topic_creation=False,
                                          include_topic_authorized_operations=False))
    return int(answer.controller_id)


def create(node: EddyProcess, name: str, partitions: int, rf: int, timeout: float = 15) -> None:
    futures = admin(node).create_topics([NewTopic(name, partitions, rf)],
                                        request_timeout=timeout)
    futures[name].result(timeout + 5)


def set_config(node: EddyProcess, topic: str, name: str, value: str) -> None:
    resource = ConfigResource(ResourceType.TOPIC, topic, incremental_configs=[
        ConfigEntry(name, value, incremental_operation=AlterConfigOpType.SET)])
    admin(node).incremental_alter_configs([resource])[resource].result(20)


def topic_entry(node: EddyProcess, topic: str, name: str) -> Any:
    resource = ConfigResource(ResourceType.TOPIC, topic)
    return admin(node).describe_configs([resource])[resource].result(20)[name]


def topic_config(node: EddyProcess, topic: str, name: str) -> str:
    return str(topic_entry(node, topic, name).value)


def too_large(node: EddyProcess, topic: str, size: int) -> set[int]:
    """The partitions whose leader refused a record of ``size`` bytes as too large."""
    refused: set[int] = set()
    p = Producer({"bootstrap.servers": node.bootstrap, "message.max.bytes": 10_000_000,
                  "retries": 0})
    for partition in range(6):
        p.produce(topic, b"x" * size, partition=partition, on_delivery=lambda err, m: (
            refused.add(m.partition()) if err is not None
            and err.code() == KafkaError.MSG_SIZE_TOO_LARGE else None))
    p.flush(20)
    return refused


def produce(node: EddyProcess, topic: str, count: int, tag: str) -> int:
    delivered = []
    p = Producer({"bootstrap.servers": node.bootstrap, "acks": "all",
                  "enable.idempotence": True})
    for i in range(count):
        p.produce(topic, key=f"{tag}-{i}".encode(), value=f"{tag}:{i}".encode(),
                  on_delivery=lambda err, msg: delivered.append(err is None))
    p.flush(30)
    return sum(delivered)


def consume_all(node: EddyProcess, topic: str, group: str, expect: int,
                tag: bytes = b"") -> list[bytes]:
    """Consume until ``expect`` records (starting with ``tag``) came, or 60 s passed."""
    c = Consumer({"bootstrap.servers": node.bootstrap, "group.id": group,
                  "auto.offset.reset": "earliest", "enable.auto.commit": False})
    c.subscribe([topic])
    got: list[bytes] = []
    deadline = time.monotonic() + 60
    try:
        while len(got) < expect and time.monotonic() < deadline:
            m: Any = c.poll(0.5)
            if m is not None and m.error() is None and m.value().startswith(tag):
                got.append(m.value())
    finally:
        c.close()
    return got


def eddy_cli(*args: str) -> Any:
    out = subprocess.run([sys.executable, "-m", "eddy", *args, "--output", "json"],
                         capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout)


def describe_quorum(node: EddyProcess) -> Any:
    with RawClient("127.0.0.1", node.port) as raw:
        return raw.call(DescribeQuorumRequest(topics=(TopicData(
            topic_name="__cluster_metadata", partitions=(PartitionData(partition_index=0),)),)))


def coordinator_of(node: EddyProcess, group: str) -> int:
    """The group's coordinator as FindCoordinator answers (-1: none yet)."""
    with RawClient("127.0.0.1", node.port) as raw:
        answer = raw.call(FindCoordinatorRequest(key_type=0, coordinator_keys=(group,)))
    (found,) = answer.coordinators
    return int(found.node_id) if found.error_code == 0 else -1


def commit(node: EddyProcess, group: str, topic: str, offsets: dict[int, int]) -> None:
    c = Consumer({"bootstrap.servers": node.bootstrap, "group.id": group,
                  "enable.auto.commit": False})
    try:
        c.commit(offsets=[TopicPartition(topic, p, o) for p, o in offsets.items()],
                 asynchronous=False)
    finally:
        c.close()


def committed(node: EddyProcess, group: str, topic: str) -> dict[int, int]:
    """The group's committed offsets, asked through ``node`` (retried while the
    coordinator moves)."""
    request = ConsumerGroupTopicPartitions(group)
    deadline = time.monotonic() + 30
    client = AdminClient({"bootstrap.servers": node.bootstrap})  # kept until answered
    while True:
        try:
            (result,) = client.list_consumer_group_offsets([request]).values()
            parts = result.result(5).topic_partitions
            return {tp.partition: tp.offset for tp in parts if tp.topic == topic}
        except (KafkaException, concurrent.futures.TimeoutError):
            if time.monotonic() > deadline:
                raise
            time.sleep(0.2)


def producer_ids(node: EddyProcess, count: int) -> list[int]:
    with RawClient("127.0.0.1", node.port) as raw:
        answers = [raw.call(InitProducerIdRequest(
            transactional_id=None, transaction_timeout=datetime.timedelta(seconds=60)))
            for _ in range(count)]
    assert all(a.error_code == 0 for a in answers), answers
    return [int(a.producer_id) for a in answers]



def write_solo_data_dir(data: Path, txn_id: str, offsets_group: str | None = None
                        ) -> dict[str, str]:
    """A data dir as a node of its own (the previous release) leaves it: topic "legacy" (2
    partitions, 20 records "old:i"), dynamic broker configs (<default> log.retention.ms
    7200000, broker 1's log.segment.bytes 2097152), group "old-group" committed at {0: 3,
    1: 4}, and a
    transaction of ``txn_id`` left open (record "open:0" in partition 0, and an offset of
    ``offsets_group`` in it) because the node is killed. Returns the topic ids."""
    # the previous release's default: no quorum, metadata in topic_metadata.json and
    # groups in __consumer_offsets (process.roles=broker with no voters still runs so)
    solo = EddyProcess(data, ["--node-id", "1", "--set", "process.roles=broker"]).start()
    try:
        # dynamic broker configs the node kept on its own: the <default> and its own
        assert alter_broker_config(solo.port, "", "log.retention.ms", "7200000") == 0
        assert alter_broker_config(solo.port, "1", "log.segment.bytes", "2097152") == 0
        create(solo, "legacy", 2, 1)
        assert produce(solo, "legacy", 20, "old") == 20
        ids = topic_ids(solo, ["legacy"])
        commit(solo, "old-group", "legacy", {0: 3, 1: 4})
        p = Producer({"bootstrap.servers": solo.bootstrap, "transactional.id": txn_id})
        p.init_transactions(30)
        p.begin_transaction()
        p.produce("legacy", value=b"open:0", partition=0)
        p.flush(30)
        if offsets_group is not None:
            meta = Consumer({"bootstrap.servers": solo.bootstrap, "group.id": offsets_group})
            p.send_offsets_to_transaction([TopicPartition("legacy", 1, 9)],
                                          meta.consumer_group_metadata(), 30)
        solo.kill()
    finally:
        _ADMINS.clear()
        if solo.alive():
            solo.stop()
    return ids


def commit_one(node: EddyProcess, txn_id: str, value: bytes) -> None:
    """A new producer of ``txn_id`` (fencing any before it) commits ``value`` to
    legacy-0."""
    p = Producer({"bootstrap.servers": node.bootstrap, "transactional.id": txn_id})
    p.init_transactions(30)
    p.begin_transaction()
    p.produce("legacy", value=value, partition=0)
    p.commit_transaction(30)


def read_committed_until(node: EddyProcess, topic: str, until: bytes) -> list[bytes]:
    """Partition 0 of ``topic`` as a read_committed consumer sees it, until ``until`` (or
    30 s)."""
    c = Consumer({"bootstrap.servers": node.bootstrap, "group.id": f"rc-{time.time()}",
                  "auto.offset.reset": "earliest", "isolation.level": "read_committed"})
    c.assign([TopicPartition(topic, 0, 0)])
    seen: list[bytes] = []
    deadline = time.monotonic() + 30
    try:
        while until not in seen and time.monotonic() < deadline:
            m: Any = c.poll(0.5)
            if m is not None and m.error() is None:
                seen.append(m.value())
    finally:
        c.close()
    return seen

def check_quorum_and_cli(cluster: dict[int, EddyProcess]) -> None:
    """DescribeQuorum through any node, `eddy cluster status` with its Raft section, and
    `eddy cluster transfer-leader` moving the controller."""
    wait_for(lambda: all(v.log_end_offset >= 0 for v in describe_quorum(
        cluster[3]).topics[0].partitions[0].current_voters), 20, "every voter caught up")
    answers: list[Any] = []

    def agreed() -> bool:  # every node asks the leader: the same answer (barring an election)
        answers[:] = [describe_quorum(n) for n in cluster.values()]
        return all(a.error_code == 0 for a in answers) and len(
            {a.topics[0].partitions[0].leader_id for a in answers}) == 1

    wait_for(agreed, 20, "every node names the same metadata leader")
    parts = [a.topics[0].partitions[0] for a in answers]
    leader = parts[0].leader_id
    assert leader in IDS
    assert sorted(v.replica_id for v in parts[0].current_voters) == list(IDS)
    assert [n.node_id for n in answers[0].nodes] == list(IDS)
    # Metadata and DescribeCluster name the same live broker from every node: the
    # controller (Kafka's admin clients send it CreateTopics and the like)
    assert {controller_of(n) for n in cluster.values()} == {leader}
    assert {metadata_controller(n) for n in cluster.values()} == {leader}

    status = eddy_cli("cluster", "status", "-b", cluster[2].bootstrap)
    assert status["controller"] == leader
    assert status["partitions"] == {"total": 0, "under_replicated": 0, "offline": 0}
    (meta,) = [g for g in status["raft"] if g["group"] == "metadata"]
    assert meta["leader"] == leader and meta["voters"] == list(IDS)
    assert sorted(meta["lag"]) == sorted(str(i) for i in IDS if i != leader)
    assert meta["commit_index"] > 0 and meta["term"] >= 1

    target = next(i for i in IDS if i != leader)
    moved = eddy_cli("cluster", "transfer-leader", "metadata", str(target), "-b",
                     cluster[1].bootstrap)
    assert moved["leader"] == target
    wait_for(lambda: controller_of(cluster[3]) == target, 20, "the controller moved")
    bad = subprocess.run([sys.executable, "-m", "eddy", "cluster", "remove-voter", "9", "-b",
                          cluster[1].bootstrap], capture_output=True, text=True, timeout=60)
    assert bad.returncode != 0 and "9" in bad.stderr


def test_three_nodes_one_cluster_controller_failover_and_full_restart(tmp_path: Path) -> None:
    cluster = nodes(tmp_path)
    try:
        for n in cluster.values():
            n.start()
        wait_for(lambda: all(controller_of(n) in IDS for n in cluster.values()), 30,
                 "a controller every node names")
        wait_for(lambda: all(len(admin(n).list_topics(timeout=10).brokers) == 3
                             for n in cluster.values()), 30, "every node lists 3 brokers")

        check_quorum_and_cli(cluster)
        # every node names the same coordinator for a group; the others refuse the group
        coordinators = {coordinator_of(n, "g-check") for n in cluster.values()}
        assert len(coordinators) == 1 and coordinators <= set(IDS)
        (owner,) = coordinators
        for i, n in cluster.items():
            with RawClient("127.0.0.1", n.port) as raw:
                hb = raw.call(HeartbeatRequest(group_id="g-check", generation_id=1,
                                               member_id="m", group_instance_id=None))
            expected = ErrorCode.not_coordinator if i != owner else ErrorCode.unknown_member_id
            assert hb.error_code == expected, (i, hb)

        # producer ids come in blocks from the controller: no two brokers hand out the same
        pids = [pid for n in cluster.values() for pid in producer_ids(n, 5)]
        assert len(set(pids)) == len(pids) == 15

        create(cluster[2], "orders", 6, 3)
        views = [describe(n, "orders") for n in cluster.values()]
        assert views[0] == views[1] == views[2], views
        assert all(replicas == [1, 2, 3] and isr == [1, 2, 3]
                   for _, replicas, isr in views[0].values())
        assert {leader for leader, _, _ in views[0].values()} == set(IDS)

        # a topic config changed through one node is what every node describes
        set_config(cluster[1], "orders", "retention.ms", "3600000")
        assert all(topic_config(n, "orders", "retention.ms") == "3600000"
                   for n in cluster.values())

        # a dynamic broker default set through one node is every broker's: every node
        # describes it, and the leaders on every node refuse a record over it
        assert alter_broker_config(cluster[2].port, "", "message.max.bytes", "100000") == 0
        for n in cluster.values():
            wait_for(lambda n=n: describe_broker_default(n.port) == {  # type: ignore[misc]
                "message.max.bytes": ("100000", DYNAMIC_DEFAULT)}, 10, "the default")
            entry = topic_entry(n, "orders", "max.message.bytes")
            assert (entry.value, entry.source) == ("100000", DYNAMIC_DEFAULT)
        assert too_large(cluster[1], "orders", 200_000) == set(range(6))
        assert alter_broker_config(cluster[3].port, "", "message.max.bytes", None) == 0
        wait_for(lambda: not any(describe_broker_default(n.port) for n in cluster.values()),
                 10, "the default deleted everywhere")

        assert produce(cluster[3], "orders", 300, "a") == 300
        got = consume_all(cluster[1], "orders", "g1", 300)
        assert sorted(got) == sorted(f"a:{i}".encode() for i in range(300))

        # kill -9 the controller: another node takes over and fences it
        dead = controller_of(cluster[1])
        led = {p for p, (leader, _, _) in views[0].items() if leader == dead}
        survivors = [n for i, n in cluster.items() if i != dead]
        cluster[dead].kill()
        killed_at = time.monotonic()
        def moved_away() -> bool:
            view = polled(survivors[1], lambda _: describe(survivors[1], "orders"))
            return view is not None and all(leader != dead and dead not in isr
                                            for leader, _, isr in view.values())

        wait_for(moved_away, 30, "the dead node's partitions have new leaders", interval=0.05)
        moved_s = time.monotonic() - killed_at
        create(survivors[0], "after-kill", 2, 2, timeout=30)
        created_s = time.monotonic() - killed_at
        print(f"controller {dead} killed: its {len(led)} partitions led elsewhere after "
              f"{moved_s:.2f} s, CreateTopics through another node done after "
              f"{created_s:.2f} s")
        new_controller = controller_of(survivors[0])
        assert new_controller in IDS and new_controller != dead
        # leaders move as soon as the controller finds nothing listening where the dead
        # node served; the node leaves Metadata's broker list when its session ends
        wait_for(lambda: all(len(getattr(polled(n, lambda a: a.list_topics(timeout=5)),
                                         "brokers", ())) == 2 for n in survivors),
                 10, "the dead node fenced")
        assert produce(survivors[1], "after-kill", 50, "b") == 50
        # the partitions that moved serve the new leader epoch: produce and consume work
        # (their old records stayed on the dead node: replication is the next issue's)
        assert produce(survivors[0], "orders", 60, "m") == 60
        moved = consume_all(survivors[1], "orders", "g2", 60, tag=b"m:")
        assert sorted(moved) == sorted(f"m:{i}".encode() for i in range(60))

        # the dead node comes back: registered and unfenced again, back in every ISR
        cluster[dead].start()
        wait_for(lambda: len(getattr(polled(survivors[0], lambda a: a.list_topics(timeout=5)),
                                     "brokers", ())) == 3, 30,
                 "the restarted node listed again")

        # committed offsets live in the offsets Raft group: they survive the loss of the
        # coordinator (its leader), read back through the new one
        wanted = {p: 10 * p + 1 for p in range(6)}
        commit(cluster[1], "keep", "orders", wanted)
        assert committed(cluster[2], "keep", "orders") == wanted
        coordinator = coordinator_of(cluster[3], "keep")
        cluster[coordinator].kill()
        others = [n for i, n in cluster.items() if i != coordinator]
        wait_for(lambda: coordinator_of(others[0], "keep") not in (-1, coordinator), 30,
                 "a new group coordinator")
        assert committed(others[1], "keep", "orders") == wanted
        cluster[coordinator].start()
        wait_for(lambda: len(getattr(polled(others[0], lambda a: a.list_topics(timeout=5)),
                                     "brokers", ())) == 3, 30, "the old coordinator back")

        # every node killed at once and restarted: nothing committed is lost
        before = {t: describe(cluster[1], t) for t in ("orders", "after-kill")}
        ids_before = topic_ids(cluster[1], ["orders", "after-kill"])
        for n in cluster.values():
            n.kill()
        for n in cluster.values():
            n.start()
        wait_for(lambda: all(len(getattr(polled(n, lambda a: a.list_topics(timeout=5)),
                                         "brokers", ())) == 3
                             for n in cluster.values()), 30, "all three back")
        assert topic_ids(cluster[3], ["orders", "after-kill"]) == ids_before
        for t, view in before.items():
            after = describe(cluster[2], t)
            assert {p: r for p, (_, r, _) in after.items()} == \
                {p: r for p, (_, r, _) in view.items()}
        assert produce(cluster[1], "after-kill", 10, "c") == 10
        assert committed(cluster[2], "keep", "orders") == wanted
    finally:
        _ADMINS.clear()
        for n in cluster.values():
            n.kill()


def test_a_single_nodes_data_dir_joins_a_cluster_with_its_topics(tmp_path: Path) -> None:
    """A data dir written by a node of its own, started as node 1 of a cluster: its topics
    become the cluster's (same ids, on node 1), their records are served through any node,
    nothing of it is deleted, and its groups' committed offsets move into the offsets
    group."""
    ids = write_solo_data_dir(tmp_path / "n1", "legacy-txn", offsets_group="txn-group")
    cluster = nodes(tmp_path)
    try:
        for n in cluster.values():
            n.start()
        wait_for(lambda: "legacy" in admin(cluster[2]).list_topics(timeout=10).topics
                 and all(leader == 1 for leader, _, _ in describe(cluster[2], "legacy").values()),
                 30, "the old topic is the cluster's, led by node 1")
        for n in cluster.values():  # every node's replica of the metadata has it
            wait_for(lambda n=n: "legacy" in admin(n).list_topics(timeout=10).topics, 10,
                     "the topic on every node")
        assert topic_ids(cluster[3], ["legacy"]) == ids
        got = consume_all(cluster[3], "legacy", "g-legacy", 20, tag=b"old:")
        assert sorted(got) == sorted(f"old:{i}".encode() for i in range(20))
        assert produce(cluster[2], "legacy", 5, "new") == 5
        # the group the node kept on its own is in the offsets group now
        wait_for(lambda: committed(cluster[3], "old-group", "legacy") == {0: 3, 1: 4}, 30,
                 "the old group's committed offsets, through any node")
        # the open transaction is the cluster coordinator's: a new producer with its id
        # aborts it (markers to node 1, the partition's leader), so its record never shows
        # and read_committed consumers get past it
        commit_one(cluster[2], "legacy-txn", b"after:0")
        seen = read_committed_until(cluster[3], "legacy", b"after:0")
        assert b"after:0" in seen and b"open:0" not in seen
        assert committed(cluster[3], "txn-group", "legacy") == {}  # aborted with it
    finally:
        _ADMINS.clear()
        for n in cluster.values():
            n.kill()
