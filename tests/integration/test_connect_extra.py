"""The broker installs without Spark: PySpark, pyarrow and pandas are the `connect` extra.
Without them `eddy serve` runs, `eddy connect validate` works, and the commands that run
Spark say how to add it instead of failing with a traceback."""

from __future__ import annotations

import subprocess
import sys
import time
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
SPARK = ("pyspark", "pyarrow", "pandas")

#: run the `eddy` CLI in an interpreter where the connect extra cannot be imported
BLOCKED = f"""
import importlib.abc, sys
class Blocker(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in {SPARK!r}:
            raise ModuleNotFoundError(f"No module named {{name!r}}", name=name)
        return None
sys.meta_path.insert(0, Blocker())
import importlib.util
_find = importlib.util.find_spec
def find_spec(name, package=None):
    if name.split(".")[0] in {SPARK!r}:
        return None
    return _find(name, package)
importlib.util.find_spec = find_spec
from eddy.cli.main import app
sys.argv = ["eddy", *sys.argv[1:]]
app()
"""

PIPELINE = """\
name: orders-to-parquet
source: {type: eddy, bootstrap: 127.0.0.1:9092, topic: orders}
transforms:
  - parse_json: {schema: "id INT, amount DOUBLE"}
sinks:
  - {type: files, format: parquet, path: ./out/orders}
trigger: available-now
"""


def eddy_without_spark(*args: str, timeout: float = 60) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-c", BLOCKED, *args], capture_output=True,
                          text=True, timeout=timeout)


def test_spark_is_the_connect_extra_not_a_dependency() -> None:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    names = {d.split("=")[0].split(">")[0].split("<")[0].strip() for d in
             project["dependencies"]}
    assert not names & set(SPARK)
    extra = {d.split("=")[0].split(">")[0].strip() for d in
             project["optional-dependencies"]["connect"]}
    assert extra == set(SPARK)


def test_connect_commands_without_spark(tmp_path: Path) -> None:
    spec = tmp_path / "pipeline.yaml"
    spec.write_text(PIPELINE)
    validated = eddy_without_spark("connect", "validate", str(spec))
    assert validated.returncode == 0, validated.stderr
    for command in ("run", "discover"):
        ran = eddy_without_spark("connect", command, str(spec))
        assert ran.returncode == 1, ran.stdout + ran.stderr
        assert "pip install 'eddy[connect]'" in ran.stderr, ran.stderr
        assert "Traceback" not in ran.stderr, ran.stderr


def test_the_broker_serves_without_spark(tmp_path: Path) -> None:
    proc = subprocess.Popen(
        [sys.executable, "-c", BLOCKED, "serve", "--listen", "127.0.0.1:0",
         "--data-dir", str(tmp_path / "data"), "--set", "registry.listener=",
         "--set", "admin.listener="],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        assert proc.stdout is not None
        deadline = time.monotonic() + 30
        line = ""
        while time.monotonic() < deadline and not line.startswith("EDDY_READY"):
            line = proc.stdout.readline()
            if not line and proc.poll() is not None:
                break
        assert line.startswith("EDDY_READY"), (proc.stderr.read() if proc.stderr else "")
    finally:
        proc.terminate()
        assert proc.wait(30) == 0
