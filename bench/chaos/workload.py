"""The harness's clients: an idempotent acks=all producer that journals what it was told
about every record, a transactional producer that journals each transaction's outcome, and
read_committed reads of a whole topic for the checks (bench.chaos.checks).

The writer sends record `seq` (value and key `<tag>-<seq>`) to partition `seq % partitions`,
at a fixed rate, so every partition gets a steady stream and the longest gap between two
acknowledgements of one partition is how long it could not take acks=all writes.
"""

from __future__ import annotations

import threading
import time
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

from confluent_kafka import (
    OFFSET_BEGINNING,
    Consumer,
    KafkaError,
    KafkaException,
    Producer,
    TopicPartition,
)


@dataclass(frozen=True, slots=True)
class Ack:
    """A record the producer was told is written: where, when sent and when acknowledged
    (monotonic seconds)."""

    seq: int
    partition: int
    offset: int
    sent: float
    acked: float


@dataclass(frozen=True, slots=True)
class Read:
    """One record a consumer returned."""

    partition: int
    offset: int
    value: bytes


@dataclass
class Journal:
    """What the idempotent producer was told: every acknowledgement, every failure, and
    every fatal error (each one fails the checks: a client-visible fatal error)."""

    tag: str
    partitions: int
    sent: list[float] = field(default_factory=list)  # seq -> send time
    acks: list[Ack] = field(default_factory=list)
    failed: dict[int, str] = field(default_factory=dict)  # seq -> error name
    fatal: list[str] = field(default_factory=list)
    producers: int = 0
    #: wall-clock time minus monotonic time (to name moments as the nodes' logs do)
    wall: float = field(default_factory=lambda: time.time() - time.monotonic())

    def value(self, seq: int) -> bytes:
        return f"{self.tag}-{seq}".encode()

    def seq_of(self, value: bytes) -> int | None:
        """The seq of one of this journal's values (None: not one)."""
        tag, _, seq = value.decode(errors="replace").rpartition("-")
        return int(seq) if tag == self.tag and seq.isdigit() else None

    def errors(self) -> dict[str, int]:
        return dict(Counter(self.failed.values()))

    def clock(self, t: float) -> str:
        """Monotonic time `t` as the wall-clock time of day (UTC, milliseconds)."""
        return time.strftime("%H:%M:%S", time.gmtime(t + self.wall)) + \
            f".{int((t + self.wall) % 1 * 1000):03d}"


def producer_conf(bootstrap: str) -> dict[str, Any]:
    return {"bootstrap.servers": bootstrap, "acks": "all", "enable.idempotence": True,
            "linger.ms": 5, "message.timeout.ms": 120000, "request.timeout.ms": 5000,
            "metadata.max.age.ms": 2000, "topic.metadata.refresh.interval.ms": 1000}


class Writer:
    """Writes to `topic` at `rate` records per second in a thread until stopped."""

    def __init__(self, bootstrap: str, topic: str, partitions: int, rate: float,
                 tag: str = "w") -> None:
        self.bootstrap, self.topic, self.rate = bootstrap, topic, rate
        self.journal = Journal(tag, partitions)
        self._stop = threading.Event()
        self._fatal = threading.Event()
        self.unknown = 0  # delivery reports of no record of ours
        self.crashed: str | None = None  # what ended the writer's thread early
        self._thread = threading.Thread(target=self._guarded, daemon=True,
                                        name=f"writer-{tag}")

    def start(self) -> Writer:
        self._thread.start()
        return self

    def stop(self, timeout: float = 150.0) -> None:
        """Send nothing more, wait for every delivery report."""
        self._stop.set()
        self._thread.join(timeout)
        if self._thread.is_alive():
            raise AssertionError(f"the producer did not finish within {timeout} s")

    def acked_per_partition(self) -> dict[int, int]:
        return dict(Counter(a.partition for a in self.journal.acks))

    def on_error(self, err: KafkaError) -> None:
        """error_cb (also called for a produce() that raised): a fatal error comes as the
        code _FATAL or with its fatal flag set; the producer is dead from then on."""
        if err.fatal() or err.code() == KafkaError._FATAL:
            self.journal.fatal.append(
                f"{err.name()}: {err.str()} (at {self.journal.clock(time.monotonic())})")
            self._fatal.set()

    def on_delivery(self, err: KafkaError | None, msg: Any) -> None:
        value = msg.value()
        seq = None if value is None else self.journal.seq_of(value)
        if seq is None:
            self.unknown += 1
            return
        if err is None:
            offset = msg.offset()
            self.journal.acks.append(Ack(seq, msg.partition(), -1 if offset is None else offset,
                                         self.journal.sent[seq], time.monotonic()))
        else:
            self.journal.failed[seq] = err.name()
            if err.code() == KafkaError._FATAL and not self._fatal.is_set():
                self.on_error(err)  # (in case error_cb has not told yet)

    def _producer(self) -> Producer:
        self.journal.producers += 1
        return Producer({**producer_conf(self.bootstrap), "error_cb": self.on_error})

    def _guarded(self) -> None:
        try:
            self._run()
        except BaseException as exc:
            self.crashed = f"the writer's thread died: {type(exc).__name__}: {exc}"

    def _run(self) -> None:
        j = self.journal
        p = self._producer()
        started = time.monotonic()
        while not self._stop.is_set():
            seq = len(j.sent)
            if self._fatal.is_set():  # the producer is dead: its records fail, a new one goes on
                p.flush(10)
                self._fatal.clear()
                p = self._producer()
            try:
                j.sent.append(time.monotonic())
                p.produce(self.topic, key=j.value(seq), value=j.value(seq),
                          partition=seq % j.partitions, on_delivery=self.on_delivery)
            except BufferError:
                j.sent.pop()
                p.poll(0.05)
                continue
            except KafkaException as exc:
                j.failed[seq] = exc.args[0].name()
                self.on_error(exc.args[0])
            p.poll(0)
            ahead = (seq + 1) / self.rate - (time.monotonic() - started)
            if ahead > 0:
                time.sleep(ahead)
        left = p.flush(120)
        if left:
            j.fatal.append(f"{left} records still in flight 120 s after the last was sent")


