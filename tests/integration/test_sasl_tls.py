"""TLS and SASL on the Kafka listener with real clients over real sockets: confluent-kafka
(librdkafka) over SASL_PLAINTEXT (PLAIN, SCRAM-SHA-256, SCRAM-SHA-512), SSL, SASL_SSL and
mutual TLS; kafka-python and aiokafka with SCRAM; kcat with SASL; the failures (wrong
password, unknown user, disabled mechanism, plaintext on a TLS port, a request before
authentication, an expired session) each end cleanly with the broker serving on."""

from __future__ import annotations

import asyncio
import socket
import ssl
import struct
import subprocess
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient
from cryptography import x509
from cryptography.hazmat.primitives import serialization
from kio.schema.metadata.v1.request import MetadataRequest
from kio.schema.sasl_authenticate.v2.request import SaslAuthenticateRequest
from kio.schema.sasl_handshake.v0.request import SaslHandshakeRequest as HandshakeV0
from kio.schema.sasl_handshake.v1.request import SaslHandshakeRequest as HandshakeV1
from raw_client import RawClient
from scramp import ScramClient
from security_nodes import ADMIN, Certs, SecureNode, make_certs

from eddy.security.tls import principal_of

pytestmark = pytest.mark.timeout(120)
ALL = "PLAINTEXT://127.0.0.1:0,SASL_PLAINTEXT://127.0.0.1:0,SSL://127.0.0.1:0,SASL_SSL://127.0.0.1:0"


@pytest.fixture(scope="module")
def certs(tmp_path_factory: pytest.TempPathFactory) -> Certs:
    return make_certs(tmp_path_factory.mktemp("certs"))


@pytest.fixture(scope="module")
def node(tmp_path_factory: pytest.TempPathFactory, certs: Certs) -> Iterator[SecureNode]:
    """Every protocol, every mechanism; client certificates checked when sent."""
    n = SecureNode(tmp_path_factory.mktemp("a") / "data", {
        "listeners": ALL,
        "sasl.enabled.mechanisms": "PLAIN,SCRAM-SHA-256,SCRAM-SHA-512",
        "sasl.bootstrap.user": f"{ADMIN[0]}:{ADMIN[1]}",
        "ssl.keystore.certificate.chain": str(certs.server_chain),
        "ssl.keystore.key": str(certs.server_key),
        "ssl.truststore.location": str(certs.ca),
        "ssl.client.auth": "requested",
        "ssl.reload.check.interval.ms": "200",
        "connection.failed.authentication.delay.ms": "20",
        "sasl.failed.logins.per.ip.per.minute": "1000",
        "registry.listener": "", "admin.listener": "",
    }).start()
    yield n
    n.kill()


@pytest.fixture(scope="module")
def strict(tmp_path_factory: pytest.TempPathFactory, certs: Certs) -> Iterator[SecureNode]:
    """Mutual TLS required (PEM given inline), SCRAM-SHA-256 only, 1.5 s SASL sessions."""
    n = SecureNode(tmp_path_factory.mktemp("b") / "data", {
        "listeners": "SSL://127.0.0.1:0,SASL_PLAINTEXT://127.0.0.1:0",
        "inter.broker.listener.name": "SSL",
        "sasl.enabled.mechanisms": "SCRAM-SHA-256",
        "sasl.bootstrap.user": f"{ADMIN[0]}:{ADMIN[1]}",
        "ssl.keystore.certificate.chain": certs.server_chain.read_text(),
        "ssl.keystore.key": certs.server_key.read_text(),
        "ssl.truststore.certificates": certs.ca.read_text(),
        "ssl.client.auth": "required",
        "connections.max.reauth.ms": "1500",
        "connection.failed.authentication.delay.ms": "0",
        "sasl.failed.logins.per.ip.per.minute": "3",
        "registry.listener": "", "admin.listener": "",
    }).start()
    yield n
    n.kill()


