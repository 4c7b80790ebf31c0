"""The metadata-level invariants of the whole-cluster simulation (the Raft ones are
``SafetyChecker``'s):

- every node applies the same result for the same index, and nodes at the same applied
  index hold the same state (compared by snapshot digest): replicas are prefixes of each
  other;
- at most one controller is activated per term, and an active controller's node leads
  that term;
- in every node's state each partition's ISR is non-empty, distinct and within its
  replicas, and its leader (unless offline) is in the ISR and a registered broker;
- under the active controller, no online partition keeps a fenced broker as its leader
  or in its ISR for longer than ``fence_grace_ms`` (a fence and the elections it causes
  are separate log entries, so the state shows that in between: a transient, not a state
  it may stay in);
- after the faults stop and the cluster heals (``final``): one controller is active,
  every broker is registered and unfenced, every partition has a live leader, every node
  holds the same state, every acknowledged topic exists.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping

from eddy.cluster.raft.sim.check import SafetyViolation
from eddy.metadata import NO_LEADER, ApplyResult, MetadataState

__all__ = ["MetaChecker", "SafetyViolation", "structure_errors"]


def _digest(state: MetadataState) -> bytes:
    return hashlib.blake2b(state.snapshot(), digest_size=16).digest()


def structure_errors(state: MetadataState) -> list[str]:
    """Partitions whose leader, ISR or replicas are inconsistent in ``state``."""
    errors: list[str] = []
    for name in state.topic_names():
        topic = state.topics[name]
        for index, part in enumerate(topic.partitions):
            where = f"{name}-{index} {part}"
            if not part.isr or len(set(part.isr)) != len(part.isr):
                errors.append(f"{where}: empty or repeating ISR")
            if len(set(part.replicas)) != len(part.replicas):
                errors.append(f"{where}: a replica twice")
            if not set(part.isr) <= set(part.replicas):
                errors.append(f"{where}: an ISR member is not a replica")
            if part.leader != NO_LEADER and (part.leader not in part.isr
                                             or part.leader not in state.brokers):
                errors.append(f"{where}: the leader is not an ISR member or not registered")
    return errors


def fence_errors(state: MetadataState) -> dict[tuple[str, int], str]:
    """Online partitions led by, or with an ISR member that is, a fenced broker."""
    out: dict[tuple[str, int], str] = {}
    for name in state.topic_names():
        for index, part in enumerate(state.topics[name].partitions):
            if part.leader == NO_LEADER:
                continue
            bad = [n for n in part.isr if not state.is_live(n)]
            if bad:
                out[(name, index)] = f"{name}-{index} {part}: fenced ISR members {bad}"
    return out


class MetaChecker:
    def __init__(self, fence_grace_ms: int) -> None:
        self.fence_grace_ms = fence_grace_ms
        self.results: dict[int, tuple[int, int | None]] = {}  # index -> (code, value)
        self.digests: dict[int, bytes] = {}  # applied index -> state digest
        self.kinds: dict[int, str] = {}  # index -> the command's kind
        self.controllers: dict[int, int] = {}  # term -> the node activated in it
        self._fenced_since: dict[tuple[int, str, int], int] = {}

    @property
    def commands_ok(self) -> int:
        return sum(1 for code, _ in self.results.values() if code == 0)

    def applied_kinds(self) -> dict[str, int]:
        """How many distinct entries of each command kind were applied without rejection."""
        out: dict[str, int] = {}
        for index, kind in self.kinds.items():
            if self.results[index][0] == 0:
                out[kind] = out.get(kind, 0) + 1
        return out

    def on_result(self, node: int, index: int, result: ApplyResult, kind: str) -> None:
        self.kinds.setdefault(index, kind)
        rec = (int(result.code), result.value)
        old = self.results.setdefault(index, rec)
        if old != rec:
            raise SafetyViolation(f"metadata determinism: node {node} applied index {index} "
                                  f"with result {rec}, another node with {old}")

    def on_state(self, node: int, index: int, state: MetadataState) -> None:
        """Node ``node``'s state after applying up to ``index``."""
        digest = _digest(state)
        old = self.digests.setdefault(index, digest)
        if old != digest:
            raise SafetyViolation(f"metadata prefix: node {node} holds another state than an "
                                  f"earlier node did at applied index {index}")
        errors = structure_errors(state)
        if errors:
            raise SafetyViolation(f"metadata structure on node {node} at index {index}: "
                                  + "; ".join(errors[:3]))

    def controller_started(self, node: int, term: int) -> None:
        other = self.controllers.setdefault(term, node)
        if other != node:
            raise SafetyViolation(f"controller safety: nodes {other} and {node} both became "
                                  f"the controller in term {term}")

    def check_fencing(self, now: int, term: int, state: MetadataState) -> None:
        """Called on the active controller's state: fenced brokers must leave online
        partitions' leadership and ISR within the grace."""
        bad = fence_errors(state)
        for key in [k for k in self._fenced_since if (k[1], k[2]) not in bad or k[0] != term]:
            del self._fenced_since[key]
        for (name, index), text in bad.items():
            since = self._fenced_since.setdefault((term, name, index), now)
            if now - since > self.fence_grace_ms:
                raise SafetyViolation(f"fencing: under the controller of term {term}, "
                                      f"{text} for {now - since} ms")

    def final(self, states: Mapping[int, MetadataState], applied: Mapping[int, int],
              active: list[int], leader: int, agent_epochs: Mapping[int, int],
              acked_topics: Mapping[str, bytes]) -> str | None:
        """The settled cluster; returns the first failure found."""
        if active != [leader]:
            return f"liveness: active controllers {active}, metadata leader {leader}"
        if len(set(applied.values())) != 1:
            return f"liveness: nodes applied {dict(applied)}"
        snaps = {n: s.snapshot() for n, s in states.items()}
        if len(set(snaps.values())) != 1:
            return "state-machine safety: the nodes' metadata states differ at one index"
        state = states[leader]
        for node, epoch in sorted(agent_epochs.items()):
            broker = state.broker(node)
            if broker is None or broker.fenced or broker.epoch != epoch:
                return (f"liveness: broker {node} (epoch {epoch}) is {broker} after the "
                        "cluster healed")
        for name in state.topic_names():
            for index, part in enumerate(state.topics[name].partitions):
                if part.leader == NO_LEADER or not state.is_live(part.leader):
                    return f"liveness: {name}-{index} has no live leader: {part}"
        errors = list(fence_errors(state).values()) + structure_errors(state)
        if errors:
            return "settled state: " + "; ".join(errors[:3])
        for name, topic_id in sorted(acked_topics.items()):
            record = state.topic(name)
            if record is None or record.topic_id != topic_id:
                return f"durability: topic {name} was acknowledged but is {record}"
        if not state.cluster_id:
            return "liveness: no cluster id was set"
        return None
