"""Smoke of the value decoder fuzzer (bench/fuzz/value_decoders.py): its seeds are valid
values that both decoders (the pipelines' and the console's) decode, a short run finds
nothing, what the campaigns found stays fixed, and the harness catches a decoder that lets
an exception escape, lands in a safety net, or is too slow."""

from __future__ import annotations

import json
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))  # the bench package lives beside src/, not inside it

from bench.fuzz import value_decoders as vd  # noqa: E402
from bench.fuzz import value_seeds as vs  # noqa: E402
from eddy.connect.formats import protobuf_columns, value_decoding  # noqa: E402
from eddy.connect.formats.json_schema_columns import JsonSchemaDecoder  # noqa: E402
from eddy.observe.console.decode import values as console  # noqa: E402


def _varint(n: int) -> bytes:
    out = bytearray()
    while n & ~0x7F:
        out.append((n & 0x7F) | 0x80)
        n >>= 7
    out.append(n)
    return bytes(out)


_HEAD = b"\x0a\x02\x01"  # Payment's id 5 and amount (1 byte)
#: what the first campaigns found, by (exception or kind, decoder), each with its minimal
#: reproducer (ids as value_seeds.build_registry assigns them): all fixed, kept as
#: regression inputs that must pass clean
FORMER_FINDINGS: dict[tuple[str, str], bytes] = {
    # an array of a named fixed of size 0: a 10-byte block count was a loop of 2**62
    # items from no bytes (time and memory; not interruptible) -- avro_checks.check_arrays
    ("Hang", "pipeline.avro.decode (named fixed)"): vs.frame(6, _HEAD + _varint(1 << 62)),
    # the same with an empty record named by its full name (ns.Nothing)
    ("Hang", "pipeline.avro.decode (namespaced record)"):
        vs.frame(7, _HEAD + _varint(1 << 62)),
    # a google.protobuf.Timestamp past year 9999 reached the safety net (OverflowError in
    # datetime): now a per-value error naming the Timestamp's range
    ("InvariantBroken", "pipeline.protobuf.decode (Timestamp)"): bytes.fromhex(
        "00000000020e0404d20204686902087465787400060400040000f0a80280a0ab"
        "fef9628080f281838985060ad00f4830303030303030302d303030302d303030"
        "302d303030302d30303030303030303030303502000000000000d03f020400ff"
        "00000000000005dcff00fe000153f4997634ddc6e378b015d006b6e5d5084d61"
        "696e313233343504084d61696e3132333435084d61696e313233343500ff00fe"
        "000000000006fd000a02640400ff00fe0000000000090a026402026b020000ff"
        "00fe0001352b5d8d66c359353e03b9f60e7912477b226964223a20322c202274"
        "6f74616c223a20317dff00fe00000000000d00fd000807120370656e1a01611a"
        "016222060802120208012a080a0345555210e80732070a017812020805380148"
        "80808080808080808001520a0880e2cfaafe10a0001e5805620200016a100000"
        "00000000e03f000000000000f0bf71ffffffffffffffffff00fe00000000000d"
        "02040a040a021002ff00fe0001e6351dd19f9f2da830ece2c5670d0067000801"),
    # (the harness's own: a date past Python's datetime range, which Arrow holds, broke
    # its comparison of a value alone and in its batch: now compared as Arrow prints them)
    ("OverflowError", "harness"): bytes.fromhex(
        "00000000020e0404d20204686906083432343202000604000400040261040000"
        "00000000f83f00000000000000c00002620000f0a80280a0ab7ef9e28080f281"
        "8389c5060ad00f4830303030303030302d303430302d303030302d303030302d"
        "30303030303030303030303502000000000000d03f020400fb00000000000005"
        "dc"),
}


def test_protobuf_message_indexes_skip_map_entries() -> None:
    """Found by comparing the two decoders: indexes [0, 0] of shop.Order are its nested
    Line, as Confluent counts (the schema's declared messages), not the LinesEntry type
    the descriptor adds for its map field (the console's answer, now the pipelines' too)."""
    fix = vd.fixture()
    fdp = fix.client.reg.call(fix.reg.service.schema_by_id(fix.reg.ids["shop"],
                                                           fmt="serialized"))["schema"]
    parsed = protobuf_columns._fdp(fdp, "shop")
    assert protobuf_columns.message_name(parsed, [0, 0]) == "shop.Order.Line"
    assert protobuf_columns.message_name(parsed, [0, 0, 0]) == "shop.Order.Line.Inner"
    line = vs.frame(fix.reg.ids["shop"], vs.zigzag(2, 0, 0) + b"\x08\x04")
    found = fix.reg.call(fix.lookup.resolve([fix.reg.ids["shop"]]))
    assert console.show_bytes(line, found).detail == "shop.Order.Line"
    dec = next(d for decs in fix.pipelines for d in decs if d.format == "protobuf")
    _, errors = value_decoding.decoder(dec).decode([line])
    assert "written as message shop.Order.Line," in (errors[0] or ""), errors


@pytest.fixture(autouse=True)
def _no_timer() -> Iterator[None]:
    yield
    assert vd._TIMER is None  # a run always takes its timer down


