"""Files sink: parquet/json/csv directories, each micro-batch's rows exactly once.

Spark replays a micro-batch (same batch id, same rows) when the pipeline stopped
before the batch was committed in its checkpoint, so a sink sees a batch again
after a crash at any point of its write. This sink makes the write idempotent
with a commit protocol on the local (or shared, POSIX) filesystem. For batch
`(run_id, batch_id)` it uses the tag `T = <first 12 chars of run_id>-<batch_id>`:

1. If the commit marker `<path>/_eddy_commits/T` exists, the batch is already
   written: skip it (and remove leftovers of step 7).
2. If a manifest `<path>/_eddy_commits/T.moving` exists, an earlier attempt
   crashed while moving files: delete every file it lists, then the manifest.
3. Write the batch with Spark into `<path>/_eddy_staging/T` (mode overwrite,
   the staging directory deleted first).
4. Write the manifest `T.moving`: every destination path (tmp file + fsync +
   os.replace, so it is complete or absent).
5. Move each data file (not `_SUCCESS`, `.crc` or other hidden files) to the same
   relative directory under `<path>` (partition directories included), named
   `T-<spark's file name>`, with os.replace.
6. Write the marker `T` atomically (it lists the files): the batch is committed.
7. Delete the staging directory and the manifest.

A crash before 6 leaves no marker, so the replay undoes the partial move (2) and
writes the batch again; a crash after 6 makes the replay a no-op (1). Spark's and
pyarrow's readers ignore paths starting with `_` or `.`, so `spark.read.parquet(path)`
sees each batch's rows exactly once whatever the crash point. Empty batches write
only the marker. Markers of a run older than KEEP_MARKERS batches are pruned:
Spark only ever replays the last uncommitted batch.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from pydantic import Field

from eddy.connect import probes
from eddy.connect.batch import BatchInfo, observed
from eddy.connect.connectors import ConnectorSpec, SinkFactory, register

if TYPE_CHECKING:
    from pyspark.sql import DataFrame

    from eddy.connect.runtime.spec import Pipeline

COMMITS_DIR = "_eddy_commits"
STAGING_DIR = "_eddy_staging"
MOVING_SUFFIX = ".moving"
#: characters of the run id used in file names (the runtime passes a uuid hex)
RUN_ID_CHARS = 12
#: markers kept per run; older ones are deleted every PRUNE_EVERY batches
KEEP_MARKERS = 100
PRUNE_EVERY = 100

#: called with a step name between the steps of a write (tests make it raise)
CrashHook = Callable[[str], None]


class FilesSink(ConnectorSpec):
    """Exactly-once files: each micro-batch's files appear once, even across restarts."""

    type: Literal["files"]
    format: Literal["parquet", "json", "csv"] = "parquet"
    path: str
    partition_by: list[str] = Field(default_factory=list)
    options: dict[str, str] = Field(default_factory=dict, description="Spark writer options")


def batch_tag(batch: BatchInfo) -> str:
    """`<run>-<batch_id>`: the run id cut to RUN_ID_CHARS letters and digits."""
    run = re.sub(r"[^A-Za-z0-9]", "", batch.run_id)[:RUN_ID_CHARS] or "run"
    return f"{run}-{batch.batch_id}"


def _local_path(path: str) -> Path:
    if path.startswith("file://"):
        path = path[len("file://"):]
    elif path.startswith("file:"):
        path = path[len("file:"):]
    elif re.match(r"^[A-Za-z][A-Za-z0-9+.-]*://", path):
        raise ValueError(
            f"files sink: {path!r}: only local or mounted shared filesystems are supported "
            "(the commit protocol renames files)"
        )
    return Path(path).absolute()


def _atomic_write(path: Path, text: str) -> None:
    tmp = path.with_name(f".{path.name}.tmp")
    with open(tmp, "w") as f:
        f.write(text)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)
    _fsync_dir(path.parent)


def _fsync_dir(path: Path) -> None:
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


def _is_data_file(name: str) -> bool:
    return not name.startswith(("_", ".")) and not name.endswith(".crc")


