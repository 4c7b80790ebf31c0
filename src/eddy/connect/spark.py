"""One SparkSession set up for Eddy's pipelines, and `register(spark)` for its data sources."""

from __future__ import annotations

import os
import sys
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

#: settings a local pipeline needs to start fast and stay on loopback; any can be overridden
LOCAL_DEFAULTS: dict[str, str] = {
    "spark.ui.enabled": "false",
    "spark.sql.shuffle.partitions": "4",
    "spark.driver.host": "127.0.0.1",
    "spark.driver.bindAddress": "127.0.0.1",
    "spark.sql.session.timeZone": "UTC",
    "spark.sql.execution.arrow.pyspark.enabled": "true",
    "spark.sql.streaming.schemaInference": "true",
    "spark.log.level": "WARN",
    "spark.ui.showConsoleProgress": "false",
}


def make_session(
    master: str | None = None,
    app_name: str = "eddy-connect",
    conf: Mapping[str, str] | None = None,
) -> SparkSession:
    """Get (or create) a SparkSession with Eddy's data sources registered.

    `master` defaults to `local[*]`; a cluster master (spark://, yarn, k8s://) works
    the same way as long as the workers can import eddy (install it there too).
    """
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    master = master or "local[*]"
    if master.startswith("local"):
        os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    from pyspark.sql import SparkSession

    builder = SparkSession.builder.master(master).appName(app_name)
    settings = dict(LOCAL_DEFAULTS)
    settings.update(conf or {})
    for key, value in settings.items():
        builder = builder.config(key, value)
    spark = builder.getOrCreate()
    register(spark)
    return spark


def register(spark: SparkSession) -> None:
    """Register Eddy's Spark data sources on this session: those of every connector
    (eddy.connect.connectors), such as `format("eddy")` (topics, read and write, Spark
    Kafka source option names), `format("eddy-datagen")` and `format("eddy-webhook")`."""
    from eddy.connect import connectors

    registered: list[type[Any]] = []
    for factory in (*connectors.sources(), *connectors.sinks()):
        for source in factory.data_sources():
            if source not in registered:  # the eddy source and sink share format("eddy")
                spark.dataSource.register(source)
                registered.append(source)
