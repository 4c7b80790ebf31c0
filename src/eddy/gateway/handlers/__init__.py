"""The gateway's Kafka handlers: the table the Kafka listener serves, one module per API
family."""
