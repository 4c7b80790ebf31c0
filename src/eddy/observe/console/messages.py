"""The message browser: up to ``MAX_MESSAGES`` records of one partition, from an offset or
a timestamp (default: the last ones), read through the partition's log like a Fetch (up to
the high watermark, at most ``MAX_READ_BYTES`` per request) and decoded with the record
batch helpers on a worker thread, ``MAX_CONCURRENT`` requests at a time.

A batch larger than the read bound is not read: the answer names it and goes on past it
(``next_offset``). Control batches (transaction markers) are left out; records written in
a transaction are marked (read up to the high watermark, they may be of one still open or
aborted).
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from eddy.log.partition import FetchSlice
from eddy.observe.console import params
from eddy.observe.console.decode.values import Found, SchemaLookup, Shown, framed_id, show_bytes
from eddy.observe.console.params import ParamError
from eddy.protocol.errors import KafkaError
from eddy.protocol.record_batch import HEADER_SIZE, parse_header
from eddy.protocol.records import CorruptRecordError, Record, decode_batch_records

if TYPE_CHECKING:
    from eddy.broker.broker import Broker

#: bytes of log one request reads at most
MAX_READ_BYTES = 1 << 20
MAX_CONCURRENT = 2
#: header values shown at most this long (bytes)
SHOWN_HEADER_BYTES = 256
#: schemas one request looks up at most (the values of others are shown raw)
MAX_SCHEMAS = 16


@dataclass(frozen=True, slots=True)
class Query:
    topic: str
    partition: int
    offset: int | None
    timestamp: int | None
    limit: int


def parse_query(query: Mapping[str, str]) -> Query:
    topic = params.topic_name(query)
    partition = params.integer(query, "partition", low=0, high=(1 << 31) - 1, default=0)
    offset = params.integer(query, "offset", low=0)
    timestamp = params.integer(query, "timestamp", low=0)
    if offset is not None and timestamp is not None:
        raise ParamError("timestamp", "timestamp: give an offset or a timestamp, not both")
    limit = params.integer(query, "limit", low=1, high=params.MAX_MESSAGES,
                           default=params.DEFAULT_MESSAGES, clamp_high=True)
    assert partition is not None and limit is not None
    return Query(topic, partition, offset, timestamp, limit)


@dataclass
class Decoded:
    records: list[Record] = field(default_factory=list)
    #: offsets of the records written in a transaction (committed, aborted or still open)
    transactional: set[int] = field(default_factory=set)
    next_offset: int = 0
    notes: list[str] = field(default_factory=list)


class MessageBrowser:
    def __init__(self, broker: Broker, schemas: SchemaLookup) -> None:
        self._broker = broker
        self._schemas = schemas
        self._slots = asyncio.Semaphore(MAX_CONCURRENT)

    async def browse(self, q: Query) -> dict[str, Any]:
        broker = self._broker
        count = broker.partition_count(q.topic)
        if count is None:
            raise ParamError("topic", f"topic {q.topic!r} does not exist", 404)
        if q.partition >= count:
            raise ParamError("partition", f"topic {q.topic!r} has {count} partition(s): no "
                                          f"partition {q.partition}", 404)
        plog = broker.logs.partition(q.topic, q.partition)
        if plog is None:
            raise ParamError("partition", f"this node holds no replica of {q.topic}-"
                                          f"{q.partition}: browse it on one that does", 404)
        start, hwm = plog.log_start_offset, plog.high_watermark
        target_ts = q.timestamp
        if q.offset is not None:
            first = min(max(q.offset, start), hwm)
        elif target_ts is not None:
            found = plog.offset_for_timestamp(target_ts)
            first = hwm if found is None else min(max(found.base_offset, start), hwm)
        else:
            first = max(start, hwm - q.limit)
        out: dict[str, Any] = {
            "topic": q.topic, "partition": q.partition, "log_start_offset": start,
            "high_watermark": hwm, "from_offset": first, "limit": q.limit,
        }
        async with self._slots:
            decoded = await self._read(plog, first, hwm, q.limit, target_ts)
            ids = {i for r in decoded.records for i in (framed_id(r.key), framed_id(r.value))
                   if i is not None}
            schemas = await self._schemas.resolve(sorted(ids)[:MAX_SCHEMAS])
            loop = asyncio.get_running_loop()
            rows = await loop.run_in_executor(None, _rows, decoded, schemas)
        out.update(next_offset=decoded.next_offset, records=rows, notes=decoded.notes)
        return out

    async def _read(self, plog: Any, first: int, hwm: int, limit: int,
                    target_ts: int | None) -> Decoded:
        if first >= hwm:
            return Decoded(next_offset=first)
        try:
            got = plog.read(first, MAX_READ_BYTES, hwm, min_one=False)
        except KafkaError as exc:  # the log start moved past it meanwhile
            return Decoded(next_offset=first, notes=[str(exc)])
        if got is None:
            return Decoded(next_offset=first)
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(None, _decode, got, first, limit, target_ts)


def _decode(got: FetchSlice | bytes, first: int, limit: int, target_ts: int | None
            ) -> Decoded:
    """Records from ``first`` in the batches of ``got`` (whole batches; a cut last one is
    left for the next request). On a worker thread."""
    data = got.read() if isinstance(got, FetchSlice) else got
    out = Decoded(next_offset=first)
    pos, end = 0, len(data)
    view = memoryview(data)
    while pos + HEADER_SIZE <= end and len(out.records) < limit:
        header = parse_header(data, pos)
        if header.size < HEADER_SIZE:
            out.notes.append(f"batch at offset {header.base_offset}: bad length "
                             f"{header.batch_length}")
            break
        if header.size > end - pos:
            if pos == 0:  # larger than a whole read: named, and skipped
                out.notes.append(
                    f"offsets {header.base_offset}..{header.last_offset}: a batch of "
                    f"{header.size} bytes, larger than the console reads at once "
                    f"({MAX_READ_BYTES}): not shown")
                out.next_offset = header.last_offset + 1
            break
        if not header.is_control:
            try:
                for rec in decode_batch_records(view[pos:pos + header.size]):
                    if rec.offset < first:
                        continue
                    if target_ts is not None and rec.timestamp < target_ts:
                        continue  # before the asked time (in the batch that reaches it)
                    target_ts = None
                    out.records.append(rec)
                    if header.is_transactional:
                        out.transactional.add(rec.offset)
                    out.next_offset = rec.offset + 1
                    if len(out.records) >= limit:
                        break
            except CorruptRecordError as exc:
                out.notes.append(f"batch at offset {header.base_offset}: {exc}")
                out.next_offset = header.last_offset + 1
                break
        if len(out.records) < limit:
            out.next_offset = max(out.next_offset, header.last_offset + 1)
        pos += header.size
    return out


def _rows(decoded: Decoded, schemas: dict[int, Found]) -> list[dict[str, Any]]:
    rows = []
    for rec in decoded.records:
        key = show_bytes(rec.key, schemas)
        value = show_bytes(rec.value, schemas)
        try:
            headers = [(k, _header_text(v)) for k, v in rec.headers]
        except CorruptRecordError as exc:
            headers = [("(headers)", f"undecodable: {exc}")]
        rows.append({
            "offset": rec.offset, "timestamp": rec.timestamp,
            "key": key.text, "key_format": key.format,
            "value": value.text, "value_format": _format(value), "value_size": value.size,
            "schema_id": value.schema_id,
            "note": "; ".join(n for n in (
                "transactional" if rec.offset in decoded.transactional else "",
                value.note or key.note) if n),
            "headers": "; ".join(f"{k}={v}" for k, v in headers),
        })
    return rows


def _format(shown: Shown) -> str:
    """``avro #3``, ``protobuf #4 shop.Order``: the decoded format, schema id and type."""
    if shown.format in ("avro", "json", "protobuf"):
        detail = f" {shown.detail}" if shown.detail else ""
        return f"{shown.format} #{shown.schema_id}{detail}"
    return shown.format


def _header_text(value: bytes | None) -> str:
    if value is None:
        return "null"
    cut = value[:SHOWN_HEADER_BYTES]
    try:
        text = cut.decode("utf-8")
        if all(c.isprintable() for c in text):
            return text if len(value) <= SHOWN_HEADER_BYTES else text + "…"
    except UnicodeDecodeError:
        pass
    return "0x" + cut.hex()
