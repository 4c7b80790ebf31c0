"""HTTPS and HTTP basic auth on the schema registry and the admin listener of a real
`eddy serve`, authorized by the ACLs of the Kafka listeners: confluent-kafka's
SchemaRegistryClient (basic.auth.user.info, ssl.ca.location with the test CA) registers and
reads schemas; a wrong password is 401 with the challenge; a user without rights gets 403 on
register and 200 once AdminClient.create_acls grants WRITE on the topic; /metrics needs
credentials and DESCRIBE on the cluster while the health checks stay open to probes."""

from __future__ import annotations

import base64
import json
import os
import ssl
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka.admin import (
    AclBinding,
    AclOperation,
    AclPermissionType,
    AdminClient,
    ResourcePatternType,
    ResourceType,
    ScramCredentialInfo,
    ScramMechanism,
    UserScramCredentialUpsertion,
)
from confluent_kafka.schema_registry import Schema, SchemaRegistryClient
from confluent_kafka.schema_registry.error import SchemaRegistryError
from security_nodes import ADMIN, Certs, make_certs

pytestmark = pytest.mark.timeout(180)
TIMEOUT = 30.0
AVRO = json.dumps({"type": "record", "name": "Payment",
                   "fields": [{"name": "amount", "type": "long"}]})
BOB = ("bob", "bob-secret")
WRONG_PASSWORD = "not-the-password-42"


class HttpNode:
    """`eddy serve` with every HTTP security setting on; the URLs from its ready lines."""

    def __init__(self, data_dir: Path, settings: dict[str, str]) -> None:
        self.data_dir = data_dir
        self.log_path = data_dir.parent / f"{data_dir.name}.log"
        self.settings = settings
        self.lines: dict[str, str] = {}
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self, timeout: float = 60.0) -> HttpNode:
        cmd = [sys.executable, "-m", "eddy", "serve", "--data-dir", str(self.data_dir)]
        for k, v in self.settings.items():
            cmd += ["--set", f"{k}={v}"]
        with open(self.log_path, "ab") as log:
            self.proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=log,
                                         env={**os.environ})
        assert self.proc.stdout is not None
        fd = self.proc.stdout.fileno()
        os.set_blocking(fd, False)
        buf = b""
        wanted = {"EDDY_ADMIN", "EDDY_REGISTRY", "EDDY_LISTENER SASL_PLAINTEXT"}
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline and not wanted <= set(self.lines):
            if self.proc.poll() is not None:
                raise RuntimeError(f"eddy exited:\n{self.logs()}")
            try:
                chunk = os.read(fd, 65536)
            except BlockingIOError:
                time.sleep(0.05)
                continue
            buf += chunk
            *lines, buf = buf.split(b"\n")
            for raw in lines:
                kind, *fields = raw.decode().split()
                values = dict(f.split("=", 1) for f in fields if "=" in f)
                if kind == "EDDY_LISTENER":
                    self.lines[f"{kind} {values['name']}"] = values["kafka"]
                elif kind in ("EDDY_ADMIN", "EDDY_REGISTRY"):
                    self.lines[kind] = values["url"]
        if not wanted <= set(self.lines):
            self.kill()
            raise RuntimeError(f"eddy not up in {timeout}s:\n{self.logs()}")
        return self

    @property
    def registry(self) -> str:
        return self.lines["EDDY_REGISTRY"]

    @property
    def admin(self) -> str:
        return self.lines["EDDY_ADMIN"]

    @property
    def sasl(self) -> str:
        return self.lines["EDDY_LISTENER SASL_PLAINTEXT"]

    def kill(self) -> None:
        if self.proc is not None:
            self.proc.kill()
            self.proc.wait()
            self.proc = None

    def logs(self) -> str:
        try:
            return self.log_path.read_text()
        except FileNotFoundError:
            return ""


@pytest.fixture(scope="module")
def certs(tmp_path_factory: pytest.TempPathFactory) -> Certs:
    return make_certs(tmp_path_factory.mktemp("certs"))


@pytest.fixture(scope="module")
def node(tmp_path_factory: pytest.TempPathFactory, certs: Certs) -> Iterator[HttpNode]:
    n = HttpNode(tmp_path_factory.mktemp("http") / "data", {
        # the first (inter-broker) listener is the one the registry's own Kafka client uses:
        # it has no credentials, so its principal (User:ANONYMOUS) is a super user here
        "listeners": "PLAINTEXT://127.0.0.1:0,SASL_PLAINTEXT://127.0.0.1:0",
        "sasl.enabled.mechanisms": "SCRAM-SHA-256,SCRAM-SHA-512",
        "sasl.bootstrap.user": f"{ADMIN[0]}:{ADMIN[1]}",
        "authorizer.class.name": "eddy",
        "super.users": f"User:{ADMIN[0]};User:ANONYMOUS",
        "ssl.keystore.certificate.chain": str(certs.server_chain),
        "ssl.keystore.key": str(certs.server_key),
        "registry.listener": "127.0.0.1:0",
        "registry.ssl.enabled": "true",
        "registry.authentication.method": "BASIC",
        "admin.listener": "127.0.0.1:0",
        "admin.ssl.enabled": "true",
        "admin.authentication.method": "BASIC",
        "connection.failed.authentication.delay.ms": "0",
        "sasl.failed.logins.per.ip.per.minute": "1000",
    }).start()
    yield n
    n.kill()


