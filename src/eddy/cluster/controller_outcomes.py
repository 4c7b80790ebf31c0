"""Per-partition answers of the controller's batch requests (ElectLeaders, partition
reassignments): the commands planned for some partitions are proposed in one batch, and
each partition is answered with its plan's code, or the refusal of its command when it was
proposed and refused (the state moved on meanwhile). The broker side turns the answer back
into (partition, error, message) rows."""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from typing import Protocol

from eddy.cluster.controller_rpc import PartitionOutcome, TopicOutcome
from eddy.cluster.metadata import ApplyResult, MetadataCommand
from eddy.protocol.errors import ErrorCode

__all__ = ["Planned", "ProposeAll", "Rows", "outcome_rows", "propose_planned"]

ProposeAll = Callable[[Sequence[MetadataCommand]], Awaitable[list[ApplyResult]]]
Rows = list[tuple[str, list[tuple[int, ErrorCode, str | None]]]]


class Planned(Protocol):
    @property
    def partition(self) -> int: ...
    @property
    def code(self) -> ErrorCode: ...
    @property
    def message(self) -> str | None: ...
    @property
    def command(self) -> MetadataCommand | None: ...


async def propose_planned(propose_all: ProposeAll,
                          planned: Sequence[tuple[str, Sequence[Planned]]]
                          ) -> tuple[tuple[TopicOutcome, ...], list[MetadataCommand]]:
    """Propose every planned command at once; each partition's outcome, and the commands."""
    commands = [o.command for _, outcomes in planned for o in outcomes
                if o.command is not None]
    results = iter(await propose_all(commands) if commands else [])

    def answer(o: Planned) -> PartitionOutcome:
        if o.command is not None:
            result = next(results)
            if not result.ok:
                return PartitionOutcome(o.partition, int(result.code), result.message or None)
        return PartitionOutcome(o.partition, int(o.code), o.message)

    topics = tuple(TopicOutcome(name, tuple(answer(o) for o in outcomes))
                   for name, outcomes in planned)
    return topics, commands


def outcome_rows(outcomes: Sequence[TopicOutcome]) -> Rows:
    """A controller's per-partition answer as rows; an error number Kafka does not define
    (a peer's bytes are not trusted) is UNKNOWN_SERVER_ERROR."""
    out: Rows = []
    for topic in outcomes:
        rows: list[tuple[int, ErrorCode, str | None]] = []
        for p in topic.partitions:
            try:
                code = ErrorCode(p.error_code)
            except ValueError:
                code = ErrorCode.unknown_server_error
            rows.append((p.partition, code, p.message))
        out.append((topic.topic, rows))
    return out
