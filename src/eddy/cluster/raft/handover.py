"""A stopping node hands the leadership of the Raft groups it leads (the ``metadata`` group,
so the controller; the ``offsets`` group, so the group coordinator) to another voter
before it goes (Raft's leadership transfer: TimeoutNow to the most caught-up live voter), so
they move in a round trip instead of after an election timeout, and the new controller is
the one that takes the node's controlled shutdown."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable

from eddy.cluster.multiraft import MultiRaft
from eddy.cluster.raft.driver import RaftDriver

__all__ = ["hand_over_raft"]

log = logging.getLogger(__name__)

POLL_S = 0.02


def _target(driver: RaftDriver, me: int, is_live: Callable[[int], bool]) -> int | None:
    node = driver.node
    if node is None or not driver.is_leader:
        return None
    peers = [v for v in node.voters if v != me and is_live(v)]
    if not peers:
        return None

    def match(peer: int) -> int:
        progress = node.progress(peer)
        return -1 if progress is None else progress.match

    return max(sorted(peers), key=match)


async def hand_over_raft(multi: MultiRaft, me: int, is_live: Callable[[int], bool],
                         timeout_s: float) -> list[str]:
    """Start a transfer for every group led here, wait up to ``timeout_s`` for them to
    move; the groups still led here after that (their leader election waits for this node
    to stop)."""
    moving: dict[str, RaftDriver] = {}
    for name, driver in sorted(multi.groups.items()):
        target = _target(driver, me, is_live)
        if target is None:
            continue
        try:
            driver.transfer_leadership(target)
        except Exception as exc:  # no longer leading, stopped: nothing to hand over
            log.debug("raft group %s: no transfer to %d: %s", name, target, exc)
            continue
        log.info("raft group %s: handing leadership to node %d", name, target)
        moving[name] = driver
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout_s
    while moving and loop.time() < deadline:
        await asyncio.sleep(POLL_S)
        moving = {n: d for n, d in moving.items() if d.is_leader}
    return sorted(moving)
