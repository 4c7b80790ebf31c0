"""Transactions (KIP-98) against a real broker: librdkafka's read-process-write loop with
injected aborts, aiokafka's and kafka-python's transactional producers, kill -9 in the
middle of transactions, fencing of a zombie producer, and transaction timeouts."""

from __future__ import annotations

import asyncio
import contextlib
import threading
import time
import uuid
from collections import Counter

import pytest
from confluent_kafka import (
    OFFSET_BEGINNING,
    Consumer,
    KafkaError,
    KafkaException,
    Producer,
    TopicPartition,
)
from conftest import EddyProcess
from kafka_helpers import create_topic
from txn_helpers import (
    INVALID_TRANSACTION_TIMEOUT,
    NONE,
    RawClient,
    end_offsets,
    read_to_end,
    values_of,
)

FENCED_CODES = {KafkaError._FENCED, KafkaError.PRODUCER_FENCED,
                KafkaError.INVALID_PRODUCER_EPOCH}


@pytest.fixture(scope="module")
def eddy(module_eddy: EddyProcess) -> EddyProcess:
    """The module's one broker: every test here works on topics, groups and transactional
    ids of its own (those that kill a broker start their own)."""
    return module_eddy


def _txn_producer(bootstrap: str, txn_id: str, **extra: object) -> Producer:
    return Producer({
        "bootstrap.servers": bootstrap,
        "transactional.id": txn_id,
        "linger.ms": 5,
        "message.timeout.ms": 30_000,
        **extra,
    })


def _fill(bootstrap: str, topic: str, partitions: int, n: int) -> list[bytes]:
    """n numbered records round-robin over the partitions (a plain producer)."""
    p = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5, "acks": "all"})
    values = [b"%07d" % i for i in range(n)]
    deadline = time.monotonic() + 60
    for i, v in enumerate(values):
        while True:
            try:
                p.produce(topic, value=v, partition=i % partitions)
                break
            except BufferError:
                assert time.monotonic() < deadline, "the producer queue never drained"
                p.poll(0.05)
        if i % 5000 == 0:
            p.poll(0)
    assert p.flush(60) == 0
    return values


# ---- librdkafka: read-process-write with injected aborts -------------------------------------

EOS_RECORDS = 100_000
EOS_PER_TXN = 1_000
EOS_ABORT_EVERY = 7
IN_PARTS, OUT_PARTS = 4, 3


