"""The Avro decode bench (bench.pipeline_avro) in its CI smoke size: it runs end to end
and every row decodes (the bench exits non-zero if any does not); timings are never
asserted."""

from __future__ import annotations

import re
import subprocess
import sys


def test_smoke_run_decodes_every_row() -> None:
    out = subprocess.run([sys.executable, "-m", "bench.pipeline_avro", "--smoke"],
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stdout[-2000:] + out.stderr[-2000:]
    for phase in ("same", "evolved"):
        line = re.search(rf"^{phase}\s+([\d,]+) rows of (\d+) B:\s+([\d,]+) rows/s",
                         out.stdout, re.M)
        assert line is not None, out.stdout
        assert int(line.group(1).replace(",", "")) == 3000
        assert 800 <= int(line.group(2)) <= 1300  # ~1 KiB records
        assert int(line.group(3).replace(",", "")) > 0
