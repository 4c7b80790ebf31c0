"""``StallClock``: a Raft node's time as its timers see it, blind to the node's own stalls
(issue 28).

A gap of more than ``stall_ms`` between two ticks is this node's own stall (a GC pause,
CPU starvation, a long step on its loop, SIGSTOP): the rest of the cluster ran meanwhile,
and what it sent is still queued here, unread. Blaming that time on the others would start
an election (or step a leader down) before reading the heartbeats that wait. So:

- such a gap counts as ``stall_ms`` only: ``advance`` returns the rest, by which the core
  moves every timeout (election, check-quorum, transfer; not the lease: no leader was
  heard meanwhile, so a node that stalled grants another's votes no later);
- for ``hold_ms`` (a heartbeat interval) after it no timer but the heartbeat fires, so
  what arrived is read first (a live leader's heartbeat comes within that);
- no hold after a tick that itself ended a stall, nor within ``hold_every_ms`` (an
  election timeout) of the last one: a node that keeps stalling still times out, at
  ``stall_ms`` a tick, and its leader's death is still found out.

The first tick measures no gap (a driver may start the clock early on purpose), and a step
back counts as no time.

Why moving the timeouts is safe. A follower's election comes later by the stall, a
matter of liveness only. A leader's check-quorum comes later by as much, which only
decides when a cut-off leader steps down, never what is committed
or read: its followers elect on their own clocks meanwhile (they did not stall), an entry
it takes after resuming commits only with a quorum of its term, which a newer term denies,
and a read-index needs a quorum's answer to a heartbeat sent after the read was asked for
(Eddy serves no read on a leader lease). Its first heartbeats after the stall go out at
once; the answers carry the newer term, and it steps down on them.
"""

from __future__ import annotations


class StallClock:
    def __init__(self, now_ms: int, stall_ms: int, hold_ms: int, hold_every_ms: int) -> None:
        self.now = now_ms
        self.stall_ms = stall_ms
        self.hold_ms = hold_ms
        self.hold_every_ms = hold_every_ms
        self.stalls = 0  # ticks that ended a stall
        self.skipped_ms = 0  # the time those stalls did not count
        self._ticked = False
        self._stalled_last = False
        self._hold_until = now_ms - (1 << 40)

    def advance(self, now_ms: int) -> int:
        """The clock reads ``now_ms``: how much of the time since the last tick the timers
        must not count (0 without a stall)."""
        ticked, self._ticked = self._ticked, True
        if now_ms <= self.now:
            return 0
        gap, self.now = now_ms - self.now, now_ms
        stalled = ticked and gap > self.stall_ms
        skipped = gap - self.stall_ms if stalled else 0
        if stalled:
            self.stalls += 1
            self.skipped_ms += skipped
            if not self._stalled_last and now_ms - self._hold_until >= self.hold_every_ms:
                self._hold_until = now_ms + self.hold_ms
        self._stalled_last = stalled
        return skipped

    @property
    def holding(self) -> bool:
        """Just after a stall: no timer but the heartbeat fires."""
        return self.now < self._hold_until
