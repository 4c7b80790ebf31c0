"""The `webhook` sink: each micro-batch's rows POSTed as JSON arrays by the executors,
through `format("eddy-webhook")` (eddy.connect.datasources.webhook: retries, backoff, and
the rows of requests that still failed to the dead-letter topic)."""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any, Literal

from pydantic import Field, field_validator

from eddy.connect import probes
from eddy.connect.batch import BatchInfo
from eddy.connect.connectors import ConnectorSpec, SinkFactory, register
from eddy.connect.spec_model import check_http_url

if TYPE_CHECKING:
    from pyspark.sql import DataFrame

    from eddy.connect.runtime.spec import Pipeline


class WebhookSink(ConnectorSpec):
    """Batched JSON POSTs; failures after the retries go to the dead-letter topic."""

    type: Literal["webhook"]
    url: str
    batch_size: int = Field(500, ge=1, le=100_000)
    max_retries: int = Field(3, ge=0, le=100)
    backoff_ms: int = Field(200, ge=0, description="first retry delay, doubled each time")
    timeout_ms: int = Field(10_000, ge=1)
    headers: dict[str, str] = Field(default_factory=dict)

    @field_validator("url")
    @classmethod
    def _url(cls, value: str) -> str:
        return check_http_url(value)


class WebhookBatchSink:
    """Posts each micro-batch through `format("eddy-webhook")` (on the executors)."""

    single_action = True

    def __init__(self, spec: WebhookSink, name: str, pipeline: str,
                 dead_letter: tuple[str, str] | None) -> None:
        self.spec = spec
        self.name = name
        self.pipeline = pipeline
        self.dead_letter = dead_letter

    def options(self) -> dict[str, str]:
        spec = self.spec
        opts = {
            "url": spec.url,
            "batch_size": str(spec.batch_size),
            "max_retries": str(spec.max_retries),
            "backoff_ms": str(spec.backoff_ms),
            "timeout_ms": str(spec.timeout_ms),
            "headers": json.dumps(spec.headers),
            "pipeline": self.pipeline,
            "stage": self.name,
        }
        if self.dead_letter is not None:
            opts["dead_letter_bootstrap"], opts["dead_letter_topic"] = self.dead_letter
        return opts

    def write(self, df: DataFrame, batch: BatchInfo) -> None:
        from eddy.connect.datasources.webhook import FORMAT

        df.write.format(FORMAT).options(**self.options()).mode("append").save()


class WebhookSinkFactory(SinkFactory[WebhookSink]):
    spec = WebhookSink
    rank = 3

    def data_sources(self) -> tuple[type[Any], ...]:
        from eddy.connect.datasources.webhook import WebhookDataSource

        return (WebhookDataSource,)

    def build(self, spec: WebhookSink, name: str, pipeline: Pipeline) -> WebhookBatchSink:
        return WebhookBatchSink(spec, name, pipeline.name, pipeline.dead_letter_target())

    def check(self, spec: WebhookSink, pipeline: Pipeline, what: str) -> probes.Check:
        return probes.http(spec.url, what)


register(WebhookSinkFactory())
