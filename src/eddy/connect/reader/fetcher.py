"""The fast reader of `format("eddy")`: one partition's offset range as Arrow batches.

A Spark task reading a topic partition speaks Kafka's protocol itself (Metadata,
ListOffsets and Fetch on kio's message types, plain TCP) and hands the fetched
record batches, undecoded, to `record_columns.RecordColumns` (Cython), which lays
the records out as Arrow buffers without a Python object per record. It works
against any Kafka broker that serves Fetch v11 (Apache Kafka 2.3 and later).

What a consumer must do and this reader does: follow the partition leader (metadata
refresh on NOT_LEADER_OR_FOLLOWER and friends), reset to the log start when the
range starts below it (as librdkafka with auto.offset.reset=earliest), skip
records before the requested offset inside the first batch, decompress batches
(gzip, snappy incl. xerial framing, lz4, zstd), skip control batches, and under
read_committed drop the batches of aborted transactions the way Kafka's Java
consumer does (the fetch response lists them; an ABORT marker ends one).

Whatever it cannot serve raises `Unsupported` before any record is handed out for
that offset (a broker without Fetch v11, a TLS/SASL listener, a pre-v2 message
format): the caller then reads the rest of the range through librdkafka.
"""

from __future__ import annotations

import datetime
import time
from collections import deque
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

from eddy.client.raw import RawClient
from eddy.connect.options import OptionError, int_option
from eddy.protocol.record_batch import (
    CONTROL_BIT,
    HEADER_SIZE,
    TIMESTAMP_TYPE_BIT,
    TRANSACTIONAL_BIT,
    decompressed_limit,
    parse_header,
)
from eddy.protocol.records import CorruptRecordError, control_type, decompress

FETCH_VERSION = 11
METADATA_VERSION = 8
LIST_OFFSETS_VERSION = 2
API_FETCH, API_LIST_OFFSETS, API_METADATA = 1, 2, 3

#: error codes after which the leader may have moved: refresh metadata and retry
RETRIABLE = {
    3,   # UNKNOWN_TOPIC_OR_PARTITION (metadata not yet propagated)
    5,   # LEADER_NOT_AVAILABLE
    6,   # NOT_LEADER_OR_FOLLOWER
    9,   # REPLICA_NOT_AVAILABLE
    13,  # NETWORK_EXCEPTION
    56,  # KAFKA_STORAGE_ERROR
    74,  # FENCED_LEADER_EPOCH
    75,  # UNKNOWN_LEADER_EPOCH
    78,  # OFFSET_NOT_AVAILABLE
}
OFFSET_OUT_OF_RANGE = 1
EARLIEST_TIMESTAMP = -2
ABORT_MARKER = 0
#: bytes per record assumed for the first fetch of a range (then measured)
GUESS_RECORD_BYTES = 256.0
#: the least a fetch asks for
MIN_FETCH_BYTES = 64 << 10


class Unsupported(Exception):
    """The fast reader cannot serve this; read through librdkafka instead."""


class FetchFailed(RuntimeError):
    """The partition cannot be read (the message says which and why)."""


def native_columns() -> Any:
    """The compiled record decoder module, or raise Unsupported if it is not built."""
    try:
        from eddy.connect.reader import record_columns
    except ImportError as exc:  # a checkout without `pip install -e .` after a change
        raise Unsupported(f"the record decoder is not compiled ({exc})") from None
    return record_columns


def _name(code: Any) -> str:
    """Kafka's name of an error code (kio's enum), e.g. NOT_LEADER_OR_FOLLOWER."""
    return str(getattr(code, "name", code)).upper()


def parse_bootstrap(servers: str) -> list[tuple[str, int]]:
    out: list[tuple[str, int]] = []
    for item in servers.split(","):
        item = item.strip()
        if not item:
            continue
        host, _, port = item.rpartition(":")
        if not host or not port.isdigit():
            raise OptionError(f"option kafka.bootstrap.servers: {item!r} is not HOST:PORT")
        out.append((host.strip("[]"), int(port)))
    if not out:
        raise OptionError("option kafka.bootstrap.servers is empty")
    return out