def test_confluent_read_process_write_exactly_once(eddy) -> None:  # type: ignore[no-untyped-def]
    """Consume the input, write one output record per input record and the consumed
    offsets in one transaction; every EOS_ABORT_EVERY-th transaction is aborted (after its
    records reached the log) and the consumer rewound to its committed offsets."""
    bs = eddy.bootstrap
    src, dst, group = "eos-in", "eos-out", "eos-group"
    create_topic(bs, src, IN_PARTS)
    create_topic(bs, dst, OUT_PARTS)
    inputs = _fill(bs, src, IN_PARTS, EOS_RECORDS)
    in_ends = end_offsets(bs, src, IN_PARTS, "read_uncommitted")
    assert sum(in_ends.values()) == EOS_RECORDS

    consumer = Consumer({
        "bootstrap.servers": bs,
        "group.id": group,
        "isolation.level": "read_committed",
        "auto.offset.reset": "earliest",
        "enable.auto.commit": False,
        "enable.partition.eof": False,
        "fetch.wait.max.ms": 50,
    })
    producer = _txn_producer(bs, "eos-loop")
    producer.init_transactions(30)
    consumer.subscribe([src])

    position: dict[int, int] = {}  # next input offset to process, per partition
    committed: dict[int, int] = {}  # the offsets of the last committed transaction
    txn_no = 0
    committed_txns: set[int] = set()
    aborted_txns: set[int] = set()
    written: Counter[int] = Counter()  # output records produced per transaction
    deadline = time.monotonic() + 150
    try:
        while any(committed.get(p, 0) < end for p, end in in_ends.items()):
            assert time.monotonic() < deadline, f"stuck at {committed} of {in_ends}"
            msgs = consumer.consume(EOS_PER_TXN, 0.5)
            if not msgs:
                continue
            for m in msgs:
                if m.error():
                    raise KafkaException(m.error())
            txn_no += 1
            producer.begin_transaction()
            for m in msgs:
                assert m.offset() == position.get(m.partition(), 0), "a gap or a repeat"
                producer.produce(dst, key=b"%d:%d" % (m.partition(), m.offset()),
                                 value=b"%d|" % txn_no + m.value(),
                                 partition=m.offset() % OUT_PARTS)
                position[m.partition()] = m.offset() + 1
            written[txn_no] = len(msgs)
            producer.send_offsets_to_transaction(
                [TopicPartition(src, p, o) for p, o in position.items()],
                consumer.consumer_group_metadata(), 30)
            if txn_no % EOS_ABORT_EVERY == 0:
                producer.flush(30)  # the records are in the log before the abort
                producer.abort_transaction(30)
                aborted_txns.add(txn_no)
                # rewind to the committed offsets, which the abort left untouched
                assignment = consumer.assignment()
                got = {tp.partition: tp.offset
                       for tp in consumer.committed(assignment, timeout=30)}
                assert got == {tp.partition: committed.get(tp.partition, -1001)
                               for tp in assignment}
                for tp in assignment:
                    off = got[tp.partition]
                    consumer.seek(TopicPartition(src, tp.partition,
                                                 off if off >= 0 else OFFSET_BEGINNING))
                    position[tp.partition] = max(off, 0)
            else:
                producer.commit_transaction(30)
                committed_txns.add(txn_no)
                committed = dict(position)
    finally:
        consumer.close()


    assert len(aborted_txns) >= EOS_RECORDS // EOS_PER_TXN // EOS_ABORT_EVERY

    # the group's committed offsets are the input's end offsets
    check = Consumer({"bootstrap.servers": bs, "group.id": group})
    try:
        final = check.committed([TopicPartition(src, p) for p in range(IN_PARTS)], timeout=30)
        assert {tp.partition: tp.offset for tp in final} == in_ends
    finally:
        check.close()

    # read_committed: every input record exactly once, only from committed transactions
    out, ends = read_to_end(bs, dst, OUT_PARTS, "read_committed", timeout=90)
    keys: Counter[bytes] = Counter()
    for recs in out.values():
        for _, key, value in recs:
            assert key is not None and value is not None
            txn, payload = value.split(b"|", 1)
            assert int(txn) in committed_txns, f"{key!r} from aborted transaction {txn!r}"
            p, o = (int(x) for x in key.split(b":"))
            assert payload == inputs[o * IN_PARTS + p]
            keys[key] += 1
    assert sum(keys.values()) == EOS_RECORDS
    assert len(keys) == EOS_RECORDS, "some input records were written twice"

    # read_uncommitted: the aborted transactions' records are there too
    raw, raw_ends = read_to_end(bs, dst, OUT_PARTS, "read_uncommitted", timeout=90)
    by_txn = Counter(int(v.split(b"|", 1)[0]) for v in values_of(raw))
    assert {t: by_txn[t] for t in aborted_txns} == {t: written[t] for t in aborted_txns}
    assert sum(by_txn.values()) == sum(written.values())
    # no transaction is open: the last stable offset is the high watermark
    assert ends == raw_ends
    assert end_offsets(bs, dst, OUT_PARTS, "read_committed") == raw_ends


# ---- aiokafka and kafka-python transactional producers ---------------------------------------


def _check_outcome(bs: str, topic: str, partitions: int, committed: set[bytes],
                   aborted: set[bytes]) -> None:
    out, _ = read_to_end(bs, topic, partitions, "read_committed")
    seen = Counter(values_of(out))
    assert set(seen) == committed, (
        f"missing {sorted(committed - set(seen))[:5]}, unexpected "
        f"{sorted(set(seen) - committed)[:5]}")
    assert all(c == 1 for c in seen.values())
    raw, _ = read_to_end(bs, topic, partitions, "read_uncommitted")
    assert Counter(values_of(raw)) == Counter(committed | aborted)


def _group_metadata(bs: str, group: str):  # type: ignore[no-untyped-def]
    """The group metadata of a consumer of `group` that never joins (generation -1)."""
    c = Consumer({"bootstrap.servers": bs, "group.id": group})
    try:
        return c.consumer_group_metadata()
    finally:
        c.close()


