"""Files sink: each batch's rows exactly once after a crash at any step of its write."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest

from eddy.connect.batch import BatchInfo
from eddy.connect.sinks.files import (
    COMMITS_DIR,
    KEEP_MARKERS,
    PRUNE_EVERY,
    STAGING_DIR,
    FilesBatchSink,
    FilesSink,
    batch_tag,
)

RUN = "0123456789abcdef0123456789abcdef"


class Crash(Exception):
    pass


def crash_at(target: str) -> Any:
    """A crash hook raising at step `target` (a prefix when it ends with '/')."""

    def hook(step: str) -> None:
        if step == target or (target.endswith("/") and step.startswith(target)):
            raise Crash(step)

    return hook


def batch_frame(spark: Any, start: int, count: int = 40, partitions: int = 4) -> Any:
    return spark.range(start, start + count, 1, partitions).selectExpr(
        "id", "concat('row-', id) AS name", "CAST(id % 3 AS STRING) AS p"
    )


def data_files(root: Path) -> list[Path]:
    out = []
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames[:] = [d for d in dirnames if not d.startswith(("_", "."))]
        out += [Path(dirpath) / f for f in filenames if not f.startswith(("_", "."))]
    return sorted(out)


def read_ids(spark: Any, root: Path, fmt: str = "parquet") -> list[int]:
    reader = spark.read.format(fmt)
    if fmt == "csv":
        reader = reader.option("header", "true").option("inferSchema", "true")
    return sorted(int(r.id) for r in reader.load(str(root)).select("id").collect())


def assert_clean(root: Path) -> None:
    assert not [p for p in (root / COMMITS_DIR).iterdir() if p.name.endswith(".moving")]
    assert not (root / STAGING_DIR).exists() or not any((root / STAGING_DIR).iterdir())


def test_batches_written_once_and_replay_skipped(spark: Any, tmp_path: Path) -> None:
    root = tmp_path / "out"
    sink = FilesBatchSink(FilesSink(type="files", path=str(root)))
    sink.write(batch_frame(spark, 0), BatchInfo(0, RUN))
    sink.write(batch_frame(spark, 40), BatchInfo(1, RUN))
    files = data_files(root)
    assert len(files) == 8
    assert all(f.name.startswith((f"{RUN[:12]}-0-part-", f"{RUN[:12]}-1-part-")) for f in files)
    marker = json.loads((root / COMMITS_DIR / f"{RUN[:12]}-1").read_text())
    assert sorted(marker["files"]) == sorted(f.name for f in files if "-1-part-" in f.name)

    sink.write(batch_frame(spark, 0), BatchInfo(0, RUN))  # a replay of a committed batch
    assert data_files(root) == files
    assert read_ids(spark, root) == list(range(80))
    assert_clean(root)


def arrow_ids(root: Path) -> list[int]:
    """The ids pyarrow's dataset reader sees (it skips `_` and `.` paths, as Spark does)."""
    import pyarrow.dataset as ds

    return sorted(ds.dataset(str(root), format="parquet").to_table(columns=["id"])["id"]
                  .to_pylist())


@pytest.mark.parametrize("step", ["staged", "manifest", "moved:1/2", "moved"])
def test_crash_before_commit_then_replay_is_exactly_once(
    spark: Any, tmp_path: Path, step: str
) -> None:
    root = tmp_path / "out"
    spec = FilesSink(type="files", path=str(root))
    with pytest.raises(Crash):
        FilesBatchSink(spec, crash_hook=crash_at(step)).write(
            batch_frame(spark, 0, 20, 2), BatchInfo(1, RUN)
        )
    moved = data_files(root)
    assert len(moved) == {"staged": 0, "manifest": 0, "moved:1/2": 1, "moved": 2}[step]
    assert not (root / COMMITS_DIR / f"{RUN[:12]}-1").exists()

    # the pipeline restarts: Spark replays batch 1 with the same rows
    FilesBatchSink(spec).write(batch_frame(spark, 0, 20, 2), BatchInfo(1, RUN))
    assert arrow_ids(root) == list(range(20))
    assert len(data_files(root)) == 2
    assert_clean(root)


