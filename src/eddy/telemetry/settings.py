"""What a node's logs and metrics counters do (log.level, log.format, metrics.enable): the
settings every part that reports reads. ``BrokerSettings`` inherits them."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator

__all__ = ["TelemetrySettings"]


class TelemetrySettings(BaseModel):
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

    @field_validator("log_level")
    @classmethod
    def _level(cls, v: str) -> str:
        if v.upper() not in ("DEBUG", "INFO", "WARNING", "ERROR"):
            raise ValueError("must be DEBUG, INFO, WARNING or ERROR")
        return v.upper()