def test_seeds_are_valid() -> None:
    fix = vd.fixture()
    found = fix.reg.call(fix.lookup.resolve(sorted(fix.reg.ids.values())))
    labels = {"AVRO": "avro", "JSON": "json", "PROTOBUF": "protobuf"}
    readers = {(d.format, d.subject): d for decs in fix.pipelines for d in decs}
    decoded = set()
    for name, indexes, payload in vs.payloads(fix.reg):
        value = vs.frame(fix.reg.ids[name], indexes + payload)
        shown = console.show_bytes(value, found)
        entry = fix.reg.service.state.schema_by_id(fix.reg.ids[name])
        assert entry is not None
        if found[fix.reg.ids[name]][0] is not None:
            assert shown.format == labels[entry.schema_type], (name, shown)
            assert shown.note == "" and json.loads(shown.text or "") is not None
            decoded.add(name)
        for dec in readers.values():
            reader_id = dec.reader.id if dec.reader is not None else None
            if reader_id == fix.reg.ids[name] and indexes in (b"", b"\x00"):
                # a reader's own values decode (Protobuf: as its first message)
                array, errors = value_decoding.decoder(dec).decode([value])
                assert errors == [None] and array[0].is_valid, (name, errors)
    # the console decodes every format; it refuses references, recursion, zero-width arrays
    assert {"pay", "pay_old", "orders", "shop", "common", "other"} <= decoded
    seeds = fix.seeds
    assert len(seeds) > 3 * len(vs.valid_values(fix.reg))
    for data in seeds:
        vd.check_input(data)


def test_short_run_finds_nothing_new() -> None:
    report = vd.run(seconds=30.0, seed=11, max_execs=120)  # the same inputs on any machine
    assert report.execs == 120
    assert report.findings == [], report.findings
    assert {"console.show_bytes", "console.resolve", "pipeline.decode_batch",
            "pipeline.avro.decode", "pipeline.json.decode",
            "pipeline.protobuf.decode"} <= set(report.slowest)


@pytest.mark.parametrize("finding", sorted(FORMER_FINDINGS))
def test_former_findings_pass_clean(finding: tuple[str, str]) -> None:
    vd.check_input(FORMER_FINDINGS[finding])  # raises (a finding) or hangs if it came back
    if finding[0] != "Hang":
        return
    dec = vd.fixture().pipelines[0][1]
    _, errors = value_decoding.decoder(dec).decode([FORMER_FINDINGS[finding]])
    assert "zero-width items" in (errors[0] or "")


def kind(signature: str) -> tuple[str, str]:
    """(exception type, decoder) of a finding's signature."""
    return signature.split(" ", 1)[0], signature.rsplit(" in ", 1)[-1]


def test_an_escaping_exception_is_a_finding(monkeypatch: pytest.MonkeyPatch,
                                            tmp_path: Path) -> None:
    real_json = console.JsonDecoder.decode
    real_one = JsonSchemaDecoder.decode_one

    def buggy_console(self: console.JsonDecoder, payload: bytes) -> tuple[str, str]:
        if len(payload) > 12:
            raise IndexError("index out of range")
        return real_json(self, payload)

    def buggy_pipeline(self: JsonSchemaDecoder, value: bytes, *args: object) -> object:
        if len(value) > 12:
            raise KeyError("total")  # decode_values' safety net takes it: still a finding
        return real_one(self, value, *args)

    monkeypatch.setattr(console.JsonDecoder, "decode", buggy_console)
    report = vd.run(seconds=60.0, seed=11, max_execs=60)
    assert {kind(f.signature) for f in report.findings} == {("IndexError", "console.json")}
    monkeypatch.setattr(console.JsonDecoder, "decode", real_json)
    monkeypatch.setattr(JsonSchemaDecoder, "decode_one", buggy_pipeline)
    report = vd.run(seconds=60.0, seed=11, max_execs=60)
    assert {kind(f.signature) for f in report.findings} == {
        ("InvariantBroken", "pipeline.json.decode")}
    assert "KeyError reached the safety net" in report.findings[0].message
    out = tmp_path / "report.json"
    assert vd.main(["--seconds", "60", "--seed", "11", "--max-execs", "60", "--json",
                    str(out), "--hang-file", str(tmp_path / "current.bin")]) == 1
    saved = json.loads(out.read_text())
    assert saved["findings"] and saved["execs"] == 60 and saved["slowest"]
    assert (tmp_path / "current.bin").exists()  # the input being decoded, for --hang-s


def test_a_slow_decoder_is_a_finding(monkeypatch: pytest.MonkeyPatch) -> None:
    ticks = iter(range(10**9))
    monkeypatch.setattr(vd, "_now", lambda: float(next(ticks)))  # every call: 1 s later
    report = vd.run(seconds=60.0, seed=3, max_execs=3, slow_ms=500.0)
    slow = {f.signature for f in report.findings if f.signature.startswith("Slow in ")}
    assert {"Slow in console.show_bytes", "Slow in pipeline.decode_batch"} <= slow
    assert report.slowest["pipeline.decode_batch"].ms == 1000.0
    assert vd.run(seconds=60.0, seed=3, max_execs=3).findings == []
