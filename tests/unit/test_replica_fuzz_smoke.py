"""Smoke of the follower-side fuzzer (bench/fuzz/replica_decoders.py): its seeds are real
leader answers whose batches pass the follower's checks, a short run finds nothing, and the
harness does report a check that lets an undocumented exception escape."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))  # the bench package lives beside src/, not inside it

from bench.fuzz import replica_decoders  # noqa: E402
from eddy.client.raw import decode_response  # noqa: E402
from eddy.protocol.replica_batches import check_replica_batches  # noqa: E402


def test_seeds_are_leader_answers_with_batches_a_follower_takes() -> None:
    seeds = replica_decoders.seed_inputs()
    taken = 0
    for seed in seeds[:-1]:
        answer = decode_response(1, 12, replica_decoders.CORRELATION, seed)
        for topic in answer.responses:
            for part in topic.partitions:
                if part.records:
                    checked = check_replica_batches(part.records,
                                                    replica_decoders.FETCH_OFFSET, 1 << 20)
                    taken += len(checked.headers)
        replica_decoders.check_input(seed)
    # first seed: 3 whole batches and 2 of a set cut short of its last; second: 3
    assert taken == 3 + 2 + 3


def test_sasl_seeds_are_the_answers_of_a_login() -> None:
    handshake, authenticate = replica_decoders.sasl_seed_inputs()
    assert decode_response(17, 1, replica_decoders.CORRELATION, handshake).mechanisms == (
        "SCRAM-SHA-512", "PLAIN")
    answer = decode_response(36, 2, replica_decoders.CORRELATION, authenticate)
    assert answer.auth_bytes.startswith(b"r=")
    for seed in (handshake, authenticate):
        replica_decoders.check_input(seed)


def test_a_short_run_finds_nothing() -> None:
    report = replica_decoders.run(seconds=2.0, seed=3, target=replica_decoders.check_input,
                                  seeds=replica_decoders.seed_inputs())
    assert report.execs > 100
    assert report.findings == []


def test_an_escaping_exception_is_a_finding(monkeypatch: pytest.MonkeyPatch) -> None:
    def buggy(data: Any, offset: int, cap: int) -> Any:
        raise IndexError("a check that reads past the bytes")

    monkeypatch.setattr(replica_decoders, "check_replica_batches", buggy)
    report = replica_decoders.run(seconds=60.0, seed=3, max_execs=200,
                                  target=replica_decoders.check_input,
                                  seeds=replica_decoders.seed_inputs())
    assert [f.signature.split(" ")[0] for f in report.findings] == ["IndexError"]