def client_conf(addr: str, protocol: str, mechanism: str | None = None,
                user: str = ADMIN[0], password: str = ADMIN[1], certs: Certs | None = None,
                client_cert: bool = False) -> dict[str, Any]:
    conf: dict[str, Any] = {"bootstrap.servers": addr, "security.protocol": protocol,
                            "socket.timeout.ms": 5000, "log_level": 0}
    if mechanism is not None:
        conf.update({"sasl.mechanism": mechanism, "sasl.username": user,
                     "sasl.password": password})
    if certs is not None:
        conf["ssl.ca.location"] = str(certs.ca)
    if client_cert:
        assert certs is not None
        conf["ssl.certificate.location"] = str(certs.client_chain)
        conf["ssl.key.location"] = str(certs.client_key)
    return conf


def produce_consume(conf: dict[str, Any], count: int = 5) -> list[bytes]:
    """Create a topic by producing to it, then read it back: the values read."""
    topic = f"t-{uuid.uuid4().hex[:8]}"
    producer = Producer(conf)
    delivered: list[Any] = []
    for i in range(count):
        producer.produce(topic, f"v{i}".encode(), on_delivery=lambda e, m: delivered.append(e))
    assert producer.flush(15) == 0
    assert delivered == [None] * count
    consumer = Consumer({**conf, "group.id": "g", "enable.auto.commit": False})
    consumer.assign([TopicPartition(topic, 0, 0)])
    got: list[bytes] = []
    deadline = time.monotonic() + 15
    while len(got) < count and time.monotonic() < deadline:
        msg = consumer.poll(0.2)
        if msg is not None and msg.error() is None:
            got.append(msg.value())
    consumer.close()
    return got


def login_error(conf: dict[str, Any], timeout: float = 8.0) -> str:
    """The errors librdkafka reports connecting with ``conf`` ('' if none), once one says
    why (or after ``timeout``)."""
    errors: list[str] = []
    producer = Producer({**conf, "error_cb": lambda e: errors.append(e.str())})
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and not any(
            "uthentication" in e or "SSL" in e or "SASL" in e for e in errors):
        producer.poll(0.1)
    return " | ".join(errors)


def works(conf: dict[str, Any]) -> bool:
    md = AdminClient(conf).list_topics(timeout=10)
    return bool(md.brokers)


def wait_log(node: SecureNode, text: str, timeout: float = 5.0) -> bool:
    """True once the node's log has ``text`` (log lines land a moment after the event)."""
    deadline = time.monotonic() + timeout
    while text not in node.logs():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.05)
    return True


def addr_port(addr: str) -> int:
    return int(addr.rsplit(":", 1)[1])


@pytest.mark.parametrize("mechanism", ["PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512"])
def test_sasl_plaintext_mechanisms(node: SecureNode, mechanism: str) -> None:
    conf = client_conf(node.addr["SASL_PLAINTEXT"], "SASL_PLAINTEXT", mechanism)
    assert produce_consume(conf) == [f"v{i}".encode() for i in range(5)]


def test_metadata_names_the_listener_asked(node: SecureNode) -> None:
    for name in ("PLAINTEXT", "SASL_PLAINTEXT"):
        mech = "SCRAM-SHA-256" if name.startswith("SASL") else None
        md = AdminClient(client_conf(node.addr[name], name, mech)).list_topics(timeout=10)
        assert [f"{b.host}:{b.port}" for b in md.brokers.values()] == [node.addr[name]]


def test_ssl_and_sasl_ssl(node: SecureNode, certs: Certs) -> None:
    ssl_conf = client_conf(node.addr["SSL"], "SSL", certs=certs)
    assert len(produce_consume(ssl_conf, 3)) == 3
    sasl_ssl = client_conf(node.addr["SASL_SSL"], "SASL_SSL", "SCRAM-SHA-512", certs=certs)
    assert len(produce_consume(sasl_ssl, 3)) == 3
    # a client certificate, sent where one is requested, is checked and accepted
    mutual = client_conf(node.addr["SSL"], "SSL", certs=certs, client_cert=True)
    assert works(mutual)


