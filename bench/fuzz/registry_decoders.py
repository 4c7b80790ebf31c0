"""Fuzz the schema registry's decoders (issue 15's hostile-input rule): `python -m
bench.fuzz.registry_decoders --seconds 10 [--seed N] [--json out.json] [--slow-ms 1000]`.

``check_input(data)`` is the target. The bytes are split at NUL into segments and fed to:

- ``records.decode_key`` / ``decode_value`` (for every key kind), whole and per segment
  (``RecordError`` only), and whatever decodes re-encodes to bytes that decode the same;
- ``SchemaState.apply`` (never raises): a state already holding subjects, references,
  configs and modes replays the segments as (key, value) records (an empty value is a
  tombstone); then every read of the state answers, and what GET requests would render of
  it (``http_server.json_response``) encodes to strict JSON;
- ``http_server.read_json`` on the bytes as a body, ``negotiate`` on them as an Accept
  header and ``guid.parse_guid`` on them as a path (never raise), ``http_auth.parse_basic``
  on them as an Authorization header (``HttpAuthError`` only), ``SchemaRequest.from_body``
  and ``parse_version`` / ``parse_level`` / ``parse_mode`` (``RegistryError`` only), and
  ``guid.schema_guid`` of an accepted body (never raises);
- ``avro_schema.parse`` (new and stored), ``json_schema.parse`` and ``protobuf_schema.parse``
  (``InvalidSchema`` only; Protobuf only up to PROTO_MAX_CHARS) on the first segment, with the
  other segments that look like ``name\\x01text`` as references, and on the schema of a body
  that ``from_body`` accepts; a parsed schema's ``canonical()`` and ``normalized()`` answer,
  its canonical form parses again to itself, and ``*_compat.compatibility`` runs both ways
  against itself and fixed seeds of its format (never raises).

Anything else escaping is a finding, deduplicated by exception type, the line it came from
and the decoder. Every decoder call is timed: the report names the slowest input of each
decoder, and a call over ``--slow-ms`` is a finding too. ``main`` runs random inputs and
mutations of valid seeds (bytes, JSON tokens and JSON trees, schemas embedded in bodies and
values included) for a time budget, deterministically by ``--seed``. Exit status 1 when
there are findings. ``--atheris [libFuzzer flags] [CORPUS_DIR ...]`` runs the same target
under libFuzzer (``pip install -e '.[fuzz]'``).
"""

from __future__ import annotations

import argparse
import json
import logging
import random
import sys
import time
import warnings
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any, cast

from aiohttp import web

from bench.fuzz.mesh_decoders import (
    Finding,
    _delete,
    _duplicate,
    _flip,
    _set_byte,
    _splice,
    _truncate,
    print_report,
    raised_at,
    start_atheris,
)
from bench.fuzz.registry_seeds import (
    BASE_RECORDS,
    JSON_KEYS,
    JSON_VALUES,
    NUMBERS,
    SCHEMAS,
    TOKENS,
    seed_inputs,
)
from eddy.formats.avro import compat as avro_compat
from eddy.formats.avro import schema as avro_schema
from eddy.formats.base import InvalidSchema, References
from eddy.formats.json_schema import compat as json_compat
from eddy.formats.json_schema import schema as json_schema
from eddy.formats.protobuf import compat as protobuf_compat
from eddy.formats.protobuf import schema as protobuf_schema
from eddy.registry import forward_wire
from eddy.registry import records as rec
from eddy.registry.contract import RegistryError
from eddy.registry.guid import parse_guid, schema_guid
from eddy.registry.http import server as hs
from eddy.registry.requests import SchemaRequest, parse_level, parse_mode, parse_version
from eddy.registry.schema_ops import entity
from eddy.registry.state import SchemaState
from eddy.security.http_auth import HttpAuthError, parse_basic
from eddy.telemetry import pipeline_status

