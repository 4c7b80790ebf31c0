"""What a person watching a pipeline sees: records/s, lag per source partition, batch time.

On a terminal: a rich live table refreshed as batches complete. Otherwise: one
log line per completed micro-batch (for files, journald, CI logs).
"""

from __future__ import annotations

import json
import sys
from dataclasses import dataclass, field
from typing import IO, Any

from rich.console import Console
from rich.live import Live
from rich.table import Table


def _offsets(raw: Any) -> dict[str, int]:
    """A source offset from Spark's progress (JSON text or a dict) as {partition: n}."""
    if isinstance(raw, str):
        try:
            raw = json.loads(raw)
        except ValueError:
            return {}
    if not isinstance(raw, dict):
        return {}
    return {str(k): int(v) for k, v in raw.items() if isinstance(v, int | float)}


@dataclass
class Snapshot:
    batch_id: int
    rows: int
    input_rate: float
    process_rate: float
    duration_ms: int
    lag: dict[str, int]
    total_rows: int
    dead_letters: int


def snapshot(progress: dict[str, Any], total_rows: int, dead_letters: int) -> Snapshot:
    lag: dict[str, int] = {}
    for src in progress.get("sources", []):
        end = _offsets(src.get("endOffset"))
        latest = _offsets(src.get("latestOffset"))
        for key, offset in latest.items():
            if key in end:
                lag[key] = max(0, offset - end[key])
            elif "rows" not in key:
                lag[key] = offset
    return Snapshot(
        batch_id=int(progress.get("batchId", -1)),
        rows=int(progress.get("numInputRows", 0)),
        input_rate=float(progress.get("inputRowsPerSecond") or 0.0),
        process_rate=float(progress.get("processedRowsPerSecond") or 0.0),
        duration_ms=int(progress.get("durationMs", {}).get("triggerExecution", 0)),
        lag=lag,
        total_rows=total_rows,
        dead_letters=dead_letters,
    )


def line(s: Snapshot) -> str:
    lag = " ".join(f"{k}={v}" for k, v in sorted(s.lag.items())) or "-"
    return (f"batch {s.batch_id}: {s.rows} rows in {s.duration_ms / 1000:.2f}s "
            f"({s.process_rate:,.0f} rows/s), total {s.total_rows}, "
            f"dead letters {s.dead_letters}, lag {lag}")


def table(name: str, s: Snapshot) -> Table:
    t = Table(title=f"pipeline {name}", show_header=True, expand=False)
    t.add_column("batch", justify="right")
    t.add_column("rows", justify="right")
    t.add_column("rows/s", justify="right")
    t.add_column("batch time", justify="right")
    t.add_column("total rows", justify="right")
    t.add_column("dead letters", justify="right")
    t.add_row(str(s.batch_id), f"{s.rows:,}", f"{s.process_rate:,.0f}",
              f"{s.duration_ms / 1000:.2f}s", f"{s.total_rows:,}", f"{s.dead_letters:,}")
    lag = Table(title="lag per source partition", show_header=True)
    lag.add_column("partition")
    lag.add_column("records behind", justify="right")
    for key, behind in sorted(s.lag.items()):
        lag.add_row(key, f"{behind:,}")
    outer = Table.grid()
    outer.add_row(t)
    if s.lag:
        outer.add_row(lag)
    return outer


@dataclass
class ProgressView:
    """Call `update(query, prepared)` every poll; prints only when a batch completed."""

    name: str
    stream: IO[str] = field(default_factory=lambda: sys.stderr)
    live: bool | None = None
    seen_batch: int = -1
    total_rows: int = 0
    _live: Live | None = None

    def __post_init__(self) -> None:
        if self.live is None:
            self.live = self.stream.isatty()
        if self.live:
            self._live = Live(console=Console(file=self.stream), auto_refresh=False)
            self._live.start()

    def update(self, query: Any, prepared: Any) -> Snapshot | None:
        progress = query.lastProgress
        if not progress or int(progress.get("batchId", -1)) == self.seen_batch:
            return None
        self.seen_batch = int(progress["batchId"])
        self.total_rows += int(progress.get("numInputRows", 0))
        dead = sum(b.dead_letters for b in getattr(prepared, "batches", []))
        s = snapshot(progress, self.total_rows, dead)
        if self._live is not None:
            self._live.update(table(self.name, s), refresh=True)
        else:
            print(line(s), file=self.stream, flush=True)
        return s

    def close(self) -> None:
        if self._live is not None:
            self._live.stop()
            self._live = None