def test_bad_logins_fail_cleanly(node: SecureNode) -> None:
    addr = node.addr["SASL_PLAINTEXT"]
    wrong = login_error(client_conf(addr, "SASL_PLAINTEXT", "SCRAM-SHA-256",
                                    password="not-it"))
    assert "Authentication failed" in wrong and "not-it" not in wrong
    unknown = login_error(client_conf(addr, "SASL_PLAINTEXT", "PLAIN", user="nobody"))
    assert "Authentication failed" in unknown
    # the broker logged the failures without the password, and serves the next client
    assert "not-it" not in node.logs() and "SASL authentication failed" in node.logs()
    assert works(client_conf(addr, "SASL_PLAINTEXT", "SCRAM-SHA-256"))


def test_request_before_authentication_closes(node: SecureNode) -> None:
    client = RawClient(addr_port(node.addr["SASL_PLAINTEXT"]))
    with pytest.raises((ConnectionError, struct.error, OSError, EOFError, AssertionError)):
        client.call(MetadataRequest(topics=None))
    client.close()
    assert wait_log(node, "METADATA before SASL authentication")
    assert works(client_conf(node.addr["SASL_PLAINTEXT"], "SASL_PLAINTEXT", "PLAIN"))


def test_plaintext_client_on_tls_port(node: SecureNode, certs: Certs) -> None:
    err = login_error(client_conf(node.addr["SSL"], "PLAINTEXT"), timeout=4)
    assert err  # librdkafka cannot talk Kafka to a TLS listener
    with socket.create_connection(("127.0.0.1", addr_port(node.addr["SSL"])), 5) as s:
        s.sendall(struct.pack(">i", 10) + b"\x00\x12\x00\x00\x00\x00\x00\x01\x00\x00")
        s.settimeout(5)
        data = s.recv(1024)  # a TLS alert or nothing, never a Kafka answer
        assert not data.startswith(b"\x00\x00\x00")
    assert node.alive()
    assert works(client_conf(node.addr["SSL"], "SSL", certs=certs))


def test_legacy_v0_handshake_with_raw_tokens(node: SecureNode) -> None:
    client = RawClient(addr_port(node.addr["SASL_PLAINTEXT"]))
    try:
        resp = client.call(HandshakeV0(mechanism="PLAIN"))
        assert resp.error_code == 0 and "PLAIN" in resp.mechanisms
        token = f"\0{ADMIN[0]}\0{ADMIN[1]}".encode()
        client.sock.sendall(struct.pack(">i", len(token)) + token)
        assert client._recv(4) == b"\x00\x00\x00\x00"  # an empty raw answer: logged in
        md = client.call(MetadataRequest(topics=None))
        assert len(md.brokers) == 1
    finally:
        client.close()


def test_unsupported_mechanism_lists_the_enabled(strict: SecureNode) -> None:
    client = RawClient(addr_port(strict.addr["SASL_PLAINTEXT"]))
    resp = client.call(HandshakeV1(mechanism="PLAIN"))
    assert int(resp.error_code) == 33 and list(resp.mechanisms) == ["SCRAM-SHA-256"]
    client.close()
    err = login_error(client_conf(strict.addr["SASL_PLAINTEXT"], "SASL_PLAINTEXT", "PLAIN"))
    assert "PLAIN" in err


def test_mutual_tls_required(strict: SecureNode, certs: Certs) -> None:
    assert login_error(client_conf(strict.addr["SSL"], "SSL", certs=certs), timeout=4)
    assert works(client_conf(strict.addr["SSL"], "SSL", certs=certs, client_cert=True))


