"""The schema formats (Avro, JSON Schema, Protobuf) shared by the registry, the pipelines and
the console: parsing, canonical forms, compatibility, safety checks."""
