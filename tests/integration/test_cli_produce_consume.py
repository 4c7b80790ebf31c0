"""`eddy produce` and `eddy consume` against a real broker, and kcat interop: kcat reads
what eddy wrote and eddy reads what kcat wrote, with the same keys, partitions, headers."""

from __future__ import annotations

import base64
import json
import subprocess
from pathlib import Path

import pytest
from conftest import EddyProcess
from test_cli import eddy_cli, eddy_cli_parallel, json_lines, json_out, ok

KCAT = "/usr/bin/kcat"


@pytest.fixture(scope="module")
def eddy(module_eddy: EddyProcess) -> EddyProcess:
    """The module's one broker: every test here works on topics of its own."""
    return module_eddy


def murmur2(data: bytes) -> int:
    """Java's org.apache.kafka.common.utils.Utils.murmur2, as an unsigned 32-bit int."""
    m, r = 0x5BD1E995, 24
    h = (0x9747B28C ^ len(data)) & 0xFFFFFFFF
    n4 = len(data) // 4
    for i in range(n4):
        k = int.from_bytes(data[4 * i:4 * i + 4], "little")
        k = (k * m) & 0xFFFFFFFF
        k ^= k >> r
        k = (k * m) & 0xFFFFFFFF
        h = (h * m) & 0xFFFFFFFF
        h ^= k
    tail = data[4 * n4:]
    if len(tail) == 3:
        h ^= tail[2] << 16
    if len(tail) >= 2:
        h ^= tail[1] << 8
    if len(tail) >= 1:
        h ^= tail[0]
        h = (h * m) & 0xFFFFFFFF
    h ^= h >> 13
    h = (h * m) & 0xFFFFFFFF
    h ^= h >> 15
    return h


def java_partition(key: str, partitions: int) -> int:
    """The Java producer's default partitioner for a keyed record."""
    return (murmur2(key.encode()) & 0x7FFFFFFF) % partitions


def test_murmur2_reference_matches_java() -> None:
    # vectors from Apache Kafka's UtilsTest.testMurmur2 (signed ints there)
    def signed(x: int) -> int:
        return x - (1 << 32) if x >= 1 << 31 else x

    assert signed(murmur2(b"21")) == -973932308
    assert signed(murmur2(b"foobar")) == -790332482
    assert signed(murmur2(b"a-little-bit-long-string")) == -985981536
    assert signed(murmur2(b"a-little-bit-longer-string")) == -1486304829
    assert signed(murmur2(b"lkjh234lh9fiuh90y23oiuhsafujhadof229phr9h19h89h8")) == -58897971
    assert signed(murmur2(b"abc")) == 479470107


def kcat(*args: str, input: str | bytes = b"") -> str:
    data = input.encode() if isinstance(input, str) else input
    proc = subprocess.run([KCAT, *args], input=data, capture_output=True, timeout=60,
                          check=False)
    assert proc.returncode == 0, f"kcat {args}: {proc.returncode}\n{proc.stderr!r}"
    return proc.stdout.decode()


KEYS = [f"user-{i}" for i in range(40)]


def test_produce_keyed_lines_with_headers(eddy: EddyProcess) -> None:
    b = eddy.bootstrap
    ok(eddy_cli("topic", "create", "events", "--partitions", "6", bootstrap=b))
    lines = "".join(f"{k}:value of {k}\n" for k in KEYS)
    out = ok(eddy_cli("produce", "events", "--key-separator", ":", "--header", "src=cli",
                      "--header", "trace=abc=1", input=lines, bootstrap=b))
    assert out.strip() == f"produced {len(KEYS)} records to 'events'"

    records = json_lines(eddy_cli("consume", "events", "--from-beginning", "--exit-at-end",
                                  "-o", "json", bootstrap=b))
    assert len(records) == len(KEYS)
    for r in records:
        assert r["topic"] == "events"
        assert r["value"] == f"value of {r['key']}"
        assert r["headers"] == {"src": "cli", "trace": "abc=1"}
        assert r["partition"] == java_partition(r["key"], 6), r   # murmur2, as Java's
        assert isinstance(r["offset"], int) and r["timestamp"] > 0
    assert {r["key"] for r in records} == set(KEYS)
    assert len({r["partition"] for r in records}) > 1

    # --output json for produce: counts per partition
    summary = json_out(eddy_cli("produce", "events", "-K", ":", "-o", "json",
                                input="user-1:again\nuser-1:and again\n", bootstrap=b))
    assert summary == {"topic": "events", "produced": 2,
                       "partitions": {str(java_partition("user-1", 6)): 2}}


