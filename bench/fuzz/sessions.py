"""Client sessions the recorder runs through its proxy: librdkafka (confluent-kafka),
kafka-python and aiokafka, each exercising producers, consumers and admin operations so
that the recorded requests cover as many (API, version) pairs as the clients send.

Every operation is attempted on its own: one the broker or client refuses is reported on
stderr and the session goes on (the frames it sent are what we want, not the result).
Older API versions come from pinning each client to older broker versions
(librdkafka's broker.version.fallback, kafka-python's and aiokafka's api_version).
"""

from __future__ import annotations

import asyncio
import sys
import time
import uuid
from collections.abc import Awaitable, Callable
from typing import Any

from bench.fuzz.sessions_security import kafka_python_security, librdkafka_security

TOPIC_PARTITIONS = 2


def attempt(what: str, fn: Callable[[], Any]) -> Any:
    try:
        return fn()
    except Exception as exc:
        print(f"  [{what}] {type(exc).__name__}: {str(exc)[:160]}", file=sys.stderr)
        return None


async def attempt_async(what: str, coro: Awaitable[Any]) -> Any:
    try:
        return await asyncio.wait_for(coro, 20)
    except Exception as exc:
        print(f"  [{what}] {type(exc).__name__}: {str(exc)[:160]}", file=sys.stderr)
        return None


def _name(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:6]}"


# ---- librdkafka -----------------------------------------------------------------------------


def librdkafka_session(bootstrap: str) -> None:
    from confluent_kafka import (
        Consumer,
        ConsumerGroupTopicPartitions,
        Producer,
        TopicCollection,
        TopicPartition,
    )
    from confluent_kafka.admin import (
        AdminClient,
        AlterConfigOpType,
        ConfigEntry,
        ConfigResource,
        NewPartitions,
        NewTopic,
        OffsetSpec,
    )

    admin = AdminClient({"bootstrap.servers": bootstrap})
    topic, other = _name("rdk"), _name("rdk-x")

    def wait(futs: Any) -> Any:
        return {k: f.result(15) for k, f in futs.items()}

    attempt("create_topics", lambda: wait(admin.create_topics([
        NewTopic(topic, TOPIC_PARTITIONS, 1, config={"retention.ms": "3600000"}),
        NewTopic(other, 1, 1, config={"cleanup.policy": "compact"}),
    ])))
    attempt("create_partitions", lambda: wait(admin.create_partitions([NewPartitions(other, 2)])))
    res = ConfigResource("topic", topic)
    attempt("describe_configs", lambda: wait(admin.describe_configs([
        res, ConfigResource("broker", "1")])))
    attempt("alter_configs", lambda: wait(admin.alter_configs([
        ConfigResource("topic", topic, set_config={"retention.ms": "7200000"})])))
    attempt("incremental_alter_configs", lambda: wait(admin.incremental_alter_configs([
        ConfigResource("topic", topic, incremental_configs=[
            ConfigEntry("segment.bytes", "10485760",
                        incremental_operation=AlterConfigOpType.SET)])])))
    attempt("describe_cluster", lambda: admin.describe_cluster().result(15))
    attempt("list_topics", lambda: admin.list_topics(timeout=10))
    attempt("describe_topics", lambda: wait(admin.describe_topics(TopicCollection([topic]))))
    librdkafka_security(attempt, admin, wait, _name("rdk-user"))

    codecs = ["none", "gzip", "snappy", "lz4", "zstd"]
    for acks in ("0", "1", "all"):
        for codec in codecs:
            p = Producer({"bootstrap.servers": bootstrap, "acks": acks, "linger.ms": 2,
                          "compression.codec": codec, "enable.idempotence": False})
            for i in range(20):
                p.produce(topic, key=f"k{i}".encode(), value=f"{codec}-{i}".encode() * 4,
                          headers=[("h", b"v")] if i % 3 == 0 else None)
            attempt(f"flush acks={acks} {codec}", lambda p=p: p.flush(15))
    p = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True})
    for i in range(20):
        p.produce(topic, value=b"idem-%d" % i)
    attempt("flush idempotent", lambda: p.flush(15))

    group = _name("rdk-g")
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": group,
                  "auto.offset.reset": "earliest", "enable.auto.commit": False,
                  "isolation.level": "read_committed", "fetch.wait.max.ms": 50})
    c.subscribe([topic])
    deadline = time.monotonic() + 20
    got = 0
    while time.monotonic() < deadline and got < 50:
        m = c.poll(0.5)
        if m is not None and not m.error():
            got += 1
    attempt("commit", lambda: c.commit(asynchronous=False))
    attempt("committed", lambda: c.committed([TopicPartition(topic, 0)], timeout=10))
    attempt("offsets_for_times", lambda: c.offsets_for_times(
        [TopicPartition(topic, 0, int(time.time() * 1000) - 60000)], timeout=10))
    attempt("watermarks", lambda: c.get_watermark_offsets(TopicPartition(topic, 0), timeout=10))

    txid = _name("rdk-tx")
    tp = Producer({"bootstrap.servers": bootstrap, "transactional.id": txid,
                   "transaction.timeout.ms": 30000})
    attempt("init_transactions", lambda: tp.init_transactions(15))
    for commit in (True, False):
        attempt("begin_transaction", tp.begin_transaction)
        for i in range(5):
            tp.produce(topic, value=b"tx-%d" % i)
        attempt("send_offsets_to_transaction", lambda: tp.send_offsets_to_transaction(
            [TopicPartition(topic, 0, 3)], c.consumer_group_metadata(), 15))
        attempt("end transaction", lambda commit=commit: (
            tp.commit_transaction(15) if commit else tp.abort_transaction(15)))
    attempt("consumer close", c.close)

    attempt("list_offsets", lambda: wait(admin.list_offsets({
        TopicPartition(topic, 0): OffsetSpec.earliest(),
        TopicPartition(topic, 1): OffsetSpec.max_timestamp()})))
    attempt("list_offsets latest", lambda: wait(admin.list_offsets({
        TopicPartition(topic, 0): OffsetSpec.latest()})))
    attempt("list_consumer_groups", lambda: admin.list_consumer_groups().result(15))
    attempt("describe_consumer_groups", lambda: wait(admin.describe_consumer_groups([group])))
    attempt("list_consumer_group_offsets", lambda: wait(admin.list_consumer_group_offsets(
        [ConsumerGroupTopicPartitions(group)])))
    attempt("alter_consumer_group_offsets", lambda: wait(admin.alter_consumer_group_offsets([
        ConsumerGroupTopicPartitions(group, [TopicPartition(topic, 0, 1)])])))
    attempt("delete_records", lambda: wait(admin.delete_records([TopicPartition(topic, 0, 2)])))
    attempt("delete_consumer_groups", lambda: wait(admin.delete_consumer_groups([group])))
    attempt("delete_topics", lambda: wait(admin.delete_topics([other])))


