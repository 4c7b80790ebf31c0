"""The controller's background work (seed 004's BrokerController): a schedule of named
tasks with intervals, in virtual time, and the storage GC of deleted topics' data."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from eddy.cluster.controller.config import ControllerError
from eddy.metadata.state import MetadataState
from eddy.protocol.errors import ErrorCode

__all__ = ["MAX_HOSTED_TOPICS", "StorageGc", "TaskSchedule"]

#: the most topic ids one node's hosting report may name (bounds the controller's memory)
MAX_HOSTED_TOPICS = 100_000
TOPIC_ID_BYTES = 16


@dataclass(slots=True)
class _Task:
    name: str
    interval_ms: int
    next_ms: int


class TaskSchedule:
    """Named tasks, each due every ``interval_ms``. ``due(now)`` names the tasks due at
    ``now`` in the order they were added and moves each to its next run; runs missed while
    time jumped collapse into one (a task never runs twice for one ``due`` call)."""

    def __init__(self) -> None:
        self._tasks: dict[str, _Task] = {}

    def add(self, name: str, interval_ms: int, now_ms: int) -> None:
        """First due at ``now_ms + interval_ms``. A name may be added once."""
        if interval_ms < 1:
            raise ValueError(f"task {name!r}: interval_ms must be at least 1, got {interval_ms}")
        if name in self._tasks:
            raise ValueError(f"task {name!r} is already scheduled")
        self._tasks[name] = _Task(name, interval_ms, now_ms + interval_ms)

    def remove(self, name: str) -> None:
        self._tasks.pop(name, None)

    def names(self) -> list[str]:
        return list(self._tasks)

    def restart(self, now_ms: int) -> None:
        """Every task next due one interval after ``now_ms`` (on becoming controller)."""
        for task in self._tasks.values():
            task.next_ms = now_ms + task.interval_ms

    def due_by(self, name: str, at_ms: int) -> None:
        """Make ``name`` due at ``at_ms`` at the latest (no task of that name: nothing)."""
        task = self._tasks.get(name)
        if task is not None:
            task.next_ms = min(task.next_ms, at_ms)

    def run_now(self, name: str, now_ms: int) -> None:
        """Make ``name`` due at ``now_ms`` (its next ``due`` call names it)."""
        self._tasks[name].next_ms = now_ms

    def due(self, now_ms: int) -> list[str]:
        out: list[str] = []
        for task in self._tasks.values():
            if now_ms >= task.next_ms:
                out.append(task.name)
                task.next_ms += task.interval_ms
                if task.next_ms <= now_ms:
                    task.next_ms = now_ms + task.interval_ms
        return out

    def next_due(self) -> int | None:
        """When the earliest task is due (a driver may sleep until then)."""
        return min((t.next_ms for t in self._tasks.values()), default=None)


class StorageGc:
    """Topics deleted -> every node removes their data. Nodes report the topic ids they
    host; ``plan`` names, per node, those the state no longer knows, once they have been
    unknown for ``grace_ms`` (a node whose applied metadata is ahead of this controller's
    may host a topic the controller has not applied yet). Orders repeat every round until
    the node stops reporting the topic (deleting is idempotent)."""

    def __init__(self, grace_ms: int) -> None:
        self.grace_ms = grace_ms
        self._hosted: dict[int, frozenset[bytes]] = {}
        self._unknown_since: dict[tuple[int, bytes], int] = {}

    def report(self, state: MetadataState, node_id: int, topic_ids: Iterable[bytes]) -> None:
        """What ``node_id`` hosts now (replaces its last report). Raises ``ControllerError``
        for an unregistered node, a topic id that is not 16 bytes, or too many ids."""
        if node_id not in state.brokers:
            raise ControllerError(ErrorCode.broker_id_not_registered,
                                  f"node_id: broker {node_id} is not registered")
        ids: set[bytes] = set()
        for i, topic_id in enumerate(topic_ids):
            if len(ids) >= MAX_HOSTED_TOPICS:
                raise ControllerError(ErrorCode.invalid_request,
                                      f"topic_ids: more than {MAX_HOSTED_TOPICS}")
            if not isinstance(topic_id, bytes) or len(topic_id) != TOPIC_ID_BYTES:
                raise ControllerError(ErrorCode.invalid_request,
                                      f"topic_ids[{i}]: not {TOPIC_ID_BYTES} bytes")
            ids.add(topic_id)
        self._hosted[node_id] = frozenset(ids)

    def plan(self, state: MetadataState, now_ms: int) -> dict[int, list[bytes]]:
        """Per node, the topic ids whose data it should delete now (sorted)."""
        for node_id in [n for n in self._hosted if n not in state.brokers]:
            del self._hosted[node_id]
        seen: set[tuple[int, bytes]] = set()
        out: dict[int, list[bytes]] = {}
        for node_id in sorted(self._hosted):
            for topic_id in sorted(self._hosted[node_id]):
                if topic_id in state.topic_ids:
                    continue
                key = (node_id, topic_id)
                seen.add(key)
                since = self._unknown_since.setdefault(key, now_ms)
                if now_ms - since >= self.grace_ms:
                    out.setdefault(node_id, []).append(topic_id)
        for key in [k for k in self._unknown_since if k not in seen]:
            del self._unknown_since[key]
        return out
