"""Eddy benchmark runner: `python -m bench` (see `python -m bench --help`).

Starts the broker(s) under test as subprocesses on 127.0.0.1, drives them with librdkafka
(confluent-kafka) clients running in their own processes, and prints a table of produce and
consume throughput, end-to-end latency, startup time and memory against the project's targets.
Results are also written as JSON to bench/results/<timestamp>.json.
"""
