"""A pipeline continues its records' traces: the W3C `traceparent` header of a source
record is written on the record the eddy sink produces from it (the broker's produce span
of that record then joins the producer's trace: tests/integration/test_traces.py), and no
other sink sees it."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from confluent_kafka import Producer

from .pipeline_helpers import create_topic, parquet_rows, read_topic, run_text

TRACE_A = b"00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"
TRACE_B = b"00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-00"


def test_the_eddy_sink_continues_the_source_records_traces(eddy: Any, spark: Any,
                                                            tmp_path: Path) -> None:
    create_topic(eddy.bootstrap, "traced")
    create_topic(eddy.bootstrap, "traced-out")
    records = [  # (id, headers)
        (1, [("traceparent", TRACE_A)]),
        (2, None),
        (3, [("source", b"web"), ("traceparent", TRACE_B)]),
        (4, [("source", b"batch")]),
        (5, [("traceparent", TRACE_A)]),  # filtered out below
    ]
    producer = Producer({"bootstrap.servers": eddy.bootstrap, "acks": "all"})
    for i, headers in records:
        producer.produce("traced", key=f"k{i}".encode(),
                         value=json.dumps({"id": i, "n": i * 10}).encode(), headers=headers)
    assert producer.flush(15) == 0
    run_text(spark, f"""
name: traced
source: {{type: eddy, bootstrap: "{eddy.bootstrap}", topic: traced}}
transforms:
  - parse_json: {{schema: "id INT, n INT", keep: [key]}}
  - filter: "id < 5"
sinks:
  - {{type: eddy, topic: traced-out}}
  - {{type: files, format: parquet, path: {tmp_path / "out"}}}
checkpoint: {tmp_path / "ck"}
trigger: available-now
""")
    out = {json.loads(r.value or b"")["id"]: r for r in read_topic(eddy.bootstrap, "traced-out")}
    assert sorted(out) == [1, 2, 3, 4]
    assert out[1].headers == {"traceparent": TRACE_A}
    assert out[3].headers == {"traceparent": TRACE_B}  # the other headers were not kept
    assert out[2].headers == {} and out[4].headers == {}
    # the files sink gets the rows without the trace column
    rows = parquet_rows(spark, tmp_path / "out")
    assert [r["id"] for r in rows] == [1, 2, 3, 4]
    assert set(rows[0]) == {"key", "id", "n"}
