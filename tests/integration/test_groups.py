"""Consumer groups against a real broker with real clients (issue 3).

Each group member runs in its own process (tests/integration/group_member.py) so that it
can be SIGKILLed; it reports its assignments and records as JSON lines. Members commit each
record synchronously before reporting it, so "consumed exactly once" is checkable even
across a member's death or departure: every reported record is committed, and a partition
that moves resumes at the next record.

Every wait is bounded by a deadline; nothing asserts on how long anything took. Session
timeouts are short (group.min.session.timeout.ms is lowered per broker) and
group.initial.rebalance.delay.ms is 0, so the whole module runs in a couple of minutes.
"""

from __future__ import annotations

import contextlib
import json
import subprocess
import sys
import threading
import time
import uuid
from collections import Counter
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import (
    Consumer,
    ConsumerGroupState,
    ConsumerGroupTopicPartitions,
    KafkaError,
    KafkaException,
    Producer,
    TopicPartition,
)
from confluent_kafka.admin import AdminClient
from kafka_helpers import create_topic

WORKER = Path(__file__).resolve().parent / "group_member.py"

#: Broker settings of every test: no initial rebalance delay, sessions as short as 1 s.
FAST_GROUPS = ("--set", "group.initial.rebalance.delay.ms=0",
               "--set", "group.min.session.timeout.ms=1000")

#: librdkafka member settings: frequent heartbeats so members learn of a rebalance quickly.
CONFLUENT_FAST = {"heartbeat.interval.ms": 250, "session.timeout.ms": 6000}
#: ... and a short session, for the tests where a member dies without leaving.
CONFLUENT_SHORT_SESSION = {"heartbeat.interval.ms": 300, "session.timeout.ms": 2000}

OFFSET_INVALID = -1001


# ---- members in subprocesses -------------------------------------------------------------


class Member:
    """A group member process and the events it reported so far."""

    def __init__(self, name: str, spec: dict[str, Any], err_path: Path) -> None:
        self.name = name
        self.spec = spec
        self.err_path = err_path
        self._err = open(err_path, "w")  # noqa: SIM115 - closed in stop()
        self.proc = subprocess.Popen(
            [sys.executable, str(WORKER), json.dumps(spec)],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=self._err, text=True,
        )
        self.events: list[dict[str, Any]] = []
        self.eof = False
        self._lock = threading.Lock()
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            try:
                ev = json.loads(line)
            except ValueError:
                ev = {"ev": "junk", "line": line}
            with self._lock:
                self.events.append(ev)
        with self._lock:
            self.eof = True

    # -- views
    def snapshot(self, since: int = 0) -> list[dict[str, Any]]:
        with self._lock:
            return list(self.events[since:])

    def mark(self) -> int:
        with self._lock:
            return len(self.events)

    def assignment(self) -> frozenset[int] | None:
        """Partitions held now (None before the first assignment)."""
        for ev in reversed(self.snapshot()):
            if ev["ev"] in ("assign", "revoke", "lost"):
                return frozenset(ev["now"])
        return None

    def records(self, since: int = 0) -> list[tuple[int, int, str]]:
        return [(e["p"], e["o"], e["v"]) for e in self.snapshot(since) if e["ev"] == "msg"]

    def errors(self) -> list[dict[str, Any]]:
        return [e for e in self.snapshot() if e["ev"] in ("error", "crash", "commit_error")]

    def describe(self) -> str:
        evs = [e for e in self.snapshot() if e["ev"] != "msg"]
        n = len(self.records())
        err = ""
        with contextlib.suppress(OSError):
            err = self.err_path.read_text()[-1500:]
        return (f"member {self.name} (alive={self.alive()}, {n} records): "
                f"{json.dumps(evs[-12:])}\n  stderr: {err}")

    # -- control
    def alive(self) -> bool:
        return self.proc.poll() is None

    def close(self, timeout: float = 30.0) -> None:
        """Clean close (LeaveGroup for a dynamic member); waits for the process to exit."""
        if self.alive():
            try:
                assert self.proc.stdin is not None
                self.proc.stdin.write("close\n")
                self.proc.stdin.flush()
            except (BrokenPipeError, OSError):
                pass
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                raise AssertionError(f"member did not close in {timeout}s: "
                                     f"{self.describe()}") from None
        self._reader.join(10)
        assert any(e["ev"] == "closed" for e in self.snapshot()), self.describe()

    def kill(self) -> None:
        """SIGKILL: the member vanishes without leaving the group."""
        self.proc.kill()
        self.proc.wait()
        self._reader.join(10)

    def stop(self) -> None:
        if self.alive():
            self.proc.kill()
            self.proc.wait()
        self._err.close()


