"""A consumer group whose coordinator moves (issue 14).

Three nodes (each a broker and a metadata voter, on 127.0.B.2-4); consumer groups and their
committed offsets live in the `offsets` Raft group, whose leader is the group coordinator.
A topic of 3 partitions, replication factor 3, min.insync.replicas=2; an idempotent acks=all
producer writes keyed records with unique values at a few hundred per second throughout.
A group of two read_committed consumers (one thread each, auto commit off) polls small
batches and commits each batch's offsets synchronously, recording every record it saw, every
assignment it got and every commit that succeeded.

Twice, the group coordinator's node is killed with SIGKILL: another node must become the
coordinator and both consumers must commit again; then one consumer leaves and joins the
group again (a rebalance: every partition resumes from its committed offset, committed
partly through the dead coordinator) and both commit again; then the killed node restarts
and the cluster settles. The writer stops, the consumers drain the topic and stop, and:

- no acknowledged write is missing from what the group saw (at-least-once; a record seen
  twice is fine), and every (partition, offset) it saw holds the value a final full read
  finds there;
- within one assignment a consumer's offsets in a partition run contiguously (the writer
  is not transactional: no control records), and the first offset it reads after an
  assignment is the last offset the group committed before the assignment (committed
  offsets are never lost, rewound, or skipped);
- the successful commits of each partition, in the order they returned, never decrease,
  and the committed offsets read back at the end are the end offsets;
- the checker (replication_check.check) over the writer's history and full reads through
  two nodes finds nothing lost, duplicated or inconsistent;
- every replica of every partition holds the same bytes up to the high watermark.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from confluent_kafka import Consumer, KafkaError, KafkaException, TopicPartition
from kio.schema.find_coordinator.v4.request import FindCoordinatorRequest
from replication_check import History, Read, check
from replication_cluster import IDS, Cluster, back_to_three, converged, describe_all, wait_for
from replication_workload import Writer, read_all, watermarks

from eddy.client.raw import RawClient

TOPIC = "moving"
PARTITIONS = 3
GROUP = "movers"
RECORDS = 30000  # at most; the writer stops once the rounds are over
RATE = 300.0  # records per second
ROUNDS = 2
BATCH = 50  # records per poll (and per commit)


@dataclass(frozen=True, slots=True)
class Commit:
    """A synchronous commit that succeeded: when it returned, by whom, partition -> offset."""

    at: float
    member: str
    offsets: dict[int, int]


@dataclass(frozen=True, slots=True)
class Assigned:
    """An assignment a member got (its rebalance callback ran at `at`)."""

    at: float
    partitions: tuple[int, ...]


@dataclass
class Member:
    """One consumer of the group polling and committing in its own thread. `events` holds
    its assignments and the records it read, in order."""

    name: str
    bootstrap: str
    commits: list[Commit]  # shared by the group's members
    events: list[Assigned | Read] = field(default_factory=list)
    failed_commits: dict[str, int] = field(default_factory=dict)
    errors: dict[str, int] = field(default_factory=dict)
    assignment: set[int] = field(default_factory=set)
    crashed: list[BaseException] = field(default_factory=list)

    def __post_init__(self) -> None:
        self._stop = threading.Event()
        self._bounce = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True, name=self.name)

    def start(self) -> Member:
        self._thread.start()
        return self

    def halt(self) -> None:
        """Stop polling (the thread closes the consumer and ends)."""
        self._stop.set()

    def stop(self, timeout: float) -> None:
        self.halt()
        self._thread.join(timeout)
        assert not self._thread.is_alive(), f"{self.name} did not stop within {timeout} s"

    def reads(self) -> list[Read]:
        return [e for e in self.events if isinstance(e, Read)]

    def _on_assign(self, consumer: Any, partitions: list[TopicPartition]) -> None:
        self.assignment = {tp.partition for tp in partitions}
        self.events.append(Assigned(time.monotonic(), tuple(sorted(self.assignment))))

    def _on_revoke(self, consumer: Any, partitions: list[TopicPartition]) -> None:
        self.assignment -= {tp.partition for tp in partitions}

    def _count(self, into: dict[str, int], err: KafkaError) -> None:
        into[err.name()] = into.get(err.name(), 0) + 1

    def _run(self) -> None:
        try:
            self._loop()
        except BaseException as exc:  # reported by the test
            self.crashed.append(exc)

    def bounce(self) -> None:
        """Close the consumer and join the group again with a new one (a rebalance)."""
        self._bounce.set()

    def _loop(self) -> None:
        while not self._stop.is_set():
            self._bounce.clear()
            self._session()

    def _session(self) -> None:
        c = Consumer({
            "bootstrap.servers": self.bootstrap, "group.id": GROUP, "client.id": self.name,
            "enable.auto.commit": False, "isolation.level": "read_committed",
            "auto.offset.reset": "earliest", "session.timeout.ms": 10000,
            "heartbeat.interval.ms": 1000, "fetch.wait.max.ms": 100,
            "topic.metadata.refresh.interval.ms": 1000, "metadata.max.age.ms": 3000})
        c.subscribe([TOPIC], on_assign=self._on_assign, on_revoke=self._on_revoke,
                    on_lost=self._on_revoke)
        try:
            while not self._stop.is_set() and not self._bounce.is_set():
                msgs: list[Any] = c.consume(BATCH, 0.2)
                upto: dict[int, int] = {}
                for m in msgs:
                    if m.error() is not None:
                        self._count(self.errors, m.error())
                        continue
                    self.events.append(Read(m.partition(), m.offset(), m.key(), m.value()))
                    upto[m.partition()] = m.offset() + 1
                if upto:
                    self._commit(c, upto)
        finally:
            c.close()
            self.assignment = set()

    def _commit(self, c: Consumer, upto: dict[int, int]) -> None:
        try:
            done = c.commit(offsets=[TopicPartition(TOPIC, p, o) for p, o in upto.items()],
                            asynchronous=False)
        except KafkaException as exc:
            self._count(self.failed_commits, exc.args[0])
            return
        ok: dict[int, int] = {}
        for tp in done or []:
            if tp.error is not None:
                self._count(self.failed_commits, tp.error)
            else:
                ok[tp.partition] = tp.offset
        if ok:
            self.commits.append(Commit(time.monotonic(), self.name, ok))


def coordinator(cluster: Cluster, group: str) -> int:
    """The group's coordinator as FindCoordinator answers through the first live node that
    does (-1: none yet)."""
    for node in cluster.live():
        try:
            with RawClient(node.host, node.port, 5.0) as raw:
                answer = raw.call(FindCoordinatorRequest(key_type=0, coordinator_keys=(group,)))
        except OSError:
            continue
        (found,) = answer.coordinators
        return int(found.node_id) if found.error_code == 0 else -1
    return -1


def committed_since(commits: Sequence[Commit], since: float) -> set[str]:
    """The members that had a commit succeed after `since`."""
    return {c.member for c in commits if c.at > since}


def move_coordinator(cluster: Cluster, members: Sequence[Member],
                     commits: Sequence[Commit], bouncer: Member) -> str:
    """Kill the group coordinator's node, wait for another coordinator and for every member
    to commit again; then `bouncer` leaves and joins again (a rebalance: every partition
    resumes from its committed offset, committed through both coordinators) and every
    member commits again; restart the node and wait for the cluster to settle. Says what
    happened."""
    victim = coordinator(cluster, GROUP)
    assert victim in IDS, f"no group coordinator: {victim}"
    killed_at = time.monotonic()
    cluster.nodes[victim].kill()
    took = wait_for(lambda: coordinator(cluster, GROUP) not in (-1, victim), 30,
                    f"a group coordinator other than node {victim}")
    successor = coordinator(cluster, GROUP)
    names = {m.name for m in members}
    resumed = wait_for(lambda: committed_since(commits, killed_at) == names, 30,
                       "every member commits again after the coordinator was killed",
                       detail=lambda: {m.name: (sorted(m.assignment), m.failed_commits)
                                       for m in members})
    bounced_at = time.monotonic()
    bouncer.bounce()

    def rejoined_and_committed() -> bool:
        again = [e.at for e in bouncer.events if isinstance(e, Assigned) and e.at > bounced_at]
        return bool(again) and committed_since(commits, again[0]) == names

    rejoined = wait_for(rejoined_and_committed, 30,
                        f"every member commits again after {bouncer.name} rejoined",
                        detail=lambda: {m.name: (sorted(m.assignment), m.failed_commits)
                                        for m in members})
    cluster.nodes[victim].start(timeout=30)
    back_to_three(cluster, TOPIC, PARTITIONS)
    return (f"coordinator {victim} killed: node {successor} took over in {took:.1f} s, "
            f"every member committed again {resumed:.1f} s after the kill and "
            f"{rejoined:.1f} s after {bouncer.name} rejoined")


def assignment_problems(members: Sequence[Member], commits: Sequence[Commit]) -> list[str]:
    """Within an assignment a member's offsets of a partition are contiguous; the first one
    it reads after an assignment is the last offset committed before it (0: none). Exact
    under the eager protocol: a partition's holder commits in the thread that polls, so
    its last commit returned before it gave the partition up, hence before any member
    got the partition again; and a record is always there to read from that offset."""
    problems: list[str] = []
    for m in members:
        last: dict[int, int] = {}
        fresh: dict[int, float] = {}  # partition -> when it was (re)assigned, until read
        for e in m.events:
            if isinstance(e, Assigned):
                last = {p: o for p, o in last.items() if p in e.partitions}
                fresh.update((p, e.at) for p in e.partitions)
                continue
            p = e.partition
            if p in fresh:
                since = fresh.pop(p)
                floor = max((c.offsets[p] for c in commits if c.at < since and p in c.offsets),
                            default=0)
                if e.offset != floor:
                    problems.append(f"{m.name}: partition {p} assigned when offset {floor} "
                                    f"was committed, read from {e.offset}")
            elif p in last and e.offset != last[p] + 1:
                problems.append(f"{m.name}: partition {p} read {e.offset} after {last[p]} "
                                f"within one assignment")
            last[p] = e.offset
    return problems


def commit_order_problems(commits: Sequence[Commit]) -> list[str]:
    """A partition's successful commits, in the order they returned, never decrease."""
    problems: list[str] = []
    top: dict[int, Commit] = {}
    for c in sorted(commits, key=lambda c: c.at):
        for p, offset in c.offsets.items():
            prev = top.get(p)
            if prev is not None and offset < prev.offsets[p]:
                problems.append(f"partition {p}: {c.member} committed {offset} after "
                                f"{prev.member} committed {prev.offsets[p]}")
            if prev is None or offset >= prev.offsets[p]:
                top[p] = c
    return problems