#: the largest Fetch this reader asks for is 1 GiB (fetch sizes double up to it when a
#: batch is larger than asked for); a response beyond that plus headroom is refused
MAX_RESPONSE_BYTES = (1 << 30) + (16 << 20)


@dataclass
class FetchConfig:
    bootstrap: list[tuple[str, int]]
    read_committed: bool = True
    client_id: str = "eddy-connect-reader"
    max_wait_ms: int = 500
    partition_max_bytes: int = 16 << 20
    timeout_s: float = 15.0

    @classmethod
    def from_client(cls, bootstrap: str, client: dict[str, str]) -> FetchConfig:
        """From the `kafka.*` client properties; Unsupported for what only librdkafka does."""
        protocol = client.get("security.protocol", "plaintext").lower()
        if protocol != "plaintext":
            raise Unsupported(f"security.protocol={protocol}")
        isolation = client.get("isolation.level", "read_committed")
        if isolation not in ("read_committed", "read_uncommitted"):
            raise OptionError(f"option kafka.isolation.level: {isolation!r} is not "
                              "read_committed or read_uncommitted")
        conf = cls(parse_bootstrap(bootstrap), read_committed=isolation == "read_committed")
        if "client.id" in client:
            conf.client_id = client["client.id"]
        name = "kafka.max.partition.fetch.bytes"
        fetch_bytes = int_option({name: client.get(name[6:], "")}, name, minimum=1)
        if fetch_bytes is not None:
            conf.partition_max_bytes = max(MIN_FETCH_BYTES, fetch_bytes)
        return conf


def _request(api_key: int, version: int, name: str) -> Any:
    """kio's class `name` from the module of that API version's request."""
    import importlib

    from kio.index import load_request_schema

    return getattr(importlib.import_module(load_request_schema(api_key, version).__module__),
                   name)