class Members:
    def __init__(self, tmp_path: Path) -> None:
        self.tmp_path = tmp_path
        self.all: list[Member] = []

    def start(self, client: str, bootstrap: str, group: str, topics: list[str],
              conf: dict[str, Any] | None = None, commit: str = "each",
              name: str | None = None) -> Member:
        name = name or f"{client}-{len(self.all)}"
        spec = {"client": client, "bootstrap": bootstrap, "group": group, "topics": topics,
                "conf": conf or {}, "commit": commit}
        m = Member(name, spec, self.tmp_path / f"member-{len(self.all)}-{name}.err")
        self.all.append(m)
        return m

    def describe(self) -> str:
        return "\n".join(m.describe() for m in self.all)


@pytest.fixture
def members(tmp_path: Path) -> Iterator[Members]:
    ms = Members(tmp_path)
    yield ms
    for m in ms.all:
        m.stop()


@pytest.fixture
def broker(eddy_factory: Any) -> Any:
    return eddy_factory(*FAST_GROUPS)


def wait_until(cond: Callable[[], Any], timeout: float, what: str,
               ms: Members | None = None) -> Any:
    """Poll cond until it is truthy; fail at the deadline, or at once when a member
    process crashed."""
    deadline = time.monotonic() + timeout
    while True:
        v = cond()
        if v:
            return v
        crashed = ms is not None and any(
            e["ev"] == "crash" for m in ms.all for e in m.snapshot())
        if crashed or time.monotonic() > deadline:
            why = "a member crashed" if crashed else f"timed out after {timeout}s"
            raise AssertionError(f"{why} waiting for {what}\n"
                                 f"{ms.describe() if ms is not None else ''}")
        time.sleep(0.05)


def split_of(ms: list[Member], partitions: int, per_member: int | None = None
             ) -> list[frozenset[int]] | None:
    """The members' assignments once they are disjoint, cover every partition and (if
    given) hold per_member partitions each; None until then."""
    got = [m.assignment() for m in ms]
    if any(a is None or not a for a in got):
        return None
    sets = [a for a in got if a is not None]
    if sum(len(a) for a in sets) != partitions or frozenset().union(*sets) != frozenset(
            range(partitions)):
        return None
    if per_member is not None and any(len(a) != per_member for a in sets):
        return None
    return sets


def wait_split(ms: list[Member], partitions: int, per_member: int | None, all_ms: Members,
               timeout: float = 45.0) -> list[frozenset[int]]:
    return wait_until(lambda: split_of(ms, partitions, per_member), timeout,
                      f"{len(ms)} members to split {partitions} partitions", all_ms)


# ---- topics and records ------------------------------------------------------------------


def new_topic(bootstrap: str, partitions: int) -> str:
    name = f"groups-{uuid.uuid4().hex[:10]}"
    create_topic(bootstrap, name, partitions)
    return name


def produce(bootstrap: str, topic: str, partitions: int, per_partition: int, tag: str
            ) -> set[tuple[int, str]]:
    """per_partition records to every partition; returns their (partition, value)."""
    p = Producer({"bootstrap.servers": bootstrap, "acks": "all", "linger.ms": 5,
                  "message.timeout.ms": 20000})
    errors: list[str] = []

    def cb(err: Any, msg: Any) -> None:
        if err is not None:
            errors.append(str(err))

    sent = set()
    for i in range(per_partition):
        for part in range(partitions):
            v = f"{tag}-{part}-{i}"
            p.produce(topic, value=v.encode(), partition=part, on_delivery=cb)
            sent.add((part, v))
    assert p.flush(30) == 0, "producer could not deliver everything"
    assert not errors, errors
    return sent


