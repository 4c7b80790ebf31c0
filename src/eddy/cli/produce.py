"""`eddy produce TOPIC`: one record per input line, from stdin or a file."""

from __future__ import annotations

import base64
import binascii
import json
import os
import sys
from collections.abc import Iterator
from contextlib import ExitStack
from dataclasses import dataclass, field
from typing import IO, Annotated, Any

import typer
from confluent_kafka import KafkaError, Message, Producer
from rich.progress import (
    BarColumn,
    DownloadColumn,
    Progress,
    SpinnerColumn,
    TextColumn,
    TimeElapsedColumn,
)

from eddy.cli.common import (
    BootstrapOpt,
    ClientConfigOpt,
    CliError,
    Conn,
    Output,
    OutputOpt,
    check_partitions,
    handle_errors,
    parse_kv,
    print_json,
    render_table,
    resolve_output,
    stderr_console,
    unescape,
    usage_error,
)

Headers = list[tuple[str, bytes | None]]


@dataclass
class Record:
    value: bytes | None
    key: bytes | None = None
    headers: Headers = field(default_factory=list)
    partition: int | None = None
    timestamp: int | None = None


def _bytes_of(value: Any, encoding: Any, what: str, lineno: int) -> bytes | None:
    """A JSON field as bytes: strings as UTF-8 (or base64 when `encoding` says so), null as
    null, anything else as its compact JSON text."""
    if value is None:
        return None
    if encoding == "base64":
        if not isinstance(value, str):
            raise CliError(f"line {lineno}: {what} is marked base64 but is not a string")
        try:
            return base64.b64decode(value, validate=True)
        except binascii.Error:
            raise CliError(f"line {lineno}: {what} is not valid base64") from None
    if encoding not in (None, "utf-8", "utf8"):
        raise CliError(f"line {lineno}: unknown {what} encoding {encoding!r} "
                       f"(use \"base64\" or leave it out)")
    if isinstance(value, str):
        return value.encode()
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False).encode()


def parse_json_line(line: bytes, lineno: int) -> Record:
    """{"key": .., "value": .., "headers": {..} or [[k, v], ..], "partition": n,
    "timestamp": ms} -- the shape `eddy consume --output json` writes."""
    try:
        obj = json.loads(line)
    except ValueError as exc:
        raise CliError(f"line {lineno}: not valid JSON ({exc}); with --json every line "
                       f"must be an object like {{\"key\": \"k\", \"value\": \"v\"}}") from None
    if not isinstance(obj, dict):
        raise CliError(f"line {lineno}: expected a JSON object like "
                       f"{{\"key\": \"k\", \"value\": \"v\"}}, got {type(obj).__name__}")
    rec = Record(
        value=_bytes_of(obj.get("value"), obj.get("value_encoding"), "value", lineno),
        key=_bytes_of(obj.get("key"), obj.get("key_encoding"), "key", lineno),
    )
    raw_headers = obj.get("headers")
    encodings = obj.get("header_encodings") or {}
    pairs: list[Any]
    if raw_headers is None:
        pairs = []
    elif isinstance(raw_headers, dict):
        pairs = list(raw_headers.items())
    elif isinstance(raw_headers, list) and all(
        isinstance(p, list) and len(p) == 2 for p in raw_headers
    ):
        pairs = raw_headers
    else:
        raise CliError(f"line {lineno}: headers must be an object or a list of [name, value]")
    for name, value in pairs:
        if not isinstance(name, str):
            raise CliError(f"line {lineno}: header names must be strings")
        enc = encodings.get(name) if isinstance(encodings, dict) else None
        rec.headers.append((name, _bytes_of(value, enc, f"header {name!r}", lineno)))
    for attr in ("partition", "timestamp"):
        v = obj.get(attr)
        if v is not None:
            if not isinstance(v, int) or isinstance(v, bool) or v < 0:
                raise CliError(f"line {lineno}: {attr} must be a non-negative integer")
            setattr(rec, attr, v)
    return rec


def parse_plain_line(line: bytes, lineno: int, key_sep: bytes | None) -> Record:
    if key_sep is None:
        return Record(value=line)
    key, sep, value = line.partition(key_sep)
    if not sep:
        raise CliError(
            f"line {lineno} has no key separator {key_sep.decode()!r}; every line must be "
            f"KEY{key_sep.decode()}VALUE, or choose another --key-separator"
        )
    return Record(value=value, key=key)


def _lines(stream: IO[bytes]) -> Iterator[bytes]:
    for raw in stream:
        if raw.endswith(b"\n"):
            raw = raw[:-1]
            if raw.endswith(b"\r"):
                raw = raw[:-1]
        yield raw


