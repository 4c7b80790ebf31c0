"""Run an atheris harness for a fixed time and report: `python -m bench.fuzz.atheris_run
decode|batches|mesh [--seconds 1800]`.

libFuzzer stops at its first finding (and its -fork mode cannot re-run a Python harness),
so the run is a loop of segments: each starts from the working corpus (recorded seeds,
the corpus kept in the repo, and everything the earlier segments added), and a segment
ending on a finding saves the input (crash-*, oom-*, timeout-*) and the next one starts.
A Python exception class seen --known-after times is then let through (EDDY_FUZZ_KNOWN) so
the run explores past it; native aborts cannot be, and keep costing restarts.

At the end: total executions, executions/s, coverage (libFuzzer's cov = edges, ft =
features) and corpus size, each finding triaged (re-run alone: its signature, size, hex),
and, with --merge, the working corpus minimised (-merge=1) into
bench/fuzz/corpus/atheris/<target>/. A JSON summary goes to <workdir>/summary.json.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import tempfile
import time
from collections import Counter
from dataclasses import asdict, dataclass, field
from pathlib import Path

from bench.fuzz.seeds import ATHERIS_DIR, write_seeds

ROOT = Path(__file__).resolve().parents[2]
_STAT = re.compile(r"^#(\d+)\s+\w+\s+cov: (\d+) ft: (\d+) corp: (\d+)/(\S+)")
_DONE = re.compile(r"^Done (\d+) runs in (\d+) second")
_UNIT = re.compile(r"Test unit written to (\S+)")


@dataclass
class Finding:
    path: str
    kind: str  # crash, oom, timeout, leak
    signature: str
    size: int
    hex: str


@dataclass
class Summary:
    target: str
    seconds: float = 0.0
    execs: int = 0
    segments: int = 0
    cov: int = 0
    ft: int = 0
    corpus_files: int = 0
    known: list[str] = field(default_factory=list)
    findings: list[Finding] = field(default_factory=list)

    @property
    def execs_per_s(self) -> float:
        return self.execs / self.seconds if self.seconds else 0.0


def harness_cmd(target: str, nice: int) -> list[str]:
    cmd = [sys.executable, "-m", "bench.fuzz.atheris_harness", target]
    return ["nice", "-n", str(nice), *cmd] if nice else cmd


def _env(known: list[str]) -> dict[str, str]:
    env = {**os.environ, "PYTHONPATH": f"{ROOT}{os.pathsep}{os.environ.get('PYTHONPATH', '')}"}
    env["EDDY_FUZZ_KNOWN"] = ",".join(known)
    return env


def signature(output: str) -> str:
    """One line naming a finding: the Python exception and where, or the native abort
    (numbers replaced by N, so one bug with many sizes is one finding)."""
    return re.sub(r"\d+", "N", _signature(output))


def _signature(output: str) -> str:
    lines = output.splitlines()
    if "=== Uncaught Python exception: ===" in output:
        i = lines.index("=== Uncaught Python exception: ===")
        tb = lines[i + 1 :]
        exc = next((ln for ln in tb if ln and not ln.startswith((" ", "Traceback"))), "?")
        where = [ln.strip() for ln in tb if ln.strip().startswith("File ")]
        return f"{exc[:200]} at {where[-1] if where else '?'}"
    for pat in ("memory allocation of", "panicked at", "out-of-memory", "deadly signal",
                "timeout after", "Killed"):
        hit = next((ln for ln in lines if pat in ln), None)
        if hit:
            return hit.strip()[:200]
    return "unknown: " + " | ".join(lines[-3:])[:200]


def triage(target: str, path: Path, nice: int) -> Finding:
    data = path.read_bytes()
    try:
        proc = subprocess.run([*harness_cmd(target, nice), str(path)], cwd=ROOT,
                              capture_output=True, text=True, timeout=120, env=_env([]))
        out = proc.stdout + proc.stderr
    except subprocess.TimeoutExpired:
        out = "timeout after 120 s when re-run"
    kind = path.name.split("-", 1)[0]
    return Finding(str(path), kind, signature(out), len(data), data[:512].hex())


def _exception_class(sig: str) -> str | None:
    m = re.match(r"^([A-Za-z_][\w.]*)(:|\s|$)", sig)
    return m.group(1).rsplit(".", 1)[-1] if m else None


def run(target: str, seconds: float, workdir: Path, nice: int, known_after: int,
        max_len: int, rss_limit_mb: int) -> Summary:
    corpus = workdir / "corpus"
    seeds = workdir / "seeds"
    artifacts = workdir / "artifacts"
    for d in (corpus, seeds, artifacts):
        d.mkdir(parents=True, exist_ok=True)
    write_seeds(target, seeds)
    kept = ATHERIS_DIR / target
    dirs = [str(corpus), str(seeds)] + ([str(kept)] if kept.is_dir() else [])
    summary = Summary(target)
    seen: Counter[str] = Counter()
    log_path = workdir / "fuzz.log"
    t0 = time.monotonic()
    with log_path.open("w") as log:
        while (left := seconds - (time.monotonic() - t0)) > 5:
            summary.segments += 1
            cmd = [*harness_cmd(target, nice), f"-max_total_time={int(left)}", "-timeout=10",
                   f"-rss_limit_mb={rss_limit_mb}", f"-max_len={max_len}",
                   "-print_final_stats=1", f"-artifact_prefix={artifacts}/", *dirs]
            proc = subprocess.run(cmd, cwd=workdir, capture_output=True, text=True,
                                  env=_env(summary.known))
            out = proc.stdout + proc.stderr
            log.write(out)
            log.flush()
            execs = 0
            for line in out.splitlines():
                m = _STAT.match(line)
                if m:
                    execs = int(m.group(1))
                    summary.cov, summary.ft = int(m.group(2)), int(m.group(3))
                    summary.corpus_files = int(m.group(4))
                elif (done := _DONE.match(line)) is not None:
                    execs = int(done.group(1))
                elif line.startswith("stat::number_of_executed_units:"):
                    execs = int(line.split()[-1])
            summary.execs += execs
            unit = _UNIT.search(out)
            if proc.returncode == 0 or unit is None:
                if proc.returncode != 0:
                    print(f"segment {summary.segments} exited {proc.returncode} without a "
                          f"finding:\n{out[-2000:]}", file=sys.stderr)
                    break
                continue
            sig = signature(out)
            seen[sig] += 1
            print(f"[{time.monotonic() - t0:7.0f}s] finding #{sum(seen.values())}: {sig}",
                  file=sys.stderr)
            cls = _exception_class(sig)
            if (cls and seen[sig] >= known_after and cls not in summary.known
                    and "Uncaught Python exception" in out):
                summary.known.append(cls)
                print(f"  {cls} seen {seen[sig]} times: let through from now on",
                      file=sys.stderr)
    summary.seconds = time.monotonic() - t0
    by_sig: dict[str, Finding] = {}
    for path in sorted(artifacts.iterdir()):
        f = triage(target, path, nice)
        if f.signature not in by_sig or f.size < by_sig[f.signature].size:
            by_sig[f.signature] = f
    summary.findings = sorted(by_sig.values(), key=lambda f: f.signature)
    return summary


def _wrapper(target: str, workdir: Path) -> Path:
    """An executable that runs the harness: libFuzzer's -merge re-runs its argv[0]."""
    path = workdir / f"harness-{target}"
    path.write_text(f'#!/bin/sh\nexec "{sys.executable}" -m bench.fuzz.atheris_harness '
                    f'{target} "$@"\n')
    path.chmod(0o755)
    return path