@pytest.fixture(scope="module")
def kafka_admin(node: HttpNode) -> AdminClient:
    admin = AdminClient({"bootstrap.servers": node.sasl, "security.protocol": "SASL_PLAINTEXT",
                         "sasl.mechanism": "SCRAM-SHA-256", "sasl.username": ADMIN[0],
                         "sasl.password": ADMIN[1]})
    done = admin.alter_user_scram_credentials([UserScramCredentialUpsertion(
        BOB[0], ScramCredentialInfo(ScramMechanism.SCRAM_SHA_256, 4096), BOB[1].encode())])
    for future in done.values():
        future.result(TIMEOUT)
    return admin


def registry_client(node: HttpNode, certs: Certs, user: str, password: str
                    ) -> SchemaRegistryClient:
    return SchemaRegistryClient({"url": node.registry, "ssl.ca.location": str(certs.ca),
                                 "basic.auth.user.info": f"{user}:{password}",
                                 "max.retries": 0})


def http(url: str, certs: Certs, auth: tuple[str, str] | None = None, method: str = "GET",
         body: Any = None) -> tuple[int, dict[str, str], bytes]:
    """One request over HTTPS trusting the test CA: (status, headers, body)."""
    context = ssl.create_default_context(cafile=str(certs.ca))
    headers = {}
    if auth is not None:
        headers["Authorization"] = "Basic " + base64.b64encode(
            f"{auth[0]}:{auth[1]}".encode()).decode()
    data = None
    if body is not None:
        data = json.dumps(body).encode()
        headers["Content-Type"] = "application/vnd.schemaregistry.v1+json"
    request = urllib.request.Request(url, data=data, headers=headers, method=method)
    try:
        with urllib.request.urlopen(request, timeout=TIMEOUT, context=context) as response:
            return response.status, dict(response.headers), response.read()
    except urllib.error.HTTPError as exc:
        return exc.code, dict(exc.headers), exc.read()


def eventually(condition: Callable[[], bool], what: str, timeout: float = TIMEOUT) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"not within {timeout}s: {what}")
        time.sleep(0.1)


def test_schema_registry_client_registers_and_reads_over_https_with_basic_auth(
        node: HttpNode, certs: Certs) -> None:
    assert node.registry.startswith("https://")
    client = registry_client(node, certs, *ADMIN)
    schema_id = client.register_schema("payments-value", Schema(AVRO, "AVRO"))
    latest = client.get_latest_version("payments-value")
    assert (latest.schema_id, latest.version) == (schema_id, 1)
    assert json.loads(client.get_schema(schema_id).schema_str) == json.loads(AVRO)
    assert "payments-value" in client.get_subjects()


def test_wrong_or_missing_credentials_are_401_with_the_challenge(node: HttpNode,
                                                                 certs: Certs) -> None:
    client = registry_client(node, certs, ADMIN[0], WRONG_PASSWORD)
    with pytest.raises(SchemaRegistryError) as caught:
        client.get_subjects()
    assert (caught.value.http_status_code, caught.value.error_code) == (401, 40101)
    for auth in (None, (ADMIN[0], WRONG_PASSWORD), ("nobody", "x")):
        status, headers, body = http(node.registry + "/subjects", certs, auth)
        assert status == 401
        assert headers["WWW-Authenticate"] == 'Basic realm="eddy"'
        assert json.loads(body)["error_code"] == 40101
    # the failures are logged, the password never
    eventually(lambda: "HTTP basic authentication failed" in node.logs(), "a failure logged")
    assert WRONG_PASSWORD not in node.logs()
    # plain HTTP on the HTTPS port gets no answer from the registry
    plain = node.registry.replace("https://", "http://")
    with pytest.raises((urllib.error.URLError, ConnectionError, OSError)):
        urllib.request.urlopen(plain + "/subjects", timeout=TIMEOUT).read()