def librdkafka_old_session(bootstrap: str, fallback: str) -> None:
    """Producer and consumer with ApiVersions off: librdkafka picks the versions of the
    broker version it is told (lower than the ones it negotiates)."""
    from confluent_kafka import Consumer, Producer, TopicPartition

    conf = {"bootstrap.servers": bootstrap, "api.version.request": False,
            "broker.version.fallback": fallback, "log_level": 3}
    topic = _name(f"rdk{fallback}")
    p = Producer({**conf, "acks": "all", "linger.ms": 2, "enable.idempotence": False,
                  "topic.metadata.refresh.interval.ms": 1000})
    for i in range(10):
        p.produce(topic, value=b"old-%d" % i, key=b"k")
    attempt(f"flush fallback={fallback}", lambda: p.flush(15))
    c = Consumer({**conf, "group.id": _name("rdk-old-g"), "auto.offset.reset": "earliest",
                  "enable.auto.commit": False, "fetch.wait.max.ms": 50})
    c.subscribe([topic])
    deadline = time.monotonic() + 12
    got = 0
    while time.monotonic() < deadline and got < 10:
        m = c.poll(0.5)
        if m is not None and not m.error():
            got += 1
    attempt("commit", lambda: c.commit(asynchronous=False))
    attempt("committed", lambda: c.committed([TopicPartition(topic, 0)], timeout=5))
    attempt("offsets_for_times", lambda: c.offsets_for_times(
        [TopicPartition(topic, 0, 0)], timeout=5))
    attempt("close", c.close)


# ---- kafka-python ---------------------------------------------------------------------------


