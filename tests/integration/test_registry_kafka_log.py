"""KafkaSchemaLog against a real `eddy serve`: the registry's `_schemas` topic written with an
idempotent acks=all producer and read back, in order, by an assigned consumer; and the
registry's HTTP listener served by `eddy serve` itself."""

from __future__ import annotations

import asyncio
import json
import re
import time
import urllib.request
from collections.abc import Awaitable, Callable
from typing import Any

import pytest
from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, ConfigResource  # type: ignore[attr-defined]

from eddy.registry.contract import RegistryError
from eddy.registry.kafka_log import KafkaSchemaLog, SchemaTopicError

Record = tuple[bytes, bytes | None]


class Collected:
    """An on_record that keeps what it was given, and the thread it ran on."""

    def __init__(self) -> None:
        self.records: list[Record] = []
        self.on_loop: list[bool] = []

    def __call__(self, key: bytes, value: bytes | None) -> None:
        try:
            asyncio.get_running_loop()
            self.on_loop.append(True)
        except RuntimeError:
            self.on_loop.append(False)
        self.records.append((key, value))


def _key(n: int) -> bytes:
    return json.dumps({"keytype": "SCHEMA", "subject": "s", "version": n, "magic": 1},
                      separators=(",", ":")).encode()


def _records(first: int, count: int) -> list[Record]:
    return [(_key(n), b'{"n":%d}' % n) for n in range(first, first + count)]


def run(coro_fn: Callable[[], Awaitable[Any]]) -> Any:
    async def main() -> Any:
        return await coro_fn()
    return asyncio.run(main())


def test_append_reads_back_in_order_and_replays(eddy: Any) -> None:
    written = [*_records(1, 5), (_key(2), None)]  # a tombstone too

    async def scenario() -> tuple[Collected, Collected]:
        first = Collected()
        log = KafkaSchemaLog(eddy.bootstrap, first)
        await log.start()
        assert first.records == []  # a new topic: nothing to replay
        await log.append(written[:3])
        # append returned: the records are already applied, in order, on the loop
        assert first.records == written[:3]
        await log.append(written[3:])
        await log.sync()
        assert first.records == written
        assert all(first.on_loop)
        # a second registry on the same topic replays the same records
        second = Collected()
        other = KafkaSchemaLog(eddy.bootstrap, second)
        await other.start()
        assert second.records == written
        # a write by one is seen by the other after its sync (a read barrier)
        await log.append(_records(10, 1))
        await other.sync()
        assert second.records == written + _records(10, 1)
        await other.stop()
        await log.stop()
        # a restarted log on a fresh state replays everything
        third = Collected()
        again = KafkaSchemaLog(eddy.bootstrap, third)
        await again.start()
        await again.stop()
        return first, third

    first, third = run(scenario)
    assert third.records == written + _records(10, 1)
    assert first.records == third.records


def test_schemas_topic_is_compacted_with_one_partition(eddy: Any) -> None:
    async def scenario() -> None:
        log = KafkaSchemaLog(eddy.bootstrap, Collected())
        await log.start()
        await log.stop()

    run(scenario)
    admin = AdminClient({"bootstrap.servers": eddy.bootstrap})
    topic = admin.list_topics(timeout=10).topics["_schemas"]
    assert len(topic.partitions) == 1
    resource = ConfigResource(ConfigResource.Type.TOPIC, "_schemas")
    configs = admin.describe_configs([resource])[resource].result(timeout=10)
    assert configs["cleanup.policy"].value == "compact"


def test_records_written_by_another_client_are_replayed(eddy: Any) -> None:
    """A topic written by someone else (Confluent's registry, by hand) is served: every
    record reaches on_record, and sync waits for records written after it was called."""
    async def start(collected: Collected) -> KafkaSchemaLog:
        log = KafkaSchemaLog(eddy.bootstrap, collected, topic="_schemas_by_hand")
        await log.start()
        return log

    async def first_start() -> None:
        log = await start(Collected())  # creates the topic
        await log.stop()

    run(first_start)
    producer = Producer({"bootstrap.servers": eddy.bootstrap})
    for key, value in _records(1, 3):
        producer.produce("_schemas_by_hand", key=key, value=value, partition=0)
    producer.produce("_schemas_by_hand", key=_key(4), value=b"{}", partition=0)
    assert producer.flush(10) == 0

    async def scenario() -> list[Record]:
        collected = Collected()
        log = await start(collected)
        replayed = list(collected.records)
        producer.produce("_schemas_by_hand", key=_key(5), value=b"{}", partition=0)
        await asyncio.get_running_loop().run_in_executor(None, producer.flush, 10)
        await log.sync()
        assert collected.records[-1] == (_key(5), b"{}")
        await log.stop()
        return replayed

    assert run(scenario) == [*_records(1, 3), (_key(4), b"{}")]