def test_produce_json_lines_and_round_trip(eddy: EddyProcess, tmp_path: Path) -> None:
    b = eddy.bootstrap
    ok(eddy_cli("topic", "create", "src", "--partitions", "3", bootstrap=b))
    ok(eddy_cli("topic", "create", "dst", "--partitions", "3", bootstrap=b))
    binary = bytes(range(250, 256)) + b"\x00\x01"
    lines = [
        {"key": "k1", "value": "plain text", "headers": {"h": "1"}},
        {"key": None, "value": {"nested": [1, 2]}, "partition": 2},
        {"key": "k3", "value": base64.b64encode(binary).decode(), "value_encoding": "base64",
         "headers": [["dup", "a"], ["dup2", None]], "partition": 1, "timestamp": 1700000000000},
        {"value": None, "key": "tombstone", "partition": 0},
    ]
    src = tmp_path / "records.jsonl"
    src.write_text("".join(json.dumps(x) + "\n" for x in lines))
    assert "produced 4 records" in ok(eddy_cli("produce", "src", "--json", "--file", str(src),
                                               bootstrap=b))
    got = sorted(json_lines(eddy_cli("consume", "src", "--from-beginning", "-e", "-o", "json",
                                     bootstrap=b)), key=lambda r: str(r["key"]))
    by_key = {r["key"]: r for r in got}
    assert by_key["k1"]["value"] == "plain text" and by_key["k1"]["headers"] == {"h": "1"}
    assert by_key[None]["value"] == '{"nested":[1,2]}' and by_key[None]["partition"] == 2
    k3 = by_key["k3"]
    assert k3["value_encoding"] == "base64"
    assert base64.b64decode(k3["value"]) == binary
    assert k3["partition"] == 1 and k3["timestamp"] == 1700000000000
    assert k3["headers"] == {"dup": "a", "dup2": None}
    assert by_key["tombstone"]["value"] is None and by_key["tombstone"]["partition"] == 0

    # consume --output json | produce --json reproduces the records in another topic
    dump = ok(eddy_cli("consume", "src", "--from-beginning", "-e", "-o", "json", bootstrap=b))
    ok(eddy_cli("produce", "dst", "--json", input=dump, bootstrap=b))
    copied = json_lines(eddy_cli("consume", "dst", "--from-beginning", "-e", "-o", "json",
                                 bootstrap=b))

    def strip(r: dict[str, object]) -> tuple[object, ...]:
        return (r["partition"], r["offset"], r["timestamp"], r["key"], r["value"],
                json.dumps(r["headers"]), r.get("value_encoding"))

    assert sorted(map(strip, copied)) == sorted(map(strip, got))


def test_produce_errors(eddy: EddyProcess, tmp_path: Path) -> None:
    b = eddy.bootstrap
    ok(eddy_cli("topic", "create", "t", "--partitions", "2", bootstrap=b))
    bad_partition, no_sep, bad_json, no_file, empty = eddy_cli_parallel([
        ["produce", "t", "--partition", "5"],
        ["produce", "t", "-K", ":"],
        ["produce", "t", "--json"],
        ["produce", "t", "--file", str(tmp_path / "nope.txt")],
        ["produce", "t"],
    ], inputs=["x\n", "a:1\nno separator\nc:3\n", '{"value": "ok"}\n[1, 2]\n', "", ""],
        bootstrap=b)
    assert bad_partition.returncode == 1
    assert ("topic 't' has 2 partitions (0-1); partition 5 does not exist"
            in bad_partition.stderr)
    assert no_sep.returncode == 1
    assert "line 2 has no key separator ':'" in no_sep.stderr
    assert "1 record(s) before it were produced" in no_sep.stderr
    assert bad_json.returncode == 1
    assert "line 2" in bad_json.stderr and "JSON object" in bad_json.stderr
    assert no_file.returncode == 1 and "nope.txt" in no_file.stderr
    # empty input is fine: nothing produced
    assert "produced 0 records" in ok(empty)


