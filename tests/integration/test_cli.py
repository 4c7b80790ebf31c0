"""The `eddy` CLI run as a real command against a real broker: topics, cluster status,
config, and the error paths (unknown topic, bad config value, unreachable broker, usage).

Helpers here (`eddy_cli`, `free_port`) are shared by the other test_cli_*.py files."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from conftest import EddyProcess, free_port

CLI_TIMEOUT = 60.0


def clean_env(**extra: str) -> dict[str, str]:
    """The environment without EDDY_* settings from outside, plus `extra`."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("EDDY_")}
    env.update(extra)
    return env


def eddy_cli(*args: str, bootstrap: str | None = None, input: str | bytes | None = None,
             env: dict[str, str] | None = None, timeout: float = CLI_TIMEOUT,
             ) -> subprocess.CompletedProcess[str]:
    """Run `python -m eddy ARGS` (with --bootstrap appended when given); text in and out."""
    cmd = [sys.executable, "-m", "eddy", *args]
    if bootstrap is not None:
        cmd += ["--bootstrap", bootstrap]
    data = input.decode() if isinstance(input, bytes) else input
    return subprocess.run(cmd, input=data if data is not None else "", capture_output=True,
                          text=True, env=env or clean_env(), timeout=timeout, check=False)


def eddy_cli_parallel(calls: list[list[str]], bootstrap: str | None = None,
                      env: dict[str, str] | None = None, input: str | None = None,
                      inputs: list[str] | None = None,
                      ) -> list[subprocess.CompletedProcess[str]]:
    """Independent invocations at once (each is mostly interpreter start-up); `inputs`
    gives each its own stdin."""
    stdin = inputs if inputs is not None else [input or ""] * len(calls)
    with ThreadPoolExecutor(max_workers=4) as pool:
        return list(pool.map(
            lambda args, data: eddy_cli(*args, bootstrap=bootstrap, env=env, input=data),
            calls, stdin))


def ok(proc: subprocess.CompletedProcess[str]) -> str:
    assert proc.returncode == 0, f"exit {proc.returncode}\nstdout:\n{proc.stdout}\n" \
                                 f"stderr:\n{proc.stderr}"
    return proc.stdout


def json_out(proc: subprocess.CompletedProcess[str]) -> Any:
    return json.loads(ok(proc))


def json_lines(proc: subprocess.CompletedProcess[str]) -> list[dict[str, Any]]:
    return [json.loads(line) for line in ok(proc).splitlines() if line.strip()]


# ---- usage errors: exit 2, before any connection --------------------------------------------


USAGE_ERRORS = [
    ["topic"],                                              # a group without a command
    ["topic", "create"],                                    # missing NAME
    ["topic", "create", "t", "--partitions", "0"],          # out of range
    ["topic", "create", "t", "--config", "retention.ms"],   # not KEY=VALUE
    ["topic", "alter", "t"],                                # nothing to change
    ["topic", "list", "--output", "xml"],
    ["produce", "t", "--json", "--key-separator", ":"],
    ["produce", "t", "--header", "novalue"],
    ["consume", "t", "--group", "g", "--partition", "0"],
    ["consume", "t", "--from-beginning", "--offset", "3"],
    ["consume", "t", "--format", "%x"],
    ["consume", "t", "--format", "%s", "--output", "json"],
    ["group", "reset-offsets", "g", "--topic", "t"],       # no strategy
    ["group", "reset-offsets", "g", "--to-earliest"],      # no --topic/--all-topics
    ["group", "reset-offsets", "g", "--topic", "t", "--to-earliest", "--to-latest"],
    ["group", "reset-offsets", "g", "--topic", "t", "--to-datetime", "yesterday"],
    ["no-such-command"],
]


