"""Eddy: an event-streaming platform that speaks the Kafka wire protocol."""

__version__ = "0.1.0"
