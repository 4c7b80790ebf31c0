"""Failed logins per source address: a token bucket each, so one address guessing
passwords is slowed down without touching anyone else. Bounded memory."""

from __future__ import annotations

__all__ = ["FailureLimiter"]

#: addresses tracked at most; past it, the ones whose bucket has refilled are forgotten
MAX_TRACKED = 65536


class FailureLimiter:
    """``per_minute`` failures allowed per address; each refills in 60/per_minute s."""

    def __init__(self, per_minute: int) -> None:
        self.capacity = float(per_minute)
        self.rate = per_minute / 60.0  # tokens per second
        self._buckets: dict[str, tuple[float, float]] = {}  # ip -> (tokens, at)

    def _tokens(self, ip: str, now: float) -> float:
        entry = self._buckets.get(ip)
        if entry is None:
            return self.capacity
        tokens, at = entry
        return min(self.capacity, tokens + (now - at) * self.rate)

    def allowed(self, ip: str, now: float) -> bool:
        """May a login from ``ip`` be checked now (it has failures left)?"""
        return self._tokens(ip, now) >= 1.0

    def failed(self, ip: str, now: float) -> None:
        """A login from ``ip`` failed."""
        self._buckets[ip] = (max(0.0, self._tokens(ip, now) - 1.0), now)
        if len(self._buckets) > MAX_TRACKED:
            self._buckets = {k: v for k, v in self._buckets.items()
                             if self._tokens(k, now) < self.capacity}
            while len(self._buckets) > MAX_TRACKED:  # all of them busy: the oldest go
                del self._buckets[next(iter(self._buckets))]
