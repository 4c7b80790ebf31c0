"""Wake long-polling fetches when data lands in a partition they wait on."""

from __future__ import annotations

import asyncio
from collections.abc import Iterable

PartitionKey = tuple[str, int]


class AppendNotifier:
    def __init__(self) -> None:
        self._waiters: dict[PartitionKey, set[asyncio.Future[None]]] = {}

    def notify(self, key: PartitionKey) -> None:
        waiters = self._waiters.pop(key, None)
        if waiters:
            for fut in waiters:
                if not fut.done():
                    fut.set_result(None)

    async def wait_any(self, keys: Iterable[PartitionKey], timeout_s: float) -> bool:
        """Wait until one of the partitions gets an append; False on timeout."""
        fut: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        keys = list(keys)
        for key in keys:
            self._waiters.setdefault(key, set()).add(fut)
        try:
            done, _ = await asyncio.wait({fut}, timeout=max(timeout_s, 0.0))
            return bool(done)
        finally:
            for key in keys:
                waiters = self._waiters.get(key)
                if waiters is not None:
                    waiters.discard(fut)
                    if not waiters:
                        del self._waiters[key]
            if not fut.done():
                fut.cancel()