def consumed_values(ms: list[Member], marks: list[int] | None = None
                    ) -> Counter[tuple[int, str]]:
    c: Counter[tuple[int, str]] = Counter()
    for i, m in enumerate(ms):
        for p, _o, v in m.records(marks[i] if marks else 0):
            c[(p, v)] += 1
    return c


def wait_consumed(ms: list[Member], expected: set[tuple[int, str]], all_ms: Members,
                  marks: list[int] | None = None, timeout: float = 45.0) -> None:
    def done() -> bool:
        return expected <= set(consumed_values(ms, marks))

    wait_until(done, timeout, f"{len(expected)} records to be consumed", all_ms)


def assert_exactly_once(ms: list[Member], expected: set[tuple[int, str]],
                        marks: list[int] | None = None) -> None:
    got = consumed_values(ms, marks)
    dups = {k: n for k, n in got.items() if n > 1}
    assert not dups, f"records delivered more than once: {sorted(dups.items())[:10]}"
    assert set(got) == expected, (
        f"missing {sorted(expected - set(got))[:10]}, unexpected {sorted(set(got) - expected)[:10]}"
    )


def group_client_ok(ms: list[Member]) -> None:
    for m in ms:
        assert not m.errors(), m.describe()


# ---- (a) three members split six partitions --------------------------------------------------


def test_three_confluent_members_split_partitions_and_consume_once(broker: Any,
                                                                 members: Members) -> None:
    topic = new_topic(broker.bootstrap, 6)
    group = f"g-split-{uuid.uuid4().hex[:6]}"
    ms = [members.start("confluent", broker.bootstrap, group, [topic], CONFLUENT_FAST)
          for _ in range(3)]
    split = wait_split(ms, 6, 2, members)
    assert sorted(p for a in split for p in a) == list(range(6))

    sent = produce(broker.bootstrap, topic, 6, 40, "a")
    wait_consumed(ms, sent, members)
    for m in ms:
        m.close()
    # each member read only its own partitions, and every record once
    for m, parts in zip(ms, split, strict=True):
        assert {p for p, _o, _v in m.records()} <= parts, m.describe()
    assert_exactly_once(ms, sent)
    group_client_ok(ms)


# ---- (b) a member is killed: the others take over after the session timeout ---------------


def test_killed_member_partitions_move_to_survivors_after_session_timeout(
        broker: Any, members: Members) -> None:
    topic = new_topic(broker.bootstrap, 6)
    group = f"g-kill-{uuid.uuid4().hex[:6]}"
    ms = [members.start("confluent", broker.bootstrap, group, [topic],
                        CONFLUENT_SHORT_SESSION) for _ in range(3)]
    split = wait_split(ms, 6, 2, members)
    before = produce(broker.bootstrap, topic, 6, 20, "before")
    wait_consumed(ms, before, members)

    victim, survivors = ms[0], ms[1:]
    victim_parts = split[0]
    victim.kill()
    marks = [m.mark() for m in survivors]
    after = produce(broker.bootstrap, topic, 6, 20, "after")

    # the coordinator evicts the silent member when its 2 s session expires, the survivors
    # rejoin and share the six partitions, three each
    final = wait_split(survivors, 6, 3, members, timeout=45)
    assert victim_parts <= final[0] | final[1]
    wait_consumed(survivors, after, members, marks)
    for m in survivors:
        m.close()
    # every record produced after the kill read exactly once, none of the records committed
    # before it read again (the victim committed each record it reported)
    assert_exactly_once(survivors, after, marks)
    assert_exactly_once(ms, before | after)
    group_client_ok(survivors)


# ---- (c) cooperative-sticky: a fourth member joins incrementally ---------------------------


