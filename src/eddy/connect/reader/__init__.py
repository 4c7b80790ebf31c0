"""The Kafka reader and writer of format("eddy"): offsets and ranges, the fetcher, compiled
record decoders, rows in Spark's Kafka schema."""
