"""The registry's ``_schemas`` topic through confluent-kafka: the contract's SchemaLog on Kafka.

One partition, compacted. Writes go through an idempotent producer with acks=all; a consumer
assigned to partition 0 from the beginning (no group membership, no commits) reads every
record back and hands it to ``on_record`` on the event loop, in topic order. ``append``
returns once the reader has delivered past the offsets it wrote (as Confluent's leader
waits for its own reader), ``sync`` once it has delivered up to the high watermark read
when it was called. An append that times out (50002) leaves its records with the producer,
which goes on retrying them: the next ``sync``, and so the next write, first waits for their
outcome, so that an id handed out by a write that timed out and landed later is never handed
out again.

librdkafka's calls that wait (polls, watermark queries, topic creation) run in threads of
their own or in the loop's executor: the event loop never blocks on Kafka.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import threading
import uuid
from concurrent.futures import Future as ConcurrentFuture
from typing import Any

from confluent_kafka import (
    Consumer,
    KafkaError,
    KafkaException,
    Message,
    Producer,
    TopicPartition,
)
from confluent_kafka.admin import (  # type: ignore[attr-defined]
    AdminClient,
    ConfigResource,
    NewTopic,
)

from eddy.registry.contract import (
    OPERATION_TIMEOUT,
    STORE_ERROR,
    OnRecord,
    RegistryError,
    SchemaRecord,
)

log = logging.getLogger("eddy.registry")

#: how long one poll of the reader or the producer's delivery thread waits before it looks
#: at the stop flag again
POLL_S = 0.1
#: records the reader takes from librdkafka per poll
BATCH = 1000


class SchemaTopicError(Exception):
    """The ``_schemas`` topic cannot serve the registry (wrong layout, or Kafka refused)."""


def _store_error(message: str) -> RegistryError:
    return RegistryError(500, STORE_ERROR, message)


def _timeout_error(message: str) -> RegistryError:
    return RegistryError(500, OPERATION_TIMEOUT, message)


#: where librdkafka's log lines of the registry's clients go
_KAFKA_LOG = logging.getLogger("eddy.registry.kafka")


class KafkaSchemaLog:
    """The registry's records in a compacted one-partition topic (``_schemas``)."""

    def __init__(self, bootstrap: str, on_record: OnRecord, topic: str = "_schemas", *,
                 timeout_s: float = 10.0, start_timeout_s: float = 60.0,
                 client_config: dict[str, Any] | None = None) -> None:
        self.bootstrap = bootstrap
        self.topic = topic
        self.on_record = on_record
        self.timeout_s = timeout_s  # an append's or a sync's wait (then 50002)
        self.start_timeout_s = start_timeout_s  # creating the topic and replaying it
        self._extra = dict(client_config or {})  # e.g. security settings, for every client
        self._loop: asyncio.AbstractEventLoop | None = None
        self._producer: Producer | None = None
        self._consumer: Consumer | None = None
        #: a client of its own for end-offset queries: librdkafka's consumer handle does not
        #: answer one while another thread polls it
        self._offsets: Consumer | None = None
        self._query: asyncio.Future[int] | None = None  # the end-offset query in flight
        self._next_query: asyncio.Future[int] | None = None  # one queued behind it
        self._threads: list[threading.Thread] = []
        self._stopping = threading.Event()
        #: the offset after the last record the state has applied (the reader's position)
        self._next = 0
        self._waiters: list[tuple[int, asyncio.Future[None]]] = []
        self._reader_error: str | None = None
        #: acks of appended records Kafka has not settled yet (an append that timed out
        #: leaves its records here: the producer goes on retrying them, and they may land)
        self._unsettled: set[asyncio.Future[int]] = set()

    # -- lifecycle -----------------------------------------------------------------------

    @property
    def applied_offset(self) -> int:
        """The offset after the last record handed to ``on_record`` (0: none yet)."""
        return self._next

    async def start(self) -> None:
        """Create the topic if it is missing, start the reader and the producer, and return
        once the whole topic has been replayed through ``on_record``."""
        if self._loop is not None:
            raise RuntimeError("KafkaSchemaLog already started")
        loop = asyncio.get_running_loop()
        self._loop = loop
        self._stopping.clear()
        try:
            await asyncio.wait_for(loop.run_in_executor(None, self._ensure_topic),
                                   self.start_timeout_s)
        except TimeoutError:
            self._loop = None
            raise SchemaTopicError(f"topic {self.topic} not ready within "
                                   f"{self.start_timeout_s:.0f} s ({self.bootstrap})") from None
        except KafkaException as exc:
            self._loop = None
            raise SchemaTopicError(f"topic {self.topic}: {exc.args[0].str()}") from None
        except BaseException:
            self._loop = None
            raise
        self._producer = Producer(self._config(
            {"acks": "all", "enable.idempotence": True, "linger.ms": 0}))
        self._consumer = Consumer(self._config({
            # required by the client, never used: the reader is assigned, joins no group
            # and commits nothing
            "group.id": f"eddy-registry-{uuid.uuid4().hex}",
            "enable.auto.commit": False,
            "enable.auto.offset.store": False,
            "enable.partition.eof": True,
            "auto.offset.reset": "earliest",
            "fetch.wait.max.ms": 100,
            "isolation.level": "read_committed",
        }))
        # offset 0, not OFFSET_BEGINNING: librdkafka resolves a logical offset with a
        # ListOffsets it sends ~0.5 s late on a new connection; a log that no longer starts
        # at 0 is out of range and auto.offset.reset takes the reader to its start
        self._consumer.assign([TopicPartition(self.topic, 0, 0)])
        self._offsets = Consumer(self._config({
            "group.id": f"eddy-registry-{uuid.uuid4().hex}", "enable.auto.commit": False}))
        self._threads = [
            threading.Thread(target=self._read, name=f"{self.topic}-reader", daemon=True),
            threading.Thread(target=self._deliveries, name=f"{self.topic}-producer",
                             daemon=True),
        ]
        for thread in self._threads:
            thread.start()
        try:
            await self._sync(self.start_timeout_s)
        except BaseException:
            await self.stop()
            raise
        log.info("registry: replayed %s up to offset %d", self.topic, self._next)

    async def stop(self) -> None:
        """Stop reading and writing; writes still waiting fail with 50001."""
        loop = self._loop
        if loop is None:
            return
        self._stopping.set()
        threads, self._threads = self._threads, []
        for thread in threads:
            await loop.run_in_executor(None, thread.join)
        producer, consumer, offsets = self._producer, self._consumer, self._offsets
        self._producer = self._consumer = self._offsets = None
        if producer is not None:
            await loop.run_in_executor(None, producer.flush, self.timeout_s)
        for client in (consumer, offsets):
            if client is not None:
                await loop.run_in_executor(None, client.close)
        for _, waiter in self._waiters:
            if not waiter.done():
                waiter.set_exception(_store_error("the schema log is stopped"))
        self._waiters.clear()
        for ack in self._unsettled:
            if not ack.done():
                ack.cancel()
        self._unsettled.clear()
        self._loop = None

    def _config(self, extra: dict[str, Any]) -> dict[str, Any]:
        # librdkafka's own lines go through logging (the node's log.format), not to stderr
        return {"bootstrap.servers": self.bootstrap, "client.id": "eddy-registry",
                "logger": _KAFKA_LOG, **extra, **self._extra}

    # -- the topic -----------------------------------------------------------------------

    def _ensure_topic(self) -> None:
        """(executor) Create the topic if missing: one partition, compacted, replication
        min(3, brokers). Refuse one with several partitions or without compaction."""
        admin = AdminClient(self._config({}))
        # every topic's metadata: asking for this one alone could auto-create it
        metadata = admin.list_topics(timeout=self.start_timeout_s)
        if self.topic not in metadata.topics:
            replication = max(1, min(3, len(metadata.brokers)))
            new = NewTopic(self.topic, num_partitions=1, replication_factor=replication,
                           config={"cleanup.policy": "compact"})
            futures = admin.create_topics([new], operation_timeout=self.start_timeout_s)
            try:
                futures[self.topic].result()
                log.info("registry: created topic %s (1 partition, compacted, "
                         "replication factor %d)", self.topic, replication)
            except KafkaException as exc:
                if exc.args[0].code() != KafkaError.TOPIC_ALREADY_EXISTS:  # another node won
                    raise SchemaTopicError(
                        f"cannot create topic {self.topic}: {exc.args[0].str()}") from None
            metadata = admin.list_topics(timeout=self.start_timeout_s)
        topic = metadata.topics.get(self.topic)
        if topic is None or topic.error is not None:
            why = topic.error.str() if topic is not None and topic.error else "not found"
            raise SchemaTopicError(f"topic {self.topic}: {why}")
        if len(topic.partitions) != 1:
            raise SchemaTopicError(
                f"topic {self.topic} has {len(topic.partitions)} partitions: the schema "
                "registry needs exactly 1 (ids are ordered by it)")
        self._check_compacted(admin)

    def _check_compacted(self, admin: AdminClient) -> None:
        resource = ConfigResource(ConfigResource.Type.TOPIC, self.topic)
        future: ConcurrentFuture[Any] = admin.describe_configs([resource])[resource]
        entries = future.result(timeout=self.start_timeout_s)
        policy = entries.get("cleanup.policy")
        value = policy.value if policy is not None else ""
        if "compact" not in str(value).split(","):
            raise SchemaTopicError(
                f"topic {self.topic} has cleanup.policy={value}: the schema registry needs "
                f"cleanup.policy=compact (set it with eddy topic alter-config or delete the "
                "topic), or schemas would be lost to retention")

    # -- threads -------------------------------------------------------------------------

    def _deliveries(self) -> None:
        """(thread) Serve the producer's delivery reports."""
        producer = self._producer
        assert producer is not None
        while not self._stopping.is_set():
            producer.poll(POLL_S)

    def _read(self) -> None:
        """(thread) Read the partition and hand batches to the loop."""
        consumer, loop = self._consumer, self._loop
        assert consumer is not None and loop is not None
        partition = [TopicPartition(self.topic, 0)]
        last_end = -1
        while not self._stopping.is_set():
            try:
                # wait for one record, then take what is already there (consume() alone
                # waits out its timeout unless the batch fills)
                first = consumer.poll(POLL_S)
                messages = [] if first is None else [
                    first, *consumer.consume(num_messages=BATCH, timeout=0)]
            except KafkaException as exc:  # a fatal client error: say so, keep trying
                self._post(loop, [], None, f"reader: {exc.args[0].str()}")
                continue
            batch: list[tuple[bytes | None, bytes | None, int]] = []
            end: int | None = None
            error: str | None = None
            for message in messages:
                err = message.error()
                if err is None:
                    offset = message.offset()
                    if offset is not None:
                        batch.append((_bytes(message.key()), _bytes(message.value()), offset))
                elif err.code() == KafkaError._PARTITION_EOF:
                    end = message.offset()
                    last_end = max(last_end, end or 0)
                else:
                    error = err.str()
            if not messages:
                # idle: the position passes control records and compacted gaps too
                with contextlib.suppress(KafkaException):
                    position = consumer.position(partition)[0].offset
                    if position > last_end:
                        end = last_end = position
            if batch or end is not None or error is not None:
                self._post(loop, batch, end, error)

    def _post(self, loop: asyncio.AbstractEventLoop,
              batch: list[tuple[bytes | None, bytes | None, int]], end: int | None,
              error: str | None) -> None:
        with contextlib.suppress(RuntimeError):  # the loop is closed: nobody waits
            loop.call_soon_threadsafe(self._deliver, batch, end, error)

    # -- on the loop ---------------------------------------------------------------------

    def _deliver(self, batch: list[tuple[bytes | None, bytes | None, int]], end: int | None,
                 error: str | None) -> None:
        if error is not None and error != self._reader_error:
            log.warning("registry: reading %s: %s", self.topic, error)
        self._reader_error = error
        for key, value, offset in batch:
            if offset < self._next:
                continue  # already applied (a re-read after a reassignment)
            if key is None:
                log.warning("registry: %s offset %d has no key: skipped", self.topic, offset)
            else:
                try:
                    self.on_record(key, value)
                except Exception:  # a bad record must not stop the reader
                    log.exception("registry: %s offset %d not applied", self.topic, offset)
            self._next = offset + 1
        if end is not None and end > self._next:
            self._next = end
        if self._waiters:
            waiting = []
            for target, waiter in self._waiters:
                if waiter.done():
                    continue
                if target <= self._next:
                    waiter.set_result(None)
                else:
                    waiting.append((target, waiter))
            self._waiters = waiting

    async def _reach(self, target: int, timeout_s: float) -> None:
        """Wait until the state has applied every record before ``target``."""
        if self._next >= target:
            return
        loop = self._loop
        if loop is None:
            raise _store_error("the schema log is not started")
        waiter: asyncio.Future[None] = loop.create_future()
        self._waiters.append((target, waiter))
        try:
            await asyncio.wait_for(waiter, timeout_s)
        except TimeoutError:
            raise _timeout_error(
                f"the reader of {self.topic} did not reach offset {target} within "
                f"{timeout_s * 1000:.0f} ms (reached {self._next})") from None

    # -- the contract --------------------------------------------------------------------

    async def append(self, records: list[SchemaRecord]) -> None:
        """Write ``records`` in order; return once the reader has applied them."""
        if not records:
            return
        producer, loop = self._producer, self._loop
        if producer is None or loop is None:
            raise _store_error("the schema log is not started")
        acks: list[asyncio.Future[int]] = []
        try:
            for key, value in records:
                ack: asyncio.Future[int] = loop.create_future()
                producer.produce(self.topic, key=key, value=value, partition=0,
                                 on_delivery=_on_delivery(loop, ack))
                acks.append(ack)
        except (BufferError, KafkaException) as exc:
            for ack in acks:  # records already queued stay unsettled until Kafka answers
                self._track(ack)
            raise _store_error(f"put operation failed: {exc}") from None
        for ack in acks:
            self._track(ack)
        # not cancelled on a timeout: the producer keeps retrying them, so the next sync
        # waits for their outcome (an id must not be handed out twice)
        _, pending = await asyncio.wait(acks, timeout=self.timeout_s)
        if pending:
            raise _timeout_error("put operation timed out while waiting for an ack from "
                                 "Kafka")
        failed = [ack.exception() for ack in acks if ack.exception() is not None]
        if failed:
            raise _store_error(f"put operation failed while waiting for an ack from Kafka: "
                               f"{failed[0]}")
        await self._reach(max(ack.result() for ack in acks) + 1, self.timeout_s)

    def _track(self, ack: asyncio.Future[int]) -> None:
        self._unsettled.add(ack)
        ack.add_done_callback(self._settled)

    def _settled(self, ack: asyncio.Future[int]) -> None:
        self._unsettled.discard(ack)
        if not ack.cancelled():
            ack.exception()  # retrieved: a late failure is not an unhandled one

    async def sync(self) -> None:
        """Return once every record in the topic as of now has been applied."""
        await self._sync(self.timeout_s)

    async def _sync(self, timeout_s: float) -> None:
        if self._unsettled:  # an earlier append timed out: its records may still land
            _, pending = await asyncio.wait(list(self._unsettled), timeout=timeout_s)
            if pending:
                raise _timeout_error(f"an earlier write to {self.topic} is still waiting "
                                     "for an ack from Kafka")
        try:
            high = await asyncio.wait_for(asyncio.shield(self._end_offset()), timeout_s)
        except TimeoutError:
            raise _timeout_error(f"reading the end offset of {self.topic} timed out") from None
        await self._reach(high, timeout_s)

    def _end_offset(self) -> asyncio.Future[int]:
        """The partition's high watermark, read by a query that starts after this call:
        callers that come while a query is in flight share the one queued behind it."""
        loop = self._loop
        if loop is None or self._offsets is None:
            raise _store_error("the schema log is not started")
        if self._query is None:
            self._query = self._start_query(loop)
            return self._query
        if self._next_query is None:
            self._next_query = loop.create_future()
        return self._next_query

    def _start_query(self, loop: asyncio.AbstractEventLoop) -> asyncio.Future[int]:
        offsets = self._offsets
        assert offsets is not None
        partition = TopicPartition(self.topic, 0)
        query: asyncio.Future[int] = asyncio.ensure_future(loop.run_in_executor(
            None, _high_watermark, offsets, partition, self.timeout_s))
        query.add_done_callback(self._query_done)
        return query

    def _query_done(self, query: asyncio.Future[int]) -> None:
        queued, self._next_query = self._next_query, None
        loop = self._loop
        if queued is None or loop is None or self._offsets is None:
            self._query = None
            if queued is not None and not queued.done():
                queued.set_exception(_store_error("the schema log is stopped"))
            return
        self._query = self._start_query(loop)
        _chain(self._query, queued)


