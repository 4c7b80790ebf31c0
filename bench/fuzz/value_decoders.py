"""Fuzz the decoders of record values read from topics (peer input): `python -m
bench.fuzz.value_decoders --seconds 10 [--seed N] [--max-execs N] [--json out.json]
[--slow-ms 1000] [--hang-s 60] [--atheris ...]`.

``check_input(data)`` is the target. The bytes are records split at ``value_seeds.SEP``
(at most ``MAX_RECORDS``; an empty last one is a null value), each ``header HSEP value``
or a value alone, with a schema source that is an in-memory registry (``value_seeds``:
Avro, JSON Schema and Protobuf schemas, references and imports, evolved writers, writer
schemas a hostile producer could register; unknown ids and GUIDs are any others). They go
to:

- the pipelines' decoding (eddy.connect.formats.value_decoding): for each of ``CONFIGS`` (a value
  and a key format, resolved by ``parse_decodings`` / ``resolve`` / ``decoder`` through a
  registry client answering from the in-memory registry), ``decode_batch`` on a batch of
  Spark's Kafka columns (the records as values, in reverse as keys, the headers as
  ``__value_schema_id`` / ``__key_schema_id``); and each decoder's ``decode`` on the
  values, on each value alone (the same answer as in the batch), and with the schema ids
  the headers give (``confluent_wire.parse_header``) when the decoders take them;
- the console's message browser (eddy.observe.console.decode.values): ``SchemaLookup.resolve``
  of the framed ids, ``show_bytes`` of every value (never raises), and each found
  decoder's ``decode`` on the payload directly (``NotDecoded``, or an exception raised
  inside a library such as fastavro or protobuf, is the documented outcome; one raised in
  eddy's own code is a finding).

Documented outcomes: a per-value error string (connect: in the errors list, never the
"cannot convert the record" safety net; console: a ``Shown`` with the reason); a decoded
value is of the column's type (connect) or JSON text (console). Anything else escaping,
or a broken invariant, is a finding, deduplicated by exception type, the line it came from
and the decoder. Every decoder call is timed and its peak memory watched: a call over
``--slow-ms`` or growing the peak RSS by more than ``--max-mb`` is a finding too. A call
that never returns (a C loop does not see signals) is caught by ``--hang-s``: faulthandler
dumps the stacks and ends the process, the input being in ``--hang-file``. Exit status 1
when there are findings. ``--atheris [libFuzzer flags] [CORPUS_DIR ...]`` runs the same
target under libFuzzer (``pip install -e '.[fuzz]'``).
"""

from __future__ import annotations

import argparse
import faulthandler
import inspect
import json
import logging
import random
import re
import resource
import sys
import tempfile
import time
import warnings
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from google.protobuf.message import DecodeError

from bench.fuzz import value_seeds as vs
from bench.fuzz.mesh_decoders import (
    Finding,
    _delete,
    _duplicate,
    _flip,
    _set_byte,
    _splice,
    _truncate,
    _varint,
    print_report,
    start_atheris,
)
from bench.fuzz.registry_decoders import Report, Timer, signature
from eddy.connect.formats import confluent_wire, value_decoding
from eddy.observe.console.decode import values as console
from eddy.observe.console.decode.protobuf import NotDecoded

MAX_INPUT = 64 * 1024
MAX_RECORDS = 8
#: (value format, value subject, key format, key subject) of each pipeline decoding
CONFIGS = [("avro", "pay-value", "json", "orders-value"),
           ("json", "orders-value", "protobuf", "shop-value"),
           ("protobuf", "shop-value", "avro", "ship-value"),
           ("avro", "pay-old", "avro", "address")]
#: an error message longer than this (it echoes the value?) is a finding
MAX_ERROR_CHARS = 2048
#: console decoders' exceptions raised in these packages are the documented "not this
#: format" (the console shows their reason); raised in eddy's code, they are bugs
LIBRARIES = ("fastavro", "google/protobuf", "/json/", "/encodings/", "/decimal.py",
             "/_pydecimal.py", "/uuid.py", "/datetime.py", "/_strptime.py")
_SHOWN_FORMATS = {"null", "avro", "json", "protobuf", "utf8", "hex"}


class InvariantBroken(AssertionError):
    """A decoder returned, but what it returned breaks a documented property."""


# -- the fixture: registry, pipeline decoders, console lookup ----------------------------------
@dataclass
class Fixture:
    reg: vs.Registered
    client: vs.MemoryClient
    pipelines: list[tuple[value_decoding.FieldDecoding, ...]]
    lookup: console.SchemaLookup
    base_schema: Any
    with_located: bool
    seeds: list[bytes] = field(default_factory=list)


