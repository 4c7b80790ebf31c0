"""Hostile record batches produced to a real `eddy serve` (issue 11): on a compacted topic
the broker decodes every record (the keyless check), so a batch whose records lie about
their lengths or counts, or decompress to gigabytes, gets CORRUPT_MESSAGE; the broker
stays up with its memory bounded, logs no traceback, and serves everyone else."""

from __future__ import annotations

import struct
import uuid
from pathlib import Path
from typing import Any

import pytest
from crc32c import crc32c
from kafka_helpers import (
    api_versions_ok,
    batch_builder,
    connect,
    consume_all,
    create_topic,
    produce,
    read_response,
)

bb = batch_builder
CORRUPT_MESSAGE, INVALID_RECORD = 2, 87
ZSTD, GZIP = 4, 1


def raw_batch(payload: bytes, count: int, codec: int = 0) -> bytes:
    tail = struct.pack(">hiqqqhii", codec, count - 1, 1_700_000_000_000, 1_700_000_000_000,
                       -1, -1, -1, count) + payload
    return struct.pack(">qiibI", 0, len(tail) + 9, -1, 2, crc32c(tail)) + tail


def record(key: bytes = bb.zigzag(1) + b"k", value: bytes = bb.zigzag(1) + b"v",
           headers: bytes = bb.zigzag(0)) -> bytes:
    fields = b"\x00" + bb.zigzag(0) + bb.zigzag(0) + key + value + headers
    return bb.zigzag(len(fields)) + fields


def zstd_bomb(blocks: int) -> bytes:
    """A zstd frame of RLE blocks: 4 bytes in, 128 KiB out, each."""
    frame = bytearray(struct.pack("<I", 0xFD2FB528)) + bytes([0x00, 0x38])
    frame += (((131072 << 3) | 2).to_bytes(3, "little") + b"\x00") * (blocks - 1)
    frame += ((131072 << 3) | 3).to_bytes(3, "little") + b"\x00"
    return bytes(frame)


HOSTILE = {
    "zstd-bomb-30GiB": raw_batch(zstd_bomb(250_000), 1000, ZSTD),
    "header-count-2^31": raw_batch(record(headers=bb.zigzag(2**31 - 1)), 1),
    "key-length--2": raw_batch(record(key=bb.zigzag(-2)), 1),
    "key-length-past-batch": raw_batch(record(key=bb.zigzag(2**31 - 1)), 1),
    "10-byte-varint-length": raw_batch(b"\xff" * 9 + b"\x01" + record()[1:], 1),
    "records-after-count": raw_batch(record() * 3, 2),
    "gzip-garbage": raw_batch(b"\x1f\x8b\x08" + b"\x00" * 60, 1, GZIP),
}


def produce_error(port: int, topic: str, records: bytes, correlation: int) -> int:
    """The partition error code of a Produce v9 (flexible) request carrying `records`."""
    s = connect(port)
    try:
        s.sendall(bb.produce_request_v9(correlation, topic, 0, records))
        resp = read_response(s)
    finally:
        s.close()
    assert resp is not None, "the broker closed the connection"
    got, body = resp
    assert got == correlation
    # header tags, topics count, topic name (compact string), partitions count, index, error
    pos = 1 + 1
    name_len = body[pos] - 1
    pos += 1 + name_len + 1
    _index, code = struct.unpack_from(">ih", body, pos)
    return int(code)


def peak_rss_mib(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    raise AssertionError("no VmHWM")


@pytest.fixture
def compacted(eddy: Any) -> tuple[Any, str]:
    topic = f"compacted-{uuid.uuid4().hex[:6]}"
    create_topic(eddy.bootstrap, topic, 1, {"cleanup.policy": "compact"})
    produce(eddy.bootstrap, topic, [b"before"], partition=0, keys=[b"k"])
    return eddy, topic


def test_hostile_batches_get_corrupt_message_and_the_broker_serves_on(
        compacted: tuple[Any, str]) -> None:
    eddy, topic = compacted
    assert eddy.proc is not None
    before = peak_rss_mib(eddy.proc.pid)
    for i, (name, batch) in enumerate(sorted(HOSTILE.items())):
        assert produce_error(eddy.port, topic, batch, 100 + i) == CORRUPT_MESSAGE, name
        assert eddy.alive(), eddy.logs()[-3000:]
    # a keyless record is still INVALID_RECORD, a good batch is still written
    assert produce_error(eddy.port, topic, raw_batch(record(key=bb.zigzag(-1)), 1), 200) \
        == INVALID_RECORD
    assert produce_error(eddy.port, topic, raw_batch(record(), 1), 201) == 0
    assert api_versions_ok(eddy.port)
    produce(eddy.bootstrap, topic, [b"after"], partition=0, keys=[b"k2"])
    values = [v for _o, _k, v in consume_all(eddy.bootstrap, topic, 1)[0]]
    assert values == [b"before", b"v", b"after"]
    # the 30 GiB bomb was cut at the decompression limit (64 MiB)
    assert peak_rss_mib(eddy.proc.pid) - before < 400
    assert "Traceback" not in eddy.logs()