def coverage_problems(acked: Sequence[Any], seen: Sequence[Read],
                      full: Sequence[Read]) -> list[str]:
    """Every acknowledged value was seen by the group; every (partition, offset) the group
    saw holds the same record in the full read."""
    problems: list[str] = []
    values = {r.value for r in seen}
    missing = [w for w in acked if w.value not in values]
    if missing:
        problems.append(f"{len(missing)} acknowledged records never seen by the group: "
                        + ", ".join(f"{w.value!r}@{w.partition}:{w.offset}"
                                    for w in missing[:5]))
    log = {(r.partition, r.offset): (r.key, r.value) for r in full}
    differ = [r for r in seen if log.get((r.partition, r.offset), (r.key, r.value))
              != (r.key, r.value)]
    if differ:
        problems.append(f"{len(differ)} records the group saw differ from the full read: "
                        + ", ".join(f"{r.value!r}@{r.partition}:{r.offset} (now "
                                    f"{log[(r.partition, r.offset)][1]!r})"
                                    for r in differ[:5]))
    return problems


def group_committed(bootstrap: str) -> dict[int, int]:
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": GROUP,
                  "enable.auto.commit": False})
    try:
        got = c.committed([TopicPartition(TOPIC, p) for p in range(PARTITIONS)], timeout=20)
        return {tp.partition: int(tp.offset) for tp in got}
    finally:
        c.close()


