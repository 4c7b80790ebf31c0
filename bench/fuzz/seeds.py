"""Seed inputs of the atheris harnesses, taken from the recorded request corpus:
request frames without their size prefix (decode), and the ``records`` field of every
partition of every recorded Produce frame behind a flag byte 0x01 (batches: the
harness recomputes CRCs, see bench.fuzz.targets)."""

from __future__ import annotations

import hashlib
from collections.abc import Iterator
from pathlib import Path

from bench.fuzz.corpus_files import CORPUS_DIR, load_corpus
from eddy.protocol.apis import ApiKey
from eddy.protocol.codec import MalformedRequest, decode_request, supported_version

ATHERIS_DIR = CORPUS_DIR / "atheris"


def decode_seeds() -> Iterator[bytes]:
    for f in load_corpus():
        yield f.body


def produce_records() -> Iterator[bytes]:
    """The records bytes of each partition of the recorded Produce frames."""
    for f in load_corpus():
        if f.api_key != ApiKey.PRODUCE:
            continue
        key = supported_version(f.api_key, f.version)
        if key is None:
            continue
        try:
            req = decode_request(f.body, key, f.version)
        except MalformedRequest:
            continue
        for topic in req.body.topic_data:
            for pd in topic.partition_data:
                if pd.records:
                    yield bytes(pd.records)


def batches_seeds() -> Iterator[bytes]:
    for records in produce_records():
        yield b"\x01" + records


def mesh_seeds() -> Iterator[bytes]:
    """Valid mesh frames and postcard messages (bench.fuzz.mesh_decoders)."""
    from bench.fuzz.mesh_decoders import seed_inputs

    yield from seed_inputs()


SEEDS = {"decode": decode_seeds, "batches": batches_seeds, "mesh": mesh_seeds}


def write_seeds(target: str, out: Path) -> int:
    """Write each distinct seed as a file named by its SHA-1; returns how many."""
    out.mkdir(parents=True, exist_ok=True)
    names = set()
    for data in SEEDS[target]():
        name = hashlib.sha1(data).hexdigest()
        names.add(name)
        (out / name).write_bytes(data)
    return len(names)
