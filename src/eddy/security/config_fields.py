"""The security settings of a node (Kafka's names): listeners and their protocols, TLS
material, SASL, the authorizer. ``BrokerConfig`` inherits them; their checks together are
``eddy.security.settings.check_security``."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field, SecretStr

from eddy.security.listeners import DEFAULT_PROTOCOL_MAP

__all__ = ["SecuritySettings"]


class SecuritySettings(BaseModel):
    model_config = ConfigDict(extra="forbid", populate_by_name=True, frozen=True)

    listeners: str | None = Field(
        None, alias="listeners",
        description="Kafka's listeners: NAME://HOST:PORT,... (several listeners, each with "
        "the security protocol listener.security.protocol.map gives its name; port 0: any "
        "free port; an empty HOST: every interface); set, it replaces listen and "
        "advertised; unset: PLAINTEXT://<listen>",
    )
    advertised_listeners: str | None = Field(
        None, alias="advertised.listeners",
        description="NAME://HOST:PORT clients of each listener are told to connect to "
        "(default: the listener's own address)",
    )
    listener_security_protocol_map: str = Field(
        DEFAULT_PROTOCOL_MAP, alias="listener.security.protocol.map",
        description="listener name -> PLAINTEXT, SSL, SASL_PLAINTEXT or SASL_SSL",
    )
    inter_broker_listener_name: str | None = Field(
        None, alias="inter.broker.listener.name",
        description="the listener other nodes and replicas use, registered in the cluster "
        "(default: the first of listeners)",
    )
    ssl_keystore_type: str = Field(
        "PEM", alias="ssl.keystore.type", description="PEM only (KIP-651)")
    ssl_keystore_location: str | None = Field(
        None, alias="ssl.keystore.location",
        description="a PEM file holding the private key and the certificate chain",
    )
    ssl_keystore_certificate_chain: str | None = Field(
        None, alias="ssl.keystore.certificate.chain",
        description="the listener's certificate chain: PEM text, or the path of a PEM file",
    )
    ssl_keystore_key: SecretStr | None = Field(
        None, alias="ssl.keystore.key",
        description="the listener's private key: PEM text, or the path of a PEM file",
    )
    ssl_key_password: SecretStr | None = Field(
        None, alias="ssl.key.password", description="password of an encrypted private key")
    ssl_truststore_type: str = Field(
        "PEM", alias="ssl.truststore.type", description="PEM only (KIP-651)")
    ssl_truststore_location: str | None = Field(
        None, alias="ssl.truststore.location",
        description="a PEM file of the CA certificates client certificates are checked with",
    )
    ssl_truststore_certificates: str | None = Field(
        None, alias="ssl.truststore.certificates",
        description="CA certificates as PEM text, or the path of a PEM file",
    )
    ssl_client_auth: str = Field(
        "none", alias="ssl.client.auth",
        description="none, requested (a client certificate is checked if sent) or "
        "required; the principal is User:<the certificate's subject, RFC 2253>",
    )
    ssl_reload_check_interval_ms: int = Field(
        5000, ge=0, alias="ssl.reload.check.interval.ms",
        description="Eddy's own: how often the PEM files' modification times are checked; "
        "changed files are loaded for new connections (0: never reload)",
    )
    sasl_enabled_mechanisms: str = Field(
        "SCRAM-SHA-256,SCRAM-SHA-512", alias="sasl.enabled.mechanisms",
        description="SASL mechanisms of SASL listeners: SCRAM-SHA-256, SCRAM-SHA-512, PLAIN "
        "(PLAIN passwords are checked against the users' SCRAM credentials)",
    )
    connections_max_reauth_ms: int = Field(
        0, ge=0, alias="connections.max.reauth.ms",
        description="a SASL session lasts this long; the client must re-authenticate "
        "before it ends or is disconnected (KIP-368; 0: sessions never end)",
    )
    connection_failed_authentication_delay_ms: int = Field(
        100, ge=0, alias="connection.failed.authentication.delay.ms",
        description="a failed authentication is answered (and the connection closed) this "
        "long after it failed",
    )
    sasl_failed_logins_per_ip_per_minute: int = Field(
        30, ge=1, alias="sasl.failed.logins.per.ip.per.minute",
        description="Eddy's own: failed logins allowed from one address per minute; past "
        "it, logins from that address fail without being checked until it calms down",
    )
    sasl_bootstrap_user: SecretStr | None = Field(
        None, alias="sasl.bootstrap.user",
        description="NAME:PASSWORD of a user created (as SCRAM-SHA-256 and SCRAM-SHA-512 "
        "credentials, never the password) when the cluster has no credential of that name",
    )
    sasl_mechanism_inter_broker_protocol: str = Field(
        "", alias="sasl.mechanism.inter.broker.protocol",
        description="the SASL mechanism followers (and the node's own clients) log in to "
        "a SASL inter-broker listener with: SCRAM-SHA-256, SCRAM-SHA-512 or PLAIN (unset: "
        "the strongest of sasl.enabled.mechanisms)",
    )
    sasl_inter_broker_user: SecretStr | None = Field(
        None, alias="sasl.inter.broker.user",
        description="Eddy's own: NAME:PASSWORD the node logs in with on a SASL inter-broker "
        "listener (default: sasl.bootstrap.user); make it a super user (or give it "
        "CLUSTER_ACTION on the cluster) when an authorizer is on",
    )

    authorizer_class_name: str = Field(
        "", alias="authorizer.class.name",
        description="empty: no authorization (as Kafka); Kafka's StandardAuthorizer or "
        "AclAuthorizer class name, or 'eddy': every request is checked against the ACLs",
    )
    super_users: str = Field(
        "", alias="super.users",
        description="principals allowed everything, separated by ';' (e.g. "
        "User:admin;User:CN=broker)",
    )
    allow_everyone_if_no_acl_found: bool = Field(
        False, alias="allow.everyone.if.no.acl.found",
        description="a resource no ACL names is open to everyone (Kafka's default: false)",
    )