def test_cooperative_sticky_fourth_member_rebalances_incrementally(broker: Any,
                                                                 members: Members) -> None:
    topic = new_topic(broker.bootstrap, 6)
    group = f"g-coop-{uuid.uuid4().hex[:6]}"
    conf = {**CONFLUENT_FAST, "partition.assignment.strategy": "cooperative-sticky"}
    ms = [members.start("confluent", broker.bootstrap, group, [topic], conf)
          for _ in range(3)]
    split = wait_split(ms, 6, 2, members)
    first = produce(broker.bootstrap, topic, 6, 10, "first")
    wait_consumed(ms, first, members)
    marks = [m.mark() for m in ms]

    fourth = members.start("confluent", broker.bootstrap, group, [topic], conf)
    final = wait_split([*ms, fourth], 6, None, members)
    # the assignor balances 6 over 4 as 2/2/1/1
    assert sorted(len(a) for a in final) == [1, 1, 2, 2], final

    moved = 0
    for m, old, new, mark in zip(ms, split, final[:3], marks, strict=True):
        # incremental: an old member keeps what it does not give away, and is never left
        # with nothing in between (an eager rebalance revokes everything first)
        assert new <= old, f"{m.name}: had {sorted(old)}, now {sorted(new)}"
        moved += len(old - new)
        for ev in m.snapshot(mark):
            if ev["ev"] in ("revoke", "lost"):
                assert ev["ev"] == "revoke" and ev["now"], m.describe()
                assert set(ev["parts"]) <= old - new, m.describe()
            if ev["ev"] == "assign":
                assert not ev["parts"] or set(ev["parts"]) <= old, m.describe()
            assert ev.get("proto", "COOPERATIVE") == "COOPERATIVE", ev
    assert moved == len(final[3]), (split, final)

    second = produce(broker.bootstrap, topic, 6, 10, "second")
    everyone = [*ms, fourth]
    wait_consumed(everyone, second, members, [*marks, 0])
    for m in everyone:
        m.close()
    assert_exactly_once(everyone, first | second)
    group_client_ok(everyone)


# ---- (d) the same scenario with kafka-python and aiokafka ----------------------------------

PY_CLIENT_CONF = {
    # a long session: the remaining members can only take over quickly (well inside the
    # deadline below) if the departing member's LeaveGroup worked
    "kafka-python": {"session_timeout_ms": 30000, "heartbeat_interval_ms": 300},
    "aiokafka": {"session_timeout_ms": 30000, "heartbeat_interval_ms": 300},
}


@pytest.mark.parametrize("client", ["kafka-python", "aiokafka"])
def test_python_clients_join_split_leave(client: str, broker: Any, members: Members) -> None:
    topic = new_topic(broker.bootstrap, 6)
    group = f"g-{client}-{uuid.uuid4().hex[:6]}"
    ms = [members.start(client, broker.bootstrap, group, [topic], PY_CLIENT_CONF[client])
          for _ in range(3)]
    split = wait_split(ms, 6, 2, members)
    before = produce(broker.bootstrap, topic, 6, 20, "before")
    wait_consumed(ms, before, members)
    for m, parts in zip(ms, split, strict=True):
        assert {p for p, _o, _v in m.records()} <= parts, m.describe()
    assert_exactly_once(ms, before)

    leaver, stayers = ms[0], ms[1:]
    leaver.close()
    marks = [m.mark() for m in stayers]
    final = wait_split(stayers, 6, 3, members, timeout=20)
    assert split[0] <= final[0] | final[1]
    after = produce(broker.bootstrap, topic, 6, 20, "after")
    wait_consumed(stayers, after, members, marks)
    for m in stayers:
        m.close()
    assert_exactly_once(stayers, after, marks)
    assert_exactly_once(ms, before | after)
    group_client_ok(ms)


# ---- (e) committed offsets and metadata survive a restart and kill -9 --------------------


def _commit(bootstrap: str, group: str, offsets: list[TopicPartition]) -> None:
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": group,
                  "enable.auto.commit": False})
    try:
        res = c.commit(offsets=offsets, asynchronous=False)
        assert res is not None
        for tp in res:
            assert tp.error is None, tp
    finally:
        c.close()


def _committed(bootstrap: str, group: str, topic: str, partitions: int
               ) -> dict[int, tuple[int, str | None]]:
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": group,
                  "enable.auto.commit": False})
    try:
        deadline = time.monotonic() + 30
        while True:  # right after a restart the coordinator may still be coming up
            try:
                got = c.committed([TopicPartition(topic, p) for p in range(partitions)],
                                  timeout=10)
                break
            except KafkaException:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.2)
        for tp in got:
            assert tp.error is None, tp
        return {tp.partition: (tp.offset, tp.metadata) for tp in got}
    finally:
        c.close()


