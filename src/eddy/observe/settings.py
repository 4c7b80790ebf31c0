"""The HTTP admin listener's settings (/metrics, health, the console): where it listens, TLS,
authentication. ``BrokerConfig`` inherits them."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field

__all__ = ["ADMIN_PORT", "AdminSettings"]

#: the usual port of the admin listener (Redpanda's)
ADMIN_PORT = 9644


class AdminSettings(BaseModel):
    model_config = ConfigDict(extra="forbid", populate_by_name=True, frozen=True)

    admin_listener: str | None = Field(
        None, alias="admin.listener",
        description="HOST:PORT of the HTTP admin listener (/metrics for Prometheus, "
        "/health/live, /health/ready, the web console at /), served by a node with the "
        f"broker role; unset: the Kafka listener's host, port {ADMIN_PORT} (left out with a "
        "warning when that port is taken); port 0: any free port; empty: off",
    )
    admin_ssl_enabled: bool = Field(
        False, alias="admin.ssl.enabled",
        description="the admin listener serves HTTPS with the Kafka listeners' PEM material "
        "(as registry.ssl.enabled)",
    )
    admin_authentication_method: str = Field(
        "NONE", alias="admin.authentication.method",
        description="NONE or BASIC, as registry.authentication.method (/health/live and "
        "/health/ready stay open)",
    )