PAUSE_S = 0.05  # between two transactions


@dataclass(frozen=True, slots=True)
class Txn:
    """One transaction's values and what the producer was told: committed, aborted, or
    unknown (the call failed: all or nothing may show)."""

    values: tuple[bytes, ...]
    outcome: str


class TxnWriter:
    """Transactions of `size` records (spread over the partitions), every third one
    aborted on purpose, back to back in a thread until stopped."""

    def __init__(self, bootstrap: str, topic: str, partitions: int, size: int = 10,
                 tag: str = "x") -> None:
        self.bootstrap, self.topic, self.partitions, self.size = bootstrap, topic, partitions, size
        self.tag = tag
        self.txns: list[Txn] = []
        self.fatal: list[str] = []
        self.producers = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True, name=f"txn-{tag}")

    def start(self) -> TxnWriter:
        self._thread.start()
        return self

    def stop(self, timeout: float = 120.0) -> None:
        self._stop.set()
        self._thread.join(timeout)
        if self._thread.is_alive():
            raise AssertionError(f"the transactional producer was stuck in a call for over "
                                 f"{timeout} s ({len(self.txns)} transactions done)")

    def _producer(self) -> Producer:
        self.producers += 1
        p = Producer({"bootstrap.servers": self.bootstrap, "transactional.id": f"chaos-{self.tag}",
                      "transaction.timeout.ms": 30000, "message.timeout.ms": 30000,
                      "request.timeout.ms": 5000, "metadata.max.age.ms": 2000})
        p.init_transactions(60)
        return p

    def _run(self) -> None:
        p: Producer | None = None
        n = 0
        while not self._stop.is_set():
            if p is None:
                try:
                    p = self._producer()
                except KafkaException as exc:
                    self.fatal.append(f"init_transactions: {exc.args[0].name()}")
                    time.sleep(1.0)
                    continue
            n += 1
            values = tuple(f"{self.tag}{n}-{i}".encode() for i in range(self.size))
            abort = n % 3 == 0
            outcome = "unknown"
            try:
                p.begin_transaction()
                for i, v in enumerate(values):
                    p.produce(self.topic, key=v, value=v, partition=i % self.partitions)
                if abort:
                    p.abort_transaction(30)
                    outcome = "aborted"
                else:
                    p.commit_transaction(30)
                    outcome = "committed"
            except KafkaException as exc:
                err = exc.args[0]
                if err.fatal():
                    self.fatal.append(f"{err.name()}: {err.str()}")
                if err.txn_requires_abort() and not err.fatal():
                    try:
                        p.abort_transaction(30)
                        outcome = "aborted"
                    except KafkaException:
                        p = None
                else:
                    p = None  # a new producer with the same id fences this one
            self.txns.append(Txn(values, outcome))
            time.sleep(PAUSE_S)


def watermarks(bootstrap: str, topic: str, partitions: int) -> dict[int, int]:
    """partition -> high watermark."""
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": "chaos-wm",
                  "enable.auto.commit": False})
    try:
        return {p: int(c.get_watermark_offsets(TopicPartition(topic, p), timeout=20)[1])
                for p in range(partitions)}
    finally:
        c.close()


def read_all(bootstrap: str, topic: str, ends: dict[int, int],
             timeout: float = 60.0) -> list[Read]:
    """Every record a read_committed consumer returns from offset 0 until each partition
    reached its end offset in `ends` (or `timeout` passed), in poll order."""
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": "chaos-checker",
                  "enable.auto.commit": False, "isolation.level": "read_committed",
                  "enable.partition.eof": True, "fetch.wait.max.ms": 100})
    c.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in ends])
    reads: list[Read] = []
    done = {p for p, end in ends.items() if end == 0}
    deadline = time.monotonic() + timeout
    try:
        while len(done) < len(ends) and time.monotonic() < deadline:
            m: Any = c.poll(0.5)
            if m is None:
                continue
            if m.error() is not None:
                if m.error().code() == KafkaError._PARTITION_EOF and \
                        m.offset() >= ends[m.partition()]:
                    done.add(m.partition())
                continue
            reads.append(Read(m.partition(), m.offset(), m.value()))
            if m.offset() + 1 >= ends[m.partition()]:
                done.add(m.partition())
    finally:
        c.close()
    return reads
