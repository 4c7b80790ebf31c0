"""A Raft group's leader fell silent: is its process still there? The metadata and offsets
groups' leaders are brokers too; when one is killed, its followers would wait out a
randomised election timeout (0.3-0.6 s) before the first campaign, and the other follower's
lease can turn that campaign down once more. This watch probes the silent leader's Kafka
listener (``liveness_probe``); a refused connection means the process is gone, and every
group it led here gets the hint (``RaftDriver.leader_gone``): drop the lease, campaign within
half an election timeout. A live leader (the probe connects) or one behind a network
partition (the probe times out) changes nothing: elections then run on their timers.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Iterable

from eddy.cluster.liveness_probe import refuses
from eddy.cluster.raft.driver import RaftDriver

__all__ = ["RaftLeaderWatch"]

log = logging.getLogger(__name__)

#: the shortest wait between two looks at the groups (the watch otherwise sleeps until the
#: first moment a leader here can have been silent for ``silence_ms``: a few looks a second
#: while leaders are heard, not twenty)
CHECK_EVERY_S = 0.05
#: a leader found listening is not probed again sooner than this
PROBE_EVERY_MS = 100
PROBE_TIMEOUT_S = 0.25


class RaftLeaderWatch:
    def __init__(self, node_id: int, drivers: Callable[[], Iterable[RaftDriver]],
                 address_of: Callable[[int], str | None], silence_ms: int,
                 now_ms: Callable[[], int]) -> None:
        self.node_id = node_id
        self.drivers = drivers
        self.address_of = address_of
        self.silence_ms = silence_ms
        self.now_ms = now_ms
        self._probed: dict[int, int] = {}  # leader -> when last probed (and found there)

    def silent_leaders(self) -> set[int]:
        """Leaders silent for ``silence_ms`` in some group here, not probed just now."""
        now = self.now_ms()
        out: set[int] = set()
        for driver in self.drivers():
            silence = driver.leader_silence()
            if silence is None:
                continue
            leader, quiet_ms = silence
            if leader != self.node_id and quiet_ms >= self.silence_ms \
                    and now - self._probed.get(leader, now - PROBE_EVERY_MS) >= PROBE_EVERY_MS:
                out.add(leader)
        return out

    def next_check_s(self) -> float:
        """How long the watch may sleep: until a leader heard here could first have been
        silent for ``silence_ms`` (or may be probed again), at most ``silence_ms`` (a
        leader found meanwhile cannot be silent for longer than that before the next look),
        at least ``CHECK_EVERY_S``."""
        now = self.now_ms()
        wait_ms = self.silence_ms
        for driver in self.drivers():
            silence = driver.leader_silence()
            if silence is None or silence[0] == self.node_id:
                continue
            leader, quiet_ms = silence
            due = self.silence_ms - quiet_ms
            if due <= 0:  # silent already: when it may be probed (again)
                due = self._probed.get(leader, now - PROBE_EVERY_MS) + PROBE_EVERY_MS - now
            wait_ms = min(wait_ms, due)
        return max(wait_ms / 1000, CHECK_EVERY_S)

    async def check(self) -> list[int]:
        """One round: probe the silent leaders; those gone are handed to their groups.
        Returns them."""
        gone: list[int] = []
        for leader in sorted(self.silent_leaders()):
            self._probed[leader] = self.now_ms()
            addr = self.address_of(leader)
            if addr is None or not await refuses(addr, PROBE_TIMEOUT_S):
                continue
            gone.append(leader)
            self._probed.pop(leader, None)
            for driver in self.drivers():
                silence = driver.leader_silence()
                if silence is not None and silence[0] == leader:
                    log.info("raft group %s: leader %d is silent and nothing listens at %s: "
                             "electing a new one now", driver.group, leader, addr)
                    driver.leader_gone(leader)
        return gone

    async def run(self) -> None:
        if self.silence_ms <= 0:
            return
        while True:
            try:
                await asyncio.sleep(self.next_check_s())
                await self.check()
            except Exception:  # the watch is an optimisation: never let it die
                log.exception("raft leader watch failed; carrying on")
                await asyncio.sleep(CHECK_EVERY_S)
