"""Avro schemas: Java Avro's model, parsing with references, canonical forms, compatibility, the
reader's safety checks."""
