"""Admin APIs through confluent-kafka's AdminClient: configs, DeleteRecords, retention,
and the keyless-record rule of compacted topics."""

from __future__ import annotations

import socket
import struct
import time
import uuid

import pytest
from confluent_kafka import Consumer, KafkaError, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import (
    AdminClient,
    AlterConfigOpType,
    ConfigEntry,
    ConfigResource,
    ConfigSource,
    NewPartitions,
    NewTopic,
    ResourceType,
)
from conftest import EddyProcess

from eddy.log.config import TOPIC_CONFIGS


@pytest.fixture(scope="module")
def eddy(module_eddy: EddyProcess) -> EddyProcess:
    """The module's one broker: every test here works on topics of its own (those that
    restart a broker or set its configs start their own)."""
    return module_eddy


def _admin(eddy) -> AdminClient:  # type: ignore[no-untyped-def]
    return AdminClient({"bootstrap.servers": eddy.bootstrap})


def _create(admin: AdminClient, name: str, partitions: int = 1, **config: str) -> None:
    admin.create_topics([NewTopic(name, partitions, 1, config=config)])[name].result(10)


def _describe(admin: AdminClient, name: str) -> dict:  # type: ignore[type-arg]
    r = ConfigResource(ResourceType.TOPIC, name)
    return admin.describe_configs([r])[r].result(10)  # type: ignore[no-any-return]


def _incremental(admin: AdminClient, name: str, *entries: ConfigEntry) -> None:
    r = ConfigResource(ResourceType.TOPIC, name, incremental_configs=list(entries))
    for f in admin.incremental_alter_configs([r]).values():
        f.result(10)


def _produce(eddy, topic: str, records: list[tuple[bytes | None, bytes]]) -> list:  # type: ignore[no-untyped-def, type-arg]
    p = Producer({"bootstrap.servers": eddy.bootstrap, "linger.ms": 0})
    reports: list = []  # type: ignore[type-arg]
    for key, value in records:  # one batch per record: flushed one by one
        p.produce(topic, key=key, value=value, partition=0,
                  on_delivery=lambda err, msg: reports.append((err, msg)))
        assert p.flush(10) == 0
    return reports


def test_describe_lists_every_topic_config_with_sources(eddy) -> None:  # type: ignore[no-untyped-def]
    admin = _admin(eddy)
    _create(admin, "described", **{"retention.ms": "123456"})
    configs = _describe(admin, "described")
    assert set(TOPIC_CONFIGS) <= set(configs)
    assert configs["retention.ms"].value == "123456"
    assert configs["retention.ms"].source == ConfigSource.DYNAMIC_TOPIC_CONFIG.value
    assert configs["segment.bytes"].value == "1073741824"
    assert configs["segment.bytes"].source == ConfigSource.DEFAULT_CONFIG.value
    assert configs["cleanup.policy"].value == "delete"


def test_incremental_alter_set_delete_append_subtract(eddy_factory) -> None:  # type: ignore[no-untyped-def]
    eddy = eddy_factory()  # a broker of its own: the test restarts it
    admin = _admin(eddy)
    _create(admin, "altered", **{"retention.ms": "1000"})
    _incremental(
        admin, "altered",
        ConfigEntry("segment.ms", "60000", incremental_operation=AlterConfigOpType.SET),
        ConfigEntry("retention.ms", None, incremental_operation=AlterConfigOpType.DELETE),
        ConfigEntry("cleanup.policy", "compact", incremental_operation=AlterConfigOpType.APPEND),
    )
    configs = _describe(admin, "altered")
    assert configs["segment.ms"].value == "60000"
    assert configs["retention.ms"].value == "604800000"  # back to the default
    assert configs["cleanup.policy"].value == "delete,compact"
    _incremental(admin, "altered", ConfigEntry(
        "cleanup.policy", "delete", incremental_operation=AlterConfigOpType.SUBTRACT))
    assert _describe(admin, "altered")["cleanup.policy"].value == "compact"
    # survives a restart
    eddy.restart()
    configs = _describe(_admin(eddy), "altered")
    assert configs["segment.ms"].value == "60000"
    assert configs["cleanup.policy"].value == "compact"


@pytest.mark.parametrize(
    "entry",
    [
        ConfigEntry("retention.ms", "abc", incremental_operation=AlterConfigOpType.SET),
        ConfigEntry("no.such.config", "1", incremental_operation=AlterConfigOpType.SET),
        ConfigEntry("retention.ms", "5", incremental_operation=AlterConfigOpType.APPEND),
        ConfigEntry("cleanup.policy", "sometimes", incremental_operation=AlterConfigOpType.SET),
    ],
)
def test_bad_alter_is_invalid_config_and_changes_nothing(eddy, entry) -> None:  # type: ignore[no-untyped-def]
    admin = _admin(eddy)
    guarded = f"guarded-{uuid.uuid4().hex[:8]}"
    _create(admin, guarded)
    with pytest.raises(KafkaException) as exc:
        _incremental(admin, guarded, entry)
    assert exc.value.args[0].code() == KafkaError.INVALID_CONFIG
    configs = _describe(admin, guarded)
    assert configs["retention.ms"].value == "604800000"
    assert configs["cleanup.policy"].value == "delete"


