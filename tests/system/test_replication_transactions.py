"""Exactly-once read-process-write across a leader failover (issue 14).

Three nodes (127.0.B.2-4), topics `in` and `out` of 3 partitions, replication factor 3,
min.insync.replicas=2. `in` holds INPUTS records. A transactional producer and a
read_committed consumer copy `in` to `out` in transactions of up to BATCH records, each
committing the consumer's offsets in the transaction; an output value names its input and
the transaction attempt that wrote it. Twice, the leader of `out`-0 is killed with SIGKILL
in the middle of a transaction (records sent, offsets added, not yet committed), then
restarted. An aborted transaction rewinds the consumer to the
committed offsets; a fatal error starts a new producer with the same transactional id.

Then a read_committed consumer reads `out` from the beginning: every input is there exactly
once, nothing of an aborted transaction shows, and the checker (replication_check) finds
nothing lost, duplicated or inconsistent among the committed transactions' records.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from functools import partial
from pathlib import Path
from typing import Any

from confluent_kafka import Consumer, KafkaError, KafkaException, Producer, TopicPartition
from replication_check import History, Write, check
from replication_cluster import Cluster, describe_all, wait_for
from replication_workload import Writer, read_all, watermarks

INPUTS = 600
BATCH = 20
PARTITIONS = 3
CONFIGS = {"min.insync.replicas": "2"}
STEP_S = 45.0  # the most one transaction may take (a failover included)


class Copier:
    """The read-process-write loop, with the outcome of every transaction."""

    def __init__(self, cluster: Cluster) -> None:
        self.cluster = cluster
        self.consumer = Consumer({
            "bootstrap.servers": cluster.bootstrap, "group.id": "copier",
            "isolation.level": "read_committed", "enable.auto.commit": False,
            "auto.offset.reset": "earliest"})
        self.consumer.assign([TopicPartition("in", p) for p in range(PARTITIONS)])
        self.producer = self._producer()
        self.attempt = 0
        self.committed: list[Write] = []  # output records of committed transactions
        self.doubtful: list[Write] = []  # of transactions aborted or of unknown outcome
        self.aborted: list[bytes] = []
        self.restarts = 0
        self._pending: list[Write] = []

    def _producer(self) -> Producer:
        p = Producer({"bootstrap.servers": self.cluster.bootstrap,
                      "transactional.id": "copier", "transaction.timeout.ms": 20000})
        p.init_transactions(60)
        return p

    def _report(self, err: KafkaError | None, msg: Any) -> None:
        if err is None:
            self._pending.append(Write(msg.value(), msg.key(), msg.partition(), msg.offset()))

    def progress(self) -> str:
        return (f"transactions {self.attempt}, committed records {len(self.committed)}, "
                f"aborted {len(self.aborted)}, new producers {self.restarts}")

    def done(self) -> bool:
        ends = {p: self.consumer.get_watermark_offsets(TopicPartition("in", p), timeout=10)[1]
                for p in range(PARTITIONS)}
        positions = self.consumer.position(
            [TopicPartition("in", p) for p in range(PARTITIONS)])
        return all(tp.offset >= ends[tp.partition] for tp in positions)

    def step(self, before_commit: Callable[[], None] | None = None) -> None:
        """One transaction of up to BATCH inputs; `before_commit` runs once its records were
        handed to the producer and the offsets added, just before the commit."""
        msgs = [m for m in self.consumer.consume(BATCH, 1.0) if m.error() is None]
        if not msgs:
            return
        self.attempt += 1
        self._pending = []
        values: list[bytes] = []
        try:
            self.producer.begin_transaction()
            for m in msgs:
                value = (m.value() or b"") + f"|t{self.attempt}".encode()
                values.append(value)
                self.producer.produce("out", key=m.key(), value=value,
                                      on_delivery=self._report)
            self.producer.send_offsets_to_transaction(
                self.consumer.position(self.consumer.assignment()),
                self.consumer.consumer_group_metadata(), 30)
            if before_commit is not None:
                before_commit()
            self._commit()
            self.committed += self._pending
        except KafkaException as exc:
            self.doubtful += [Write(v) for v in values]
            self._recover(exc.args[0], values)

    def _commit(self) -> None:
        for _ in range(10):  # bounded: a retriable error means try the commit again
            try:
                self.producer.commit_transaction(30)
                return
            except KafkaException as exc:
                if not exc.args[0].retriable():
                    raise
        raise AssertionError("commit_transaction kept failing with retriable errors")

    def _recover(self, err: KafkaError, values: list[bytes]) -> None:
        if err.txn_requires_abort():
            try:
                self.producer.abort_transaction(30)
                self.aborted += values
            except KafkaException:
                self.new_producer()
        else:
            self.new_producer()
        self._rewind()

    def new_producer(self) -> None:
        self.restarts += 1
        self.producer = self._producer()  # fences the old one, aborting what it left open

    def _rewind(self) -> None:
        committed = self.consumer.committed(
            [TopicPartition("in", p) for p in range(PARTITIONS)], timeout=30)
        for tp in committed:
            self.consumer.seek(TopicPartition("in", tp.partition, max(tp.offset, 0)))


def bounded(fn: Callable[[], None], seconds: float, what: str) -> None:
    """Run `fn` in a thread for at most `seconds` (a librdkafka call waiting for an answer
    that never comes does not return at its own timeout); re-raise what it raised."""
    failure: list[BaseException] = []

    def run() -> None:
        try:
            fn()
        except BaseException as exc:
            failure.append(exc)

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    thread.join(seconds)
    if thread.is_alive():
        raise AssertionError(f"{what}: still running after {seconds} s")
    if failure:
        raise failure[0]


def test_read_process_write_is_exactly_once_across_a_leader_failover(tmp_path: Path) -> None:
    cluster = Cluster(tmp_path)
    problems: list[str] = []
    try:
        cluster.start()
        cluster.create_topic("in", PARTITIONS, CONFIGS)
        cluster.create_topic("out", PARTITIONS, CONFIGS)
        writer = Writer(cluster.bootstrap, "in", INPUTS, 2000.0, tag="in").start()
        writer.join(60)
        assert len(writer.acked) == INPUTS, writer.errors
        copier = Copier(cluster)
        kills = [INPUTS // 5, INPUTS // 2]  # after this many inputs copied, kill
        deadline = time.monotonic() + 90
        try:
            while not copier.done() and time.monotonic() < deadline:
                bounded(copier.step, STEP_S, f"transaction {copier.attempt + 1}")
                if kills and len(copier.committed) >= kills[0]:
                    kills.pop(0)
                    victim = cluster.nodes[cluster.leader("out", 0)]
                    try:  # the commit goes through a failover
                        bounded(partial(copier.step, before_commit=victim.kill), STEP_S,
                                f"transaction {copier.attempt + 1} (leader of out-0 killed)")
                    finally:
                        victim.start(timeout=30)
                    # librdkafka keeps the killed node as the group coordinator of its
                    # TxnOffsetCommit after dropping the node (gone from Metadata), and the
                    # next send_offsets_to_transaction waits forever, past its timeout
                    # (librdkafka issues 5511 and 5456): a new producer asks afresh
                    copier.new_producer()
        except AssertionError as exc:  # stuck: check what was committed so far
            problems.append(f"{exc} ({copier.progress()})")
        if not problems and not copier.done():
            problems.append("the copy did not finish within 90 s")
        if kills:
            problems.append(f"only {2 - len(kills)} of 2 leader kills happened")
        print(copier.progress())
        try:
            wait_for(lambda: cluster.settled("out"), 30, "out: full ISRs")
        except AssertionError as exc:
            problems.append(f"{exc}: {describe_all(cluster, 'out')}")
        ends = watermarks(cluster.bootstrap, "out", PARTITIONS)
        reads = read_all(cluster.bootstrap, "out", ends)
        result = check(History(acked=copier.committed, unacked=copier.doubtful,
                               reads=[reads], aborted=copier.aborted))
        print(result.summary())
        if not result.ok:
            problems.append(result.summary())
        inputs: dict[bytes, int] = {}
        for r in reads:
            source = r.value.rsplit(b"|", 1)[0]
            inputs[source] = inputs.get(source, 0) + 1
        wanted = {w.value for w in writer.acked}
        twice = sorted(v for v, n in inputs.items() if n > 1)
        missing = sorted(wanted - set(inputs))
        if twice or missing:
            problems.append(f"inputs copied more than once: {len(twice)} {twice[:5]}; never "
                            f"copied: {len(missing)} {missing[:5]}")
    finally:
        cluster.stop()
    assert not problems, "\n".join(problems)
