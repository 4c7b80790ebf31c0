"""Smoke of the registry decoder fuzzer (bench/fuzz/registry_decoders.py): its seeds are
valid, a short run finds nothing that is not already reported, every reported finding still
reproduces (delete its entry once fixed), and the harness catches a decoder that lets an
undocumented exception escape, or that is too slow."""

from __future__ import annotations

import json
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))  # the bench package lives beside src/, not inside it

from bench.fuzz import registry_decoders as rd  # noqa: E402
from bench.fuzz import registry_seeds as seeds  # noqa: E402
from eddy.formats.avro import schema as avro_schema  # noqa: E402
from eddy.registry import records as rec  # noqa: E402
from eddy.registry.contract import RegistryError  # noqa: E402
from eddy.registry.requests import SchemaRequest  # noqa: E402

#: what the first campaigns found (issue 15), by (exception type, decoder), each with its
#: minimal reproducer: all fixed, kept as regression inputs that must pass clean
FORMER_FINDINGS: dict[tuple[str, str], bytes] = {
    # a field of an empty union type with a default (its "first branch" does not exist)
    ("IndexError", "avro.parse"):
        b'{"type":"record","name":"R","fields":[{"name":"a","type":[],"default":0.5}]}',
    # a lone surrogate read from _schemas (or registered over HTTP) makes GET answer 500
    ("UnicodeEncodeError", "state.render"):
        b'{"keytype":"SCHEMA","subject":"s","version":1}\x00'
        b'{"subject":"s","version":1,"id":1,"schema":"\\ud800"}',
    # NaN read from _schemas is echoed in responses, which are then not JSON
    ("InvariantBroken", "state.render"):
        b'{"keytype":"SCHEMA","subject":"s","version":1}\x00'
        b'{"subject":"s","version":1,"id":1,"schema":"\\"int\\"","metadata":{"x":NaN}}',
    # numbers past int32 reach the descriptor (ValueError, not InvalidSchema)
    ("ValueError", "protobuf.parse"): b'syntax = "proto3";\nmessage M { int32 a = 2147483648; }',
    # a NUL in an option string is printed raw: the canonical form does not parse again
    ("InvalidSchema", "protobuf.reparse"):
        b'syntax = "proto3";\noption java_package = "a\\0b";\nmessage M {}',
    # a serialized descriptor whose reserved name is not UTF-8: canonical() raises TypeError
    ("TypeError", "protobuf.forms"): b"CgdkZWZhdWx0IgYKAU1SAchiBnByb3RvMw==",
    # a lone surrogate in a string option: the descriptor cannot encode it
    ("UnicodeEncodeError", "protobuf.parse"):
        b'{"schema":"syntax = \\"proto2\\";\\nmessage M { optional string b = 1 '
        b'[default = \\"\\ud800\\"]; }","schemaType":"PROTOBUF"}',
    # multipleOf compared with decimal: 1e38 against the seed's 0.01 raises InvalidOperation
    ("InvalidOperation", "json.compat"):
        b'{"type":"object","properties":{"total":{"type":"number","multipleOf":1e38}}}',
    # an unparsable URL in $schema (ValueError from urllib)
    ("ValueError", "json.parse"): b'{"$schema":"http://[x"}',
    # a subschema declaring draft 2020-12 with a non-schema in its $defs
    ("AttributeError", "json.parse"):
        b'{"items":{"$schema":"https://json-schema.org/draft/2020-12/schema",'
        b'"$defs":{"a":""}}}',
}


def kind(signature: str) -> tuple[str, str]:
    """(exception type, decoder) of a finding's signature."""
    return signature.split(" ", 1)[0], signature.rsplit(" in ", 1)[-1]


@pytest.fixture(autouse=True)
def _no_timer() -> Iterator[None]:
    yield
    assert rd._TIMER is None  # a run always takes its timer down