_FIXTURE: Fixture | None = None


def _spark_schema() -> Any:
    """Spark's Kafka row schema, with headers (as eddy's source reads with includeHeaders)."""
    import pyarrow as pa

    return pa.schema([
        pa.field("key", pa.binary()), pa.field("value", pa.binary()),
        pa.field("topic", pa.string()), pa.field("partition", pa.int32()),
        pa.field("offset", pa.int64()), pa.field("timestamp", pa.timestamp("us", tz="UTC")),
        pa.field("timestampType", pa.int32()),
        pa.field("headers", pa.list_(pa.struct([pa.field("key", pa.string()),
                                                pa.field("value", pa.binary())])))])


def fixture() -> Fixture:
    """Built once per process: the registry, the client the pipeline decoders use (put in
    value_decoding's per-URL client cache, so ``resolve`` and ``decoder`` use it), the
    resolved decodings and the console's lookup."""
    global _FIXTURE
    if _FIXTURE is None:
        reg = vs.build_registry()
        client = vs.MemoryClient(reg)
        value_decoding._clients[vs.URL] = client
        pipelines = []
        for vfmt, vsub, kfmt, ksub in CONFIGS:
            options = {"schema.registry.url": vs.URL, "value.format": vfmt,
                       "value.subject": vsub, "key.format": kfmt, "key.subject": ksub}
            decs = tuple(value_decoding.resolve(d)
                         for d in value_decoding.parse_decodings(options, ["t"]))
            for dec in decs:
                value_decoding.decoder(dec)
            pipelines.append(decs)
        located = "located" in inspect.signature(
            value_decoding.decoder(pipelines[0][0]).decode).parameters
        _FIXTURE = Fixture(reg, client, pipelines, console.SchemaLookup(reg),  # type: ignore[arg-type]
                           _spark_schema(), located and hasattr(confluent_wire, "parse_header"))
        _FIXTURE.seeds = vs.seed_inputs(reg)
    return _FIXTURE


# -- timing and memory: the per-call guard -----------------------------------------------------
_TIMER: Timer | None = None
_MAX_KB: float | None = None
_now = time.perf_counter  # the decoders' clock (a test may stand in for it)
_big: list[tuple[str, float, bytes]] = []


def _peak_kb() -> int:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss


@contextmanager
def _decoder(name: str, documented: tuple[type[Exception], ...] = ()) -> Iterator[None]:
    """Runs one decoder call: its documented exceptions end it quietly, anything else
    escapes with the decoder's name noted; its time goes to the timer, its peak memory
    growth is checked."""
    start, peak = _now(), _peak_kb()
    try:
        yield
    except documented:
        pass
    except Exception as exc:
        exc.add_note(f"decoder: {name}")
        raise
    finally:
        if _TIMER is not None:
            _TIMER.note(name, _now() - start)
            grown = _peak_kb() - peak
            if _MAX_KB is not None and grown > _MAX_KB:
                _big.append((name, grown / 1024, _TIMER.current))


# -- the target --------------------------------------------------------------------------------
Record = tuple[bytes | None, bytes | None]  # (schema-id header, value)


def split_records(data: bytes) -> list[Record]:
    parts = data.split(vs.SEP)[:MAX_RECORDS]
    out: list[Record] = []
    for i, part in enumerate(parts):
        if not part and i == len(parts) - 1 and i > 0:
            out.append((None, None))  # a null value
            continue
        header, sep, value = part.partition(vs.HSEP)
        out.append((header, value) if sep else (None, part))
    return out


def check_input(data: bytes) -> None:
    """The fuzz target: returns for every documented outcome, raises anything else."""
    fix = fixture()
    records = split_records(data)
    _check_console(fix, records)
    for decs in fix.pipelines:
        _check_pipeline(fix, decs, records)


def _check_console(fix: Fixture, records: list[Record]) -> None:
    values = [v for _, v in records]
    ids = {i for v in values if (i := console.framed_id(v)) is not None}
    found: dict[int, console.Found] = {}
    with _decoder("console.resolve"):
        found = fix.reg.call(fix.lookup.resolve(sorted(ids)[:16]))
    for value in values:
        with _decoder("console.show_bytes"):
            shown = console.show_bytes(value, found)
        _check_shown(value, shown)
        schema_id = console.framed_id(value)
        decoder = found.get(schema_id)[0] if schema_id in found else None  # type: ignore[index]
        if value is None or decoder is None:
            continue
        try:
            with _decoder(f"console.{decoder.label}", (NotDecoded, DecodeError)):
                decoder.decode(value[5:])
        except Exception as exc:
            if not _from_library(exc):
                raise


