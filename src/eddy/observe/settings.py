"""The observability settings of a node: its logs, its metrics and the HTTP admin listener
(/metrics, health, the console). ``BrokerConfig`` inherits them."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator

__all__ = ["ADMIN_PORT", "ObservabilitySettings"]

#: the usual port of the admin listener (Redpanda's)
ADMIN_PORT = 9644


class ObservabilitySettings(BaseModel):
    model_config = ConfigDict(extra="forbid", populate_by_name=True, frozen=True)

    log_level: str = Field("INFO", description="DEBUG, INFO, WARNING or ERROR")
    log_format: Literal["text", "json"] = Field(
        "text", alias="log.format",
        description="text (time, level, logger, message) or json: one JSON object per line "
        "(ts, level, logger, message, and trace_id/span_id of the current span when tracing "
        "is on)",
    )
    metrics_enable: bool = Field(
        True, alias="metrics.enable",
        description="count requests, bytes and records as they are served for the Prometheus "
        "metrics (false: those counters stay at 0; gauges read at scrape time still answer)",
    )
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

    @field_validator("log_level")
    @classmethod
    def _level(cls, v: str) -> str:
        if v.upper() not in ("DEBUG", "INFO", "WARNING", "ERROR"):
            raise ValueError("must be DEBUG, INFO, WARNING or ERROR")
        return v.upper()
