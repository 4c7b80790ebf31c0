"""CI smoke of the fuzz campaign (`python -m bench.fuzz --smoke`) and of what it is built
on: the recorded corpus, the deterministic mutator and the in-process fuzz targets.

The campaign's numbers (frames/s) are not checked: timings belong in bench/. What is
checked is what a user relies on: the run ends, the broker survived thousands of mutated
frames, every acknowledged healthy record was consumed, and the exit status says so.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))  # the bench package lives beside src/, not inside it

from bench.fuzz.corpus_files import (  # noqa: E402
    CLIENTS,
    SYNTH,
    advertised_pairs,
    coverage,
    load_corpus,
)
from bench.fuzz.mutate import Mutator  # noqa: E402
from bench.fuzz.seeds import batches_seeds  # noqa: E402
from bench.fuzz.targets import decode_frame, validate_records  # noqa: E402
from eddy.protocol.codec import MalformedRequest, decode_request, supported_version  # noqa: E402

ISSUE_11_FRAME = bytes.fromhex(
    "0000003b0002000700000004000772646b61666b6100ffffffff01ffffffff2d6d61696e2d6335633232"
    "37020000000100000000fffffffffffffffe000000"
)


def test_corpus_has_every_advertised_version_and_real_frames_decode() -> None:
    corpus = load_corpus()
    cov = coverage(corpus)
    missing = [pair for pair, who in cov.items() if not who]
    assert not missing, f"advertised (api, version) pairs without a corpus frame: {missing}"
    recorded = [pair for pair, who in cov.items() if who & set(CLIENTS)]
    assert len(recorded) > len(advertised_pairs()) // 2
    assert {f.client for f in corpus} >= {*CLIENTS, SYNTH}
    for f in corpus:  # unmutated client frames are requests Eddy accepts
        key = supported_version(f.api_key, f.version)
        if key is not None:
            decode_request(f.body, key, f.version)


def test_mutator_is_deterministic_by_seed() -> None:
    m = Mutator(load_corpus())
    one = [x.frame for x in m.batch(1, 7, 20, 100)]
    assert one == [x.frame for x in m.batch(1, 7, 20, 100)]
    assert one != [x.frame for x in m.batch(2, 7, 20, 100)]
    # the size prefix matches the body except on frames marked bad_size
    for x in m.batch(3, 0, 200, 0):
        if not x.bad_size:
            assert int.from_bytes(x.frame[:4], "big") == len(x.frame) - 4


def test_targets_reject_the_issue_frame_and_mutants_with_documented_errors() -> None:
    with pytest.raises(MalformedRequest):
        decode_request(ISSUE_11_FRAME[4:], supported_version(2, 7), 7)  # type: ignore[arg-type]
    decode_frame(ISSUE_11_FRAME[4:])
    m = Mutator(load_corpus())
    for x in m.batch(11, 0, 300, 0):
        decode_frame(x.frame[4:])  # anything but MalformedRequest escapes: a finding
    seeds = list(batches_seeds())
    assert seeds
    for s in seeds:
        validate_records(s)
        validate_records(s[:40] + b"\xff" * 30 + s[70:])


def test_fuzz_smoke_campaign(tmp_path: Path) -> None:
    out = tmp_path / "fuzz.json"
    proc = subprocess.run(
        [sys.executable, "-m", "bench.fuzz", "--smoke", "--quiet", "--json", str(out)],
        cwd=ROOT, capture_output=True, text=True, timeout=240, stdin=subprocess.DEVNULL,
    )
    assert proc.returncode == 0, f"stdout:\n{proc.stdout}\nstderr:\n{proc.stderr[-6000:]}"
    for row in ("frames sent", "frames/s", "closed by the broker", "responses received",
                "broker RSS peak", "healthy consumed", "broker log lines"):
        assert any(line.startswith(row) for line in proc.stdout.splitlines()), row
    (run,) = json.loads(out.read_text())
    assert run["frames_sent"] >= 5000
    assert run["broker_alive"] and run["stalled"] is None
    assert run["closed_by_broker"] > 0  # mutants were rejected, the broker went on
    assert run["healthy_acked"] > 0
    assert run["healthy_lost"] == 0
    assert run["healthy_consumed"] == run["healthy_acked"]


def test_atheris_harness_runs_and_reports(tmp_path: Path) -> None:
    pytest.importorskip("atheris")
    proc = subprocess.run(
        [sys.executable, "-m", "bench.fuzz.atheris_run", "decode", "--seconds", "8",
         "--nice", "0", "--workdir", str(tmp_path)],
        cwd=ROOT, capture_output=True, text=True, timeout=180, stdin=subprocess.DEVNULL,
    )
    summary = json.loads((tmp_path / "summary.json").read_text())
    assert summary["execs"] > 0 and summary["cov"] > 0, proc.stdout + proc.stderr[-3000:]
    assert proc.returncode == (1 if summary["findings"] else 0)