@handle_errors
def produce(
    topic: Annotated[str, typer.Argument(help="topic to write to")],
    file: Annotated[
        str | None, typer.Option("--file", "-f", help="read records from this file, not stdin")
    ] = None,
    key_separator: Annotated[
        str | None, typer.Option("--key-separator", "-K",
                                 help="split each line at the first SEP into key and value")
    ] = None,
    header: Annotated[
        list[str] | None, typer.Option("--header", "-H", metavar="KEY=VALUE",
                                       help="header added to every record (repeatable)")
    ] = None,
    partition: Annotated[
        int | None, typer.Option("--partition", "-p", min=0,
                                 help="write every record to this partition")
    ] = None,
    json_: Annotated[
        bool, typer.Option("--json", help='each line is a JSON object {"key", "value", '
                                          '"headers", "partition"}')
    ] = False,
    timeout: Annotated[
        float, typer.Option("--timeout", min=1.0,
                            help="seconds to wait for the broker to acknowledge each record")
    ] = 30.0,
    bootstrap: BootstrapOpt = "127.0.0.1:9092",
    output: OutputOpt = None,
    client_config: ClientConfigOpt = None,
) -> None:
    """Produce one record per line of stdin (or --file), with acks=all.

    Keyed records go to partition murmur2(key) % partitions, as the Java client does.
    """
    out = resolve_output(output)
    if json_ and key_separator is not None:
        usage_error("--json and --key-separator do not mix: put the key in the JSON object")
    if key_separator == "":
        usage_error("--key-separator must not be empty")
    common_headers: Headers = [(k, v.encode()) for k, v in parse_kv(header, "--header")]
    key_sep = unescape(key_separator).encode() if key_separator is not None else None

    conn = Conn.make(bootstrap, client_config)
    existing = conn.topic_partitions(topic)
    if partition is not None:
        check_partitions(topic, [partition], existing)

    with ExitStack() as stack:
        size: int | None = None
        if file is not None:
            try:
                stream: IO[bytes] = stack.enter_context(open(file, "rb"))
                size = os.fstat(stream.fileno()).st_size
            except OSError as exc:
                raise CliError(f"cannot read {file}: {exc.strerror or exc}") from None
        else:
            stream = sys.stdin.buffer
        counts = _run(conn, topic, stream, size, key_sep, json_, common_headers, partition,
                      existing, timeout)
    total = sum(counts.values())
    if out is Output.json:
        print_json({"topic": topic, "produced": total,
                    "partitions": {str(p): n for p, n in sorted(counts.items())}})
    elif out is Output.table and total:
        render_table(out, ["PARTITION", "RECORDS"], sorted(counts.items()),
                     title=f"produced {total} record{'s' if total != 1 else ''} to '{topic}'")
    else:
        typer.echo(f"produced {total} record{'s' if total != 1 else ''} to '{topic}'")


def _run(conn: Conn, topic: str, stream: IO[bytes], size: int | None, key_sep: bytes | None,
         json_: bool, common_headers: Headers, partition: int | None, existing: list[int],
         timeout: float) -> dict[int, int]:
    producer = Producer(conn.client_config(**{
        "acks": "all",
        # murmur2 for keyed records (Java's default partitioner), random for keyless ones
        "partitioner": "murmur2_random",
        "linger.ms": 5,
        "message.timeout.ms": int(timeout * 1000),
        "allow.auto.create.topics": False,
    }))
    counts: dict[int, int] = {}
    failures: list[str] = []

    def delivered(error: KafkaError | None, msg: Message) -> None:
        if error is not None:
            failures.append(f"{error.str()} ({error.name()})")
        else:
            p = msg.partition()
            if p is not None:
                counts[p] = counts.get(p, 0) + 1

    progress: Progress | None = None
    task = None
    if sys.stderr.isatty():
        columns: list[Any] = [SpinnerColumn(), TextColumn("{task.description}")]
        if size:
            columns += [BarColumn(), DownloadColumn()]
        columns += [TextColumn("{task.fields[count]} records"), TimeElapsedColumn()]
        progress = Progress(*columns, console=stderr_console(), transient=True)
        progress.start()
        task = progress.add_task(f"producing to {topic}", total=size or None, count=0)

    consumed = 0
    sent = 0
    line_error: CliError | None = None
    try:
        for lineno, line in enumerate(_lines(stream), start=1):
            consumed += len(line) + 1
            try:
                rec = parse_json_line(line, lineno) if json_ else parse_plain_line(
                    line, lineno, key_sep)
                target = rec.partition if rec.partition is not None else partition
                if target is not None and target not in existing:
                    check_partitions(topic, [target], existing)
            except CliError as exc:  # deliver what came before, then report the line
                line_error = exc if exc.message.startswith("line ") else CliError(
                    f"line {lineno}: {exc.message}")
                break
            kwargs: dict[str, Any] = {"value": rec.value, "key": rec.key,
                                      "on_delivery": delivered}
            headers = common_headers + rec.headers
            if headers:
                kwargs["headers"] = headers
            if target is not None:
                kwargs["partition"] = target
            if rec.timestamp is not None:
                kwargs["timestamp"] = rec.timestamp
            while True:
                try:
                    producer.produce(topic, **kwargs)
                    break
                except BufferError:  # local queue full: let deliveries drain
                    producer.poll(0.1)
            sent += 1
            producer.poll(0)
            if failures:
                break
            if progress is not None and task is not None and sent % 200 == 0:
                progress.update(task, completed=consumed, count=sent)
        remaining = producer.flush(timeout + 5)
        if progress is not None and task is not None:
            progress.update(task, completed=consumed, count=sent)
    finally:
        if progress is not None:
            progress.stop()
    done = sum(counts.values())
    if failures:
        raise CliError(
            f"{len(failures) + remaining} record(s) were not produced to '{topic}' "
            f"({done} were): {failures[0]}"
        )
    if remaining:
        raise CliError(
            f"{remaining} record(s) were not acknowledged by {conn.bootstrap} within "
            f"{timeout:g} s ({done} were); is the broker healthy? (--timeout sets the wait)"
        )
    if line_error is not None:
        raise CliError(f"{line_error.message} ({done} record(s) before it were produced)")
    return counts
