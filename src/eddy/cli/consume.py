"""`eddy consume TOPIC`: read records as a group member or from an assignment."""

from __future__ import annotations

import base64
import contextlib
import json
import re
import sys
import time
from collections.abc import Callable
from typing import Annotated, Any

import typer
from confluent_kafka import (
    OFFSET_BEGINNING,
    OFFSET_END,
    TIMESTAMP_CREATE_TIME,
    TIMESTAMP_LOG_APPEND_TIME,
    Consumer,
    KafkaError,
    KafkaException,
    Message,
    TopicPartition,
)

from eddy.cli.common import (
    BootstrapOpt,
    ClientConfigOpt,
    Conn,
    Output,
    OutputOpt,
    at_time,
    check_partitions,
    earliest,
    err,
    handle_errors,
    kafka_error_text,
    latest,
    list_offsets,
    resolve_output,
    unescape,
    unknown_topic,
    usage_error,
)

Formatter = Callable[[Message], bytes]


def _text_or_base64(data: bytes) -> tuple[str, bool]:
    """(text, is_base64): UTF-8 when it decodes, base64 otherwise."""
    try:
        return data.decode("utf-8"), False
    except UnicodeDecodeError:
        return base64.b64encode(data).decode("ascii"), True


def _timestamp(msg: Message) -> tuple[str, int | None]:
    kind, ts = msg.timestamp()
    if kind == TIMESTAMP_CREATE_TIME:
        return "CreateTime", ts
    if kind == TIMESTAMP_LOG_APPEND_TIME:
        return "LogAppendTime", ts
    return "NoTimestamp", None


def header_pairs(msg: Message) -> list[tuple[str, bytes | None]]:
    raw = msg.headers()
    if not raw:
        return []
    items = list(raw.items()) if isinstance(raw, dict) else raw
    return [(k, v.encode() if isinstance(v, str) else v) for k, v in items]


def record_json(msg: Message) -> dict[str, Any]:
    """One record as the JSON object `--output json` writes and `eddy produce --json` reads:
    bytes as UTF-8 text, or base64 with a `*_encoding` marker when not decodable."""
    obj: dict[str, Any] = {
        "topic": msg.topic(),
        "partition": msg.partition(),
        "offset": msg.offset(),
        "timestamp": _timestamp(msg)[1],
    }
    for name, data in (("key", msg.key()), ("value", msg.value())):
        if data is None:
            obj[name] = None
        else:
            obj[name], b64 = _text_or_base64(data)
            if b64:
                obj[f"{name}_encoding"] = "base64"
    headers: dict[str, str | None] = {}
    header_encodings: dict[str, str] = {}
    for hname, hvalue in header_pairs(msg):
        if hvalue is None:
            headers[hname] = None
            continue
        headers[hname], b64 = _text_or_base64(hvalue)
        if b64:
            header_encodings[hname] = "base64"
    obj["headers"] = headers
    if header_encodings:
        obj["header_encodings"] = header_encodings
    return obj


def _headers_text(msg: Message, sep: bytes, kv: bytes, none: bytes) -> bytes:
    headers = header_pairs(msg)
    if not headers:
        return none
    return sep.join(k.encode() + kv + (b"null" if v is None else v) for k, v in headers)


def default_formatter(*, print_key: bool, print_headers: bool, print_partition: bool,
                      print_offset: bool, print_timestamp: bool, key_separator: bytes,
                      ) -> Formatter:
    """kafka-console-consumer's layout: [CreateTime:ts\\t][Partition:p\\t][Offset:o\\t]
    [h1:v1,h2:v2\\t][key SEP]value."""

    def fmt(msg: Message) -> bytes:
        parts: list[bytes] = []
        if print_timestamp:
            kind, ts = _timestamp(msg)
            parts.append(f"{kind}:{ts}".encode() if ts is not None else b"NO_TIMESTAMP")
        if print_partition:
            parts.append(f"Partition:{msg.partition()}".encode())
        if print_offset:
            parts.append(f"Offset:{msg.offset()}".encode())
        if print_headers:
            parts.append(_headers_text(msg, b",", b":", b"NO_HEADERS"))
        line = b"\t".join(parts) + (b"\t" if parts else b"")
        if print_key:
            key = msg.key()
            line += (b"null" if key is None else key) + key_separator
        value = msg.value()
        return line + (b"null" if value is None else value) + b"\n"

    return fmt


_TOKEN = re.compile(r"%(.)", re.DOTALL)