def _group_offsets(bs: str, group: str, topic: str, partitions: int) -> dict[int, int]:
    c = Consumer({"bootstrap.servers": bs, "group.id": group})
    try:
        got = c.committed([TopicPartition(topic, p) for p in range(partitions)], timeout=30)
        return {tp.partition: tp.offset for tp in got}
    finally:
        c.close()


def test_aiokafka_transactional_producer(eddy) -> None:  # type: ignore[no-untyped-def]
    from aiokafka import AIOKafkaProducer
    from aiokafka.structs import TopicPartition as ATP

    bs, topic, group, parts = eddy.bootstrap, "aio-txn", "aio-group", 3
    create_topic(bs, topic, parts)
    committed: set[bytes] = set()
    aborted: set[bytes] = set()

    async def run() -> None:
        p = AIOKafkaProducer(bootstrap_servers=bs, transactional_id="aio-txn-id",
                             enable_idempotence=True, request_timeout_ms=30_000)
        await p.start()
        try:
            for t in range(12):
                vals = [f"aio-{t}-{i}".encode() for i in range(30)]
                await p.begin_transaction()
                for i, v in enumerate(vals):
                    await p.send_and_wait(topic, v, partition=i % parts)  # in the log
                await p.send_offsets_to_transaction({ATP("aio-src", 0): (t + 1) * 10}, group)
                if t % 3 == 1:
                    await p.abort_transaction()
                    aborted.update(vals)
                else:
                    await p.commit_transaction()
                    committed.update(vals)
            async with p.transaction():  # the context manager commits
                await p.send_and_wait(topic, b"aio-last", partition=0)
            committed.add(b"aio-last")
        finally:
            await p.stop()

    create_topic(bs, "aio-src", 1)
    asyncio.run(asyncio.wait_for(run(), 120))
    _check_outcome(bs, topic, parts, committed, aborted)
    # the offsets of the last committed transaction (t = 11), not of the aborted t = 10
    assert _group_offsets(bs, group, "aio-src", 1) == {0: 120}


@pytest.mark.filterwarnings("ignore::DeprecationWarning")  # kafka-python's importlib use
def test_kafka_python_transactional_producer(eddy) -> None:  # type: ignore[no-untyped-def]
    from kafka import KafkaProducer
    from kafka.structs import OffsetAndMetadata
    from kafka.structs import TopicPartition as KTP

    bs, topic, group, parts = eddy.bootstrap, "kp-txn", "kp-group", 2
    create_topic(bs, topic, parts)
    create_topic(bs, "kp-src", 1)
    committed: set[bytes] = set()
    aborted: set[bytes] = set()
    p = KafkaProducer(bootstrap_servers=bs, transactional_id="kp-txn-id",
                      enable_idempotence=True, request_timeout_ms=30_000)
    try:
        p.init_transactions()
        for t in range(9):
            vals = [f"kp-{t}-{i}".encode() for i in range(25)]
            p.begin_transaction()
            for i, v in enumerate(vals):
                p.send(topic, v, partition=i % parts)
            p.flush(30)  # in the log before the commit or abort
            p.send_offsets_to_transaction(
                {KTP("kp-src", 0): OffsetAndMetadata((t + 1) * 7, "", -1)}, group)
            if t % 4 == 2:
                p.abort_transaction()
                aborted.update(vals)
            else:
                p.commit_transaction()
                committed.update(vals)
    finally:
        p.close(timeout=10)
    _check_outcome(bs, topic, parts, committed, aborted)
    assert _group_offsets(bs, group, "kp-src", 1) == {0: 63}


# ---- kill -9 in the middle of transactions ---------------------------------------------------