def test_a_log_that_no_longer_starts_at_zero_is_replayed_from_its_start(eddy: Any) -> None:
    from confluent_kafka import TopicPartition
    from confluent_kafka.admin import NewTopic  # type: ignore[attr-defined]

    admin = AdminClient({"bootstrap.servers": eddy.bootstrap})
    # records can be deleted from a topic whose policy has delete besides compact
    admin.create_topics([NewTopic("_schemas_trimmed", num_partitions=1, replication_factor=1,
                                  config={"cleanup.policy": "compact,delete"})])[
        "_schemas_trimmed"].result(timeout=10)

    async def write() -> None:
        log = KafkaSchemaLog(eddy.bootstrap, Collected(), topic="_schemas_trimmed")
        await log.start()
        await log.append(_records(1, 5))
        await log.stop()

    run(write)
    admin.delete_records([TopicPartition("_schemas_trimmed", 0, 3)])[
        TopicPartition("_schemas_trimmed", 0, 3)].result(timeout=10)

    async def replay() -> list[Record]:
        collected = Collected()
        log = KafkaSchemaLog(eddy.bootstrap, collected, topic="_schemas_trimmed")
        await log.start()
        await log.stop()
        return collected.records

    assert run(replay) == _records(4, 2)


def test_append_after_stop_is_a_store_error(eddy: Any) -> None:
    async def scenario() -> RegistryError:
        log = KafkaSchemaLog(eddy.bootstrap, Collected())
        await log.start()
        await log.stop()
        with pytest.raises(RegistryError) as info:
            await log.append(_records(1, 1))
        return info.value

    error = run(scenario)
    assert (error.status, error.code) == (500, 50001)


def test_a_topic_with_several_partitions_is_refused(eddy: Any) -> None:
    from confluent_kafka.admin import NewTopic  # type: ignore[attr-defined]

    admin = AdminClient({"bootstrap.servers": eddy.bootstrap})
    admin.create_topics([NewTopic("_schemas_wide", num_partitions=3, replication_factor=1,
                                  config={"cleanup.policy": "compact"})])["_schemas_wide"] \
        .result(timeout=10)

    async def scenario() -> str:
        log = KafkaSchemaLog(eddy.bootstrap, Collected(), topic="_schemas_wide")
        with pytest.raises(SchemaTopicError) as info:
            await log.start()
        return str(info.value)

    assert "3 partitions" in run(scenario)


def _registry_url(proc: Any, timeout: float = 10.0) -> str:
    """The registry's URL from the startup line in the node's log."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        found = re.search(r"schema registry on (http://\S+)", proc.logs())
        if found:
            return found.group(1)
        time.sleep(0.05)
    raise AssertionError(f"no registry startup line:\n{proc.logs()}")


def test_eddy_serve_answers_get_root(eddy_factory: Any) -> None:
    proc = eddy_factory("--set", "registry.listener=127.0.0.1:0")
    url = _registry_url(proc)
    assert not url.endswith(":0")
    with urllib.request.urlopen(f"{url}/", timeout=10) as response:
        assert response.status == 200
        assert response.headers["Content-Type"] == "application/vnd.schemaregistry.v1+json"
        assert json.loads(response.read()) == {}
    with pytest.raises(urllib.error.HTTPError) as info:
        urllib.request.urlopen(f"{url}/no/such/path", timeout=10)
    assert info.value.code == 404
    assert json.loads(info.value.read()) == {"error_code": 404,
                                             "message": "HTTP 404 Not Found"}
    # the registry read its state from _schemas, which it created, before the ready line
    topics = AdminClient({"bootstrap.servers": proc.bootstrap}).list_topics(timeout=10).topics
    assert "_schemas" in topics and len(topics["_schemas"].partitions) == 1
    assert "replayed _schemas up to offset 0" in proc.logs()
    # a clean stop closes the listener too
    assert proc.stop() == 0


def test_registry_is_off_by_default(eddy: Any) -> None:
    assert "schema registry on" not in eddy.logs()
