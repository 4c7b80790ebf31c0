"""Data pipelines on Apache Spark: pipeline files, Spark data sources, transforms, sinks.

spark         the SparkSession for pipelines and `register(spark)`, which adds Eddy's data
              sources to a user's own session (the public entry of PySpark scripts)
runtime/      the pipeline file's model, the runner, progress, status, the connector
              inventory (`eddy connect list-connectors|spec|check`)
sources/      one module per source connector (spec model + factory, registered on import)
sinks/        one module per sink connector (likewise)
transforms/   the transforms' models and their compiler to Spark SQL column expressions
reader/       format("eddy"): the Kafka reader (and writer) and its compiled decoders
datasources/  the Spark data sources of datagen and webhook, rows as plain JSON
formats/      Avro / JSON Schema / Protobuf keys and values in Confluent's wire format
connectors, probes, deadletter, spec_model, batch, options: what the parts share (the
connector registry, `check`'s probes, the dead-letter topic, the spec models' base, the
internal columns and BatchSink, Spark option parsing)
"""