class PartitionFetcher:
    """Fetches one topic partition from its leader (blocking; one connection)."""

    def __init__(self, config: FetchConfig, topic: str, partition: int,
                 sleep: Callable[[float], None] = time.sleep) -> None:
        self.config = config
        self.topic = topic
        self.partition = partition
        self.sleep = sleep
        self._conn: RawClient | None = None

    # ---- connections and metadata ---------------------------------------------------

    def close(self) -> None:
        if self._conn is not None:
            self._conn.close()
            self._conn = None

    def _connect(self, host: str, port: int) -> RawClient:
        try:
            return RawClient(host, port, self.config.timeout_s, self.config.client_id,
                             max_response_bytes=MAX_RESPONSE_BYTES)
        except OSError as exc:
            raise ConnectionError(f"{host}:{port}: {exc}") from exc

    def _check_versions(self, conn: RawClient) -> None:
        from kio.schema.api_versions.v0.request import ApiVersionsRequest

        resp = conn.call(ApiVersionsRequest())
        ranges = {int(k.api_key): (int(k.min_version), int(k.max_version))
                  for k in resp.api_keys}
        for api, version, label in ((API_FETCH, FETCH_VERSION, "Fetch"),
                                    (API_METADATA, METADATA_VERSION, "Metadata"),
                                    (API_LIST_OFFSETS, LIST_OFFSETS_VERSION, "ListOffsets")):
            lo, hi = ranges.get(api, (1, 0))
            if not lo <= version <= hi:
                raise Unsupported(f"the broker does not serve {label} v{version}")

    def _leader(self) -> tuple[str, int]:
        """(host, port) of the partition's leader, asked of the bootstrap servers."""
        request_cls = _request(API_METADATA, METADATA_VERSION, "MetadataRequest")
        topic_cls = _request(API_METADATA, METADATA_VERSION, "MetadataRequestTopic")
        errors: list[str] = []
        for host, port in self.config.bootstrap:
            try:
                conn = self._connect(host, port)
            except ConnectionError as exc:
                errors.append(str(exc))
                continue
            try:
                self._check_versions(conn)
                resp = conn.call(request_cls(
                    topics=(topic_cls(name=self.topic),), allow_auto_topic_creation=False,
                    include_cluster_authorized_operations=False,
                    include_topic_authorized_operations=False))
            except (OSError, ConnectionError) as exc:
                errors.append(f"{host}:{port}: {exc}")
                continue
            finally:
                conn.close()
            brokers = {int(b.node_id): (b.host, int(b.port)) for b in resp.brokers}
            for t in resp.topics:
                if t.name != self.topic:
                    continue
                if int(t.error_code) in RETRIABLE:
                    raise ConnectionError(f"metadata of {self.topic}: {_name(t.error_code)}")
                if int(t.error_code):
                    raise FetchFailed(f"metadata of {self.topic}: {_name(t.error_code)}")
                for p in t.partitions:
                    if int(p.partition_index) != self.partition:
                        continue
                    if int(p.leader_id) not in brokers:
                        raise ConnectionError(f"{self.topic}/{self.partition} has no leader "
                                              f"({_name(p.error_code)})")
                    return brokers[int(p.leader_id)]
                raise FetchFailed(f"{self.topic}/{self.partition}: no such partition")
            raise FetchFailed(f"{self.topic}: no such topic")
        raise ConnectionError("no bootstrap server answered: " + "; ".join(errors))

    def _leader_conn(self) -> RawClient:
        if self._conn is None:
            host, port = self._leader()
            self._conn = self._connect(host, port)
        return self._conn

    def _call(self, request: Any, deadline: float, now: Callable[[], float]) -> Any:
        """One request to the leader; connection errors retry (after a metadata refresh)
        until `deadline`."""
        delay = 0.05
        while True:
            try:
                return self._leader_conn().call(request)
            except (OSError, ConnectionError) as exc:
                self.close()
                if now() + delay > deadline:
                    raise FetchFailed(f"reading {self.topic}/{self.partition}: {exc}") from exc
                self.sleep(delay)
                delay = min(1.0, delay * 2)

    # ---- requests -------------------------------------------------------------------

    def earliest(self, deadline: float, now: Callable[[], float] = time.monotonic) -> int:
        """The partition's log start offset (ListOffsets, timestamp -2)."""
        req = _request(API_LIST_OFFSETS, LIST_OFFSETS_VERSION, "ListOffsetsRequest")
        topic = _request(API_LIST_OFFSETS, LIST_OFFSETS_VERSION, "ListOffsetsTopic")
        part = _request(API_LIST_OFFSETS, LIST_OFFSETS_VERSION, "ListOffsetsPartition")
        while True:
            resp = self._call(req(
                replica_id=-1, isolation_level=1 if self.config.read_committed else 0,
                topics=(topic(name=self.topic, partitions=(part(
                    partition_index=self.partition, timestamp=EARLIEST_TIMESTAMP),)),)),
                deadline, now)
            p = resp.topics[0].partitions[0]
            code = int(p.error_code)
            if code == 0:
                return int(p.offset)
            self._retry_or_fail(code, _name(p.error_code), deadline, now)

    def fetch(self, offset: int, max_bytes: int, deadline: float,
              now: Callable[[], float] = time.monotonic) -> Any:
        """One Fetch of up to `max_bytes` of the partition from `offset`; returns kio's
        PartitionData (error codes other than retriable ones are left to the caller)."""
        req = _request(API_FETCH, FETCH_VERSION, "FetchRequest")
        topic = _request(API_FETCH, FETCH_VERSION, "FetchTopic")
        part = _request(API_FETCH, FETCH_VERSION, "FetchPartition")
        while True:
            resp = self._call(req(
                max_wait=datetime.timedelta(milliseconds=self.config.max_wait_ms),
                min_bytes=1, max_bytes=max_bytes,
                isolation_level=1 if self.config.read_committed else 0,
                topics=(topic(topic=self.topic, partitions=(part(
                    partition=self.partition, fetch_offset=offset,
                    partition_max_bytes=max_bytes),)),),
                forgotten_topics_data=()), deadline, now)
            if int(resp.error_code):
                self._retry_or_fail(int(resp.error_code), _name(resp.error_code), deadline,
                                    now)
                continue
            p = resp.responses[0].partitions[0]
            code = int(p.error_code)
            if code in RETRIABLE:
                self._retry_or_fail(code, _name(p.error_code), deadline, now)
                continue
            return p

    def _retry_or_fail(self, code: int, name: str, deadline: float,
                       now: Callable[[], float]) -> None:
        if code not in RETRIABLE:
            raise FetchFailed(f"reading {self.topic}/{self.partition}: {name}")
        if now() > deadline:
            raise FetchFailed(f"reading {self.topic}/{self.partition}: {name} (gave up)")
        self.close()  # the leader may have moved
        self.sleep(0.1)