def _scram_login(port: int) -> tuple[RawClient, int]:
    client = RawClient(port)
    assert client.call(HandshakeV1(mechanism="SCRAM-SHA-256")).error_code == 0
    scram = ScramClient(["SCRAM-SHA-256"], ADMIN[0], ADMIN[1])
    first = client.call(SaslAuthenticateRequest(auth_bytes=scram.get_client_first().encode()))
    assert first.error_code == 0
    scram.set_server_first(first.auth_bytes.decode())
    final = client.call(SaslAuthenticateRequest(auth_bytes=scram.get_client_final().encode()))
    assert final.error_code == 0
    scram.set_server_final(final.auth_bytes.decode())
    lifetime = final.session_lifetime
    return client, int(lifetime.total_seconds() * 1000)


def test_reauthentication(strict: SecureNode) -> None:
    # librdkafka re-authenticates by itself: producing across several session ends works
    conf = client_conf(strict.addr["SASL_PLAINTEXT"], "SASL_PLAINTEXT", "SCRAM-SHA-256")
    producer = Producer(conf)
    errors: list[Any] = []
    end = time.monotonic() + 4.0
    sent = 0
    while time.monotonic() < end:
        producer.produce("reauth", b"x", on_delivery=lambda e, m: errors.append(e) if e else None)
        sent += 1
        producer.poll(0.1)
    assert producer.flush(10) == 0 and errors == [] and sent > 20
    # a client that does not re-authenticate is disconnected at its next request
    client, lifetime = _scram_login(addr_port(strict.addr["SASL_PLAINTEXT"]))
    assert lifetime == 1500
    assert len(client.call(MetadataRequest(topics=None)).brokers) == 1
    time.sleep(1.7)
    with pytest.raises((ConnectionError, struct.error, OSError, EOFError, AssertionError)):
        client.call(MetadataRequest(topics=None))
    client.close()
    assert wait_log(strict, "did not re-authenticate")


def test_failed_logins_are_rate_limited(strict: SecureNode) -> None:
    addr = strict.addr["SASL_PLAINTEXT"]
    bad = client_conf(addr, "SASL_PLAINTEXT", "SCRAM-SHA-256", password="bad")
    errors: list[str] = []
    admin = AdminClient({**bad, "error_cb": lambda e: errors.append(e.str())})
    deadline = time.monotonic() + 10
    while not any("too many failed logins" in e for e in errors) and time.monotonic() < deadline:
        admin.poll(0.2)
    assert any("too many failed logins" in e for e in errors)
    del admin
    # the right password from that address is refused too until it calms down...
    assert "too many failed logins" in login_error(
        client_conf(addr, "SASL_PLAINTEXT", "SCRAM-SHA-256"), timeout=3)
    assert strict.alive()


def test_kafka_python_scram(node: SecureNode) -> None:
    from kafka import KafkaConsumer, KafkaProducer

    addr = node.addr["SASL_PLAINTEXT"]
    common = dict(bootstrap_servers=addr, security_protocol="SASL_PLAINTEXT",
                  sasl_mechanism="SCRAM-SHA-512", sasl_plain_username=ADMIN[0],
                  sasl_plain_password=ADMIN[1])
    topic = f"kp-{uuid.uuid4().hex[:6]}"
    producer = KafkaProducer(**common)
    producer.send(topic, b"from-kafka-python").get(timeout=15)
    producer.close()
    consumer = KafkaConsumer(topic, auto_offset_reset="earliest", consumer_timeout_ms=15000,
                             **common)
    assert next(iter(consumer)).value == b"from-kafka-python"
    consumer.close()


def test_aiokafka_scram(node: SecureNode) -> None:
    from aiokafka import AIOKafkaConsumer, AIOKafkaProducer

    addr = node.addr["SASL_PLAINTEXT"]
    topic = f"ak-{uuid.uuid4().hex[:6]}"
    common = dict(bootstrap_servers=addr, security_protocol="SASL_PLAINTEXT",
                  sasl_mechanism="SCRAM-SHA-256", sasl_plain_username=ADMIN[0],
                  sasl_plain_password=ADMIN[1])

    async def run() -> bytes:
        producer = AIOKafkaProducer(**common)
        await producer.start()
        try:
            await producer.send_and_wait(topic, b"from-aiokafka")
        finally:
            await producer.stop()
        consumer = AIOKafkaConsumer(topic, auto_offset_reset="earliest", **common)
        await consumer.start()
        try:
            msg = await asyncio.wait_for(consumer.getone(), 15)
        finally:
            await consumer.stop()
        return bytes(msg.value)

    assert asyncio.run(run()) == b"from-aiokafka"


