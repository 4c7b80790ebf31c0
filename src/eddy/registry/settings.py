"""The schema registry's settings of a node (registry.*): where its HTTP API listens, how
long a write waits for _schemas, TLS and authentication. ``BrokerConfig`` inherits them;
whether the node serves the registry at all (its roles) is decided in eddy.config."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field, field_validator

from eddy.config_parse import http_host_port

__all__ = ["REGISTRY_PORT", "RegistrySettings"]

#: the usual port of the schema registry (Confluent's), used on the Kafka listener's host
#: unless set (the admin listener's, ADMIN_PORT, is in eddy.observe.settings)
REGISTRY_PORT = 8081


class RegistrySettings(BaseModel):
    model_config = ConfigDict(extra="forbid", populate_by_name=True, frozen=True)

    registry_listener: str | None = Field(
        None, alias="registry.listener",
        description="HOST:PORT of the schema registry's HTTP API (Confluent's REST API, "
        "state in the topic _schemas), served by a node with the registry role; unset: the "
        f"Kafka listener's host, port {REGISTRY_PORT} (left out with a warning when that "
        "port is taken, as by another node on the same host); port 0: any free port; "
        "empty: no registry",
    )
    registry_kafkastore_timeout_ms: int = Field(
        10000, ge=1, le=3_600_000, alias="registry.kafkastore.timeout.ms",
        description="how long a registry write waits for _schemas to take it (Confluent's "
        "kafkastore.timeout.ms); then the request answers 50002 (operation timed out)",
    )
    registry_ssl_enabled: bool = Field(
        False, alias="registry.ssl.enabled",
        description="the schema registry serves HTTPS with the Kafka listeners' PEM material "
        "(ssl.keystore.*; ssl.client.auth and ssl.truststore.* for client certificates)",
    )
    registry_authentication_method: str = Field(
        "NONE", alias="registry.authentication.method",
        description="NONE or BASIC (Confluent's authentication.method): HTTP basic auth "
        "against the users' SCRAM credentials in the cluster metadata; the principal is "
        "User:<name>, checked against the ACLs when authorizer.class.name is set",
    )

    @field_validator("registry_listener")
    @classmethod
    def _registry_host_port(cls, v: str | None) -> str | None:
        return http_host_port(v, "registry.listener")