def test_legacy_alter_configs_replaces_overrides(eddy) -> None:  # type: ignore[no-untyped-def]
    admin = _admin(eddy)
    _create(admin, "replaced", **{"retention.ms": "1000", "segment.ms": "2000"})
    r = ConfigResource(ResourceType.TOPIC, "replaced", set_config={"segment.ms": "3000"})
    for f in admin.alter_configs([r]).values():
        f.result(10)
    configs = _describe(admin, "replaced")
    assert configs["segment.ms"].value == "3000"
    assert configs["retention.ms"].value == "604800000"


def test_unknown_topic_describe_fails(eddy) -> None:  # type: ignore[no-untyped-def]
    with pytest.raises(KafkaException) as exc:
        _describe(_admin(eddy), "nowhere")
    assert exc.value.args[0].code() == KafkaError.UNKNOWN_TOPIC_OR_PART


def test_broker_configs_are_described_and_read_only(eddy_factory) -> None:  # type: ignore[no-untyped-def]
    eddy = eddy_factory("--set", "num.partitions=2")
    admin = _admin(eddy)
    r = ConfigResource(ResourceType.BROKER, "1")
    configs = admin.describe_configs([r])[r].result(10)
    assert configs["num.partitions"].value == "2"
    assert configs["num.partitions"].source == ConfigSource.STATIC_BROKER_CONFIG.value
    assert configs["log.retention.ms"].source == ConfigSource.DEFAULT_CONFIG.value
    assert configs["num.partitions"].is_read_only
    r = ConfigResource(ResourceType.BROKER, "1", incremental_configs=[
        ConfigEntry("num.partitions", "5", incremental_operation=AlterConfigOpType.SET)])
    with pytest.raises(KafkaException) as exc:
        for f in admin.incremental_alter_configs([r]).values():
            f.result(10)
    assert exc.value.args[0].code() == KafkaError.INVALID_REQUEST


def _read_all(eddy, topic: str) -> list[int]:  # type: ignore[no-untyped-def]
    c = Consumer({"bootstrap.servers": eddy.bootstrap, "group.id": "reader",
                  "enable.auto.commit": False, "auto.offset.reset": "earliest"})
    low, high = c.get_watermark_offsets(TopicPartition(topic, 0), timeout=10)
    c.assign([TopicPartition(topic, 0, low)])
    offsets: list[int] = []
    deadline = time.monotonic() + 15
    while (not offsets or offsets[-1] < high - 1) and time.monotonic() < deadline:
        m = c.poll(0.5)
        if m is not None and not m.error():
            offsets.append(m.offset())
    c.close()
    return offsets


def test_delete_records_moves_the_low_watermark(eddy) -> None:  # type: ignore[no-untyped-def]
    admin = _admin(eddy)
    _create(admin, "trimmed")
    _produce(eddy, "trimmed", [(b"k", b"v%d" % i) for i in range(20)])
    result = admin.delete_records([TopicPartition("trimmed", 0, 12)])
    for f in result.values():
        assert f.result(10).low_watermark == 12
    c = Consumer({"bootstrap.servers": eddy.bootstrap, "group.id": "w"})
    assert c.get_watermark_offsets(TopicPartition("trimmed", 0), timeout=10) == (12, 20)
    c.close()
    assert _read_all(eddy, "trimmed") == list(range(12, 20))
    # past the end is refused
    with pytest.raises(KafkaException) as exc:
        for f in admin.delete_records([TopicPartition("trimmed", 0, 99)]).values():
            f.result(10)
    assert exc.value.args[0].code() == KafkaError.OFFSET_OUT_OF_RANGE


def test_keyless_records_on_compacted_topic_are_invalid(eddy) -> None:  # type: ignore[no-untyped-def]
    admin = _admin(eddy)
    _create(admin, "compacted", **{"cleanup.policy": "compact"})
    reports = _produce(eddy, "compacted", [(b"k1", b"a"), (None, b"no key"), (b"k2", b"b")])
    errors = [err for err, _ in reports]
    assert errors[0] is None and errors[2] is None
    assert errors[1] is not None and errors[1].code() == KafkaError.INVALID_RECORD
    # DeleteRecords needs the delete policy
    with pytest.raises(KafkaException) as exc:
        for f in admin.delete_records([TopicPartition("compacted", 0, 1)]).values():
            f.result(10)
    assert exc.value.args[0].code() == KafkaError.POLICY_VIOLATION