def test_kill9_in_the_middle_of_transactions(eddy_factory) -> None:  # type: ignore[no-untyped-def]
    eddy = eddy_factory()  # a broker of its own: the test kills it
    bs, topic, parts, src, group = eddy.bootstrap, "crash-txn", 3, "crash-src", "crash-group"
    create_topic(bs, topic, parts)
    create_topic(bs, src, 1)
    committed: set[bytes] = set()
    aborted: set[bytes] = set()

    def send(p: Producer, tag: str, n: int = 40) -> set[bytes]:
        vals = {f"{tag}-{i}".encode() for i in range(n)}
        for i, v in enumerate(sorted(vals)):
            p.produce(topic, value=v, partition=i % parts)
        return vals

    def offsets(p: Producer, offset: int) -> None:
        p.send_offsets_to_transaction([TopicPartition(src, 0, offset)],
                                      _group_metadata(bs, group), 30)

    p1 = _txn_producer(bs, "crash-a")
    p1.init_transactions(30)
    last_committed_offset = -1
    for t in range(8):
        p1.begin_transaction()
        vals = send(p1, f"a{t}")
        offsets(p1, t + 1)
        if t % 3 == 1:
            p1.flush(30)
            p1.abort_transaction(30)
            aborted |= vals
        else:
            p1.commit_transaction(30)
            committed |= vals
            last_committed_offset = t + 1
    # an open transaction, records and offsets in the logs, when the broker dies
    p1.begin_transaction()
    in_flight = send(p1, "open")
    offsets(p1, 1000)
    assert p1.flush(30) == 0

    # and another producer committing at the very moment of the kill: all or nothing
    p2 = _txn_producer(bs, "crash-b", **{"transaction.timeout.ms": 60_000})
    p2.init_transactions(30)
    p2.begin_transaction()
    racing = send(p2, "race", 200)
    assert p2.flush(30) == 0
    outcome: list[str] = []

    def commit() -> None:
        try:
            p2.commit_transaction(20)
            outcome.append("committed")
        except KafkaException as exc:
            outcome.append(f"failed: {exc}")

    t = threading.Thread(target=commit)
    t.start()
    eddy.kill()
    eddy.start()
    t.join(60)
    assert not t.is_alive()
    # p1 and p2 are zombies from here on: neither is used again. Under load p2's commit may
    # not have reached the broker before the kill: its transaction is then still open after
    # the restart and holds every partition's last stable offset below the records that
    # follow (read_committed sees none of them) until transaction.timeout.ms aborts it. A
    # new instance of p2's transactional id settles it at once, as a Kafka user would: a
    # prepared commit is completed, an ongoing transaction is aborted
    _txn_producer(bs, "crash-b").init_transactions(30)

    # a new producer with the same transactional id takes over and commits
    p3 = _txn_producer(bs, "crash-a")
    p3.init_transactions(30)
    p3.begin_transaction()
    after = send(p3, "after")
    p3.commit_transaction(30)
    committed |= after

    def check() -> None:
        out, ends = read_to_end(bs, topic, parts, "read_committed")
        seen = Counter(values_of(out))
        assert all(c == 1 for c in seen.values()), "a record is there twice"
        got = set(seen)
        assert committed <= got, (
            f"lost committed records: {sorted(committed - got)[:5]} (p2: {outcome})")
        assert not got & (aborted | in_flight), "aborted or unfinished records are visible"
        race_seen = got & racing
        assert race_seen in (set(), racing), (
            f"{len(race_seen)} of {len(racing)} records of one transaction visible")
        if outcome == ["committed"]:
            assert race_seen == racing
        assert got == committed | race_seen

        # everything was written; read_committed only hides it, and no transaction is open
        raw, raw_ends = read_to_end(bs, topic, parts, "read_uncommitted")
        assert Counter(values_of(raw)) == Counter(committed | aborted | in_flight | racing)
        assert ends == raw_ends
        # the offsets of the last committed transaction, not of the aborted open one
        assert _group_offsets(bs, group, src, 1) == {0: last_committed_offset}

    check()
    eddy.restart()  # a clean restart: the same answers from the snapshots
    check()


