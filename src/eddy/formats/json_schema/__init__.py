"""JSON Schema: parsing hostile schema texts, canonical forms, Confluent's compatibility
rules."""