def test_usage_errors_exit_2() -> None:
    # an unreachable broker would be exit 1: exit 2 proves nothing was attempted
    env = clean_env(EDDY_BOOTSTRAP=f"127.0.0.1:{free_port()}")
    for args, proc in zip(USAGE_ERRORS, eddy_cli_parallel(USAGE_ERRORS, env=env), strict=True):
        assert proc.returncode == 2, (args, proc.returncode, proc.stdout, proc.stderr)
        assert proc.stderr.strip() or proc.stdout.strip()
        assert "Traceback" not in proc.stderr


# ---- unreachable broker: exit 1, names the address, suggests --bootstrap -------------------


def test_unreachable_broker() -> None:
    address = f"127.0.0.1:{free_port()}"
    calls = [["topic", "list"], ["topic", "create", "x"], ["topic", "describe", "x"],
             ["produce", "x"], ["consume", "x"], ["group", "list"], ["group", "describe", "g"],
             ["group", "delete", "g"], ["cluster", "status"]]
    for args, proc in zip(calls, eddy_cli_parallel(calls, bootstrap=address), strict=True):
        assert proc.returncode == 1, (args, proc.stdout, proc.stderr)
        assert f"cannot reach a broker at {address}" in proc.stderr, (args, proc.stderr)
        assert "--bootstrap" in proc.stderr
        assert "Traceback" not in proc.stderr


def test_bootstrap_from_environment_and_bad_address(eddy: EddyProcess) -> None:
    env = clean_env(EDDY_BOOTSTRAP=eddy.bootstrap)
    assert ok(eddy_cli("cluster", "status", "-o", "json", env=env))
    dead = f"127.0.0.1:{free_port()}"
    proc = eddy_cli("topic", "list", env=clean_env(EDDY_BOOTSTRAP=dead))
    assert proc.returncode == 1 and dead in proc.stderr
    proc = eddy_cli("topic", "list", bootstrap="no-port-here")
    assert proc.returncode == 1
    assert "HOST:PORT" in proc.stderr


# ---- topics -------------------------------------------------------------------------------


