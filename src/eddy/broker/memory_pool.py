"""The process-wide budget for request bytes held in memory: Kafka's
`queued.max.request.bytes` (KIP-72). Sans-IO: no clock, no event loop.

A connection reserves bytes before it allocates them and releases them once the request
has been handled. A reservation that does not fit waits in line, first come first served,
and is granted later by a call to its owner's `memory_granted(n)`, the bytes already
charged; meanwhile the owner stops reading from its socket instead of allocating.

Requests grow as their bytes arrive, so connections hold part of a request while they wait
for more memory: if every holder waited, none could finish. To rule that out, the last
`largest` bytes of the pool (one request of `socket.request.max.bytes`) are kept back for
one *finisher* at a time: the connection at the head of the line that needs more than the
rest of the pool holds. Everyone else's unfinished requests together stay within
`capacity - largest`, so the finisher can always complete its request once the completed
requests ahead of it have been handled. It gives the role up (`done`) when its request is
complete or its connection ends; the next in line takes it. A holder that stops sending is
dropped by the listener's read deadline, which releases what it held. Memory a connection
keeps between requests (a buffer reused for its next large request) it keeps or reuses only
while the pool is `calm`, and gives back when it is not, so it never stands in the way.
"""

from __future__ import annotations

import sys
from typing import Protocol


class PoolWaiter(Protocol):
    def memory_granted(self, nbytes: int) -> None:
        """nbytes, asked for earlier, are now reserved for the caller."""


class MemoryPool:
    def __init__(self, capacity: int, largest: int) -> None:
        if not 0 < largest <= capacity:
            raise ValueError(f"a pool of {capacity} bytes cannot hold a request of {largest}")
        self.capacity = capacity
        self.largest = largest
        self._shared = capacity - largest  # what requests other than the finisher's may use
        self.used = 0
        self._line: dict[PoolWaiter, int] = {}  # waiters in arrival order -> bytes they want
        self._finisher: PoolWaiter | None = None
        self._finisher_wants = 0  # > 0 while the finisher waits for memory
        self._granting = False

    @classmethod
    def unbounded(cls) -> MemoryPool:
        """A pool that never says no (`queued.max.request.bytes=-1`)."""
        return cls(sys.maxsize, 1)

    @property
    def waiting(self) -> int:
        """How many owners are waiting for memory."""
        return len(self._line) + (1 if self._finisher_wants else 0)

    def is_finisher(self, owner: PoolWaiter) -> bool:
        return owner is self._finisher

    @property
    def calm(self) -> bool:
        """Nobody waits and the part kept back for a finisher is unused: memory taken
        now without asking (a connection reusing a buffer it holds) keeps the finisher's
        guarantee."""
        return (self.used <= self._shared and self._finisher is None
                and not self._line and not self._finisher_wants)

    def try_reserve(self, nbytes: int) -> bool:
        """Reserve nbytes if the pool is calm and they fit its shared part; never waits."""
        if self.used + nbytes <= self._shared and self.calm:
            self.used += max(0, nbytes)
            return True
        return False

    def reserve(self, owner: PoolWaiter, nbytes: int) -> bool:
        """Reserve nbytes for owner now (True), or queue the request (False): owner's
        `memory_granted(nbytes)` is called once they are reserved. An owner waits for one
        reservation at a time."""
        used = self.used + nbytes
        if used <= self._shared and not self._line and not self._finisher_wants:
            self.used = used  # (the usual case)
            return True
        if nbytes <= 0:
            return True
        assert owner not in self._line, "already waiting"
        if owner is self._finisher:
            assert not self._finisher_wants, "already waiting"
            if self.used + nbytes <= self.capacity:
                self.used += nbytes
                return True
            self._finisher_wants = nbytes
            return False
        if not self._line and not self._finisher_wants:
            if self.used + nbytes <= self._shared:
                self.used += nbytes
                return True
            if self._finisher is None:
                self._finisher = owner
                return self.reserve(owner, nbytes)
        self._line[owner] = nbytes
        return False

    def release(self, nbytes: int) -> None:
        """Give back reserved bytes; waiters that now fit are granted, in order."""
        if nbytes <= 0:
            return
        self.used -= nbytes
        assert self.used >= 0, "released more than was reserved"
        if self._line or self._finisher_wants:
            self._grant()

    def done(self, owner: PoolWaiter) -> None:
        """owner's request is complete or its connection has ended: it leaves the line
        and gives up the finisher role if it had it. What it holds stays reserved until
        released."""
        if owner is self._finisher:
            self._finisher = None
            self._finisher_wants = 0
        elif self._line.pop(owner, None) is None:
            return  # (the usual case: nothing changes)
        self._grant()

    def _grant(self) -> None:
        if self._granting:  # a granted owner released or reserved: the loop below goes on
            return
        self._granting = True
        try:
            while self._grant_one():
                pass
        finally:
            self._granting = False

    def _grant_one(self) -> bool:
        """Grant the next reservation in line if it fits; False when none can go now."""
        finisher = self._finisher
        if finisher is not None and self._finisher_wants:
            nbytes = self._finisher_wants
            if self.used + nbytes > self.capacity:
                return False  # (then nobody else fits the shared part either)
            self._finisher_wants = 0
            self.used += nbytes
            finisher.memory_granted(nbytes)
            return True
        if not self._line:
            return False
        owner, nbytes = next(iter(self._line.items()))
        if self.used + nbytes > self._shared:
            if finisher is not None:
                return False  # nobody overtakes the head of the line
            self._finisher = owner
            if self.used + nbytes > self.capacity:
                del self._line[owner]
                self._finisher_wants = nbytes
                return False
        del self._line[owner]
        self.used += nbytes
        owner.memory_granted(nbytes)
        return True
