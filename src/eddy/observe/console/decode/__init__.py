"""How the message browser shows keys and values: Confluent's wire format decoded by the
registry's schemas (Avro, Protobuf, JSON)."""
