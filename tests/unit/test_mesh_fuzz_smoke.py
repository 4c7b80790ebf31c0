"""Smoke of the mesh decoder fuzzer (bench/fuzz/mesh_decoders.py): a short run finds nothing,
and the harness does report a decoder that lets an undocumented exception escape."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))  # the bench package lives beside src/, not inside it

from bench.fuzz import mesh_decoders  # noqa: E402
from eddy import postcard  # noqa: E402
from eddy.mesh.frames import encode_frame, parse_frame  # noqa: E402


def test_seed_inputs_are_valid() -> None:
    seeds = mesh_decoders.seed_inputs()
    for tag, msg in mesh_decoders.seed_messages():
        payload = postcard.encode(msg)
        for tc in (None, mesh_decoders.TRACE):
            wire = encode_frame(tag, payload, tc)
            assert wire in seeds
            frame = parse_frame(wire, mesh_decoders.MAX_PAYLOAD)
            assert postcard.decode(type(msg), frame.payload) == msg
    for s in seeds:
        mesh_decoders.check_input(s)


def test_short_run_has_no_findings() -> None:
    report = mesh_decoders.run(seconds=2.0, seed=11)
    assert report.execs > 0
    assert report.findings == [], report.findings


def test_an_escaping_exception_is_a_finding(monkeypatch: pytest.MonkeyPatch) -> None:
    real = postcard.decode

    def buggy(cls: object, data: bytes) -> object:
        if len(data) > 40:
            raise IndexError("index out of range")
        return real(cls, data)  # type: ignore[arg-type]

    monkeypatch.setattr(mesh_decoders.postcard, "decode", buggy)
    report = mesh_decoders.run(seconds=60.0, seed=11, max_execs=300)
    assert report.execs == 300
    assert [f.signature.split(" ")[0] for f in report.findings] == ["IndexError"]
    assert mesh_decoders.main(["--seconds", "60", "--seed", "11", "--max-execs", "300"]) == 1
