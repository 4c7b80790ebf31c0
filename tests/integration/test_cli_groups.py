"""`eddy group list|describe|reset-offsets|delete` and `eddy consume --group` against a real
broker: lag after a partial consume, dry-run plans that change nothing, --execute that does."""

from __future__ import annotations

import time
from datetime import UTC, datetime
from typing import Any

from confluent_kafka import Consumer, ConsumerGroupTopicPartitions, TopicPartition
from confluent_kafka.admin import AdminClient
from conftest import EddyProcess
from kafka_helpers import create_topic, produce
from test_cli import eddy_cli, eddy_cli_parallel, json_lines, json_out, ok


def committed(b: str, group: str) -> dict[tuple[str, int], int]:
    """The group's committed offsets, read with a client in this process."""
    admin = AdminClient({"bootstrap.servers": b})
    res = admin.list_consumer_group_offsets([ConsumerGroupTopicPartitions(group)])[group]
    return {(tp.topic, tp.partition): tp.offset for tp in res.result(15).topic_partitions
            if tp.offset >= 0}


def reset(b: str, group: str, *args: str) -> dict[str, Any]:
    result: dict[str, Any] = json_out(
        eddy_cli("group", "reset-offsets", group, *args, "-o", "json", bootstrap=b))
    return result


def test_consume_with_group_shows_lag_and_reset_moves_it(eddy: EddyProcess) -> None:
    b = eddy.bootstrap
    create_topic(b, "jobs")
    produce(b, "jobs", [f"job-{i}".encode() for i in range(10)])
    before_records = time.time()

    # a partial consume commits exactly what it printed
    out = ok(eddy_cli("consume", "jobs", "--group", "workers", "--from-beginning",
                      "--count", "4", "--timeout", "20", bootstrap=b))
    assert out.splitlines() == ["job-0", "job-1", "job-2", "job-3"]

    listed, desc, plain = eddy_cli_parallel([
        ["group", "list", "-o", "json"],
        ["group", "describe", "workers", "-o", "json"],
        ["group", "describe", "workers"],
    ], bootstrap=b)
    assert {"group": "workers", "state": "Empty", "simple": False} in json_out(listed)
    d = json_out(desc)
    assert d["group"] == "workers" and d["state"] == "Empty" and d["members"] == []
    assert d["partitions"] == [{"topic": "jobs", "partition": 0, "committed": 4, "log_end": 10,
                                "lag": 6, "member_id": None, "client_id": None,
                                "host": None}]
    assert d["total_lag"] == 6
    header, row = ok(plain).splitlines()
    assert header.split("\t")[:5] == ["TOPIC", "PARTITION", "CURRENT-OFFSET",
                                      "LOG-END-OFFSET", "LAG"]
    assert row.split("\t")[:5] == ["jobs", "0", "4", "10", "6"]

    # the group resumes where it left off
    out = ok(eddy_cli("consume", "jobs", "-g", "workers", "-c", "2", "--timeout", "20",
                      bootstrap=b))
    assert out.splitlines() == ["job-4", "job-5"]
    assert committed(b, "workers") == {("jobs", 0): 6}

    # dry run (the default): prints the plan, changes nothing
    proc = eddy_cli("group", "reset-offsets", "workers", "--topic", "jobs", "--to-earliest",
                    bootstrap=b)
    header, row = ok(proc).splitlines()
    assert header.split("\t") == ["GROUP", "TOPIC", "PARTITION", "CURRENT-OFFSET", "NEW-OFFSET"]
    assert row.split("\t") == ["workers", "jobs", "0", "6", "0"]
    assert "dry run" in proc.stderr and "--execute" in proc.stderr
    plan = reset(b, "workers", "--topic", "jobs", "--shift-by", "-2")
    assert plan == {"group": "workers", "executed": False,
                    "partitions": [{"topic": "jobs", "partition": 0, "current": 6, "new": 4}]}
    assert committed(b, "workers") == {("jobs", 0): 6}

    # --execute changes the committed offsets; each strategy, clamped into the log
    def new(*args: str) -> int:
        result = reset(b, "workers", "--topic", "jobs", *args, "--execute")
        assert result["executed"] is True
        value: int = result["partitions"][0]["new"]
        assert committed(b, "workers") == {("jobs", 0): value}
        return value

    assert new("--to-earliest") == 0
    assert new("--shift-by", "3") == 3
    assert new("--to-offset", "100") == 10        # past the end: the log end
    assert new("--shift-by", "-100") == 0         # before the start: the log start
    assert new("--to-latest") == 10
    past = datetime.fromtimestamp(before_records - 3600, tz=UTC).isoformat()
    assert new("--to-datetime", past) == 0
    assert new("--to-datetime", "2999-01-01T00:00:00+00:00") == 10
    assert new("--to-offset", "7") == 7
    # the group reads from the offset it was given
    out = ok(eddy_cli("consume", "jobs", "-g", "workers", "-c", "3", "--timeout", "20",
                      bootstrap=b))
    assert out.splitlines() == ["job-7", "job-8", "job-9"]
    d = json_out(eddy_cli("group", "describe", "workers", "-o", "json", bootstrap=b))
    assert d["partitions"][0]["lag"] == 0

    # --all-topics: every topic the group has offsets for; TOPIC:PARTITIONS picks some
    assert [p["new"] for p in reset(b, "workers", "--all-topics", "--to-earliest")[
        "partitions"]] == [0]
    proc = eddy_cli("group", "reset-offsets", "workers", "--topic", "jobs:3", "--to-earliest",
                    bootstrap=b)
    assert proc.returncode == 1 and "partition 3 does not exist" in proc.stderr