#: Protobuf's parser costs ~7 us per character: texts (references included) above this are
#: not given to it (the other parsers take every input)
PROTO_MAX_CHARS = 4096
#: inputs are cut to this size after mutation (memory and time per input stay bounded)
MAX_INPUT = 64 * 1024
MAX_SEGMENTS = 16
#: one instance of each kind of key, to read every input as each kind of value
KEY_KINDS: list[rec.RecordKey] = [
    rec.SchemaKey("s", 1), rec.ConfigKey(None), rec.ConfigKey("s"), rec.ModeKey(None),
    rec.DeleteSubjectKey("s"), rec.ClearSubjectKey(None), rec.NoopKey()]


class InvariantBroken(AssertionError):
    """A decoder returned, but what it returned breaks a documented property."""


# -- timing: the per-input guard ---------------------------------------------------------------
@dataclass
class Slowest:
    ms: float
    size: int
    input_hex: str  # the first 512 bytes of the input


@dataclass
class Timer:
    slow_ms: float | None = None
    slowest: dict[str, Slowest] = field(default_factory=dict)
    slow: list[tuple[str, float, bytes]] = field(default_factory=list)
    current: bytes = b""

    def note(self, name: str, seconds: float) -> None:
        ms = seconds * 1000
        best = self.slowest.get(name)
        if best is None or ms > best.ms:
            self.slowest[name] = Slowest(round(ms, 3), len(self.current),
                                         self.current[:512].hex())
        if self.slow_ms is not None and ms > self.slow_ms:
            self.slow.append((name, ms, self.current))


_TIMER: Timer | None = None
_now = time.perf_counter  # the decoders' clock (a test may stand in for it)


@contextmanager
def _decoder(name: str, documented: tuple[type[Exception], ...] = ()) -> Iterator[None]:
    """Runs one decoder call: its documented exceptions end it quietly, anything else
    escapes with the decoder's name noted; the call's time goes to the timer."""
    start = _now()
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


# -- the target --------------------------------------------------------------------------------
def check_input(data: bytes) -> None:
    """The fuzz target: returns for every documented outcome, raises anything else."""
    parts = data.split(b"\x00")[:MAX_SEGMENTS]
    _check_records([data, *parts] if len(parts) > 1 else [data])
    _check_mesh_and_reports(data)
    _check_state(parts)
    _check_http(data)
    text = parts[0].decode("utf-8", "surrogateescape")
    refs: dict[str, str] = {}
    for part in parts[1:9]:
        name, sep, ref = part.decode("utf-8", "surrogateescape").partition("\x01")
        if sep:
            refs[name] = ref
    for schema_type in ("AVRO", "JSON", "PROTOBUF"):
        check_schema(schema_type, text, refs)


def _check_records(segments: list[bytes]) -> None:
    for seg in segments:
        key: rec.RecordKey | None = None
        with _decoder("records.decode_key", (rec.RecordError,)):
            key = rec.decode_key(seg)
        if key is not None and not isinstance(key, rec.OtherKey):
            with _decoder("records.key_round_trip"):
                again = rec.decode_key(rec.encode_key(key))
            if again != key:
                raise InvariantBroken(f"key {key!r} re-reads as {again!r}")
        for kind in KEY_KINDS:
            value: rec.RecordValue | None = None
            with _decoder("records.decode_value", (rec.RecordError,)):
                value = rec.decode_value(kind, seg)
            if value is None:
                continue
            with _decoder("records.value_round_trip"):
                raw = rec.encode_value(value)
                again_raw = rec.encode_value(cast(rec.RecordValue, rec.decode_value(kind, raw)))
            if again_raw != raw:
                raise InvariantBroken(f"value {raw!r} re-encodes as {again_raw!r}")


