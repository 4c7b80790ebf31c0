"""Protobuf schemas: the .proto model, parsing, descriptors, Confluent's printed forms,
compatibility."""