def test_kcat_sasl(node: SecureNode) -> None:
    addr = node.addr["SASL_PLAINTEXT"]
    auth = ["-X", "security.protocol=SASL_PLAINTEXT", "-X", "sasl.mechanisms=SCRAM-SHA-256",
            "-X", f"sasl.username={ADMIN[0]}", "-X", f"sasl.password={ADMIN[1]}"]
    topic = f"kc-{uuid.uuid4().hex[:6]}"
    subprocess.run(["kcat", "-b", addr, *auth, "-P", "-t", topic], input=b"one\ntwo\n",
                   check=True, timeout=30)
    out = subprocess.run(["kcat", "-b", addr, *auth, "-C", "-t", topic, "-e", "-o",
                          "beginning"], capture_output=True, check=True, timeout=30)
    assert out.stdout.split() == [b"one", b"two"]
    bad = subprocess.run(["kcat", "-b", addr, *auth[:6], "-X", "sasl.password=wrong", "-L",
                          "-m", "3"], capture_output=True, timeout=30)
    assert bad.returncode != 0


def _server_cn(addr: str, certs: Certs) -> str:
    ctx = ssl.create_default_context(cafile=str(certs.ca))
    host, port = addr.rsplit(":", 1)
    with socket.create_connection((host, int(port)), 5) as raw, \
            ctx.wrap_socket(raw, server_hostname=host) as s:
        der = s.getpeercert(binary_form=True)
    assert der is not None
    cert = x509.load_der_x509_certificate(der)
    return str(cert.subject.get_attributes_for_oid(x509.NameOID.COMMON_NAME)[0].value)


def _wait_cn(addr: str, trusted: Certs, want: str) -> str:
    deadline = time.monotonic() + 5
    cn = ""
    while time.monotonic() < deadline:
        try:
            cn = _server_cn(addr, trusted)
            if cn == want:
                break
        except ssl.SSLError:
            pass
        time.sleep(0.2)
    return cn


def test_certificate_reload(node: SecureNode, certs: Certs, tmp_path: Path) -> None:
    addr = node.addr["SSL"]
    assert _server_cn(addr, certs) == "eddy-server"
    before = certs.server_chain.read_bytes(), certs.server_key.read_bytes()
    renewed = make_certs(tmp_path / "renewed", server_cn="eddy-renewed")
    try:
        certs.server_chain.write_bytes(renewed.server_chain.read_bytes())
        certs.server_key.write_bytes(renewed.server_key.read_bytes())
        assert _wait_cn(addr, renewed, "eddy-renewed") == "eddy-renewed"
        assert "TLS material reloaded" in node.logs()
    finally:  # back to the first certificate, for the other tests of the module
        certs.server_chain.write_bytes(before[0])
        certs.server_key.write_bytes(before[1])
        assert _wait_cn(addr, certs, "eddy-server") == "eddy-server"


def test_principal_from_client_certificate(certs: Certs) -> None:
    der = x509.load_pem_x509_certificate(certs.client_chain.read_bytes()).public_bytes(
        serialization.Encoding.DER)

    class SslObject:
        def getpeercert(self, binary_form: bool = False) -> bytes:
            return der

    class Transport:
        def get_extra_info(self, name: str) -> Any:
            return SslObject() if name == "ssl_object" else None

    assert principal_of(Transport()) == "User:CN=alice-client,O=Clients"