def kafka_python_session(bootstrap: str, api_version: tuple[int, ...] | None) -> None:
    from kafka import KafkaAdminClient, KafkaConsumer, KafkaProducer, TopicPartition
    from kafka.admin import ConfigResource, ConfigResourceType, NewPartitions, NewTopic
    from kafka.structs import OffsetAndMetadata

    pin: dict[str, Any] = {} if api_version is None else {"api_version": api_version}
    tag = "auto" if api_version is None else ".".join(map(str, api_version))
    base = {"bootstrap_servers": bootstrap, "request_timeout_ms": 15000, **pin}
    admin = attempt(f"kp admin {tag}", lambda: KafkaAdminClient(**base))
    topic, other = _name("kp"), _name("kp-x")
    if admin is not None:
        attempt("create_topics", lambda: admin.create_topics([
            NewTopic(topic, TOPIC_PARTITIONS, 1, topic_configs={"retention.ms": "3600000"}),
            NewTopic(other, 1, 1)]))
        attempt("create_partitions", lambda: admin.create_partitions(
            {other: NewPartitions(2)}))
        res = ConfigResource(ConfigResourceType.TOPIC, topic)
        attempt("describe_configs", lambda: admin.describe_configs(
            [res, ConfigResource(ConfigResourceType.BROKER, "1")], include_synonyms=True))
        attempt("alter_configs", lambda: admin.alter_configs([ConfigResource(
            ConfigResourceType.TOPIC, topic, configs={"retention.ms": "7200000"})]))
        attempt("incremental alter_configs", lambda: admin.alter_configs([ConfigResource(
            ConfigResourceType.TOPIC, topic, configs={"segment.bytes": "10485760"})],
            incremental=True))
        attempt("describe_cluster", admin.describe_cluster)
        attempt("describe_topics", lambda: admin.describe_topics([topic]))
        attempt("list_topics", admin.list_topics)
        attempt("describe_log_dirs", admin.describe_log_dirs)
        kafka_python_security(attempt, admin, _name("kp-user"))
    for acks, codec in ((0, None), (1, "gzip"), ("all", "snappy"), (1, "lz4"), ("all", "zstd")):
        p = attempt(f"producer acks={acks} {codec}", lambda acks=acks, codec=codec:
                    KafkaProducer(**base, acks=acks, compression_type=codec, linger_ms=2))
        if p is None:
            continue
        for i in range(15):
            attempt("send", lambda p=p, i=i: p.send(
                topic, key=b"k%d" % i, value=b"kp-%d" % i, headers=[("h", b"v")]))
        attempt("flush", lambda p=p: p.flush(15))
        attempt("close", lambda p=p: p.close(5))
    p = attempt("idempotent producer", lambda: KafkaProducer(
        **base, enable_idempotence=True, acks="all"))
    if p is not None:
        for i in range(10):
            attempt("send", lambda i=i: p.send(topic, value=b"idem-%d" % i))
        attempt("flush", lambda: p.flush(15))
        attempt("close", lambda: p.close(5))
    group = _name("kp-g")
    c = attempt("consumer", lambda: KafkaConsumer(
        topic, **base, group_id=group, auto_offset_reset="earliest",
        enable_auto_commit=False, isolation_level="read_committed",
        fetch_max_wait_ms=50, consumer_timeout_ms=4000))
    if c is not None:
        deadline = time.monotonic() + 15
        n = 0
        while time.monotonic() < deadline and n < 40:
            batch = attempt("poll", lambda: c.poll(500))
            n += sum(len(v) for v in (batch or {}).values())
        attempt("commit", c.commit)
        attempt("committed", lambda: c.committed(TopicPartition(topic, 0)))
        attempt("offsets_for_times", lambda: c.offsets_for_times(
            {TopicPartition(topic, 0): int(time.time() * 1000) - 60000}))
        attempt("end_offsets", lambda: c.end_offsets([TopicPartition(topic, 0)]))
        attempt("beginning_offsets", lambda: c.beginning_offsets([TopicPartition(topic, 1)]))
    txid = _name("kp-tx")
    tp = attempt("transactional producer", lambda: KafkaProducer(
        **base, transactional_id=txid, enable_idempotence=True, acks="all"))
    if tp is not None:
        attempt("init_transactions", tp.init_transactions)
        for commit in (True, False):
            attempt("begin", tp.begin_transaction)
            for i in range(5):
                attempt("send", lambda i=i: tp.send(topic, value=b"tx-%d" % i))
            if c is not None:
                attempt("send_offsets_to_transaction", lambda: tp.send_offsets_to_transaction(
                    {TopicPartition(topic, 0): OffsetAndMetadata(2, "", -1)}, group))
            attempt("end", lambda commit=commit: (
                tp.commit_transaction() if commit else tp.abort_transaction()))
        attempt("close", lambda: tp.close(5))
    if c is not None:
        attempt("consumer close", c.close)
    if admin is not None:
        attempt("list_groups", admin.list_groups)
        attempt("describe_groups", lambda: admin.describe_groups([group]))
        attempt("list_group_offsets", lambda: admin.list_group_offsets({group: None}))
        attempt("alter_group_offsets", lambda: admin.alter_group_offsets(
            group, {TopicPartition(topic, 0): OffsetAndMetadata(1, "", -1)}))
        attempt("delete_group_offsets", lambda: admin.delete_group_offsets(
            group, [TopicPartition(topic, 1)]))
        attempt("list_partition_offsets", lambda: admin.list_partition_offsets(
            {TopicPartition(topic, 0): -1}))
        attempt("delete_records", lambda: admin.delete_records({TopicPartition(topic, 0): 1}))
        attempt("describe_producers", lambda: admin.describe_producers([TopicPartition(topic, 0)]))
        attempt("list_transactions", admin.list_transactions)
        attempt("describe_transactions", lambda: admin.describe_transactions([txid]))
        attempt("delete_groups", lambda: admin.delete_groups([group]))
        attempt("delete_topics", lambda: admin.delete_topics([other]))
        attempt("admin close", admin.close)