def test_active_group_describe_refuses_reset_and_delete(eddy: EddyProcess) -> None:
    b = eddy.bootstrap
    create_topic(b, "feed", partitions=2)
    produce(b, "feed", [b"1", b"2", b"3", b"4"], keys=[b"a", b"b", b"c", b"d"])
    consumer = Consumer({"bootstrap.servers": b, "group.id": "live", "client.id": "live-client",
                         "auto.offset.reset": "earliest", "enable.auto.commit": False})
    try:
        consumer.subscribe(["feed"])
        deadline = time.monotonic() + 30
        seen = 0
        while time.monotonic() < deadline and (seen < 4 or not consumer.assignment()):
            msg = consumer.poll(0.2)
            if msg is not None and msg.error() is None:
                seen += 1
        assert seen == 4 and consumer.assignment()
        consumer.commit(asynchronous=False)

        desc_proc, reset_proc, dry_proc, delete_proc, topics, all_topics = eddy_cli_parallel([
            ["group", "describe", "live", "-o", "json"],
            ["group", "reset-offsets", "live", "--topic", "feed", "--to-earliest", "--execute"],
            ["group", "reset-offsets", "live", "--topic", "feed", "--to-earliest"],
            ["group", "delete", "live"],
            ["topic", "list"],
            ["topic", "list", "--all", "-o", "json"],
        ], bootstrap=b)
        # a default node is a cluster of one: committed offsets live in its offsets Raft
        # group, not in a topic (a node outside any cluster: see the next test)
        assert ok(topics).split() == ["feed"]
        internal = {t["name"]: t["internal"] for t in json_out(all_topics)}
        assert internal == {"feed": False}
        d = json_out(desc_proc)
        assert d["state"] == "Stable" and len(d["members"]) == 1
        member = d["members"][0]
        assert member["client_id"] == "live-client" and member["host"]
        assert sorted(p["partition"] for p in member["partitions"]) == [0, 1]
        rows = {p["partition"]: p for p in d["partitions"]}
        assert sorted(rows) == [0, 1]
        for r in rows.values():
            assert r["member_id"] == member["member_id"]
            assert r["committed"] == r["log_end"] and r["lag"] == 0
        assert sum(r["log_end"] for r in rows.values()) == 4

        assert reset_proc.returncode == 1
        assert "group 'live' is Stable with 1 member(s)" in reset_proc.stderr
        assert "stop its consumers" in reset_proc.stderr
        assert dry_proc.returncode == 0 and "stop them first" in dry_proc.stderr
        assert delete_proc.returncode == 1
        assert "group 'live' still has active members" in delete_proc.stderr
    finally:
        consumer.close()

    # once the member left: delete works, then the group is gone
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        state = json_out(eddy_cli("group", "describe", "live", "-o", "json", bootstrap=b))
        if state["state"] == "Empty":
            break
        time.sleep(0.2)
    assert "deleted group 'live'" in ok(eddy_cli("group", "delete", "live", bootstrap=b))
    gone_describe, gone_delete, listing = eddy_cli_parallel([
        ["group", "describe", "live"], ["group", "delete", "live"], ["group", "list"],
    ], bootstrap=b)
    for proc in (gone_describe, gone_delete):
        assert proc.returncode == 1
        assert "group 'live' does not exist; list groups with eddy group list" in proc.stderr
    assert "live" not in ok(listing).split()


def test_assignment_consumers_leave_no_group_behind(eddy: EddyProcess) -> None:
    b = eddy.bootstrap
    create_topic(b, "plain")
    produce(b, "plain", [b"x", b"y"])
    assert len(json_lines(eddy_cli("consume", "plain", "--from-beginning", "-e", "-o", "json",
                                   bootstrap=b))) == 2
    assert ok(eddy_cli("group", "list", bootstrap=b)).split() == []


def test_internal_topics_are_listed_only_with_all(eddy_factory: Any) -> None:
    """On a node outside any cluster, committed offsets live in __consumer_offsets, an
    internal topic: `topic list` hides it, `--all` shows it flagged."""
    b = eddy_factory("--set", "process.roles=broker").bootstrap
    create_topic(b, "feed", partitions=1)
    consumer = Consumer({"bootstrap.servers": b, "group.id": "g", "enable.auto.commit": False})
    try:
        consumer.commit(offsets=[TopicPartition("feed", 0, 1)], asynchronous=False)
    finally:
        consumer.close()
    topics, all_topics = eddy_cli_parallel([["topic", "list"],
                                            ["topic", "list", "--all", "-o", "json"]],
                                           bootstrap=b)
    assert ok(topics).split() == ["feed"]
    internal = {t["name"]: t["internal"] for t in json_out(all_topics)}
    assert internal == {"feed": False, "__consumer_offsets": True}
