"""`eddy topic reassign`, `eddy topic reassignments` and `eddy topic describe`'s Adding/Removing
replicas go through the raw client (librdkafka's binding lacks the reassignment APIs): with
-X it connects as the other commands do, over TLS and with a SASL login, to a SASL_SSL-only
listener of a real `eddy serve`."""

from __future__ import annotations

import json
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka.admin import AdminClient
from security_nodes import ADMIN, Certs, SecureNode, make_certs
from test_cli import clean_env, eddy_cli, ok

from eddy.cli.common import CliError, Conn
from eddy.cli.raw_conn import raw_client
from eddy.cli.reassign import ongoing

pytestmark = pytest.mark.timeout(120)


@pytest.fixture(scope="module")
def certs(tmp_path_factory: pytest.TempPathFactory) -> Certs:
    return make_certs(tmp_path_factory.mktemp("certs"))


@pytest.fixture(scope="module")
def node(tmp_path_factory: pytest.TempPathFactory, certs: Certs) -> Iterator[SecureNode]:
    n = SecureNode(tmp_path_factory.mktemp("rawsec") / "data", {
        "listeners": "SASL_SSL://127.0.0.1:0,PLAINTEXT://127.0.0.1:0",
        "sasl.enabled.mechanisms": "PLAIN,SCRAM-SHA-256",
        "sasl.bootstrap.user": f"{ADMIN[0]}:{ADMIN[1]}",
        "ssl.keystore.certificate.chain": str(certs.server_chain),
        "ssl.keystore.key": str(certs.server_key),
        "connection.failed.authentication.delay.ms": "0",
        "sasl.failed.logins.per.ip.per.minute": "1000",
        "registry.listener": "", "admin.listener": "",
    }).start()
    yield n
    n.kill()


def settings(certs: Certs, mechanism: str = "SCRAM-SHA-256",
             password: str = ADMIN[1]) -> dict[str, str]:
    return {"security.protocol": "SASL_SSL", "sasl.mechanism": mechanism,
            "sasl.username": ADMIN[0], "sasl.password": password,
            "ssl.ca.location": str(certs.ca)}


def dash_x(conf: dict[str, str]) -> list[str]:
    return [arg for k, v in conf.items() for arg in ("-X", f"{k}={v}")]


def cli(node: SecureNode, *args: str) -> Any:
    proc = eddy_cli(*args, "--bootstrap", node.addr["SASL_SSL"], "-o", "json",
                    env=clean_env())
    return proc


@pytest.fixture(scope="module")
def topic(node: SecureNode, certs: Certs) -> str:
    name = f"moves-{uuid.uuid4().hex[:8]}"
    ok(cli(node, "topic", "create", name, "-p", "2", *dash_x(settings(certs))))
    return name


def test_reassign_and_reassignments_over_sasl_ssl(node: SecureNode, certs: Certs,
                                                  topic: str) -> None:
    conf = settings(certs)
    admin = AdminClient({"bootstrap.servers": node.addr["SASL_SSL"], **conf})
    (me,) = admin.list_topics(timeout=10).brokers
    moved = json.loads(ok(cli(node, "topic", "reassign", topic, "-p", "0", "-p", "1",
                              "--replicas", str(me), *dash_x(conf))))
    assert [(r["partition"], r["result"]) for r in moved] == [(0, "ok"), (1, "ok")]
    assert json.loads(ok(cli(node, "topic", "reassignments", *dash_x(conf)))) == []
    described = json.loads(ok(cli(node, "topic", "describe", topic, *dash_x(conf))))
    assert [(p["adding"], p["removing"]) for p in described["partitions"]] == [([], [])] * 2


def test_without_the_settings_the_raw_commands_fail_clearly(node: SecureNode) -> None:
    proc = cli(node, "topic", "reassignments")
    assert proc.returncode == 1, proc.stderr
    assert "error:" in proc.stderr and "Traceback" not in proc.stderr


def test_the_raw_client_logs_in_with_plain_and_scram(node: SecureNode, certs: Certs,
                                                    topic: str) -> None:
    for mechanism in ("PLAIN", "SCRAM-SHA-256"):
        conn = Conn(node.addr["SASL_SSL"], settings(certs, mechanism))
        with raw_client(conn) as client:
            assert ongoing(client, topic, [0, 1]) == []


def test_a_refused_login_or_bad_settings_are_cli_errors(node: SecureNode, certs: Certs
                                                        ) -> None:
    addr = node.addr["SASL_SSL"]
    for mechanism in ("PLAIN", "SCRAM-SHA-256"):
        with pytest.raises(CliError, match="refused"):
            raw_client(Conn(addr, settings(certs, mechanism, password="wrong")))
    with pytest.raises(CliError, match=r"sasl\.mechanism=GSSAPI"):
        raw_client(Conn(addr, settings(certs, "GSSAPI")))
    untrusted = {**settings(certs), "ssl.ca.location": sys.executable}
    with pytest.raises(CliError, match="TLS"):
        raw_client(Conn(addr, untrusted))
    # the node is still serving
    with raw_client(Conn(addr, settings(certs))) as client:
        assert ongoing(client) == []


def test_a_ca_that_does_not_match_is_refused(node: SecureNode, certs: Certs,
                                             tmp_path: Path) -> None:
    other = make_certs(tmp_path / "other")
    conf = {**settings(certs), "ssl.ca.location": str(other.ca)}
    with pytest.raises(CliError, match="does not verify"):
        raw_client(Conn(node.addr["SASL_SSL"], conf))


def test_txn_commands_over_sasl_ssl(node: SecureNode, certs: Certs, topic: str) -> None:
    from confluent_kafka import Producer

    conf = settings(certs)
    txn_id = f"raw-sec-{uuid.uuid4().hex[:8]}"
    p = Producer({"bootstrap.servers": node.addr["SASL_SSL"], "transactional.id": txn_id,
                  **conf})
    p.init_transactions(15)
    p.begin_transaction()
    p.produce(topic, b"v")
    p.flush(15)  # open: the transaction has a partition, its state is Ongoing
    listed = json.loads(ok(cli(node, "txn", "list", *dash_x(conf))))
    assert [(t["state"], t["producer_id"] >= 0) for t in listed
            if t["transactional_id"] == txn_id] == [("Ongoing", True)]
    (described,) = json.loads(ok(cli(node, "txn", "describe", txn_id, *dash_x(conf))))
    assert described["state"] == "Ongoing" and described["partitions"]
    p.abort_transaction(15)
    refused = cli(node, "txn", "list")  # no -X: the SASL_SSL listener drops the request
    assert refused.returncode == 1
