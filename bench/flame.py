"""Summarise py-spy raw (collapsed-stack) profiles: top functions by self and total time.

    python -m bench.flame PROFILE.txt [...] [--top 15] [--rate 100] [--seconds 5]

Each input line is `frame;frame;...;leaf COUNT` with frames like `func (file.py:line)`.
Functions are grouped without line numbers. Self = samples where the function is the leaf;
total = samples where it is anywhere on the stack (counted once per stack). py-spy drops
idle samples by default, so percentages are of the samples in which the broker was busy;
with --rate and --seconds the busy share of wall time is shown too.
"""

from __future__ import annotations

import argparse
import re
from collections import Counter
from pathlib import Path

_LINE = re.compile(r"^(.*) (\d+)$")
_FRAME = re.compile(r"^(.*?) \((.*?)(?::\d+)?\)$")

_SKIP_PREFIXES = ("<frozen runpy>", "typer/", "click/")


def _name(frame: str) -> str:
    m = _FRAME.match(frame.strip())
    if not m:
        return frame.strip()
    func, path = m.groups()
    return f"{func} ({path})"


def summarise(path: Path) -> tuple[int, Counter[str], Counter[str]]:
    total = 0
    self_c: Counter[str] = Counter()
    total_c: Counter[str] = Counter()
    for line in path.read_text(errors="replace").splitlines():
        m = _LINE.match(line)
        if not m:
            continue
        stack, n = m.group(1), int(m.group(2))
        frames = [_name(f) for f in stack.split(";") if f]
        if not frames:
            continue
        total += n
        self_c[frames[-1]] += n
        for f in set(frames):
            total_c[f] += n
    return total, self_c, total_c


def report(path: Path, top: int, rate: float | None, seconds: float | None) -> str:
    total, self_c, total_c = summarise(path)
    out = [f"== {path.name}: {total} busy samples"
           + (f" ({100 * total / (rate * seconds):.0f}% of wall time busy)"
              if rate and seconds else "")]
    if not total:
        return out[0]
    out.append(f"  top {top} by self time:")
    for name, n in self_c.most_common(top):
        out.append(f"    {100 * n / total:5.1f}%  {name}")
    out.append(f"  top {top} by total time (excluding the entry-point frames):")
    shown = 0
    for name, n in total_c.most_common():
        if "runpy" in name or "typer" in name or "click" in name or name.startswith(
                ("<module>", "serve (eddy/cli", "run (", "Runner.run")):
            continue
        out.append(f"    {100 * n / total:5.1f}%  {name}")
        shown += 1
        if shown >= top:
            break
    return "\n".join(out)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m bench.flame", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("profiles", nargs="+", type=Path)
    ap.add_argument("--top", type=int, default=15)
    ap.add_argument("--rate", type=float, help="py-spy sampling rate used (samples/s)")
    ap.add_argument("--seconds", type=float, help="profile duration")
    a = ap.parse_args(argv)
    for p in a.profiles:
        print(report(p, a.top, a.rate, a.seconds))
        print()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