def _chain(source: asyncio.Future[int], target: asyncio.Future[int]) -> None:
    """Settle ``target`` as ``source`` settles."""

    def copy(done: asyncio.Future[int]) -> None:
        if target.done():
            return
        if done.cancelled():
            target.cancel()
        elif done.exception() is not None:
            target.set_exception(done.exception())  # type: ignore[arg-type]
        else:
            target.set_result(done.result())

    source.add_done_callback(copy)


class _DeliveryFailed(Exception):
    pass


def _high_watermark(consumer: Consumer, partition: TopicPartition, timeout_s: float) -> int:
    """(executor) The partition's end offset; a store error when Kafka does not answer."""
    try:
        consumer.list_topics(partition.topic, timeout=timeout_s)  # its leader now (failover)
        _, high = consumer.get_watermark_offsets(partition, timeout=timeout_s, cached=False)
    except KafkaException as exc:
        error: KafkaError = exc.args[0]
        make = _timeout_error if error.code() == KafkaError._TIMED_OUT else _store_error
        raise make(f"cannot read the end offset of {partition.topic}: {error.str()}") from None
    return int(high)


def _bytes(data: str | bytes | None) -> bytes | None:
    if data is None or isinstance(data, bytes):
        return data
    return data.encode()


def _on_delivery(loop: asyncio.AbstractEventLoop,
                 ack: asyncio.Future[int]) -> Any:
    """A delivery callback (run on the producer's thread) settling ``ack`` on the loop."""

    def settle(err: KafkaError | None, offset: int | None) -> None:
        if ack.done():
            return
        if err is not None:
            ack.set_exception(_DeliveryFailed(err.str()))
        elif offset is None or offset < 0:
            ack.set_exception(_DeliveryFailed("no offset in the delivery report"))
        else:
            ack.set_result(offset)

    def report(err: KafkaError | None, message: Message) -> None:
        offset = None if err is not None else message.offset()
        with contextlib.suppress(RuntimeError):  # the loop is closed
            loop.call_soon_threadsafe(settle, err, offset)

    return report
