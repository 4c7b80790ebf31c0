"""The results table (rich when printing to a terminal, plain text otherwise) and JSON."""

from __future__ import annotations

import json
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any


@dataclass(frozen=True)
class Row:
    label: str
    path: str  # dotted path into one broker's results; "a.b|c.d" shows "x / y"
    fmt: str = "{:,.1f}"
    target: str = ""
    meets: Callable[[float], bool] | None = None


def _ge(t: float) -> Callable[[float], bool]:
    return lambda v: v >= t


def _lt(t: float) -> Callable[[float], bool]:
    return lambda v: v < t


ROWS: list[Row] = [
    Row("produce 1 KiB acks=1 (MiB/s)", "produce.1k_acks1.mib_s", target=">= 200",
        meets=_ge(200)),
    Row("produce 1 KiB acks=1 (msgs/s)", "produce.1k_acks1.msgs_s", "{:,.0f}"),
    Row("produce 1 KiB acks=all (MiB/s)", "produce.1k_acksall.mib_s"),
    Row("produce 1 KiB acks=all (msgs/s)", "produce.1k_acksall.msgs_s", "{:,.0f}"),
    Row("produce 100 B acks=1 (msgs/s)", "produce.100b_acks1.msgs_s", "{:,.0f}",
        target=">= 500,000", meets=_ge(500_000)),
    Row("produce 100 B acks=1 (MiB/s)", "produce.100b_acks1.mib_s"),
    Row("produce 100 B acks=all (msgs/s)", "produce.100b_acksall.msgs_s", "{:,.0f}"),
    Row("produce 100 B acks=all (MiB/s)", "produce.100b_acksall.mib_s"),
    Row("consume 1 KiB (MiB/s)", "consume.1k.mib_s", target=">= 400", meets=_ge(400)),
    Row("consume 1 KiB (msgs/s)", "consume.1k.msgs_s", "{:,.0f}"),
    Row("consume 100 B (msgs/s)", "consume.100b.msgs_s", "{:,.0f}"),
    Row("consume 100 B (MiB/s)", "consume.100b.mib_s"),
    Row("e2e latency p50 (ms)", "latency.p50_ms", "{:,.2f}"),
    Row("e2e latency p99 (ms)", "latency.p99_ms", "{:,.2f}", target="< 10", meets=_lt(10)),
    Row("e2e latency max (ms)", "latency.max_ms", "{:,.2f}"),
    Row("e2e achieved rate (MiB/s)", "latency.achieved_mib_s"),
    Row("startup to first Metadata (ms)", "startup.first_metadata_ms", "{:,.0f}",
        target="< 1000", meets=_lt(1000)),
    Row("startup to ready line (ms)", "startup.ready_line_ms", "{:,.0f}"),
    Row("idle RSS after startup (MiB)", "rss.idle_mib", target="< 150", meets=_lt(150)),
    Row("RSS after runs (MiB)", "rss.after_mib"),
    Row("peak RSS (MiB)", "rss.peak_mib"),
    Row("CPU broker|client, produce 1 KiB (cores)",
        "produce.1k_acks1.broker_cores|produce.1k_acks1.client_cores", "{:.2f}"),
    Row("CPU broker|client, produce 100 B (cores)",
        "produce.100b_acks1.broker_cores|produce.100b_acks1.client_cores", "{:.2f}"),
    Row("CPU broker|client, consume 1 KiB (cores)",
        "consume.1k.broker_cores|consume.1k.client_cores", "{:.2f}"),
    Row("CPU broker|client, consume 100 B (cores)",
        "consume.100b.broker_cores|consume.100b.client_cores", "{:.2f}"),
]

LABELS = [r.label for r in ROWS]


def _get(res: dict[str, Any] | None, path: str) -> Any:
    cur: Any = res
    for part in path.split("."):
        if not isinstance(cur, dict) or part not in cur:
            return None
        cur = cur[part]
    return cur


def _phase_error(res: dict[str, Any], path: str) -> bool:
    parent = _get(res, path.rsplit(".", 1)[0])
    return isinstance(parent, dict) and "error" in parent


def cell(res: dict[str, Any] | None, row: Row) -> str:
    if res is None:
        return "-"
    parts = []
    for path in row.path.split("|"):
        v = _get(res, path)
        if isinstance(v, int | float):
            s = row.fmt.format(v)
            samples = _get(res, path.rsplit(".", 1)[0] + ".samples_mib_s")
            if path.endswith(".mib_s") and isinstance(samples, list):
                nums = [x for x in samples if isinstance(x, int | float)]
                if len(nums) > 1:
                    s += f" [{min(nums):.0f}-{max(nums):.0f}]"
            if _phase_error(res, path):
                s += " (!)"
            parts.append(s)
        elif _phase_error(res, path) or res.get("errors"):
            parts.append("error")
        else:
            parts.append("-")
    return " | ".join(parts)


def verdict(res: dict[str, Any] | None, row: Row) -> str:
    if row.meets is None or res is None:
        return ""
    v = _get(res, row.path)
    if _phase_error(res, row.path):
        return "FAIL"
    if not isinstance(v, int | float):
        return "FAIL" if res.get("errors") else "-"
    return "PASS" if row.meets(v) else "FAIL"


def table_rows(results: dict[str, dict[str, Any] | None]) -> tuple[list[str], list[list[str]]]:
    brokers = list(results)
    header = ["metric", *brokers, "target", "eddy vs target"]
    rows = []
    for row in ROWS:
        rows.append([row.label, *(cell(results[b], row) for b in brokers), row.target,
                     verdict(results.get("eddy"), row)])
    return header, rows


def render(results: dict[str, dict[str, Any] | None], notes: list[str], title: str,
           plain: bool | None = None) -> None:
    header, rows = table_rows(results)
    if plain is None:
        plain = not sys.stdout.isatty()
    if not plain:
        try:
            from rich.console import Console
            from rich.table import Table
        except ImportError:
            plain = True
    if plain:
        widths = [max(len(h), *(len(r[i]) for r in rows)) for i, h in enumerate(header)]
        line = "  ".join("-" * w for w in widths)
        print(title)
        print("  ".join(h.ljust(w) for h, w in zip(header, widths, strict=True)).rstrip())
        print(line)
        for r in rows:
            print("  ".join(
                (c.ljust(w) if i == 0 else c.rjust(w)) for i, (c, w) in
                enumerate(zip(r, widths, strict=True))
            ).rstrip())
        print(line)
        for n in notes:
            print(n)
        sys.stdout.flush()
        return
    table = Table(title=title, caption="\n".join(notes), caption_justify="left")
    for i, h in enumerate(header):
        table.add_column(h, justify="left" if i == 0 else "right", no_wrap=i == 0)
    for r in rows:
        style = {"PASS": "green", "FAIL": "red"}.get(r[-1])
        r = [*r[:-1], f"[{style}]{r[-1]}[/]" if style else r[-1]]
        table.add_row(*r)
    Console(width=max(100, Console().width)).print(table)


def save(path: Path, payload: dict[str, Any]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(payload, indent=2, sort_keys=False, default=str) + "\n")
