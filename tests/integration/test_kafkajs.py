"""kafkajs (Node) consumer groups against a real broker: tests/js/group_roundtrip.js produces,
consumes with a two-member group, lets one member leave, commits, and resumes with a new
member; it prints a JSON summary that this test checks.

`npm install` runs in tests/js when its node_modules is missing (kafkajs is pinned in
tests/js/package.json and package-lock.json)."""

from __future__ import annotations

import json
import shutil
import subprocess
from collections import Counter
from pathlib import Path
from typing import Any

JS_DIR = Path(__file__).resolve().parents[1] / "js"


def _npm_install() -> None:
    if (JS_DIR / "node_modules" / "kafkajs" / "package.json").exists():
        return
    npm = shutil.which("npm")
    assert npm is not None, "npm is needed for the kafkajs check (Node 20 + npm)"
    proc = subprocess.run([npm, "install", "--no-audit", "--no-fund"], cwd=JS_DIR,
                          capture_output=True, text=True, timeout=300,
                          stdin=subprocess.DEVNULL)
    assert proc.returncode == 0, f"npm install failed:\n{proc.stdout}\n{proc.stderr}"


def _no_dups(values: list[str]) -> None:
    dups = [v for v, n in Counter(values).items() if n > 1]
    assert not dups, f"delivered more than once: {dups[:10]}"


def test_kafkajs_group_roundtrip(eddy_factory: Any) -> None:
    node = shutil.which("node")
    assert node is not None, "node is needed for the kafkajs check"
    _npm_install()
    broker = eddy_factory("--set", "group.initial.rebalance.delay.ms=0")
    proc = subprocess.run([node, "group_roundtrip.js", broker.bootstrap], cwd=JS_DIR,
                          capture_output=True, text=True, timeout=150,
                          stdin=subprocess.DEVNULL)
    assert proc.stdout.strip(), f"no summary; stderr:\n{proc.stderr[-4000:]}"
    s = json.loads(proc.stdout.strip().splitlines()[-1])
    assert proc.returncode == 0 and "error" not in s, (
        f"{s.get('error')}\nsummary: {json.dumps(s)[:3000]}\nstderr:\n{proc.stderr[-4000:]}")
    assert s["errors"] == [] and s["commitErrors"] == [], s

    # two members split the three partitions and read every record once, each only its own
    split = s["phases"]["split"]
    a, b = split["assignment"]["a"], split["assignment"]["b"]
    assert a and b and not set(a) & set(b) and set(a) | set(b) == {0, 1, 2}, split
    _no_dups(split["consumed"])
    assert set(split["consumed"]) == set(split["sent"])
    assert {int(v.split(":")[0]) for v in split["a"]} <= set(a)
    assert {int(v.split(":")[0]) for v in split["b"]} <= set(b)

    # b left: a owns all three and reads what came next, once
    leave = s["phases"]["leave"]
    assert leave["assignment"] == [0, 1, 2]
    _no_dups(leave["consumed"])
    assert set(leave["consumed"]) == set(leave["sent"])

    # every record was committed; the group is Empty and listed
    assert s["committed"] == s["highWatermarks"] == {"0": 15, "1": 15, "2": 15}, s
    assert s["describe"] == {"state": "Empty", "protocolType": "consumer", "members": 0,
                             "errorCode": 0}, s["describe"]
    assert s["listed"] is True

    # a new member resumes exactly at the committed offsets: no gap, no re-delivery
    resume = s["phases"]["resume"]
    _no_dups(resume["consumed"])
    assert set(resume["consumed"]) == set(resume["sent"])
    for p in range(3):
        assert [o for q, o in resume["offsets"] if q == p] == [15, 16, 17, 18], resume

    assert s["deleteGroups"] == [{"groupId": s["groupId"], "errorCode": 0}]
    assert any(j["member"] == "c" and j["assignment"] == [0, 1, 2] for j in s["joins"])