def test_producer_continuing_its_transaction_across_kill9(eddy_factory) -> None:  # type: ignore[no-untyped-def]
    """The broker dies while a live producer has a transaction open; the producer goes on
    with it after the restart. Kafka keeps such a transaction open (the producer then
    commits it whole); a broker that aborts it instead must fence the producer (bump the
    epoch) so that what it sends next is refused. Either way the transaction is all or
    nothing, and no partition is left with a transaction nobody will ever end."""
    eddy = eddy_factory()  # a broker of its own: the test kills it
    bs, topic = eddy.bootstrap, "crash-continue"
    create_topic(bs, topic, 2)
    p = _txn_producer(bs, "continue-id", **{"transaction.timeout.ms": 5_000,
                                            "message.timeout.ms": 5_000})
    p.init_transactions(30)
    p.begin_transaction()
    before = {b"before-%d" % i for i in range(10)}
    for i, v in enumerate(sorted(before)):
        p.produce(topic, value=v, partition=i % 2)
    assert p.flush(30) == 0

    eddy.kill()
    eddy.start()

    after = {b"after-%d" % i for i in range(10)}
    try:
        for i, v in enumerate(sorted(after)):
            p.produce(topic, value=v, partition=i % 2)
        p.flush(30)
        p.commit_transaction(30)
        outcome = "committed"
    except KafkaException:
        outcome = "failed"

    # nothing is left open: the last stable offset reaches the high watermark (at the
    # latest once the transaction timeout has passed)
    deadline = time.monotonic() + 20
    while (end_offsets(bs, topic, 2, "read_committed")
           != end_offsets(bs, topic, 2, "read_uncommitted")):
        assert time.monotonic() < deadline, (
            f"a transaction hangs: read_committed ends at "
            f"{end_offsets(bs, topic, 2, 'read_committed')}, the log at "
            f"{end_offsets(bs, topic, 2, 'read_uncommitted')} (commit {outcome})")
        time.sleep(0.2)
    out, _ = read_to_end(bs, topic, 2, "read_committed")
    visible = set(values_of(out))
    assert visible == (before | after if outcome == "committed" else set()), (
        f"commit {outcome}, visible: {sorted(visible)}")

    # the next producer with this transactional id commits; still nothing of the old one
    # becomes visible unless it was committed
    q = _txn_producer(bs, "continue-id")
    q.init_transactions(30)
    q.begin_transaction()
    q.produce(topic, value=b"next", partition=0)
    q.commit_transaction(30)
    out, _ = read_to_end(bs, topic, 2, "read_committed")
    assert set(values_of(out)) == visible | {b"next"}, (
        f"commit {outcome}, visible after the next producer's commit: "
        f"{sorted(set(values_of(out)))}")


# ---- fencing ---------------------------------------------------------------------------------


@pytest.mark.parametrize("first_state", ["open-transaction", "between-transactions"])
def test_second_producer_fences_the_first(eddy, first_state: str) -> None:  # type: ignore[no-untyped-def]
    bs, topic = eddy.bootstrap, f"fence-{first_state}"
    create_topic(bs, topic, 2)
    txn_id = f"fence-id-{first_state}"
    first = _txn_producer(bs, txn_id)
    first.init_transactions(30)
    first.begin_transaction()
    first.produce(topic, value=b"first-committed", partition=0)
    first.commit_transaction(30)
    zombie = [b"zombie-0", b"zombie-1"]
    if first_state == "open-transaction":
        first.begin_transaction()
        for i, v in enumerate(zombie):
            first.produce(topic, value=v, partition=i % 2)
        assert first.flush(30) == 0

    second = _txn_producer(bs, txn_id)
    second.init_transactions(30)  # bumps the epoch; aborts the first one's transaction

    with pytest.raises(KafkaException) as info:
        if first_state == "between-transactions":
            first.begin_transaction()
            for i, v in enumerate(zombie):
                first.produce(topic, value=v, partition=i % 2)
        first.commit_transaction(30)
    err = info.value.args[0]
    assert err.fatal(), f"not fatal: {err}"
    assert err.code() in FENCED_CODES, err
    with pytest.raises(KafkaException):
        first.begin_transaction()  # a fenced producer can do nothing more

    second.begin_transaction()
    second.produce(topic, value=b"second", partition=1)
    second.commit_transaction(30)

    out, _ = read_to_end(bs, topic, 2, "read_committed")
    assert sorted(values_of(out)) == [b"first-committed", b"second"]


# ---- transaction timeouts --------------------------------------------------------------------


def test_transaction_timeout_above_the_maximum_is_refused(eddy_factory) -> None:  # type: ignore[no-untyped-def]
    broker = eddy_factory("--set", "transaction.max.timeout.ms=5000")
    too_long = _txn_producer(broker.bootstrap, "too-long", **{
        "transaction.timeout.ms": 10_000, "message.timeout.ms": 5_000})
    with pytest.raises(KafkaException) as info:
        too_long.init_transactions(30)
    assert info.value.args[0].code() == KafkaError.INVALID_TRANSACTION_TIMEOUT

    # at the maximum it is fine
    ok = _txn_producer(broker.bootstrap, "at-max", **{
        "transaction.timeout.ms": 5_000, "message.timeout.ms": 5_000})
    ok.init_transactions(30)

    rc = RawClient(broker.port)
    try:
        assert rc.init_producer_id("raw-too-long", 5_001)[0] == INVALID_TRANSACTION_TIMEOUT
        assert rc.init_producer_id("raw-at-max", 5_000)[0] == NONE
    finally:
        rc.close()