def _from_library(exc: BaseException) -> bool:
    """Whether an exception was raised inside a library (its last frame), not eddy."""
    tb = exc.__traceback__
    while tb is not None and tb.tb_next is not None:
        tb = tb.tb_next
    where = tb.tb_frame.f_code.co_filename if tb is not None else ""
    return "/eddy/" not in where and any(lib in where for lib in LIBRARIES)


def _check_shown(value: bytes | None, shown: console.Shown) -> None:
    if shown.format not in _SHOWN_FORMATS:
        raise InvariantBroken(f"shown as {shown.format!r}")
    if shown.size != (0 if value is None else len(value)):
        raise InvariantBroken(f"size {shown.size} for {0 if value is None else len(value)}")
    if shown.format in ("avro", "json", "protobuf"):
        if shown.schema_id != console.framed_id(value):
            raise InvariantBroken(f"decoded by id {shown.schema_id}, framed with another")
        text = shown.text or ""
        if len(text) > console.SHOWN_BYTES + 1:
            raise InvariantBroken(f"shown text of {len(text)} characters")
        if not text.endswith("…"):
            json.loads(text)  # a decoded value is shown as JSON
    elif shown.text is not None and len(shown.text) > 3 * console.SHOWN_BYTES:
        raise InvariantBroken(f"raw text of {len(shown.text)} characters")
    shown.to_json()


def _located(fix: Fixture, dec: value_decoding.FieldDecoding, header: bytes | None
             ) -> Any:
    """What a record's schema-id header says (parse_header), or None."""
    if header is None or not fix.with_located:
        return None
    with _decoder("confluent_wire.parse_header", (confluent_wire.FrameError,)):
        return confluent_wire.parse_header(header, dec.format == "protobuf")  # type: ignore[attr-defined]
    return None


def _decode(dec: value_decoding.FieldDecoding, values: list[bytes | None],
            located: list[Any] | None) -> tuple[Any, list[str | None]]:
    decoder = value_decoding.decoder(dec)
    name = f"pipeline.{dec.format}.decode"
    with _decoder(name):
        if located is None:
            array, errors = decoder.decode(values)
        else:
            array, errors = decoder.decode(values, located)  # type: ignore[call-arg]
        _check_decoded(dec, decoder.arrow_type, values, array, errors)
    return array, errors


def _check_decoded(dec: value_decoding.FieldDecoding, arrow_type: Any,
                   values: list[bytes | None], array: Any, errors: list[str | None]) -> None:
    if len(array) != len(values) or len(errors) != len(values):
        raise InvariantBroken(f"{len(values)} values gave {len(array)} rows, "
                              f"{len(errors)} errors")
    if array.type != arrow_type:
        raise InvariantBroken(f"decoded as {array.type}, not the column's {arrow_type}")
    for i, (value, error) in enumerate(zip(values, errors, strict=True)):
        if value is None and (error is not None or array[i].is_valid):
            raise InvariantBroken("a null value decoded, or failed")
        if error is None:
            continue
        if not isinstance(error, str) or array[i].is_valid:
            raise InvariantBroken(f"an error {error!r} beside a decoded value")
        if error.startswith("cannot convert the record ("):
            kind = error.removeprefix("cannot convert the record (").split(":", 1)[0]
            raise InvariantBroken(f"{dec.format}: a {kind} reached the safety net: "
                                  f"{error[:200]}")
        if len(error) > MAX_ERROR_CHARS:
            raise InvariantBroken(f"an error message of {len(error)} characters")


_ADDRESS = re.compile(r" at 0x[0-9a-f]+")


def _same(error: str | None) -> str | None:
    """An error message without object addresses (``<_io.BytesIO object at 0x..>``)."""
    return None if error is None else _ADDRESS.sub("", error)


def _text(array: Any) -> str:
    """Arrow's own print of an array, whole (to_pylist would fail on dates past Python's
    datetime range, which Arrow holds)."""
    return str(array.to_string(window=1 << 20, container_window=1 << 20))