def test_committed_offsets_and_metadata_survive_restart_and_kill9(broker: Any) -> None:
    topic = new_topic(broker.bootstrap, 4)
    produce(broker.bootstrap, topic, 4, 5, "m")
    g1, g2 = f"g-meta1-{uuid.uuid4().hex[:6]}", f"g-meta2-{uuid.uuid4().hex[:6]}"
    metas = ["", "plain", "ünïcødé ✓ \u2603", json.dumps({"k": "v" * 1000, "n": [1, 2]})]
    first = {p: (p + 1, metas[p]) for p in range(4)}
    _commit(broker.bootstrap, g1, [TopicPartition(topic, p, o, metadata=md)
                                   for p, (o, md) in first.items()])
    assert _committed(broker.bootstrap, g1, topic, 4) == first

    broker.restart()  # clean: SIGTERM then start on the same data dir
    assert _committed(broker.bootstrap, g1, topic, 4) == first

    # newer commits to the same group (only some partitions), and another group
    second = {**first, 1: (4, "second commit"), 3: (5, "")}
    _commit(broker.bootstrap, g1, [TopicPartition(topic, p, second[p][0], metadata=second[p][1])
                                   for p in (1, 3)])
    other = {0: (3, "other group"), 1: (OFFSET_INVALID, ""), 2: (0, "zero"),
             3: (OFFSET_INVALID, "")}
    _commit(broker.bootstrap, g2, [TopicPartition(topic, p, o, metadata=md)
                                   for p, (o, md) in other.items() if o >= 0])
    broker.kill()  # SIGKILL: nothing flushed or closed on the way out
    broker.start()
    assert _committed(broker.bootstrap, g1, topic, 4) == second
    got2 = _committed(broker.bootstrap, g2, topic, 4)
    assert {p: v[0] for p, v in got2.items()} == {p: v[0] for p, v in other.items()}
    assert {p: got2[p][1] for p in (0, 2)} == {0: "other group", 2: "zero"}


@pytest.mark.parametrize("how", ["restart", "kill9"])
def test_group_membership_survives_broker_restart(how: str, broker: Any,
                                                  members: Members) -> None:
    """Kafka reloads a group's members and generation from __consumer_offsets and re-arms
    their session timers: members that come back within the session timeout carry on with
    the same member id and generation, without a rebalance."""
    topic = new_topic(broker.bootstrap, 4)
    group = f"g-survive-{uuid.uuid4().hex[:6]}"
    conf = {"heartbeat.interval.ms": 250, "session.timeout.ms": 10000}
    ms = [members.start("confluent", broker.bootstrap, group, [topic], conf)
          for _ in range(2)]
    split = wait_split(ms, 4, 2, members)
    first = produce(broker.bootstrap, topic, 4, 5, "first")
    wait_consumed(ms, first, members)
    marks = [m.mark() for m in ms]

    if how == "restart":
        broker.restart()
    else:
        broker.kill()
        broker.start()
    second = produce(broker.bootstrap, topic, 4, 5, "second")
    wait_consumed(ms, second, members, marks)
    # no revoke, no new assignment: the generation went on
    for m, mark, parts in zip(ms, marks, split, strict=True):
        evs = [e for e in m.snapshot(mark) if e["ev"] in ("assign", "revoke", "lost")]
        assert evs == [], m.describe()
        assert m.assignment() == parts
    for m in ms:
        m.close()
    assert_exactly_once(ms, first | second)


# ---- (f) consumption resumes exactly at the committed offsets --------------------------


def _group_consumer(bootstrap: str, group: str) -> Consumer:
    return Consumer({
        "bootstrap.servers": bootstrap, "group.id": group, "enable.auto.commit": False,
        "auto.offset.reset": "earliest", "fetch.wait.max.ms": 50,
        "heartbeat.interval.ms": 250, "session.timeout.ms": 6000,
    })


