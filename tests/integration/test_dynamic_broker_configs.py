"""Dynamic broker configs on a default node (a cluster of one), through confluent-kafka's
AdminClient as `kafka-configs --entity-type brokers [--entity-default]` sends them: a
cluster-wide default and a per-broker value change every topic's defaults at once (a record
over the new message.max.bytes is refused), DescribeConfigs says where each value comes
from, settings that cannot change at run time are refused, and the values survive a
restart."""

from __future__ import annotations

import pytest
from broker_configs_raw import alter_broker_config, describe_broker_default
from confluent_kafka import KafkaError, KafkaException, Producer
from confluent_kafka.admin import (
    AdminClient,
    AlterConfigOpType,
    ConfigEntry,
    ConfigResource,
    ConfigSource,
    NewTopic,
    ResourceType,
)


def _alter_default(eddy, name: str, value: str | None) -> None:  # type: ignore[no-untyped-def]
    assert alter_broker_config(eddy.port, "", name, value) == 0


def _alter(admin: AdminClient, broker: str, *ops: tuple[str, str | None]) -> None:
    entries = [ConfigEntry(name, value or "", incremental_operation=(
        AlterConfigOpType.SET if value is not None else AlterConfigOpType.DELETE))
        for name, value in ops]
    r = ConfigResource(ResourceType.BROKER, broker, incremental_configs=entries)
    admin.incremental_alter_configs([r])[r].result(15)


def _describe(admin: AdminClient, kind: ResourceType, name: str) -> dict:  # type: ignore[type-arg]
    r = ConfigResource(kind, name)
    return admin.describe_configs([r])[r].result(15)  # type: ignore[no-any-return]


def _produce(bootstrap: str, topic: str, size: int) -> KafkaError | None:
    errors: list[KafkaError | None] = []
    p = Producer({"bootstrap.servers": bootstrap, "message.max.bytes": 10_000_000,
                  "retries": 0, "linger.ms": 0})
    p.produce(topic, b"x" * size, on_delivery=lambda err, _m: errors.append(err))
    p.flush(15)
    assert len(errors) == 1
    return errors[0]


def test_broker_defaults_change_live_are_described_and_survive_a_restart(
        eddy_factory) -> None:  # type: ignore[no-untyped-def]
    eddy = eddy_factory()
    admin = AdminClient({"bootstrap.servers": eddy.bootstrap})
    admin.create_topics([NewTopic("big", 1, 1)])["big"].result(15)
    assert _produce(eddy.bootstrap, "big", 200_000) is None

    # the cluster-wide <default> (the empty name): every topic without an override follows
    _alter_default(eddy, "message.max.bytes", "100000")
    err = _produce(eddy.bootstrap, "big", 200_000)
    assert err is not None and err.code() == KafkaError.MSG_SIZE_TOO_LARGE
    assert _produce(eddy.bootstrap, "big", 50_000) is None
    topic = _describe(admin, ResourceType.TOPIC, "big")["max.message.bytes"]
    assert (topic.value, topic.source) == (
        "100000", ConfigSource.DYNAMIC_DEFAULT_BROKER_CONFIG.value)
    assert describe_broker_default(eddy.port) == {
        "message.max.bytes": ("100000", ConfigSource.DYNAMIC_DEFAULT_BROKER_CONFIG.value)}

    # this broker's own value wins over the default
    _alter(admin, "1", ("log.retention.ms", "3600000"), ("message.max.bytes", "300000"))
    assert _produce(eddy.bootstrap, "big", 200_000) is None
    mine = _describe(admin, ResourceType.BROKER, "1")
    assert (mine["log.retention.ms"].value, mine["log.retention.ms"].source) == (
        "3600000", ConfigSource.DYNAMIC_BROKER_CONFIG.value)
    assert not mine["log.retention.ms"].is_read_only
    assert mine["num.partitions"].is_read_only
    topic = _describe(admin, ResourceType.TOPIC, "big")["retention.ms"]
    assert (topic.value, topic.source) == ("3600000", ConfigSource.DYNAMIC_BROKER_CONFIG.value)

    # what cannot change at run time, or is no valid value, is refused with nothing changed
    for bad, code in ((("num.partitions", "3"), KafkaError.INVALID_REQUEST),
                      (("log.retention.ms", "soon"), KafkaError.INVALID_CONFIG)):
        with pytest.raises(KafkaException) as exc:
            _alter(admin, "1", bad)
        assert exc.value.args[0].code() == code
    # another broker's configs are altered through that broker
    code = alter_broker_config(eddy.port, "7", "log.retention.ms", "1")
    assert code == KafkaError.INVALID_REQUEST

    eddy.restart()
    admin = AdminClient({"bootstrap.servers": eddy.bootstrap})
    mine = _describe(admin, ResourceType.BROKER, "1")
    assert mine["log.retention.ms"].value == "3600000"
    assert mine["message.max.bytes"].value == "300000"
    err = _produce(eddy.bootstrap, "big", 400_000)
    assert err is not None and err.code() == KafkaError.MSG_SIZE_TOO_LARGE

    # deleting them gives the static config back
    _alter(admin, "1", ("log.retention.ms", None), ("message.max.bytes", None))
    _alter_default(eddy, "message.max.bytes", None)
    assert describe_broker_default(eddy.port) == {}
    topic = _describe(admin, ResourceType.TOPIC, "big")
    assert topic["retention.ms"].source == ConfigSource.DEFAULT_CONFIG.value
    assert topic["max.message.bytes"].value == "1048588"
    assert _produce(eddy.bootstrap, "big", 400_000) is None
