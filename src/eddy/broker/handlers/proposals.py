"""Metadata changes a request asks for (ACLs, SCRAM users): each command proposed to the
controller, done once this node's replica of the metadata shows it, a bounded number at
once (workers take the next change when one is done: no task per change)."""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from eddy.broker.dynamic_configs import APPLY_WAIT_S
from eddy.cluster.controller.rpc import ProposeRequest
from eddy.metadata import MetadataState, encode_command
from eddy.protocol.errors import ErrorCode, KafkaError

if TYPE_CHECKING:
    from eddy.cluster.service import ClusterService

__all__ = ["MAX_IN_FLIGHT", "OK", "Change", "Outcome", "make_all"]

#: proposals of one request in flight at once (a request may name thousands of changes)
MAX_IN_FLIGHT = 32
Outcome = tuple[ErrorCode, str | None]
OK: Outcome = (ErrorCode.none, None)


@dataclass(frozen=True, slots=True)
class Change:
    """One metadata command, and when this node's replica shows it done."""

    command: Any
    done: Callable[[MetadataState], bool]


async def _make(cluster: ClusterService, change: Change) -> Outcome:
    try:
        await cluster.ask_checked(ProposeRequest(encode_command(change.command)), APPLY_WAIT_S)
    except KafkaError as exc:
        return exc.code, exc.message
    if not await cluster.wait_applied(change.done, APPLY_WAIT_S):
        return (ErrorCode.request_timed_out,
                "the change is not on this node's replica of the metadata yet")
    return OK


async def make_all(cluster: ClusterService, changes: Sequence[Change]) -> list[Outcome]:
    """Each change's outcome, in order, at most ``MAX_IN_FLIGHT`` proposals at once."""
    out: list[Outcome] = [OK] * len(changes)
    pending = iter(range(len(changes)))

    async def worker() -> None:
        for i in pending:
            out[i] = await _make(cluster, changes[i])

    await asyncio.gather(*(worker() for _ in range(min(MAX_IN_FLIGHT, len(changes)))))
    return out