def test_consumer_group_follows_its_coordinator_across_kills(tmp_path: Path) -> None:
    cluster = Cluster(tmp_path)
    problems: list[str] = []
    commits: list[Commit] = []
    members: list[Member] = []
    try:
        cluster.start()
        cluster.create_topic(TOPIC, PARTITIONS, {"min.insync.replicas": "2"})
        writer = Writer(cluster.bootstrap, TOPIC, RECORDS, RATE).start()
        members = [Member(f"member-{i}", cluster.bootstrap, commits).start() for i in (1, 2)]
        try:
            wait_for(lambda: committed_since(commits, 0.0) == {m.name for m in members}, 30,
                     "both members assigned and committing",
                     detail=lambda: {m.name: (sorted(m.assignment), m.failed_commits,
                                              m.crashed) for m in members})
            for k in range(ROUNDS):
                said = move_coordinator(cluster, members, commits, members[k % 2])
                print(f"round {k}: {said}")
                time.sleep(1.0)
        except AssertionError as exc:  # stuck: check what we have
            problems.append(f"{exc}")
        finally:
            writer.stop()
            writer.join(90)
        try:
            wait_for(lambda: cluster.settled(TOPIC, PARTITIONS), 30, "full ISRs")
        except AssertionError as exc:
            problems.append(f"{exc}: {describe_all(cluster, TOPIC)}")
        ends = watermarks(cluster.bootstrap, TOPIC, PARTITIONS)

        def drained() -> bool:
            top = {p: max((c.offsets.get(p, 0) for c in commits), default=0)
                   for p in range(PARTITIONS)}
            return top == ends

        try:
            wait_for(drained, 30, f"the group committed the end offsets {ends}",
                     detail=lambda: {m.name: (sorted(m.assignment), m.failed_commits)
                                     for m in members})
        except AssertionError as exc:
            problems.append(f"{exc}")
        for m in members:
            m.stop(30)
            if m.crashed:
                problems.append(f"{m.name} crashed: {m.crashed[0]!r}")
        final = group_committed(cluster.bootstrap)
        if final != ends:
            problems.append(f"committed offsets read back {final} != end offsets {ends}")
        full = [read_all(n.bootstrap, TOPIC, ends) for n in (cluster.nodes[1], cluster.nodes[3])]
        result = check(History(acked=writer.acked, unacked=writer.unacked, reads=full))
        seen = [r for m in members for r in m.reads()]
        print(f"sent {writer.sent}, acked {len(writer.acked)}, producer errors "
              f"{writer.errors}, high watermarks {ends}; group read {len(seen)} records "
              f"({len({r.value for r in seen})} distinct), {len(commits)} commits; "
              + "; ".join(f"{m.name}: assignments "
                          f"{[e.partitions for e in m.events if isinstance(e, Assigned)]}, "
                          f"failed commits {m.failed_commits}, errors {m.errors}"
                          for m in members))
        print(result.summary())
        if not writer.acked:
            problems.append("no write was acknowledged")
        if not result.ok:
            problems.append(result.summary())
        problems += coverage_problems(writer.acked, seen, full[0])
        rebalances = min(sum(isinstance(e, Assigned) for e in m.events) for m in members)
        if rebalances < 1 + ROUNDS:
            problems.append(f"a member was assigned partitions {rebalances} times, not at "
                            f"least {1 + ROUNDS} (one rebalance a round)")
        problems += assignment_problems(members, commits)
        problems += commit_order_problems(commits)
        problems += converged(cluster, TOPIC, ends)
    finally:
        for m in members:
            m.halt()
        cluster.stop()
    assert not problems, "\n".join(problems)
