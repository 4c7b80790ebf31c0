"""The pipeline runtime: the Spark session, the pipeline file's model, the runner, progress and
status, the connector inventory."""
