"""A cluster of one: `eddy serve` with no flags (process.roles unset: broker,controller)
runs the metadata service with this node its only voter. A data dir written by a node of
its own (topics, committed offsets, an open transaction) starts under it with everything
intact; topics, groups and transactions then work as on any cluster, and survive a
kill -9 and restart."""

from __future__ import annotations

from pathlib import Path

from broker_configs_raw import describe_broker_default
from confluent_kafka.admin import ConfigResource, ResourceType
from conftest import EddyProcess
from mesh_cluster import wait_for
from test_metadata_cluster import (
    _ADMINS,
    admin,
    commit,
    commit_one,
    committed,
    consume_all,
    create,
    describe,
    describe_quorum,
    produce,
    read_committed_until,
    topic_ids,
    write_solo_data_dir,
)

ALONE: list[str] = []  # the default
DYNAMIC_DEFAULT, DYNAMIC_BROKER = 3, 2  # DescribeConfigs sources


def broker_config(node: EddyProcess, broker: str, name: str) -> tuple[str, int]:
    resource = ConfigResource(ResourceType.BROKER, broker)
    entry = admin(node).describe_configs([resource])[resource].result(15)[name]
    return entry.value, int(entry.source)


def test_a_single_nodes_data_dir_becomes_a_cluster_of_one(tmp_path: Path) -> None:
    data = tmp_path / "node"
    ids = write_solo_data_dir(data, "t-open")  # as the previous release leaves it
    node = EddyProcess(data, ["--node-id", "1", *ALONE]).start()
    try:
        quorum = describe_quorum(node).topics[0].partitions[0]
        assert quorum.leader_id == 1 and [v.replica_id for v in quorum.current_voters] == [1]
        assert topic_ids(node, ["legacy"]) == ids
        assert describe(node, "legacy") == {0: (1, [1], [1]), 1: (1, [1], [1])}
        # the node's own dynamic broker configs are the cluster's now
        assert describe_broker_default(node.port)["log.retention.ms"] == (
            "7200000", DYNAMIC_DEFAULT)
        assert broker_config(node, "1", "log.segment.bytes") == ("2097152", DYNAMIC_BROKER)
        got = consume_all(node, "legacy", "g-read", 20, tag=b"old:")
        assert sorted(got) == sorted(f"old:{i}".encode() for i in range(20))
        wait_for(lambda: committed(node, "old-group", "legacy") == {0: 3, 1: 4}, 30,
                 "the node's own committed offsets, now in the offsets group")
        # the open transaction came along: a new producer with its id aborts it
        commit_one(node, "t-open", b"closed")
        seen = read_committed_until(node, "legacy", b"closed")
        assert b"closed" in seen and b"open:0" not in seen

        create(node, "fresh", 3, 1)
        assert produce(node, "fresh", 30, "new") == 30
        commit(node, "new-group", "fresh", {0: 5, 2: 7})

        node.kill()
        node.start()
        assert topic_ids(node, ["legacy"]) == ids
        assert produce(node, "fresh", 5, "after") == 5  # led again, right after the restart
        wait_for(lambda: committed(node, "new-group", "fresh") == {0: 5, 2: 7}, 30,
                 "committed offsets after kill -9")
        got = consume_all(node, "fresh", "g-fresh", 35)
        assert len(got) == 35
    finally:
        _ADMINS.clear()
        if node.alive():
            node.kill()
