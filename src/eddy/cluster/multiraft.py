"""``MultiRaft``: several independent Raft groups on one node sharing one transport.

Each group has its own driver task, its own storage (``data_dir/raft/<name>``), its own
executor thread for fsyncs and its own leader: a slow disk write in ``offsets`` does not hold
up ``metadata``. Inbound messages are decoded once here and dispatched by ``group``; bytes
that do not decode, claim another sender, or name a group this node does not run are
dropped with a log line (counted in ``dropped``).

Group names map to the wire's numeric group id by a stable hash (``group_id``), the same on
every node, so nodes need not agree on the order groups are added in.
"""

from __future__ import annotations

import asyncio
import dataclasses
import hashlib
import logging
import os
import random
from collections.abc import Sequence

from eddy.clock import Clock, MonotonicClock
from eddy.cluster.raft.driver import RaftDriver, RaftStatus, StateMachine, bootstrap
from eddy.cluster.raft.ready import RaftConfig
from eddy.cluster.raft.storage.disk import RaftStorage
from eddy.cluster.raft.transport import RaftTransport, decode_inbound

log = logging.getLogger(__name__)

_NAME_OK = frozenset("abcdefghijklmnopqrstuvwxyz0123456789-_.")


def group_id(name: str) -> int:
    """The numeric id a group's messages carry: 63 bits of BLAKE2b of its name (never 0)."""
    digest = hashlib.blake2b(name.encode(), digest_size=8).digest()
    return (int.from_bytes(digest, "big") >> 1) or 1


class MultiRaft:
    def __init__(self, node_id: int, data_dir: str, transport: RaftTransport, *,
                 clock: Clock | None = None, config: RaftConfig | None = None,
                 rng: random.Random | None = None) -> None:
        if node_id <= 0:
            raise ValueError("node ids start at 1")
        self.node_id = node_id
        self.data_dir = data_dir
        self.transport = transport
        self.clock = clock or MonotonicClock()
        self.config = config or RaftConfig()
        self.rng = rng or random.Random()
        self.groups: dict[str, RaftDriver] = {}
        self._by_id: dict[int, RaftDriver] = {}
        self.dropped: dict[str, int] = {}
        transport.set_receiver(self._receive)

    def group_dir(self, name: str) -> str:
        return os.path.join(self.data_dir, "raft", name)

    async def add_group(self, name: str, voters: Sequence[int], state_machine: StateMachine,
                        *, config: RaftConfig | None = None, write_timeout_ms: int = 30_000,
                        slow_write_ms: int = 1_000, snapshot_every: int = 10_000,
                        storage: RaftStorage | None = None) -> RaftDriver:
        """Open (or create, with ``voters`` as its first membership) group ``name`` and
        start its driver. ``voters`` is ignored when the storage already holds a state."""
        if not name or set(name) - _NAME_OK or name.startswith("."):
            raise ValueError(f"bad raft group name {name!r}")
        if name in self.groups:
            raise ValueError(f"raft group {name} already runs here")
        gid = group_id(name)
        if gid in self._by_id:
            raise ValueError(f"raft group {name}'s id collides with another group's")
        cfg = dataclasses.replace(config or self.config, group=gid)
        loop = asyncio.get_running_loop()
        if storage is None:  # opening scans the log: off the loop
            storage = await loop.run_in_executor(None, RaftStorage, self.group_dir(name))
        store = storage
        if await loop.run_in_executor(None, bootstrap, store, voters):
            log.info("raft group %s created with voters %s", name, sorted(set(voters)))
        driver = RaftDriver(name, self.node_id, store, self.transport, cfg, state_machine,
                            self.clock, write_timeout_ms=write_timeout_ms,
                            slow_write_ms=slow_write_ms, snapshot_every=snapshot_every,
                            rng=random.Random(self.rng.random()))
        self.groups[name] = driver
        self._by_id[gid] = driver
        try:
            await driver.start()
        except BaseException:
            self._forget(name)
            raise
        return driver

    def _forget(self, name: str) -> RaftDriver | None:
        driver = self.groups.pop(name, None)
        if driver is not None:
            self._by_id.pop(driver.config.group, None)
        return driver

    async def remove_group(self, name: str, *, abort: bool = False) -> None:
        """Stop a group here (its storage stays). ``abort``: as a crash would."""
        driver = self._forget(name)
        if driver is None:
            return
        if abort:
            await driver.abort()
        else:
            await driver.stop()

    async def stop(self) -> None:
        drivers = list(self.groups)
        await asyncio.gather(*(self.remove_group(n) for n in drivers))

    def status(self) -> list[RaftStatus]:
        return [d.status() for _, d in sorted(self.groups.items()) if d.node is not None]

    def _drop(self, reason: str) -> None:
        self.dropped[reason] = self.dropped.get(reason, 0) + 1

    def _receive(self, from_node: int, data: bytes) -> None:
        msg = decode_inbound(from_node, data, self.node_id)
        if msg is None:
            self._drop("bad_message")
            return
        driver = self._by_id.get(msg.group)
        if driver is None:
            self._drop("unknown_group")
            log.debug("dropped a raft %s from node %d for unknown group %d",
                      type(msg).__name__, from_node, msg.group)
            return
        driver.deliver(msg)
