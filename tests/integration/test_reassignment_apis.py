"""AlterPartitionReassignments (API 45) and ListPartitionReassignments (API 46) on a single
node (no cluster: it is the only replica of everything), over the wire with kio's types
(confluent-kafka 2.16's AdminClient has no reassignment calls), and the CLI commands."""

from __future__ import annotations

import datetime
import json
import subprocess
import sys

from confluent_kafka.admin import AdminClient, NewTopic  # type: ignore[attr-defined]
from kio.schema.alter_partition_reassignments.v0.request import (
    AlterPartitionReassignmentsRequest,
    ReassignablePartition,
    ReassignableTopic,
)
from kio.schema.errors import ErrorCode
from kio.schema.list_partition_reassignments.v0.request import (
    ListPartitionReassignmentsRequest,
    ListPartitionReassignmentsTopics,
)
from kio.static.primitive import i32, i32Timedelta
from raw_client import RawClient

TIMEOUT = i32Timedelta.parse(datetime.timedelta(seconds=5))


def _alter(raw: RawClient, asked: dict[str, list[tuple[int, tuple[int, ...] | None]]]
           ) -> dict[tuple[str, int], ErrorCode]:
    answer = raw.call(AlterPartitionReassignmentsRequest(timeout=TIMEOUT, topics=tuple(
        ReassignableTopic(name=t, partitions=tuple(
            ReassignablePartition(partition_index=i32(p),
                                  replicas=None if r is None else tuple(i32(n) for n in r))
            for p, r in parts))
        for t, parts in asked.items())))
    assert answer.error_code == ErrorCode.none and answer.error_message is None
    return {(str(t.name), int(p.partition_index)): ErrorCode(p.error_code)
            for t in answer.responses for p in t.partitions}


def test_alter_and_list_on_a_single_node(eddy) -> None:  # type: ignore[no-untyped-def]
    admin = AdminClient({"bootstrap.servers": eddy.bootstrap})
    admin.create_topics([NewTopic("ra", 2, 1)])["ra"].result(10)
    me = next(iter(admin.list_topics(timeout=10).brokers))
    other = me + 1
    raw = RawClient(eddy.port)
    try:
        codes = _alter(raw, {
            "ra": [(0, (me,)), (1, None), (5, (me,))],
            "missing": [(0, (me,))],
        })
        assert codes == {
            ("ra", 0): ErrorCode.none,  # already there: nothing to do
            ("ra", 1): ErrorCode.no_reassignment_in_progress,
            ("ra", 5): ErrorCode.unknown_topic_or_partition,
            ("missing", 0): ErrorCode.unknown_topic_or_partition,
        }
        for target in ((me, other), (), (me, me)):
            assert _alter(raw, {"ra": [(0, target)]}) == {
                ("ra", 0): ErrorCode.invalid_replica_assignment}
        assert _alter(raw, {}) == {}
        listed = raw.call(ListPartitionReassignmentsRequest(timeout=TIMEOUT, topics=None))
        assert listed.error_code == ErrorCode.none and listed.topics == ()
        listed = raw.call(ListPartitionReassignmentsRequest(timeout=TIMEOUT, topics=(
            ListPartitionReassignmentsTopics(name="ra", partition_indexes=(i32(0), i32(9))),
        )))
        assert listed.error_code == ErrorCode.none and listed.topics == ()
    finally:
        raw.close()


def _cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "eddy", *args], capture_output=True,
                          text=True, timeout=60)


def test_cli_reassign_reassignments_and_rebalance(eddy) -> None:  # type: ignore[no-untyped-def]
    admin = AdminClient({"bootstrap.servers": eddy.bootstrap})
    admin.create_topics([NewTopic("cli-ra", 2, 1)])["cli-ra"].result(10)
    me = next(iter(admin.list_topics(timeout=10).brokers))
    b = ("-b", eddy.bootstrap)
    done = _cli("topic", "reassign", "cli-ra", "-p", "0", "-p", "1", "--replicas", str(me),
                *b, "-o", "json")
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout) == [
        {"topic": "cli-ra", "partition": p, "result": "ok", "message": None} for p in (0, 1)]
    refused = _cli("topic", "reassign", "cli-ra", "-p", "0", "--replicas", f"{me},{me + 5}",
                   *b, "-o", "plain")
    assert refused.returncode == 1
    assert "INVALID_REPLICA_ASSIGNMENT" in refused.stdout + refused.stderr
    cancel = _cli("topic", "reassign", "cli-ra", "-p", "0", "--cancel", *b, "-o", "json")
    assert cancel.returncode == 1
    assert json.loads(cancel.stdout)[0]["result"] == "NO_REASSIGNMENT_IN_PROGRESS"
    assert _cli("topic", "reassign", "cli-ra", "-p", "0", *b).returncode == 2
    assert _cli("topic", "reassign", "cli-ra", "-p", "0", "--replicas", "x", *b
                ).returncode == 2
    listed = _cli("topic", "reassignments", *b, "-o", "json")
    assert (listed.returncode, json.loads(listed.stdout)) == (0, [])
    plan = _cli("cluster", "rebalance", "--dry-run", *b, "-o", "json")
    assert plan.returncode == 0, plan.stderr
    assert json.loads(plan.stdout) == {"brokers": [me], "dry_run": True, "moves": []}
    described = _cli("topic", "describe", "cli-ra", *b, "-o", "json")
    assert described.returncode == 0, described.stderr
    assert [p["offline"] for p in json.loads(described.stdout)["partitions"]] == [[], []]
