"""Kafka wire protocol, sans-IO: framing, headers, API table, record batches."""