@pytest.mark.parametrize("how", ["restart", "kill9"])
def test_consumption_resumes_at_committed_offsets_after_restart(how: str, broker: Any) -> None:
    parts, per = 3, 40
    topic = new_topic(broker.bootstrap, parts)
    sent = produce(broker.bootstrap, topic, parts, per, "r")
    group = f"g-resume-{uuid.uuid4().hex[:6]}"

    c1 = _group_consumer(broker.bootstrap, group)
    c1.subscribe([topic])
    n = 50
    first: list[tuple[int, int, str]] = []
    deadline = time.monotonic() + 45
    while len(first) < n and time.monotonic() < deadline:
        m = c1.poll(0.2)
        if m is None:
            continue
        assert m.error() is None, m.error()
        first.append((m.partition(), m.offset(), m.value().decode()))
    assert len(first) == n, f"consumed only {len(first)} records"
    result = c1.commit(asynchronous=False)  # the positions of the records handed out
    c1.close()
    committed = {p: max(o for q, o, _ in first if q == p) + 1 for p in {q for q, _, _ in first}}
    assert result is not None
    assert {tp.partition: tp.offset for tp in result if tp.offset >= 0} == committed

    if how == "restart":
        broker.restart()
    else:
        broker.kill()
        broker.start()

    expected = {(p, o) for p in range(parts) for o in range(committed.get(p, 0), per)}
    c2 = _group_consumer(broker.bootstrap, group)
    c2.subscribe([topic])
    second: list[tuple[int, int, str]] = []
    deadline = time.monotonic() + 45
    try:
        while len(second) < len(expected) and time.monotonic() < deadline:
            m = c2.poll(0.2)
            if m is None:
                continue
            assert m.error() is None, m.error()
            second.append((m.partition(), m.offset(), m.value().decode()))
        # anything more that was about to arrive would be a re-delivery
        extra_deadline = time.monotonic() + 1.0
        while time.monotonic() < extra_deadline:
            m = c2.poll(0.1)
            if m is not None and m.error() is None:
                second.append((m.partition(), m.offset(), m.value().decode()))
    finally:
        c2.close()
    got = [(p, o) for p, o, _ in second]
    assert len(got) == len(set(got)), "re-delivered records"
    # no gap, no re-delivery: each partition continues at its committed offset
    for p in range(parts):
        offsets = [o for q, o in got if q == p]
        assert offsets == list(range(committed.get(p, 0), per)), (p, committed, offsets)
    assert set(got) == expected
    assert {(p, v) for p, _, v in first + second} == sent


# ---- (g) AdminClient ---------------------------------------------------------------------


