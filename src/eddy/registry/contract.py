"""The registry's internal contract between its parts (issue 15):

- ``RegistryError``: every refusal, as Confluent answers it: the HTTP status, Confluent's
  error code (40401 ...) and message. The HTTP layer renders it as
  ``{"error_code": code, "message": message}``.
- ``SchemaLog``: where the registry's records go, the ``_schemas`` topic (one partition,
  compacted): keys and values in Confluent's exact JSON bytes. ``append`` returns once the
  records are written *and* applied to the state (read back from the topic, as Confluent's
  leader waits for its own reader); ``sync`` returns once the state has applied everything
  in the topic up to now (a read barrier). An in-memory implementation serves the pure
  tests; the Kafka one (confluent-kafka producer + consumer) serves ``eddy serve``.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Protocol

#: one ``_schemas`` record: key and value bytes (value None: a tombstone)
SchemaRecord = tuple[bytes, bytes | None]

# Confluent Schema Registry's error codes
SUBJECT_NOT_FOUND = 40401
VERSION_NOT_FOUND = 40402
SCHEMA_NOT_FOUND = 40403
SUBJECT_SOFT_DELETED = 40404
SUBJECT_NOT_SOFT_DELETED = 40405
SCHEMA_VERSION_SOFT_DELETED = 40406
SCHEMA_VERSION_NOT_SOFT_DELETED = 40407
SUBJECT_LEVEL_COMPATIBILITY_NOT_CONFIGURED = 40408
SUBJECT_LEVEL_MODE_NOT_CONFIGURED = 40409
INCOMPATIBLE_SCHEMA = 409
INVALID_SCHEMA = 42201
INVALID_VERSION = 42202
INVALID_COMPATIBILITY_LEVEL = 42203
INVALID_MODE = 42204
OPERATION_NOT_PERMITTED = 42205
REFERENCE_EXISTS = 42206
STORE_ERROR = 50001
OPERATION_TIMEOUT = 50002
FORWARDING_ERROR = 50003
UNKNOWN_LEADER = 50004


class RegistryError(Exception):
    """A refusal with Confluent's HTTP status, error code and message."""

    def __init__(self, status: int, code: int, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.code = code
        self.message = message


class SchemaLog(Protocol):
    """The ``_schemas`` topic as the registry service uses it."""

    async def append(self, records: list[SchemaRecord]) -> None:
        """Write ``records`` in order; return once they are applied to the state (the
        ``on_record`` callback given at construction has seen them). Raises
        ``RegistryError`` (50001 store error, 50002 timeout) when the write fails."""
        ...

    async def sync(self) -> None:
        """Return once every record in the topic as of now has been applied."""
        ...


#: what a SchemaLog calls for each record it reads back, in topic order (the registry
#: state's ``apply``)
OnRecord = Callable[[bytes, bytes | None], None]