def _check_mesh_and_reports(data: bytes) -> None:
    """What other nodes and processes send a registry node: a forwarded write and its
    answer (mesh payloads), and a pipeline's status report (topic _eddy_pipelines)."""
    request = None
    with _decoder("forward_wire.decode_request", (forward_wire.WireError,)):
        request = forward_wire.decode_request(data)
    if request is not None and request.body:
        with _decoder("forward_wire.load_json", (forward_wire.WireError,)):
            forward_wire.load_json(request.body, "body")
    answer = None
    with _decoder("forward_wire.decode_answer", (forward_wire.WireError,)):
        answer = forward_wire.decode_answer(data)
    if answer is not None and answer.status == 200:
        with _decoder("forward_wire.check_result", (forward_wire.WireError,)):
            for op in forward_wire.OP_NAMES:
                forward_wire.check_result(op, forward_wire.load_json(answer.body, "body"))
    key = data[:64] if data else None
    with _decoder("pipeline_status.decode", (ValueError,)):
        pipeline_status.decode(key, data)
    with _decoder("pipeline_status.decode_unkeyed", (ValueError,)):
        pipeline_status.decode(None, data)


def _check_state(parts: list[bytes]) -> None:
    """The segments as (key, value) records replayed onto a populated state; an empty value
    segment (or a missing last one) is a tombstone."""
    state = SchemaState()
    pairs = [(parts[i], (parts[i + 1] or None) if i + 1 < len(parts) else None)
             for i in range(0, len(parts), 2)]
    with _decoder("state.apply"):
        for key, value in [*BASE_RECORDS, *pairs]:
            state.apply(key, value)
    if state.applied + state.skipped != len(BASE_RECORDS) + len(pairs):
        raise InvariantBroken("state.apply lost count of a record")
    with _decoder("state.read"):
        names = state.subject_names(include_deleted=True)
        rendered: list[Any] = [names, state.subject_names(), state.next_id]
        for subject in names:
            state.latest(subject)
            for entry in state.versions(subject, include_deleted=True):
                if entry not in state.users_of_id(entry.id):
                    raise InvariantBroken(f"{subject} v{entry.version} not a user of its id")
                if state.schema_by_id(entry.id) is None or state.id_for(entry.content) is None:
                    raise InvariantBroken(f"{subject} v{entry.version}: its id is lost")
                state.schema_key_bytes(subject, entry.version)
                rendered += [state.referenced_by(subject, entry.version), entity(entry)]
        for scope, config in list(state.configs.items()):
            state.config_key_bytes(scope)
            rendered.append(dict(config.fields))
        for scope, mode in list(state.modes.items()):
            state.mode_key_bytes(scope)
            rendered.append({"mode": mode})
    for item in rendered:  # what GET requests answer: json_response, read back strictly
        with _decoder("state.render"):
            _render(item)


def _strict(name: str) -> Any:
    raise InvariantBroken(f"a response carries {name}, which is not JSON")


def _render(value: Any) -> None:
    body = hs.json_response(value).body
    json.loads(cast(bytes, body), parse_constant=_strict)


class _Request:
    """What ``read_json`` uses of an aiohttp request: the app's body limit, the declared
    length and the body."""

    def __init__(self, data: bytes) -> None:
        self.app = {hs._MAX_BODY: hs.DEFAULT_MAX_BODY}
        self.content_length = len(data)
        self._data = data

    async def read(self) -> bytes:
        return self._data


def read_body(data: bytes) -> dict[str, Any]:
    """``http_server.read_json`` on ``data`` as a request body, without an event loop."""
    coro = hs.read_json(cast(web.Request, _Request(data)))
    try:
        coro.send(None)
    except StopIteration as done:
        return cast(dict[str, Any], done.value)
    coro.close()
    raise InvariantBroken("read_json waited on a body already read")


