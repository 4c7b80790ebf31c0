"""How the node connects to the other nodes' (and its own) inter-broker listener: the first
listener's security protocol, with TLS from the node's PEM material
(``eddy.security.client_tls``) and SASL with ``sasl.mechanism.inter.broker.protocol`` as
``sasl.inter.broker.user`` (default: ``sasl.bootstrap.user``), as Kafka's brokers do.

Used by a follower's ``LeaderLink`` (``ssl_context``, ``mechanism``/``user``/``password``)
and by the registry's confluent-kafka clients (``librdkafka_config``). ``warn_principal``
says at startup when the principal the other nodes see is no super user while an
authorizer is on (replication then needs CLUSTER_ACTION on the cluster).
"""

from __future__ import annotations

import logging
import os
import ssl
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from eddy.security.authorizer import parse_super_users
from eddy.security.client_tls import (
    client_context,
    own_certificates,
    trusted_pem,
    truststore_text,
    wants_client_cert,
)
from eddy.security.settings import (
    authorizer_enabled,
    inter_broker_credentials,
    inter_broker_mechanism,
)
from eddy.security.tls import TlsError, TlsMaterial, _is_pem

if TYPE_CHECKING:
    from eddy.broker.settings import BrokerSettings

__all__ = ["InterBrokerSecurity", "warn_principal"]

log = logging.getLogger(__name__)
ANONYMOUS = "User:ANONYMOUS"


@dataclass(frozen=True, slots=True)
class InterBrokerSecurity:
    protocol: str  # PLAINTEXT, SSL, SASL_PLAINTEXT or SASL_SSL
    mechanism: str | None  # None: no SASL
    user: str | None
    password: str | None = field(repr=False)
    material: TlsMaterial | None  # None: no TLS
    scratch_dir: str

    @property
    def tls(self) -> bool:
        return self.material is not None

    @classmethod
    def from_config(cls, config: BrokerSettings) -> InterBrokerSecurity:
        spec = config.listener_specs[0]
        mechanism = user = password = None
        if spec.sasl:
            credentials = inter_broker_credentials(config)
            if credentials is None:  # check_security refuses this config
                raise ValueError("set sasl.inter.broker.user or sasl.bootstrap.user")
            mechanism = inter_broker_mechanism(config)
            user, password = credentials
        material = TlsMaterial.from_config(config) if spec.tls else None
        return cls(spec.protocol, mechanism, user, password, material,
                   os.path.join(config.data_dir, ".tls"))

    def ssl_context(self) -> ssl.SSLContext | None:
        """A client context for a TLS listener (None: plain TCP); TlsError naming the
        setting when the PEM material does not load."""
        if self.material is None:
            return None
        return client_context(self.material, self.scratch_dir)

    def principal(self) -> str:
        """The principal the inter-broker listener sees this node as."""
        if self.user is not None:
            return f"User:{self.user}"
        if self.material is not None and wants_client_cert(self.material):
            chain = own_certificates(self.material)
            if chain:
                return "User:" + chain[0].subject.rfc4514_string()
        return ANONYMOUS

    def librdkafka_config(self) -> dict[str, Any]:
        """confluent-kafka settings for a client of the inter-broker listener. CA
        certificates given as PEM text (or taken from the keystore chain) are written to
        ``<data_dir>/.tls/inter-broker-ca.pem`` (0600): librdkafka reads a file."""
        out: dict[str, Any] = {"security.protocol": self.protocol}
        if self.mechanism is not None:
            out |= {"sasl.mechanism": self.mechanism, "sasl.username": self.user,
                    "sasl.password": self.password}
        material = self.material
        if material is None:
            return out
        out["ssl.ca.location"] = self._ca_location(material)
        if wants_client_cert(material):
            if material.certificate_chain is not None and material.key is not None:
                out |= _pem_or_path("certificate", material.certificate_chain)
                out |= _pem_or_path("key", material.key)
            elif material.keystore_location is not None:  # key and chain in one file
                out |= {"ssl.certificate.location": material.keystore_location,
                        "ssl.key.location": material.keystore_location}
            if material.key_password is not None:
                out["ssl.key.password"] = material.key_password
        return out

    def _ca_location(self, material: TlsMaterial) -> str:
        text = trusted_pem(material)  # from the keystore chain, without a trust store
        location, certificates = material.truststore_location, material.truststore_certificates
        if text is None:
            if certificates is None and location is not None:
                return location
            if location is None and certificates is not None and not _is_pem(certificates):
                return certificates
            parts = [_read_text(p) for p in (location,) if p is not None]
            if certificates is not None:
                parts.append(truststore_text(material) or _read_text(certificates))
            text = "\n".join(parts)
        return _write_private(self.scratch_dir, "inter-broker-ca.pem", text)


def _pem_or_path(kind: str, value: str) -> dict[str, Any]:
    return {f"ssl.{kind}.pem": value} if _is_pem(value) else {f"ssl.{kind}.location": value}


def _read_text(path: str) -> str:
    try:
        with open(path) as f:
            return f.read()
    except (OSError, UnicodeError) as exc:
        raise TlsError(f"ssl.truststore: cannot read {path}: "
                       f"{getattr(exc, 'strerror', None) or exc}") from None


def _write_private(directory: str, name: str, text: str) -> str:
    """``text`` in ``directory/name``, readable by this user only; the path."""
    os.makedirs(directory, mode=0o700, exist_ok=True)
    path = os.path.join(directory, name)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as f:
        os.fchmod(f.fileno(), 0o600)
        f.write(text)
    return path


def warn_principal(config: BrokerSettings) -> None:
    """With an authorizer on, a warning when the principal the nodes replicate as is not in
    super.users (Kafka requires it to be a super user or to hold CLUSTER_ACTION)."""
    if not authorizer_enabled(config):
        return
    try:
        security = InterBrokerSecurity.from_config(config)
        principal = security.principal()
    except (TlsError, ValueError) as exc:
        log.warning("inter-broker security: %s", exc)
        return
    if principal in parse_super_users(config.super_users):
        return
    listener = config.listener_specs[0]
    log.warning(
        "an authorizer is on and the nodes reach each other as %s on listener %s (%s), "
        "which is not in super.users: replication (Fetch, OffsetForLeaderEpoch) and the "
        "registry's client are refused unless it holds CLUSTER_ACTION on the cluster (and "
        "the registry's topic ACLs); add it to super.users as Kafka requires%s",
        principal, listener.name, listener.protocol,
        "" if listener.sasl else " (or use a SASL inter-broker listener with "
        "sasl.inter.broker.user)")