def test_crash_after_commit_then_replay_is_skipped(spark: Any, tmp_path: Path) -> None:
    root = tmp_path / "out"
    spec = FilesSink(type="files", path=str(root))
    with pytest.raises(Crash):
        FilesBatchSink(spec, crash_hook=crash_at("committed")).write(
            batch_frame(spark, 0, 20, 2), BatchInfo(0, RUN)
        )
    assert (root / COMMITS_DIR / f"{RUN[:12]}-0.moving").exists()  # cleanup never ran
    files = data_files(root)

    def no_write(step: str) -> None:
        raise AssertionError(f"a committed batch was written again ({step})")

    FilesBatchSink(spec, crash_hook=no_write).write(
        batch_frame(spark, 0, 20, 2), BatchInfo(0, RUN)
    )
    assert data_files(root) == files
    assert arrow_ids(root) == list(range(20))
    assert_clean(root)


@pytest.mark.parametrize("fmt", ["parquet", "json", "csv"])
def test_partition_by(spark: Any, tmp_path: Path, fmt: str) -> None:
    root = tmp_path / "out"
    options = {"header": "true"} if fmt == "csv" else {}
    spec = FilesSink.model_validate({"type": "files", "format": fmt, "path": str(root),
                                     "partition_by": ["p"], "options": options})
    with pytest.raises(Crash):
        FilesBatchSink(spec, crash_hook=crash_at("moved:3/")).write(
            batch_frame(spark, 0, 30, 2), BatchInfo(0, RUN)
        )
    FilesBatchSink(spec).write(batch_frame(spark, 0, 30, 2), BatchInfo(0, RUN))
    assert sorted(p.name for p in root.iterdir() if not p.name.startswith("_")) == [
        "p=0", "p=1", "p=2"
    ]
    files = data_files(root)
    assert len(files) == 6  # 2 tasks x 3 partition values
    for f in files:
        assert f.parent.name.startswith("p=") and f.name.startswith(f"{RUN[:12]}-0-part-")
        assert fmt in f.name
    reader = spark.read.format(fmt)
    if fmt == "csv":
        reader = reader.option("header", "true")
    schema = "id LONG, name STRING, p STRING"
    rows = reader.schema(schema).load(str(root)).collect()
    assert sorted(int(r.id) for r in rows) == list(range(30))
    assert all(int(r.id) % 3 == int(r.p) and r.name == f"row-{r.id}" for r in rows)
    assert_clean(root)


def test_empty_batch_writes_only_the_marker(spark: Any, tmp_path: Path) -> None:
    root = tmp_path / "out"
    sink = FilesBatchSink(FilesSink(type="files", path=str(root)))
    sink.write(batch_frame(spark, 0).where("id < 0"), BatchInfo(3, RUN))
    assert data_files(root) == []
    assert sink.committed(BatchInfo(3, RUN))
    assert not (root / STAGING_DIR).exists()


def test_tag_and_marker_pruning(tmp_path: Path) -> None:
    assert batch_tag(BatchInfo(7, RUN)) == f"{RUN[:12]}-7"
    assert batch_tag(BatchInfo(7, "run-id_with.marks")) == "runidwithmar-7"
    sink = FilesBatchSink(FilesSink(type="files", path=str(tmp_path)))
    sink.commits.mkdir()
    run = RUN[:12]
    for b in range(0, 2 * PRUNE_EVERY + 1, 10):
        (sink.commits / f"{run}-{b}").write_text("{}")
    (sink.commits / f"otherrun0000-{0}").write_text("{}")
    sink._prune(BatchInfo(2 * PRUNE_EVERY, RUN))
    left = sorted(p.name for p in sink.commits.iterdir())
    oldest = 2 * PRUNE_EVERY - KEEP_MARKERS
    assert left == sorted(
        [f"{run}-{b}" for b in range(oldest, 2 * PRUNE_EVERY + 1, 10)] + ["otherrun0000-0"]
    )


def test_remote_paths_are_refused() -> None:
    with pytest.raises(ValueError, match="local or mounted"):
        FilesBatchSink(FilesSink(type="files", path="s3a://bucket/out"))
    assert FilesBatchSink(FilesSink(type="files", path="file:///tmp/x")).root == Path("/tmp/x")