def _check_http(data: bytes) -> None:
    text = data.decode("utf-8", "surrogateescape")
    with _decoder("http.negotiate"):
        hs.negotiate(text)
    with _decoder("guid.parse_guid"):
        parse_guid(text)
    for header in (text, "Basic " + text):  # as an Authorization header, and as its token
        with _decoder("http_auth.parse_basic", (HttpAuthError,)):
            user, password = parse_basic(header)
            if not user or not password or "\x00" in user + password:
                raise AssertionError("parse_basic accepted an empty or NUL field")
    for name, parse in (("version", parse_version), ("level", parse_level),
                        ("mode", parse_mode)):
        with _decoder(f"requests.parse_{name}", (RegistryError,)):
            parse(text)
    body: dict[str, Any] | None = None
    with _decoder("http.read_json", (RegistryError,)):
        body = read_body(data)
    if body is None:
        return
    with _decoder("requests.parse_level", (RegistryError,)):
        parse_level(body.get("compatibility"))
    with _decoder("requests.parse_mode", (RegistryError,)):
        parse_mode(body.get("mode"))
    request: SchemaRequest | None = None
    with _decoder("requests.from_body", (RegistryError,)):
        request = SchemaRequest.from_body(body)
    if request is not None:
        with _decoder("guid.schema_guid"):
            parse_guid(schema_guid(request.schema, request.references, request.metadata,
                                   request.rule_set))
        check_schema(request.schema_type, request.schema, {})


# -- the schema formats ------------------------------------------------------------------------
Parse = Callable[[str, References], Any]
Compat = Callable[[Any, Any], list[Any]]


def _avro(text: str, refs: References) -> Any:
    return avro_schema.parse(text, refs)


def _avro_stored(text: str, refs: References) -> Any:
    return avro_schema.parse(text, refs, is_new=False)


FORMATS: dict[str, tuple[str, list[Parse], Parse, Compat]] = {
    # type: (short name, parses of a new text, parse of a stored one, compatibility)
    "AVRO": ("avro", [_avro, _avro_stored], _avro_stored, avro_compat.compatibility),
    "JSON": ("json", [json_schema.parse], json_schema.parse, json_compat.compatibility),
    "PROTOBUF": ("protobuf", [protobuf_schema.parse], protobuf_schema.parse,
                 protobuf_compat.compatibility),
}
_COMPAT_SEEDS: dict[str, list[Any]] = {}


def compat_seeds(schema_type: str) -> list[Any]:
    """Fixed valid schemas of a format that every parsed input is compared with."""
    if schema_type not in _COMPAT_SEEDS:
        _, _, stored, _ = FORMATS[schema_type]
        _COMPAT_SEEDS[schema_type] = [stored(text, refs) for text, refs
                                      in SCHEMAS[schema_type][:3]]
    return _COMPAT_SEEDS[schema_type]


def check_schema(schema_type: str, text: str, refs: References) -> None:
    """Parses ``text`` as ``schema_type`` (InvalidSchema only), then checks what the
    registry does with a parsed schema: its forms, its canonical form read back, and
    compatibility against itself and the format's seeds."""
    if schema_type not in FORMATS:
        return
    name, parses, stored, compat = FORMATS[schema_type]
    if schema_type == "PROTOBUF" and len(text) + sum(map(len, refs.values())) > PROTO_MAX_CHARS:
        return
    parsed = None
    for parse in parses:
        with _decoder(f"{name}.parse", (InvalidSchema,)):
            parsed = parsed or parse(text, refs)
    if parsed is None:
        return
    with _decoder(f"{name}.forms"):
        canonical = parsed.canonical()
        parsed.normalized()
        _render({"schema": canonical})
    with _decoder(f"{name}.reparse"):
        again = stored(canonical, refs).canonical()
    if again != canonical:
        raise InvariantBroken(f"{name} canonical {canonical[:200]!r} reads back as "
                              f"{again[:200]!r}")
    seeds: list[Any] = []
    with _decoder(f"{name}.parse"):  # the seeds are parsed on first use, by the same parser
        seeds = compat_seeds(schema_type)
    for other in [parsed, *seeds]:
        with _decoder(f"{name}.compat"):
            for issue in compat(parsed, other) + compat(other, parsed):
                issue.message()



# -- mutations ---------------------------------------------------------------------------------
def _token(rng: random.Random, b: bytearray, _: list[bytes]) -> None:
    pos = rng.randrange(len(b) + 1)
    b[pos:pos] = rng.choice(TOKENS)