def test_retention_by_size_deletes_old_segments(eddy_factory) -> None:  # type: ignore[no-untyped-def]
    eddy = eddy_factory("--set", "log.retention.check.interval.ms=200")
    admin = _admin(eddy)
    _create(admin, "retained", **{"segment.bytes": "2000", "retention.bytes": "4000"})
    _produce(eddy, "retained", [(b"k", b"x" * 500) for _ in range(40)])
    c = Consumer({"bootstrap.servers": eddy.bootstrap, "group.id": "r"})

    def log_start() -> int:
        low: int = c.get_watermark_offsets(TopicPartition("retained", 0), timeout=10)[0]
        return low

    # retention removes a segment at a time, every check interval: the log is read between
    # two equal log starts (on a busy machine a pass went on after the first was seen)
    low, offsets = 0, []
    deadline = time.monotonic() + 15
    while time.monotonic() < deadline:
        low = log_start()
        if low > 0:
            offsets = _read_all(eddy, "retained")
            if log_start() == low:
                break
        time.sleep(0.2)
    c.close()
    assert 0 < low < 40
    assert offsets == list(range(low, 40))


def test_compaction_keeps_the_latest_value_per_key(eddy_factory) -> None:  # type: ignore[no-untyped-def]
    eddy = eddy_factory("--set", "log.cleaner.backoff.ms=200")
    admin = _admin(eddy)
    _create(admin, "latest", **{"cleanup.policy": "compact", "segment.bytes": "1500",
                                "min.cleanable.dirty.ratio": "0.01"})
    p = Producer({"bootstrap.servers": eddy.bootstrap, "linger.ms": 0})
    latest: dict[bytes, bytes] = {}
    for i in range(120):
        key, value = b"key-%d" % (i % 6), b"value-%d" % i
        latest[key] = value
        p.produce("latest", key=key, value=value, partition=0)
        assert p.flush(10) == 0  # one batch each, so segments roll
    deadline = time.monotonic() + 30
    seen: dict[bytes, list[bytes]] = {}
    while time.monotonic() < deadline:
        c = Consumer({"bootstrap.servers": eddy.bootstrap, "group.id": "compacted-reader",
                      "enable.auto.commit": False})
        c.assign([TopicPartition("latest", 0, 0)])
        seen = {}
        offsets: list[int] = []
        read_deadline = time.monotonic() + 10
        while (not offsets or offsets[-1] < 119) and time.monotonic() < read_deadline:
            m = c.poll(0.5)
            if m is not None and not m.error():
                seen.setdefault(m.key(), []).append(m.value())
                offsets.append(m.offset())
        c.close()
        assert offsets == sorted(set(offsets)) and offsets[-1] == 119  # readable throughout
        if len(offsets) < 60:
            break
        time.sleep(0.3)
    # cleaned: far fewer records than written, and the last value of every key is there
    assert sum(len(v) for v in seen.values()) < 60
    assert {k: v[-1] for k, v in seen.items()} == latest


def test_a_request_for_too_many_partitions_fails_whole(eddy) -> None:  # type: ignore[no-untyped-def]
    """Found by bench.fuzz: a 46-byte CreateTopics asking for 2,000,000,000 partitions
    made the broker create directories for minutes, answering nobody. As in Kafka 4.0,
    a request adding more than 10,000 partitions fails whole with POLICY_VIOLATION."""
    admin = _admin(eddy)
    futures = admin.create_topics([NewTopic("huge", 100_000, 1), NewTopic("small", 1, 1)],
                                  operation_timeout=10)
    for name in ("huge", "small"):
        with pytest.raises(KafkaException) as info:
            futures[name].result(15)
        assert info.value.args[0].code() == KafkaError.POLICY_VIOLATION, name
    _create(admin, "grows", 1)
    grow = admin.create_partitions([NewPartitions("grows", 20_001)])
    with pytest.raises(KafkaException) as info:
        grow["grows"].result(15)
    assert info.value.args[0].code() == KafkaError.POLICY_VIOLATION
    topics = admin.list_topics(timeout=10).topics
    assert "huge" not in topics and "small" not in topics
    assert len(topics["grows"].partitions) == 1
    # the fuzzer's frame itself (CreateTopics v4, topic "dos", 2,000,000,000 partitions)
    with socket.create_connection(("127.0.0.1", eddy.port), timeout=10) as s:
        s.sendall(bytes.fromhex("0000002a0013000400000001000466757a7a000000010003646f7377"
                                "359400000100000000000000000000ea6000"))
        head = s.recv(4, socket.MSG_WAITALL)
        body = s.recv(struct.unpack(">i", head)[0], socket.MSG_WAITALL)
    # correlation id, throttle, one topic "dos", then its error code: POLICY_VIOLATION
    assert body[:4] == b"\x00\x00\x00\x01" and body[12:17] == b"\x00\x03dos"
    assert struct.unpack_from(">h", body, 17)[0] == KafkaError.POLICY_VIOLATION
    assert "dos" not in admin.list_topics(timeout=10).topics
