"""The inter-broker client settings: sasl.mechanism.inter.broker.protocol and
sasl.inter.broker.user (default: sasl.bootstrap.user) are checked with the listeners; the
TLS client context trusts ssl.truststore.* or the CA of the node's own keystore chain; the
registry's confluent-kafka settings follow the inter-broker listener (CA text written to a
0600 file); a warning says when the inter-broker principal is no super user under an
authorizer."""

from __future__ import annotations

import logging
import os
import ssl
import stat
from pathlib import Path

import pytest
from integration.security_nodes import make_certs

from eddy.config import ConfigError, load_config
from eddy.security.inter_broker import InterBrokerSecurity, warn_principal

SASL = {"listeners": "IB://127.0.0.1:0", "listener.security.protocol.map": "IB:SASL_PLAINTEXT"}
STANDARD = "org.apache.kafka.metadata.authorizer.StandardAuthorizer"


def test_a_sasl_inter_broker_listener_needs_credentials() -> None:
    with pytest.raises(ConfigError) as exc:
        load_config(env={}, overrides=SASL)
    assert "sasl.inter.broker.user" in str(exc.value)
    assert "sasl.bootstrap.user" in str(exc.value)


def test_credentials_default_to_the_bootstrap_user() -> None:
    config = load_config(env={}, overrides={**SASL, "sasl.bootstrap.user": "admin:pw"})
    sec = InterBrokerSecurity.from_config(config)
    assert (sec.protocol, sec.mechanism, sec.user, sec.password) == (
        "SASL_PLAINTEXT", "SCRAM-SHA-512", "admin", "pw")
    assert "pw" not in repr(sec)
    config = load_config(env={}, overrides={
        **SASL, "sasl.bootstrap.user": "admin:pw", "sasl.inter.broker.user": "broker:bpw",
        "sasl.mechanism.inter.broker.protocol": "scram-sha-256"})
    sec = InterBrokerSecurity.from_config(config)
    assert (sec.mechanism, sec.user, sec.password) == ("SCRAM-SHA-256", "broker", "bpw")
    assert sec.librdkafka_config() == {
        "security.protocol": "SASL_PLAINTEXT", "sasl.mechanism": "SCRAM-SHA-256",
        "sasl.username": "broker", "sasl.password": "bpw"}


@pytest.mark.parametrize(("overrides", "needle"), [
    ({"sasl.mechanism.inter.broker.protocol": "GSSAPI"}, "sasl.mechanism.inter.broker.protocol"),
    ({"sasl.inter.broker.user": "nopassword"}, "sasl.inter.broker.user"),
    ({"sasl.mechanism.inter.broker.protocol": "PLAIN"}, "not in sasl.enabled.mechanisms"),
])
def test_bad_inter_broker_settings_name_the_setting(overrides: dict[str, str],
                                                   needle: str) -> None:
    with pytest.raises(ConfigError) as exc:
        load_config(env={}, overrides={**SASL, "sasl.bootstrap.user": "admin:secret-pw",
                                       **overrides})
    assert needle in str(exc.value) and "secret-pw" not in str(exc.value)


def test_plaintext_needs_nothing() -> None:
    sec = InterBrokerSecurity.from_config(load_config(env={}))
    assert (sec.protocol, sec.mechanism, sec.ssl_context()) == ("PLAINTEXT", None, None)
    assert sec.principal() == "User:ANONYMOUS"


def test_tls_trusts_the_keystore_ca_and_writes_it_for_librdkafka(tmp_path: Path) -> None:
    certs = make_certs(tmp_path / "certs")
    config = load_config(env={}, overrides={
        "listeners": "IB://127.0.0.1:0", "listener.security.protocol.map": "IB:SSL",
        "data.dir": str(tmp_path / "data"),
        "ssl.keystore.certificate.chain": certs.server_chain.read_text(),  # PEM text
        "ssl.keystore.key": str(certs.server_key), "ssl.client.auth": "none"})
    sec = InterBrokerSecurity.from_config(config)
    ctx = sec.ssl_context()
    assert ctx is not None and ctx.verify_mode == ssl.CERT_REQUIRED and ctx.check_hostname
    (anchor,) = ctx.get_ca_certs()
    assert "Eddy Test CA" in str(anchor["subject"])
    out = sec.librdkafka_config()
    assert out["security.protocol"] == "SSL" and "ssl.certificate.pem" not in out
    path = Path(out["ssl.ca.location"])
    assert path.parent == tmp_path / "data" / ".tls"
    assert stat.S_IMODE(os.stat(path).st_mode) == 0o600
    assert path.read_text() == certs.ca.read_text()
    assert sec.principal() == "User:ANONYMOUS"


def test_tls_with_client_auth_presents_the_node_certificate(tmp_path: Path) -> None:
    certs = make_certs(tmp_path / "certs")
    config = load_config(env={}, overrides={
        "listeners": "IB://127.0.0.1:0", "listener.security.protocol.map": "IB:SSL",
        "data.dir": str(tmp_path / "data"), "ssl.truststore.location": str(certs.ca),
        "ssl.keystore.certificate.chain": str(certs.server_chain),
        "ssl.keystore.key": certs.server_key.read_text(), "ssl.client.auth": "required"})
    sec = InterBrokerSecurity.from_config(config)
    assert sec.ssl_context() is not None
    out = sec.librdkafka_config()
    assert out["ssl.ca.location"] == str(certs.ca)
    assert out["ssl.certificate.location"] == str(certs.server_chain)
    assert out["ssl.key.pem"].startswith("-----BEGIN")
    assert sec.principal() == "User:CN=eddy-server,O=Eddy Tests"


def test_warning_when_the_principal_is_no_super_user(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.WARNING, "eddy.security.inter_broker")
    base = {**SASL, "sasl.bootstrap.user": "admin:pw", "authorizer.class.name": STANDARD}
    warn_principal(load_config(env={}, overrides={**base, "super.users": "User:admin"}))
    assert caplog.records == []
    warn_principal(load_config(env={}, overrides={**base, "super.users": "User:other"}))
    (record,) = caplog.records
    assert "User:admin" in record.getMessage() and "CLUSTER_ACTION" in record.getMessage()
    assert "pw" not in record.getMessage().replace("principal", "")
    caplog.clear()
    warn_principal(load_config(env={}, overrides={"authorizer.class.name": STANDARD}))
    (record,) = caplog.records
    assert "User:ANONYMOUS" in record.getMessage()