def test_topic_lifecycle(eddy: EddyProcess) -> None:
    b = eddy.bootstrap
    create_orders, create_payments = eddy_cli_parallel([
        ["topic", "create", "orders", "--partitions", "3", "--replication-factor", "1",
         "--config", "retention.ms=3600000", "--config", "cleanup.policy=delete", "-o", "json"],
        ["topic", "create", "payments"],
    ], bootstrap=b)
    created = json_out(create_orders)
    assert created["created"] is True
    assert created["partitions"] == 3 and created["replication_factor"] == 1
    assert created["topic_id"]
    assert ok(create_payments).strip() == (
        "created topic 'payments' (1 partition, replication factor 1)")

    # list: plain is one name per line (internal topics: see test_cli_groups)
    plain, listed, table, produced = eddy_cli_parallel([
        ["topic", "list"],
        ["topic", "list", "-o", "json"],
        ["topic", "list", "-o", "table"],
        ["produce", "orders", "--partition", "1"],
    ], inputs=["", "", "", "a\nb\nc\n"], bootstrap=b)
    assert ok(plain).split() == ["orders", "payments"]
    assert [(t["name"], t["partitions"], t["internal"]) for t in json_out(listed)] == [
        ("orders", 3, False), ("payments", 1, False)]
    assert "TOPIC" in ok(table) and "PARTITIONS" in table.stdout and "orders" in table.stdout
    assert "produced 3 records" in ok(produced)

    # describe: partitions, leader, replicas, ISR, watermarks, topic id, configs
    desc_json, all_configs, desc_plain, desc_table, status = eddy_cli_parallel([
        ["topic", "describe", "orders", "-o", "json"],
        ["topic", "describe", "orders", "--all-configs", "-o", "json"],
        ["topic", "describe", "orders"],
        ["topic", "describe", "orders", "-o", "table"],
        ["cluster", "status", "-o", "json"],
    ], bootstrap=b)
    desc = json_out(desc_json)
    assert desc["topic_id"] == created["topic_id"]
    assert desc["partition_count"] == 3 and desc["replication_factor"] == 1
    parts = {p["partition"]: p for p in desc["partitions"]}
    assert sorted(parts) == [0, 1, 2]
    node = json_out(status)["brokers"][0]["id"]
    for p in parts.values():
        assert p["leader"] == node and p["replicas"] == [node] and p["isr"] == [node]
    assert (parts[1]["low_watermark"], parts[1]["high_watermark"]) == (0, 3)
    assert (parts[0]["low_watermark"], parts[0]["high_watermark"]) == (0, 0)
    overrides = {c["name"]: c["value"] for c in desc["configs"]}
    assert overrides["retention.ms"] == "3600000"
    every_config = json_out(all_configs)["configs"]
    assert len(every_config) > len(desc["configs"])
    assert any(c["name"] == "segment.bytes" and c["default"] for c in every_config)
    text = ok(desc_plain)
    assert text.startswith("Topic: orders\t")
    assert "retention.ms=3600000" in text
    assert "\tPartition: 1\t" in text and "HighWatermark: 3" in text
    assert "ISR" in ok(desc_table) and "retention.ms" in desc_table.stdout

    # alter: more partitions, set a config, remove an override
    out = ok(eddy_cli("topic", "alter", "orders", "--partitions", "5",
                      "--config", "retention.ms=7200000", "--delete-config", "cleanup.policy",
                      bootstrap=b))
    assert "altered topic 'orders'" in out
    desc_json, shrink, again, again_ok = eddy_cli_parallel([
        ["topic", "describe", "orders", "-o", "json"],
        ["topic", "alter", "orders", "--partitions", "2"],   # partitions only grow
        ["topic", "create", "orders"],                       # create twice: an error ...
        ["topic", "create", "orders", "--if-not-exists"],    # ... unless --if-not-exists
    ], bootstrap=b)
    desc = json_out(desc_json)
    assert desc["partition_count"] == 5
    overrides = {c["name"]: c["value"] for c in desc["configs"]}
    assert overrides.get("retention.ms") == "7200000"
    assert "cleanup.policy" not in overrides
    assert shrink.returncode == 1 and "orders" in shrink.stderr
    assert again.returncode == 1
    assert "topic 'orders' already exists" in again.stderr
    assert "already exists" in ok(again_ok)

    # delete: several at once; unknown is an error unless --if-exists
    out = ok(eddy_cli("topic", "delete", "orders", "payments", bootstrap=b))
    assert "deleted topic 'orders'" in out and "deleted topic 'payments'" in out
    after, missing, missing_ok = eddy_cli_parallel([
        ["topic", "list"], ["topic", "delete", "orders"],
        ["topic", "delete", "orders", "--if-exists"],
    ], bootstrap=b)
    assert ok(after).split() == []
    assert missing.returncode == 1
    assert "topic 'orders' does not exist" in missing.stderr
    assert "nothing to delete" in ok(missing_ok)


UNKNOWN = "topic 'ghost' does not exist; create it with eddy topic create ghost"


def test_unknown_topic(eddy: EddyProcess) -> None:
    calls = [
        ["topic", "describe", "ghost"],
        ["topic", "alter", "ghost", "--partitions", "4"],
        ["topic", "alter", "ghost", "--config", "retention.ms=1000"],
        ["produce", "ghost"],
        ["consume", "ghost", "--timeout", "1"],
        ["group", "reset-offsets", "g", "--topic", "ghost", "--to-earliest"],
    ]
    procs = eddy_cli_parallel(calls, bootstrap=eddy.bootstrap, input="x\n")
    for args, proc in zip(calls, procs, strict=True):
        assert proc.returncode == 1, (args, proc.stdout, proc.stderr)
        assert UNKNOWN in proc.stderr, (args, proc.stderr)
    # and nothing was auto-created on the way
    assert "ghost" not in ok(eddy_cli("topic", "list", "--all", bootstrap=eddy.bootstrap))