# ---- aiokafka -------------------------------------------------------------------------------


async def aiokafka_session(bootstrap: str, api_version: str) -> None:
    from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition
    from aiokafka.admin import AIOKafkaAdminClient, NewPartitions, NewTopic
    from aiokafka.admin.config_resource import ConfigResource, ConfigResourceType

    base = {"bootstrap_servers": bootstrap, "api_version": api_version,
            "request_timeout_ms": 15000}
    admin = AIOKafkaAdminClient(**base)
    topic, other = _name("aio"), _name("aio-x")
    await attempt_async("admin start", admin.start())
    await attempt_async("create_topics", admin.create_topics([
        NewTopic(topic, TOPIC_PARTITIONS, 1, topic_configs={"retention.ms": "3600000"}),
        NewTopic(other, 1, 1)]))
    await attempt_async("create_partitions", admin.create_partitions({other: NewPartitions(2)}))
    await attempt_async("describe_configs", admin.describe_configs(
        [ConfigResource(ConfigResourceType.TOPIC, topic),
         ConfigResource(ConfigResourceType.BROKER, "1")]))
    await attempt_async("alter_configs", admin.alter_configs([ConfigResource(
        ConfigResourceType.TOPIC, topic, configs={"retention.ms": "7200000"})]))
    await attempt_async("describe_cluster", admin.describe_cluster())
    await attempt_async("describe_topics", admin.describe_topics([topic]))
    await attempt_async("list_topics", admin.list_topics())
    for acks, codec in ((0, None), (1, "gzip"), ("all", "lz4"), (1, "snappy"), ("all", "zstd")):
        p = AIOKafkaProducer(**base, acks=acks, compression_type=codec, linger_ms=2)
        await attempt_async("producer start", p.start())
        for i in range(10):
            await attempt_async("send", p.send(topic, key=b"k%d" % i, value=b"aio-%d" % i,
                                               headers=[("h", b"v")]))
        await attempt_async("flush", p.flush())
        await attempt_async("stop", p.stop())
    p = AIOKafkaProducer(**base, enable_idempotence=True)
    await attempt_async("idempotent start", p.start())
    for i in range(10):
        await attempt_async("send", p.send(topic, value=b"idem-%d" % i))
    await attempt_async("stop", p.stop())
    group = _name("aio-g")
    c = AIOKafkaConsumer(topic, **base, group_id=group, auto_offset_reset="earliest",
                         enable_auto_commit=False, isolation_level="read_committed",
                         fetch_max_wait_ms=50)
    await attempt_async("consumer start", c.start())
    await attempt_async("getmany", c.getmany(timeout_ms=3000))
    await attempt_async("commit", c.commit())
    await attempt_async("committed", c.committed(TopicPartition(topic, 0)))
    await attempt_async("offsets_for_times", c.offsets_for_times(
        {TopicPartition(topic, 0): int(time.time() * 1000) - 60000}))
    await attempt_async("end_offsets", c.end_offsets([TopicPartition(topic, 0)]))
    tp = AIOKafkaProducer(**base, transactional_id=_name("aio-tx"))
    await attempt_async("tx start", tp.start())
    for commit in (True, False):
        await attempt_async("begin", tp.begin_transaction())
        for i in range(5):
            await attempt_async("send", tp.send(topic, value=b"tx-%d" % i))
        await attempt_async("send_offsets", tp.send_offsets_to_transaction(
            {TopicPartition(topic, 0): 2}, group))
        await attempt_async("end", tp.commit_transaction() if commit
                            else tp.abort_transaction())
    await attempt_async("tx stop", tp.stop())
    await attempt_async("consumer stop", c.stop())
    await attempt_async("list_consumer_groups", admin.list_consumer_groups())
    await attempt_async("describe_consumer_groups", admin.describe_consumer_groups([group]))
    await attempt_async("list_consumer_group_offsets", admin.list_consumer_group_offsets(group))
    from aiokafka.admin import RecordsToDelete

    await attempt_async("delete_records", admin.delete_records(
        {TopicPartition(topic, 0): RecordsToDelete(before_offset=1)}))
    await attempt_async("delete_topics", admin.delete_topics([other]))
    await attempt_async("admin close", admin.close())