def _number(rng: random.Random, b: bytearray, _: list[bytes]) -> None:
    digits = [i for i in range(len(b)) if 0x30 <= b[i] <= 0x39]
    if digits:
        lo = hi = rng.choice(digits)
        while hi < len(b) and 0x30 <= b[hi] <= 0x39:
            hi += 1
        b[lo:hi] = rng.choice(NUMBERS)


def _mutate_json(rng: random.Random, node: Any, depth: int) -> Any:
    """One change somewhere in a JSON tree: descend at random, then replace, add, drop or
    wrap; a string holding JSON (a schema in a body or value) is descended into too."""
    if isinstance(node, dict) and node and depth < 10 and rng.random() < 0.75:
        key = rng.choice(list(node))
        node[key] = _mutate_json(rng, node[key], depth + 1)
        return node
    if isinstance(node, list) and node and depth < 10 and rng.random() < 0.75:
        i = rng.randrange(len(node))
        node[i] = _mutate_json(rng, node[i], depth + 1)
        return node
    if isinstance(node, str) and len(node) > 8 and rng.random() < 0.8:
        try:
            inner = json.loads(node)
        except (ValueError, RecursionError):
            raw = bytearray(node.encode("utf-8", "surrogatepass"))
            rng.choice(TEXT_MUTATIONS)(rng, raw, [])
            return raw.decode("utf-8", "surrogateescape")
        return json.dumps(_mutate_json(rng, inner, depth + 1))
    op = rng.randrange(6)
    if op == 0 and isinstance(node, dict):
        node[rng.choice(JSON_KEYS)] = rng.choice(JSON_VALUES)
    elif op == 1 and isinstance(node, dict) and node:
        del node[rng.choice(list(node))]
    elif op == 2 and isinstance(node, list):
        node.insert(rng.randrange(len(node) + 1), rng.choice([*node, *JSON_VALUES]))
    elif op == 3:
        return rng.choice([[node], {"type": node}, {"items": node}, [node, node]])
    else:
        return rng.choice(JSON_VALUES)
    return node


def _tree(rng: random.Random, b: bytearray, corpus: list[bytes]) -> None:
    head, sep, tail = bytes(b).partition(b"\x00")
    part, rest = (tail, head + sep) if sep and rng.random() < 0.5 else (head, b"")
    try:
        doc = json.loads(part)
    except (ValueError, RecursionError):
        _token(rng, b, corpus)
        return
    try:
        text = json.dumps(_mutate_json(rng, doc, 0), ensure_ascii=rng.random() < 0.5,
                          separators=(",", ":") if rng.random() < 0.7 else None)
    except (ValueError, RecursionError):
        return
    new = text.encode("utf-8", "surrogatepass")
    b[:] = rest + new if rest else new + (sep + tail if sep else b"")


Mutation = Callable[[random.Random, bytearray, list[bytes]], None]
TEXT_MUTATIONS: list[Mutation] = [_flip, _set_byte, _truncate, _duplicate, _delete, _token,
                                  _number]
MUTATIONS: list[Mutation] = [*TEXT_MUTATIONS, _splice, _tree, _tree, _tree]


def next_input(rng: random.Random, corpus: list[bytes]) -> bytes:
    """One in sixteen inputs is random bytes; the others a seed with 1-3 mutations."""
    if rng.random() < 0.0625:
        return rng.randbytes(rng.randrange(64))
    b = bytearray(rng.choice(corpus))
    for _ in range(rng.randint(1, 3)):
        if not b:
            break
        rng.choice(MUTATIONS)(rng, b, corpus)
    return bytes(b[:MAX_INPUT])


# -- the run -----------------------------------------------------------------------------------
@dataclass
class Report:
    seed: int
    seconds: float = 0.0
    execs: int = 0
    findings: list[Finding] = field(default_factory=list)
    slowest: dict[str, Slowest] = field(default_factory=dict)
    slow_ms: float | None = None

    @property
    def execs_per_s(self) -> float:
        return self.execs / self.seconds if self.seconds else 0.0