def test_a_user_without_rights_gets_403_then_200_after_the_acl_grant(
        node: HttpNode, certs: Certs, kafka_admin: AdminClient) -> None:
    owner = registry_client(node, certs, *ADMIN)
    secret_id = owner.register_schema("ledger-value", Schema(AVRO, "AVRO"))
    bob = registry_client(node, certs, *BOB)
    eventually(lambda: http(node.registry + "/subjects", certs, BOB)[0] == 200,
               "bob's credentials known to the registry's node")
    with pytest.raises(SchemaRegistryError) as caught:
        bob.register_schema("orders-value", Schema(AVRO, "AVRO"))
    assert (caught.value.http_status_code, caught.value.error_code) == (403, 40301)
    assert "Write on Topic: orders" in caught.value.error_message
    # bob lists no subject he may not read, yet fetches schemas by id (as serializers do)
    assert "ledger-value" not in bob.get_subjects()
    assert json.loads(bob.get_schema(secret_id).schema_str) == json.loads(AVRO)

    grant = AclBinding(ResourceType.TOPIC, "orders", ResourcePatternType.LITERAL,
                       f"User:{BOB[0]}", "*", AclOperation.WRITE, AclPermissionType.ALLOW)
    for future in kafka_admin.create_acls([grant]).values():
        future.result(TIMEOUT)

    def registered() -> bool:
        status, _, _ = http(node.registry + "/subjects/orders-value/versions", certs, BOB,
                            "POST", {"schema": AVRO})
        return status == 200

    eventually(registered, "bob registers orders-value once WRITE on orders is granted")
    assert bob.get_subjects() == ["orders-value"]
    assert bob.get_latest_version("orders-value").version == 1
    # still nothing on another topic
    with pytest.raises(SchemaRegistryError) as caught:
        bob.register_schema("payments-value", Schema(AVRO, "AVRO"))
    assert caught.value.http_status_code == 403


def test_admin_listener_metrics_need_auth_and_describe_on_the_cluster(
        node: HttpNode, certs: Certs, kafka_admin: AdminClient) -> None:
    assert node.admin.startswith("https://")
    # the health checks stay open to probes without credentials
    assert http(node.admin + "/health/live", certs)[0] == 200
    assert http(node.admin + "/health/ready", certs)[0] == 200
    status, headers, _ = http(node.admin + "/metrics", certs)
    assert status == 401 and headers["WWW-Authenticate"] == 'Basic realm="eddy"'
    assert http(node.admin + "/metrics", certs, (ADMIN[0], WRONG_PASSWORD))[0] == 401
    assert http(node.admin + "/", certs)[0] == 401  # the console too
    status, _, body = http(node.admin + "/metrics", certs, ADMIN)
    assert status == 200 and b"# TYPE" in body
    # bob: authenticated, not allowed
    status, _, body = http(node.admin + "/metrics", certs, BOB)
    assert status == 403
    assert json.loads(body)["error"] == ("User is denied operation Describe on Cluster: "
                                         "kafka-cluster")
    grant = AclBinding(ResourceType.BROKER, "kafka-cluster", ResourcePatternType.LITERAL,
                       f"User:{BOB[0]}", "*", AclOperation.DESCRIBE, AclPermissionType.ALLOW)
    for future in kafka_admin.create_acls([grant]).values():
        future.result(TIMEOUT)
    eventually(lambda: http(node.admin + "/metrics", certs, BOB)[0] == 200,
               "bob scrapes /metrics once DESCRIBE on the cluster is granted")


def _eddy_registry(node: HttpNode, env: dict[str, str], *args: str
                   ) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "eddy", "registry", *args, "--url",
                           node.registry], capture_output=True, text=True, timeout=60,
                          env={**os.environ, **env})


def test_eddy_registry_cli_over_https_with_basic_auth(node: HttpNode, certs: Certs) -> None:
    secured = {"EDDY_REGISTRY_CA": str(certs.ca),
               "EDDY_REGISTRY_USER": f"{ADMIN[0]}:{ADMIN[1]}"}
    schema = node.data_dir.parent / "cli-schema.avsc"
    schema.write_text(AVRO)
    done = _eddy_registry(node, secured, "register", "cli-value", str(schema))
    assert done.returncode == 0, done.stderr
    listed = _eddy_registry(node, secured, "subjects")
    assert listed.returncode == 0 and "cli-value" in listed.stdout, listed.stderr
    # no credentials: the registry's 401 (40101), and the password never printed
    anonymous = _eddy_registry(node, {"EDDY_REGISTRY_CA": str(certs.ca)}, "subjects")
    assert anonymous.returncode != 0 and "40101" in anonymous.stderr
    wrong = _eddy_registry(node, {**secured, "EDDY_REGISTRY_USER": f"{ADMIN[0]}:{WRONG_PASSWORD}"},
                           "subjects")
    assert wrong.returncode != 0 and WRONG_PASSWORD not in wrong.stderr + wrong.stdout
    # the server's certificate is checked: without the CA the CLI refuses it
    untrusted = _eddy_registry(node, {"EDDY_REGISTRY_USER": secured["EDDY_REGISTRY_USER"]},
                               "subjects")
    assert untrusted.returncode != 0 and "cli-value" not in untrusted.stdout
