"""The fault kinds: each hits the cluster once, heals, waits until every node is back in
every ISR of the round's topic (so the next fault may take any node down). Each opens a
window in its Target: from the fault to the cluster settled again, the span within which
bench.chaos.rounds measures each partition's longest gap in acknowledged writes.

- kill: kill -9 of a partition's leader; restarted once its partitions moved;
- pause: SIGSTOP of a partition's leader for PAUSE_S, then SIGCONT;
- isolate: a partition's leader cut off from both other nodes (iptables) for ISOLATE_S;
  clients still reach it;
- controller: kill -9 of the metadata leader; restarted once another node leads;
- two-down: kill -9 of a partition's leader and one more node (the quorum and every
  ISR lose their majority: unavailable until they are back), restarted after DOWN_S;
- rolling: a rolling restart, SIGTERM one node at a time, each restarted and back in every
  ISR before the next (one window per node);
- txn: kill -9 of a partition's leader while a transactional producer runs too.
"""

from __future__ import annotations

import signal
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from bench.chaos.cluster import IDS, Cluster, wait_for
from bench.chaos.net import NetFaults

PAUSE_S = 5.0
ISOLATE_S = 6.0
DOWN_S = 1.0  # how long a killed node stays down once its leaderships moved
TWO_DOWN_S = 3.0
MOVE_TIMEOUT_S = 60.0  # generous: a fault must recover, however slowly (bench measures)
SETTLE_TIMEOUT_S = 90.0


@dataclass
class Target:
    """What a fault hits: the cluster, the round's topic, and (for isolate) iptables."""

    cluster: Cluster
    topic: str
    partitions: int
    net: NetFaults | None = None
    #: every window opened so far (one left open, end 0, by a fault that did not recover)
    windows: list[Window] = field(default_factory=list)


@dataclass
class Window:
    """One fault: when it began, when the cluster had settled again, which nodes it hit,
    which partitions they led when it began, whether one of them was the controller."""

    kind: str
    start: float
    end: float
    nodes: tuple[int, ...]
    led: tuple[int, ...]
    controller: bool
    notes: dict[str, float] = field(default_factory=dict)


def _leader_of(t: Target, k: int) -> int:
    leader = t.cluster.leader(t.topic, k % t.partitions)
    if leader not in IDS:
        raise AssertionError(f"partition {k % t.partitions} has no leader: "
                             f"{t.cluster.views(t.topic)}")
    return leader


def _led(t: Target, nodes: tuple[int, ...]) -> tuple[int, ...]:
    return tuple(sorted(p for p, (lead, _) in t.cluster.describe(t.topic).items()
                        if lead in nodes))


def _window(t: Target, kind: str, nodes: tuple[int, ...]) -> Window:
    """A window opened now, before the fault."""
    led, controller = _led(t, nodes), t.cluster.controller() in nodes
    w = Window(kind, time.monotonic(), 0.0, nodes, led, controller)
    t.windows.append(w)
    return w


def _moved(t: Target, gone: tuple[int, ...]) -> float:
    """Wait until every partition has a leader outside `gone` (as a survivor sees it)."""
    via = next(n for n in t.cluster.live() if n.node_id not in gone)
    return wait_for(lambda: all(t.cluster.leader(t.topic, p, via) not in (-1, *gone)
                                for p in range(t.partitions)), MOVE_TIMEOUT_S,
                    f"the partitions of node(s) {gone} moved",
                    detail=lambda: t.cluster.views(t.topic))


def _settle(t: Target, w: Window) -> None:
    w.notes["isr_full_s"] = t.cluster.wait_settled(t.topic, SETTLE_TIMEOUT_S)
    w.end = time.monotonic()


def kill(t: Target, k: int, kind: str = "kill") -> None:
    victim = _leader_of(t, k)
    w = _window(t, kind, (victim,))
    t.cluster.nodes[victim].kill()
    w.notes["moved_s"] = _moved(t, (victim,))
    time.sleep(DOWN_S)
    t.cluster.nodes[victim].start()
    _settle(t, w)


def pause(t: Target, k: int) -> None:
    victim = _leader_of(t, k)
    w = _window(t, "pause", (victim,))
    node = t.cluster.nodes[victim]
    node.signal(signal.SIGSTOP)
    try:
        time.sleep(PAUSE_S)
    finally:
        node.signal(signal.SIGCONT)
    _settle(t, w)


def isolate(t: Target, k: int) -> None:
    if t.net is None:
        raise RuntimeError("isolate needs iptables (a NetFaults)")
    victim = _leader_of(t, k)
    w = _window(t, "isolate", (victim,))
    t.net.isolate(victim)
    try:
        time.sleep(ISOLATE_S)
    finally:
        t.net.heal()
    _settle(t, w)


def controller(t: Target, k: int) -> None:
    del k
    victim = t.cluster.controller()
    if victim not in IDS:
        raise AssertionError("no node names a controller")
    w = _window(t, "controller", (victim,))
    t.cluster.nodes[victim].kill()
    w.notes["controller_s"] = wait_for(lambda: t.cluster.controller() not in (-1, victim),
                                       MOVE_TIMEOUT_S, f"a controller other than {victim}")
    w.notes["moved_s"] = _moved(t, (victim,))
    time.sleep(DOWN_S)
    t.cluster.nodes[victim].start()
    _settle(t, w)


def two_down(t: Target, k: int) -> None:
    first = _leader_of(t, k)
    second = next(i for i in IDS if i != first and (i - first) % len(IDS) == 1)
    w = _window(t, "two-down", (first, second))
    for i in (first, second):
        t.cluster.nodes[i].kill()
    time.sleep(TWO_DOWN_S)
    for i in (first, second):
        t.cluster.nodes[i].start()
    _settle(t, w)


def rolling(t: Target, k: int) -> None:
    """SIGTERM each node in turn (the controller last, as operators do), restart it, wait
    until it is back in every ISR."""
    del k
    ctl = t.cluster.controller()
    order = sorted(IDS, key=lambda i: (i == ctl, i))
    for i in order:
        w = _window(t, "rolling", (i,))
        node = t.cluster.nodes[i]
        w.notes["exit_s"] = node.term()
        node.start()
        w.notes["back_s"] = time.monotonic() - w.start
        _settle(t, w)


def txn(t: Target, k: int) -> None:
    kill(t, k, "txn")


@dataclass(frozen=True)
class Kind:
    run: Callable[[Target, int], None]
    needs_net: bool = False
    transactional: bool = False


KINDS: dict[str, Kind] = {
    "kill": Kind(kill),
    "pause": Kind(pause),
    "isolate": Kind(isolate, needs_net=True),
    "controller": Kind(controller),
    "two-down": Kind(two_down),
    "rolling": Kind(rolling),
    "txn": Kind(txn, transactional=True),
}