def _check_pipeline(fix: Fixture, decs: tuple[value_decoding.FieldDecoding, ...],
                    records: list[Record]) -> None:
    import pyarrow as pa

    values = [v for _, v in records]
    keys = values[::-1]
    heads = [h for h, _ in records]
    header_names = {d.field: getattr(confluent_wire, "HEADER_KEYS", {}).get(
        d.field, f"__{d.field}_schema_id") for d in decs}
    rows = len(values)
    headers = [[(header_names["value"], h)] + ([(header_names["key"], k)] if k is not None
                                               else [])
               if h is not None else ([(header_names["key"], k)] if k is not None else [])
               for h, k in zip(heads, heads[::-1], strict=True)]
    batch = pa.RecordBatch.from_arrays([
        pa.array(keys, pa.binary()), pa.array(values, pa.binary()),
        pa.array(["t"] * rows, pa.string()), pa.array([0] * rows, pa.int32()),
        pa.array(range(rows), pa.int64()), pa.array([0] * rows, pa.timestamp("us", tz="UTC")),
        pa.array([0] * rows, pa.int32()),
        pa.array([[{"key": k, "value": v} for k, v in hs] for hs in headers],
                 fix.base_schema.field("headers").type)], schema=fix.base_schema)
    schema = value_decoding.output_schema(fix.base_schema, decs)
    with _decoder("pipeline.decode_batch"):
        out = value_decoding.decode_batch(batch, decs, schema)
    if out.schema != schema or out.num_rows != rows:
        raise InvariantBroken("decode_batch's output is not of output_schema, or lost rows")
    for name in ("key", "value"):
        raw = value_decoding.RAW_COLUMNS[name]
        if raw in schema.names and out.column(raw).to_pylist() != batch.column(name).to_pylist():
            raise InvariantBroken(f"{raw} is not the record's bytes")
    for dec in decs:
        column = keys if dec.field == "key" else values
        array, errors = _decode(dec, column, None)
        for i, value in enumerate(column):  # alone, each value decodes as in the batch
            alone, alone_errors = _decode(dec, [value], None)
            if _same(alone_errors[0]) != _same(errors[i]) or \
                    _text(alone) != _text(array.slice(i, 1)):
                raise InvariantBroken(f"{dec.format}: value {i} decodes alone as "
                                      f"{alone_errors[0]!r}, in the batch as {errors[i]!r}")
        if fix.with_located:
            sides = heads if dec.field == "value" else heads[::-1]
            located = [_located(fix, dec, h) for h in sides]
            if any(loc is not None for loc in located):
                _decode(dec, column, located)


# -- mutations ---------------------------------------------------------------------------------
def _schema_id(rng: random.Random, b: bytearray, _: list[bytes]) -> None:
    """Point a framed value at another id: a known one, a near one, or a far one."""
    starts = [i for i in range(len(b)) if b[i] == 0 and i + 5 <= len(b)]
    if not starts:
        return
    pos = rng.choice(starts)
    new = rng.choice([rng.randint(1, 16), rng.randint(0, 1 << 16), (1 << 32) - 1,
                      rng.getrandbits(32)])
    b[pos + 1:pos + 5] = new.to_bytes(4, "big")


def _magic(rng: random.Random, b: bytearray, _: list[bytes]) -> None:
    b[0] = rng.choice([0, 1, 2, 0x7B])


def _records(rng: random.Random, b: bytearray, corpus: list[bytes]) -> None:
    """Join with another seed's records, or drop one."""
    parts = bytes(b).split(vs.SEP)
    if rng.random() < 0.5 or len(parts) == 1:
        parts.insert(rng.randrange(len(parts) + 1), rng.choice(corpus).split(vs.SEP)[0])
    else:
        del parts[rng.randrange(len(parts))]
    b[:] = vs.SEP.join(parts)


Mutation = Callable[[random.Random, bytearray, list[bytes]], None]
MUTATIONS: list[Mutation] = [_flip, _flip, _set_byte, _set_byte, _varint, _truncate,
                             _duplicate, _delete, _splice, _schema_id, _magic, _records]


def next_input(rng: random.Random, corpus: list[bytes]) -> bytes:
    """One in sixteen inputs is random bytes (framed, half of them); the others a seed with
    1-3 mutations."""
    if rng.random() < 0.0625:
        body = rng.randbytes(rng.randrange(64))
        return vs.frame(rng.randint(1, 16), body) if rng.random() < 0.5 else body
    b = bytearray(rng.choice(corpus))
    for _ in range(rng.randint(1, 3)):
        if not b:
            break
        rng.choice(MUTATIONS)(rng, b, corpus)
    return bytes(b[:MAX_INPUT])