def merge(target: str, workdir: Path, nice: int) -> int:
    """Minimise the working corpus into the repo's corpus dir; returns its file count."""
    dest = ATHERIS_DIR / target
    fresh = workdir / "merged"
    if fresh.exists():
        for old in fresh.iterdir():
            old.unlink()
    fresh.mkdir(exist_ok=True)
    srcs = [str(workdir / "corpus"), str(workdir / "seeds")]
    if dest.is_dir():
        srcs.append(str(dest))
    env = {**_env([]), "EDDY_FUZZ_ARGV0": str(_wrapper(target, workdir))}
    proc = subprocess.run([*harness_cmd(target, nice), "-merge=1", "-timeout=10", str(fresh),
                           *srcs], cwd=workdir, capture_output=True, text=True, env=env,
                          check=False)
    if proc.returncode != 0 or not any(fresh.iterdir()):
        print(f"merge failed ({proc.returncode}), corpus left as it was:\n"
              f"{proc.stderr[-1500:]}", file=sys.stderr)
        return len(list(dest.iterdir())) if dest.is_dir() else 0
    dest.mkdir(parents=True, exist_ok=True)
    for old in dest.iterdir():
        old.unlink()
    for f in fresh.iterdir():
        (dest / f.name).write_bytes(f.read_bytes())
    return len(list(dest.iterdir()))