def test_seeds_are_valid() -> None:
    for schema_type, texts in seeds.SCHEMAS.items():
        for text, refs in texts:
            parse = rd.FORMATS[schema_type][1][0]
            assert parse(text, refs).canonical()
    for key, value in seeds.BASE_RECORDS:
        decoded = rec.decode_key(key)
        assert value is None or rec.decode_value(decoded, value) is not None
    bodies = [s for s in seeds.seed_inputs() if s.startswith(b'{"schema":')]
    assert len(bodies) == sum(map(len, seeds.SCHEMAS.values()))
    for body in bodies:
        assert SchemaRequest.from_body(rd.read_body(body)).schema
    for data in seeds.seed_inputs():
        rd.check_input(data)


def test_read_body_gives_read_jsons_answers() -> None:
    assert rd.read_body(b' {"a": [1]} ') == {"a": [1]}
    for bad in (b"", b"[1]", b"{", b'{"a":NaN}', b"\xff"):
        with pytest.raises(RegistryError) as info:
            rd.read_body(bad)
        assert info.value.status == 400


def test_short_run_finds_nothing_new() -> None:
    report = rd.run(seconds=2.0, seed=11, max_execs=3000)  # the same inputs on any machine
    assert report.execs > 0
    assert report.findings == [], report.findings
    assert {"records.decode_key", "state.apply", "http.read_json", "requests.from_body",
            "avro.parse", "json.parse", "protobuf.parse"} <= set(report.slowest)


@pytest.mark.parametrize("finding", sorted(FORMER_FINDINGS))
def test_former_findings_pass_clean(finding: tuple[str, str]) -> None:
    rd.check_input(FORMER_FINDINGS[finding])  # raises (a finding) if it came back


def test_an_escaping_exception_is_a_finding(monkeypatch: pytest.MonkeyPatch,
                                            tmp_path: Path) -> None:
    real_key, real_avro = rec.decode_key, avro_schema.parse

    def buggy_key(data: bytes) -> rec.RecordKey:
        if len(data) > 60:
            raise IndexError("index out of range")
        return real_key(data)

    def buggy_avro(text: str, *args: object, **kwargs: object) -> object:
        if '"fields"' in text:
            raise KeyError("fields")
        return real_avro(text, *args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(rec, "decode_key", buggy_key)
    report = rd.run(seconds=60.0, seed=11, max_execs=300)
    assert report.execs == 300
    # decode_key is called directly and by SchemaState.apply, which must not raise either
    assert {kind(f.signature) for f in report.findings} == {
        ("IndexError", "records.decode_key"), ("IndexError", "state.apply")}
    monkeypatch.setattr(rec, "decode_key", real_key)
    monkeypatch.setattr(avro_schema, "parse", buggy_avro)
    report = rd.run(seconds=60.0, seed=11, max_execs=300)
    assert {kind(f.signature) for f in report.findings} == {
        ("KeyError", "avro.parse")}
    out = tmp_path / "report.json"
    assert rd.main(["--seconds", "60", "--seed", "11", "--max-execs", "300",
                    "--json", str(out)]) == 1
    saved = json.loads(out.read_text())
    assert saved["findings"] and saved["execs"] > 0 and saved["slowest"]


def test_a_slow_decoder_is_a_finding(monkeypatch: pytest.MonkeyPatch) -> None:
    ticks = iter(range(10**9))
    monkeypatch.setattr(rd, "_now", lambda: float(next(ticks)))  # every call: 1 s later
    report = rd.run(seconds=60.0, seed=3, max_execs=5, slow_ms=500.0)
    slow = {f.signature for f in report.findings if f.signature.startswith("Slow in ")}
    assert {"Slow in records.decode_key", "Slow in state.apply", "Slow in avro.parse"} <= slow
    assert report.slowest["state.apply"].ms == 1000.0
    assert rd.run(seconds=60.0, seed=3, max_execs=5).findings == [
        f for f in report.findings if not f.signature.startswith("Slow in ")]
