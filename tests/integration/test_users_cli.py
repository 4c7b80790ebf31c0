"""`eddy user create|list|delete` against a node whose only listener is SASL_PLAINTEXT: the
CLI logs in as the bootstrap user (-X or --command-config), and a created user can log in
with its password at once while a deleted one cannot."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from confluent_kafka.admin import AdminClient
from security_nodes import ADMIN, SecureNode

pytestmark = pytest.mark.timeout(120)


@pytest.fixture(scope="module")
def node(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SecureNode]:
    n = SecureNode(tmp_path_factory.mktemp("users") / "data", {
        "listeners": "SASL_PLAINTEXT://127.0.0.1:0",
        "sasl.enabled.mechanisms": "SCRAM-SHA-256,SCRAM-SHA-512",
        "sasl.bootstrap.user": f"{ADMIN[0]}:{ADMIN[1]}",
        "connection.failed.authentication.delay.ms": "0",
        "registry.listener": "", "admin.listener": "",
    }).start()
    yield n
    n.kill()


def eddy(node: SecureNode, *args: str, stdin: str | None = None,
         auth: list[str] | None = None) -> subprocess.CompletedProcess[str]:
    if auth is None:
        auth = ["-X", "security.protocol=SASL_PLAINTEXT", "-X", "sasl.mechanism=SCRAM-SHA-256",
                "-X", f"sasl.username={ADMIN[0]}", "-X", f"sasl.password={ADMIN[1]}"]
    return subprocess.run(
        [sys.executable, "-m", "eddy", "user", *args, "-b", node.addr["SASL_PLAINTEXT"],
         *auth], input=stdin, capture_output=True, text=True, timeout=60,
        env={**os.environ})


def can_log_in(node: SecureNode, user: str, password: str, mechanism: str) -> bool:
    errors: list[str] = []
    admin = AdminClient({"bootstrap.servers": node.addr["SASL_PLAINTEXT"],
                         "security.protocol": "SASL_PLAINTEXT", "sasl.mechanism": mechanism,
                         "sasl.username": user, "sasl.password": password, "log_level": 0,
                         "error_cb": lambda e: errors.append(e.str())})
    deadline = time.monotonic() + 8
    while time.monotonic() < deadline:
        try:
            admin.list_topics(timeout=0.5)
            return True
        except Exception:  # not yet: a failed login shows in errors
            admin.poll(0.1)
            if errors:
                return False
    return False


def test_create_list_delete(node: SecureNode, tmp_path: Path) -> None:
    made = eddy(node, "create", "carol", "--password-stdin", stdin="carol-pw\n")
    assert made.returncode == 0, made.stderr
    assert "carol-pw" not in made.stdout + made.stderr
    assert can_log_in(node, "carol", "carol-pw", "SCRAM-SHA-512")
    assert not can_log_in(node, "carol", "wrong", "SCRAM-SHA-256")
    # a properties file, as Kafka's tools take it
    props = tmp_path / "client.properties"
    props.write_text("# admin login\nsecurity.protocol=SASL_PLAINTEXT\n"
                     "sasl.mechanism=SCRAM-SHA-512\n"
                     f"sasl.username={ADMIN[0]}\nsasl.password={ADMIN[1]}\n")
    one = eddy(node, "create", "dave", "--password", "dave-pw", "--mechanism",
               "SCRAM-SHA-256", "--iterations", "4096", auth=["--command-config", str(props)])
    assert one.returncode == 0, one.stderr
    listed = eddy(node, "list", "-o", "plain")
    assert listed.returncode == 0, listed.stderr
    rows = [line.split("\t") for line in listed.stdout.splitlines()[1:]]
    assert ["dave", "SCRAM-SHA-256", "4096"] in rows
    assert ["carol", "SCRAM-SHA-512", "8192"] in rows and ["admin", "SCRAM-SHA-256", "8192"] in rows
    gone = eddy(node, "delete", "carol")
    assert gone.returncode == 0, gone.stderr
    assert not can_log_in(node, "carol", "carol-pw", "SCRAM-SHA-512")
    assert "carol" not in eddy(node, "list", "-o", "plain").stdout
    missing = eddy(node, "delete", "carol")
    assert missing.returncode == 1 and "no user carol" in missing.stderr


def test_usage_and_login_errors(node: SecureNode) -> None:
    both = eddy(node, "create", "erin", "--password", "x", "--password-stdin", stdin="y\n")
    assert both.returncode == 2
    bad = eddy(node, "list", auth=["-X", "security.protocol=SASL_PLAINTEXT", "-X",
                                   "sasl.mechanism=SCRAM-SHA-256", "-X", "sasl.username=admin",
                                   "-X", "sasl.password=nope"])
    assert bad.returncode == 1 and "nope" not in bad.stderr
