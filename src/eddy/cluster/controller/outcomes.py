"""Per-partition answers of the controller's batch requests (ElectLeaders, partition
reassignments): the commands planned for some partitions are proposed in one batch, and
each partition is answered with its plan's code, or the refusal of its command when it was
proposed and refused (the state moved on meanwhile). The broker side turns the answer back
into (partition, error, message) rows.

As Kafka's controller answers (``ApiError.message()``): a partition without an error has a
null message, one with an error always has a message (Kafka's default text for the code when
nothing more is known), and every partition asked is answered."""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from typing import Protocol

from eddy.cluster.controller.elections import (
    ELIGIBLE_MESSAGE,
    NOT_NEEDED_MESSAGE,
    PREFERRED_MESSAGE,
)
from eddy.cluster.controller.rpc import PartitionOutcome, TopicOutcome
from eddy.metadata import ApplyResult, MetadataCommand
from eddy.protocol.errors import ErrorCode

__all__ = [
    "Planned",
    "ProposeAll",
    "Rows",
    "answer_every_partition",
    "error_message",
    "outcome_rows",
    "propose_planned",
]

ProposeAll = Callable[[Sequence[MetadataCommand]], Awaitable[list[ApplyResult]]]
Rows = list[tuple[str, list[tuple[int, ErrorCode, str | None]]]]

#: Apache Kafka's default messages (``Errors.X.message()``) of the codes these answers use
DEFAULT_MESSAGES: dict[ErrorCode, str] = {
    ErrorCode.election_not_needed: NOT_NEEDED_MESSAGE,
    ErrorCode.preferred_leader_not_available: PREFERRED_MESSAGE,
    ErrorCode.eligible_leaders_not_available: ELIGIBLE_MESSAGE,
    ErrorCode.unknown_topic_or_partition: "This server does not host this topic-partition.",
    ErrorCode.not_controller: "This is not the correct controller for this cluster.",
    ErrorCode.request_timed_out: "The request timed out.",
    ErrorCode.cluster_authorization_failed: "Cluster authorization failed.",
    ErrorCode.invalid_request: (
        "This most likely occurs because of a request being malformed by the client "
        "library or the message was sent to an incompatible broker. See the broker logs "
        "for more details."),
    ErrorCode.invalid_replica_assignment: "Replica assignment is invalid.",
    ErrorCode.no_reassignment_in_progress: "No partition reassignment is in progress.",
    ErrorCode.invalid_update_version: "The given update version was invalid.",
    ErrorCode.unknown_server_error: (
        "The server experienced an unexpected error when processing the request."),
}


def error_message(code: ErrorCode, message: str | None) -> str | None:
    """The message a partition's answer carries: None without an error, else ``message``,
    or Kafka's default text for ``code`` when it is missing or blank."""
    if code == ErrorCode.none:
        return None
    if message and message.strip():
        return message
    return DEFAULT_MESSAGES.get(code) or f"{code.name.replace('_', ' ').capitalize()}."


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
                return PartitionOutcome(o.partition, int(result.code),
                                        error_message(result.code, result.message))
        return PartitionOutcome(o.partition, int(o.code), error_message(o.code, o.message))

    topics = tuple(TopicOutcome(name, tuple(answer(o) for o in outcomes))
                   for name, outcomes in planned)
    return topics, commands


def outcome_rows(outcomes: Sequence[TopicOutcome]) -> Rows:
    """A controller's per-partition answer as rows; an error number Kafka does not define
    (a peer's bytes are not trusted) is UNKNOWN_SERVER_ERROR, an error without a message
    gets Kafka's default one, a success none."""
    out: Rows = []
    for topic in outcomes:
        rows: list[tuple[int, ErrorCode, str | None]] = []
        for p in topic.partitions:
            try:
                code = ErrorCode(p.error_code)
            except ValueError:
                code = ErrorCode.unknown_server_error
            rows.append((p.partition, code, error_message(code, p.message)))
        out.append((topic.topic, rows))
    return out


def answer_every_partition(asked: Sequence[tuple[str, Sequence[int]]] | None, rows: Rows
                           ) -> Rows:
    """``rows`` with a row for each partition ``asked`` (None: every partition, nothing to
    check) that the controller's answer left out: UNKNOWN_SERVER_ERROR naming it, rather
    than a client waiting for a result that never comes."""
    if asked is None:
        return rows
    out: Rows = [(topic, list(parts)) for topic, parts in rows]
    seen = {(topic, p) for topic, parts in out for p, _, _ in parts}
    where = {topic: parts for topic, parts in reversed(out)}  # a topic's first entry
    for topic, indexes in asked:
        for p in indexes:
            if (topic, p) in seen:
                continue
            seen.add((topic, p))
            row = (p, ErrorCode.unknown_server_error,
                   f"the controller gave no answer for {topic}-{p}")
            parts = where.get(topic)
            if parts is None:
                parts = where[topic] = []
                out.append((topic, parts))
            parts.append(row)
    return out
