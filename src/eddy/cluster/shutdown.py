"""Does a stopping broker's controlled shutdown have anything to do?

A controlled shutdown (KIP-631) moves the broker's leaderships to other in-sync replicas
and takes it out of the ISRs it is in as a follower, so that its leaders' acks=all
produces do not wait for it. Neither is possible or needed when no other replica can
take a leadership (an ISR of this broker alone, or of brokers gone too) and this broker
follows no live leader from inside its ISR: then asking the controller only waits for
one that may not be there (the last node of a cluster stopping waited its full 5 s for a
quorum that had left before it). Sans-IO: the metadata state and a reachability check.
"""

from __future__ import annotations

from collections.abc import Callable

from eddy.metadata import MetadataState

__all__ = ["to_move"]


def to_move(state: MetadataState, me: int, reachable: Callable[[int], bool]
            ) -> list[tuple[str, int]]:
    """The partitions a controlled shutdown of ``me`` would change: led here with another
    in-sync replica that is ``reachable`` (it can lead), or followed from inside the ISR
    under a ``reachable`` leader (it would wait for this broker)."""
    out: list[tuple[str, int]] = []
    for name, index, part in state.partitions_of(me):
        if part.leader == me:
            if any(node != me and reachable(node) for node in part.isr):
                out.append((name, index))
        elif me in part.isr and part.leader >= 0 and reachable(part.leader):
            out.append((name, index))
    return out