def test_sasl_token_fuzz_smoke() -> None:
    """CI smoke of bench.fuzz's "sasl" target: seeded mutations of well-formed PLAIN and
    SCRAM tokens end in success or SaslFailure, never another exception."""
    import random
    import sys

    sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
    from bench.fuzz.sasl_tokens import check_input, seeds

    rng = random.Random(16)
    inputs = list(seeds())
    for _ in range(3000):
        data = bytearray(rng.choice(inputs))
        for _ in range(rng.randint(1, 4)):
            op = rng.randrange(4)
            pos = rng.randrange(len(data) + 1)
            if op == 0 and data:
                data[pos % len(data)] = rng.randrange(256)
            elif op == 1:
                data[pos:pos] = bytes(rng.choice([b"\x00", b",", b"=", b"r=", b"p=", b"\xff",
                                                  b"n,,", b"c=biws", b"a=x,"]))
            elif op == 2 and data:
                del data[pos:pos + rng.randint(1, 8)]
            else:
                data += bytes(rng.randrange(256) for _ in range(rng.randint(1, 16)))
        check_input(bytes(data))  # raises on anything but SaslFailure


@pytest.mark.parametrize(("settings", "named"), [
    ({"listeners": "FOO://127.0.0.1:0"}, "listener.security.protocol.map"),
    ({"listeners": "PLAINTEXT://127.0.0.1:0,PLAINTEXT://127.0.0.1:1"}, "listeners"),
    ({"listeners": "SSL://127.0.0.1:0"}, "ssl.keystore.location"),
    ({"listeners": "PLAINTEXT://127.0.0.1:0", "inter.broker.listener.name": "SSL"},
     "inter.broker.listener.name"),
    ({"advertised.listeners": "X://h:1", "listeners": "PLAINTEXT://127.0.0.1:0"},
     "advertised.listeners"),
    ({"ssl.client.auth": "sometimes"}, "ssl.client.auth"),
    ({"sasl.enabled.mechanisms": "GSSAPI"}, "sasl.enabled.mechanisms"),
    ({"sasl.bootstrap.user": "no-colon-secret"}, "sasl.bootstrap.user"),
    ({"ssl.keystore.type": "JKS"}, "ssl.keystore.type"),
])
def test_config_errors_name_the_setting(settings: dict[str, str], named: str) -> None:
    from eddy.config import ConfigError, load_config

    with pytest.raises(ConfigError) as info:
        load_config(env={}, overrides=settings)
    assert named in str(info.value)
    assert "secret" not in str(info.value)


def test_listeners_default_to_listen_and_inter_broker_first() -> None:
    from eddy.config import load_config

    plain = load_config(env={}, overrides={"listen": "127.0.0.1:0"})
    assert [(s.name, s.protocol) for s in plain.listener_specs] == [("PLAINTEXT", "PLAINTEXT")]
    two = load_config(env={}, overrides={
        "listeners": "PLAINTEXT://127.0.0.1:9092,SASL_PLAINTEXT://:9093",
        "advertised.listeners": "SASL_PLAINTEXT://kafka.example.com:19093",
        "inter.broker.listener.name": "sasl_plaintext",
        "sasl.bootstrap.user": "admin:admin-secret"})  # followers log in with it
    first, second = two.listener_specs
    assert (first.name, first.host, first.advertised_host, first.advertised_port) == (
        "SASL_PLAINTEXT", "", "kafka.example.com", 19093)
    assert two.advertised_address == ("kafka.example.com", 19093)
    assert (second.name, second.port) == ("PLAINTEXT", 9092)


def test_failure_limiter_per_address() -> None:
    from eddy.security.ratelimit import FailureLimiter

    limiter = FailureLimiter(3)
    for _ in range(3):
        assert limiter.allowed("10.0.0.1", 100.0)
        limiter.failed("10.0.0.1", 100.0)
    assert not limiter.allowed("10.0.0.1", 100.0)
    assert limiter.allowed("10.0.0.2", 100.0)  # nobody else is slowed down
    assert limiter.allowed("10.0.0.1", 120.0)  # one failure back every 20 s