def test_consume_positions_and_formats(eddy: EddyProcess) -> None:
    b = eddy.bootstrap
    ok(eddy_cli("topic", "create", "log", "--partitions", "2", bootstrap=b))
    ok(eddy_cli("produce", "log", "--partition", "0", "-K", "=", "-H", "n=0",
                input="".join(f"k{i}=v{i}\n" for i in range(10)), bootstrap=b))
    ok(eddy_cli("produce", "log", "--partition", "1", input="p1-a\np1-b\n", bootstrap=b))
    records = json_lines(eddy_cli("consume", "log", "-p", "0", "--from-beginning", "-e",
                                  "-o", "json", bootstrap=b))
    assert [r["value"] for r in records] == [f"v{i}" for i in range(10)]
    ts = [r["timestamp"] for r in records]

    cases: list[tuple[list[str], list[str]]] = [
        (["-p", "0", "--offset", "7", "-e"], ["v7", "v8", "v9"]),
        (["-p", "0", "--offset", "-2", "-e"], ["v8", "v9"]),       # the last two
        (["-p", "1", "--from-beginning", "-e"], ["p1-a", "p1-b"]),
        (["-p", "0", "--from-beginning", "--count", "3"], ["v0", "v1", "v2"]),
        # --timestamp: the first record at or after it; after every record: nothing
        (["-p", "0", "--timestamp", str(ts[0]), "-e"], [f"v{i}" for i in range(10)]),
        (["-p", "0", "--timestamp", str(ts[-1] + 3_600_000), "-e"], []),
        # default: only new records; --timeout ends an idle consumer
        (["--timeout", "1"], []),
        (["-p", "0", "--offset", "3", "-c", "1", "--print-key", "--print-headers",
          "--print-partition", "--print-offset", "--print-timestamp"],
         [f"CreateTime:{ts[3]}\tPartition:0\tOffset:3\tn:0\tk3\tv3"]),
        (["-p", "1", "--from-beginning", "-e", "--print-key", "--print-headers"],
         ["NO_HEADERS\tnull\tp1-a", "NO_HEADERS\tnull\tp1-b"]),
        (["-p", "0", "--offset", "9", "-e", "--print-key", "--key-separator", " => "],
         ["k9 => v9"]),
        (["-p", "0", "--offset", "8", "-e", "--format", r"%t/%p/%o %k=%s (%K,%S) [%h] %T\n"],
         [f"log/0/8 k8=v8 (2,2) [n=0] {ts[8]}", f"log/0/9 k9=v9 (2,2) [n=0] {ts[9]}"]),
    ]
    procs = eddy_cli_parallel([["consume", "log", *args] for args, _ in cases] + [
        ["consume", "log", "--from-beginning", "-c", "12"],  # --count across partitions
        ["consume", "log", "-p", "3"],
    ], bootstrap=b)
    for (args, expected), proc in zip(cases, procs, strict=False):
        assert ok(proc).splitlines() == expected, args
    assert len(ok(procs[-2]).splitlines()) == 12
    proc = procs[-1]
    assert proc.returncode == 1
    assert "topic 'log' has 2 partitions (0-1); partition 3 does not exist" in proc.stderr


def test_kcat_reads_what_eddy_produced(eddy: EddyProcess) -> None:
    b = eddy.bootstrap
    ok(eddy_cli("topic", "create", "to-kcat", "--partitions", "4", bootstrap=b))
    lines = "".join(f"{k}|v-{k}\n" for k in KEYS)
    ok(eddy_cli("produce", "to-kcat", "-K", "|", "-H", "origin=eddy", "-H", "x=1",
                input=lines, bootstrap=b))
    out = kcat("-C", "-b", b, "-t", "to-kcat", "-o", "beginning", "-e", "-q",
               "-f", "%p\t%k\t%s\t%h\n")
    seen = sorted(tuple(line.split("\t")) for line in out.splitlines())
    expected = sorted((str(java_partition(k, 4)), k, f"v-{k}", "origin=eddy,x=1") for k in KEYS)
    assert seen == expected
    # and eddy sees exactly what kcat sees
    mine = ok(eddy_cli("consume", "to-kcat", "--from-beginning", "-e",
                       "--format", r"%p\t%k\t%s\t%h\n", bootstrap=b))
    assert sorted(tuple(line.split("\t")) for line in mine.splitlines()) == seen


def test_eddy_reads_what_kcat_produced(eddy: EddyProcess) -> None:
    b = eddy.bootstrap
    for proc in eddy_cli_parallel([["topic", "create", "from-kcat", "--partitions", "5"],
                                   ["topic", "create", "from-eddy", "--partitions", "5"]],
                                  bootstrap=b):
        ok(proc)
    lines = "".join(f"{k}:payload {k}\n" for k in KEYS)
    # kcat's default partitioner is consistent_random; murmur2_random is the Java one
    kcat("-P", "-b", b, "-t", "from-kcat", "-K", ":", "-H", "origin=kcat", "-H", "n=42",
         "-X", "partitioner=murmur2_random", input=lines)
    ok(eddy_cli("produce", "from-eddy", "-K", ":", input=lines, bootstrap=b))
    from_kcat, from_eddy = map(json_lines, eddy_cli_parallel([
        ["consume", "from-kcat", "--from-beginning", "-e", "-o", "json"],
        ["consume", "from-eddy", "--from-beginning", "-e", "-o", "json"],
    ], bootstrap=b))
    assert len(from_kcat) == len(KEYS)
    for r in from_kcat:
        assert r["value"] == f"payload {r['key']}"
        assert r["headers"] == {"origin": "kcat", "n": "42"}
        assert r["partition"] == java_partition(r["key"], 5)
    # the same keys land in the same partitions whichever tool produced them
    assert ({r["key"]: r["partition"] for r in from_kcat}
            == {r["key"]: r["partition"] for r in from_eddy})
    # and a keyless kcat record with a binary value comes back base64-encoded
    kcat("-P", "-b", b, "-t", "from-kcat", "-p", "0", input=b"\xff\xfe\x00binary\n")
    last = json_lines(eddy_cli("consume", "from-kcat", "-p", "0", "--offset", "-1", "-e",
                               "-o", "json", bootstrap=b))
    assert len(last) == 1 and last[0]["key"] is None
    assert last[0]["value_encoding"] == "base64"
    assert base64.b64decode(last[0]["value"]) == b"\xff\xfe\x00binary"