@dataclass
class _Aborted:
    """Kafka's read_committed filter for one fetch response (Java consumer's logic)."""

    pending: deque[tuple[int, int]]  # (first offset, producer id), by first offset
    producers: set[int]

    @classmethod
    def of(cls, aborted_transactions: Any) -> _Aborted:
        """From a fetch response's aborted transactions (producer_id, first_offset)."""
        txns = sorted((int(a.first_offset), int(a.producer_id)) for a in aborted_transactions)
        return cls(deque(txns), set())

    @property
    def idle(self) -> bool:
        return not self.pending and not self.producers

    def skip(self, batch: bytes | bytearray | memoryview, pos: int) -> bool:
        """Whether the batch at pos holds no records for a read_committed reader."""
        h = parse_header(batch, pos)
        control = bool(h.attributes & CONTROL_BIT)
        if h.producer_id >= 0:
            while self.pending and self.pending[0][0] <= h.last_offset:
                self.producers.add(self.pending.popleft()[1])
            if control:
                if control_type(memoryview(batch)[pos:pos + h.size]) == ABORT_MARKER:
                    self.producers.discard(h.producer_id)
            elif h.attributes & TRANSACTIONAL_BIT and h.producer_id in self.producers:
                return True
        return control


def fetch_size(remaining: int, record_bytes: float, cap: int) -> int:
    """Bytes to ask of one Fetch: what the rest of the range should take (10 % more than
    measured so far), so that the end of a small range does not pull megabytes of
    records past it; between MIN_FETCH_BYTES and `cap`."""
    want = int(remaining * record_bytes * 1.1) + MIN_FETCH_BYTES
    return max(MIN_FETCH_BYTES, min(cap, want))


class RangeDecoder:
    """Sans-IO: the records of fetch responses for offsets [start, end) of one partition,
    as column batches of `batch_rows` records (RecordColumns.take() dicts)."""

    def __init__(self, start: int, end: int, with_headers: bool, batch_rows: int,
                 read_committed: bool) -> None:
        self.rc = native_columns()
        self.cols = self.rc.RecordColumns(with_headers, batch_rows)
        self.next_offset = start
        self.end = end
        self.batch_rows = batch_rows
        self.read_committed = read_committed
        #: where the last whole-batch decode stopped in the last response (0: nothing used)
        self.used = 0

    @property
    def done(self) -> bool:
        return self.next_offset >= self.end

    def feed(self, records: bytes, aborted_transactions: Any = ()) -> Iterator[dict[str, Any]]:
        """Decode one fetch response's records (with its aborted transactions); yields
        a column batch each time `batch_rows` records are ready. `next_offset` is past
        every offset handled, also when the caller stops early."""
        aborted = _Aborted.of(aborted_transactions if self.read_committed else ())
        rc, cols = self.rc, self.cols
        pos = 0
        while self.next_offset < self.end:
            status, pos, reached = cols.append_batches(
                records, pos, self.next_offset, self.end, aborted.idle, self.batch_rows)
            self.next_offset = max(self.next_offset, reached)
            if status == rc.FULL or cols.rows >= self.batch_rows:
                yield cols.take()
                if status == rc.FULL:
                    continue
            if status == rc.END_OF_DATA:
                break
            if status == rc.REACHED_STOP:
                self.next_offset = self.end
                break
            try:
                pos, self.next_offset = _caller_batch(cols, records, pos, self.next_offset,
                                                      self.end, aborted)
            except CorruptRecordError as exc:
                base = parse_header(records, pos).base_offset
                raise rc.CorruptBatch(f"the batch at offset {base}: {exc}") from None
        self.used = pos

    def flush(self) -> dict[str, Any] | None:
        """What is left (None if nothing)."""
        return self.cols.take() if self.cols.rows else None


