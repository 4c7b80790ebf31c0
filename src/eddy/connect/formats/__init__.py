"""Pipeline value formats: Avro, JSON Schema and Protobuf keys and values in Confluent's wire
format, decoded to Arrow columns and encoded from rows."""