def test_admin_client_group_operations(broker: Any, members: Members) -> None:
    from kafka import OffsetAndMetadata
    from kafka import TopicPartition as KTP
    from kafka.admin import KafkaAdminClient
    from kafka.errors import GroupSubscribedToTopicError, NoError

    bootstrap = broker.bootstrap
    topic = new_topic(bootstrap, 3)
    produce(bootstrap, topic, 3, 10, "adm")
    active = f"g-active-{uuid.uuid4().hex[:6]}"
    empty = f"g-empty-{uuid.uuid4().hex[:6]}"
    member = members.start("confluent", bootstrap, active, [topic], CONFLUENT_FAST)
    wait_split([member], 3, 3, members)
    wait_consumed([member], {(p, f"adm-{p}-{i}") for p in range(3) for i in range(10)},
                  members)
    _commit(bootstrap, empty, [TopicPartition(topic, p, 2 + p, metadata=f"md{p}")
                               for p in range(3)])
    admin = AdminClient({"bootstrap.servers": bootstrap})

    # list_consumer_groups, with and without a state filter
    listed = admin.list_consumer_groups(request_timeout=15).result(20)
    assert not listed.errors, listed.errors
    by_id = {g.group_id: g for g in listed.valid}
    assert by_id[active].state == ConsumerGroupState.STABLE
    assert by_id[empty].state == ConsumerGroupState.EMPTY
    assert not by_id[active].is_simple_consumer_group
    only_empty = admin.list_consumer_groups(
        states={ConsumerGroupState.EMPTY}, request_timeout=15).result(20)
    ids = {g.group_id for g in only_empty.valid}
    assert empty in ids and active not in ids

    # describe_consumer_groups
    desc = admin.describe_consumer_groups([active, empty], request_timeout=15)
    d_active = desc[active].result(20)
    assert d_active.state == ConsumerGroupState.STABLE
    assert d_active.partition_assignor in ("range", "roundrobin")
    assert len(d_active.members) == 1
    assigned = {(tp.topic, tp.partition) for tp in d_active.members[0].assignment.topic_partitions}
    assert assigned == {(topic, p) for p in range(3)}
    d_empty = desc[empty].result(20)
    assert d_empty.state == ConsumerGroupState.EMPTY
    assert d_empty.members == []

    # list_consumer_group_offsets: the member committed every record it read
    def offsets_of(group: str) -> dict[int, tuple[int, str | None]]:
        res = admin.list_consumer_group_offsets(
            [ConsumerGroupTopicPartitions(group, [TopicPartition(topic, p) for p in range(3)])],
            request_timeout=15)
        got = res[group].result(20)
        return {tp.partition: (tp.offset, tp.metadata) for tp in got.topic_partitions
                if tp.topic == topic}

    assert {p: o for p, (o, _) in offsets_of(active).items()} == {0: 10, 1: 10, 2: 10}
    assert offsets_of(empty) == {p: (2 + p, f"md{p}") for p in range(3)}

    # alter_consumer_group_offsets: fine on the empty group ...
    alt = admin.alter_consumer_group_offsets(
        [ConsumerGroupTopicPartitions(empty, [TopicPartition(topic, 0, 7, metadata="altered")])],
        request_timeout=15)
    alt[empty].result(20)
    assert offsets_of(empty)[0] == (7, "altered")
    # ... refused on a group with active members (Kafka: UNKNOWN_MEMBER_ID)
    alt = admin.alter_consumer_group_offsets(
        [ConsumerGroupTopicPartitions(active, [TopicPartition(topic, 0, 1)])],
        request_timeout=15)
    with pytest.raises(KafkaException) as exc_info:
        res = alt[active].result(20)
        for tp in res.topic_partitions:
            if tp.error is not None:
                raise KafkaException(tp.error)
    err = exc_info.value.args[0]
    assert err.code() == KafkaError.UNKNOWN_MEMBER_ID, err
    assert offsets_of(active)[0][0] == 10

    # delete offsets (OffsetDelete; confluent-kafka's AdminClient has no call for it)
    kadmin = KafkaAdminClient(bootstrap_servers=bootstrap, request_timeout_ms=15000)
    try:
        res = kadmin.delete_group_offsets(empty, [KTP(topic, 0)])
        assert res == {KTP(topic, 0): NoError}, res
        assert offsets_of(empty)[0][0] == OFFSET_INVALID
        assert offsets_of(empty)[1] == (3, "md1")
        # the active member is subscribed to the topic: its offsets cannot be deleted
        res = kadmin.delete_group_offsets(active, [KTP(topic, 1)])
        assert res == {KTP(topic, 1): GroupSubscribedToTopicError}, res
        # kafka-python's alter (OffsetCommit with generation -1) on the empty group, read
        # back with kafka-python: confluent-kafka (Python) sends its metadata strings with
        # their C terminator and reads them back as C strings, so it cannot read a metadata
        # string written by another client (librdkafka issue 4649, a client quirk)
        res = kadmin.alter_group_offsets(empty, {KTP(topic, 2): OffsetAndMetadata(9, "k", -1)})
        assert res == {KTP(topic, 2): NoError}, res
        listed_kp = kadmin.list_group_offsets({empty: None})[empty]
        assert listed_kp[KTP(topic, 2)] == OffsetAndMetadata(9, "k", -1), listed_kp
        assert KTP(topic, 0) not in listed_kp  # deleted above
        assert listed_kp[KTP(topic, 1)].offset == 3
    finally:
        kadmin.close()

    # delete_consumer_groups: NON_EMPTY_GROUP while the member is there, then success
    fut = admin.delete_consumer_groups([active], request_timeout=15)[active]
    with pytest.raises(KafkaException) as exc_info:
        fut.result(20)
    assert exc_info.value.args[0].code() == KafkaError.NON_EMPTY_GROUP
    member.close()  # LeaveGroup: the group becomes Empty
    for f in admin.delete_consumer_groups([active, empty], request_timeout=15).values():
        f.result(20)
    for g, f in admin.delete_consumer_groups([active, empty], request_timeout=15).items():
        with pytest.raises(KafkaException) as exc_info:
            f.result(20)  # deleted by the call just before
        assert exc_info.value.args[0].code() == KafkaError.GROUP_ID_NOT_FOUND, g
    listed = admin.list_consumer_groups(request_timeout=15).result(20)
    assert not {active, empty} & {g.group_id for g in listed.valid}
    # a deleted group's offsets are gone with it
    for g in (active, empty):
        assert all(o == OFFSET_INVALID for o, _ in offsets_of(g).values()), offsets_of(g)


