"""Managing a cluster through one gateway endpoint, in one process: two Brokers (nodes 1
and 2) behind a gateway KafkaServer whose forwarder runs each op on the owning broker's
OpExecutor over postcard bytes (test_gateway_inprocess's harness). Real clients talk to the
gateway only: confluent-kafka's AdminClient (create/delete topics, create partitions,
describe/alter configs both ways, delete records, describe cluster, delete groups),
kafka-python's KafkaAdminClient (describe configs, delete topics) and the `eddy` CLI
(cluster status, topic alter/describe/delete, group delete). Every change is checked on the
owning broker itself."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from test_cli import eddy_cli, json_out, ok
from test_gateway_inprocess import (
    GATEWAY_NODE,
    BrokerRoutes,
    Cluster,
    ExecutorForwarder,
    name_on,
)

from eddy.broker.broker import Broker
from eddy.broker.server import KafkaServer
from eddy.clock import WallClock
from eddy.config import BrokerConfig
from eddy.gateway import ops_admin as oa
from eddy.gateway.handlers.table import GATEWAY_HANDLERS, GATEWAY_VERSIONS
from eddy.gateway.node import Gateway
from eddy.gateway.routes import pick_node

TIMEOUT = 15
GATEWAY_RETENTION_MS = 3_600_000  # a static setting of the gateway's own config


class ForgettingRoutes(BrokerRoutes):
    """BrokerRoutes (read off the brokers' logs) that also records what the gateway forgot."""

    def __init__(self, brokers: dict[int, Broker]) -> None:
        super().__init__(brokers)
        self.forgotten: list[str] = []

    def forget_topic(self, name: str) -> None:
        self.forgotten.append(name)


class AdminCluster(Cluster):
    routes: ForgettingRoutes

    async def _start(self) -> None:
        for node in (1, 2):
            cfg = BrokerConfig(node_id=node, listen="127.0.0.1:0",
                               data_dir=str(self.root / f"node{node}"), num_partitions=1)
            b = Broker(cfg, WallClock())
            b.load()
            b.start_maintenance()
            self.brokers[node] = b
        self.forwarder = ExecutorForwarder(self.brokers)
        self.routes = ForgettingRoutes(self.brokers)
        gw_cfg = BrokerConfig(node_id=GATEWAY_NODE, listen="127.0.0.1:0",
                              data_dir=str(self.root / "gateway"), process_roles="gateway",
                              num_partitions=1, log_retention_ms=GATEWAY_RETENTION_MS)
        gw = Gateway(gw_cfg, self.routes, self.forwarder, cluster_id="gw-admin")
        self.server = KafkaServer(gw, handlers=GATEWAY_HANDLERS, versions=GATEWAY_VERSIONS)
        self.bootstrap = f"127.0.0.1:{await self.server.start()}"

    def topic_state(self, name: str) -> dict[int, tuple[int, dict[str, str]]]:
        """Per node holding `name`: (partition count, topic config overrides)."""
        async def read() -> dict[int, tuple[int, dict[str, str]]]:
            return {node: (len(t.partitions), dict(t.configs))
                    for node, b in self.brokers.items()
                    if (t := b.logs.get(name)) is not None}
        result: dict[int, tuple[int, dict[str, str]]] = self.run(read())
        return result

    def log_start(self, name: str, partition: int) -> int:
        async def read() -> int:
            for b in self.brokers.values():
                t = b.logs.get(name)
                if t is not None:
                    return int(t.partitions[partition].log_start_offset)
            return -1
        result: int = self.run(read())
        return result


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[AdminCluster]:
    c = AdminCluster(tmp_path_factory.mktemp("gateway-admin"))
    c.start()
    yield c
    c.stop()


def _admin(cluster: AdminCluster) -> Any:
    from confluent_kafka.admin import AdminClient
    return AdminClient({"bootstrap.servers": cluster.bootstrap})


def _produce(cluster: AdminCluster, topic: str, partition: int, n: int) -> None:
    from confluent_kafka import Producer
    p = Producer({"bootstrap.servers": cluster.bootstrap, "linger.ms": 0})
    for i in range(n):
        p.produce(topic, f"v{i}".encode(), partition=partition)
    assert p.flush(TIMEOUT) == 0


def _commit(cluster: AdminCluster, group: str, topic: str, offset: int) -> None:
    """A group with a committed offset and no members (Empty): deletable."""
    from confluent_kafka import Consumer, TopicPartition
    c = Consumer({"bootstrap.servers": cluster.bootstrap, "group.id": group,
                  "enable.auto.commit": False})
    try:
        c.commit(offsets=[TopicPartition(topic, 0, offset)], asynchronous=False)
    finally:
        c.close()


def _committed(cluster: AdminCluster, group: str, topic: str) -> int:
    from confluent_kafka import Consumer, TopicPartition
    c = Consumer({"bootstrap.servers": cluster.bootstrap, "group.id": group,
                  "enable.auto.commit": False})
    try:
        [tp] = c.committed([TopicPartition(topic, 0)], timeout=TIMEOUT)
        return int(tp.offset)
    finally:
        c.close()


# ---- confluent-kafka ---------------------------------------------------------------------


def test_confluent_admin_manages_topics_on_both_nodes(cluster: AdminCluster) -> None:
    from confluent_kafka import KafkaError, KafkaException, TopicPartition
    from confluent_kafka.admin import (
        AlterConfigOpType,
        ConfigEntry,
        ConfigResource,
        NewPartitions,
        NewTopic,
        ResourceType,
    )

    one, two = name_on(1, "adm-one"), name_on(2, "adm-two")
    admin = _admin(cluster)
    for f in admin.create_topics([NewTopic(one, 1, 1), NewTopic(two, 1, 1)]).values():
        f.result(TIMEOUT)

    # CreatePartitions: split by node, and Metadata shows the new counts at once
    for f in admin.create_partitions([NewPartitions(one, 3), NewPartitions(two, 2)]).values():
        f.result(TIMEOUT)
    assert cluster.topic_state(one) == {1: (3, {})}
    assert cluster.topic_state(two) == {2: (2, {})}
    md = admin.list_topics(timeout=10)
    assert (len(md.topics[one].partitions), len(md.topics[two].partitions)) == (3, 2)
    with pytest.raises(KafkaException) as shrink:
        admin.create_partitions([NewPartitions(one, 2)])[one].result(TIMEOUT)
    assert shrink.value.args[0].code() == KafkaError.INVALID_PARTITIONS

    # IncrementalAlterConfigs and AlterConfigs: each topic's owner changes its overrides
    res_one = ConfigResource(ResourceType.TOPIC, one, incremental_configs=[
        ConfigEntry("retention.ms", "12345", incremental_operation=AlterConfigOpType.SET)])
    admin.incremental_alter_configs([res_one])[res_one].result(TIMEOUT)
    res_two = ConfigResource(ResourceType.TOPIC, two, set_config={"retention.ms": "999"})
    admin.alter_configs([res_two])[res_two].result(TIMEOUT)
    assert cluster.topic_state(one)[1][1] == {"retention.ms": "12345"}
    assert cluster.topic_state(two)[2][1] == {"retention.ms": "999"}
    bad = ConfigResource(ResourceType.TOPIC, two, incremental_configs=[
        ConfigEntry("no.such.config", "1", incremental_operation=AlterConfigOpType.SET)])
    with pytest.raises(KafkaException) as refused:
        admin.incremental_alter_configs([bad])[bad].result(TIMEOUT)
    assert refused.value.args[0].code() == KafkaError.INVALID_CONFIG

    # DescribeConfigs: topics from their owners, the broker resource from the gateway itself
    wanted = [ConfigResource(ResourceType.TOPIC, one), ConfigResource(ResourceType.TOPIC, two),
              ConfigResource(ResourceType.BROKER, str(GATEWAY_NODE))]
    got = {r.name: f.result(TIMEOUT) for r, f in admin.describe_configs(wanted).items()}
    assert got[one]["retention.ms"].value == "12345"
    assert not got[one]["retention.ms"].is_default
    assert got[two]["retention.ms"].value == "999"
    assert got[two]["cleanup.policy"].value == "delete" and got[two]["cleanup.policy"].is_default
    me = got[str(GATEWAY_NODE)]
    assert me["node.id"].value == str(GATEWAY_NODE)
    assert me["log.retention.ms"].value == str(GATEWAY_RETENTION_MS)
    assert me["process.roles"].value == "gateway"
    broker_res = ConfigResource(ResourceType.BROKER, str(GATEWAY_NODE),
                                set_config={"log.retention.ms": "1"})
    with pytest.raises(KafkaException) as static:
        admin.alter_configs([broker_res])[broker_res].result(TIMEOUT)
    assert "static" in static.value.args[0].str()

    # DeleteRecords on the node holding the partition
    _produce(cluster, one, 1, 5)
    [(_, fut)] = admin.delete_records([TopicPartition(one, 1, 3)]).items()
    assert fut.result(TIMEOUT).low_watermark == 3
    assert cluster.log_start(one, 1) == 3

    # DeleteTopics: both nodes, and an unknown name fails alone
    futures = admin.delete_topics([one, two, "adm-never-made"], operation_timeout=10)
    futures[one].result(TIMEOUT)
    futures[two].result(TIMEOUT)
    with pytest.raises(KafkaException) as unknown:
        futures["adm-never-made"].result(TIMEOUT)
    assert unknown.value.args[0].code() == KafkaError.UNKNOWN_TOPIC_OR_PART
    assert cluster.topic_state(one) == {} and cluster.topic_state(two) == {}
    assert {one, two} <= set(cluster.routes.forgotten)
    calls = cluster.forwarder.calls if cluster.forwarder is not None else {}
    for op in (oa.KAFKA_OP_DELETE_TOPICS, oa.KAFKA_OP_CREATE_PARTITIONS,
               oa.KAFKA_OP_DESCRIBE_CONFIGS, oa.KAFKA_OP_INCREMENTAL_ALTER_CONFIGS):
        assert calls.get((1, op)) and calls.get((2, op)), f"op 0x{op:02x} reached one node"
    md = admin.list_topics(timeout=10)
    assert one not in md.topics and two not in md.topics


def test_confluent_describe_cluster_and_delete_groups(cluster: AdminCluster) -> None:
    from confluent_kafka import KafkaError, KafkaException
    from confluent_kafka.admin import NewTopic

    admin = _admin(cluster)
    desc = admin.describe_cluster(request_timeout=TIMEOUT).result(TIMEOUT)
    assert desc.cluster_id == "gw-admin"
    assert desc.controller.id == GATEWAY_NODE
    assert [n.id for n in desc.nodes] == [GATEWAY_NODE]

    topic = name_on(2, "adm-grp")
    admin.create_topics([NewTopic(topic, 1, 1)])[topic].result(TIMEOUT)
    groups = [f"adm-group-{i}" for i in range(4)]
    assert {pick_node(g, [1, 2]) for g in groups} == {1, 2}  # owners on both nodes
    for g in groups:
        _commit(cluster, g, topic, 4)
    assert all(_committed(cluster, g, topic) == 4 for g in groups)
    futures = admin.delete_consumer_groups([*groups, "adm-no-such-group"],
                                           request_timeout=TIMEOUT)
    for g in groups:
        futures[g].result(TIMEOUT)
    with pytest.raises(KafkaException) as missing:
        futures["adm-no-such-group"].result(TIMEOUT)
    assert missing.value.args[0].code() == KafkaError.GROUP_ID_NOT_FOUND
    # deleted with their offsets: nothing committed any more
    assert all(_committed(cluster, g, topic) < 0 for g in groups)
    calls = cluster.forwarder.calls if cluster.forwarder is not None else {}
    assert calls.get((1, oa.KAFKA_OP_DELETE_GROUPS)) and calls.get((2, oa.KAFKA_OP_DELETE_GROUPS))


# ---- kafka-python ------------------------------------------------------------------------


def test_kafka_python_admin_describes_configs_and_deletes_topics(
        cluster: AdminCluster) -> None:
    from kafka import TopicPartition as KafkaTopicPartition
    from kafka.admin import ConfigResource, ConfigResourceType, KafkaAdminClient, NewTopic

    admin = KafkaAdminClient(bootstrap_servers=cluster.bootstrap, request_timeout_ms=15000)
    try:
        one, two = name_on(1, "kp-one"), name_on(2, "kp-two")
        admin.create_topics([NewTopic(one, 2, 1, topic_configs={"retention.ms": "4242"}),
                             NewTopic(two, 1, 1)])
        got = admin.describe_configs([
            ConfigResource(ConfigResourceType.TOPIC, one),
            ConfigResource(ConfigResourceType.BROKER, str(GATEWAY_NODE),
                           configs={"node.id": None})], config_filter="all")
        overrides = {k for k, c in got["topic"][one].items()
                     if c["config_source"] == "DYNAMIC_TOPIC_CONFIG"}
        assert overrides == {"retention.ms"}
        assert got["topic"][one]["retention.ms"]["value"] == "4242"
        assert got["broker"][str(GATEWAY_NODE)]["node.id"]["value"] == str(GATEWAY_NODE)

        # DescribeLogDirs: one broker (the gateway) with both nodes' directories
        _produce(cluster, one, 0, 3)
        _produce(cluster, two, 0, 2)
        [answer] = admin.describe_log_dirs()
        assert answer["broker"] == GATEWAY_NODE
        dirs = {Path(d["log_dir"]).parent.name: d for d in answer["log_dirs"]}
        assert set(dirs) == {"node1", "node2"} and all(d["error_code"] == 0
                                                     for d in dirs.values())
        names = {n: {t["name"] for t in d["topics"]} for n, d in dirs.items()}
        assert one in names["node1"] and two in names["node2"]
        assert one not in names["node2"] and two not in names["node1"]
        [sizes] = [[p["partition_size"] for p in t["partitions"]]
                   for t in dirs["node1"]["topics"] if t["name"] == one]
        assert sizes[0] > 0 and sizes[1] == 0  # only partition 0 has records

        # OffsetDelete (kafka-python's delete_group_offsets) at the group's owner
        group = "kp-offsets"
        _commit(cluster, group, one, 2)
        errors = admin.delete_group_offsets(group, [KafkaTopicPartition(one, 0)])
        assert [e.errno for e in errors.values()] == [0]
        assert _committed(cluster, group, one) < 0
        admin.delete_topics([one, two], timeout_ms=10000)
        assert cluster.topic_state(one) == {} and cluster.topic_state(two) == {}
    finally:
        admin.close()


# ---- the eddy CLI ------------------------------------------------------------------------


def test_eddy_cli_manages_the_cluster_through_the_gateway(cluster: AdminCluster,
                                                          tmp_path: Path) -> None:
    b = cluster.bootstrap
    status = json_out(eddy_cli("cluster", "status", "-o", "json", "-b", b))
    assert status["cluster_id"] == "gw-admin" and status["controller"] == GATEWAY_NODE
    assert [x["id"] for x in status["brokers"]] == [GATEWAY_NODE]

    name = name_on(1, "cli-topic")
    ok(eddy_cli("topic", "create", name, "--partitions", "1", "-b", b))
    ok(eddy_cli("topic", "alter", name, "--partitions", "3", "--config",
                "retention.ms=77777", "-b", b))
    assert cluster.topic_state(name) == {1: (3, {"retention.ms": "77777"})}
    desc = json_out(eddy_cli("topic", "describe", name, "-o", "json", "-b", b))
    assert desc["partition_count"] == 3
    assert {(c["name"], c["value"]) for c in desc["configs"]} == {("retention.ms", "77777")}
    ok(eddy_cli("topic", "alter", name, "--delete-config", "retention.ms", "-b", b))
    assert cluster.topic_state(name) == {1: (3, {})}

    group = "cli-admin-group"
    _commit(cluster, group, name, 2)
    ok(eddy_cli("group", "delete", group, "-b", b))
    assert _committed(cluster, group, name) < 0

    ok(eddy_cli("topic", "delete", name, "-b", b))
    assert cluster.topic_state(name) == {}
    listed = json_out(eddy_cli("topic", "list", "-o", "json", "-b", b))
    assert name not in [t["name"] for t in listed]
    gone = eddy_cli("topic", "describe", name, "-b", b)
    assert gone.returncode != 0 and name in gone.stderr