def kcat_formatter(spec: str) -> Formatter:
    """kcat's -f: %t topic, %p partition, %o offset, %k key, %K key length, %s value,
    %S value length, %T timestamp, %h headers (k=v,...), %% a percent sign; \\n \\t \\r."""
    spec = unescape(spec)
    pieces: list[bytes | str] = []
    pos = 0
    for m in _TOKEN.finditer(spec):
        if m.group(1) not in "tpokKsSTh%":
            raise click_bad_format(m.group(0))
        pieces.append(spec[pos:m.start()].encode())
        pieces.append(m.group(1))
        pos = m.end()
    if "%" in spec[pos:]:
        raise click_bad_format("%")
    pieces.append(spec[pos:].encode())

    def fmt(msg: Message) -> bytes:
        out = bytearray()
        for piece in pieces:
            if isinstance(piece, bytes):
                out += piece
                continue
            key, value = msg.key(), msg.value()
            if piece == "t":
                out += (msg.topic() or "").encode()
            elif piece == "p":
                out += str(msg.partition()).encode()
            elif piece == "o":
                out += str(msg.offset()).encode()
            elif piece == "k":
                out += key or b""
            elif piece == "K":
                out += str(-1 if key is None else len(key)).encode()
            elif piece == "s":
                out += value or b""
            elif piece == "S":
                out += str(-1 if value is None else len(value)).encode()
            elif piece == "T":
                out += str(_timestamp(msg)[1] or -1).encode()
            elif piece == "h":
                out += _headers_text(msg, b",", b"=", b"")
            else:
                out += b"%"
        return bytes(out)

    return fmt


def click_bad_format(token: str) -> Exception:
    return typer.BadParameter(
        f"unknown token {token!r}; use %t %p %o %k %K %s %S %T %h or %%",
        param_hint="'--format'",
    )


def _start_offsets(conn: Conn, topic: str, partitions: list[int], from_beginning: bool,
                   offset: int | None, timestamp: int | None) -> list[TopicPartition]:
    """Explicit start offsets, resolved with one batched ListOffsets per kind (a logical
    BEGINNING/END makes librdkafka wait for its offset-query timer)."""
    tps = [(topic, p) for p in partitions]
    lows = list_offsets(conn, tps, earliest())
    highs = list_offsets(conn, tps, latest())
    found = (list_offsets(conn, tps, at_time(timestamp))
             if timestamp is not None else {})
    out = []
    for tp in tps:
        lo, hi = lows.get(tp), highs.get(tp)
        if lo is None or hi is None:  # let the client find out itself
            start = OFFSET_BEGINNING if from_beginning else OFFSET_END
        elif from_beginning:
            start = lo
        elif timestamp is not None:
            at = found.get(tp)
            start = at if at is not None and at >= 0 else hi
        elif offset is not None:
            start = hi + offset if offset < 0 else offset  # negative: that many from the end
            start = min(max(start, lo), hi)
        else:
            start = hi
        out.append(TopicPartition(topic, tp[1], start))
    return out


