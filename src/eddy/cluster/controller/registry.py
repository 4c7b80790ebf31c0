"""Broker sessions: which registered brokers the controller considers alive.

Sessions live in the controller's memory only (as in Kafka's KRaft controller): heartbeats
are not written to the Raft log. A session is the broker's current epoch and a deadline; a
heartbeat moves the deadline to ``now + session_timeout``. A broker is alive when it is
registered, its session has not expired, and either the state shows it unfenced or it has
heartbeated (with its current epoch) to this controller: a fenced broker needs a heartbeat
to come back, an unfenced one keeps the grace it was given when this controller started.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from eddy.cluster.metadata.state import MetadataState

__all__ = ["BrokerSessions"]


@dataclass(slots=True)
class _Session:
    epoch: int
    deadline_ms: int
    heard: bool  # a heartbeat with ``epoch`` reached this controller


class BrokerSessions:
    def __init__(self, session_timeout_ms: int) -> None:
        self.session_timeout_ms = session_timeout_ms
        self._sessions: dict[int, _Session] = {}

    def start(self, state: MetadataState, now_ms: int, suspects: Iterable[int] = (),
              suspect_grace_ms: int = 0) -> None:
        """This node just became the controller: every registered broker starts a fresh
        session of one timeout (nobody is fenced for silence the old controller saw), except
        ``suspects``, which get ``suspect_grace_ms``."""
        suspect = set(suspects)
        self._sessions = {}
        for broker in state.all_brokers():
            grace = suspect_grace_ms if broker.node_id in suspect else self.session_timeout_ms
            self._sessions[broker.node_id] = _Session(broker.epoch, now_ms + grace, False)

    def heartbeat(self, node_id: int, epoch: int, now_ms: int) -> None:
        """Renew ``node_id``'s session (the caller checked it is registered with ``epoch``)."""
        deadline = now_ms + self.session_timeout_ms
        current = self._sessions.get(node_id)
        if current is not None and current.epoch == epoch:
            current.deadline_ms = max(current.deadline_ms, deadline)
            current.heard = True
        else:
            self._sessions[node_id] = _Session(epoch, deadline, True)

    def heard(self, node_id: int, epoch: int) -> bool:
        session = self._sessions.get(node_id)
        return session is not None and session.epoch == epoch and session.heard

    def deadline(self, node_id: int) -> int | None:
        session = self._sessions.get(node_id)
        return None if session is None else session.deadline_ms

    def live_set(self, state: MetadataState, now_ms: int) -> frozenset[int]:
        """The brokers the controller wants unfenced now. Brokers the state gained since
        (registered while this controller runs, or restored) get a session on first sight;
        brokers it lost are forgotten, so memory follows the state's broker count."""
        live: list[int] = []
        for node_id in [n for n in self._sessions if n not in state.brokers]:
            del self._sessions[node_id]
        for broker in state.all_brokers():
            session = self._sessions.get(broker.node_id)
            if session is None or session.epoch != broker.epoch:
                if session is not None and session.epoch > broker.epoch:
                    # heard from an epoch the state has not registered yet: not alive yet
                    continue
                session = _Session(broker.epoch, now_ms + self.session_timeout_ms, False)
                self._sessions[broker.node_id] = session
            if now_ms >= session.deadline_ms:
                continue
            if session.heard or not broker.fenced:
                live.append(broker.node_id)
        return frozenset(live)

    def next_expiry(self) -> int | None:
        """The earliest deadline (a driver may tick then)."""
        return min((s.deadline_ms for s in self._sessions.values()), default=None)
