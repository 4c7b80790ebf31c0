"""Fuzzing Eddy's Kafka listener: a mutation campaign against a real `eddy serve` process
(`python -m bench.fuzz`) and coverage-guided atheris harnesses of the request decoder and
the record-batch validator (`python -m bench.fuzz.atheris_decode`, `...atheris_batches`)."""
