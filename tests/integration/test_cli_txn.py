"""`eddy txn list|describe` against a broker with a live transaction."""

from __future__ import annotations

import json
import subprocess
import sys

from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic


def _eddy(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "eddy", *args], capture_output=True,
                          text=True, timeout=60)


def test_txn_list_and_describe(eddy) -> None:  # type: ignore[no-untyped-def]
    admin = AdminClient({"bootstrap.servers": eddy.bootstrap})
    admin.create_topics([NewTopic("txn-cli", 2, 1)])["txn-cli"].result(10)
    p = Producer({"bootstrap.servers": eddy.bootstrap, "transactional.id": "cli-txn"})
    p.init_transactions(10)
    p.begin_transaction()
    p.produce("txn-cli", value=b"x", partition=1)
    assert p.flush(10) == 0

    listed = _eddy("txn", "list", "-b", eddy.bootstrap, "-o", "json")
    assert listed.returncode == 0, listed.stderr
    (entry,) = [t for t in json.loads(listed.stdout) if t["transactional_id"] == "cli-txn"]
    assert entry["state"] == "Ongoing"

    described = _eddy("txn", "describe", "cli-txn", "-b", eddy.bootstrap, "-o", "json")
    assert described.returncode == 0, described.stderr
    (d,) = json.loads(described.stdout)
    assert d["state"] == "Ongoing" and d["partitions"] == ["txn-cli-1"]
    assert d["producer_id"] == entry["producer_id"] and d["start_time"]

    p.commit_transaction(10)
    done = _eddy("txn", "list", "--state", "CompleteCommit", "-b", eddy.bootstrap, "-o",
                 "plain")
    assert done.returncode == 0 and "cli-txn" in done.stdout

    missing = _eddy("txn", "describe", "nobody", "-b", eddy.bootstrap)
    assert missing.returncode == 1 and "eddy txn list" in missing.stderr
    bad_state = _eddy("txn", "list", "--state", "Sleepy", "-b", eddy.bootstrap)
    assert bad_state.returncode == 1 and "Sleepy" in bad_state.stderr
    unreachable = _eddy("txn", "list", "-b", "127.0.0.1:1")
    assert unreachable.returncode == 1 and "--bootstrap" in unreachable.stderr