# -- the run -----------------------------------------------------------------------------------
def run(seconds: float, seed: int = 1, max_execs: int | None = None,
        clock: Callable[[], float] = time.monotonic, slow_ms: float | None = None,
        max_mb: float | None = None, hang_s: float | None = None,
        hang_file: str | None = None) -> Report:
    """Fuzz for ``seconds`` (or ``max_execs`` inputs); findings deduplicated by signature;
    with ``slow_ms`` / ``max_mb``, a decoder call slower than that or growing the peak RSS
    by more is a finding too; with ``hang_s``, a call longer than that ends the process
    (stacks on stderr, the input in ``hang_file``)."""
    global _TIMER, _MAX_KB
    rng = random.Random(seed)
    corpus = fixture().seeds
    report = Report(seed, slow_ms=slow_ms)
    found: dict[str, Finding] = {}

    def add(sig: str, message: str, data: bytes) -> None:
        if sig in found:
            found[sig].count += 1
        else:
            found[sig] = Finding(sig, message[:300], data[:4096].hex())

    timer = _TIMER = Timer(slow_ms)
    _MAX_KB = None if max_mb is None else max_mb * 1024
    quiet = logging.getLogger("eddy")
    level, quiet.level = quiet.level, logging.CRITICAL + 1
    start = clock()
    deadline = start + seconds
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            while (max_execs is None or report.execs < max_execs) and (
                    report.execs % 16 or clock() < deadline):
                data = next_input(rng, corpus)
                timer.current = data
                report.execs += 1
                if hang_s is not None and hang_file is not None:
                    Path(hang_file).write_bytes(data)
                    faulthandler.dump_traceback_later(hang_s, exit=True)
                try:
                    check_input(data)
                except Exception as exc:
                    add(signature(exc), str(exc), data)
                for name, ms, slow in timer.slow:
                    add(f"Slow in {name}", f"{ms:.0f} ms (over {slow_ms} ms)", slow)
                for name, mb, big in _big:
                    add(f"Memory in {name}", f"peak RSS grew {mb:.0f} MiB (over {max_mb})",
                        big)
                timer.slow.clear()
                _big.clear()
    finally:
        if hang_s is not None:
            faulthandler.cancel_dump_traceback_later()
        _TIMER = None
        _MAX_KB = None
        quiet.level = level
    report.seconds = clock() - start
    report.findings = list(found.values())
    report.slowest = dict(sorted(timer.slowest.items()))
    return report


def atheris_main(argv: list[str]) -> None:
    """libFuzzer over ``check_input`` (``start_atheris``, seeded with the valid values)."""
    logging.getLogger("eddy").setLevel(logging.CRITICAL + 1)
    warnings.simplefilter("ignore")
    extra = () if any(a.startswith("-max_len=") for a in argv) else ("-max_len=8192",)
    start_atheris(argv, check_input, fixture().seeds, "eddy-value-fuzz-", extra)


def main(argv: list[str] | None = None) -> int:
    args_in = sys.argv[1:] if argv is None else argv
    if args_in[:1] == ["--atheris"]:
        atheris_main([sys.argv[0], *args_in[1:]])
        return 0
    ap = argparse.ArgumentParser(prog="python -m bench.fuzz.value_decoders",
                                 description="Fuzz the pipelines' and the console's value "
                                             "decoders.")
    ap.add_argument("--seconds", type=float, default=10.0)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--max-execs", type=int, help="stop after this many inputs")
    ap.add_argument("--slow-ms", type=float, default=1000.0,
                    help="a decoder call slower than this is a finding (0: off)")
    ap.add_argument("--max-mb", type=float, default=256.0,
                    help="a decoder call growing the peak RSS by more is a finding (0: off)")
    ap.add_argument("--hang-s", type=float, default=60.0,
                    help="a call longer than this ends the run, stacks dumped (0: off)")
    ap.add_argument("--hang-file", default=str(Path(tempfile.gettempdir())
                                               / "eddy-value-fuzz-current.bin"),
                    help="where the input being decoded is kept (for --hang-s)")
    ap.add_argument("--json", help="write the report as JSON to this file")
    args = ap.parse_args(args_in)
    report = run(args.seconds, args.seed, args.max_execs, slow_ms=args.slow_ms or None,
                 max_mb=args.max_mb or None, hang_s=args.hang_s or None,
                 hang_file=args.hang_file)
    slowest = tuple(f"    {name:32} {slow.ms:9.3f} ms  ({slow.size} bytes)"
                    for name, slow in sorted(report.slowest.items(), key=lambda kv: -kv[1].ms))
    return print_report("value decoders", report, args.json,
                        ("  slowest input per decoder:", *slowest))


if __name__ == "__main__":
    sys.exit(main())