# ---- (h) static membership -----------------------------------------------------------------

STATIC_CONF = {"heartbeat.interval.ms": 250, "session.timeout.ms": 10000}


def test_static_member_restart_keeps_partitions_without_rebalance(broker: Any,
                                                                  members: Members) -> None:
    topic = new_topic(broker.bootstrap, 6)
    group = f"g-static-{uuid.uuid4().hex[:6]}"
    ms = [members.start("confluent", broker.bootstrap, group, [topic],
                        {**STATIC_CONF, "group.instance.id": f"instance-{i}"}, name=f"s{i}")
          for i in range(3)]
    split = wait_split(ms, 6, 2, members)
    # a rebalance that was still settling would show up as later events: wait for quiet
    first = produce(broker.bootstrap, topic, 6, 5, "first")
    wait_consumed(ms, first, members)
    marks = [m.mark() for m in ms]

    # a rolling restart of instance-0: librdkafka sends no LeaveGroup for a static member,
    # the replacement joins with the same group.instance.id inside the session timeout
    ms[0].close()
    again = members.start("confluent", broker.bootstrap, group, [topic],
                          {**STATIC_CONF, "group.instance.id": "instance-0"}, name="s0-again")
    got = wait_until(lambda: again.assignment(), 30, "the restarted member's assignment",
                     members)
    assert got == split[0]
    second = produce(broker.bootstrap, topic, 6, 5, "second")
    everyone = [again, ms[1], ms[2]]
    wait_consumed(everyone, second, members, [0, marks[1], marks[2]])
    # the others were not rebalanced: no revoke, no new assignment
    for m, mark in zip(ms[1:], marks[1:], strict=True):
        evs = [e for e in m.snapshot(mark) if e["ev"] != "msg"]
        assert evs == [], m.describe()
    for m in everyone:
        m.close()
    assert_exactly_once([ms[0], *everyone], first | second)
    group_client_ok([ms[0], *everyone])


def test_duplicate_group_instance_id_fences_the_older_member(broker: Any,
                                                            members: Members) -> None:
    topic = new_topic(broker.bootstrap, 4)
    group = f"g-fence-{uuid.uuid4().hex[:6]}"
    conf = {**STATIC_CONF, "group.instance.id": "the-instance"}
    old = members.start("confluent", broker.bootstrap, group, [topic], conf, name="old")
    other = members.start("confluent", broker.bootstrap, group, [topic],
                          {**STATIC_CONF, "group.instance.id": "other-instance"}, name="other")
    split = wait_split([old, other], 4, 2, members)
    mark_other = other.mark()

    new = members.start("confluent", broker.bootstrap, group, [topic], conf, name="new")
    # the newer process takes over the instance's membership (and its partitions) ...
    got = wait_until(lambda: new.assignment(), 30, "the new member's assignment",
                     members)
    assert got == split[0]

    # ... and the older one is fenced: FENCED_INSTANCE_ID, fatal in librdkafka
    def fenced() -> list[dict[str, Any]]:
        # librdkafka raises a fatal error: error_cb gets code _FATAL, whose text names the
        # underlying error (rd_kafka_fatal_error(): FENCED_INSTANCE_ID)
        return [e for e in old.errors()
                if e["ev"] == "error" and (e["fatal"] or e["name"] == "_FATAL")]

    errs = wait_until(fenced, 30, "FENCED_INSTANCE_ID on the older member", members)
    assert any("Static consumer fenced by other consumer with same group.instance.id"
               in e["str"] for e in errs), errs
    assert not new.errors(), new.describe()
    # the other member was not rebalanced
    assert [e for e in other.snapshot(mark_other) if e["ev"] != "msg"] == [], other.describe()
    sent = produce(broker.bootstrap, topic, 4, 5, "x")
    wait_consumed([new, other], sent, members, [0, mark_other])
    for m in (new, other, old):
        m.close()
