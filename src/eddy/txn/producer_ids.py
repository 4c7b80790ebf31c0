"""Producer id allocation: ids come from blocks whose start is persisted before use, so
an id is never handed out twice, even across a crash. In a cluster the blocks come from the
controller instead (AllocateProducerIds in the metadata log), so no two brokers share one."""

from __future__ import annotations

import asyncio
import json
import os
from collections.abc import Awaitable, Callable

from eddy.log.state_files import atomic_write
from eddy.protocol.errors import ErrorCode, KafkaError

#: given a block size and a floor (no id below it may be handed out), the first id of a new
#: block (the controller's answer)
BlockSource = Callable[[int, int], Awaitable[int]]

BLOCK = 1000
FILE = "producer-ids.json"
#: with a block source, a new block is fetched once fewer ids than this are left, so that
#: a request that made sure of an id finds one even if others took ids meanwhile
LOW_WATER = 100


class ProducerIdAllocator:
    def __init__(self, data_dir: str) -> None:
        self._path = os.path.join(data_dir, FILE)
        self._next = 0
        self._block_end = 0
        try:
            with open(self._path, encoding="utf-8") as f:
                self._next = self._block_end = int(json.load(f)["next_block_start"])
        except FileNotFoundError:
            pass
        self._source: BlockSource | None = None
        self.floor = 0
        self._lock = asyncio.Lock()

    def use_blocks_from(self, source: BlockSource) -> None:
        """Take blocks from ``source`` (the controller) from now on, above every id this
        node handed out on its own (its producers' state still holds them)."""
        self._source = source
        self.floor = self._block_end
        self._next = self._block_end = 0

    async def ensure(self) -> None:
        """With a block source: make sure an id is at hand (fetching a block if not);
        raises ``KafkaError`` (COORDINATOR_NOT_AVAILABLE) when no block comes."""
        if self._source is None or self._block_end - self._next >= LOW_WATER:
            return
        async with self._lock:
            if self._block_end - self._next >= LOW_WATER:
                return
            first = await self._source(BLOCK, self.floor)
            self._next, self._block_end = first, first + BLOCK

    def allocate(self) -> int:
        if self._source is not None:
            if self._next >= self._block_end:
                raise KafkaError(ErrorCode.coordinator_not_available,
                                 "no producer id block from the controller yet")
            pid = self._next
            self._next += 1
            return pid
        if self._next >= self._block_end:
            end = self._next + BLOCK
            # persisted before use: a failed write (disk full) raises and hands out nothing
            atomic_write(self._path, json.dumps({"next_block_start": end}).encode())
            self._block_end = end
        pid = self._next
        self._next += 1
        return pid
