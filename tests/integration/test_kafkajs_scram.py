"""kafkajs (Node) with SASL/SCRAM against a real broker's SASL_PLAINTEXT listener:
tests/js/scram_roundtrip.js creates a topic, produces and consumes (a consumer group) with
`sasl: {mechanism: 'scram-sha-256'}` and with 'scram-sha-512'; a wrong password fails with
kafkajs's authentication error, and the broker serves a correct client afterwards.

`npm install` runs in tests/js when its node_modules is missing (test_kafkajs's helper)."""

from __future__ import annotations

import json
import shutil
import subprocess
from collections.abc import Iterator
from typing import Any

import pytest
from security_nodes import ADMIN, SecureNode
from test_kafkajs import JS_DIR, _npm_install

pytestmark = pytest.mark.timeout(180)


@pytest.fixture(scope="module")
def node(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SecureNode]:
    n = SecureNode(tmp_path_factory.mktemp("kafkajs-scram") / "data", {
        "listeners": "SASL_PLAINTEXT://127.0.0.1:0",
        "sasl.enabled.mechanisms": "SCRAM-SHA-256,SCRAM-SHA-512",
        "sasl.bootstrap.user": f"{ADMIN[0]}:{ADMIN[1]}",
        "group.initial.rebalance.delay.ms": "0",
        "connection.failed.authentication.delay.ms": "20",
        "registry.listener": "", "admin.listener": "",
    }).start()
    yield n
    n.kill()


def roundtrip(node: SecureNode, mechanism: str, password: str) -> tuple[int, dict[str, Any]]:
    exe = shutil.which("node")
    assert exe is not None, "node is needed for the kafkajs check"
    _npm_install()
    proc = subprocess.run([exe, "scram_roundtrip.js", node.addr["SASL_PLAINTEXT"], mechanism,
                           ADMIN[0], password], cwd=JS_DIR, capture_output=True, text=True,
                          timeout=120, stdin=subprocess.DEVNULL)
    assert proc.stdout.strip(), f"no summary; stderr:\n{proc.stderr[-4000:]}"
    summary: dict[str, Any] = json.loads(proc.stdout.strip().splitlines()[-1])
    return proc.returncode, summary


def _ok(code: int, s: dict[str, Any]) -> None:
    assert code == 0 and "error" not in s, s
    assert s["steps"] == ["admin.connect", "createTopics", "producer.connect", "send",
                          "consume"], s
    assert sorted(s["consumed"]) == sorted(s["sent"]) and len(s["sent"]) == 5, s


@pytest.mark.parametrize("mechanism", ["scram-sha-256", "scram-sha-512"])
def test_kafkajs_produces_and_consumes_with_scram(node: SecureNode, mechanism: str) -> None:
    code, s = roundtrip(node, mechanism, ADMIN[1])
    _ok(code, s)
    assert all(v.startswith(f"{mechanism}-v") for v in s["consumed"])


def test_a_wrong_password_fails_with_kafkajs_authentication_error(node: SecureNode) -> None:
    code, s = roundtrip(node, "scram-sha-512", "not-the-password")
    assert code == 2, s
    assert s["steps"] == [] and s["consumed"] == [], s
    assert s["error"]["name"] == "KafkaJSSASLAuthenticationError", s
    assert "SCRAM-SHA-512" in s["error"]["message"], s
    # the broker stays up and serves the next, correct client
    assert node.alive(), node.logs()[-3000:]
    _ok(*roundtrip(node, "scram-sha-256", ADMIN[1]))
    assert node.alive()
