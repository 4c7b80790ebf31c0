"""Which advertised (API, version) pairs the corpus covers, and from which clients:
printed by the recorder and kept as corpus/COVERAGE.md."""

from __future__ import annotations

from collections.abc import Iterable

from bench.fuzz.corpus_files import CLIENTS, CORPUS_DIR, SYNTH, CorpusFrame, coverage
from eddy.protocol.apis import SUPPORTED, ApiKey


def render(frames: Iterable[CorpusFrame]) -> str:
    frames = list(frames)
    cov = coverage(frames)
    recorded = sum(1 for s in cov.values() if s - {SYNTH})
    synth_only = sum(1 for s in cov.values() if s == {SYNTH})
    missing = [p for p, s in cov.items() if not s]
    lines = [
        "# Request corpus coverage",
        "",
        f"{len(frames)} frames, {sum(len(f.frame) for f in frames):,} bytes. Advertised "
        f"(API, version) pairs: {len(cov)}; recorded from a client: {recorded}; "
        f"synthesised only: {synth_only}; none: {len(missing)}.",
        "",
        "Per API, each advertised version and who sent it "
        "(r = librdkafka, p = kafka-python, a = aiokafka, S = synthesised only, - = none):",
        "",
        "| API | versions | " + " | ".join(["coverage"]) + " |",
        "| --- | --- | --- |",
    ]
    letter = {"librdkafka": "r", "kafka-python": "p", "aiokafka": "a"}
    for key, rng in SUPPORTED.items():
        cells = []
        for v in range(rng.min, rng.max + 1):
            who = cov[(int(key), v)]
            tag = "".join(letter[c] for c in CLIENTS if c in who)
            cells.append(f"v{v}:{tag or ('S' if SYNTH in who else '-')}")
        lines.append(f"| {int(key)} {ApiKey(key).name} | {rng.min}..{rng.max} | "
                     + " ".join(cells) + " |")
    if missing:
        lines += ["", "Not covered: " + ", ".join(
            f"{ApiKey(k).name} v{v}" for k, v in missing)]
    return "\n".join(lines) + "\n"


def write_report(frames: Iterable[CorpusFrame]) -> str:
    text = render(frames)
    (CORPUS_DIR / "COVERAGE.md").write_text(text)
    return text
