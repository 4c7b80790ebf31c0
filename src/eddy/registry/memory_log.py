"""An in-memory SchemaLog (the contract's ``_schemas`` topic) for tests: records kept in a
list, each applied to the state through ``on_record`` as it is appended."""

from __future__ import annotations

from eddy.registry.contract import OnRecord, RegistryError, SchemaRecord


class MemoryLog:
    """A SchemaLog that keeps its records in memory."""

    def __init__(self, on_record: OnRecord) -> None:
        self._on_record = on_record
        self.records: list[SchemaRecord] = []
        #: how many times ``sync`` was awaited (tests check that writes sync first)
        self.syncs = 0
        #: when set, the next ``append`` raises it and writes nothing (a failed store)
        self.fail_next: RegistryError | None = None

    async def append(self, records: list[SchemaRecord]) -> None:
        if self.fail_next is not None:
            error, self.fail_next = self.fail_next, None
            raise error
        for key, value in records:
            self.records.append((key, value))
            self._on_record(key, value)

    async def sync(self) -> None:
        self.syncs += 1

    def replay(self, on_record: OnRecord) -> None:
        """Feeds every record so far to another consumer (a restarted registry)."""
        for key, value in self.records:
            on_record(key, value)