def render(s: Summary) -> str:
    lines = [
        f"atheris {s.target}: {s.seconds:.0f} s in {s.segments} segment(s)",
        f"  executions       {s.execs:,}",
        f"  executions/s     {s.execs_per_s:,.0f}",
        f"  coverage         cov {s.cov} (edges), ft {s.ft} (features), corpus {s.corpus_files}",
        f"  let through      {', '.join(s.known) or '-'}",
        f"  findings         {len(s.findings)} distinct",
    ]
    for f in s.findings:
        lines.append(f"    - [{f.kind}] {f.signature}")
        lines.append(f"      {f.size} bytes: {f.hex[:400]}{'...' if f.size > 200 else ''}")
        lines.append(f"      {f.path}")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m bench.fuzz.atheris_run", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("target", choices=["decode", "batches", "mesh"])
    ap.add_argument("--seconds", type=float, default=1800.0, help="total fuzzing time")
    ap.add_argument("--workdir", type=Path, default=None,
                    help="working corpus, artifacts and log (default: a new temp dir)")
    ap.add_argument("--nice", type=int, default=10, help="run the harness under nice -n N")
    ap.add_argument("--known-after", type=int, default=3,
                    help="let a Python exception class through after this many findings")
    ap.add_argument("--max-len", type=int, default=16384, help="libFuzzer -max_len")
    ap.add_argument("--rss-limit-mb", type=int, default=2048, help="libFuzzer -rss_limit_mb")
    ap.add_argument("--merge", action="store_true",
                    help="minimise the corpus into bench/fuzz/corpus/atheris/<target>/")
    ap.add_argument("--merge-only", action="store_true",
                    help="no fuzzing: only minimise --workdir's corpus into the repo")
    args = ap.parse_args(argv)
    if args.merge_only:
        if args.workdir is None:
            ap.error("--merge-only needs --workdir")
        n = merge(args.target, args.workdir, args.nice)
        print(f"corpus kept: {n} files in {ATHERIS_DIR / args.target}")
        return 0
    workdir = args.workdir or Path(tempfile.mkdtemp(prefix=f"eddy-atheris-{args.target}-"))
    workdir.mkdir(parents=True, exist_ok=True)
    summary = run(args.target, args.seconds, workdir, args.nice, args.known_after,
                  args.max_len, args.rss_limit_mb)
    if args.merge:
        n = merge(args.target, workdir, args.nice)
        print(f"corpus kept: {n} files in {ATHERIS_DIR / args.target}", file=sys.stderr)
    data = {**asdict(summary), "execs_per_s": summary.execs_per_s}
    (workdir / "summary.json").write_text(json.dumps(data, indent=2))
    print(render(summary))
    print(f"log, artifacts and summary.json in {workdir}")
    return 1 if summary.findings else 0


if __name__ == "__main__":
    sys.exit(main())