def read_partition(config: FetchConfig, topic: str, partition: int, start: int, end: int,
                   with_headers: bool, batch_rows: int,
                   emit: Callable[[dict[str, Any]], Any],
                   stall_timeout_s: float = 60.0,
                   clock: Callable[[], float] = time.monotonic,
                   progress: Callable[[int], None] | None = None) -> Iterator[Any]:
    """Yield `emit(columns)` for every `batch_rows` records of offsets [start, end).

    `columns` is RecordColumns.take()'s dict. `progress(next_offset)` is told how far
    the read got before each emit, so a caller falling back to another reader after
    Unsupported knows where to resume.
    """
    decoder = RangeDecoder(start, end, with_headers, batch_rows, config.read_committed)
    fetcher = PartitionFetcher(config, topic, partition)
    last_progress = clock()
    record_bytes = GUESS_RECORD_BYTES
    grow = 1  # doubles while one batch is bigger than what was asked for
    try:
        while not decoder.done:
            deadline = last_progress + stall_timeout_s
            max_bytes = fetch_size(end - decoder.next_offset, record_bytes,
                                   config.partition_max_bytes) * grow
            data = fetcher.fetch(decoder.next_offset, max_bytes, deadline, clock)
            code = int(data.error_code)
            if code == OFFSET_OUT_OF_RANGE:
                earliest = fetcher.earliest(deadline, clock)
                if decoder.next_offset >= earliest:
                    raise FetchFailed(
                        f"reading {topic}/{partition}: offset {decoder.next_offset} is out of "
                        f"range (log start {earliest}, want up to {end})")
                decoder.next_offset = earliest  # deleted by retention: start at the log start
                last_progress = clock()
                continue
            if code:
                raise FetchFailed(f"reading {topic}/{partition}: {_name(data.error_code)}")
            records = data.records or b""
            before = decoder.next_offset
            try:
                for cols in decoder.feed(records, data.aborted_transactions or ()):
                    if progress is not None:
                        progress(decoder.next_offset)
                    yield emit(cols)
            except decoder.rc.CorruptBatch as exc:
                raise FetchFailed(f"reading {topic}/{partition}: the broker sent a corrupt "
                                  f"record batch: {exc}") from None
            if decoder.next_offset > before:
                last_progress = clock()
                if decoder.used:
                    record_bytes = max(1.0, decoder.used / (decoder.next_offset - before))
                grow = 1
                continue
            if records and decoder.used == 0 and max_bytes * 2 <= 1 << 30:
                grow *= 2  # one batch bigger than what was asked for (a broker without KIP-74)
            if clock() - last_progress > stall_timeout_s:
                raise FetchFailed(
                    f"reading {topic}/{partition}: no progress at offset "
                    f"{decoder.next_offset} (want up to {end}) for {stall_timeout_s:.0f}s")
        rest = decoder.flush()
        if rest is not None:
            if progress is not None:
                progress(decoder.next_offset)
            yield emit(rest)
    finally:
        fetcher.close()


def _caller_batch(cols: Any, records: bytes, pos: int, next_offset: int, end: int,
                  aborted: _Aborted) -> tuple[int, int]:
    """Handle the batch at pos that RecordColumns handed back: a control batch, one of
    an aborted transaction, or a compressed one. Returns (next pos, next offset)."""
    if records[pos + 16] != 2:
        raise Unsupported(f"message format v{records[pos + 16]} at offset {next_offset}")
    h = parse_header(records, pos)
    if not aborted.skip(records, pos):
        payload = decompress(h.compression, memoryview(records)[pos + HEADER_SIZE:pos + h.size],
                             decompressed_limit(h.size))
        _, reached, _ = cols.append_records(
            payload, h.record_count, h.base_offset, h.base_timestamp, h.max_timestamp,
            bool(h.attributes & TIMESTAMP_TYPE_BIT), next_offset, end)
        next_offset = max(next_offset, reached)
    return pos + h.size, max(next_offset, min(h.last_offset + 1, end))
