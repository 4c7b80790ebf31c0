"""Data pipelines on Apache Spark: pipeline files, Spark data sources, transforms, sinks."""
