"""``LeaderState``: what the leader of one partition knows about its followers (sans-IO).

Kafka's rules (seed 001, KIP-16, KIP-497's AlterPartition):

- Each follower fetches with the offset it wants next: its log end offset (LEO). With write
  caching off a follower fsyncs what it appended before it fetches again, so the offset it
  reports is durable on it.
- The high watermark is the minimum LEO over the ISR, the leader's own included; it never
  moves back while this node leads. It counts the *maximal* ISR: the committed one plus
  members whose addition is proposed and not yet committed, so a follower joining the ISR
  has every record below the HWM once it is in.
- A follower is caught up when it fetched at the leader's LEO of that moment, or at least
  the LEO the leader had at its previous fetch (then it was caught up at that previous
  fetch's time). An ISR follower not caught up for ``replica.lag.time.max.ms`` leaves the
  ISR; with ``replica.lag.max.messages`` > 0 also one that far behind (off by default, as
  Kafka since KIP-16: a burst of produce makes every follower flap out and in).
- A replica outside the ISR rejoins when its LEO reaches the HWM and the start of the
  leader's epoch (it holds everything this leader may have acknowledged).
- ISR changes go to the controller (one in flight per partition); the committed state comes
  back through the metadata log (``update``).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass

__all__ = ["FollowerProgress", "LeaderState"]

UNKNOWN = -1


@dataclass(slots=True)
class FollowerProgress:
    leo: int = UNKNOWN
    last_fetch_ms: int = UNKNOWN
    leader_leo_at_last_fetch: int = UNKNOWN
    last_caught_up_ms: int = UNKNOWN
    incarnation: int = UNKNOWN  # the follower's broker epoch when this was recorded


class LeaderState:
    def __init__(self, me: int, replicas: tuple[int, ...], isr: tuple[int, ...],
                 leader_epoch: int, partition_epoch: int, epoch_start_offset: int,
                 now_ms: int, incarnations: Mapping[int, int] | None = None) -> None:
        self.me = me
        self.leader_epoch = leader_epoch
        self.epoch_start_offset = epoch_start_offset
        self.followers: dict[int, FollowerProgress] = {}
        self.replicas: tuple[int, ...] = ()
        self.isr: tuple[int, ...] = ()
        self.partition_epoch = partition_epoch
        #: the ISR proposed to the controller and not yet seen committed (None: nothing)
        self.pending: tuple[int, ...] | None = None
        self.pending_since_ms = UNKNOWN
        self.update(replicas, isr, partition_epoch, now_ms, incarnations)

    def update(self, replicas: tuple[int, ...], isr: tuple[int, ...], partition_epoch: int,
               now_ms: int, incarnations: Mapping[int, int] | None = None) -> None:
        """The partition's committed assignment and ISR (a new partition epoch clears the
        proposal in flight: it was committed, or something else was). ``incarnations``:
        each replica's broker epoch; a follower that registered again (restarted) starts
        over, unheard of (KIP-903: what its previous process fetched says nothing of what
        this one has)."""
        for node in replicas:
            if node == self.me:
                continue
            incarnation = (incarnations or {}).get(node, UNKNOWN)
            known = self.followers.get(node)
            if known is None or (incarnation != UNKNOWN and known.incarnation != UNKNOWN
                                 and incarnation != known.incarnation):
                # a new follower counts as caught up now: it gets a full lag window
                self.followers[node] = FollowerProgress(last_caught_up_ms=now_ms,
                                                        incarnation=incarnation)
            elif known.incarnation == UNKNOWN:
                known.incarnation = incarnation
        for node in list(self.followers):
            if node not in replicas:
                del self.followers[node]
        if partition_epoch != self.partition_epoch or isr != self.isr:
            self.pending = None
        self.replicas, self.isr, self.partition_epoch = replicas, isr, partition_epoch

    def proposal_failed(self) -> None:
        self.pending = None

    @property
    def maximal_isr(self) -> tuple[int, ...]:
        if self.pending is None:
            return self.isr
        return self.isr + tuple(n for n in self.pending if n not in self.isr)

    def follower_fetched(self, node: int, fetch_offset: int, leader_leo: int,
                         now_ms: int) -> bool:
        """Record a follower's fetch at ``fetch_offset``; False when ``node`` is not a
        follower of this partition (nothing recorded)."""
        progress = self.followers.get(node)
        if progress is None:
            return False
        if fetch_offset >= leader_leo:
            progress.last_caught_up_ms = now_ms
        elif progress.leader_leo_at_last_fetch != UNKNOWN \
                and fetch_offset >= progress.leader_leo_at_last_fetch:
            progress.last_caught_up_ms = max(progress.last_caught_up_ms,
                                             progress.last_fetch_ms)
        progress.leo = fetch_offset
        progress.last_fetch_ms = now_ms
        progress.leader_leo_at_last_fetch = leader_leo
        return True

    def high_watermark(self, leader_leo: int, current: int) -> int:
        """The HWM the ISR allows (``leader_leo`` is this node's own), never below
        ``current``."""
        low = leader_leo
        for node in self.maximal_isr:
            if node == self.me:
                continue
            progress = self.followers.get(node)
            if progress is None or progress.leo == UNKNOWN:
                return current  # an ISR member not heard from yet holds it
            low = min(low, progress.leo)
        return max(low, current)

    def isr_change(self, now_ms: int, leader_leo: int, hwm: int, lag_max_ms: int,
                   lag_max_messages: int, can_join: Callable[[int], bool] = lambda _: True
                   ) -> tuple[int, ...] | None:
        """The ISR to propose now (None: keep it, or a proposal is in flight). Only
        replicas ``can_join`` accepts (live brokers: KIP-841, a fenced one may not join)
        are added."""
        if self.pending is not None:
            return None
        out = [n for n in self.isr if n == self.me or not self._lagging(
            n, now_ms, leader_leo, lag_max_ms, lag_max_messages)]
        if self.me not in out:
            out.insert(0, self.me)
        for node in self.replicas:
            if node in self.isr or node == self.me:
                continue  # (a member leaving now does not rejoin in the same change)
            progress = self.followers.get(node)
            if progress is not None and progress.leo != UNKNOWN and can_join(node) \
                    and progress.leo >= hwm and progress.leo >= self.epoch_start_offset:
                out.append(node)
        proposal = tuple(out)
        if set(proposal) == set(self.isr):
            return None
        self.pending = proposal
        self.pending_since_ms = now_ms
        return proposal

    def _lagging(self, node: int, now_ms: int, leader_leo: int, lag_max_ms: int,
                 lag_max_messages: int) -> bool:
        progress = self.followers.get(node)
        if progress is None:
            return True
        if now_ms - progress.last_caught_up_ms > lag_max_ms:
            return True
        return lag_max_messages > 0 and progress.leo != UNKNOWN \
            and leader_leo - progress.leo > lag_max_messages