class FilesBatchSink:
    """Writes each micro-batch as files under `spec.path`, exactly once (see module doc)."""

    single_action = True

    def __init__(self, spec: FilesSink, name: str = "files", *,
                 crash_hook: CrashHook | None = None) -> None:
        self.spec = spec
        self.name = name
        self.root = _local_path(spec.path)
        self.commits = self.root / COMMITS_DIR
        self.staging_root = self.root / STAGING_DIR
        self.crash_hook = crash_hook

    def _step(self, step: str) -> None:
        if self.crash_hook is not None:
            self.crash_hook(step)

    def marker(self, batch: BatchInfo) -> Path:
        return self.commits / batch_tag(batch)

    def committed(self, batch: BatchInfo) -> bool:
        return self.marker(batch).exists()

    def write(self, df: DataFrame, batch: BatchInfo) -> None:
        tag = batch_tag(batch)
        marker = self.commits / tag
        manifest = self.commits / (tag + MOVING_SUFFIX)
        staging = self.staging_root / tag
        if marker.exists():
            # a replay of a committed batch; finish step 7 if it was interrupted
            shutil.rmtree(staging, ignore_errors=True)
            manifest.unlink(missing_ok=True)
            return
        self.commits.mkdir(parents=True, exist_ok=True)
        if manifest.exists():
            self._undo_move(manifest)
        shutil.rmtree(staging, ignore_errors=True)

        files: list[str] = []
        if self._write_staging(df, staging, batch):
            self._step("staged")
            moves = self._plan_moves(staging, tag)
            files = [dest for _, dest in moves]
            _atomic_write(manifest, json.dumps({"files": files}))
            self._step("manifest")
            for i, (src, dest) in enumerate(moves):
                target = self.root / dest
                target.parent.mkdir(parents=True, exist_ok=True)
                os.replace(src, target)
                self._step(f"moved:{i + 1}/{len(moves)}")
            for directory in {(self.root / d).parent for d in files}:
                _fsync_dir(directory)
            self._step("moved")
        _atomic_write(marker, json.dumps({"files": files}))
        self._step("committed")
        shutil.rmtree(staging, ignore_errors=True)
        manifest.unlink(missing_ok=True)
        self._prune(batch)

    def _write_staging(self, df: DataFrame, staging: Path, batch: BatchInfo) -> bool:
        """Write the batch under `staging`; False if it had no rows (nothing to move:
        Spark writes an empty file for an empty frame). The rows are counted by the
        runtime when it can tell (batch.rows), else on the way (an Observation)."""
        from pyspark.sql import Observation
        from pyspark.sql import functions as F

        spec = self.spec
        watch: Observation | None = None
        if batch.rows is None:
            watch = Observation()
            df = df.observe(watch, F.count(F.lit(1)).alias("rows"))
        writer: Any = df.write.format(spec.format).options(**spec.options)
        if spec.partition_by:
            writer = writer.partitionBy(*spec.partition_by)
        writer.mode("overwrite").save(str(staging))
        if watch is not None:
            seen = observed(watch)
            rows = None if seen is None else int(seen["rows"])
        else:
            assert batch.rows is not None
            rows = batch.rows()
        if rows == 0:
            shutil.rmtree(staging, ignore_errors=True)
            with contextlib.suppress(OSError):
                staging.parent.rmdir()  # the staging root, if no other batch is in it
            return False
        return True

    @staticmethod
    def _plan_moves(staging: Path, tag: str) -> list[tuple[Path, str]]:
        """(staged file, destination relative to the root) for each data file."""
        moves: list[tuple[Path, str]] = []
        for dirpath, dirnames, filenames in os.walk(staging):
            dirnames[:] = sorted(d for d in dirnames if not d.startswith(("_", ".")))
            rel = Path(dirpath).relative_to(staging)
            for name in sorted(filenames):
                if _is_data_file(name):
                    moves.append((Path(dirpath) / name, str(rel / f"{tag}-{name}")))
        return moves

    def _undo_move(self, manifest: Path) -> None:
        """Delete what an interrupted move (step 5) may have put in place."""
        try:
            listed = json.loads(manifest.read_text())["files"]
        except (OSError, ValueError, KeyError, TypeError) as exc:
            raise RuntimeError(
                f"files sink {self.name}: cannot read {manifest} ({exc}); the batch cannot "
                "be retried safely: delete the files it names and the manifest by hand"
            ) from exc
        for rel in listed:
            (self.root / rel).unlink(missing_ok=True)
        manifest.unlink()

    def _prune(self, batch: BatchInfo) -> None:
        if batch.batch_id % PRUNE_EVERY or batch.batch_id < KEEP_MARKERS:
            return
        run, _, _ = batch_tag(batch).rpartition("-")
        oldest_kept = batch.batch_id - KEEP_MARKERS
        for entry in self.commits.iterdir():
            head, _, tail = entry.name.rpartition("-")
            if head == run and tail.isdigit() and int(tail) < oldest_kept:
                entry.unlink(missing_ok=True)


class FilesSinkFactory(SinkFactory[FilesSink]):
    spec = FilesSink
    rank = 2

    def build(self, spec: FilesSink, name: str, pipeline: Pipeline) -> FilesBatchSink:
        return FilesBatchSink(spec, name)

    def check(self, spec: FilesSink, pipeline: Pipeline, what: str) -> probes.Check:
        return probes.writable_dir(spec.path, what)


register(FilesSinkFactory())
