"""AlterPartitionReassignments on the controller, and completing reassignments (pure
functions of the state; see ``eddy.metadata.reassignments`` for the model).

Each partition asked is checked against the state as the command would be when applied
(so a refusal is answered at once and never reaches the Raft log); the ones that pass
become ``AlterReassignment`` commands. ``completions`` gives the ``CompleteReassignment`` of
every reassignment whose target replicas are all in the ISR.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from eddy.metadata.commands import AlterReassignment, CompleteReassignment
from eddy.metadata.reassignments import plan_alter, ready
from eddy.metadata.result import Rejected
from eddy.metadata.state import MetadataState
from eddy.protocol.errors import ErrorCode

__all__ = ["ReassignOutcome", "completions", "plan_reassignments"]

#: (topic, [(partition, target replicas or None to cancel)])
Asked = Sequence[tuple[str, Sequence[tuple[int, tuple[int, ...] | None]]]]


@dataclass(frozen=True, slots=True)
class ReassignOutcome:
    """One partition's answer: ``command`` to propose (None: refused, or nothing to do)."""

    partition: int
    code: ErrorCode
    message: str | None
    command: AlterReassignment | None


def plan_reassignments(state: MetadataState, asked: Asked
                       ) -> list[tuple[str, list[ReassignOutcome]]]:
    """Each partition's outcome, in the order asked. A partition named twice in one
    request is INVALID_REQUEST (both times), as Kafka's request validation answers."""
    counts: dict[tuple[str, int], int] = {}
    for topic, parts in asked:
        for partition, _ in parts:
            counts[(topic, partition)] = counts.get((topic, partition), 0) + 1
    out: list[tuple[str, list[ReassignOutcome]]] = []
    for topic, parts in asked:
        rows: list[ReassignOutcome] = []
        for partition, target in parts:
            if counts[(topic, partition)] > 1:
                rows.append(ReassignOutcome(partition, ErrorCode.invalid_request,
                                            f"{topic}-{partition} is named more than once",
                                            None))
                continue
            try:
                plan = plan_alter(state, topic, partition, target)
            except Rejected as exc:
                rows.append(ReassignOutcome(partition, exc.code, exc.message, None))
                continue
            command = None if plan is None else AlterReassignment(topic, partition, target)
            rows.append(ReassignOutcome(partition, ErrorCode.none, None, command))
        out.append((topic, rows))
    return out


def completions(state: MetadataState) -> list[CompleteReassignment]:
    """The reassignments that can complete: every target replica is in the ISR."""
    out: list[CompleteReassignment] = []
    for r in state.reassignment_list():
        part = state.partition(r.topic, r.partition)
        if part is not None and ready(part, r):
            out.append(CompleteReassignment(r.topic, r.partition, r.target))
    return out
