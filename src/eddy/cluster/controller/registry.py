"""Broker sessions: which registered brokers the controller considers alive.

Sessions live in the controller's memory only (as in Kafka's KRaft controller): heartbeats
are not written to the Raft log. A session is the broker's current epoch and a deadline; a
heartbeat moves the deadline to ``now + session_timeout``. A broker is alive when it is
registered, its session has not expired, and either the state shows it unfenced or it has
heartbeated (with its current epoch) to this controller: a fenced broker needs a heartbeat
to come back, an unfenced one keeps the grace it was given when this controller started.

Probes (``probe_after_ms`` > 0): a broker silent for ``probe_after_ms`` (a heartbeat or more
late) is due for a probe of its Kafka listener, again every ``probe_every_ms`` while it stays
silent; the driver connects, and a refused connection (nothing listens there: the process
died) moves the broker's leaderships at once (``Controller.on_unreachable``) instead of a
session timeout later. A probe that connects, or times out (a network partition drops
packets), changes nothing.

Stalls: sessions count the controller's running time, not the wall clock's. When the
controller was not run for a while (its process stalled), ``pause`` moves every live
session's deadline (and probe times) on by that gap, so no broker is fenced for time during
which the controller could not hear it; brokers heartbeat again first. The ``local`` broker
(the one in the controller's own process) never expires: its silence can only be a stall of
that process.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from eddy.metadata.records import BrokerRecord
from eddy.metadata.state import MetadataState

__all__ = ["BrokerSessions"]


@dataclass(slots=True)
class _Session:
    epoch: int
    deadline_ms: int
    heard: bool  # a heartbeat with ``epoch`` reached this controller
    #: the last heartbeat (or when this controller began to watch): probes count from it
    heard_ms: int
    probed_ms: int | None = None


class BrokerSessions:
    def __init__(self, session_timeout_ms: int, probe_after_ms: int = 0,
                 probe_every_ms: int = 100, local: int = -1) -> None:
        self.session_timeout_ms = session_timeout_ms
        self.probe_after_ms = probe_after_ms
        self.probe_every_ms = probe_every_ms
        self.local = local
        self._sessions: dict[int, _Session] = {}

    def start(self, state: MetadataState, now_ms: int, suspects: Iterable[int] = (),
              suspect_grace_ms: int = 0) -> None:
        """This node just became the controller: every registered broker starts a fresh
        session of one timeout (nobody is fenced for silence the old controller saw), except
        ``suspects``, which get ``suspect_grace_ms`` and are due for a probe at once."""
        suspect = set(suspects)
        self._sessions = {}
        for broker in state.all_brokers():
            if broker.node_id in suspect:
                self._sessions[broker.node_id] = _Session(
                    broker.epoch, now_ms + suspect_grace_ms, False,
                    now_ms - self.probe_after_ms)
            else:
                self._sessions[broker.node_id] = _Session(
                    broker.epoch, now_ms + self.session_timeout_ms, False, now_ms)

    def heartbeat(self, node_id: int, epoch: int, now_ms: int) -> None:
        """Renew ``node_id``'s session (the caller checked it is registered with ``epoch``)."""
        deadline = now_ms + self.session_timeout_ms
        current = self._sessions.get(node_id)
        if current is not None and current.epoch == epoch:
            current.deadline_ms = max(current.deadline_ms, deadline)
            current.heard = True
            current.heard_ms = now_ms
            current.probed_ms = None
        else:
            self._sessions[node_id] = _Session(epoch, deadline, True, now_ms)

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
                session = _Session(broker.epoch, now_ms + self.session_timeout_ms, False,
                                   now_ms)
                self._sessions[broker.node_id] = session
            if now_ms >= session.deadline_ms and broker.node_id != self.local:
                continue
            if session.heard or not broker.fenced:
                live.append(broker.node_id)
        return frozenset(live)

    def next_expiry(self, now_ms: int) -> int | None:
        """The earliest deadline after ``now_ms`` (a driver may tick then; a session that
        ended already, such as a dead broker's, wakes nobody again)."""
        return min((s.deadline_ms for n, s in self._sessions.items()
                    if s.deadline_ms > now_ms and n != self.local), default=None)

    def pause(self, since_ms: int, gap_ms: int) -> None:
        """The controller did not run from ``since_ms`` for ``gap_ms``: the sessions alive
        at ``since_ms`` get that time back (deadlines and probe times move on by it)."""
        for session in self._sessions.values():
            if session.deadline_ms > since_ms:
                session.deadline_ms += gap_ms
                session.heard_ms += gap_ms
                if session.probed_ms is not None:
                    session.probed_ms += gap_ms

    def _probe_due_ms(self, session: _Session) -> int:
        due = session.heard_ms + self.probe_after_ms
        if session.probed_ms is not None:
            due = max(due, session.probed_ms + self.probe_every_ms)
        return due

    def _probe_candidates(self, state: MetadataState) -> list[tuple[BrokerRecord, _Session]]:
        if self.probe_after_ms <= 0:
            return []
        out = []
        for broker in state.all_brokers():
            session = self._sessions.get(broker.node_id)
            if not broker.fenced and session is not None and session.epoch == broker.epoch \
                    and broker.node_id != self.local:
                out.append((broker, session))
        return out

    def to_probe(self, state: MetadataState, now_ms: int) -> list[BrokerRecord]:
        """The unfenced brokers due for a probe at ``now_ms`` (each is then not due again
        for ``probe_every_ms``)."""
        out: list[BrokerRecord] = []
        for broker, session in self._probe_candidates(state):
            if session.deadline_ms > now_ms >= self._probe_due_ms(session):
                session.probed_ms = now_ms
                out.append(broker)
        return out

    def next_probe(self, state: MetadataState, now_ms: int) -> int | None:
        """When the next probe falls due (None: probes off, or none before a deadline); a
        probe overdue at ``now_ms`` counts as due at ``now_ms``."""
        return min((max(due, now_ms) for _, s in self._probe_candidates(state)
                    if (due := self._probe_due_ms(s)) < s.deadline_ms
                    and s.deadline_ms > now_ms), default=None)

    def hold(self, node_id: int, epoch: int, until_ms: int) -> None:
        """Keep ``node_id``'s session in ``epoch`` (when current) until at least
        ``until_ms``."""
        session = self._sessions.get(node_id)
        if session is not None and session.epoch == epoch:
            session.deadline_ms = max(session.deadline_ms, until_ms)