@handle_errors
def consume(
    topic: Annotated[str, typer.Argument(help="topic to read")],
    from_beginning: Annotated[
        bool, typer.Option("--from-beginning", help="start at the oldest record "
                                                    "(default: only new records)")
    ] = False,
    offset: Annotated[
        int | None, typer.Option("--offset", help="start at this offset in each partition; "
                                                  "negative: that many records from the end")
    ] = None,
    timestamp: Annotated[
        int | None, typer.Option("--timestamp", min=0, metavar="MS",
                                 help="start at the first record at or after this time "
                                      "(epoch milliseconds)")
    ] = None,
    partition: Annotated[
        list[int] | None, typer.Option("--partition", "-p", min=0,
                                       help="read only this partition (repeatable)")
    ] = None,
    group: Annotated[
        str | None, typer.Option("--group", "-g", help="join this consumer group and commit "
                                                       "what was printed")
    ] = None,
    count: Annotated[
        int | None, typer.Option("--count", "-c", min=1, help="exit after N records")
    ] = None,
    timeout: Annotated[
        float | None, typer.Option("--timeout", min=0.1, metavar="S",
                                   help="exit after S seconds without a record")
    ] = None,
    exit_at_end: Annotated[
        bool, typer.Option("--exit-at-end", "-e", help="exit when every partition is read "
                                                       "to its end")
    ] = False,
    print_key: Annotated[bool, typer.Option("--print-key", help="print KEY<sep>VALUE")] = False,
    print_headers: Annotated[bool, typer.Option("--print-headers")] = False,
    print_partition: Annotated[bool, typer.Option("--print-partition")] = False,
    print_offset: Annotated[bool, typer.Option("--print-offset")] = False,
    print_timestamp: Annotated[bool, typer.Option("--print-timestamp")] = False,
    key_separator: Annotated[
        str, typer.Option("--key-separator", show_default="tab",
                         help="between key and value with --print-key")
    ] = "\t",
    format_: Annotated[
        str | None, typer.Option("--format", "-f",
                                 help="kcat-style format, e.g. '%k:%s\\n' (%t %p %o %k %K "
                                      "%s %S %T %h)")
    ] = None,
    bootstrap: BootstrapOpt = "127.0.0.1:9092",
    output: OutputOpt = None,
    client_config: ClientConfigOpt = None,
) -> None:
    """Print records: one value per line (plain), or a JSON object per line (--output json)."""
    out = resolve_output(output)
    partitions_wanted = list(dict.fromkeys(partition or []))
    positioned = offset is not None or timestamp is not None
    if group is not None and (partitions_wanted or positioned):
        usage_error("--group subscribes and starts at the group's committed offsets; it does "
                    "not mix with --partition/--offset/--timestamp (move a group with "
                    "eddy group reset-offsets)")
    if sum([from_beginning, offset is not None, timestamp is not None]) > 1:
        usage_error("choose one of --from-beginning, --offset and --timestamp")
    print_flags = [print_key, print_headers, print_partition, print_offset, print_timestamp]
    if format_ is not None and (any(print_flags) or out is Output.json):
        usage_error("--format replaces --print-* and --output json; use one of them")
    if out is Output.json and any(print_flags):
        usage_error("--output json always includes key, headers, partition, offset and "
                    "timestamp; drop the --print-* flags")
    formatter: Formatter
    if format_ is not None:
        formatter = kcat_formatter(format_)
    elif out is Output.json:
        def formatter(msg: Message) -> bytes:
            line = json.dumps(record_json(msg), separators=(",", ":"), ensure_ascii=False)
            return line.encode() + b"\n"
    else:
        formatter = default_formatter(
            print_key=print_key, print_headers=print_headers, print_partition=print_partition,
            print_offset=print_offset, print_timestamp=print_timestamp,
            key_separator=unescape(key_separator).encode())

    conn = Conn.make(bootstrap, client_config)
    existing = conn.topic_partitions(topic)
    check_partitions(topic, partitions_wanted, existing)
    seen_errors: set[str] = set()

    def on_error(error: KafkaError) -> None:
        text = f"{kafka_error_text(KafkaException(error))}"
        if text not in seen_errors:
            seen_errors.add(text)
            err(f"warning: {text}")

    conf = conn.client_config(**{
        "group.id": group or "eddy-cli-assign",
        "enable.auto.commit": group is not None,
        # only what was printed gets committed: offsets are stored after each write
        "enable.auto.offset.store": False,
        "auto.offset.reset": "earliest" if from_beginning else "latest",
        "enable.partition.eof": exit_at_end,
        # the end of a partition is only noticed by an empty fetch: keep that one short
        "fetch.wait.max.ms": 100 if exit_at_end else 500,
        "error_cb": on_error,
    })
    consumer = Consumer(conf)
    try:
        if group is not None:
            consumer.subscribe([topic])
            assigned: list[int] | None = None
        else:
            assigned = partitions_wanted or existing
            consumer.assign(
                _start_offsets(conn, topic, assigned, from_beginning, offset, timestamp))
        n = _loop(consumer, formatter, group is not None, assigned, count, timeout,
                  exit_at_end, topic)
    finally:
        try:
            if group is not None:
                # nothing stored to commit (_NO_OFFSET), or the group moved on: fine
                with contextlib.suppress(KafkaException):
                    consumer.commit(asynchronous=False)
        finally:
            consumer.close()
    err(f"consumed {n} record{'s' if n != 1 else ''}")


def _loop(consumer: Consumer, formatter: Formatter, grouped: bool, assigned: list[int] | None,
          count: int | None, timeout: float | None, exit_at_end: bool, topic: str) -> int:
    stdout = sys.stdout.buffer
    interactive = sys.stdout.isatty()
    n = 0
    at_end: set[int] = set()
    last = time.monotonic()
    while count is None or n < count:
        wait = 0.5
        if timeout is not None:
            idle = time.monotonic() - last
            if idle >= timeout:
                break
            wait = min(wait, timeout - idle)
        msg = consumer.poll(wait)
        if msg is None:
            stdout.flush()
            continue
        error = msg.error()
        if error is not None:
            code = error.code()
            if code == KafkaError._PARTITION_EOF:
                p = msg.partition()
                if p is not None:
                    at_end.add(p)
                current = assigned if assigned is not None else [
                    tp.partition for tp in consumer.assignment()]
                if exit_at_end and current and at_end.issuperset(current):
                    break
                continue
            if code in (KafkaError.UNKNOWN_TOPIC_OR_PART, KafkaError._UNKNOWN_TOPIC):
                raise unknown_topic(topic)
            if error.fatal():
                raise KafkaException(error)
            err(f"warning: {error.str()}")
            continue
        last = time.monotonic()
        p = msg.partition()
        if p is not None:
            at_end.discard(p)
        stdout.write(formatter(msg))
        if interactive:
            stdout.flush()
        n += 1
        if grouped:
            consumer.store_offsets(message=msg)
    stdout.flush()
    return n
