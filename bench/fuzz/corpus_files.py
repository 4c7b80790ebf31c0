"""The recorded request corpus on disk: size-prefixed frames, one file per (client, API,
version), exactly as they crossed the wire (4-byte size, then header and body).

Layout: ``corpus/requests/<client>/<api_key:02d>-<api_name>-v<version>.bin`` where client
is ``librdkafka``, ``kafka-python``, ``aiokafka`` or ``synth`` (synthesised by re-encoding
a recorded frame at another version, see bench.fuzz.synth).
"""

from __future__ import annotations

import struct
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path

from eddy.protocol.apis import SUPPORTED, ApiKey

CORPUS_DIR = Path(__file__).resolve().parent / "corpus"
REQUESTS_DIR = CORPUS_DIR / "requests"
CLIENTS = ("librdkafka", "kafka-python", "aiokafka")
SYNTH = "synth"

_SIZE = struct.Struct(">i")
_HEAD = struct.Struct(">hh")


@dataclass(frozen=True, slots=True)
class CorpusFrame:
    client: str
    api_key: int
    version: int
    frame: bytes  # size prefix included

    @property
    def body(self) -> bytes:
        return self.frame[_SIZE.size :]


def split_frames(data: bytes) -> Iterator[bytes]:
    """Each whole size-prefixed frame of a byte stream (a partial tail is dropped)."""
    pos = 0
    while len(data) - pos >= _SIZE.size:
        (size,) = _SIZE.unpack_from(data, pos)
        end = pos + _SIZE.size + size
        if size < 0 or end > len(data):
            return
        yield data[pos:end]
        pos = end


def api_version_of(frame: bytes) -> tuple[int, int]:
    """(api key, api version) of a size-prefixed request frame."""
    key, version = _HEAD.unpack_from(frame, _SIZE.size)
    return key, version


def file_name(api_key: int, version: int) -> str:
    try:
        name = ApiKey(api_key).name.lower()
    except ValueError:
        name = "unknown"
    return f"{api_key:02d}-{name}-v{version}.bin"


def write_frames(client: str, frames: Iterable[bytes], root: Path = REQUESTS_DIR) -> int:
    """Store frames grouped by (api, version) under root/client; returns files written."""
    groups: dict[tuple[int, int], list[bytes]] = {}
    for f in frames:
        groups.setdefault(api_version_of(f), []).append(f)
    out = root / client
    out.mkdir(parents=True, exist_ok=True)
    for old in out.glob("*.bin"):
        old.unlink()
    for (key, ver), fs in sorted(groups.items()):
        (out / file_name(key, ver)).write_bytes(b"".join(fs))
    return len(groups)


def load_corpus(root: Path = REQUESTS_DIR) -> list[CorpusFrame]:
    """Every stored frame, in a stable order (client, then file name, then position)."""
    frames: list[CorpusFrame] = []
    for path in sorted(root.glob("*/*.bin")):
        for f in split_frames(path.read_bytes()):
            key, ver = api_version_of(f)
            frames.append(CorpusFrame(path.parent.name, key, ver, f))
    return frames


def advertised_pairs() -> list[tuple[int, int]]:
    """Every (api key, version) Eddy advertises in ApiVersions."""
    return [(int(k), v) for k, r in SUPPORTED.items() for v in range(r.min, r.max + 1)]


def coverage(frames: Iterable[CorpusFrame]) -> dict[tuple[int, int], set[str]]:
    """For each advertised pair, the clients (or ``synth``) whose frames the corpus holds."""
    cov: dict[tuple[int, int], set[str]] = {p: set() for p in advertised_pairs()}
    for f in frames:
        if (f.api_key, f.version) in cov:
            cov[(f.api_key, f.version)].add(f.client)
    return cov
