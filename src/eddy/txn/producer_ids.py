"""Producer id allocation: ids come from blocks whose start is persisted before use, so
an id is never handed out twice, even across a crash."""

from __future__ import annotations

import json
import os

from eddy.log.state_files import atomic_write

BLOCK = 1000
FILE = "producer-ids.json"


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

    def allocate(self) -> int:
        if self._next >= self._block_end:
            end = self._next + BLOCK
            # persisted before use: a failed write (disk full) raises and hands out nothing
            atomic_write(self._path, json.dumps({"next_block_start": end}).encode())
            self._block_end = end
        pid = self._next
        self._next += 1
        return pid