def signature(exc: BaseException) -> str:
    """Exception type, the line it was raised from, and the decoder that let it escape."""
    where = raised_at(exc)
    notes = [n for n in getattr(exc, "__notes__", []) if n.startswith("decoder: ")]
    decoder = notes[0].removeprefix("decoder: ") if notes else "?"
    return f"{type(exc).__name__} at {where} in {decoder}"


def run(seconds: float, seed: int = 1, max_execs: int | None = None,
        clock: Callable[[], float] = time.monotonic, slow_ms: float | None = None) -> Report:
    """Fuzz for ``seconds`` (or ``max_execs`` inputs); findings deduplicated by signature;
    with ``slow_ms``, a decoder call slower than that is a finding too."""
    global _TIMER
    rng = random.Random(seed)
    corpus = seed_inputs()
    report = Report(seed, slow_ms=slow_ms)
    found: dict[str, Finding] = {}

    def add(sig: str, message: str, data: bytes) -> None:
        if sig in found:
            found[sig].count += 1
        else:
            found[sig] = Finding(sig, message[:300], data[:4096].hex())

    timer = _TIMER = Timer(slow_ms)
    quiet = logging.getLogger("eddy.registry")  # skipped records are logged, one by one
    level, quiet.level = quiet.level, logging.CRITICAL + 1
    start = clock()
    deadline = start + seconds
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # e.g. re's FutureWarning on a fuzzed pattern
            while (max_execs is None or report.execs < max_execs) and (
                    report.execs % 16 or clock() < deadline):
                data = next_input(rng, corpus)
                timer.current = data
                report.execs += 1
                try:
                    check_input(data)
                except Exception as exc:
                    add(signature(exc), str(exc), data)
                for name, ms, slow in timer.slow:
                    add(f"Slow in {name}", f"{ms:.0f} ms (over {slow_ms} ms)", slow)
                timer.slow.clear()
    finally:
        _TIMER = None
        quiet.level = level
    report.seconds = clock() - start
    report.findings = list(found.values())
    report.slowest = dict(sorted(timer.slowest.items()))
    return report


def atheris_main(argv: list[str]) -> None:
    """libFuzzer over ``check_input`` (``start_atheris``, seeded with ``seed_inputs``),
    inputs at most PROTO_MAX_CHARS long unless ``-max_len`` is given."""
    logging.getLogger("eddy.registry").setLevel(logging.CRITICAL + 1)
    warnings.simplefilter("ignore")
    extra = () if any(a.startswith("-max_len=") for a in argv) else (
        f"-max_len={PROTO_MAX_CHARS}",)
    start_atheris(argv, check_input, seed_inputs(), "eddy-registry-fuzz-", extra)


def main(argv: list[str] | None = None) -> int:
    args_in = sys.argv[1:] if argv is None else argv
    if args_in[:1] == ["--atheris"]:
        atheris_main([sys.argv[0], *args_in[1:]])
        return 0
    ap = argparse.ArgumentParser(prog="python -m bench.fuzz.registry_decoders",
                                 description="Fuzz the schema registry's decoders.")
    ap.add_argument("--seconds", type=float, default=10.0)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--max-execs", type=int, help="stop after this many inputs")
    ap.add_argument("--slow-ms", type=float, default=1000.0,
                    help="a decoder call slower than this is a finding (0: off)")
    ap.add_argument("--json", help="write the report as JSON to this file")
    args = ap.parse_args(args_in)
    report = run(args.seconds, args.seed, args.max_execs, slow_ms=args.slow_ms or None)
    slowest = tuple(f"    {name:28} {slow.ms:9.3f} ms  ({slow.size} bytes)"
                    for name, slow in sorted(report.slowest.items(), key=lambda kv: -kv[1].ms))
    return print_report("registry decoders", report, args.json,
                        ("  slowest input per decoder:", *slowest))


if __name__ == "__main__":
    sys.exit(main())
