"""ElectLeaders (API 43) on a node outside any cluster, with confluent-kafka's AdminClient and
the raw protocol: the node is the only replica, and already the leader, of every partition,
so each one is ELECTION_NOT_NEEDED, as a one-broker Kafka answers. (Elections that move
leaders run on a cluster: tests/system/test_controlled_shutdown.py.)"""

from __future__ import annotations

import datetime
import json
import subprocess
import sys

from confluent_kafka import ElectionType, KafkaError, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic
from kio.schema.elect_leaders.v0.request import ElectLeadersRequest as V0
from kio.schema.elect_leaders.v0.request import TopicPartitions as TopicsV0
from kio.schema.elect_leaders.v1.request import ElectLeadersRequest as V1
from kio.schema.elect_leaders.v1.request import TopicPartitions as TopicsV1
from kio.schema.errors import ErrorCode
from kio.static.primitive import i8, i32, i32Timedelta
from raw_client import RawClient

TIMEOUT = i32Timedelta.parse(datetime.timedelta(seconds=5))


def _codes(result: dict[TopicPartition, object]) -> dict[tuple[str, int], int]:
    out: dict[tuple[str, int], int] = {}
    for tp, err in result.items():
        if err is None:
            out[(tp.topic, tp.partition)] = 0
        else:
            out[(tp.topic, tp.partition)] = err.code()  # type: ignore[attr-defined]
    return out


def test_admin_client_elections_on_a_single_node(eddy) -> None:  # type: ignore[no-untyped-def]
    admin = AdminClient({"bootstrap.servers": eddy.bootstrap})
    admin.create_topics([NewTopic("el", 2, 1)])["el"].result(10)
    asked = [TopicPartition("el", 0), TopicPartition("el", 1), TopicPartition("el", 5),
             TopicPartition("missing", 0)]
    for election in (ElectionType.PREFERRED, ElectionType.UNCLEAN):
        result = admin.elect_leaders(election, asked).result(10)
        assert _codes(result) == {
            ("el", 0): KafkaError.ELECTION_NOT_NEEDED,
            ("el", 1): KafkaError.ELECTION_NOT_NEEDED,
            ("el", 5): KafkaError.UNKNOWN_TOPIC_OR_PART,
            ("missing", 0): KafkaError.UNKNOWN_TOPIC_OR_PART,
        }
    # every partition: those needing no election are left out
    assert admin.elect_leaders(ElectionType.PREFERRED, None).result(10) == {}


def test_raw_elections_v0_v1_and_a_bad_election_type(eddy) -> None:  # type: ignore[no-untyped-def]
    admin = AdminClient({"bootstrap.servers": eddy.bootstrap})
    admin.create_topics([NewTopic("raw-el", 1, 1)])["raw-el"].result(10)
    raw = RawClient(eddy.port)
    try:
        v0 = raw.call(V0(topic_partitions=(TopicsV0(topic="raw-el", partitions=(i32(0),)),),
                         timeout=TIMEOUT))
        part = v0.replica_election_results[0].partition_result[0]
        assert (part.partition_id, part.error_code) == (0, ErrorCode.election_not_needed)
        assert part.error_message == "Leader election not needed for topic partition."
        every = raw.call(V1(election_type=i8(0), topic_partitions=None, timeout=TIMEOUT))
        assert every.error_code == ErrorCode.none
        assert all(not r.partition_result for r in every.replica_election_results)
        assert "raw-el" in {r.topic for r in every.replica_election_results}
        empty = raw.call(V1(election_type=i8(1), topic_partitions=(), timeout=TIMEOUT))
        assert (empty.error_code, empty.replica_election_results) == (ErrorCode.none, ())
        bad = raw.call(V1(election_type=i8(7), timeout=TIMEOUT, topic_partitions=(
            TopicsV1(topic="raw-el", partitions=(i32(0),)),)))
        assert bad.error_code == ErrorCode.invalid_request
        part = bad.replica_election_results[0].partition_result[0]
        assert part.error_code == ErrorCode.invalid_request
        assert part.error_message == "Unknown election type 7"
    finally:
        raw.close()


def _cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "eddy", "cluster", "elect-leaders", *args],
                          capture_output=True, text=True, timeout=60)


def test_cli_elect_leaders_on_a_single_node(eddy) -> None:  # type: ignore[no-untyped-def]
    admin = AdminClient({"bootstrap.servers": eddy.bootstrap})
    admin.create_topics([NewTopic("cli-el", 2, 1)])["cli-el"].result(10)
    done = _cli("-b", eddy.bootstrap, "--topic", "cli-el", "--output", "json")
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout) == [
        {"topic": "cli-el", "partition": p, "result": "not needed", "message": None}
        for p in (0, 1)]
    done = _cli("-b", eddy.bootstrap, "--topic", "cli-el", "-p", "7", "--unclean",
                "--output", "plain")
    assert done.returncode == 1
    assert done.stdout.splitlines()[1].split("\t")[:3] == [
        "cli-el", "7", "UNKNOWN_TOPIC_OR_PART"]
    assert "1 of 1 partitions were not elected" in done.stderr
    every = _cli("-b", eddy.bootstrap, "--output", "json")
    assert (every.returncode, json.loads(every.stdout)) == (0, [])
    assert _cli("-b", eddy.bootstrap, "-p", "0").returncode == 2
