"""Pipelines' status as the broker sees it: the compacted topic ``_eddy_pipelines``.

An ``eddy connect run`` process reports its pipeline's progress there (Kafka Connect keeps
its workers' status in a topic the same way): one record per report, keyed by the pipeline's
name, the value a small JSON object (:class:`PipelineStatus`). Any node holding the topic's
partition reads it from its own log (``eddy.observe.pipelines``) for the metrics
(``eddy_pipeline_*{pipeline}``) and the console; nothing else is needed between a pipeline
and the cluster. This module is the records' format, shared by the pipelines that write them
and the node that reads them.

Anyone who may produce can write to the topic, so every value is checked (a JSON object of
bounded size, each field of its type and range) and a bad one is skipped, counted and logged
once in a while: it never stops the others from being read.
"""

from __future__ import annotations

import json
import math
from dataclasses import asdict, dataclass
from typing import Any

STATUS_TOPIC = "_eddy_pipelines"
STATES = ("running", "stopped", "failed")
#: a pipeline whose last report is older than this is not counted as up
STALE_MS = 60_000
MAX_VALUE_BYTES = 16 * 1024
MAX_NAME = 249
MAX_TEXT = 1024


@dataclass(frozen=True, slots=True)
class PipelineStatus:
    """One report of a pipeline: its state, progress and where it runs."""

    name: str
    state: str
    batch_id: int
    rows_total: int
    rows_per_s: float
    lag_records: int
    dead_letters: int
    updated_ms: int
    host: str = ""
    pid: int = 0
    error: str = ""

    def encode(self) -> tuple[bytes, bytes]:
        """(key, value) of the record reporting it."""
        return self.name.encode(), json.dumps(asdict(self), separators=(",", ":")).encode()

    def up(self, now_ms: int) -> bool:
        return self.state == "running" and now_ms - self.updated_ms <= STALE_MS


def _int(doc: dict[str, Any], field: str, default: int | None = None) -> int:
    value = doc.get(field, default)
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value < 1 << 63:
        if field == "batch_id" and isinstance(value, int) and value == -1:
            return -1
        raise ValueError(f"{field}: expected a non-negative integer, got {value!r}"[:200])
    return value


def _text(doc: dict[str, Any], field: str, limit: int, default: str | None = None) -> str:
    value = doc.get(field, default)
    if not isinstance(value, str) or len(value) > limit:
        raise ValueError(f"{field}: expected a string of at most {limit} characters")
    return value


def decode(key: bytes | None, value: bytes) -> PipelineStatus:
    """The status a record reports; ValueError naming the field when it is not one."""
    if len(value) > MAX_VALUE_BYTES:
        raise ValueError(f"value: {len(value)} bytes, more than {MAX_VALUE_BYTES}")
    try:
        doc = json.loads(value)
    except (ValueError, RecursionError) as exc:
        raise ValueError(f"value: not JSON ({str(exc)[:80]})") from None
    if not isinstance(doc, dict):
        raise ValueError("value: expected a JSON object")
    name = _text(doc, "name", MAX_NAME)
    if not name or (key is not None and key != name.encode()):
        raise ValueError("name: empty, or not the record's key")
    state = _text(doc, "state", 16)
    if state not in STATES:
        raise ValueError(f"state: expected one of {', '.join(STATES)}")
    rate = doc.get("rows_per_s", 0.0)
    if isinstance(rate, bool) or not isinstance(rate, int | float) or not math.isfinite(rate) \
            or rate < 0:
        raise ValueError("rows_per_s: expected a finite non-negative number")
    return PipelineStatus(
        name=name, state=state, batch_id=_int(doc, "batch_id", -1),
        rows_total=_int(doc, "rows_total", 0), rows_per_s=float(rate),
        lag_records=_int(doc, "lag_records", 0), dead_letters=_int(doc, "dead_letters", 0),
        updated_ms=_int(doc, "updated_ms"), host=_text(doc, "host", MAX_TEXT, ""),
        pid=_int(doc, "pid", 0), error=_text(doc, "error", MAX_TEXT, ""))