TIMEOUT_MS = 4_000


def _time_out_a_transaction(bs: str, topic: str) -> tuple[Producer, list[bytes]]:
    """A transaction with 20 records in partition 0 (then a plain record after them), left
    open until the broker aborts it; returns its producer and records."""
    create_topic(bs, topic, 1)
    stuck = _txn_producer(bs, f"stuck-{uuid.uuid4().hex[:6]}", **{
        "transaction.timeout.ms": TIMEOUT_MS, "message.timeout.ms": TIMEOUT_MS})
    stuck.init_transactions(30)
    stuck.begin_transaction()
    hung = [b"hung-%d" % i for i in range(20)]
    for v in hung:
        stuck.produce(topic, value=v, partition=0)
    assert stuck.flush(30) == 0
    opened = time.monotonic()

    plain = Producer({"bootstrap.servers": bs, "acks": "all"})
    plain.produce(topic, value=b"after", partition=0)
    assert plain.flush(30) == 0

    lso = end_offsets(bs, topic, 1, "read_committed")[0]
    hwm = end_offsets(bs, topic, 1, "read_uncommitted")[0]
    assert hwm == len(hung) + 1
    if time.monotonic() - opened < TIMEOUT_MS / 2000:
        # still open: read_committed (ListOffsets latest included) stops before its first
        # record
        assert lso == 0

    # the broker aborts it: the last stable offset moves past the marker
    deadline = time.monotonic() + 60
    while end_offsets(bs, topic, 1, "read_committed")[0] < len(hung) + 2:
        assert time.monotonic() < deadline, "the timed-out transaction was never aborted"
        time.sleep(0.2)
    out, ends = read_to_end(bs, topic, 1, "read_committed")
    assert values_of(out) == [b"after"]
    assert ends[0] == len(hung) + 2  # the records, "after", the abort marker
    return stuck, hung


def test_open_transaction_is_aborted_after_its_timeout(eddy) -> None:  # type: ignore[no-untyped-def]
    stuck, hung = _time_out_a_transaction(eddy.bootstrap, "txn-timeout")
    raw, _ = read_to_end(eddy.bootstrap, "txn-timeout", 1, "read_uncommitted")
    assert values_of(raw) == [*hung, b"after"]
    # the producer's transaction is gone: it cannot commit it
    with pytest.raises(KafkaException):
        stuck.commit_transaction(30)


def test_timed_out_producer_is_fenced(eddy) -> None:  # type: ignore[no-untyped-def]
    """The producer does not know its transaction timed out and goes on with it. Kafka
    aborts a timed-out transaction with a bumped epoch (its abort markers carry it), so
    whatever the producer sends next with its old epoch is refused and its commit fails;
    no transaction is left open that nobody will ever end."""
    bs, topic = eddy.bootstrap, "txn-timeout-fenced"
    stuck, _ = _time_out_a_transaction(bs, topic)
    late_errors: list[object] = []
    for i in range(5):
        stuck.produce(topic, value=b"late-%d" % i, partition=0,
                      on_delivery=lambda err, _m: late_errors.append(err))
    with contextlib.suppress(KafkaException, SystemError):
        # the producer is fenced: confluent-kafka may raise its fatal error from inside the
        # delivery callbacks run by flush (as a SystemError wrapping the KafkaException)
        stuck.flush(30)
    with pytest.raises(KafkaException):
        stuck.commit_transaction(30)
    # nothing hangs, and nothing of it is visible
    deadline = time.monotonic() + 3 * TIMEOUT_MS / 1000
    while (end_offsets(bs, topic, 1, "read_committed")
           != end_offsets(bs, topic, 1, "read_uncommitted")):
        assert time.monotonic() < deadline, (
            f"a transaction hangs: read_committed ends at "
            f"{end_offsets(bs, topic, 1, 'read_committed')}, the log at "
            f"{end_offsets(bs, topic, 1, 'read_uncommitted')}; delivery errors of the late "
            f"records: {late_errors}")
        time.sleep(0.2)
    out, _ = read_to_end(bs, topic, 1, "read_committed")
    assert values_of(out) == [b"after"]