def test_bad_config_value_reports_the_brokers_message(eddy: EddyProcess) -> None:
    b = eddy.bootstrap
    bad, good = eddy_cli_parallel([
        ["topic", "create", "bad", "--config", "retention.ms=soon"],
        ["topic", "create", "good"],
    ], bootstrap=b)
    assert bad.returncode == 1
    assert "Invalid value 'soon' for configuration retention.ms" in bad.stderr
    ok(good)
    bad_alter, unknown_config, too_many_replicas, listed = eddy_cli_parallel([
        ["topic", "alter", "good", "--config", "retention.ms=soon"],
        ["topic", "alter", "good", "--config", "no.such.config=1"],
        ["topic", "create", "nopart", "--replication-factor", "3"],
        ["topic", "list"],
    ], bootstrap=b)
    assert bad_alter.returncode == 1
    assert "retention.ms" in bad_alter.stderr and "soon" in bad_alter.stderr
    assert unknown_config.returncode == 1 and "no.such.config" in unknown_config.stderr
    assert too_many_replicas.returncode == 1
    assert "replication" in too_many_replicas.stderr.lower()
    assert ok(listed).split() == ["good"]


# ---- cluster and config -------------------------------------------------------------------


def test_cluster_status(eddy: EddyProcess) -> None:
    b = eddy.bootstrap
    for proc in eddy_cli_parallel([["topic", "create", "a", "--partitions", "3"],
                                   ["topic", "create", "b", "--partitions", "2"]], bootstrap=b):
        ok(proc)
    as_json, plain, table = eddy_cli_parallel([
        ["cluster", "status", "-o", "json"], ["cluster", "status"],
        ["cluster", "status", "-o", "table"]], bootstrap=b)
    status = json_out(as_json)
    assert status["cluster_id"]
    assert [(x["host"], x["port"]) for x in status["brokers"]] == [("127.0.0.1", eddy.port)]
    assert status["controller"] == status["brokers"][0]["id"]
    assert status["topics"] == 2
    assert status["partitions"]["total"] >= 5 + status["internal_topics"]
    assert status["partitions"]["under_replicated"] == status["partitions"]["offline"] == 0
    assert f"cluster id: {status['cluster_id']}" in ok(plain)
    assert f"127.0.0.1:{eddy.port}" in plain.stdout
    assert "BROKER" in ok(table) and status["cluster_id"] in table.stdout


def test_config_show(tmp_path: Path) -> None:
    import yaml

    cfg = tmp_path / "eddy.yaml"
    cfg.write_text("num.partitions: 4\nlog.retention.ms: 1000\nlisten: 127.0.0.1:19999\n")
    env = clean_env(EDDY_NUM_PARTITIONS="6")
    defaults, merged, bad_value, no_file = eddy_cli_parallel([
        ["config", "show"],
        ["config", "show", "--config", str(cfg), "--set", "log.retention.ms=2000", "-o", "json"],
        ["config", "show", "--set", "num.partitions=many"],
        ["config", "show", "--config", str(tmp_path / "missing.yaml")],
    ])
    data = yaml.safe_load(ok(defaults))
    assert data["listen"] == "127.0.0.1:9092" and data["num.partitions"] == 1
    layered = json_out(eddy_cli("config", "show", "--config", str(cfg), "--set",
                                "log.retention.ms=2000", "-o", "json", env=env))
    assert layered["num.partitions"] == 6            # env beats the file
    assert layered["log.retention.ms"] == 2000       # flags beat the file
    assert layered["listen"] == "127.0.0.1:19999"    # the file beats the defaults
    assert json_out(merged)["num.partitions"] == 4
    assert bad_value.returncode == 1 and "num.partitions" in bad_value.stderr
    assert no_file.returncode == 1 and "does not exist" in no_file.stderr
