"""The pipelines' status records (topic _eddy_pipelines): the format both sides share, checked
field by field since anyone who may produce can write there."""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from eddy.observe.pipelines import PipelineCollector
from eddy.telemetry.pipeline_status import MAX_VALUE_BYTES, PipelineStatus, decode

GOOD = PipelineStatus(name="orders", state="running", batch_id=3, rows_total=500,
                      rows_per_s=120.5, lag_records=7, dead_letters=2, updated_ms=10_000,
                      host="h", pid=42)


def doc(**changes: Any) -> bytes:
    fields = json.loads(GOOD.encode()[1])
    fields.update(changes)
    return json.dumps(fields).encode()


def test_a_report_round_trips() -> None:
    key, value = GOOD.encode()
    assert key == b"orders"
    assert decode(key, value) == GOOD


@pytest.mark.parametrize(("value", "field"), [
    (doc(state="sleeping"), "state"),
    (doc(rows_total=-1), "rows_total"),
    (doc(rows_total="5"), "rows_total"),
    (doc(rows_total=True), "rows_total"),
    (doc(lag_records=1 << 70), "lag_records"),
    (doc(rows_per_s=-1.0), "rows_per_s"),
    (b'{"name":"orders","state":"running","updated_ms":1,"rows_per_s":NaN}', "rows_per_s"),
    (doc(name=""), "name"),
    (doc(name="x" * 300), "name"),
    (doc(host=["h"]), "host"),
    (doc(updated_ms=None), "updated_ms"),
    (b"[1, 2]", "value"),
    (b"\xff\xfe", "value"),
    (b"[" * 100_000, "value"),
    (b'{"a": "' + b"x" * MAX_VALUE_BYTES + b'"}', "value"),
])
def test_a_bad_report_is_refused_naming_the_field(value: bytes, field: str) -> None:
    with pytest.raises(ValueError, match=rf"^{field}"):
        decode(b"orders", value)


def test_the_key_must_be_the_name() -> None:
    with pytest.raises(ValueError, match=r"^name"):
        decode(b"other", GOOD.encode()[1])


@given(st.binary(max_size=300))
def test_garbage_is_refused_with_value_error_only(value: bytes) -> None:
    try:
        status = decode(b"orders", value)
    except ValueError:
        return
    assert status.name == "orders"  # only a real report gets through


def test_up_means_running_and_fresh() -> None:
    assert GOOD.up(10_000 + 60_000)
    assert not GOOD.up(10_000 + 60_001)
    stopped = PipelineStatus(**{**json.loads(GOOD.encode()[1]), "state": "stopped"})
    assert not stopped.up(10_000)


class Reports:
    def __init__(self, latest: dict[str, PipelineStatus]) -> None:
        self.latest = latest

    def now_ms(self) -> int:
        return 20_000

    def refresh(self) -> dict[str, PipelineStatus]:
        return self.latest


def test_the_collector_reports_every_pipeline() -> None:
    families = {f.name: f for f in PipelineCollector(Reports({"orders": GOOD})).collect()}
    samples = {(f, s.labels["pipeline"]): s.value for f, fam in families.items()
               for s in fam.samples}
    assert samples == {
        ("eddy_pipeline_up", "orders"): 1.0,
        ("eddy_pipeline_rows_per_second", "orders"): 120.5,
        ("eddy_pipeline_lag_records", "orders"): 7.0,
        ("eddy_pipeline_rows", "orders"): 500.0,
        ("eddy_pipeline_dead_letters", "orders"): 2.0,
    }
    assert {f.name for f in PipelineCollector(None).collect()} == set(families)
